//! Pipelined push: all-reduce and reduce-scatter in which every NVLink transfer is a store,
//! paced per block by counters instead of barriers.
//!
//! Rank `r` owns slice `r` of the data. Each block walks its share of every slice in *steps*
//! of `chunk` packs and, per step, has two halves:
//!
//! - **push** (step `i`): store this rank's part of slice `p` into slot `i mod slots` of
//!   peer `p`'s push scratch, for every peer, then raise `ready` in every peer to `i + 1`;
//!   before reusing a slot, wait until every peer's `freed` for us says it consumed step
//!   `i − slots` from it;
//! - **reduce** (step `i`): wait until every peer's `ready` is `i + 1`, reduce this rank's
//!   own part with the slots (local reads, rank order: the same bits on every rank) and store
//!   the result into every peer's `dst` (all-reduce) or this rank's `dst` (reduce-scatter),
//!   then raise `freed` in every peer to `i + 1`.
//!
//! A block pushes step `i + 1` before reducing step `i`, so with two or more slots the
//! signal latency hides behind data movement. Counters are `u32`s in the push scratch that
//! only their owner zeroes (at launch start, before the entry barrier) and only peers raise;
//! every signal sent in a launch is awaited in that launch (the last `slots` `freed` signals
//! are not sent), so nothing is in flight when the next launch zeroes them.
//!
//! Ordering: a signal is `bar.sync` + a system-scope release fence + a relaxed system-scope
//! store by one thread per peer (the same pattern as the LSA barrier's arrive); a wait is an
//! acquire system-scope load by one thread per peer followed by `bar.sync`.
//!
//! Barriers: one entry barrier (peers have zeroed their counters and are done with their
//! previous use of `dst`); the all-reduce adds an exit barrier (its stores into peers' `dst`
//! are visible when any rank returns); the reduce-scatter needs none (its output is local and
//! nobody reads its input).

use symcomm_device::arch::{block_idx, grid_dim};
use symcomm_device::barrier::LsaBarrier;
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::mem::{self, LoadOrder, Ordering, Scope, StoreOrder};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::{Spin, WaitError};

use crate::common::{Acc, Io, by_shape, ld, local_addr, pack_off, peer_addr, report, rotated, st};
use crate::plan;
use crate::shape::{Dst, Span, Src};

/// What a pipelined kernel computes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// All-reduce of `bytes`: slice `p` = `plan::slice(packs, n, p)` of the packs of `dst`;
    /// results go to every rank's `dst` at the slice's offset.
    AllReduce,
    /// Reduce-scatter of `n × bytes`: slice `p` = block `p` of `src` (`bytes`) in the packs of
    /// `dst`; the result goes to this rank's `dst` (`bytes`).
    ReduceScatter,
}

/// One block's view of a pipelined launch.
struct Pipe<const ANY: bool> {
    kind: Kind,
    me: i32,
    n: i32,
    g: u64,
    b: u64,
    t: u64,
    nt: u64,
    /// Packs of `dst` (all-reduce) or of this rank's `dst` (reduce-scatter).
    packs: u64,
    /// Bytes of `dst`.
    bytes: u64,
    /// Where `dst` lies in its packs.
    span: Span<ANY>,
    /// Packs of the largest slice (every slice but the last ones of an all-reduce).
    slice: u64,
    /// Packs of each block's part of a slice (of the largest one; smaller slices are cut).
    part: u64,
    slots: u64,
    chunk: u64,
    push: SymPtr<u8>,
    push_local: u64,
    inp: u64,
    abort: *const u32,
    timeout_ns: u64,
}

impl<const ANY: bool> Pipe<ANY> {
    /// `(first pack, packs)` of slice `p` in the packs of `dst` (all-reduce) or of block `p`
    /// (reduce-scatter): `plan::slice` without its division (hoisted into `slice`).
    #[inline(always)]
    fn slice_of(&self, p: i32) -> (u64, u64) {
        match self.kind {
            Kind::AllReduce => {
                let lo = (p as u64 * self.slice).min(self.packs);
                (lo, (lo + self.slice).min(self.packs) - lo)
            }
            Kind::ReduceScatter => (0, self.packs),
        }
    }

    /// The local source of slice `p`, read in the packs of `dst`.
    #[inline(always)]
    fn src_of(&self, p: i32) -> Src<ANY> {
        match self.kind {
            Kind::AllReduce => Src::at(self.inp, self.span),
            Kind::ReduceScatter => Src::at(self.inp + p as u64 * self.bytes, self.span),
        }
    }

    /// `(first, end)` of this block's part of slice `p`, relative to the slice: parts of
    /// `part` packs cut at the slice's end, the same split on every rank.
    #[inline(always)]
    fn part(&self, p: i32) -> (u64, u64) {
        let len = self.slice_of(p).1;
        let lo = (self.b * self.part).min(len);
        (lo, (lo + self.part).min(len))
    }

    /// Local address of this block's counter for peer `s`.
    #[inline(always)]
    fn counter(&self, s: i32, freed: bool) -> *mut u32 {
        let w = plan::pipe_flag_word(self.g, self.n as u64, self.b, s as u64, freed);
        (self.push_local + 4 * w) as *mut u32
    }

    /// Address of this block's slot `q` for sender `me` in peer `p`'s push scratch.
    ///
    /// # Safety
    /// `push` is a live window.
    #[inline(always)]
    unsafe fn peer_slot(&self, p: i32, q: u64) -> u64 {
        let (g, n) = (self.g, self.n as u64);
        let off = plan::pipe_slot_off(g, n, self.slots, self.chunk, self.b, self.me as u64, q);
        // SAFETY: forwarded.
        unsafe { peer_addr(self.push, p) + off }
    }

    /// Address of this block's slot `q` from sender `s` in our own push scratch.
    #[inline(always)]
    fn local_slot(&self, s: i32, q: u64) -> u64 {
        let (g, n) = (self.g, self.n as u64);
        self.push_local + plan::pipe_slot_off(g, n, self.slots, self.chunk, self.b, s as u64, q)
    }

    /// Waits (one thread per peer) until every peer's counter of kind `freed` is at least
    /// `target`; the same result on every thread of the block.
    #[inline(always)]
    fn wait_all(&self, cta: &Cta, freed: bool, target: u32) -> Result<(), WaitError> {
        let mut r = Ok(());
        let mut s = self.t;
        while s < self.n as u64 && r.is_ok() {
            if s as i32 != self.me {
                let word = self.counter(s as i32, freed);
                // SAFETY: the abort flag comes from the comm (caller's contract).
                let mut spin = unsafe { Spin::new(self.abort, self.timeout_ns) };
                r = spin.until(|| {
                    // SAFETY: our own counter in the push scratch.
                    unsafe { mem::load(word, LoadOrder::Acquire, Scope::Sys) >= target }
                });
            }
            s += self.nt;
        }
        if cta.any(r.is_err()) {
            return Err(if cta.any(r == Err(WaitError::Aborted)) {
                WaitError::Aborted
            } else {
                WaitError::Timeout
            });
        }
        Ok(())
    }

    // ANCHOR: pipe_signal
    /// Raises this rank's counter of kind `freed` to `value` in every peer, after every
    /// thread of the block is done with the step (see the module docs for the order).
    ///
    /// # Safety
    /// `push` is a live window.
    #[inline(always)]
    unsafe fn signal_all(&self, cta: &Cta, freed: bool, value: u32) {
        cta.sync();
        let mut p = self.t;
        while p < self.n as u64 {
            if p as i32 != self.me {
                mem::fence(Ordering::Release, Scope::Sys);
                let w = plan::pipe_flag_word(self.g, self.n as u64, self.b, self.me as u64, freed);
                // SAFETY: the peer's push scratch is mapped; the counter is ours to raise.
                unsafe {
                    let at = (peer_addr(self.push, p as i32) + 4 * w) as *mut u32;
                    mem::store(at, value, StoreOrder::Relaxed, Scope::Sys);
                }
            }
            p += self.nt;
        }
    }

    // ANCHOR_END: pipe_signal

    // ANCHOR: pipe_push
    /// The push half of step `i`.
    ///
    /// # Safety
    /// The kernel's contract.
    #[inline(always)]
    unsafe fn push_step(&self, cta: &Cta, i: u64) -> Result<(), WaitError> {
        if i >= self.slots {
            self.wait_all(cta, true, (i - self.slots + 1) as u32)?;
        }
        let q = i % self.slots;
        let base = i * self.chunk;
        // SAFETY: the kernel's contract (windows, sizes).
        unsafe {
            // Peer by peer, one pack per thread in flight: many warps per SM hide the
            // latency, and the registers stay within a 512-thread block's share.
            for k in 1..self.n {
                let p = rotated(self.me, k, self.n);
                let (off, _) = self.slice_of(p);
                let (lo, hi) = self.part(p);
                let (from, first) = (self.src_of(p), off + lo + base);
                let to = self.peer_slot(p, q);
                let len = (hi - lo).saturating_sub(base).min(self.chunk);
                let mut j = self.t;
                while j < len {
                    st(to + pack_off(j), from.load(first + j));
                    j += self.nt;
                }
            }
            self.signal_all(cta, false, (i + 1) as u32);
        }
        Ok(())
    }

    // ANCHOR_END: pipe_push

    /// The reduce half of step `i`: results to `out` (all-reduce: `dst` in every peer,
    /// reduce-scatter: this rank's `dst`).
    ///
    /// # Safety
    /// The kernel's contract.
    #[inline(always)]
    unsafe fn reduce_step<T: Element, O: ReduceOp>(
        &self,
        cta: &Cta,
        dst: SymPtr<u8>,
        steps: u64,
        i: u64,
    ) -> Result<(), WaitError> {
        self.wait_all(cta, false, (i + 1) as u32)?;
        let q = i % self.slots;
        let base = i * self.chunk;
        let (off, _) = self.slice_of(self.me);
        let (lo, hi) = self.part(self.me);
        let len = (hi - lo).saturating_sub(base).min(self.chunk);
        let (own, first) = (self.src_of(self.me), off + lo + base);
        // Pack j of this step is pack `first + j` of `dst` (all-reduce: every rank's; else ours).
        // SAFETY: the kernel's contract (windows, sizes).
        unsafe {
            let mut j = self.t;
            while j < len {
                let o = pack_off(j);
                let mine = own.load(first + j);
                let at = |s: i32| {
                    if s == self.me {
                        mine
                    } else {
                        ld(self.local_slot(s, q) + o)
                    }
                };
                // 8 and 4 ranks: every load in flight before the first add (whole packs only:
                // with the any-shape loads too, the registers would pass what 512-thread
                // blocks allow).
                let v = if !ANY && self.n == 8 {
                    crate::common::reduce_packs::<T, O, 8>(&core::array::from_fn(|s| at(s as i32)))
                } else if !ANY && self.n == 4 {
                    crate::common::reduce_packs::<T, O, 4>(&core::array::from_fn(|s| at(s as i32)))
                } else {
                    let mut acc = Acc::<T, O>::new(at(0));
                    for s in 1..self.n {
                        acc.add(at(s));
                    }
                    acc.finish()
                };
                match self.kind {
                    Kind::AllReduce => {
                        for k in 0..self.n {
                            let p = rotated(self.me, k, self.n);
                            Dst::at(peer_addr(dst, p), self.span).store(first + j, v);
                        }
                    }
                    Kind::ReduceScatter => Dst::at(local_addr(dst), self.span).store(first + j, v),
                }
                j += self.nt;
            }
            // The last `slots` steps' slots are never reused in this launch: no signal, so
            // none is left in flight for the next launch.
            if i + self.slots < steps {
                self.signal_all(cta, true, (i + 1) as u32);
            }
        }
        Ok(())
    }
}

/// A pipelined push all-reduce or reduce-scatter (see the module docs).
///
/// # Safety
/// - all-reduce: `src` and `dst` hold `bytes` on this rank (`dst` a window, may equal
///   `src`); reduce-scatter: `src` holds `lsa_size × bytes` on this rank, `dst` `bytes`
///   (may be this rank's block of `src`);
/// - `push` is the gallery push scratch, a window of at least
///   `plan::pipe_slot_off(g, n, slots, chunk, g, 0, 0)` bytes on every LSA rank (`g` =
///   `grid_dim().x`), used by no other kernel while this one runs; `slots ≥ 2` (a block
///   pushes step `i + 1` before it frees step `i`'s slots: one slot would deadlock),
///   `chunk ≥ 1`;
/// - `comm` has at least `grid_dim().x` LSA barriers; every LSA rank launches the kernel
///   with the same shape and arguments; `status` is null or a valid `u32` of this device.
#[inline(always)]
pub unsafe fn push_pipeline<T: Element, O: ReduceOp>(
    kind: Kind,
    comm: &DevComm,
    io: Io,
    push: SymPtr<u8>,
    slots: u64,
    chunk: u64,
    timeout_ns: u64,
    status: *mut u32,
    any: bool,
) {
    // SAFETY: forwarded.
    unsafe {
        by_shape!(
            any,
            push_pipeline_in::<T, O>(kind, comm, io, push, slots, chunk, timeout_ns, status)
        )
    }
}

#[inline(always)]
unsafe fn push_pipeline_in<T: Element, O: ReduceOp, const ANY: bool>(
    kind: Kind,
    comm: &DevComm,
    io: Io,
    push: SymPtr<u8>,
    slots: u64,
    chunk: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    let Io { src, dst, bytes } = io;
    let cta = Cta::new();
    // SAFETY: live windows (caller's contract).
    let (inp, push_local, span) = unsafe {
        (
            local_addr(src),
            local_addr(push),
            Span::<ANY>::new(dst.offset as u64, bytes),
        )
    };
    let packs = span.packs();
    let g = u64::from(grid_dim().x);
    let largest = match kind {
        Kind::AllReduce => plan::slice_len(packs, comm.lsa_size as u64),
        Kind::ReduceScatter => packs,
    };
    let pipe = Pipe {
        kind,
        me: comm.lsa_rank,
        n: comm.lsa_size,
        g,
        b: u64::from(block_idx().x),
        t: u64::from(cta.thread_rank()),
        nt: u64::from(cta.size()),
        packs,
        bytes,
        span,
        slice: largest,
        part: largest.div_ceil(g),
        slots,
        chunk: chunk.max(1),
        push,
        push_local,
        inp,
        abort: comm.abort_flag_ptr(),
        timeout_ns,
    };
    // Zero our counters before the entry barrier publishes that we are ready for signals.
    let mut s = pipe.t;
    while s < pipe.n as u64 {
        // SAFETY: our own counters.
        unsafe {
            mem::store(
                pipe.counter(s as i32, false),
                0,
                StoreOrder::Relaxed,
                Scope::Sys,
            );
            mem::store(
                pipe.counter(s as i32, true),
                0,
                StoreOrder::Relaxed,
                Scope::Sys,
            );
        }
        s += pipe.nt;
    }
    // SAFETY: one session per block index on every rank (caller's contract).
    let mut bar = unsafe { LsaBarrier::new(&cta, comm, block_idx().x) };
    let mut r = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
    let steps = plan::pipe_steps(largest, pipe.g, pipe.chunk);
    // ANCHOR: pipe_loop
    // SAFETY: the caller's contract.
    unsafe {
        if r.is_ok() && steps > 0 {
            r = pipe.push_step(&cta, 0);
        }
        let mut i = 0;
        while r.is_ok() && i < steps {
            if i + 1 < steps {
                r = pipe.push_step(&cta, i + 1);
                if r.is_err() {
                    break;
                }
            }
            r = pipe.reduce_step::<T, O>(&cta, dst, steps, i);
            i += 1;
        }
    }
    if r.is_ok() && kind == Kind::AllReduce {
        r = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
    }
    // ANCHOR_END: pipe_loop
    bar.finish(&cta);
    if cta.is_leader() {
        // SAFETY: forwarded.
        unsafe { report(status, r) };
    }
}
