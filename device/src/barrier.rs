//! The LSA barrier: all ranks of a team (whose memory is load/store accessible) meet, with
//! release/acquire ordering across GPUs.
//!
//! A communicator has `n` independent barriers (`DevComm::lsa_barrier.n_barriers`); a kernel
//! uses barrier `index` (typically `block_idx().x`) through one [`LsaBarrier`] session: create
//! it, call [`arrive`](LsaBarrier::arrive) / [`wait`](LsaBarrier::wait) (or
//! [`sync`](LsaBarrier::sync)) any number of times, then [`finish`](LsaBarrier::finish) it.
//!
//! Buffer (in the resource window, one copy per rank, zeroed when the communicator is
//! created; `u32` words, `R` = team size), same layout as NCCL's:
//!
//! | words | content |
//! |---|---|
//! | `[0, n)` | persisted epoch of each barrier, multimem mode |
//! | `[n, 2n)` | persisted epoch of each barrier, unicast mode |
//! | `[2n, 3n)` | multimem inbox counter of each barrier (target of multicast adds) |
//! | `[3n + index * R + peer]` | unicast inbox of barrier `index`: written by `peer` |
//!
//! Algorithm (unicast): the epoch is the number of completed barrier rounds. `arrive` syncs
//! the group; then the threads that signal (the group's threads share the peers) each issue a
//! system-scope fence if the order has a release half, and store `epoch + 1` (relaxed, system
//! scope) into their own rank's slot of their peers' inboxes. `wait` spins with system-scope loads (acquire if the order has an
//! acquire half) on its own inbox slots until each holds at least `epoch + 1` (wrap-safe
//! compare), then `epoch += 1`. Multimem: `arrive` is one `multimem.red.add.u32 +1` on the
//! multicast address of the barrier's counter (every rank's copy gets +1), `wait` spins on the
//! local copy until it reaches `epoch + R`.
//!
//! Epochs persist in device memory ([`finish`](LsaBarrier::finish) writes them back), so a
//! barrier works across launches and CUDA-graph replays with no host involvement. Waits are
//! bounded: they poll the communicator's abort flag, and the `_timeout` variants give up after
//! a deadline on `%globaltimer`.
//!
//! Usual orders: `sync(Acquire)` at kernel entry (peers' inputs are ready), a `Release` or
//! `AcqRel` sync between phases that publish data, `sync(Release)` before exit (nobody
//! overwrites what a peer still reads).

use core::marker::PhantomData;

pub use crate::mem::Ordering;

use crate::comm::{DevComm, LsaBarrierHandle, MultimemHandle, RESOURCE_UNIT};
use crate::coop::Coop;
use crate::mem::{self, LoadOrder, Scope, StoreOrder};
use crate::multimem;
use crate::team::Team;
use crate::util::rolling_le;
use crate::wait::{NO_TIMEOUT, Spin, WaitError};
use crate::{arch, window};

/// How a barrier signals arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierMode {
    /// One store per peer into the peer's inbox (works on any LSA team).
    Unicast,
    /// One multicast add into the counter every rank holds (needs the team's multicast
    /// range, NVLink SHARP, sm_90+).
    Multimem(MultimemHandle),
}

/// A session on LSA barrier `index` (see the module docs). Linear: not `Copy`, not `Clone`,
/// and it must be consumed by [`finish`](LsaBarrier::finish).
///
/// **Forgetting `finish` breaks the next launch**: the epoch of this launch's rounds is not
/// written back, so the next session starts from a stale epoch, and its waits succeed early
/// (no synchronisation) or, once peers are ahead, hang until their timeout. On the host (the
/// CPU emulator) a session that ends without `finish` panics, failing the launch with the
/// reason.
#[doc(alias = "ncclLsaBarrierSession")]
#[must_use = "a barrier session must be finished with `finish(&coop)`"]
#[derive(Debug)]
pub struct LsaBarrier<C: Coop> {
    team: Team,
    n: u32,
    index: u32,
    epoch: u32,
    mode: BarrierMode,
    /// This rank's copy of the barrier buffer.
    local: *mut u32,
    /// Everything needed to find a peer's copy.
    flat_base: u64,
    stride4g: u32,
    mc_offset4k: u32,
    lsa_rank: i32,
    buf_offset: u64,
    abort_flag: *const u32,
    _coop: PhantomData<C>,
}

impl<C: Coop> LsaBarrier<C> {
    /// Unicast session on barrier `index` of `comm`'s LSA barriers, over the LSA team.
    ///
    /// # Safety
    /// - every thread of `coop` calls it (and then uses the session together, as documented
    ///   on each method);
    /// - `comm` describes a live communicator whose resource window holds the LSA barrier
    ///   buffer, zeroed at creation and used only through barrier sessions;
    /// - `index < comm.lsa_barrier.n_barriers` (traps otherwise);
    /// - every rank of the LSA team opens a session on `index` in this launch with the same
    ///   mode, and no other session on `index` is open at the same time (one group per index);
    /// - `comm.abort_flag` is 0 or the address of a `u32` (device memory or host memory mapped
    ///   for the device) that stays valid until the session is finished: every wait reads it;
    /// - if this launch uses programmatic dependent launch, [`arch::grid_dependency_wait`] has
    ///   returned before this call: `new` reads the epoch the previous session on `index`
    ///   (possibly in the kernel this one overlaps) wrote back in
    ///   [`finish`](Self::finish).
    #[inline(always)]
    pub unsafe fn new(coop: &C, comm: &DevComm, index: u32) -> Self {
        // SAFETY: forwarded.
        unsafe { Self::on_lsa_team(coop, comm, index, BarrierMode::Unicast) }
    }

    /// Multimem session on barrier `index` of `comm`'s LSA barriers (LSA team, the
    /// communicator's LSA multicast range; traps when it has none).
    ///
    /// # Safety
    /// As [`new`](Self::new); the GPU supports multimem (sm_90+ with NVLink SHARP).
    #[inline(always)]
    pub unsafe fn new_multimem(coop: &C, comm: &DevComm, index: u32) -> Self {
        if !comm.lsa_multimem.is_present() {
            arch::trap();
        }
        // SAFETY: forwarded.
        unsafe { Self::on_lsa_team(coop, comm, index, BarrierMode::Multimem(comm.lsa_multimem)) }
    }

    /// A session of `mode` on barrier `index` of `comm`'s LSA barriers, over the LSA team.
    ///
    /// # Safety
    /// As [`new`](Self::new) (and [`new_multimem`](Self::new_multimem) for a multimem mode).
    #[inline(always)]
    unsafe fn on_lsa_team(coop: &C, comm: &DevComm, index: u32, mode: BarrierMode) -> Self {
        // SAFETY: forwarded.
        unsafe { Self::with_team(coop, comm, comm.lsa_team(), comm.lsa_barrier, index, mode) }
    }

    /// Session on barrier `index` of the barriers `handle` over `team` (a subteam of the
    /// caller's LSA team; the buffer was sized for `team.n_ranks`).
    ///
    /// # Safety
    /// As [`new`](Self::new), for `handle` and `team`; in multimem mode the resource window is
    /// bound to the multicast object of the handle given.
    #[doc(alias = "ncclLsaBarrierSession")]
    #[inline(always)]
    pub unsafe fn with_team(
        _coop: &C,
        comm: &DevComm,
        team: Team,
        handle: LsaBarrierHandle,
        index: u32,
        mode: BarrierMode,
    ) -> Self {
        let n = handle.n_barriers as u32;
        if index >= n {
            arch::trap();
        }
        let buf_offset = u64::from(handle.buf_handle) * RESOURCE_UNIT as u64;
        let local = comm.resource_local_ptr(handle.buf_handle).cast::<u32>();
        let mut bar = LsaBarrier {
            team,
            n,
            index,
            epoch: 0,
            mode,
            local,
            flat_base: comm.resource.lsa_flat_base,
            stride4g: comm.resource.stride4g,
            mc_offset4k: comm.resource.mc_offset4k,
            lsa_rank: comm.lsa_rank,
            buf_offset,
            abort_flag: comm.abort_flag_ptr(),
            _coop: PhantomData,
        };
        // SAFETY: the state word lies in this rank's barrier buffer (caller's contract).
        bar.epoch = unsafe { mem::load(bar.state_word(), LoadOrder::Relaxed, Scope::Gpu) };
        bar
    }

    /// The barrier index of this session.
    #[inline(always)]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The current epoch (completed rounds since the buffer was zeroed; multimem mode counts
    /// `team.n_ranks` per round). Only meaningful on the coop's rank 0 in multimem mode.
    #[inline(always)]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The team this barrier synchronises.
    #[inline(always)]
    pub fn team(&self) -> Team {
        self.team
    }

    #[inline(always)]
    fn state_word(&self) -> *mut u32 {
        let which = match self.mode {
            BarrierMode::Multimem(_) => 0,
            BarrierMode::Unicast => self.n,
        };
        self.local.wrapping_add((which + self.index) as usize)
    }

    /// Word `word` of team member `peer`'s copy of the barrier buffer.
    #[inline(always)]
    fn peer_word(&self, peer: i32, word: u32) -> *mut u32 {
        let lsa_peer = self.team.to_lsa(self.lsa_rank, peer);
        let base = window::add4g(
            self.flat_base,
            (lsa_peer as u32).wrapping_mul(self.stride4g),
        );
        (base + self.buf_offset + 4 * u64::from(word)) as *mut u32
    }

    #[inline(always)]
    fn inbox_word(&self, from: i32) -> u32 {
        3 * self.n + self.index * self.team.n_ranks as u32 + from as u32
    }

    /// Signals this rank's arrival at the next round. Every thread of `coop` calls it.
    ///
    /// # Ordering
    /// With a release half in `order` (`Release`, `AcqRel`): a system-scope fence precedes the
    /// signal, so every write the group made before `arrive` is visible to peers whose `wait`
    /// has an acquire half. With `Relaxed`/`Acquire`: only arrival is signalled.
    ///
    /// Only the threads that signal a peer fence: the group's sync first orders every member's
    /// earlier accesses before them (the pattern of a grid-wide sync: sync the block, then one
    /// thread fences and signals). With every thread of a 512-thread block fencing, the exit
    /// barrier of an all-gather or all-to-all of 1 MiB took about 1.1 µs more (7.6 → 6.5 µs
    /// per all-to-all, two ranks on one H100).
    #[inline(always)]
    pub fn arrive(&mut self, coop: &C, order: Ordering) {
        coop.sync();
        match self.mode {
            // ANCHOR: arrive_unicast
            BarrierMode::Unicast => {
                let n = self.team.n_ranks;
                if n <= 1 {
                    return;
                }
                let word = self.inbox_word(self.team.rank);
                let value = self.epoch.wrapping_add(1);
                let (mut i, step) = peer_walk(coop);
                // `i < n - 1` bounds the peer whatever the coop reports (n > 1 here).
                if i < (n - 1) as u32 {
                    // After `coop.sync()`: releases the whole group's earlier writes.
                    mem::fence(order.release_part(), Scope::Sys);
                }
                while i < (n - 1) as u32 {
                    let mut peer = self.team.rank + 1 + i as i32;
                    if peer >= n {
                        peer -= n;
                    }
                    // SAFETY: the peer's buffer is mapped (session contract); the slot is ours.
                    unsafe {
                        mem::store(
                            self.peer_word(peer, word),
                            value,
                            StoreOrder::Relaxed,
                            Scope::Sys,
                        )
                    };
                    i = i.saturating_add(step);
                }
            }
            // ANCHOR_END: arrive_unicast
            BarrierMode::Multimem(mm) => {
                // ANCHOR: arrive_multimem
                if coop.is_leader() {
                    let mc = (mm.mc_base
                        + 4096 * u64::from(self.mc_offset4k)
                        + self.buf_offset
                        + 4 * u64::from(2 * self.n + self.index))
                        as *mut u32;
                    // SAFETY: the multicast range is bound (session contract).
                    unsafe { multimem::red_add_u32(mc, 1, order.release_part()) };
                }
                // ANCHOR_END: arrive_multimem
            }
        }
    }

    /// Waits until every peer has arrived at the current round, then advances the epoch.
    /// Every thread of `coop` calls it. Gives up only when the abort flag is raised.
    ///
    /// # Ordering
    /// With an acquire half in `order` (`Acquire`, `AcqRel`): writes peers made before their
    /// releasing `arrive` are visible to every thread of the group after `wait` returns `Ok`.
    ///
    /// # Errors
    /// [`WaitError::Aborted`] (the same on every thread of the group). After an error the
    /// barrier's state is unspecified for every rank: finish the session, stop, and have the
    /// host re-create the communicator before using the barrier again.
    #[inline(always)]
    pub fn wait(&mut self, coop: &C, order: Ordering) -> Result<(), WaitError> {
        self.wait_timeout(coop, order, NO_TIMEOUT)
    }

    /// [`wait`](Self::wait) that also gives up after `timeout_ns` nanoseconds of
    /// `%globaltimer` (per waiting thread; [`NO_TIMEOUT`] = never).
    ///
    /// # Ordering
    /// As [`wait`](Self::wait).
    ///
    /// # Errors
    /// [`WaitError::Timeout`] or [`WaitError::Aborted`], the same on every thread of the
    /// group (`Aborted` wins when threads saw both); see [`wait`](Self::wait).
    #[inline(always)]
    pub fn wait_timeout(
        &mut self,
        coop: &C,
        order: Ordering,
        timeout_ns: u64,
    ) -> Result<(), WaitError> {
        let load_order = order.load_order();
        // SAFETY: the abort flag comes from the comm (session contract).
        let mut spin = unsafe { Spin::new(self.abort_flag, timeout_ns) };
        let mut result = Ok(());
        let step;
        match self.mode {
            // ANCHOR: wait_unicast
            BarrierMode::Unicast => {
                step = 1;
                let n = self.team.n_ranks;
                let target = self.epoch.wrapping_add(1);
                let (mut i, step) = peer_walk(coop);
                // `i < n - 1` bounds the peer whatever the coop reports (none when n <= 1).
                let n_peers = if n > 1 { (n - 1) as u32 } else { 0 };
                while i < n_peers && result.is_ok() {
                    let mut peer = self.team.rank + 1 + i as i32;
                    if peer >= n {
                        peer -= n;
                    }
                    let slot = self.local.wrapping_add(self.inbox_word(peer) as usize);
                    result = spin.until(|| {
                        // SAFETY: our own inbox slot (session contract).
                        rolling_le(target, unsafe { mem::load(slot, load_order, Scope::Sys) })
                    });
                    i = i.saturating_add(step);
                }
            }
            // ANCHOR_END: wait_unicast
            BarrierMode::Multimem(_) => {
                step = self.team.n_ranks as u32;
                if coop.is_leader() {
                    let target = self.epoch.wrapping_add(step);
                    let slot = self.local.wrapping_add((2 * self.n + self.index) as usize);
                    result = spin.until(|| {
                        // SAFETY: our own counter (session contract).
                        rolling_le(target, unsafe { mem::load(slot, load_order, Scope::Sys) })
                    });
                }
            }
        }
        if coop.any(result.is_err()) {
            return Err(if coop.any(result == Err(WaitError::Aborted)) {
                WaitError::Aborted
            } else {
                WaitError::Timeout
            });
        }
        self.epoch = self.epoch.wrapping_add(step);
        Ok(())
    }

    /// [`arrive`](Self::arrive) then [`wait`](Self::wait) with the same order.
    ///
    /// # Ordering
    /// The release half of `order` applies to the arrive, the acquire half to the wait.
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    #[inline(always)]
    pub fn sync(&mut self, coop: &C, order: Ordering) -> Result<(), WaitError> {
        self.arrive(coop, order);
        self.wait(coop, order)
    }

    /// [`arrive`](Self::arrive) then [`wait_timeout`](Self::wait_timeout).
    ///
    /// # Ordering
    /// As [`sync`](Self::sync).
    ///
    /// # Errors
    /// As [`wait_timeout`](Self::wait_timeout).
    #[inline(always)]
    pub fn sync_timeout(
        &mut self,
        coop: &C,
        order: Ordering,
        timeout_ns: u64,
    ) -> Result<(), WaitError> {
        self.arrive(coop, order);
        self.wait_timeout(coop, order, timeout_ns)
    }

    // ANCHOR: finish
    /// Ends the session: the group's rank 0 writes the epoch back to device memory for the
    /// next session on this index, then the group syncs. Every thread of `coop` calls it.
    ///
    /// # Ordering
    /// The epoch store is relaxed (GPU scope); the next launch (or the next session after the
    /// group sync) reads it.
    #[inline(always)]
    pub fn finish(self, coop: &C) {
        if coop.is_leader() {
            // SAFETY: our own state word (session contract).
            unsafe {
                mem::store(
                    self.state_word(),
                    self.epoch,
                    StoreOrder::Relaxed,
                    Scope::Gpu,
                )
            };
        }
        coop.sync();
        // Finished: not the unfinished session that dropping reports where checks are on.
        // (Without them, on the GPU, the session has no drop: it simply goes out of scope.)
        #[cfg(any(not(target_arch = "nvptx64"), feature = "bounds-checks"))]
        core::mem::forget(self);
    }
    // ANCHOR_END: finish
}

/// A session cannot end silently without [`finish`](LsaBarrier::finish): where
/// [`crate::check`] is enabled (the host, so every emulated launch; GPU builds with
/// `bounds-checks`) dropping an unfinished session stops the thread with a message naming the
/// barrier index, so the launch fails instead of the next launch on the index silently starting
/// from a stale epoch. GPU builds without the feature have no drop (the PTX is the same as
/// without this check). The GIN barrier sessions to come are to follow the same rule.
#[cfg(any(not(target_arch = "nvptx64"), feature = "bounds-checks"))]
impl<C: Coop> Drop for LsaBarrier<C> {
    fn drop(&mut self) {
        crate::check::unfinished_session(self.index);
    }
}

/// Where the group's threads start and how far they stride over the team's other ranks: this
/// thread's rank (compared in `u32`, so it never turns into a negative peer) and the group
/// size, at least 1 (a group that reports size 0 has no members; striding by 1 keeps the walk
/// finite).
#[inline(always)]
fn peer_walk<C: Coop>(coop: &C) -> (u32, u32) {
    (coop.thread_rank(), coop.size().max(1))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::comm::ResourceWindow;
    use crate::coop::{Cta, WarpSpan};
    use core::sync::atomic::{AtomicU32, Ordering as A};
    use std::sync::Arc;
    use std::vec::Vec;

    // ANCHOR: two_ranks
    /// Two host threads play LSA ranks 0 and 1. Both ranks' barrier buffers are the same
    /// memory (stride 0): the inbox slots of the two ranks are distinct words, and both persist
    /// the same epoch, so the algorithm is exercised exactly as on two GPUs.
    #[test]
    fn two_ranks_exchange_data_through_release_acquire_rounds() {
        let buf: Arc<Vec<AtomicU32>> = Arc::new((0..16).map(|_| AtomicU32::new(0)).collect());
        let mail: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let rounds = 2000u32;
        let workers: Vec<_> = (0..2)
            .map(|rank| {
                let (buf, mail) = (Arc::clone(&buf), Arc::clone(&mail));
                std::thread::spawn(move || {
                    let mut comm = DevComm::new(rank, 2, rank, 2);
                    comm.resource = ResourceWindow {
                        lsa_flat_base: buf.as_ptr() as u64,
                        stride4g: 0,
                        mc_offset4k: 0,
                    };
                    comm.lsa_barrier = LsaBarrierHandle {
                        buf_handle: 0,
                        n_barriers: 1,
                    };
                    let cta = Cta::new();
                    // SAFETY: both ranks open barrier 0 (the only one) of a communicator whose
                    // resource window is `buf`: zeroed, alive until both threads are joined,
                    // used by no other session; the abort flag is 0.
                    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, 0) };
                    let peer = (1 - rank) as usize;
                    let mut bad = 0;
                    for r in 0..rounds {
                        mail[peer].store(r * 2 + rank as u32, A::Relaxed);
                        bar.sync_timeout(&cta, Ordering::AcqRel, 5_000_000_000)
                            .unwrap();
                        bad +=
                            u32::from(mail[rank as usize].load(A::Relaxed) != r * 2 + peer as u32);
                        bar.sync_timeout(&cta, Ordering::Release, 5_000_000_000)
                            .unwrap();
                    }
                    let epoch = bar.epoch();
                    bar.finish(&cta);
                    (bad, epoch)
                })
            })
            .collect();
        for w in workers {
            assert_eq!(w.join().unwrap(), (0, 2 * rounds));
        }
        assert_eq!(
            buf[1].load(A::Relaxed),
            2 * rounds,
            "persisted unicast epoch"
        );
    }
    // ANCHOR_END: two_ranks

    /// A session that ends without `finish` is reported on the host: on a plain host thread it
    /// panics with the reason; in an emulated launch the launch fails, naming it. A finished
    /// session is not reported.
    #[test]
    fn a_session_left_unfinished_is_reported_on_the_host() {
        let buf: Vec<AtomicU32> = (0..80).map(|_| AtomicU32::new(0)).collect();
        let comm = rank0_of_two(&buf, 16);
        let cta = Cta::new();
        // SAFETY: barrier 3 of a communicator whose resource window is `buf` (zeroed, alive for
        // the whole test, used by no other session); the abort flag is 0.
        let finished = unsafe { LsaBarrier::new(&cta, &comm, 3) };
        finished.finish(&cta);
        let dropped = std::panic::catch_unwind(|| {
            // SAFETY: as above.
            let bar = unsafe { LsaBarrier::new(&Cta::new(), &comm, 3) };
            drop(bar);
        });
        let msg = dropped.unwrap_err();
        let msg = msg
            .downcast_ref::<std::string::String>()
            .map(|s| s.as_str())
            .unwrap_or_default();
        assert!(
            msg.contains("LSA barrier session 3 ended without finish()"),
            "{msg}"
        );
        // In an emulated launch: the launch fails with the reason instead of returning Ok.
        let err = crate::emu::Launch::new(1u32, 32u32)
            .run(|| {
                let cta = Cta::new();
                // SAFETY: as above; every thread of the block opens barrier 5 together.
                let bar = unsafe { LsaBarrier::new(&cta, &comm, 5) };
                let _ = bar.epoch();
            })
            .unwrap_err();
        let err = std::format!("{err}");
        assert!(
            err.contains("LSA barrier session 5 ended without finish()"),
            "{err}"
        );
    }

    /// LSA rank 0 of a two-rank team whose resource window (its `n_barriers` barriers) is
    /// `buf`.
    fn rank0_of_two(buf: &[AtomicU32], n_barriers: i32) -> DevComm {
        let mut comm = DevComm::new(0, 2, 0, 2);
        comm.resource.lsa_flat_base = buf.as_ptr() as u64;
        comm.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers,
        };
        comm
    }

    /// A thread outside a `WarpSpan` gets a rank of `tid.x - 32 * warp0`, wrapped (here
    /// `0 - 32`). Taken as an `i32` that was a negative peer: arrive stored into a slot and
    /// wait polled a word outside its inbox. Now such a thread touches no slot.
    #[test]
    fn a_thread_outside_its_warp_span_touches_no_barrier_slot() {
        // 16 barriers of a 2-rank team: words [0, 48) are epochs and counters, the inboxes
        // follow; a negative peer made wait poll word 48 + 0 - 31 = 17 (barrier 1's counter).
        let buf: Vec<AtomicU32> = (0..80).map(|_| AtomicU32::new(0)).collect();
        let comm = rank0_of_two(&buf, 16);
        let span = WarpSpan::new(1, 1, 0); // the host thread is thread 0, in warp 0
        assert!(span.thread_rank() >= span.size());
        // SAFETY: barrier 0 of a communicator whose resource window is `buf` (zeroed, alive
        // for the whole test, used by no other session); the abort flag is 0.
        let mut bar = unsafe { LsaBarrier::new(&span, &comm, 0) };
        bar.arrive(&span, Ordering::Release);
        let written: Vec<usize> = (0..buf.len())
            .filter(|&w| buf[w].load(A::Relaxed) != 0)
            .collect();
        assert_eq!(written, Vec::<usize>::new(), "a non-member signalled");
        assert_eq!(
            bar.wait_timeout(&span, Ordering::Acquire, 20_000_000),
            Ok(()),
            "a non-member waited on some slot"
        );
        bar.finish(&span);
    }

    #[test]
    fn wrap_around_of_the_epoch_keeps_the_barrier_working() {
        let buf: Vec<AtomicU32> = (0..16).map(|_| AtomicU32::new(0)).collect();
        let comm = rank0_of_two(&buf, 1);
        // Persisted epoch just below the wrap; the (absent) peer's inbox already holds the
        // value of the round after the wrap, as a peer that ran ahead would have left it.
        buf[1].store(u32::MAX, A::Relaxed);
        buf[3 + 1].store(0, A::Relaxed); // u32::MAX + 1 wraps to 0
        let cta = Cta::new();
        // SAFETY: barrier 0 of a communicator whose resource window is `buf` (zeroed, alive
        // for the whole test, used by no other session); the abort flag is 0.
        let mut bar = unsafe { LsaBarrier::new(&cta, &comm, 0) };
        assert_eq!(
            bar.sync_timeout(&cta, Ordering::Acquire, 50_000_000),
            Ok(())
        );
        assert_eq!(bar.epoch(), 0);
        // Next round needs 1; the inbox still says 0: a bounded timeout, not a false pass.
        assert_eq!(
            bar.wait_timeout(&cta, Ordering::Acquire, 5_000_000),
            Err(WaitError::Timeout)
        );
        bar.finish(&cta);
        assert_eq!(buf[1].load(A::Relaxed), 0);
        assert_eq!(
            buf[3].load(A::Relaxed),
            0,
            "our arrival of round 0 reached the peer's slot"
        );
    }
}
