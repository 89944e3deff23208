//! GIN across emulated nodes on one machine (`gin_check`, see `symcomm_tests::gin`): puts,
//! inline values, signals (inc / add / set × strong / weak), counters and flush with every byte
//! checked, signal ping-pongs with an exact check each round (100 000 round trips per pair in
//! the 2 × 2 process job), the ordering probe with data delayed behind signals, a peer killed
//! while the others wait, bad operations, and a window deregistered right after a put from it
//! was posted. Jobs of 2 nodes × 2 ranks and 4 nodes × 1, as
//! threads that declare their nodes and as processes of `symcomm-run --nnodes` invocations
//! (`fault_run` is symcomm-run built in this package).

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

fn gin_check() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gin_check"));
    c.env("SYMCOMM_BACKEND", "emu")
        .env("SYMCOMM_TIMEOUT", "60")
        .env("RUST_BACKTRACE", "0")
        .env_remove("SYMCOMM_LOG")
        .env_remove("SYMCOMM_NODE_ID")
        .env_remove("SYMCOMM_GIN_TEST_DELAY_US")
        .env_remove("SYMCOMM_GIN_TEST_VALUE_WRITES")
        .env_remove("SYMCOMM_GIN_TRANSPORT")
        .stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    format!(
        "{:?}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// Runs `gin_check ARGS` as `nodes` invocations of `symcomm-run --nnodes nodes -n per`; returns
/// whether all succeeded and their output.
fn run_nodes(nodes: usize, per: usize, args: &[&str]) -> (bool, String) {
    let master = format!("127.0.0.1:{}", free_port());
    let children: Vec<_> = (0..nodes)
        .map(|k| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_fault_run"));
            c.args(["-n", &per.to_string(), "--nnodes", &nodes.to_string()])
                .args(["--node-rank", &k.to_string(), "--master", &master, "--"])
                .arg(env!("CARGO_BIN_EXE_gin_check"))
                .args(["--nodes", &nodes.to_string()])
                .args(args)
                .env("SYMCOMM_BACKEND", "emu")
                .env("SYMCOMM_TIMEOUT", "60")
                .env("RUST_BACKTRACE", "0")
                .env_remove("SYMCOMM_LOG")
                .env_remove("SYMCOMM_NODE_ID")
                .env_remove("SYMCOMM_GIN_TEST_DELAY_US")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let mut ok = true;
    let mut all = String::new();
    for c in children {
        let o = c.wait_with_output().unwrap();
        ok &= o.status.success();
        all += &text(&o);
    }
    (ok, all)
}

/// A window deregistered as soon as the kernel that posted a 16 MiB put from it has ended: the
/// deregistration waits until the proxy has sent the put (before, the proxy found the window
/// gone and failed the rank's GIN), and every byte arrives.
#[test]
fn a_window_deregistered_right_after_its_put_was_posted_sends_it_whole() {
    for threads in ["2", "4"] {
        let out = gin_check()
            .args(["--threads", threads, "--nodes", "2", "--dereg"])
            .output()
            .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{threads} ranks: {all}");
        let n: usize = threads.parse().unwrap();
        assert_eq!(
            all.matches("the deregistration waited").count(),
            n / 2,
            "{all}"
        );
        assert_eq!(all.matches("arrived").count(), n / 2, "{all}");
    }
}

#[test]
fn threads_that_declare_their_nodes_run_gin_2x2_and_4x1() {
    for nodes in ["2", "4"] {
        let t0 = Instant::now();
        let out = gin_check()
            .args(["--threads", "4", "--nodes", nodes, "--rounds", "2000"])
            .output()
            .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{nodes} nodes: {all}");
        assert_eq!(all.matches("every byte checked").count(), 4, "{all}");
        assert_eq!(all.matches("2000 signal round trips").count(), 4, "{all}");
        println!(
            "threads, {nodes} nodes: {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn gin_and_hybrid_barriers_hold_for_10000_rounds_on_2x2_and_4x1() {
    for nodes in ["2", "4"] {
        let t0 = Instant::now();
        let out = gin_check()
            .args(["--threads", "4", "--nodes", nodes, "--barriers", "10000"])
            .output()
            .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{nodes} nodes: {all}");
        for kind in ["world GIN", "rail GIN", "hybrid"] {
            let done = format!("{kind} barrier: 10000 rounds, data checked");
            assert_eq!(
                all.matches(&done).count(),
                4,
                "{nodes} nodes, {kind}: {all}"
            );
        }
        for line in all.lines().filter(|l| l.starts_with("gin: rank 0:")) {
            println!("{nodes} nodes: {line}");
        }
        println!("{nodes} nodes: {:.1} s", t0.elapsed().as_secs_f64());
    }
}

#[test]
fn rail_connectivity_connects_the_rail_team() {
    let out = gin_check()
        .args([
            "--threads",
            "4",
            "--nodes",
            "2",
            "--rounds",
            "2000",
            "--rail",
        ])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert_eq!(all.matches("rail connectivity").count(), 4, "{all}");
    assert_eq!(all.matches("every byte checked").count(), 4, "{all}");
    let out = gin_check()
        .args(["--threads", "4", "--nodes", "2", "--bad", "--rail"])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert_eq!(
        all.matches("off the rail, stopped the kernel").count(),
        4,
        "{all}"
    );
}

#[test]
fn symcomm_run_invocations_run_gin_2x2_and_4x1() {
    for (nodes, per, rounds) in [(2, 2, "100000"), (4, 1, "100000")] {
        let t0 = Instant::now();
        let (ok, all) = run_nodes(nodes, per, &["--rounds", rounds]);
        assert!(ok, "{nodes} × {per}: {all}");
        assert_eq!(all.matches("every byte checked").count(), 4, "{all}");
        let trips = format!("{rounds} signal round trips");
        assert_eq!(all.matches(&trips).count(), 4, "{all}");
        println!(
            "{nodes} symcomm-run --nnodes invocations × {per}, {rounds} round trips per pair: \
             {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
}

/// The ordering probe with every lane-1 put held 20 ms by its receiver: strong signals wait for
/// the data, weak ones overtake it.
#[test]
fn strong_signals_wait_for_delayed_data_and_weak_ones_overtake_it() {
    let probe = |kind: &str| {
        let out = gin_check()
            .env("SYMCOMM_GIN_TEST_DELAY_US", "20000")
            .args([
                "--threads",
                "2",
                "--nodes",
                "2",
                "--order",
                kind,
                "--rounds",
                "30",
            ])
            .output()
            .unwrap();
        let all = text(&out);
        // The receiver (rank 1) reports how many rounds saw the signal first.
        let early = all
            .lines()
            .find_map(|l| l.strip_prefix(&format!("gin: rank 1: order {kind}: ")))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse::<u32>().ok());
        (out.status.success(), early, all)
    };
    let (ok, early, all) = probe("strong");
    assert!(ok && early == Some(0), "strong: {all}");
    println!(
        "strong: {} of 30 rounds saw the signal before the data",
        early.unwrap()
    );
    let (ok, early, all) = probe("weak");
    assert!(ok && early.is_some_and(|n| n >= 1), "weak: {all}");
    println!(
        "weak: {} of 30 rounds saw the signal before the data",
        early.unwrap()
    );
}

#[test]
fn a_peer_killed_while_others_wait_on_a_signal_aborts_every_survivor() {
    let t0 = Instant::now();
    let (ok, all) = run_nodes(2, 2, &["--kill", "3"]);
    assert!(!ok, "the job must fail (rank 3 died): {all}");
    for r in 0..3 {
        let line = all
            .lines()
            .find(|l| l.contains(&format!("gin: rank {r}: rank 3 died")))
            .unwrap_or_else(|| panic!("rank {r} did not report: {all}"));
        println!("{line}");
    }
    println!("{:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn bad_operations_stop_the_kernel_or_fail_the_communicator_with_a_clear_error() {
    let out = gin_check()
        .args(["--threads", "2", "--nodes", "2", "--bad"])
        .output()
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert_eq!(
        all.matches("bad op 3 stopped the kernel").count(),
        2,
        "{all}"
    );
    // Rank 0's GIN failure reached rank 1 through the bootstrap.
    assert_eq!(
        all.matches("rank 0's GIN failure released a signal wait here")
            .count(),
        1,
        "{all}"
    );
    assert!(
        all.contains(
            "a put past the window failed: rank 0: GIN failed: invalid argument: GIN: a \
                      kernel of rank 0 posted a put of 200 bytes from window 1 at offset \
                      1048476, beyond its 1048576 bytes (context 0, to rank 1)"
        ),
        "{all}"
    );
}
