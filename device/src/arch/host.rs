//! The host backend: the emulated launch of the calling thread ([`crate::emu`]) if there is
//! one, else a launch of one block of one thread.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `arch` that calls it, documented in `arch/mod.rs`.

use super::{Dim3, HostShared, ShflMode, VoteMode};
use crate::emu;
use std::sync::OnceLock;
use std::time::Instant;

const ZERO: Dim3 = Dim3 { x: 0, y: 0, z: 0 };
const ONE: Dim3 = Dim3 { x: 1, y: 1, z: 1 };
const DYN_SMEM_BYTES: usize = 64 * 1024;

pub fn thread_idx() -> Dim3 {
    emu::geometry().map_or(ZERO, |g| g.0)
}
pub fn block_idx() -> Dim3 {
    emu::geometry().map_or(ZERO, |g| g.1)
}
pub fn block_dim() -> Dim3 {
    emu::geometry().map_or(ONE, |g| g.2)
}
pub fn grid_dim() -> Dim3 {
    emu::geometry().map_or(ONE, |g| g.3)
}
pub fn lane_id() -> u32 {
    emu::lane().unwrap_or(0)
}
pub fn lanemask_lt() -> u32 {
    (1u32 << lane_id()) - 1
}
pub fn active_mask() -> u32 {
    emu::active_mask().unwrap_or(1)
}
pub fn sync_threads() {
    emu::barrier(0, 0, false, false);
}
pub fn sync_threads_count(pred: bool) -> u32 {
    emu::barrier(0, 0, pred, false).map_or(u32::from(pred), |r| r.1)
}
pub fn barrier_sync(id: u32, n_threads: u32) {
    emu::barrier(id, n_threads, false, false);
}
pub fn barrier_arrive(id: u32, n_threads: u32) {
    emu::barrier(id, n_threads, false, true);
}
pub fn barrier_red_or(id: u32, n_threads: u32, pred: bool) -> bool {
    emu::barrier(id, n_threads, pred, false).map_or(pred, |r| r.0)
}
pub fn sync_warp(mask: u32) {
    emu::sync_warp(mask);
}
/// With one lane every shuffle reads the caller's own value.
pub fn shfl(mode: ShflMode, mask: u32, v: u32, b: u32) -> u32 {
    emu::shfl(mode, mask, v, b).unwrap_or(v)
}
pub fn vote(mode: VoteMode, mask: u32, pred: bool) -> bool {
    if let Some(r) = emu::vote(mode, mask, pred) {
        return r;
    }
    let present = mask & 1 != 0;
    match mode {
        VoteMode::All => !present || pred,
        VoteMode::Any => present && pred,
        VoteMode::Uni => true,
    }
}
pub fn ballot(mask: u32, pred: bool) -> u32 {
    emu::ballot(mask, pred).unwrap_or(u32::from(pred) & mask)
}
fn epoch() -> &'static Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now)
}
pub fn byte_perm(a: u32, b: u32, sel: u32) -> u32 {
    let x = (u64::from(b) << 32) | u64::from(a);
    (0..4).fold(0, |r, i| {
        let nib = (sel >> (4 * i)) & 0xf;
        let byte = (x >> (8 * (nib & 7))) as u8;
        let byte = if nib & 8 != 0 {
            if byte & 0x80 != 0 { 0xff } else { 0 }
        } else {
            byte
        };
        r | (u32::from(byte) << (8 * i))
    })
}
pub fn globaltimer() -> u64 {
    emu::poll();
    epoch().elapsed().as_nanos() as u64
}
pub fn clock64() -> u64 {
    globaltimer()
}
pub fn griddep_wait() {}
pub fn griddep_launch_dependents() {}
pub fn spin_hint() {
    emu::poll();
}
pub fn wait_begins() {
    emu::reset_backoff();
}
pub fn nanosleep(ns: u32) {
    emu::poll();
    std::thread::sleep(std::time::Duration::from_nanos(u64::from(ns)));
}
pub fn trap() -> ! {
    emu::trap();
    std::process::abort()
}
pub fn dynamic_shared() -> *mut u8 {
    if let Some((p, _)) = emu::dynamic_shared() {
        return p;
    }
    static mut DYN_SMEM: HostShared<[u8; DYN_SMEM_BYTES]> = HostShared::new();
    (&raw mut DYN_SMEM).cast()
}
pub fn dynamic_shared_size() -> u32 {
    emu::dynamic_shared().map_or(DYN_SMEM_BYTES as u32, |(_, n)| n)
}
