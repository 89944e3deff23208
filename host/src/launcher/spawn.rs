//! Starting the ranks: a free port for the rendezvous, each rank's environment ([`rank_env`],
//! torchrun's variable names), the command that starts it (own process group, stdin closed,
//! output piped, SIGTERM when the launcher dies), and killing the ranks started so far when a
//! start fails.

use std::io::{PipeReader, PipeWriter, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::args::LaunchArgs;
use crate::bootstrap::UniqueId;
use crate::fault::LAUNCHER_FD_ENV;
use crate::{Error, Result};

/// The launcher's end of one rank's notice pipe (see [`crate::fault`]): tells the rank which
/// other ranks failed.
#[derive(Debug)]
pub(crate) struct Notifier(PipeWriter);

impl Notifier {
    /// A pipe whose read end goes to a rank ([`rank_command`]); the write end never blocks.
    pub(crate) fn pipe() -> Result<(PipeReader, Notifier)> {
        let (r, w) = std::io::pipe().map_err(|source| Error::Io {
            what: "creating a notice pipe".into(),
            source,
        })?;
        // SAFETY: F_SETFL on a descriptor we own; no memory is passed.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        Ok((r, Notifier(w)))
    }

    /// Tells the rank that rank `dead` failed (`what`: e.g. `was killed by signal 9`); best
    /// effort: a rank that exited or does not read is not waited for.
    pub(crate) fn tell(&mut self, dead: usize, what: &str) {
        let _ = self.0.write_all(format!("dead {dead} {what}\n").as_bytes());
    }
}

/// The environment of rank `rank` of `nprocs`, all on this machine, root at `id`.
pub fn rank_env(
    rank: usize,
    nprocs: usize,
    id: &UniqueId,
    timeout: Option<Duration>,
) -> Vec<(String, String)> {
    node_rank_env(rank, nprocs, (0, 1), id, timeout)
}

/// The environment of local rank `local` of the `nprocs` on node `node` of `nnodes`: rank
/// `node × nprocs + local` of `nnodes × nprocs`, root at `id`.
pub fn node_rank_env(
    local: usize,
    nprocs: usize,
    (node, nnodes): (usize, usize),
    id: &UniqueId,
    timeout: Option<Duration>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("RANK".to_string(), (node * nprocs + local).to_string()),
        ("WORLD_SIZE".to_string(), (nnodes * nprocs).to_string()),
        ("LOCAL_RANK".to_string(), local.to_string()),
        ("LOCAL_WORLD_SIZE".to_string(), nprocs.to_string()),
        ("GROUP_RANK".to_string(), node.to_string()),
        ("GROUP_WORLD_SIZE".to_string(), nnodes.to_string()),
        ("MASTER_ADDR".to_string(), id.addr().ip().to_string()),
        ("MASTER_PORT".to_string(), id.addr().port().to_string()),
        ("SYMCOMM_UNIQUE_ID".to_string(), id.to_string()),
    ];
    if let Some(t) = timeout {
        env.push(("SYMCOMM_TIMEOUT".to_string(), t.as_secs_f64().to_string()));
    }
    env
}

/// The command that starts rank `rank` of `args`: its environment ([`rank_env`], and
/// `SYMCOMM_DEVICE` with `--gpus`), stdin closed, stdout and stderr piped, in a process group
/// of its own, SIGTERM if the launcher dies, and `notices` (the read end of its notice pipe)
/// inherited, named in `SYMCOMM_LAUNCHER_FD` as `<fd>:<launcher pid>:<job magic, hex>`.
pub(crate) fn rank_command(
    args: &LaunchArgs,
    rank: usize,
    id: &UniqueId,
    notices: &PipeReader,
) -> Command {
    let notice_fd = notices.as_raw_fd();
    let n = args.nprocs;
    let node = args
        .nodes
        .as_ref()
        .map_or((0, 1), |m| (m.node_rank, m.nnodes));
    let mut cmd = Command::new(&args.program);
    cmd.args(&args.args)
        .envs(node_rank_env(rank, n, node, id, args.timeout))
        .envs(
            args.gpus
                .as_ref()
                .map(|g| ("SYMCOMM_DEVICE", g[rank].to_string())),
        )
        .env(
            LAUNCHER_FD_ENV,
            format!("{notice_fd}:{}:{:x}", std::process::id(), id.magic()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and only calls `prctl` and
    // `fcntl`, which are async-signal-safe; it touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            // If the launcher dies without stopping its ranks, they get SIGTERM.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // The notice pipe's read end survives the exec (the launcher's copy does not).
            if libc::fcntl(notice_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// A free TCP port on 127.0.0.1.
pub(crate) fn free_port() -> Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| Error::Io {
        what: "finding a free port on 127.0.0.1".into(),
        source,
    })?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|source| Error::Io {
            what: "finding a free port on 127.0.0.1".into(),
            source,
        })
}

/// Kills (SIGKILL, whole process group) and reaps the ranks started so far, after a failed
/// start.
pub(crate) fn kill_started(children: &mut [Child]) {
    for child in children.iter_mut() {
        // SAFETY: `kill` has no memory-safety preconditions; the child is not reaped yet, so
        // its pid still names the process group it leads.
        unsafe {
            libc::kill(-(child.id() as i32), libc::SIGKILL);
        }
        let _ = child.wait();
    }
}
