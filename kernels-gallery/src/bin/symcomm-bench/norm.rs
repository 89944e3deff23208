//! The fused rows: the fused all-reduce + residual + RMSNorm against symcomm's plain
//! all-reduce of the same rows and NCCL's all-reduce followed by the unfused RMSNorm kernel,
//! on `tokens × hidden` bf16 rows (the outputs of the fused kernel and of NCCL + kernel
//! checked against the host reference).

use symcomm::Result;
use symcomm::cuda::VmmBuffer;
use symcomm_gallery::check::fused_wrong;
use symcomm_gallery::{Buf, DataType, NormBuffers, RedOp};

use crate::rank::Rank;
use crate::report::{self, FusedRow, Measured, Report};

const EPS: f32 = 1e-6;
const MAX_TOKENS: usize = 128;
const MAX_HIDDEN: usize = 8192;
/// Bytes of the largest rows.
const ROWS_MAX: usize = MAX_TOKENS * MAX_HIDDEN * 2;
/// With `--fused-windows`: where `out` and `residual_out` sit in window b (at least 4 MiB).
const WIN_OUT: usize = 0;
const WIN_H: usize = ROWS_MAX;

/// The fused rows: hidden 4096 and 8192 by 1, 16 and 128 tokens where the blocks take rows
/// that wide; with smaller blocks (the CPU emulator's) 512 and 1024 by 1 and 16; `seed` counts
/// on from row to row.
pub fn rows(r: &Rank<'_>, seed: &mut u32, report: &mut Report) -> Result<()> {
    let bench = NormBench::new(r)?;
    report.note(&report::fused_header());
    let (hiddens, tokens_list): (&[usize], &[usize]) = if r.gallery.max_hidden() < 4096 {
        (&[512, 1024], &[1, 16])
    } else {
        (&[4096, 8192], &[1, 16, 128])
    };
    for &hidden in hiddens {
        if hidden > r.gallery.max_hidden() {
            continue;
        }
        for &tokens in tokens_list {
            *seed = seed.wrapping_add(1);
            let rows = Rows {
                tokens,
                hidden,
                seed: *seed,
            };
            let row = bench.row(r, rows)?;
            let wrong = row.fused.wrong + row.nccl.map_or(0, |m| m.wrong);
            report.row(&row.line(), wrong);
        }
    }
    Ok(())
}

/// The shape of one fused row and its pattern's seed.
#[derive(Clone, Copy)]
struct Rows {
    tokens: usize,
    hidden: usize,
    seed: u32,
}

impl Rows {
    fn elems(self) -> usize {
        self.tokens * self.hidden
    }
}

/// The non-window operands of the fused calls (as large as the largest rows), and `sum`, the
/// output of NCCL's all-reduce.
struct NormBench {
    residual: VmmBuffer,
    weight: VmmBuffer,
    out: VmmBuffer,
    residual_out: VmmBuffer,
    sum: VmmBuffer,
}

impl NormBench {
    fn new(r: &Rank<'_>) -> Result<NormBench> {
        let dev = r.comm.device() as i32;
        Ok(NormBench {
            residual: VmmBuffer::new(dev, ROWS_MAX)?,
            weight: VmmBuffer::new(dev, MAX_HIDDEN * 2)?,
            out: VmmBuffer::new(dev, ROWS_MAX)?,
            residual_out: VmmBuffer::new(dev, ROWS_MAX)?,
            sum: VmmBuffer::new(dev, ROWS_MAX)?,
        })
    }

    fn bufs(&self) -> NormBuffers {
        NormBuffers {
            residual: self.residual.device_ptr(),
            weight: self.weight.device_ptr(),
            out: self.out.device_ptr(),
            residual_out: self.residual_out.device_ptr(),
        }
    }

    /// The fused kernel (checked, then timed), symcomm's plain all-reduce of the same rows
    /// (timed) and, with NCCL, NCCL's all-reduce + the unfused kernel (checked, then timed).
    fn row(&self, r: &Rank<'_>, rows: Rows) -> Result<FusedRow> {
        let windows = r.opts.fused_windows;
        let x = Buf::whole(&r.a);
        let g = &r.gallery;
        let Rows { tokens, hidden, .. } = rows;
        let fused = |stream| {
            if windows {
                let (o, h) = (Buf::new(&r.b, WIN_OUT), Buf::new(&r.b, WIN_H));
                let (res, w) = (self.residual.device_ptr(), self.weight.device_ptr());
                g.all_reduce_rmsnorm_into(None, x, res, w, o, h, tokens, hidden, EPS, stream)
            } else {
                g.all_reduce_rmsnorm(x, self.bufs(), tokens, hidden, EPS, stream)
            }
        };
        // Fused: check once, then time.
        self.prepare(r, rows)?;
        r.barrier()?;
        g.clear_status();
        let algo = fused(r.stream())?;
        r.sync()?;
        g.check_status()?;
        let wrong = r.sum(self.verify(r, rows, windows)?)?;
        let us = r.time(|| fused(r.stream()).map(|_| ()))?;
        // symcomm's plain all-reduce of the same rows.
        let all_reduce_us = r.time(|| {
            let (dst, (t, op)) = (Buf::whole(&r.b), (DataType::Bf16, RedOp::Sum));
            g.all_reduce(x, dst, rows.elems(), t, op, r.stream())
                .map(|_| ())
        })?;
        let nccl = self.nccl(r, rows)?;
        let bytes = rows.elems() * 2;
        Ok(FusedRow {
            bytes,
            tokens,
            hidden,
            algo: FusedRow::label(algo, windows, g.tuning().fused_direct(bytes)),
            fused: Measured { us, wrong },
            all_reduce_us,
            nccl,
        })
    }

    /// NCCL's all-reduce into `sum` + the unfused kernel: checked once, then timed (`None`
    /// without NCCL).
    fn nccl(&self, r: &Rank<'_>, rows: Rows) -> Result<Option<Measured>> {
        let Some(nc) = &r.nccl else {
            return Ok(None);
        };
        let (x, sum) = (r.a.user_ptr(), self.sum.device_ptr());
        let (Rows { tokens, hidden, .. }, bf16_sum) = (rows, (DataType::Bf16, RedOp::Sum));
        let op = || -> Result<()> {
            let stream = r.stream();
            // SAFETY: x holds tokens × hidden bf16, `sum` as many; same device.
            unsafe { nc.all_reduce((x, sum), rows.elems(), bf16_sum, stream)? };
            let bufs = self.bufs();
            r.gallery
                .rmsnorm_residual(sum, bufs, tokens, hidden, EPS, stream)
        };
        self.prepare(r, rows)?;
        r.barrier()?;
        op()?;
        r.sync()?;
        let wrong = r.sum(self.verify(r, rows, false)?)?;
        let us = r.time(op)?;
        Ok(Some(Measured { us, wrong }))
    }

    /// Poisons the outputs and fills x (rank pattern), residual and weight (rank 0's
    /// pattern on every rank: replicated).
    fn prepare(&self, r: &Rank<'_>, rows: Rows) -> Result<()> {
        self.out.fill_bytes(0x7f)?;
        self.residual_out.fill_bytes(0x7f)?;
        r.b_mem.buffer().fill_bytes(0x7f)?;
        self.sum.fill_bytes(0x7f)?; // each returns once its memset is done
        let (bf16, seed, me) = (DataType::Bf16, rows.seed, r.rank() as u32);
        let (n, hidden) = (rows.elems(), rows.hidden);
        let (x, res, w) = (
            r.a.user_ptr(),
            self.residual.device_ptr(),
            self.weight.device_ptr(),
        );
        // SAFETY: window a and `residual` hold `tokens × hidden` bf16 (at most the largest
        // rows), `weight` `hidden`; all of this device.
        unsafe {
            r.fill(x, n, bf16, (me, seed), 256)?;
            r.fill(res, n, bf16, (0, seed ^ 0x5555), 256)?;
            r.fill(w, hidden, bf16, (0, seed ^ 0xaaaa), 256)?;
        }
        r.sync()
    }

    /// Wrong elements of `residual_out` (exact) and `out` (within a bf16 ulp): the plain
    /// buffers, or with `windows` those in window b ([`WIN_OUT`], [`WIN_H`]).
    fn verify(&self, r: &Rank<'_>, rows: Rows, windows: bool) -> Result<u64> {
        let n = rows.elems();
        let read = |b: &VmmBuffer, len: usize| -> Result<Vec<u16>> {
            let mut v = vec![0u16; len];
            b.copy_to_host(&mut v)?;
            Ok(v)
        };
        let (h, out) = if windows {
            let all = read(r.b_mem.buffer(), (WIN_H + ROWS_MAX) / 2)?;
            let at = |off: usize| all[off / 2..off / 2 + n].to_vec();
            (at(WIN_H), at(WIN_OUT))
        } else {
            (read(&self.residual_out, n)?, read(&self.out, n)?)
        };
        let (res, w) = (read(&self.residual, n)?, read(&self.weight, rows.hidden)?);
        let m = fused_wrong(&h, &out, &res, &w, (rows.seed, r.n() as u32), EPS);
        if let Some(f) = m.first {
            eprintln!(
                "symcomm-bench: rank {}: rmsnorm {}x{}: first wrong element {}: h {:#06x} want \
                 {:#06x}, out {:#06x} want {:#06x}",
                r.rank(),
                rows.tokens,
                rows.hidden,
                f.index,
                f.h.0,
                f.h.1,
                f.out.0,
                f.out.1
            );
        }
        Ok(m.count as u64)
    }
}
