//! Launch conventions: reading rank, world size and the root's address from the environment
//! that a launcher (symcomm-run, torchrun, Open MPI's mpirun, Slurm's srun) gives each process.
//!
//! Variables, first match wins:
//! - rank / size: `RANK` / `WORLD_SIZE` (torchrun, symcomm-run), else `OMPI_COMM_WORLD_RANK` /
//!   `OMPI_COMM_WORLD_SIZE`, else Slurm's (a task `srun` started: `SLURM_PROCID` /
//!   `SLURM_STEP_NUM_TASKS`, see `slurm.rs`); with none of them set the process is a world of
//!   one rank;
//! - local rank / size (the CUDA device defaults to the local rank): `LOCAL_RANK` /
//!   `LOCAL_WORLD_SIZE`, else `OMPI_COMM_WORLD_LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_SIZE`, else
//!   `SLURM_LOCALID`;
//! - the node among the job's nodes, where the launcher numbers them: `GROUP_RANK` /
//!   `GROUP_WORLD_SIZE` (torchrun, `symcomm-run --nnodes`), `SLURM_NODEID` /
//!   `SLURM_STEP_NUM_NODES`; Open MPI gives none (its nodes are told apart by host).
//!   [`Communicator::from_env`](crate::Communicator::from_env) makes it part of the node's
//!   identity, so that several launcher nodes on one machine are several nodes;
//! - the unique id: `SYMCOMM_UNIQUE_ID` (`<hex magic>@host:port`, set by symcomm-run with a
//!   random magic); otherwise the root is `MASTER_ADDR` : `MASTER_PORT` and the magic is derived
//!   from what every rank sees alike (address, port, and `TORCHELASTIC_RUN_ID` or Open MPI's
//!   job id when present). A derived magic still rejects processes of other jobs with different
//!   launch parameters; only symcomm-run's random one rejects a stale process of an identical
//!   earlier launch. The world size is deliberately not part of it: a rank with another
//!   `WORLD_SIZE` must reach the root, which then reports the mismatch to every rank, rather
//!   than be turned away as a stranger ("wrong magic").
//! - the root's port: `SYMCOMM_PORT` overrides `MASTER_PORT`. Under torchrun with
//!   `TORCHELASTIC_USE_AGENT_STORE=True` the agent's store already listens on `MASTER_PORT`, so
//!   the root uses `MASTER_PORT + 1` unless `SYMCOMM_PORT` says otherwise;
//! - under Open MPI the root is `MASTER_ADDR` : `MASTER_PORT` too, which the user sets (mpirun
//!   has no such variables: `mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500 …`); under Slurm
//!   it is the first host of the step's node list unless `MASTER_ADDR` is set, on the port of
//!   `SYMCOMM_PORT`, `MASTER_PORT` or one derived from the job and step ids;
//! - `SYMCOMM_TIMEOUT`: seconds (fractions allowed) for every blocking step; default
//!   [`DEFAULT_TIMEOUT`].
//!
//! Everything is read through a lookup function, so the rules are unit-tested without touching
//! the process environment.

use std::time::Duration;

use super::unique_id::{UniqueId, resolve};
use super::wire::MAX_WORLD_SIZE;
use crate::{Error, Result};

/// Timeout of every blocking bootstrap step when `SYMCOMM_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Which convention the launch parameters were found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// `symcomm-run` (`RANK`/`WORLD_SIZE` and `SYMCOMM_UNIQUE_ID`).
    SymcommRun,
    /// torchrun (`RANK`/`WORLD_SIZE` and `TORCHELASTIC_RUN_ID`).
    Torchrun,
    /// `RANK`/`WORLD_SIZE` set some other way.
    RankEnv,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_STEP_ID`, …).
    Slurm,
    /// No launcher: a world of one rank.
    Standalone,
}

/// What the environment says about this process's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchEnv {
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Rank among the processes of this node, if the launcher says.
    pub local_rank: Option<usize>,
    /// Number of processes on this node, if the launcher says.
    pub local_size: Option<usize>,
    /// This process's node among the job's, if the launcher numbers them.
    pub node_rank: Option<usize>,
    /// Number of nodes, if the launcher says.
    pub nnodes: Option<usize>,
    /// Where rank 0 listens and the job's magic (`None` for a world of one rank).
    pub unique_id: Option<UniqueId>,
    /// Deadline of every blocking step.
    pub timeout: Duration,
    /// Which convention was found.
    pub launcher: Launcher,
}

impl LaunchEnv {
    /// Reads the process environment.
    pub fn from_env() -> Result<LaunchEnv> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (name → value).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<LaunchEnv> {
        let timeout = match get("SYMCOMM_TIMEOUT") {
            Some(s) => parse_timeout(&s).map_err(|reason| env_error("SYMCOMM_TIMEOUT", reason))?,
            None => DEFAULT_TIMEOUT,
        };
        let (names, launcher) = if get("RANK").is_some() || get("WORLD_SIZE").is_some() {
            let launcher = if get("SYMCOMM_UNIQUE_ID").is_some() {
                Launcher::SymcommRun
            } else if get("TORCHELASTIC_RUN_ID").is_some() {
                Launcher::Torchrun
            } else {
                Launcher::RankEnv
            };
            (
                ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
                launcher,
            )
        } else if get("OMPI_COMM_WORLD_RANK").is_some() {
            (
                [
                    "OMPI_COMM_WORLD_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                ],
                Launcher::OpenMpi,
            )
        } else if let Some(task) = super::slurm::task(&get)? {
            return slurm_env(&get, task, timeout);
        } else {
            return Ok(LaunchEnv {
                rank: 0,
                size: 1,
                local_rank: None,
                local_size: None,
                node_rank: None,
                nnodes: None,
                unique_id: None,
                timeout,
                launcher: Launcher::Standalone,
            });
        };
        let [rank_var, size_var, local_var, local_size_var] = names;
        let rank = required_usize(&get, rank_var)?;
        let size = required_usize(&get, size_var)?;
        if size == 0 || size > MAX_WORLD_SIZE {
            return Err(env_error(
                size_var,
                format!("{size} is not in 1..={MAX_WORLD_SIZE}"),
            ));
        }
        if rank >= size {
            return Err(env_error(
                rank_var,
                format!("{rank} is not below {size_var}={size}"),
            ));
        }
        let local_rank = optional_usize(&get, local_var)?;
        let local_size = optional_usize(&get, local_size_var)?;
        let (node_rank, nnodes) = if launcher == Launcher::OpenMpi {
            (None, None)
        } else {
            (
                optional_usize(&get, "GROUP_RANK")?,
                optional_usize(&get, "GROUP_WORLD_SIZE")?,
            )
        };
        check_node(node_rank, nnodes, ("GROUP_RANK", "GROUP_WORLD_SIZE"))?;
        let unique_id = if size == 1 {
            None
        } else {
            Some(unique_id(&get, None)?)
        };
        Ok(LaunchEnv {
            rank,
            size,
            local_rank,
            local_size,
            node_rank,
            nnodes,
            unique_id,
            timeout,
            launcher,
        })
    }
}

/// The launch environment of a Slurm task (see the module docs).
fn slurm_env(
    get: &impl Fn(&str) -> Option<String>,
    task: super::slurm::SlurmTask,
    timeout: Duration,
) -> Result<LaunchEnv> {
    let size = task.size;
    if size == 0 || size > MAX_WORLD_SIZE {
        return Err(env_error(
            "SLURM_NTASKS",
            format!("{size} is not in 1..={MAX_WORLD_SIZE}"),
        ));
    }
    if task.rank >= size {
        return Err(env_error(
            "SLURM_PROCID",
            format!("{} is not below the step's {size} tasks", task.rank),
        ));
    }
    check_node(
        task.node_rank,
        task.nnodes,
        ("SLURM_NODEID", "SLURM_NNODES"),
    )?;
    let unique_id = if size == 1 {
        None
    } else {
        let root = Root {
            host: task.first_node.clone(),
            port: super::slurm::default_port(&task.step),
            run: format!("slurm/{}", task.step),
        };
        Some(unique_id(get, Some(root))?)
    };
    Ok(LaunchEnv {
        rank: task.rank,
        size,
        local_rank: task.local_rank,
        local_size: None,
        node_rank: task.node_rank,
        nnodes: task.nnodes,
        unique_id,
        timeout,
        launcher: Launcher::Slurm,
    })
}

/// A node rank must be below the number of nodes, where both are given.
fn check_node(rank: Option<usize>, n: Option<usize>, (rv, nv): (&str, &str)) -> Result<()> {
    match (rank, n) {
        (Some(r), Some(n)) if r >= n => Err(env_error(rv, format!("{r} is not below {nv}={n}"))),
        (_, Some(0)) => Err(env_error(nv, "0 nodes".into())),
        _ => Ok(()),
    }
}

/// Where a launcher without `MASTER_ADDR` / `MASTER_PORT` of its own puts the root: a host
/// (if it knows one), a port, and the run's name (part of the derived magic).
struct Root {
    host: Option<String>,
    port: u16,
    run: String,
}

/// Parses a timeout in seconds (`"30"`, `"0.5"`); must be finite, at least 0.001 (1 ms: a
/// shorter one would round to nothing and fail later as an obscure socket error) and at
/// most 1e9. The error is a one-line reason, for [`Error::Env`] or a command line.
pub fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 1e9) {
        return Err(format!(
            "{text:?} is not a positive number of seconds (at most 1e9)"
        ));
    }
    if secs < 0.001 {
        return Err(format!(
            "{text:?} seconds is below the shortest timeout, 0.001 (1 ms)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn unique_id(get: &impl Fn(&str) -> Option<String>, root: Option<Root>) -> Result<UniqueId> {
    if let Some(text) = get("SYMCOMM_UNIQUE_ID") {
        return UniqueId::parse(&text).map_err(|e| env_error("SYMCOMM_UNIQUE_ID", e.to_string()));
    }
    let fallback_host = root.as_ref().and_then(|r| r.host.clone());
    let host = get("MASTER_ADDR").or(fallback_host).ok_or_else(|| {
        env_error(
            "MASTER_ADDR",
            "not set: rank 0's host is needed (set MASTER_ADDR and MASTER_PORT, or \
             SYMCOMM_UNIQUE_ID; symcomm-run and torchrun set them)"
                .into(),
        )
    })?;
    let port = match get("SYMCOMM_PORT") {
        Some(p) => parse_port("SYMCOMM_PORT", &p)?,
        None if get("MASTER_PORT").is_none() && root.is_some() => {
            root.as_ref().map_or(0, |r| r.port)
        }
        None => {
            let text = get("MASTER_PORT").ok_or_else(|| {
                env_error(
                    "MASTER_PORT",
                    "not set: rank 0's port is needed (or set SYMCOMM_UNIQUE_ID)".into(),
                )
            })?;
            let port = parse_port("MASTER_PORT", &text)?;
            if get("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True") {
                port.checked_add(1).ok_or_else(|| {
                    env_error(
                        "MASTER_PORT",
                        "65535 leaves no port for symcomm's root (set SYMCOMM_PORT)".into(),
                    )
                })?
            } else {
                port
            }
        }
    };
    let host_port = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let addr = resolve(&host_port).map_err(|why| env_error("MASTER_ADDR", why))?;
    let run = get("TORCHELASTIC_RUN_ID")
        .or_else(|| get("OMPI_MCA_ess_base_jobid"))
        .or(root.map(|r| r.run))
        .unwrap_or_default();
    // The world size is not part of the magic: see the module documentation.
    Ok(UniqueId::derived(
        addr,
        &format!("symcomm/{host}/{port}/{run}"),
    ))
}

fn parse_port(var: &str, text: &str) -> Result<u16> {
    match text.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(env_error(var, format!("{text:?} is not a port number"))),
    }
}

fn required_usize(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<usize> {
    optional_usize(get, var)?.ok_or_else(|| {
        env_error(
            var,
            "not set (the launcher must set rank and world size together)".into(),
        )
    })
}

fn optional_usize(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<Option<usize>> {
    match get(var) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| env_error(var, format!("{text:?} is not a non-negative integer"))),
    }
}

fn env_error(var: &str, reason: String) -> Error {
    Error::Env {
        var: var.into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<LaunchEnv> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchEnv::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn no_launcher_means_a_world_of_one() {
        let e = env(&[]).unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (0, 1, Launcher::Standalone));
        assert_eq!(e.unique_id, None);
        assert_eq!(e.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn torchrun_variables_give_rank_size_local_rank_and_root() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size), (3, 8));
        assert_eq!((e.local_rank, e.local_size), (Some(3), Some(4)));
        assert_eq!(e.launcher, Launcher::Torchrun);
        let id = e.unique_id.unwrap();
        assert_eq!(id.addr().to_string(), "127.0.0.1:29500");
        // Every rank derives the same magic; another run id gives another one.
        let other = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!(other.unique_id, Some(id));
        let next_run = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "def"),
        ])
        .unwrap();
        assert_ne!(next_run.unique_id.unwrap().magic(), id.magic());
        // A rank with another world size derives the same magic, so the root can tell it
        // (and every rank) that the sizes differ, instead of rejecting it as a stranger.
        let wrong_size = env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!(wrong_size.unique_id, Some(id));
    }

    #[test]
    fn torchrun_agent_store_moves_the_root_one_port_up_unless_overridden() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ];
        let e = env(&base).unwrap();
        assert_eq!(e.unique_id.unwrap().addr().port(), 29501);
        let mut with_port = base.to_vec();
        with_port.push(("SYMCOMM_PORT", "4000"));
        assert_eq!(
            env(&with_port).unwrap().unique_id.unwrap().addr().port(),
            4000
        );
    }

    /// What each launcher sets for one rank of a 2-node job, and what symcomm reads from it:
    /// `(launcher, variables, rank, size, local rank, node rank, nodes, root)`.
    #[test]
    fn launcher_tables_give_rank_node_and_root() {
        type Row<'a> = (
            Launcher,
            &'a [(&'a str, &'a str)],
            (usize, usize, Option<usize>),
            (Option<usize>, Option<usize>),
            &'a str,
        );
        let table: &[Row<'_>] = &[
            (
                Launcher::Torchrun,
                &[
                    ("RANK", "3"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "1"),
                    ("LOCAL_WORLD_SIZE", "2"),
                    ("GROUP_RANK", "1"),
                    ("GROUP_WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "29500"),
                    ("TORCHELASTIC_RUN_ID", "job7"),
                    ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                ],
                (3, 4, Some(1)),
                (Some(1), Some(2)),
                "127.0.0.1:29501",
            ),
            (
                Launcher::SymcommRun,
                &[
                    ("RANK", "2"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "2"),
                    ("GROUP_RANK", "1"),
                    ("GROUP_WORLD_SIZE", "2"),
                    ("SYMCOMM_UNIQUE_ID", "00000000000000ab@127.0.0.1:4000"),
                ],
                (2, 4, Some(0)),
                (Some(1), Some(2)),
                "127.0.0.1:4000",
            ),
            // mpirun -np 4 --map-by ppr:2:node -x MASTER_ADDR -x MASTER_PORT: no node number
            // (nodes are told apart by host).
            (
                Launcher::OpenMpi,
                &[
                    ("OMPI_COMM_WORLD_RANK", "3"),
                    ("OMPI_COMM_WORLD_SIZE", "4"),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                    ("OMPI_COMM_WORLD_NODE_RANK", "1"),
                    ("OMPI_MCA_ess_base_jobid", "812"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "29500"),
                    ("GROUP_RANK", "9"),
                ],
                (3, 4, Some(1)),
                (None, None),
                "127.0.0.1:29500",
            ),
            // srun -N 2 --ntasks-per-node 2 inside an allocation of 4 nodes.
            (
                Launcher::Slurm,
                &[
                    ("SLURM_JOB_ID", "4242"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_PROCID", "3"),
                    ("SLURM_LOCALID", "1"),
                    ("SLURM_NODEID", "1"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_STEP_NUM_TASKS", "4"),
                    ("SLURM_NNODES", "4"),
                    ("SLURM_STEP_NUM_NODES", "2"),
                    ("SLURM_JOB_NODELIST", "gpu[01-03,07]"),
                    ("SLURM_STEP_NODELIST", "localhost,gpu07"),
                    ("MASTER_PORT", "29500"),
                ],
                (3, 4, Some(1)),
                (Some(1), Some(2)),
                "127.0.0.1:29500",
            ),
        ];
        for (launcher, vars, (rank, size, local), (node, nodes), root) in table {
            let e = env(vars).unwrap_or_else(|err| panic!("{launcher:?}: {err}"));
            assert_eq!(e.launcher, *launcher);
            assert_eq!(
                (e.rank, e.size, e.local_rank),
                (*rank, *size, *local),
                "{launcher:?}"
            );
            assert_eq!((e.node_rank, e.nnodes), (*node, *nodes), "{launcher:?}");
            assert_eq!(
                e.unique_id.unwrap().addr().to_string(),
                *root,
                "{launcher:?}"
            );
        }
        // Slurm without MASTER_*: the step's first host, on a port of the step's ids.
        let e = env(&[
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_NODELIST", "localhost"),
        ])
        .unwrap();
        let id = e.unique_id.unwrap();
        assert_eq!(id.addr().ip().to_string(), "127.0.0.1");
        assert_eq!(
            id.addr().port(),
            super::super::slurm::default_port("4242.1")
        );
        // A node rank beyond the nodes names the variable.
        let bad = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("GROUP_RANK", "2"),
            ("GROUP_WORLD_SIZE", "2"),
        ]);
        assert!(
            matches!(bad, Err(Error::Env { ref var, .. }) if var == "GROUP_RANK"),
            "{bad:?}"
        );
    }

    #[test]
    fn open_mpi_variables_are_understood() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.local_rank), (1, 2, Some(1)));
        assert_eq!(e.launcher, Launcher::OpenMpi);
    }

    #[test]
    fn symcomm_unique_id_wins_and_carries_its_magic() {
        let e = env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SYMCOMM_UNIQUE_ID", "00000000000000ff@127.0.0.1:7000"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1"),
            ("SYMCOMM_TIMEOUT", "2.5"),
        ])
        .unwrap();
        let id = e.unique_id.unwrap();
        assert_eq!((id.magic(), id.addr().port()), (0xff, 7000));
        assert_eq!(e.launcher, Launcher::SymcommRun);
        assert_eq!(e.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn timeouts_below_one_millisecond_are_refused_with_the_reason() {
        assert_eq!(parse_timeout("0.001"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_timeout(" 2 "), Ok(Duration::from_secs(2)));
        for text in ["1e-12", "0.0009"] {
            let e = parse_timeout(text).unwrap_err();
            assert!(e.contains("1 ms"), "{text}: {e}");
        }
    }

    #[test]
    fn bad_launch_variables_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("RANK", "0")], "WORLD_SIZE"),
            (&[("RANK", "x"), ("WORLD_SIZE", "2")], "RANK"),
            (&[("RANK", "2"), ("WORLD_SIZE", "2")], "RANK"),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE"),
            (&[("RANK", "0"), ("WORLD_SIZE", "2")], "MASTER_ADDR"),
            (
                &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
                "MASTER_PORT",
            ),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("MASTER_ADDR", "127.0.0.1"),
                    ("MASTER_PORT", "99999"),
                ],
                "MASTER_PORT",
            ),
            (&[("SYMCOMM_TIMEOUT", "-1")], "SYMCOMM_TIMEOUT"),
            (&[("SYMCOMM_TIMEOUT", "soon")], "SYMCOMM_TIMEOUT"),
            (&[("SYMCOMM_TIMEOUT", "1e-12")], "SYMCOMM_TIMEOUT"),
            (&[("SYMCOMM_TIMEOUT", "0.0009")], "SYMCOMM_TIMEOUT"),
            (
                &[
                    ("RANK", "0"),
                    ("WORLD_SIZE", "2"),
                    ("SYMCOMM_UNIQUE_ID", "zz"),
                ],
                "SYMCOMM_UNIQUE_ID",
            ),
        ];
        for (vars, var) in cases {
            let e = env(vars).unwrap_err();
            assert!(
                matches!(&e, Error::Env { var: v, .. } if v == var),
                "{vars:?}: {e}"
            );
            assert!(!e.to_string().contains('\n'));
        }
    }
}
