//! Team arithmetic on the device crate's [`Team`] (`{n_ranks, rank, stride}`, NCCL's
//! `ncclTeam`): the LSA size rule and NCCL's conversions between teams seen from one rank.
//! Every function is exact for any field values (no overflow).

use symcomm_device::team::Team;

/// The LSA size for ranks whose nodes are `nodes` (index = world rank): the gcd of the lengths
/// of the maximal runs of equal consecutive entries, and of `cap` when given. 1 for no ranks.
#[doc(alias = "computeLsaSize")]
pub fn lsa_size_of<T: PartialEq>(nodes: &[T], cap: Option<usize>) -> usize {
    let mut g = cap.unwrap_or(0);
    let mut run = 0;
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 && *n != nodes[i - 1] {
            g = gcd(g, run);
            run = 0;
        }
        run += 1;
    }
    g = gcd(g, run);
    g.max(1)
}

/// Whether member `b_peer` of team `b` is also a member of team `a` (both seen from the same
/// rank). Computed without overflow for any field values: inputs no communicator produces
/// (e.g. `i32::MIN`, a stride of -1) give false unless the peer really is a member.
#[doc(alias = "ncclTeamRankIsMember")]
pub fn team_rank_is_member(a: Team, b: Team, b_peer: i32) -> bool {
    let w = world_distance(b, b_peer);
    if a.stride == 0 {
        return w == 0 && (0..a.n_ranks).contains(&a.rank);
    }
    let stride = i64::from(a.stride);
    w % stride == 0 && (0..i64::from(a.n_ranks)).contains(&(i64::from(a.rank) + w / stride))
}

/// The index in team `a` of member `b_peer` of team `b` (both seen from the same rank; no
/// membership check, like NCCL). -1 when the index does not fit in an `i32` (inputs no
/// communicator produces).
#[doc(alias = "ncclTeamRankToTeam")]
pub fn team_rank_to_team(a: Team, b: Team, b_peer: i32) -> i32 {
    if a.stride == 0 {
        return a.rank;
    }
    let index = i64::from(a.rank) + world_distance(b, b_peer) / i64::from(a.stride);
    i32::try_from(index).unwrap_or(-1)
}

/// The sub-team of `parent` made of the caller's block of `n` consecutive members.
#[doc(alias = "ncclTeamInnerFactor")]
pub fn team_inner_factor(parent: Team, n: i32) -> Team {
    Team::new(n, parent.rank % n.max(1), parent.stride)
}

/// The sub-team of `parent` made of the members at the caller's position in every block of `n`.
/// When the stride `parent.stride * n` does not fit in an `i32` (no communicator produces such
/// a team) the result is the empty team `{0, 0, 0}`, which has no members.
#[doc(alias = "ncclTeamOuterFactor")]
pub fn team_outer_factor(parent: Team, n: i32) -> Team {
    let n = n.max(1);
    match parent.stride.checked_mul(n) {
        Some(stride) => Team::new(parent.n_ranks / n, parent.rank / n, stride),
        None => Team::new(0, 0, 0),
    }
}

/// World-rank distance from the caller to member `peer` of `team`. Exact in `i64`: a difference
/// of two `i32` times an `i32` stays below 2^63 in magnitude, and so does a quotient of it plus
/// an `i32`.
pub(super) fn world_distance(team: Team, peer: i32) -> i64 {
    (i64::from(peer) - i64::from(team.rank)) * i64::from(team.stride)
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
