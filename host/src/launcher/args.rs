//! The `symcomm-run` command line: its help text, [`LaunchArgs`] and its parser, and the same
//! checks for arguments built by hand (which [`super::supervise`]'s `run` applies before
//! starting anything).

use std::ffi::OsString;
use std::time::Duration;

use crate::bootstrap::parse_timeout;
use crate::{Error, Result};

/// Command-line help of `symcomm-run`.
pub const USAGE: &str = "\
usage: symcomm-run -n N [--nnodes M --node-rank K --master ADDR:PORT] [--gpus LIST]
                   [--timeout SECONDS] [--grace SECONDS] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this machine with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
SYMCOMM_UNIQUE_ID set, prefixes their output with [rank k], forwards Ctrl-C, and
exits with the first failing rank's exit code. With --nnodes, one invocation per
node: node K's ranks are K*N .. K*N+N-1 of M*N, and rank 0 (node 0) listens on
--master, which every node must reach.

options:
  -n, --nprocs N     number of ranks to start on this node (1 or more)
  --nnodes M         number of nodes, one symcomm-run each (default 1)
  --node-rank K      this node's number, 0 .. M-1 (with --nnodes)
  --master ADDR:PORT where node 0's rank 0 listens (with --nnodes; ADDR an
                     address of node 0)
  --gpus LIST        CUDA devices of the ranks, e.g. 4,5,6,7: rank k uses the k-th
                     (sets SYMCOMM_DEVICE; default: device = local rank)
  --timeout SECONDS  bootstrap timeout for the ranks (sets SYMCOMM_TIMEOUT)
  --grace SECONDS    after a rank fails, how long the others may take to exit
                     before they are terminated (default 10)
  -h, --help         print this help";

/// Default of `--grace`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Parsed `symcomm-run` command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchArgs {
    /// Number of ranks.
    pub nprocs: usize,
    /// Bootstrap timeout handed to the ranks.
    pub timeout: Option<Duration>,
    /// CUDA device of each rank (`--gpus`), if given.
    pub gpus: Option<Vec<usize>>,
    /// How long the other ranks may take to exit after one failed.
    pub grace: Duration,
    /// Several nodes (`--nnodes`), one invocation each; `None`: this machine only.
    pub nodes: Option<Nodes>,
    /// The program to run.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// `--nnodes`, `--node-rank` and `--master`: this invocation's part of a job of several nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    /// Number of nodes (invocations).
    pub nnodes: usize,
    /// This invocation's node, `0..nnodes`.
    pub node_rank: usize,
    /// `host:port` where rank 0 (on node 0) listens.
    pub master: String,
}

/// Outcome of parsing the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Run the job.
    Run(LaunchArgs),
    /// `--help` was asked for.
    Help,
}

impl LaunchArgs {
    /// Parses the arguments after the program name. Errors are one-line messages meant to be
    /// printed before [`USAGE`].
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> std::result::Result<Parsed, String> {
        let mut it = args.into_iter();
        let mut nprocs = None;
        let mut timeout = None;
        let mut gpus = None;
        let mut grace = DEFAULT_GRACE;
        let (mut nnodes, mut node_rank, mut master) = (None, None, None);
        let mut program = None;
        while let Some(arg) = it.next() {
            let text = arg.to_string_lossy().into_owned();
            let mut value = |name: &str| {
                it.next()
                    .map(|v| v.to_string_lossy().into_owned())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match text.as_str() {
                "-h" | "--help" => return Ok(Parsed::Help),
                "-n" | "--nprocs" | "--nproc-per-node" => {
                    let v = value(&text)?;
                    nprocs = Some(parse_nprocs(&v)?);
                }
                "--gpus" => {
                    let v = value("--gpus")?;
                    let list: std::result::Result<Vec<usize>, _> =
                        v.split(',').map(|d| d.trim().parse::<usize>()).collect();
                    gpus =
                        Some(list.map_err(|_| format!("--gpus: {v:?} is not a list like 0,1,2"))?);
                }
                "--timeout" => {
                    let v = value("--timeout")?;
                    timeout = Some(parse_timeout(&v).map_err(|e| format!("--timeout: {e}"))?);
                }
                "--grace" => {
                    let v = value("--grace")?;
                    grace = parse_timeout(&v).map_err(|e| format!("--grace: {e}"))?;
                }
                "--nnodes" => {
                    let v = value("--nnodes")?;
                    nnodes = Some(
                        v.parse::<usize>()
                            .map_err(|_| format!("--nnodes: {v:?} is not a number of nodes"))?,
                    );
                }
                "--node-rank" => {
                    let v = value("--node-rank")?;
                    node_rank = Some(
                        v.parse::<usize>()
                            .map_err(|_| format!("--node-rank: {v:?} is not a node number"))?,
                    );
                }
                "--master" => master = Some(value("--master")?),
                "--" => {
                    program = it.next();
                    break;
                }
                t if t.starts_with("-n") && t.len() > 2 => nprocs = Some(parse_nprocs(&t[2..])?),
                t if t.starts_with('-') => return Err(format!("unknown option {t}")),
                _ => {
                    program = Some(arg);
                    break;
                }
            }
        }
        let nprocs = nprocs.ok_or("the number of ranks is missing (-n N)")?;
        let program = program.ok_or("the program to run is missing")?;
        let nodes = match (nnodes, node_rank, master) {
            (None | Some(1), None, None) => None,
            (None, ..) => return Err("--node-rank and --master need --nnodes".into()),
            (Some(m), k, addr) => Some(Nodes {
                nnodes: m,
                node_rank: k.ok_or("--nnodes needs --node-rank K")?,
                master: addr.ok_or("--nnodes needs --master ADDR:PORT")?,
            }),
        };
        if let Some(n) = &nodes {
            check_nodes(n, nprocs).map_err(|e| e.to_string())?;
        }
        if let Some(g) = &gpus
            && g.len() < nprocs
        {
            return Err(format!(
                "--gpus lists {} device(s) for {nprocs} ranks",
                g.len()
            ));
        }
        Ok(Parsed::Run(LaunchArgs {
            nprocs,
            timeout,
            gpus,
            grace,
            nodes,
            program,
            args: it.collect(),
        }))
    }
}

fn parse_nprocs(v: &str) -> std::result::Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (1..=crate::bootstrap::MAX_WORLD_SIZE).contains(&n) => Ok(n),
        _ => Err(format!("-n: {v:?} is not a number of ranks")),
    }
}

/// Rejects what [`LaunchArgs::parse`] would have rejected, for arguments built by hand.
pub(crate) fn check_args(args: &LaunchArgs) -> Result<()> {
    let n = args.nprocs;
    if !(1..=crate::bootstrap::MAX_WORLD_SIZE).contains(&n) {
        return Err(Error::InvalidArgument(format!(
            "{n} ranks is not in 1..={}",
            crate::bootstrap::MAX_WORLD_SIZE
        )));
    }
    if let Some(g) = &args.gpus
        && g.len() < n
    {
        return Err(Error::InvalidArgument(format!(
            "the GPU list has {} device(s) for {n} ranks",
            g.len()
        )));
    }
    if let Some(nodes) = &args.nodes {
        check_nodes(nodes, n)?;
    }
    if let Some(t) = args.timeout
        && !(Duration::from_millis(1)..=Duration::from_secs(1_000_000_000)).contains(&t)
    {
        return Err(Error::InvalidArgument(format!(
            "timeout {t:?} is not between 1 ms and 1e9 s"
        )));
    }
    Ok(())
}

/// The node numbers and the job's size must make sense, and the master be `host:port`.
fn check_nodes(nodes: &Nodes, nprocs: usize) -> Result<()> {
    let bad = |why: String| Err(Error::InvalidArgument(why));
    if nodes.nnodes == 0 {
        return bad("--nnodes: 0 nodes".into());
    }
    if nodes.node_rank >= nodes.nnodes {
        return bad(format!(
            "--node-rank {} is not below --nnodes {}",
            nodes.node_rank, nodes.nnodes
        ));
    }
    match nodes.nnodes.checked_mul(nprocs) {
        Some(total) if total <= crate::bootstrap::MAX_WORLD_SIZE => {}
        _ => {
            return bad(format!(
                "{} nodes × {nprocs} ranks is more than {} ranks",
                nodes.nnodes,
                crate::bootstrap::MAX_WORLD_SIZE
            ));
        }
    }
    match nodes.master.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0) => {
            Ok(())
        }
        _ => bad(format!("--master {:?} is not ADDR:PORT", nodes.master)),
    }
}
