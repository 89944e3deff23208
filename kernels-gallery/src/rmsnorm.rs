//! Fused all-reduce + residual add + RMSNorm (bf16): the host API and a host reference.
//!
//! `Collectives::all_reduce_rmsnorm` computes, per token row of `x` (`tokens × hidden` bf16,
//! a window), with every intermediate rounded to bf16 as an all-reduce followed by a separate
//! kernel would round it: `s = Σ_ranks x`, `h = s + residual` (→ `residual_out`) and
//! `out = h · rsqrt(mean(h²) + eps) · weight`. The residual must be the same on every rank
//! (the replicated residual stream of tensor parallelism). The protocol follows the plain
//! all-reduce of the same bytes: one-shot LL, two-shot LL (rows split across ranks, no
//! barrier) or two-shot with barriers (rows split across ranks, `h` pushed).

use cudarc::driver::sys::CUstream;
use symcomm::launch::KernelArg;
use symcomm::{Error, Result};
use symcomm_device::reduce::Bf16;
use symcomm_gallery_kernels::plan;
use symcomm_gallery_kernels::rmsnorm::{MAX_PACKS, NormArgs, rsqrt};
use symcomm_gallery_kernels::rmsnorm_split::{self as split, Split};

use crate::buffer::Buf;
use crate::collectives::{Collectives, Kind, launch_args, overlaps};
use crate::tuning::Algo;

pub use symcomm_gallery_kernels::rmsnorm_split::{FUSED_ROW_BYTES, FUSED_SCRATCH_BYTES};

/// The largest `hidden` the kernels take (`8 × MAX_PACKS × threads`).
pub const MAX_HIDDEN: usize = 8 * MAX_PACKS * plan::LL_THREADS as usize;

/// The device addresses of the non-window operands of [`Collectives::all_reduce_rmsnorm`]
/// (device memory of this rank's GPU, 16-byte aligned). Each call checks that every operand
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

/// A newtype so the argument struct can be a kernel argument.
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub(crate) struct NormArg(pub NormArgs);

// SAFETY: `NormArgs` is `#[repr(C)]` plain data (56 bytes, asserted in the kernels crate),
// passed by value exactly as the kernels declare it.
unsafe impl KernelArg for NormArg {}

/// Checks the shape of a fused call: `hidden` a positive multiple of 8 up to
/// [`MAX_HIDDEN`], at least one token.
pub fn check_shape(tokens: usize, hidden: usize) -> Result<()> {
    if tokens == 0 || hidden == 0 || !hidden.is_multiple_of(8) || hidden > MAX_HIDDEN {
        return Err(Error::InvalidArgument(format!(
            "all_reduce_rmsnorm: {tokens} × {hidden} rows: need tokens ≥ 1 and hidden a \
             positive multiple of 8 up to {MAX_HIDDEN}"
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
        stream: CUstream,
    ) -> Result<Algo> {
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
        stream: CUstream,
    ) -> Result<Algo> {
        self.fused(forced, x, bufs, None, tokens, hidden, eps, stream)
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
        stream: CUstream,
    ) -> Result<Algo> {
        let bytes = tokens
            .checked_mul(hidden.saturating_mul(2))
            .ok_or_else(|| {
                Error::InvalidArgument("all_reduce_rmsnorm_into: size overflows".into())
            })?;
        out.check("all_reduce_rmsnorm_into out", bytes)?;
        residual_out.check("all_reduce_rmsnorm_into residual_out", bytes)?;
        let refuse = |why: &str| {
            Err(Error::InvalidArgument(format!(
                "all_reduce_rmsnorm_into: {why}"
            )))
        };
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
        let direct = Some((out, residual_out));
        self.fused(forced, x, bufs, direct, tokens, hidden, eps, stream)
    }

    #[allow(clippy::too_many_arguments)]
    fn fused(
        &self,
        forced: Option<Algo>,
        x: Buf<'_>,
        bufs: NormBuffers,
        direct: Option<(Buf<'_>, Buf<'_>)>,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: CUstream,
    ) -> Result<Algo> {
        let mut args = self.norm_args(bufs, tokens, hidden, eps)?;
        let bytes = tokens
            .checked_mul(hidden * 2)
            .ok_or_else(|| Error::InvalidArgument("all_reduce_rmsnorm: size overflows".into()))?;
        x.check("all_reduce_rmsnorm input", bytes)?;
        let packs = bytes as u64 / plan::PACK;
        let n = self.size() as u64;
        let ppr = hidden as u64 / 8;
        let chunk = plan::slice_len(tokens as u64, n) * ppr;
        let tuning = match forced {
            Some(a) => crate::tuning::Tuning {
                algo: Some(a),
                ..*self.tuning()
            },
            None => *self.tuning(),
        };
        // The same protocol as a plain all-reduce of these bytes, where the rows fit.
        let algo = match tuning.fused_algo(bytes) {
            Algo::OneShot if packs <= self.ll_cap() => Algo::OneShot,
            Algo::OneShot | Algo::TwoShotLl if 2 * chunk <= self.ll_cap() => Algo::TwoShotLl,
            _ => Algo::TwoShot,
        };
        let fused = self.scratch_sym(self.fused_off());
        match algo {
            Algo::OneShot | Algo::TwoShotLl => {
                // Every rank normalises every row. A row that fits one full block stays in
                // it: a block sum is cheaper than joining blocks (H100, 1 × 4096 at one rank:
                // 2.8 µs in one 512-thread block, 3.1 in 2–8 narrower ones). A wider row is
                // cut into blocks as narrow as the plain LL kernels', joined as one cluster,
                // but no narrower than one pack per thread in `MAX_SEGS` blocks (1 × 8192,
                // two ranks on one H100: 4.4–4.5 µs in two 512-thread blocks, 4.0–4.1 in
                // eight of 128, 4.7–4.9 in eight of 64 with two packs per thread).
                let t = self.tuning();
                let full = self.block_threads();
                let min_threads = if ppr <= full as u64 {
                    full
                } else {
                    let one_pack = ppr.div_ceil(split::MAX_SEGS).next_multiple_of(32) as u32;
                    t.ll_min_threads.max(one_pack).min(full)
                };
                let (s, threads) =
                    self.fused_shape(tokens as u64, tokens as u64, ppr, min_threads, t.ll_blocks);
                args.segs = s.segs as u32;
                let a = launch_args!(
                    self;
                    x.sym(0),
                    NormArg(args),
                    self.scratch_sym(0),
                    self.ll_cap(),
                );
                let name = if algo == Algo::OneShot {
                    "all_reduce_rmsnorm_one_shot_bf16"
                } else {
                    "all_reduce_rmsnorm_two_shot_ll_bf16"
                };
                // The blocks of a row meet as one cluster (`segs ≤ MAX_SEGS`, the portable
                // cluster size; the grid is a multiple of it).
                let cluster = s.segs as u32;
                self.launch_clustered(Kind::Ll, name, s.blocks, threads, cluster, stream, a)?;
            }
            // The barrier two-shot (the mapping above leaves no other algorithm).
            Algo::TwoShot | Algo::TwoShotPush | Algo::MultimemOneShot | Algo::MultimemTwoShot => {
                if bytes as u64 > FUSED_ROW_BYTES || tokens as u64 > split::MAX_ITEMS {
                    return Err(Error::InvalidArgument(format!(
                        "all_reduce_rmsnorm: {tokens} × {hidden} rows exceed the fused scratch \
                         ({FUSED_ROW_BYTES} bytes, {} rows)",
                        split::MAX_ITEMS
                    )));
                }
                // Each rank pushes its slice of the rows.
                let rows = plan::slice_len(tokens as u64, n);
                let t = self.tuning();
                let (s, threads) =
                    self.fused_shape(tokens as u64, rows, ppr, t.min_threads, t.max_blocks);
                args.segs = s.segs as u32;
                // The blocks of a row meet as one cluster, as in the LL kernels.
                let (b, k) = (s.blocks, s.segs as u32);
                // Without direct writes `out` may still be `x`: the second pass of block b
                // writes the rows of the items ≡ b (mod grid), which only block b of their
                // owner read, before the exit barrier block b has passed.
                match direct.filter(|_| tuning.fused_direct(bytes)) {
                    Some((out, rout)) => {
                        let a = launch_args!(self; x.sym(0), NormArg(args), fused, out.sym(0), rout.sym(0));
                        let name = "all_reduce_rmsnorm_two_shot_direct_bf16";
                        self.launch_clustered(Kind::Other, name, b, threads, k, stream, a)?;
                    }
                    None => {
                        let a = launch_args!(self; x.sym(0), NormArg(args), fused);
                        let name = "all_reduce_rmsnorm_two_shot_bf16";
                        self.launch_clustered(Kind::Other, name, b, threads, k, stream, a)?;
                    }
                }
            }
        }
        Ok(algo)
    }

    /// The unfused second half on already all-reduced rows `s` (bf16, this GPU): residual
    /// add + RMSNorm, one kernel (what runs after NCCL's all-reduce in the baseline).
    pub fn rmsnorm_residual(
        &self,
        s: u64,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
        stream: CUstream,
    ) -> Result<()> {
        let args = NormArg(self.norm_args(bufs, tokens, hidden, eps)?);
        check_device_range("rows", s, tokens * hidden * 2)?; // bounded by `norm_args`
        let blocks = (tokens as u32).min(1024);
        self.launch(
            Kind::Other,
            "rmsnorm_residual_bf16",
            blocks,
            plan::THREADS,
            stream,
            (s, args),
        )
    }
}

impl Collectives {
    /// The split and threads per block of a fused launch over `rows` rows of `ppr` packs
    /// (`tokens` in all): blocks as narrow as `min_threads` where the work spreads over
    /// enough of them ([`plan::spread`]) and the row's segments still fit such a block, else
    /// this backend's full blocks.
    fn fused_shape(
        &self,
        tokens: u64,
        rows: u64,
        ppr: u64,
        min_threads: u32,
        max_blocks: u32,
    ) -> (Split, u32) {
        let full = self.block_threads();
        let (_, threads) = plan::spread(rows * ppr, min_threads.min(full), full, max_blocks);
        let s = fused_split(tokens, rows, ppr, threads, max_blocks);
        if split::fits(s, ppr, threads) {
            (s, threads)
        } else {
            (fused_split(tokens, rows, ppr, full, max_blocks), full)
        }
    }

    /// The largest `hidden` the fused kernels take with this backend's blocks
    /// (`8 × MAX_PACKS × threads`: [`MAX_HIDDEN`] on GPUs, less under emulation).
    pub fn max_hidden(&self) -> usize {
        8 * MAX_PACKS * self.block_threads() as usize
    }

    /// The kernels' arguments for a call on `tokens × hidden` rows (one segment per row),
    /// once the shape is one the kernels take ([`check_shape`], [`Self::check_hidden`]).
    fn norm_args(
        &self,
        bufs: NormBuffers,
        tokens: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<NormArgs> {
        check_shape(tokens, hidden)?;
        self.check_hidden(hidden)?;
        let rows = tokens
            .checked_mul(hidden * 2)
            .ok_or_else(|| Error::InvalidArgument("all_reduce_rmsnorm: size overflows".into()))?;
        check_device_range("residual", bufs.residual, rows)?;
        check_device_range("weight", bufs.weight, hidden * 2)?;
        check_device_range("out", bufs.out, rows)?;
        check_device_range("residual_out", bufs.residual_out, rows)?;
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

    fn check_hidden(&self, hidden: usize) -> Result<()> {
        if hidden > self.max_hidden() {
            return Err(Error::InvalidArgument(format!(
                "all_reduce_rmsnorm: hidden {hidden} exceeds {} for blocks of {} threads \
                 (under emulation: raise SYMCOMM_EMU_THREADS)",
                self.max_hidden(),
                self.block_threads()
            )));
        }
        Ok(())
    }
}

/// Checks a raw operand of the fused kernels before it reaches a kernel: `bytes` from `ptr`
/// must lie inside one device allocation (what `cuMemGetAddressRange` reports; under
/// emulation, an emulated allocation), and `ptr` must be 16-byte aligned (the kernels move
/// 16-byte packs; a misaligned one would fault the context). It cannot tell whether the
/// memory is in use elsewhere; the caller keeps it alive until the stream's work is done.
pub fn check_device_range(what: &str, ptr: u64, bytes: usize) -> Result<()> {
    let fail = |why: String| {
        Error::InvalidArgument(format!("all_reduce_rmsnorm: {what} at {ptr:#x}: {why}"))
    };
    if !ptr.is_multiple_of(plan::PACK) {
        return Err(fail(format!("not {}-byte aligned", plan::PACK)));
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
        assert!(check_shape(1, 4100).is_err());
        assert!(check_shape(1, MAX_HIDDEN + 8).is_err());
    }
}
