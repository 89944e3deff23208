//! Memory accesses with an explicit memory order and scope.
//!
//! The PTX memory model names two things for every access: its *semantics* (weak, relaxed,
//! acquire, release, acq_rel, volatile) and its *scope* (the set of threads it synchronises
//! with: `cta` = the block, `gpu` = the device, `sys` = every GPU and the CPU, i.e. what peer
//! memory over NVLink needs). This module spells both out on every call:
//!
//! - [`load`] / [`store`] of 32- and 64-bit words ([`Word`]) with [`LoadOrder`] / [`StoreOrder`];
//! - read-modify-writes [`atomic_add`], [`atomic_cas`], [`atomic_exch`] (`atom`) and
//!   [`red_add`] (`red`, no result) with [`Ordering`]: all in inline PTX, because LLVM 22 drops
//!   the ordering and scope of `core::sync::atomic` RMWs on nvptx;
//! - fences ([`fence`], [`fence_sc`], [`fence_proxy_alias`]);
//! - 16-byte vector accesses ([`U32x4`], [`F32x4`], [`U64x2`]);
//! - non-coherent constant loads ([`load_const`], `ld.global.nc`) for data that no one writes
//!   while the kernel runs (window descriptors).
//!
//! Every pointer here is a **generic address of global memory** (device memory of this GPU or a
//! peer's memory mapped into this GPU's address space); the instructions use the `.global` state
//! space. Shared-memory pointers are not allowed.
//!
//! On the host the same calls map to `core::sync::atomic` with the same ordering (scopes do
//! not exist there; weak and volatile accesses become relaxed atomics of their width), and
//! 16-byte vector accesses to two 8-byte atomic accesses, one per naturally aligned half (see
//! [`load_v4_u32`] for what the GPU promises).
//!
//! Under the CPU emulator a load stops its thread once the launch has failed (or its
//! watchdog fired), so a kernel spinning on a bare [`load`] (`while load(flag, ..) == 0 {}`)
//! ends with the launch's error; but the spin never yields its core to the threads it waits
//! for. Spin with [`wait::Spin`](crate::wait::Spin) ([`Spin::until`](crate::wait::Spin::until)
//! or a loop calling [`Spin::check`](crate::wait::Spin::check)), which polls the emulator on
//! every failed try (and bounds the wait on the GPU too).

// ANCHOR: scope
/// The set of threads an ordered access synchronises with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The threads of the same block (`.cta`).
    Cta,
    /// The threads of the same GPU (`.gpu`).
    Gpu,
    /// Every thread of every GPU and the CPU (`.sys`): needed for peer memory.
    Sys,
}
// ANCHOR_END: scope

/// Semantics of a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadOrder {
    /// A plain (weak) load: no ordering, may be reordered or merged (`ld.global`).
    /// Scope is ignored.
    Weak,
    /// A relaxed atomic load (`ld.relaxed.<scope>`): never torn, no ordering.
    Relaxed,
    /// An acquire load (`ld.acquire.<scope>`): later accesses of this thread cannot move
    /// before it; pairs with a release (store, RMW or fence) of the scope.
    Acquire,
    /// A volatile load (`ld.volatile`): not merged or elided, relaxed at system scope for
    /// 32/64-bit accesses. Scope is ignored.
    Volatile,
}

/// Semantics of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOrder {
    /// A plain (weak) store (`st.global`). Scope is ignored.
    Weak,
    /// A relaxed atomic store (`st.relaxed.<scope>`).
    Relaxed,
    /// A release store (`st.release.<scope>`): this thread's earlier accesses (and those it
    /// observed) are visible to whoever acquires this value.
    Release,
    /// A volatile store (`st.volatile`). Scope is ignored.
    Volatile,
}

// ANCHOR: ordering
/// Memory order of a read-modify-write, a fence or a barrier phase.
///
/// Mirrors `cuda::memory_order` minus `consume` and `seq_cst` (use [`fence_sc`] for the latter).
#[doc(alias = "memory_order")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ordering {
    /// No ordering beyond the atomicity of the access.
    Relaxed,
    /// Later accesses cannot move before it.
    Acquire,
    /// Earlier accesses cannot move after it.
    Release,
    /// Both.
    AcqRel,
}
// ANCHOR_END: ordering

impl Ordering {
    /// True for `Acquire` and `AcqRel`.
    #[inline(always)]
    pub const fn has_acquire(self) -> bool {
        matches!(self, Ordering::Acquire | Ordering::AcqRel)
    }

    /// True for `Release` and `AcqRel`.
    #[inline(always)]
    pub const fn has_release(self) -> bool {
        matches!(self, Ordering::Release | Ordering::AcqRel)
    }

    /// The acquire half: `Acquire` if the order has one, else `Relaxed`.
    #[doc(alias = "acquireOrderOf")]
    #[inline(always)]
    pub const fn acquire_part(self) -> Ordering {
        if self.has_acquire() {
            Ordering::Acquire
        } else {
            Ordering::Relaxed
        }
    }

    /// The release half: `Release` if the order has one, else `Relaxed`.
    #[doc(alias = "releaseOrderOf")]
    #[inline(always)]
    pub const fn release_part(self) -> Ordering {
        if self.has_release() {
            Ordering::Release
        } else {
            Ordering::Relaxed
        }
    }

    /// The load order that implements the acquire half (`Acquire` or `Relaxed`).
    #[inline(always)]
    pub const fn load_order(self) -> LoadOrder {
        if self.has_acquire() {
            LoadOrder::Acquire
        } else {
            LoadOrder::Relaxed
        }
    }

    /// The store order that implements the release half (`Release` or `Relaxed`).
    #[inline(always)]
    pub const fn store_order(self) -> StoreOrder {
        if self.has_release() {
            StoreOrder::Release
        } else {
            StoreOrder::Relaxed
        }
    }
}

/// A 32- or 64-bit value that the ordered accesses of this module can move in one
/// instruction: `u32`, `i32`, `f32`, `u64`, `i64`, `f64`.
pub trait Word: Copy + sealed::Sealed {
    #[doc(hidden)]
    unsafe fn load_impl(p: *const Self, order: LoadOrder, scope: Scope) -> Self;
    #[doc(hidden)]
    unsafe fn store_impl(p: *mut Self, v: Self, order: StoreOrder, scope: Scope);
    #[doc(hidden)]
    unsafe fn cas_impl(p: *mut Self, cmp: Self, new: Self, order: Ordering, scope: Scope) -> Self;
    #[doc(hidden)]
    unsafe fn exch_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) -> Self;
    #[doc(hidden)]
    unsafe fn load_const_impl(p: *const Self) -> Self;
}

/// An unsigned integer with atomic addition: `u32`, `u64`.
pub trait AtomicInt: Word {
    #[doc(hidden)]
    unsafe fn add_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) -> Self;
    #[doc(hidden)]
    unsafe fn red_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope);
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! word_impl {
    ($($t:ty, $bits:ty, $ld:ident, $st:ident, $cas:ident, $exch:ident, $nc:ident,
        $to:expr, $from:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Word for $t {
            #[inline(always)]
            unsafe fn load_impl(p: *const Self, order: LoadOrder, scope: Scope) -> Self {
                // SAFETY: forwarded contract of `load`.
                $from(unsafe { backend::$ld(p.cast::<$bits>(), order, scope) })
            }
            #[inline(always)]
            unsafe fn store_impl(p: *mut Self, v: Self, order: StoreOrder, scope: Scope) {
                // SAFETY: forwarded contract of `store`.
                unsafe { backend::$st(p.cast::<$bits>(), $to(v), order, scope) }
            }
            #[inline(always)]
            unsafe fn cas_impl(p: *mut Self, cmp: Self, new: Self, order: Ordering,
                               scope: Scope) -> Self {
                // SAFETY: forwarded contract of `atomic_cas`.
                $from(unsafe { backend::$cas(p.cast::<$bits>(), $to(cmp), $to(new), order, scope) })
            }
            #[inline(always)]
            unsafe fn exch_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) -> Self {
                // SAFETY: forwarded contract of `atomic_exch`.
                $from(unsafe { backend::$exch(p.cast::<$bits>(), $to(v), order, scope) })
            }
            #[inline(always)]
            unsafe fn load_const_impl(p: *const Self) -> Self {
                // SAFETY: forwarded contract of `load_const`.
                $from(unsafe { backend::$nc(p.cast::<$bits>()) })
            }
        }
    )*};
}

word_impl! {
    u32, u32, ld_b32, st_b32, cas_b32, exch_b32, ld_nc_b32, |v: u32| v, |w: u32| w;
    i32, u32, ld_b32, st_b32, cas_b32, exch_b32, ld_nc_b32, |v: i32| v as u32, |w: u32| w as i32;
    f32, u32, ld_b32, st_b32, cas_b32, exch_b32, ld_nc_b32, f32::to_bits, f32::from_bits;
    u64, u64, ld_b64, st_b64, cas_b64, exch_b64, ld_nc_b64, |v: u64| v, |w: u64| w;
    i64, u64, ld_b64, st_b64, cas_b64, exch_b64, ld_nc_b64, |v: i64| v as u64, |w: u64| w as i64;
    f64, u64, ld_b64, st_b64, cas_b64, exch_b64, ld_nc_b64, f64::to_bits, f64::from_bits;
}

impl AtomicInt for u32 {
    #[inline(always)]
    unsafe fn add_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) -> Self {
        // SAFETY: forwarded contract of `atomic_add`.
        unsafe { backend::atom_add_u32(p, v, order, scope) }
    }
    #[inline(always)]
    unsafe fn red_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) {
        // SAFETY: forwarded contract of `red_add`.
        unsafe { backend::red_add_u32(p, v, order, scope) }
    }
}

impl AtomicInt for u64 {
    #[inline(always)]
    unsafe fn add_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) -> Self {
        // SAFETY: forwarded contract of `atomic_add`.
        unsafe { backend::atom_add_u64(p, v, order, scope) }
    }
    #[inline(always)]
    unsafe fn red_impl(p: *mut Self, v: Self, order: Ordering, scope: Scope) {
        // SAFETY: forwarded contract of `red_add`.
        unsafe { backend::red_add_u64(p, v, order, scope) }
    }
}

/// Loads a word from global memory with the given semantics and scope.
///
/// # Safety
/// - `p` is a generic address of global memory, aligned for `T`, valid for reads of `T`.
/// - A `Weak` load racing with a write is a data race (its value is unspecified).
///
/// # Ordering
/// As `order` at `scope` (see [`LoadOrder`]); e.g. `Acquire, Sys` pairs with a peer GPU's
/// release at system scope.
#[inline(always)]
pub unsafe fn load<T: Word>(p: *const T, order: LoadOrder, scope: Scope) -> T {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::load_impl(p, order, scope) }
}

/// Stores a word to global memory with the given semantics and scope.
///
/// # Safety
/// - `p` is a generic address of global memory, aligned for `T`, valid for writes of `T`.
///
/// # Ordering
/// As `order` at `scope` (see [`StoreOrder`]); `Release, Sys` publishes this thread's earlier
/// writes (and those it has observed) to any GPU that acquires the stored value.
#[inline(always)]
pub unsafe fn store<T: Word>(p: *mut T, v: T, order: StoreOrder, scope: Scope) {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::store_impl(p, v, order, scope) }
}

/// Atomically adds `v` to `*p` and returns the old value (`atom.<order>.<scope>.global.add`).
///
/// # Safety
/// - `p` is a generic address of global memory, aligned, valid for reads and writes of `T`.
///
/// # Ordering
/// The read part has the acquire half of `order`, the write part the release half, at `scope`.
#[doc(alias = "atomicAdd")]
#[inline(always)]
pub unsafe fn atomic_add<T: AtomicInt>(p: *mut T, v: T, order: Ordering, scope: Scope) -> T {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::add_impl(p, v, order, scope) }
}

/// Atomically adds `v` to `*p`, without returning anything (`red.<order>.<scope>.global.add`).
/// Cheaper than [`atomic_add`] when the old value is not needed.
///
/// # Safety
/// - `p` is a generic address of global memory, aligned, valid for reads and writes of `T`.
///
/// # Ordering
/// Only the release half of `order` applies (a reduction reads nothing back): `Acquire`
/// behaves as `Relaxed`, `AcqRel` as `Release`.
#[inline(always)]
pub unsafe fn red_add<T: AtomicInt>(p: *mut T, v: T, order: Ordering, scope: Scope) {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::red_impl(p, v, order, scope) }
}

/// Atomically replaces `*p` by `new` if it equals `cmp` (bitwise) and returns the old value
/// (`atom.<order>.<scope>.global.cas`); the swap happened iff the result equals `cmp`.
///
/// # Safety
/// - `p` is a generic address of global memory, aligned, valid for reads and writes of `T`.
///
/// # Ordering
/// `order` at `scope` for both the read and the (possible) write.
#[doc(alias = "atomicCAS")]
#[inline(always)]
pub unsafe fn atomic_cas<T: Word>(p: *mut T, cmp: T, new: T, order: Ordering, scope: Scope) -> T {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::cas_impl(p, cmp, new, order, scope) }
}

/// Atomically replaces `*p` by `v` and returns the old value
/// (`atom.<order>.<scope>.global.exch`).
///
/// # Safety
/// - `p` is a generic address of global memory, aligned, valid for reads and writes of `T`.
///
/// # Ordering
/// `order` at `scope` for both the read and the write.
#[doc(alias = "atomicExch")]
#[inline(always)]
pub unsafe fn atomic_exch<T: Word>(p: *mut T, v: T, order: Ordering, scope: Scope) -> T {
    // SAFETY: the caller upholds the contract above.
    unsafe { T::exch_impl(p, v, order, scope) }
}

/// A memory fence of the given order and scope (`fence.acq_rel.<scope>`); `Relaxed` emits
/// nothing.
///
/// # Ordering
/// `Acquire`, `Release` and `AcqRel` all emit `fence.acq_rel`: relaxed accesses before and
/// after it are ordered as if the fence were a release and an acquire, at `scope`
/// (e.g. fence + relaxed store = release store).
#[doc(alias = "__threadfence_system")]
#[doc(alias = "atomic_thread_fence")]
#[inline(always)]
pub fn fence(order: Ordering, scope: Scope) {
    if order != Ordering::Relaxed {
        backend::fence_acq_rel(scope)
    }
}

/// A sequentially consistent fence (`fence.sc.<scope>`): all such fences of `scope` are
/// totally ordered.
///
/// # Ordering
/// Strongest available; slower than [`fence`].
#[inline(always)]
pub fn fence_sc(scope: Scope) {
    backend::fence_sc(scope)
}

/// Orders accesses through different virtual aliases of the same physical memory
/// (`fence.proxy.alias`): needed when a thread writes through one mapping (e.g. the flat
/// LSA view of its own memory) and reads through another (its local pointer), or vice versa.
///
/// # Ordering
/// Proxy ordering only, for this thread; combine with [`fence`] for cross-thread ordering.
#[inline(always)]
pub fn fence_proxy_alias() {
    backend::fence_proxy_alias()
}

/// Sixteen bytes as four `u32` (16-byte aligned, the unit of vector accesses).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct U32x4(pub [u32; 4]);

/// Sixteen bytes as four `f32` (16-byte aligned).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct F32x4(pub [f32; 4]);

/// Sixteen bytes as two `u64` (16-byte aligned).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct U64x2(pub [u64; 2]);

impl From<F32x4> for U32x4 {
    #[inline(always)]
    fn from(v: F32x4) -> U32x4 {
        U32x4(v.0.map(f32::to_bits))
    }
}

impl From<U32x4> for F32x4 {
    #[inline(always)]
    fn from(v: U32x4) -> F32x4 {
        F32x4(v.0.map(f32::from_bits))
    }
}

impl From<U64x2> for U32x4 {
    #[inline(always)]
    fn from(v: U64x2) -> U32x4 {
        let [a, b] = v.0;
        U32x4([a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32])
    }
}

impl From<U32x4> for U64x2 {
    #[inline(always)]
    fn from(v: U32x4) -> U64x2 {
        let [a, b, c, d] = v.0;
        U64x2([
            u64::from(a) | (u64::from(b) << 32),
            u64::from(c) | (u64::from(d) << 32),
        ])
    }
}

/// Loads 16 bytes as four `u32` in one instruction (`ld<order>.global.v4.u32`).
///
/// # Safety
/// - `p` is a 16-byte aligned generic address of global memory, valid for 16 bytes of reads.
///
/// # Ordering
/// `order` at `scope` **per element**: PTX promises single-copy atomicity only for each
/// 4-byte element of a `.v4.u32` access, not for the 16 bytes nor for an 8-byte pair of
/// elements. The LL protocol ([`crate::ll`]) nevertheless **assumes** that each naturally
/// aligned 8-byte half (elements 0–1 and 2–3) is read and written as one unit, as NCCL's LL
/// protocol does of its 16-byte accesses (NVLink and the memory system move at least aligned
/// 8 bytes at once); that is hardware behaviour, not a PTX guarantee. On the host each half
/// is one 8-byte atomic access, so the emulator honours the same assumption.
#[inline(always)]
pub unsafe fn load_v4_u32(p: *const U32x4, order: LoadOrder, scope: Scope) -> U32x4 {
    // SAFETY: the caller upholds the contract above.
    U32x4(unsafe { backend::ld_v4_u32(p.cast(), order, scope) })
}

/// Stores 16 bytes as four `u32` in one instruction (`st<order>.global.v4.u32`).
///
/// # Safety
/// - `p` is a 16-byte aligned generic address of global memory, valid for 16 bytes of writes.
///
/// # Ordering
/// `order` at `scope` per element (see [`load_v4_u32`]).
#[inline(always)]
pub unsafe fn store_v4_u32(p: *mut U32x4, v: U32x4, order: StoreOrder, scope: Scope) {
    // SAFETY: the caller upholds the contract above.
    unsafe { backend::st_v4_u32(p.cast(), v.0, order, scope) }
}

/// Loads 16 bytes as four `f32` in one instruction (`ld<order>.global.v4.f32`).
///
/// # Safety
/// As [`load_v4_u32`].
///
/// # Ordering
/// As [`load_v4_u32`].
#[inline(always)]
pub unsafe fn load_v4_f32(p: *const F32x4, order: LoadOrder, scope: Scope) -> F32x4 {
    // SAFETY: the caller upholds the contract above.
    F32x4(unsafe { backend::ld_v4_f32(p.cast(), order, scope) })
}

/// Stores 16 bytes as four `f32` in one instruction (`st<order>.global.v4.f32`).
///
/// # Safety
/// As [`store_v4_u32`].
///
/// # Ordering
/// As [`store_v4_u32`].
#[inline(always)]
pub unsafe fn store_v4_f32(p: *mut F32x4, v: F32x4, order: StoreOrder, scope: Scope) {
    // SAFETY: the caller upholds the contract above.
    unsafe { backend::st_v4_f32(p.cast(), v.0, order, scope) }
}

/// Loads 16 bytes as two `u64` in one instruction (`ld<order>.global.v2.u64`).
///
/// # Safety
/// As [`load_v4_u32`].
///
/// # Ordering
/// As [`load_v4_u32`].
#[inline(always)]
pub unsafe fn load_v2_u64(p: *const U64x2, order: LoadOrder, scope: Scope) -> U64x2 {
    // SAFETY: the caller upholds the contract above.
    U64x2(unsafe { backend::ld_v2_u64(p.cast(), order, scope) })
}

/// Stores 16 bytes as two `u64` in one instruction (`st<order>.global.v2.u64`).
///
/// # Safety
/// As [`store_v4_u32`].
///
/// # Ordering
/// As [`store_v4_u32`].
#[inline(always)]
pub unsafe fn store_v2_u64(p: *mut U64x2, v: U64x2, order: StoreOrder, scope: Scope) {
    // SAFETY: the caller upholds the contract above.
    unsafe { backend::st_v2_u64(p.cast(), v.0, order, scope) }
}

/// Loads a value through the non-coherent (read-only) data cache (`ld.global.nc`, `__ldg`),
/// on the GPU in chunks of 8 bytes (or 4 when `T` is only 4-byte aligned); on the host a
/// plain read of `T`.
///
/// `T` must be at least 4-byte aligned with a size that is a multiple of its alignment
/// (checked at compile time); on the GPU padding bytes are copied as they are.
///
/// # Safety
/// - `p` is a generic address of global memory, aligned, valid for reads of `T`.
/// - The bytes at `p` are a valid `T` (initialised, a valid bit pattern of `T`).
/// - Nobody writes `*p` while this kernel runs (the cache is not coherent with writes made
///   during the kernel, not even by this thread).
///
/// # Ordering
/// None; the value may be any value written before the kernel started.
#[doc(alias = "loadConst")]
#[doc(alias = "__ldg")]
#[inline(always)]
pub unsafe fn load_const<T: Copy>(p: *const T) -> T {
    const {
        assert!(
            core::mem::align_of::<T>() >= 4
                && core::mem::size_of::<T>().is_multiple_of(core::mem::align_of::<T>()),
            "load_const needs a type aligned to at least 4 bytes"
        )
    };
    if cfg!(target_arch = "nvptx64") {
        // SAFETY: the caller's contract; the chunks are opaque inline-asm loads, so padding
        // bytes come back as whatever integers the hardware read.
        unsafe { load_const_chunks(p) }
    } else {
        // Host: a typed read (reading padding bytes as integers, chunk by chunk, would be
        // undefined behaviour in Rust); nobody writes `*p`, so it races with nothing.
        // SAFETY: the caller guarantees an aligned, valid, unchanging `T` at `p`.
        unsafe { p.read() }
    }
}

/// The GPU body of [`load_const`]: `T` in 8- or 4-byte `ld.global.nc` chunks (used on the GPU
/// only: on the host the chunks would read padding as integers).
///
/// # Safety
/// As [`load_const`].
#[inline(always)]
unsafe fn load_const_chunks<T: Copy>(p: *const T) -> T {
    let mut out = core::mem::MaybeUninit::<T>::uninit();
    if core::mem::align_of::<T>() >= 8 {
        let n = core::mem::size_of::<T>() / 8;
        for i in 0..n {
            // SAFETY: chunk i of n lies inside *p, 8-byte aligned (align_of::<T>() >= 8).
            let w = unsafe { backend::ld_nc_b64(p.cast::<u64>().add(i)) };
            // SAFETY: chunk i lies inside `out`.
            unsafe { out.as_mut_ptr().cast::<u64>().add(i).write(w) };
        }
    } else {
        let n = core::mem::size_of::<T>() / 4;
        for i in 0..n {
            // SAFETY: chunk i of n lies inside *p, 4-byte aligned.
            let w = unsafe { backend::ld_nc_b32(p.cast::<u32>().add(i)) };
            // SAFETY: chunk i lies inside `out`.
            unsafe { out.as_mut_ptr().cast::<u32>().add(i).write(w) };
        }
    }
    // SAFETY: every byte of `out` was copied from a valid `T`.
    unsafe { out.assume_init() }
}

/// Loads one 32- or 64-bit word through the non-coherent cache (`ld.global.nc`).
///
/// # Safety
/// As [`load_const`].
///
/// # Ordering
/// As [`load_const`].
#[inline(always)]
pub unsafe fn load_const_word<T: Word>(p: *const T) -> T {
    // SAFETY: the caller upholds the contract of `load_const`.
    unsafe { T::load_const_impl(p) }
}

/// Loads 16 bytes through the non-coherent cache in one instruction (`ld.global.nc.v4.u32`).
///
/// # Safety
/// As [`load_const`], with `p` 16-byte aligned.
///
/// # Ordering
/// As [`load_const`].
#[inline(always)]
pub unsafe fn load_const_v4(p: *const U32x4) -> U32x4 {
    // SAFETY: the caller upholds the contract above.
    U32x4(unsafe { backend::ld_nc_v4_u32(p.cast()) })
}

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

/// The GPU backend: every PTX memory instruction of the crate (except multimem).
///
/// The dispatch macros turn (order, scope) into the PTX qualifier string at compile time;
/// with constant arguments (the normal case, everything is `inline(always)`) the `match`
/// folds away and one instruction remains.
#[cfg(target_arch = "nvptx64")]
mod nvptx {
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
}

/// The host backend: `core::sync::atomic` with the same or a stronger ordering (no scopes on
/// the host): weak and volatile accesses are relaxed atomics (emulated GPU threads are OS
/// threads, and a racing non-atomic access, `read_volatile` included, would be undefined
/// behaviour in Rust; a relaxed atomic load is not hoisted out of a spin loop either),
/// relaxed/acquire/release/acq_rel map to the same `core` order at every scope, 16-byte
/// vector accesses are two 8-byte atomics (each naturally aligned 8-byte half single-copy
/// atomic, what the LL protocol assumes of the GPU), fences are `fence(AcqRel)` /
/// `fence(SeqCst)`.
///
/// In an emulated launch a load stops its thread once the launch has failed, but never
/// yields (see the `emu` module docs): spin with [`Spin`](crate::wait::Spin), which does.
///
/// Racing atomics of different sizes on the same bytes are undefined behaviour in Rust when
/// one of them writes (on the GPU such a race is merely unordered): a 16-byte access (two
/// 8-byte atomics here) must not race with a 4-byte access to the same line, e.g. an LL line
/// is written and polled only with 16-byte accesses.
#[cfg(not(target_arch = "nvptx64"))]
mod host {
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
                        LoadOrder::Acquire => {
                            <$at>::from_ptr(p.cast_mut()).load(a::Ordering::Acquire)
                        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_atomics_follow_the_ptx_contracts() {
        let mut x = 5u32;
        let p = &raw mut x;
        unsafe {
            assert_eq!(atomic_add(p, 3, Ordering::AcqRel, Scope::Sys), 5);
            red_add(p, 2, Ordering::Release, Scope::Gpu);
            assert_eq!(load(p, LoadOrder::Acquire, Scope::Sys), 10);
            assert_eq!(atomic_cas(p, 9, 1, Ordering::AcqRel, Scope::Sys), 10);
            assert_eq!(atomic_cas(p, 10, 1, Ordering::AcqRel, Scope::Sys), 10);
            assert_eq!(atomic_exch(p, 7, Ordering::Acquire, Scope::Cta), 1);
            store(p, 8, StoreOrder::Release, Scope::Sys);
            assert_eq!(load_const_word(p.cast_const()), 8);
        }
        let mut v = U32x4([1, 2, 3, 4]);
        unsafe {
            store_v4_u32(
                &raw mut v,
                U32x4([5, 6, 7, 8]),
                StoreOrder::Relaxed,
                Scope::Sys,
            );
            assert_eq!(
                load_v4_u32(&raw const v, LoadOrder::Volatile, Scope::Sys).0,
                [5, 6, 7, 8]
            );
            assert_eq!(load_const_v4(&raw const v).0, [5, 6, 7, 8]);
        }
        let w = U64x2::from(v);
        assert_eq!(U32x4::from(w), v);
        assert_eq!(w.0[0], 5 | (6 << 32));
    }

    /// The LL protocol assumes each 8-byte half of a 16-byte access is one unit (see
    /// [`load_v4_u32`]). One access per `u32` let a reader see `{payload, epoch}` of two
    /// different rounds (the payload read before a store, the epoch after it), which an LL
    /// receiver accepts as data of the new round.
    #[test]
    fn host_vector_accesses_never_tear_an_8_byte_half() {
        extern crate std;
        use core::sync::atomic::{AtomicBool, Ordering as A};
        let mut line = U32x4::default();
        let addr = &raw mut line as usize;
        let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
        let (torn, reads) = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let (mut torn, mut reads) = (0u64, 0u64);
                started.store(true, A::Relaxed);
                while !done.load(A::Relaxed) {
                    // SAFETY: `line` outlives the scope; every access is a `mem` access.
                    let [a, b, c, d] = unsafe {
                        load_v4_u32(addr as *const U32x4, LoadOrder::Relaxed, Scope::Sys).0
                    };
                    torn += u64::from(a != b) + u64::from(c != d);
                    reads += 1;
                }
                (torn, reads)
            });
            // Without this the writer can finish before the reader's first read.
            while !started.load(A::Relaxed) {
                std::thread::yield_now();
            }
            for k in 1..=500_000u32 {
                let v = U32x4([k, k, !k, !k]);
                // SAFETY: as above.
                unsafe { store_v4_u32(addr as *mut U32x4, v, StoreOrder::Relaxed, Scope::Sys) };
            }
            done.store(true, A::Relaxed);
            reader.join().unwrap()
        });
        assert!(reads > 0);
        assert_eq!(torn, 0, "{torn} torn 8-byte halves in {reads} reads");
        assert_eq!(line.0[0], 500_000);
    }

    #[test]
    fn orders_split_into_halves() {
        assert_eq!(Ordering::AcqRel.acquire_part(), Ordering::Acquire);
        assert_eq!(Ordering::AcqRel.release_part(), Ordering::Release);
        assert_eq!(Ordering::Acquire.release_part(), Ordering::Relaxed);
        assert_eq!(Ordering::Release.acquire_part(), Ordering::Relaxed);
        assert_eq!(Ordering::Release.load_order(), LoadOrder::Relaxed);
        assert_eq!(Ordering::AcqRel.store_order(), StoreOrder::Release);
    }
}
