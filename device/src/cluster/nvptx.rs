//! The GPU backend.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `cluster` that calls it, documented in `cluster/mod.rs`.

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
