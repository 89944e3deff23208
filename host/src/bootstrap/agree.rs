//! Agreement: one collective check that every rank runs with the same settings.
//!
//! Some settings are read by each rank on its own (environment variables, options) but must be
//! equal everywhere: a rank with another `SYMCOMM_LSA_SIZE` derives other teams, one with
//! another `SYMCOMM_WIN_STRIDE` another flat layout, and nothing can tell until a kernel waits
//! for a peer that never comes. [`Bootstrap::agree`] gathers from every rank (one all-gather, in
//! the runtime's tag space) whether its local set-up succeeded and its settings, and every rank
//! gets the same verdict:
//!
//! - a rank whose own set-up failed returns its own error; every other rank returns
//!   [`Error::PeerFailed`] naming it and carrying its message, at once instead of after the
//!   bootstrap timeout of the next step;
//! - settings that differ give [`Error::Mismatch`] on every rank, naming the setting and the
//!   two values (rank 0's and the lowest rank that differs from it);
//! - a rank in another agreement (another step, another version of symcomm) is a protocol error.
//!
//! `Communicator::init` agrees on the settings that shape teams and layout
//! (`comm::INIT_SETTINGS`); the gallery's `Collectives::new` on its tuning, and in its checked
//! mode every collective on its arguments; later components add their own agreement step the
//! same way.

use super::Bootstrap;
use crate::{Error, Result};

/// The first line of every rank's report (a peer from another version sends another one).
const HEADER: &str = "symcomm agreement v1";

/// One rank's report: its step, then `Err` with the message of its failed set-up, or its
/// settings.
type Report = (String, std::result::Result<Vec<(String, String)>, String>);

impl Bootstrap {
    /// Collective: every rank calls this with the same `step` (e.g. `"communicator init"`) and
    /// the same setting names in the same order, with its own values (and `failed`, the error
    /// of its own set-up, if that failed): one all-gather, in the runtime's tag space, so that
    /// every rank gets the same verdict.
    ///
    /// # Errors
    /// - [`Error::PeerFailed`] naming the lowest rank whose set-up failed, with its message;
    /// - [`Error::Mismatch`] naming the first setting that differs (as `kind` and the name,
    ///   e.g. `setting SYMCOMM_LSA_SIZE`), rank 0's value and the lowest rank that differs;
    /// - [`Error::Protocol`] when a rank is in another agreement (another step or version);
    /// - the bootstrap's own errors.
    ///
    /// Where this rank's own set-up failed, the caller reports that error rather than this
    /// result.
    pub fn agree(
        &self,
        step: &str,
        kind: &str,
        failed: Option<&Error>,
        settings: &[(&str, String)],
    ) -> Result<()> {
        let me = self.rank();
        let all = self.runtime_all_gather(encode(step, failed, settings).as_bytes())?;
        let reports = all
            .iter()
            .enumerate()
            .map(|(rank, bytes)| {
                decode(bytes)
                    .filter(|r| r.0 == step)
                    .ok_or_else(|| Error::Protocol {
                        rank: Some(me),
                        step: step.into(),
                        reason: format!(
                            "rank {rank} sent a report of another agreement (another step, or \
                             another version of symcomm on that rank?)"
                        ),
                    })
            })
            .collect::<Result<Vec<Report>>>()?;
        verdict(me, step, kind, &reports)
    }
}

/// The text a rank sends: the header and the step, then `ok` and one `name=value` line per
/// setting, or `failed` and the error's message.
fn encode(step: &str, failed: Option<&Error>, settings: &[(&str, String)]) -> String {
    let mut s = format!("{HEADER}\n{step}\n");
    match failed {
        Some(e) => {
            s.push_str("failed\n");
            s.push_str(&e.to_string());
        }
        None => {
            s.push_str("ok\n");
            for (name, value) in settings {
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
    let (step, rest) = rest.split_once('\n')?;
    if let Some(message) = rest.strip_prefix("failed\n") {
        return Some((step.into(), Err(message.to_string())));
    }
    let settings = rest.strip_prefix("ok\n")?;
    settings
        .lines()
        .map(|line| {
            let (name, value) = line.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect::<Option<Vec<_>>>()
        .map(|v| (step.into(), Ok(v)))
}

/// The verdict of every rank's report, as `me` sees it: the lowest failed rank, else the
/// first setting (lowest rank, then setting order) that differs from rank 0's.
fn verdict(me: usize, step: &str, kind: &str, reports: &[Report]) -> Result<()> {
    if let Some((peer, message)) = reports
        .iter()
        .enumerate()
        .find_map(|(r, rep)| rep.1.as_ref().err().map(|m| (r, m)))
    {
        return Err(Error::PeerFailed {
            rank: Some(me),
            step: step.into(),
            peer,
            reason: message.clone(),
        });
    }
    let settings = |r: usize| reports[r].1.as_ref().map(Vec::as_slice).unwrap_or_default();
    for r in 1..reports.len() {
        let (a, b) = (settings(0), settings(r));
        if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x.0 != y.0) {
            return Err(Error::Mismatch {
                what: format!("{kind} names (another version of symcomm?)"),
                rank_a: 0,
                value_a: names(a),
                rank_b: r,
                value_b: names(b),
            });
        }
        if let Some((x, y)) = a.iter().zip(b).find(|(x, y)| x.1 != y.1) {
            return Err(Error::Mismatch {
                what: format!("{kind} {}", x.0),
                rank_a: 0,
                value_a: x.1.clone(),
                rank_b: r,
                value_b: y.1.clone(),
            });
        }
    }
    Ok(())
}

/// The setting names of a report, for a message.
fn names(settings: &[(String, String)]) -> String {
    let v: Vec<&str> = settings.iter().map(|k| k.0.as_str()).collect();
    v.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(blocks: &str) -> Vec<(&'static str, String)> {
        vec![
            ("SYMCOMM_ALGO", "by size".into()),
            ("SYMCOMM_MAX_BLOCKS", blocks.into()),
        ]
    }

    fn report(failed: Option<&Error>, k: &[(&str, String)]) -> Report {
        decode(encode("test", failed, k).as_bytes()).expect("own encoding decodes")
    }

    #[test]
    fn reports_round_trip_and_foreign_text_is_refused() {
        let k = settings("64");
        assert_eq!(
            report(None, &k),
            (
                "test".into(),
                Ok(vec![
                    ("SYMCOMM_ALGO".into(), "by size".into()),
                    ("SYMCOMM_MAX_BLOCKS".into(), "64".into())
                ])
            )
        );
        let e = Error::InvalidArgument("max_blocks is 0\nsecond line".into());
        assert_eq!(report(Some(&e), &k).1, Err(e.to_string()));
        assert_eq!(decode(b"hello"), None);
        assert_eq!(decode(b"symcomm agreement v2\ntest\nok\n"), None);
        assert_eq!(
            decode(b"symcomm agreement v1\ntest\nok\nno equals sign\n"),
            None
        );
        assert_eq!(decode(&[0xff, 0xfe]), None);
    }

    #[test]
    fn equal_settings_agree() {
        let r = vec![report(None, &settings("64")); 4];
        assert!(verdict(2, "test", "setting", &r).is_ok());
    }

    #[test]
    fn the_first_differing_setting_is_named_with_both_values() {
        let mut r = vec![report(None, &settings("64")); 4];
        r[2] = report(None, &settings("32"));
        r[3] = report(None, &settings("16"));
        match verdict(1, "test", "gallery tuning", &r) {
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
        let mut r = vec![report(None, &settings("64")); 4];
        r[1] = report(None, &settings("32"));
        let e = Error::InvalidArgument("gallery tuning: max_blocks is 0".into());
        r[3] = report(Some(&e), &settings("64"));
        match verdict(0, "test", "setting", &r) {
            Err(Error::PeerFailed {
                rank: Some(0),
                peer: 3,
                reason,
                ..
            }) => assert!(reason.contains("max_blocks is 0"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
}
