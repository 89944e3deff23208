//! Bounded spin-waiting: every wait of the crate ends, either because the condition holds, a
//! deadline on `%globaltimer` passed, or the communicator's abort flag was raised.
//!
//! [`Spin`] is the loop state a wait carries: call [`Spin::check`] after each failed poll. On
//! the GPU it reads the abort flag once every [`ABORT_POLL_INTERVAL`] failed polls, never on
//! the first: the flag usually lives in device-mapped *host* memory, and a read of it is a round
//! trip over PCIe, so thousands of threads each reading it once per short wait serialise on the
//! bus. Under the emulator it reads the flag at every failed poll (a host load; the emulator
//! backs off between polls, so an interval would stretch an abort to seconds). It reads the
//! timer every [`TIMER_POLL_INTERVAL`] polls (reading `%globaltimer` is not free). [`WaitError`] is what a wait returns when it gives up; [`WaitError::code`] gives a
//! stable number for reporting it to the host.
//!
//! Under the CPU emulator every [`Spin::check`] also polls the launch (it stops the thread
//! once the launch has failed or its watchdog fired); a loop over bare `mem` loads does not,
//! so spin loops of kernels belong in a `Spin`.

use crate::arch;
use crate::mem::{self, LoadOrder, Scope};

/// Why a wait gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitError {
    /// The deadline passed before the condition held.
    Timeout,
    /// The abort flag was raised (non-zero).
    Aborted,
}

impl WaitError {
    /// A stable non-zero code (`Timeout` = 1, `Aborted` = 2) for reporting to the host;
    /// success is 0 by convention (see [`WaitError::result_code`]).
    #[inline(always)]
    pub const fn code(self) -> u32 {
        match self {
            WaitError::Timeout => 1,
            WaitError::Aborted => 2,
        }
    }

    /// The code of a wait result: 0 for `Ok`, else [`WaitError::code`].
    #[inline(always)]
    pub const fn result_code(r: Result<(), WaitError>) -> u32 {
        match r {
            Ok(()) => 0,
            Err(e) => e.code(),
        }
    }
}

// ANCHOR: abort_poll
/// Failed polls between two reads of the abort flag.
pub const ABORT_POLL_INTERVAL: u32 = 1024;

/// Whether every failed poll reads the abort flag. On the GPU it does not: the flag is read at
/// the last poll of each [`ABORT_POLL_INTERVAL`], so a short wait never reads host memory. On
/// the host it does, since reading the flag is cheap there and the emulator backs off between
/// polls (1024 backed-off polls would stretch an abort to seconds).
const ABORT_EVERY_POLL: bool = !cfg!(target_arch = "nvptx64");
// ANCHOR_END: abort_poll

/// Failed polls between two reads of `%globaltimer` when a deadline is set.
pub const TIMER_POLL_INTERVAL: u32 = 64;

/// "No timeout": waits with this many nanoseconds end only on success or abort.
pub const NO_TIMEOUT: u64 = u64::MAX;

/// Reads an abort flag: true when `flag` is non-null and `*flag != 0`.
///
/// # Safety
/// - `flag` is null or a valid generic address of a `u32` in global memory (device memory or
///   host memory mapped for the device).
///
/// # Ordering
/// Relaxed at system scope: seeing the flag says nothing about other memory.
#[doc(alias = "testAbort")]
#[inline(always)]
pub unsafe fn aborted(flag: *const u32) -> bool {
    // SAFETY: the caller guarantees a null or valid flag.
    !flag.is_null() && unsafe { mem::load(flag, LoadOrder::Relaxed, Scope::Sys) } != 0
}

/// Loop state of one bounded wait (see the module docs).
#[derive(Debug)]
pub struct Spin {
    polls: u32,
    deadline: u64,
    abort_flag: *const u32,
}

impl Spin {
    /// Starts a wait that gives up after `timeout_ns` nanoseconds ([`NO_TIMEOUT`] for never)
    /// or when `*abort_flag` becomes non-zero (`abort_flag` may be null: never aborted).
    ///
    /// # Safety
    /// - `abort_flag` is null or valid as in [`aborted`] for as long as the `Spin` is used.
    #[inline(always)]
    pub unsafe fn new(abort_flag: *const u32, timeout_ns: u64) -> Spin {
        arch::wait_begins();
        let deadline = if timeout_ns == NO_TIMEOUT {
            NO_TIMEOUT
        } else {
            arch::globaltimer().saturating_add(timeout_ns)
        };
        Spin {
            polls: 0,
            deadline,
            abort_flag,
        }
    }

    /// Records one failed poll; `Err` when the wait must give up.
    #[inline(always)]
    pub fn check(&mut self) -> Result<(), WaitError> {
        let n = self.polls;
        self.polls = n.wrapping_add(1);
        arch::spin_hint();
        if (n % ABORT_POLL_INTERVAL == ABORT_POLL_INTERVAL - 1 || ABORT_EVERY_POLL)
            // SAFETY: `new`'s caller guaranteed the flag.
            && unsafe { aborted(self.abort_flag) }
        {
            return Err(WaitError::Aborted);
        }
        if self.deadline != NO_TIMEOUT
            && n % TIMER_POLL_INTERVAL == TIMER_POLL_INTERVAL - 1
            && arch::globaltimer() >= self.deadline
        {
            return Err(WaitError::Timeout);
        }
        Ok(())
    }

    /// Polls `ready` until it returns true (`Ok`) or the wait gives up.
    #[inline(always)]
    pub fn until(&mut self, mut ready: impl FnMut() -> bool) -> Result<(), WaitError> {
        loop {
            if ready() {
                return Ok(());
            }
            self.check()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_raised_while_waiting_stops_the_wait_within_milliseconds() {
        use core::sync::atomic::{AtomicU32, Ordering};
        let flag = AtomicU32::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                flag.store(1, Ordering::Relaxed);
            });
            let t0 = std::time::Instant::now();
            // SAFETY: the abort flag is `flag`, alive for the whole scope.
            let mut spin = unsafe { Spin::new(flag.as_ptr(), NO_TIMEOUT) };
            assert_eq!(spin.until(|| false), Err(WaitError::Aborted));
            let took = t0.elapsed();
            assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        });
    }

    #[test]
    fn a_raised_abort_flag_stops_the_first_failed_poll() {
        let flag = 1u32;
        // SAFETY: the abort flag is `flag`, alive for the whole test.
        let mut s = unsafe { Spin::new(&raw const flag, NO_TIMEOUT) };
        assert_eq!(s.until(|| false), Err(WaitError::Aborted));
        // SAFETY: as above.
        let mut ok = unsafe { Spin::new(&raw const flag, NO_TIMEOUT) };
        assert_eq!(ok.until(|| true), Ok(()));
    }

    #[test]
    fn a_deadline_ends_a_wait_that_never_succeeds() {
        // Taken before the deadline is set: the wait may end 2 ms after `Spin::new`, which is
        // less than 2 ms after any later instant.
        let t0 = std::time::Instant::now();
        // SAFETY: no abort flag (null).
        let mut s = unsafe { Spin::new(core::ptr::null(), 2_000_000) };
        assert_eq!(s.until(|| false), Err(WaitError::Timeout));
        assert!(t0.elapsed() >= std::time::Duration::from_millis(2));
        assert_eq!(WaitError::result_code(Err(WaitError::Timeout)), 1);
        assert_eq!(WaitError::result_code(Ok(())), 0);
    }
}
