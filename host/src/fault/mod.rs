//! Faults: what lets every rank learn of a failure promptly, and the hooks that test it.
//!
//! - **Launcher notices** (`fault/notice.rs`): `symcomm-run` gives every rank the read end of a
//!   pipe (in `SYMCOMM_LAUNCHER_FD`) and writes one line there when another rank of the job exits
//!   with an error or is killed. Every wait of the bootstrap's set-up (rendezvous, mesh) reads
//!   it, so it fails at once, naming that rank, where no connection can tell: a rank killed
//!   before it connected anywhere, or one the others wait for in the mesh. Once the bootstrap
//!   runs, every rank has a link to every other, and a link ends when its process does.
//! - **Pause points** ([`pause_point`]): with `SYMCOMM_TEST_PAUSE_AT=<phase>@<rank>` set, rank
//!   `<rank>` stops at the named phase, prints
//!   `symcomm-test: rank R (pid P) paused at PHASE` on standard error and sleeps until it is
//!   killed; a fault test waits for that line and then kills it exactly there. Phases are
//!   listed in [`PHASES`]. Unset (the default), a pause point costs one cached lookup; in
//!   release builds pause points do nothing (a stray setting cannot stop a production job).
//!
//! This module depends on nothing else in the crate, so every layer can use it.

mod notice;
mod pause;

pub(crate) use notice::LAUNCHER_FD_ENV;
pub(crate) use notice::{launcher_notice, launcher_notices};
pub use pause::{PAUSE_ENV, PHASES, pause_point};
