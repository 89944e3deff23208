//! The GIN footprint accounting against this process's real totals: pinned bytes allocated
//! and sockets opened by `DevComm::create`, on the emulator, at 2 to 8 ranks. (An integration
//! test: its own process, so no other test opens sockets or pinned memory meanwhile.)

use symcomm::ranks::run_emulated;
use symcomm::{DevComm, Requirements, Result, SymmetricMemory};

/// Sockets and eventfds this process has open (from `/proc/self/fd`).
fn open_sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .map(|l| {
                            let l = l.to_string_lossy();
                            l.starts_with("socket:") || l == "anon_inode:[eventfd]"
                        })
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn the_footprint_accounting_matches_the_allocations_and_sockets_at_2_to_8_ranks() {
    use std::sync::Mutex;
    use symcomm::gin::{GinFootprint, pinned_bytes_live};
    for n in [2usize, 3, 4, 8] {
        let req = Requirements::new()
            .gin_contexts(2)
            .gin_signals(5)
            .gin_counters(3)
            .world_gin_barriers(1)
            .rail_gin_barriers(2);
        let before = Mutex::new((0u64, 0usize));
        let after = Mutex::new((0u64, 0usize));
        let results = run_emulated(n, |comm| -> Result<GinFootprint> {
            let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
            let _win = comm.register_window(&mem)?;
            comm.bootstrap().barrier()?;
            if comm.rank() == 0 {
                *before.lock().unwrap() = (pinned_bytes_live(), open_sockets());
            }
            comm.bootstrap().barrier()?;
            let devcomm = DevComm::create(&comm, req)?;
            comm.bootstrap().barrier()?;
            if comm.rank() == 0 {
                *after.lock().unwrap() = (pinned_bytes_live(), open_sockets());
            }
            comm.bootstrap().barrier()?;
            let f = devcomm.gin_footprint().expect("GIN");
            // The computed footprint is the running rank's.
            assert_eq!(f, req.gin_footprint(comm.size(), comm.lsa_size())?);
            comm.bootstrap().barrier()?;
            Ok(f)
        });
        let fs: Vec<GinFootprint> = results.into_iter().map(|(_, r)| r.unwrap()).collect();
        let (b, a) = (*before.lock().unwrap(), *after.lock().unwrap());
        let pinned: u64 = fs.iter().map(|f| f.pinned_bytes + f.staging_bytes).sum();
        let fds: u64 = fs.iter().map(|f| f.fds).sum();
        assert_eq!(a.0 - b.0, pinned, "{n} ranks: pinned bytes allocated");
        assert_eq!((a.1 - b.1) as u64, fds, "{n} ranks: sockets opened");
        // Set-up takes a listener and an eventfd per rank; connections come with traffic.
        assert_eq!(fds, (n * 2) as u64, "{n} ranks: descriptors at set-up");
    }
}
