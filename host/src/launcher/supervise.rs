//! Supervising a job: [`run`] starts every rank ([`super::spawn`]) with its output pumped
//! ([`super::output`]), watches exits, signals and timers, stops the other ranks after a
//! failure, drains the output, and turns the first failure into the launcher's exit code
//! ([`exit_code`]).

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::args::{LaunchArgs, check_args};
use super::output::start_pump;
use super::signals::{PENDING_SIGNAL, install_signal_handlers, signal_ranks};
use super::spawn::{Notifier, free_port, kill_started, rank_command};
use crate::bootstrap::UniqueId;
use crate::{Error, Result};

/// Time between SIGTERM and SIGKILL when stopping ranks.
const KILL_AFTER: Duration = Duration::from_secs(5);
/// How often the supervisor looks at signals and timers.
const TICK: Duration = Duration::from_millis(10);
/// Once every rank has exited, how long their output may stay open (held by processes they
/// left behind) before those processes are terminated.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
/// Time between SIGTERM and SIGKILL for the processes ranks left behind, and how long the
/// output may then still take before the launcher stops waiting for it.
const LEFTOVER_KILL_AFTER: Duration = Duration::from_secs(1);

/// The exit code that stands for `status`: its code, or `128 + signal`.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

/// `exited with code 3` / `was killed by signal 9`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => format!("ended with status {status}"),
    }
}

/// Runs the job described by `args` and returns the launcher's exit code. Progress notes go to
/// stderr, prefixed `symcomm-run:`.
///
/// # Errors
/// [`Error::InvalidArgument`] for arguments [`LaunchArgs::parse`] would refuse (before anything
/// is started); [`Error::Io`] when a rank or a thread cannot be started (the ranks already
/// started are killed first).
pub fn run(args: &LaunchArgs) -> Result<i32> {
    check_args(args)?;
    let id = match &args.nodes {
        None => UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?))),
        Some(nodes) => job_id(nodes, args.nprocs)?,
    };
    // Ranks are named by their rank in the job (node `K`'s first is `K × nprocs`).
    let first = args.nodes.as_ref().map_or(0, |m| m.node_rank * args.nprocs);
    install_signal_handlers()?;
    let stdout = Arc::new(Mutex::new(io::stdout()));
    let stderr = Arc::new(Mutex::new(io::stderr()));
    let n = args.nprocs;
    let mut children: Vec<Child> = Vec::with_capacity(n);
    let mut notifiers: Vec<Option<Notifier>> = Vec::with_capacity(n);
    let mut pumps = Vec::new();
    for rank in 0..n {
        let started = Notifier::pipe()
            .and_then(|(reader, notifier)| {
                let child = rank_command(args, rank, &id, &reader).spawn();
                notifiers.push(Some(notifier));
                // `reader` is closed here: the rank holds the only read end.
                child.map_err(|source| Error::Io {
                    what: format!("starting rank {rank} ({:?})", args.program),
                    source,
                })
            })
            .and_then(|mut child| {
                let (out, err) = (child.stdout.take(), child.stderr.take());
                children.push(child);
                if let Some(out) = out {
                    pumps.push(start_pump(first + rank, out, &stdout)?);
                }
                if let Some(err) = err {
                    pumps.push(start_pump(first + rank, err, &stderr)?);
                }
                Ok(())
            });
        if let Err(e) = started {
            kill_started(&mut children);
            return Err(e);
        }
    }
    let pids: Vec<i32> = children.iter().map(|c| c.id() as i32).collect();
    let note = |msg: String| {
        let mut w = stderr.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(w, "symcomm-run: {msg}");
    };

    let mut running = vec![true; n];
    let mut left = n;
    let mut first_failure: Option<i32> = None;
    let mut failed_at: Option<Instant> = None;
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    let mut signals_seen = 0;
    while left > 0 {
        let mut exits = Vec::new();
        for (rank, child) in children.iter_mut().enumerate() {
            if !running[rank] {
                continue;
            }
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(s)) => exits.push((rank, exit_code(s), describe(s), s.signal().is_some())),
                Err(e) => exits.push((rank, 1, format!("could not be waited for ({e})"), false)),
            }
        }
        // Ranks seen exiting in the same tick: a killed one first, since the others most
        // likely exited because of it (their own error names it too).
        exits.sort_by_key(|&(_, _, _, killed)| !killed);
        for (rank, code, what, _) in exits {
            running[rank] = false;
            left -= 1;
            notifiers[rank] = None;
            if code != 0 {
                let rank = first + rank;
                note(format!("rank {rank} {what}"));
                // The others on this node learn it at once, even where no connection to it
                // exists yet (other nodes' ranks learn it from their connections to it).
                for n in notifiers.iter_mut().flatten() {
                    n.tell(rank, &what);
                }
                if first_failure.is_none() {
                    first_failure = Some(code);
                    failed_at = Some(Instant::now());
                }
            }
        }
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 {
            signals_seen += 1;
            let forward = if signals_seen == 1 {
                sig
            } else {
                libc::SIGKILL
            };
            note(format!(
                "got signal {sig}, sending signal {forward} to the ranks"
            ));
            signal_ranks(&pids, &running, forward);
        }
        let now = Instant::now();
        if let (Some(t), None) = (failed_at, terminated_at)
            && left > 0
            && now.duration_since(t) >= args.grace
        {
            note(format!(
                "{left} rank(s) still running {:?} after a failure; terminating them",
                args.grace
            ));
            signal_ranks(&pids, &running, libc::SIGTERM);
            terminated_at = Some(now);
        }
        if let Some(t) = terminated_at
            && !killed
            && left > 0
            && now.duration_since(t) >= KILL_AFTER
        {
            signal_ranks(&pids, &running, libc::SIGKILL);
            killed = true;
        }
        if left > 0 {
            thread::sleep(TICK);
        }
    }
    drain_output(pumps, &pids, &note);
    Ok(first_failure.unwrap_or(0))
}

/// After every rank has exited: waits for their output to end. A rank's pipes stay open while
/// a process it started (still in its process group) holds them, so after [`OUTPUT_DRAIN`]
/// those processes get SIGTERM, then SIGKILL; a signal to the launcher kills them at once.
/// Output threads still running [`LEFTOVER_KILL_AFTER`] after the SIGKILL (a process that left
/// the group holds the pipe) are left behind.
fn drain_output(
    pumps: Vec<thread::JoinHandle<io::Result<()>>>,
    pids: &[i32],
    note: &dyn Fn(String),
) {
    let start = Instant::now();
    let groups = vec![true; pids.len()];
    let mut terminated_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    while !pumps.iter().all(|p| p.is_finished()) {
        let now = Instant::now();
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 && killed_at.is_none() {
            note(format!(
                "got signal {sig}, killing the processes the ranks left running"
            ));
            signal_ranks(pids, &groups, libc::SIGKILL);
            killed_at = Some(now);
        }
        if terminated_at.is_none() && killed_at.is_none() && now - start >= OUTPUT_DRAIN {
            note(format!(
                "every rank has exited, but processes they started still hold their output \
                 open after {OUTPUT_DRAIN:?}; terminating them"
            ));
            signal_ranks(pids, &groups, libc::SIGTERM);
            terminated_at = Some(now);
        }
        if let Some(t) = terminated_at
            && killed_at.is_none()
            && now - t >= LEFTOVER_KILL_AFTER
        {
            signal_ranks(pids, &groups, libc::SIGKILL);
            killed_at = Some(now);
        }
        if let Some(t) = killed_at
            && now - t >= LEFTOVER_KILL_AFTER
        {
            note("the ranks' output is still open; not waiting for it any longer".into());
            return;
        }
        thread::sleep(TICK);
    }
    for p in pumps {
        let _ = p.join();
    }
}

/// The unique id every node's invocation derives alike for a job of several nodes: the
/// master's address, and a magic from it and the job's shape (so a process of a job of
/// another shape at the same address is turned away; unlike the single-node random magic, a
/// stale process of an identical earlier job is not).
fn job_id(nodes: &super::args::Nodes, nprocs: usize) -> Result<UniqueId> {
    let addr = crate::bootstrap::resolve(&nodes.master)
        .map_err(|why| Error::InvalidArgument(format!("--master {:?}: {why}", nodes.master)))?;
    // The resolved address, not the text: nodes may name node 0 differently.
    let seed = format!("symcomm-run/{addr}/{}x{nprocs}", nodes.nnodes);
    Ok(UniqueId::derived(addr, &seed))
}
