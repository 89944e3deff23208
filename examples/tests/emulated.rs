//! Every example on the CPU emulator (`SYMCOMM_BACKEND=emu`, so this runs the same on machines
//! with and without GPUs): single-rank examples once, multi-rank examples with 2, 4 and 8
//! ranks both as threads of one process (`--threads N`) and as processes (one per rank, with
//! the environment `symcomm-run` gives them; through `symcomm-run` itself when it is built).
//! Each example checks every element against its reference and exits non-zero otherwise.
//!
//! Adding an example (or a gallery kernel's driver binary) is one line in [`SINGLE`] or
//! [`MULTI`]. The GIN example (`ring_exchange`) has tests of its own: its ranks declare
//! nodes, so that every block crosses GIN.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use symcomm::bootstrap::UniqueId;
use symcomm::launcher::rank_env;

/// Single-rank examples: (binary, arguments, what a successful run prints).
const SINGLE: &[(&str, &[&str], &str)] = &[(
    env!("CARGO_BIN_EXE_vector_add"),
    &["--n", "100000"],
    "n=100000 ok (every element checked)",
)];

/// Multi-rank examples: (binary, arguments, what every successful rank prints).
const MULTI: &[(&str, &[&str], &str)] = &[(
    env!("CARGO_BIN_EXE_hello_window"),
    &["--n", "1000"],
    "sees the patterns of all",
)];

const RANKS: [usize; 3] = [2, 4, 8];

fn emulated(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("SYMCOMM_BACKEND", "emu")
        .env("SYMCOMM_TIMEOUT", "30")
        .env_remove("SYMCOMM_LOG")
        .stdin(Stdio::null());
    cmd
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn name(bin: &str) -> &str {
    Path::new(bin)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(bin)
}

/// Checks a finished run: exit 0, the emulator line printed, `ok_line` printed `times` times.
fn expect_ok(what: &str, out: &Output, ok_line: &str, times: usize) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "{what}: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("running on the CPU emulator"),
        "{what}: no emulator line\n{stdout}"
    );
    assert_eq!(
        stdout.matches(ok_line).count(),
        times,
        "{what}\n{stdout}\n{stderr}"
    );
}

#[test]
fn single_rank_examples_match_their_reference_on_the_emulator() {
    for &(bin, args, ok_line) in SINGLE {
        let out = emulated(bin).args(args).output().unwrap();
        expect_ok(name(bin), &out, ok_line, 1);
    }
}

#[test]
fn multi_rank_examples_run_as_threads_with_2_4_and_8_ranks() {
    for &(bin, args, ok_line) in MULTI {
        for n in RANKS {
            let t0 = Instant::now();
            let out = emulated(bin)
                .args(["--threads", &n.to_string()])
                .args(args)
                .output()
                .unwrap();
            expect_ok(&format!("{} --threads {n}", name(bin)), &out, ok_line, n);
            println!(
                "{} --threads {n}: {:.2} s",
                name(bin),
                t0.elapsed().as_secs_f64()
            );
        }
    }
}

/// A free localhost port for a job's root.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// Runs `n` processes of `bin` as ranks of one job (the environment `symcomm-run` sets).
fn as_processes(bin: &str, args: &[&str], n: usize) -> Output {
    as_processes_with(bin, args, n, |_| Vec::new())
}

/// [`as_processes`], with `extra(rank)` added to each rank's environment.
fn as_processes_with(
    bin: &str,
    args: &[&str],
    n: usize,
    extra: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Output {
    let id = UniqueId::random(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
    let children: Vec<_> = (0..n)
        .map(|rank| {
            emulated(bin)
                .args(args)
                .envs(rank_env(rank, n, &id, None))
                .envs(extra(rank))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut all = Output {
        status: std::process::ExitStatus::default(),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    for child in children {
        let out = child.wait_with_output().unwrap();
        if !out.status.success() || all.stdout.is_empty() {
            all.status = out.status;
        }
        all.stdout.extend(out.stdout);
        all.stderr.extend(out.stderr);
    }
    all
}

#[test]
fn multi_rank_examples_run_as_processes_with_2_4_and_8_ranks() {
    for &(bin, args, ok_line) in MULTI {
        for n in RANKS {
            let t0 = Instant::now();
            let out = as_processes(bin, args, n);
            expect_ok(&format!("{} as {n} processes", name(bin)), &out, ok_line, n);
            println!(
                "{} as {n} processes: {:.2} s",
                name(bin),
                t0.elapsed().as_secs_f64()
            );
        }
    }
}

/// `symcomm-run`, when the workspace build put it next to the examples.
fn symcomm_run() -> Option<PathBuf> {
    let path = Path::new(MULTI[0].0).with_file_name("symcomm-run");
    path.is_file().then_some(path)
}

#[test]
fn multi_rank_examples_run_under_symcomm_run() {
    let Some(run) = symcomm_run() else {
        println!("symcomm-run not built (cargo test --workspace builds it): skipped");
        return;
    };
    for &(bin, args, ok_line) in MULTI {
        let n = 4;
        let out = emulated(&run)
            .args(["-n", &n.to_string(), bin])
            .args(args)
            .output()
            .unwrap();
        expect_ok(
            &format!("symcomm-run -n {n} {}", name(bin)),
            &out,
            ok_line,
            n,
        );
    }
}

/// What `ring_exchange` prints for each rank that checked every block.
const RING_OK: &str = "every block of every rank arrived";

/// Checks a `ring_exchange` run of `n` ranks: exit 0, the emulator line, and exactly one
/// success line per rank, naming it.
fn expect_ring(what: &str, out: &Output, n: usize) {
    expect_ok(what, out, RING_OK, n);
    let (stdout, _) = text(out);
    for r in 0..n {
        let line = format!("ring_exchange: rank {r} of {n}: {RING_OK}");
        assert_eq!(
            stdout.matches(&line).count(),
            1,
            "{what}: no line {line:?}\n{stdout}"
        );
    }
}

/// The GIN ring all-gather with 2 and 4 ranks as threads, each its own node (`node{r}`), so
/// that no two ranks share memory and every block crosses GIN; a small block (the transport's
/// lane for puts of at most 4096 bytes) and a large one, 3 launches each.
#[test]
fn ring_exchange_over_gin_with_2_and_4_thread_ranks() {
    let bin = env!("CARGO_BIN_EXE_ring_exchange");
    for n in [2, 4] {
        for elems in ["1000", "20000"] {
            let t0 = Instant::now();
            let out = emulated(bin)
                .args(["--threads", &n.to_string(), "--n", elems])
                .output()
                .unwrap();
            expect_ring(&format!("ring_exchange --threads {n} --n {elems}"), &out, n);
            println!(
                "ring_exchange --threads {n} --n {elems}: {:.2} s",
                t0.elapsed().as_secs_f64()
            );
        }
    }
}

/// The same as 3 processes of one job, each declaring its node (`SYMCOMM_NODE_ID`).
#[test]
fn ring_exchange_over_gin_as_processes_on_3_nodes() {
    let bin = env!("CARGO_BIN_EXE_ring_exchange");
    let n = 3;
    let t0 = Instant::now();
    let out = as_processes_with(bin, &["--n", "5000"], n, |r| {
        vec![("SYMCOMM_NODE_ID", format!("node{r}"))]
    });
    expect_ring(&format!("ring_exchange as {n} processes"), &out, n);
    println!(
        "ring_exchange as {n} processes: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
}
