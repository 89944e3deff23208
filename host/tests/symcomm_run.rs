//! `symcomm-run` end to end: output prefixes, exit-code propagation, stopping the other ranks
//! after a failure, Ctrl-C forwarding.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_symcomm-run");
const SELFTEST: &str = env!("CARGO_BIN_EXE_symcomm-selftest");

fn run(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(RUN)
        .args(args)
        .env_remove("SYMCOMM_LOG")
        .output()
        .unwrap();
    (out, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn symcomm_run_prefixes_output_and_exits_with_the_failing_ranks_code() {
    let script = r#"echo "out $RANK of $WORLD_SIZE local $LOCAL_RANK"; echo "err $RANK" >&2
        [ -n "$SYMCOMM_UNIQUE_ID" ] || exit 9
        if [ "$RANK" = 1 ]; then exit 7; fi"#;
    let (out, _) = run(&["-n", "3", "--", "sh", "-c", script]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    for r in 0..3 {
        assert!(
            stdout.contains(&format!("[rank {r}] out {r} of 3 local {r}\n")),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!("[rank {r}] err {r}\n")),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains("symcomm-run: rank 1 exited with code 7"),
        "{stderr}"
    );
}

#[test]
fn symcomm_run_assigns_the_listed_gpus_in_rank_order() {
    let (out, _) = run(&[
        "-n",
        "2",
        "--gpus",
        "5,3",
        "--",
        "sh",
        "-c",
        "echo dev $SYMCOMM_DEVICE",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("[rank 0] dev 5\n") && stdout.contains("[rank 1] dev 3\n"),
        "{stdout}"
    );
}

#[test]
fn symcomm_run_succeeds_when_every_rank_does() {
    let (out, _) = run(&[
        "-n",
        "4",
        "--timeout",
        "20",
        "--",
        SELFTEST,
        "--iters",
        "50",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for r in 0..4 {
        assert!(
            stdout.contains(&format!("[rank {r}] rank {r}: ok: 50 iterations")),
            "{stdout}"
        );
    }
}

#[test]
fn symcomm_run_stops_the_remaining_ranks_after_the_grace_period() {
    let (out, took) = run(&[
        "-n",
        "3",
        "--grace",
        "0.5",
        "--",
        "sh",
        "-c",
        r#"if [ "$RANK" = 0 ]; then exit 3; fi; sleep 60"#,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        text(&out.stderr).contains("terminating them"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_crashing_rank_makes_its_peers_fail_and_symcomm_run_report_it() {
    let (out, took) = run(&[
        "-n",
        "4",
        "--timeout",
        "20",
        "--",
        SELFTEST,
        "--mode",
        "barrier-loop",
        "--exit-at",
        "2:7",
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("symcomm-run: rank 2 exited with code 7"),
        "{stderr}"
    );
    // The peers noticed by themselves, long before their 20 s timeout.
    assert!(stderr.contains("rank 2 disconnected"), "{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn symcomm_run_forwards_ctrl_c_to_the_ranks() {
    let mut child = Command::new(RUN)
        .args(["-n", "2", "--", "sh", "-c", "echo started; sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("started") {
                let _ = tx.send(());
            }
        }
    });
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(20))
            .expect("ranks did not start");
    }
    let start = Instant::now();
    // SAFETY: `kill` has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("symcomm-run did not stop after SIGINT");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("got signal 2"), "{stderr}");
}

#[test]
fn symcomm_run_rejects_a_bad_command_line_with_usage() {
    let (out, _) = run(&["-n", "zero", "prog"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("usage: symcomm-run"));
    let (out, _) = run(&["-n", "1", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        text(&out.stderr).contains("starting rank 0"),
        "{}",
        text(&out.stderr)
    );
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped by whoever adopted it).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

#[test]
fn symcomm_run_does_not_wait_for_processes_a_rank_left_holding_its_output() {
    // `sleep` keeps the rank's stdout and stderr open long after the rank exited; the second
    // case also ignores SIGTERM, so only SIGKILL ends it.
    for (script, code) in [
        ("sleep 30 & echo leftover $!; exit 0", 0),
        ("trap '' TERM; sleep 30 & echo leftover $!; exit 3", 3),
    ] {
        let (out, took) = run(&["-n", "2", "--", "sh", "-c", script]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {stdout}\n{stderr}"
        );
        assert!(took < Duration::from_secs(10), "{script}: took {took:?}");
        assert!(stderr.contains("terminating them"), "{script}: {stderr}");
        let pids: Vec<i32> = stdout
            .lines()
            .filter_map(|l| l.split_once("leftover ").and_then(|(_, p)| p.parse().ok()))
            .collect();
        assert_eq!(pids.len(), 2, "{stdout}");
        let start = Instant::now();
        while !pids.iter().all(|&p| is_gone(p)) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{script}: left-behind processes {pids:?} still run"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}
