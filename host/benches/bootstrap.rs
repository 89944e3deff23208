//! Bootstrap latency on this machine: 8 ranks on loopback (one process each, started by
//! `symcomm-run`) and 8 in-process ranks, for all-gather, broadcast and barrier.
//!
//! `cargo bench -p symcomm --bench bootstrap` prints a table. Not a timed test: nothing is
//! asserted about the numbers. Each figure is the slowest rank's average over back-to-back calls;
//! back-to-back broadcasts overlap (the root does not wait), so that row is a per-call cost, not
//! a round trip. Without `--bench` (as under `cargo test`) it only says so.

use std::process::Command;

const RUN: &str = env!("CARGO_BIN_EXE_symcomm-run");
const SELFTEST: &str = env!("CARGO_BIN_EXE_symcomm-selftest");
const RANKS: &str = "8";
const ITERS: &str = "2000";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("bootstrap bench: run with `cargo bench -p symcomm --bench bootstrap`");
        return;
    }
    println!(
        "{:<12} {:<11} {:>6} {:>7} {:>10}",
        "mode", "op", "ranks", "bytes", "avg us"
    );
    for bytes in ["8", "4096"] {
        let common = ["--mode", "bench", "--iters", ITERS, "--bytes", bytes];
        let mut processes = Command::new(RUN);
        processes
            .args(["-n", RANKS, "--timeout", "60", "--", SELFTEST])
            .args(common);
        let mut threads = Command::new(SELFTEST);
        threads.args(["--threads", RANKS]).args(common);
        for (mode, cmd) in [("processes", &mut processes), ("in-process", &mut threads)] {
            let out = match cmd.env_remove("SYMCOMM_LOG").output() {
                Ok(o) if o.status.success() => o,
                Ok(o) => {
                    eprintln!("{mode}: failed: {}", String::from_utf8_lossy(&o.stderr));
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("{mode}: cannot start: {e}");
                    std::process::exit(1);
                }
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let Some(rest) = line.split("bench ").nth(1) else {
                    continue;
                };
                let field = |k: &str| {
                    rest.split_whitespace()
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                        .unwrap_or("?")
                        .to_string()
                };
                println!(
                    "{:<12} {:<11} {:>6} {:>7} {:>10}",
                    mode,
                    field("op"),
                    field("ranks"),
                    field("bytes"),
                    field("avg_us")
                );
            }
        }
    }
}
