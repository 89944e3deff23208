//! `barrier`: LSA barrier sessions: rounds on a team of one, two "ranks" publishing data
//! through a flat VA with a block or a warp coop, and a barrier whose peer never arrives
//! (timeout and abort). The multimem form is load-only and lives in `multimem`.

use symcomm_device::arch;
use symcomm_device::barrier::BarrierMode;
use symcomm_device::mem;
use symcomm_device::prelude::*;

/// Each block runs `rounds` timed `sync(AcqRel)` rounds on barrier `block_idx` of `comm`
/// (typically a team of one) with a block-wide coop, then finishes. `out[block]` = the
/// first non-zero result code (0 if all succeeded), `out[blocks + block]` = the final epoch.
///
/// # Safety
/// `comm` is a valid communicator with at least `grid_dim.x` LSA barriers; `out` holds
/// 2 × blocks u32.
#[kernel]
pub unsafe fn barrier_rounds(comm: DevComm, out: *mut u32, rounds: u32, timeout_ns: u64) {
    let cta = Cta::new();
    let b = block_idx().x;
    // SAFETY: launch contract.
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    let mut code = 0;
    for _ in 0..rounds {
        let r = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
        if code == 0 {
            code = WaitError::result_code(r);
        }
    }
    let epoch = bar.epoch();
    bar.finish(&cta);
    if thread_idx().x == 0 {
        // SAFETY: launch contract.
        unsafe {
            *out.add(b as usize) = code;
            *out.add((grid_dim().x + b) as usize) = epoch;
        }
    }
}

/// Words per block written by [`barrier_pair`].
pub const BARRIER_PAIR_WORDS: usize = 4;

/// Two "ranks" in one launch: block `b` (b = 0, 1) plays LSA rank `b` of a 2-rank team whose
/// resource window is the flat VA described by `comm` (two mapped slots). Per round `r`:
/// thread `t` writes `payload(b, r, t)` into the **peer's** data area (at byte `data_offset`
/// of the peer's slot, `u32` index `t`), then `sync_timeout(AcqRel)`; after the barrier it
/// checks its **own** data area holds `payload(1 - b, r, t)`. Coop: the given `coop_kind`
/// (0 = Cta, 1 = Warp with warp 0 only). Per block 4 words at `out[4 b ..]`: first non-zero
/// result code, number of payload mismatches, final epoch, rounds completed.
///
/// # Safety
/// `comm` describes the 2-slot flat VA with LSA barriers (one) and `data_offset` leaves room
/// for `block_dim.x` u32 per slot; two blocks; `out` holds 8 u32.
#[kernel]
pub unsafe fn barrier_pair(
    comm: DevComm,
    out: *mut u32,
    rounds: u32,
    data_offset: u64,
    timeout_ns: u64,
    coop_kind: u32,
) {
    let b = block_idx().x as i32;
    let mut c = comm;
    c.lsa_rank = b;
    c.rank = b;
    if coop_kind == 1 {
        if arch::warp_idx() == 0 {
            let w = Warp::new();
            // SAFETY: launch contract.
            unsafe { pair_rounds(&w, &c, out, rounds, data_offset, timeout_ns) };
        }
    } else {
        // SAFETY: launch contract.
        unsafe { pair_rounds(&Cta::new(), &c, out, rounds, data_offset, timeout_ns) };
    }
}

#[inline(always)]
fn payload(rank: i32, round: u32, t: u32) -> u32 {
    (rank as u32) << 28 ^ round << 12 ^ t ^ 0x0a5a_0000
}

#[inline(always)]
unsafe fn pair_rounds<C: Coop>(
    coop: &C,
    c: &DevComm,
    out: *mut u32,
    rounds: u32,
    data_offset: u64,
    timeout_ns: u64,
) {
    let me = c.lsa_rank;
    let peer = 1 - me;
    let t = coop.thread_rank();
    let mine = c
        .resource_lsa_ptr(0, me)
        .wrapping_add(data_offset as usize)
        .cast::<u32>();
    let theirs = c
        .resource_lsa_ptr(0, peer)
        .wrapping_add(data_offset as usize)
        .cast::<u32>();
    // SAFETY: launch contract.
    let mut bar = unsafe {
        LsaBarrier::with_team(
            coop,
            c,
            c.lsa_team(),
            c.lsa_barrier,
            0,
            BarrierMode::Unicast,
        )
    };
    let mut code = 0;
    let mut bad = 0u32;
    let mut done = 0;
    for r in 0..rounds {
        // SAFETY: launch contract: slot t of the peer's data area.
        unsafe {
            mem::store(
                theirs.wrapping_add(t as usize),
                payload(me, r, t),
                StoreOrder::Weak,
                Scope::Sys,
            )
        };
        let res = bar.sync_timeout(coop, Ordering::AcqRel, timeout_ns);
        if res.is_err() {
            code = WaitError::result_code(res);
            break;
        }
        // SAFETY: launch contract.
        let seen = unsafe { mem::load(mine.wrapping_add(t as usize), LoadOrder::Weak, Scope::Sys) };
        bad += u32::from(seen != payload(peer, r, t));
        // Nobody overwrites our data area before we have read it.
        let res = bar.sync_timeout(coop, Ordering::Release, timeout_ns);
        if res.is_err() {
            code = WaitError::result_code(res);
            break;
        }
        done += 1;
    }
    let epoch = bar.epoch();
    bar.finish(coop);
    let bad_total = coop_count(coop, bad);
    if coop.is_leader() {
        // SAFETY: launch contract.
        unsafe {
            let o = out.add(BARRIER_PAIR_WORDS * me as usize);
            *o = code;
            *o.add(1) = bad_total;
            *o.add(2) = epoch;
            *o.add(3) = done;
        }
    }
}

/// Non-zero if any member of the coop saw a mismatch (a count would need shared memory).
#[inline(always)]
fn coop_count<C: Coop>(coop: &C, bad: u32) -> u32 {
    u32::from(coop.any(bad != 0))
}

/// A barrier whose peer never arrives: one block, LSA team of `comm` (size 2, nobody plays
/// rank 1), one `sync_timeout(Acquire)` with `timeout_ns`. `out[0]` = result code (expected 1
/// = timeout, or 2 = aborted when `comm.abort_flag` points to a raised flag), `out[1..3]` =
/// elapsed `%globaltimer` nanoseconds (lo, hi). The session is finished either way.
///
/// # Safety
/// `comm` valid with one LSA barrier; `out` holds 3 u32.
#[kernel]
pub unsafe fn barrier_lonely(comm: DevComm, out: *mut u32, timeout_ns: u64) {
    let cta = Cta::new();
    let t0 = arch::globaltimer();
    // SAFETY: launch contract.
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, 0) };
    let r = bar.sync_timeout(&cta, Ordering::Acquire, timeout_ns);
    bar.finish(&cta);
    let dt = arch::globaltimer() - t0;
    if thread_idx().x == 0 {
        // SAFETY: launch contract.
        unsafe {
            *out = WaitError::result_code(r);
            *out.add(1) = dt as u32;
            *out.add(2) = (dt >> 32) as u32;
        }
    }
}

/// The barrier kernels on the host backend (one block of one thread): their logic, including
/// the timeout and abort paths.
#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use symcomm_device::comm::{LsaBarrierHandle, ResourceWindow};

    fn comm_with_resource(buf: &mut [u32], n_ranks: i32, n_barriers: i32) -> DevComm {
        let mut c = DevComm::new(0, n_ranks, 0, n_ranks);
        c.resource = ResourceWindow {
            lsa_flat_base: buf.as_mut_ptr() as u64,
            stride4g: 0,
            mc_offset4k: 0,
        };
        c.lsa_barrier = LsaBarrierHandle {
            buf_handle: 0,
            n_barriers,
        };
        c
    }

    // ANCHOR: team_of_one
    #[test]
    fn a_team_of_one_passes_every_round_and_persists_the_epoch() {
        let mut buf = vec![0u32; 16];
        let comm = comm_with_resource(&mut buf, 1, 2);
        let mut out = [u32::MAX; 2];
        for launch in 1..=3 {
            // SAFETY: outside an emulated launch this is one block; `comm` has 2 LSA barriers
            // in `buf` (alive for the test) and `out` holds 2 u32.
            unsafe { barrier_rounds(comm, out.as_mut_ptr(), 4, 1_000_000_000) };
            assert_eq!(out, [0, 4 * launch]);
        }
        assert_eq!(buf[2], 12); // unicast epoch of barrier 0: word n + 0
    }
    // ANCHOR_END: team_of_one

    #[test]
    fn a_missing_peer_times_out_and_an_abort_flag_ends_the_wait() {
        let mut buf = vec![0u32; 16];
        let mut comm = comm_with_resource(&mut buf, 2, 1);
        let mut out = [u32::MAX; 3];
        // SAFETY: `comm` has one LSA barrier in `buf` (alive for the test); `out` holds 3 u32.
        unsafe { barrier_lonely(comm, out.as_mut_ptr(), 20_000_000) };
        assert_eq!(out[0], 1, "timeout code");
        let dt = u64::from(out[1]) | (u64::from(out[2]) << 32);
        assert!(dt >= 20_000_000, "waited {dt} ns");
        // Our arrival landed in the peer's inbox (same memory: stride 0): word 3n + 0*2 + 0.
        assert_eq!(buf[3], 1);
        let flag = 1u32;
        comm.abort_flag = &raw const flag as u64;
        // SAFETY: as above; the abort flag is `flag`, alive until the call returns.
        unsafe { barrier_lonely(comm, out.as_mut_ptr(), 10_000_000_000) };
        assert_eq!(out[0], 2, "aborted code");
    }
}
