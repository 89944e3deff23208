//! One resident block ("slot"): the rendezvous state of the block it runs (pending block
//! barriers and warp collectives, one mailbox per thread) and the block's shared memory. The
//! rendezvous themselves, which the block's threads enter with their context, are in
//! `block`.

use core::fmt::Write as _;
use std::alloc::{self, Layout};
use std::format;
use std::string::String;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, Thread};
use std::vec;
use std::vec::Vec;

use crate::geometry::{Dim3, ShflMode, VoteMode, WARP_SIZE};

/// Named barriers per block (`bar.sync 0..15`).
pub(crate) const N_BARRIERS: u32 = 16;

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
pub(crate) enum Mail {
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
pub(crate) struct Mailboxes {
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
    pub(crate) fn take(&self, t: u32) -> Option<Mail> {
        match self.boxes[t as usize].swap(0, Ordering::Acquire) {
            0 => None,
            m => Some(Mail::unpack(m)),
        }
    }
}

/// A block barrier that some threads have reached.
#[derive(Debug)]
pub(crate) struct PendingBar {
    pub(crate) expected: u32,
    pub(crate) arrived: u32,
    pub(crate) or: bool,
    pub(crate) count: u32,
    /// Linear indices of the threads blocked in it (`bar.arrive` does not wait).
    pub(crate) waiters: Vec<u32>,
}

/// A warp collective that some lanes have reached.
#[derive(Debug)]
pub(crate) struct PendingWarp {
    pub(crate) mask: u32,
    pub(crate) op: WarpOp,
    pub(crate) arrived: u32,
    pub(crate) words: [u32; 32],
    pub(crate) operands: [u32; 32],
}

/// The rendezvous state of the block a slot currently runs.
#[derive(Debug)]
pub(crate) struct BlockSync {
    /// `%ctaid` of the current block.
    pub(crate) block: Dim3,
    pub(crate) exited: u32,
    pub(crate) blocked: u32,
    pub(crate) bars: Vec<Option<PendingBar>>,
    pub(crate) warps: Vec<Vec<PendingWarp>>,
    pub(crate) warp_exited: Vec<u32>,
    /// Per warp: the lanes blocked in any rendezvous.
    pub(crate) warp_blocked: Vec<u32>,
    /// Per warp: the lanes waiting in `activemask`.
    pub(crate) warp_active: Vec<u32>,
    /// Mail to post once the lock is released (waking threads while holding it would make
    /// them queue on it).
    pub(crate) outbox: Vec<(u32, Mail)>,
}

impl BlockSync {
    /// Unblocks thread `t` with `mail` (posted by [`Slot::unlock`]).
    pub(crate) fn deliver(&mut self, t: u32, mail: Mail) {
        self.blocked -= 1;
        self.warp_blocked[(t / WARP_SIZE) as usize] &= !(1 << (t % WARP_SIZE));
        self.outbox.push((t, mail));
    }
}

/// A zeroed, 16-byte aligned buffer of one block's shared memory.
pub(crate) struct SharedBuf {
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
    pub(crate) unsafe fn clear(&self) {
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
    pub(crate) threads: u32,
    pub(crate) state: Mutex<BlockSync>,
    pub(crate) mail: Mailboxes,
    pub(crate) dynamic: SharedBuf,
    dynamic_bytes: u32,
    pub(crate) statics: Mutex<Vec<StaticArray>>,
}

/// A block's copy of one [`shared_array!`](crate::shared_array).
pub(crate) struct StaticArray {
    name: &'static str,
    /// Bytes as first declared (the buffer may be larger).
    size: usize,
    pub(crate) buf: SharedBuf,
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    pub(crate) fn unlock(&self, mut st: MutexGuard<'_, BlockSync>) {
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
    pub(crate) fn existing_lanes(&self, warp: u32) -> u32 {
        let n = self.threads.saturating_sub(warp * WARP_SIZE).min(WARP_SIZE);
        if n == WARP_SIZE {
            u32::MAX
        } else {
            (1u32 << n) - 1
        }
    }

    /// Completes the `activemask` round of warp `w` once no other live lane of it can still
    /// arrive.
    pub(crate) fn settle_active(&self, st: &mut BlockSync, w: usize) {
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

    /// Why the block can never finish, if it cannot: every live thread is blocked, or a
    /// pending barrier needs more arrivals than there are threads left to make them.
    pub(crate) fn stuck(&self, st: &BlockSync) -> Option<String> {
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
}
