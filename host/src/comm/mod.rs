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

mod node;
mod settings;
mod split;
mod team;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use settings::INIT_SETTINGS;
pub use symcomm_device::team::Team;
pub use team::{
    lsa_size_of, team_inner_factor, team_outer_factor, team_rank_is_member, team_rank_to_team,
};

use crate::bootstrap::{Bootstrap, DEFAULT_TIMEOUT, LaunchEnv, fnv1a64, parse_timeout};
use crate::symmem::state::{GinRuntimes, GinTable, StateSlot};
use crate::{Error, Result};
use node::{RankInfo, decode_info, detect_node, encode_info, shared_device_across_processes};
use team::world_distance;

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
    /// `SYMCOMM_CHECK` (agreed at creation): components check every call's arguments.
    checked: bool,
    /// The options it was created with (what [`Communicator::split`] gives its children).
    options: CommOptions,
    /// Symmetric-memory state (flat VA, slot space, fd server), created by the first window
    /// registration; shared with the windows so they can deregister after the communicator
    /// is gone.
    symm: StateSlot,
    /// The windows GIN may access (see [`GinTable`]).
    gin_table: GinTable,
    /// Its GIN runtimes, which a deregistration waits for (see [`GinRuntimes`]).
    gin_runtimes: GinRuntimes,
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
            // A launcher that binds each rank to its GPU (srun --gpus-per-task, a container
            // per rank) leaves one device visible: that one, whatever the local rank.
            let one_visible = std::env::var("CUDA_VISIBLE_DEVICES")
                .is_ok_and(|v| !v.trim().is_empty() && !v.contains(','));
            options.device = if one_visible { Some(0) } else { env.local_rank };
        }
        // A launcher that numbers several nodes (torchrun's and symcomm-run's `--nnodes`,
        // Slurm) makes its node number part of the node's identity: its nodes are nodes even
        // where two of them share a machine (a test of a multi-node job on one host).
        if let (None, Some(k), Some(2..)) = (&options.node_id, env.node_rank, env.nnodes) {
            options.node_id = Some(format!("{}/node{k}", detect_node().1));
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
                one.pop()
                    .ok_or_else(|| Error::Internal("no endpoint for a world of one rank".into()))?
            }
        };
        Communicator::init(bootstrap, options)
    }

    /// Collective: every rank of `bootstrap`'s group calls this; exchanges nodes and devices
    /// and derives the teams. Every rank gets the same [`Error::Mismatch`] when a setting
    /// that shapes teams or layout ([`INIT_SETTINGS`]) differs across ranks.
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
        let all = bootstrap.runtime_all_gather(&encode_info(&mine))?;
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
        let checked = settings::checked_from(std::env::var("SYMCOMM_CHECK").ok().as_deref());
        let comm = Communicator {
            bootstrap,
            device,
            ranks,
            lsa_size,
            checked: *checked.as_ref().unwrap_or(&false),
            options: options.clone(),
            symm: Arc::new(Mutex::new(None)),
            gin_table: Arc::default(),
            gin_runtimes: GinRuntimes::default(),
        };
        // Every rank must derive the same teams and layout: agree on what shapes them.
        let settings = settings::init_settings(options.lsa_cap, options.node_id.is_some(), |k| {
            std::env::var(k).ok()
        });
        let agreed = comm.agree(
            "communicator init",
            "setting",
            checked.as_ref().err(),
            &settings,
        );
        checked?;
        agreed?;
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
                        Err(Error::Panicked {
                            rank: None,
                            what: "a rank's initialisation thread".into(),
                        })
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

    /// Collective: [`Bootstrap::agree`] over this communicator's ranks.
    pub fn agree(
        &self,
        step: &str,
        kind: &str,
        failed: Option<&Error>,
        settings: &[(&str, String)],
    ) -> Result<()> {
        self.bootstrap().agree(step, kind, failed, settings)
    }

    /// Whether checked mode is on (`SYMCOMM_CHECK=1`, the same on every rank): components
    /// such as the gallery then agree on every call's arguments before launching, so a rank
    /// that passes other arguments gives every rank the same error instead of a hang.
    pub fn checked(&self) -> bool {
        self.checked
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

    /// The symmetric-memory state slot (see `crate::symmem::state`).
    pub(crate) fn symm_slot(&self) -> &StateSlot {
        &self.symm
    }

    /// The windows GIN may access.
    pub(crate) fn gin_table(&self) -> &GinTable {
        &self.gin_table
    }

    /// The communicator's GIN runtimes (see [`GinRuntimes`]).
    pub(crate) fn gin_runtimes(&self) -> &GinRuntimes {
        &self.gin_runtimes
    }

    /// The device ordinal as the driver takes it.
    pub(crate) fn device_i32(&self) -> Result<i32> {
        i32::try_from(self.device).map_err(|_| {
            Error::InvalidArgument(format!("device ordinal {} out of range", self.device))
        })
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
