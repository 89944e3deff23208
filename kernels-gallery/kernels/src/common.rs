//! Building blocks shared by the gallery kernels: the operands of a collective, 16-byte pack
//! accesses, peer addresses, thread indexing, the barrier bracket every barrier-based kernel
//! uses, status reports, and lane-wise reductions of packs (from peers' copies too).

use core::marker::PhantomData;

use symcomm_device::arch::{block_dim, block_idx, grid_dim, thread_idx};
use symcomm_device::mem::{self, LoadOrder, Scope, StoreOrder, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::plan::PACK;

/// The operands of a collective body: its source and destination (windows or local pointers,
/// as each body says) and its size in bytes (the buffer of an all-reduce or broadcast; one
/// rank's block of an all-gather, reduce-scatter or all-to-all). Any size at any offset: the
/// bodies move it in the packs of the destination (`shape`).
#[derive(Clone, Copy)]
pub struct Io {
    /// The source.
    pub src: SymPtr<u8>,
    /// The destination.
    pub dst: SymPtr<u8>,
    /// Bytes (see above).
    pub bytes: u64,
}

/// Runs `$body::<true>` (any size at any offset) when `$any`, else `$body::<false>` (whole
/// packs), with the arguments given. Each entry point passes a constant (`entry!` in `lib.rs`),
/// so only one form is compiled into it.
macro_rules! by_shape {
    ($any:expr, $body:ident $(::<$($g:tt),*>)? ($($arg:expr),* $(,)?)) => {
        if $any {
            $body::<$($($g,)*)? true>($($arg),*)
        } else {
            $body::<$($($g,)*)? false>($($arg),*)
        }
    };
}
pub(crate) use by_shape;

// ANCHOR: pack_access
/// Loads the pack at byte address `addr` (plain `ld.global.v4.u32`).
///
/// # Safety
/// `addr` is a 16-byte aligned global address valid for 16 bytes of reads.
#[inline(always)]
pub unsafe fn ld(addr: u64) -> U32x4 {
    // SAFETY: forwarded.
    unsafe { mem::load_v4_u32(addr as *const U32x4, LoadOrder::Weak, Scope::Gpu) }
}

/// Stores a pack at byte address `addr` (plain `st.global.v4.u32`).
///
/// # Safety
/// `addr` is a 16-byte aligned global address valid for 16 bytes of writes.
#[inline(always)]
pub unsafe fn st(addr: u64, v: U32x4) {
    // SAFETY: forwarded.
    unsafe { mem::store_v4_u32(addr as *mut U32x4, v, StoreOrder::Weak, Scope::Gpu) }
}
// ANCHOR_END: pack_access

/// Address of byte 0 of `p` in LSA peer `peer`'s copy.
///
/// # Safety
/// `p.window` is a live window descriptor.
#[inline(always)]
pub unsafe fn peer_addr(p: SymPtr<u8>, peer: i32) -> u64 {
    // SAFETY: forwarded.
    unsafe { p.lsa(peer) as u64 }
}

/// The addresses of byte `off` of `p` in the copies of the `N` LSA ranks of a team of `N`,
/// visited [`rotated`] from `me` (ours first).
///
/// # Safety
/// `p.window` is a live window descriptor.
#[inline(always)]
pub unsafe fn peer_addrs<const N: usize>(p: SymPtr<u8>, me: i32, off: u64) -> [u64; N] {
    let mut a = [0u64; N];
    let mut k = 0;
    while k < N {
        // SAFETY: forwarded.
        a[k] = unsafe { peer_addr(p, rotated(me, k as i32, N as i32)) } + off;
        k += 1;
    }
    a
}

/// Address of byte 0 of `p` in this rank's copy.
///
/// # Safety
/// `p.window` is a live window descriptor.
#[inline(always)]
pub unsafe fn local_addr(p: SymPtr<u8>) -> u64 {
    // SAFETY: forwarded.
    unsafe { p.local() as u64 }
}

/// First call of every gallery kernel: waits for the kernel before it on the stream when
/// this one was launched with programmatic dependent launch (nothing this kernel touches may
/// be read before that). The kernel does not let the next one start early
/// (`launch_dependents`): the next launch then begins as this grid's blocks exit, which took
/// the same time off on the 2-rank proxy as starting it at once, without its blocks sitting
/// on SMs for the whole of this kernel.
#[inline(always)]
pub fn enter() {
    symcomm_device::arch::grid_dependency_wait();
}

/// `(first, stride)` of a grid-stride loop over packs: this thread's global index and the
/// number of threads in the grid.
#[inline(always)]
pub fn grid_stride() -> (u64, u64) {
    let t = u64::from(block_dim().x);
    (
        u64::from(block_idx().x) * t + u64::from(thread_idx().x),
        t * u64::from(grid_dim().x),
    )
}

/// The grid-stride loop over packs `lo..hi` of the any-shape bodies, two packs per pass:
/// `f(j, j2, both)` with `j2 = j + stride` (`both` false when `j2` is past `hi`). The bodies
/// issue the loads of both packs before any store: with the few blocks a collective runs,
/// its time is the passes' load latencies, and the shifted loads of an odd size add to each
/// pass what a second pack in flight hides.
#[inline(always)]
pub fn stride_pairs(lo: u64, hi: u64, mut f: impl FnMut(u64, u64, bool)) {
    let (first, stride) = grid_stride();
    let mut j = lo + first;
    while j < hi {
        let j2 = j + stride;
        f(j, j2, j2 < hi);
        j += 2 * stride;
    }
}

/// One pass of [`stride_passes`]: packs `j[..m]` (`m` of 1, 2 or 3), a grid's threads apart.
#[derive(Clone, Copy)]
pub struct Pass {
    /// The pass's packs (those from `m` on are not this pass's: not to be touched).
    pub j: [u64; 3],
    /// How many of them are in the range.
    pub m: u32,
    /// Whether this is a pass of up to three packs (else of one or two): a constant where
    /// [`stride_passes`] calls its bodies, so each body carries only its own loads.
    three: bool,
}

impl Pass {
    /// `f` of each pack of the pass, in order, as the pass's values: all calls made before any
    /// value is used, with no branch between them. A pack past the pass's `m` repeats the
    /// first pack's load (a cache hit, as in [`stride_pairs`]); a pass of pairs (`three`
    /// false) makes no third call, and its third value is the default.
    #[inline(always)]
    pub fn load(self, mut f: impl FnMut(u64) -> U32x4) -> [U32x4; 3] {
        let [j, j2, j3] = self.j;
        let a = f(j);
        let b = f(if self.m >= 2 { j2 } else { j });
        let c = if self.three {
            f(if self.m == 3 { j3 } else { j })
        } else {
            U32x4::default()
        };
        [a, b, c]
    }

    /// `f(j, v[i])` for each pack `j` (the `i`-th) of the pass.
    #[inline(always)]
    pub fn each(self, v: &[U32x4; 3], mut f: impl FnMut(u64, U32x4)) {
        f(self.j[0], v[0]);
        if self.m >= 2 {
            f(self.j[1], v[1]);
        }
        if self.three && self.m == 3 {
            f(self.j[2], v[2]);
        }
    }
}

/// [`stride_pairs`] without a pass for a last pack alone: two packs per pass, and the last
/// three in one pass. A range just over a multiple of two packs per thread (1 MiB and a few
/// bytes: one or two packs more than two for each of 16 384 threads) took a second pass for
/// the threads with a third pack. In one pass, an odd f32 all-gather of 1 MiB took 1.07× the
/// next multiple of 16 bytes, against 1.09–1.10× before in the same device call (two ranks on
/// one H100).
///
/// The choice is the same for 32 consecutive threads (a warp): the passes of the warp's first
/// thread, which has the most packs. A thread with three packs in a warp of pairs would
/// otherwise run its own branch while the others wait. In a pass of three, each thread takes
/// the packs it has left: two or three (a thread is fewer packs after its warp's first than
/// the grid has threads).
///
/// `pair` runs the passes of one or two packs, `three` the last pass of up to three. Both are
/// the same body ([`passes!`] writes it twice): each closure then has one call site and is
/// inlined, and a pass of one or two packs carries no code for a third.
///
/// The size of a pass of three keeps its unreachable case of one (a pass of three has two or
/// three packs): without it LLVM merged code of the two bodies, which took the odd all-gather
/// of 64 MiB from 0.87× the next multiple of 16 bytes to 1.07× (H100). (The all-to-all took
/// that form while it ran these passes: at 1 MiB it was the faster there.)
#[inline(always)]
pub fn stride_passes(lo: u64, hi: u64, pair: impl FnMut(Pass), three: impl FnMut(Pass)) {
    let (first, stride) = grid_stride();
    let lane = u64::from(thread_idx().x % 32);
    passes_from(lo + first, lane, hi, stride, pair, three);
}

/// The loop of [`stride_passes`] for the thread whose first pack is `j`, `lane` packs after
/// its warp's first thread's (`lane ≤ j`, `lane < stride`), in a grid of `stride` threads.
#[inline(always)]
fn passes_from(
    mut j: u64,
    lane: u64,
    hi: u64,
    stride: u64,
    mut pair: impl FnMut(Pass),
    mut three: impl FnMut(Pass),
) {
    while j < hi {
        let (j2, j3) = (j + stride, j + 2 * stride);
        // The warp's first thread has exactly three packs left.
        let w3 = j3 - lane;
        if w3 < hi && hi - w3 <= stride {
            // Two or three (`j2 < w3`); the case of one is written all the same (see
            // `stride_passes`).
            let m = if j3 < hi {
                3
            } else if j2 < hi {
                2
            } else {
                1
            };
            three(Pass {
                j: [j, j2, j3],
                m,
                three: true,
            });
            return;
        }
        let m = if j2 < hi { 2 } else { 1 };
        pair(Pass {
            j: [j, j2, j3],
            m,
            three: false,
        });
        j += 2 * stride;
    }
}

/// `passes!(lo, hi, |p| body)`: [`stride_passes`] over packs `lo..hi` with `body` for every
/// [`Pass`] `p`.
macro_rules! passes {
    ($lo:expr, $hi:expr, |$p:ident| $body:block) => {
        $crate::common::stride_passes(
            $lo,
            $hi,
            |$p: $crate::common::Pass| $body,
            |$p: $crate::common::Pass| $body,
        )
    };
}
pub(crate) use passes;

/// Calls `f(0)`, …, `f(N − 1)` (`N ≤ 8`) as straight-line code: after inlining each index is
/// a constant, so arrays indexed by it stay in registers. (A `while k < N` loop whose body
/// branches, as the any-shape loads and stores do, is not unrolled, and its arrays then live
/// in local memory.)
#[inline(always)]
pub fn unroll<const N: usize>(mut f: impl FnMut(usize)) {
    const { assert!(N <= 8) };
    // Written out: a loop would be unrolled only if its body were small.
    if N > 0 {
        f(0);
    }
    if N > 1 {
        f(1);
    }
    if N > 2 {
        f(2);
    }
    if N > 3 {
        f(3);
    }
    if N > 4 {
        f(4);
    }
    if N > 5 {
        f(5);
    }
    if N > 6 {
        f(6);
    }
    if N > 7 {
        f(7);
    }
}

// ANCHOR: rotated
/// The `k`-th peer of rank `me` in a team of `n` when peers are visited starting with `me`
/// (spreads NVLink traffic: at any moment the ranks target different peers).
#[inline(always)]
pub const fn rotated(me: i32, k: i32, n: i32) -> i32 {
    let p = me + k;
    if p >= n { p - n } else { p }
}
// ANCHOR_END: rotated

/// Byte offset of pack `j`.
#[inline(always)]
pub const fn pack_off(j: u64) -> u64 {
    j * PACK
}

// ANCHOR: report
/// Records a failed wait in `status` (0 stays 0 on success). Called by one thread.
///
/// # Safety
/// `status` is null or a valid global `u32`.
#[inline(always)]
pub unsafe fn report(status: *mut u32, r: Result<(), WaitError>) {
    if let Err(e) = r
        && !status.is_null()
    {
        // SAFETY: the caller guarantees `status`.
        unsafe { mem::store(status, e.code(), StoreOrder::Relaxed, Scope::Sys) };
    }
}
// ANCHOR_END: report

// ANCHOR: bracketed
/// Runs `$body` between an entry and an exit LSA barrier of this block (barrier index = block
/// index), with bounded waits; the result of the waits goes to `$status` (null, or a valid
/// global `u32`).
///
/// Entry: `Acquire` (every peer has entered this launch, so its inputs are ready and the
/// previous user of its outputs is done). Exit: `$exit` — `Release` when this rank only wrote
/// its own memory (peers must not reuse inputs we may still read), `AcqRel` when it stored
/// into peers (publish those stores and acquire theirs into ours).
///
/// `bracketed!(comm, exit, timeout_ns, status, |gate| body)`: the body gets the entry
/// barrier's wait as a [`Gate`] (this block has already arrived) and opens it itself once its
/// setup is done; the all-gather and all-to-all bodies (`barriered(AcqRel gated)` in
/// `entry!`) read their descriptors and compute their addresses while the peers arrive.
///
/// A macro, so that the body is written in line: passed to a function as a closure, the
/// larger any-shape bodies were not inlined, and were called with their captures through
/// local memory (0.4 µs of an all-gather of 1 MiB and a few bytes, two ranks on one H100).
///
/// Safety (the caller's): `$comm` has at least `grid_dim().x` LSA barriers; every LSA rank
/// launches the kernel with the same grid.
macro_rules! bracketed {
    // The body runs once every peer has entered (the gated form, opened before the body).
    ($comm:expr, $exit:expr, $timeout_ns:expr, $status:expr, $body:block) => {
        $crate::common::bracketed!($comm, $exit, $timeout_ns, $status, |gate| {
            if gate.open() {
                $body;
            }
        })
    };
    // The body passes the entry barrier itself (`Gate::open`), after its setup.
    ($comm:expr, $exit:expr, $timeout_ns:expr, $status:expr, |$gate:ident| $body:block) => {{
        // The arguments evaluated once, outside any `unsafe`.
        let (comm, exit, timeout_ns, status): (
            &symcomm_device::comm::DevComm,
            symcomm_device::mem::Ordering,
            u64,
            *mut u32,
        ) = ($comm, $exit, $timeout_ns, $status);
        let cta = symcomm_device::coop::Cta::new();
        let block = symcomm_device::arch::block_idx().x;
        // SAFETY: one session per block index; every rank opens it (caller's contract).
        #[allow(unused_unsafe)]
        let mut bar = unsafe { symcomm_device::barrier::LsaBarrier::new(&cta, comm, block) };
        bar.arrive(&cta, symcomm_device::mem::Ordering::Acquire);
        let mut gate = $crate::common::Gate::new(&mut bar, &cta, timeout_ns);
        {
            let $gate = &mut gate;
            $body;
        }
        let mut r = gate.close();
        if r.is_ok() {
            r = bar.sync_timeout(&cta, exit, timeout_ns);
        }
        $crate::common::bracketed!(@end bar, cta, status, r);
    }};
    (@end $bar:ident, $cta:ident, $status:ident, $r:ident) => {
        $bar.finish(&$cta);
        if symcomm_device::coop::Coop::is_leader(&$cta) {
            // SAFETY: `$status` is null or valid (caller's contract).
            #[allow(unused_unsafe)]
            unsafe {
                $crate::common::report($status, $r)
            };
        }
    };
}

/// Keeps the computation of `x` before this point: an empty `asm!` that takes and gives back
/// `x`, ordered with the other `asm!` statements (the entry barrier's wait among them). A body
/// settles the values its setup computed before [`Gate::open`], so that the setup overlaps
/// the wait: left alone, the compiler moves such arithmetic after the wait, next to its first
/// use. (No-op on the host.)
#[inline(always)]
pub fn settle(x: &mut u64) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: an empty instruction string: no effect but keeping `x` in a register here.
    unsafe {
        core::arch::asm!(
            "// settle {0}",
            inout(reg64) * x,
            options(nostack, preserves_flags)
        )
    };
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = x;
}

/// The wait of a [`bracketed!`] body's entry barrier, left to the body: this block has
/// arrived (peers may go on), and the body waits for theirs ([`open`](Self::open)) once it
/// has done what needs no peer: reading window descriptors, computing addresses and loop
/// bounds. That work then overlaps the wait instead of following it.
///
/// Nothing that a peer writes, and no input, may be read before `open` returns `true`, and
/// nothing may be written to a peer or to an output: `open` is the entry barrier's acquire.
/// A body that never opens the gate is waited for after it returns.
pub struct Gate<'a> {
    bar: &'a mut symcomm_device::barrier::LsaBarrier<symcomm_device::coop::Cta>,
    cta: &'a symcomm_device::coop::Cta,
    timeout_ns: u64,
    waited: Option<Result<(), WaitError>>,
}

impl<'a> Gate<'a> {
    /// The gate of `bar`, whose entry `arrive` is done.
    #[inline(always)]
    pub fn new(
        bar: &'a mut symcomm_device::barrier::LsaBarrier<symcomm_device::coop::Cta>,
        cta: &'a symcomm_device::coop::Cta,
        timeout_ns: u64,
    ) -> Self {
        Gate {
            bar,
            cta,
            timeout_ns,
            waited: None,
        }
    }

    /// Waits for every peer's entry (acquire, bounded as the bracket's waits; once), and says
    /// whether they all came: `false` means the body must stop (the error goes to the
    /// kernel's status). Every thread of the block calls it.
    #[inline(always)]
    pub fn open(&mut self) -> bool {
        if self.waited.is_none() {
            let acquire = symcomm_device::mem::Ordering::Acquire;
            self.waited = Some(self.bar.wait_timeout(self.cta, acquire, self.timeout_ns));
        }
        matches!(self.waited, Some(Ok(())))
    }

    /// The entry's result, waiting now if the body did not.
    #[inline(always)]
    pub fn close(mut self) -> Result<(), WaitError> {
        self.open();
        self.waited.unwrap_or(Ok(()))
    }
}
pub(crate) use bracketed;
// ANCHOR_END: bracketed

// ANCHOR: acc
/// A running lane-wise reduction of packs in the element's accumulation type, rounded once
/// at the end (fp32 accumulation for 16-bit floats). Index loops with constant bounds only,
/// so the lanes stay in registers after unrolling.
pub struct Acc<T: Element, O: ReduceOp> {
    a: [T::Acc; 8],
    _op: PhantomData<O>,
}

impl<T: Element, O: ReduceOp> Acc<T, O> {
    /// Starts with the lanes of `v`.
    #[inline(always)]
    pub fn new(v: U32x4) -> Self {
        let mut a = [T::Acc::default(); 8];
        let mut i = 0;
        while i < T::LANES {
            a[i] = T::get(&v, i);
            i += 1;
        }
        Acc {
            a,
            _op: PhantomData,
        }
    }

    /// Folds in the lanes of `v`.
    #[inline(always)]
    pub fn add(&mut self, v: U32x4) {
        let mut i = 0;
        while i < T::LANES {
            self.a[i] = O::apply(self.a[i], T::get(&v, i));
            i += 1;
        }
    }

    /// The result, rounded to `T`.
    #[inline(always)]
    pub fn finish(&self) -> U32x4 {
        T::pack(&self.a)
    }
}
// ANCHOR_END: acc

/// Loads the pack at byte `o` past each of the `N` addresses `base`: all `N` loads issued
/// before any is used (a loop with a constant bound, unrolled: the packs stay in registers).
///
/// # Safety
/// Every `base[k] + o` is valid for a pack read ([`ld`]).
#[inline(always)]
pub unsafe fn ld_each<const N: usize>(base: &[u64; N], o: u64) -> [U32x4; N] {
    let mut v = [U32x4::default(); N];
    let mut k = 0;
    while k < N {
        // SAFETY: forwarded.
        v[k] = unsafe { ld(base[k] + o) };
        k += 1;
    }
    v
}

/// Stores `v` at byte `off` of `p` in every LSA rank's copy (`n` ranks), visited [`rotated`]
/// from `me` (ours first).
///
/// # Safety
/// `p.window` is a live window descriptor; byte `off` of every copy is valid for a pack write.
#[inline(always)]
pub unsafe fn st_peers(p: SymPtr<u8>, me: i32, n: i32, off: u64, v: U32x4) {
    for k in 0..n {
        // SAFETY: forwarded.
        unsafe { st(peer_addr(p, rotated(me, k, n)) + off, v) };
    }
}

/// The reduction of the packs at byte `off` of `src` in every LSA rank's copy (`n` ranks):
/// ours first, then the peers [`rotated`] from `me`, one load at a time.
///
/// # Safety
/// `src.window` is a live window descriptor; byte `off` of every copy is valid for a pack
/// read.
#[inline(always)]
pub unsafe fn pull<T: Element, O: ReduceOp>(
    src: SymPtr<u8>,
    me: i32,
    n: i32,
    off: u64,
) -> Acc<T, O> {
    // SAFETY: forwarded.
    unsafe {
        let mut acc = Acc::<T, O>::new(ld(peer_addr(src, me) + off));
        for k in 1..n {
            acc.add(ld(peer_addr(src, rotated(me, k, n)) + off));
        }
        acc
    }
}

/// Lane-wise reduction of `N` packs in array order.
#[inline(always)]
pub fn reduce_packs<T: Element, O: ReduceOp, const N: usize>(v: &[U32x4; N]) -> U32x4 {
    let mut acc = Acc::<T, O>::new(v[0]);
    let mut k = 1;
    while k < N {
        acc.add(v[k]);
        k += 1;
    }
    acc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use std::vec;

    /// Grids of 1 to 3 blocks of 1 to 96 threads and every range of up to 7 passes of them:
    /// [`passes_from`] with [`Pass::load`] and [`Pass::each`] loads and stores each pack once,
    /// makes a pass of three only as a thread's last and only when its warp's first thread
    /// has three packs left, and makes no thread take more passes than its warp's first
    /// thread, which takes `max(1, packs / 2)`.
    #[test]
    fn passes_cover_every_pack_once_and_a_warp_never_waits_for_a_lone_pack() {
        for threads in [1u64, 2, 3, 5, 8, 31, 32, 33, 64, 96] {
            for blocks in 1..=3u64 {
                let stride = threads * blocks;
                for hi in 0..=7 * stride {
                    let lo = hi.min(5);
                    let seen = RefCell::new(vec![0u32; hi as usize]);
                    let left = |j: u64| if j < hi { (hi - j).div_ceil(stride) } else { 0 };
                    let what = std::format!("{threads}×{blocks} threads, packs {lo}..{hi}");
                    for t in 0..stride {
                        let lane = (t % threads) % 32;
                        let j0 = lo + t;
                        // (passes so far, whether the pass of three was made)
                        let state = RefCell::new((0u64, false));
                        let visit = |p: Pass| {
                            let mut st = state.borrow_mut();
                            assert!(!st.1, "{what}: thread {t}: a pass after the pass of three");
                            assert!(p.m >= 1 && p.m <= if p.three { 3 } else { 2 });
                            if p.three {
                                assert_eq!(left(p.j[0] - lane), 3, "{what}: warp's first");
                                assert_eq!(left(p.j[0]), u64::from(p.m), "{what}: thread {t}");
                                st.1 = true;
                            }
                            // Through the pass's own load and store: only its packs, each
                            // value stored at the pack it was loaded from.
                            let mine = &p.j[..p.m as usize];
                            let v = p.load(|j| {
                                assert!(mine.contains(&j), "{what}: thread {t} loads {j}");
                                U32x4([j as u32; 4])
                            });
                            p.each(&v, |j, x| {
                                assert_eq!(x.0[0], j as u32, "{what}: thread {t}");
                                seen.borrow_mut()[j as usize] += 1;
                            });
                            st.0 += 1;
                        };
                        let first = left(j0 - lane);
                        let most = if first == 0 { 0 } else { (first / 2).max(1) };
                        passes_from(j0, lane, hi, stride, visit, visit);
                        let passes = state.borrow().0;
                        if lane == 0 {
                            assert_eq!(passes, most, "{what}: thread {t}");
                        }
                        assert!(passes <= most, "{what}: thread {t}");
                    }
                    for (j, &n) in seen.borrow().iter().enumerate() {
                        let want = if j as u64 >= lo { 1 } else { 0 };
                        assert_eq!(n, want, "{what}: pack {j}");
                    }
                }
            }
        }
    }
}
