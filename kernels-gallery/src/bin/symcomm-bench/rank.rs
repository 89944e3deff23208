//! One rank of the benchmark ([`Rank`]): what it owns (the gallery, two registered windows a
//! and b as large as the largest case, its stream, NCCL's communicator) and what every
//! measurement does with it: fill a buffer with the pattern, read one back, time an op, sum or
//! average a value over the ranks.

use cudarc::driver::sys;
use symcomm::launch::{LaunchConfig, limits};
use symcomm::{Communicator, Device, DeviceMemory, Result, Stream, SymmetricMemory, Window};
use symcomm_gallery::check::fill_code;
use symcomm_gallery::{Algo, Collectives, DataType};
use symcomm_gallery_kernels::BenchFill;

use crate::nccl::Nccl;
use crate::opts::Opts;
use crate::timing::Clock;

/// Everything one rank of the benchmark holds.
pub struct Rank<'a> {
    pub opts: &'a Opts,
    // Drop order: NCCL, the windows before their memory, the gallery, the stream, the device,
    // the communicator.
    /// `None` with `--no-nccl` and on a device without a CUDA context (the CPU emulator).
    pub nccl: Option<Nccl>,
    pub b: Window,
    pub a: Window,
    pub b_mem: SymmetricMemory,
    pub a_mem: SymmetricMemory,
    pub gallery: Collectives,
    stream: Stream,
    _dev: Device,
    pub comm: Communicator,
}

impl<'a> Rank<'a> {
    /// Collective: sets up this rank of `comm` for `opts`: its stream, the gallery (with the
    /// push scratch back on where `--algos` asks for the push two-shot), windows a and b, and
    /// NCCL unless it is off.
    pub fn new(comm: Communicator, opts: &'a Opts) -> Result<Rank<'a>> {
        let dev = Device::for_rank(&comm)?;
        let stream = dev.stream()?;
        let mut tuning = symcomm_gallery::sizing::tuning_from_env(comm.lsa_size())?;
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
        // NCCL runs on CUDA devices: on one with a CUDA context (not the CPU emulator's).
        let nccl = if opts.nccl && dev.cudarc_context().is_some() {
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
            _dev: dev,
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

    /// True on the CPU emulator (for the report's header).
    pub fn emulated(&self) -> bool {
        self.stream.is_emulated()
    }

    /// The stream of the launches.
    pub fn stream(&self) -> sys::CUstream {
        self.stream.raw()
    }

    /// Waits for the stream.
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize()
    }

    /// Collective: a bootstrap barrier.
    pub fn barrier(&self) -> Result<()> {
        self.comm.bootstrap().barrier()
    }

    /// Launches `bench_fill` on the stream: `count` elements of `t` at device address `dst`
    /// from the pattern of rank `rank` under `seed`, in `blocks` blocks of 512 threads (fewer
    /// and smaller where the device's launch limits say so).
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
        let l = limits()?;
        let cfg = LaunchConfig::linear(
            blocks.min(l.max_grid_blocks.unwrap_or(u32::MAX)),
            512.min(self.gallery.block_threads()),
        );
        let f = self.gallery.module().kernel::<BenchFill>()?;
        let dst = std::ptr::with_exposed_provenance_mut::<u8>(dst as usize);
        let args = (dst, count as u64, fill_code(t), rank, seed, 0u64);
        // SAFETY: `dst` holds `count` elements of `t` (the caller's contract).
        unsafe { f.launch(cfg, self.stream(), args) }
    }

    /// Copies `dst.len()` bytes from device address `src`, after the stream's work.
    ///
    /// # Safety
    /// - `src` starts at least `dst.len()` bytes of this rank's device memory, which stays
    ///   allocated during the call.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        let range = Range(src, dst.len());
        self.stream.copy_to_host(&range, 0, dst)
    }

    /// Collective: the median time of one `op` in µs ([`Clock::median_us`]), averaged over the
    /// ranks.
    pub fn time(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        let clock = Clock {
            comm: &self.comm,
            stream: &self.stream,
            opts: self.opts,
        };
        self.mean(clock.median_us(op)?)
    }

    /// Collective: the median times of `a` and `b` in µs, their replays interleaved
    /// ([`Clock::paired_us`]), each averaged over the ranks.
    pub fn time_pair(
        &self,
        a: impl Fn() -> Result<()>,
        b: impl Fn() -> Result<()>,
    ) -> Result<(f64, f64)> {
        let clock = Clock {
            comm: &self.comm,
            stream: &self.stream,
            opts: self.opts,
        };
        let (ta, tb) = clock.paired_us(a, b)?;
        Ok((self.mean(ta)?, self.mean(tb)?))
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

/// A range of device memory named by address and length ([`Rank::copy_to_host`]).
struct Range(u64, usize);

// SAFETY: `Rank::copy_to_host`'s caller guarantees the range is device memory of this rank
// that stays allocated while the `Range` is used.
unsafe impl DeviceMemory for Range {
    fn device_ptr(&self) -> u64 {
        self.0
    }
    fn byte_len(&self) -> usize {
        self.1
    }
}
