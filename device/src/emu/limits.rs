//! The host's limits on an emulated launch's OS threads: a launch whose resident blocks need
//! more threads or memory maps than the process may still create is refused before its first
//! thread starts.
//!
//! Why before: std aborts the whole process (no `Result`) when a new thread cannot map its
//! signal stack ("failed to set up alternative stack guard page"), which is what happens when
//! the process reaches `vm.max_map_count`. So the check counts what is in use (`/proc`), what
//! concurrent emulated launches (other ranks of this process) reserved and have not started
//! yet, and what this launch needs, against the limits, with headroom for other allocations.
//! Where `/proc` cannot be read (not Linux) that part of the check is skipped.

use std::format;
use std::string::String;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Memory maps one emulated thread costs. Measured: 4.0 per thread for 1000 and for 4000
/// threads with 256 KiB stacks (glibc 2.36, Linux 6.18): the thread's stack and its guard
/// page (`pthread_create`), and std's signal stack and its guard page (mapped by the new
/// thread before it runs anything, the mapping whose failure aborts).
pub(crate) const MAPS_PER_THREAD: u64 = 4;

/// Memory maps one resident block slot may add: its dynamic shared memory and a large static
/// shared array, each beyond malloc's mmap threshold.
pub(crate) const MAPS_PER_SLOT: u64 = 2;

/// Memory maps kept free for everything else of the process, besides [`MAPS_PER_CPU`].
pub(crate) const MAP_HEADROOM: u64 = 1024;

/// Memory maps kept free per online CPU: glibc's malloc creates up to 8 arenas per CPU for
/// new threads, each at most 2 maps.
pub(crate) const MAPS_PER_CPU: u64 = 16;

/// Threads kept free for everything else of the process.
pub(crate) const THREAD_HEADROOM: u64 = 64;

/// What an emulated launch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Demand {
    /// Blocks of the grid.
    pub(crate) blocks: u32,
    /// Threads per block.
    pub(crate) block_threads: u32,
    /// Blocks resident at once (block slots): each is `block_threads` OS threads.
    pub(crate) resident: u32,
}

impl Demand {
    /// OS threads the launch runs at once.
    pub(crate) fn threads(&self) -> u64 {
        u64::from(self.resident) * u64::from(self.block_threads)
    }
}

/// What the process may have and has: `None` where unknown (that limit is not checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Usage {
    /// `vm.max_map_count`.
    pub(crate) max_map_count: Option<u64>,
    /// Memory maps of the process (lines of `/proc/self/maps`).
    pub(crate) maps: Option<u64>,
    /// The smallest thread limit and its name (`kernel.threads-max`, `RLIMIT_NPROC`).
    pub(crate) thread_limit: Option<(u64, &'static str)>,
    /// Threads of the process (`Threads:` of `/proc/self/status`).
    pub(crate) threads: Option<u64>,
    /// Threads that concurrent emulated launches reserved and that have not started yet.
    pub(crate) pending: u64,
    /// Online CPUs (for the malloc arena headroom).
    pub(crate) cpus: u64,
}

/// Memory maps kept free on a host with `cpus` online CPUs.
pub(crate) fn map_headroom(cpus: u64) -> u64 {
    MAP_HEADROOM + MAPS_PER_CPU * cpus
}

/// Memory maps a launch of `d` adds, headroom not included.
pub(crate) fn maps_needed(d: &Demand) -> u64 {
    d.threads() * MAPS_PER_THREAD + u64::from(d.resident) * MAPS_PER_SLOT
}

/// "1 resident block", "4 resident blocks".
fn resident_blocks(n: u32) -> String {
    format!("{n} resident block{}", if n == 1 { "" } else { "s" })
}

/// Refuses `d` if its threads, with those already in the process and those `u.pending`, would
/// exceed the process's memory-map or thread limits (less headroom); the message names the
/// limit, the numbers and what to shrink.
pub(crate) fn check(d: &Demand, u: &Usage) -> Result<(), String> {
    let threads = d.threads();
    let what = format!(
        "emulated launch of {} block{} × {} threads",
        d.blocks,
        if d.blocks == 1 { "" } else { "s" },
        d.block_threads
    );
    let shrink = "use fewer threads per block (code sized by symcomm::launch::limits, the \
                  gallery's included, takes SYMCOMM_EMU_THREADS), fewer \
                  resident blocks (Launch::resident_blocks; at least one cluster stays \
                  resident) or fewer concurrent emulated launches (ranks)";
    if let (Some(max), Some(used)) = (u.max_map_count, u.maps) {
        let need = maps_needed(d);
        let headroom = map_headroom(u.cpus);
        let reserved = u.pending * MAPS_PER_THREAD;
        let free = max.saturating_sub(used + reserved + headroom);
        if need > free {
            return Err(format!(
                "{what} needs ~{need} memory maps for its {} ({threads} \
                 threads, {MAPS_PER_THREAD} maps each), but only {free} of \
                 vm.max_map_count = {max} are free ({used} in use, ~{reserved} reserved by \
                 {} threads of concurrent emulated launches, {headroom} kept as headroom): \
                 {shrink}",
                resident_blocks(d.resident),
                u.pending
            ));
        }
    }
    if let (Some((max, name)), Some(used)) = (u.thread_limit, u.threads) {
        let free = max.saturating_sub(used + u.pending + THREAD_HEADROOM);
        if threads > free {
            return Err(format!(
                "{what} needs {threads} threads for its {}, but only {free} \
                 of {name} = {max} are free ({used} threads in this process, {} reserved by \
                 concurrent emulated launches, {THREAD_HEADROOM} kept as headroom): {shrink}",
                resident_blocks(d.resident),
                u.pending
            ));
        }
    }
    Ok(())
}

/// The first unsigned number in `s` after `key`.
fn number_after(s: &str, key: &str) -> Option<u64> {
    let rest = &s[s.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

fn read_number(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The process's usage and limits now, with `pending` reserved threads.
pub(crate) fn read_usage(pending: u64) -> Usage {
    let maps = std::fs::read("/proc/self/maps")
        .ok()
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64);
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| number_after(&s, "\nThreads:"));
    let mut thread_limit =
        read_number("/proc/sys/kernel/threads-max").map(|n| (n, "kernel.threads-max"));
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid `rlimit` for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut r) } == 0
        && r.rlim_cur != libc::RLIM_INFINITY
    {
        // RLIMIT_NPROC counts all of the user's threads and does not bind root, so this is
        // conservative; a grid it refuses is far beyond the map limit anyway.
        let n = r.rlim_cur;
        if thread_limit.is_none_or(|(m, _)| n < m) {
            thread_limit = Some((n, "RLIMIT_NPROC"));
        }
    }
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    Usage {
        max_map_count: read_number("/proc/sys/vm/max_map_count"),
        maps,
        thread_limit,
        threads,
        pending,
        cpus: u64::try_from(cpus).unwrap_or(1).max(1),
    }
}

/// Threads reserved by emulated launches that have not started yet: the check of a launch and
/// its reservation happen under one lock, so concurrent launches see each other's threads
/// before those exist in `/proc`.
pub(crate) struct Ledger {
    check: Mutex<()>,
    pending: AtomicU64,
}

/// The process's ledger.
pub(crate) static LEDGER: Ledger = Ledger::new();

impl Ledger {
    pub(crate) const fn new() -> Ledger {
        Ledger {
            check: Mutex::new(()),
            pending: AtomicU64::new(0),
        }
    }

    /// Threads reserved and not started.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> u64 {
        self.pending.load(Ordering::SeqCst)
    }

    /// Checks `d` against `usage(pending)` and reserves its threads if it fits.
    pub(crate) fn reserve(
        &self,
        d: &Demand,
        usage: impl FnOnce(u64) -> Usage,
    ) -> Result<Reservation<'_>, String> {
        let _one_at_a_time = self.check.lock().unwrap_or_else(PoisonError::into_inner);
        // Read before `/proc`: a thread that starts in between is then counted twice (pending
        // and in `/proc`), never zero times.
        let pending = self.pending.load(Ordering::SeqCst);
        check(d, &usage(pending))?;
        let n = d.threads();
        self.pending.fetch_add(n, Ordering::SeqCst);
        Ok(Reservation {
            ledger: self,
            left: AtomicU64::new(n),
        })
    }
}

/// A launch's reserved threads that have not started; dropping it releases those.
pub(crate) struct Reservation<'a> {
    ledger: &'a Ledger,
    left: AtomicU64,
}

impl Reservation<'_> {
    /// One reserved thread started: it runs, so `/proc` counts its maps and itself now (std
    /// maps the signal stack before it runs the thread's closure).
    pub(crate) fn started(&self) {
        // A thread starts at most once per reserved thread, so neither count underflows.
        self.left.fetch_sub(1, Ordering::SeqCst);
        self.ledger.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let left = *self.left.get_mut();
        self.ledger.pending.fetch_sub(left, Ordering::SeqCst);
    }
}
