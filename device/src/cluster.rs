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

#[cfg(not(target_arch = "nvptx64"))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering as AtomicOrdering};

use crate::wait::{Spin, WaitError};

/// Most blocks in a cluster that every sm_90 GPU can launch (the portable limit).
pub const MAX_PORTABLE_SIZE: u32 = 8;

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

/// The GPU backend.
#[cfg(target_arch = "nvptx64")]
mod backend {
    use core::arch::asm;

    /// The `.shared::cta` address of a generic pointer into shared memory.
    #[inline(always)]
    fn shared_addr(p: *mut u8) -> u32 {
        let a: u64;
        // SAFETY: address arithmetic only.
        unsafe {
            asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p as u64,
                 options(pure, nomem, nostack))
        };
        a as u32
    }

    #[inline(always)]
    pub fn rank() -> u32 {
        let v: u32;
        // SAFETY: reading a special register.
        unsafe {
            asm!("mov.u32 {v}, %cluster_ctarank;", v = out(reg32) v,
                 options(pure, nomem, nostack))
        };
        v
    }

    #[inline(always)]
    pub fn size() -> u32 {
        let v: u32;
        // SAFETY: reading a special register.
        unsafe {
            asm!("mov.u32 {v}, %cluster_nctarank;", v = out(reg32) v,
                 options(pure, nomem, nostack))
        };
        v
    }

    #[inline(always)]
    pub fn arrive() {
        // SAFETY: a barrier instruction; its use is the caller's contract.
        unsafe { asm!("barrier.cluster.arrive.release.aligned;", options(nostack)) }
    }

    #[inline(always)]
    pub fn wait() {
        // SAFETY: as above.
        unsafe { asm!("barrier.cluster.wait.acquire.aligned;", options(nostack)) }
    }

    #[inline(always)]
    pub fn fence_init() {
        // SAFETY: a fence.
        unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) }
    }

    #[inline(always)]
    pub unsafe fn map(p: *mut u8, rank: u32) -> u64 {
        let r: u32;
        // SAFETY: address translation only (the caller's contract: shared memory, valid rank).
        unsafe {
            asm!("mapa.shared::cluster.u32 {r}, {a}, {k};", r = out(reg32) r,
                 a = in(reg32) shared_addr(p), k = in(reg32) rank, options(pure, nomem, nostack))
        };
        u64::from(r)
    }

    #[inline(always)]
    pub unsafe fn store_async_u32(dst: u64, v: u32, bar: u64) {
        // SAFETY: the caller's contract (mapped addresses of a running block of the cluster).
        unsafe {
            asm!("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [{d}], {v}, [{b}];",
                 d = in(reg32) dst as u32, v = in(reg32) v, b = in(reg32) bar as u32,
                 options(nostack))
        }
    }

    #[inline(always)]
    pub unsafe fn mbar_init(word: *mut u64, count: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            asm!("mbarrier.init.shared::cta.b64 [{w}], {c};", w = in(reg32) shared_addr(word.cast()),
                 c = in(reg32) count, options(nostack))
        }
    }

    #[inline(always)]
    pub unsafe fn mbar_arrive_expect_tx(word: *mut u64, bytes: u32) {
        // SAFETY: the caller's contract.
        unsafe {
            asm!("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [{w}], {b};",
                 w = in(reg32) shared_addr(word.cast()), b = in(reg32) bytes, options(nostack))
        }
    }

    #[inline(always)]
    pub unsafe fn mbar_try_wait_parity(word: *mut u64, parity: u32) -> bool {
        let done: u32;
        // SAFETY: the caller's contract.
        unsafe {
            asm!(
                "{{ .reg .pred p;",
                "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [{w}], {k};",
                "selp.u32 {d}, 1, 0, p; }}",
                d = out(reg32) done, w = in(reg32) shared_addr(word.cast()), k = in(reg32) parity,
                options(nostack)
            )
        };
        done != 0
    }
}

/// The host backend: the calling thread's emulated cluster ([`crate::emu`]), or a cluster of
/// one block outside an emulated launch. The barrier word's layout is the emulator's own
/// (the GPU's is opaque): phase parity in bit 63, the arrival count per phase in bits 42..63,
/// pending arrivals in bits 21..42, and the transaction count (bytes announced minus bytes
/// landed, two's complement) in bits 0..21.
#[cfg(not(target_arch = "nvptx64"))]
mod backend {
    use super::{AtomicOrdering, AtomicU32, AtomicU64};
    use crate::emu;

    const FIELD: u64 = (1 << 21) - 1;

    fn count(w: u64) -> u64 {
        (w >> 42) & FIELD
    }
    fn pending(w: u64) -> u64 {
        (w >> 21) & FIELD
    }
    fn tx(w: u64) -> i64 {
        // Sign-extend the 21-bit field.
        (((w & FIELD) << 43) as i64) >> 43
    }
    fn pack(phase: u64, count: u64, pending: u64, tx: i64) -> u64 {
        phase << 63 | count << 42 | pending << 21 | (tx as u64 & FIELD)
    }

    /// Applies `arrivals` arrivals and `dtx` to the transaction count, completing the phase
    /// when nothing is left. `Some(why)`: a misuse the GPU would not survive (the barrier was
    /// never initialised, or more arrivals than the phase expects); the update is made
    /// anyway, the caller reports it.
    ///
    /// # Safety
    /// `word` is a live barrier word.
    unsafe fn update(word: *mut u64, arrivals: u64, dtx: i64) -> Option<&'static str> {
        // SAFETY: the caller's word (8-byte aligned shared memory, accessed atomically by
        // every user).
        let a = unsafe { AtomicU64::from_ptr(word) };
        let mut cur = a.load(AtomicOrdering::Acquire);
        loop {
            let (phase, c) = (cur >> 63, count(cur));
            if c == 0 {
                return Some("the mbarrier was not initialised (Mbarrier::init)");
            }
            let extra = arrivals > pending(cur);
            let p = pending(cur).saturating_sub(arrivals);
            let t = tx(cur) + dtx;
            let next = if p == 0 && t == 0 {
                pack(phase ^ 1, c, c, 0)
            } else {
                pack(phase, c, p, t)
            };
            match a.compare_exchange_weak(
                cur,
                next,
                AtomicOrdering::AcqRel,
                AtomicOrdering::Acquire,
            ) {
                Ok(_) => return extra.then_some("more arrivals than the mbarrier's phase expects"),
                Err(seen) => cur = seen,
            }
        }
    }

    pub fn rank() -> u32 {
        emu::cluster_geometry().map_or(0, |g| g.0)
    }
    pub fn size() -> u32 {
        emu::cluster_geometry().map_or(1, |g| g.1)
    }
    pub fn arrive() {
        emu::cluster_arrive();
    }
    pub fn wait() {
        emu::cluster_wait();
    }
    pub fn fence_init() {
        core::sync::atomic::fence(AtomicOrdering::Release);
    }
    pub unsafe fn map(p: *mut u8, rank: u32) -> u64 {
        match emu::cluster_map(p, rank) {
            Some(q) => q as u64,
            None if rank == 0 => p as u64,
            None => panic!("cluster::map: rank {rank} outside a cluster of one block"),
        }
    }
    pub unsafe fn store_async_u32(dst: u64, v: u32, bar: u64) {
        let land = || {
            // SAFETY: the caller's contract (a mapped, aligned word of a running block; the
            // emulator checks that the block runs and keeps it running meanwhile).
            unsafe { AtomicU32::from_ptr(dst as *mut u32) }.store(v, AtomicOrdering::Relaxed);
            // SAFETY: as above; the AcqRel update releases the store to the waiter.
            unsafe { update(bar as *mut u64, 0, -4) }
        };
        if emu::cluster_store_async(dst as *mut u8, bar as *mut u8, &land).is_none() {
            // A cluster of one block: nothing to check.
            let _ = land();
        }
    }
    pub unsafe fn mbar_init(word: *mut u64, count: u32) {
        if count == 0 || count >= 1 << 20 {
            emu::cluster_misuse("Mbarrier::init with a count outside 1 to 2^20 - 1");
        }
        let c = u64::from(count) & FIELD;
        // SAFETY: the caller's word.
        unsafe { AtomicU64::from_ptr(word) }.store(pack(0, c, c, 0), AtomicOrdering::Release);
    }
    pub unsafe fn mbar_arrive_expect_tx(word: *mut u64, bytes: u32) {
        if bytes >= 1 << 20 {
            emu::cluster_misuse("Mbarrier::arrive_expect_tx with 2^20 bytes or more");
        }
        // SAFETY: forwarded.
        if let Some(why) = unsafe { update(word, 1, i64::from(bytes)) } {
            emu::cluster_misuse(why);
        }
    }
    pub unsafe fn mbar_try_wait_parity(word: *mut u64, parity: u32) -> bool {
        // SAFETY: the caller's word.
        let w = unsafe { AtomicU64::from_ptr(word) }.load(AtomicOrdering::Acquire);
        if count(w) == 0 {
            emu::cluster_misuse("Mbarrier::test_parity on an mbarrier that was not initialised");
        }
        (w >> 63) as u32 != parity
    }
}
