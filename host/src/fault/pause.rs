//! Test-only pause points: see [the module documentation](super).

use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

/// The variable that selects a pause point: `<phase>@<rank>` (or `<phase>` for every rank).
pub const PAUSE_ENV: &str = "SYMCOMM_TEST_PAUSE_AT";

/// The phases the runtime and the gallery pause at, in the order a job reaches them:
/// - `connect`: joined the rendezvous (hello sent to rank 0, no welcome yet);
/// - `mesh`: welcomed, before connecting to the other ranks;
/// - `register`: window registration, after the ranks agreed to register, before anything is
///   prepared;
/// - `register-fds`: during the fd exchange: this rank's fd is published, the peers' not yet
///   fetched;
/// - `register-mapped`: after the fd exchange: every peer's memory mapped, before the commit;
/// - `devcomm`: `DevComm::create`, resource window registered, before the final barrier;
/// - `collective`: a gallery collective, just before its kernel is launched (the peers' kernels
///   are then waiting for this rank);
/// - `barrier-kernel`: reached by test programs just before launching a barrier-only kernel;
/// - `deregister`: before a window is deregistered.
pub const PHASES: &[&str] = &[
    "connect",
    "mesh",
    "register",
    "register-fds",
    "register-mapped",
    "devcomm",
    "collective",
    "barrier-kernel",
    "deregister",
];

/// Stops this process for good if [`PAUSE_ENV`] names `phase` for `rank` (after printing where it
/// stopped); otherwise returns at once. For fault tests only: does nothing in release builds.
pub fn pause_point(phase: &str, rank: usize) {
    if !cfg!(debug_assertions) {
        return;
    }
    static SELECTED: OnceLock<Option<(String, Option<usize>)>> = OnceLock::new();
    let selected = SELECTED.get_or_init(|| {
        let v = std::env::var(PAUSE_ENV).ok()?;
        let v = v.trim();
        if v.is_empty() {
            return None;
        }
        Some(match v.split_once('@') {
            Some((p, r)) => match r.trim().parse() {
                Ok(r) => (p.trim().to_string(), Some(r)),
                Err(_) => {
                    tracing::warn!("{PAUSE_ENV}={v:?}: the rank after '@' is not a number");
                    return None;
                }
            },
            None => (v.to_string(), None),
        })
    });
    let Some((p, r)) = selected else { return };
    if p != phase || r.is_some_and(|r| r != rank) {
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "symcomm-test: rank {rank} (pid {}) paused at {phase}",
        std::process::id()
    );
    let _ = err.flush();
    drop(err);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
