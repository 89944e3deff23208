//! The gallery kernels run on the CPU: each rank is one host thread executing the kernel as a
//! one-thread, one-block launch (the device crate's host backend), over windows laid out in a
//! real flat address range (peer `p` at `base + p × 4 GiB`, reserved with `MAP_NORESERVE`).
//! This checks the algorithms (slicing, peer addressing, LL epochs and banks across launches,
//! barrier brackets) — not GPU memory ordering, which the node's benchmark checks.

use symcomm_device::comm::{DevComm, LsaBarrierHandle, ResourceWindow};
use symcomm_device::emu::{FlatVa, Launch};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::Bf16;
use symcomm_device::window::{Window, WindowHandle};
use symcomm_gallery_kernels as k;
use symcomm_gallery_kernels::{pattern, plan};

/// Byte offsets of the regions inside every rank's 4 GiB slot.
const RES: u64 = 0;
const SCRATCH: u64 = 64 << 10;
const A: u64 = 16 << 20;
const B: u64 = 24 << 20;
const PUSH: u64 = 8 << 20;
/// The regions every rank has a window descriptor of.
const WINDOWS: [u64; 4] = [SCRATCH, PUSH, A, B];
/// Bytes of each slot that are made accessible (the rest stays reserved only).
const USED: u64 = 32 << 20;
const TIMEOUT: u64 = 20_000_000_000;

/// A flat range of `n` slots (reserved inaccessible, then the first [`USED`] bytes of each
/// slot opened, so little memory is committed) and every rank's window descriptors of its
/// regions; unmapped on drop.
struct Flat {
    va: FlatVa,
    n: u32,
    /// Rank `r`'s descriptor of region `WINDOWS[i]` at `r × WINDOWS.len() + i` (never
    /// resized: kernels take their addresses).
    windows: Vec<Window>,
}

impl Flat {
    fn new(n: u32) -> Flat {
        let va = FlatVa::new(n as usize, USED as usize).unwrap();
        let base = va.base();
        let windows = (0..n)
            .flat_map(|rank| {
                WINDOWS.map(|off| Window {
                    lsa_flat_base: base + off,
                    lsa_rank: rank as i32,
                    world_rank: rank as i32,
                    stride4g: 1,
                    lsa_size: n, // the host checks every peer against it
                    ..Window::default()
                })
            })
            .collect();
        Flat { va, n, windows }
    }

    fn addr(&self, rank: u32, off: u64) -> u64 {
        self.va.slot(rank as usize) + off
    }

    /// Byte `off` of region `region` (one of [`WINDOWS`]) through `rank`'s window of it.
    fn sym(&self, rank: u32, region: u64, off: u64) -> SymPtr<u8> {
        let i = WINDOWS
            .iter()
            .position(|&w| w == region)
            .expect("a region with windows");
        let w: &Window = &self.windows[rank as usize * WINDOWS.len() + i];
        SymPtr::new(WindowHandle::from_ptr(w), off as usize)
    }

    fn comm(&self, rank: u32, barriers: i32) -> DevComm {
        let mut c = DevComm::new(rank as i32, self.n as i32, rank as i32, self.n as i32);
        c.resource = ResourceWindow {
            lsa_flat_base: self.va.base() + RES,
            stride4g: 1,
            mc_offset4k: 0,
        };
        c.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers: barriers,
        };
        c
    }

    fn write<T: Copy>(&self, rank: u32, off: u64, v: &[T]) {
        // SAFETY: inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), self.addr(rank, off) as *mut T, v.len())
        };
    }

    fn read<T: Copy + Default>(&self, rank: u32, off: u64, n: usize) -> Vec<T> {
        let mut v = vec![T::default(); n];
        // SAFETY: inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr(rank, off) as *const T, v.as_mut_ptr(), n)
        };
        v
    }

    /// Writes `count` elements of pattern `seed` to region `A` of every rank (its own values)
    /// and poisons region `B` of every rank with `poison` elements [`Elem::POISON`].
    fn fill<T: Elem>(&self, seed: u32, count: usize, poison: usize) {
        for r in 0..self.n {
            self.write(r, A, &pattern_of::<T>(seed, r, count));
            self.write(r, B, &vec![T::POISON; poison]);
        }
    }

    /// Asserts that the `count` elements of every rank `r` at byte `at(r)` of its slot are
    /// `want(r, i)`; a failure names `what`, the rank and the element.
    fn check<T: Elem>(
        &self,
        at: impl Fn(u32) -> u64,
        count: usize,
        want: impl Fn(u32, usize) -> f32,
        what: &str,
    ) {
        for r in 0..self.n {
            let got: Vec<T> = self.read(r, at(r), count);
            for (i, g) in got.into_iter().enumerate() {
                assert_eq!(g.value(), want(r, i), "{what} rank {r} elem {i}");
            }
        }
    }
}

/// An element type of the tests' buffers.
trait Elem: Copy + Default {
    /// What the kernels must overwrite (f32: a NaN; bf16: the largest finite value).
    const POISON: Self;
    /// The element nearest `v` (exact for the pattern's values).
    fn from_f32(v: f32) -> Self;
    /// The element as f32 (exact).
    fn value(self) -> f32;
}

impl Elem for f32 {
    const POISON: f32 = f32::NAN;
    fn from_f32(v: f32) -> f32 {
        v
    }
    fn value(self) -> f32 {
        self
    }
}

/// bf16 bits.
impl Elem for u16 {
    const POISON: u16 = 0x7f7f;
    fn from_f32(v: f32) -> u16 {
        Bf16::from_f32(v).0
    }
    fn value(self) -> f32 {
        Bf16(self).to_f32()
    }
}

/// Runs `f(rank)` on `n` threads at once and returns their results in rank order.
fn each_rank<R: Send>(n: u32, f: impl Fn(u32) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let f = &f;
                s.spawn(move || f(r))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Runs `launch(rank, status)` on every rank of `flat` at once and asserts that every status
/// word stays 0.
fn on_ranks(flat: &Flat, launch: impl Fn(u32, *mut u32) + Sync) {
    let st = each_rank(flat.n, |r| {
        let mut status = 0u32;
        launch(r, &mut status);
        status
    });
    assert!(st.iter().all(|&s| s == 0), "{st:?}");
}

/// Host form of an LL kernel: `(comm, src, dst, bytes, scratch, cap, timeout, status)`.
type LlKernel = unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, SymPtr<u8>, u64, u64, *mut u32);

/// Host form of a barrier kernel: `(comm, src, dst, bytes, timeout, status)`.
type BarrierKernel = unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, *mut u32);

/// Host form of a pipelined push kernel:
/// `(comm, src, dst, bytes, push, slots, chunk, timeout, status)`.
type PushKernel =
    unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, SymPtr<u8>, u64, u64, u64, *mut u32);

/// Runs an LL kernel on every rank (source in region `A`, destination in region `dst`, the
/// LL region in `SCRATCH` with `cap` packs per sender); every status must stay 0.
fn run_ll(flat: &Flat, kernel: LlKernel, dst: u64, packs: u64, cap: u64) {
    on_ranks(flat, |r, status| {
        let (src, dst, ll) = (
            flat.sym(r, A, 0),
            flat.sym(r, dst, 0),
            flat.sym(r, SCRATCH, 0),
        );
        // SAFETY: every caller sizes A, `dst` and the LL region of every rank for `packs`
        // packs of this kernel (see each test) and every rank runs the same launch.
        unsafe {
            kernel(
                flat.comm(r, 1),
                src,
                dst,
                packs * 16,
                ll,
                cap,
                TIMEOUT,
                status,
            )
        };
    })
}

/// Runs a barrier kernel on every rank (source in region `A`, destination in region `dst`);
/// every status must stay 0.
fn run_barrier(flat: &Flat, kernel: BarrierKernel, dst: u64, packs: u64) {
    on_ranks(flat, |r, status| {
        let (src, dst) = (flat.sym(r, A, 0), flat.sym(r, dst, 0));
        // SAFETY: every caller sizes A and `dst` of every rank for `packs` packs of this
        // kernel (see each test) and every rank runs the same launch.
        unsafe { kernel(flat.comm(r, 1), src, dst, packs * 16, TIMEOUT, status) };
    })
}

/// Runs a push kernel on every rank (source in region `A`, destination at byte `off` of
/// region `region` where `dst(rank)` is `(region, off)`, the push region in `PUSH` with
/// `slots` slots of `chunk` packs per sender); every status must stay 0.
fn run_push(
    flat: &Flat,
    kernel: PushKernel,
    dst: impl Fn(u32) -> (u64, u64) + Sync,
    packs: u64,
    slots: u64,
    chunk: u64,
) {
    on_ranks(flat, |r, status| {
        let (region, off) = dst(r);
        let (src, dst, push) = (
            flat.sym(r, A, 0),
            flat.sym(r, region, off),
            flat.sym(r, PUSH, 0),
        );
        let comm = flat.comm(r, 1);
        // SAFETY: every caller sizes A and the destination of every rank for `packs` packs of
        // this kernel (see each test); the push region (8 MiB) holds the counters and
        // n × slots slots of `chunk` packs of one block; every rank runs the same launch.
        unsafe {
            kernel(
                comm,
                src,
                dst,
                packs * 16,
                push,
                slots,
                chunk,
                TIMEOUT,
                status,
            )
        };
    })
}

/// Elements `0..count` of pattern `seed` of `rank`.
fn pattern_of<T: Elem>(seed: u32, rank: u32, count: usize) -> Vec<T> {
    (0..count)
        .map(|i| T::from_f32(pattern::value(seed, rank, i as u64) as f32))
        .collect()
}

/// What every rank's `dst` holds after an all-gather of `per` elements of pattern `seed`:
/// block `p` is rank `p`'s input.
fn gathered(seed: u32, per: usize) -> impl Fn(u32, usize) -> f32 {
    move |_, i| pattern::value(seed, (i / per) as u32, (i % per) as u64) as f32
}

/// What rank `r`'s `dst` holds after an all-to-all of blocks of `per` elements of pattern
/// `seed`: block `p` is block `r` of rank `p`'s input.
fn exchanged(seed: u32, per: usize) -> impl Fn(u32, usize) -> f32 {
    move |r, i| pattern::value(seed, (i / per) as u32, (r as usize * per + i % per) as u64) as f32
}

/// What rank `r`'s `dst` holds after a reduce-scatter (by `op`, a closed form of
/// [`pattern`] over `n` ranks) of blocks of `per` elements of pattern `seed`.
fn scattered(
    op: fn(u32, u32, u64) -> i32,
    seed: u32,
    n: u32,
    per: usize,
) -> impl Fn(u32, usize) -> f32 {
    move |r, i| op(seed, n, (r as usize * per + i) as u64) as f32
}

#[test]
fn two_shot_all_reduce_sums_every_rank_for_8_and_3_ranks_in_and_out_of_place() {
    for (n, inplace) in [(8u32, false), (3, true)] {
        let flat = Flat::new(n);
        let count = 4 * 1000 + 12; // packs not a multiple of the rank count
        let dst = if inplace { A } else { B };
        flat.fill::<f32>(5, count, count);
        run_barrier(
            &flat,
            k::all_reduce_two_shot_f32_sum,
            dst,
            (count / 4) as u64,
        );
        let want = |_, i: usize| pattern::sum(5, n, i as u64) as f32;
        flat.check::<f32>(|_| dst, count, want, &format!("n {n}"));
    }
}

#[test]
fn push_two_shot_all_reduce_is_right_over_several_steps_in_and_out_of_place() {
    // (ranks, in place, slots, packs per slot): many steps with slots reused, and one step.
    for (n, inplace, slots, chunk) in [
        (8u32, false, 2u64, 37u64),
        (3, true, 3, 50),
        (8, true, 2, 1000),
    ] {
        let flat = Flat::new(n);
        let count = 4 * 1003; // f32: 1003 packs, several rounds, ragged slices
        let dst = if inplace { A } else { B };
        for launch in 0..2u32 {
            let seed = launch + 40;
            flat.fill::<f32>(seed, count, count);
            let packs = (count / 4) as u64;
            let kernel = k::all_reduce_two_shot_push_f32_sum;
            run_push(&flat, kernel, |_| (dst, 0), packs, slots, chunk);
            let want = |_, i: usize| pattern::sum(seed, n, i as u64) as f32;
            let what = format!("n {n} chunk {chunk} launch {launch}");
            flat.check::<f32>(|_| dst, count, want, &what);
        }
    }
}

#[test]
fn two_shot_ll_all_reduce_is_right_for_ragged_slices_launch_after_launch() {
    for (n, inplace) in [(8u32, false), (3, true)] {
        let flat = Flat::new(n);
        let count = 8 * 301; // bf16: 301 packs, ragged slices
        let dst = if inplace { A } else { B };
        for launch in 0..3u32 {
            flat.fill::<u16>(launch + 80, count, count);
            let kernel = k::all_reduce_two_shot_ll_bf16_max;
            run_ll(&flat, kernel, dst, (count / 8) as u64, 256);
            let want = |_, i: usize| pattern::max(launch + 80, n, i as u64) as f32;
            flat.check::<u16>(|_| dst, count, want, &format!("n {n} launch {launch}"));
        }
    }
}

#[test]
fn push_reduce_scatter_is_right_over_several_steps_in_and_out_of_place() {
    for (n, inplace, slots, chunk) in [(8u32, false, 2u64, 7u64), (3, true, 2, 100)] {
        let flat = Flat::new(n);
        let per = 4 * 25; // f32 per block: 25 packs
        // In place, rank r's block of A is its destination.
        let dst = |r: u32| {
            if inplace {
                (A, (r as usize * per * 4) as u64)
            } else {
                (B, 0)
            }
        };
        for launch in 0..2u32 {
            let seed = launch + 90;
            flat.fill::<f32>(seed, per * n as usize, per);
            let kernel = k::reduce_scatter_push_f32_min;
            run_push(&flat, kernel, dst, (per / 4) as u64, slots, chunk);
            let at = |r| dst(r).0 + dst(r).1;
            let what = format!("n {n} chunk {chunk} launch {launch}");
            flat.check::<f32>(at, per, scattered(pattern::min, seed, n, per), &what);
        }
    }
}

#[test]
fn one_shot_ll_all_reduce_is_right_launch_after_launch_across_banks() {
    let n = 8;
    let flat = Flat::new(n);
    let count = 8 * 300; // bf16
    let cap = 1024u64;
    for launch in 0..4u32 {
        flat.fill::<u16>(launch, count, count);
        run_ll(
            &flat,
            k::all_reduce_one_shot_bf16_sum,
            B,
            (count / 8) as u64,
            cap,
        );
        let want = |_, i: usize| pattern::sum(launch, n, i as u64) as f32;
        flat.check::<u16>(|_| B, count, want, &format!("launch {launch}"));
        for r in 0..n {
            // The counter advanced once per launch.
            assert_eq!(flat.read::<u32>(r, SCRATCH, 1)[0], launch + 1);
        }
    }
    assert!(plan::ll_region_bytes(n, cap) < (4 << 20));
}

#[test]
fn reduce_scatter_all_gather_all_to_all_and_broadcast_move_the_right_blocks() {
    let n = 4u32;
    let flat = Flat::new(n);
    let per = 64usize; // f32 per block
    let total = per * n as usize;
    let packs = (per / 4) as u64;
    // reduce-scatter (max)
    flat.fill::<f32>(11, total, total);
    run_barrier(&flat, k::reduce_scatter_f32_max, B, packs);
    flat.check::<f32>(|_| B, per, scattered(pattern::max, 11, n, per), "rs");
    // all-gather
    flat.fill::<f32>(12, per, total);
    run_barrier(&flat, k::all_gather, B, packs);
    flat.check::<f32>(|_| B, total, gathered(12, per), "ag");
    // all-to-all
    flat.fill::<f32>(13, total, total);
    run_barrier(&flat, k::all_to_all, B, packs);
    flat.check::<f32>(|_| B, total, exchanged(13, per), "a2a");
    // broadcast from rank 2
    flat.fill::<f32>(14, total, total);
    on_ranks(&flat, |r, status| {
        let (src, dst) = (flat.sym(r, A, 0), flat.sym(r, B, 0));
        // SAFETY: A and B hold n × per f32 on every rank.
        unsafe {
            k::broadcast(
                flat.comm(r, 1),
                src,
                dst,
                (total * 4) as u64,
                2,
                TIMEOUT,
                status,
            )
        };
    });
    let want = |_, i: usize| pattern::value(14, 2, i as u64) as f32;
    flat.check::<f32>(|_| B, total, want, "bcast");
}

#[test]
fn ll_all_gather_reduce_scatter_and_all_to_all_are_right_in_one_launch_sequence() {
    let n = 8u32;
    let flat = Flat::new(n);
    let per = 40usize; // f32 per block: 10 packs
    let total = per * n as usize;
    let packs = (per / 4) as u64;
    let cap = 64u64;
    // Two rounds of the three kinds: six LL launches alternate the banks across kinds.
    for round in 0..2u32 {
        let seed = 60 + 3 * round;
        flat.fill::<f32>(seed, per, total);
        run_ll(&flat, k::all_gather_ll, B, packs, cap);
        flat.check::<f32>(
            |_| B,
            total,
            gathered(seed, per),
            &format!("ag round {round}"),
        );
        flat.fill::<f32>(seed + 1, total, total);
        run_ll(&flat, k::reduce_scatter_ll_f32_sum, B, packs, cap);
        let want = scattered(pattern::sum, seed + 1, n, per);
        flat.check::<f32>(|_| B, per, want, &format!("rs round {round}"));
        flat.fill::<f32>(seed + 2, total, total);
        run_ll(&flat, k::all_to_all_ll, B, packs, cap);
        let want = exchanged(seed + 2, per);
        flat.check::<f32>(|_| B, total, want, &format!("a2a round {round}"));
    }
    for r in 0..n {
        assert_eq!(flat.read::<u32>(r, SCRATCH, 1)[0], 6, "six LL launches");
    }
}

#[test]
fn a_missing_peer_makes_the_barrier_time_out_with_status_1() {
    let flat = Flat::new(2);
    let wa = flat.sym(0, A, 0);
    let mut status = 0u32;
    // SAFETY: windows exist; rank 1 never launches, so rank 0's entry barrier times out.
    unsafe { k::all_reduce_two_shot_f16_sum(flat.comm(0, 1), wa, wa, 64, 20_000_000, &mut status) };
    assert_eq!(status, 1);
}

/// The RMSNorm arguments over host rows `residual` (`tokens × hidden` bf16), `weight`,
/// `out` and `hout` (`residual_out`), eps 1e-6.
fn norm_args(
    residual: &[u16],
    weight: &[u16],
    out: &mut [u16],
    hout: &mut [u16],
    tokens: usize,
    segs: u32,
) -> k::rmsnorm::NormArgs {
    k::rmsnorm::NormArgs {
        residual: residual.as_ptr() as u64,
        weight: weight.as_ptr() as u64,
        out: out.as_mut_ptr() as u64,
        residual_out: hout.as_mut_ptr() as u64,
        tokens: tokens as u64,
        hidden: weight.len() as u64,
        eps: 1e-6,
        segs,
    }
}

#[test]
fn fused_rmsnorm_one_shot_and_two_shot_match_the_unfused_kernel() {
    // 0 = one-shot LL, 1 = two-shot with barriers, 2 = two-shot LL.
    for variant in 0..3 {
        fused_rmsnorm_matches_unfused(variant);
    }
}

fn fused_rmsnorm_matches_unfused(variant: u32) {
    let n = 4;
    let flat = Flat::new(n);
    // One emulated thread holds MAX_PACKS packs of a row: hidden = 8 × MAX_PACKS.
    let (tokens, hidden) = (3usize, 8 * k::rmsnorm::MAX_PACKS);
    let rows = tokens * hidden;
    for r in 0..n {
        flat.write(r, A, &pattern_of::<u16>(21, r, rows));
    }
    let (residual, weight) = (
        pattern_of::<u16>(22, 0, rows),
        pattern_of::<u16>(23, 0, hidden),
    );
    // The LL kernels take the same parameters.
    let ll = if variant == 2 {
        k::all_reduce_rmsnorm_two_shot_ll_bf16
    } else {
        k::all_reduce_rmsnorm_one_shot_bf16
    };
    let outs: Vec<(Vec<u16>, Vec<u16>)> = each_rank(n, |r| {
        let mut out = vec![0x7f7fu16; rows];
        let mut hout = vec![0x7f7fu16; rows];
        let a = norm_args(&residual, &weight, &mut out, &mut hout, tokens, 1);
        let (comm, x) = (flat.comm(r, 1), flat.sym(r, A, 0));
        let mut status = 0u32;
        // SAFETY: x window, LL scratch with cap ≥ rows / 8 (the LL kernels) or a fused region
        // of 2 × rows bf16 at 4 MiB (barrier two-shot), local rows.
        unsafe {
            if variant == 1 {
                let fused = flat.sym(r, SCRATCH, 4 << 20);
                k::all_reduce_rmsnorm_two_shot_bf16(comm, x, a, fused, TIMEOUT, &mut status)
            } else {
                ll(
                    comm,
                    x,
                    a,
                    flat.sym(r, SCRATCH, 0),
                    1024,
                    TIMEOUT,
                    &mut status,
                )
            }
        };
        assert_eq!(status, 0);
        (out, hout)
    });
    // The unfused kernel on the exact sums.
    let sum: Vec<u16> = (0..rows)
        .map(|i| Bf16::from_f32(pattern::sum(21, n, i as u64) as f32).0)
        .collect();
    let mut out = vec![0u16; rows];
    let mut hout = vec![0u16; rows];
    let a = norm_args(&residual, &weight, &mut out, &mut hout, tokens, 1);
    // SAFETY: host buffers of the sizes NormArgs gives.
    unsafe { k::rmsnorm_residual_bf16(sum.as_ptr() as u64, a) };
    for (r, (o, h)) in outs.iter().enumerate() {
        assert_eq!(h, &hout, "variant {variant}: rank {r} residual_out");
        assert_eq!(o, &out, "variant {variant}: rank {r} out");
    }
    assert!(out.iter().any(|&v| v != 0), "a non-trivial result");
}

#[test]
fn a_fused_two_shot_whose_entry_barrier_fails_on_part_of_a_cluster_ends_with_a_timeout() {
    // Rank 0 cuts its one row into 4 segments, one cluster of 4 blocks; rank 1 launches only
    // block 0 (no split). Rank 0's block 0 passes its entry barrier and joins its row; blocks
    // 1–3 time out at theirs and skip the row (the guarded join keeps them alive while block 0
    // may still store its partials into them; the emulator fails a launch that stores into a
    // block that has exited), and
    // block 0's wait for their partials must end: the launch returns in time, no emulator
    // error, the timeout reported.
    let (n, tokens, hidden, threads) = (2u32, 2usize, 256usize, 32u32);
    let flat = Flat::new(n);
    let rows = tokens * hidden;
    let (residual, weight) = (
        pattern_of::<u16>(31, 0, rows),
        pattern_of::<u16>(32, 0, hidden),
    );
    let short = 50_000_000;
    let statuses = each_rank(n, |r| {
        let mut out = vec![0x7f7fu16; rows];
        let mut hout = vec![0x7f7fu16; rows];
        let (blocks, segs, timeout) = if r == 0 {
            (4, 4, short)
        } else {
            (1, 1, TIMEOUT)
        };
        let a = norm_args(&residual, &weight, &mut out, &mut hout, tokens, segs);
        let (x, fused) = (flat.sym(r, A, 0), flat.sym(r, SCRATCH, 4 << 20));
        let comm = flat.comm(r, 4);
        let status = std::sync::atomic::AtomicU32::new(0);
        let st = status.as_ptr();
        let launch = Launch::new(blocks, threads).cluster(segs);
        let t0 = std::time::Instant::now();
        // SAFETY: x window, fused region at 4 MiB of the scratch window, local rows; clusters
        // of `segs` blocks, 4 barriers on both ranks.
        let ran = unsafe {
            launch
                .run_unsync(|| k::all_reduce_rmsnorm_two_shot_bf16(comm, x, a, fused, timeout, st))
        };
        assert!(ran.is_ok(), "rank {r}: {ran:?}");
        let took = t0.elapsed();
        assert!(took.as_secs() < 10, "rank {r} took {took:?}");
        status.into_inner()
    });
    assert_eq!(statuses[0], 1, "rank 0 reports the timeout");
}
