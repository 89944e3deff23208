//! The GPU backend: every PTX memory instruction of the crate (except multimem).
//!
//! The dispatch macros turn (order, scope) into the PTX qualifier string at compile time;
//! with constant arguments (the normal case, everything is `inline(always)`) the `match`
//! folds away and one instruction remains.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `mem` that calls it, documented in `mem/mod.rs`.

use super::{LoadOrder, Ordering, Scope, StoreOrder};
use core::arch::asm;

/// `$m!(qualifiers, args...)` with the qualifiers of a load.
macro_rules! by_load {
    ($o:expr, $s:expr, $m:ident!($($a:tt)*)) => {
        match ($o, $s) {
            (LoadOrder::Weak, _) => $m!("", $($a)*),
            (LoadOrder::Volatile, _) => $m!(".volatile", $($a)*),
            (LoadOrder::Relaxed, Scope::Cta) => $m!(".relaxed.cta", $($a)*),
            (LoadOrder::Relaxed, Scope::Gpu) => $m!(".relaxed.gpu", $($a)*),
            (LoadOrder::Relaxed, Scope::Sys) => $m!(".relaxed.sys", $($a)*),
            (LoadOrder::Acquire, Scope::Cta) => $m!(".acquire.cta", $($a)*),
            (LoadOrder::Acquire, Scope::Gpu) => $m!(".acquire.gpu", $($a)*),
            (LoadOrder::Acquire, Scope::Sys) => $m!(".acquire.sys", $($a)*),
        }
    };
}

/// `$m!(qualifiers, args...)` with the qualifiers of a store.
macro_rules! by_store {
    ($o:expr, $s:expr, $m:ident!($($a:tt)*)) => {
        match ($o, $s) {
            (StoreOrder::Weak, _) => $m!("", $($a)*),
            (StoreOrder::Volatile, _) => $m!(".volatile", $($a)*),
            (StoreOrder::Relaxed, Scope::Cta) => $m!(".relaxed.cta", $($a)*),
            (StoreOrder::Relaxed, Scope::Gpu) => $m!(".relaxed.gpu", $($a)*),
            (StoreOrder::Relaxed, Scope::Sys) => $m!(".relaxed.sys", $($a)*),
            (StoreOrder::Release, Scope::Cta) => $m!(".release.cta", $($a)*),
            (StoreOrder::Release, Scope::Gpu) => $m!(".release.gpu", $($a)*),
            (StoreOrder::Release, Scope::Sys) => $m!(".release.sys", $($a)*),
        }
    };
}

/// `$m!(qualifiers, args...)` with the qualifiers of an `atom`.
macro_rules! by_rmw {
    ($o:expr, $s:expr, $m:ident!($($a:tt)*)) => {
        match ($o, $s) {
            (Ordering::Relaxed, Scope::Cta) => $m!(".relaxed.cta", $($a)*),
            (Ordering::Relaxed, Scope::Gpu) => $m!(".relaxed.gpu", $($a)*),
            (Ordering::Relaxed, Scope::Sys) => $m!(".relaxed.sys", $($a)*),
            (Ordering::Acquire, Scope::Cta) => $m!(".acquire.cta", $($a)*),
            (Ordering::Acquire, Scope::Gpu) => $m!(".acquire.gpu", $($a)*),
            (Ordering::Acquire, Scope::Sys) => $m!(".acquire.sys", $($a)*),
            (Ordering::Release, Scope::Cta) => $m!(".release.cta", $($a)*),
            (Ordering::Release, Scope::Gpu) => $m!(".release.gpu", $($a)*),
            (Ordering::Release, Scope::Sys) => $m!(".release.sys", $($a)*),
            (Ordering::AcqRel, Scope::Cta) => $m!(".acq_rel.cta", $($a)*),
            (Ordering::AcqRel, Scope::Gpu) => $m!(".acq_rel.gpu", $($a)*),
            (Ordering::AcqRel, Scope::Sys) => $m!(".acq_rel.sys", $($a)*),
        }
    };
}

/// `$m!(qualifiers, args...)` with the qualifiers of a `red` (release half only).
macro_rules! by_red {
    ($o:expr, $s:expr, $m:ident!($($a:tt)*)) => {
        match ($o.has_release(), $s) {
            (false, Scope::Cta) => $m!(".relaxed.cta", $($a)*),
            (false, Scope::Gpu) => $m!(".relaxed.gpu", $($a)*),
            (false, Scope::Sys) => $m!(".relaxed.sys", $($a)*),
            (true, Scope::Cta) => $m!(".release.cta", $($a)*),
            (true, Scope::Gpu) => $m!(".release.gpu", $($a)*),
            (true, Scope::Sys) => $m!(".release.sys", $($a)*),
        }
    };
}

macro_rules! ld1 {
    ($q:literal, $ty:literal, $cls:ident, $t:ty, $p:ident) => {{
        let v: $t;
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("ld", $q, ".global.", $ty, " {v}, [{p}];"),
                 v = out($cls) v, p = in(reg64) $p, options(nostack))
        };
        v
    }};
}

macro_rules! st1 {
    ($q:literal, $ty:literal, $cls:ident, $p:ident, $v:ident) => {
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("st", $q, ".global.", $ty, " [{p}], {v};"),
                 p = in(reg64) $p, v = in($cls) $v, options(nostack))
        }
    };
}

macro_rules! ld4 {
    ($q:literal, $ty:literal, $t:ty, $p:ident) => {{
        let (a, b, c, d): ($t, $t, $t, $t);
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("ld", $q, ".global.v4.", $ty, " {{{a}, {b}, {c}, {d}}}, [{p}];"),
                 a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
                 p = in(reg64) $p, options(nostack))
        };
        [a, b, c, d]
    }};
}

macro_rules! st4 {
    ($q:literal, $ty:literal, $p:ident, $v:ident) => {
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("st", $q, ".global.v4.", $ty, " [{p}], {{{a}, {b}, {c}, {d}}};"),
                 p = in(reg64) $p, a = in(reg32) $v[0], b = in(reg32) $v[1],
                 c = in(reg32) $v[2], d = in(reg32) $v[3], options(nostack))
        }
    };
}

macro_rules! ld2 {
    ($q:literal, $p:ident) => {{
        let (a, b): (u64, u64);
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("ld", $q, ".global.v2.u64 {{{a}, {b}}}, [{p}];"),
                 a = out(reg64) a, b = out(reg64) b, p = in(reg64) $p, options(nostack))
        };
        [a, b]
    }};
}

macro_rules! st2 {
    ($q:literal, $p:ident, $v:ident) => {
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("st", $q, ".global.v2.u64 [{p}], {{{a}, {b}}};"),
                 p = in(reg64) $p, a = in(reg64) $v[0], b = in(reg64) $v[1],
                 options(nostack))
        }
    };
}

macro_rules! atom {
    ($q:literal, $op:literal, $cls:ident, $t:ty, $p:ident, $v:ident) => {{
        let r: $t;
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("atom", $q, ".global.", $op, " {r}, [{p}], {v};"),
                 r = out($cls) r, p = in(reg64) $p, v = in($cls) $v, options(nostack))
        };
        r
    }};
}

macro_rules! atom_cas {
    ($q:literal, $ty:literal, $cls:ident, $t:ty, $p:ident, $c:ident, $n:ident) => {{
        let r: $t;
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("atom", $q, ".global.cas.", $ty, " {r}, [{p}], {c}, {n};"),
                 r = out($cls) r, p = in(reg64) $p, c = in($cls) $c, n = in($cls) $n,
                 options(nostack))
        };
        r
    }};
}

macro_rules! red {
    ($q:literal, $op:literal, $cls:ident, $p:ident, $v:ident) => {
        // SAFETY: the public wrapper's caller guarantees `p`.
        unsafe {
            asm!(concat!("red", $q, ".global.", $op, " [{p}], {v};"),
                 p = in(reg64) $p, v = in($cls) $v, options(nostack))
        }
    };
}

#[inline(always)]
pub unsafe fn ld_b32(p: *const u32, o: LoadOrder, s: Scope) -> u32 {
    by_load!(o, s, ld1!("b32", reg32, u32, p))
}
#[inline(always)]
pub unsafe fn ld_b64(p: *const u64, o: LoadOrder, s: Scope) -> u64 {
    by_load!(o, s, ld1!("b64", reg64, u64, p))
}
#[inline(always)]
pub unsafe fn st_b32(p: *mut u32, v: u32, o: StoreOrder, s: Scope) {
    by_store!(o, s, st1!("b32", reg32, p, v))
}
#[inline(always)]
pub unsafe fn st_b64(p: *mut u64, v: u64, o: StoreOrder, s: Scope) {
    by_store!(o, s, st1!("b64", reg64, p, v))
}
#[inline(always)]
pub unsafe fn atom_add_u32(p: *mut u32, v: u32, o: Ordering, s: Scope) -> u32 {
    by_rmw!(o, s, atom!("add.u32", reg32, u32, p, v))
}
#[inline(always)]
pub unsafe fn atom_add_u64(p: *mut u64, v: u64, o: Ordering, s: Scope) -> u64 {
    by_rmw!(o, s, atom!("add.u64", reg64, u64, p, v))
}
#[inline(always)]
pub unsafe fn exch_b32(p: *mut u32, v: u32, o: Ordering, s: Scope) -> u32 {
    by_rmw!(o, s, atom!("exch.b32", reg32, u32, p, v))
}
#[inline(always)]
pub unsafe fn exch_b64(p: *mut u64, v: u64, o: Ordering, s: Scope) -> u64 {
    by_rmw!(o, s, atom!("exch.b64", reg64, u64, p, v))
}
#[inline(always)]
pub unsafe fn cas_b32(p: *mut u32, c: u32, n: u32, o: Ordering, s: Scope) -> u32 {
    by_rmw!(o, s, atom_cas!("b32", reg32, u32, p, c, n))
}
#[inline(always)]
pub unsafe fn cas_b64(p: *mut u64, c: u64, n: u64, o: Ordering, s: Scope) -> u64 {
    by_rmw!(o, s, atom_cas!("b64", reg64, u64, p, c, n))
}
#[inline(always)]
pub unsafe fn red_add_u32(p: *mut u32, v: u32, o: Ordering, s: Scope) {
    by_red!(o, s, red!("add.u32", reg32, p, v))
}
#[inline(always)]
pub unsafe fn red_add_u64(p: *mut u64, v: u64, o: Ordering, s: Scope) {
    by_red!(o, s, red!("add.u64", reg64, p, v))
}
#[inline(always)]
pub unsafe fn ld_v4_u32(p: *const u32, o: LoadOrder, s: Scope) -> [u32; 4] {
    by_load!(o, s, ld4!("u32", u32, p))
}
#[inline(always)]
pub unsafe fn st_v4_u32(p: *mut u32, v: [u32; 4], o: StoreOrder, s: Scope) {
    by_store!(o, s, st4!("u32", p, v))
}
#[inline(always)]
pub unsafe fn ld_v4_f32(p: *const f32, o: LoadOrder, s: Scope) -> [f32; 4] {
    by_load!(o, s, ld4!("f32", f32, p))
}
#[inline(always)]
pub unsafe fn st_v4_f32(p: *mut f32, v: [f32; 4], o: StoreOrder, s: Scope) {
    by_store!(o, s, st4!("f32", p, v))
}
#[inline(always)]
pub unsafe fn ld_v2_u64(p: *const u64, o: LoadOrder, s: Scope) -> [u64; 2] {
    by_load!(o, s, ld2!(p))
}
#[inline(always)]
pub unsafe fn st_v2_u64(p: *mut u64, v: [u64; 2], o: StoreOrder, s: Scope) {
    by_store!(o, s, st2!(p, v))
}
#[inline(always)]
pub unsafe fn ld_nc_b32(p: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the public wrapper's caller guarantees `p` and immutability.
    unsafe {
        asm!("ld.global.nc.b32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p,
             options(pure, readonly, nostack))
    };
    v
}
#[inline(always)]
pub unsafe fn ld_nc_b64(p: *const u64) -> u64 {
    let v: u64;
    // SAFETY: the public wrapper's caller guarantees `p` and immutability.
    unsafe {
        asm!("ld.global.nc.b64 {v}, [{p}];", v = out(reg64) v, p = in(reg64) p,
             options(pure, readonly, nostack))
    };
    v
}
#[inline(always)]
pub unsafe fn ld_nc_v4_u32(p: *const u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: the public wrapper's caller guarantees `p` and immutability.
    unsafe {
        asm!("ld.global.nc.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d,
             p = in(reg64) p, options(pure, readonly, nostack))
    };
    [a, b, c, d]
}
#[inline(always)]
pub fn fence_acq_rel(s: Scope) {
    // SAFETY: fences have no preconditions.
    unsafe {
        match s {
            Scope::Cta => asm!("fence.acq_rel.cta;", options(nostack)),
            Scope::Gpu => asm!("fence.acq_rel.gpu;", options(nostack)),
            Scope::Sys => asm!("fence.acq_rel.sys;", options(nostack)),
        }
    }
}
#[inline(always)]
pub fn fence_sc(s: Scope) {
    // SAFETY: fences have no preconditions.
    unsafe {
        match s {
            Scope::Cta => asm!("fence.sc.cta;", options(nostack)),
            Scope::Gpu => asm!("fence.sc.gpu;", options(nostack)),
            Scope::Sys => asm!("fence.sc.sys;", options(nostack)),
        }
    }
}
#[inline(always)]
pub fn fence_proxy_alias() {
    // SAFETY: fences have no preconditions.
    unsafe { asm!("fence.proxy.alias;", options(nostack)) }
}

/// `@p st.global.<ty> [p], v` with `p = (c != 0)`, in a scope of its own (the predicate).
macro_rules! st_if {
    ($ty:literal, $cls:ident, $p:expr, $v:expr, $c:expr) => {
        asm!(concat!("{{ .reg .pred %stp; setp.ne.u32 %stp, {c}, 0; @%stp st.global.", $ty,
                     " [{p}], {v}; }}"),
             c = in(reg32) $c, p = in(reg64) $p, v = in($cls) $v, options(nostack))
    };
}

/// `@p st.global.uW [p], v` with `p = cond` (`W` = 1, 2, 4 or 8).
#[inline(always)]
pub unsafe fn st_low_if<const W: u32>(p: *mut u8, v: u64, cond: bool) {
    let c = u32::from(cond);
    // SAFETY: the caller's contract (`mem::store_low_if`); nothing is written when `c` is 0.
    unsafe {
        match W {
            1 => st_if!("u8", reg16, p, v as u16, c),
            2 => st_if!("u16", reg16, p, v as u16, c),
            4 => st_if!("u32", reg32, p, v as u32, c),
            _ => st_if!("u64", reg64, p, v, c),
        }
    }
}
