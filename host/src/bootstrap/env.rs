//! Launch conventions: reading rank, world size and the root's address from the environment
//! that a launcher (symcomm-run, torchrun, Open MPI's mpirun) gives each process.
//!
//! Variables, first match wins:
//! - rank / size: `RANK` / `WORLD_SIZE` (torchrun, symcomm-run), else `OMPI_COMM_WORLD_RANK` /
//!   `OMPI_COMM_WORLD_SIZE`; with none of them set the process is a world of one rank;
//! - local rank / size (the CUDA device defaults to the local rank): `LOCAL_RANK` /
//!   `LOCAL_WORLD_SIZE`, else `OMPI_COMM_WORLD_LOCAL_RANK` / `OMPI_COMM_WORLD_LOCAL_SIZE`;
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
        } else {
            return Ok(LaunchEnv {
                rank: 0,
                size: 1,
                local_rank: None,
                local_size: None,
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
        let unique_id = if size == 1 {
            None
        } else {
            Some(unique_id(&get)?)
        };
        Ok(LaunchEnv {
            rank,
            size,
            local_rank,
            local_size,
            unique_id,
            timeout,
            launcher,
        })
    }
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

fn unique_id(get: &impl Fn(&str) -> Option<String>) -> Result<UniqueId> {
    if let Some(text) = get("SYMCOMM_UNIQUE_ID") {
        return UniqueId::parse(&text).map_err(|e| env_error("SYMCOMM_UNIQUE_ID", e.to_string()));
    }
    let host = get("MASTER_ADDR").ok_or_else(|| {
        env_error(
            "MASTER_ADDR",
            "not set: rank 0's host is needed (set MASTER_ADDR and MASTER_PORT, or \
             SYMCOMM_UNIQUE_ID; symcomm-run and torchrun set them)"
                .into(),
        )
    })?;
    let port = match get("SYMCOMM_PORT") {
        Some(p) => parse_port("SYMCOMM_PORT", &p)?,
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
