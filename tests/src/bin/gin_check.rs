//! `gin_check --nodes M [--threads N] [--rounds R] [--order strong|weak] [--kill K] [--bad]
//! [--idle S] [--rail] [--dereg]`:
//! the GIN checks of `symcomm_tests::gin` on a job of `M` nodes. Under a launcher
//! (`symcomm-run --nnodes M …`) every process is a rank; with `--threads N` the ranks are
//! threads of this process and rank `r` declares node `r / (N / M)`.
//!
//! - default: puts, values, signals and counters (every byte checked), then `R` (default
//!   1000) signal round trips per pair with an exact check each, then the strong ordering
//!   probe (no early signal allowed);
//! - `--order strong|weak`: only the ordering probe, `R` rounds; prints how many rounds saw
//!   the signal before the data (strong: must be 0);
//! - `--kill K`: rank K dies (SIGKILL) while the others wait on a signal; each survivor must
//!   see its wait aborted within 3 s and a failure naming rank K;
//! - `--bad`: rank 0 puts past the end of its window (its proxy refuses it), then every rank
//!   posts a bad signal index, a bad peer and a bad counter index (each stops the kernel with a
//!   message; emulator only);
//! - `--barriers R`: `R` rounds each of the world GIN barrier, the rail GIN barrier and the
//!   hybrid barrier, data published before and checked after every round;
//! - `--footprint`: prints the table of one rank's GIN resources (default requirements) for 2
//!   to 1024 ranks, full and rail connectivity (computed; nothing is created);
//! - `--rail`: GIN connects only the rail team (the partner is on it when the nodes hold the
//!   same number of ranks);
//! - `--dereg`: the lower rank of each pair puts 16 MiB from a window and deregisters it as
//!   soon as the kernel that posted the put has ended; every byte must arrive
//!   (`gin::put_then_deregister`);
//! - `--idle S`: after a short ping-pong, leaves GIN idle for `S` seconds and reports the CPU
//!   time its proxy and receive threads used meanwhile (from `/proc/self/task`).

use std::process::ExitCode;
use std::time::Duration;

use symcomm::ranks::{all_passed, run_ranks};
use symcomm::{CommOptions, Communicator, Result};
use symcomm_tests::gin;

#[derive(Clone, Copy)]
struct Args {
    nodes: usize,
    threads: Option<usize>,
    rounds: u32,
    order: Option<bool>,
    kill: Option<usize>,
    bad: bool,
    idle: Option<u64>,
    rail: bool,
    barriers: Option<u32>,
    dereg: bool,
}

const USAGE: &str = "usage: gin_check --nodes M [--threads N] [--rounds R] \
                     [--order strong|weak] [--kill K] [--bad] [--idle S] [--rail] [--barriers R] \
                     [--dereg]";

/// CPU time (user + system, in clock ticks) of this process's threads named `name`.
fn thread_ticks(name: &str) -> Option<u64> {
    let mut total = None;
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        // The fields after the command (which ends with ')'): utime and stime are the 12th
        // and 13th of them.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        *total.get_or_insert(0) += ticks;
    }
    total
}

fn parse() -> Option<Args> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut a = Args {
        nodes: 0,
        threads: None,
        rounds: 1000,
        order: None,
        kill: None,
        bad: false,
        idle: None,
        rail: false,
        barriers: None,
        dereg: false,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        match k.as_str() {
            "--bad" => a.bad = true,
            "--rail" => a.rail = true,
            "--dereg" => a.dereg = true,
            "--order" => {
                a.order = match it.next()?.as_str() {
                    "strong" => Some(true),
                    "weak" => Some(false),
                    _ => return None,
                }
            }
            _ => {
                let v = it.next()?.parse::<usize>().ok()?;
                match k.as_str() {
                    "--nodes" if v > 0 => a.nodes = v,
                    "--threads" if v > 0 => a.threads = Some(v),
                    "--rounds" => a.rounds = u32::try_from(v).ok()?,
                    "--kill" => a.kill = Some(v),
                    "--idle" => a.idle = Some(v as u64),
                    "--barriers" => a.barriers = Some(u32::try_from(v).ok()?),
                    _ => return None,
                }
            }
        }
    }
    (a.nodes > 0).then_some(a)
}

fn run(comm: &Communicator, a: Args) -> Result<String> {
    let r = comm.rank();
    if comm.node_count() != a.nodes {
        return Err(symcomm::Error::InvalidArgument(format!(
            "{} nodes, want {}",
            comm.node_count(),
            a.nodes
        )));
    }
    let s = gin::setup(comm, a.rail)?;
    if let Some(k) = a.kill {
        comm.bootstrap().barrier()?;
        if r == k {
            // An abrupt death: no destructor runs, no goodbye is sent (processes only).
            std::process::abort();
        }
        let (took, why) = gin::wait_for_death(&s)?;
        if took > Duration::from_secs(3) || !why.contains(&format!("rank {k}")) {
            return Err(symcomm::Error::InvalidArgument(format!(
                "after rank {k} died: aborted after {took:?}: {why}"
            )));
        }
        return Ok(format!(
            "gin: rank {r}: rank {k} died; the signal wait was aborted after {} ms: {why}",
            took.as_millis()
        ));
    }
    if a.bad {
        let mut line = format!("gin: rank {r}:");
        for (what, index, msg) in [
            (1, 8, "GIN signal 8 of a device communicator with 8 signals"),
            (2, comm.size() as u32, "is not a member of the team"),
            (
                3,
                2,
                "GIN counter 2 of a device communicator with 2 counters",
            ),
        ] {
            gin::device_check(&s, what, index, msg)?;
            line += &format!(" bad op {what} stopped the kernel ({msg});");
        }
        if a.rail && comm.lsa_size() > 1 {
            // A rank of this node: not on this rank's rail.
            let off_rail = (r - comm.lsa_rank() + (comm.lsa_rank() + 1) % comm.lsa_size()) as u32;
            let msg = "is not connected to this rank";
            gin::device_check(&s, 2, off_rail, msg)?;
            line +=
                &format!(" a signal to rank {off_rail}, off the rail, stopped the kernel ({msg});");
        }
        comm.bootstrap().barrier()?;
        if r == 0 {
            let why = gin::put_beyond_window(comm, &s)?;
            line += &format!(" a put past the window failed: {why}");
        } else {
            // Rank 0's GIN failure reaches every rank, connected to it or not: a wait for a
            // signal that rank 0 will never send is released.
            let (took, why) = gin::wait_for_death(&s)?;
            if took > Duration::from_secs(3) || !why.contains("rank 0 failed its GIN") {
                return Err(symcomm::Error::InvalidArgument(format!(
                    "after rank 0's GIN failed: released after {took:?}: {why}"
                )));
            }
            line += &format!(
                " rank 0's GIN failure released a signal wait here after {} ms: {why}",
                took.as_millis()
            );
        }
        return Ok(line);
    }
    if let Some(rounds) = a.barriers {
        let mut line = format!("gin: rank {r}:");
        for (kind, name) in [(0, "world GIN"), (1, "rail GIN"), (2, "hybrid")] {
            let us = gin::barriers(comm, &s, kind, rounds)?;
            line += &format!(" {name} barrier: {rounds} rounds, data checked ({us:.1} µs/round);");
        }
        return Ok(line);
    }
    if let Some(secs) = a.idle {
        gin::pingpong(comm, &s, 100)?;
        let names = [format!("symcomm-gin{r}"), format!("symcomm-gin-rx{r}")];
        let before: Vec<Option<u64>> = names.iter().map(|n| thread_ticks(n)).collect();
        std::thread::sleep(Duration::from_secs(secs));
        let after: Vec<Option<u64>> = names.iter().map(|n| thread_ticks(n)).collect();
        comm.bootstrap().barrier()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let used = |k: usize| match (before[k], after[k]) {
            (Some(b), Some(a)) => format!("{:.1} ms", (a - b) as f64 * 1000.0 / hz),
            _ => "unknown".into(),
        };
        return Ok(format!(
            "gin: rank {r}: {secs} s idle: proxy thread used {} of CPU, receive thread {}",
            used(0),
            used(1)
        ));
    }
    if a.dereg {
        let line = gin::put_then_deregister(comm, &s, 16 << 20)?;
        return Ok(format!("gin: rank {r}: {line}"));
    }
    if let Some(strong) = a.order {
        let early = gin::ordering(comm, &s, strong, a.rounds)?;
        if strong && early != 0 {
            return Err(symcomm::Error::InvalidArgument(format!(
                "strong signals seen before their data in {early} of {} rounds",
                a.rounds
            )));
        }
        let kind = if strong { "strong" } else { "weak" };
        return Ok(format!(
            "gin: rank {r}: order {kind}: {early} of {} rounds saw the signal before the data",
            a.rounds
        ));
    }
    let f = gin::functional(comm, &s)?;
    let p = gin::pingpong(comm, &s, a.rounds)?;
    let early = gin::ordering(comm, &s, true, 50)?;
    if early != 0 {
        return Err(symcomm::Error::InvalidArgument(format!(
            "strong signals seen before their data in {early} of 50 rounds"
        )));
    }
    let st = s
        .devcomm
        .gin_stats()
        .ok_or_else(|| symcomm::Error::Internal("no GIN".into()))?;
    if st.bytes_sent == 0 || st.bytes_received == 0 {
        return Err(symcomm::Error::InvalidArgument(format!(
            "the transport carried nothing: {st:?}"
        )));
    }
    // Small puts (0, 8 and 60 bytes) arrived: on a GPU they land by stream memory
    // operations, unless the test limit keeps every batch off that path (a put of no bytes
    // with its signal takes 2 writes); never under emulation. (A driver that refuses stream
    // memory operations would land them all by copy: this check would say so.)
    let most_writes = std::env::var(symcomm::gin::TEST_VALUE_WRITES_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let want_some = !s.dev.is_emulated() && most_writes.is_none_or(|n| n >= 2);
    if (st.value_landings > 0) != want_some {
        return Err(symcomm::Error::InvalidArgument(format!(
            "{} small puts landed by stream memory operations, want {} (emulated: {}, \
             batch limit {most_writes:?})",
            st.value_landings,
            if want_some { "some" } else { "none" },
            s.dev.is_emulated()
        )));
    }
    Ok(format!(
        "gin: rank {r} of {} ({} nodes, {} connectivity): {f}; {p}; strong order held in 50 \
         rounds; transport sent {} B in {} frames, received {} B in {} frames ({} small \
         landings by stream memory operations)",
        comm.size(),
        a.nodes,
        if a.rail { "rail" } else { "full" },
        st.bytes_sent,
        st.frames_sent,
        st.bytes_received,
        st.frames_received,
        st.value_landings
    ))
}

/// The table of `--footprint`: one rank's GIN resources with the default requirements (one
/// context) for 2 to 1024 ranks of 8 per node (fewer ranks: one node... of them all), full and
/// rail connectivity.
fn footprint_table() -> symcomm::Result<()> {
    use symcomm::Requirements;
    use symcomm::gin::GinConnection;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "| ranks | per node | full: pinned MiB | staging MiB | device KiB | total MiB | fds | rail: pinned MiB | total MiB | fds |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for k in 1..=10 {
        let n = 1usize << k;
        let per = n.min(8);
        let full = Requirements::new().gin_contexts(1).gin_footprint(n, per)?;
        let rail = Requirements::new()
            .gin_contexts(1)
            .gin_connection(GinConnection::Rail)
            .gin_footprint(n, per)?;
        println!(
            "| {n} | {per} | {:.3} | {:.0} | {:.2} | {:.2} | {} | {:.3} | {:.2} | {} |",
            mib(full.pinned_bytes),
            mib(full.staging_bytes),
            full.device_bytes as f64 / 1024.0,
            mib(full.total_bytes()),
            full.fds,
            mib(rail.pinned_bytes),
            mib(rail.total_bytes()),
            rail.fds
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG
    if std::env::args().any(|a| a == "--footprint") {
        return match footprint_table() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gin_check: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let Some(a) = parse() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let results = match a.threads {
        None => run_ranks(None, |comm| run(&comm, a)),
        Some(n) => {
            let per = (n / a.nodes).max(1);
            // SYMCOMM_DEVICE puts every thread rank on one GPU; else rank r uses device r.
            let one = std::env::var("SYMCOMM_DEVICE")
                .ok()
                .and_then(|d| d.parse::<usize>().ok());
            let comms = Communicator::init_threads_with(n, Duration::from_secs(60), |r| {
                CommOptions::new()
                    .device(one.unwrap_or(r))
                    .node_id(format!("node{}", r / per))
            });
            match comms {
                Err(e) => vec![(0, Err(e))],
                Ok(comms) => std::thread::scope(|s| {
                    let handles: Vec<_> = comms
                        .into_iter()
                        .map(|c| s.spawn(move || (c.rank(), run(&c, a))))
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
        |r, e| eprintln!("gin_check: rank {r}: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
