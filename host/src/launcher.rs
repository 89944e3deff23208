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
//! - exits with the first failing rank's exit code, `128 + signal` if it was killed by a
//!   signal ([`exit_code`]), 0 if every rank succeeded.
//!
//! The pieces are plain functions so they are unit-tested; [`run`] ties them together.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
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
/// under the lock (a last line without a newline gets one). Bytes need not be UTF-8.
pub fn prefix_lines<W: Write>(rank: usize, input: impl Read, out: &Mutex<W>) -> io::Result<()> {
    let prefix = format!("[rank {rank}] ");
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
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

/// Sends `sig` to the process group of every rank that is still running.
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

/// Runs the job described by `args` and returns the launcher's exit code. Progress notes go to
/// stderr, prefixed `symcomm-run:`.
pub fn run(args: &LaunchArgs) -> Result<i32> {
    let id = UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)));
    install_signal_handlers()?;
    let stdout = Arc::new(Mutex::new(io::stdout()));
    let stderr = Arc::new(Mutex::new(io::stderr()));
    let (tx, rx) = mpsc::channel();
    let mut pids: Vec<i32> = Vec::with_capacity(args.nprocs);
    let mut pumps = Vec::new();
    let n = args.nprocs;
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
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(source) => {
                signal_ranks(&pids, &vec![true; pids.len()], libc::SIGKILL);
                for _ in 0..pids.len() {
                    let _ = rx.recv();
                }
                return Err(Error::Io {
                    what: format!("starting rank {rank} ({:?})", args.program),
                    source,
                });
            }
        };
        pids.push(child.id() as i32);
        if let Some(out) = child.stdout.take() {
            let w = stdout.clone();
            pumps.push(thread::spawn(move || prefix_lines(rank, out, &*w)));
        }
        if let Some(err) = child.stderr.take() {
            let w = stderr.clone();
            pumps.push(thread::spawn(move || prefix_lines(rank, err, &*w)));
        }
        let tx = tx.clone();
        thread::spawn(move || {
            let status = child.wait();
            let _ = tx.send((rank, status));
        });
    }
    drop(tx);
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
        match rx.recv_timeout(TICK) {
            Ok((rank, status)) => {
                running[rank] = false;
                left -= 1;
                let (code, what) = match status {
                    Ok(s) => (exit_code(s), describe(s)),
                    Err(e) => (1, format!("could not be waited for ({e})")),
                };
                if code != 0 {
                    note(format!("rank {rank} {what}"));
                    if first_failure.is_none() {
                        first_failure = Some(code);
                        failed_at = Some(Instant::now());
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
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
            && now >= t + args.grace
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
            && now >= t + KILL_AFTER
        {
            signal_ranks(&pids, &running, libc::SIGKILL);
            killed = true;
        }
    }
    for p in pumps {
        let _ = p.join();
    }
    Ok(first_failure.unwrap_or(0))
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
