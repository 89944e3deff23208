//! What the threads of one emulated launch share: its failure state (the flag every
//! emulated primitive checks, the first error), its block slots and the cluster barriers of
//! each group of slots. The types, and what needs no thread context; what a thread does with
//! them is in `block`, `cluster` and `launch`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::vec::Vec;

use super::error::EmuError;
use super::slot::Slot;

/// What all threads of one launch share.
pub(crate) struct LaunchShared {
    pub(crate) failed: AtomicBool,
    pub(crate) error: Mutex<Option<EmuError>>,
    pub(crate) slots: Vec<Slot>,
    /// Blocks per cluster (1 without clusters).
    pub(crate) cluster_size: u32,
    /// Threads per cluster.
    pub(crate) cluster_threads: u32,
    /// One per `cluster_size` consecutive slots.
    pub(crate) clusters: Vec<ClusterGroup>,
    pub(crate) finished: Mutex<usize>,
    pub(crate) finished_cv: Condvar,
}

impl LaunchShared {
    /// True once any thread failed (or the watchdog fired).
    #[inline]
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Records `e` (the first error wins) and wakes every waiting thread so that it stops.
    /// Must not be called with a slot's or a cluster group's lock held.
    pub(crate) fn fail(&self, e: EmuError) {
        {
            let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        self.failed.store(true, Ordering::Release);
        for s in &self.slots {
            s.wake_all();
        }
        for g in &self.clusters {
            g.wake_all();
        }
    }

    pub(crate) fn worker_done(&self) {
        let mut n = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        self.finished_cv.notify_all();
    }
}

/// The cluster barrier of one cluster that a group of slots runs.
#[derive(Debug)]
pub(crate) struct ClusterBar {
    /// Cluster index: linear block index / cluster size.
    pub(crate) cluster: u32,
    /// Arrivals in the current generation by threads that have not exited.
    pub(crate) arrived: u32,
    /// Threads of the cluster that have exited.
    pub(crate) exited: u32,
    /// Of those, the threads of each block of the cluster, by cluster rank (a block whose
    /// count is the block size has exited: its shared memory is gone).
    pub(crate) exited_by_rank: Vec<u32>,
    /// Completed generations.
    pub(crate) generation: u64,
}

/// The cluster barriers of one group of `size` consecutive slots.
pub(crate) struct ClusterGroup {
    bars: Mutex<Vec<ClusterBar>>,
    pub(crate) cv: Condvar,
}

impl ClusterGroup {
    pub(crate) fn new() -> ClusterGroup {
        ClusterGroup {
            bars: Mutex::new(Vec::new()),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<ClusterBar>> {
        self.bars.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every thread waiting in a cluster barrier of the group (they then see that the
    /// launch failed). Taking the lock first orders this with a waiter's check of the flag.
    pub(crate) fn wake_all(&self) {
        drop(self.lock());
        self.cv.notify_all();
    }
}
