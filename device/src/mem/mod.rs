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
//!   while the kernel runs (window descriptors);
//! - predicated stores of 1, 2, 4 or 8 bytes ([`store_low_if`]), straight-line code for the
//!   pieces of a partial 16-byte pack.
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

/// Stores the low `W` bytes (`W` = 1, 2, 4 or 8) of `v` at `p` if `cond` holds: a plain
/// (weak) store. On the GPU it is one predicated `st.global.u8` … `st.global.u64`, with no
/// branch: a chain of such stores (the pieces of a partial 16-byte pack) runs straight through,
/// where `if cond { store }` compiles to a branch and a reconvergence point per store. On the
/// host, when `cond` holds, a relaxed atomic store of `W` bytes, as every weak store there.
///
/// # Safety
/// When `cond` holds:
/// - `p` is a generic address of global memory, `W`-byte aligned and valid for a `W`-byte
///   write;
/// - a racing access to those bytes makes their value unspecified (as for a `Weak` [`store`]);
///   on the host, none of a different size (the emulator's accesses are atomics).
///
/// # Ordering
/// None (weak).
#[inline(always)]
pub unsafe fn store_low_if<const W: u32>(p: *mut u8, v: u64, cond: bool) {
    const { assert!(W == 1 || W == 2 || W == 4 || W == 8, "W is 1, 2, 4 or 8") };
    // SAFETY: the caller upholds the contract above.
    unsafe { backend::st_low_if::<W>(p, v, cond) }
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

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(target_arch = "nvptx64")]
mod nvptx;

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

#[cfg(test)]
mod tests;
