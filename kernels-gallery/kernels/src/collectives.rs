//! Data-movement collectives (no reduction): all-gather, all-to-all, broadcast. All are
//! barrier-bracketed and push with 16-byte stores into peers' windows, visiting peers in an
//! order rotated by rank.

use symcomm_device::comm::DevComm;

use crate::common::{
    Io, grid_stride, ld, ld_each, local_addr, pack_off, peer_addr, rotated, st, st_peers,
};
use crate::plan;

/// All-gather: block `rank` (`packs` packs at `dst + rank × packs × 16`) of every peer's
/// `dst` receives this rank's `src` (`packs` packs, local). Barrier-bracketed, exit `AcqRel`
/// (it stores into peers).
///
/// # Safety
/// `src` valid for `packs` packs locally; `dst` a window of `lsa_size × packs` packs on every
/// rank; `comm` with `grid_dim().x` barriers; the same launch on every LSA rank.
#[inline(always)]
pub unsafe fn all_gather(comm: &DevComm, io: Io) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    // SAFETY: forwarded.
    unsafe {
        let inp = local_addr(io.src);
        let block = pack_off(io.packs * me as u64);
        let (first, stride) = grid_stride();
        let mut j = first;
        while j < io.packs {
            let o = pack_off(j);
            st_peers(io.dst, me, n, block + o, ld(inp + o));
            j += stride;
        }
    }
}

/// All-to-all: block `p` of this rank's `src` goes to block `rank` of peer `p`'s `dst`
/// (blocks of `packs` packs). Barrier-bracketed, exit `AcqRel`.
///
/// Each thread moves pack `j` of every block before it moves on to its next pack: the copy
/// into this rank's own block (local memory) and the pushes to the peers interleave, so
/// NVLink is never idle while the local copy runs, and with 2, 4 or 8 ranks all `n` loads of
/// a pack are in flight at once. (Copying block by block, all threads did their local block
/// first: on 2×H200 that left the all-to-all at 0.84–0.91× NCCL's bus bandwidth from 64 MiB.)
///
/// # Safety
/// `src` valid for `lsa_size × packs` packs locally; `dst` a window of that size on every
/// rank, not overlapping `src`; otherwise as [`all_gather`].
#[inline(always)]
pub unsafe fn all_to_all(comm: &DevComm, io: Io) {
    // SAFETY: forwarded.
    unsafe {
        match comm.lsa_size {
            2 => all_to_all_n::<2>(comm, io),
            4 => all_to_all_n::<4>(comm, io),
            8 => all_to_all_n::<8>(comm, io),
            _ => all_to_all_any(comm, io),
        }
    }
}

/// [`all_to_all`]'s body for `N` ranks: the `N` source and destination addresses computed
/// once, the `N` loads of a pack issued before its `N` stores.
#[inline(always)]
unsafe fn all_to_all_n<const N: usize>(comm: &DevComm, io: Io) {
    let (me, packs) = (comm.lsa_rank, io.packs);
    // SAFETY: live descriptors (the caller's contract).
    let (inp, out) = unsafe { (local_addr(io.src), local_addr(io.dst)) };
    let mine = pack_off(packs * me as u64);
    let mut from = [0u64; N];
    let mut to = [0u64; N];
    let mut k = 0;
    while k < N {
        let p = rotated(me, k as i32, N as i32);
        from[k] = inp + pack_off(packs * p as u64);
        to[k] = if p == me {
            out
        } else {
            // SAFETY: as above.
            unsafe { peer_addr(io.dst, p) }
        } + mine;
        k += 1;
    }
    let (first, stride) = grid_stride();
    let mut j = first;
    while j < packs {
        let o = pack_off(j);
        // SAFETY: j < packs: inside block `k` of the local source.
        let v = unsafe { ld_each(&from, o) };
        k = 0;
        while k < N {
            // SAFETY: inside block `me` of peer `k`'s destination; only this thread of this
            // rank writes that pack.
            unsafe { st(to[k] + o, v[k]) };
            k += 1;
        }
        j += stride;
    }
}

/// [`all_to_all`]'s body for any number of ranks: pack by pack, peers in rotated order.
#[inline(always)]
unsafe fn all_to_all_any(comm: &DevComm, io: Io) {
    let (me, n, packs) = (comm.lsa_rank, comm.lsa_size, io.packs);
    // SAFETY: live descriptors (the caller's contract).
    let inp = unsafe { local_addr(io.src) };
    let mine = pack_off(packs * me as u64);
    let (first, stride) = grid_stride();
    let mut j = first;
    while j < packs {
        let o = pack_off(j);
        for k in 0..n {
            let p = rotated(me, k, n);
            // SAFETY: as in `all_to_all_n`.
            unsafe {
                let v = ld(inp + pack_off(packs * p as u64) + o);
                st(peer_addr(io.dst, p) + mine + o, v);
            }
        }
        j += stride;
    }
}

/// Broadcast of `root`'s `src` (a window, `packs` packs) into every rank's `dst` (a window):
/// each rank reads its [`plan::bcast_slice`] from the root and stores it into every rank
/// that receives (scatter + all-gather). From three ranks on, the root takes no slice and
/// receives nothing: it copies its `src` into its own `dst` locally (nothing when in place),
/// so it sends each byte over NVLink once. (With `n` slices, one of them the root's, the root
/// sent `2(n − 1)/n` of the data: 1.13–1.41× NCCL's time from 32 MiB on 4×H200.)
/// Barrier-bracketed, exit `AcqRel`.
///
/// # Safety
/// `src` and `dst` windows of `packs` packs on every rank (`dst` may equal `src`);
/// otherwise as [`all_gather`].
#[inline(always)]
pub unsafe fn broadcast(comm: &DevComm, io: Io, root: i32) {
    let (me, n) = (comm.lsa_rank, comm.lsa_size);
    let (first, stride) = grid_stride();
    let root_moves = plan::bcast_root_moves(n as u64);
    // SAFETY: forwarded.
    unsafe {
        if me == root && !root_moves {
            let (from, to) = (local_addr(io.src), local_addr(io.dst));
            if from != to {
                let mut j = first;
                while j < io.packs {
                    let o = pack_off(j);
                    st(to + o, ld(from + o));
                    j += stride;
                }
            }
            return;
        }
        let (lo, hi) = plan::bcast_slice(io.packs, n as u64, me as u64, root as u64);
        let from = peer_addr(io.src, root);
        let mut j = lo + first;
        while j < hi {
            let o = pack_off(j);
            let v = ld(from + o);
            for k in 0..n {
                let p = rotated(me, k, n);
                if p != root || root_moves {
                    st(peer_addr(io.dst, p) + o, v);
                }
            }
            j += stride;
        }
    }
}
