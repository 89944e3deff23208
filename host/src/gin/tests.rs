use std::time::{Duration, Instant};

use super::wire::{Frame, Kind};
use crate::ranks::run_emulated;
use crate::{DevComm, Device, Requirements, Result, SymmetricMemory};

/// Polls `f` for up to 10 s.
fn eventually<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The tests of this module run one at a time: one of them measures the process's totals.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_forged_put_outside_the_receivers_window_is_refused() {
    let _one = serial();
    let results = run_emulated(2, |comm| -> Result<(String, Vec<u8>)> {
        let dev = Device::for_rank(&comm)?;
        let stream = dev.stream()?;
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let win = comm.register_window(&mem)?;
        let devcomm = DevComm::create(&comm, Requirements::new().gin_contexts(1).gin_signals(2))?;
        stream.fill_bytes(&win, 0x11)?;
        comm.bootstrap().barrier()?;
        let size = win.size() as u64;
        if comm.rank() == 0 {
            // A put that starts inside rank 1's window and runs 100 bytes past its end.
            let mut f = Frame::new(Kind::Put);
            f.dst_win = 1;
            f.dst_off = size - 100;
            f.bytes = 200;
            devcomm
                .gin_runtime()
                .expect("GIN")
                .send_raw(1, &f, &[0xab; 200])?;
        }
        let why = eventually(|| devcomm.failure()).map(|e| e.to_string());
        let mut tail = vec![0u8; 100];
        stream.copy_to_host(&win, (size - 100) as usize, &mut tail)?;
        assert!(
            eventually(|| devcomm.is_aborted().then_some(())).is_some(),
            "rank {}: abort flag not raised",
            comm.rank()
        );
        Ok((why.unwrap_or_default(), tail))
    });
    let mut results = results.into_iter();
    let (_, r0) = results.next().unwrap();
    let (_, r1) = results.next().unwrap();
    let (why0, _) = r0.unwrap();
    let (why1, tail1) = r1.unwrap();
    // The receiver refuses it without writing a byte, and says why.
    assert_eq!(
        why1,
        "rank 1: GIN failed: GIN: rank 0 sent a put of 200 bytes to window 1 at offset 65436, \
         beyond its 65536 bytes: refused"
    );
    assert_eq!(tail1, vec![0x11; 100]);
    // The sender is told: by rank 1's refusal on the connection, or by the bootstrap's report
    // of rank 1's GIN failure, whichever arrives first.
    assert!(
        why0.contains("GIN: rank 1 refused an operation of this rank: a put of 200 bytes")
            || why0.contains("rank 1 failed its GIN: GIN: rank 0 sent a put of 200 bytes"),
        "{why0}"
    );
}
