//! Data-movement collectives (no reduction): all-gather, all-to-all, broadcast. All are
//! barrier-bracketed and push with 16-byte stores into peers' windows, visiting peers in an
//! order rotated by rank.

use symcomm_device::comm::DevComm;
use symcomm_device::mem::Ordering;
use symcomm_device::ptr::SymPtr;

use crate::common::{bracketed, grid_stride, ld, local_addr, pack_off, peer_addr, rotated, st};
use crate::plan;

/// All-gather: block `rank` (`packs` packs at `dst + rank × packs × 16`) of every peer's
/// `dst` receives this rank's `src` (`packs` packs, local).
///
/// # Safety
/// `src` valid for `packs` packs locally; `dst` a window of `lsa_size × packs` packs on every
/// rank; `comm` with `grid_dim().x` barriers; the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn all_gather(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded.
    unsafe {
        bracketed(comm, Ordering::AcqRel, timeout_ns, status, || {
            let (me, n) = (comm.lsa_rank, comm.lsa_size);
            let inp = local_addr(src);
            let block = pack_off(packs * me as u64);
            let (first, stride) = grid_stride();
            let mut j = first;
            while j < packs {
                let o = pack_off(j);
                let v = ld(inp + o);
                for k in 0..n {
                    st(peer_addr(dst, rotated(me, k, n)) + block + o, v);
                }
                j += stride;
            }
        })
    }
}

/// All-to-all: block `p` of this rank's `src` goes to block `rank` of peer `p`'s `dst`
/// (blocks of `packs` packs).
///
/// # Safety
/// `src` valid for `lsa_size × packs` packs locally; `dst` a window of that size on every
/// rank, not overlapping `src`; otherwise as [`all_gather`].
#[inline(always)]
pub unsafe fn all_to_all(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded.
    unsafe {
        bracketed(comm, Ordering::AcqRel, timeout_ns, status, || {
            let (me, n) = (comm.lsa_rank, comm.lsa_size);
            let inp = local_addr(src);
            let mine = pack_off(packs * me as u64);
            let (first, stride) = grid_stride();
            // Each thread walks the peers in rotated order for its packs.
            for k in 0..n {
                let p = rotated(me, k, n);
                let from = inp + pack_off(packs * p as u64);
                let to = peer_addr(dst, p) + mine;
                let mut j = first;
                while j < packs {
                    let o = pack_off(j);
                    st(to + o, ld(from + o));
                    j += stride;
                }
            }
        })
    }
}

/// Broadcast of `root`'s `src` (a window, `packs` packs) into every rank's `dst` (a window):
/// rank `r` reads slice `r` from the root and stores it into every peer (scatter +
/// all-gather, so the root sends each byte once).
///
/// # Safety
/// `src` and `dst` windows of `packs` packs on every rank (`dst` may equal `src`);
/// otherwise as [`all_gather`].
#[inline(always)]
pub unsafe fn broadcast(
    comm: &DevComm,
    src: SymPtr<u8>,
    dst: SymPtr<u8>,
    packs: u64,
    root: i32,
    timeout_ns: u64,
    status: *mut u32,
) {
    // SAFETY: forwarded.
    unsafe {
        bracketed(comm, Ordering::AcqRel, timeout_ns, status, || {
            let (me, n) = (comm.lsa_rank, comm.lsa_size);
            let (lo, hi) = plan::slice(packs, n as u64, me as u64);
            let from = peer_addr(src, root);
            let (first, stride) = grid_stride();
            let mut j = lo + first;
            while j < hi {
                let o = pack_off(j);
                let v = ld(from + o);
                for k in 0..n {
                    st(peer_addr(dst, rotated(me, k, n)) + o, v);
                }
                j += stride;
            }
        })
    }
}
