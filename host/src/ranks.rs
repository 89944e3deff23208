//! Running one function per rank, in either launch mode symcomm supports:
//!
//! - one process per GPU: start the program with `symcomm-run -n N` (or torchrun / mpirun);
//!   each process is one rank, found from the environment ([`Communicator::from_env`]);
//! - one process driving several GPUs: pass `--threads N`; rank `r` runs on a thread of this
//!   process and uses GPU `r` ([`Communicator::init_threads`]).
//!
//! Either way the same per-rank function runs against a [`Communicator`], so a program
//! written once supports both modes:
//!
//! ```no_run
//! use symcomm::ranks::{run_ranks, take_threads_flag};
//!
//! let mut args: Vec<String> = std::env::args().skip(1).collect();
//! let threads = take_threads_flag(&mut args).unwrap_or_else(|e| panic!("{e}"));
//! for (rank, result) in run_ranks(threads, |comm| Ok(comm.size())) {
//!     println!("rank {rank}: {result:?}");
//! }
//! ```
//!
//! The examples, the GPU test programs and `symcomm-bench` start their ranks this way. Tests
//! that need several ranks without a GPU use [`run_emulated`] (ranks as threads on the CPU
//! emulator) and [`all_ok`].

use crate::error::{clip, join_bounded};
use crate::{Communicator, Error, Result};

/// Removes `--threads N` from `args` and returns `N` if it was there (`None` if not).
///
/// The error is a one-line message for the command line: `--threads` without a value, with a
/// value that is not a number, or with `0`; `args` is left unchanged then.
pub fn take_threads_flag(args: &mut Vec<String>) -> std::result::Result<Option<usize>, String> {
    let Some(i) = args.iter().position(|a| a == "--threads") else {
        return Ok(None);
    };
    let value = args
        .get(i + 1)
        .ok_or("--threads needs a number")?
        .parse::<usize>()
        .map_err(|_| "--threads: not a number".to_string())?;
    if value == 0 {
        return Err("--threads must be at least 1".into());
    }
    args.drain(i..i + 2);
    Ok(Some(value))
}

/// Runs `f` once per rank of this process and returns each rank's result, in rank order.
///
/// With `threads` `None` this process is one rank, found from the environment, and every
/// process of the job must call this; with `Some(n)` this process is the whole job: ranks
/// `0..n`, one thread each, on GPUs `0..n` (see [`Communicator::init_threads`]). If the
/// communicators cannot be created, the result is that one error, reported as rank 0's. A
/// rank whose thread panics reports [`Error::Panicked`] naming the rank, one whose
/// thread cannot be started [`Error::Io`]; the other ranks' results are still returned.
pub fn run_ranks<T, F>(threads: Option<usize>, f: F) -> Vec<(usize, Result<T>)>
where
    T: Send,
    F: Fn(Communicator) -> Result<T> + Sync,
{
    match threads {
        None => match Communicator::from_env() {
            Ok(comm) => {
                let rank = comm.rank();
                vec![(rank, f(comm))]
            }
            Err(e) => vec![(0, Err(e))],
        },
        Some(n) => match Communicator::init_threads(n) {
            Ok(comms) => std::thread::scope(|s| {
                // A rank whose thread cannot start reports why; its communicator is dropped,
                // so the other ranks fail at their next collective instead of waiting for it.
                let handles: Vec<_> = comms
                    .into_iter()
                    .map(|comm| {
                        let rank = comm.rank();
                        let f = &f;
                        let handle = std::thread::Builder::new()
                            .name(format!("symcomm-rank{rank}"))
                            .spawn_scoped(s, move || f(comm))
                            .map_err(|source| Error::Io {
                                what: format!("starting the thread of rank {rank}"),
                                source,
                            });
                        (rank, handle)
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|(rank, h)| {
                        let result = h.and_then(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(Error::Panicked {
                                    rank: Some(rank),
                                    what: "the rank's thread".into(),
                                })
                            })
                        });
                        (rank, result)
                    })
                    .collect()
            }),
            Err(e) => vec![(0, Err(e))],
        },
    }
}

/// Runs `f` once per rank of an `n`-rank job of this process on the CPU emulator (ranks as
/// threads, as [`run_ranks`] with `Some(n)`), and returns each rank's result in rank order.
/// The emulated backend is chosen for the whole process
/// ([`use_backend`](crate::backend::use_backend)); if the process already runs on GPUs, the
/// result is that error, reported as rank 0's. The test harness of every crate that needs
/// several ranks without a GPU.
pub fn run_emulated<T, F>(n: usize, f: F) -> Vec<(usize, Result<T>)>
where
    T: Send,
    F: Fn(Communicator) -> Result<T> + Sync,
{
    match crate::backend::use_backend(crate::backend::Backend::Emulated) {
        Ok(()) => run_ranks(Some(n), f),
        Err(e) => vec![(0, Err(e))],
    }
}

/// Goes through every rank's result for a program's exit status: `passed(rank, value)` for
/// each success (it says whether the rank passed its checks), `failed(rank, error)` for each
/// failure. True when every rank succeeded and passed.
pub fn all_passed<T>(
    results: Vec<(usize, Result<T>)>,
    mut passed: impl FnMut(usize, T) -> bool,
    mut failed: impl FnMut(usize, &Error),
) -> bool {
    let mut ok = true;
    for (rank, result) in results {
        ok &= match result {
            Ok(v) => passed(rank, v),
            Err(e) => {
                failed(rank, &e);
                false
            }
        };
    }
    ok
}

/// Failed ranks whose errors [`all_ok`] quotes; the others it names.
const QUOTED_FAILURES: usize = 3;
/// Characters of one quoted error.
const QUOTED_CHARS: usize = 240;

/// Every rank's value, in rank order, when every rank succeeded; otherwise one line naming
/// the failed ranks with their errors (`rank 1: …; rank 3: …`). Bounded however many ranks
/// failed: beyond three, the first three errors are quoted and the other ranks listed
/// (`64 ranks failed: rank 0: …; rank 1: …; rank 2: …; and 61 more: ranks 3, 4, …`).
pub fn all_ok<T>(results: Vec<(usize, Result<T>)>) -> std::result::Result<Vec<T>, String> {
    let mut values = Vec::with_capacity(results.len());
    let mut failed = Vec::new();
    for (rank, result) in results {
        match result {
            Ok(v) => values.push(v),
            Err(e) => failed.push((rank, e)),
        }
    }
    if failed.is_empty() {
        return Ok(values);
    }
    let quoted: Vec<String> = failed
        .iter()
        .take(QUOTED_FAILURES)
        .map(|(rank, e)| format!("rank {rank}: {}", clip(&e.to_string(), QUOTED_CHARS)))
        .collect();
    let mut line = quoted.join("; ");
    if failed.len() > QUOTED_FAILURES {
        let others: Vec<usize> = failed[QUOTED_FAILURES..].iter().map(|f| f.0).collect();
        line = format!(
            "{} ranks failed: {line}; and {} more: ranks {}",
            failed.len(),
            others.len(),
            join_bounded(&others, 16, 12, ", ")
        );
    }
    Err(line)
}

#[cfg(test)]
mod tests {
    use super::{all_ok, take_threads_flag};
    use crate::Error;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn take_threads_flag_removes_the_flag_and_its_value() {
        let mut a = args(&["--n", "4", "--threads", "8", "stress"]);
        assert_eq!(take_threads_flag(&mut a), Ok(Some(8)));
        assert_eq!(a, args(&["--n", "4", "stress"]));
    }

    #[test]
    fn take_threads_flag_without_the_flag_leaves_args_alone() {
        let mut a = args(&["--n", "4"]);
        assert_eq!(take_threads_flag(&mut a), Ok(None));
        assert_eq!(a, args(&["--n", "4"]));
    }

    #[test]
    fn take_threads_flag_rejects_zero_missing_and_non_numbers() {
        for (list, message) in [
            (&["--threads", "0"][..], "--threads must be at least 1"),
            (&["--threads"][..], "--threads needs a number"),
            (&["--threads", "eight"][..], "--threads: not a number"),
            (&["--threads", "-1"][..], "--threads: not a number"),
        ] {
            let mut a = args(list);
            assert_eq!(
                take_threads_flag(&mut a),
                Err(message.to_string()),
                "{list:?}"
            );
            assert_eq!(a, args(list), "{list:?}: args must be left unchanged");
        }
    }

    #[test]
    fn all_passed_needs_every_rank_to_succeed_and_pass() {
        let (mut seen, mut failed) = (Vec::new(), Vec::new());
        let results = vec![
            (0, Ok(1)),
            (1, Err(Error::Internal("boom".into()))),
            (2, Ok(3)),
        ];
        let ok = super::all_passed(
            results,
            |r, v| {
                seen.push((r, v));
                true
            },
            |r, e| failed.push((r, e.to_string())),
        );
        assert!(!ok);
        assert_eq!(seen, [(0, 1), (2, 3)]);
        assert_eq!(failed, [(1, "internal error: boom".to_string())]);
        assert!(super::all_passed(vec![(0, Ok(1))], |_, _| true, |_, _| {}));
        assert!(!super::all_passed(
            vec![(0, Ok(1))],
            |_, _| false,
            |_, _| {}
        ));
    }

    #[test]
    fn all_ok_keeps_rank_order_or_names_every_failed_rank() {
        assert_eq!(all_ok(vec![(0, Ok(7)), (1, Ok(8))]), Ok(vec![7, 8]));
        let failed = all_ok(vec![
            (0, Ok(7)),
            (1, Err(Error::Internal("boom".into()))),
            (2, Err(Error::InvalidArgument("bad".into()))),
        ]);
        assert_eq!(
            failed,
            Err("rank 1: internal error: boom; rank 2: invalid argument: bad".to_string())
        );
    }

    #[test]
    fn all_ok_of_many_failed_ranks_is_one_bounded_line_naming_them() {
        let long = "timed out after 300s during barrier #17 waiting for rank 5, which never \
                    arrived (it is still running, or SYMCOMM_TIMEOUT is too short for this job)";
        let results: Vec<(usize, crate::Result<()>)> = (0..64)
            .map(|r| (r, Err(Error::Internal(format!("rank {r}: {long}")))))
            .collect();
        let msg = all_ok(results).unwrap_err();
        assert!(msg.len() <= 1000, "{} characters: {msg}", msg.len());
        assert!(!msg.contains('\n'), "{msg}");
        for fact in [
            "64 ranks failed",
            "rank 0: internal error: rank 0: timed out after 300s",
            "rank 1: ",
            "61 more: ranks 3, 4, 5",
        ] {
            assert!(msg.contains(fact), "{fact:?} missing from: {msg}");
        }
    }
}
