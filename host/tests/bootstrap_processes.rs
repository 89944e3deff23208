//! Acceptance tests of the bootstrap with one process per rank on loopback (the
//! `symcomm-selftest` binary), and the same workload through the in-process mode.
//!
//! Every test runs under short `SYMCOMM_TIMEOUT`s and its own hang guard, so a bug fails the
//! test instead of hanging CI.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use symcomm::Communicator;
use symcomm::bootstrap::UniqueId;

const SELFTEST: &str = env!("CARGO_BIN_EXE_symcomm-selftest");

fn fresh_id() -> UniqueId {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// Starts rank `rank` of `n` with the given unique id, timeout (seconds), extra environment
/// and selftest arguments.
fn start(
    rank: usize,
    n: usize,
    id: &UniqueId,
    timeout: &str,
    env: &[(&str, String)],
    args: &[&str],
) -> Child {
    let mut cmd = Command::new(SELFTEST);
    for var in [
        "OMPI_COMM_WORLD_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SYMCOMM_NODE_ID",
        "SYMCOMM_LSA_SIZE",
        "SYMCOMM_DEVICE",
        "SYMCOMM_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", n.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("SYMCOMM_UNIQUE_ID", id.to_string())
        .env("SYMCOMM_TIMEOUT", timeout)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

struct Done {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// When the process was seen to end.
    at: Instant,
}

/// Waits for every child, killing all of them and failing the test if any is still running
/// after `limit`.
fn wait_all(children: Vec<Child>, limit: Duration) -> Vec<Done> {
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let (tx, rx) = mpsc::channel();
    for (i, mut c) in children.into_iter().enumerate() {
        let tx = tx.clone();
        thread::spawn(move || {
            let mut stdout = String::new();
            let mut stderr = String::new();
            let (mut o, mut e) = (c.stdout.take(), c.stderr.take());
            let err_reader = thread::spawn(move || {
                if let Some(e) = e.as_mut() {
                    let _ = e.read_to_string(&mut stderr);
                }
                stderr
            });
            if let Some(o) = o.as_mut() {
                let _ = o.read_to_string(&mut stdout);
            }
            let status = c.wait().unwrap();
            let at = Instant::now();
            let stderr = err_reader.join().unwrap();
            let _ = tx.send((
                i,
                Done {
                    status,
                    stdout,
                    stderr,
                    at,
                },
            ));
        });
    }
    drop(tx);
    let deadline = Instant::now() + limit;
    let mut out: Vec<Option<Done>> = pids.iter().map(|_| None).collect();
    for _ in 0..pids.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, d)) => out[i] = Some(d),
            Err(_) => {
                for (i, pid) in pids.iter().enumerate() {
                    if out[i].is_none() {
                        // SAFETY: `kill` has no memory-safety preconditions.
                        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                    }
                }
                let hung: Vec<usize> = (0..pids.len()).filter(|&i| out[i].is_none()).collect();
                panic!("ranks {hung:?} still running after {limit:?}: the job hangs");
            }
        }
    }
    out.into_iter().map(|d| d.unwrap()).collect()
}

fn run_job(
    n: usize,
    timeout: &str,
    env: impl Fn(usize) -> Vec<(&'static str, String)>,
    args: &[&str],
) -> Vec<Done> {
    let id = fresh_id();
    let children = (0..n)
        .map(|r| start(r, n, &id, timeout, &env(r), args))
        .collect();
    wait_all(children, Duration::from_secs(60))
}

#[test]
fn eight_processes_run_1000_checked_rounds_of_every_collective() {
    let done = run_job(8, "20", |_| vec![], &["--iters", "1000"]);
    for (r, d) in done.iter().enumerate() {
        assert!(d.status.success(), "rank {r}: {}\n{}", d.status, d.stderr);
        assert!(
            d.stdout.contains(&format!("rank {r}: ok: 1000 iterations")),
            "rank {r}: {}",
            d.stdout
        );
    }
}

#[test]
fn in_process_ranks_run_1000_checked_rounds_of_every_collective() {
    let comms = Communicator::init_threads_with(8, Duration::from_secs(20), |_| {
        symcomm::CommOptions::new()
    })
    .unwrap();
    thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let b = c.bootstrap();
                let (r, n) = (b.rank(), b.size());
                for i in 0..1000usize {
                    let mine = [r as u8, i as u8, (i >> 8) as u8];
                    let all = b.all_gather(&mine[..1 + r % 3]).unwrap();
                    for (p, d) in all.iter().enumerate() {
                        assert_eq!(d[..], [p as u8, i as u8, (i >> 8) as u8][..1 + p % 3]);
                    }
                    let root = i % n;
                    let got = b.broadcast(root, &[r as u8, i as u8]).unwrap();
                    assert_eq!(got, [root as u8, i as u8]);
                    b.barrier().unwrap();
                }
            });
        }
    });
}

#[test]
fn lsa_size_follows_the_declared_nodes_of_separate_processes() {
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (&["a", "a", "a", "a", "b", "b", "b", "b"], None, "4"),
        (&["a", "b", "a", "b", "a", "b", "a", "b"], None, "1"),
        (&["a", "a", "a", "a", "a", "a", "b", "b"], None, "2"),
        (&["a"; 8], Some("2"), "2"),
    ];
    for (nodes, cap, expect) in cases {
        let done = run_job(
            8,
            "20",
            |r| {
                let mut env = vec![("SYMCOMM_NODE_ID", nodes[r].to_string())];
                if let Some(k) = cap {
                    env.push(("SYMCOMM_LSA_SIZE", k.to_string()));
                }
                env
            },
            &["--iters", "1", "--expect-lsa", expect],
        );
        for (r, d) in done.iter().enumerate() {
            assert!(d.status.success(), "{nodes:?} rank {r}: {}", d.stderr);
        }
    }
}

#[test]
fn a_rank_with_the_wrong_magic_is_rejected_and_nobody_hangs() {
    let id = fresh_id();
    let wrong = UniqueId::new(id.addr(), id.magic() ^ 0x5a5a);
    let start_all = Instant::now();
    let children = (0..8)
        .map(|r| {
            start(
                r,
                8,
                if r == 3 { &wrong } else { &id },
                "2",
                &[],
                &["--iters", "5"],
            )
        })
        .collect();
    let done = wait_all(children, Duration::from_secs(30));
    let bad = &done[3];
    assert!(!bad.status.success());
    assert!(
        bad.stderr.contains("rejected this rank: wrong magic"),
        "{}",
        bad.stderr
    );
    // The others cannot complete without rank 3: they fail clearly, within the timeout.
    for (r, d) in done.iter().enumerate().filter(|(r, _)| *r != 3) {
        assert!(!d.status.success(), "rank {r} succeeded without rank 3");
        assert!(d.stderr.contains("rank 3"), "rank {r}: {}", d.stderr);
        assert!(
            d.at - start_all < Duration::from_secs(10),
            "rank {r} took too long"
        );
    }
    assert!(done[0].stderr.contains("wrong magic"), "{}", done[0].stderr);
}

#[test]
fn a_stray_process_with_the_wrong_magic_does_not_disturb_the_job() {
    let id = fresh_id();
    let wrong = UniqueId::new(id.addr(), id.magic().wrapping_add(1));
    // Ranks 0..7 start; the root waits for rank 7, meanwhile a stray claiming rank 3 with
    // another job's magic knocks and is turned away.
    let mut children: Vec<Child> = (0..7)
        .map(|r| start(r, 8, &id, "20", &[], &["--iters", "50"]))
        .collect();
    let stray = wait_all(
        vec![start(3, 8, &wrong, "10", &[], &["--iters", "5"])],
        Duration::from_secs(30),
    );
    assert!(!stray[0].status.success());
    assert!(
        stray[0].stderr.contains("rejected this rank: wrong magic"),
        "{}",
        stray[0].stderr
    );
    children.push(start(7, 8, &id, "20", &[], &["--iters", "50"]));
    let done = wait_all(children, Duration::from_secs(60));
    for (r, d) in done.iter().enumerate() {
        assert!(d.status.success(), "rank {r}: {}", d.stderr);
    }
    assert!(
        done[0].stderr.contains("rejected connection"),
        "{}",
        done[0].stderr
    );
}

#[test]
fn killing_a_rank_mid_barrier_fails_every_survivor_naming_it() {
    let id = fresh_id();
    let timeout = Duration::from_secs(5);
    let mut children: Vec<Child> = (0..8)
        .map(|r| start(r, 8, &id, "5", &[], &["--mode", "barrier-loop"]))
        .collect();
    // Wait until every rank is looping through barriers.
    let (tx, rx) = mpsc::channel();
    let mut readers = Vec::new();
    for c in &mut children {
        let out = c.stdout.take().unwrap();
        let tx = tx.clone();
        readers.push(thread::spawn(move || {
            let mut lines = BufReader::new(out).lines();
            for line in lines.by_ref() {
                if line.map(|l| l.contains("ready")).unwrap_or(false) {
                    let _ = tx.send(());
                    break;
                }
            }
            for _ in lines {}
        }));
    }
    for _ in 0..8 {
        rx.recv_timeout(Duration::from_secs(30))
            .expect("ranks never got going");
    }
    let mut victim = children.remove(5);
    victim.kill().unwrap();
    let killed_at = Instant::now();
    victim.wait().unwrap();
    let done = wait_all(children, Duration::from_secs(30));
    for (i, d) in done.iter().enumerate() {
        let r = if i < 5 { i } else { i + 1 };
        assert!(!d.status.success(), "rank {r} survived");
        assert!(
            d.stderr.contains("rank 5 disconnected"),
            "rank {r} does not name rank 5: {}",
            d.stderr
        );
        assert!(d.stderr.contains("barrier #"), "rank {r}: {}", d.stderr);
        let took = d.at.saturating_duration_since(killed_at);
        assert!(took < timeout, "rank {r} took {took:?}");
    }
}
