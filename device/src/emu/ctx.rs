//! The per-thread emulation context and the hooks the host backends call.
//!
//! Every emulated GPU thread is an OS thread that installs one [`ThreadCtx`] (on its own
//! stack) in a thread-local pointer for as long as it runs kernels. The host backends of
//! `arch` (and `wait`, through `arch::spin_hint`) ask [`with`] for it: `None` means "not in
//! an emulated launch", and they keep their one-thread behaviour.

use core::cell::{Cell, RefCell};
use core::ptr;
use std::thread;
use std::time::Duration;
use std::vec::Vec;

use super::slot::Slot;
use super::state::LaunchShared;
use crate::geometry::Dim3;

/// What an emulated thread knows about itself.
pub(crate) struct ThreadCtx<'a> {
    /// `%tid`.
    pub tid: Dim3,
    /// Linear index within the block (`x + y * bx + z * bx * by`).
    pub linear: u32,
    /// `linear % 32`.
    pub lane: u32,
    /// `linear / 32`.
    pub warp: u32,
    /// `%ctaid` of the block the thread currently runs (a worker runs several in turn).
    pub block_idx: Cell<Dim3>,
    /// Linear index of that block (`x + y * gx + z * gx * gy`).
    pub block_linear: Cell<u32>,
    /// Index of the slot in the launch (its cluster group is `slot_index / cluster_size`).
    pub slot_index: u32,
    /// The cluster-barrier generation of the thread's last `cluster::arrive` not yet waited
    /// for.
    pub cluster_arrived: Cell<Option<u64>>,
    /// `%ntid`.
    pub block_dim: Dim3,
    /// `%nctaid`.
    pub grid_dim: Dim3,
    /// The block slot ("SM") this worker belongs to.
    pub slot: &'a Slot,
    /// The launch.
    pub launch: &'a LaunchShared,
    /// Static shared arrays already looked up by this thread: name → block buffer.
    pub smem_cache: RefCell<Vec<(&'static str, *mut u8)>>,
    /// Spin polls since the thread last passed a rendezvous (drives the back-off of [`poll`]).
    pub polls: Cell<u32>,
}

std::thread_local! {
    static CURRENT: Cell<*const ThreadCtx<'static>> = const { Cell::new(ptr::null()) };
}

/// Uninstalls the context when dropped.
pub(crate) struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(ptr::null()));
    }
}

/// Makes `ctx` the calling thread's context until the guard is dropped.
///
/// The guard must be dropped before `ctx` (declare it after `ctx`).
pub(crate) fn install(ctx: &ThreadCtx<'_>) -> Installed {
    // Lifetime erasure only: `with` hands the context out for the duration of a call, and the
    // guard (dropped before `ctx`) uninstalls it.
    let p = ptr::from_ref(ctx).cast::<ThreadCtx<'static>>();
    CURRENT.with(|c| c.set(p));
    Installed(())
}

/// Calls `f` with the calling thread's context, or returns `None` outside an emulated launch.
#[inline]
pub(crate) fn with<R>(f: impl for<'x> FnOnce(&'x ThreadCtx<'x>) -> R) -> Option<R> {
    let p = CURRENT.try_with(|c| c.get()).unwrap_or(ptr::null());
    if p.is_null() {
        None
    } else {
        // SAFETY: a non-null pointer was installed by `install` from a live `ThreadCtx` on
        // this thread's stack, and is reset by the guard before that context goes away.
        Some(f(unsafe { &*p }))
    }
}

/// True inside an emulated launch.
pub(crate) fn active() -> bool {
    with(|_| ()).is_some()
}

/// The unwind payload that stops an emulated thread after the launch failed elsewhere.
pub(crate) struct Cancelled;

/// The unwind payload of `trap()` in an emulated thread.
pub(crate) struct Trapped;

/// Unwinds the calling emulated thread without running the panic hook (no message).
pub(crate) fn cancel() -> ! {
    std::panic::resume_unwind(std::boxed::Box::new(Cancelled))
}

/// `trap()` in an emulated thread: unwinds to the launcher, which reports it.
pub(crate) fn trap() -> ! {
    std::panic::resume_unwind(std::boxed::Box::new(Trapped))
}

/// Called by every poll of a spin loop (and by timer reads and `nanosleep`): stops the thread
/// if the launch failed, and gives the CPU away so that the threads being waited for run
/// (there are far more emulated threads than cores): the first polls yield, later ones sleep
/// longer and longer, up to [`MAX_BACKOFF`]. Passing a block or warp rendezvous resets the
/// back-off.
pub(crate) fn poll(c: &ThreadCtx<'_>) {
    if c.launch.failed() {
        cancel();
    }
    let n = c.polls.get().saturating_add(1);
    c.polls.set(n);
    // A launch of a few threads is latency-bound (a ping-pong, a proxy round trip), not a
    // crowd that must leave the cores to the threads it waits for: it yields longer before
    // it sleeps.
    let threads = [
        c.block_dim.x,
        c.block_dim.y,
        c.block_dim.z,
        c.grid_dim.x,
        c.grid_dim.y,
    ]
    .iter()
    .fold(1u64, |a, &d| a.saturating_mul(u64::from(d)));
    let yields = if threads <= FEW_THREADS {
        FEW_THREAD_YIELDS
    } else {
        8
    };
    if n < yields {
        thread::yield_now();
    } else {
        let us = 20 * u64::from(n + 1 - yields);
        thread::sleep(Duration::from_micros(us).min(MAX_BACKOFF));
    }
}

/// Launches of at most this many threads yield [`FEW_THREAD_YIELDS`] times before they sleep.
const FEW_THREADS: u64 = 4;
/// Yields of a few-thread launch's wait before it sleeps (some tens of microseconds).
const FEW_THREAD_YIELDS: u32 = 256;

/// The longest sleep of a polling thread: long enough that hundreds of spinning emulated
/// threads leave the cores to the threads they wait for, short against the timeouts.
const MAX_BACKOFF: Duration = Duration::from_millis(2);
