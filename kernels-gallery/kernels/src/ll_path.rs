//! The LL data path of the one-shot kernels: a launch reads its bank and epoch from the
//! scratch window's header, pushes packs into peers' scratch as LL lines, polls its own
//! scratch for theirs, and at the end every block advances its share of the launch counters.
//! The LL entry points begin and end the launch ([`LlLaunch`]) around their bodies, which
//! send and receive through it.
//!
//! The counter: one word per block index (`plan::LL_COUNTERS` of them), all holding the number
//! of LL launches so far. Block `b` of a `g`-block launch reads word `b` first and, once done
//! with it, stores the next value into words `b, b + g, b + 2g, …`: every word advances by
//! exactly one per launch whatever the grid, with plain stores (no atomic, no round trip at
//! the end of the kernel), and no block reads a word another block of the same launch writes.
//! Every LSA rank runs the same sequence of LL launches, so the counters agree across ranks; a
//! launch cannot start before the previous one on its stream has finished, so it reads what
//! the previous one wrote. Double buffering: rank `r` can only be in launch `k + 2` (bank
//! of `k` again) after finishing `k + 1`, which needed every peer's `k + 1` lines, sent after
//! that peer had finished reading `k`.
//!
//! Kernels whose later phases wait for lines that other blocks of the same GPU send in an
//! earlier phase (the two-shot LL kernels) need all their blocks resident at once; the host
//! launches LL kernels with at most 64 blocks, far below the SM count.

use symcomm_device::arch::{block_dim, block_idx, grid_dim, thread_idx};
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::ll;
use symcomm_device::mem::{self, LoadOrder, Scope, StoreOrder, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Element, ReduceOp};
use symcomm_device::wait::WaitError;

use crate::common::{Acc, grid_stride, local_addr, peer_addr, report, rotated};
use crate::plan;
use crate::shape::{Dst, Span, Src};

/// State of one LL launch, the same on every thread.
pub struct LlLaunch {
    /// This rank's LSA rank.
    pub me: i32,
    /// Ranks of the LSA team.
    pub n: i32,
    /// The bound of every wait of the launch.
    pub timeout_ns: u64,
    scratch: SymPtr<u8>,
    local: u64,
    counter: u32,
    bank: u32,
    epoch: u32,
    cap: u64,
    abort: *const u32,
}

impl LlLaunch {
    // ANCHOR: ll_begin
    /// Reads this block's launch counter. Every thread of every block calls it first. Every
    /// wait of the launch gives up after `timeout_ns` (or at the abort flag).
    ///
    /// # Safety
    /// `scratch` is the gallery scratch window (header + LL region for `cap` packs); the grid
    /// has at most [`plan::LL_COUNTERS`] blocks.
    #[inline(always)]
    pub unsafe fn begin(
        comm: &DevComm,
        scratch: SymPtr<u8>,
        cap: u64,
        timeout_ns: u64,
    ) -> LlLaunch {
        // SAFETY: the header is in this rank's scratch copy.
        let local = unsafe { local_addr(scratch) };
        let word = (local + 4 * u64::from(block_idx().x)) as *const u32;
        // SAFETY: as above (block index < LL_COUNTERS); written by an earlier launch, which
        // has finished.
        let counter = unsafe { mem::load(word, LoadOrder::Relaxed, Scope::Gpu) };
        let (bank, epoch) = plan::ll_bank_epoch(counter);
        LlLaunch {
            me: comm.lsa_rank,
            n: comm.lsa_size,
            timeout_ns,
            scratch,
            local,
            counter,
            bank,
            epoch,
            cap,
            abort: comm.abort_flag_ptr(),
        }
    }
    // ANCHOR_END: ll_begin

    /// Pack `j` of LSA rank `src` in this launch: `own` when `src` is this rank, else the pack
    /// it sent in slot `j` ([`recv_pack`], bounded wait). After a failed wait (its error lands
    /// in `res`; no later call waits) it returns `own`: a result built from it is not to be
    /// trusted, which the reported status says.
    ///
    /// # Safety
    /// `j < cap`; `src` is an LSA rank that, if not this one, sends pack `j` in this launch.
    #[inline(always)]
    pub unsafe fn pack_of(
        &self,
        src: i32,
        own: U32x4,
        j: u64,
        res: &mut Result<(), WaitError>,
    ) -> U32x4 {
        if src == self.me || res.is_err() {
            return own;
        }
        // SAFETY: forwarded (caller's contract).
        unsafe { recv_pack(self, src, j) }.unwrap_or_else(|e| {
            *res = Err(e);
            own
        })
    }

    /// The reduction, in rank order, of pack `j` of every rank: this rank's is `own`, the
    /// others' arrive as LL lines in slot `j` ([`pack_of`](Self::pack_of): after a wait fails,
    /// its error lands in `res`, which must be `Ok` on entry for any wait to happen, and the
    /// remaining ranks contribute `own`; the result is then not to be stored).
    ///
    /// # Safety
    /// `j < cap`; every peer sends pack `j` in this launch.
    #[inline(always)]
    pub unsafe fn reduce<T: Element, O: ReduceOp>(
        &self,
        j: u64,
        own: U32x4,
        res: &mut Result<(), WaitError>,
    ) -> Acc<T, O> {
        // SAFETY: forwarded (caller's contract).
        let mut acc = Acc::<T, O>::new(unsafe { self.pack_of(0, own, j, res) });
        for s in 1..self.n {
            // SAFETY: as above.
            acc.add(unsafe { self.pack_of(s, own, j, res) });
        }
        acc
    }

    /// Sends pack `j` to every peer, [`rotated`] from the next rank.
    ///
    /// # Safety
    /// As [`send_pack`].
    #[inline(always)]
    pub unsafe fn send_peers(&self, j: u64, v: U32x4) {
        for k in 1..self.n {
            // SAFETY: forwarded.
            unsafe { send_pack(self, rotated(self.me, k, self.n), j, v) };
        }
    }

    /// Sends packs `0..packs` of the local source `src` to every peer (slot = pack index;
    /// grid-stride over the packs), and stores each into the local destination `copy` as well
    /// when one is given.
    ///
    /// # Safety
    /// `packs ≤ cap`; `src` (and `copy`) valid for `packs` packs.
    #[inline(always)]
    pub unsafe fn send_all<const ANY: bool>(
        &self,
        src: Src<ANY>,
        packs: u64,
        copy: Option<Dst<ANY>>,
    ) {
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < packs {
            // SAFETY: j < packs (caller's contract).
            unsafe {
                let v = src.load(j);
                self.send_peers(j, v);
                if let Some(to) = copy {
                    to.store_straight(j, v);
                }
            }
            j += stride;
        }
    }

    /// Sends every peer `p` pack `j` of its block of the local range `inp` (blocks of `bytes`,
    /// block `p` at byte `p × bytes`), in the packs of `span` (the destination block it lands
    /// in), into slot `j`.
    ///
    /// # Safety
    /// `j < span.packs() ≤ cap`; `inp` valid for `lsa_size × bytes`.
    #[inline(always)]
    pub unsafe fn send_blocks<const ANY: bool>(
        &self,
        inp: u64,
        bytes: u64,
        span: Span<ANY>,
        j: u64,
    ) {
        for k in 1..self.n {
            let p = rotated(self.me, k, self.n);
            // SAFETY: forwarded.
            unsafe {
                let v = Src::at(inp + p as u64 * bytes, span).load(j);
                send_pack(self, p, j, v)
            };
        }
    }

    /// Sends every peer `p` its slice of the local source `src`, `(first, len) = slice(p)` in
    /// packs, into its slots `0..len`: peer by peer ([`rotated`]), grid-stride within a slice.
    ///
    /// # Safety
    /// Every slice lies in `src` and has `len ≤ cap`.
    #[inline(always)]
    pub unsafe fn send_slices<const ANY: bool>(
        &self,
        src: Src<ANY>,
        slice: impl Fn(i32) -> (u64, u64),
    ) {
        let (first, stride) = grid_stride();
        for k in 1..self.n {
            let p = rotated(self.me, k, self.n);
            let (lo, len) = slice(p);
            let mut j = first;
            while j < len {
                // SAFETY: forwarded.
                unsafe { send_pack(self, p, j, src.load(lo + j)) };
                j += stride;
            }
        }
    }

    // ANCHOR: ll_end
    /// Finishes the launch: reports `res` (any failing thread), then advances this block's
    /// share of the launch counters. Every thread of every block calls it last.
    ///
    /// # Safety
    /// As [`begin`](Self::begin); `status` is null or a valid global `u32`.
    #[inline(always)]
    pub unsafe fn end(self, res: Result<(), WaitError>, status: *mut u32) {
        // SAFETY: forwarded.
        unsafe { report(status, res) };
        Cta::new().sync();
        // Ordering: relaxed. Word `b` is read in this launch only by block `b`, whose threads
        // all consumed the value they loaded (the epoch of every line they sent or polled)
        // before the `sync` above; the other words this block writes are not read in this
        // launch at all. The next launch reads them after this kernel has finished (stream
        // order). No atomic, so the end of the kernel waits for no round trip (a ticket
        // taken with an atomic add cost ~0.4 µs per LL launch), and the block's threads
        // share the stores (one thread storing all 128 words of a one-block launch cost
        // ~1 µs).
        let next = self.counter.wrapping_add(1);
        let g = u64::from(grid_dim().x);
        let mut k = u64::from(block_idx().x) + u64::from(thread_idx().x) * g;
        while k < plan::LL_COUNTERS {
            // SAFETY: header word k < LL_COUNTERS of this rank's scratch.
            unsafe {
                mem::store(
                    (self.local + 4 * k) as *mut u32,
                    next,
                    StoreOrder::Relaxed,
                    Scope::Gpu,
                )
            };
            k += g * u64::from(block_dim().x);
        }
    }
    // ANCHOR_END: ll_end
}

#[inline(always)]
fn line_off(l: &LlLaunch, src: u32, j: u64) -> u64 {
    plan::ll_offset(l.bank, src, j, l.n as u32, l.cap)
}

// ANCHOR: send_pack
/// Sends pack `j` to LSA peer `peer` (two LL lines in its scratch, in our sender slot).
///
/// # Safety
/// `j < cap`; `peer` is an LSA rank.
#[inline(always)]
pub unsafe fn send_pack(l: &LlLaunch, peer: i32, j: u64, v: U32x4) {
    // SAFETY: the slot lies in the peer's LL region (caller's contract).
    unsafe {
        let line = peer_addr(l.scratch, peer) + line_off(l, l.me as u32, j);
        ll::store_pack(line as *mut ll::Line, v, l.epoch);
    }
}
// ANCHOR_END: send_pack

/// Receives pack `j` sent by LSA rank `src` in this launch (bounded wait).
///
/// # Safety
/// `j < cap`; `src` is an LSA rank other than ours that sends pack `j` in this launch.
#[inline(always)]
pub unsafe fn recv_pack(l: &LlLaunch, src: i32, j: u64) -> Result<U32x4, WaitError> {
    // ANCHOR: recv_fast
    let line = (l.local + line_off(l, src as u32, j)) as *const ll::Line;
    // Fast path: both lines already there (no deadline set up, no timer read).
    // SAFETY: our own LL region (caller's contract).
    let ready = unsafe {
        (
            ll::try_load(line, l.epoch),
            ll::try_load(line.add(1), l.epoch),
        )
    };
    let v = match ready {
        (Some(x), Some(y)) => Ok(U32x4([
            x as u32,
            (x >> 32) as u32,
            y as u32,
            (y >> 32) as u32,
        ])),
        // SAFETY: as above.
        _ => unsafe { ll::load_pack(line, l.epoch, l.abort, l.timeout_ns) },
    };
    // ANCHOR_END: recv_fast
    // The 8-byte halves of a 16-byte access are not torn on the GPU, and the CPU emulation
    // moves each half as one atomic access (`symcomm_device::mem`): on both, a half whose
    // epoch is this round's holds this round's payload.
    v
}
