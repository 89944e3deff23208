//! The GPU backend: every PTX instruction of `arch`.
//!
//! Contract: every `unsafe fn` here has the `# Safety` contract (and gives the ordering) of
//! the public function of `arch` that calls it, documented in `arch/mod.rs`.

use super::{Dim3, ShflMode, VoteMode};
use core::arch::{asm, global_asm, nvptx};

global_asm!(".extern .shared .align 16 .b8 symcomm_dynamic_smem[];");

macro_rules! sreg32 {
    ($name:literal) => {{
        let v: u32;
        // SAFETY: reading a special register has no preconditions.
        unsafe {
            asm!(concat!("mov.u32 {v}, ", $name, ";"), v = out(reg32) v,
                 options(pure, nomem, nostack))
        };
        v
    }};
}

#[inline(always)]
pub fn thread_idx() -> Dim3 {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        Dim3 {
            x: nvptx::_thread_idx_x() as u32,
            y: nvptx::_thread_idx_y() as u32,
            z: nvptx::_thread_idx_z() as u32,
        }
    }
}
#[inline(always)]
pub fn block_idx() -> Dim3 {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        Dim3 {
            x: nvptx::_block_idx_x() as u32,
            y: nvptx::_block_idx_y() as u32,
            z: nvptx::_block_idx_z() as u32,
        }
    }
}
#[inline(always)]
pub fn block_dim() -> Dim3 {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        Dim3 {
            x: nvptx::_block_dim_x() as u32,
            y: nvptx::_block_dim_y() as u32,
            z: nvptx::_block_dim_z() as u32,
        }
    }
}
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        Dim3 {
            x: nvptx::_grid_dim_x() as u32,
            y: nvptx::_grid_dim_y() as u32,
            z: nvptx::_grid_dim_z() as u32,
        }
    }
}
#[inline(always)]
pub fn lane_id() -> u32 {
    sreg32!("%laneid")
}
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    sreg32!("%lanemask_lt")
}
#[inline(always)]
pub fn dynamic_shared_size() -> u32 {
    sreg32!("%dynamic_smem_size")
}
#[inline(always)]
pub fn active_mask() -> u32 {
    let v: u32;
    // SAFETY: activemask has no preconditions; not `pure` (depends on divergence).
    unsafe { asm!("activemask.b32 {v};", v = out(reg32) v, options(nomem, nostack)) };
    v
}
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: the caller (all threads of the block) upholds the barrier contract.
    unsafe { nvptx::_syncthreads() }
}
// Warp- and block-synchronous operations go through LLVM's NVVM intrinsics rather than
// inline asm: LLVM knows the intrinsics are `convergent`, so no optimisation can move them
// into divergent control flow (inline asm carries no such marker).
#[allow(improper_ctypes)]
unsafe extern "C" {
    #[link_name = "llvm.nvvm.barrier.cta.red.popc.aligned.all"]
    fn bar_red_popc_all(id: u32, pred: bool) -> u32;
    #[link_name = "llvm.nvvm.barrier.cta.red.or.aligned.all"]
    fn bar_red_or_all(id: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.barrier.cta.red.or.aligned.count"]
    fn bar_red_or_count(id: u32, n: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.barrier.cta.sync.aligned.count"]
    fn bar_sync_count(id: u32, n: u32);
    #[link_name = "llvm.nvvm.barrier.cta.arrive.aligned.count"]
    fn bar_arrive_count(id: u32, n: u32);
    #[link_name = "llvm.nvvm.bar.warp.sync"]
    fn bar_warp_sync(mask: u32);
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx(mask: u32, v: u32, b: u32, c: u32) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.up.i32"]
    fn shfl_sync_up(mask: u32, v: u32, b: u32, c: u32) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.down.i32"]
    fn shfl_sync_down(mask: u32, v: u32, b: u32, c: u32) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly(mask: u32, v: u32, b: u32, c: u32) -> u32;
    #[link_name = "llvm.nvvm.vote.all.sync"]
    fn vote_all_sync(mask: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.any.sync"]
    fn vote_any_sync(mask: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.uni.sync"]
    fn vote_uni_sync(mask: u32, pred: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn vote_ballot_sync(mask: u32, pred: bool) -> u32;
}

#[inline(always)]
pub fn sync_threads_count(pred: bool) -> u32 {
    // SAFETY: all threads of the block take part (the caller's contract).
    unsafe { bar_red_popc_all(0, pred) }
}
/// The count a named barrier over the whole block passes: the block's threads rounded
/// up to whole warps (a partial last warp counts as 32; ≤ 1024, no overflow).
#[inline(always)]
fn whole_block_count() -> u32 {
    let d = block_dim();
    (d.x * d.y * d.z + (super::WARP_SIZE - 1)) & !(super::WARP_SIZE - 1)
}
/// `n_threads == 0` means the whole block, as an explicit count (see `barrier_arrive`).
#[inline(always)]
pub fn barrier_sync(id: u32, n_threads: u32) {
    let n = if n_threads == 0 {
        whole_block_count()
    } else {
        n_threads
    };
    // SAFETY: the caller upholds the named-barrier contract.
    unsafe { bar_sync_count(id, n) }
}
/// `n_threads == 0` means the whole block: `bar.arrive` needs a non-zero count, and the
/// `bar.sync` it pairs with must use the counted form too (a count-less `bar.sync` meeting
/// a counted `bar.arrive` is an illegal instruction, seen on H200), so both pass
/// [`whole_block_count`].
#[inline(always)]
pub fn barrier_arrive(id: u32, n_threads: u32) {
    let n = if n_threads == 0 {
        whole_block_count()
    } else {
        n_threads
    };
    // SAFETY: the caller upholds the named-barrier contract; `n` is a non-zero multiple of
    // the warp size.
    unsafe { bar_arrive_count(id, n) }
}
/// `n_threads == 0` means the whole block.
#[inline(always)]
pub fn barrier_red_or(id: u32, n_threads: u32, pred: bool) -> bool {
    // SAFETY: the caller upholds the named-barrier contract.
    unsafe {
        if n_threads == 0 {
            bar_red_or_all(id, pred)
        } else {
            bar_red_or_count(id, n_threads, pred)
        }
    }
}
#[inline(always)]
pub fn sync_warp(mask: u32) {
    // SAFETY: the caller upholds the warp-barrier contract.
    unsafe { bar_warp_sync(mask) }
}
#[inline(always)]
pub fn shfl(mode: ShflMode, mask: u32, v: u32, b: u32) -> u32 {
    // SAFETY: the caller upholds the shuffle mask contract. c = 0x1f: full-warp segment
    // with clamp at lane 31 (idx/down/bfly); c = 0 for up (clamp at lane 0).
    unsafe {
        match mode {
            ShflMode::Idx => shfl_sync_idx(mask, v, b, 0x1f),
            ShflMode::Up => shfl_sync_up(mask, v, b, 0),
            ShflMode::Down => shfl_sync_down(mask, v, b, 0x1f),
            ShflMode::Xor => shfl_sync_bfly(mask, v, b, 0x1f),
        }
    }
}
#[inline(always)]
pub fn vote(mode: VoteMode, mask: u32, pred: bool) -> bool {
    // SAFETY: the caller upholds the vote mask contract.
    unsafe {
        match mode {
            VoteMode::All => vote_all_sync(mask, pred),
            VoteMode::Any => vote_any_sync(mask, pred),
            VoteMode::Uni => vote_uni_sync(mask, pred),
        }
    }
}
#[inline(always)]
pub fn ballot(mask: u32, pred: bool) -> u32 {
    // SAFETY: the caller upholds the vote mask contract.
    unsafe { vote_ballot_sync(mask, pred) }
}
#[inline(always)]
pub fn byte_perm(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    // SAFETY: a register-only instruction.
    unsafe {
        asm!("prmt.b32 {r}, {a}, {b}, {s};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b,
             s = in(reg32) sel, options(pure, nomem, nostack))
    };
    r
}
#[inline(always)]
pub fn globaltimer() -> u64 {
    let t: u64;
    // SAFETY: reading the timer has no preconditions; volatile (not pure) on purpose.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack)) };
    t
}
#[inline(always)]
pub fn clock64() -> u64 {
    let t: u64;
    // SAFETY: reading the counter has no preconditions; volatile (not pure) on purpose.
    unsafe { asm!("mov.u64 {t}, %clock64;", t = out(reg64) t, options(nostack)) };
    t
}
#[inline(always)]
pub fn griddep_wait() {
    // SAFETY: no preconditions; it orders memory (no `nomem`).
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) }
}
#[inline(always)]
pub fn griddep_launch_dependents() {
    // SAFETY: a scheduling hint with no preconditions.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) }
}
#[inline(always)]
pub fn spin_hint() {}
#[inline(always)]
pub fn wait_begins() {}
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: a scheduling hint with no preconditions.
    unsafe { asm!("nanosleep.u32 {ns};", ns = in(reg32) ns, options(nomem, nostack)) }
}
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: `trap` aborts the kernel; it has no preconditions.
    unsafe { nvptx::trap() }
}
#[inline(always)]
pub fn dynamic_shared() -> *mut u8 {
    let p: u64;
    // SAFETY: converts the address of the declared dynamic .shared symbol.
    unsafe {
        asm!("cvta.shared.u64 {p}, symcomm_dynamic_smem;", p = out(reg64) p,
             options(pure, nomem, nostack))
    };
    p as *mut u8
}
