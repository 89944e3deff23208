//! Signals: the launcher's SIGINT/SIGTERM handler, which only records the signal for the
//! supervision loop ([`super::supervise`]) to act on, and sending a signal to the process group
//! of every rank still running.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::{Error, Result};

/// The signal last received by the launcher (0 = none), set by the signal handler.
pub(crate) static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn remember_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

pub(crate) fn install_signal_handlers() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is given a zero-initialised struct (a valid `sigaction` value)
        // whose handler is an `extern "C" fn(c_int)` that only performs an atomic store, which
        // is async-signal-safe; the old-action pointer may be null.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = remember_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::Io {
                what: format!("installing the handler for signal {sig}"),
                source: io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Sends `sig` to the process group of every rank marked in `running` (the group a rank leads
/// outlives the rank while processes it started remain in it).
pub(crate) fn signal_ranks(pids: &[i32], running: &[bool], sig: libc::c_int) {
    for (&pid, _) in pids.iter().zip(running).filter(|(_, r)| **r) {
        // SAFETY: `kill` has no memory-safety preconditions; a negative pid addresses the
        // process group that the rank leads (it was started with `process_group(0)`).
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}
