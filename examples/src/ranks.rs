//! Running one function per rank, in either launch mode symcomm supports:
//!
//! - one process per GPU: start the program with `symcomm-run -n N` (or torchrun / mpirun);
//!   each process is one rank, found from the environment;
//! - one process driving several GPUs: pass `--threads N`; rank `r` runs on a thread of this
//!   process and uses GPU `r`.
//!
//! Either way the same per-rank function runs against a [`Communicator`].

use symcomm::{Communicator, Result};

/// Removes `--threads N` from `args` and returns `N` if it was there.
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

/// Runs `f` once per rank of this process (see the module docs) and returns each rank's
/// result, in rank order.
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
                let handles: Vec<_> = comms
                    .into_iter()
                    .map(|comm| {
                        let rank = comm.rank();
                        let f = &f;
                        (rank, s.spawn(move || f(comm)))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|(rank, h)| {
                        let result = h.join().unwrap_or_else(|_| {
                            Err(symcomm::Error::InvalidArgument(format!(
                                "rank {rank}'s thread panicked"
                            )))
                        });
                        (rank, result)
                    })
                    .collect()
            }),
            Err(e) => vec![(0, Err(e))],
        },
    }
}
