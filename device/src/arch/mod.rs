//! Thread geometry, synchronisation and the other per-thread hardware facts.
//!
//! On the GPU these read PTX special registers and issue PTX barrier, warp and timer
//! instructions (all PTX of this module lives in the private `nvptx` backend, `arch/nvptx.rs`).
//! On the host the private `host` backend describes a launch of **one block of one thread**:
//! indices are 0, extents are 1, block and warp barriers are no-ops, shuffles return the
//! caller's own value, votes see only the caller, timers read the OS clock. The CPU emulator
//! replaces exactly that backend module with the emulated geometry.
//!
//! Shared memory: [`shared_array!`](crate::shared_array) declares a module-scope `.shared`
//! array (one per name, unique in the linked PTX module) and [`dynamic_shared`] returns the
//! launch's dynamic shared memory.

pub use crate::geometry::{Dim3, FULL_MASK, WARP_SIZE};
pub(crate) use crate::geometry::{ShflMode, VoteMode};

#[cfg(not(target_arch = "nvptx64"))]
mod host;
#[cfg(target_arch = "nvptx64")]
mod nvptx;

#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
use host as backend;

/// This thread's index within its block (`%tid`).
#[doc(alias = "threadIdx")]
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    backend::thread_idx()
}

/// This block's index within the grid (`%ctaid`).
#[doc(alias = "blockIdx")]
#[inline(always)]
pub fn block_idx() -> Dim3 {
    backend::block_idx()
}

/// The number of threads per block (`%ntid`).
#[doc(alias = "blockDim")]
#[inline(always)]
pub fn block_dim() -> Dim3 {
    backend::block_dim()
}

/// The number of blocks in the grid (`%nctaid`).
#[doc(alias = "gridDim")]
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    backend::grid_dim()
}

/// This thread's lane within its warp, `0..32` (`%laneid`).
#[inline(always)]
pub fn lane_id() -> u32 {
    backend::lane_id()
}

/// The index of this thread's warp within a 1-D block: `thread_idx().x / 32`.
#[inline(always)]
pub fn warp_idx() -> u32 {
    thread_idx().x / WARP_SIZE
}

/// The lanes below this one (`%lanemask_lt`).
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    backend::lanemask_lt()
}

/// The lanes at or below this one (`%lanemask_le`).
#[inline(always)]
pub fn lanemask_le() -> u32 {
    lanemask_lt() | lanemask_eq()
}

/// This lane's own bit (`%lanemask_eq`).
#[inline(always)]
pub fn lanemask_eq() -> u32 {
    1u32 << lane_id()
}

/// The lanes above this one (`%lanemask_gt`).
#[inline(always)]
pub fn lanemask_gt() -> u32 {
    !lanemask_le()
}

/// The lanes at or above this one (`%lanemask_ge`).
#[inline(always)]
pub fn lanemask_ge() -> u32 {
    !lanemask_lt()
}

/// The lanes of this warp currently executing this instruction together (`activemask`).
///
/// Only a snapshot: it does not synchronise, and it is no substitute for a known mask.
#[doc(alias = "__activemask")]
#[inline(always)]
pub fn active_mask() -> u32 {
    backend::active_mask()
}

/// Block-wide barrier (`bar.sync 0`, `__syncthreads`).
///
/// Every thread of the block must reach it (no divergent calls).
///
/// # Ordering
/// Memory operations before the barrier by any thread of the block are visible to all threads
/// of the block after it (CTA scope; no effect on other blocks or GPUs).
#[doc(alias = "__syncthreads")]
#[inline(always)]
pub fn sync_threads() {
    backend::sync_threads()
}

/// Block-wide barrier that also ORs `pred` over the block (`bar.red.or.pred`,
/// `__syncthreads_or`).
///
/// # Ordering
/// As [`sync_threads`].
#[doc(alias = "__syncthreads_or")]
#[inline(always)]
pub fn sync_threads_or(pred: bool) -> bool {
    backend::barrier_red_or(0, 0, pred)
}

/// Block-wide barrier that counts the threads with `pred` true (`bar.red.popc.u32`,
/// `__syncthreads_count`).
///
/// # Ordering
/// As [`sync_threads`].
#[doc(alias = "__syncthreads_count")]
#[inline(always)]
pub fn sync_threads_count(pred: bool) -> u32 {
    backend::sync_threads_count(pred)
}

/// Named barrier: waits until `n_threads` threads (a multiple of 32; whole warps) have reached
/// barrier `id` (`bar.sync id, n`).
///
/// `n_threads == 0` means every thread of the block, on the GPU as in the emulator: the GPU
/// passes the block's thread count rounded up to whole warps, the count of a count-less
/// barrier, in the counted form that [`barrier_arrive`] also uses, so that
/// `barrier_arrive(id, 0)` and `barrier_sync(id, 0)` meet. Do not meet them in one barrier
/// phase with a count-less form ([`sync_threads`], [`sync_threads_or`],
/// [`sync_threads_count`], [`barrier_sync_or`]`(id, 0)`): on the GPU mixing the two forms in
/// a phase is an illegal instruction (the emulator does not detect it).
///
/// Barrier 0 is the one [`sync_threads`] uses; ids go up to 15. Every warp that takes part
/// must call it with all its threads.
///
/// # Ordering
/// As [`sync_threads`], among the participating threads.
#[doc(alias = "__barrier_sync_count")]
#[inline(always)]
pub fn barrier_sync(id: u32, n_threads: u32) {
    backend::barrier_sync(id, n_threads)
}

/// Named barrier, arrive only: counts this warp towards barrier `id` without waiting
/// (`bar.arrive id, n`). Producers arrive, consumers [`barrier_sync`].
///
/// `n_threads == 0` means every thread of the block, as for [`barrier_sync`] (same count, same
/// caveat): PTX requires a non-zero count for `bar.arrive`, so the GPU passes the block's
/// thread count rounded up to whole warps.
///
/// # Ordering
/// Memory operations before the arrive are visible to the threads that complete the barrier
/// with [`barrier_sync`] (CTA scope).
#[inline(always)]
pub fn barrier_arrive(id: u32, n_threads: u32) {
    backend::barrier_arrive(id, n_threads)
}

/// Named barrier with an OR-reduction of `pred` over the `n_threads` participants
/// (`bar.red.or.pred id, n`; `n_threads == 0`: the whole block, in the count-less form, which
/// must not meet [`barrier_sync`]/[`barrier_arrive`]`(id, 0)` in one phase). Every
/// participant gets the same result.
///
/// # Ordering
/// As [`barrier_sync`].
#[inline(always)]
pub fn barrier_sync_or(id: u32, n_threads: u32, pred: bool) -> bool {
    backend::barrier_red_or(id, n_threads, pred)
}

/// Warp barrier over the lanes in `mask` (`bar.warp.sync`, `__syncwarp`). Every lane in
/// `mask` must call it with the same mask, and the caller's lane must be in `mask`.
///
/// # Ordering
/// Memory operations before it by the lanes in `mask` are visible to those lanes after it.
#[doc(alias = "__syncwarp")]
#[inline(always)]
pub fn sync_warp(mask: u32) {
    backend::sync_warp(mask)
}

/// A value that warp shuffles can move: one 32-bit register or two (64-bit types).
pub trait Shuffle: Copy + sealed::Sealed {
    /// Applies a 32-bit shuffle to every 32-bit word of the value.
    #[doc(hidden)]
    fn map_words(self, f: impl Fn(u32) -> u32) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! shuffle32 {
    ($($t:ty => $to:expr, $from:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Shuffle for $t {
            #[inline(always)]
            fn map_words(self, f: impl Fn(u32) -> u32) -> Self {
                $from(f($to(self)))
            }
        }
    )*};
}

shuffle32! {
    u32 => |v: u32| v, |w: u32| w;
    i32 => |v: i32| v as u32, |w: u32| w as i32;
    f32 => f32::to_bits, f32::from_bits;
}

macro_rules! shuffle64 {
    ($($t:ty => $to:expr, $from:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Shuffle for $t {
            #[inline(always)]
            fn map_words(self, f: impl Fn(u32) -> u32) -> Self {
                let bits: u64 = $to(self);
                let lo = f(bits as u32);
                let hi = f((bits >> 32) as u32);
                $from((u64::from(hi) << 32) | u64::from(lo))
            }
        }
    )*};
}

shuffle64! {
    u64 => |v: u64| v, |w: u64| w;
    i64 => |v: i64| v as u64, |w: u64| w as i64;
    f64 => f64::to_bits, f64::from_bits;
}

/// Reads `v` from lane `src_lane` (`shfl.sync.idx`, `__shfl_sync`).
///
/// Every lane in `mask` must call it with the same mask; `src_lane` should name a lane in
/// `mask` (otherwise the result is undefined).
#[doc(alias = "__shfl_sync")]
#[inline(always)]
pub fn shfl_idx<T: Shuffle>(mask: u32, v: T, src_lane: u32) -> T {
    v.map_words(|w| backend::shfl(ShflMode::Idx, mask, w, src_lane))
}

/// Reads `v` from lane `lane_id() - delta`; lanes below `delta` keep their own value
/// (`shfl.sync.up`, `__shfl_up_sync`). Same mask rules as [`shfl_idx`].
#[doc(alias = "__shfl_up_sync")]
#[inline(always)]
pub fn shfl_up<T: Shuffle>(mask: u32, v: T, delta: u32) -> T {
    v.map_words(|w| backend::shfl(ShflMode::Up, mask, w, delta))
}

/// Reads `v` from lane `lane_id() + delta`; lanes past 31 keep their own value
/// (`shfl.sync.down`, `__shfl_down_sync`). Same mask rules as [`shfl_idx`].
#[doc(alias = "__shfl_down_sync")]
#[inline(always)]
pub fn shfl_down<T: Shuffle>(mask: u32, v: T, delta: u32) -> T {
    v.map_words(|w| backend::shfl(ShflMode::Down, mask, w, delta))
}

/// Reads `v` from lane `lane_id() ^ lane_mask` (`shfl.sync.bfly`, `__shfl_xor_sync`).
/// Same mask rules as [`shfl_idx`].
#[doc(alias = "__shfl_xor_sync")]
#[inline(always)]
pub fn shfl_xor<T: Shuffle>(mask: u32, v: T, lane_mask: u32) -> T {
    v.map_words(|w| backend::shfl(ShflMode::Xor, mask, w, lane_mask))
}

/// True when `pred` holds on every lane of `mask` (`vote.sync.all`, `__all_sync`).
/// Every lane in `mask` must call it with the same mask.
#[doc(alias = "__all_sync")]
#[inline(always)]
pub fn vote_all(mask: u32, pred: bool) -> bool {
    backend::vote(VoteMode::All, mask, pred)
}

/// True when `pred` holds on some lane of `mask` (`vote.sync.any`, `__any_sync`).
/// Every lane in `mask` must call it with the same mask.
#[doc(alias = "__any_sync")]
#[inline(always)]
pub fn vote_any(mask: u32, pred: bool) -> bool {
    backend::vote(VoteMode::Any, mask, pred)
}

/// True when `pred` is the same on every lane of `mask` (`vote.sync.uni`, `__uni_sync`).
#[doc(alias = "__uni_sync")]
#[inline(always)]
pub fn vote_uni(mask: u32, pred: bool) -> bool {
    backend::vote(VoteMode::Uni, mask, pred)
}

/// The lanes of `mask` whose `pred` is true, as a bit mask (`vote.sync.ballot.b32`,
/// `__ballot_sync`). Every lane in `mask` must call it with the same mask.
#[doc(alias = "__ballot_sync")]
#[inline(always)]
pub fn ballot(mask: u32, pred: bool) -> u32 {
    backend::ballot(mask, pred)
}

/// Four bytes picked from the eight of `a` (bytes 0–3) and `b` (bytes 4–7): result byte `i`
/// is the byte that nibble `i` of `sel` names (bits 0–2; with bit 3 set, that byte's sign bit
/// replicated instead). One `prmt.b32` on the GPU (CUDA's `__byte_perm`); e.g.
/// `sel = 0x3210 + 0x1111 × s` gives bytes `s..s + 4` of `b:a`, a funnel shift by `s` bytes.
#[doc(alias = "__byte_perm")]
#[doc(alias = "prmt")]
#[inline(always)]
pub fn byte_perm(a: u32, b: u32, sel: u32) -> u32 {
    backend::byte_perm(a, b, sel)
}

/// A global nanosecond clock, comparable across the SMs of one GPU (`%globaltimer`).
///
/// Its resolution is about a microsecond on current GPUs; use it for timeouts, not for
/// fine-grained timing. On the host: nanoseconds since the first call in the process.
#[inline(always)]
pub fn globaltimer() -> u64 {
    backend::globaltimer()
}

/// This SM's cycle counter (`%clock64`, `clock64()`); monotonic per SM, not comparable
/// across SMs. On the host: same as [`globaltimer`].
#[inline(always)]
pub fn clock64() -> u64 {
    backend::clock64()
}

/// Suspends the thread for about `ns` nanoseconds (at most ~1 ms; `nanosleep.u32`). A hint
/// for back-off in spin loops; the hardware may wake it earlier.
#[doc(alias = "__nanosleep")]
#[inline(always)]
pub fn nanosleep(ns: u32) {
    backend::nanosleep(ns)
}

/// Waits until every grid this one depends on programmatically (the kernel before it on
/// its stream, when this launch allowed programmatic dependent launch) has completed and its
/// memory operations are visible (`griddepcontrol.wait`, `cudaGridDependencySynchronize`).
/// Returns at once when the launch has no such dependency. Call it before touching anything
/// an earlier kernel writes.
#[doc(alias = "cudaGridDependencySynchronize")]
#[inline(always)]
pub fn grid_dependency_wait() {
    backend::griddep_wait()
}

/// Lets the next kernel on the stream, if launched with programmatic dependent launch, start
/// now instead of when this grid ends (`griddepcontrol.launch_dependents`,
/// `cudaTriggerProgrammaticLaunchCompletion`); it still waits in [`grid_dependency_wait`]
/// for this grid to complete. Each block's first call counts; without one, a block counts
/// when it exits.
#[doc(alias = "cudaTriggerProgrammaticLaunchCompletion")]
#[inline(always)]
pub fn launch_dependents() {
    backend::griddep_launch_dependents()
}

/// One failed poll of a spin loop ([`Spin`](crate::wait::Spin) calls it): nothing on the GPU;
/// under CPU emulation it yields the core to the threads being waited for.
#[inline(always)]
pub(crate) fn spin_hint() {
    backend::spin_hint()
}

/// A new spin wait begins ([`Spin::new`](crate::wait::Spin::new) calls it): nothing on the
/// GPU; under CPU emulation the poll back-off starts again from yielding, so that a thread
/// that waits often (a signal ping-pong without block barriers) is not left sleeping the
/// longest back-off at every wait.
#[inline(always)]
pub(crate) fn wait_begins() {
    backend::wait_begins()
}

/// Aborts the kernel (`trap`): the launch fails and the host sees an error.
#[doc(alias = "__trap")]
#[inline(always)]
pub fn trap() -> ! {
    backend::trap()
}

/// The launch's dynamic shared memory (`extern __shared__`), as a generic pointer to `T`.
///
/// Its size is the launch's `shared_mem_bytes` ([`dynamic_shared_size`]). The base is 16-byte
/// aligned. Every kernel of a module sees the same symbol, so two views of it alias.
/// On the host: the block's buffer of the emulated launch ([`crate::emu`]); outside an
/// emulated launch a 64 KiB process-wide buffer.
#[inline(always)]
pub fn dynamic_shared<T>() -> *mut T {
    backend::dynamic_shared().cast()
}

/// The number of bytes of dynamic shared memory of this launch (`%dynamic_smem_size`).
#[inline(always)]
pub fn dynamic_shared_size() -> u32 {
    backend::dynamic_shared_size()
}

/// Declares a static shared-memory array `[T; N]` and evaluates to a generic `*mut T` to it.
///
/// `shared_array!(NAME: [T; N])` declares a module-scope `.shared .align 16` array named
/// `symcomm_smem_NAME` in the PTX (via `global_asm!`), so:
/// - `NAME` must be unique in the linked module (all crates of the kernel); a duplicate is a
///   PTX assembly error, never silent aliasing;
/// - `T` and `N` must be concrete (no generic parameters of the enclosing function);
/// - every expansion of the same call site (e.g. after inlining) denotes the same array: one
///   array per block, shared by the block's threads, uninitialised at kernel start.
///
/// On the host: the block's own zeroed copy in an emulated launch ([`crate::emu`], one per
/// name and block); outside an emulated launch a process-wide static.
///
/// ```ignore
/// let tile: *mut f32 = shared_array!(TRANSPOSE_TILE: [f32; 32 * 33]);
/// ```
#[macro_export]
#[cfg_attr(
    target_arch = "nvptx64",
    allow_internal_unstable(asm_experimental_arch)
)]
macro_rules! shared_array {
    ($name:ident : [$t:ty; $n:expr]) => {{
        #[cfg(target_arch = "nvptx64")]
        let p: *mut $t = {
            ::core::arch::global_asm!(
                concat!(".shared .align 16 .b8 symcomm_smem_", stringify!($name), "[{bytes}];"),
                bytes = const (::core::mem::size_of::<$t>() * ($n)),
            );
            let p: u64;
            // SAFETY: converts the address of a declared .shared symbol to a generic pointer.
            unsafe {
                ::core::arch::asm!(
                    concat!("cvta.shared.u64 {p}, symcomm_smem_", stringify!($name), ";"),
                    p = out(reg64) p,
                    options(pure, nomem, nostack),
                );
            }
            p as *mut $t
        };
        #[cfg(not(target_arch = "nvptx64"))]
        let p: *mut $t = {
            static mut SYMCOMM_SMEM: $crate::arch::HostShared<[$t; $n]> =
                $crate::arch::HostShared::new();
            $crate::arch::host_shared_array(stringify!($name), &raw mut SYMCOMM_SMEM)
                .cast::<$t>()
        };
        p
    }};
}

/// Storage of a host-side [`shared_array!`](crate::shared_array) (16-byte aligned,
/// uninitialised). Implementation detail of the macro.
#[doc(hidden)]
#[repr(C, align(16))]
pub struct HostShared<T>(core::mem::MaybeUninit<T>);

impl<T> HostShared<T> {
    /// Uninitialised storage.
    #[doc(hidden)]
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        HostShared(core::mem::MaybeUninit::uninit())
    }
}

/// The host storage of [`shared_array!`](crate::shared_array) `name`: the calling block's
/// copy in an emulated launch, else `fallback` (the macro's static). Implementation detail
/// of the macro.
#[doc(hidden)]
#[cfg(not(target_arch = "nvptx64"))]
pub fn host_shared_array<T>(name: &'static str, fallback: *mut HostShared<T>) -> *mut u8 {
    let layout = core::alloc::Layout::new::<HostShared<T>>();
    crate::emu::static_shared(name, layout.size(), layout.align()).unwrap_or(fallback.cast::<u8>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_perm_picks_bytes_of_b_then_a_and_replicates_signs() {
        let (a, b) = (0x8382_8180_u32, 0x0706_0504_u32);
        assert_eq!(super::byte_perm(a, b, 0x3210), a);
        assert_eq!(super::byte_perm(a, b, 0x7654), b);
        // A funnel shift by one byte: bytes 1..5 of b:a.
        assert_eq!(super::byte_perm(a, b, 0x3210 + 0x1111), 0x0483_8281);
        // Bit 3 of a nibble: the named byte's sign, replicated (0x81 and 0x80 negative).
        assert_eq!(super::byte_perm(a, b, 0x0859), 0x80ff_05ff);
    }
}
