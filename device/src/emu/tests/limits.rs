//! Grids beyond the process's thread and memory-map limits: the estimate with injected numbers
//! and the ledger that makes concurrent launches see each other.

use std::format;
use std::string::String;

use crate::emu::limits::{self, Demand, Ledger, Usage};

/// Usage of a quiet process on a host like CI: 65530 maps (the kernel default), 300 in use.
fn usage(pending: u64) -> Usage {
    Usage {
        max_map_count: Some(65530),
        maps: Some(300),
        thread_limit: Some((192_730, "kernel.threads-max")),
        threads: Some(5),
        pending,
        cpus: 2,
    }
}

/// One rank of the reported case: 1024-thread blocks, the default 4 resident (4096 threads).
const RANK: Demand = Demand {
    blocks: 64,
    block_threads: 1024,
    resident: 4,
};

fn refusal(d: &Demand, u: &Usage) -> String {
    match limits::check(d, u) {
        Ok(()) => panic!("{d:?} accepted with {u:?}"),
        Err(msg) => msg,
    }
}

fn assert_names(msg: &str, facts: &[&str]) {
    for fact in facts {
        assert!(msg.contains(fact), "{fact:?} missing from: {msg}");
    }
    assert!(!msg.contains('\n'), "{msg}");
}

#[test]
fn the_estimate_refuses_the_fourth_rank_of_1024_thread_blocks_naming_the_numbers() {
    // Alone, or with two other ranks reserved, a rank fits: 16392 maps needed.
    limits::check(&RANK, &usage(0)).unwrap();
    limits::check(&RANK, &usage(2 * 4096)).unwrap();
    // With three: 65530 − 300 in use − 3 × 4096 × 4 reserved − 1056 headroom = 15022 free.
    let msg = refusal(&RANK, &usage(3 * 4096));
    assert_names(
        &msg,
        &[
            "64 blocks × 1024 threads",
            "~16392 memory maps",
            "4 resident blocks (4096 threads",
            "only 15022 of vm.max_map_count = 65530",
            "300 in use",
            "~49152 reserved by 12288 threads",
            "1056 kept as headroom",
            "SYMCOMM_EMU_THREADS",
            "Launch::resident_blocks",
            "concurrent emulated launches",
        ],
    );
}

#[test]
fn the_estimate_accepts_an_exact_fit_and_refuses_one_map_more() {
    let headroom = limits::map_headroom(2);
    let need = limits::maps_needed(&RANK);
    assert_eq!((headroom, need), (1024 + 32, 4096 * 4 + 4 * 2));
    let with_used = |used| Usage {
        maps: Some(used),
        ..usage(0)
    };
    let fit = 65530 - headroom - need;
    limits::check(&RANK, &with_used(fit)).unwrap();
    let msg = refusal(&RANK, &with_used(fit + 1));
    assert_names(&msg, &[&format!("only {} of", need - 1)]);
}

#[test]
fn the_estimate_refuses_beyond_the_thread_limit_and_skips_unknown_limits() {
    let nproc = |threads, pending| Usage {
        max_map_count: None,
        thread_limit: Some((5000, "RLIMIT_NPROC")),
        threads: Some(threads),
        ..usage(pending)
    };
    // 5000 − 800 − 64 headroom = 4136 ≥ 4096 threads.
    limits::check(&RANK, &nproc(800, 0)).unwrap();
    let msg = refusal(&RANK, &nproc(1000, 0));
    assert_names(
        &msg,
        &[
            "needs 4096 threads",
            "only 3936 of RLIMIT_NPROC = 5000",
            "1000 threads in this process",
            "SYMCOMM_EMU_THREADS",
        ],
    );
    // Threads reserved by other launches count too.
    let msg = refusal(&RANK, &nproc(800, 100));
    assert_names(&msg, &["only 4036 of", "100 reserved"]);
    // Where nothing is known, nothing is refused.
    let unknown = Usage {
        max_map_count: None,
        maps: None,
        thread_limit: None,
        threads: None,
        pending: 0,
        cpus: 1,
    };
    let huge = Demand {
        blocks: u32::MAX,
        block_threads: 1024,
        resident: u32::MAX,
    };
    limits::check(&huge, &unknown).unwrap();
}

#[test]
fn concurrent_launches_see_each_other_through_the_ledger() {
    let ledger = Ledger::new();
    // `/proc` does not show reserved threads before they start: only the ledger does.
    let a = ledger.reserve(&RANK, usage).unwrap();
    let b = ledger.reserve(&RANK, usage).unwrap();
    let c = ledger.reserve(&RANK, usage).unwrap();
    assert_eq!(ledger.pending(), 3 * 4096);
    let msg = ledger
        .reserve(&RANK, usage)
        .err()
        .expect("a fourth rank fits");
    assert_names(&msg, &["~49152 reserved by 12288 threads"]);
    // A refusal reserves nothing; started threads leave the ledger (`/proc` counts them
    // then); dropping a reservation releases the threads that never started.
    assert_eq!(ledger.pending(), 3 * 4096);
    for _ in 0..4000 {
        a.started();
    }
    assert_eq!(ledger.pending(), 2 * 4096 + 96);
    drop(a);
    assert_eq!(ledger.pending(), 2 * 4096);
    drop(b);
    drop(c);
    assert_eq!(ledger.pending(), 0);
    let d = ledger.reserve(&RANK, usage).unwrap();
    assert_eq!(ledger.pending(), 4096);
    drop(d);
    assert_eq!(ledger.pending(), 0);
}
