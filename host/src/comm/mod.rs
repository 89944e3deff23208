//! The communicator: a rank's place in the job (world rank and size, CUDA device, node) and the
//! teams derived from where every rank runs.
//!
//! A [`Communicator`] owns the rank's [`Bootstrap`] and, at construction (a collective), learns
//! every rank's node and device. From the node of every rank it derives the **LSA team** (ranks
//! with load/store access to each other's memory): the LSA size is the gcd of the lengths of the
//! maximal runs of consecutive world ranks on the same node ([`lsa_size_of`]), so LSA teams are
//! aligned blocks of `lsa_size` consecutive ranks that never span two nodes. Layouts (8) → 8,
//! (8,8) → 8, (8,8,4) → 4; ranks of a node not contiguous in world order → small teams, down
//! to 1. `SYMCOMM_LSA_SIZE=k` caps it (the result is `gcd(k, runs…)`, like
//! `NCCL_LSA_TEAM_SIZE`): it can shrink LSA teams, never make one span nodes.
//!
//! Teams use the device crate's [`Team`] (`{n_ranks, rank, stride}`, NCCL's `ncclTeam`):
//! world `{size, rank, 1}`, LSA `{lsa_size, rank % lsa_size, 1}`, rail
//! `{size / lsa_size, rank / lsa_size, lsa_size}` (the ranks with the same LSA index across LSA
//! teams). The conversions between teams ([`team_rank_to_team`], [`team_rank_is_member`],
//! [`team_inner_factor`], [`team_outer_factor`]) are NCCL's formulas.
//!
//! The node of a process is a hash of the host name and the kernel's boot id (so two containers
//! on one host with the same host name but different kernels are different nodes);
//! `SYMCOMM_NODE_ID` overrides it (e.g. to emulate multi-node layouts on one machine). The CUDA
//! device is `SYMCOMM_DEVICE`, else the launcher's local rank, else 0; it is only recorded here,
//! CUDA is not touched.

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use symcomm_device::team::Team;

use crate::bootstrap::{Bootstrap, DEFAULT_TIMEOUT, LaunchEnv, fnv1a64, parse_timeout};
use crate::window::SymState;
use crate::{Error, Result};

/// Longest node name exchanged (longer ones are cut; the node id hashes the full name).
const MAX_NODE_NAME: usize = 255;

/// Per-rank settings of [`Communicator::init`]; unset fields come from the defaults described
/// in the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommOptions {
    device: Option<usize>,
    node_id: Option<String>,
    lsa_cap: Option<usize>,
}

impl CommOptions {
    /// No overrides.
    pub fn new() -> CommOptions {
        CommOptions::default()
    }

    /// Reads `SYMCOMM_DEVICE`, `SYMCOMM_NODE_ID` and `SYMCOMM_LSA_SIZE`.
    pub fn from_env() -> Result<CommOptions> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`CommOptions::from_env`], reading variables through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<CommOptions> {
        let number = |var: &str| -> Result<Option<usize>> {
            match get(var) {
                None => Ok(None),
                Some(t) => t.trim().parse().map(Some).map_err(|_| Error::Env {
                    var: var.into(),
                    reason: format!("{t:?} is not a non-negative integer"),
                }),
            }
        };
        Ok(CommOptions {
            device: number("SYMCOMM_DEVICE")?,
            node_id: get("SYMCOMM_NODE_ID").filter(|s| !s.is_empty()),
            lsa_cap: number("SYMCOMM_LSA_SIZE")?.filter(|&k| k > 0),
        })
    }

    /// Uses CUDA device `ordinal`.
    pub fn device(mut self, ordinal: usize) -> CommOptions {
        self.device = Some(ordinal);
        self
    }

    /// Declares this rank to be on node `name` instead of detecting it.
    pub fn node_id(mut self, name: impl Into<String>) -> CommOptions {
        self.node_id = Some(name.into());
        self
    }

    /// Caps the LSA size at `k` (the result is `gcd(k, run lengths)`); 0 means no cap.
    pub fn lsa_size(mut self, k: usize) -> CommOptions {
        self.lsa_cap = (k > 0).then_some(k);
        self
    }
}

/// One rank's view of the job. See the module documentation.
#[derive(Debug)]
pub struct Communicator {
    bootstrap: Bootstrap,
    device: usize,
    ranks: Vec<RankInfo>,
    lsa_size: usize,
    /// Symmetric-memory state (flat VA, slot space, fd server), created by the first window
    /// registration; shared with the windows so they can deregister after the communicator
    /// is gone.
    symm: Arc<Mutex<Option<SymState>>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RankInfo {
    node: u64,
    name: String,
    device: usize,
    /// The rank's operating-system process.
    pid: u32,
}

impl Communicator {
    /// Collective: every rank of the job calls this; builds the communicator from the launch
    /// environment (torchrun, Open MPI, `symcomm-run`, or none: a world of one rank).
    ///
    /// Every rank gets an error when the environment is incomplete or the job does not come
    /// together within `SYMCOMM_TIMEOUT`.
    #[doc(alias = "ncclCommInitRank")]
    pub fn from_env() -> Result<Communicator> {
        let env = LaunchEnv::from_env()?;
        let mut options = CommOptions::from_env()?;
        if options.device.is_none() {
            options.device = env.local_rank;
        }
        tracing::debug!(
            "rank {} of {}: launched by {:?}, unique id {:?}",
            env.rank,
            env.size,
            env.launcher,
            env.unique_id.map(|id| id.to_string())
        );
        let bootstrap = match env.unique_id {
            Some(id) => Bootstrap::connect_tcp(&id, env.rank, env.size, env.timeout)?,
            None => {
                let mut one = Bootstrap::in_process(1, env.timeout)?;
                one.pop().ok_or_else(|| {
                    Error::InvalidArgument("no endpoint for a world of one rank".into())
                })?
            }
        };
        Communicator::init(bootstrap, options)
    }

    /// Collective: every rank of `bootstrap`'s group calls this; exchanges nodes and devices
    /// and derives the teams.
    pub fn init(bootstrap: Bootstrap, options: CommOptions) -> Result<Communicator> {
        let device = options.device.unwrap_or(0);
        let (node, name) = match &options.node_id {
            Some(id) => (fnv1a64(id.as_bytes()), id.clone()),
            None => detect_node(),
        };
        let mine = RankInfo {
            node,
            name,
            device,
            pid: std::process::id(),
        };
        let all = bootstrap.all_gather(&encode_info(&mine))?;
        let mut ranks = Vec::with_capacity(all.len());
        for (r, bytes) in all.iter().enumerate() {
            ranks.push(decode_info(bytes).ok_or_else(|| Error::Protocol {
                rank: Some(bootstrap.rank()),
                step: "communicator init".into(),
                reason: format!("rank {r} sent a malformed node description"),
            })?);
        }
        let nodes: Vec<u64> = ranks.iter().map(|i| i.node).collect();
        let lsa_size = lsa_size_of(&nodes, options.lsa_cap);
        let comm = Communicator {
            bootstrap,
            device,
            ranks,
            lsa_size,
            symm: Arc::new(Mutex::new(None)),
        };
        comm.log_topology(options.lsa_cap);
        Ok(comm)
    }

    /// `n` communicators of one process, one per rank (index = rank), on devices `0..n`: hand
    /// each to its own thread. Node, device and LSA overrides are read from the environment as
    /// for [`Communicator::from_env`], except that the device is the rank unless
    /// `SYMCOMM_DEVICE` is set.
    pub fn init_threads(n: usize) -> Result<Vec<Communicator>> {
        let timeout = match std::env::var("SYMCOMM_TIMEOUT") {
            Ok(t) => parse_timeout(&t).map_err(|reason| Error::Env {
                var: "SYMCOMM_TIMEOUT".into(),
                reason,
            })?,
            Err(_) => DEFAULT_TIMEOUT,
        };
        let base = CommOptions::from_env()?;
        Self::init_threads_with(n, timeout, |rank| {
            let mut o = base.clone();
            o.device = Some(base.device.unwrap_or(rank));
            o
        })
    }

    /// `n` communicators of one process with per-rank options (index = rank).
    pub fn init_threads_with(
        n: usize,
        timeout: Duration,
        options: impl Fn(usize) -> CommOptions + Sync,
    ) -> Result<Vec<Communicator>> {
        let bootstraps = Bootstrap::in_process(n, timeout)?;
        let options = &options;
        let mut not_started = None;
        let results: Vec<Result<Communicator>> = std::thread::scope(|s| {
            // A rank whose thread cannot start drops its endpoint, so the others fail at once
            // (their peer left) instead of waiting for it.
            let handles: Vec<_> = bootstraps
                .into_iter()
                .enumerate()
                .filter_map(|(rank, b)| {
                    std::thread::Builder::new()
                        .name(format!("symcomm-init{rank}"))
                        .spawn_scoped(s, move || Communicator::init(b, options(rank)))
                        .map_err(|source| {
                            not_started.get_or_insert(Error::Io {
                                what: format!("starting the initialisation thread of rank {rank}"),
                                source,
                            })
                        })
                        .ok()
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::InvalidArgument(
                            "a rank's initialisation thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        // The root cause, rather than the failures of the ranks that lost their peer.
        if let Some(e) = not_started {
            return Err(e);
        }
        results.into_iter().collect()
    }

    /// This rank, in `0..size()`.
    pub fn rank(&self) -> usize {
        self.bootstrap.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.bootstrap.size()
    }

    /// The CUDA device ordinal this rank uses.
    pub fn device(&self) -> usize {
        self.device
    }

    /// Refuses (on every rank alike: every rank holds the same table) when two ranks of one
    /// node run in different processes on the same device, unless `SYMCOMM_SHARED_GPU=1`.
    /// Kernels of different processes take turns on a GPU (unless MPS runs), so a kernel
    /// waiting for the other rank's kernel could only time out. Ranks that are threads of one
    /// process share the device's context, and their kernels run at the same time.
    pub(crate) fn check_devices_run_together(&self) -> Result<()> {
        let Some((a, b, dev)) = shared_device_across_processes(&self.ranks) else {
            return Ok(());
        };
        if std::env::var("SYMCOMM_SHARED_GPU").as_deref() == Ok("1") {
            return Ok(());
        }
        Err(Error::Unsupported {
            what: format!(
                "ranks {a} and {b} are different processes on CUDA device {dev} of node {}: \
                 kernels of different processes take turns on a GPU, so a barrier between \
                 them could only time out",
                self.ranks[a].name
            ),
            hint: "give each process its own GPU (SYMCOMM_DEVICE, or the launcher's local \
                   rank), or run the ranks as threads of one process; under MPS, set \
                   SYMCOMM_SHARED_GPU=1"
                .into(),
        })
    }

    /// The CUDA device ordinal of `rank` (as that rank numbers its devices).
    pub fn device_of(&self, rank: usize) -> Option<usize> {
        self.ranks.get(rank).map(|i| i.device)
    }

    /// This rank's node identity (equal ids = same node).
    pub fn node_id(&self) -> u64 {
        self.ranks[self.rank()].node
    }

    /// The node identity of `rank`.
    pub fn node_of(&self, rank: usize) -> Option<u64> {
        self.ranks.get(rank).map(|i| i.node)
    }

    /// This rank's node name (host name, or `SYMCOMM_NODE_ID`).
    pub fn node_name(&self) -> &str {
        &self.ranks[self.rank()].name
    }

    /// Number of distinct nodes.
    pub fn node_count(&self) -> usize {
        let mut ids: Vec<u64> = self.ranks.iter().map(|i| i.node).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// Size of the LSA teams.
    pub fn lsa_size(&self) -> usize {
        self.lsa_size
    }

    /// This rank's index in its LSA team.
    pub fn lsa_rank(&self) -> usize {
        self.rank() % self.lsa_size
    }

    /// The world ranks of this rank's LSA team, in team order (e.g. for
    /// [`Bootstrap::all_gather_ranks`] among the ranks that share memory).
    pub fn lsa_team_ranks(&self) -> Vec<usize> {
        let first = self.rank() - self.lsa_rank();
        (first..first + self.lsa_size).collect()
    }

    /// The world team `{size, rank, 1}`.
    #[doc(alias = "ncclTeamWorld")]
    pub fn world_team(&self) -> Team {
        Team::new(self.size() as i32, self.rank() as i32, 1)
    }

    /// This rank's LSA team `{lsa_size, rank % lsa_size, 1}`.
    #[doc(alias = "ncclTeamLsa")]
    pub fn lsa_team(&self) -> Team {
        Team::new(self.lsa_size as i32, self.lsa_rank() as i32, 1)
    }

    /// This rank's rail team `{size / lsa_size, rank / lsa_size, lsa_size}`.
    #[doc(alias = "ncclTeamRail")]
    pub fn rail_team(&self) -> Team {
        team_outer_factor(self.world_team(), self.lsa_size as i32)
    }

    /// The world rank of member `r` of `team` (a team seen from this rank). -1 when it does
    /// not fit in an `i32` (inputs no communicator produces).
    #[doc(alias = "ncclTeamRankToWorld")]
    pub fn team_rank_to_world(&self, team: Team, r: i32) -> i32 {
        i32::try_from(self.rank() as i64 + world_distance(team, r)).unwrap_or(-1)
    }

    /// The LSA rank of member `r` of `team` (no membership check, like NCCL). -1 when it does
    /// not fit in an `i32` (inputs no communicator produces).
    #[doc(alias = "ncclTeamRankToLsa")]
    pub fn team_rank_to_lsa(&self, team: Team, r: i32) -> i32 {
        i32::try_from(self.lsa_rank() as i64 + world_distance(team, r)).unwrap_or(-1)
    }

    /// A number shared by every rank of this job (see [`Bootstrap::job_id`]).
    pub fn job_id(&self) -> u64 {
        self.bootstrap.job_id()
    }

    /// The bootstrap, for exchanging host-side data with the other ranks.
    pub fn bootstrap(&self) -> &Bootstrap {
        &self.bootstrap
    }

    /// The symmetric-memory state slot (see [`crate::window`]).
    pub(crate) fn symm_slot(&self) -> &Arc<Mutex<Option<SymState>>> {
        &self.symm
    }

    fn log_topology(&self, cap: Option<usize>) {
        let (rank, size, lsa) = (self.rank(), self.size(), self.lsa_size);
        tracing::debug!(
            "rank {rank}: node {:?} device {} lsa rank {} of {lsa}, rail rank {} of {}",
            self.node_name(),
            self.device,
            self.lsa_rank(),
            rank / lsa,
            size / lsa
        );
        if rank != 0 {
            return;
        }
        tracing::info!(
            "topology: {size} rank(s) on {} node(s); teams: world {size}, lsa {lsa} ({} team(s)), \
             rail {}",
            self.node_count(),
            size / lsa,
            size / lsa
        );
        let mut seen: Vec<u64> = Vec::new();
        for info in &self.ranks {
            if seen.contains(&info.node) {
                continue;
            }
            seen.push(info.node);
            let members: Vec<String> = self
                .ranks
                .iter()
                .enumerate()
                .filter(|(_, i)| i.node == info.node)
                .map(|(r, i)| format!("{r}:gpu{}", i.device))
                .collect();
            tracing::info!(
                "topology: node {:?} ({:016x}): {}",
                info.name,
                info.node,
                members.join(" ")
            );
        }
        if let Some(k) = cap {
            let natural = lsa_size_of(&self.ranks.iter().map(|i| i.node).collect::<Vec<_>>(), None);
            if natural != lsa {
                tracing::info!(
                    "topology: SYMCOMM_LSA_SIZE={k} caps the lsa size {natural} to {lsa}"
                );
            }
        }
    }
}

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
fn world_distance(team: Team, peer: i32) -> i64 {
    (i64::from(peer) - i64::from(team.rank)) * i64::from(team.stride)
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// This machine's node identity: hash of host name and boot id, and the host name.
fn detect_node() -> (u64, String) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let host = read("/proc/sys/kernel/hostname")
        .or_else(|| read("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    let boot = read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    (fnv1a64(format!("{host}\0{boot}").as_bytes()), host)
}

fn encode_info(i: &RankInfo) -> Vec<u8> {
    let mut end = i.name.len().min(MAX_NODE_NAME);
    while !i.name.is_char_boundary(end) {
        end -= 1;
    }
    let name = &i.name.as_bytes()[..end];
    let mut b = Vec::with_capacity(21 + name.len());
    b.extend_from_slice(&i.node.to_le_bytes());
    b.extend_from_slice(&(i.device as u64).to_le_bytes());
    b.extend_from_slice(&i.pid.to_le_bytes());
    b.push(name.len() as u8);
    b.extend_from_slice(name);
    b
}

fn decode_info(b: &[u8]) -> Option<RankInfo> {
    let node = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
    let device = usize::try_from(u64::from_le_bytes(b.get(8..16)?.try_into().ok()?)).ok()?;
    let pid = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
    let len = usize::from(*b.get(20)?);
    let name = b.get(21..21 + len)?;
    if b.len() != 21 + len {
        return None;
    }
    Some(RankInfo {
        node,
        name: crate::bootstrap::wire::reason_text(name),
        device,
        pid,
    })
}

/// The first two ranks (in rank order) that run in different processes on the same device
/// of the same node, with that device.
fn shared_device_across_processes(ranks: &[RankInfo]) -> Option<(usize, usize, usize)> {
    for (a, x) in ranks.iter().enumerate() {
        for (b, y) in ranks.iter().enumerate().skip(a + 1) {
            if x.node == y.node && x.device == y.device && x.pid != y.pid {
                return Some((a, b, x.device));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node of every rank for a list of node sizes, nodes in order.
    fn layout(sizes: &[usize]) -> Vec<usize> {
        sizes
            .iter()
            .enumerate()
            .flat_map(|(node, &n)| std::iter::repeat_n(node, n))
            .collect()
    }

    #[test]
    fn lsa_size_is_the_gcd_of_same_node_runs() {
        assert_eq!(lsa_size_of(&layout(&[8]), None), 8);
        assert_eq!(lsa_size_of(&layout(&[8, 8]), None), 8);
        assert_eq!(lsa_size_of(&layout(&[8, 8, 4]), None), 4);
        assert_eq!(lsa_size_of(&layout(&[6, 4]), None), 2);
        assert_eq!(lsa_size_of(&layout(&[1]), None), 1);
        assert_eq!(lsa_size_of::<u64>(&[], None), 1);
        // Ranks of a node not contiguous in world order: runs of one.
        assert_eq!(lsa_size_of(&[0, 1, 0, 1, 0, 1, 0, 1], None), 1);
        assert_eq!(lsa_size_of(&[0, 0, 1, 1, 0, 0, 1, 1], None), 2);
    }

    #[test]
    fn lsa_cap_can_shrink_but_never_widen_teams() {
        assert_eq!(lsa_size_of(&layout(&[8]), Some(4)), 4);
        assert_eq!(lsa_size_of(&layout(&[8]), Some(3)), 1);
        assert_eq!(lsa_size_of(&layout(&[8, 8]), Some(16)), 8);
        assert_eq!(lsa_size_of(&layout(&[8, 8, 4]), Some(2)), 2);
    }

    /// Brute force: for every layout and every rank, the LSA and rail teams partition the world
    /// as intended and agree with the device crate's `Team::to_world`.
    #[test]
    fn teams_and_conversions_agree_with_a_brute_force_reference() {
        let layouts: Vec<Vec<usize>> = vec![
            layout(&[8]),
            layout(&[8, 8]),
            layout(&[8, 8, 4]),
            layout(&[2, 2, 2]),
            layout(&[1]),
            vec![0, 1, 0, 1],
            vec![0, 0, 1, 1, 0, 0],
        ];
        for nodes in &layouts {
            let size = nodes.len() as i32;
            let lsa = lsa_size_of(nodes, None) as i32;
            assert_eq!(size % lsa, 0);
            for me in 0..size {
                let world = Team::new(size, me, 1);
                let lsa_team = team_inner_factor(world, lsa);
                let rail = team_outer_factor(world, lsa);
                assert_eq!(lsa_team, Team::new(lsa, me % lsa, 1));
                assert_eq!(rail, Team::new(size / lsa, me / lsa, lsa));
                let lsa_members: Vec<i32> = (0..lsa_team.n_ranks)
                    .map(|r| lsa_team.to_world(me, r))
                    .collect();
                let rail_members: Vec<i32> =
                    (0..rail.n_ranks).map(|r| rail.to_world(me, r)).collect();
                // LSA team: the aligned block containing me, all on my node.
                let block = (me / lsa) * lsa;
                assert_eq!(lsa_members, (block..block + lsa).collect::<Vec<_>>());
                for &w in &lsa_members {
                    assert_eq!(nodes[w as usize], nodes[me as usize], "{nodes:?}");
                }
                // Rail team: same LSA index in every LSA team.
                assert_eq!(
                    rail_members,
                    (0..size / lsa)
                        .map(|t| t * lsa + me % lsa)
                        .collect::<Vec<_>>()
                );
                // Membership and conversions, for every world peer.
                for w in 0..size {
                    let in_lsa = lsa_members.contains(&w);
                    let in_rail = rail_members.contains(&w);
                    assert_eq!(team_rank_is_member(lsa_team, world, w), in_lsa);
                    assert_eq!(team_rank_is_member(rail, world, w), in_rail);
                    if in_lsa {
                        let r = team_rank_to_team(lsa_team, world, w);
                        assert_eq!(lsa_team.to_world(me, r), w);
                    }
                    if in_rail {
                        let r = team_rank_to_team(rail, world, w);
                        assert_eq!(rail.to_world(me, r), w);
                        assert_eq!(team_rank_to_team(world, rail, r), w);
                    }
                }
            }
        }
    }

    #[test]
    fn team_helpers_answer_extreme_values_exactly_instead_of_overflowing() {
        let world = Team::new(8, 0, 1);
        let reversed = Team::new(4, 0, -1);
        // i32::MIN / -1 and i32::MIN % -1: index 2^31 is no member and no i32.
        assert!(!team_rank_is_member(reversed, world, i32::MIN));
        assert_eq!(team_rank_to_team(reversed, world, i32::MIN), -1);
        // i32::MAX - (-1) overflows the distance.
        let odd = Team::new(2, -1, 1);
        assert!(!team_rank_is_member(world, odd, i32::MAX));
        assert_eq!(team_rank_to_team(world, odd, i32::MAX), -1);
        // Distances beyond i32 that still land on a member are members.
        let wide = Team::new(4, 0, 1 << 30);
        assert!(team_rank_is_member(wide, wide, 3));
        assert_eq!(team_rank_to_team(wide, wide, 3), 3);
        assert!(!team_rank_is_member(wide, wide, 4));
        // Empty teams and a zero stride.
        assert!(!team_rank_is_member(Team::new(0, 0, 1), world, 0));
        assert!(!team_rank_is_member(Team::new(1, 0, 0), world, 1));
        assert!(team_rank_is_member(Team::new(1, 0, 0), world, 0));
        assert_eq!(team_rank_to_team(Team::new(1, 0, 0), world, i32::MIN), 0);
        // An outer factor whose stride overflows is the empty team; small n are clamped.
        assert_eq!(team_outer_factor(wide, 4), Team::new(0, 0, 0));
        assert_eq!(team_outer_factor(world, i32::MIN), world);
        assert_eq!(team_inner_factor(world, 0), Team::new(0, 0, 1));
        let comms =
            Communicator::init_threads_with(2, Duration::from_secs(10), |_| CommOptions::new())
                .unwrap();
        let far = Team::new(2, 0, i32::MAX);
        assert_eq!(comms[0].team_rank_to_world(far, 1), i32::MAX);
        assert_eq!(comms[1].team_rank_to_world(far, 1), -1);
        assert_eq!(comms[1].team_rank_to_world(far, i32::MIN), -1);
        assert_eq!(comms[1].team_rank_to_lsa(far, 1), -1);
        assert_eq!(comms[1].team_rank_to_world(Team::new(2, 1, 1), 0), 0);
    }

    #[test]
    fn node_descriptions_round_trip_and_reject_garbage() {
        let i = RankInfo {
            node: 42,
            name: "gpu-node-7".into(),
            device: 3,
            pid: 4711,
        };
        assert_eq!(decode_info(&encode_info(&i)), Some(i));
        assert_eq!(decode_info(b"short"), None);
        let mut b = encode_info(&RankInfo {
            node: 1,
            name: "n".into(),
            device: 0,
            pid: 1,
        });
        b.push(0);
        assert_eq!(decode_info(&b), None);
        b.truncate(10);
        assert_eq!(decode_info(&b), None);
    }

    #[test]
    fn a_device_shared_by_two_processes_of_a_node_is_found() {
        let r = |node, device, pid| RankInfo {
            node,
            name: format!("n{node}"),
            device,
            pid,
        };
        // One process per GPU, and several threads of one process on one GPU: fine.
        assert_eq!(
            shared_device_across_processes(&[r(1, 0, 10), r(1, 1, 11), r(1, 1, 11)]),
            None
        );
        // The same device number on two nodes is two devices.
        assert_eq!(
            shared_device_across_processes(&[r(1, 0, 10), r(2, 0, 10)]),
            None
        );
        // Two processes on device 1 of node 1: ranks 1 and 3.
        assert_eq!(
            shared_device_across_processes(&[r(1, 0, 10), r(1, 1, 11), r(2, 1, 12), r(1, 1, 13)]),
            Some((1, 3, 1))
        );
    }

    #[test]
    fn options_from_the_environment_are_validated() {
        let o = CommOptions::from_lookup(|k| match k {
            "SYMCOMM_DEVICE" => Some("2".into()),
            "SYMCOMM_NODE_ID" => Some("a".into()),
            "SYMCOMM_LSA_SIZE" => Some("4".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(o, CommOptions::new().device(2).node_id("a").lsa_size(4));
        let e = CommOptions::from_lookup(|k| (k == "SYMCOMM_LSA_SIZE").then(|| "x".into()))
            .unwrap_err();
        assert!(matches!(e, Error::Env { .. }), "{e}");
    }

    fn threads_with_nodes(nodes: &'static [&'static str], cap: usize) -> Vec<Communicator> {
        Communicator::init_threads_with(nodes.len(), Duration::from_secs(10), |r| {
            CommOptions::new().node_id(nodes[r]).lsa_size(cap)
        })
        .unwrap()
    }

    #[test]
    fn in_process_communicators_derive_teams_from_declared_nodes() {
        const NODES: &[&str] = &["a", "a", "a", "a", "b", "b", "b", "b", "c", "c"];
        let comms = threads_with_nodes(NODES, 0);
        for (r, c) in comms.iter().enumerate() {
            assert_eq!((c.rank(), c.size(), c.device()), (r, 10, 0));
            assert_eq!(c.lsa_size(), 2);
            assert_eq!(c.node_count(), 3);
            assert_eq!(c.node_name(), NODES[r]);
            assert_eq!(c.world_team(), Team::new(10, r as i32, 1));
            assert_eq!(c.lsa_team(), Team::new(2, (r % 2) as i32, 1));
            assert_eq!(c.rail_team(), Team::new(5, (r / 2) as i32, 2));
            assert_eq!(c.team_rank_to_world(c.rail_team(), 4), (8 + r % 2) as i32);
            assert_eq!(c.team_rank_to_lsa(c.lsa_team(), 1), 1);
            let block = r / 2 * 2;
            assert_eq!(c.lsa_team_ranks(), vec![block, block + 1]);
        }
        let capped = threads_with_nodes(&["a", "a", "a", "a"], 2);
        assert!(capped.iter().all(|c| c.lsa_size() == 2));
    }

    #[test]
    fn init_threads_puts_rank_r_on_device_r() {
        let comms = Communicator::init_threads(3).unwrap();
        for (r, c) in comms.iter().enumerate() {
            assert_eq!((c.rank(), c.device(), c.device_of(2)), (r, r, Some(2)));
            assert_eq!(c.node_count(), 1);
            assert_eq!(c.lsa_size(), 3);
            assert_eq!(c.rail_team(), Team::new(1, 0, 3));
        }
    }
}
