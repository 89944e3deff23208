//! Every gallery collective on the CPU emulator, through the unchanged host path: ranks are
//! threads of this process (`Communicator::init_threads`) or processes (`symcomm-bench`
//! started once per rank), windows come from `register_window`, device communicators from
//! `DevComm::create`, and [`Collectives`] launches the kernels by name — which the emulated
//! backend runs on the host (`symcomm::launch`). Every element of every rank's output is
//! checked against a host reference.
//!
//! Sizes are small and odd (packs not a multiple of the rank count), grids are 2 blocks of
//! 64 threads (`symcomm_gallery::sizing`), so that 8 ranks stay within a few hundred OS
//! threads per launch.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::Instant;

use symcomm::backend::{Backend, use_backend};
use symcomm::bootstrap::UniqueId;
use symcomm::cuda::VmmBuffer;
use symcomm::cuda::memory::HostMapped;
use symcomm::launch::{LaunchConfig, Module};
use symcomm::launcher::rank_env;
use symcomm::ranks;
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory, Window};
use symcomm_device::comm::DevComm as RawDevComm;
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::Bf16;
use symcomm_gallery::check::{encode, find_wrong, fused_wrong, reduced};
use symcomm_gallery::rmsnorm::fused_split;
use symcomm_gallery::{Algo, Buf, Collectives, DataType, NormBuffers, RedOp, Tuning, kernels};
use symcomm_gallery_kernels::pattern;
use symcomm_gallery_kernels::rmsnorm_split::Split;

const RANKS: [usize; 3] = [2, 4, 8];
const TYPES: [DataType; 2] = [DataType::F32, DataType::Bf16];
/// Bytes of each window (and of the largest input or output).
const WINDOW: usize = 64 << 10;
/// All-reduce and broadcast size: 251 packs (odd, not a multiple of any rank count).
const AR_BYTES: usize = 251 * 16;

/// Small thresholds so that small sizes exercise every path: LL below 2 KiB (data movement)
/// or 4 KiB (one-shot), barrier kernels above, pipelined push kernels from 8 KiB with 1 KiB of
/// slots (steps of a few packs: many steps, slots reused). The fused two-shot with window
/// outputs runs direct up to 8 KiB of rows and with its second pass above.
fn tuning() -> Tuning {
    Tuning {
        one_shot_max: 4096,
        two_shot_ll_max: 16 << 10,
        fused_one_shot_max: 4096,
        fused_two_shot_ll_max: 16 << 10,
        fused_direct_max: 8 << 10,
        ll_max: 2048,
        max_blocks: 2,
        ll_blocks: 2,
        timeout_ns: 60_000_000_000,
        push_scratch: 1024,
        push_min: 8192,
        rs_push_min: 8192,
        ..Tuning::default()
    }
}

/// One rank's state (fields drop in order: windows before their memory, the communicator
/// last).
struct Rank {
    g: Collectives,
    a: Window,
    a_mem: SymmetricMemory,
    b: Window,
    b_mem: SymmetricMemory,
    comm: Communicator,
}

impl Rank {
    fn new(comm: Communicator, tuning: Tuning) -> Result<Rank> {
        let g = Collectives::new(&comm, tuning)?;
        let a_mem = SymmetricMemory::alloc(&comm, WINDOW)?;
        let b_mem = SymmetricMemory::alloc(&comm, WINDOW)?;
        let a = comm.register_window(&a_mem)?;
        let b = comm.register_window(&b_mem)?;
        Ok(Rank {
            g,
            a,
            a_mem,
            b,
            b_mem,
            comm,
        })
    }

    fn n(&self) -> usize {
        self.comm.size()
    }

    /// Poisons both windows and writes `count` pattern elements of this rank into `a`.
    fn prepare(&self, t: DataType, seed: u32, count: usize) -> Result<()> {
        self.a_mem.buffer().fill_bytes(0x7f)?;
        self.b_mem.buffer().fill_bytes(0x7f)?;
        let r = self.comm.rank() as u32;
        let bytes: Vec<u8> = (0..count)
            .flat_map(|i| encode(t, pattern::value(seed, r, i as u64)))
            .collect();
        self.a_mem.buffer().copy_from_host(&bytes)?;
        self.comm.bootstrap().barrier()
    }

    /// Wrong elements among `count` elements of `t` at byte `offset` of `mem` (reported).
    fn check(
        &self,
        what: &str,
        mem: &SymmetricMemory,
        t: DataType,
        count: usize,
        want: impl Fn(usize) -> i32,
    ) -> Result<usize> {
        let mut got = vec![0u8; count * t.size()];
        mem.buffer().copy_to_host(&mut got)?;
        self.g.check_status()?;
        let m = find_wrong(&got, t, count, want, 4);
        if m.count != 0 {
            eprintln!(
                "rank {} of {}: {what} {t}: {} of {count} wrong, first {:?}",
                self.comm.rank(),
                self.n(),
                m.count,
                m.first
            );
        }
        self.comm.bootstrap().barrier()?;
        Ok(m.count)
    }

    /// Every collective in every type; returns the wrong elements of this rank.
    fn run_all(&self) -> Result<usize> {
        let (n, r) = (self.n(), self.comm.rank() as u64);
        let null = std::ptr::null_mut();
        let mut wrong = 0;
        let mut seed = 100u32;
        for t in TYPES {
            let s = t.size();
            // All-reduce, every algorithm, out of place and (two-shot) in place.
            for algo in [
                Algo::OneShot,
                Algo::TwoShotLl,
                Algo::TwoShot,
                Algo::TwoShotPush,
            ] {
                seed += 1;
                let count = AR_BYTES / s;
                self.prepare(t, seed, count)?;
                let (src, dst) = (Buf::whole(&self.a), Buf::whole(&self.b));
                let used =
                    self.g
                        .all_reduce_with(Some(algo), src, dst, count, t, RedOp::Sum, null)?;
                assert_eq!(used, algo, "the forced algorithm runs");
                let what = format!("all_reduce {}", algo.name());
                wrong += self.check(&what, &self.b_mem, t, count, |i| {
                    reduced(RedOp::Sum, seed, n as u32, i as u64)
                })?;
            }
            // In place: the two-shot, and the pipelined push, whose peers store results into
            // the very slices this rank is still pushing from.
            let count = AR_BYTES / s;
            for (algo, op) in [(Algo::TwoShot, RedOp::Max), (Algo::TwoShotPush, RedOp::Sum)] {
                seed += 1;
                self.prepare(t, seed, count)?;
                let inplace = Buf::whole(&self.a);
                self.g
                    .all_reduce_with(Some(algo), inplace, inplace, count, t, op, null)?;
                let what = format!("all_reduce {} in place {op}", algo.name());
                wrong += self.check(&what, &self.a_mem, t, count, |i| {
                    reduced(op, seed, n as u32, i as u64)
                })?;
            }
            // Data movement: an LL size (2 KiB total at most) and a barrier-kernel size.
            for per in [64usize, 2064] {
                seed += 1;
                let count = per / s;
                self.prepare(t, seed, count)?;
                let (src, dst) = (Buf::whole(&self.a), Buf::whole(&self.b));
                self.g.all_gather(src, dst, count, t, null)?;
                wrong += self.check(
                    &format!("all_gather {per} B per rank"),
                    &self.b_mem,
                    t,
                    count * n,
                    |i| pattern::value(seed, (i / count) as u32, (i % count) as u64),
                )?;
                seed += 1;
                self.prepare(t, seed, count * n)?;
                self.g.all_to_all(src, dst, count, t, null)?;
                wrong += self.check(
                    &format!("all_to_all {per} B per peer"),
                    &self.b_mem,
                    t,
                    count * n,
                    |i| {
                        pattern::value(
                            seed,
                            (i / count) as u32,
                            r * count as u64 + (i % count) as u64,
                        )
                    },
                )?;
            }
            // Reduce-scatter: LL, pull (between the LL and push limits), push (several rounds).
            for total in [64 * n, 3000, 9000] {
                seed += 1;
                let per = (total / n).next_multiple_of(16);
                let count = per / s;
                self.prepare(t, seed, count * n)?;
                let (src, dst) = (Buf::whole(&self.a), Buf::whole(&self.b));
                self.g
                    .reduce_scatter(src, dst, count, t, RedOp::Sum, null)?;
                wrong += self.check(
                    &format!("reduce_scatter {} B", per * n),
                    &self.b_mem,
                    t,
                    count,
                    |i| reduced(RedOp::Sum, seed, n as u32, r * count as u64 + i as u64),
                )?;
            }
            // Broadcast (barrier kernel) from the last and the first rank, out of place and
            // in place.
            for (root, in_place) in [(n - 1, false), (0, false), (n / 2, true)] {
                seed += 1;
                let count = AR_BYTES / s;
                self.prepare(t, seed, count)?;
                let dst = if in_place { &self.a } else { &self.b };
                self.g
                    .broadcast(Buf::whole(&self.a), Buf::whole(dst), count, t, root, null)?;
                let mem = if in_place { &self.a_mem } else { &self.b_mem };
                let what = format!("broadcast from {root} (in place: {in_place})");
                wrong += self.check(&what, mem, t, count, |i| {
                    pattern::value(seed, root as u32, i as u64)
                })?;
            }
            // Small broadcasts run on the LL kernel (`Tuning::broadcast_ll`); three in a row
            // from changing roots use both LL banks and the roots' acknowledgements.
            let bytes = (2048 / n / 16 - 1) * 16;
            assert!(self.g.tuning().broadcast_ll(bytes, bytes as u64 / 16, n));
            for root in [0, n - 1, 0] {
                seed += 1;
                let count = bytes / s;
                self.prepare(t, seed, count)?;
                let (src, dst) = (Buf::whole(&self.a), Buf::whole(&self.b));
                self.g.broadcast(src, dst, count, t, root, null)?;
                let what = format!("broadcast_ll {bytes} B from {root}");
                wrong += self.check(&what, &self.b_mem, t, count, |i| {
                    pattern::value(seed, root as u32, i as u64)
                })?;
            }
        }
        wrong += self.rmsnorm()?;
        wrong += self.multimem()?;
        Ok(wrong)
    }

    /// The fused all-reduce + residual + RMSNorm (bf16) in its three protocols, by size and
    /// forced, with rows on one block each and rows cut into segments over several blocks
    /// (hidden 1024 = 128 packs on 64-thread blocks: a single row fills both blocks), out of
    /// place and in place (`residual_out == residual`).
    fn rmsnorm(&self) -> Result<usize> {
        let n = self.n();
        let dev = self.comm.device() as i32;
        let rows = 24 * 512 * 2;
        let residual = VmmBuffer::new(dev, rows)?;
        let weight = VmmBuffer::new(dev, 1024 * 2)?;
        let out = VmmBuffer::new(dev, rows)?;
        let residual_out = VmmBuffer::new(dev, rows)?;
        let bufs = NormBuffers {
            residual: residual.device_ptr(),
            weight: weight.device_ptr(),
            out: out.device_ptr(),
            residual_out: residual_out.device_ptr(),
        };
        let in_place = NormBuffers {
            residual_out: residual.device_ptr(),
            ..bufs
        };
        // The split shapes below do cut a row in two (see `fused_split`).
        let threads = self.g.block_threads();
        assert_eq!(fused_split(1, 1, 128, threads, 2).segs, 2);
        // Where the outputs go: raw buffers (`residual_out` or, in place, the residual), or
        // windows through `all_reduce_rmsnorm_into` (the two-shot then pushes the rows
        // directly up to `fused_direct_max`, 8 KiB: the 1 × 1024 cases and, on 2 and 3 ranks,
        // (n + 1) × 1024; the others take its second pass): `h` at byte 0 of window b (which
        // then also holds the residual, in place), `out` after it or, with `out_is_x`, over
        // `x` itself.
        #[derive(Clone, Copy, PartialEq)]
        enum Mode {
            Raw { inplace: bool },
            Windows { inplace: bool, out_is_x: bool },
        }
        use Mode::*;
        let raw = Raw { inplace: false };
        let cases = [
            // (tokens, hidden, forced, expected, outputs)
            (2, 512, None, Algo::OneShot, raw),
            (8, 512, None, Algo::TwoShotLl, raw),
            (24, 512, None, Algo::TwoShot, raw),
            (1, 1024, None, Algo::OneShot, raw),
            (1, 1024, None, Algo::OneShot, Raw { inplace: true }),
            (1, 1024, Some(Algo::TwoShotLl), Algo::TwoShotLl, raw),
            (
                3,
                1024,
                Some(Algo::TwoShotLl),
                Algo::TwoShotLl,
                Raw { inplace: true },
            ),
            (1, 1024, Some(Algo::TwoShot), Algo::TwoShot, raw),
            (
                n,
                1024,
                Some(Algo::TwoShot),
                Algo::TwoShot,
                Raw { inplace: true },
            ),
            (n + 1, 1024, Some(Algo::TwoShot), Algo::TwoShot, raw),
            (
                24,
                512,
                None,
                Algo::TwoShot,
                Windows {
                    inplace: false,
                    out_is_x: false,
                },
            ),
            (
                24,
                512,
                None,
                Algo::TwoShot,
                Windows {
                    inplace: true,
                    out_is_x: true,
                },
            ),
            (
                1,
                1024,
                Some(Algo::TwoShot),
                Algo::TwoShot,
                Windows {
                    inplace: true,
                    out_is_x: false,
                },
            ),
            (
                n + 1,
                1024,
                Some(Algo::TwoShot),
                Algo::TwoShot,
                Windows {
                    inplace: false,
                    out_is_x: true,
                },
            ),
            (
                2,
                512,
                None,
                Algo::OneShot,
                Windows {
                    inplace: true,
                    out_is_x: false,
                },
            ),
            (
                3,
                1024,
                Some(Algo::TwoShotLl),
                Algo::TwoShotLl,
                Windows {
                    inplace: false,
                    out_is_x: true,
                },
            ),
        ];
        let mut wrong = 0;
        for (case, &(tokens, hidden, forced, want, mode)) in cases.iter().enumerate() {
            let seed = 500 + 16 * case as u32 + tokens as u32;
            let count = tokens * hidden;
            self.prepare(DataType::Bf16, seed, count)?;
            let bf = |seed: u32, k: usize| -> Vec<u16> {
                (0..k)
                    .map(|i| Bf16::from_f32(pattern::value(seed, 0, i as u64) as f32).0)
                    .collect()
            };
            let (res, w) = (bf(seed ^ 0x5555, count), bf(seed ^ 0xaaaa, hidden));
            weight.copy_from_host(&w)?;
            out.fill_bytes(0x7f)?;
            residual_out.fill_bytes(0x7f)?;
            let wb = self.b_mem.buffer();
            let res_ptr = match mode {
                Windows { inplace: true, .. } => {
                    wb.copy_from_host(&res)?;
                    wb.device_ptr()
                }
                _ => {
                    residual.copy_from_host(&res)?;
                    residual.device_ptr()
                }
            };
            self.comm.bootstrap().barrier()?;
            let x = Buf::whole(&self.a);
            let eps = 1e-6;
            let null = std::ptr::null_mut();
            let used = match mode {
                Raw { inplace } => {
                    let b = if inplace { in_place } else { bufs };
                    self.g
                        .all_reduce_rmsnorm_with(forced, x, b, tokens, hidden, eps, null)?
                }
                Windows { out_is_x, .. } => {
                    let h_buf = Buf::new(&self.b, 0);
                    let out_buf = if out_is_x { x } else { Buf::new(&self.b, rows) };
                    let (wp, g) = (weight.device_ptr(), &self.g);
                    g.all_reduce_rmsnorm_into(
                        forced, x, res_ptr, wp, out_buf, h_buf, tokens, hidden, eps, null,
                    )?
                }
            };
            assert_eq!(used, want, "{tokens} × {hidden}");
            self.g.check_status()?;
            let (mut h_got, mut y_got) = (vec![0u16; count], vec![0u16; count]);
            match mode {
                Raw { inplace: true } => residual.copy_to_host(&mut h_got)?,
                Raw { inplace: false } => residual_out.copy_to_host(&mut h_got)?,
                Windows { .. } => wb.copy_to_host(&mut h_got)?,
            }
            match mode {
                Raw { .. } => out.copy_to_host(&mut y_got)?,
                Windows { out_is_x: true, .. } => self.a_mem.buffer().copy_to_host(&mut y_got)?,
                Windows {
                    out_is_x: false, ..
                } => {
                    let mut all = vec![0u16; rows / 2 + count];
                    wb.copy_to_host(&mut all)?;
                    y_got.copy_from_slice(&all[rows / 2..]);
                }
            }
            let m = fused_wrong(&h_got, &y_got, &res, &w, (seed, n as u32), eps);
            if let (Some(f), 0) = (m.first, wrong) {
                eprintln!(
                    "rank {} of {n}: rmsnorm {tokens}x{hidden} {} (case {case}): element {}: \
                     h {:#06x} want {:#06x}, out {:#06x} want {:#06x}",
                    self.comm.rank(),
                    want.name(),
                    f.index,
                    f.h.0,
                    f.h.1,
                    f.out.0,
                    f.out.1
                );
            }
            wrong += m.count;
            self.comm.bootstrap().barrier()?;
        }
        // Window outputs that overlap where the kernel cannot allow it are refused (the same
        // on every rank, before any launch).
        let x = Buf::whole(&self.a);
        let (rp, wp) = (residual.device_ptr(), weight.device_ptr());
        let bad = [
            (
                Buf::new(&self.b, 0),
                Buf::new(&self.b, 16),
                "out and residual_out overlap",
            ),
            (
                Buf::new(&self.b, 0),
                Buf::new(&self.a, 0),
                "residual_out overlaps x",
            ),
            (
                Buf::new(&self.a, 16),
                Buf::new(&self.b, 0),
                "out overlaps x without being x",
            ),
        ];
        for (o, h, why) in bad {
            let null = std::ptr::null_mut();
            match self
                .g
                .all_reduce_rmsnorm_into(None, x, rp, wp, o, h, 4, 512, 1e-6, null)
            {
                Err(Error::InvalidArgument(m)) if m.contains(why) => {}
                other => panic!("{why}: got {other:?}"),
            }
        }
        Ok(wrong)
    }

    /// The multimem all-reduce kernels through the emulated multicast range, launched by name
    /// from the gallery module (the host API runs them only when forced: see
    /// `forced_multimem_all_reduces_run_through_the_host_api_only_with_multicast`).
    fn multimem(&self) -> Result<usize> {
        let dev = DevComm::create(
            &self.comm,
            Requirements::new().lsa_barriers(2).lsa_multimem(true),
        )?;
        let module = Module::load(kernels::PTX)?;
        let status = HostMapped::new(0u32)?;
        let n = self.n() as u32;
        let mut wrong = 0;
        let mut seed = 900;
        for (t, suffix) in [(DataType::F32, "f32"), (DataType::Bf16, "bf16")] {
            for shot in ["one_shot", "two_shot"] {
                seed += 1;
                let count = AR_BYTES / t.size();
                self.prepare(t, seed, count)?;
                let f = module.function(&format!("all_reduce_multimem_{shot}_{suffix}_sum"))?;
                let f = f.typed::<(RawDevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, *mut u32)>()?;
                let args = (
                    dev.raw(),
                    self.a.sym::<u8>(0),
                    self.b.sym::<u8>(0),
                    AR_BYTES as u64,
                    60_000_000_000u64,
                    status.as_mut_ptr(),
                );
                // SAFETY: both windows hold AR_BYTES on every rank and are bound to the LSA
                // multicast range of `dev`, which has 2 barriers for the 2 blocks; every rank
                // launches the same shape.
                unsafe { f.launch(LaunchConfig::linear(2, 64), std::ptr::null_mut(), args) }?;
                if status.get() != 0 {
                    return Err(Error::InvalidArgument(format!(
                        "multimem {shot}: status {}",
                        status.get()
                    )));
                }
                wrong += self.check(&format!("multimem {shot}"), &self.b_mem, t, count, |i| {
                    pattern::sum(seed, n, i as u64)
                })?;
            }
        }
        Ok(wrong)
    }
}

/// Runs `f` on `n` thread ranks with [`tuning`]; panics with every rank's error.
fn on_ranks<T: Send>(n: usize, f: impl Fn(Rank) -> Result<T> + Sync) -> Vec<T> {
    on_ranks_with(n, tuning(), f)
}

/// Runs `f` on `n` thread ranks with `t`; panics with every rank's error.
fn on_ranks_with<T: Send>(n: usize, t: Tuning, f: impl Fn(Rank) -> Result<T> + Sync) -> Vec<T> {
    let results = ranks::run_emulated(n, |comm| f(Rank::new(comm, t)?));
    ranks::all_ok(results).unwrap_or_else(|e| panic!("{n} ranks: {e}"))
}

#[test]
fn every_collective_matches_its_reference_with_2_4_and_8_thread_ranks() {
    for n in RANKS {
        let t0 = Instant::now();
        let wrong: usize = on_ranks(n, |rank| rank.run_all()).into_iter().sum();
        println!(
            "{n} ranks: every collective in {:.2} s",
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(wrong, 0, "{n} ranks: {wrong} wrong elements");
    }
}

impl Rank {
    /// All-reduces through forced multimem algorithms (the emulator stands in for the
    /// switch): `(type, op, forced, in place, algorithm that must run)`. Returns the wrong
    /// elements of this rank.
    fn run_multimem(&self, cases: &[(DataType, RedOp, Algo, bool, Algo)]) -> Result<usize> {
        let n = self.n() as u32;
        let mut wrong = 0;
        for (k, &(t, op, forced, in_place, want)) in cases.iter().enumerate() {
            let seed = 700 + k as u32;
            let count = AR_BYTES / t.size();
            self.prepare(t, seed, count)?;
            let (src, dst) = (Buf::whole(&self.a), Buf::whole(&self.b));
            let (dst, out) = if in_place {
                (src, &self.a_mem)
            } else {
                (dst, &self.b_mem)
            };
            let null = std::ptr::null_mut();
            let used = self
                .g
                .all_reduce_with(Some(forced), src, dst, count, t, op, null)?;
            assert_eq!(used, want, "{t} {op} forced {}", forced.name());
            let what = format!(
                "all_reduce {} (forced {}) in place {in_place}",
                used.name(),
                forced.name()
            );
            wrong += self.check(&what, out, t, count, |i| reduced(op, seed, n, i as u64))?;
        }
        Ok(wrong)
    }
}

#[test]
fn forced_multimem_all_reduces_run_through_the_host_api_only_with_multicast() {
    use Algo::{MultimemOneShot as One, MultimemTwoShot as Two};
    use DataType::{Bf16, F16, F32, I32};
    use RedOp::{Max, Min, Sum};
    let with = Tuning {
        multimem: true,
        ..tuning()
    };
    // AR_BYTES is within the one-shot limit: a fallback (the choice by size) is the LL
    // one-shot.
    let cases = [
        (F32, Sum, One, false, One),
        (Bf16, Min, Two, false, Two),
        (F16, Max, One, false, One),
        (I32, Sum, Two, false, Two),
        (I32, Max, Two, true, Two),
        // In place, the one-shot would overwrite what peers still read: the two-shot runs.
        (Bf16, Sum, One, true, Two),
        // The switch has no f32 min: the choice by size.
        (F32, Min, Two, false, Algo::OneShot),
    ];
    for n in [2, 3] {
        let wrong: usize = on_ranks_with(n, with, |rank| rank.run_multimem(&cases))
            .into_iter()
            .sum();
        assert_eq!(wrong, 0, "{n} ranks: {wrong} wrong elements");
    }
    // Without the multicast range a forced multimem algorithm cannot run.
    let without = [
        (Bf16, Sum, Two, false, Algo::OneShot),
        (I32, Min, One, false, Algo::OneShot),
    ];
    let wrong: usize = on_ranks(2, |rank| rank.run_multimem(&without))
        .into_iter()
        .sum();
    assert_eq!(wrong, 0);
}

#[test]
fn narrow_blocks_grids_of_three_and_three_ranks_match_the_reference() {
    // One-warp blocks where the work spreads (the fused two-shot of one 1024-wide row then
    // runs as 4 segments of 32-thread blocks) and grids of 3 and 6 blocks, which do not divide
    // the launch counters' 128 words.
    let t = Tuning {
        min_threads: 32,
        ll_min_threads: 32,
        max_blocks: 6,
        ll_blocks: 3,
        ..tuning()
    };
    assert_eq!(
        symcomm_gallery::rmsnorm::fused_split(1, 1, 128, 32, t.max_blocks),
        Split { segs: 4, blocks: 4 }
    );
    // Three ranks as well: the kernels specialised for 2, 4 and 8 ranks (e.g. the
    // all-to-all) fall back to their general bodies.
    for n in [2, 3] {
        let wrong: usize = on_ranks_with(n, t, |rank| rank.run_all()).into_iter().sum();
        assert_eq!(wrong, 0, "{n} ranks: {wrong} wrong elements");
    }
}

#[test]
fn ranks_with_different_knobs_or_a_failed_set_up_are_refused_on_every_rank() {
    // Rank 1 raises the one-shot limit: nothing on the device would notice (rank 0 would run
    // two-shots where rank 1 runs one-shots), so every rank must refuse at set-up.
    let results = ranks::run_emulated(3, |comm| {
        let mut t = tuning();
        if comm.rank() == 1 {
            t.one_shot_max *= 2;
        }
        Collectives::new(&comm, t).map(|_| ())
    });
    for (rank, r) in &results {
        match r {
            Err(Error::Mismatch {
                what,
                rank_a: 0,
                value_a,
                rank_b: 1,
                value_b,
            }) => {
                assert_eq!(what, "gallery tuning SYMCOMM_ONE_SHOT_MAX", "rank {rank}");
                assert_eq!((value_a.as_str(), value_b.as_str()), ("4096", "8192"));
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    // Rank 2's tuning is out of range: it reports its own error, the others name it with its
    // message (not a timeout, not "closed its communicator" in a later step).
    let t0 = Instant::now();
    let results = ranks::run_emulated(3, |comm| {
        let mut t = tuning();
        if comm.rank() == 2 {
            t.max_blocks = 0;
        }
        let r = Collectives::new(&comm, t).map(|_| ());
        // Still holding the communicator: the peers must not depend on this rank leaving.
        std::thread::sleep(std::time::Duration::from_millis(200));
        r
    });
    for (rank, r) in &results {
        match (rank, r) {
            (2, Err(Error::InvalidArgument(m))) => assert!(m.contains("max_blocks"), "{m}"),
            (
                0 | 1,
                Err(Error::PeerFailed {
                    peer: 2, reason, ..
                }),
            ) => assert!(reason.contains("max_blocks is 0"), "rank {rank}: {reason}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(t0.elapsed().as_secs() < 30, "{:?}", t0.elapsed());
}

#[test]
fn sizes_whose_all_rank_total_overflows_are_refused() {
    // 2^61 i32 elements are 2^63 bytes per rank: the two-rank total wraps to 0 bytes, which
    // would fit any window if the product were not checked.
    let count = 1usize << 61;
    on_ranks(2, |rank| {
        let (a, b) = (Buf::whole(&rank.a), Buf::whole(&rank.b));
        let s = std::ptr::null_mut();
        let t = DataType::I32;
        for (what, r) in [
            ("all_to_all", rank.g.all_to_all(a, b, count, t, s)),
            ("all_gather", rank.g.all_gather(a, b, count, t, s)),
            (
                "reduce_scatter",
                rank.g.reduce_scatter(a, b, count, t, RedOp::Sum, s),
            ),
        ] {
            match r {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.starts_with(what) && m.contains("overflows"), "{m}")
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        Ok(())
    });
}

#[test]
fn fused_operands_outside_device_memory_or_misaligned_are_refused() {
    on_ranks(2, |rank| {
        let dev = rank.comm.device() as i32;
        let (tokens, hidden) = (2, 256);
        let rows = VmmBuffer::new(dev, tokens * hidden * 2)?;
        let (residual, out) = (
            VmmBuffer::new(dev, rows.len())?,
            VmmBuffer::new(dev, rows.len())?,
        );
        let weight = VmmBuffer::new(dev, hidden * 2)?;
        let good = NormBuffers {
            residual: residual.device_ptr(),
            weight: weight.device_ptr(),
            out: out.device_ptr(),
            residual_out: residual.device_ptr(),
        };
        let host = vec![0u8; 4096];
        let (base, size) = symcomm::cuda::vmm::address_range(out.device_ptr())?;
        let out_end = base + size as u64;
        let cases = [
            (
                "out",
                NormBuffers {
                    out: out.device_ptr() + 1,
                    ..good
                },
                "aligned",
            ),
            (
                "weight",
                NormBuffers {
                    weight: host.as_ptr() as u64 & !15,
                    ..good
                },
                "not emulated device memory",
            ),
            // Starts inside the allocation (a whole granule) but runs past its end.
            (
                "residual_out",
                NormBuffers {
                    residual_out: out_end - 16,
                    ..good
                },
                "run past the end",
            ),
        ];
        let x = Buf::whole(&rank.a);
        let s = std::ptr::null_mut();
        for (what, bufs, why) in cases {
            match rank.g.all_reduce_rmsnorm(x, bufs, tokens, hidden, 1e-6, s) {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains(what) && m.contains(why), "{what}: {m}")
                }
                other => panic!("{what}: {other:?}"),
            }
            match rank
                .g
                .rmsnorm_residual(rows.device_ptr(), bufs, tokens, hidden, 1e-6, s)
            {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{what}: {m}"),
                other => panic!("{what}: {other:?}"),
            }
        }
        let e = rank
            .g
            .rmsnorm_residual(rows.device_ptr() + 1, good, tokens, hidden, 1e-6, s);
        assert!(
            matches!(e, Err(Error::InvalidArgument(ref m)) if m.contains("rows")),
            "{e:?}"
        );
        Ok(())
    });
}

#[test]
fn an_8_rank_all_reduce_takes_this_long_on_the_emulator() {
    let times = on_ranks(8, |rank| {
        let mut best = Vec::new();
        for algo in [Algo::OneShot, Algo::TwoShot] {
            rank.prepare(DataType::F32, 7, AR_BYTES / 4)?;
            let t0 = Instant::now();
            for _ in 0..3 {
                rank.g.all_reduce_with(
                    Some(algo),
                    Buf::whole(&rank.a),
                    Buf::whole(&rank.b),
                    AR_BYTES / 4,
                    DataType::F32,
                    RedOp::Sum,
                    std::ptr::null_mut(),
                )?;
            }
            best.push((algo, t0.elapsed().as_secs_f64() / 3.0));
            rank.comm.bootstrap().barrier()?;
        }
        Ok(best)
    });
    for (algo, s) in &times[0] {
        println!(
            "8-rank emulated all_reduce {} of {AR_BYTES} B f32 (2 × 64 threads per rank): {:.1} ms",
            algo.name(),
            s * 1e3
        );
    }
}

#[test]
fn kernels_are_launched_by_name_with_checked_arguments() {
    use_backend(Backend::Emulated).unwrap();
    let module = Module::load(kernels::PTX).unwrap();
    let e = module.function("no_such_kernel").unwrap_err();
    assert!(e.to_string().contains("no_such_kernel"), "{e}");
    // Kernels chosen by name are typed by the tuple their launches pass: a tuple that is not
    // the kernel's parameter list is refused, naming both, before anything runs. (Typed by
    // the kernel's own signature, `Module::kernel`, this does not compile at all.)
    let wrong = module
        .function("all_gather")
        .unwrap()
        .typed::<(u64, u32, u64)>();
    let e = wrong.map(|_| ()).unwrap_err();
    assert!(
        e.to_string()
            .contains("kernel `all_gather` takes (comm: DevComm"),
        "{e}"
    );
    assert!(e.to_string().contains("not (u64, u32, u64)"), "{e}");
    // Same sizes, other types (a u64 for the status pointer): refused on the emulator too.
    type Right = (RawDevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, *mut u32);
    type SameSizes = (RawDevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, u64);
    let e = module.function("all_gather").unwrap().typed::<SameSizes>();
    let e = e.map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("status: *mut u32"), "{e}");
    module
        .function("all_gather")
        .unwrap()
        .typed::<Right>()
        .unwrap();
    // The kernel's own launch type needs no check.
    let f = module
        .kernel::<symcomm_gallery_kernels::AllGather>()
        .unwrap();
    assert_eq!(f.name(), "all_gather");
    for name in kernels::ENTRY_POINTS {
        module.function(name).unwrap();
    }
}

/// A free localhost port for a job's root.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[test]
fn symcomm_bench_runs_as_4_emulated_processes() {
    let n = 4;
    let id = UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
    let t0 = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|rank| {
            Command::new(env!("CARGO_BIN_EXE_symcomm-bench"))
                .args(["--coll", "all", "--min", "4K", "--max", "8K"])
                .args(["--iters", "1", "--replays", "1", "--warmup", "0"])
                .env("SYMCOMM_BACKEND", "emu")
                .env_remove("SYMCOMM_LOG")
                .envs(rank_env(rank, n, &id, None))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut stdout = String::new();
    let mut failed = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        stdout += &String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            failed.push(format!(
                "rank {rank}: {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    println!(
        "symcomm-bench as {n} processes: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{}\n{stdout}", failed.join("\n"));
    assert!(stdout.contains("running on the CPU emulator"), "{stdout}");
    assert!(stdout.contains(" 0 wrong elements in total"), "{stdout}");
    assert!(stdout.contains("ar_rmsnorm"), "{stdout}");
}
