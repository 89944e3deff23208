//! One resident block's rendezvous, as its threads enter them: block barriers, warp
//! collectives and `activemask`, a blocked thread's wait and a thread leaving its block, with
//! the checks that turn a stuck block into an error; and a thread's lookup of its block's
//! static shared arrays. The slot's state itself is in `slot`.
//!
//! All rendezvous state of a block sits behind one mutex. A thread that must wait registers
//! in the pending rendezvous, counts itself as blocked, releases the mutex and parks until
//! the thread that completes the rendezvous puts the result in its mailbox and unparks it
//! (woken threads never touch the mutex again, so a barrier of 1024 threads releases them
//! without a stampede on it). Because every waiter is counted, "every live thread of the
//! block is blocked" is seen the moment it happens, and reported as a deadlock.

use std::format;
use std::string::String;
use std::sync::MutexGuard;
use std::thread;
use std::vec::Vec;

use super::ctx::{ThreadCtx, cancel};
use super::error::EmuError;
use super::slot::{BlockSync, Mail, N_BARRIERS, PendingBar, PendingWarp, Slot, WarpOp, lock};
use crate::geometry::{Dim3, ShflMode, VoteMode, WARP_SIZE};

impl Slot {
    /// The block's copy of the static shared array `name` (`size` bytes, `align`), zeroed at
    /// block start, for the calling thread (of this slot).
    pub(crate) fn static_shared(
        &self,
        c: &ThreadCtx<'_>,
        name: &'static str,
        size: usize,
        align: usize,
    ) -> *mut u8 {
        if let Some(&(_, p)) = c.smem_cache.borrow().iter().find(|(n, _)| *n == name) {
            return p;
        }
        let p = match self.static_array(name, size, align) {
            Ok(p) => p,
            Err(detail) => misuse(c, detail),
        };
        c.smem_cache.borrow_mut().push((name, p));
        p
    }

    /// `activemask`: the lanes of the caller's warp that reach `activemask` together. The
    /// caller waits until every other lane of its warp that exists and has not exited is
    /// either here too or blocked elsewhere (a barrier, a collective); the lanes here are
    /// the result.
    pub(crate) fn active_mask(&self, c: &ThreadCtx<'_>) -> u32 {
        let mut st = lock(&self.state);
        st.warp_active[c.warp as usize] |= 1 << c.lane;
        match self.wait(st, c) {
            Mail::Word(m) => m,
            other => internal(c, other),
        }
    }

    /// Block barrier `id` over `n` threads (0: the whole block): arrives with `pred` and, unless
    /// `arrive_only`, waits for the barrier to complete. Returns the OR and the popcount of
    /// the participants' predicates.
    pub(crate) fn barrier(
        &self,
        c: &ThreadCtx<'_>,
        id: u32,
        n: u32,
        pred: bool,
        arrive_only: bool,
    ) -> (bool, u32) {
        if id >= N_BARRIERS {
            misuse(c, format!("barrier id {id} (ids are 0..16)"));
        }
        let expected = if n == 0 { self.threads } else { n };
        if n != 0 && !n.is_multiple_of(WARP_SIZE) {
            misuse(
                c,
                format!("barrier {id} with {n} threads (must be a multiple of 32)"),
            );
        }
        if expected > self.threads.next_multiple_of(WARP_SIZE) {
            misuse(
                c,
                format!(
                    "barrier {id} waits for {expected} threads, the block has {}",
                    self.threads
                ),
            );
        }
        let mut guard = lock(&self.state);
        let st = &mut *guard;
        let bar = st.bars[id as usize].get_or_insert_with(|| PendingBar {
            expected,
            arrived: 0,
            or: false,
            count: 0,
            waiters: Vec::new(),
        });
        if bar.expected != expected {
            let other = bar.expected;
            drop(guard);
            misuse(
                c,
                format!("barrier {id} used with {expected} threads while it waits for {other}"),
            );
        }
        bar.arrived += 1;
        bar.or |= pred;
        bar.count += u32::from(pred);
        if bar.arrived == bar.expected {
            let (or, count) = (bar.or, bar.count);
            let waiters = core::mem::take(&mut bar.waiters);
            st.bars[id as usize] = None;
            for w in waiters {
                st.deliver(w, Mail::Bar { or, count });
            }
            self.unlock(guard);
            return (or, count);
        }
        if arrive_only {
            return (false, 0);
        }
        bar.waiters.push(c.linear);
        match self.wait(guard, c) {
            Mail::Bar { or, count } => (or, count),
            other => internal(c, other),
        }
    }

    /// A warp collective over `mask` (restricted to the lanes that exist): every lane of the
    /// mask contributes `word` (and `operand`, the shuffle's lane operand) and gets its result.
    pub(crate) fn warp(
        &self,
        c: &ThreadCtx<'_>,
        op: WarpOp,
        mask: u32,
        word: u32,
        operand: u32,
    ) -> u32 {
        let me = 1u32 << c.lane;
        let mask = mask & self.existing_lanes(c.warp);
        if mask & me == 0 {
            misuse(
                c,
                format!(
                    "{op:?} with lane mask {mask:#010x} that excludes the calling lane {}",
                    c.lane
                ),
            );
        }
        let mut guard = lock(&self.state);
        let st = &mut *guard;
        let w = c.warp as usize;
        let gone = mask & st.warp_exited[w];
        if gone != 0 {
            drop(guard);
            misuse(
                c,
                format!(
                    "{op:?} with lane mask {mask:#010x} names lanes {gone:#010x} that have exited"
                ),
            );
        }
        let pending = &mut st.warps[w];
        let i = match pending.iter().position(|p| p.mask == mask) {
            Some(i) => i,
            None => {
                pending.push(PendingWarp {
                    mask,
                    op,
                    arrived: 0,
                    words: [0; 32],
                    operands: [0; 32],
                });
                pending.len() - 1
            }
        };
        let p = &mut pending[i];
        if p.op != op {
            let other = p.op;
            drop(guard);
            misuse(
                c,
                format!(
                    "lanes of warp {w} meet with mask {mask:#010x} in different collectives: {op:?} and {other:?}"
                ),
            );
        }
        p.words[c.lane as usize] = word;
        p.operands[c.lane as usize] = operand;
        p.arrived |= me;
        if p.arrived != mask {
            return match self.wait(guard, c) {
                Mail::Word(r) => r,
                other => internal(c, other),
            };
        }
        let p = pending.swap_remove(i);
        let mut mine = 0;
        for lane in 0..WARP_SIZE {
            if p.mask & (1 << lane) == 0 {
                continue;
            }
            let r = warp_result(&p, lane);
            if lane == c.lane {
                mine = r;
            } else {
                st.deliver(w as u32 * WARP_SIZE + lane, Mail::Word(r));
            }
        }
        self.unlock(guard);
        mine
    }

    /// Blocks the caller (registered in a pending rendezvous) until mail arrives. Unwinds
    /// when the launch fails or the block can no longer make progress.
    fn wait(&self, mut st: MutexGuard<'_, BlockSync>, c: &ThreadCtx<'_>) -> Mail {
        st.blocked += 1;
        st.warp_blocked[c.warp as usize] |= 1 << c.lane;
        self.settle_active(&mut st, c.warp as usize);
        let settled = st.warp_blocked[c.warp as usize] & (1 << c.lane) == 0;
        if !settled && let Some(why) = self.stuck(&st) {
            let block = st.block;
            drop(st);
            c.launch.fail(EmuError::Deadlock { block, detail: why });
            cancel();
        }
        self.unlock(st);
        c.polls.set(0);
        loop {
            if let Some(m) = self.mail.take(c.linear) {
                return m;
            }
            if c.launch.failed() {
                cancel();
            }
            thread::park();
        }
    }

    /// The calling thread finished its block. With `next` (the slot's next block), waits until
    /// every thread of this block finished and returns true: run `next`. False: stop.
    pub(crate) fn exit(&self, c: &ThreadCtx<'_>, next: Option<Dim3>) -> bool {
        let mut st = lock(&self.state);
        st.exited += 1;
        let w = c.warp as usize;
        st.warp_exited[w] |= 1 << c.lane;
        self.settle_active(&mut st, w);
        let failed = c.launch.failed();
        if !failed {
            let lane = 1u32 << c.lane;
            let left_behind = st.warps[w]
                .iter()
                .find(|p| p.mask & lane != 0 && p.arrived & lane == 0)
                .map(|p| (p.op, p.mask));
            let problem = match left_behind {
                Some((op, mask)) => Some(EmuError::Misuse {
                    block: st.block,
                    thread: c.tid,
                    detail: format!(
                        "exited while lanes of its warp wait for it in {op:?} with mask {mask:#010x}"
                    ),
                }),
                None => self.stuck(&st).map(|detail| EmuError::Deadlock {
                    block: st.block,
                    detail,
                }),
            };
            if let Some(e) = problem {
                self.unlock(st);
                c.launch.fail(e);
                return false;
            }
        }
        let Some(next) = next else {
            self.unlock(st);
            return false;
        };
        if st.exited == self.threads {
            if failed {
                self.unlock(st);
                return false;
            }
            // Last one out: set the slot up for its next block and start everyone.
            st.block = next;
            st.exited = 0;
            st.blocked = 0;
            st.warp_exited.iter_mut().for_each(|m| *m = 0);
            st.warp_blocked.iter_mut().for_each(|m| *m = 0);
            st.warp_active.iter_mut().for_each(|m| *m = 0);
            st.bars.iter_mut().for_each(|b| *b = None);
            st.warps.iter_mut().for_each(Vec::clear);
            // SAFETY: every thread of the slot has finished the previous block and waits for
            // this mail: nobody touches shared memory meanwhile. (Blocks of the same cluster
            // write here only while the block they write to runs and waits for the data, and
            // after a cluster barrier that it arrived at after it started: the kernel
            // contract of `crate::cluster`.)
            unsafe {
                self.dynamic.clear();
                for a in lock(&self.statics).iter() {
                    a.buf.clear();
                }
            }
            let me = c.linear;
            st.outbox.extend(
                (0..self.threads)
                    .filter(|&t| t != me)
                    .map(|t| (t, Mail::NextBlock)),
            );
            self.unlock(st);
            return true;
        }
        self.unlock(st);
        loop {
            if let Some(m) = self.mail.take(c.linear) {
                return m == Mail::NextBlock;
            }
            if c.launch.failed() {
                return false;
            }
            thread::park();
        }
    }
}

/// The result lane `lane` gets from a completed collective.
fn warp_result(p: &PendingWarp, lane: u32) -> u32 {
    let preds = (0..WARP_SIZE)
        .filter(|&l| p.mask & (1 << l) != 0 && p.words[l as usize] != 0)
        .fold(0u32, |m, l| m | (1 << l));
    match p.op {
        WarpOp::Sync => 0,
        WarpOp::Ballot => preds,
        WarpOp::Vote(VoteMode::All) => u32::from(preds == p.mask),
        WarpOp::Vote(VoteMode::Any) => u32::from(preds != 0),
        WarpOp::Vote(VoteMode::Uni) => u32::from(preds == 0 || preds == p.mask),
        WarpOp::Shfl(mode) => {
            let b = p.operands[lane as usize] & (WARP_SIZE - 1);
            // PTX `shfl.sync` with the clamp operands the device crate uses (c = 0x1f for
            // idx/down/bfly, c = 0 for up): a source outside the warp means "keep your own".
            let src = match mode {
                ShflMode::Idx => b,
                ShflMode::Up => lane.checked_sub(b).unwrap_or(lane),
                ShflMode::Down => {
                    if lane + b < WARP_SIZE {
                        lane + b
                    } else {
                        lane
                    }
                }
                ShflMode::Xor => lane ^ b,
            };
            // A source lane outside the mask is undefined on the GPU; here: the own value.
            if p.mask & (1 << src) != 0 {
                p.words[src as usize]
            } else {
                p.words[lane as usize]
            }
        }
    }
}

/// Reports a misuse of a block or warp primitive by the calling thread and stops it.
pub(crate) fn misuse(c: &ThreadCtx<'_>, detail: String) -> ! {
    c.launch.fail(EmuError::Misuse {
        block: c.block_idx.get(),
        thread: c.tid,
        detail,
    });
    cancel()
}

fn internal(c: &ThreadCtx<'_>, m: Mail) -> ! {
    misuse(c, format!("emulator: unexpected wake-up {m:?}"))
}
