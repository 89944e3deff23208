//! The GIN context ([`Gin`]) and its operations, remote and local actions, the values
//! `put_value` takes; the contracts are in the [module documentation](super).

use super::descriptor::{Descriptor, GinConnection, GinHandle, Op, SignalOp};

use crate::check;
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::mem::{self, LoadOrder, Ordering, Scope, StoreOrder, U64x2};
use crate::ptr::SymPtr;
use crate::team::Team;
use crate::wait::{NO_TIMEOUT, Spin, WaitError};
use crate::window::{Window, WindowHandle};

/// What happens at the peer when an operation is applied there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteAction {
    /// Nothing (a plain put; its landing is seen only through a later strong signal).
    None,
    /// Signal `signal` += 1.
    Inc {
        /// Signal index at the peer.
        signal: u32,
        /// Strong (after every earlier operation of the context to that peer) or weak.
        strong: bool,
    },
    /// Signal `signal` += `value`.
    Add {
        /// Signal index at the peer.
        signal: u32,
        /// The operand.
        value: u64,
        /// Strong or weak.
        strong: bool,
    },
    /// Signal `signal` = `value` (see the module docs).
    Set {
        /// Signal index at the peer.
        signal: u32,
        /// The operand.
        value: u64,
        /// Strong or weak.
        strong: bool,
    },
}

impl RemoteAction {
    /// A strong increment of `signal` (NCCL's `ncclGin_SignalInc`).
    #[doc(alias = "ncclGin_SignalInc")]
    pub const fn inc(signal: u32) -> RemoteAction {
        RemoteAction::Inc {
            signal,
            strong: true,
        }
    }
    /// A strong add (NCCL's `ncclGin_SignalAdd`).
    #[doc(alias = "ncclGin_SignalAdd")]
    pub const fn add(signal: u32, value: u64) -> RemoteAction {
        RemoteAction::Add {
            signal,
            value,
            strong: true,
        }
    }
    /// A strong set.
    pub const fn set(signal: u32, value: u64) -> RemoteAction {
        RemoteAction::Set {
            signal,
            value,
            strong: true,
        }
    }
    /// The same action, weak: it promises only the landing of the put it is attached to.
    pub const fn weak(self) -> RemoteAction {
        match self {
            RemoteAction::None => RemoteAction::None,
            RemoteAction::Inc { signal, .. } => RemoteAction::Inc {
                signal,
                strong: false,
            },
            RemoteAction::Add { signal, value, .. } => RemoteAction::Add {
                signal,
                value,
                strong: false,
            },
            RemoteAction::Set { signal, value, .. } => RemoteAction::Set {
                signal,
                value,
                strong: false,
            },
        }
    }

    /// (op, signal, operand, strong).
    const fn parts(self) -> (SignalOp, u32, u64, bool) {
        match self {
            RemoteAction::None => (SignalOp::None, 0, 0, false),
            RemoteAction::Inc { signal, strong } => (SignalOp::Inc, signal, 1, strong),
            RemoteAction::Add {
                signal,
                value,
                strong,
            } => (SignalOp::Add, signal, value, strong),
            RemoteAction::Set {
                signal,
                value,
                strong,
            } => (SignalOp::Set, signal, value, strong),
        }
    }
}

/// What happens on this rank when an operation has completed locally (its source may be
/// reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalAction {
    /// Nothing.
    None,
    /// Counter `.0` += 1 (NCCL's `ncclGin_CounterInc`).
    #[doc(alias = "ncclGin_CounterInc")]
    Counter(u32),
}

/// Values [`Gin::put_value`] writes: plain integers and floats of at most 8 bytes.
pub trait GinValue: Copy + sealed::Sealed {
    /// The value's bytes, little-endian in the low bytes of a `u64`.
    fn to_bits(self) -> u64;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! gin_value {
    ($($t:ty => $bits:expr),*) => {$(
        impl sealed::Sealed for $t {}
        impl GinValue for $t {
            #[inline(always)]
            fn to_bits(self) -> u64 {
                let f: fn($t) -> u64 = $bits;
                f(self)
            }
        }
    )*};
}

gin_value!(
    u8 => |v| v as u64, u16 => |v| v as u64, u32 => |v| v as u64, u64 => |v| v,
    i8 => |v| v as u8 as u64, i16 => |v| v as u16 as u64, i32 => |v| v as u32 as u64,
    i64 => |v| v as u64, f32 => |v| v.to_bits() as u64, f64 => |v| v.to_bits()
);

/// One GIN context of a device communicator (NCCL's `ncclGin`). Cheap to make: plain copies
/// of the communicator's fields.
#[doc(alias = "ncclGin")]
#[derive(Debug, Clone, Copy)]
pub struct Gin {
    h: GinHandle,
    context: u32,
    rank: i32,
    n_ranks: i32,
    lsa_rank: i32,
    lsa_size: i32,
    pub(crate) abort_flag: *const u32,
    pub(crate) timeout_ns: u64,
}

impl Gin {
    /// Context `context` of `comm` (in `0..n_contexts`; a communicator without GIN has none, and
    /// any index stops the kernel with a message).
    #[inline(always)]
    pub fn new(comm: &DevComm, context: u32) -> Gin {
        let h = comm.gin;
        if context >= h.n_contexts {
            check::gin_context(context, h.n_contexts);
        }
        Gin {
            h,
            context,
            rank: comm.rank,
            n_ranks: comm.n_ranks,
            lsa_rank: comm.lsa_rank,
            lsa_size: comm.lsa_size,
            abort_flag: comm.abort_flag_ptr(),
            timeout_ns: NO_TIMEOUT,
        }
    }

    /// The same context with every wait bounded by `timeout_ns` nanoseconds
    /// ([`NO_TIMEOUT`] for none: waits then end only on success or abort).
    #[inline(always)]
    pub const fn with_timeout(mut self, timeout_ns: u64) -> Gin {
        self.timeout_ns = timeout_ns;
        self
    }

    /// The context index.
    #[inline(always)]
    pub const fn context(&self) -> u32 {
        self.context
    }

    /// Puts `bytes` bytes from this rank's `src` window at `src_off` into `peer`'s (a member of
    /// `team`) `dst` window at `dst_off`, then applies `remote` there and `local` here (NCCL's
    /// `ncclGin::put`). Every thread of `coop` calls it; one posts.
    ///
    /// # Safety
    /// - `dst` and `src` are live windows of this communicator registered for GIN (every
    ///   rank's), unchanged while the operation is in flight;
    /// - the source bytes do not change until the operation has completed locally (counter or
    ///   [`Gin::flush`]); nobody else writes the destination bytes until they have landed.
    ///
    /// # Ordering
    /// Writes of every thread of `coop` made before the call are in the data sent (the group
    /// synchronises, then the posting thread fences at system scope).
    ///
    /// # Errors
    /// [`WaitError`] when the ring stays full past the timeout, or the abort flag is raised.
    #[doc(alias = "ncclGin::put")]
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn put<C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        dst: WindowHandle,
        dst_off: usize,
        src: WindowHandle,
        src_off: usize,
        bytes: usize,
        remote: RemoteAction,
        local: LocalAction,
    ) -> Result<(), WaitError> {
        let (sop, signal, operand, strong) = remote.parts();
        self.check_actions(sop, signal, local);
        // SAFETY: the caller guarantees live, registered windows.
        let (dw, sw) = unsafe { (self.window_id(dst), self.window_id(src)) };
        let d = Descriptor::new(
            Op::Put,
            sop,
            strong,
            signal,
            operand,
            counter_of(local),
            dw,
            dst_off as u64,
            sw,
            src_off as u64,
            bytes as u64,
            0,
            0,
        );
        self.post_from(coop, team, peer, &d)
    }

    /// [`Gin::put`] of `count` elements from `src` (this rank's copy) to `dst` (the peer's),
    /// both in windows registered for GIN.
    ///
    /// # Safety
    /// As [`Gin::put`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn put_sym<T, C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        dst: SymPtr<T>,
        src: SymPtr<T>,
        count: usize,
        remote: RemoteAction,
        local: LocalAction,
    ) -> Result<(), WaitError> {
        // SAFETY: forwarded contract.
        unsafe {
            self.put(
                coop,
                team,
                peer,
                dst.window,
                dst.offset,
                src.window,
                src.offset,
                count * core::mem::size_of::<T>(),
                remote,
                local,
            )
        }
    }

    /// Writes `value` (at most 8 bytes, carried in the descriptor: nothing to keep alive) into
    /// `peer`'s `dst` window at `dst_off`, then applies `remote` there (NCCL's
    /// `ncclGin::putValue`). Every thread of `coop` calls it; one posts.
    ///
    /// # Safety
    /// - `dst` is a live window registered for GIN; `dst_off` is aligned for `T`.
    ///
    /// # Ordering
    /// As [`Gin::put`].
    ///
    /// # Errors
    /// As [`Gin::put`].
    #[doc(alias = "ncclGin::putValue")]
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn put_value<T: GinValue, C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        dst: WindowHandle,
        dst_off: usize,
        value: T,
        remote: RemoteAction,
    ) -> Result<(), WaitError> {
        let size = core::mem::size_of::<T>();
        if size > 8 {
            check::gin_value(size);
        }
        let (sop, signal, operand, strong) = remote.parts();
        self.check_actions(sop, signal, LocalAction::None);
        // SAFETY: the caller guarantees a live, registered window.
        let dw = unsafe { self.window_id(dst) };
        let d = Descriptor::new(
            Op::PutValue,
            sop,
            strong,
            signal,
            operand,
            None,
            dw,
            dst_off as u64,
            0,
            0,
            0,
            value.to_bits(),
            size as u32,
        );
        self.post_from(coop, team, peer, &d)
    }

    /// Applies `action` at `peer` with no data (NCCL's `ncclGin::signal`). A strong signal is
    /// seen only after every earlier operation of this context to that peer has landed; a weak
    /// one may be seen before them. Every thread of `coop` calls it; one posts.
    ///
    /// `RemoteAction::None` posts nothing.
    ///
    /// # Errors
    /// As [`Gin::put`].
    #[doc(alias = "ncclGin::signal")]
    #[inline(always)]
    pub fn signal<C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        action: RemoteAction,
    ) -> Result<(), WaitError> {
        let (sop, signal, operand, strong) = action.parts();
        if let SignalOp::None = sop {
            return Ok(());
        }
        self.check_actions(sop, signal, LocalAction::None);
        let d = Descriptor::new(
            Op::Signal,
            sop,
            strong,
            signal,
            operand,
            None,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        );
        self.post_from(coop, team, peer, &d)
    }

    /// Waits until the proxy has taken every operation posted to this context (by any thread)
    /// before the call: their sources may be reused. It does **not** mean the data has landed
    /// remotely (signals say that). Every thread of `coop` calls it; the group shares the
    /// waiting over the peers.
    ///
    /// # Ordering
    /// Acquire at system scope on the proxy's consumer indices.
    ///
    /// # Errors
    /// [`WaitError`] on timeout or abort (every thread of the group gets the same kind).
    #[doc(alias = "ncclGin::flush")]
    #[inline(always)]
    pub fn flush<C: Coop>(&self, coop: &C) -> Result<(), WaitError> {
        let mut res = Ok(());
        let mut slot = coop.thread_rank();
        while slot < self.h.peer_slots && res.is_ok() {
            let ring = self.ring(slot);
            // SAFETY: `ring` < rings (slot < peer_slots, context < n_contexts): both arrays
            // hold one u64 per ring.
            let target = unsafe { mem::load(self.producer(ring), LoadOrder::Relaxed, Scope::Gpu) };
            let cons = self.consumer(ring);
            // SAFETY: as above; the abort flag is the communicator's.
            let mut spin = unsafe { Spin::new(self.abort_flag, self.timeout_ns) };
            // SAFETY: as above.
            res =
                spin.until(|| unsafe { mem::load(cons, LoadOrder::Acquire, Scope::Sys) } >= target);
            slot += coop.size();
        }
        share_result(coop, res)
    }

    /// The value of local signal `signal` (acquire at system scope: writes the signal's puts
    /// landed are visible after it).
    #[doc(alias = "ncclGin::readSignal")]
    #[inline(always)]
    pub fn read_signal(&self, signal: u32) -> u64 {
        // SAFETY: `signal_ptr` checks the index; the array lives as long as the communicator.
        unsafe { mem::load(self.signal_ptr(signal), LoadOrder::Acquire, Scope::Sys) }
    }

    /// Waits until local signal `signal` is at least `least` (rolling compare) and returns the
    /// value seen. Acquire at system scope.
    ///
    /// # Errors
    /// [`WaitError`] on timeout or abort.
    #[doc(alias = "ncclGin::waitSignal")]
    #[inline(always)]
    pub fn wait_signal(&self, signal: u32, least: u64) -> Result<u64, WaitError> {
        // SAFETY: `signal_ptr` checks the index into the live signal array.
        unsafe { self.wait_word(self.signal_ptr(signal), least) }
    }

    /// Sets local signal `signal` to 0 (relaxed; only while no operation that updates it is
    /// in flight, or the update may be lost or land on top).
    #[doc(alias = "ncclGin::resetSignal")]
    #[inline(always)]
    pub fn reset_signal(&self, signal: u32) {
        // SAFETY: a checked index of the live signal array.
        unsafe { mem::store(self.signal_ptr(signal), 0, StoreOrder::Relaxed, Scope::Sys) }
    }

    /// The value of local counter `counter` (acquire at system scope).
    #[doc(alias = "ncclGin::readCounter")]
    #[inline(always)]
    pub fn read_counter(&self, counter: u32) -> u64 {
        // SAFETY: `counter_ptr` checks the index.
        unsafe { mem::load(self.counter_ptr(counter), LoadOrder::Acquire, Scope::Sys) }
    }

    /// Waits until local counter `counter` is at least `least` (rolling compare): that many
    /// operations carrying it have completed locally, and their sources may be reused.
    ///
    /// # Errors
    /// [`WaitError`] on timeout or abort.
    #[doc(alias = "ncclGin::waitCounter")]
    #[inline(always)]
    pub fn wait_counter(&self, counter: u32, least: u64) -> Result<u64, WaitError> {
        // SAFETY: `counter_ptr` checks the index into the live counter array.
        unsafe { self.wait_word(self.counter_ptr(counter), least) }
    }

    /// Waits until the word at `p` reaches `least` (rolling compare), reading it with acquire
    /// at system scope; its value then. Bounded by this `Gin`'s timeout and the abort flag.
    ///
    /// # Safety
    /// `p` is a word of this communicator's signals or counters (mapped host memory, live while
    /// the communicator is).
    #[inline(always)]
    pub(crate) unsafe fn wait_word(&self, p: *const u64, least: u64) -> Result<u64, WaitError> {
        // SAFETY: the communicator's abort flag.
        let mut spin = unsafe { Spin::new(self.abort_flag, self.timeout_ns) };
        loop {
            // SAFETY: the caller's contract.
            let v = unsafe { mem::load(p, LoadOrder::Acquire, Scope::Sys) };
            if rolling_ge(v, least) {
                return Ok(v);
            }
            spin.check()?;
        }
    }

    /// Sets local counter `counter` to 0 (only while no operation carrying it is in flight).
    #[doc(alias = "ncclGin::resetCounter")]
    #[inline(always)]
    pub fn reset_counter(&self, counter: u32) {
        // SAFETY: a checked index of the live counter array.
        unsafe {
            mem::store(
                self.counter_ptr(counter),
                0,
                StoreOrder::Relaxed,
                Scope::Sys,
            )
        }
    }

    // ---- internals ----

    /// Posts a data-less signal action on signal `signal` (any index of the array, barrier
    /// signals included; checked against the whole array) to `peer` of `team`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn post_signal<C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        op: SignalOp,
        signal: u32,
        value: u64,
        strong: bool,
    ) -> Result<(), WaitError> {
        let d = Descriptor::new(
            Op::Signal,
            op,
            strong,
            signal,
            value,
            None,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        );
        self.post_from(coop, team, peer, &d)
    }

    /// The address of signal `index` of the whole array (user and barrier signals).
    #[inline(always)]
    pub(crate) fn signal_word(&self, index: u32) -> *mut u64 {
        (self.h.signals + index as u64 * 8) as *mut u64
    }

    #[inline(always)]
    fn check_actions(&self, sop: SignalOp, signal: u32, local: LocalAction) {
        if !matches!(sop, SignalOp::None) && signal >= self.h.n_signals {
            check::gin_signal(signal, self.h.n_signals);
        }
        if let LocalAction::Counter(c) = local
            && c >= self.h.n_counters
        {
            check::gin_counter(c, self.h.n_counters);
        }
    }

    /// The GIN id of a window (its `gin_wins` slot for this context).
    ///
    /// # Safety
    /// `w` is a live window descriptor.
    #[inline(always)]
    unsafe fn window_id(&self, w: WindowHandle) -> u32 {
        let slot = self.context & 3;
        let desc: *const Window = w.as_ptr();
        // SAFETY: a live descriptor (caller), unchanged while kernels run.
        let id = unsafe {
            mem::load_const(
                core::ptr::addr_of!((*desc).gin_wins)
                    .cast::<u64>()
                    .add(slot as usize),
            )
        };
        if id == 0 || id > u32::MAX as u64 {
            check::gin_window(slot);
        }
        id as u32
    }

    /// The ring slot of world peer `w`.
    #[inline(always)]
    fn peer_slot(&self, w: i32) -> u32 {
        if w < 0 || w >= self.n_ranks {
            check::gin_peer(w, self.n_ranks);
        }
        if self.h.connection == GinConnection::Rail as u32 {
            let ls = self.lsa_size;
            if w % ls != self.lsa_rank {
                check::gin_peer(w, self.n_ranks);
            }
            (w / ls) as u32
        } else {
            w as u32
        }
    }

    #[inline(always)]
    fn ring(&self, slot: u32) -> u64 {
        self.context as u64 * self.h.peer_slots as u64 + slot as u64
    }

    #[inline(always)]
    fn producer(&self, ring: u64) -> *mut u64 {
        (self.h.producers + ring * 8) as *mut u64
    }

    /// The cached credit limit of `ring`: after the producer indices (one `u64` per ring).
    #[inline(always)]
    fn limit(&self, ring: u64) -> *mut u64 {
        let rings = self.h.n_contexts as u64 * self.h.peer_slots as u64;
        (self.h.producers + (rings + ring) * 8) as *mut u64
    }

    #[inline(always)]
    fn consumer(&self, ring: u64) -> *const u64 {
        (self.h.consumers + ring * 8) as *const u64
    }

    #[inline(always)]
    fn signal_ptr(&self, signal: u32) -> *mut u64 {
        if signal >= self.h.n_signals {
            check::gin_signal(signal, self.h.n_signals);
        }
        (self.h.signals + signal as u64 * 8) as *mut u64
    }

    #[inline(always)]
    fn counter_ptr(&self, counter: u32) -> *mut u64 {
        if counter >= self.h.n_counters {
            check::gin_counter(counter, self.h.n_counters);
        }
        (self.h.counters + counter as u64 * 8) as *mut u64
    }

    /// Every thread of `coop`: synchronise, then thread 0 posts `d` to `peer` of `team`; the
    /// group shares the result.
    #[inline(always)]
    fn post_from<C: Coop>(
        &self,
        coop: &C,
        team: &Team,
        peer: i32,
        d: &Descriptor,
    ) -> Result<(), WaitError> {
        if peer < 0 || peer >= team.n_ranks {
            check::member_outside_team(peer, team.n_ranks);
        }
        let slot = self.peer_slot(team.to_world(self.rank, peer));
        coop.sync();
        let mut res = Ok(());
        if coop.thread_rank() == 0 {
            // The group's writes are ordered before ours by the sync; `post` fences at system
            // scope before it stamps the entry, so they reach the system before the proxy can
            // see the descriptor, hence before it reads the source.
            // SAFETY: `slot` < peer_slots and context < n_contexts (both checked).
            res = unsafe { self.post(self.ring(slot), d) };
        }
        share_result(coop, res)
    }

    /// Waits for credit, takes a ring index, writes the descriptor, then its stamp.
    ///
    /// The index is taken only once its entry is free (a compare-and-swap on the producer
    /// index after the credit check), so a wait that gives up leaves no index behind: the
    /// proxy takes entries strictly in order, and a taken index that is never stamped would
    /// stop the ring for good.
    ///
    /// # Safety
    /// `ring` < `n_contexts × peer_slots`.
    #[inline(always)]
    unsafe fn post(&self, ring: u64, d: &Descriptor) -> Result<(), WaitError> {
        let depth = self.h.queue_depth as u64;
        let prod = self.producer(ring);
        let cons = self.consumer(ring);
        // SAFETY: the communicator's abort flag.
        let mut spin = unsafe { Spin::new(self.abort_flag, self.timeout_ns) };
        // The credit limit last seen (consumer + depth), cached in device memory next to the
        // producer indices: a post reads the consumer index across the bus only when the cache
        // says the ring may be full. The cache never exceeds the true limit (the consumer only
        // grows; a stale smaller value only costs a read), and it is published with release
        // after an acquiring read of the consumer, so acquiring it orders our overwrite after
        // the proxy's reading of the entry, as reading the consumer itself would.
        let limit = self.limit(ring);
        let index = loop {
            // SAFETY: one u64 per ring in device memory (caller's index).
            let p = unsafe { mem::load(prod, LoadOrder::Relaxed, Scope::Gpu) };
            // SAFETY: one u64 per ring in device memory, after the producers.
            let mut lim = unsafe { mem::load(limit, LoadOrder::Acquire, Scope::Gpu) };
            if p >= lim {
                // Acquire: the proxy has finished reading the entry we are about to overwrite.
                // SAFETY: one u64 per ring in mapped host memory.
                lim = unsafe { mem::load(cons, LoadOrder::Acquire, Scope::Sys) } + depth;
                // SAFETY: as above.
                unsafe { mem::store(limit, lim, StoreOrder::Release, Scope::Gpu) };
                if p >= lim {
                    spin.check()?;
                    continue;
                }
            }
            // SAFETY: as above.
            if unsafe { mem::atomic_cas(prod, p, p + 1, Ordering::Relaxed, Scope::Gpu) } == p {
                break p;
            }
        };
        let entry = (self.h.rings + (ring * depth + (index & (depth - 1))) * 128) as *mut u64;
        let mut k = 0;
        while k < Descriptor::STAMP - 1 {
            let pair = U64x2([d.words[k], d.words[k + 1]]);
            // SAFETY: the entry is 128 bytes of the ring, 16-byte aligned (rings are
            // page-aligned, entries 128 bytes), ours until we stamp it.
            unsafe {
                mem::store_v2_u64(entry.add(k).cast(), pair, StoreOrder::Relaxed, Scope::Sys)
            };
            k += 2;
        }
        // SAFETY: word 14 of the same entry.
        unsafe { mem::store(entry.add(14), d.words[14], StoreOrder::Relaxed, Scope::Sys) };
        // The whole entry, and every write of the posting group before the post, before the
        // stamp, as the proxy (another agent) sees it.
        mem::fence_sc(Scope::Sys);
        // SAFETY: the stamp word of the same entry.
        unsafe {
            mem::store(
                entry.add(Descriptor::STAMP),
                index + 1,
                StoreOrder::Relaxed,
                Scope::Sys,
            )
        };
        Ok(())
    }
}

/// `v ≥ least` on a 64-bit wrapping counter.
#[inline(always)]
pub const fn rolling_ge(v: u64, least: u64) -> bool {
    (v.wrapping_sub(least) as i64) >= 0
}

#[inline(always)]
fn counter_of(local: LocalAction) -> Option<u32> {
    match local {
        LocalAction::None => None,
        LocalAction::Counter(c) => Some(c),
    }
}

/// Gives every thread of `coop` the same result: `Err` if any thread failed, `Aborted` if any
/// saw an abort, else `Timeout`.
#[inline(always)]
pub(crate) fn share_result<C: Coop>(coop: &C, res: Result<(), WaitError>) -> Result<(), WaitError> {
    if !coop.any(res.is_err()) {
        return Ok(());
    }
    if coop.any(res == Err(WaitError::Aborted)) {
        Err(WaitError::Aborted)
    } else {
        Err(WaitError::Timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip_their_fields() {
        let d = Descriptor::new(
            Op::Put,
            SignalOp::Set,
            true,
            7,
            99,
            Some(3),
            5,
            4096,
            6,
            12,
            1000,
            0,
            0,
        );
        assert_eq!(d.op(), Some(Op::Put));
        assert_eq!(d.signal_op(), Some(SignalOp::Set));
        assert!(d.strong());
        assert_eq!(
            (d.signal(), d.signal_value(), d.counter()),
            (7, 99, Some(3))
        );
        assert_eq!(
            (d.dst_win(), d.dst_off(), d.src_win(), d.src_off()),
            (5, 4096, 6, 12)
        );
        assert_eq!(d.bytes(), 1000);
        let v = Descriptor::new(
            Op::PutValue,
            SignalOp::None,
            false,
            0,
            0,
            None,
            1,
            8,
            0,
            0,
            0,
            (-2i32).to_bits(),
            4,
        );
        assert_eq!(
            (v.value(), v.value_size(), v.counter()),
            (0xffff_fffe, 4, None)
        );
        assert!(!v.strong());
    }

    #[test]
    fn rolling_compares_wrap() {
        assert!(rolling_ge(5, 5));
        assert!(!rolling_ge(4, 5));
        assert!(rolling_ge(2, u64::MAX - 1));
        assert!(!rolling_ge(u64::MAX - 1, 2));
    }
}
