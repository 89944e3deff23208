//! Grids beyond the process's thread and memory-map limits: the estimate with injected numbers,
//! the ledger that makes concurrent launches see each other, and real launches against the
//! real `vm.max_map_count` (used up on purpose), each in a child process so that an abort
//! would show as a signal instead of killing the test binary.

use std::format;
use std::io::Read;
use std::println;
use std::process::{Command, Stdio};
use std::string::String;
use std::sync::{Barrier, Condvar, Mutex};
use std::time::Instant;

use super::*;
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

// -----------------------------------------------------------------------------------------
// Real limits, in child processes (this test binary, run on one `#[ignore]`d test).

/// Set in a child process: the name of the child test to run (the others stay no-ops).
const CHILD_ENV: &str = "SYMCOMM_EMU_LIMITS_TEST_CHILD";

/// Runs child test `name` in a new process of this test binary; returns its stdout and
/// stderr after asserting that it exited normally with success (an abort is a signal).
fn run_child(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, m)| m);
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            &format!("{module}::{name}"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: std::boxed::Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(std::boxed::Box::new(child.stdout.take().unwrap()));
    let err = drain(std::boxed::Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("child {name} still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!(
        "{}\n--- stderr ---\n{}",
        out.join().unwrap(),
        err.join().unwrap()
    );
    assert!(
        status.success(),
        "child {name} ended with {status} (a signal is an abort):\n{text}"
    );
    text
}

/// True in the child process that runs `name`.
fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

fn read_u64(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn maps_in_use() -> u64 {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count() as u64
}

/// Pages mapped so that each is a mapping of its own (every other page readable), to use up
/// the real `vm.max_map_count`; unmapped on drop.
struct MapFiller {
    p: *mut libc::c_void,
    len: usize,
}

impl MapFiller {
    /// Leaves about `free` memory maps of `vm.max_map_count` free.
    fn leave_free(free: u64) -> MapFiller {
        let max = read_u64("/proc/sys/vm/max_map_count");
        let pages = max - maps_in_use() - free;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = pages as usize * page;
        // SAFETY: a fresh private reservation at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let filler = MapFiller { p, len };
        for i in (1..pages as usize).step_by(2) {
            // SAFETY: page `i` lies inside the reservation made above, which nothing else uses.
            let r = unsafe {
                libc::mprotect(p.cast::<u8>().add(i * page).cast(), page, libc::PROT_READ)
            };
            assert_eq!(r, 0, "page {i}: {}", std::io::Error::last_os_error());
        }
        let left = max - maps_in_use();
        assert!(left.abs_diff(free) < 100, "{left} maps left, not {free}");
        filler
    }
}

impl Drop for MapFiller {
    fn drop(&mut self) {
        // SAFETY: the reservation made in `leave_free`, no longer used.
        unsafe { libc::munmap(self.p, self.len) };
    }
}

/// Threads of a grid that started, for [`Gate::hold`].
#[derive(Default)]
struct Gate {
    started: Mutex<u32>,
    all: Condvar,
}

impl Gate {
    /// A kernel whose threads all stay alive until all `total` threads of the grid have
    /// started (what would exhaust the maps without the check: a thread that ends early
    /// frees its signal stack for the next one); gives up after 10 s. Blocks instead of
    /// polling, so that a wrong emulator reaches the limit fast.
    fn hold(&self, total: u32) {
        let mut n = self.started.lock().unwrap();
        *n += 1;
        if *n >= total {
            self.all.notify_all();
        }
        let _ = self
            .all
            .wait_timeout_while(n, Duration::from_secs(10), |n| *n < total)
            .unwrap();
    }

    fn started(&self) -> u32 {
        *self.started.lock().unwrap()
    }
}

fn host_cpus() -> u64 {
    limits::read_usage(0).cpus
}

#[test]
fn a_grid_beyond_the_free_memory_maps_is_refused_instead_of_aborting() {
    let text = run_child("child_maps_used_up");
    assert!(text.contains("CHILD OK"), "{text}");
}

#[test]
#[ignore = "run in a child process by a_grid_beyond_the_free_memory_maps_is_refused_instead_of_aborting"]
fn child_maps_used_up() {
    if !is_child("child_maps_used_up") {
        return;
    }
    let small = Launch::new(1, 32).resident_blocks(1);
    let small_maps = limits::maps_needed(&Demand {
        blocks: 1,
        block_threads: 32,
        resident: 1,
    });
    // Room for the small launch and a thousand maps of slack, not for 1024 threads (4098).
    let filler = MapFiller::leave_free(limits::map_headroom(host_cpus()) + small_maps + 1000);
    // Without the check std aborts while spawning these (its signal stack cannot be mapped).
    let gate = Gate::default();
    let e = Launch::new(1, 1024).run(|| gate.hold(1024)).unwrap_err();
    assert_eq!(gate.started(), 0);
    let msg = match &e {
        EmuError::HostLimit(msg) => msg,
        other => panic!("not a host limit: {other}"),
    };
    println!("refused: {e}");
    let max = read_u64("/proc/sys/vm/max_map_count");
    assert_names(
        msg,
        &[
            "1 block × 1024 threads",
            "~4098 memory maps",
            &format!("vm.max_map_count = {max}"),
            "SYMCOMM_EMU_THREADS",
            "Launch::resident_blocks",
        ],
    );
    // What fits still runs, and everything runs once the maps are free again.
    let ran = AtomicU32::new(0);
    small
        .run(|| {
            ran.fetch_add(1, A::Relaxed);
        })
        .unwrap();
    assert_eq!(ran.load(A::Relaxed), 32);
    drop(filler);
    Launch::new(1, 1024).run(|| {}).unwrap();
    println!("CHILD OK");
}

#[test]
fn concurrent_ranks_beyond_the_free_memory_maps_are_refused_instead_of_aborting() {
    let text = run_child("child_ranks_share_the_maps");
    assert!(text.contains("CHILD OK"), "{text}");
}

#[test]
#[ignore = "run in a child process by concurrent_ranks_beyond_the_free_memory_maps_are_refused_instead_of_aborting"]
fn child_ranks_share_the_maps() {
    if !is_child("child_ranks_share_the_maps") {
        return;
    }
    // Four ranks (launches on threads of one process) start together, each with 4 resident
    // blocks of 256 threads (4104 maps), where 2.5 ranks' worth is free. A rank that runs
    // keeps its threads until every rank has run or been refused, so all four would be alive
    // at once (16416 maps) if the ranks did not see each other's threads (the ledger counts
    // those not started yet): one or two run (two fit; the estimate may count threads that
    // start while it reads `/proc` twice, never zero times), the others are refused.
    let rank = Launch::new(4, 256).resident_blocks(4);
    let per_rank = limits::maps_needed(&Demand {
        blocks: 4,
        block_threads: 256,
        resident: 4,
    });
    // Ranks that ran or were refused; the held threads block (no polling: 2048 threads
    // waking up would starve the ranks still checking).
    let decided = (Mutex::new(0u32), Condvar::new());
    let decide = || {
        *decided.0.lock().unwrap() += 1;
        decided.1.notify_all();
    };
    let hold = || {
        if arch::block_idx().x == 0 && arch::thread_idx().x == 0 {
            decide();
        }
        let n = decided.0.lock().unwrap();
        let _ = decided
            .1
            .wait_timeout_while(n, Duration::from_secs(30), |n| *n < 4)
            .unwrap();
    };
    let go = Barrier::new(5);
    let (filler, results) = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    go.wait();
                    let r = rank.run(hold);
                    if r.is_err() {
                        decide();
                    }
                    r
                })
            })
            .collect();
        // After the rank threads exist, so that their maps are in use already; a failure
        // here must still release them.
        let filler = std::panic::catch_unwind(|| {
            MapFiller::leave_free(limits::map_headroom(host_cpus()) + per_rank * 5 / 2)
        });
        go.wait();
        let results: Vec<Result<(), EmuError>> =
            ranks.into_iter().map(|r| r.join().unwrap()).collect();
        (filler, results)
    });
    drop(filler.unwrap_or_else(|p| std::panic::resume_unwind(p)));
    let mut ran = 0;
    for r in &results {
        match r {
            Ok(()) => ran += 1,
            Err(EmuError::HostLimit(msg)) => {
                println!("refused: {msg}");
                assert_names(
                    msg,
                    &["4 blocks × 256 threads", "concurrent emulated launches"],
                );
            }
            Err(other) => panic!("not a host limit: {other}"),
        }
    }
    assert!((1..=2).contains(&ran), "{ran} ranks ran: {results:?}");
    println!("CHILD OK");
}

#[test]
fn a_grid_far_beyond_the_real_limits_is_refused_instead_of_aborting() {
    let text = run_child("child_far_beyond");
    assert!(text.contains("CHILD OK"), "{text}");
}

#[test]
#[ignore = "run in a child process by a_grid_far_beyond_the_real_limits_is_refused_instead_of_aborting"]
fn child_far_beyond() {
    if !is_child("child_far_beyond") {
        return;
    }
    // Resident blocks of 1024 threads whose maps alone exceed vm.max_map_count, untouched.
    let max = read_u64("/proc/sys/vm/max_map_count");
    let resident = u32::try_from(max / 4096 + 2).unwrap();
    let gate = Gate::default();
    let e = Launch::new(resident, 1024)
        .resident_blocks(resident)
        .run(|| gate.hold(resident * 1024))
        .unwrap_err();
    assert_eq!(gate.started(), 0);
    println!("refused: {e}");
    match &e {
        EmuError::HostLimit(msg) => assert_names(
            msg,
            &[
                &format!("{resident} resident blocks ({} threads", resident * 1024),
                &format!("vm.max_map_count = {max}"),
            ],
        ),
        other => panic!("not a host limit: {other}"),
    }
    println!("CHILD OK");
}
