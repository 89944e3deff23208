//! `symcomm-selftest`: checks (and times) the bootstrap of a launched job.
//!
//! Run it under a launcher, e.g. `symcomm-run -n 8 -- symcomm-selftest`, or with `--threads N`
//! to run N in-process ranks. Modes:
//! - `check` (default): `--iters` rounds of all-gather, broadcast and barrier plus a
//!   point-to-point ring, verifying every byte; prints `rank r: ok ...`;
//! - `bench`: times all-gather, broadcast and barrier; rank 0 prints `bench ...` lines with
//!   the slowest rank's average;
//! - `barrier-loop`: barriers until an error (prints `rank r: ready` after 20), for
//!   fault-injection tests.
//!
//! `--exit-at R:C` makes rank R exit with code C right after initialisation (without closing
//! its communicator), `--expect-lsa K` fails unless the LSA size is K. Errors are printed as
//! `error: ...` (the message names the rank) and exit with code 1.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use symcomm::{Communicator, Result};

const USAGE: &str = "usage: symcomm-selftest [--mode check|bench|barrier-loop] [--iters N] \
[--bytes B] [--threads N] [--exit-at RANK:CODE] [--expect-lsa K]";

struct Opts {
    mode: String,
    iters: usize,
    bytes: usize,
    threads: Option<usize>,
    exit_at: Option<(usize, i32)>,
    expect_lsa: Option<usize>,
}

fn parse() -> std::result::Result<Opts, String> {
    let mut o = Opts {
        mode: "check".into(),
        iters: 100,
        bytes: 8,
        threads: None,
        exit_at: None,
        expect_lsa: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        let num = |v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{v:?} is not a number"))
        };
        match a.as_str() {
            "--mode" => o.mode = val()?,
            "--iters" => o.iters = num(val()?)?,
            "--bytes" => o.bytes = num(val()?)?,
            "--threads" => o.threads = Some(num(val()?)?),
            "--expect-lsa" => o.expect_lsa = Some(num(val()?)?),
            "--exit-at" => {
                let v = val()?;
                let (r, c) = v.split_once(':').ok_or("--exit-at wants RANK:CODE")?;
                let c = c
                    .parse::<i32>()
                    .map_err(|_| format!("{c:?} is not a code"))?;
                o.exit_at = Some((num(r.into())?, c));
            }
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    symcomm::init_logging();
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("symcomm-selftest: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match o.threads {
        None => match Communicator::from_env() {
            Ok(c) => run_rank(&c, &o),
            Err(e) => fail(&e),
        },
        Some(n) => match Communicator::init_threads(n) {
            Ok(comms) => std::thread::scope(|s| {
                let hs: Vec<_> = comms.iter().map(|c| s.spawn(|| run_rank(c, &o))).collect();
                let codes: Vec<ExitCode> = hs
                    .into_iter()
                    .map(|h| h.join().unwrap_or(ExitCode::FAILURE))
                    .collect();
                codes
                    .into_iter()
                    .find(|c| *c != ExitCode::SUCCESS)
                    .unwrap_or(ExitCode::SUCCESS)
            }),
            Err(e) => fail(&e),
        },
    }
}

fn fail(e: &symcomm::Error) -> ExitCode {
    // Errors name the rank that reports them.
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

fn run_rank(c: &Communicator, o: &Opts) -> ExitCode {
    let r = c.rank();
    if let Some((rank, code)) = o.exit_at
        && rank == r
    {
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
    if let Some(k) = o.expect_lsa
        && c.lsa_size() != k
    {
        eprintln!("rank {r}: error: lsa size {} (expected {k})", c.lsa_size());
        return ExitCode::from(3);
    }
    let result = match o.mode.as_str() {
        "check" => check(c, o),
        "bench" => bench(c, o),
        "barrier-loop" => barrier_loop(c),
        m => {
            eprintln!("rank {r}: error: unknown mode {m:?}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// The payload rank `r` contributes in round `i`: its length and bytes depend on both.
fn payload(r: usize, i: usize, base: usize) -> Vec<u8> {
    (0..base + r % 3)
        .map(|k| (r * 31 + i * 7 + k) as u8)
        .collect()
}

fn check(c: &Communicator, o: &Opts) -> Result<()> {
    let b = c.bootstrap();
    let (r, n) = (b.rank(), b.size());
    let start = Instant::now();
    for i in 0..o.iters {
        let all = b.all_gather(&payload(r, i, o.bytes))?;
        for (p, d) in all.iter().enumerate() {
            if *d != payload(p, i, o.bytes) {
                return Err(wrong(r, "all-gather", i, p));
            }
        }
        let root = i % n;
        if b.broadcast(root, &payload(r, i, o.bytes))? != payload(root, i, o.bytes) {
            return Err(wrong(r, "broadcast", i, root));
        }
        b.barrier()?;
    }
    for i in 0..10 {
        b.send((r + 1) % n, &payload(r, i, o.bytes))?;
        let from = (r + n - 1) % n;
        if b.recv(from)? != payload(from, i, o.bytes) {
            return Err(wrong(r, "recv", i, from));
        }
    }
    b.barrier()?;
    println!(
        "rank {r}: ok: {} iterations of all-gather/broadcast/barrier in {:.0} ms; lsa {} rail {}",
        o.iters,
        start.elapsed().as_secs_f64() * 1e3,
        c.lsa_size(),
        c.rail_team().n_ranks
    );
    Ok(())
}

fn wrong(r: usize, what: &str, i: usize, p: usize) -> symcomm::Error {
    symcomm::Error::Protocol {
        rank: Some(r),
        step: format!("{what} round {i}"),
        reason: format!("wrong data from rank {p}"),
    }
}

fn bench(c: &Communicator, o: &Opts) -> Result<()> {
    let b = c.bootstrap();
    let data = vec![c.rank() as u8; o.bytes];
    let time = |f: &dyn Fn() -> Result<()>| -> Result<Duration> {
        for _ in 0..o.iters / 10 + 1 {
            f()?;
        }
        b.barrier()?;
        let start = Instant::now();
        for _ in 0..o.iters {
            f()?;
        }
        Ok(start.elapsed() / o.iters.max(1) as u32)
    };
    let rows = [
        (
            "all-gather",
            o.bytes,
            time(&|| b.all_gather(&data).map(|_| ()))?,
        ),
        (
            "broadcast",
            o.bytes,
            time(&|| b.broadcast(0, &data).map(|_| ()))?,
        ),
        ("barrier", 0, time(&|| b.barrier())?),
    ];
    // Report the slowest rank's average (the root of a broadcast does not wait for anyone).
    for (op, bytes, t) in rows {
        let all = b.all_gather(&t.as_secs_f64().to_le_bytes())?;
        let slowest = all
            .iter()
            .filter_map(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(f64::from_le_bytes)
            .fold(0.0, f64::max);
        if c.rank() == 0 {
            println!(
                "bench op={op} ranks={} bytes={bytes} iters={} avg_us={:.1}",
                c.size(),
                o.iters,
                slowest * 1e6
            );
        }
    }
    b.barrier()
}

fn barrier_loop(c: &Communicator) -> Result<()> {
    let b = c.bootstrap();
    for i in 0u64.. {
        b.barrier()?;
        if i == 20 {
            println!("rank {}: ready", c.rank());
            let _ = std::io::stdout().flush();
        }
    }
    Ok(())
}
