//! The host API: [`Collectives`] owns what the gallery kernels need on one rank (the loaded
//! module, a device communicator with enough barriers, the scratch window of the LL kernels
//! and a status word) and launches collectives on a stream.
//!
//! Launches are asynchronous and CUDA-graph capturable: nothing here synchronises, and all
//! per-launch state (barrier epochs, LL counters) lives in device memory, so a captured
//! launch replays correctly. A device-side wait that times out (or is aborted) writes its code
//! to the status word; [`Collectives::check_status`] turns it into an error after the stream
//! has been synchronised.

use cudarc::driver::sys::CUstream;
use symcomm::cuda::memory::HostMapped;
use symcomm::launch::{KernelArgs, LaunchConfig, Module};
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory, Window};
use symcomm_device::ptr::SymPtr;
use symcomm_device::window::Window as DeviceWindow;
use symcomm_gallery_kernels::plan;

use crate::buffer::Buf;
use crate::kernels;
use crate::tuning::{Algo, Tuning};
use crate::types::{DataType, RedOp, multimem_reduces, reducing_kernel};

/// The argument tuple of a gallery kernel launched by `$this` (a [`Collectives`]):
/// `(comm, $mid…, timeout_ns, status)`, the first and last parameters that every entry
/// point taking a communicator shares.
macro_rules! launch_args {
    ($this:expr; $($mid:expr),* $(,)?) => {
        ($this.dev_raw(), $($mid,)* $this.tuning().timeout_ns, $this.status_ptr())
    };
}
pub(crate) use launch_args;

/// What a launch is, for [`Tuning::dependent_launch`](crate::tuning::Tuning::dependent_launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An LL kernel.
    Ll,
    /// Any other kernel.
    Other,
}

/// The gallery collectives of one rank (see the module docs).
#[derive(Debug)]
pub struct Collectives {
    // Drop order: the module, the scratch window before its memory, the communicator.
    module: Module,
    scratch: Window,
    _scratch_mem: SymmetricMemory,
    push: Option<(Window, SymmetricMemory)>,
    dev: DevComm,
    status: HostMapped<u32>,
    tuning: Tuning,
    rank: usize,
    n: usize,
    ll_cap: u64,
    fused_off: u64,
    /// Threads per block on this backend (see [`crate::emulation::threads`]).
    threads: u32,
}

impl Collectives {
    /// Collective: every rank of `comm` calls this (with its device's context current) with
    /// the same `tuning`. Creates the device communicator and the scratch window and loads
    /// the kernels.
    ///
    /// # Errors
    ///
    /// Besides this rank's own failures: [`Error::Mismatch`] on every rank where the ranks'
    /// [`Tuning::agreed_knobs`] differ, and [`Error::PeerFailed`] (with the peer's message)
    /// where another rank's set-up failed before the first collective step (a tuning out of
    /// range, a module that would not load): one bootstrap all-gather tells every rank the
    /// outcome, so no rank waits in a later step for a peer that has given up.
    pub fn new(comm: &Communicator, tuning: Tuning) -> Result<Collectives> {
        if comm.lsa_size() != comm.size() {
            return Err(Error::Unsupported {
                what: format!(
                    "gallery collectives over {} ranks of which only {} share NVLink",
                    comm.size(),
                    comm.lsa_size()
                ),
                hint: "run every rank on one NVLink domain (one node)".into(),
            });
        }
        // Loaded before the collective calls below: loading a module waits for the kernels
        // running in the context, and with ranks as threads on one GPU a rank that returned
        // first may already be running a collective that waits for this rank (measured with
        // `hello_window`: the late rank stayed in `Module::load` until the other's barrier
        // timed out). Every gallery kernel runs blocks of at most `plan::THREADS` threads;
        // the pipelined push kernels would take more registers than such a block has if left
        // unbounded.
        let n = comm.lsa_size();
        // Everything that can fail on this rank alone comes before the first collective step.
        // (The scratch sizes are bounded once the tuning is valid.)
        let local = tuning.validate().and_then(|()| {
            let ll_cap = tuning.ll_cap_packs(n);
            let fused_off = plan::ll_region_bytes(n as u32, ll_cap).next_multiple_of(4096);
            let module = Module::load_for_block(kernels::PTX, plan::THREADS.max(plan::LL_THREADS))?;
            let status = HostMapped::new(0u32)?;
            let threads = crate::emulation::threads()?;
            let scratch_bytes =
                fused_off + symcomm_gallery_kernels::rmsnorm_split::FUSED_SCRATCH_BYTES;
            let scratch_mem = SymmetricMemory::alloc(comm, scratch_bytes as usize)?;
            // Zeroed before registering: registration ends with a team barrier, so no peer
            // can write an LL line before every header and line is zero (= never valid).
            // `fill_bytes` returns once the memset is done. (No context-wide synchronize
            // here: it would also wait for other streams' kernels, e.g. another rank's
            // collective when several ranks share this device and context.)
            scratch_mem.buffer().fill_bytes(0)?;
            // No zeroing needed for the push scratch: each pipelined launch zeroes its own
            // counters before its entry barrier, and slots are written before they are read.
            let push_mem = match tuning.push_scratch {
                0 => None,
                _ => Some(SymmetricMemory::alloc(
                    comm,
                    tuning.push_window_bytes(n) as usize,
                )?),
            };
            let scratch = (scratch_mem, push_mem, ll_cap, fused_off);
            Ok((module, status, threads, scratch))
        });
        // Every rank learns whether every other one got this far and runs the same knobs
        // before the first collective step (`agreement`).
        let mut knobs = tuning.agreed_knobs();
        if let Ok((_, _, threads, ..)) = &local {
            knobs.push(("block threads", threads.to_string()));
        }
        let agreed = crate::agreement::check(comm, local.as_ref().err(), &knobs);
        let (module, status, threads, (scratch_mem, push_mem, ll_cap, fused_off)) = local?;
        agreed?;
        let scratch = comm.register_window(&scratch_mem)?;
        let push = match push_mem {
            Some(mem) => Some((comm.register_window(&mem)?, mem)),
            None => None,
        };
        let req = Requirements::new().lsa_barriers(tuning.max_blocks);
        let (dev, tuning) = match DevComm::create(comm, req.lsa_multimem(tuning.multimem)) {
            // Refusals of multicast come back alike on every rank (the runtime votes), so every
            // rank retries without it: no NVLink SHARP here, and forced multimem algorithms
            // fall back to the choice by size, as PyTorch and vLLM fall back to unicast.
            Err(Error::Unsupported { what, hint }) if tuning.multimem => {
                tracing::warn!(
                    "rank {}: gallery collectives without multimem: {what} unsupported ({hint})",
                    comm.rank()
                );
                let dev = DevComm::create(comm, req)?;
                let tuning = Tuning {
                    multimem: false,
                    ..tuning
                };
                (dev, tuning)
            }
            r => (r?, tuning),
        };
        Ok(Collectives {
            module,
            scratch,
            _scratch_mem: scratch_mem,
            push,
            dev,
            status,
            tuning,
            rank: comm.rank(),
            n,
            ll_cap,
            fused_off,
            threads,
        })
    }

    /// [`Collectives::new`] with [`Tuning::from_env_for`] the communicator's rank count (under
    /// emulation: [`crate::emulation::tuning_from_env`]).
    pub fn from_env(comm: &Communicator) -> Result<Collectives> {
        Collectives::new(comm, crate::emulation::tuning_from_env(comm.lsa_size())?)
    }

    /// The tuning in use.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The most threads per block of a launch: [`plan::THREADS`] on GPUs, what
    /// [`crate::emulation::threads`] says under emulation. Launches take fewer where the
    /// work spreads over more blocks ([`Tuning::shape`]).
    pub fn block_threads(&self) -> u32 {
        self.threads
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.n
    }

    /// The loaded gallery module (every kernel of [`kernels::PTX`], JIT-compiled once).
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The device communicator the kernels use (e.g. to raise its abort flag).
    pub fn dev_comm(&self) -> &DevComm {
        &self.dev
    }

    /// The error a device-side wait reported since the last [`clear_status`]
    /// (`Ok` if none). Read it after synchronising the stream.
    ///
    /// [`clear_status`]: Collectives::clear_status
    pub fn check_status(&self) -> Result<()> {
        match self.status.get() {
            0 => Ok(()),
            code => Err(Error::Timeout {
                rank: Some(self.rank),
                step: format!(
                    "a gallery collective's device-side wait ({})",
                    if code == 2 {
                        "aborted"
                    } else {
                        "peer never arrived"
                    }
                ),
                after: std::time::Duration::from_nanos(self.tuning.timeout_ns),
            }),
        }
    }

    /// Resets the status word.
    pub fn clear_status(&self) {
        self.status.set(0);
    }

    /// Collective: `dst` = reduction with `op` of `count` elements of type `t` at every
    /// rank's `src`. `dst` may be `src` (in place). Returns the algorithm used (chosen by
    /// size, see [`Tuning`]).
    pub fn all_reduce(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        op: RedOp,
        stream: CUstream,
    ) -> Result<Algo> {
        self.all_reduce_with(self.tuning.algo, src, dst, count, t, op, stream)
    }

    /// [`all_reduce`](Self::all_reduce) with `algo` forced when it can run (see
    /// [`Tuning::all_reduce_algo_with`]); every rank must pass the same `algo`. A multimem
    /// algorithm also needs a type and operator the switch reduces ([`multimem_reduces`]:
    /// not f32 min/max), and the one-shot an output apart from the input (in place it runs
    /// the multimem two-shot, which reads and writes only its own slice): with a forced
    /// multimem algorithm every rank must also make the same in-place choice.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_with(
        &self,
        algo: Option<Algo>,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        op: RedOp,
        stream: CUstream,
    ) -> Result<Algo> {
        let bytes = bytes_of(count, t)?;
        src.check("all_reduce source", bytes)?;
        dst.check("all_reduce destination", bytes)?;
        no_partial_overlap("all_reduce", &src, bytes, &dst, bytes)?;
        let algo = self.all_reduce_algo(algo, bytes, t, op, src.same_as(&dst));
        if bytes == 0 {
            return Ok(algo);
        }
        let packs = (bytes as u64) / plan::PACK;
        match algo {
            Algo::OneShot => {
                let name = reducing_kernel("all_reduce_one_shot", t, op);
                self.launch_ll(&name, src, dst, packs, packs, stream)?;
            }
            Algo::TwoShotLl => {
                let name = reducing_kernel("all_reduce_two_shot_ll", t, op);
                let slice = plan::slice_len(packs, self.n as u64);
                if 2 * slice > self.ll_cap {
                    return Err(Error::InvalidArgument(format!(
                        "all_reduce: {bytes} bytes exceed the two-shot LL scratch"
                    )));
                }
                self.launch_ll(&name, src, dst, packs, slice, stream)?;
            }
            Algo::TwoShot => {
                let name = reducing_kernel("all_reduce_two_shot", t, op);
                let work = plan::slice_len(packs, self.n as u64);
                self.launch_barriered(&name, src, dst, packs, work, stream)?;
            }
            Algo::TwoShotPush => {
                let name = reducing_kernel("all_reduce_two_shot_push", t, op);
                let slice = plan::slice_len(packs, self.n as u64);
                self.launch_pipelined(&name, src, dst, packs, slice, stream)?;
            }
            // Only with the multicast range (`Tuning::multimem`, which `new` asked for).
            Algo::MultimemOneShot => {
                let name = reducing_kernel("all_reduce_multimem_one_shot", t, op);
                self.launch_barriered(&name, src, dst, packs, packs, stream)?;
            }
            Algo::MultimemTwoShot => {
                let name = reducing_kernel("all_reduce_multimem_two_shot", t, op);
                let slice = plan::slice_len(packs, self.n as u64);
                self.launch_barriered(&name, src, dst, packs, slice, stream)?;
            }
        }
        Ok(algo)
    }

    /// The algorithm [`all_reduce_with`](Self::all_reduce_with) runs for `forced`, `bytes`, `t`
    /// and `op`, in place or not: [`Tuning::all_reduce_algo_with`], after the multimem
    /// algorithms' own conditions (a type and operator the switch reduces; the one-shot only
    /// out of place, else the two-shot).
    pub fn all_reduce_algo(
        &self,
        forced: Option<Algo>,
        bytes: usize,
        t: DataType,
        op: RedOp,
        in_place: bool,
    ) -> Algo {
        let forced = match forced {
            Some(a) if a.is_multimem() && !multimem_reduces(t, op) => None,
            Some(Algo::MultimemOneShot) if in_place => Some(Algo::MultimemTwoShot),
            a => a,
        };
        self.tuning.all_reduce_algo_with(forced, bytes)
    }

    /// `bytes` per rank times the number of ranks: the size of a buffer holding every rank's
    /// block, refused where it overflows (before any range check could pass on a wrapped
    /// product).
    fn all_blocks(&self, what: &str, bytes: usize) -> Result<usize> {
        bytes.checked_mul(self.n).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what}: {bytes} bytes per rank × {} ranks overflows",
                self.n
            ))
        })
    }

    /// Collective: `dst` (`count` elements) = reduction with `op` of block `rank` (elements
    /// `rank × count ..`) of every rank's `src` (`size × count` elements).
    pub fn reduce_scatter(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        op: RedOp,
        stream: CUstream,
    ) -> Result<()> {
        let bytes = bytes_of(count, t)?;
        let total = self.all_blocks("reduce_scatter", bytes)?;
        src.check("reduce_scatter source", total)?;
        dst.check("reduce_scatter destination", bytes)?;
        let own = Buf::new(src.window(), src.offset() + bytes * self.rank);
        if !dst.same_as(&own) {
            no_partial_overlap("reduce_scatter", &src, total, &dst, bytes)?;
        }
        if bytes == 0 {
            return Ok(());
        }
        let packs = bytes as u64 / plan::PACK;
        if self.tuning.ll_for(total, bytes, self.n) {
            let name = reducing_kernel("reduce_scatter_ll", t, op);
            return self.launch_ll(&name, src, dst, packs, packs, stream);
        }
        if self.push.is_some() && total >= self.tuning.rs_push_min {
            let name = reducing_kernel("reduce_scatter_push", t, op);
            return self.launch_pipelined(&name, src, dst, packs, packs, stream);
        }
        let name = reducing_kernel("reduce_scatter", t, op);
        self.launch_barriered(&name, src, dst, packs, packs, stream)
    }

    /// Collective: block `rank` of every rank's `dst` (`size × count` elements) receives this
    /// rank's `src` (`count` elements); `src` may be that block of `dst` (in place).
    pub fn all_gather(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        stream: CUstream,
    ) -> Result<()> {
        let bytes = bytes_of(count, t)?;
        let total = self.all_blocks("all_gather", bytes)?;
        src.check("all_gather source", bytes)?;
        dst.check("all_gather destination", total)?;
        let own = Buf::new(dst.window(), dst.offset() + bytes * self.rank);
        if !src.same_as(&own) {
            no_partial_overlap("all_gather", &src, bytes, &dst, total)?;
        }
        self.move_blocks("all_gather", src, dst, bytes, total, stream)
    }

    /// Collective: block `p` (`count` elements) of this rank's `src` lands in block `rank` of
    /// peer `p`'s `dst`. `src` and `dst` must not overlap.
    pub fn all_to_all(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        stream: CUstream,
    ) -> Result<()> {
        let bytes = bytes_of(count, t)?;
        let total = self.all_blocks("all_to_all", bytes)?;
        src.check("all_to_all source", total)?;
        dst.check("all_to_all destination", total)?;
        if overlaps(&src, total, &dst, total) {
            return Err(Error::InvalidArgument(
                "all_to_all: source and destination overlap (in-place is not supported)".into(),
            ));
        }
        self.move_blocks("all_to_all", src, dst, bytes, total, stream)
    }

    /// Collective: every rank's `dst` receives `count` elements of rank `root`'s `src`
    /// (`dst` may be `src`).
    pub fn broadcast(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        root: usize,
        stream: CUstream,
    ) -> Result<()> {
        let bytes = bytes_of(count, t)?;
        src.check("broadcast source", bytes)?;
        dst.check("broadcast destination", bytes)?;
        no_partial_overlap("broadcast", &src, bytes, &dst, bytes)?;
        if root >= self.n {
            return Err(Error::InvalidArgument(format!(
                "broadcast: root {root} is not a rank of {}",
                self.n
            )));
        }
        if bytes == 0 {
            return Ok(());
        }
        let packs = bytes as u64 / plan::PACK;
        if self.tuning.broadcast_ll(bytes, self.n) {
            let args = launch_args!(
                self;
                src.sym(0),
                dst.sym(0),
                packs,
                self.scratch_sym(0),
                self.ll_cap,
                root as i32,
            );
            let (blocks, threads) = self.tuning.ll_shape(packs);
            return self.launch(Kind::Ll, "broadcast_ll", blocks, threads, stream, args);
        }
        let args = launch_args!(self; src.sym(0), dst.sym(0), packs, root as i32);
        let (blocks, threads) = self
            .tuning
            .shape(plan::bcast_slice_len(packs, self.n as u64));
        self.launch(Kind::Other, "broadcast", blocks, threads, stream, args)
    }

    /// Runs a data-movement collective with `bytes` per peer block (`total` bytes counted as
    /// nccl-tests counts size): its LL kernel `<name>_ll` when small enough, else the
    /// barrier-bracketed kernel `<name>`.
    fn move_blocks(
        &self,
        name: &str,
        src: Buf<'_>,
        dst: Buf<'_>,
        bytes: usize,
        total: usize,
        stream: CUstream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let packs = bytes as u64 / plan::PACK;
        if self.tuning.ll_for(total, bytes, self.n) {
            return self.launch_ll(&format!("{name}_ll"), src, dst, packs, packs, stream);
        }
        self.launch_barriered(name, src, dst, packs, packs, stream)
    }

    /// Launches a barrier-bracketed kernel taking `(comm, src, dst, packs, timeout, status)`
    /// with a grid that covers `work` packs per thread pass.
    fn launch_barriered(
        &self,
        name: &str,
        src: Buf<'_>,
        dst: Buf<'_>,
        packs: u64,
        work: u64,
        stream: CUstream,
    ) -> Result<()> {
        let args = launch_args!(self; src.sym(0), dst.sym(0), packs);
        let (blocks, threads) = self.tuning.shape(work);
        self.launch(Kind::Other, name, blocks, threads, stream, args)
    }

    /// Launches an LL kernel taking `(comm, src, dst, packs, scratch, cap, timeout, status)`
    /// with a grid that covers `work` packs per thread pass (as [`Self::launch_barriered`]).
    fn launch_ll(
        &self,
        name: &str,
        src: Buf<'_>,
        dst: Buf<'_>,
        packs: u64,
        work: u64,
        stream: CUstream,
    ) -> Result<()> {
        let args =
            launch_args!(self; src.sym(0), dst.sym(0), packs, self.scratch_sym(0), self.ll_cap);
        let (blocks, threads) = self.tuning.ll_shape(work);
        self.launch(Kind::Ll, name, blocks, threads, stream, args)
    }

    /// Launches a pipelined push kernel (`pipeline.rs` in the kernels) whose largest slice
    /// is `slice` packs.
    fn launch_pipelined(
        &self,
        name: &str,
        src: Buf<'_>,
        dst: Buf<'_>,
        packs: u64,
        slice: u64,
        stream: CUstream,
    ) -> Result<()> {
        let Some((win, _)) = &self.push else {
            return Err(Error::InvalidArgument(format!(
                "{name}: the pipelined push kernels are off (SYMCOMM_PUSH_SCRATCH=0)"
            )));
        };
        let threads = plan::THREADS.min(self.threads);
        let (blocks, chunk) = self.tuning.push_shape(self.n, slice, threads);
        if chunk == 0 {
            return Err(Error::InvalidArgument(format!(
                "{name}: SYMCOMM_PUSH_SCRATCH ({} bytes) holds no slot for {blocks} blocks × {} \
                 ranks × {} slots",
                self.tuning.push_scratch, self.n, self.tuning.push_slots
            )));
        }
        let push = SymPtr::<u8>::new(win.device_ptr() as *const DeviceWindow, 0);
        let slots = u64::from(self.tuning.push_slots);
        let args = launch_args!(self; src.sym(0), dst.sym(0), packs, push, slots, chunk);
        self.launch(Kind::Other, name, blocks, plan::THREADS, stream, args)
    }

    /// Launches gallery kernel `name` (`kind`: for
    /// [`Tuning::dependent_launch`](crate::tuning::Tuning::dependent_launch)).
    pub(crate) fn launch<A: KernelArgs>(
        &self,
        kind: Kind,
        name: &str,
        blocks: u32,
        threads: u32,
        stream: CUstream,
        args: A,
    ) -> Result<()> {
        self.launch_clustered(kind, name, blocks, threads, 1, stream, args)
    }

    /// [`Self::launch`] in thread block clusters of `cluster` blocks (1: none; a divisor of
    /// `blocks`, at most `symcomm_host::launch::MAX_CLUSTER`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_clustered<A: KernelArgs>(
        &self,
        kind: Kind,
        name: &str,
        blocks: u32,
        threads: u32,
        cluster: u32,
        stream: CUstream,
        args: A,
    ) -> Result<()> {
        let f = self.module.function(name)?;
        // The kernels stride over `block_dim()`: smaller blocks under emulation.
        let threads = threads.min(self.threads);
        // Every gallery kernel starts with `common::enter`, which waits for the kernel ahead
        // of it: a dependent launch keeps the stream order.
        let mut cfg = LaunchConfig::linear(blocks, threads).with_cluster(cluster);
        if self.tuning.dependent_launch.applies(kind == Kind::Ll) {
            cfg = cfg.with_dependent_launch();
        }
        // SAFETY: every gallery entry point's arguments are built by the methods above from
        // checked buffers (inside their windows, 16-byte multiples), the communicator has
        // `max_blocks ≥ blocks` barriers, grids have at most `plan::LL_COUNTERS` blocks (the
        // launch counters of the LL and fused kernels; `Tuning::validate`), and every rank
        // computes the same launch.
        unsafe { f.launch_with(cfg, stream, args) }
    }

    pub(crate) fn scratch_sym(&self, offset: u64) -> SymPtr<u8> {
        SymPtr::new(
            self.scratch.device_ptr() as *const DeviceWindow,
            offset as usize,
        )
    }

    pub(crate) fn fused_off(&self) -> u64 {
        self.fused_off
    }

    pub(crate) fn ll_cap(&self) -> u64 {
        self.ll_cap
    }

    pub(crate) fn dev_raw(&self) -> symcomm_device::comm::DevComm {
        self.dev.raw()
    }

    pub(crate) fn status_ptr(&self) -> *mut u32 {
        self.status.device_ptr() as *mut u32
    }
}

/// Bytes of `count` elements of `t`, refusing overflow.
pub(crate) fn bytes_of(count: usize, t: DataType) -> Result<usize> {
    count.checked_mul(t.size()).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{count} elements of {t} overflow the address space"
        ))
    })
}

/// True when `a_len` bytes of `a` and `b_len` bytes of `b` share a byte (this rank's copies).
pub(crate) fn overlaps(a: &Buf<'_>, a_len: usize, b: &Buf<'_>, b_len: usize) -> bool {
    let (a0, b0) = (a.device_ptr(), b.device_ptr());
    a0 < b0 + b_len as u64 && b0 < a0 + a_len as u64
}

fn no_partial_overlap(
    what: &str,
    a: &Buf<'_>,
    a_len: usize,
    b: &Buf<'_>,
    b_len: usize,
) -> Result<()> {
    if a.same_as(b) || !overlaps(a, a_len, b, b_len) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: source and destination overlap without being the same buffer"
        )))
    }
}
