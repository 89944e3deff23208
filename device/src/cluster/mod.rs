//! Thread block clusters (sm_90): blocks launched together as one cluster run at the same
//! time on one GPC, can write each other's shared memory ("distributed shared memory") and
//! meet at a cluster-wide barrier. symcomm uses them where the blocks of one unit of work
//! must agree on a value quickly, e.g. the blocks of one token row agreeing on its sum of
//! squares: a value pushed into a peer block's shared memory with a completion signal
//! arrives in a few hundred nanoseconds, where a flag in global memory costs a round trip
//! through L2 per poll.
//!
//! Clusters are one-dimensional here: the host launches a grid whose `x` extent is a multiple
//! of the cluster size and sets the cluster size (blocks along `x`) at launch
//! (`symcomm_host::launch::LaunchConfig::with_cluster`). Block `b` is rank `b % size` of
//! cluster `b / size`.
//!
//! The pieces:
//! - [`rank`], [`size`]: where the calling block sits in its cluster;
//! - [`arrive`], [`wait`], [`sync`]: the cluster barrier (every thread of every block of the
//!   cluster takes part);
//! - [`Mbarrier`]: a transaction barrier in a block's shared memory: a phase completes when
//!   the expected arrivals have arrived and as many bytes as were announced have landed;
//! - [`map`] and [`store_async_u32`]: an address in a peer block's shared memory, and a
//!   store into it that, once the data has landed, counts its bytes on that block's
//!   [`Mbarrier`].
//!
//! # Ordering
//! - [`arrive`] has release and [`wait`] acquire semantics at cluster scope: what a thread
//!   wrote before arriving is visible to every thread of the cluster after its wait returns.
//! - A [`store_async_u32`] is a weak store whose completion on the peer's barrier releases
//!   it at cluster scope; [`Mbarrier::test_parity`] (and [`Mbarrier::wait_parity`]) acquire at
//!   cluster scope: once a thread sees the phase complete, the data of every store counted in
//!   that phase is visible to it.
//! - [`Mbarrier::init`] is made visible to the other blocks by [`fence_init`] followed by the
//!   cluster barrier ([`arrive`] on this block, [`wait`] on the block that then signals it).
//!
//! # Lifetime rule
//! A block's shared memory exists only while the block runs. Write into a peer block only
//! after a cluster barrier that the peer arrived at after it started (so it has started),
//! and only while the peer will still wait for that write (so it has not exited): the usual
//! shape is "every block waits for what every other block sends it".

use core::marker::PhantomData;

use crate::wait::{Spin, WaitError};

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(target_arch = "nvptx64")]
mod nvptx;

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

pub use crate::geometry::MAX_PORTABLE_SIZE;

/// The calling block's rank in its cluster (`%cluster_ctarank`; 0 without a cluster launch).
#[inline(always)]
pub fn rank() -> u32 {
    backend::rank()
}

/// Blocks in the calling block's cluster (`%cluster_nctarank`; 1 without a cluster launch).
#[inline(always)]
pub fn size() -> u32 {
    backend::size()
}

/// Arrives at the cluster barrier (`barrier.cluster.arrive.release.aligned`): release at
/// cluster scope. Every thread of the block calls it (together, as with `sync_threads`),
/// and calls [`wait`] before arriving again.
#[inline(always)]
pub fn arrive() {
    backend::arrive()
}

/// Waits until every thread of every block of the cluster has arrived at the cluster barrier
/// since this thread's last wait (`barrier.cluster.wait.acquire.aligned`): acquire at cluster
/// scope. Every thread of the block calls it, each after its own [`arrive`].
#[inline(always)]
pub fn wait() {
    backend::wait()
}

/// [`arrive`] then [`wait`]: a barrier over every thread of the cluster.
#[inline(always)]
pub fn sync() {
    arrive();
    wait();
}

/// Makes this thread's earlier [`Mbarrier::init`]s visible at cluster scope
/// (`fence.mbarrier_init.release.cluster`); the cluster barrier then carries them to the
/// other blocks (see the module docs).
#[inline(always)]
pub fn fence_init() {
    backend::fence_init()
}

/// An address in the shared memory of a block of the caller's cluster (the caller's own
/// included), made by [`map`]: the target of [`store_async_u32`] and the barrier it signals.
pub struct Remote<T> {
    addr: u64,
    _t: PhantomData<*mut T>,
}

impl<T> Clone for Remote<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Remote<T> {}

impl<T> core::fmt::Debug for Remote<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Remote({:#x})", self.addr)
    }
}

/// `p`, a location in the calling block's shared memory, in the copy of block `rank` of the
/// cluster (`mapa.shared::cluster`): the same variable, same offset, in that block.
///
/// # Safety
/// `p` points into this block's shared memory (a `shared_array!` or the dynamic shared
/// memory); `rank < size()`.
#[inline(always)]
pub unsafe fn map<T>(p: *mut T, rank: u32) -> Remote<T> {
    Remote {
        // SAFETY: forwarded.
        addr: unsafe { backend::map(p.cast(), rank) },
        _t: PhantomData,
    }
}

/// Stores `v` at `dst` in a block of the cluster and, once it has landed, completes 4 bytes
/// of transactions on that block's barrier `bar`
/// (`st.async.shared::cluster.mbarrier::complete_tx::bytes.b32`). Ordering: see the module
/// docs (released by the completion, acquired by the waiter on `bar`).
///
/// # Safety
/// `dst` and `bar` map locations of the same block (4-byte aligned `u32`; an initialised
/// [`Mbarrier`] word); that block has started (a cluster barrier since) and waits on `bar`
/// for these bytes in the current phase, announced with [`Mbarrier::arrive_expect_tx`] (before
/// or after this store: the count may run ahead).
#[inline(always)]
pub unsafe fn store_async_u32(dst: Remote<u32>, v: u32, bar: Remote<u64>) {
    // SAFETY: forwarded.
    unsafe { backend::store_async_u32(dst.addr, v, bar.addr) }
}

/// A transaction barrier (`mbarrier`) in the calling block's shared memory: one 8-byte word.
/// A phase completes when `count` arrivals (set by [`init`](Self::init)) have been made
/// and every byte announced in the phase ([`arrive_expect_tx`](Self::arrive_expect_tx)) has
/// landed ([`store_async_u32`]); then the next phase begins, with the same count. Waiters name
/// the phase they wait for by its parity (phase `k` has parity `k % 2`).
#[derive(Debug, Clone, Copy)]
pub struct Mbarrier {
    word: *mut u64,
}

impl Mbarrier {
    /// The barrier in the 8-byte aligned shared word `word`.
    ///
    /// # Safety
    /// `word` points into this block's shared memory, 8-byte aligned, used only as this
    /// barrier while the block runs.
    #[inline(always)]
    pub unsafe fn new(word: *mut u64) -> Mbarrier {
        Mbarrier { word }
    }

    /// Starts the barrier at phase 0 expecting `count` arrivals per phase
    /// (`mbarrier.init.shared::cta.b64`). One thread calls it, before any other use; see
    /// [`fence_init`] for other blocks.
    ///
    /// # Safety
    /// `1 ≤ count < 2²⁰`; nobody uses the barrier concurrently.
    #[inline(always)]
    pub unsafe fn init(self, count: u32) {
        // SAFETY: forwarded.
        unsafe { backend::mbar_init(self.word, count) }
    }

    /// One arrival that also announces `bytes` more bytes of transactions in the current phase
    /// (`mbarrier.arrive.expect_tx.release.cta.shared::cta.b64`).
    ///
    /// # Safety
    /// Initialised; the phase still expects an arrival; `bytes < 2²⁰`.
    #[inline(always)]
    pub unsafe fn arrive_expect_tx(self, bytes: u32) {
        // SAFETY: forwarded.
        unsafe { backend::mbar_arrive_expect_tx(self.word, bytes) }
    }

    /// True once the phase of parity `parity` has completed
    /// (`mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64`, which may also wait a
    /// little in hardware before answering false).
    ///
    /// # Safety
    /// Initialised; the phase asked for is the current one or the one before it.
    #[inline(always)]
    pub unsafe fn test_parity(self, parity: u32) -> bool {
        // SAFETY: forwarded.
        unsafe { backend::mbar_try_wait_parity(self.word, parity & 1) }
    }

    /// Waits (bounded, as [`Spin`]) until the phase of parity `parity` has completed.
    ///
    /// # Safety
    /// As [`test_parity`](Self::test_parity); `abort` is null or a valid global `u32`.
    ///
    /// # Errors
    /// [`WaitError`] on timeout or when the abort flag rises.
    #[inline(always)]
    pub unsafe fn wait_parity(
        self,
        parity: u32,
        abort: *const u32,
        timeout_ns: u64,
    ) -> Result<(), WaitError> {
        // SAFETY: forwarded.
        if unsafe { self.test_parity(parity) } {
            return Ok(());
        }
        // SAFETY: the caller's abort flag.
        let mut spin = unsafe { Spin::new(abort, timeout_ns) };
        loop {
            // SAFETY: forwarded.
            if unsafe { self.test_parity(parity) } {
                return Ok(());
            }
            spin.check()?;
        }
    }

    /// This barrier's word in block `rank` of the cluster, for [`store_async_u32`].
    ///
    /// # Safety
    /// `rank < size()`.
    #[inline(always)]
    pub unsafe fn remote(self, rank: u32) -> Remote<u64> {
        // SAFETY: the word is in this block's shared memory (`new`'s contract).
        unsafe { map(self.word, rank) }
    }
}
