//! `nodes_check --nodes M [--threads N]`: the checks of `symcomm_tests::nodes` on a job of `M`
//! nodes. Under a launcher (`symcomm-run --nnodes M --node-rank K …`, torchrun `--nnodes`) every
//! process is a rank and the launcher's node numbers are the nodes; with `--threads N` the
//! ranks are threads of this process, and rank `r` declares node `r / (N / M)`.

use std::process::ExitCode;
use std::time::Duration;

use symcomm::ranks::{all_passed, run_ranks};
use symcomm::{CommOptions, Communicator};
use symcomm_tests::nodes::check_job;

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut nodes, mut threads) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("--nodes", Some(m)) if m > 0 => nodes = Some(m),
            ("--threads", Some(n)) if n > 0 => threads = Some(n),
            _ => {
                eprintln!("usage: nodes_check --nodes M [--threads N]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(nodes) = nodes else {
        eprintln!("usage: nodes_check --nodes M [--threads N]");
        return ExitCode::from(2);
    };
    let results = match threads {
        None => run_ranks(None, |comm| check_job(&comm, nodes)),
        Some(n) => {
            let per = (n / nodes).max(1);
            let comms = Communicator::init_threads_with(n, Duration::from_secs(60), |r| {
                CommOptions::new()
                    .device(r)
                    .node_id(format!("node{}", r / per))
            });
            match comms {
                Err(e) => vec![(0, Err(e))],
                Ok(comms) => std::thread::scope(|s| {
                    let handles: Vec<_> = comms
                        .into_iter()
                        .map(|c| s.spawn(move || (c.rank(), check_job(&c, nodes))))
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                }),
            }
        }
    };
    let ok = all_passed(
        results,
        |_, line| {
            println!("{line}");
            true
        },
        |r, e| eprintln!("nodes_check: rank {r}: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
