//! The local launcher behind `symcomm-run -n N [options] -- prog args`: starts N ranks of one
//! job on this machine and supervises them.
//!
//! What it does, in order:
//! - picks a free port on 127.0.0.1 (bind to port 0, read it, release it: a tiny window in
//!   which another process could take it, accepted for a development launcher) and draws a
//!   random magic;
//! - starts each rank with `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
//!   `MASTER_ADDR`, `MASTER_PORT` (torchrun's names, so non-symcomm code can use them too),
//!   `SYMCOMM_UNIQUE_ID` (root address and magic), with `--timeout` `SYMCOMM_TIMEOUT`, and
//!   with `--gpus` `SYMCOMM_DEVICE` ([`rank_env`]); each rank runs in its own process group (so a terminal's Ctrl-C reaches
//!   it once, through the launcher), gets SIGTERM if the launcher itself dies, and has stdin
//!   closed;
//! - prefixes every line a rank prints with `[rank k] `, stdout to stdout and
//!   stderr to stderr, whole lines at a time;
//! - forwards SIGINT and SIGTERM to every rank's process group (a second signal sends SIGKILL);
//! - gives each rank the read end of a pipe (its number in `SYMCOMM_LAUNCHER_FD`) and, when a
//!   rank exits with an error or is killed, writes `dead <rank> <what happened>` to every other
//!   rank's pipe (killed ranks first among those seen in one pass): the runtime reads it
//!   ([`crate::fault`]) and fails at once, naming that rank, even where no connection could tell
//!   (a rank killed before it connected);
//! - when a rank fails, waits `--grace` seconds for the others to notice and exit on their own
//!   (the bootstrap makes them fail promptly), then sends SIGTERM, and SIGKILL 5 s later;
//! - once every rank has exited, waits for their output to end; processes a rank left running
//!   in its process group (e.g. `cmd &`) that still hold its output open after 2 s get SIGTERM,
//!   and SIGKILL 1 s later (at once on SIGINT or SIGTERM), so they cannot keep the launcher
//!   waiting;
//! - exits with the first failing rank's exit code, `128 + signal` if it was killed by a
//!   signal, 0 if every rank succeeded.
//!
//! The pieces are plain functions so they are unit-tested; [`cli`] ties them together.
//!
//! Layout: the command line in `launcher/args.rs`, starting the ranks (port, environment,
//! command) in `launcher/spawn.rs`, output prefixing in `launcher/output.rs`, the signal handler
//! and signalling the ranks' process groups in `launcher/signals.rs`, and the supervision loop
//! that ties them together in `launcher/supervise.rs`.

mod args;
mod output;
mod signals;
mod spawn;
mod supervise;

pub use args::Nodes;
pub(crate) use args::{LaunchArgs, Parsed, USAGE};
pub use spawn::{node_rank_env, rank_env};
pub(crate) use supervise::run;

/// The whole `symcomm-run` command: parses `args` (without the program name), runs the job and
/// returns the process's exit code (2 for bad arguments, 127 when the job cannot start).
/// Test suites that need the launcher as a binary of their own package call this from a
/// two-line `main`.
pub fn cli(args: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    match LaunchArgs::parse(args) {
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            0
        }
        Ok(Parsed::Run(args)) => match run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("symcomm-run: {e}");
                127
            }
        },
        Err(e) => {
            eprintln!("symcomm-run: {e}\n\n{USAGE}");
            2
        }
    }
}

#[cfg(test)]
mod tests;
