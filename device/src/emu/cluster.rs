//! Thread block clusters: the cluster barrier and `mapa`, what the host backend of
//! [`crate::cluster`] calls.
//!
//! A launch with clusters of `size` blocks has `resident` slots, a multiple of `size`; slots
//! `g·size .. g·size + size - 1` form **group** `g` and run whole clusters (slot `s` runs blocks
//! `s, s + resident, ...`, so in each round the group's slots run the `size` consecutive blocks
//! of one cluster). Slots advance to their next block independently, so at one time a group's
//! slots may run blocks of two (or more) successive clusters: the barrier state is therefore
//! kept per cluster (by cluster index), in a list per group that holds the clusters some
//! thread of the group has touched and not all threads have left.
//!
//! The barrier is exit-aware, as on the GPU ("wait for all non-exited threads of the cluster
//! to perform `barrier.cluster.arrive`"): a generation completes when every thread of the
//! cluster that has not exited has arrived in it. A thread that has not started yet (its slot
//! still runs an earlier block) has not exited, so it is waited for, as it must be. A thread
//! that exits with an arrival not yet waited for leaves the membership: its arrival no longer
//! counts, it is not waited for either.

use std::format;
use std::string::String;
use std::sync::PoisonError;
use std::vec;
use std::vec::Vec;

use super::block::misuse;
use super::ctx::{ThreadCtx, cancel};
use super::slot::SharedLoc;
use super::state::{ClusterBar, ClusterGroup};

/// Index of cluster `cluster` (of `size` blocks) in `bars`, added if missing.
fn entry(bars: &mut Vec<ClusterBar>, cluster: u32, size: u32) -> usize {
    match bars.iter().position(|b| b.cluster == cluster) {
        Some(i) => i,
        None => {
            bars.push(ClusterBar {
                cluster,
                arrived: 0,
                exited: 0,
                exited_by_rank: vec![0; size as usize],
                generation: 0,
            });
            bars.len() - 1
        }
    }
}

/// Completes the current generation of `bar` if every thread that has not exited arrived.
/// True if it did (then notify the group's condition variable).
fn settle(bar: &mut ClusterBar, threads: u32) -> bool {
    if bar.arrived == 0 || bar.arrived < threads - bar.exited {
        return false;
    }
    bar.arrived = 0;
    bar.generation += 1;
    true
}

fn group<'a>(c: &ThreadCtx<'a>) -> &'a ClusterGroup {
    &c.launch.clusters[(c.slot_index / c.launch.cluster_size) as usize]
}

fn cluster_of(c: &ThreadCtx<'_>) -> u32 {
    c.block_linear.get() / c.launch.cluster_size
}

/// `(%cluster_ctarank, %cluster_nctarank)` of the calling thread's block.
pub(crate) fn geometry(c: &ThreadCtx<'_>) -> (u32, u32) {
    let size = c.launch.cluster_size;
    (c.block_linear.get() % size, size)
}

/// `barrier.cluster.arrive`: counts the caller in the current generation of its cluster's
/// barrier (completing it if the caller is the last thread that has not exited).
pub(crate) fn arrive(c: &ThreadCtx<'_>) {
    if c.cluster_arrived.get().is_some() {
        misuse(
            c,
            String::from("cluster::arrive twice without a cluster::wait in between"),
        );
    }
    let g = group(c);
    let threads = c.launch.cluster_threads;
    let mut bars = g.lock();
    let i = entry(&mut bars, cluster_of(c), c.launch.cluster_size);
    let bar = &mut bars[i];
    c.cluster_arrived.set(Some(bar.generation));
    bar.arrived += 1;
    if settle(bar, threads) {
        drop(bars);
        g.cv.notify_all();
    }
}

/// `barrier.cluster.wait`: waits until the generation of the caller's last arrival completed.
/// Unwinds when the launch fails meanwhile.
pub(crate) fn wait(c: &ThreadCtx<'_>) {
    let Some(generation) = c.cluster_arrived.get() else {
        misuse(
            c,
            String::from("cluster::wait without a cluster::arrive before it"),
        );
    };
    let g = group(c);
    let cluster = cluster_of(c);
    let mut bars = g.lock();
    loop {
        if c.launch.failed() {
            drop(bars);
            cancel();
        }
        // The entry exists while the caller has not exited; a missing one cannot hold it up.
        let done = bars
            .iter()
            .find(|b| b.cluster == cluster)
            .is_none_or(|b| b.generation > generation);
        if done {
            break;
        }
        bars = g.cv.wait(bars).unwrap_or_else(PoisonError::into_inner);
    }
    drop(bars);
    c.cluster_arrived.set(None);
    c.polls.set(0);
}

/// The calling thread finished its block: it leaves its cluster's barrier membership (an
/// arrival of the current generation that it did not wait for is withdrawn), which may
/// complete the generation for the others. Called for every block, cluster launch or not.
pub(crate) fn exit(c: &ThreadCtx<'_>) {
    let pending = c.cluster_arrived.take();
    if c.launch.failed() {
        return;
    }
    let g = group(c);
    let threads = c.launch.cluster_threads;
    let mut bars = g.lock();
    let i = entry(&mut bars, cluster_of(c), c.launch.cluster_size);
    let bar = &mut bars[i];
    bar.exited += 1;
    bar.exited_by_rank[geometry(c).0 as usize] += 1;
    if pending == Some(bar.generation) {
        bar.arrived -= 1;
    }
    if bar.exited == threads {
        bars.swap_remove(i);
        return;
    }
    if settle(bar, threads) {
        drop(bars);
        g.cv.notify_all();
    }
}

/// `mapa`: the address of `p` (in the caller's block's shared memory) in the block of
/// cluster rank `rank`.
pub(crate) fn map(c: &ThreadCtx<'_>, p: *mut u8, rank: u32) -> *mut u8 {
    let size = c.launch.cluster_size;
    if rank >= size {
        misuse(
            c,
            format!("cluster::map to rank {rank} in a cluster of {size} blocks"),
        );
    }
    let Some(loc) = c.slot.locate(p) else {
        misuse(
            c,
            format!("cluster::map of {p:p}, which is not in this block's shared memory"),
        );
    };
    let target = &c.launch.slots[(c.slot_index - c.slot_index % size + rank) as usize];
    match loc {
        SharedLoc::Dynamic { offset } => target.dynamic_shared().0.wrapping_add(offset),
        SharedLoc::Static {
            name,
            size,
            align,
            offset,
        } => match target.static_array(name, size, align) {
            Ok(base) => base.wrapping_add(offset),
            Err(detail) => misuse(c, detail),
        },
    }
}

/// `st.async` into a block of the caller's cluster: `land` (the store and its completion on
/// the barrier) runs only if `dst` and `bar` are in the shared memory of one block of the
/// cluster and that block has started and not exited, which stays so while `land` runs (the
/// group's lock keeps the block's last thread from leaving, and so its slot from clearing
/// its shared memory for the next block). Otherwise, or when `land` reports a misuse of the
/// barrier, the caller fails the launch.
pub(crate) fn store_async(
    c: &ThreadCtx<'_>,
    dst: *mut u8,
    bar: *mut u8,
    land: &dyn Fn() -> Option<&'static str>,
) {
    let size = c.launch.cluster_size;
    let base = c.slot_index - c.slot_index % size;
    let slot_of = |r: u32| &c.launch.slots[(base + r) as usize];
    let Some(rank) = (0..size).find(|&r| slot_of(r).locate(dst).is_some()) else {
        misuse(
            c,
            format!(
                "cluster::store_async_u32 to {dst:p}, which is not in the shared memory of a block of this cluster"
            ),
        );
    };
    let slot = slot_of(rank);
    if slot.locate(bar).is_none() {
        misuse(
            c,
            format!(
                "cluster::store_async_u32 into cluster rank {rank} signals {bar:p}, which is not in that block's shared memory"
            ),
        );
    }
    let cluster = cluster_of(c);
    let target = cluster * size + rank;
    let block_threads = c.launch.cluster_threads / size;
    let g = group(c);
    let problem = {
        let mut bars = g.lock();
        let i = entry(&mut bars, cluster, size);
        let running = slot.block_linear(c.grid_dim);
        if bars[i].exited_by_rank[rank as usize] == block_threads || running > target {
            Some(format!(
                "cluster::store_async_u32 into block {target} (cluster rank {rank}), which has exited: \
                 write into a peer block only while it still waits for the data"
            ))
        } else if running < target {
            Some(format!(
                "cluster::store_async_u32 into block {target} (cluster rank {rank}), which has not started: \
                 write into a peer block only after a cluster barrier it arrived at"
            ))
        } else {
            land().map(|why| format!("cluster::store_async_u32 into cluster rank {rank}: {why}"))
        }
    };
    if let Some(detail) = problem {
        misuse(c, detail);
    }
}
