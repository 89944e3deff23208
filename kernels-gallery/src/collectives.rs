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
use symcomm::AsStream;
use symcomm::cuda::memory::HostMapped;
use symcomm::launch::{KernelArgs, LaunchConfig, Module};
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory, Window};
use symcomm_device::ptr::SymPtr;
use symcomm_gallery_kernels::plan;
use symcomm_gallery_kernels::rmsnorm_split::FUSED_SCRATCH_BYTES;

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

/// The grid of a gallery launch: `blocks` blocks of at most `threads` threads (fewer under
/// emulation: [`Collectives::block_threads`]) in clusters of `cluster` blocks (1: none; a
/// divisor of `blocks`, at most `symcomm::launch::MAX_CLUSTER`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub kind: Kind,
    pub blocks: u32,
    pub threads: u32,
    pub cluster: u32,
}

impl Grid {
    /// `(blocks, threads)` of a kernel of `kind`, without clusters.
    pub(crate) fn new(kind: Kind, (blocks, threads): (u32, u32)) -> Grid {
        Grid {
            kind,
            blocks,
            threads,
            cluster: 1,
        }
    }

    /// The same grid in clusters of `cluster` blocks.
    pub(crate) fn clustered(self, cluster: u32) -> Grid {
        Grid { cluster, ..self }
    }
}

/// How a kernel that moves packs from a source to a destination is launched: what its
/// protocol passes after `(comm, src, dst, bytes` and before the common `timeout, status)`
/// ([`launch_args!`]), and its grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// Between an entry and an exit barrier: nothing more; grid [`Tuning::shape`].
    Barriered,
    /// On LL lines, no barrier: `scratch, cap`; grid [`Tuning::ll_shape`].
    Ll,
    /// The pipelined push (`pipeline.rs` in the kernels): `push, slots, chunk`; full blocks,
    /// as many as [`Tuning::push_shape`] says.
    Pipelined,
}

/// The operands of a kernel: `bytes` (an all-reduce's or broadcast's buffer, a block of the
/// others) from `src` to `dst`, which the kernels move in the 16-byte packs of the
/// destination (any size at any element offset).
#[derive(Clone, Copy)]
struct Packs<'a> {
    src: Buf<'a>,
    dst: Buf<'a>,
    bytes: u64,
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
    /// Threads per block on this backend (see [`crate::sizing::threads`]).
    threads: u32,
    /// In checked mode (`SYMCOMM_CHECK=1`), a handle of the communicator's bootstrap through
    /// which every call agrees on its arguments ([`Collectives::check_call`]).
    check: Option<symcomm::Bootstrap>,
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
        if comm.node_count() > 1 {
            return Err(Error::Unsupported {
                what: format!(
                    "gallery collectives over {} ranks on {} nodes: the gallery runs within \
                     one node, and its multi-node collectives are not written yet",
                    comm.size(),
                    comm.node_count()
                ),
                hint: "create the collectives on one node's ranks, e.g. the communicator of \
                       `comm.split(Some(node), rank)`"
                    .into(),
            });
        }
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
        // The module is loaded before the collective calls below: loading a module waits for
        // the kernels running in the context, and with ranks as threads on one GPU a rank that
        // returned first may already be running a collective that waits for this rank
        // (measured with `hello_window`: the late rank stayed in `Module::load` until the
        // other's barrier timed out). Everything that can fail on this rank alone comes before
        // the first collective step.
        let n = comm.lsa_size();
        let local = Local::new(comm, &tuning, n);
        // Every rank learns whether every other one got this far and runs the same knobs
        // before the first collective step (`agreement`).
        let mut knobs = tuning.agreed_knobs();
        if let Ok(local) = &local {
            knobs.push(("block threads", local.threads.to_string()));
        }
        let agreed = crate::agreement::check(comm, local.as_ref().err(), &knobs);
        let local = local?;
        agreed?;
        let scratch = comm.register_window(&local.scratch_mem)?;
        let push = match local.push_mem {
            Some(mem) => Some((comm.register_window(&mem)?, mem)),
            None => None,
        };
        let (dev, tuning) = dev_comm(comm, tuning)?;
        Ok(Collectives {
            module: local.module,
            scratch,
            _scratch_mem: local.scratch_mem,
            push,
            dev,
            status: local.status,
            tuning,
            rank: comm.rank(),
            n,
            ll_cap: local.ll_cap,
            fused_off: local.fused_off,
            threads: local.threads,
            check: comm.checked().then(|| comm.bootstrap().clone()),
        })
    }

    /// In checked mode (`SYMCOMM_CHECK=1`, agreed by every rank when the communicator was
    /// created): collective, every rank agrees on this call before anything else happens
    /// (one bootstrap all-gather), so a rank that passes another collective, count, type,
    /// operator, root, algorithm or buffer offset gives every rank the same
    /// [`Error::Mismatch`] instead of a wrong result or a kernel timeout. Off: returns at once.
    ///
    /// What it cannot check: values that live in device memory (buffer contents; no gallery
    /// call takes a count from device memory); that every rank's buffers are in corresponding
    /// windows (only the offsets are compared). Under CUDA-graph capture it checks at capture
    /// time: the host call runs once then, and every replay repeats that checked launch.
    pub(crate) fn check_call(&self, fields: &[(&str, String)]) -> Result<()> {
        match &self.check {
            Some(b) => b.agree("gallery call (SYMCOMM_CHECK)", "argument", None, fields),
            None => Ok(()),
        }
    }

    /// [`Collectives::new`] with [`Tuning::from_env_for`] the communicator's rank count (under
    /// emulation: [`crate::sizing::tuning_from_env`]).
    pub fn from_env(comm: &Communicator) -> Result<Collectives> {
        Collectives::new(comm, crate::sizing::tuning_from_env(comm.lsa_size())?)
    }

    /// The tuning in use.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The most threads per block of a launch: [`plan::THREADS`] on GPUs, what
    /// [`crate::sizing::threads`] says under emulation. Launches take fewer where the
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
    /// (`Ok` if none). Read it after synchronising the stream. A wait that was aborted because
    /// the communicator failed reports that failure (e.g. the rank that died).
    ///
    /// [`clear_status`]: Collectives::clear_status
    pub fn check_status(&self) -> Result<()> {
        let code = self.status.get();
        if code == 0 {
            return Ok(());
        }
        if code == 2
            && let Some(cause) = self.dev.failure()
        {
            return Err(cause);
        }
        Err(Error::Timeout {
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
        })
    }

    /// Resets the status word.
    pub fn clear_status(&self) {
        self.status.set(0);
    }

    /// Collective: `dst` = reduction with `op` of `count` elements of type `t` at every
    /// rank's `src`. `dst` may be `src` (in place). Returns the algorithm used (chosen by
    /// size, see [`Tuning`]). Every rank gets the same bits: each element is reduced in
    /// the same order whichever rank computes it (tested across ranks by `tests/shapes.rs`).
    pub fn all_reduce(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        op: RedOp,
        stream: impl AsStream,
    ) -> Result<Algo> {
        let stream = stream.raw_stream();
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
        stream: impl AsStream,
    ) -> Result<Algo> {
        let stream = stream.raw_stream();
        self.check_call(&[
            ("collective", "all_reduce".into()),
            ("count", count.to_string()),
            ("type", t.to_string()),
            ("op", op.to_string()),
            ("algorithm", format!("{algo:?}")),
            ("source offset", src.offset().to_string()),
            ("destination offset", dst.offset().to_string()),
        ])?;
        let bytes = bytes_of(count, t)?;
        let aligned = is_aligned(&src, &dst, bytes);
        if check_elements("all_reduce", &src, &dst, t, count)? {
            return Ok(self.all_reduce_algo(algo, 0, t, op, src.same_as(&dst), true));
        }
        check_operands("all_reduce", (&src, bytes), (&dst, bytes), false)?;
        let algo = self.all_reduce_algo(algo, bytes, t, op, src.same_as(&dst), aligned);
        // The packs of the destination, which the kernels work in.
        let packs = span_packs(&dst, 0, bytes);
        let slice = plan::slice_len(packs, self.n as u64);
        // The kernel, and the packs per thread pass of its grid.
        let (kernel, protocol, work) = match algo {
            Algo::OneShot => ("all_reduce_one_shot", Protocol::Ll, packs),
            Algo::TwoShotLl => ("all_reduce_two_shot_ll", Protocol::Ll, slice),
            Algo::TwoShot => ("all_reduce_two_shot", Protocol::Barriered, slice),
            Algo::TwoShotPush => ("all_reduce_two_shot_push", Protocol::Pipelined, slice),
            // Only with the multicast range (`Tuning::multimem`, which `new` asked for).
            Algo::MultimemOneShot => ("all_reduce_multimem_one_shot", Protocol::Barriered, packs),
            Algo::MultimemTwoShot => ("all_reduce_multimem_two_shot", Protocol::Barriered, slice),
        };
        let (over, limit) = match algo {
            Algo::TwoShotLl => (2 * slice > self.ll_cap, "two-shot LL"),
            Algo::OneShot => (packs > self.ll_cap, "one-shot LL"),
            _ => (false, ""),
        };
        if over {
            return Err(Error::InvalidArgument(format!(
                "all_reduce: {bytes} bytes exceed the {limit} scratch"
            )));
        }
        let kernel = reducing_kernel(kernel, t, op);
        let bytes = bytes as u64;
        self.run(protocol, &kernel, Packs { src, dst, bytes }, work, stream)?;
        Ok(algo)
    }

    /// The algorithm [`all_reduce_with`](Self::all_reduce_with) runs for `forced`, `bytes`, `t`
    /// and `op`, in place or not, with both buffers and the size 16-byte `aligned` or not:
    /// [`Tuning::all_reduce_algo_with`], after the multimem algorithms' own conditions (a
    /// type and operator the switch reduces, 16-byte aligned buffers and size; the one-shot
    /// only out of place, else the two-shot).
    pub fn all_reduce_algo(
        &self,
        forced: Option<Algo>,
        bytes: usize,
        t: DataType,
        op: RedOp,
        in_place: bool,
        aligned: bool,
    ) -> Algo {
        let forced = match forced {
            Some(a) if a.is_multimem() && (!multimem_reduces(t, op) || !aligned) => None,
            Some(Algo::MultimemOneShot) if in_place => Some(Algo::MultimemTwoShot),
            a => a,
        };
        self.tuning.all_reduce_algo_with(forced, bytes)
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
        stream: impl AsStream,
    ) -> Result<()> {
        let stream = stream.raw_stream();
        self.check_call(&[
            ("collective", "reduce_scatter".into()),
            ("count", count.to_string()),
            ("type", t.to_string()),
            ("op", op.to_string()),
            ("source offset", src.offset().to_string()),
            ("destination offset", dst.offset().to_string()),
        ])?;
        let (bytes, total) = self.blocks("reduce_scatter", count, t)?;
        if check_elements("reduce_scatter", &src, &dst, t, count)? {
            return Ok(());
        }
        let own = dst.same_as(&src.block(bytes, self.rank));
        check_operands("reduce_scatter", (&src, total), (&dst, bytes), own)?;
        // In place, each rank's output is its own block of `src`: blocks that are not whole
        // packs then sit at a different position in their packs on every rank, and the LL and
        // pipelined kernels, whose ranks exchange packs in the receiver's layout, would
        // disagree on it. The barrier kernel reads its peers' blocks itself; its grid comes
        // from the most packs any rank's block touches, the same on every rank.
        let odd_in_place = own && !is_aligned(&src, &dst, bytes);
        let packs = if own {
            plan::block_packs(src.offset() as u64, bytes as u64, self.n as u64)
        } else {
            span_packs(&dst, 0, bytes)
        };
        let (kernel, protocol) = if odd_in_place {
            ("reduce_scatter", Protocol::Barriered)
        } else if self.tuning.ll_for(total, packs, self.n) {
            ("reduce_scatter_ll", Protocol::Ll)
        } else if self.tuning.reduce_scatter_push(total) {
            ("reduce_scatter_push", Protocol::Pipelined)
        } else {
            ("reduce_scatter", Protocol::Barriered)
        };
        let kernel = reducing_kernel(kernel, t, op);
        let bytes = bytes as u64;
        self.run(protocol, &kernel, Packs { src, dst, bytes }, packs, stream)
    }

    /// Collective: block `rank` of every rank's `dst` (`size × count` elements) receives this
    /// rank's `src` (`count` elements); `src` may be that block of `dst` (in place).
    pub fn all_gather(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        stream: impl AsStream,
    ) -> Result<()> {
        let stream = stream.raw_stream();
        self.check_call(&[
            ("collective", "all_gather".into()),
            ("count", count.to_string()),
            ("type", t.to_string()),
            ("source offset", src.offset().to_string()),
            ("destination offset", dst.offset().to_string()),
        ])?;
        let (bytes, total) = self.blocks("all_gather", count, t)?;
        if check_elements("all_gather", &src, &dst, t, count)? {
            return Ok(());
        }
        let own = src.same_as(&dst.block(bytes, self.rank));
        check_operands("all_gather", (&src, bytes), (&dst, total), own)?;
        let kernels = ("all_gather_ll", "all_gather", false);
        self.move_blocks(kernels, src, dst, bytes, total, stream)
    }

    /// Collective: block `p` (`count` elements) of this rank's `src` lands in block `rank` of
    /// peer `p`'s `dst`. `src` and `dst` must not overlap.
    pub fn all_to_all(
        &self,
        src: Buf<'_>,
        dst: Buf<'_>,
        count: usize,
        t: DataType,
        stream: impl AsStream,
    ) -> Result<()> {
        let stream = stream.raw_stream();
        self.check_call(&[
            ("collective", "all_to_all".into()),
            ("count", count.to_string()),
            ("type", t.to_string()),
            ("source offset", src.offset().to_string()),
            ("destination offset", dst.offset().to_string()),
        ])?;
        let (bytes, total) = self.blocks("all_to_all", count, t)?;
        if check_elements("all_to_all", &src, &dst, t, count)? {
            return Ok(());
        }
        src.check("all_to_all", "source", total)?;
        dst.check("all_to_all", "destination", total)?;
        if overlaps(&src, total, &dst, total) {
            return Err(Error::InvalidArgument(
                "all_to_all: source and destination overlap (in-place is not supported)".into(),
            ));
        }
        let kernels = ("all_to_all_ll", "all_to_all", true);
        self.move_blocks(kernels, src, dst, bytes, total, stream)
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
        stream: impl AsStream,
    ) -> Result<()> {
        let stream = stream.raw_stream();
        self.check_call(&[
            ("collective", "broadcast".into()),
            ("count", count.to_string()),
            ("type", t.to_string()),
            ("root", root.to_string()),
            ("source offset", src.offset().to_string()),
            ("destination offset", dst.offset().to_string()),
        ])?;
        let bytes = bytes_of(count, t)?;
        if root >= self.n {
            return Err(Error::InvalidArgument(format!(
                "broadcast: root {root} is not a rank of {}",
                self.n
            )));
        }
        if check_elements("broadcast", &src, &dst, t, count)? {
            return Ok(());
        }
        check_operands("broadcast", (&src, bytes), (&dst, bytes), false)?;
        let packs = span_packs(&dst, 0, bytes);
        let aligned = is_aligned(&src, &dst, bytes);
        let (src, dst, root) = (src.sym(0), dst.sym(0), root as i32);
        let bytes = bytes as u64;
        // The protocols of `run`, with the root after their own arguments.
        if self.tuning.broadcast_ll(bytes as usize, packs, self.n) {
            let args = launch_args!(self; src, dst, bytes, self.scratch_sym(0), self.ll_cap, root);
            let grid = Grid::new(Kind::Ll, self.tuning.ll_shape(packs));
            return self.launch(&shaped("broadcast_ll", aligned), grid, stream, args);
        }
        let args = launch_args!(self; src, dst, bytes, root);
        let slice = plan::bcast_slice_len(packs, self.n as u64);
        let grid = Grid::new(Kind::Other, self.tuning.shape(slice));
        self.launch(&shaped("broadcast", aligned), grid, stream, args)
    }

    /// `(bytes, total)` of collective `what` on blocks of `count` elements of `t`, one per rank:
    /// the bytes of a block, and of a buffer holding every rank's block, refused where they
    /// overflow (before any range check could pass on a wrapped product).
    fn blocks(&self, what: &str, count: usize, t: DataType) -> Result<(usize, usize)> {
        let bytes = bytes_of(count, t)?;
        let total = bytes.checked_mul(self.n).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what}: {bytes} bytes per rank × {} ranks overflows",
                self.n
            ))
        })?;
        Ok((bytes, total))
    }

    /// Runs a data-movement collective with `bytes` per peer block (`total` bytes counted as
    /// nccl-tests counts size): its LL kernel (the first of `kernels`) when small enough, else
    /// its barrier-bracketed one (the second). The third, `own_apart`: the any-shape LL kernel
    /// copies this rank's own block on a second half of its grid
    /// (`ll_collectives::all_to_all`), so it gets threads for twice the packs.
    fn move_blocks(
        &self,
        (ll, barriered, own_apart): (&str, &str, bool),
        src: Buf<'_>,
        dst: Buf<'_>,
        bytes: usize,
        total: usize,
        stream: CUstream,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // Every rank's block of `dst` in its packs: the most any of them touches.
        let packs = plan::block_packs(dst.offset() as u64, bytes as u64, self.n as u64);
        let io = Packs {
            src,
            dst,
            bytes: bytes as u64,
        };
        if self.tuning.ll_for(total, packs, self.n) {
            let apart = own_apart && !is_aligned(&io.src, &io.dst, bytes);
            let work = if apart { 2 * packs } else { packs };
            return self.run(Protocol::Ll, ll, io, work, stream);
        }
        self.run(Protocol::Barriered, barriered, io, packs, stream)
    }

    /// Launches `kernel` of `protocol` over `io`, its grid covering `work` packs per thread
    /// pass (pipelined: the largest slice).
    fn run(
        &self,
        protocol: Protocol,
        kernel: &str,
        io: Packs<'_>,
        work: u64,
        stream: CUstream,
    ) -> Result<()> {
        let aligned = is_aligned(&io.src, &io.dst, io.bytes as usize);
        let kernel = &match protocol {
            Protocol::Barriered => shaped_for(kernel, aligned, self.n),
            _ => shaped(kernel, aligned),
        };
        let (src, dst, bytes) = (io.src.sym(0), io.dst.sym(0), io.bytes);
        match protocol {
            Protocol::Barriered => {
                let grid = Grid::new(Kind::Other, self.tuning.shape(work));
                self.launch(kernel, grid, stream, launch_args!(self; src, dst, bytes))
            }
            Protocol::Ll => {
                let grid = Grid::new(Kind::Ll, self.tuning.ll_shape(work));
                let args = launch_args!(self; src, dst, bytes, self.scratch_sym(0), self.ll_cap);
                self.launch(kernel, grid, stream, args)
            }
            Protocol::Pipelined => {
                let (grid, push, chunk) = self.pipeline(kernel, work)?;
                let slots = u64::from(self.tuning.push_slots);
                let args = launch_args!(self; src, dst, bytes, push, slots, chunk);
                self.launch(kernel, grid, stream, args)
            }
        }
    }

    /// The grid, the push window and the packs per slot of a pipelined push launch of
    /// `kernel` whose largest slice is `slice` packs.
    fn pipeline(&self, kernel: &str, slice: u64) -> Result<(Grid, SymPtr<u8>, u64)> {
        let Some((win, _)) = &self.push else {
            return Err(Error::InvalidArgument(format!(
                "{kernel}: the pipelined push kernels are off (SYMCOMM_PUSH_SCRATCH=0)"
            )));
        };
        let threads = plan::THREADS.min(self.threads);
        let (blocks, chunk) = self.tuning.push_shape(self.n, slice, threads);
        if chunk == 0 {
            return Err(Error::InvalidArgument(format!(
                "{kernel}: SYMCOMM_PUSH_SCRATCH ({} bytes) holds no slot for {blocks} blocks × {} \
                 ranks × {} slots",
                self.tuning.push_scratch, self.n, self.tuning.push_slots
            )));
        }
        let grid = Grid::new(Kind::Other, (blocks, plan::THREADS));
        Ok((grid, window_sym(win, 0), chunk))
    }

    /// Launches gallery kernel `name` on `grid`.
    pub(crate) fn launch<A: KernelArgs>(
        &self,
        name: &str,
        grid: Grid,
        stream: CUstream,
        args: A,
    ) -> Result<()> {
        // A communicator that failed (a rank died or gave up) stays failed: report that
        // instead of launching a kernel that could only abort.
        if let Some(e) = self.dev.failure() {
            return Err(e);
        }
        // The gallery picks its kernels by name at run time: the argument tuple is checked
        // against the kernel's own types (emulator) or parameter sizes (GPU) here.
        let f = self.module.function(name)?.typed::<A>()?;
        symcomm::fault::pause_point("collective", self.rank);
        // The kernels stride over `block_dim()`: smaller blocks under emulation.
        let threads = grid.threads.min(self.threads);
        // Every gallery kernel starts with `common::enter`, which waits for the kernel ahead
        // of it: a dependent launch keeps the stream order.
        let mut cfg = LaunchConfig::linear(grid.blocks, threads).with_cluster(grid.cluster);
        if self.tuning.dependent_launch.applies(grid.kind == Kind::Ll) {
            cfg = cfg.with_dependent_launch();
        }
        // SAFETY: every gallery entry point's arguments are built by the methods of this
        // module and `rmsnorm` from checked buffers (inside their windows; the whole-pack
        // entry points only for 16-byte multiples, `shaped`),
        // the communicator has `max_blocks ≥ blocks` barriers, grids have at most
        // `plan::LL_COUNTERS` blocks (the launch counters of the LL and fused kernels;
        // `Tuning::validate`), and every rank computes the same launch.
        unsafe { f.launch(cfg, stream, args) }
    }

    pub(crate) fn scratch_sym(&self, offset: u64) -> SymPtr<u8> {
        window_sym(&self.scratch, offset)
    }

    /// The scratch window at byte `offset`.
    pub(crate) fn scratch_buf(&self, offset: usize) -> Buf<'_> {
        Buf::new(&self.scratch, offset)
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
        self.status.as_mut_ptr()
    }
}

/// What [`Collectives::new`] sets up on this rank alone, before the first collective step.
struct Local {
    module: Module,
    status: HostMapped<u32>,
    threads: u32,
    scratch_mem: SymmetricMemory,
    push_mem: Option<SymmetricMemory>,
    ll_cap: u64,
    fused_off: u64,
}

impl Local {
    /// Checks `tuning`, loads the module and allocates the scratch memory of `n` ranks
    /// (sizes bounded once the tuning is valid). Every gallery kernel runs blocks of at most
    /// `plan::THREADS` threads; the pipelined push kernels would take more registers than
    /// such a block has if left unbounded.
    fn new(comm: &Communicator, tuning: &Tuning, n: usize) -> Result<Local> {
        tuning.validate()?;
        let ll_cap = tuning.ll_cap_packs(n);
        let fused_off = plan::ll_region_bytes(n as u32, ll_cap).next_multiple_of(4096);
        let module = Module::load_for_block(kernels::PTX, plan::THREADS.max(plan::LL_THREADS))?;
        let status = HostMapped::new(0u32)?;
        let threads = crate::sizing::threads()?;
        let scratch_mem = SymmetricMemory::alloc(comm, (fused_off + FUSED_SCRATCH_BYTES) as usize)?;
        // Zeroed before registering: registration ends with a team barrier, so no peer can
        // write an LL line before every header and line is zero (= never valid). `fill_bytes`
        // returns once the memset is done. (No context-wide synchronize here: it would also
        // wait for other streams' kernels, e.g. another rank's collective when several ranks
        // share this device and context.)
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
        Ok(Local {
            module,
            status,
            threads,
            scratch_mem,
            push_mem,
            ll_cap,
            fused_off,
        })
    }
}

/// The device communicator of [`Collectives::new`]: `tuning.max_blocks` barriers and, where
/// `tuning.multimem` asks for it, the multicast range. Returns the tuning in effect.
fn dev_comm(comm: &Communicator, tuning: Tuning) -> Result<(DevComm, Tuning)> {
    let req = Requirements::new().lsa_barriers(tuning.max_blocks);
    match DevComm::create(comm, req.lsa_multimem(tuning.multimem)) {
        // Refusals of multicast come back alike on every rank (the runtime votes), so every
        // rank retries without it: no NVLink SHARP here, and forced multimem algorithms fall
        // back to the choice by size, as PyTorch and vLLM fall back to unicast.
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
            Ok((dev, tuning))
        }
        r => Ok((r?, tuning)),
    }
}

/// The kernel argument for byte `offset` of `window`.
fn window_sym(window: &Window, offset: u64) -> SymPtr<u8> {
    SymPtr::new(window.handle(), offset as usize)
}

/// The packs of `bytes` bytes at byte `extra` of `buf`, where the kernels work ([`plan::span_packs`]).
fn span_packs(buf: &Buf<'_>, extra: usize, bytes: usize) -> u64 {
    plan::span_packs(((buf.offset() + extra) as u64) % plan::PACK, bytes as u64)
}

/// The entry point of gallery kernel `kernel` for a call that is 16-byte `aligned` (its
/// buffers' offsets and its size, per block) or not: `kernel` itself, which moves whole packs
/// only (the instructions of the gallery before it took any shape), else `{kernel}_any`.
fn shaped(kernel: &str, aligned: bool) -> String {
    if aligned {
        kernel.to_owned()
    } else {
        format!("{kernel}_any")
    }
}

/// The barrier kernels whose any-shape body for a team of two ranks is a kernel of its own,
/// `{kernel}_any_2` (`collectives::all_gather_two` in the kernels).
const TWO_RANK_ANY: &[&str] = &["all_gather"];

/// [`shaped`] for a team of `n` ranks: `{kernel}_any_2` for an any-shape call of two ranks
/// where the kernel has one ([`TWO_RANK_ANY`]).
fn shaped_for(kernel: &str, aligned: bool, n: usize) -> String {
    if !aligned && n == 2 && TWO_RANK_ANY.contains(&kernel) {
        format!("{kernel}_any_2")
    } else {
        shaped(kernel, aligned)
    }
}

/// True when both buffers start and `bytes` ends on a 16-byte boundary (what the whole-pack
/// entry points and the multimem kernels need).
fn is_aligned(src: &Buf<'_>, dst: &Buf<'_>, bytes: usize) -> bool {
    let pack = plan::PACK as usize;
    src.offset().is_multiple_of(pack)
        && dst.offset().is_multiple_of(pack)
        && bytes.is_multiple_of(pack)
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

/// Checks the operands of collective `what`: `src` holds `src_len` bytes and `dst` `dst_len`
/// ([`Buf::check`]), and they are apart, the same buffer, or (`own_block`) one is this rank's
/// block of the other (the in-place all-gather and reduce-scatter).
/// What every call needs whatever its size: each operand's byte offset is a whole number of
/// elements of `t` (an f32 at byte 6 is refused, naming the operand, the offset and the
/// type). `Ok(true)` when the call moves nothing (`count` 0): then any such offset up to the
/// end of its window is accepted, as NCCL accepts an empty call, and nothing runs.
fn check_elements(
    what: &str,
    src: &Buf<'_>,
    dst: &Buf<'_>,
    t: DataType,
    count: usize,
) -> Result<bool> {
    for (buf, role) in [(src, "source"), (dst, "destination")] {
        let off = buf.offset();
        if !off.is_multiple_of(t.size()) {
            return Err(Error::InvalidArgument(format!(
                "{what} {role}: byte offset {off} is not a whole number of {t} elements ({} \
                 bytes each)",
                t.size()
            )));
        }
        if count == 0 && off > buf.window().size() {
            return Err(Error::InvalidArgument(format!(
                "{what} {role}: offset {off} is past the end of its {}-byte window",
                buf.window().size()
            )));
        }
    }
    Ok(count == 0)
}

fn check_operands(
    what: &str,
    (src, src_len): (&Buf<'_>, usize),
    (dst, dst_len): (&Buf<'_>, usize),
    own_block: bool,
) -> Result<()> {
    src.check(what, "source", src_len)?;
    dst.check(what, "destination", dst_len)?;
    if own_block || src.same_as(dst) || !overlaps(src, src_len, dst, dst_len) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: source and destination overlap without being the same buffer"
        )))
    }
}
