//! Fused all-reduce + residual add + RMSNorm (bf16): the host API and a host reference.
//!
//! `Collectives::all_reduce_rmsnorm` computes, per token row of `x` (`tokens × hidden` bf16,
//! a window), with every intermediate rounded to bf16 as an all-reduce followed by a separate
//! kernel would round it: `s = Σ_ranks x`, `h = s + residual` (→ `residual_out`) and
//! `out = h · rsqrt(mean(h²) + eps) · weight`. The residual must be the same on every rank
//! (the replicated residual stream of tensor parallelism). The protocol follows the plain
//! all-reduce of the same bytes: one-shot LL, two-shot LL (rows split across ranks, no
//! barrier) or two-shot with barriers (rows split across ranks, `h` pushed).
//!
//! Rows of any `hidden` at any element offset: where the fused kernels, which work in whole
//! 16-byte packs of a row, cannot take a call (`hidden` not a multiple of 8 or above
//! [`Collectives::max_hidden`], or a window operand at an offset that is not a multiple of
//! 16: what every rank shares, so every rank picks the same form), it runs as an all-reduce of
//! any shape into the gallery's scratch window followed by the element form of the unfused
//! kernel (`rmsnorm_residual_elements_bf16`): the same results, every rank the same bits, two
//! launches instead of one.
//!
//! The public calls are methods of [`Collectives`]; each checks its operands into a `Fused`
//! call, which picks the protocol and the split of the rows and launches the kernel.

use cudarc::driver::sys::CUstream;
use symcomm::AsStream;
use symcomm::{Error, Result};
use symcomm_device::reduce::Bf16;
use symcomm_gallery_kernels::plan;
use symcomm_gallery_kernels::rmsnorm::{MAX_PACKS, NormArgs, rsqrt};
use symcomm_gallery_kernels::rmsnorm_split::{self as split, H_BASE, Split};

use crate::buffer::Buf;
use crate::collectives::{Collectives, Grid, Kind, launch_args, overlaps};
use crate::tuning::{Algo, Tuning};
use crate::types::{DataType, RedOp};

pub use symcomm_gallery_kernels::rmsnorm_split::{FUSED_ROW_BYTES, FUSED_SCRATCH_BYTES};

/// The largest `hidden` the fused kernels take (`8 × MAX_PACKS × threads`); wider rows take
/// the element form (see the module docs).
pub const MAX_HIDDEN: usize = 8 * MAX_PACKS * plan::LL_THREADS as usize;

/// The device addresses of the non-window operands of [`Collectives::all_reduce_rmsnorm`]
/// (device memory of this rank's GPU: 16-byte aligned where the fused kernels take the call,
/// 2-byte aligned for the element form; which form runs depends only on the shape and the
/// window offsets, the same on every rank: see the module docs). Each call checks that every
/// operand
/// lies inside one device allocation ([`check_device_range`]); keeping that memory alive and
/// unused by other work until the stream has run the call is the caller's part, as with
/// any CUDA library that takes device pointers.
#[derive(Debug, Clone, Copy)]
pub struct NormBuffers {
    /// `tokens × hidden` bf16 residual rows (the same values on every rank).
    pub residual: u64,
    /// `hidden` bf16 weights.
    pub weight: u64,
    /// `tokens × hidden` bf16 normalised output.
    pub out: u64,
    /// `tokens × hidden` bf16 `h = sum + residual` (may equal `residual`).
    pub residual_out: u64,
}

/// Checks the shape of a fused call: at least one token of at least one element.
pub fn check_shape(tokens: usize, hidden: usize) -> Result<()> {
    if tokens == 0 || hidden == 0 {
        return Err(Error::InvalidArgument(format!(
            "all_reduce_rmsnorm: {tokens} × {hidden} rows: need tokens ≥ 1 and hidden ≥ 1"
        )));
    }
    Ok(())
}

impl Collectives {
    /// Collective: fused all-reduce of `x` (`tokens × hidden` bf16) + residual add + RMSNorm
    /// with `eps` (see the module docs). Returns the algorithm used. Every rank must call it
    /// with the same shape; a shape the kernels do not take is refused on every rank.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_rmsnorm(
        &self,
        x: Buf<'_>,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: impl AsStream,
    ) -> Result<Algo> {
        let stream = stream.raw_stream();
        self.all_reduce_rmsnorm_with(None, x, bufs, tokens, hidden, eps, stream)
    }

    /// Collective: [`all_reduce_rmsnorm`](Self::all_reduce_rmsnorm) with `forced` in place
    /// of the configured algorithm (`None`: as configured). A forced LL protocol whose rows
    /// do not fit the LL scratch falls back as the size-based choice does.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_rmsnorm_with(
        &self,
        forced: Option<Algo>,
        x: Buf<'_>,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: impl AsStream,
    ) -> Result<Algo> {
        let stream = stream.raw_stream();
        self.check_fused(
            "all_reduce_rmsnorm",
            forced,
            &x,
            None,
            (tokens, hidden, eps),
        )?;
        Fused::new(self, x, bufs, tokens, hidden, eps, &[x.offset()])?.run(forced, None, stream)
    }

    /// [`Collectives::check_call`] for the fused all-reduce + RMSNorm calls.
    fn check_fused(
        &self,
        call: &str,
        forced: Option<Algo>,
        x: &Buf<'_>,
        outs: Option<(&Buf<'_>, &Buf<'_>)>,
        (tokens, hidden, eps): (usize, usize, f32),
    ) -> Result<()> {
        let offset = |b: Option<&Buf<'_>>| b.map_or("-".into(), |b| b.offset().to_string());
        self.check_call(&[
            ("collective", call.into()),
            ("tokens", tokens.to_string()),
            ("hidden", hidden.to_string()),
            ("eps", format!("{:#010x}", eps.to_bits())),
            ("algorithm", format!("{forced:?}")),
            ("x offset", x.offset().to_string()),
            ("out offset", offset(outs.map(|o| o.0))),
            ("residual_out offset", offset(outs.map(|o| o.1))),
        ])
    }

    /// Collective: [`all_reduce_rmsnorm_with`](Self::all_reduce_rmsnorm_with) with `out` and
    /// `residual_out` in registered windows (each at the same offset on every rank, as every
    /// [`Buf`]), `residual` and `weight` device addresses as in [`NormBuffers`]. Up to
    /// [`Tuning::fused_direct_max`](crate::tuning::Tuning::fused_direct_max) bytes of rows
    /// (`SYMCOMM_FUSED_DIRECT_MAX`; no limit by default) the two-shot algorithm then writes
    /// every rank's rows straight into their `out` and `residual_out` (the owner of a row
    /// pushes both), which saves its second pass over the rows but sends `h` and `out` over
    /// the links, 1.5× a plain all-reduce's bytes; above it, and for the LL algorithms, it
    /// runs as with [`NormBuffers`]. `out` may be `x` (in place); `residual_out`
    /// may be the residual; `out` and `residual_out` must not overlap each other, nor
    /// `residual_out` overlap `x`.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_rmsnorm_into(
        &self,
        forced: Option<Algo>,
        x: Buf<'_>,
        residual: u64,
        weight: u64,
        out: Buf<'_>,
        residual_out: Buf<'_>,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: impl AsStream,
    ) -> Result<Algo> {
        let stream = stream.raw_stream();
        const WHAT: &str = "all_reduce_rmsnorm_into";
        let outs = Some((&out, &residual_out));
        self.check_fused(WHAT, forced, &x, outs, (tokens, hidden, eps))?;
        let bytes = rows_bytes(WHAT, tokens, hidden)?;
        out.check_elements(WHAT, "out", bytes, 2)?;
        residual_out.check_elements(WHAT, "residual_out", bytes, 2)?;
        let refuse = |why: &str| Err(Error::InvalidArgument(format!("{WHAT}: {why}")));
        if overlaps(&out, bytes, &residual_out, bytes) {
            return refuse("out and residual_out overlap");
        }
        if overlaps(&residual_out, bytes, &x, bytes) {
            return refuse("residual_out overlaps x");
        }
        if out.device_ptr() != x.device_ptr() && overlaps(&out, bytes, &x, bytes) {
            return refuse("out overlaps x without being x");
        }
        let bufs = NormBuffers {
            residual,
            weight,
            out: out.device_ptr(),
            residual_out: residual_out.device_ptr(),
        };
        let offsets = [x.offset(), out.offset(), residual_out.offset()];
        let fused = Fused::new(self, x, bufs, tokens, hidden, eps, &offsets)?;
        fused.run(forced, Some((out, residual_out)), stream)
    }

    /// The unfused second half on already all-reduced rows `s` (bf16, this GPU): residual
    /// add + RMSNorm, one kernel (what runs after NCCL's all-reduce in the baseline). Any
    /// shape, as the fused call: the pack form where `s` and every operand are 16-byte aligned
    /// and `hidden` a multiple of 8 up to [`max_hidden`](Self::max_hidden), else the element
    /// form.
    pub fn rmsnorm_residual(
        &self,
        s: u64,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: impl AsStream,
    ) -> Result<()> {
        let stream = stream.raw_stream();
        // `s` is this rank's own: the form comes from the shape alone (see `packed_form`).
        let packed = packed_form(self, hidden, &[]);
        let align = if packed { plan::PACK } else { 2 };
        let args = norm_args(bufs, tokens, hidden, eps, align)?;
        check_aligned_range("rows", s, tokens * hidden * 2, align)?; // bounded by `norm_args`
        let kernel = if packed {
            "rmsnorm_residual_bf16"
        } else {
            "rmsnorm_residual_elements_bf16"
        };
        self.launch(kernel, row_grid(tokens as u64), stream, (s, args))
    }

    /// The largest `hidden` the fused kernels take with this backend's blocks
    /// (`8 × MAX_PACKS × threads`: [`MAX_HIDDEN`] on GPUs, less under emulation); wider rows
    /// take the element form (see the module docs).
    pub fn max_hidden(&self) -> usize {
        8 * MAX_PACKS * self.block_threads() as usize
    }
}

/// One fused call on `g`, its operands checked: the kernels' arguments for `tokens` rows of
/// `x` and what its launch needs to know of them.
struct Fused<'a> {
    g: &'a Collectives,
    x: Buf<'a>,
    /// One segment per row: [`Fused::split_args`] sets the split of a launch.
    args: NormArgs,
    tokens: u64,
    /// Bytes of the rows.
    bytes: usize,
    /// Packs per row.
    ppr: u64,
    /// Whether the fused kernels take the call (else the element form: see the module docs).
    packed: bool,
}

impl<'a> Fused<'a> {
    /// Checks a call on `tokens × hidden` rows (see [`norm_args`]) with input `x`.
    /// `offsets`: the window offsets of `x` and of any window outputs (what decides the form).
    #[allow(clippy::too_many_arguments)]
    fn new(
        g: &'a Collectives,
        x: Buf<'a>,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
        offsets: &[usize],
    ) -> Result<Fused<'a>> {
        let packed = packed_form(g, hidden, offsets);
        let align = if packed { plan::PACK } else { 2 };
        let args = norm_args(bufs, tokens, hidden, eps, align)?;
        let bytes = rows_bytes("all_reduce_rmsnorm", tokens, hidden)?;
        x.check_elements("all_reduce_rmsnorm", "input", bytes, 2)?;
        Ok(Fused {
            g,
            x,
            args,
            tokens: tokens as u64,
            bytes,
            ppr: hidden as u64 / 8,
            packed,
        })
    }

    /// Runs the call with `forced` in place of the configured algorithm (`None`: as
    /// configured) and, with `direct`, window outputs `(out, residual_out)` that the two-shot
    /// writes itself up to [`Tuning::fused_direct`]. Returns the algorithm used (in the
    /// element form: the all-reduce's).
    fn run(
        self,
        forced: Option<Algo>,
        direct: Option<(Buf<'_>, Buf<'_>)>,
        stream: CUstream,
    ) -> Result<Algo> {
        if !self.packed {
            return self.run_elements(forced, stream);
        }
        let tuning = match forced {
            Some(a) => Tuning {
                algo: Some(a),
                ..*self.g.tuning()
            },
            None => *self.g.tuning(),
        };
        let packs = self.bytes as u64 / plan::PACK;
        let chunk = plan::slice_len(self.tokens, self.g.size() as u64) * self.ppr;
        let ll_cap = self.g.ll_cap();
        // The same protocol as a plain all-reduce of these bytes, where the rows fit.
        let algo = match tuning.fused_algo(self.bytes) {
            Algo::OneShot if packs <= ll_cap => Algo::OneShot,
            Algo::OneShot | Algo::TwoShotLl if 2 * chunk <= ll_cap => Algo::TwoShotLl,
            _ => Algo::TwoShot,
        };
        match algo {
            Algo::OneShot | Algo::TwoShotLl => self.launch_ll(algo == Algo::OneShot, stream)?,
            // The barrier two-shot (the mapping above leaves no other algorithm).
            Algo::TwoShot | Algo::TwoShotPush | Algo::MultimemOneShot | Algo::MultimemTwoShot => {
                let direct = direct.filter(|_| tuning.fused_direct(self.bytes));
                self.launch_two_shot(direct, stream)?;
            }
        }
        Ok(algo)
    }

    /// The element form: an all-reduce of any shape of the rows into the `h` rows of the
    /// fused region of the scratch window, at `x`'s position in its pack (so the all-reduce
    /// reads and writes at the same position: no shift), then the element form of the unfused
    /// kernel from there. The all-reduce is the one the plain call would run for these bytes
    /// (or `forced`, where it fits the LL scratch; never a multimem one); its exit leaves
    /// `x` free to be overwritten (`out` may be `x`), and the scratch rows are this rank's
    /// until its next collective: a peer writes them only after meeting this rank there.
    fn run_elements(&self, forced: Option<Algo>, stream: CUstream) -> Result<Algo> {
        let g = self.g;
        let lead = self.x.offset() % plan::PACK as usize;
        if (lead + self.bytes) as u64 > FUSED_ROW_BYTES {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_rmsnorm: {} × {} rows exceed the fused scratch ({FUSED_ROW_BYTES} \
                 bytes)",
                self.tokens, self.args.hidden
            )));
        }
        let rows = g.scratch_buf(g.fused_off() as usize + H_BASE as usize + lead);
        let packs = plan::span_packs(lead as u64, self.bytes as u64);
        let slice = plan::slice_len(packs, g.size() as u64);
        let algo = match forced.or(g.tuning().algo) {
            Some(Algo::OneShot) if packs > g.ll_cap() => None,
            Some(Algo::TwoShotLl) if 2 * slice > g.ll_cap() => None,
            Some(a) if a.is_multimem() => None,
            a => a,
        };
        let (count, t) = (self.bytes / 2, DataType::Bf16);
        let algo = g.all_reduce_with(algo, self.x, rows, count, t, RedOp::Sum, stream)?;
        let args = (rows.device_ptr(), self.args);
        let kernel = "rmsnorm_residual_elements_bf16";
        g.launch(kernel, row_grid(self.tokens), stream, args)?;
        Ok(algo)
    }

    /// The LL kernels (one-shot, or two-shot on LL lines): every rank normalises every row.
    fn launch_ll(&self, one_shot: bool, stream: CUstream) -> Result<()> {
        // A row that fits one full block stays in it: a block sum is cheaper than joining
        // blocks (H100, 1 × 4096 at one rank: 2.8 µs in one 512-thread block, 3.1 in 2–8
        // narrower ones). A wider row is cut into blocks as narrow as the plain LL kernels',
        // joined as one cluster, but no narrower than one pack per thread in `MAX_SEGS` blocks
        // (1 × 8192, two ranks on one H100: 4.4–4.5 µs in two 512-thread blocks, 4.0–4.1 in
        // eight of 128, 4.7–4.9 in eight of 64 with two packs per thread).
        let (g, t) = (self.g, self.g.tuning());
        let full = g.block_threads();
        let min_threads = if self.ppr <= u64::from(full) {
            full
        } else {
            let one_pack = self.ppr.div_ceil(split::MAX_SEGS).next_multiple_of(32) as u32;
            t.ll_min_threads.max(one_pack).min(full)
        };
        let (s, grid) = self.split(Kind::Ll, self.tokens, min_threads, t.ll_blocks);
        let args = launch_args!(
            g;
            self.x.sym(0),
            self.split_args(s),
            g.scratch_sym(0),
            g.ll_cap(),
        );
        let name = if one_shot {
            "all_reduce_rmsnorm_one_shot_bf16"
        } else {
            "all_reduce_rmsnorm_two_shot_ll_bf16"
        };
        g.launch(name, grid, stream, args)
    }

    /// The barrier two-shot: each rank pushes its slice of the rows, with `direct` into every
    /// rank's window outputs `(out, residual_out)`.
    fn launch_two_shot(&self, direct: Option<(Buf<'_>, Buf<'_>)>, stream: CUstream) -> Result<()> {
        if self.bytes as u64 > FUSED_ROW_BYTES || self.tokens > split::MAX_ITEMS {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_rmsnorm: {} × {} rows exceed the fused scratch ({FUSED_ROW_BYTES} \
                 bytes, {} rows)",
                self.tokens,
                self.args.hidden,
                split::MAX_ITEMS
            )));
        }
        let (g, t) = (self.g, self.g.tuning());
        let rows = plan::slice_len(self.tokens, g.size() as u64);
        let (s, grid) = self.split(Kind::Other, rows, t.min_threads, t.max_blocks);
        let (x, args) = (self.x.sym(0), self.split_args(s));
        let fused = g.scratch_sym(g.fused_off());
        // Without direct writes `out` may still be `x`: the second pass of block b writes the
        // rows of the items ≡ b (mod grid), which only block b of their owner read, before the
        // exit barrier block b has passed.
        match direct {
            Some((out, rout)) => {
                let a = launch_args!(g; x, args, fused, out.sym(0), rout.sym(0));
                g.launch("all_reduce_rmsnorm_two_shot_direct_bf16", grid, stream, a)
            }
            None => {
                let a = launch_args!(g; x, args, fused);
                g.launch("all_reduce_rmsnorm_two_shot_bf16", grid, stream, a)
            }
        }
    }

    /// The split of a launch over `rows` rows and its grid (of `kind`; the blocks of a row
    /// meet as one cluster: `segs ≤ MAX_SEGS`, the portable cluster size, and the grid is a
    /// multiple of it). Blocks are as narrow as `min_threads` where the work spreads over
    /// enough of them ([`plan::spread`]) and the row's segments still fit such a block, else
    /// this backend's full blocks.
    fn split(&self, kind: Kind, rows: u64, min_threads: u32, max_blocks: u32) -> (Split, Grid) {
        let (tokens, ppr) = (self.tokens, self.ppr);
        let full = self.g.block_threads();
        let (_, narrow) = plan::spread(rows * ppr, min_threads.min(full), full, max_blocks);
        let s = fused_split(tokens, rows, ppr, narrow, max_blocks);
        let (s, threads) = if split::fits(s, ppr, narrow) {
            (s, narrow)
        } else {
            (fused_split(tokens, rows, ppr, full, max_blocks), full)
        };
        let grid = Grid::new(kind, (s.blocks, threads)).clustered(s.segs as u32);
        (s, grid)
    }

    /// The kernels' arguments for a launch split as `s`.
    fn split_args(&self, s: Split) -> NormArgs {
        NormArgs {
            segs: s.segs as u32,
            ..self.args
        }
    }
}

/// The grid of the unfused kernels: one block per row, up to 1024.
fn row_grid(tokens: u64) -> Grid {
    Grid::new(Kind::Other, (tokens.min(1024) as u32, plan::THREADS))
}

/// Whether the fused kernels (and the pack form of the unfused one) take a call on rows of
/// `hidden` whose window operands sit at byte offsets `offsets`: `hidden` a multiple of 8 up
/// to [`Collectives::max_hidden`] and every offset a multiple of 16. Only what every rank
/// shares decides it (the shape, the window offsets): a rank's own raw pointers must not, or
/// ranks could run different protocols in one collective call. In the pack form those
/// pointers must be 16-byte aligned ([`check_device_range`] refuses them otherwise).
fn packed_form(g: &Collectives, hidden: usize, offsets: &[usize]) -> bool {
    hidden.is_multiple_of(8)
        && hidden <= g.max_hidden()
        && offsets
            .iter()
            .all(|o| o.is_multiple_of(plan::PACK as usize))
}

/// Bytes of `tokens × hidden` bf16 rows, refusing overflow (`what` names the call).
fn rows_bytes(what: &str, tokens: usize, hidden: usize) -> Result<usize> {
    tokens
        .checked_mul(hidden.saturating_mul(2))
        .ok_or_else(|| Error::InvalidArgument(format!("{what}: size overflows")))
}

/// The kernels' arguments for a call on `tokens × hidden` rows (one segment per row), once
/// the shape is one the kernels take ([`check_shape`]) and every operand lies in device
/// memory, `align`-byte aligned ([`check_device_range`]).
fn norm_args(
    bufs: NormBuffers,
    tokens: usize,
    hidden: usize,
    eps: f32,
    align: u64,
) -> Result<NormArgs> {
    check_shape(tokens, hidden)?;
    let rows = rows_bytes("all_reduce_rmsnorm", tokens, hidden)?;
    for (what, ptr, bytes) in [
        ("residual", bufs.residual, rows),
        ("weight", bufs.weight, hidden * 2),
        ("out", bufs.out, rows),
        ("residual_out", bufs.residual_out, rows),
    ] {
        check_aligned_range(what, ptr, bytes, align)?;
    }
    Ok(NormArgs {
        residual: bufs.residual,
        weight: bufs.weight,
        out: bufs.out,
        residual_out: bufs.residual_out,
        tokens: tokens as u64,
        hidden: hidden as u64,
        eps,
        segs: 1,
    })
}

/// Checks a raw operand of the fused kernels before it reaches a kernel: `bytes` from `ptr`
/// must lie inside one device allocation (what `cuMemGetAddressRange` reports; under
/// emulation, an emulated allocation), and `ptr` must be 16-byte aligned (the kernels move
/// 16-byte packs; a misaligned one would fault the context). It cannot tell whether the
/// memory is in use elsewhere; the caller keeps it alive until the stream's work is done.
pub fn check_device_range(what: &str, ptr: u64, bytes: usize) -> Result<()> {
    check_aligned_range(what, ptr, bytes, plan::PACK)
}

/// [`check_device_range`] with `align` (16 for the pack forms, 2 for the element form: a
/// whole bf16) in place of 16.
fn check_aligned_range(what: &str, ptr: u64, bytes: usize, align: u64) -> Result<()> {
    let fail = |why: String| {
        Error::InvalidArgument(format!("all_reduce_rmsnorm: {what} at {ptr:#x}: {why}"))
    };
    if !ptr.is_multiple_of(align) {
        return Err(fail(format!("not {align}-byte aligned")));
    }
    let (base, size) = symcomm::cuda::vmm::address_range(ptr).map_err(|e| fail(e.to_string()))?;
    let end = (ptr - base).checked_add(bytes as u64);
    if end.is_none_or(|end| end > size as u64) {
        return Err(fail(format!(
            "{bytes} bytes run past the end of its allocation ({size} bytes at {base:#x})"
        )));
    }
    Ok(())
}

/// The fused kernels' split for `rows` rows of `ppr` packs per launch (`tokens` in all) on
/// `threads`-thread blocks, at most `max_blocks` blocks: [`split::split`] (a grid as wide as
/// the plain all-reduce's, rows cut into segments to fill it).
pub fn fused_split(tokens: u64, rows: u64, ppr: u64, threads: u32, max_blocks: u32) -> Split {
    split::split(tokens, rows, ppr, threads, max_blocks)
}

/// Host reference of one row: from the reduced row `s` (bf16 bits), the residual and the
/// weight, returns `(h, out)` as bf16 bits, rounding as the kernels do.
pub fn reference_row(
    s: &[u16],
    residual: &[u16],
    weight: &[u16],
    eps: f32,
) -> (Vec<u16>, Vec<u16>) {
    let h: Vec<u16> = s
        .iter()
        .zip(residual)
        .map(|(&a, &b)| Bf16::from_f32(Bf16(a).to_f32() + Bf16(b).to_f32()).0)
        .collect();
    let ss: f32 = h.iter().map(|&x| Bf16(x).to_f32() * Bf16(x).to_f32()).sum();
    let inv = rsqrt(ss / h.len() as f32 + eps);
    let out = h
        .iter()
        .zip(weight)
        .map(|(&x, &w)| Bf16::from_f32(Bf16(x).to_f32() * inv * Bf16(w).to_f32()).0)
        .collect();
    (h, out)
}

/// True when two bf16 values agree within one unit in the last place of the larger (the
/// order of the sum of squares may differ between the GPU's block reduction and the host).
pub fn bf16_close(a: u16, b: u16) -> bool {
    let (x, y) = (Bf16(a).to_f32(), Bf16(b).to_f32());
    if x.is_nan() || y.is_nan() {
        return false;
    }
    (x - y).abs() <= x.abs().max(y.abs()) / 128.0 + 1e-30
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsqrt_is_accurate_to_f32_precision() {
        for &x in &[1e-6f32, 0.5, 1.0, 2.0, 3.0, 1234.5, 1e6, 7.7e12] {
            let want = 1.0 / (x as f64).sqrt();
            let got = rsqrt(x) as f64;
            assert!(((got - want) / want).abs() < 1e-6, "{x}: {got} vs {want}");
        }
    }

    #[test]
    fn reference_row_normalises_to_unit_rms_times_weight() {
        let s: Vec<u16> = (0..64)
            .map(|i| Bf16::from_f32((i % 7) as f32 - 3.0).0)
            .collect();
        let r: Vec<u16> = (0..64).map(|i| Bf16::from_f32((i % 3) as f32).0).collect();
        let w = vec![Bf16::from_f32(1.0).0; 64];
        let (h, out) = reference_row(&s, &r, &w, 0.0);
        let hv: Vec<f32> = h.iter().map(|&x| Bf16(x).to_f32()).collect();
        assert_eq!(hv[0], -3.0 + 0.0);
        let rms = (hv.iter().map(|x| x * x).sum::<f32>() / 64.0).sqrt();
        for (x, o) in hv.iter().zip(&out) {
            assert!(bf16_close(*o, Bf16::from_f32(x / rms).0));
        }
    }

    #[test]
    fn shapes_outside_the_kernels_limits_are_refused() {
        assert!(check_shape(1, 8192).is_ok());
        assert!(check_shape(128, 4096).is_ok());
        assert!(check_shape(0, 4096).is_err());
        assert!(check_shape(1, 0).is_err());
        // Any other width: the element form.
        assert!(check_shape(1, 4100).is_ok());
        assert!(check_shape(3, 1).is_ok());
        assert!(check_shape(1, MAX_HIDDEN + 8).is_ok());
    }
}
