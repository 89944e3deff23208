//! One rank of the benchmark ([`Rank`]): what it owns (the gallery, two registered windows a
//! and b as large as the largest case, its stream, NCCL's communicator) and what every
//! measurement does with it: fill a buffer with the pattern, read one back, time an op, sum or
//! average a value over the ranks.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, sys};
use symcomm::cuda;
use symcomm::launch::LaunchConfig;
use symcomm::{Communicator, Error, Result, SymmetricMemory, Window};
use symcomm_gallery::check::fill_code;
use symcomm_gallery::{Algo, Collectives, DataType};

use crate::error::cu;
use crate::nccl::Nccl;
use crate::opts::Opts;
use crate::timing::{Clock, Gpu};

/// Everything one rank of the benchmark holds.
pub struct Rank<'a> {
    pub opts: &'a Opts,
    // Drop order: NCCL, the windows before their memory, the gallery, the stream, the context,
    // the communicator.
    /// `None` with `--no-nccl` and on the CPU emulator.
    pub nccl: Option<Nccl>,
    pub b: Window,
    pub a: Window,
    pub b_mem: SymmetricMemory,
    pub a_mem: SymmetricMemory,
    pub gallery: Collectives,
    /// `None` on the CPU emulator (launches are synchronous there).
    stream: Option<Arc<CudaStream>>,
    /// `None` on the CPU emulator.
    ctx: Option<Arc<CudaContext>>,
    pub comm: Communicator,
}

impl<'a> Rank<'a> {
    /// Collective: sets up this rank of `comm` for `opts`: its stream, the gallery (with the
    /// push scratch back on where `--algos` asks for the push two-shot), windows a and b, and
    /// NCCL unless it is off.
    pub fn new(comm: Communicator, opts: &'a Opts) -> Result<Rank<'a>> {
        let (ctx, stream) = if symcomm::backend::is_emulated()? {
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
        Ok(Rank {
            opts,
            nccl,
            b,
            a,
            b_mem,
            a_mem,
            gallery,
            stream,
            ctx,
            comm,
        })
    }

    /// The number of ranks.
    pub fn n(&self) -> usize {
        self.comm.size()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// True on the CPU emulator.
    pub fn emulated(&self) -> bool {
        self.stream.is_none()
    }

    /// The stream of the launches (null on the emulator, which ignores it).
    pub fn stream(&self) -> sys::CUstream {
        self.stream
            .as_ref()
            .map_or(std::ptr::null_mut(), |s| s.cu_stream())
    }

    /// Waits for the stream (nothing to wait for on the emulator).
    pub fn sync(&self) -> Result<()> {
        match &self.stream {
            Some(s) => s.synchronize().map_err(cu("cuStreamSynchronize")),
            None => Ok(()),
        }
    }

    /// Collective: a bootstrap barrier.
    pub fn barrier(&self) -> Result<()> {
        self.comm.bootstrap().barrier()
    }

    /// Launches `bench_fill` on the stream: `count` elements of `t` at device address `dst`
    /// from the pattern of rank `rank` under `seed`, in `blocks` blocks of 512 threads (two
    /// small blocks under emulation).
    ///
    /// # Safety
    /// - `dst` holds `count` elements of `t` on this rank's device.
    pub unsafe fn fill(
        &self,
        dst: u64,
        count: usize,
        t: DataType,
        (rank, seed): (u32, u32),
        blocks: u32,
    ) -> Result<()> {
        let cfg = match self.stream {
            Some(_) => LaunchConfig::linear(blocks, 512),
            None => LaunchConfig::linear(2, self.gallery.block_threads()),
        };
        let f = self.gallery.module().function("bench_fill")?;
        let args = (dst as *mut u8, count as u64, fill_code(t), rank, seed, 0u64);
        // SAFETY: `dst` holds `count` elements of `t` (the caller's contract).
        unsafe { f.launch_with(cfg, self.stream(), args) }
    }

    /// Copies `dst.len()` bytes from device address `src` (synchronous).
    ///
    /// # Safety
    /// - `src` starts at least `dst.len()` bytes of this rank's device memory (under
    ///   emulation: of the emulated device memory, mapped in this process), which no launch
    ///   writes meanwhile.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if self.emulated() {
            // SAFETY: under emulation device addresses are host addresses; the range is
            // mapped (the caller's contract) and emulated launches are synchronous.
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

    /// Collective: the median time of one `op` in µs ([`Clock::median_us`]), averaged over the
    /// ranks.
    pub fn time(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        let clock = Clock {
            comm: &self.comm,
            gpu: (self.stream.as_ref().zip(self.ctx.as_ref()))
                .map(|(stream, ctx)| Gpu { stream, ctx }),
            opts: self.opts,
        };
        self.mean(clock.median_us(op)?)
    }

    /// Collective: the mean of `v` over the ranks.
    pub fn mean(&self, v: f64) -> Result<f64> {
        let all = self.gather(v.to_le_bytes())?;
        let sum: f64 = all.iter().map(|b| b.map_or(0.0, f64::from_le_bytes)).sum();
        Ok(sum / all.len() as f64)
    }

    /// Collective: the sum of `v` over the ranks (saturating; a malformed value counts as
    /// `u64::MAX`).
    pub fn sum(&self, v: u64) -> Result<u64> {
        let all = self.gather(v.to_le_bytes())?;
        let each = all.iter().map(|b| b.map_or(u64::MAX, u64::from_le_bytes));
        Ok(each.fold(0u64, u64::saturating_add))
    }

    /// Collective: every rank's 8 bytes (`None` for a rank that sent fewer).
    fn gather(&self, bytes: [u8; 8]) -> Result<Vec<Option<[u8; 8]>>> {
        let all = self.comm.bootstrap().all_gather(&bytes)?;
        Ok(all
            .iter()
            .map(|b| b.get(..8).and_then(|s| s.try_into().ok()))
            .collect())
    }
}
