//! The host backend: `core::sync::atomic` with the same or a stronger ordering (no scopes on
//! the host): weak and volatile accesses are relaxed atomics (emulated GPU threads are OS
//! threads, and a racing non-atomic access, `read_volatile` included, would be undefined
//! behaviour in Rust; a relaxed atomic load is not hoisted out of a spin loop either),
//! relaxed/acquire/release/acq_rel map to the same `core` order at every scope, 16-byte
//! vector accesses are two 8-byte atomics (each naturally aligned 8-byte half single-copy
//! atomic, what the LL protocol assumes of the GPU), fences are `fence(AcqRel)` /
//! `fence(SeqCst)`.
//!
//! In an emulated launch a load stops its thread once the launch has failed, but never
//! yields (see the `emu` module docs): spin with [`Spin`](crate::wait::Spin), which does.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `mem` that calls it, documented in `mem/mod.rs`.
//!
//! Racing atomics of different sizes on the same bytes are undefined behaviour in Rust when
//! one of them writes (on the GPU such a race is merely unordered): a 16-byte access (two
//! 8-byte atomics here) must not race with a 4-byte access to the same line, e.g. an LL line
//! is written and polled only with 16-byte accesses.

use super::{LoadOrder, Ordering, Scope, StoreOrder};
use core::sync::atomic::{self as a, AtomicU32, AtomicU64};

fn rmw(o: Ordering) -> a::Ordering {
    match o {
        Ordering::Relaxed => a::Ordering::Relaxed,
        Ordering::Acquire => a::Ordering::Acquire,
        Ordering::Release => a::Ordering::Release,
        Ordering::AcqRel => a::Ordering::AcqRel,
    }
}
fn cas_failure(o: Ordering) -> a::Ordering {
    if o.has_acquire() {
        a::Ordering::Acquire
    } else {
        a::Ordering::Relaxed
    }
}

macro_rules! host_word {
    ($ld:ident, $st:ident, $cas:ident, $exch:ident, $nc:ident, $t:ty, $at:ty) => {
        pub unsafe fn $ld(p: *const $t, o: LoadOrder, _s: Scope) -> $t {
            crate::emu::on_load();
            // SAFETY: the caller guarantees an aligned, valid `p`.
            unsafe {
                match o {
                    LoadOrder::Weak | LoadOrder::Relaxed | LoadOrder::Volatile => {
                        <$at>::from_ptr(p.cast_mut()).load(a::Ordering::Relaxed)
                    }
                    LoadOrder::Acquire => <$at>::from_ptr(p.cast_mut()).load(a::Ordering::Acquire),
                }
            }
        }
        pub unsafe fn $st(p: *mut $t, v: $t, o: StoreOrder, _s: Scope) {
            // SAFETY: the caller guarantees an aligned, valid `p`.
            unsafe {
                match o {
                    StoreOrder::Weak | StoreOrder::Relaxed | StoreOrder::Volatile => {
                        <$at>::from_ptr(p).store(v, a::Ordering::Relaxed)
                    }
                    StoreOrder::Release => <$at>::from_ptr(p).store(v, a::Ordering::Release),
                }
            }
        }
        pub unsafe fn $cas(p: *mut $t, c: $t, n: $t, o: Ordering, _s: Scope) -> $t {
            // SAFETY: the caller guarantees an aligned, valid `p`.
            let at = unsafe { <$at>::from_ptr(p) };
            match at.compare_exchange(c, n, rmw(o), cas_failure(o)) {
                Ok(old) | Err(old) => old,
            }
        }
        pub unsafe fn $exch(p: *mut $t, v: $t, o: Ordering, _s: Scope) -> $t {
            // SAFETY: the caller guarantees an aligned, valid `p`.
            unsafe { <$at>::from_ptr(p) }.swap(v, rmw(o))
        }
        pub unsafe fn $nc(p: *const $t) -> $t {
            // SAFETY: the caller guarantees an aligned, valid, immutable `p`.
            unsafe { p.read() }
        }
    };
}

host_word!(ld_b32, st_b32, cas_b32, exch_b32, ld_nc_b32, u32, AtomicU32);
host_word!(ld_b64, st_b64, cas_b64, exch_b64, ld_nc_b64, u64, AtomicU64);

pub unsafe fn atom_add_u32(p: *mut u32, v: u32, o: Ordering, _s: Scope) -> u32 {
    // SAFETY: the caller guarantees an aligned, valid `p`.
    unsafe { AtomicU32::from_ptr(p) }.fetch_add(v, rmw(o))
}
pub unsafe fn atom_add_u64(p: *mut u64, v: u64, o: Ordering, _s: Scope) -> u64 {
    // SAFETY: the caller guarantees an aligned, valid `p`.
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(v, rmw(o))
}
pub unsafe fn red_add_u32(p: *mut u32, v: u32, o: Ordering, s: Scope) {
    // SAFETY: forwarded.
    unsafe { atom_add_u32(p, v, o.release_part(), s) };
}
pub unsafe fn red_add_u64(p: *mut u64, v: u64, o: Ordering, s: Scope) {
    // SAFETY: forwarded.
    unsafe { atom_add_u64(p, v, o.release_part(), s) };
}

/// The two 32-bit words of a 64-bit word, in memory order (elements `2k` and `2k + 1` of
/// a 16-byte vector live in half `k`).
fn words(w: u64) -> [u32; 2] {
    let b = w.to_ne_bytes();
    [
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
    ]
}
/// The 64-bit word whose memory holds `[a, b]` (inverse of [`words`]).
fn join(a: u32, b: u32) -> u64 {
    let (a, b) = (a.to_ne_bytes(), b.to_ne_bytes());
    u64::from_ne_bytes([a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
}

// Vector accesses of 16 bytes: two 8-byte atomic accesses (half 0, then half 1) with the
// vector's order, so each naturally aligned 8-byte half is read or written as one unit,
// as the LL protocol assumes of the GPU's `.v4` accesses (one access per element could
// tear a `{payload, epoch}` pair).
pub unsafe fn ld_v2_u64(p: *const u64, o: LoadOrder, s: Scope) -> [u64; 2] {
    // SAFETY: the caller guarantees 16 valid bytes at `p`, 16-byte aligned, so both
    // 8-byte halves are valid and 8-byte aligned.
    unsafe { [ld_b64(p, o, s), ld_b64(p.add(1), o, s)] }
}
pub unsafe fn st_v2_u64(p: *mut u64, v: [u64; 2], o: StoreOrder, s: Scope) {
    // SAFETY: as in `ld_v2_u64`.
    unsafe {
        st_b64(p, v[0], o, s);
        st_b64(p.add(1), v[1], o, s);
    }
}
pub unsafe fn ld_v4_u32(p: *const u32, o: LoadOrder, s: Scope) -> [u32; 4] {
    // SAFETY: forwarded (16 valid, 16-byte aligned bytes).
    let [x, y] = unsafe { ld_v2_u64(p.cast(), o, s) };
    let ([a, b], [c, d]) = (words(x), words(y));
    [a, b, c, d]
}
pub unsafe fn st_v4_u32(p: *mut u32, v: [u32; 4], o: StoreOrder, s: Scope) {
    // SAFETY: forwarded (16 valid, 16-byte aligned bytes).
    unsafe { st_v2_u64(p.cast(), [join(v[0], v[1]), join(v[2], v[3])], o, s) }
}
pub unsafe fn ld_v4_f32(p: *const f32, o: LoadOrder, s: Scope) -> [f32; 4] {
    // SAFETY: forwarded.
    unsafe { ld_v4_u32(p.cast(), o, s) }.map(f32::from_bits)
}
pub unsafe fn st_v4_f32(p: *mut f32, v: [f32; 4], o: StoreOrder, s: Scope) {
    // SAFETY: forwarded.
    unsafe { st_v4_u32(p.cast(), v.map(f32::to_bits), o, s) }
}

pub unsafe fn ld_nc_v4_u32(p: *const u32) -> [u32; 4] {
    // SAFETY: the caller guarantees 16 valid, aligned, immutable bytes at `p`.
    unsafe { p.cast::<[u32; 4]>().read() }
}
pub fn fence_acq_rel(_s: Scope) {
    a::fence(a::Ordering::AcqRel)
}
pub fn fence_sc(_s: Scope) {
    a::fence(a::Ordering::SeqCst)
}
pub fn fence_proxy_alias() {
    a::compiler_fence(a::Ordering::SeqCst)
}

/// A relaxed atomic store of the low `W` bytes when `cond` holds (weak stores are relaxed
/// atomics on the host).
#[inline(always)]
pub unsafe fn st_low_if<const W: u32>(p: *mut u8, v: u64, cond: bool) {
    if !cond {
        return;
    }
    debug_assert!(
        (p as usize).is_multiple_of(W as usize),
        "store_low_if: misaligned"
    );
    let r = a::Ordering::Relaxed;
    // SAFETY: `W`-aligned and valid for `W` bytes (caller's contract).
    unsafe {
        match W {
            1 => a::AtomicU8::from_ptr(p).store(v as u8, r),
            2 => a::AtomicU16::from_ptr(p.cast()).store(v as u16, r),
            4 => a::AtomicU32::from_ptr(p.cast()).store(v as u32, r),
            _ => a::AtomicU64::from_ptr(p.cast()).store(v, r),
        }
    }
}
