//! Teams: ordered subsets of the world ranks, seen from the calling rank.
//!
//! A [`Team`] is `{n_ranks, rank, stride}`: the caller is member `rank` of `n_ranks`, and
//! member `i` is world rank `my_world + (i - rank) * stride`. The world team has stride 1;
//! an LSA team (ranks that share load/store access) is a block of `lsa_size` consecutive world
//! ranks (stride 1); a rail team links the ranks with the same LSA index across LSA teams
//! (stride `lsa_size`). Same layout as NCCL's `ncclTeam` (three 32-bit ints).

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
}
