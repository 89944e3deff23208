//! One resident block ("slot"): its threads' rendezvous (block barriers, warp collectives),
//! its shared memory, and the checks that turn a stuck block into an error.
//!
//! All rendezvous state of a block sits behind one mutex. A thread that must wait registers
//! in the pending rendezvous, counts itself as blocked, releases the mutex and parks until
//! the thread that completes the rendezvous puts the result in its mailbox and unparks it
//! (woken threads never touch the mutex again, so a barrier of 1024 threads releases them
//! without a stampede on it). Because every waiter is counted, "every live thread of the
//! block is blocked" is seen the moment it happens, and reported as a deadlock.

use core::fmt::Write as _;
use std::alloc::{self, Layout};
use std::format;
use std::string::String;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, Thread};
use std::vec;
use std::vec::Vec;

use super::ctx::{ThreadCtx, cancel};
use super::error::EmuError;
use crate::geometry::{Dim3, ShflMode, VoteMode, WARP_SIZE};

/// Named barriers per block (`bar.sync 0..15`).
const N_BARRIERS: u32 = 16;

/// A warp collective: what the lanes of one rendezvous must all be doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WarpOp {
    /// `bar.warp.sync`.
    Sync,
    /// `shfl.sync.<mode>` (one 32-bit word).
    Shfl(ShflMode),
    /// `vote.sync.<mode>`.
    Vote(VoteMode),
    /// `vote.sync.ballot`.
    Ballot,
}

/// What a completed rendezvous hands a waiting thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mail {
    /// Block barrier result: OR and popcount of the predicates.
    Bar { or: bool, count: u32 },
    /// Warp collective result.
    Word(u32),
    /// The slot's next block starts.
    NextBlock,
}

impl Mail {
    /// Packed into a non-zero word (0 = empty mailbox).
    fn pack(self) -> u64 {
        match self {
            Mail::Bar { or, count } => 1 | (u64::from(or) << 8) | (u64::from(count) << 32),
            Mail::Word(w) => 2 | (u64::from(w) << 32),
            Mail::NextBlock => 3,
        }
    }

    fn unpack(m: u64) -> Mail {
        match m & 0xff {
            1 => Mail::Bar {
                or: m & 0x100 != 0,
                count: (m >> 32) as u32,
            },
            2 => Mail::Word((m >> 32) as u32),
            _ => Mail::NextBlock,
        }
    }
}

/// One mailbox and one thread handle per thread of the slot.
struct Mailboxes {
    boxes: Vec<AtomicU64>,
    threads: Vec<OnceLock<Thread>>,
}

impl Mailboxes {
    /// Puts `mail` in thread `t`'s mailbox and unparks it.
    fn post(&self, t: u32, mail: Mail) {
        self.boxes[t as usize].store(mail.pack(), Ordering::Release);
        if let Some(th) = self.threads[t as usize].get() {
            th.unpark();
        }
    }

    /// Takes thread `t`'s mail, if any.
    fn take(&self, t: u32) -> Option<Mail> {
        match self.boxes[t as usize].swap(0, Ordering::Acquire) {
            0 => None,
            m => Some(Mail::unpack(m)),
        }
    }
}

/// A block barrier that some threads have reached.
#[derive(Debug)]
struct PendingBar {
    expected: u32,
    arrived: u32,
    or: bool,
    count: u32,
    /// Linear indices of the threads blocked in it (`bar.arrive` does not wait).
    waiters: Vec<u32>,
}

/// A warp collective that some lanes have reached.
#[derive(Debug)]
struct PendingWarp {
    mask: u32,
    op: WarpOp,
    arrived: u32,
    words: [u32; 32],
    operands: [u32; 32],
}

/// The rendezvous state of the block a slot currently runs.
#[derive(Debug)]
struct BlockSync {
    /// `%ctaid` of the current block.
    block: Dim3,
    exited: u32,
    blocked: u32,
    bars: Vec<Option<PendingBar>>,
    warps: Vec<Vec<PendingWarp>>,
    warp_exited: Vec<u32>,
    /// Per warp: the lanes blocked in any rendezvous.
    warp_blocked: Vec<u32>,
    /// Per warp: the lanes waiting in `activemask`.
    warp_active: Vec<u32>,
    /// Mail to post once the lock is released (waking threads while holding it would make
    /// them queue on it).
    outbox: Vec<(u32, Mail)>,
}

impl BlockSync {
    /// Unblocks thread `t` with `mail` (posted by [`Slot::unlock`]).
    fn deliver(&mut self, t: u32, mail: Mail) {
        self.blocked -= 1;
        self.warp_blocked[(t / WARP_SIZE) as usize] &= !(1 << (t % WARP_SIZE));
        self.outbox.push((t, mail));
    }
}

/// A zeroed, 16-byte aligned buffer of one block's shared memory.
struct SharedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl SharedBuf {
    fn new(size: usize, align: usize) -> Option<SharedBuf> {
        let layout = Layout::from_size_align(size.max(16), align.max(16)).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(SharedBuf { ptr, layout })
    }

    /// Zeroes the buffer.
    ///
    /// # Safety
    /// No other thread accesses the buffer meanwhile.
    unsafe fn clear(&self) {
        // SAFETY: the buffer owns `layout.size()` bytes; exclusivity is the caller's.
        unsafe { self.ptr.write_bytes(0, self.layout.size()) }
    }
}

impl Drop for SharedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}

// SAFETY: the buffer is plain memory owned by the slot; the emulated threads synchronise
// their accesses to it as GPU threads do to shared memory (through block barriers).
unsafe impl Send for SharedBuf {}
// SAFETY: as above.
unsafe impl Sync for SharedBuf {}

/// A resident block: runs blocks `index, index + resident, ...` of the grid, one at a time,
/// with the same worker threads.
pub(crate) struct Slot {
    /// Threads per block.
    threads: u32,
    state: Mutex<BlockSync>,
    mail: Mailboxes,
    dynamic: SharedBuf,
    dynamic_bytes: u32,
    statics: Mutex<Vec<StaticArray>>,
}

/// A block's copy of one [`shared_array!`](crate::shared_array).
struct StaticArray {
    name: &'static str,
    /// Bytes as first declared (the buffer may be larger).
    size: usize,
    buf: SharedBuf,
}

/// Where a pointer into a block's shared memory points.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SharedLoc {
    /// `offset` bytes into the dynamic shared memory.
    Dynamic { offset: usize },
    /// `offset` bytes into static array `name` (`size` bytes, aligned to `align`).
    Static {
        name: &'static str,
        size: usize,
        align: usize,
        offset: usize,
    },
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    /// A slot for blocks of `threads` threads and `dynamic_bytes` of dynamic shared memory;
    /// `None` when the shared memory cannot be allocated.
    pub(crate) fn new(threads: u32, dynamic_bytes: u32, first_block: Dim3) -> Option<Slot> {
        let warps = threads.div_ceil(WARP_SIZE) as usize;
        Some(Slot {
            threads,
            state: Mutex::new(BlockSync {
                block: first_block,
                exited: 0,
                blocked: 0,
                bars: (0..N_BARRIERS).map(|_| None).collect(),
                warps: (0..warps).map(|_| Vec::new()).collect(),
                warp_exited: vec![0; warps],
                warp_blocked: vec![0; warps],
                warp_active: vec![0; warps],
                outbox: Vec::new(),
            }),
            mail: Mailboxes {
                boxes: (0..threads).map(|_| AtomicU64::new(0)).collect(),
                threads: (0..threads).map(|_| OnceLock::new()).collect(),
            },
            dynamic: SharedBuf::new(dynamic_bytes as usize, 16)?,
            dynamic_bytes,
            statics: Mutex::new(Vec::new()),
        })
    }

    /// Releases the lock, then posts the mail that the holder left in the outbox.
    fn unlock(&self, mut st: MutexGuard<'_, BlockSync>) {
        let out = core::mem::take(&mut st.outbox);
        drop(st);
        for (t, m) in out {
            self.mail.post(t, m);
        }
    }

    /// Records the calling OS thread as thread `t` of the slot (before it can wait).
    pub(crate) fn register(&self, t: u32) {
        let _ = self.mail.threads[t as usize].set(thread::current());
    }

    /// Wakes every waiting thread (they then see that the launch failed).
    pub(crate) fn wake_all(&self) {
        for th in self.mail.threads.iter().filter_map(OnceLock::get) {
            th.unpark();
        }
    }

    /// Linear index (in a grid of `grid` blocks) of the block the slot runs or ran last.
    pub(crate) fn block_linear(&self, grid: Dim3) -> u32 {
        let b = lock(&self.state).block;
        b.x + b.y * grid.x + b.z * grid.x * grid.y
    }

    /// The block's dynamic shared memory and its size.
    pub(crate) fn dynamic_shared(&self) -> (*mut u8, u32) {
        (self.dynamic.ptr, self.dynamic_bytes)
    }

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

    /// The slot's copy of the static shared array `name` (`size` bytes, `align`), allocated
    /// (zeroed) on first use, by a thread of the slot or (`cluster::map`) of another slot of
    /// its cluster. Err: why it cannot be had (declared larger than elsewhere, out of memory).
    pub(crate) fn static_array(
        &self,
        name: &'static str,
        size: usize,
        align: usize,
    ) -> Result<*mut u8, String> {
        let mut statics = lock(&self.statics);
        match statics.iter().find(|a| a.name == name) {
            Some(a) if a.buf.layout.size() < size || a.buf.layout.align() < align => {
                let other = a.size;
                Err(format!(
                    "shared_array `{name}` declared with {size} bytes here and {other} bytes elsewhere"
                ))
            }
            Some(a) => Ok(a.buf.ptr),
            None => match SharedBuf::new(size, align) {
                Some(buf) => {
                    let p = buf.ptr;
                    statics.push(StaticArray { name, size, buf });
                    Ok(p)
                }
                None => Err(format!(
                    "cannot allocate {size} bytes for shared_array `{name}`"
                )),
            },
        }
    }

    /// Where `p` points in the slot's shared memory (`None`: outside it).
    pub(crate) fn locate(&self, p: *mut u8) -> Option<SharedLoc> {
        let a = p.addr();
        let offset = a.wrapping_sub(self.dynamic.ptr.addr());
        if offset < self.dynamic_bytes as usize {
            return Some(SharedLoc::Dynamic { offset });
        }
        lock(&self.statics).iter().find_map(|s| {
            let offset = a.wrapping_sub(s.buf.ptr.addr());
            (offset < s.size).then_some(SharedLoc::Static {
                name: s.name,
                size: s.size,
                align: s.buf.layout.align(),
                offset,
            })
        })
    }

    /// The lanes of warp `warp` that exist (a last, partial warp has fewer than 32).
    fn existing_lanes(&self, warp: u32) -> u32 {
        let n = self.threads.saturating_sub(warp * WARP_SIZE).min(WARP_SIZE);
        if n == WARP_SIZE {
            u32::MAX
        } else {
            (1u32 << n) - 1
        }
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

    /// Completes the `activemask` round of warp `w` once no other live lane of it can still
    /// arrive.
    fn settle_active(&self, st: &mut BlockSync, w: usize) {
        let here = st.warp_active[w];
        if here == 0 {
            return;
        }
        let live = self.existing_lanes(w as u32) & !st.warp_exited[w];
        if live & !here & !st.warp_blocked[w] != 0 {
            return;
        }
        st.warp_active[w] = 0;
        for lane in 0..WARP_SIZE {
            if here & (1 << lane) != 0 {
                st.deliver(w as u32 * WARP_SIZE + lane, Mail::Word(here));
            }
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

    /// Why the block can never finish, if it cannot: every live thread is blocked, or a
    /// pending barrier needs more arrivals than there are threads left to make them.
    fn stuck(&self, st: &BlockSync) -> Option<String> {
        let live = self.threads - st.exited;
        let hopeless = st
            .bars
            .iter()
            .flatten()
            .any(|b| b.expected - b.arrived > live.saturating_sub(b.waiters.len() as u32));
        if live == 0 || (st.blocked < live && !hopeless) {
            return None;
        }
        let mut s = format!(
            "{} of {} threads exited, {} blocked:",
            st.exited, self.threads, st.blocked
        );
        for (id, b) in st.bars.iter().enumerate() {
            if let Some(b) = b {
                let _ = write!(
                    s,
                    " barrier {id} has {}/{} arrivals;",
                    b.arrived, b.expected
                );
            }
        }
        for (w, ps) in st.warps.iter().enumerate() {
            if st.warp_active[w] != 0 {
                let _ = write!(
                    s,
                    " warp {w} activemask has lanes {:#010x};",
                    st.warp_active[w]
                );
            }
            for p in ps {
                let _ = write!(
                    s,
                    " warp {w} {:?} mask {:#010x} has lanes {:#010x};",
                    p.op, p.mask, p.arrived
                );
            }
        }
        s.pop();
        Some(s)
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
