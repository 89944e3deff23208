//! Barriers over GIN: [`GinBarrier`] (a world or rail team, every member on another node or
//! not) and the hybrid [`Barrier`] (the LSA barrier inside the node, then a GIN barrier over
//! the rail team), in the session shape of [`LsaBarrier`]: open, `sync` any number of times,
//! `finish`.
//!
//! Algorithm: barrier `b` owns one signal per team member at every rank (past the signals a
//! kernel may name, see [`GinHandle::barrier_signals`]). To arrive at round `e + 1`, a rank
//! *sets* its own slot at every other member to `e + 1` (one writer per slot, so a set is
//! exact and never goes backwards); it then waits until every other member's slot at its own
//! rank is at least `e + 1` (rolling compare). Epochs persist in device memory across launches
//! ([`GinBarrier::finish`] writes them back).
//!
//! Fences ([`GinFence`]): with `Put` (or `Get`) the arrival signals are strong, so when a rank
//! leaves the barrier every put that each member issued on the same context to it before
//! arriving has landed. With `None` they are weak: only arrival is known. There is no GIN get
//! yet, so `Get` fences as `Put` does.
//!
//! The hybrid barrier orders LSA memory (the LSA barrier's order) and GIN puts between rail
//! peers (the fence); a GIN put to a rank of another rail is not covered: follow it with a
//! signal to that rank, or use a world [`GinBarrier`].

use core::marker::PhantomData;

use super::context::{Gin, share_result};
use super::descriptor::{GinHandle, SignalOp};
use crate::barrier::LsaBarrier;
use crate::check;
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::mem::{self, LoadOrder, Ordering, Scope, StoreOrder};
use crate::team::Team;
use crate::wait::WaitError;

/// What a GIN barrier guarantees about earlier puts (NCCL's fence levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GinFence {
    /// Arrival only.
    None,
    /// Every put a member issued to this rank on the barrier's context before arriving has
    /// landed when this rank leaves.
    Put,
    /// As `Put` (symcomm has no GIN get yet).
    Get,
}

/// A session on GIN barrier `index` of a team (world or rail). Linear: consume it with
/// [`finish`](GinBarrier::finish), or the next session on `index` starts from a stale epoch.
#[doc(alias = "ncclGinBarrierSession")]
#[must_use = "a barrier session must be finished with `finish(&coop)`"]
#[derive(Debug)]
pub struct GinBarrier<C: Coop> {
    gin: Gin,
    team: Team,
    /// Signal index of this barrier's slot for team member 0.
    base: u32,
    epoch: u64,
    epoch_word: *mut u64,
    _coop: PhantomData<C>,
}

impl<C: Coop> GinBarrier<C> {
    /// Session on world GIN barrier `index` (`0..world_barriers`; traps otherwise), posting on
    /// `gin`'s context.
    ///
    /// # Safety
    /// - every thread of `coop` calls it, and then uses the session together;
    /// - `gin` is a context of `comm`, a live device communicator;
    /// - every rank of the world opens a session on world barrier `index` in this launch, and
    ///   no other session on it is open at the same time;
    /// - with programmatic dependent launch, the grid dependency wait has returned (the epoch
    ///   of the previous session is read here).
    #[inline(always)]
    pub unsafe fn world(_coop: &C, gin: &Gin, comm: &DevComm, index: u32) -> Self {
        let h = comm.gin;
        if index >= h.world_barriers {
            check::gin_barrier(index, h.world_barriers);
        }
        let base = h.barrier_signals + index * comm.n_ranks as u32;
        // SAFETY: forwarded contract; `index` is in range.
        unsafe { Self::open(gin, comm.world_team(), &h, base, index) }
    }

    /// Session on rail GIN barrier `index` (`0..rail_barriers`; traps otherwise).
    ///
    /// # Safety
    /// As [`world`](Self::world), for the rail team.
    #[inline(always)]
    pub unsafe fn rail(_coop: &C, gin: &Gin, comm: &DevComm, index: u32) -> Self {
        let h = comm.gin;
        if index >= h.rail_barriers {
            check::gin_barrier(index, h.rail_barriers);
        }
        let rail = comm.rail_team();
        let base = h.barrier_signals
            + h.world_barriers * comm.n_ranks as u32
            + index * rail.n_ranks as u32;
        // SAFETY: forwarded contract; `index` is in range.
        unsafe { Self::open(gin, rail, &h, base, h.world_barriers + index) }
    }

    /// # Safety
    /// `slot` < world + rail barriers; the handle's epochs are live device memory.
    #[inline(always)]
    unsafe fn open(gin: &Gin, team: Team, h: &GinHandle, base: u32, slot: u32) -> Self {
        let epoch_word = (h.barrier_epochs + 8 * u64::from(slot)) as *mut u64;
        // SAFETY: our own epoch word (caller).
        let epoch = unsafe { mem::load(epoch_word, LoadOrder::Relaxed, Scope::Gpu) };
        GinBarrier {
            gin: *gin,
            team,
            base,
            epoch,
            epoch_word,
            _coop: PhantomData,
        }
    }

    /// Completed rounds since the communicator was created.
    #[inline(always)]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The team this barrier synchronises.
    #[inline(always)]
    pub fn team(&self) -> Team {
        self.team
    }

    /// Signals this rank's arrival at the next round to every other member. Every thread of
    /// `coop` calls it.
    ///
    /// # Ordering
    /// The group's writes before the call are released at system scope (each post fences);
    /// with a fence level other than `None` the arrival is a strong signal (see the module
    /// docs).
    ///
    /// # Errors
    /// [`WaitError`] when a ring stays full past the context's timeout, or on abort.
    #[inline(always)]
    pub fn arrive(&mut self, coop: &C, fence: GinFence) -> Result<(), WaitError> {
        let n = self.team.n_ranks;
        let value = self.epoch.wrapping_add(1);
        let strong = fence != GinFence::None;
        let slot = self.base + self.team.rank as u32;
        let mut peer = self.team.rank;
        for _ in 1..n {
            peer += 1;
            if peer == n {
                peer = 0;
            }
            self.gin
                .post_signal(coop, &self.team, peer, SignalOp::Set, slot, value, strong)?;
        }
        Ok(())
    }

    /// Waits until every other member has arrived at the current round, then advances the
    /// epoch. Every thread of `coop` calls it; the group shares the waiting.
    ///
    /// # Ordering
    /// Acquire at system scope on the arrival signals.
    ///
    /// # Errors
    /// [`WaitError`] on the context's timeout or on abort (the same on every thread).
    #[inline(always)]
    pub fn wait(&mut self, coop: &C) -> Result<(), WaitError> {
        let n = self.team.n_ranks;
        let target = self.epoch.wrapping_add(1);
        let mut res = Ok(());
        let mut i = coop.thread_rank() as i32;
        while i < n - 1 && res.is_ok() {
            let mut peer = self.team.rank + 1 + i;
            if peer >= n {
                peer -= n;
            }
            let word = self.gin.signal_word(self.base + peer as u32);
            // SAFETY: a barrier signal of the live signal array.
            res = unsafe { self.gin.wait_word(word, target) }.map(|_| ());
            i += coop.size() as i32;
        }
        share_result(coop, res)?;
        self.epoch = target;
        Ok(())
    }

    /// [`arrive`](Self::arrive) then [`wait`](Self::wait) (NCCL's `sync(coop, order,
    /// fenceLevel)`). `order` is accepted for that shape: GIN barriers always release the
    /// group's writes and acquire the peers' (a post fences at system scope, waits acquire).
    ///
    /// # Errors
    /// As [`arrive`](Self::arrive) and [`wait`](Self::wait).
    #[inline(always)]
    pub fn sync(&mut self, coop: &C, order: Ordering, fence: GinFence) -> Result<(), WaitError> {
        let _ = order;
        self.arrive(coop, fence)?;
        self.wait(coop)
    }

    /// Ends the session: the group's rank 0 writes the epoch back for the next session on
    /// this barrier, then the group syncs. Every thread of `coop` calls it.
    #[inline(always)]
    pub fn finish(self, coop: &C) {
        if coop.is_leader() {
            // SAFETY: our own epoch word (session contract).
            unsafe { mem::store(self.epoch_word, self.epoch, StoreOrder::Relaxed, Scope::Gpu) };
        }
        coop.sync();
    }
}

/// The hybrid barrier over the whole world (NCCL's `ncclBarrierSession`): LSA barrier `index`
/// inside the node, then rail GIN barrier `index` across the nodes (skipped on one node).
/// When a rank leaves, every rank of every node has arrived: its node's through the LSA
/// barrier, and each other node's through that node's rail peer, which left its own LSA
/// barrier before arriving at the rail barrier.
#[doc(alias = "ncclBarrierSession")]
#[must_use = "a barrier session must be finished with `finish(&coop)`"]
#[derive(Debug)]
pub struct Barrier<C: Coop> {
    lsa: LsaBarrier<C>,
    gin: Option<GinBarrier<C>>,
}

impl<C: Coop> Barrier<C> {
    /// Session on LSA barrier `index` and rail GIN barrier `index` of `comm`, posting on
    /// `gin`'s context.
    ///
    /// # Safety
    /// The contracts of [`LsaBarrier::new`] and [`GinBarrier::rail`] for `index`.
    #[inline(always)]
    pub unsafe fn new(coop: &C, gin: &Gin, comm: &DevComm, index: u32) -> Self {
        // SAFETY: forwarded.
        let lsa = unsafe { LsaBarrier::new(coop, comm, index) };
        let gin = if comm.rail_team().n_ranks > 1 {
            // SAFETY: forwarded.
            Some(unsafe { GinBarrier::rail(coop, gin, comm, index) })
        } else {
            None
        };
        Barrier { lsa, gin }
    }

    /// The LSA half.
    pub fn lsa_barrier(&mut self) -> &mut LsaBarrier<C> {
        &mut self.lsa
    }

    /// The GIN half (`None` on one node).
    pub fn gin_barrier(&mut self) -> Option<&mut GinBarrier<C>> {
        self.gin.as_mut()
    }

    /// The LSA barrier's `sync(order)` (bounded by the GIN context's timeout), then the rail
    /// GIN barrier's `sync(fence)`.
    ///
    /// # Ordering
    /// LSA memory as the LSA barrier's `order`; GIN puts between rail peers as `fence`.
    ///
    /// # Errors
    /// The first [`WaitError`] of either half.
    #[inline(always)]
    pub fn sync(&mut self, coop: &C, order: Ordering, fence: GinFence) -> Result<(), WaitError> {
        let timeout = self
            .gin
            .as_ref()
            .map_or(crate::wait::NO_TIMEOUT, |g| g.gin.timeout_ns);
        self.lsa.sync_timeout(coop, order, timeout)?;
        match &mut self.gin {
            Some(g) => g.sync(coop, order, fence),
            None => Ok(()),
        }
    }

    /// Ends both sessions. Every thread of `coop` calls it.
    #[inline(always)]
    pub fn finish(self, coop: &C) {
        self.lsa.finish(coop);
        if let Some(g) = self.gin {
            g.finish(coop);
        }
    }
}
