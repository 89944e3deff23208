//! The CPU emulator: runs a `#[kernel]` function over a grid of blocks of threads, on the
//! host, with one OS thread per GPU thread (host only).
//!
//! ```ignore
//! use symcomm_device::emu::Launch;
//! // 4 blocks of 1024 threads. Kernel arguments are usually raw pointers, which are not
//! // `Sync`: `run_unsync` takes such a closure (unsafe: it runs on many threads at once).
//! unsafe { Launch::new(4, 1024).run_unsync(|| vector_add(a, b, c, n)) }?;
//! // A 2-D grid of 256-thread blocks with 4 KiB of dynamic shared memory, `Sync` closure:
//! Launch::new((2, 2), 256).shared(4096).run(|| histogram(&bins))?;
//! ```
//!
//! # What a launch does
//! - Blocks are placed on `resident` **slots** (default: as many blocks as fit in
//!   [`DEFAULT_RESIDENT_THREADS`] threads, at least one; [`Launch::resident_blocks`] sets it).
//!   Each slot owns one OS thread per thread of a block (stack [`DEFAULT_STACK_SIZE`],
//!   [`Launch::stack_size`]) and runs blocks `slot, slot + resident, ...` one after the other;
//!   so up to `resident` blocks run concurrently, like blocks resident on SMs. Blocks that
//!   wait for each other through memory must be resident together (as on a GPU, where that
//!   is outside the CUDA programming model anyway); blocks of lower index always start first.
//! - A launch whose resident blocks need more OS threads or memory maps than the process may
//!   still create (about 4 maps per thread against `vm.max_map_count`; threads against
//!   `kernel.threads-max` and `RLIMIT_NPROC`; counting what is in use, what concurrent
//!   launches reserved, and headroom) is refused with [`EmuError::HostLimit`] before any of its
//!   threads starts, instead of std aborting the process when a thread cannot map its signal
//!   stack; the error names the limit, the numbers, and the knobs to turn (threads per block,
//!   [`Launch::resident_blocks`], fewer concurrent launches).
//! - Inside a block: thread/block indices and extents, `sync_threads` and its `_count`/`_or`
//!   forms, named barriers (`bar.sync`/`bar.arrive id, n`), warp shuffles (idx, up, down, xor;
//!   32 and 64 bit), votes, ballot, `sync_warp`, lane masks and `activemask` behave as on the
//!   GPU. Warps are threads `32 w .. 32 w + 31` in linear order (`x` fastest).
//! - Shared memory: every block gets its own **zeroed** copy of each
//!   [`shared_array!`](crate::shared_array) (one per name, as in the PTX module) and of the
//!   launch's dynamic shared memory, zeroed again before each block of the slot runs.
//! - **Clusters** ([`Launch::cluster`], 1-D along `x`): `resident` is rounded down to whole
//!   clusters (at least one), so the blocks of a cluster are resident together, in
//!   consecutive slots (each slot starts its block once it finished its previous one);
//!   [`cluster::rank`](crate::cluster::rank) is the linear block index modulo the cluster
//!   size. The cluster barrier (`cluster::arrive` / `wait`, release / acquire) is
//!   exit-aware as on the GPU: a generation completes once every thread of the cluster that
//!   has not exited has arrived, and a thread that exits with an arrival it did not wait for
//!   leaves the barrier. `cluster::map` gives the same [`shared_array!`](crate::shared_array)
//!   (name and offset) or dynamic shared memory offset in the peer block's slot, allocating
//!   the peer's copy of a static array if the peer has not used it yet. Shared memory is
//!   zeroed when a block starts: write into a peer only after a cluster barrier that it
//!   arrived at after it started, and only while it still waits for the data (the lifetime
//!   rule of [`crate::cluster`]). `store_async_u32` checks the rule's hard half: its target
//!   must be the block that belongs to the writer's cluster and must not have exited (a
//!   block has exited once all its threads returned), or the launch fails; plain stores
//!   through a `cluster::map` address are not checked. `Mbarrier` operations are atomic
//!   read-modify-writes of the barrier word (host backend of `crate::cluster`); using a
//!   barrier before `init`, an `init` count outside 1 to 2²⁰ − 1 and more arrivals in a
//!   phase than its count fail the launch.
//! - `%globaltimer` / `clock64` read one process-wide nanosecond clock, so timed waits expire
//!   in real time and are comparable across blocks and concurrent launches; `nanosleep` sleeps.
//! - Memory: the `mem` host backend maps every order to an equal or stronger
//!   `core::sync::atomic` order (weak and volatile accesses to relaxed atomics; scopes
//!   vanish: a CTA-scope access is as strong as a system-scope one); a 16-byte access is two
//!   8-byte atomic accesses, each 8-byte half one unit, as the LL protocol assumes of the GPU.
//! - A **rank** is a launch: several launches (one per host thread, e.g. `std::thread::scope`)
//!   run concurrently in one process and synchronise through plain host memory, which is how
//!   a multi-rank kernel is emulated ([`FlatVa`] lays such ranks' memory out as the host
//!   runtime does, without it). Multimem ops act on every copy of a multicast range
//!   registered in [`multicast`] (the emulated host runtime does that for the LSA team), and
//!   on the address itself otherwise.
//!
//! # Errors instead of crashes and hangs
//! [`Launch::run`] returns an [`EmuError`] naming the block and thread when a kernel thread
//! panics or calls `trap()`, when a barrier or warp collective is misused (caller not in the
//! lane mask, lanes meeting in different collectives, a mask naming exited lanes, a thread
//! leaving while its warp waits for it in a collective, a named barrier used with two counts,
//! `cluster::arrive` twice without a `cluster::wait`, a `wait` without an `arrive`,
//! `cluster::map` to a rank outside the cluster or of an address outside shared memory,
//! `store_async_u32` into a block that has not started or has exited, or signalling a
//! barrier of another block, the `Mbarrier` misuse above),
//! and when a block deadlocks: every live thread of a block blocked in barriers/collectives
//! that cannot complete (e.g. `sync_threads` that half the block skipped). After the first
//! error every other thread of the launch stops at its next emulated primitive (barrier,
//! collective, spin-wait poll, timer read). A watchdog ([`Launch::timeout`], default
//! [`DEFAULT_TIMEOUT`]) fails launches that run too long, e.g. an untimed wait for a peer
//! that never comes, or a cluster barrier that a block of the cluster never reaches (a stuck
//! cluster barrier is not detected as a deadlock: it ends by the watchdog, or as soon as
//! another thread of the launch fails). A thread looping forever *without reaching such a primitive or a memory
//! load* cannot be stopped: such a launch still hangs.
//!
//! Memory loads are half such a primitive: every `mem` load (and so `ll::try_load`) stops
//! its thread once the launch has failed, so a kernel that spins on a bare load
//! (`while mem::load(flag, ..) == 0 {}`) ends with the launch's error (the watchdog's, if
//! nothing else fails). But a load never yields the CPU, and such a spin keeps a core busy
//! while the threads it waits for need it (there are far more emulated threads than
//! cores). Write spin loops with [`wait::Spin`](crate::wait::Spin)
//! ([`Spin::until`](crate::wait::Spin::until), or [`Spin::check`](crate::wait::Spin::check)
//! after each failed poll), as every wait of this crate does: each failed poll yields to
//! the emulator (and on the GPU the loop is bounded by the abort flag and an optional
//! deadline).
//!
//! # What emulation checks, and what it cannot
//! It checks **logic**: indexing (every element checked by the tests), the use of shared
//! memory and barriers within a block, warp-collective masks, the barrier and LL protocols
//! between ranks (epochs, inbox slots, timeouts, abort flag), and that nothing waits forever.
//! Races between threads are real (OS threads run concurrently), so a missing barrier usually
//! produces wrong results, but not deterministically.
//!
//! It cannot find: **GPU memory-ordering bugs** (host atomics are at least as strong as the
//! requested order, scopes are ignored, and x86 is TSO: a missing fence or a relaxed access
//! that needed acquire/release works here and fails on the GPU); races that need a GPU
//! schedule (warps in lockstep, thousands of threads truly in parallel); anything about
//! performance (an OS-thread barrier costs microseconds, a warp's nanoseconds); PTX-level issues
//! (`.aligned` barrier divergence inside a warp, register or shared-memory limits beyond the
//! launch-configuration checks). The GPU stress tests cover those.
//!
//! # Partial masks
//! Collectives with a partial mask rendezvous exactly the lanes of the mask; lanes of the
//! same warp may run collectives with disjoint masks concurrently. A full mask in a partial
//! last warp (block size not a multiple of 32) means the lanes that exist. A shuffle whose
//! source lane is outside the mask (undefined on the GPU) returns the caller's own value.
//! `activemask` is a soft rendezvous: the caller waits until every other live lane of its
//! warp is either in `activemask` too or blocked elsewhere (barrier, collective), and gets
//! the lanes that met there. Converged code sees the whole warp, lanes that returned early
//! are left out, as on the GPU; a lane spinning on memory meanwhile delays the answer.

mod block;
mod cluster;
pub(crate) mod ctx;
mod error;
mod flat;
mod launch;
mod limits;
pub mod multicast;
pub mod registry;
mod slot;
mod state;
pub(crate) mod switch;

use crate::geometry::{Dim3, ShflMode, VoteMode};
use slot::WarpOp;

pub use error::EmuError;
pub use flat::FlatVa;
pub use launch::{
    DEFAULT_RESIDENT_THREADS, DEFAULT_STACK_SIZE, DEFAULT_TIMEOUT, Launch, MAX_CLUSTER_BLOCKS,
    MAX_DYNAMIC_SHARED_BYTES,
};

impl From<u32> for Dim3 {
    /// A 1-D extent `(x, 1, 1)`.
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    /// A 2-D extent `(x, y, 1)`.
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

/// Emulates one launch of `grid × block` threads with `dynamic_shared_bytes` of dynamic shared
/// memory: `Launch::new(grid, block).shared(dynamic_shared_bytes).run(kernel)`.
///
/// # Errors
/// See [`EmuError`].
pub fn launch<F: Fn() + Sync>(
    grid: impl Into<Dim3>,
    block: impl Into<Dim3>,
    dynamic_shared_bytes: u32,
    kernel: F,
) -> Result<(), EmuError> {
    Launch::new(grid, block)
        .shared(dynamic_shared_bytes)
        .run(kernel)
}

// ---------------------------------------------------------------------------------------
// Hooks for the host backends: `None` (or `false`) outside an emulated launch.

/// `(tid, ctaid, ntid, nctaid)`.
#[inline]
pub(crate) fn geometry() -> Option<(Dim3, Dim3, Dim3, Dim3)> {
    ctx::with(|c| (c.tid, c.block_idx.get(), c.block_dim, c.grid_dim))
}

/// `%laneid`.
#[inline]
pub(crate) fn lane() -> Option<u32> {
    ctx::with(|c| c.lane)
}

/// `activemask`.
pub(crate) fn active_mask() -> Option<u32> {
    ctx::with(|c| c.slot.active_mask(c))
}

/// Block barrier `id` over `n` threads (0 = block): `(or, popcount)` of `pred`.
pub(crate) fn barrier(id: u32, n: u32, pred: bool, arrive_only: bool) -> Option<(bool, u32)> {
    ctx::with(|c| c.slot.barrier(c, id, n, pred, arrive_only))
}

/// `bar.warp.sync mask`; true if emulated.
pub(crate) fn sync_warp(mask: u32) -> bool {
    ctx::with(|c| c.slot.warp(c, WarpOp::Sync, mask, 0, 0)).is_some()
}

/// `shfl.sync` of one word.
pub(crate) fn shfl(mode: ShflMode, mask: u32, v: u32, b: u32) -> Option<u32> {
    ctx::with(|c| c.slot.warp(c, WarpOp::Shfl(mode), mask, v, b))
}

/// `vote.sync.{all,any,uni}`.
pub(crate) fn vote(mode: VoteMode, mask: u32, pred: bool) -> Option<bool> {
    ctx::with(|c| c.slot.warp(c, WarpOp::Vote(mode), mask, u32::from(pred), 0) != 0)
}

/// `vote.sync.ballot`.
pub(crate) fn ballot(mask: u32, pred: bool) -> Option<u32> {
    ctx::with(|c| c.slot.warp(c, WarpOp::Ballot, mask, u32::from(pred), 0))
}

/// The block's dynamic shared memory and the launch's size of it.
pub(crate) fn dynamic_shared() -> Option<(*mut u8, u32)> {
    ctx::with(|c| c.slot.dynamic_shared())
}

/// The block's copy of static shared array `name`.
pub(crate) fn static_shared(name: &'static str, size: usize, align: usize) -> Option<*mut u8> {
    ctx::with(|c| c.slot.static_shared(c, name, size, align))
}

/// `(%cluster_ctarank, %cluster_nctarank)`: the calling block's rank in its cluster and the
/// cluster's size (1 without clusters).
pub(crate) fn cluster_geometry() -> Option<(u32, u32)> {
    ctx::with(cluster::geometry)
}

/// `barrier.cluster.arrive.release` (a no-op outside an emulated launch).
pub(crate) fn cluster_arrive() {
    ctx::with(cluster::arrive);
}

/// `barrier.cluster.wait.acquire` (a no-op outside an emulated launch).
pub(crate) fn cluster_wait() {
    ctx::with(cluster::wait);
}

/// `mapa.shared::cluster`: `p`, in the calling block's shared memory, in the block of cluster
/// rank `rank` (misuse if `rank` is not in the cluster or `p` not in shared memory).
pub(crate) fn cluster_map(p: *mut u8, rank: u32) -> Option<*mut u8> {
    ctx::with(|c| cluster::map(c, p, rank))
}

/// `st.async … mbarrier::complete_tx` to `dst`, signalling `bar`, both in a block of the
/// calling thread's cluster: runs `land` (the store and its completion) if that block is
/// running, else fails the launch; `None` outside an emulated launch (`land` not run).
pub(crate) fn cluster_store_async(
    dst: *mut u8,
    bar: *mut u8,
    land: &dyn Fn() -> Option<&'static str>,
) -> Option<()> {
    ctx::with(|c| cluster::store_async(c, dst, bar, land))
}

/// Reports a misuse of a cluster primitive (`detail`) by the calling emulated thread, which
/// stops; nothing outside an emulated launch.
pub(crate) fn cluster_misuse(detail: &str) {
    ctx::with(|c| block::misuse(c, detail.into()));
}

/// A memory load by the calling thread: stops it if its launch failed (so that a spin on a
/// bare `mem::load` ends with the launch's error instead of hanging). Unlike [`poll`] it
/// never yields: most loads are not polls.
#[inline]
pub(crate) fn on_load() {
    ctx::with(|c| {
        if c.launch.failed() && !std::thread::panicking() {
            ctx::cancel();
        }
    });
}

/// A new wait of the calling thread: its poll back-off starts again from yielding.
#[inline]
pub(crate) fn reset_backoff() {
    ctx::with(|c| c.polls.set(0));
}

/// A spin-loop poll, timer read or sleep: stops the thread if the launch failed, and yields.
#[inline]
pub(crate) fn poll() {
    ctx::with(ctx::poll);
}

/// `trap()`: true if emulated (then it does not return).
pub(crate) fn trap() {
    if ctx::active() {
        ctx::trap()
    }
}

#[cfg(test)]
mod tests;
