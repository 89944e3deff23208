//! Teams: ordered subsets of the world ranks, seen from the calling rank.
//!
//! A [`Team`] is `{n_ranks, rank, stride}`: the caller is member `rank` of `n_ranks`, and
//! member `i` is world rank `my_world + (i - rank) * stride`. The world team has stride 1;
//! an LSA team (ranks that share load/store access) is a block of `lsa_size` consecutive world
//! ranks (stride 1); a rail team links the ranks with the same LSA index across LSA teams
//! (stride `lsa_size`). Same layout as NCCL's `ncclTeam` (three 32-bit ints).
//!
//! Conversions between two teams of the same caller go through world-rank distances, so they
//! need no communicator: [`Team::contains`] and [`Team::rank_from`] take the other team and a
//! member of it. Every function is pure arithmetic, identical on the GPU and the host.
//!
//! The teams of a communicator ([`Team::world`], [`Team::lsa`], [`Team::rail`]) are made in
//! [`crate::comm`], from a [`DevComm`](crate::comm::DevComm).

/// Division by a precomputed reciprocal (used for team arithmetic; defined in [`crate::util`]).
pub use crate::util::{idiv_fast32, idiv_rcp32, imod_fast32};

/// An ordered subset of the world ranks, described from the calling rank's point of view.
#[doc(alias = "ncclTeam")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Team {
    /// Number of members.
    pub n_ranks: i32,
    /// The caller's index among the members.
    pub rank: i32,
    /// World-rank distance between consecutive members.
    pub stride: i32,
}

const _: () = {
    assert!(core::mem::size_of::<Team>() == 12);
    assert!(core::mem::offset_of!(Team, n_ranks) == 0);
    assert!(core::mem::offset_of!(Team, rank) == 4);
    assert!(core::mem::offset_of!(Team, stride) == 8);
};

// SAFETY: three `i32`, `repr(C)`, 12 bytes (asserted above): no padding, every bit pattern is
// a value. A team may be a kernel argument.
unsafe impl bytemuck::Zeroable for Team {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Team {}

impl Team {
    /// A team of `n_ranks` members where the caller is member `rank`, `stride` apart.
    pub const fn new(n_ranks: i32, rank: i32, stride: i32) -> Team {
        Team {
            n_ranks,
            rank,
            stride,
        }
    }

    /// The world rank of member `r`, given the caller's world rank `my_world`.
    #[doc(alias = "ncclTeamRankToWorld")]
    pub const fn to_world(&self, my_world: i32, r: i32) -> i32 {
        my_world + (r - self.rank) * self.stride
    }

    /// The LSA rank of member `r`, given the caller's LSA rank `my_lsa` (meaningful only when
    /// member `r` is in the caller's LSA team; not checked).
    #[doc(alias = "ncclTeamRankToLsa")]
    #[inline(always)]
    pub const fn to_lsa(&self, my_lsa: i32, r: i32) -> i32 {
        my_lsa + (r - self.rank) * self.stride
    }

    /// True when `r` is a valid member index (`0 <= r < n_ranks`).
    #[inline(always)]
    pub const fn has_rank(&self, r: i32) -> bool {
        0 <= r && r < self.n_ranks
    }

    /// True when member `other_rank` of `other` (a team of the same caller) is also a member
    /// of `self`. Like the other conversions it assumes real teams (those of [`Team::world`],
    /// [`Team::lsa`], [`Team::rail`] and their factors: a positive stride, world ranks that fit
    /// an `i32`); it does no overflow or zero-stride checks, which the host's
    /// `symcomm::comm::team_rank_is_member` does.
    #[doc(alias = "ncclTeamRankIsMember")]
    #[inline(always)]
    pub const fn contains(&self, other: &Team, other_rank: i32) -> bool {
        let w = (other_rank - other.rank) * other.stride;
        let r = self.rank + w / self.stride;
        w % self.stride == 0 && 0 <= r && r < self.n_ranks
    }

    /// The index in `self` of member `other_rank` of `other` (a team of the same caller);
    /// meaningful only when [`contains`](Self::contains) holds.
    #[doc(alias = "ncclTeamRankToTeam")]
    #[inline(always)]
    pub const fn rank_from(&self, other: &Team, other_rank: i32) -> i32 {
        self.rank + (other_rank - other.rank) * other.stride / self.stride
    }

    /// [`rank_from`](Self::rank_from), or `None` when the rank is not a member of `self`.
    #[inline(always)]
    pub const fn try_rank_from(&self, other: &Team, other_rank: i32) -> Option<i32> {
        if self.contains(other, other_rank) {
            Some(self.rank_from(other, other_rank))
        } else {
            None
        }
    }

    /// The caller's block of `n` consecutive members: `{n, rank % n, stride}`.
    /// `n` must divide `n_ranks`.
    #[doc(alias = "ncclTeamInnerFactor")]
    #[inline(always)]
    pub const fn inner_factor(&self, n: i32) -> Team {
        Team::new(n, self.rank % n, self.stride)
    }

    /// The members with the caller's position in every block of `n`:
    /// `{n_ranks / n, rank / n, stride * n}`. `n` must divide `n_ranks`.
    #[doc(alias = "ncclTeamOuterFactor")]
    #[inline(always)]
    pub const fn outer_factor(&self, n: i32) -> Team {
        Team::new(self.n_ranks / n, self.rank / n, self.stride * n)
    }

    /// The `index`-th member (in `self`'s order) of `self` that is not in `subset`, as an
    /// index in `self`. `subset` must be a subteam of `self` (every member of `subset` is a
    /// member of `self`) and `index < n_ranks - subset.n_ranks`.
    #[doc(alias = "ncclTeamRankInDifference")]
    pub const fn rank_in_difference(&self, subset: &Team, index: i32) -> i32 {
        // Members of `subset` as indices of `self`: first + k * step, k in 0..subset.n_ranks.
        let first = self.rank_from(subset, 0);
        let step = subset.stride / self.stride;
        // Walk `self` in order, skipping subset members, until `index` others were seen.
        let mut seen = 0;
        let mut r = 0;
        while r < self.n_ranks {
            let d = r - first;
            let in_subset = d >= 0 && d % step == 0 && d / step < subset.n_ranks;
            if !in_subset {
                if seen == index {
                    return r;
                }
                seen += 1;
            }
            r += 1;
        }
        -1
    }

    /// Member indices `0..n_ranks`.
    #[inline(always)]
    pub fn ranks(&self) -> core::ops::Range<i32> {
        0..self.n_ranks
    }

    /// The other members, starting after the caller and wrapping around
    /// (`rank + 1, rank + 2, …, rank - 1` modulo `n_ranks`): the usual peer order that spreads
    /// traffic over the links.
    #[inline(always)]
    pub fn peers(&self) -> impl Iterator<Item = i32> + use<> {
        let (n, me) = (self.n_ranks, self.rank);
        (1..n.max(1)).map(move |i| {
            let p = me + i;
            if p >= n { p - n } else { p }
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::comm::DevComm;
    use std::vec::Vec;

    /// Every team of a world of `w` ranks that contains `me`, as explicit world-rank lists
    /// (arithmetic progressions), paired with its `Team`.
    fn teams_of(w: i32, me: i32) -> Vec<(Team, Vec<i32>)> {
        let mut out = Vec::new();
        for stride in 1..=w {
            for n in 1..=w {
                for rank in 0..n {
                    let first = me - rank * stride;
                    let last = first + (n - 1) * stride;
                    if first >= 0 && last < w {
                        let members = (0..n).map(|i| first + i * stride).collect();
                        out.push((Team::new(n, rank, stride), members));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn conversions_match_a_brute_force_reference_for_small_teams() {
        for w in 1..=9 {
            for me in 0..w {
                let teams = teams_of(w, me);
                for (a, am) in &teams {
                    for (r, &world) in am.iter().enumerate() {
                        assert_eq!(a.to_world(me, r as i32), world);
                    }
                    assert!(a.has_rank(a.rank) && !a.has_rank(a.n_ranks) && !a.has_rank(-1));
                    for (b, bm) in &teams {
                        for (br, world) in bm.iter().enumerate() {
                            let expect = am.iter().position(|x| x == world);
                            let br = br as i32;
                            assert_eq!(a.contains(b, br), expect.is_some(), "{a:?} {b:?} {br}");
                            assert_eq!(a.try_rank_from(b, br), expect.map(|i| i as i32));
                            if let Some(i) = expect {
                                assert_eq!(a.rank_from(b, br), i as i32);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn factors_and_difference_match_explicit_sets() {
        for w in 1..=12 {
            for me in 0..w {
                for (t, members) in teams_of(w, me) {
                    for n in (1..=t.n_ranks).filter(|n| t.n_ranks % n == 0) {
                        let inner = t.inner_factor(n);
                        let block = (t.rank / n) * n;
                        let want: Vec<i32> = members[block as usize..(block + n) as usize].to_vec();
                        let got: Vec<i32> = inner.ranks().map(|r| inner.to_world(me, r)).collect();
                        assert_eq!(got, want, "inner {t:?} {n}");
                        let outer = t.outer_factor(n);
                        let want: Vec<i32> = members
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| *i as i32 % n == t.rank % n)
                            .map(|(_, &m)| m)
                            .collect();
                        let got: Vec<i32> = outer.ranks().map(|r| outer.to_world(me, r)).collect();
                        assert_eq!(got, want, "outer {t:?} {n}");
                        for sub in [inner, outer] {
                            let rest: Vec<i32> =
                                (0..t.n_ranks).filter(|&r| !sub.contains(&t, r)).collect();
                            for (k, &r) in rest.iter().enumerate() {
                                assert_eq!(t.rank_in_difference(&sub, k as i32), r);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn world_lsa_and_rail_teams_come_from_the_comm() {
        for n in 1..=16 {
            for lsa in (1..=n).filter(|l| n % l == 0) {
                for rank in 0..n {
                    let c = DevComm::new(rank, n, rank % lsa, lsa);
                    assert_eq!(Team::world(&c), Team::new(n, rank, 1));
                    assert_eq!(Team::lsa(&c), Team::new(lsa, rank % lsa, 1));
                    let rail = Team::rail(&c);
                    assert_eq!(rail, Team::world(&c).outer_factor(lsa));
                    for r in rail.ranks() {
                        assert_eq!(rail.to_world(rank, r) % lsa, rank % lsa);
                    }
                }
            }
        }
    }

    #[test]
    fn peers_rotate_after_the_caller() {
        let t = Team::new(4, 2, 1);
        assert_eq!(t.peers().collect::<Vec<_>>(), [3, 0, 1]);
        assert_eq!(Team::new(1, 0, 1).peers().count(), 0);
    }
}
