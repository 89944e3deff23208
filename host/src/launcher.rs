//! The local launcher behind `symcomm-run -n N [options] -- prog args`: starts N ranks of one
//! job on this machine and supervises them.
//!
//! What it does, in order:
//! - picks a free port on 127.0.0.1 (bind to port 0, read it, release it: a tiny window in
//!   which another process could take it, accepted for a development launcher) and draws a
//!   random magic;
//! - starts each rank with `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
//!   `MASTER_ADDR`, `MASTER_PORT` (torchrun's names, so non-symcomm code can use them too),
//!   `SYMCOMM_UNIQUE_ID` (root address and magic), with `--timeout` `SYMCOMM_TIMEOUT`, and
//!   with `--gpus` `SYMCOMM_DEVICE` ([`rank_env`]); each rank runs in its own process group (so a terminal's Ctrl-C reaches
//!   it once, through the launcher), gets SIGTERM if the launcher itself dies, and has stdin
//!   closed;
//! - prefixes every line a rank prints with `[rank k] ` ([`prefix_lines`]), stdout to stdout and
//!   stderr to stderr, whole lines at a time;
//! - forwards SIGINT and SIGTERM to every rank's process group (a second signal sends SIGKILL);
//! - when a rank fails, waits `--grace` seconds for the others to notice and exit on their own
//!   (the bootstrap makes them fail promptly), then sends SIGTERM, and SIGKILL 5 s later;
//! - once every rank has exited, waits for their output to end; processes a rank left running
//!   in its process group (e.g. `cmd &`) that still hold its output open after 2 s get SIGTERM,
//!   and SIGKILL 1 s later (at once on SIGINT or SIGTERM), so they cannot keep the launcher
//!   waiting;
//! - exits with the first failing rank's exit code, `128 + signal` if it was killed by a
//!   signal ([`exit_code`]), 0 if every rank succeeded.
//!
//! The pieces are plain functions so they are unit-tested; [`run`] ties them together.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::bootstrap::{UniqueId, parse_timeout};
use crate::{Error, Result};

/// Command-line help of `symcomm-run`.
pub const USAGE: &str = "\
usage: symcomm-run -n N [--gpus LIST] [--timeout SECONDS] [--grace SECONDS] [--] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this machine with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and SYMCOMM_UNIQUE_ID set, prefixes
their output with [rank k], forwards Ctrl-C, and exits with the first failing
rank's exit code.

options:
  -n, --nprocs N     number of ranks to start (1 or more)
  --gpus LIST        CUDA devices of the ranks, e.g. 4,5,6,7: rank k uses the k-th
                     (sets SYMCOMM_DEVICE; default: device = local rank)
  --timeout SECONDS  bootstrap timeout for the ranks (sets SYMCOMM_TIMEOUT)
  --grace SECONDS    after a rank fails, how long the others may take to exit
                     before they are terminated (default 10)
  -h, --help         print this help";

/// Default of `--grace`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
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
/// Longest piece of one output line that [`prefix_lines`] holds before writing it.
pub const MAX_LINE_BYTES: usize = 64 << 10;

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
    /// The program to run.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
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

/// The environment of rank `rank` of `nprocs`, all on this machine, root at `id`.
pub fn rank_env(
    rank: usize,
    nprocs: usize,
    id: &UniqueId,
    timeout: Option<Duration>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("RANK".to_string(), rank.to_string()),
        ("WORLD_SIZE".to_string(), nprocs.to_string()),
        ("LOCAL_RANK".to_string(), rank.to_string()),
        ("LOCAL_WORLD_SIZE".to_string(), nprocs.to_string()),
        ("MASTER_ADDR".to_string(), id.addr().ip().to_string()),
        ("MASTER_PORT".to_string(), id.addr().port().to_string()),
        ("SYMCOMM_UNIQUE_ID".to_string(), id.to_string()),
    ];
    if let Some(t) = timeout {
        env.push(("SYMCOMM_TIMEOUT".to_string(), t.as_secs_f64().to_string()));
    }
    env
}

/// Copies `input` to `out` line by line, each line prefixed with `[rank k] ` and written whole
/// under the lock (a last line without a newline gets one). Bytes need not be UTF-8. A line
/// longer than [`MAX_LINE_BYTES`] is written in pieces of that size, each prefixed and ended
/// like a line, so a rank printing without newlines cannot make the launcher buffer without
/// bound.
pub fn prefix_lines<W: Write>(rank: usize, input: impl Read, out: &Mutex<W>) -> io::Result<()> {
    let prefix = format!("[rank {rank}] ");
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut piece = (&mut input).take(MAX_LINE_BYTES as u64);
        if piece.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(prefix.len() + line.len() + 1);
        buf.extend_from_slice(prefix.as_bytes());
        buf.extend_from_slice(&line);
        if !line.ends_with(b"\n") {
            buf.push(b'\n');
        }
        let mut w = out.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&buf)?;
        w.flush()?;
    }
}

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

/// The signal last received by the launcher (0 = none), set by the signal handler.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn remember_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sigaction` is given a zero-initialised struct (a valid `sigaction` value)
        // whose handler is an `extern "C" fn(c_int)` that only performs an atomic store, which
        // is async-signal-safe; the old-action pointer may be null.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = remember_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(Error::Io {
                what: format!("installing the handler for signal {sig}"),
                source: io::Error::last_os_error(),
            });
        }
    }
    Ok(())
}

/// Sends `sig` to the process group of every rank marked in `running` (the group a rank leads
/// outlives the rank while processes it started remain in it).
fn signal_ranks(pids: &[i32], running: &[bool], sig: libc::c_int) {
    for (&pid, _) in pids.iter().zip(running).filter(|(_, r)| **r) {
        // SAFETY: `kill` has no memory-safety preconditions; a negative pid addresses the
        // process group that the rank leads (it was started with `process_group(0)`).
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> Result<u16> {
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

/// Rejects what [`LaunchArgs::parse`] would have rejected, for arguments built by hand.
fn check_args(args: &LaunchArgs) -> Result<()> {
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
    if let Some(t) = args.timeout
        && !(Duration::from_millis(1)..=Duration::from_secs(1_000_000_000)).contains(&t)
    {
        return Err(Error::InvalidArgument(format!(
            "timeout {t:?} is not between 1 ms and 1e9 s"
        )));
    }
    Ok(())
}

/// Starts a thread that copies `input` to `out` with [`prefix_lines`].
fn start_pump<W: Write + Send + 'static>(
    rank: usize,
    input: impl Read + Send + 'static,
    out: &Arc<Mutex<W>>,
) -> Result<thread::JoinHandle<io::Result<()>>> {
    let out = Arc::clone(out);
    thread::Builder::new()
        .name(format!("symcomm-run-out{rank}"))
        .spawn(move || prefix_lines(rank, input, &*out))
        .map_err(|source| Error::Io {
            what: format!("starting the output thread of rank {rank}"),
            source,
        })
}

/// Kills (SIGKILL, whole process group) and reaps the ranks started so far, after a failed
/// start.
fn kill_started(children: &mut [Child]) {
    for child in children.iter_mut() {
        // SAFETY: `kill` has no memory-safety preconditions; the child is not reaped yet, so
        // its pid still names the process group it leads.
        unsafe {
            libc::kill(-(child.id() as i32), libc::SIGKILL);
        }
        let _ = child.wait();
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
    let id = UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)));
    install_signal_handlers()?;
    let stdout = Arc::new(Mutex::new(io::stdout()));
    let stderr = Arc::new(Mutex::new(io::stderr()));
    let n = args.nprocs;
    let mut children: Vec<Child> = Vec::with_capacity(n);
    let mut pumps = Vec::new();
    for rank in 0..n {
        let mut cmd = Command::new(&args.program);
        cmd.args(&args.args)
            .envs(rank_env(rank, n, &id, args.timeout))
            .envs(
                args.gpus
                    .as_ref()
                    .map(|g| ("SYMCOMM_DEVICE", g[rank].to_string())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and only calls `prctl`,
        // which is async-signal-safe; it touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                // If the launcher dies without stopping its ranks, they get SIGTERM.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let started = cmd
            .spawn()
            .map_err(|source| Error::Io {
                what: format!("starting rank {rank} ({:?})", args.program),
                source,
            })
            .and_then(|mut child| {
                let (out, err) = (child.stdout.take(), child.stderr.take());
                children.push(child);
                if let Some(out) = out {
                    pumps.push(start_pump(rank, out, &stdout)?);
                }
                if let Some(err) = err {
                    pumps.push(start_pump(rank, err, &stderr)?);
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
        for (rank, child) in children.iter_mut().enumerate() {
            if !running[rank] {
                continue;
            }
            let (code, what) = match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(s)) => (exit_code(s), describe(s)),
                Err(e) => (1, format!("could not be waited for ({e})")),
            };
            running[rank] = false;
            left -= 1;
            if code != 0 {
                note(format!("rank {rank} {what}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<Parsed, String> {
        LaunchArgs::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn command_lines_are_parsed_up_to_the_program() {
        let Ok(Parsed::Run(a)) = parse(&["-n", "4", "--timeout", "2.5", "--", "prog", "-n", "x"])
        else {
            panic!("not parsed")
        };
        assert_eq!(a.nprocs, 4);
        assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(a.grace, DEFAULT_GRACE);
        assert_eq!(a.program, "prog");
        assert_eq!(a.args, vec![OsString::from("-n"), OsString::from("x")]);
        let Ok(Parsed::Run(a)) = parse(&["-n8", "--grace", "1", "prog"]) else {
            panic!("not parsed")
        };
        assert_eq!(a.gpus, None);
        let Ok(Parsed::Run(g)) = parse(&["-n", "2", "--gpus", "6,7", "prog"]) else {
            panic!("not parsed")
        };
        assert_eq!(g.gpus, Some(vec![6, 7]));
        assert_eq!(
            (a.nprocs, a.grace, a.args.len()),
            (8, Duration::from_secs(1), 0)
        );
        assert_eq!(parse(&["--help"]), Ok(Parsed::Help));
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        for (args, says) in [
            (&["prog"][..], "number of ranks"),
            (&["-n", "2"][..], "program"),
            (&["-n", "0", "prog"][..], "-n"),
            (&["-n"][..], "needs a value"),
            (&["--frobnicate", "prog"][..], "unknown option"),
            (&["-n", "2", "--timeout", "0", "prog"][..], "--timeout"),
            (
                &["-n", "3", "--gpus", "0,1", "prog"][..],
                "2 device(s) for 3 ranks",
            ),
            (&["-n", "1", "--gpus", "a", "prog"][..], "--gpus"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn every_rank_gets_the_launch_variables() {
        let id = UniqueId::new("127.0.0.1:4242".parse().unwrap(), 0xab);
        let env = rank_env(2, 4, &id, Some(Duration::from_millis(1500)));
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap()
        };
        assert_eq!(get("RANK"), "2");
        assert_eq!(get("WORLD_SIZE"), "4");
        assert_eq!(get("LOCAL_RANK"), "2");
        assert_eq!(get("LOCAL_WORLD_SIZE"), "4");
        assert_eq!(get("MASTER_ADDR"), "127.0.0.1");
        assert_eq!(get("MASTER_PORT"), "4242");
        assert_eq!(get("SYMCOMM_UNIQUE_ID"), "00000000000000ab@127.0.0.1:4242");
        assert_eq!(get("SYMCOMM_TIMEOUT"), "1.5");
        // What the launcher sets is what the ranks read back.
        let back = crate::bootstrap::LaunchEnv::from_lookup(|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        assert_eq!((back.rank, back.size, back.unique_id), (2, 4, Some(id)));
    }

    #[test]
    fn output_lines_get_the_rank_prefix_whole() {
        let out = Mutex::new(Vec::new());
        prefix_lines(3, &b"one\ntwo\n\xffbinary\nlast"[..], &out).unwrap();
        assert_eq!(
            out.into_inner().unwrap(),
            b"[rank 3] one\n[rank 3] two\n[rank 3] \xffbinary\n[rank 3] last\n"
        );
    }

    #[test]
    fn a_line_without_newlines_is_written_in_bounded_pieces() {
        let mut input = vec![b'a'; 2 * MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\nnext\n");
        let out = Mutex::new(Vec::new());
        prefix_lines(1, &input[..], &out).unwrap();
        let out = out.into_inner().unwrap();
        let lines: Vec<&[u8]> = out.split_inclusive(|&b| b == b'\n').collect();
        let piece = |n| [&b"[rank 1] "[..], &vec![b'a'; n], b"\n"].concat();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], piece(MAX_LINE_BYTES));
        assert_eq!(lines[1], piece(MAX_LINE_BYTES));
        assert_eq!(lines[2], piece(10));
        assert_eq!(lines[3], b"[rank 1] next\n");
    }

    #[test]
    fn run_refuses_hand_built_arguments_before_starting_any_rank() {
        let marker = std::env::temp_dir().join(format!("symcomm-run-check-{}", std::process::id()));
        let args = LaunchArgs {
            nprocs: 3,
            timeout: None,
            gpus: Some(vec![0]),
            grace: DEFAULT_GRACE,
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "touch \"$0.$RANK\"".into(),
                marker.clone().into_os_string(),
            ],
        };
        let e = run(&args).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("1 device(s) for 3")),
            "{e}"
        );
        for bad in [
            LaunchArgs {
                nprocs: 0,
                gpus: None,
                ..args.clone()
            },
            LaunchArgs {
                gpus: None,
                timeout: Some(Duration::ZERO),
                ..args.clone()
            },
        ] {
            assert!(
                matches!(run(&bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        thread::sleep(Duration::from_millis(200));
        for rank in 0..3 {
            let file = format!("{}.{rank}", marker.display());
            let started = std::path::Path::new(&file).exists();
            let _ = std::fs::remove_file(&file);
            assert!(!started, "rank {rank} was started");
        }
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(describe(ExitStatus::from_raw(7 << 8)), "exited with code 7");
        assert_eq!(
            describe(ExitStatus::from_raw(libc::SIGKILL)),
            "was killed by signal 9"
        );
    }
}
