//! Every gallery collective × type over a matrix of element counts and element offsets, on
//! thread ranks (issue 30's test harness): on the CPU emulator in CI (`tests/shapes.rs`) and
//! on one GPU shared by the ranks in the GPU suite (`gpu_shapes`).
//!
//! Each call's input is written at its element offset in window `a`, and its output goes to
//! its own element offset in window `b`; in-place calls use `b` alone ([`Shape::in_place`]).
//! Both windows are poisoned first. Afterwards:
//! - every output element is checked against the host reference, and an all-reduce's output
//!   is compared bit for bit across the ranks;
//! - every other byte of `b` must be as it was (poison, and in place the input around this
//!   rank's output), and all of `a`.
//!
//! Every shape runs: any count at any element offset (the kernels store partial packs at the
//! ends, and read a source that sits elsewhere in its packs than the destination through
//! funnel shifts: `symcomm_gallery_kernels::shape`).
//!
//! The matrix ([`full_matrix`], 1504 calls):
//! - 6 calls (all-reduce sum and max, reduce-scatter sum, all-gather, broadcast from the last
//!   rank, all-to-all) × f32 and bf16 × counts [`COUNTS`] × (input, output) element offsets
//!   [`PLACES`]: the same offset on both sides (0, 1, 3, 7, 8) and four pairs that differ (the
//!   source sits elsewhere in its packs than the destination). The full product: 1296 calls.
//!   The small thresholds of `tuning()` send these sizes to the LL kernels, the pushing
//!   two-shot all-reduce and reduce-scatter, and the barrier all-gather, all-to-all and
//!   broadcast;
//! - in place: all-reduce, reduce-scatter, all-gather and broadcast × f32 and bf16 × counts 1,
//!   3, 13, 1024 and 4099 × output offsets 0, 1, 3 and 7 (160 calls);
//! - the two-shot all-reduce forced (the choice by size does not reach it here): f32 and bf16
//!   × counts 1, 13, 1024 and 4099 × offsets (0, 0), (3, 3) and (1, 0) (24 calls);
//! - the fused all-reduce + residual + RMSNorm (bf16) at [`NORM_ROWS`] (`tokens × hidden`:
//!   widths 1, 7, 13, 1001 and 4099, and 1024 at offsets that are not whole packs) × offsets
//!   (0, 0), (1, 1), (3, 7) and (7, 1) (24 calls): `x` at the first offset in `a`, the
//!   residual there too and the weight at the second; `out` at the second offset in `b` and
//!   `residual_out` at it in `b`'s second half. Both outputs are checked against the host
//!   reference (`h` bit for bit) and across the ranks, and every other byte of `b` as above.
//!
//! [`ll_passes`] (8 calls, 2 and 3 ranks, [`ll_passes_tuning`]): LL all-to-alls large enough
//! that the any-shape kernel's threads go round their loops more than once.
//!
//! [`subset`] for 8 ranks (110 calls): f32, counts 0, 1, 13, 1023 and 1024, offsets (0, 0),
//! (3, 3) and (1, 0), and in place the all-reduce, reduce-scatter and all-gather at counts
//! 1, 13 and 1023, output offsets 0 and 3; the fused call at 3 × 7 and 3 × 1001, offsets
//! (3, 7).

use symcomm::ranks;
use symcomm::{Communicator, Device, Result, Stream, SymmetricMemory, Window};
use symcomm_device::reduce::Bf16;
use symcomm_gallery::check::{encode, find_wrong, fused_wrong, reduced};
use symcomm_gallery::{Algo, Buf, Collectives, DataType, RedOp, Tuning};
use symcomm_gallery_kernels::pattern;

/// Element counts: 0, 1, small primes, aligned sizes that reach the LL, barrier and pipelined
/// kernels, and a large odd count.
pub const COUNTS: [usize; 12] = [0, 1, 2, 3, 5, 7, 13, 8, 64, 1024, 4096, 4099];
/// Element offsets of the input and of the output in their windows.
pub const PLACES: [Place; 9] = [
    (0, 0),
    (1, 1),
    (3, 3),
    (7, 7),
    (8, 8),
    (1, 0),
    (0, 3),
    (3, 7),
    (7, 1),
];
/// `(tokens, hidden)` of the fused calls.
pub const NORM_ROWS: [(usize, usize); 6] =
    [(1, 1), (3, 7), (2, 13), (3, 1001), (1, 4099), (2, 1024)];
/// Window size: room for the largest all-gather / all-to-all (4 ranks × 4099 f32 at offset 8)
/// and poison around it.
const WINDOW: usize = 256 << 10;

/// Small thresholds, so that these sizes reach every protocol (as in `emulated_collectives`).
fn tuning() -> Tuning {
    Tuning {
        one_shot_max: 4096,
        two_shot_ll_max: 16 << 10,
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

/// A call of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Coll {
    /// All-reduce with an operator.
    AllReduce(RedOp),
    /// All-reduce (sum) with the two-shot algorithm forced (the choice by size of these
    /// thresholds never picks it: the pushing two-shot takes its sizes).
    AllReduceTwoShot,
    /// Reduce-scatter (sum).
    ReduceScatter,
    /// All-gather.
    AllGather,
    /// Broadcast from the last rank.
    Broadcast,
    /// All-to-all.
    AllToAll,
    /// The fused all-reduce + residual + RMSNorm on rows of `hidden` bf16 (`count` elements:
    /// `count / hidden` rows), through `all_reduce_rmsnorm_into`.
    RmsNorm {
        /// Elements per row.
        hidden: usize,
    },
}

/// Every call of the matrix.
pub const COLLS: [Coll; 6] = [
    Coll::AllReduce(RedOp::Sum),
    Coll::AllReduce(RedOp::Max),
    Coll::ReduceScatter,
    Coll::AllGather,
    Coll::Broadcast,
    Coll::AllToAll,
];

/// One call of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The collective.
    pub coll: Coll,
    /// The element type.
    pub t: DataType,
    /// Elements (per rank block for the block-structured collectives).
    pub count: usize,
    /// Element offset of the input in window `a`.
    pub offset: usize,
    /// Element offset of the output in window `b`.
    pub out_offset: usize,
    /// In place (window `b` only, at `out_offset`; `offset` unused): the all-reduce and the
    /// broadcast on one buffer, the all-gather from this rank's block of its output, the
    /// reduce-scatter into this rank's block of its input.
    pub in_place: bool,
}

impl Shape {
    /// An out-of-place call of `count` elements of `t` at element offsets `(offset,
    /// out_offset)`.
    pub const fn apart(coll: Coll, t: DataType, count: usize, (offset, out_offset): Place) -> Self {
        Shape {
            coll,
            t,
            count,
            offset,
            out_offset,
            in_place: false,
        }
    }
}

/// Element offsets `(input, output)` of a call.
pub type Place = (usize, usize);

/// Offsets that are not whole packs for any of the types, on either side or both.
const ODD_PLACES: [Place; 4] = [(1, 0), (3, 3), (0, 1), (7, 7)];

/// One rank's windows (dropped before the communicator, and the device last).
struct Rank {
    g: Collectives,
    a: Window,
    a_mem: SymmetricMemory,
    b: Window,
    b_mem: SymmetricMemory,
    comm: Communicator,
    // The rank's own stream: ranks sharing a GPU must not meet on the legacy default stream,
    // which would queue one rank's kernel behind another's that waits for it.
    stream: Stream,
    _dev: Device,
}

/// What one rank counted over the matrix.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Calls that ran (every element, the guards and the input checked).
    pub ran: usize,
    /// Wrong elements, changed guard or input bytes, unexpected outcomes.
    pub wrong: usize,
}

impl Rank {
    fn new(comm: Communicator, tuning: Tuning) -> Result<Rank> {
        let dev = Device::for_rank(&comm)?; // the rank's GPU, current on this thread
        let stream = dev.stream()?;
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
            stream,
            _dev: dev,
        })
    }

    /// Elements of the input and of the output of `s` on this rank.
    fn lens(&self, s: Shape) -> (usize, usize) {
        let n = self.comm.size();
        match s.coll {
            Coll::AllReduce(_)
            | Coll::AllReduceTwoShot
            | Coll::Broadcast
            | Coll::RmsNorm { .. } => (s.count, s.count),
            Coll::ReduceScatter => (s.count * n, s.count),
            Coll::AllGather => (s.count, s.count * n),
            Coll::AllToAll => (s.count * n, s.count * n),
        }
    }

    /// The reference value of output element `i` of `s` (call `seed`).
    fn want(&self, s: Shape, seed: u32, i: usize) -> i32 {
        let (n, r) = (self.comm.size(), self.comm.rank());
        let c = s.count;
        match s.coll {
            Coll::AllReduce(op) => reduced(op, seed, n as u32, i as u64),
            Coll::AllReduceTwoShot => reduced(RedOp::Sum, seed, n as u32, i as u64),
            Coll::ReduceScatter => reduced(RedOp::Sum, seed, n as u32, (r * c + i) as u64),
            Coll::AllGather => pattern::value(seed, (i / c) as u32, (i % c) as u64),
            Coll::Broadcast => pattern::value(seed, n as u32 - 1, i as u64),
            Coll::AllToAll => pattern::value(seed, (i / c) as u32, (r * c + i % c) as u64),
            Coll::RmsNorm { .. } => unreachable!("checked by `run_rmsnorm`"),
        }
    }

    /// Runs `s` as call `seed`: checks the output (or the refusal), the guards and the input,
    /// and counts into `tally`.
    fn run(&self, s: Shape, seed: u32, tally: &mut Tally) -> Result<()> {
        if let Coll::RmsNorm { hidden } = s.coll {
            return self.run_rmsnorm(s, hidden, seed, tally);
        }
        let (n, r) = (self.comm.size(), self.comm.rank() as u32);
        let size = s.t.size();
        let (in_len, out_len) = self.lens(s);
        let (off, out) = (s.offset * size, s.out_offset * size);
        let block = s.count * size;
        // Where the input goes and where the output comes out. Out of place: the input at its
        // offset in `a`, the output at its offset in `b`. In place (`b` only, at the output
        // offset): the all-gather's input is this rank's block of the output, the
        // reduce-scatter's output this rank's block of the input.
        let (in_at, out_at) = match (s.in_place, s.coll) {
            (false, _) => (off, out),
            (true, Coll::AllGather) => (out + r as usize * block, out),
            (true, Coll::ReduceScatter) => (out, out + r as usize * block),
            (true, _) => (out, out),
        };
        // Poison both windows; the input where it goes.
        let mut a_host = vec![0x7fu8; WINDOW];
        let mut b_before = vec![0x7fu8; WINDOW];
        let input = if s.in_place {
            &mut b_before
        } else {
            &mut a_host
        };
        for i in 0..in_len {
            let v = encode(s.t, pattern::value(seed, r, i as u64));
            input[in_at + i * size..in_at + (i + 1) * size].copy_from_slice(&v);
        }
        self.stream.copy_to_device(&self.a_mem, 0, &a_host)?;
        self.stream.copy_to_device(&self.b_mem, 0, &b_before)?;
        self.comm.bootstrap().barrier()?;

        let (src, dst) = if s.in_place {
            (Buf::new(&self.b, in_at), Buf::new(&self.b, out_at))
        } else {
            (Buf::new(&self.a, off), Buf::new(&self.b, out))
        };
        let stream = &self.stream;
        let t = s.t;
        let res = match s.coll {
            Coll::AllReduce(op) => self
                .g
                .all_reduce(src, dst, s.count, t, op, stream)
                .map(|_| ()),
            Coll::AllReduceTwoShot => self
                .g
                .all_reduce_with(
                    Some(Algo::TwoShot),
                    src,
                    dst,
                    s.count,
                    t,
                    RedOp::Sum,
                    stream,
                )
                .map(|_| ()),
            Coll::ReduceScatter => self
                .g
                .reduce_scatter(src, dst, s.count, t, RedOp::Sum, stream),
            Coll::AllGather => self.g.all_gather(src, dst, s.count, t, stream),
            Coll::Broadcast => self.g.broadcast(src, dst, s.count, t, n - 1, stream),
            Coll::AllToAll => self.g.all_to_all(src, dst, s.count, t, stream),
            Coll::RmsNorm { .. } => unreachable!("run by `run_rmsnorm`"),
        };
        let mut b_host = vec![0u8; WINDOW];
        self.stream.copy_to_host(&self.b_mem, 0, &mut b_host)?;
        let mut a_after = vec![0u8; WINDOW];
        self.stream.copy_to_host(&self.a_mem, 0, &mut a_after)?;
        let out = out_at;
        let report = |what: String| {
            eprintln!("rank {r} of {n}: {s:?}: {what}");
        };
        let out_end = out + out_len * size;
        match res {
            Ok(()) => {
                self.g.check_status()?;
                tally.ran += 1;
                let m = find_wrong(
                    &b_host[out..out_end],
                    t,
                    out_len,
                    |i| self.want(s, seed, i),
                    4,
                );
                if m.count != 0 {
                    report(format!(
                        "{} of {out_len} wrong, first {:?}",
                        m.count, m.first
                    ));
                    tally.wrong += m.count;
                }
                // An all-reduce leaves the same bits on every rank (each reduces in rank
                // order): compared across ranks, not only with the reference.
                if let Coll::AllReduce(_) | Coll::AllReduceTwoShot = s.coll {
                    let mine = &b_host[out..out_end];
                    let all = self.comm.bootstrap().all_gather(mine)?;
                    if all.iter().any(|other| other.as_slice() != mine) {
                        report("ranks hold different bits".into());
                        tally.wrong += 1;
                    }
                }
            }
            Err(e) => return Err(e),
        }
        // Every byte of `b` outside the output as it was (poison, and in place the input
        // around this rank's output), and the whole of `a`.
        let spoiled = (0..WINDOW)
            .filter(|&i| (i < out || i >= out_end) && b_host[i] != b_before[i])
            .count();
        if spoiled != 0 {
            report(format!("{spoiled} bytes around the output changed"));
            tally.wrong += spoiled;
        }
        let input_changed = a_host.iter().zip(&a_after).filter(|(x, y)| x != y).count();
        if input_changed != 0 {
            report(format!("{input_changed} bytes of the input window changed"));
            tally.wrong += input_changed;
        }
        self.comm.bootstrap().barrier()
    }
}

impl Rank {
    /// Runs the fused call `s` on rows of `hidden` as call `seed` (see the module docs for
    /// where each operand goes) and checks both outputs, the bytes around them and the input
    /// window.
    fn run_rmsnorm(&self, s: Shape, hidden: usize, seed: u32, tally: &mut Tally) -> Result<()> {
        let (n, r) = (self.comm.size(), self.comm.rank() as u32);
        let (count, tokens) = (s.count, s.count / hidden);
        let (x_at, w_at) = (2 * s.offset, 2 * s.out_offset);
        let (res_at, weight_at) = (WINDOW / 2 + x_at, 3 * WINDOW / 4 + w_at);
        let (out_at, h_at) = (w_at, WINDOW / 2 + w_at);
        let bf = |seed: u32, k: usize| -> Vec<u16> {
            let v = |i| Bf16::from_f32(pattern::value(seed, 0, i as u64) as f32).0;
            (0..k).map(v).collect()
        };
        let (res, w) = (bf(seed ^ 0x5555, count), bf(seed ^ 0xaaaa, hidden));
        let mut a_host = vec![0x7fu8; WINDOW];
        let put = |host: &mut [u8], at: usize, v: &[u8]| host[at..at + v.len()].copy_from_slice(v);
        for i in 0..count {
            let v = encode(DataType::Bf16, pattern::value(seed, r, i as u64));
            put(&mut a_host, x_at + 2 * i, &v);
        }
        put(&mut a_host, res_at, &bytes_of(&res));
        put(&mut a_host, weight_at, &bytes_of(&w));
        let b_before = vec![0x7fu8; WINDOW];
        self.stream.copy_to_device(&self.a_mem, 0, &a_host)?;
        self.stream.copy_to_device(&self.b_mem, 0, &b_before)?;
        self.comm.bootstrap().barrier()?;

        let a_ptr = Buf::new(&self.a, 0).device_ptr() as usize;
        let (x, out, h) = (
            Buf::new(&self.a, x_at),
            Buf::new(&self.b, out_at),
            Buf::new(&self.b, h_at),
        );
        let (rp, wp) = ((a_ptr + res_at) as u64, (a_ptr + weight_at) as u64);
        let eps = 1e-6;
        let stream = &self.stream;
        self.g
            .all_reduce_rmsnorm_into(None, x, rp, wp, out, h, tokens, hidden, eps, stream)?;
        self.g.check_status()?;
        tally.ran += 1;
        let mut b_host = vec![0u8; WINDOW];
        self.stream.copy_to_host(&self.b_mem, 0, &mut b_host)?;
        let mut a_after = vec![0u8; WINDOW];
        self.stream.copy_to_host(&self.a_mem, 0, &mut a_after)?;
        let words = |at: usize| -> Vec<u16> {
            let b = &b_host[at..at + 2 * count];
            b.chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect()
        };
        let (h_got, out_got) = (words(h_at), words(out_at));
        let report = |what: String| eprintln!("rank {r} of {n}: {s:?}: {what}");
        let m = fused_wrong(&h_got, &out_got, &res, &w, (seed, n as u32), eps);
        if m.count != 0 {
            report(format!("{} wrong values, first {:?}", m.count, m.first));
            tally.wrong += m.count;
        }
        // The same bits on every rank.
        let mine = [bytes_of(&h_got), bytes_of(&out_got)].concat();
        let all = self.comm.bootstrap().all_gather(&mine)?;
        if all.iter().any(|other| *other != mine) {
            report("ranks hold different bits".into());
            tally.wrong += 1;
        }
        let outputs = [out_at..out_at + 2 * count, h_at..h_at + 2 * count];
        let spoiled = (0..WINDOW)
            .filter(|i| !outputs.iter().any(|o| o.contains(i)) && b_host[*i] != b_before[*i])
            .count();
        if spoiled != 0 {
            report(format!("{spoiled} bytes around the outputs changed"));
            tally.wrong += spoiled;
        }
        let input_changed = a_host.iter().zip(&a_after).filter(|(x, y)| x != y).count();
        if input_changed != 0 {
            report(format!("{input_changed} bytes of the input window changed"));
            tally.wrong += input_changed;
        }
        self.comm.bootstrap().barrier()
    }
}

/// Little-endian bytes of bf16 bits.
fn bytes_of(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs `shapes` on `n` ranks as threads (on the emulator when `emulated`, else on the
/// backend the environment picks: GPU `r`, or every rank on `SYMCOMM_DEVICE`). `Ok` with rank
/// 0's tally when every rank finished with nothing wrong and all ranks counted alike; else an
/// error naming what went wrong (the wrong calls are printed on stderr as they happen).
pub fn run_matrix(
    n: usize,
    shapes: &[Shape],
    emulated: bool,
) -> std::result::Result<Tally, String> {
    run_matrix_tuned(n, shapes, emulated, tuning())
}

/// [`run_matrix`] with the gallery tuned by `tuning` (the matrix's own: small thresholds).
pub fn run_matrix_tuned(
    n: usize,
    shapes: &[Shape],
    emulated: bool,
    tuning: Tuning,
) -> std::result::Result<Tally, String> {
    let one = |comm: Communicator| {
        let rank = Rank::new(comm, tuning)?;
        let mut tally = Tally::default();
        for (k, &s) in shapes.iter().enumerate() {
            rank.run(s, 1000 + k as u32, &mut tally)?;
        }
        Ok(tally)
    };
    let results = if emulated {
        ranks::run_emulated(n, one)
    } else {
        ranks::run_ranks(Some(n), one)
    };
    let tallies = ranks::all_ok(results).map_err(|e| format!("{n} ranks: {e}"))?;
    let wrong: usize = tallies.iter().map(|t| t.wrong).sum();
    if wrong != 0 {
        return Err(format!("{n} ranks: {wrong} wrong (see the lines above)"));
    }
    let first = tallies.first().copied().unwrap_or_default();
    if tallies.iter().any(|t| t.ran != first.ran) {
        return Err(format!(
            "{n} ranks: the ranks counted different outcomes: {tallies:?}"
        ));
    }
    if first.ran != shapes.len() {
        return Err(format!("{n} ranks: {first:?} for {} shapes", shapes.len()));
    }
    Ok(first)
}

/// The full matrix (see the module docs).
pub fn full_matrix() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for coll in COLLS {
        for t in [DataType::F32, DataType::Bf16] {
            for count in COUNTS {
                for place in PLACES {
                    shapes.push(Shape::apart(coll, t, count, place));
                }
            }
        }
    }
    // In place, at odd offsets: the calls that have an in-place form.
    for coll in [
        Coll::AllReduce(RedOp::Sum),
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::Broadcast,
    ] {
        for t in [DataType::F32, DataType::Bf16] {
            for count in [1, 3, 13, 1024, 4099] {
                for out_offset in [0, 1, 3, 7] {
                    shapes.push(Shape {
                        coll,
                        t,
                        count,
                        offset: 0,
                        out_offset,
                        in_place: true,
                    });
                }
            }
        }
    }
    shapes.extend(two_shot_rows());
    for (tokens, hidden) in NORM_ROWS {
        for (offset, out_offset) in [(0, 0), (1, 1), (3, 7), (7, 1)] {
            shapes.push(norm_shape(tokens, hidden, offset, out_offset));
        }
    }
    shapes
}

/// The fused call on `tokens × hidden` rows at element offsets `offset` (`x`, the residual)
/// and `out_offset` (the weight, both outputs).
fn norm_shape(tokens: usize, hidden: usize, offset: usize, out_offset: usize) -> Shape {
    Shape::apart(
        Coll::RmsNorm { hidden },
        DataType::Bf16,
        tokens * hidden,
        (offset, out_offset),
    )
}

/// The forced two-shot all-reduce: f32 and bf16, counts 1, 13, 1024 and 4099, offsets (0, 0),
/// (3, 3) and (1, 0).
fn two_shot_rows() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for t in [DataType::F32, DataType::Bf16] {
        for count in [1, 13, 1024, 4099] {
            for place in [(0, 0), (3, 3), (1, 0)] {
                shapes.push(Shape::apart(Coll::AllReduceTwoShot, t, count, place));
            }
        }
    }
    shapes
}

/// The subset for 8 ranks (see the module docs).
pub fn subset() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for coll in COLLS {
        for count in [0, 1, 13, 1023, 1024] {
            for place in [(0, 0), (3, 3), (1, 0)] {
                shapes.push(Shape::apart(coll, DataType::F32, count, place));
            }
        }
    }
    for coll in [
        Coll::AllReduce(RedOp::Sum),
        Coll::ReduceScatter,
        Coll::AllGather,
    ] {
        for count in [1, 13, 1023] {
            for out_offset in [0, 3] {
                shapes.push(Shape {
                    coll,
                    t: DataType::F32,
                    count,
                    offset: 0,
                    out_offset,
                    in_place: true,
                });
            }
        }
    }
    shapes.push(norm_shape(3, 7, 3, 7));
    shapes.push(norm_shape(3, 1001, 3, 7));
    shapes
}

/// On 2 ranks: the errors of calls whose operands do not start on a whole element (an f32
/// destination at byte 6, an i32 source at byte 2; counts 0, 1 and 4), per rank, in order
/// (an empty string where a call was not refused).
pub fn misaligned_messages(emulated: bool) -> std::result::Result<Vec<Vec<String>>, String> {
    let one = |comm: Communicator| {
        let rank = Rank::new(comm, tuning())?;
        let stream = &rank.stream;
        let mut messages = Vec::new();
        for count in [0, 1, 4] {
            let (good, odd) = (Buf::new(&rank.a, 0), Buf::new(&rank.b, 6));
            let e = rank
                .g
                .all_reduce(good, odd, count, DataType::F32, RedOp::Sum, stream)
                .map(|_| ())
                .err();
            messages.push(e.map(|e| e.to_string()).unwrap_or_default());
            let e = rank
                .g
                .all_gather(Buf::new(&rank.a, 2), good, count, DataType::I32, stream)
                .err();
            messages.push(e.map(|e| e.to_string()).unwrap_or_default());
        }
        Ok(messages)
    };
    let results = if emulated {
        ranks::run_emulated(2, one)
    } else {
        ranks::run_ranks(Some(2), one)
    };
    ranks::all_ok(results)
}

/// LL all-to-alls of 1601 elements per block (f32 and bf16: 401 and 201 packs) at offsets
/// that are not whole packs, for [`ll_passes_tuning`]: one block of at most 512 threads, so the
/// any-shape LL all-to-all's senders and copiers (half the grid each) go round their loops
/// more than once.
pub fn ll_passes() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for t in [DataType::F32, DataType::Bf16] {
        for place in ODD_PLACES {
            shapes.push(Shape::apart(Coll::AllToAll, t, 1601, place));
        }
    }
    shapes
}

/// All-gathers and all-to-alls of about 40 KB per block (f32 and bf16: 2561 or 2562 packs)
/// at offsets that are not whole packs, for [`barrier_passes_tuning`]: one block of 512
/// threads, so each thread of the barrier kernels takes five or six packs, in passes of two
/// then a last pass of three (`stride_passes`), with the shifted loads and the partial first
/// and last packs in those passes (the other shapes of the matrix give each thread one or two
/// packs).
pub fn barrier_passes() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for coll in [Coll::AllGather, Coll::AllToAll] {
        for (t, count) in [(DataType::F32, 10243), (DataType::Bf16, 20483)] {
            for place in ODD_PLACES {
                shapes.push(Shape::apart(coll, t, count, place));
            }
        }
    }
    shapes
}

/// The tuning of [`barrier_passes`]: no LL, one block.
pub fn barrier_passes_tuning() -> Tuning {
    Tuning {
        ll_max: 0,
        max_blocks: 1,
        ..tuning()
    }
}

/// The tuning of [`ll_passes`]: LL up to 64 KiB, on one block.
pub fn ll_passes_tuning() -> Tuning {
    Tuning {
        ll_max: 64 << 10,
        ll_blocks: 1,
        ll_min_threads: 32,
        ..tuning()
    }
}
