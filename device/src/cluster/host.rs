//! The host backend: the calling thread's emulated cluster ([`crate::emu`]), or a cluster of
//! one block outside an emulated launch. The barrier word's layout is the emulator's own
//! (the GPU's is opaque): phase parity in bit 63, the arrival count per phase in bits 42..63,
//! pending arrivals in bits 21..42, and the transaction count (bytes announced minus bytes
//! landed, two's complement) in bits 0..21.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `cluster` that calls it, documented in `cluster/mod.rs`.

use crate::emu;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering as AtomicOrdering};

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
        match a.compare_exchange_weak(cur, next, AtomicOrdering::AcqRel, AtomicOrdering::Acquire) {
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
