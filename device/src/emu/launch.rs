//! An emulated launch: its configuration ([`Launch`], and the limits it is checked against)
//! and running it: worker threads per resident block, failure propagation, the watchdog.

use core::cell::{Cell, RefCell};
use std::any::Any;
use std::boxed::Box;
use std::format;
use std::string::{String, ToString};
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::cluster;
use super::ctx::{self, Cancelled, ThreadCtx, Trapped};
use super::error::EmuError;
use super::limits;
use super::slot::Slot;
use super::state::{ClusterGroup, LaunchShared};
use crate::geometry::{Dim3, WARP_SIZE};

/// Threads per launch the default number of resident blocks aims for.
pub const DEFAULT_RESIDENT_THREADS: u32 = 4096;

/// Default stack size of an emulated thread.
pub const DEFAULT_STACK_SIZE: usize = 256 * 1024;

/// Default watchdog of a launch.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest dynamic shared memory a launch may ask for (227 KiB, sm_90).
pub const MAX_DYNAMIC_SHARED_BYTES: u32 = 227 * 1024;

/// The most blocks per cluster a launch may ask for ([`Launch::cluster`]; 16 on sm_90 with the
/// non-portable cluster size attribute, [`MAX_PORTABLE_SIZE`](crate::cluster::MAX_PORTABLE_SIZE)
/// without).
pub const MAX_CLUSTER_BLOCKS: u32 = 16;

/// An emulated launch configuration (builder); [`run`](Launch::run) it with a kernel call.
#[derive(Debug, Clone)]
pub struct Launch {
    grid: Dim3,
    block: Dim3,
    dynamic_shared_bytes: u32,
    resident_blocks: Option<u32>,
    cluster: u32,
    stack_size: usize,
    timeout: Option<Duration>,
}

impl Launch {
    /// A launch of `grid` blocks of `block` threads (`u32`, `(x, y)` or `(x, y, z)`), no
    /// dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Launch {
        Launch {
            grid: grid.into(),
            block: block.into(),
            dynamic_shared_bytes: 0,
            resident_blocks: None,
            cluster: 1,
            stack_size: DEFAULT_STACK_SIZE,
            timeout: Some(DEFAULT_TIMEOUT),
        }
    }

    /// Bytes of dynamic shared memory per block (`sharedMemBytes`).
    pub fn shared(mut self, bytes: u32) -> Launch {
        self.dynamic_shared_bytes = bytes;
        self
    }

    /// How many blocks run concurrently (at least 1, at most the grid; with
    /// [clusters](Launch::cluster), rounded down to whole clusters, at least one).
    pub fn resident_blocks(mut self, n: u32) -> Launch {
        self.resident_blocks = Some(n);
        self
    }

    /// Thread block clusters of `blocks` blocks along `x` (default 1: no clusters), as
    /// `cudaLaunchAttributeClusterDimension` `(blocks, 1, 1)`: block `b` (linear index) is rank
    /// `b % blocks` of cluster `b / blocks` ([`crate::cluster`]). The grid's `x` extent must be
    /// a multiple of `blocks`, and `blocks` at most [`MAX_CLUSTER_BLOCKS`]. At least one whole
    /// cluster is resident ([`resident_blocks`](Launch::resident_blocks)): `blocks` × threads
    /// per block OS threads.
    pub fn cluster(mut self, blocks: u32) -> Launch {
        self.cluster = blocks;
        self
    }

    /// Stack size of each emulated thread.
    pub fn stack_size(mut self, bytes: usize) -> Launch {
        self.stack_size = bytes;
        self
    }

    /// Watchdog: the launch fails with [`EmuError::Timeout`] after `limit` (`None`: never).
    pub fn timeout(mut self, limit: Option<Duration>) -> Launch {
        self.timeout = limit;
        self
    }

    /// Runs `kernel` (typically a closure calling a `#[kernel]` function with its arguments)
    /// once per thread of the grid and waits for all of them.
    ///
    /// # Errors
    /// See [`EmuError`]; the first failure of the launch is reported.
    pub fn run<F: Fn() + Sync>(&self, kernel: F) -> Result<(), EmuError> {
        run(self, &kernel)
    }

    /// [`run`](Launch::run) for a closure that is not `Sync`, typically because it captures
    /// raw pointers (kernel arguments usually are).
    ///
    /// # Safety
    /// `kernel` is called from many threads at once: sharing what it captures between threads
    /// must be sound (raw pointers to memory the kernel's own protocol synchronises are; an
    /// `Rc` or a `Cell` is not).
    ///
    /// # Errors
    /// As [`run`](Launch::run).
    pub unsafe fn run_unsync<F: Fn()>(&self, kernel: F) -> Result<(), EmuError> {
        struct AssertSync<F>(F);
        // SAFETY: the caller guarantees that sharing the closure between threads is sound.
        unsafe impl<F> Sync for AssertSync<F> {}
        impl<F: Fn()> AssertSync<F> {
            fn call(&self) {
                (self.0)()
            }
        }
        let k = AssertSync(kernel);
        let f = || k.call();
        run(self, &f)
    }
}

/// Counts a worker as finished even if it unwinds through emulator code.
struct DoneGuard<'a>(&'a LaunchShared);

impl Drop for DoneGuard<'_> {
    fn drop(&mut self) {
        self.0.worker_done();
    }
}

/// `i`-th element of a `dims`-shaped box in x-major order.
fn delinearize(i: u32, dims: Dim3) -> Dim3 {
    Dim3 {
        x: i % dims.x,
        y: (i / dims.x) % dims.y,
        z: i / (dims.x * dims.y),
    }
}

fn count(d: Dim3) -> u64 {
    u64::from(d.x) * u64::from(d.y) * u64::from(d.z)
}

fn fmt_dim(d: Dim3) -> String {
    format!("({}, {}, {})", d.x, d.y, d.z)
}

fn check_config(l: &Launch) -> Result<(u32, u32), EmuError> {
    let (g, b) = (l.grid, l.block);
    let bad = |what: String| Err(EmuError::InvalidLaunch(what));
    if count(g) == 0 || count(b) == 0 {
        return bad(format!("empty grid {} or block {}", fmt_dim(g), fmt_dim(b)));
    }
    if b.x > 1024 || b.y > 1024 || b.z > 64 || count(b) > 1024 {
        return bad(format!(
            "block {} exceeds the limits (x, y ≤ 1024, z ≤ 64, 1024 threads)",
            fmt_dim(b)
        ));
    }
    if g.x > i32::MAX as u32 || g.y > 65535 || g.z > 65535 || count(g) > u64::from(u32::MAX) {
        return bad(format!("grid {} exceeds the limits", fmt_dim(g)));
    }
    let k = l.cluster;
    if k == 0 || k > MAX_CLUSTER_BLOCKS {
        return bad(format!(
            "cluster of {k} blocks (1 to {}; more than {} is not portable)",
            MAX_CLUSTER_BLOCKS,
            crate::geometry::MAX_PORTABLE_SIZE
        ));
    }
    if !g.x.is_multiple_of(k) {
        return bad(format!(
            "grid {} with clusters of {k} blocks: the x extent must be a multiple of the cluster size",
            fmt_dim(g)
        ));
    }
    if l.dynamic_shared_bytes > MAX_DYNAMIC_SHARED_BYTES {
        return bad(format!(
            "{} bytes of dynamic shared memory (at most {})",
            l.dynamic_shared_bytes, MAX_DYNAMIC_SHARED_BYTES
        ));
    }
    Ok((count(g) as u32, count(b) as u32))
}

/// The error an unwinding kernel thread reports (`None`: it was cancelled).
fn report(payload: Box<dyn Any + Send>, block: Dim3, thread: Dim3) -> Option<EmuError> {
    if payload.is::<Cancelled>() {
        return None;
    }
    if payload.is::<Trapped>() {
        return Some(EmuError::Trap { block, thread });
    }
    let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    };
    Some(EmuError::Panic {
        block,
        thread,
        message,
    })
}

/// Runs `kernel` over the launch's grid (see [`Launch::run`]).
pub(crate) fn run(l: &Launch, kernel: &(dyn Fn() + Sync)) -> Result<(), EmuError> {
    let (n_blocks, n_threads) = check_config(l)?;
    if ctx::active() {
        return Err(EmuError::InvalidLaunch(
            "a launch from inside an emulated kernel (no dynamic parallelism)".to_string(),
        ));
    }
    let resident = match l.resident_blocks {
        Some(r) => r.clamp(1, n_blocks),
        None => (DEFAULT_RESIDENT_THREADS / n_threads).clamp(1, n_blocks),
    };
    // Whole clusters: the blocks of a cluster run in the `size` consecutive slots of one group,
    // each as the same round of its slot (`n_blocks` is a multiple of the cluster size, so
    // this stays within the grid).
    let size = l.cluster;
    let resident = (resident / size * size).max(size);
    // Before any allocation or thread: std aborts the process when a thread cannot map its
    // signal stack, so a grid beyond the process's limits must not start at all.
    let demand = limits::Demand {
        blocks: n_blocks,
        block_threads: n_threads,
        resident,
    };
    let reservation = limits::LEDGER
        .reserve(&demand, limits::read_usage)
        .map_err(EmuError::HostLimit)?;
    let reservation = &reservation;
    let mut slots = Vec::with_capacity(resident as usize);
    for s in 0..resident {
        let slot = Slot::new(n_threads, l.dynamic_shared_bytes, delinearize(s, l.grid))
            .ok_or_else(|| {
                EmuError::Spawn(format!(
                    "cannot allocate {} bytes of dynamic shared memory",
                    l.dynamic_shared_bytes
                ))
            })?;
        slots.push(slot);
    }
    let shared = LaunchShared {
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        slots,
        cluster_size: size,
        cluster_threads: size * n_threads,
        clusters: (0..resident / size).map(|_| ClusterGroup::new()).collect(),
        finished: Mutex::new(0),
        finished_cv: Condvar::new(),
    };
    let deadline = l.timeout.map(|t| (Instant::now() + t, t));
    let shared = &shared;
    thread::scope(|scope| {
        let mut spawned = 0usize;
        'spawn: for s in 0..resident {
            for t in 0..n_threads {
                let builder = thread::Builder::new().stack_size(l.stack_size);
                let job = move || {
                    reservation.started();
                    let _done = DoneGuard(shared);
                    worker(shared, l, s, t, resident, n_blocks, kernel);
                };
                match builder.spawn_scoped(scope, job) {
                    Ok(_) => spawned += 1,
                    Err(e) => {
                        shared.fail(EmuError::Spawn(format!(
                            "thread {t} of block slot {s} ({spawned} threads running): {e}"
                        )));
                        break 'spawn;
                    }
                }
            }
        }
        let mut done = shared
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *done < spawned {
            match deadline {
                Some((at, limit)) => {
                    let now = Instant::now();
                    if now >= at {
                        let left = spawned - *done;
                        drop(done);
                        shared.fail(EmuError::Timeout {
                            after: limit,
                            detail: format!("{left} of {spawned} emulated threads still running"),
                        });
                        // Threads stuck in emulator calls stop now; the scope joins them.
                        return;
                    }
                    done = shared
                        .finished_cv
                        .wait_timeout(done, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    done = shared
                        .finished_cv
                        .wait(done)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    });
    let error = shared
        .error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One emulated GPU thread: thread `t` of slot `s`, running blocks `s, s + resident, ...`.
fn worker(
    shared: &LaunchShared,
    l: &Launch,
    s: u32,
    t: u32,
    resident: u32,
    n_blocks: u32,
    kernel: &(dyn Fn() + Sync),
) {
    let slot = &shared.slots[s as usize];
    let ctx = ThreadCtx {
        tid: delinearize(t, l.block),
        linear: t,
        lane: t % WARP_SIZE,
        warp: t / WARP_SIZE,
        block_idx: Cell::new(delinearize(s, l.grid)),
        block_linear: Cell::new(s),
        slot_index: s,
        cluster_arrived: Cell::new(None),
        block_dim: l.block,
        grid_dim: l.grid,
        slot,
        launch: shared,
        smem_cache: RefCell::new(Vec::new()),
        polls: Cell::new(0),
    };
    slot.register(t);
    let _installed = ctx::install(&ctx);
    let mut b = s;
    loop {
        let block = delinearize(b, l.grid);
        ctx.block_idx.set(block);
        ctx.block_linear.set(b);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(kernel));
        if let Err(payload) = r
            && let Some(e) = report(payload, block, ctx.tid)
        {
            shared.fail(e);
        }
        cluster::exit(&ctx);
        let next = b
            .checked_add(resident)
            .filter(|&n| n < n_blocks && !shared.failed());
        if !slot.exit(&ctx, next.map(|n| delinearize(n, l.grid))) {
            return;
        }
        b = next.unwrap_or(n_blocks);
    }
}
