//! The gallery kernels run on the CPU: each rank is one host thread executing the kernel as a
//! one-thread, one-block launch (the device crate's host backend), over windows laid out in a
//! real flat address range (peer `p` at `base + p × 4 GiB`, reserved with `MAP_NORESERVE`).
//! This checks the algorithms (slicing, peer addressing, LL epochs and banks across launches,
//! barrier brackets) — not GPU memory ordering, which the node's benchmark checks.

use std::sync::Arc;

use symcomm_device::comm::{DevComm, LsaBarrierHandle, ResourceWindow};
use symcomm_device::emu::Launch;
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::Bf16;
use symcomm_device::window::Window;
use symcomm_gallery_kernels as k;
use symcomm_gallery_kernels::{pattern, plan};

const SLOT: u64 = 4 << 30;
/// Byte offsets of the regions inside every rank's 4 GiB slot.
const RES: u64 = 0;
const SCRATCH: u64 = 64 << 10;
const A: u64 = 16 << 20;
const B: u64 = 24 << 20;
const PUSH: u64 = 8 << 20;
/// Bytes of each slot that are made accessible (the rest stays reserved only).
const USED: u64 = 32 << 20;
const TIMEOUT: u64 = 20_000_000_000;

/// A flat range of `n` slots (reserved inaccessible, then the first [`USED`] bytes of each
/// slot opened, so little memory is committed); unmapped on drop.
struct Flat {
    base: u64,
    len: usize,
    n: u32,
}

// SAFETY: the range is plain memory shared by the rank threads, as GPU memory is.
unsafe impl Send for Flat {}
// SAFETY: as above.
unsafe impl Sync for Flat {}

impl Flat {
    fn new(n: u32) -> Flat {
        let len = (n as u64 * SLOT) as usize;
        // SAFETY: an anonymous private reservation with no address hint.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes");
        for r in 0..n as u64 {
            // SAFETY: the first USED bytes of slot r lie inside the reservation.
            let rc = unsafe {
                libc::mprotect(
                    (p as u64 + r * SLOT) as *mut libc::c_void,
                    USED as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            assert_eq!(rc, 0, "mprotect of slot {r}");
        }
        Flat {
            base: p as u64,
            len,
            n,
        }
    }

    fn addr(&self, rank: u32, off: u64) -> u64 {
        self.base + rank as u64 * SLOT + off
    }

    /// A window descriptor for `rank` of the region at `off` (boxed: kernels take its
    /// address).
    fn window(&self, rank: u32, off: u64) -> Box<Window> {
        Box::new(Window {
            lsa_flat_base: self.base + off,
            lsa_rank: rank as i32,
            world_rank: rank as i32,
            stride4g: 1,
            ..Window::default()
        })
    }

    fn comm(&self, rank: u32, barriers: i32) -> DevComm {
        let mut c = DevComm::new(rank as i32, self.n as i32, rank as i32, self.n as i32);
        c.resource = ResourceWindow {
            lsa_flat_base: self.base + RES,
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
}

impl Drop for Flat {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Runs `f(rank)` on `n` threads at once and returns the status words.
fn on_ranks(n: u32, f: impl Fn(u32, *mut u32) + Sync) -> Vec<u32> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let f = &f;
                s.spawn(move || {
                    let mut status = 0u32;
                    f(r, &mut status);
                    status
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Host form of an LL kernel: `(comm, src, dst, packs, scratch, cap, timeout, status)`.
type LlKernel = unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, SymPtr<u8>, u64, u64, *mut u32);

/// Host form of a barrier kernel: `(comm, src, dst, packs, timeout, status)`.
type BarrierKernel = unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, *mut u32);

/// Runs an LL kernel on every rank (source in region `A`, destination in `dst`, the LL
/// region in `SCRATCH` with `cap` packs per sender) and returns the status words.
fn run_ll(flat: &Flat, n: u32, kernel: LlKernel, dst: u64, packs: u64, cap: u64) -> Vec<u32> {
    on_ranks(n, |r, status| {
        let (wa, wd, ws) = (
            flat.window(r, A),
            flat.window(r, dst),
            flat.window(r, SCRATCH),
        );
        // SAFETY: every caller sizes A, `dst` and the LL region of every rank for `packs`
        // packs of this kernel (see each test) and every rank runs the same launch.
        unsafe {
            kernel(
                flat.comm(r, 1),
                sym(&wa, 0),
                sym(&wd, 0),
                packs,
                sym(&ws, 0),
                cap,
                TIMEOUT,
                status,
            )
        };
    })
}

/// Runs a barrier kernel on every rank (source in region `A`, destination in `B`) and returns
/// the status words.
fn run_barrier(flat: &Flat, n: u32, kernel: BarrierKernel, packs: u64) -> Vec<u32> {
    on_ranks(n, |r, status| {
        let (wa, wb) = (flat.window(r, A), flat.window(r, B));
        // SAFETY: every caller sizes A and B of every rank for `packs` packs of this kernel
        // (see each test) and every rank runs the same launch.
        unsafe {
            kernel(
                flat.comm(r, 1),
                sym(&wa, 0),
                sym(&wb, 0),
                packs,
                TIMEOUT,
                status,
            )
        };
    })
}

/// Host form of a pipelined push kernel:
/// `(comm, src, dst, packs, push, slots, chunk, timeout, status)`.
type PushKernel =
    unsafe fn(DevComm, SymPtr<u8>, SymPtr<u8>, u64, SymPtr<u8>, u64, u64, u64, *mut u32);

/// Runs a push kernel on every rank (source in region `A`, destination at byte `off` of
/// region `region` where `dst(rank)` is `(region, off)`, the push region in `PUSH` with
/// `slots` slots of `chunk` packs per sender) and returns the status words.
fn run_push(
    flat: &Flat,
    n: u32,
    kernel: PushKernel,
    dst: impl Fn(u32) -> (u64, u64) + Sync,
    packs: u64,
    slots: u64,
    chunk: u64,
) -> Vec<u32> {
    on_ranks(n, |r, status| {
        let (region, off) = dst(r);
        let (wa, wd, wp) = (
            flat.window(r, A),
            flat.window(r, region),
            flat.window(r, PUSH),
        );
        // SAFETY: every caller sizes A and the destination of every rank for `packs` packs of
        // this kernel (see each test); the push region (8 MiB) holds the counters and
        // n × slots slots of `chunk` packs of one block; every rank runs the same launch.
        unsafe {
            kernel(
                flat.comm(r, 1),
                sym(&wa, 0),
                sym(&wd, off),
                packs,
                sym(&wp, 0),
                slots,
                chunk,
                TIMEOUT,
                status,
            )
        };
    })
}

fn sym(w: &Window, off: u64) -> SymPtr<u8> {
    SymPtr::new(w as *const Window, off as usize)
}

fn f32_pattern(seed: u32, rank: u32, count: usize, first: u64) -> Vec<f32> {
    (0..count)
        .map(|i| pattern::value(seed, rank, first + i as u64) as f32)
        .collect()
}

/// Elements `0..count` of pattern `seed` of `rank` as bf16 bits.
fn bf16_pattern(seed: u32, rank: u32, count: usize) -> Vec<u16> {
    f32_pattern(seed, rank, count, 0)
        .into_iter()
        .map(|v| Bf16::from_f32(v).0)
        .collect()
}

/// Writes `src_count` values of pattern `seed` to region `A` of every rank (its own values)
/// and poisons region `B` of every rank with `b_count` NaNs.
fn fill_a_and_poison_b(flat: &Flat, n: u32, seed: u32, src_count: usize, b_count: usize) {
    for r in 0..n {
        flat.write(r, A, &f32_pattern(seed, r, src_count, 0));
        flat.write(r, B, &vec![f32::NAN; b_count]);
    }
}

/// Asserts that the `count` f32 of every rank `r` at `at(r)` (a region and a byte offset in
/// it) are `want(r, i)`; a failure names `what`, the rank and the element.
fn check_f32(
    flat: &Flat,
    n: u32,
    at: impl Fn(u32) -> (u64, u64),
    count: usize,
    want: impl Fn(u32, usize) -> f32,
    what: &str,
) {
    for r in 0..n {
        let (region, off) = at(r);
        let got: Vec<f32> = flat.read(r, region + off, count);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g, want(r, i), "{what} rank {r} elem {i}");
        }
    }
}

#[test]
fn two_shot_all_reduce_sums_every_rank_for_8_and_3_ranks_in_and_out_of_place() {
    for (n, inplace) in [(8u32, false), (3, true)] {
        let flat = Arc::new(Flat::new(n));
        let count = 4 * 1000 + 12; // packs not a multiple of the rank count
        for r in 0..n {
            flat.write(r, A, &f32_pattern(5, r, count, 0));
            flat.write(r, B, &vec![f32::NAN; count]);
        }
        let st = on_ranks(n, |r, status| {
            let (wa, wb) = (flat.window(r, A), flat.window(r, B));
            let dst = if inplace { sym(&wa, 0) } else { sym(&wb, 0) };
            // SAFETY: windows of `count` f32 on every rank, one barrier per (single) block.
            unsafe {
                k::all_reduce_two_shot_f32_sum(
                    flat.comm(r, 1),
                    sym(&wa, 0),
                    dst,
                    (count / 4) as u64,
                    TIMEOUT,
                    status,
                )
            };
        });
        assert!(st.iter().all(|&s| s == 0), "{st:?}");
        for r in 0..n {
            let got: Vec<f32> = flat.read(r, if inplace { A } else { B }, count);
            for (i, g) in got.iter().enumerate() {
                assert_eq!(
                    *g,
                    pattern::sum(5, n, i as u64) as f32,
                    "n {n} rank {r} elem {i}"
                );
            }
        }
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
        let dst = |_| (if inplace { A } else { B }, 0);
        for launch in 0..2u32 {
            let seed = launch + 40;
            fill_a_and_poison_b(&flat, n, seed, count, count);
            let packs = (count / 4) as u64;
            let st = run_push(
                &flat,
                n,
                k::all_reduce_two_shot_push_f32_sum,
                dst,
                packs,
                slots,
                chunk,
            );
            assert!(st.iter().all(|&s| s == 0), "{st:?}");
            check_f32(
                &flat,
                n,
                dst,
                count,
                |_, i| pattern::sum(seed, n, i as u64) as f32,
                &format!("n {n} chunk {chunk} launch {launch}"),
            );
        }
    }
}

#[test]
fn two_shot_ll_all_reduce_is_right_for_ragged_slices_launch_after_launch() {
    for (n, inplace) in [(8u32, false), (3, true)] {
        let flat = Flat::new(n);
        let count = 8 * 301; // bf16: 301 packs, ragged slices
        let cap = 256u64;
        for launch in 0..3u32 {
            for r in 0..n {
                let v = bf16_pattern(launch + 80, r, count);
                flat.write(r, A, &v);
                flat.write(r, B, &vec![0x7f7fu16; count]);
            }
            let st = run_ll(
                &flat,
                n,
                k::all_reduce_two_shot_ll_bf16_max,
                if inplace { A } else { B },
                (count / 8) as u64,
                cap,
            );
            assert!(st.iter().all(|&s| s == 0), "launch {launch}: {st:?}");
            for r in 0..n {
                let got: Vec<u16> = flat.read(r, if inplace { A } else { B }, count);
                for (i, g) in got.iter().enumerate() {
                    let want = pattern::max(launch + 80, n, i as u64) as f32;
                    assert_eq!(
                        Bf16(*g).to_f32(),
                        want,
                        "n {n} launch {launch} rank {r} elem {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn push_reduce_scatter_is_right_over_several_steps_in_and_out_of_place() {
    for (n, inplace, slots, chunk) in [(8u32, false, 2u64, 7u64), (3, true, 2, 100)] {
        let flat = Flat::new(n);
        let per = 4 * 25; // f32 per block: 25 packs
        let total = per * n as usize;
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
            fill_a_and_poison_b(&flat, n, seed, total, per);
            let packs = (per / 4) as u64;
            let st = run_push(
                &flat,
                n,
                k::reduce_scatter_push_f32_min,
                dst,
                packs,
                slots,
                chunk,
            );
            assert!(st.iter().all(|&s| s == 0), "{st:?}");
            let want =
                |r: u32, i: usize| pattern::min(seed, n, (r as usize * per + i) as u64) as f32;
            check_f32(
                &flat,
                n,
                dst,
                per,
                want,
                &format!("n {n} chunk {chunk} launch {launch}"),
            );
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
        for r in 0..n {
            let v = bf16_pattern(launch, r, count);
            flat.write(r, A, &v);
            flat.write(r, B, &vec![0x7f7fu16; count]);
        }
        let st = run_ll(
            &flat,
            n,
            k::all_reduce_one_shot_bf16_sum,
            B,
            (count / 8) as u64,
            cap,
        );
        assert!(st.iter().all(|&s| s == 0), "launch {launch}: {st:?}");
        for r in 0..n {
            let got: Vec<u16> = flat.read(r, B, count);
            for (i, g) in got.iter().enumerate() {
                let want = pattern::sum(launch, n, i as u64) as f32;
                assert_eq!(Bf16(*g).to_f32(), want, "launch {launch} rank {r} elem {i}");
            }
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
    let reset = |src_count: usize, seed: u32| {
        for r in 0..n {
            flat.write(r, A, &f32_pattern(seed, r, src_count, 0));
            flat.write(r, B, &vec![f32::NAN; total]);
        }
    };
    let packs = (per / 4) as u64;
    // reduce-scatter (max)
    reset(total, 11);
    let st = run_barrier(&flat, n, k::reduce_scatter_f32_max, packs);
    assert!(st.iter().all(|&s| s == 0));
    for r in 0..n {
        let got: Vec<f32> = flat.read(r, B, per);
        for (i, g) in got.iter().enumerate() {
            let want = pattern::max(11, n, (r as usize * per + i) as u64);
            assert_eq!(*g, want as f32, "rs rank {r} elem {i}");
        }
    }
    // all-gather
    reset(per, 12);
    let st = run_barrier(&flat, n, k::all_gather, packs);
    assert!(st.iter().all(|&s| s == 0));
    for r in 0..n {
        let got: Vec<f32> = flat.read(r, B, total);
        for (i, g) in got.iter().enumerate() {
            let want = pattern::value(12, (i / per) as u32, (i % per) as u64);
            assert_eq!(*g, want as f32, "ag rank {r} elem {i}");
        }
    }
    // all-to-all
    reset(total, 13);
    let st = run_barrier(&flat, n, k::all_to_all, packs);
    assert!(st.iter().all(|&s| s == 0));
    for r in 0..n {
        let got: Vec<f32> = flat.read(r, B, total);
        for (i, g) in got.iter().enumerate() {
            let (p, j) = (i / per, i % per);
            let want = pattern::value(13, p as u32, (r as usize * per + j) as u64);
            assert_eq!(*g, want as f32, "a2a rank {r} elem {i}");
        }
    }
    // broadcast from rank 2
    reset(total, 14);
    let st = on_ranks(n, |r, status| {
        let (wa, wb) = (flat.window(r, A), flat.window(r, B));
        // SAFETY: A and B hold n × per f32 on every rank.
        unsafe {
            k::broadcast(
                flat.comm(r, 1),
                sym(&wa, 0),
                sym(&wb, 0),
                (total / 4) as u64,
                2,
                TIMEOUT,
                status,
            )
        };
    });
    assert!(st.iter().all(|&s| s == 0));
    for r in 0..n {
        let got: Vec<f32> = flat.read(r, B, total);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(
                *g,
                pattern::value(14, 2, i as u64) as f32,
                "bcast rank {r} elem {i}"
            );
        }
    }
}

#[test]
fn ll_all_gather_reduce_scatter_and_all_to_all_are_right_in_one_launch_sequence() {
    let n = 8u32;
    let flat = Flat::new(n);
    let per = 40usize; // f32 per block: 10 packs
    let total = per * n as usize;
    let packs = (per / 4) as u64;
    let cap = 64u64;
    let reset = |src_count: usize, seed: u32| {
        for r in 0..n {
            flat.write(r, A, &f32_pattern(seed, r, src_count, 0));
            flat.write(r, B, &vec![f32::NAN; total]);
        }
    };
    // Two rounds of the three kinds: six LL launches alternate the banks across kinds.
    for round in 0..2u32 {
        let seed = 60 + 3 * round;
        reset(per, seed);
        let st = run_ll(&flat, n, k::all_gather_ll, B, packs, cap);
        assert!(st.iter().all(|&s| s == 0));
        for r in 0..n {
            let got: Vec<f32> = flat.read(r, B, total);
            for (i, g) in got.iter().enumerate() {
                let want = pattern::value(seed, (i / per) as u32, (i % per) as u64);
                assert_eq!(*g, want as f32, "ag round {round} rank {r} elem {i}");
            }
        }
        reset(total, seed + 1);
        let st = run_ll(&flat, n, k::reduce_scatter_ll_f32_sum, B, packs, cap);
        assert!(st.iter().all(|&s| s == 0));
        for r in 0..n {
            let got: Vec<f32> = flat.read(r, B, per);
            for (i, g) in got.iter().enumerate() {
                let want = pattern::sum(seed + 1, n, (r as usize * per + i) as u64);
                assert_eq!(*g, want as f32, "rs round {round} rank {r} elem {i}");
            }
        }
        reset(total, seed + 2);
        let st = run_ll(&flat, n, k::all_to_all_ll, B, packs, cap);
        assert!(st.iter().all(|&s| s == 0));
        for r in 0..n {
            let got: Vec<f32> = flat.read(r, B, total);
            for (i, g) in got.iter().enumerate() {
                let (p, j) = (i / per, i % per);
                let want = pattern::value(seed + 2, p as u32, (r as usize * per + j) as u64);
                assert_eq!(*g, want as f32, "a2a round {round} rank {r} elem {i}");
            }
        }
    }
    for r in 0..n {
        assert_eq!(flat.read::<u32>(r, SCRATCH, 1)[0], 6, "six LL launches");
    }
}

#[test]
fn a_missing_peer_makes_the_barrier_time_out_with_status_1() {
    let n = 2;
    let flat = Flat::new(n);
    let wa = flat.window(0, A);
    let mut status = 0u32;
    // SAFETY: windows exist; rank 1 never launches, so rank 0's entry barrier times out.
    unsafe {
        k::all_reduce_two_shot_f16_sum(
            flat.comm(0, 1),
            sym(&wa, 0),
            sym(&wa, 0),
            4,
            20_000_000,
            &mut status,
        )
    };
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
        flat.write(r, A, &bf16_pattern(21, r, rows));
    }
    let (residual, weight) = (bf16_pattern(22, 0, rows), bf16_pattern(23, 0, hidden));
    let outs: Vec<(Vec<u16>, Vec<u16>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (flat, residual, weight) = (&flat, &residual, &weight);
                s.spawn(move || {
                    let mut out = vec![0x7f7fu16; rows];
                    let mut hout = vec![0x7f7fu16; rows];
                    let a = norm_args(residual, weight, &mut out, &mut hout, tokens, 1);
                    let (wa, ws) = (flat.window(r, A), flat.window(r, SCRATCH));
                    let mut status = 0u32;
                    // SAFETY: x window, LL scratch with cap ≥ rows / 8 (the LL kernels) or a
                    // fused region of 2 × rows bf16 at 4 MiB (barrier two-shot), local rows.
                    unsafe {
                        if variant == 2 {
                            k::all_reduce_rmsnorm_two_shot_ll_bf16(
                                flat.comm(r, 1),
                                sym(&wa, 0),
                                a,
                                sym(&ws, 0),
                                1024,
                                TIMEOUT,
                                &mut status,
                            )
                        } else if variant == 1 {
                            k::all_reduce_rmsnorm_two_shot_bf16(
                                flat.comm(r, 1),
                                sym(&wa, 0),
                                a,
                                sym(&ws, 4 << 20),
                                TIMEOUT,
                                &mut status,
                            )
                        } else {
                            k::all_reduce_rmsnorm_one_shot_bf16(
                                flat.comm(r, 1),
                                sym(&wa, 0),
                                a,
                                sym(&ws, 0),
                                1024,
                                TIMEOUT,
                                &mut status,
                            )
                        }
                    };
                    assert_eq!(status, 0);
                    (out, hout)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
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
    let (residual, weight) = (bf16_pattern(31, 0, rows), bf16_pattern(32, 0, hidden));
    let short = 50_000_000;
    let statuses: Vec<u32> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (flat, residual, weight) = (&flat, &residual, &weight);
                s.spawn(move || {
                    let mut out = vec![0x7f7fu16; rows];
                    let mut hout = vec![0x7f7fu16; rows];
                    let (blocks, segs, timeout) = if r == 0 {
                        (4, 4, short)
                    } else {
                        (1, 1, TIMEOUT)
                    };
                    let a = norm_args(residual, weight, &mut out, &mut hout, tokens, segs);
                    let (wa, ws) = (flat.window(r, A), flat.window(r, SCRATCH));
                    let comm = flat.comm(r, 4);
                    let status = std::sync::atomic::AtomicU32::new(0);
                    let st = status.as_ptr();
                    let launch = Launch::new(blocks, threads).cluster(segs);
                    let t0 = std::time::Instant::now();
                    // SAFETY: x window, fused region at 4 MiB of the scratch window, local
                    // rows; clusters of `segs` blocks, 4 barriers on both ranks.
                    let ran = unsafe {
                        launch.run_unsync(|| {
                            k::all_reduce_rmsnorm_two_shot_bf16(
                                comm,
                                sym(&wa, 0),
                                a,
                                sym(&ws, 4 << 20),
                                timeout,
                                st,
                            )
                        })
                    };
                    assert!(ran.is_ok(), "rank {r}: {ran:?}");
                    assert!(
                        t0.elapsed().as_secs() < 10,
                        "rank {r} took {:?}",
                        t0.elapsed()
                    );
                    status.into_inner()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses[0], 1, "rank 0 reports the timeout");
}
