//! The set-up check of [`Collectives::new`](crate::Collectives::new).
//!
//! The gallery's kernels only meet if every rank launches the same kernel with the same grid
//! over the same scratch layout: a rank with another `SYMCOMM_ONE_SHOT_MAX` runs a one-shot
//! while its peers run a two-shot, and nothing on the device can tell. So before its first
//! collective step, `Collectives::new` gathers from every rank (one bootstrap all-gather, the
//! runtime's [`Communicator::agree`]) whether its local set-up succeeded and the knobs that
//! decide launches ([`Tuning::agreed_knobs`](crate::Tuning::agreed_knobs)), and every rank gets
//! the same verdict:
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

/// Collective: exchanges this rank's set-up outcome (`failed`: the error of its own set-up)
/// and `knobs` (`(name, value)`, the same names in the same order on every rank) with every
/// rank of `comm` ([`Communicator::agree`]), and returns the verdict described in the module
/// docs. Where this rank's own set-up failed, the caller reports that error rather than this
/// result.
pub(crate) fn check(
    comm: &Communicator,
    failed: Option<&Error>,
    knobs: &[(&str, String)],
) -> Result<()> {
    comm.agree("Collectives::new", "gallery tuning", failed, knobs)
}
