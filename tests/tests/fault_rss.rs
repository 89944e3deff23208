//! The memory bound of the fault suite (`tests/tests/faults.rs`): its job, three
//! `fault_victim` ranks on the CPU emulator with default settings run through every phase,
//! stays far below 1 GiB of peak resident memory in every process. Emulated device memory is
//! host memory; the emulator's capacity (`SYMCOMM_EMU_DEVICE_MEMORY`) refuses what would
//! exhaust the host, and this checks that the suite's own use is small.
//!
//! The peak is read with `getrusage(RUSAGE_CHILDREN)`: the kernel carries the largest peak of
//! every reaped descendant up to the process that reaps their parent, so once the launcher is
//! reaped it covers the launcher and every rank. One test per binary, so no other child of
//! this process counts.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_fault_run");
const VICTIM: &str = env!("CARGO_BIN_EXE_fault_victim");
const LIMIT_KIB: i64 = 1 << 20;

/// The largest peak resident set (KiB) of any reaped descendant of this process.
fn children_peak_kib() -> i64 {
    // SAFETY: an all-zero rusage is a valid out-buffer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    usage.ru_maxrss
}

#[test]
fn every_process_of_a_fault_suite_job_peaks_below_1_gib() {
    let mut launcher = Command::new(RUN)
        .args(["-n", "3", "--", VICTIM])
        .env("SYMCOMM_BACKEND", "emu")
        .env_remove("SYMCOMM_TEST_PAUSE_AT")
        .env_remove("SYMCOMM_EMU_DEVICE_MEMORY")
        .env_remove("SYMCOMM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting the launcher");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = launcher.try_wait().expect("waiting for the launcher") {
            break s;
        }
        if Instant::now() > deadline {
            // SAFETY: kill has no memory-safety preconditions; the launcher leads its group.
            unsafe { libc::kill(-(launcher.id() as i32), libc::SIGKILL) };
            let _ = launcher.wait();
            panic!("the job did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the job failed: {status}");
    let peak = children_peak_kib();
    println!("peak resident set of the job's processes: {peak} KiB");
    assert!(peak > 0, "no peak recorded");
    assert!(
        peak < LIMIT_KIB,
        "a process of the job peaked at {peak} KiB"
    );
}
