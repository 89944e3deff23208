//! `window` and `ptr`: window and `SymPtr` address arithmetic against a descriptor in global
//! memory (local, LSA, peer, team and multimem pointers, the resource window), and writes
//! through `SymPtr::local`.

use symcomm_device::prelude::*;

use crate::geometry::gid;

/// Number of u64 written by [`window_math`].
pub const WINDOW_MATH_WORDS: usize = 24;

/// Window and SymPtr address arithmetic against the descriptor of `win` (24 u64 in `out`,
/// thread 0; see the host for the list), then every thread writes `gid + 1` through
/// `SymPtr::local()` of `sym` (an f32 buffer of the window) element `gid`, as `f32`.
///
/// # Safety
/// `win` names a descriptor in global memory whose local copy (`local_ptr(off)` for the byte
/// offsets of `sym` + threads) is real, writable memory; `out` holds 24 u64.
#[kernel]
pub unsafe fn window_math(win: WindowHandle, comm: DevComm, sym: SymPtr<f32>, out: *mut u64) {
    let i = gid();
    if i == 0 {
        // SAFETY: launch contract (`win` names a descriptor in global memory).
        let w = unsafe { win.get() };
        let team = comm.lsa_team();
        // SAFETY: launch contract (addresses only, nothing dereferenced here).
        let words: [u64; WINDOW_MATH_WORDS] = unsafe {
            [
                w.local_ptr(0) as u64,
                w.local_ptr(4096) as u64,
                w.lsa_ptr(16, 0) as u64,
                w.lsa_ptr(16, 1) as u64,
                w.lsa_ptr(16, 3) as u64,
                w.peer_ptr(8, comm.rank + 1) as u64,
                w.try_peer_ptr(8, comm.rank + 1, &comm)
                    .map_or(0, |p| p as u64),
                w.try_peer_ptr(8, comm.rank + comm.lsa_size, &comm)
                    .map_or(0, |p| p as u64),
                w.try_peer_ptr(8, comm.rank - comm.lsa_rank - 1, &comm)
                    .map_or(0, |p| p as u64),
                w.team_peer_ptr(32, &team, 0) as u64,
                w.multimem_ptr(64, &comm) as u64,
                sym.local() as u64,
                (sym + 5).local() as u64,
                (sym + 5).lsa(1) as u64,
                sym.peer(&team, 0) as u64,
                sym.peer_world(comm.rank) as u64,
                sym.lsa_multimem(&comm) as u64,
                ((sym + 9) - sym) as u64,
                sym.cast::<u64>().add(3).offset as u64,
                symcomm_device::window::add4g(0x0000_1234_5678_9abc, 7),
                comm.resource_local_ptr(3) as u64,
                comm.resource_lsa_ptr(1, 1) as u64,
                comm.resource_multimem_ptr(2) as u64,
                w.lsa_rank() as u64,
            ]
        };
        for (k, x) in words.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(k) = x };
        }
    }
    // SAFETY: launch contract: the local copy holds one f32 per thread.
    unsafe { *(sym + i).local() = (i + 1) as f32 };
}

/// The kernel on the host backend (one block of one thread), against the flat-VA model.
#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    #[test]
    fn window_math_matches_the_flat_va_model_on_the_host() {
        let mut target = vec![0f32; 64];
        let base = symcomm_device::window::add4g(target.as_mut_ptr() as u64, 2u32.wrapping_neg());
        let w = Window {
            lsa_flat_base: base,
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            mc_offset4k: 9,
            ..Window::default()
        };
        let mut comm = DevComm::new(5, 8, 1, 4);
        comm.lsa_multimem.mc_base = 0x7000_0000_0000;
        let handle = WindowHandle::from_ptr(&raw const w);
        let sym: SymPtr<f32> = handle.sym(4);
        let mut out = [0u64; WINDOW_MATH_WORDS];
        // SAFETY: `w` is a descriptor whose local copy is `target` (alive, writable, large
        // enough for the offsets the kernel writes); `out` holds WINDOW_MATH_WORDS u64.
        unsafe { window_math(handle, comm, sym, out.as_mut_ptr()) };
        let t = target.as_ptr() as u64;
        assert_eq!(out[0], t);
        assert_eq!(out[11], t + 16);
        assert_eq!(out[7], 0);
        assert_eq!(out[8], 0);
        assert_eq!(out[10], 0x7000_0000_0000 + 9 * 4096 + 64);
        assert_eq!(out[17], 9);
        assert_eq!(target[4], 1.0); // thread 0 wrote element 0 of `sym` (byte 16)
    }
}
