//! `symcomm-bench`: nccl-tests-style rows for the gallery collectives and NCCL, side by side
//! in the same run, with every result checked.
//!
//! Usage: `symcomm-run -n 8 symcomm-bench [OPTIONS]` (one process per GPU, the default
//! mode) or `symcomm-bench --threads 8 [OPTIONS]` (one process driving 8 GPUs).
//!
//! Options:
//! - `--coll LIST`: `all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,rmsnorm` or
//!   `all` (default `all_reduce`)
//! - `--types LIST`: `f32,bf16,f16,i32` (default `f32,bf16`); `--ops LIST`: `sum,min,max`
//!   (default `sum`)
//! - `--min BYTES`, `--max BYTES` (suffixes K, M, G; default 4K and 1G), sizes double
//! - `--iters N` ops captured per CUDA graph (20), `--replays N` timed replays (20),
//!   `--warmup N` untimed replays (5)
//! - `--inplace`: in-place variants; `--no-nccl`: symcomm only
//! - `--fused-windows`: the fused rows write `out` and `residual_out` in a registered window
//!   (`all_reduce_rmsnorm_into`: up to `SYMCOMM_FUSED_DIRECT_MAX` the two-shot pushes the
//!   rows directly, algo `direct`) instead of plain device buffers
//! - `--eager`: no CUDA graphs: each timed round is `--iters` ops launched one by one on the
//!   stream (host launch costs included, as in an eager PyTorch program)
//! - `--algos LIST`: all-reduce rows per forced algorithm (`auto,one_shot,two_shot_ll,
//!   two_shot,two_shot_push`; default `auto` = chosen by size); `two_shot_push` turns the push
//!   scratch back on (32 MiB) if `SYMCOMM_PUSH_SCRATCH=0` turned it off. `multimem_one_shot`
//!   and `multimem_two_shot` (NVLink SHARP) run only with `SYMCOMM_NVLS=1` (else the choice by
//!   size); never use them on a shared machine. NCCL still runs with `NCCL_NVLS_ENABLE=0`
//!   then (set below for every run), so those rows compare against NCCL without NVLS
//!
//! For each size and implementation: inputs are filled with the pattern (random small
//! integers, exact in every type), outputs poisoned with 0x7f bytes, the collective runs once
//! and every element of every rank's output is checked (#wrong, summed over ranks); then N
//! ops are captured into a CUDA graph, replayed back to back, each replay timed with CUDA
//! events, and the median replay time / N is the time (mean over ranks). NCCL runs with
//! `NCCL_NVLS_ENABLE=0`. Exits non-zero if any element was wrong.
//!
//! On the CPU emulator (`SYMCOMM_BACKEND=emu`, or no CUDA driver) the same code runs the
//! kernels on the host: NCCL is off, CUDA graphs are not emulated (each replay is `--iters`
//! direct, synchronous launches timed on the host clock), blocks are small
//! (`symcomm_gallery::emulation`), the fused RMSNorm rows are 512 and 1024 wide, and the
//! defaults shrink to `--max 64K --iters 1 --replays 3 --warmup 1`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, sys};
use cudarc::nccl::{result as nccl, sys as nccl_sys};
use symcomm::cuda;
use symcomm::cuda::VmmBuffer;
use symcomm::launch::{LaunchConfig, Module};
use symcomm::{Communicator, Error, Result, SymmetricMemory, Window};
use symcomm_gallery::NormBuffers;
use symcomm_gallery::check::{fill_code, find_wrong, reduced};
use symcomm_gallery::rmsnorm::{bf16_close, reference_row};
use symcomm_gallery::{Algo, Buf, Collectives, DataType, RedOp, kernels};
use symcomm_gallery_kernels::pattern;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    RmsNorm,
}

impl Coll {
    const ALL: [Coll; 6] = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
        Coll::Broadcast,
        Coll::RmsNorm,
    ];
    fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
            Coll::Broadcast => "broadcast",
            Coll::RmsNorm => "rmsnorm",
        }
    }
    /// nccl-tests' bus-bandwidth factor for `n` ranks.
    fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce | Coll::RmsNorm => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => (n - 1.0) / n,
            Coll::Broadcast => 1.0,
        }
    }
    fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter)
    }
}

/// Largest `--max` (1 TiB: more than any GPU holds).
const MAX_BYTES: usize = 1 << 40;

/// Largest `--iters`, `--replays` and `--warmup`.
const MAX_COUNT: u32 = 1_000_000;

#[derive(Debug, Clone)]
struct Opts {
    threads: Option<usize>,
    colls: Vec<Coll>,
    types: Vec<DataType>,
    ops: Vec<RedOp>,
    min: usize,
    max: usize,
    iters: u32,
    replays: u32,
    warmup: u32,
    inplace: bool,
    eager: bool,
    nccl: bool,
    algos: Vec<Option<Algo>>,
    fused_windows: bool,
}

fn parse_bytes(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1usize << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_list<T>(s: &str, f: impl Fn(&str) -> Option<T>) -> std::result::Result<Vec<T>, String> {
    s.split(',')
        .map(|x| f(x).ok_or_else(|| format!("unknown value {x:?}")))
        .collect()
}

/// `emulated`: the defaults of the CPU emulator (small sizes, few launches, no NCCL).
fn parse_args(mut args: Vec<String>, emulated: bool) -> std::result::Result<Opts, String> {
    let mut o = Opts {
        threads: None,
        colls: vec![Coll::AllReduce],
        types: vec![DataType::F32, DataType::Bf16],
        ops: vec![RedOp::Sum],
        min: 4 << 10,
        max: if emulated { 64 << 10 } else { 1 << 30 },
        iters: if emulated { 1 } else { 20 },
        replays: if emulated { 3 } else { 20 },
        warmup: if emulated { 1 } else { 5 },
        inplace: false,
        eager: false,
        nccl: !emulated,
        algos: vec![None],
        fused_windows: false,
    };
    args.reverse();
    while let Some(a) = args.pop() {
        let mut value = || args.pop().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--threads" => {
                o.threads = Some(value()?.parse().map_err(|_| "--threads: not a number")?)
            }
            "--coll" => {
                let v = value()?;
                o.colls = if v == "all" {
                    Coll::ALL.to_vec()
                } else {
                    parse_list(&v, |x| Coll::ALL.into_iter().find(|c| c.name() == x))?
                }
            }
            "--types" => o.types = parse_list(&value()?, DataType::parse)?,
            "--ops" => o.ops = parse_list(&value()?, RedOp::parse)?,
            "--min" => o.min = parse_bytes(&value()?).ok_or("--min: not a size")?,
            "--max" => o.max = parse_bytes(&value()?).ok_or("--max: not a size")?,
            "--iters" => o.iters = value()?.parse().map_err(|_| "--iters: not a number")?,
            "--replays" => o.replays = value()?.parse().map_err(|_| "--replays: not a number")?,
            "--warmup" => o.warmup = value()?.parse().map_err(|_| "--warmup: not a number")?,
            "--inplace" => o.inplace = true,
            "--eager" => o.eager = true,
            "--no-nccl" => o.nccl = false,
            "--fused-windows" => o.fused_windows = true,
            "--algos" => {
                o.algos = parse_list(&value()?, |x| {
                    if x == "auto" {
                        Some(None)
                    } else {
                        Algo::parse(x).map(Some)
                    }
                })?
            }
            "-h" | "--help" => return Err("help".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if emulated {
        o.nccl = false;
    }
    if o.threads == Some(0) || o.iters == 0 || o.replays == 0 || o.min == 0 || o.min > o.max {
        return Err("--threads, --iters, --replays must be positive and --min ≤ --max".into());
    }
    // Bounds that keep the size loop and the buffer sizes far from overflowing.
    if o.max > MAX_BYTES || o.iters.max(o.replays).max(o.warmup) > MAX_COUNT {
        return Err(format!(
            "--max is at most {MAX_BYTES} bytes and --iters, --replays, --warmup at most \
             {MAX_COUNT}"
        ));
    }
    Ok(o)
}

fn cu(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda { call, code: e.0 }
}

fn fail(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

/// One row of results of one implementation.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    us: f64,
    wrong: u64,
}

/// NCCL's communicator of this rank.
struct Nccl {
    comm: nccl_sys::ncclComm_t,
    version: i32,
}

impl Nccl {
    fn init(comm: &Communicator) -> Result<Nccl> {
        // SAFETY: probing for the library only dlopens it.
        if !unsafe { nccl_sys::is_culib_present() } {
            return Err(fail("libnccl.so could not be loaded (use --no-nccl)"));
        }
        let nerr = |what: &str| {
            let what = what.to_string();
            move |e: nccl::NcclError| fail(format!("{what}: {e:?}"))
        };
        let id_bytes = if comm.rank() == 0 {
            let id = nccl::get_uniqueid().map_err(nerr("ncclGetUniqueId"))?;
            id.internal.iter().map(|&c| c as u8).collect::<Vec<u8>>()
        } else {
            Vec::new()
        };
        let got = comm.bootstrap().broadcast(0, &id_bytes)?;
        if got.len() != 128 {
            return Err(fail("malformed NCCL unique id from rank 0"));
        }
        let mut internal = [0 as std::ffi::c_char; 128];
        for (d, s) in internal.iter_mut().zip(&got) {
            *d = *s as std::ffi::c_char;
        }
        let id = nccl_sys::ncclUniqueId { internal };
        let mut raw: nccl_sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; every rank calls this with the same id.
        unsafe { nccl::comm_init_rank(&mut raw, comm.size() as i32, id, comm.rank() as i32) }
            .map_err(nerr("ncclCommInitRank"))?;
        let version = nccl::get_nccl_version().unwrap_or(0);
        Ok(Nccl { comm: raw, version })
    }

    fn dtype(t: DataType) -> nccl_sys::ncclDataType_t {
        match t {
            DataType::F32 => nccl_sys::ncclDataType_t::ncclFloat32,
            DataType::Bf16 => nccl_sys::ncclDataType_t::ncclBfloat16,
            DataType::F16 => nccl_sys::ncclDataType_t::ncclFloat16,
            DataType::I32 => nccl_sys::ncclDataType_t::ncclInt32,
        }
    }

    fn op(op: RedOp) -> nccl_sys::ncclRedOp_t {
        match op {
            RedOp::Sum => nccl_sys::ncclRedOp_t::ncclSum,
            RedOp::Min => nccl_sys::ncclRedOp_t::ncclMin,
            RedOp::Max => nccl_sys::ncclRedOp_t::ncclMax,
        }
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: created by comm_init_rank, destroyed once, after all work was synchronised.
        let _ = unsafe { nccl::comm_destroy(self.comm) };
    }
}

/// Everything one rank of the benchmark holds.
struct Rank<'a> {
    opts: &'a Opts,
    comm: &'a Communicator,
    /// `None` on the CPU emulator (launches are synchronous there).
    stream: Option<Arc<CudaStream>>,
    /// `None` on the CPU emulator.
    ctx: Option<Arc<CudaContext>>,
    gallery: &'a Collectives,
    util: &'a Module,
    a: &'a Window,
    a_mem: &'a SymmetricMemory,
    b: &'a Window,
    b_mem: &'a SymmetricMemory,
    nccl: Option<&'a Nccl>,
}

/// What one (collective, size, type, op) case needs.
#[derive(Debug, Clone, Copy)]
struct Case {
    coll: Coll,
    bytes: usize,
    t: DataType,
    op: RedOp,
    seed: u32,
    algo: Option<Algo>,
}

impl Rank<'_> {
    fn n(&self) -> usize {
        self.comm.size()
    }

    /// The stream of the launches (null on the emulator, which ignores it).
    fn cu_stream(&self) -> sys::CUstream {
        self.stream
            .as_ref()
            .map_or(std::ptr::null_mut(), |s| s.cu_stream())
    }

    /// Waits for the stream (nothing to wait for on the emulator).
    fn sync(&self) -> Result<()> {
        match &self.stream {
            Some(s) => s.synchronize().map_err(cu("cuStreamSynchronize")),
            None => Ok(()),
        }
    }

    /// The shape of a `bench_fill` launch: `blocks` × 512 on GPUs, 2 small blocks emulated.
    fn fill_shape(&self, blocks: u32) -> LaunchConfig {
        match self.stream {
            Some(_) => LaunchConfig::linear(blocks, 512),
            None => LaunchConfig::linear(2, self.gallery.block_threads()),
        }
    }

    /// (input bytes, output bytes) of a case (per rank).
    fn sizes(&self, c: &Case) -> (usize, usize) {
        let n = self.n();
        match c.coll {
            Coll::AllReduce | Coll::AllToAll | Coll::Broadcast | Coll::RmsNorm => {
                (c.bytes, c.bytes)
            }
            Coll::AllGather => (c.bytes / n, c.bytes),
            Coll::ReduceScatter => (c.bytes, c.bytes / n),
        }
    }

    /// (source, destination) of a case.
    fn bufs(&self, c: &Case) -> (Buf<'_>, Buf<'_>) {
        let (inb, outb) = self.sizes(c);
        let r = self.comm.rank();
        if !self.opts.inplace || c.coll == Coll::AllToAll {
            return (Buf::whole(self.a), Buf::whole(self.b));
        }
        match c.coll {
            Coll::AllGather => (Buf::new(self.b, inb * r), Buf::whole(self.b)),
            Coll::ReduceScatter => (Buf::whole(self.a), Buf::new(self.a, outb * r)),
            _ => (Buf::whole(self.a), Buf::whole(self.a)),
        }
    }

    /// Poisons the output window, then fills the input with the pattern.
    fn prepare(&self, c: &Case) -> Result<()> {
        let (src, dst) = self.bufs(c);
        let out_mem = if std::ptr::eq(dst.window(), self.a) {
            self.a_mem
        } else {
            self.b_mem
        };
        // Returns once the memset (on a stream of its own) is done.
        out_mem.buffer().fill_bytes(0x7f)?;
        let (inb, _) = self.sizes(c);
        let count = (inb / c.t.size()) as u64;
        let f = self.util.function("bench_fill")?;
        let args = (
            src.device_ptr() as *mut u8,
            count,
            fill_code(c.t),
            self.comm.rank() as u32,
            c.seed,
            0u64,
        );
        // SAFETY: `src` holds `count` elements of the type (inside its window).
        unsafe { f.launch_with(self.fill_shape(1024), self.cu_stream(), args)? };
        self.sync()
    }

    /// Checks this rank's output; returns the wrong-element count.
    fn verify(&self, c: &Case, what: &str) -> Result<u64> {
        let (_, dst) = self.bufs(c);
        let (_, outb) = self.sizes(c);
        let mut got = vec![0u8; outb];
        // SAFETY: `dst` holds `outb` bytes of this device's memory.
        cuda_copy_to_host(&mut got, dst.device_ptr(), self.stream.is_none())?;
        let (n, r, s, t) = (self.n() as u32, self.comm.rank() as u64, c.seed, c.t);
        let count = outb / t.size();
        let per = count / n as usize;
        let want = |i: usize| -> i32 {
            match c.coll {
                Coll::AllReduce => reduced(c.op, s, n, i as u64),
                Coll::ReduceScatter => reduced(c.op, s, n, r * count as u64 + i as u64),
                Coll::AllGather => pattern::value(s, (i / per) as u32, (i % per) as u64),
                Coll::AllToAll => {
                    pattern::value(s, (i / per) as u32, r * per as u64 + (i % per) as u64)
                }
                Coll::Broadcast | Coll::RmsNorm => pattern::value(s, 0, i as u64),
            }
        };
        let m = find_wrong(&got, t, count, want, 4);
        if m.count != 0 {
            let first: Vec<String> = m
                .first
                .iter()
                .map(|(i, g, w)| format!("[{i}] got {g} want {w}"))
                .collect();
            eprintln!(
                "symcomm-bench: rank {r}: {what} {} {} B {t}: {} of {count} wrong; first: {}",
                c.coll.name(),
                c.bytes,
                m.count,
                first.join(", ")
            );
        }
        Ok(m.count as u64)
    }

    /// Launches one op of symcomm (`nccl == false`) or NCCL on the stream.
    fn launch(&self, c: &Case, use_nccl: bool) -> Result<()> {
        let (src, dst) = self.bufs(c);
        let (inb, outb) = self.sizes(c);
        let stream = self.cu_stream();
        let t = c.t;
        if !use_nccl {
            let g = self.gallery;
            return match c.coll {
                Coll::AllReduce => g
                    .all_reduce_with(c.algo, src, dst, inb / t.size(), t, c.op, stream)
                    .map(|_| ()),
                Coll::AllGather => g.all_gather(src, dst, inb / t.size(), t, stream),
                Coll::ReduceScatter => g.reduce_scatter(src, dst, outb / t.size(), t, c.op, stream),
                Coll::AllToAll => g.all_to_all(src, dst, inb / t.size() / self.n(), t, stream),
                Coll::Broadcast => g.broadcast(src, dst, inb / t.size(), t, 0, stream),
                Coll::RmsNorm => Err(fail("rmsnorm runs through its own bench")),
            };
        }
        let nc = self.nccl.ok_or_else(|| fail("NCCL is off"))?;
        let (sp, dp) = (
            src.device_ptr() as *const std::ffi::c_void,
            dst.device_ptr() as *mut std::ffi::c_void,
        );
        let st = stream as nccl_sys::cudaStream_t;
        let dt = Nccl::dtype(t);
        let e = |what: &'static str| move |e: nccl::NcclError| fail(format!("{what}: {e:?}"));
        // SAFETY: the buffers hold the counts given (checked by the symcomm path's sizes) on
        // this device; NCCL's communicator lives as long as `nc`.
        unsafe {
            match c.coll {
                Coll::AllReduce => {
                    nccl::all_reduce(sp, dp, inb / t.size(), dt, Nccl::op(c.op), nc.comm, st)
                        .map_err(e("ncclAllReduce"))?;
                }
                Coll::AllGather => {
                    nccl::all_gather(sp, dp, inb / t.size(), dt, nc.comm, st)
                        .map_err(e("ncclAllGather"))?;
                }
                Coll::ReduceScatter => {
                    nccl::reduce_scatter(sp, dp, outb / t.size(), dt, Nccl::op(c.op), nc.comm, st)
                        .map_err(e("ncclReduceScatter"))?;
                }
                Coll::Broadcast => {
                    nccl::broadcast(sp, dp, inb / t.size(), dt, 0, nc.comm, st)
                        .map_err(e("ncclBroadcast"))?;
                }
                Coll::AllToAll => {
                    let per = inb / self.n();
                    nccl::group_start().map_err(e("ncclGroupStart"))?;
                    for p in 0..self.n() {
                        let off = (p * per) as u64;
                        let send = (src.device_ptr() + off) as *const std::ffi::c_void;
                        let recv = (dst.device_ptr() + off) as *mut std::ffi::c_void;
                        let (count, peer) = (per / t.size(), p as i32);
                        nccl_sys::ncclSend(send, count, dt, peer, nc.comm, st)
                            .result()
                            .map_err(e("ncclSend"))?;
                        nccl_sys::ncclRecv(recv, count, dt, peer, nc.comm, st)
                            .result()
                            .map_err(e("ncclRecv"))?;
                    }
                    nccl::group_end().map_err(e("ncclGroupEnd"))?;
                }
                Coll::RmsNorm => return Err(fail("rmsnorm runs through its own bench")),
            }
        }
        Ok(())
    }

    /// Runs one case for one implementation: check, then time.
    fn measure(&self, c: &Case, use_nccl: bool) -> Result<Measured> {
        self.prepare(c)?;
        self.comm.bootstrap().barrier()?;
        self.gallery.clear_status();
        self.launch(c, use_nccl)?;
        self.sync()?;
        self.gallery.check_status()?;
        let wrong = self.verify(c, if use_nccl { "NCCL" } else { "symcomm" })?;
        let us = time_graph(self, |r| r.launch(c, use_nccl))?;
        self.gallery.check_status()?;
        Ok(Measured { us, wrong })
    }
}

/// The fused all-reduce + RMSNorm benchmark: fused kernel vs symcomm's plain all-reduce of
/// the same rows vs NCCL's all-reduce followed by the unfused RMSNorm kernel.
struct NormBench {
    residual: VmmBuffer,
    weight: VmmBuffer,
    out: VmmBuffer,
    residual_out: VmmBuffer,
    sum: VmmBuffer,
}

const EPS: f32 = 1e-6;
const MAX_TOKENS: usize = 128;
const MAX_HIDDEN: usize = 8192;
/// Bytes of the largest rows.
const ROWS_MAX: usize = MAX_TOKENS * MAX_HIDDEN * 2;
/// With `--fused-windows`: where `out` and `residual_out` sit in window b (at least 4 MiB).
const WIN_OUT: usize = 0;
const WIN_H: usize = ROWS_MAX;

impl NormBench {
    fn new(r: &Rank<'_>) -> Result<NormBench> {
        let dev = r.comm.device() as i32;
        let rows = MAX_TOKENS * MAX_HIDDEN * 2;
        Ok(NormBench {
            residual: VmmBuffer::new(dev, rows)?,
            weight: VmmBuffer::new(dev, MAX_HIDDEN * 2)?,
            out: VmmBuffer::new(dev, rows)?,
            residual_out: VmmBuffer::new(dev, rows)?,
            sum: VmmBuffer::new(dev, rows)?,
        })
    }

    fn header() -> String {
        format!(
            "#{:>14} {:>11} {:>6} {:>6} | {:>8} {:>10} {:>6} | {:>12} | {:>14} {:>6} | {:>9} {:>9}",
            "fused",
            "bytes",
            "tokens",
            "hidden",
            "algo",
            "time",
            "#wrong",
            "all_reduce",
            "NCCL+rmsnorm",
            "#wrong",
            "fused/AR",
            "fused/NC"
        )
    }

    fn bufs(&self) -> NormBuffers {
        NormBuffers {
            residual: self.residual.device_ptr(),
            weight: self.weight.device_ptr(),
            out: self.out.device_ptr(),
            residual_out: self.residual_out.device_ptr(),
        }
    }

    fn fill(&self, r: &Rank<'_>, dst: u64, count: usize, rank: u32, seed: u32) -> Result<()> {
        let f = r.util.function("bench_fill")?;
        let args = (
            dst as *mut u8,
            count as u64,
            fill_code(DataType::Bf16),
            rank,
            seed,
            0u64,
        );
        // SAFETY: `dst` holds `count` bf16 of this device.
        unsafe { f.launch_with(r.fill_shape(256), r.cu_stream(), args) }
    }

    /// Poisons the outputs and fills x (rank pattern), residual and weight (rank 0's
    /// pattern on every rank: replicated).
    fn prepare(&self, r: &Rank<'_>, tokens: usize, hidden: usize, seed: u32) -> Result<()> {
        self.out.fill_bytes(0x7f)?;
        self.residual_out.fill_bytes(0x7f)?;
        r.b_mem.buffer().fill_bytes(0x7f)?;
        self.sum.fill_bytes(0x7f)?; // each returns once its memset is done
        let n = tokens * hidden;
        self.fill(r, r.a.user_ptr(), n, r.comm.rank() as u32, seed)?;
        self.fill(r, self.residual.device_ptr(), n, 0, seed ^ 0x5555)?;
        self.fill(r, self.weight.device_ptr(), hidden, 0, seed ^ 0xaaaa)?;
        r.sync()
    }

    /// Wrong elements of `residual_out` (exact) and `out` (within a bf16 ulp): the plain
    /// buffers, or with `windows` those in window b ([`WIN_OUT`], [`WIN_H`]).
    fn verify(
        &self,
        r: &Rank<'_>,
        tokens: usize,
        hidden: usize,
        seed: u32,
        windows: bool,
    ) -> Result<u64> {
        let n = tokens * hidden;
        let read = |b: &VmmBuffer, len: usize| -> Result<Vec<u16>> {
            let mut v = vec![0u16; len];
            b.copy_to_host(&mut v)?;
            Ok(v)
        };
        let (h_got, y_got) = if windows {
            let all = read(r.b_mem.buffer(), (WIN_H + ROWS_MAX) / 2)?;
            let at = |off: usize| all[off / 2..off / 2 + n].to_vec();
            (at(WIN_H), at(WIN_OUT))
        } else {
            (read(&self.residual_out, n)?, read(&self.out, n)?)
        };
        let (res, w) = (read(&self.residual, n)?, read(&self.weight, hidden)?);
        let ranks = r.comm.size() as u32;
        let mut wrong = 0u64;
        for t in 0..tokens {
            let row = t * hidden..(t + 1) * hidden;
            let s: Vec<u16> = row
                .clone()
                .map(|i| {
                    symcomm_device::reduce::Bf16::from_f32(
                        pattern::sum(seed, ranks, i as u64) as f32
                    )
                    .0
                })
                .collect();
            let (h, y) = reference_row(&s, &res[row.clone()], &w, EPS);
            for (k, i) in row.enumerate() {
                let bad = u64::from(h_got[i] != h[k]) + u64::from(!bf16_close(y_got[i], y[k]));
                if bad != 0 && wrong == 0 {
                    eprintln!(
                        "symcomm-bench: rank {}: rmsnorm {tokens}x{hidden}: first wrong element \
                         {i}: h {:#06x} want {:#06x}, out {:#06x} want {:#06x}",
                        r.comm.rank(),
                        h_got[i],
                        h[k],
                        y_got[i],
                        y[k]
                    );
                }
                wrong += bad;
            }
        }
        Ok(wrong)
    }

    fn run(&self, r: &Rank<'_>, tokens: usize, hidden: usize, seed: u32) -> Result<(String, u64)> {
        let g = r.gallery;
        let x = Buf::whole(r.a);
        let s = r.cu_stream();
        let bytes = tokens * hidden * 2;
        // Fused: check once, then time.
        self.prepare(r, tokens, hidden, seed)?;
        r.comm.bootstrap().barrier()?;
        g.clear_status();
        let windows = r.opts.fused_windows;
        let fused = |st| {
            if windows {
                let (o, h) = (Buf::new(r.b, WIN_OUT), Buf::new(r.b, WIN_H));
                let (res, w) = (self.residual.device_ptr(), self.weight.device_ptr());
                g.all_reduce_rmsnorm_into(None, x, res, w, o, h, tokens, hidden, EPS, st)
            } else {
                g.all_reduce_rmsnorm(x, self.bufs(), tokens, hidden, EPS, st)
            }
        };
        let algo = fused(s)?;
        r.sync()?;
        g.check_status()?;
        let fused_wrong = sum_over_ranks(r.comm, self.verify(r, tokens, hidden, seed, windows)?)?;
        let fused_us = time_graph(r, |r| fused(r.cu_stream()).map(|_| ()))?;
        // symcomm's plain all-reduce of the same rows.
        let ar_us = time_graph(r, |r| {
            g.all_reduce(
                x,
                Buf::whole(r.b),
                tokens * hidden,
                DataType::Bf16,
                RedOp::Sum,
                r.cu_stream(),
            )
            .map(|_| ())
        })?;
        // NCCL all-reduce + the unfused kernel.
        let (nc_us, nc_wrong) = match r.nccl {
            Some(nc) => {
                let op = |r: &Rank<'_>| -> Result<()> {
                    let st = r.cu_stream();
                    // SAFETY: x holds tokens × hidden bf16, `sum` as many; same device.
                    unsafe {
                        nccl::all_reduce(
                            x.device_ptr() as *const std::ffi::c_void,
                            self.sum.device_ptr() as *mut std::ffi::c_void,
                            tokens * hidden,
                            Nccl::dtype(DataType::Bf16),
                            Nccl::op(RedOp::Sum),
                            nc.comm,
                            st as nccl_sys::cudaStream_t,
                        )
                    }
                    .map_err(|e| fail(format!("ncclAllReduce: {e:?}")))?;
                    g.rmsnorm_residual(self.sum.device_ptr(), self.bufs(), tokens, hidden, EPS, st)
                };
                self.prepare(r, tokens, hidden, seed)?;
                r.comm.bootstrap().barrier()?;
                op(r)?;
                r.sync()?;
                let w = sum_over_ranks(r.comm, self.verify(r, tokens, hidden, seed, false)?)?;
                (Some(time_graph(r, op)?), w)
            }
            None => (None, 0),
        };
        let line = format!(
            " {:>14} {:>11} {:>6} {:>6} | {:>8} {:>10.2} {:>6} | {:>12.2} | {:>14} {:>6} | {:>9.2} {:>9}",
            "ar_rmsnorm",
            bytes,
            tokens,
            hidden,
            // The two-shot that writes window outputs itself (`all_reduce_rmsnorm_into`).
            if windows && algo == Algo::TwoShot && g.tuning().fused_direct(bytes) {
                "direct"
            } else {
                algo.name()
            },
            fused_us,
            fused_wrong,
            ar_us,
            nc_us.map_or("-".to_string(), |u| format!("{u:.2}")),
            nc_wrong,
            fused_us / ar_us,
            nc_us.map_or("-".to_string(), |u| format!("{:.2}", fused_us / u)),
        );
        Ok((line, fused_wrong + nc_wrong))
    }
}

/// Copies `dst.len()` bytes from device address `src` (synchronous); `emulated`: `src` is
/// a host address of the emulated device memory.
fn cuda_copy_to_host(dst: &mut [u8], src: u64, emulated: bool) -> Result<()> {
    if emulated {
        // SAFETY: under emulation device addresses are host addresses; the caller passes a
        // mapped range of at least `dst.len()` bytes, which no launch writes meanwhile
        // (emulated launches are synchronous).
        unsafe {
            std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len());
        }
        return Ok(());
    }
    // SAFETY: the caller passes a device range of at least `dst.len()` bytes.
    let r = unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) };
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call: "cuMemcpyDtoH",
            code: r,
        })
    }
}

/// Captures `iters` ops into a graph, replays it `warmup` times, then `replays` times back to
/// back with an event between replays; the median replay time / `iters`, in µs, averaged over
/// ranks.
/// On the CPU emulator (no stream, no graphs): [`time_direct`]; with `--eager`:
/// [`time_eager`].
fn time_graph(r: &Rank<'_>, op: impl Fn(&Rank<'_>) -> Result<()>) -> Result<f64> {
    let (Some(s), Some(ctx)) = (&r.stream, &r.ctx) else {
        return time_direct(r, op);
    };
    if r.opts.eager {
        return time_eager(r, s, ctx, op);
    }
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(cu("cuStreamBeginCapture"))?;
    let mut captured = Ok(());
    for _ in 0..r.opts.iters {
        captured = op(r);
        if captured.is_err() {
            break;
        }
    }
    let graph = s
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .map_err(cu("cuStreamEndCapture"))?;
    captured?;
    let graph = graph.ok_or_else(|| fail("capture produced no graph"))?;
    graph.upload().map_err(cu("cuGraphUpload"))?;
    r.comm.bootstrap().barrier()?;
    for _ in 0..r.opts.warmup {
        graph.launch().map_err(cu("cuGraphLaunch"))?;
    }
    s.synchronize().map_err(cu("cuStreamSynchronize"))?;
    r.comm.bootstrap().barrier()?;
    timed_rounds(r, s, ctx, || graph.launch().map_err(cu("cuGraphLaunch")))
}

/// `replays` rounds of `round` back to back on `s`, an event between rounds; the median
/// round time / `iters`, in µs, averaged over ranks.
fn timed_rounds(
    r: &Rank<'_>,
    s: &Arc<CudaStream>,
    ctx: &Arc<CudaContext>,
    round: impl Fn() -> Result<()>,
) -> Result<f64> {
    let events = (0..=r.opts.replays)
        .map(|_| {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cu("cuEventCreate"))
        })
        .collect::<Result<Vec<_>>>()?;
    events[0].record(s).map_err(cu("cuEventRecord"))?;
    for e in &events[1..] {
        round()?;
        e.record(s).map_err(cu("cuEventRecord"))?;
    }
    s.synchronize().map_err(cu("cuStreamSynchronize"))?;
    let mut ms = events
        .windows(2)
        .map(|w| w[0].elapsed_ms(&w[1]).map_err(cu("cuEventElapsedTime")))
        .collect::<Result<Vec<f32>>>()?;
    ms.sort_by(f32::total_cmp);
    let median_us = f64::from(ms[ms.len() / 2]) * 1000.0 / f64::from(r.opts.iters);
    mean_over_ranks(r.comm, median_us)
}

/// `--eager`: [`time_graph`] without the graph: `warmup` rounds, a barrier, then `replays`
/// timed rounds of `iters` ops launched one by one on the stream.
fn time_eager(
    r: &Rank<'_>,
    s: &Arc<CudaStream>,
    ctx: &Arc<CudaContext>,
    op: impl Fn(&Rank<'_>) -> Result<()>,
) -> Result<f64> {
    let round = || (0..r.opts.iters).try_for_each(|_| op(r));
    for _ in 0..r.opts.warmup {
        round()?;
    }
    s.synchronize().map_err(cu("cuStreamSynchronize"))?;
    r.comm.bootstrap().barrier()?;
    timed_rounds(r, s, ctx, round)
}

/// The CPU emulator's stand-in for [`time_graph`]: `warmup` rounds, then `replays` rounds of
/// `iters` direct (synchronous) launches timed on the host clock, each round after a
/// bootstrap barrier; the median round time / `iters`, in µs, averaged over ranks.
fn time_direct(r: &Rank<'_>, op: impl Fn(&Rank<'_>) -> Result<()>) -> Result<f64> {
    for _ in 0..r.opts.warmup {
        r.comm.bootstrap().barrier()?;
        for _ in 0..r.opts.iters {
            op(r)?;
        }
    }
    let mut us = Vec::new();
    for _ in 0..r.opts.replays {
        r.comm.bootstrap().barrier()?;
        let t0 = Instant::now();
        for _ in 0..r.opts.iters {
            op(r)?;
        }
        us.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(r.opts.iters));
    }
    us.sort_by(f64::total_cmp);
    mean_over_ranks(r.comm, us[us.len() / 2])
}

/// The mean of `v` over the ranks of `comm` (collective).
fn mean_over_ranks(comm: &Communicator, v: f64) -> Result<f64> {
    let all = comm.bootstrap().all_gather(&v.to_le_bytes())?;
    let sum: f64 = all
        .iter()
        .map(|b| {
            b.get(..8)
                .and_then(|s| s.try_into().ok())
                .map_or(0.0, f64::from_le_bytes)
        })
        .sum();
    Ok(sum / all.len() as f64)
}

fn sum_over_ranks(comm: &Communicator, v: u64) -> Result<u64> {
    Ok(comm
        .bootstrap()
        .all_gather(&v.to_le_bytes())?
        .iter()
        .map(|b| {
            b.get(..8)
                .and_then(|s| s.try_into().ok())
                .map_or(u64::MAX, u64::from_le_bytes)
        })
        .fold(0u64, u64::saturating_add))
}

fn fmt_bw(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}

fn header(opts: &Opts, n: usize, nccl_version: Option<i32>, emulated: bool, pdl: &str) -> String {
    let mode = match opts.threads {
        Some(t) => format!("one process driving {t} GPUs"),
        None => "one process per GPU".to_string(),
    };
    let nccl = match nccl_version {
        Some(v) => format!("NCCL {}.{}.{}", v / 10000, (v / 100) % 100, v % 100),
        None => "NCCL off".to_string(),
    };
    let timing = if emulated {
        format!(
            "CPU emulator, direct synchronous launches ({} per round, median of {} rounds)",
            opts.iters, opts.replays
        )
    } else if opts.eager {
        format!(
            "eager launches, no graphs ({} ops per round, median of {} rounds, \
             SYMCOMM_PDL={pdl})",
            opts.iters, opts.replays
        )
    } else {
        format!(
            "CUDA graphs ({} ops per graph, median of {} replays, SYMCOMM_PDL={pdl})",
            opts.iters, opts.replays
        )
    };
    format!(
        "# symcomm-bench: {n} ranks ({mode}), {timing}, \
         {nccl}, NCCL_NVLS_ENABLE={}, {}\n\
         # time in us, algbw and busbw in GB/s; ratio = symcomm/NCCL (time: lower is better, busbw: higher)\n\
         #{:>14} {:>11} {:>11} {:>5} {:>5} | {:>8} {:>10} {:>7} {:>7} {:>6} | {:>10} {:>7} {:>7} {:>6} | {:>6} {:>6}",
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default(),
        if opts.inplace {
            "in-place"
        } else {
            "out-of-place"
        },
        "collective",
        "size",
        "count",
        "type",
        "redop",
        "algo",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "busbw",
    )
}

fn row(c: &Case, n: usize, algo: &str, sym: Measured, nc: Option<Measured>) -> String {
    let f = c.coll.bus_factor(n);
    let algbw = fmt_bw(c.bytes, sym.us);
    let mut s = format!(
        " {:>14} {:>11} {:>11} {:>5} {:>5} | {:>8} {:>10.2} {:>7.2} {:>7.2} {:>6} |",
        c.coll.name(),
        c.bytes,
        c.bytes / c.t.size(),
        c.t.name(),
        if c.coll.reduces() || c.coll == Coll::RmsNorm {
            c.op.name()
        } else {
            "none"
        },
        algo,
        sym.us,
        algbw,
        algbw * f,
        sym.wrong,
    );
    match nc {
        Some(m) => {
            let nalg = fmt_bw(c.bytes, m.us);
            s += &format!(
                " {:>10.2} {:>7.2} {:>7.2} {:>6} | {:>6.2} {:>6.2}",
                m.us,
                nalg,
                nalg * f,
                m.wrong,
                sym.us / m.us,
                (algbw * f) / (nalg * f)
            );
        }
        None => {
            s += &format!(
                " {:>10} {:>7} {:>7} {:>6} | {:>6} {:>6}",
                "-", "-", "-", "-", "-", "-"
            )
        }
    }
    s
}

fn run_rank(comm: Communicator, opts: &Opts) -> Result<(Vec<String>, u64)> {
    let emulated = symcomm::backend::is_emulated()?;
    let (ctx, stream) = if emulated {
        (None, None)
    } else {
        let ctx = cuda::open_device(comm.device())?;
        let stream = ctx.new_stream().map_err(cu("cuStreamCreate"))?;
        (Some(ctx), Some(stream))
    };
    let mut tuning = symcomm_gallery::emulation::tuning_from_env(comm.lsa_size())?;
    if opts.algos.contains(&Some(Algo::TwoShotPush)) && tuning.push_scratch == 0 {
        tuning.push_scratch = 32 << 20;
    }
    let gallery = Collectives::new(&comm, tuning)?;
    // The gallery's own module (loading the PTX again would JIT it twice).
    let util = gallery.module();
    // At least the largest fused RMSNorm input (128 × 8192 bf16).
    let max = opts.max.max(4 << 20).next_multiple_of(16 * comm.size());
    let a_mem = SymmetricMemory::alloc(&comm, max)?;
    let b_mem = SymmetricMemory::alloc(&comm, max)?;
    let a = comm.register_window(&a_mem)?;
    let b = comm.register_window(&b_mem)?;
    let nccl = if opts.nccl {
        Some(Nccl::init(&comm)?)
    } else {
        None
    };
    let rank = Rank {
        opts,
        comm: &comm,
        stream: stream.clone(),
        ctx: ctx.clone(),
        gallery: &gallery,
        util,
        a: &a,
        a_mem: &a_mem,
        b: &b,
        b_mem: &b_mem,
        nccl: nccl.as_ref(),
    };
    let n = comm.size();
    let pdl = gallery.tuning().dependent_launch.name();
    let head = header(opts, n, nccl.as_ref().map(|x| x.version), emulated, pdl);
    // The multimem kernels are JIT-compiled with the module and looked up; they run only when
    // forced with multicast on (`--algos multimem_*` and SYMCOMM_NVLS=1, never on our node).
    let multimem: Vec<&str> = kernels::ENTRY_POINTS
        .iter()
        .copied()
        .filter(|e| e.contains("multimem"))
        .collect();
    for name in &multimem {
        util.function(name)?;
    }
    if comm.rank() == 0 {
        println!("{head}");
        println!(
            "# module: {} kernels loaded; {} multimem kernels (all_reduce_multimem_*) loaded, {}",
            kernels::ENTRY_POINTS.len(),
            multimem.len(),
            if gallery.tuning().multimem {
                "run where --algos forces them (SYMCOMM_NVLS=1)"
            } else {
                "not run (no SYMCOMM_NVLS=1)"
            }
        );
    }
    let mut lines = vec![head];
    let mut total_wrong = 0u64;
    let mut seed = 1u32;
    for &coll in &opts.colls {
        if coll == Coll::RmsNorm {
            let bench = NormBench::new(&rank)?;
            if comm.rank() == 0 {
                println!("{}", NormBench::header());
            }
            let (hiddens, tokens_list): (&[usize], &[usize]) = if emulated {
                (&[512, 1024], &[1, 16])
            } else {
                (&[4096, 8192], &[1, 16, 128])
            };
            for &hidden in hiddens {
                if hidden > gallery.max_hidden() {
                    continue;
                }
                for &tokens in tokens_list {
                    seed = seed.wrapping_add(1);
                    let (l, w) = bench.run(&rank, tokens, hidden, seed)?;
                    total_wrong += w;
                    if comm.rank() == 0 {
                        println!("{l}");
                    }
                    lines.push(l);
                }
            }
            continue;
        }
        let ops: Vec<RedOp> = if coll.reduces() {
            opts.ops.clone()
        } else {
            vec![RedOp::Sum]
        };
        for &t in &opts.types {
            for &op in &ops {
                let mut bytes = opts.min;
                while bytes <= opts.max {
                    seed = seed.wrapping_add(1);
                    let unit = match coll {
                        Coll::AllReduce | Coll::Broadcast => 16,
                        _ => 16 * n,
                    };
                    if !bytes.is_multiple_of(unit) {
                        bytes *= 2;
                        continue;
                    }
                    let algos = if coll == Coll::AllReduce {
                        opts.algos.clone()
                    } else {
                        vec![None]
                    };
                    let mut nc: Option<Measured> = None;
                    for (k, &algo) in algos.iter().enumerate() {
                        let case = Case {
                            coll,
                            bytes,
                            t,
                            op,
                            seed,
                            algo,
                        };
                        let name = if coll == Coll::AllReduce {
                            let in_place = opts.inplace;
                            gallery.all_reduce_algo(algo, bytes, t, op, in_place).name()
                        } else {
                            let per_peer = match coll {
                                Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => bytes / n,
                                _ => bytes,
                            };
                            let ll = if coll == Coll::Broadcast {
                                gallery.tuning().broadcast_ll(bytes, n)
                            } else {
                                gallery.tuning().ll_for(bytes, per_peer, n)
                            };
                            let push = coll == Coll::ReduceScatter
                                && gallery.tuning().push_scratch > 0
                                && bytes >= gallery.tuning().rs_push_min;
                            match coll {
                                _ if ll => "ll",
                                _ if push => "push",
                                Coll::AllGather | Coll::AllToAll | Coll::Broadcast => "push",
                                _ => "pull",
                            }
                        };
                        let mut sym = rank.measure(&case, false)?;
                        sym.wrong = sum_over_ranks(&comm, sym.wrong)?;
                        if k == 0 && nccl.is_some() {
                            let mut m = rank.measure(&case, true)?;
                            m.wrong = sum_over_ranks(&comm, m.wrong)?;
                            total_wrong += m.wrong;
                            nc = Some(m);
                        }
                        total_wrong += sym.wrong;
                        let line = row(&case, n, name, sym, nc);
                        if comm.rank() == 0 {
                            println!("{line}");
                        }
                        lines.push(line);
                    }
                    bytes *= 2;
                }
            }
        }
    }
    drop(rank);
    drop(nccl);
    Ok((lines, total_wrong))
}

fn main() -> ExitCode {
    // NVLink SHARP stays off on the shared node: set before NCCL (or anything) starts.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let notice = match symcomm::backend::emulator_notice("symcomm-bench") {
        Ok(n) => n,
        Err(e) => {
            eprintln!("symcomm-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = match parse_args(args, notice.is_some()) {
        Ok(o) => o,
        Err(e) => {
            if e != "help" {
                eprintln!("symcomm-bench: {e}");
            }
            eprintln!(
                "usage: symcomm-bench [--threads N] [--coll LIST|all] [--types f32,bf16,f16,i32] \
                 [--ops sum,min,max] [--min 4K] [--max 1G] [--iters 20] [--replays 20] \
                 [--warmup 5] [--inplace] [--no-nccl] \
                 [--algos auto,one_shot,two_shot_ll,two_shot,two_shot_push,\
                 multimem_one_shot,multimem_two_shot]"
            );
            return ExitCode::from(2);
        }
    };
    match &notice {
        Some(line) => println!("{line}"),
        None => {
            if let Err(e @ Error::NoDriver(_)) = cuda::init_driver() {
                println!("symcomm-bench: skipped: {e}");
                return ExitCode::SUCCESS;
            }
        }
    }
    let mut ok = true;
    for (rank, result) in symcomm::ranks::run_ranks(opts.threads, |comm| run_rank(comm, &opts)) {
        match result {
            Ok((lines, wrong)) => {
                if rank == 0 {
                    println!(
                        "# {} rows, {wrong} wrong elements in total",
                        lines.len() - 1
                    );
                }
                if wrong != 0 {
                    ok = false;
                }
            }
            Err(e) => {
                ok = false;
                eprintln!("symcomm-bench: rank {rank} FAILED: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_and_counts_are_bounded() {
        let o = parse_args(args("--min 4K --max 1G --iters 20"), false).unwrap();
        assert_eq!((o.min, o.max, o.iters), (4 << 10, 1 << 30, 20));
        assert!(parse_args(args("--max 1024G"), false).is_ok());
        assert!(!o.eager && parse_args(args("--eager"), false).unwrap().eager);
        for bad in [
            "--max 1025G",
            "--max 18446744073709551615",
            "--iters 4294967295",
            "--warmup 2000000",
            "--iters 0",
            "--min 8K --max 4K",
        ] {
            let e = parse_args(args(bad), false).unwrap_err();
            assert!(e.contains("--"), "{bad}: {e}");
        }
    }
}
