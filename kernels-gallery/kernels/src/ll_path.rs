//! The LL data path of the one-shot kernels: a launch reads its bank and epoch from the
//! scratch window's header, pushes packs into peers' scratch as LL lines, polls its own
//! scratch for theirs, and at the end the last block to finish advances the launch counter.
//!
//! Why one counter per rank is enough: every LSA rank runs the same sequence of LL launches,
//! so the counters agree; a launch cannot start before the previous one on its stream has
//! finished, so every block of a launch reads the same counter value (the last block of the
//! previous launch wrote it). Double buffering: rank `r` can only be in launch `k + 2` (bank
//! of `k` again) after finishing `k + 1`, which needed every peer's `k + 1` lines, sent after
//! that peer had finished reading `k`.
//!
//! Kernels whose later phases wait for lines that other blocks of the same GPU send in an
//! earlier phase (the two-shot LL kernels) need all their blocks resident at once; the host
//! launches LL kernels with at most 64 blocks (16 by default), far below the SM count.

use symcomm_device::arch::grid_dim;
use symcomm_device::comm::DevComm;
use symcomm_device::coop::{Coop, Cta};
use symcomm_device::ll;
use symcomm_device::mem::{self, LoadOrder, Ordering, Scope, StoreOrder, U32x4};
use symcomm_device::ptr::SymPtr;
use symcomm_device::wait::WaitError;

use crate::common::{local_addr, peer_addr, report};
use crate::plan;

/// State of one LL launch, the same on every thread.
pub struct LlLaunch {
    scratch: SymPtr<u8>,
    local: u64,
    counter: u32,
    bank: u32,
    epoch: u32,
    me: i32,
    n: u32,
    cap: u64,
    abort: *const u32,
}

impl LlLaunch {
    // ANCHOR: ll_begin
    /// Reads the launch counter. Every thread of every block calls it first.
    ///
    /// # Safety
    /// `scratch` is the gallery scratch window (header + LL region for `cap` packs).
    #[inline(always)]
    pub unsafe fn begin(comm: &DevComm, scratch: SymPtr<u8>, cap: u64) -> LlLaunch {
        // SAFETY: the header is in this rank's scratch copy.
        let local = unsafe { local_addr(scratch) };
        // SAFETY: as above; written by the previous launch, which has finished.
        let counter = unsafe { mem::load(local as *const u32, LoadOrder::Relaxed, Scope::Gpu) };
        let (bank, epoch) = plan::ll_bank_epoch(counter);
        LlLaunch {
            scratch,
            local,
            counter,
            bank,
            epoch,
            me: comm.lsa_rank,
            n: comm.lsa_size as u32,
            cap,
            abort: comm.abort_flag_ptr(),
        }
    }
    // ANCHOR_END: ll_begin

    /// The launch counter this launch read (the same on every thread and every LSA rank).
    #[inline(always)]
    pub fn counter(&self) -> u32 {
        self.counter
    }

    // ANCHOR: ll_end
    /// Finishes the launch: reports `res` (any failing thread), then the last block to get
    /// here advances the counter. Every thread of every block calls it last.
    ///
    /// # Safety
    /// As [`begin`](Self::begin); `status` is null or a valid global `u32`.
    #[inline(always)]
    pub unsafe fn end(self, res: Result<(), WaitError>, status: *mut u32) {
        // SAFETY: forwarded.
        unsafe { report(status, res) };
        let cta = Cta::new();
        cta.sync();
        if cta.is_leader() {
            let ticket = (self.local + 4) as *mut u32;
            // SAFETY: header words of this rank's scratch.
            // Ordering: relaxed. The hazard is a block of this launch reading the counter
            // after the last block advanced it; but every thread of this block consumed the
            // counter it loaded (the epoch of every line it sent or polled) before the
            // `cta.sync` above, so its load has returned before the ticket is taken, and the
            // new counter is stored only after every block's ticket. The next launch reads it
            // after this kernel has finished (stream order). A release here costs a fence:
            // ~0.3 µs on every LL launch (4×H200).
            unsafe {
                let done = mem::atomic_add(ticket, 1, Ordering::Relaxed, Scope::Gpu);
                if done + 1 == grid_dim().x {
                    mem::store(ticket, 0, StoreOrder::Relaxed, Scope::Gpu);
                    mem::store(
                        self.local as *mut u32,
                        self.counter.wrapping_add(1),
                        StoreOrder::Relaxed,
                        Scope::Gpu,
                    );
                }
            }
        }
    }
    // ANCHOR_END: ll_end
}

#[inline(always)]
fn line_off(l: &LlLaunch, src: u32, j: u64) -> u64 {
    plan::ll_offset(l.bank, src, j, l.n, l.cap)
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
pub unsafe fn recv_pack(
    l: &LlLaunch,
    src: i32,
    j: u64,
    timeout_ns: u64,
) -> Result<U32x4, WaitError> {
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
        _ => unsafe { ll::load_pack(line, l.epoch, l.abort, timeout_ns) },
    };
    // ANCHOR_END: recv_fast
    // The CPU emulation moves the 16 bytes of a line as four separate words, so a poll can
    // see the epochs of this round next to a payload word of the last one; on the GPU the
    // 8-byte halves of a 16-byte access are not torn. Emulation only: read again until two
    // reads agree.
    #[cfg(not(target_arch = "nvptx64"))]
    let v = {
        let mut v = v;
        while let Ok(first) = v {
            // SAFETY: as above.
            let again = unsafe { ll::load_pack(line, l.epoch, l.abort, timeout_ns) };
            if again == Ok(first) {
                break;
            }
            v = again;
        }
        v
    };
    v
}
