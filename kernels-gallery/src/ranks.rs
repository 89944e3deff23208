//! Running one function per rank in either launch mode: one process per GPU (started by
//! `symcomm-run -n N`, rank from the environment) or one process driving `N` GPUs with one
//! thread per rank (`--threads N`).

use symcomm::{Communicator, Error, Result};

/// Runs `f` once per rank of this process (threads: `Some(n)`; environment: `None`) and
/// returns each rank's result in rank order.
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
                        let r = h.join().unwrap_or_else(|_| {
                            Err(Error::InvalidArgument(format!(
                                "rank {rank}'s thread panicked"
                            )))
                        });
                        (rank, r)
                    })
                    .collect()
            }),
            Err(e) => vec![(0, Err(e))],
        },
    }
}
