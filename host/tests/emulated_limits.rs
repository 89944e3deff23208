//! The emulator refuses what a GPU would refuse, instead of exhausting the host: device
//! memory beyond the emulated device's capacity (default settings: the 4 GiB the emulated
//! device reports), and barrier counts that the device communicator cannot hold. Ranks are
//! threads of this process; the backend is forced to emulation.

use symcomm::ranks;
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory};

/// Runs `f` on `n` in-process ranks and returns every rank's result in rank order.
fn on_ranks<T: Send>(n: usize, f: impl Fn(Communicator) -> Result<T> + Sync) -> Vec<Result<T>> {
    ranks::run_emulated(n, f)
        .into_iter()
        .map(|(_, r)| r)
        .collect()
}

#[test]
fn a_terabyte_on_a_4_gib_emulated_device_is_refused_naming_request_capacity_and_use() {
    let results = on_ranks(1, |comm| {
        let small = SymmetricMemory::alloc(&comm, 1 << 20)?;
        let huge = SymmetricMemory::alloc(&comm, 1 << 40).map(|m| m.len());
        // The refusal charged nothing: the capacity is still there.
        let after = SymmetricMemory::alloc(&comm, 1 << 20).map(|m| m.len());
        drop(small);
        Ok((huge, after))
    });
    let (huge, after) = results.into_iter().next().unwrap().unwrap();
    let err = match huge {
        Ok(len) => panic!("a {len}-byte allocation succeeded on a 4 GiB emulated device"),
        Err(e) => e.to_string(),
    };
    for fact in [
        "out of device memory",
        "1099511627776 bytes",
        "MiB of 4 GiB in use",
        "SYMCOMM_EMU_DEVICE_MEMORY",
    ] {
        assert!(err.contains(fact), "{fact:?} missing from: {err}");
    }
    assert!(!err.contains('\n') && err.len() < 300, "{err}");
    assert_eq!(after.unwrap(), 1 << 20);
}

#[test]
fn barrier_counts_beyond_i32_are_refused_on_every_rank_before_anything_is_allocated() {
    for n in [u32::MAX, 1 << 31] {
        let results = on_ranks(2, |comm| {
            Ok(DevComm::create(&comm, Requirements::new().lsa_barriers(n))
                .map(|d| d.raw().lsa_barrier.n_barriers))
        });
        for (rank, r) in results.into_iter().enumerate() {
            match r.unwrap() {
                Ok(count) => panic!("rank {rank}: {n} barriers accepted, the device sees {count}"),
                Err(Error::InvalidArgument(msg)) => {
                    assert!(
                        msg.contains(&format!("lsa_barriers({n})"))
                            && msg.contains(&i32::MAX.to_string()),
                        "rank {rank}: {msg}"
                    );
                }
                Err(e) => panic!("rank {rank}: {n} barriers: not an invalid argument: {e}"),
            }
        }
    }
}

#[test]
fn the_largest_barrier_count_is_refused_by_the_memory_capacity_not_the_host() {
    let results = on_ranks(2, |comm| {
        Ok(
            DevComm::create(&comm, Requirements::new().lsa_barriers(i32::MAX as u32))
                .map(|d| d.raw().lsa_barrier.n_barriers),
        )
    });
    for (rank, r) in results.into_iter().enumerate() {
        match r.unwrap() {
            Ok(count) => panic!("rank {rank}: {count} barriers accepted"),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("out of device memory"), "rank {rank}: {msg}");
            }
        }
    }
}
