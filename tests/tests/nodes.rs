//! Several nodes on one machine, on the CPU emulator: the checks of `symcomm_tests::nodes`
//! (teams, `split`, windows in every child, the gallery refusing a multi-node communicator)
//! with 2 nodes × 2 ranks and 4 nodes × 1 rank, as threads that declare their nodes and as
//! processes of two and four `symcomm-run --nnodes` invocations (`fault_run` is symcomm-run
//! built in this package).

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

fn nodes_check() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nodes_check"));
    c.env("SYMCOMM_BACKEND", "emu")
        .env("SYMCOMM_TIMEOUT", "60")
        .env_remove("SYMCOMM_LOG")
        .env_remove("SYMCOMM_NODE_ID")
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

#[test]
fn threads_that_declare_their_nodes_form_2x2_and_4x1_jobs() {
    for nodes in [2, 4] {
        let t0 = Instant::now();
        let out = nodes_check()
            .args(["--threads", "4", "--nodes", &nodes.to_string()])
            .output()
            .unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{nodes} nodes: {all}");
        assert_eq!(
            all.matches("windows used in every child").count(),
            4,
            "{all}"
        );
        println!(
            "threads, {nodes} nodes: {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn symcomm_run_invocations_with_nnodes_form_2x2_and_4x1_jobs() {
    for (nodes, per) in [(2, 2), (4, 1)] {
        let t0 = Instant::now();
        let master = format!("127.0.0.1:{}", free_port());
        let children: Vec<_> = (0..nodes)
            .map(|k| {
                let mut c = Command::new(env!("CARGO_BIN_EXE_fault_run"));
                c.args(["-n", &per.to_string(), "--nnodes", &nodes.to_string()])
                    .args(["--node-rank", &k.to_string(), "--master", &master, "--"])
                    .arg(env!("CARGO_BIN_EXE_nodes_check"))
                    .args(["--nodes", &nodes.to_string()])
                    .env("SYMCOMM_BACKEND", "emu")
                    .env("SYMCOMM_TIMEOUT", "60")
                    .env_remove("SYMCOMM_LOG")
                    .env_remove("SYMCOMM_NODE_ID")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                c.spawn().unwrap()
            })
            .collect();
        let outs: Vec<Output> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let all: String = outs.iter().map(text).collect();
        assert!(
            outs.iter().all(|o| o.status.success()),
            "{nodes} × {per}: {all}"
        );
        // Every rank of the job, by its rank in the job, on every node's launcher.
        for r in 0..nodes * per {
            let line = format!("[rank {r}] nodes: rank {r} of {}", nodes * per);
            assert!(all.contains(&line), "{line}: {all}");
        }
        println!(
            "{nodes} symcomm-run --nnodes invocations × {per}: {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
}
