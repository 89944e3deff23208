//! The fault suite: a job of three ranks (processes, started by `symcomm-run` on the CPU
//! emulator, default settings) in which one rank is stopped at a named phase
//! (`SYMCOMM_TEST_PAUSE_AT`, see `symcomm::fault`) and killed there with SIGKILL. Every
//! survivor must exit with an error naming the dead rank within 3 s of the kill, the launcher
//! must exit non-zero, and no process or fd socket of the job may be left behind (memfds live
//! only in the ranks' processes, so they go with them).
//!
//! The program is `fault_victim`; the launcher is `fault_run` (`symcomm-run`'s code built in
//! this package, so that it has a path here). Prints one line per case (with `--nocapture`).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_fault_run");
const VICTIM: &str = env!("CARGO_BIN_EXE_fault_victim");
const RANKS: usize = 3;
/// How soon after the kill every survivor must have exited with its error.
const PROMPT: Duration = Duration::from_secs(3);
/// Generous bounds on the parts that are not under test (start-up, the launcher's exit).
const REACH_LIMIT: Duration = Duration::from_secs(60);
const EXIT_LIMIT: Duration = Duration::from_secs(30);

/// (phase, rank killed there)
const CASES: &[(&str, usize)] = &[
    ("connect", 1),
    ("connect", 0),
    ("mesh", 1),
    ("mesh", 2),
    ("register", 1),
    ("register-fds", 1),
    ("register-mapped", 1),
    ("devcomm", 1),
    ("collective", 1),
    ("barrier-kernel", 1),
    ("deregister", 1),
];

struct Job {
    launcher: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<(Instant, String)>,
}

impl Job {
    fn start(phase: &str, victim: usize) -> Job {
        let mut launcher = Command::new(RUN)
            .args(["-n", &RANKS.to_string(), "--", VICTIM])
            .env("SYMCOMM_BACKEND", "emu")
            // Each emulated rank may hold at most this much "device" memory: the suite's
            // processes stay far below 1 GiB whatever a case allocates.
            .env("SYMCOMM_EMU_DEVICE_MEMORY", "512M")
            .env("SYMCOMM_TEST_PAUSE_AT", format!("{phase}@{victim}"))
            .env_remove("SYMCOMM_TIMEOUT")
            .env_remove("SYMCOMM_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting the launcher");
        let stderr = launcher.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Job {
            launcher,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (until `limit`) for a line satisfying `want`; returns it.
    fn wait_for(
        &mut self,
        limit: Duration,
        want: impl Fn(&str) -> bool,
    ) -> Option<(Instant, String)> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if want(&l.1) {
                        return Some(l);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Waits for the launcher to exit; its exit code (`None`: it had to be killed).
    fn finish(&mut self) -> Option<i32> {
        let end = Instant::now() + EXIT_LIMIT;
        let status = loop {
            if let Ok(Some(s)) = self.launcher.try_wait() {
                break Some(s);
            }
            if Instant::now() >= end {
                // SAFETY: kill has no memory-safety preconditions; the launcher leads its group.
                unsafe { libc::kill(-(self.launcher.id() as i32), libc::SIGKILL) };
                let _ = self.launcher.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(5));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        status.and_then(|s| s.code())
    }

    fn transcript(&self) -> String {
        self.seen.iter().map(|(_, l)| format!("  {l}\n")).collect()
    }
}

/// `… (pid P) …` / `… pid P …` → P.
fn pid_in(line: &str) -> Option<i32> {
    let at = line.find("pid ")? + 4;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Runs one case; `Err` describes what went wrong, `Ok` the case's summary line.
fn run_case(phase: &str, victim: usize) -> Result<String, String> {
    let mut job = Job::start(phase, victim);
    let paused = format!("[rank {victim}] symcomm-test: rank {victim} (pid ");
    let suffix = format!(") paused at {phase}");
    let Some((_, line)) = job.wait_for(REACH_LIMIT, |l| {
        l.starts_with(&paused) && l.ends_with(&suffix)
    }) else {
        job.finish();
        return Err(format!(
            "rank {victim} never reached {phase}:\n{}",
            job.transcript()
        ));
    };
    let pid = pid_in(&line).ok_or_else(|| format!("no pid in {line:?}"))?;
    // SAFETY: kill has no memory-safety preconditions; `pid` is the paused rank.
    let killed = unsafe { libc::kill(pid, libc::SIGKILL) } == 0;
    let t_kill = Instant::now();
    if !killed {
        return Err(format!("could not kill pid {pid}"));
    }
    let code = job.finish();
    let log = job.transcript();
    if code.is_none_or(|c| c == 0) {
        return Err(format!("the launcher exited with {code:?}:\n{log}"));
    }
    let mut slowest = Duration::ZERO;
    let mut errors = Vec::new();
    for s in (0..RANKS).filter(|&s| s != victim) {
        let failed = format!("[rank {s}] fault_victim: rank {s} failed after ");
        let err = job
            .seen
            .iter()
            .find(|(_, l)| l.starts_with(&failed))
            .ok_or_else(|| format!("rank {s} reported no error:\n{log}"))?;
        if !err.1.contains(&format!(": rank {victim} ")) {
            return Err(format!(
                "rank {s}'s error does not name rank {victim}:\n{log}"
            ));
        }
        let exited = format!("symcomm-run: rank {s} exited with code 1");
        let (t_exit, _) = job
            .seen
            .iter()
            .find(|(_, l)| l.starts_with(&exited))
            .ok_or_else(|| format!("rank {s} did not exit with code 1:\n{log}"))?;
        let after = t_exit.saturating_duration_since(t_kill);
        if after > PROMPT {
            return Err(format!("rank {s} exited {after:?} after the kill:\n{log}"));
        }
        slowest = slowest.max(after);
        errors.push(
            err.1
                .split_once("failed after ")
                .map_or("", |x| x.1)
                .to_string(),
        );
    }
    // Nothing left behind: every rank's process is gone, and with it its memfds.
    let pids: Vec<i32> = job
        .seen
        .iter()
        .filter(|(_, l)| l.contains("fault_victim: rank ") && l.contains(" socket @"))
        .filter_map(|(_, l)| pid_in(l))
        .collect();
    if pids.len() != RANKS {
        return Err(format!("expected {RANKS} start lines:\n{log}"));
    }
    if let Some(p) = pids.iter().find(|&&p| alive(p)) {
        return Err(format!("process {p} is still running:\n{log}"));
    }
    // No fd socket of this job: `@symcomm-<job>-<rank>` in the abstract namespace.
    let sockets: Vec<String> = job
        .seen
        .iter()
        .filter_map(|(_, l)| l.split_once(" socket @").map(|x| x.1.to_string()))
        .collect();
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    if let Some(s) = sockets.iter().find(|s| unix.contains(&format!("@{s}"))) {
        return Err(format!("socket @{s} is still bound:\n{log}"));
    }
    Ok(format!(
        "{phase:>15}@{victim}: launcher exit {}, survivors out within {:>4.0} ms; {}",
        code.unwrap_or(-1),
        slowest.as_secs_f64() * 1e3,
        errors.first().map_or("", |e| e.as_str())
    ))
}

#[test]
fn a_rank_killed_at_any_phase_is_reported_by_every_survivor_within_3_s() {
    let phases: Vec<&str> = CASES.iter().map(|c| c.0).collect();
    for p in symcomm::fault::PHASES {
        assert!(phases.contains(p), "phase {p} has no fault case");
    }
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for &(phase, victim) in CASES {
        match run_case(phase, victim) {
            Ok(line) => println!("{line}"),
            Err(e) => failures.push(format!("{phase}@{victim}: {e}")),
        }
    }
    println!(
        "{} cases in {:.1} s",
        CASES.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_layout_setting_made_on_one_rank_only_fails_every_rank_at_set_up() {
    // Before: SYMCOMM_WIN_STRIDE on rank 1 alone gave the ranks different flat layouts, and
    // nothing said so until a peer's memory was not where a kernel looked for it.
    let script =
        format!("if [ \"$RANK\" = 1 ]; then export SYMCOMM_WIN_STRIDE=8G; fi; exec {VICTIM}");
    let out = Command::new(RUN)
        .args(["-n", "2", "--", "sh", "-c", &script])
        .env("SYMCOMM_BACKEND", "emu")
        .env_remove("SYMCOMM_WIN_STRIDE")
        .env_remove("SYMCOMM_TEST_PAUSE_AT")
        .env_remove("SYMCOMM_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("running the launcher");
    let log = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{log}");
    for r in 0..2 {
        let want = format!("[rank {r}] fault_victim: rank {r} failed after");
        let line = log
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("rank {r} reported no error:\n{log}"));
        assert!(
            line.ends_with(
                "setting SYMCOMM_WIN_STRIDE differs across ranks: rank 0 has unset, rank 1 has 8G"
            ),
            "{line}"
        );
    }
}
