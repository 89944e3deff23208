//! Deadlines: turning a caller's timeout into a point in time, and back into what is left of it.
//!
//! Every blocking step of the bootstrap ([`crate::bootstrap`]) and of the fd exchange
//! ([`crate::ipc`]) is bounded by a deadline derived from one timeout; these helpers are what
//! both use, so a huge timeout means the same thing everywhere (no practical limit, never a
//! panic) and neither module depends on the other for it.

use std::time::{Duration, Instant};

/// `now + timeout`, saturating far in the future instead of overflowing (a timeout of
/// [`Duration::MAX`] means "no practical limit", not a panic). The bootstrap derives its
/// deadlines with this too.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX as u64)))
        .unwrap_or(now)
}

/// What is left until `deadline`: zero once it has passed.
pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
