//! `team`: the team facts of a device communicator (world, LSA and rail teams, rank
//! conversions, factors), written by a kernel and computed on the host by the same function.

use symcomm_device::prelude::*;

use crate::geometry::gid;

/// Words written by [`team_probe`].
pub const TEAM_PROBE_WORDS: usize = 64;

/// The team facts of `comm` as 64 i32 (see [`team_probe_values`]); thread 0 only.
///
/// # Safety
/// `out` holds 64 i32.
#[kernel]
pub unsafe fn team_probe(comm: DevComm, out: *mut i32) {
    if gid() == 0 {
        let v = team_probe_values(&comm);
        for (k, x) in v.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(k) = x };
        }
    }
}

/// The values [`team_probe`] writes: world/LSA/rail teams (3 words each), their world ranks
/// for members 0..4, membership and conversions between LSA and rail and world, inner and
/// outer factors, the rank in the difference world∖LSA, LSA ranks of rail members, the
/// comm's compatibility; unused words are -7. Public so the host can compute the reference
/// with the same device-crate functions on the CPU.
pub fn team_probe_values(comm: &DevComm) -> [i32; TEAM_PROBE_WORDS] {
    let mut v = [-7i32; TEAM_PROBE_WORDS];
    let (w, l, r) = (comm.world_team(), comm.lsa_team(), comm.rail_team());
    let mut k = 0;
    let mut push = |x: i32| {
        if k < TEAM_PROBE_WORDS {
            v[k] = x;
            k += 1;
        }
    };
    for t in [w, l, r] {
        push(t.n_ranks);
        push(t.rank);
        push(t.stride);
        for m in 0..4 {
            push(comm.team_rank_to_world(&t, m));
        }
    }
    for m in 0..4 {
        push(i32::from(l.contains(&w, m)));
        push(l.try_rank_from(&w, m).unwrap_or(-1));
        push(i32::from(r.contains(&w, m)));
        push(r.try_rank_from(&w, m).unwrap_or(-1));
    }
    let inner: Team = w.inner_factor(comm.lsa_size);
    let outer: Team = w.outer_factor(comm.lsa_size);
    for t in [inner, outer] {
        push(t.n_ranks);
        push(t.rank);
        push(t.stride);
    }
    push(w.rank_in_difference(&l, 0));
    push(comm.team_rank_to_lsa(&r, r.rank));
    push(i32::from(comm.is_compatible()));
    v
}

/// The kernel on the host backend (one block of one thread) and the shared values.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn team_probe_reports_the_comm() {
        let v = team_probe_values(&DevComm::new(5, 8, 1, 4));
        assert_eq!(&v[..3], &[8, 5, 1]);
        assert_eq!(&v[7..10], &[4, 1, 1]);
        assert_eq!(&v[14..17], &[2, 1, 4]);
        let mut out = [0i32; TEAM_PROBE_WORDS];
        // SAFETY: `out` holds TEAM_PROBE_WORDS (64) i32.
        unsafe { team_probe(DevComm::new(5, 8, 1, 4), out.as_mut_ptr()) };
        assert_eq!(out, v);
    }
}
