//! The set-up check of [`Collectives::new`](crate::Collectives::new).
//!
//! The gallery's kernels only meet if every rank launches the same kernel with the same grid
//! over the same scratch layout: a rank with another `SYMCOMM_ONE_SHOT_MAX` runs a one-shot
//! while its peers run a two-shot, and nothing on the device can tell. So before its first
//! collective step, `Collectives::new` gathers from every rank (one bootstrap all-gather)
//! whether its local set-up succeeded and the knobs that decide launches
//! ([`Tuning::agreed_knobs`](crate::Tuning::agreed_knobs)), and every rank gets the same
//! verdict:
//!
//! - a rank whose own set-up failed (a tuning out of range, a module that would not load)
//!   returns its own error; every other rank returns [`Error::PeerFailed`] naming it and
//!   carrying its message, at once instead of after the bootstrap timeout of the next step;
//! - knobs that differ give [`Error::Mismatch`] on every rank, naming the variable and the
//!   two values (rank 0's and the lowest rank that differs from it).
//!
//! Per-call choices (`all_reduce_with(Some(algo), ..)`, sizes) are not checked: every rank
//! must still make the same calls in the same order.

use symcomm::{Communicator, Error, Result};

/// The first line of every rank's report (a peer from another version of the gallery sends
/// another one, or none).
const HEADER: &str = "symcomm-gallery set-up v1";

/// What went wrong with one rank's report.
const STEP: &str = "Collectives::new set-up check";

/// One rank's report: `Err` with the message of its failed set-up, or its knobs.
type Report = std::result::Result<Vec<(String, String)>, String>;

/// Collective: exchanges this rank's set-up outcome (`failed`: the error of its own set-up)
/// and `knobs` (`(name, value)`, the same names in the same order on every rank) with every
/// rank of `comm`, and returns the verdict described in the module docs. Where this rank's
/// own set-up failed, the caller reports that error rather than this result.
pub(crate) fn check(
    comm: &Communicator,
    failed: Option<&Error>,
    knobs: &[(&str, String)],
) -> Result<()> {
    let mine = encode(failed, knobs);
    let all = comm.bootstrap().all_gather(mine.as_bytes())?;
    let reports = all
        .iter()
        .enumerate()
        .map(|(rank, bytes)| {
            decode(bytes).ok_or_else(|| Error::Protocol {
                rank: Some(comm.rank()),
                step: STEP.into(),
                reason: format!(
                    "rank {rank} sent a report this version cannot read (another version of \
                     symcomm-gallery on that rank?)"
                ),
            })
        })
        .collect::<Result<Vec<Report>>>()?;
    verdict(comm.rank(), &reports)
}

/// The text a rank sends: the header, then `ok` and one `name=value` line per knob, or
/// `failed` and the error's message.
fn encode(failed: Option<&Error>, knobs: &[(&str, String)]) -> String {
    let mut s = format!("{HEADER}\n");
    match failed {
        Some(e) => {
            s.push_str("failed\n");
            s.push_str(&e.to_string());
        }
        None => {
            s.push_str("ok\n");
            for (name, value) in knobs {
                s.push_str(&format!("{name}={value}\n"));
            }
        }
    }
    s
}

/// Parses [`encode`]'s text; `None` if it is not one.
fn decode(bytes: &[u8]) -> Option<Report> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(HEADER)?.strip_prefix('\n')?;
    if let Some(message) = rest.strip_prefix("failed\n") {
        return Some(Err(message.to_string()));
    }
    let knobs = rest.strip_prefix("ok\n")?;
    knobs
        .lines()
        .map(|line| {
            let (name, value) = line.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect::<Option<Vec<_>>>()
        .map(Ok)
}

/// The verdict of every rank's report, as `me` sees it: the lowest failed rank, else the
/// first knob (lowest rank, then knob order) that differs from rank 0's.
fn verdict(me: usize, reports: &[Report]) -> Result<()> {
    if let Some((peer, message)) = reports
        .iter()
        .enumerate()
        .find_map(|(r, rep)| rep.as_ref().err().map(|m| (r, m)))
    {
        return Err(Error::PeerFailed {
            rank: Some(me),
            step: "Collectives::new".into(),
            peer,
            reason: message.clone(),
        });
    }
    let knobs = |r: usize| reports[r].as_ref().map(Vec::as_slice).unwrap_or_default();
    for r in 1..reports.len() {
        let (a, b) = (knobs(0), knobs(r));
        if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.0 != y.0) {
            return Err(Error::Mismatch {
                what: "gallery set-up knobs (another version of symcomm-gallery?)".into(),
                rank_a: 0,
                value_a: names(a),
                rank_b: r,
                value_b: names(b),
            });
        }
        if let Some((x, y)) = a.iter().zip(b).find(|(x, y)| x.1 != y.1) {
            return Err(Error::Mismatch {
                what: format!("gallery tuning {}", x.0),
                rank_a: 0,
                value_a: x.1.clone(),
                rank_b: r,
                value_b: y.1.clone(),
            });
        }
    }
    Ok(())
}

/// The knob names of a report, for a message.
fn names(knobs: &[(String, String)]) -> String {
    let v: Vec<&str> = knobs.iter().map(|k| k.0.as_str()).collect();
    v.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(blocks: &str) -> Vec<(&'static str, String)> {
        vec![
            ("SYMCOMM_ALGO", "by size".into()),
            ("SYMCOMM_MAX_BLOCKS", blocks.into()),
        ]
    }

    fn report(failed: Option<&Error>, k: &[(&str, String)]) -> Report {
        decode(encode(failed, k).as_bytes()).expect("own encoding decodes")
    }

    #[test]
    fn reports_round_trip_and_foreign_text_is_refused() {
        let k = knobs("64");
        assert_eq!(
            report(None, &k),
            Ok(vec![
                ("SYMCOMM_ALGO".into(), "by size".into()),
                ("SYMCOMM_MAX_BLOCKS".into(), "64".into())
            ])
        );
        let e = Error::InvalidArgument("max_blocks is 0\nsecond line".into());
        assert_eq!(report(Some(&e), &k), Err(e.to_string()));
        assert_eq!(decode(b"hello"), None);
        assert_eq!(decode(b"symcomm-gallery set-up v2\nok\n"), None);
        assert_eq!(
            decode(b"symcomm-gallery set-up v1\nok\nno equals sign\n"),
            None
        );
        assert_eq!(decode(&[0xff, 0xfe]), None);
    }

    #[test]
    fn equal_knobs_agree() {
        let r = vec![report(None, &knobs("64")); 4];
        assert!(verdict(2, &r).is_ok());
    }

    #[test]
    fn the_first_differing_knob_is_named_with_both_values() {
        let mut r = vec![report(None, &knobs("64")); 4];
        r[2] = report(None, &knobs("32"));
        r[3] = report(None, &knobs("16"));
        match verdict(1, &r) {
            Err(Error::Mismatch {
                what,
                rank_a: 0,
                value_a,
                rank_b: 2,
                value_b,
            }) => {
                assert_eq!(what, "gallery tuning SYMCOMM_MAX_BLOCKS");
                assert_eq!((value_a.as_str(), value_b.as_str()), ("64", "32"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_rank_is_named_with_its_message_before_any_mismatch() {
        let mut r = vec![report(None, &knobs("64")); 4];
        r[1] = report(None, &knobs("32"));
        let e = Error::InvalidArgument("gallery tuning: max_blocks is 0".into());
        r[3] = report(Some(&e), &knobs("64"));
        match verdict(0, &r) {
            Err(Error::PeerFailed {
                rank: Some(0),
                peer: 3,
                reason,
                ..
            }) => assert!(reason.contains("max_blocks is 0"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn different_knob_lists_are_a_version_mismatch() {
        let mut r = vec![report(None, &knobs("64")); 2];
        r[1] = report(None, &knobs("64")[..1]);
        match verdict(0, &r) {
            Err(Error::Mismatch { what, .. }) => assert!(what.contains("version"), "{what}"),
            other => panic!("{other:?}"),
        }
    }
}
