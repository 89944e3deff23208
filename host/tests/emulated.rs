//! The host runtime on the emulated backend (memfd + `mmap`): window registration through the
//! real all-gather, validation, slot allocator and fd exchange, with ranks as threads of this
//! process; the emulated LSA multicast range. Runs on any Linux machine (the backend is forced
//! to emulation for this test process).

use symcomm::backend::{self, Backend};
use symcomm::ranks;
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory};
use symcomm_device::multimem;

/// Runs `f` on `n` in-process ranks and returns their results in rank order.
fn on_ranks<T: Send>(n: usize, f: impl Fn(Communicator) -> Result<T> + Sync) -> Vec<T> {
    ranks::all_ok(ranks::run_emulated(n, f)).unwrap_or_else(|e| panic!("{n} ranks: {e}"))
}

fn word_at(addr: u64) -> *mut u32 {
    addr as *mut u32
}

/// Every rank writes its id into its slot of every peer's copy (through the flat VA), then
/// checks its own copy; returns the per-rank count of wrong words.
fn exchange(comm: Communicator) -> Result<usize> {
    let n = comm.size();
    let words = 1000;
    let mem = SymmetricMemory::alloc(&comm, n * words * 4)?;
    mem.buffer().fill_bytes(0xff)?;
    let win = comm.register_window(&mem)?;
    assert_eq!(comm.find_window(mem.device_ptr() + 8), Some(win.handle()));
    assert_eq!(win.descriptor().lsa_size, n as u32);
    let usage = comm
        .symmetric_usage()
        .ok_or(Error::InvalidArgument("no usage".into()))?;
    assert_eq!(usage.flat_bytes, n as u64 * (4 << 30));
    let me = comm.lsa_rank();
    for p in 0..n {
        for i in 0..words {
            let addr = win
                .lsa_ptr((me * words + i) * 4, p)
                .ok_or(Error::InvalidArgument("lsa_ptr out of range".into()))?;
            // SAFETY: inside peer p's mapped copy of the window.
            unsafe { word_at(addr).write_volatile((me * 100_000 + i) as u32) };
        }
    }
    comm.bootstrap().barrier()?;
    let mut got = vec![0u32; n * words];
    mem.buffer().copy_to_host(&mut got)?;
    let wrong = (0..n * words)
        .filter(|&k| got[k] != ((k / words) * 100_000 + k % words) as u32)
        .count();
    comm.bootstrap().barrier()?; // nobody unmaps while a peer still writes
    win.deregister()?;
    Ok(wrong)
}

#[test]
fn windows_register_and_peers_write_through_the_flat_va_with_2_4_and_8_ranks() {
    for n in [2, 4, 8] {
        assert_eq!(on_ranks(n, exchange), vec![0; n], "{n} ranks");
    }
}

#[test]
fn a_size_mismatch_gives_every_rank_the_same_error() {
    let errors = on_ranks(2, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let size = if comm.rank() == 0 { 1 << 16 } else { 1 << 15 };
        Ok(comm
            .register_window_ptr(mem.device_ptr(), size)
            .err()
            .map(|e| e.to_string()))
    });
    assert!(errors.iter().all(|e| e.is_some()), "{errors:?}");
    assert_eq!(errors[0], errors[1]);
}

#[test]
fn a_rank_that_fails_after_the_agreement_gives_every_rank_the_same_error_at_once() {
    use std::time::{Duration, Instant};
    // Rank 1's fd socket name is taken, so binding its fd server (a step after the ranks
    // agreed to register) fails on rank 1 alone. Before the prepare/commit vote, rank 1
    // returned at once and the others waited the whole timeout for its fd.
    let results = on_ranks(3, |comm| {
        let squatter = if comm.rank() == 1 {
            Some(symcomm::internals::FdServer::bind(comm.job_id(), 1)?)
        } else {
            None
        };
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        comm.bootstrap().barrier()?;
        let start = Instant::now();
        let err = comm.register_window(&mem).err().map(|e| e.to_string());
        let took = start.elapsed();
        // Nothing was left half-registered, and the communicator is still usable.
        assert!(comm.find_window(mem.device_ptr()).is_none());
        drop(squatter);
        comm.bootstrap().barrier()?;
        let win = comm.register_window(&mem)?;
        assert_eq!(comm.find_window(mem.device_ptr()), Some(win.handle()));
        win.deregister()?;
        Ok((err, took))
    });
    let first = results[0]
        .0
        .clone()
        .expect("registration succeeded on rank 0");
    for (rank, (err, took)) in results.iter().enumerate() {
        let err = err.as_ref().expect("registration succeeded");
        assert!(took < &Duration::from_secs(3), "rank {rank} took {took:?}");
        assert!(
            err.contains("window registration: rank 1 failed setting up symmetric memory")
                && err.contains("binding fd socket"),
            "rank {rank}: {err}"
        );
        // The same error everywhere, but for the reporting rank's prefix.
        assert_eq!(
            err.split_once(": ").map(|x| x.1),
            first.split_once(": ").map(|x| x.1)
        );
    }
}

#[test]
fn after_a_rank_dies_every_later_call_returns_the_same_error_and_drops_are_prompt() {
    use std::time::{Duration, Instant};
    let results = ranks::run_emulated(3, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let win = comm.register_window(&mem)?;
        let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
        comm.bootstrap().barrier()?;
        if comm.rank() == 2 {
            // Dies: its communicator goes while its thread panics (no goodbye).
            let crash = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _dies = comm;
                panic!("rank 2 crashes (expected)");
            }));
            assert!(crash.is_err());
            return Ok(Vec::new());
        }
        // The abort flag goes up without any call of this rank.
        let start = Instant::now();
        while !dev.is_aborted() {
            assert!(
                start.elapsed() < Duration::from_secs(3),
                "the abort flag stayed down"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let errors = vec![
            comm.register_window(&mem).err(),
            DevComm::create(&comm, Requirements::new()).err(),
            comm.bootstrap().barrier().err(),
            dev.failure(),
            comm.bootstrap().failure(),
        ];
        let start = Instant::now();
        drop((dev, win, comm));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        Ok(errors
            .into_iter()
            .map(|e| e.map(|e| e.to_string()).unwrap_or_default())
            .collect())
    });
    for (rank, r) in results.into_iter().take(2) {
        let errors = r.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        for e in &errors {
            assert!(
                e.starts_with(&format!("rank {rank}: ")) && e.contains(": rank 2 panicked"),
                "rank {rank}: {errors:?}"
            );
        }
    }
}

#[test]
fn a_buffer_registered_twice_stays_registered_until_both_windows_are_gone() {
    // Before: dropping one of the two windows forgot both (entries were removed by pointer
    // and size), so `find_window` said the live one was gone.
    let results = on_ranks(2, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let first = comm.register_window(&mem)?;
        let second = comm.register_window(&mem)?;
        assert_ne!(first.handle(), second.handle());
        first.deregister()?;
        let found = comm.find_window(mem.device_ptr() + 64);
        let usage = comm.symmetric_usage().map(|u| u.windows);
        // The live window still reaches the peer's memory.
        let peer = 1 - comm.lsa_rank();
        let addr = second
            .lsa_ptr(4 * comm.rank(), peer)
            .ok_or(Error::InvalidArgument("lsa_ptr out of range".into()))?;
        // SAFETY: inside the peer's mapped copy of the live window.
        unsafe { word_at(addr).write_volatile(7 + comm.rank() as u32) };
        comm.bootstrap().barrier()?;
        let mut got = [0u32; 2];
        mem.buffer().copy_to_host(&mut got)?;
        comm.bootstrap().barrier()?;
        let want = second.handle();
        second.deregister()?;
        Ok((
            found == Some(want),
            usage,
            got[peer],
            comm.find_window(mem.device_ptr()),
        ))
    });
    for (rank, (found, usage, got, after)) in results.into_iter().enumerate() {
        assert!(found, "rank {rank}: the live window was forgotten");
        assert_eq!(usage, Some(1), "rank {rank}");
        assert_eq!(got, 7 + (1 - rank) as u32, "rank {rank}");
        assert_eq!(after, None, "rank {rank}");
    }
}

#[test]
fn windows_deregistered_in_different_orders_are_caught_at_the_next_registration() {
    // Before: each rank freed a valid block, so the next registration gave silently
    // different slot offsets (rank 0 reused the first window's slot, rank 1 the second's).
    let results = on_ranks(2, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let a = comm.register_window(&mem)?;
        let b = comm.register_window(&mem)?;
        let keep = if comm.rank() == 0 {
            a.deregister()?;
            b
        } else {
            b.deregister()?;
            a
        };
        let err = comm.register_window(&mem).err().map(|e| e.to_string());
        drop(keep);
        // Once the spaces agree again, registration works.
        let again = comm.register_window(&mem)?;
        again.deregister()?;
        Ok(err)
    });
    for (rank, err) in results.iter().enumerate() {
        let err = err.as_deref().unwrap_or("registered");
        assert!(
            err.contains("live window slots (windows deregistered in a different order?) differs"),
            "rank {rank}: {err}"
        );
    }
    assert_eq!(results[0], results[1]);
}

#[test]
fn a_user_all_gather_never_receives_the_runtimes_registration_records() {
    // Before: rank 0's all-gather returned rank 1's registration offer as its data.
    let results = ranks::run_emulated(2, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        if comm.rank() == 0 {
            comm.bootstrap().all_gather(b"user").map(|_| ())
        } else {
            comm.register_window(&mem).map(|_| ())
        }
    });
    for (rank, r) in results {
        let e = r
            .expect_err("a mismatched collective succeeded")
            .to_string();
        assert!(e.contains("different collective"), "rank {rank}: {e}");
    }
}

#[test]
fn a_host_pointer_is_refused_on_every_rank() {
    let errors = on_ranks(2, |comm| {
        let host = vec![0u8; 1 << 16];
        Ok(comm
            .register_window_ptr(host.as_ptr() as u64, host.len())
            .err()
            .map(|e| e.to_string()))
    });
    assert!(
        errors[0]
            .as_deref()
            .is_some_and(|e| e.contains("not emulated device memory")),
        "{errors:?}"
    );
    assert!(
        errors[1].as_deref().is_some_and(|e| e.contains("rank 0")),
        "{errors:?}"
    );
}

#[test]
fn the_emulated_multicast_range_reaches_every_lsa_peer() {
    let n = 4;
    let sums = on_ranks(n, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 4096)?;
        let win = comm.register_window(&mem)?;
        let dev = DevComm::create(
            &comm,
            Requirements::new().lsa_barriers(1).lsa_multimem(true),
        )?;
        let mc_base = dev.raw().lsa_multimem.mc_base;
        assert_ne!(mc_base, 0);
        let d = win.descriptor();
        let mc = |word: u64| (mc_base + 4096 * u64::from(d.mc_offset4k) + 4 * word) as *mut u32;
        let me = comm.rank() as u32;
        mem.buffer().copy_from_host(&[me + 1, 0, 0])?;
        comm.bootstrap().barrier()?;
        // SAFETY: word 0..3 of the window, through the emulated multicast range.
        let sum = unsafe { multimem::ld_reduce_add_u32(mc(0)) };
        // SAFETY: words 1 and 2 of the window, as above.
        unsafe {
            multimem::red_add_u32(mc(1), me, symcomm_device::mem::Ordering::Release);
            if me == 0 {
                multimem::st_u32(mc(2), 77);
            }
        }
        comm.bootstrap().barrier()?;
        let mut words = [0u32; 3];
        mem.buffer().copy_to_host(&mut words)?;
        assert!(!dev.is_aborted());
        comm.bootstrap().barrier()?;
        drop(dev);
        drop(win);
        Ok((sum, words[1], words[2]))
    });
    let ranks = n as u32;
    let want = (ranks * (ranks + 1) / 2, ranks * (ranks - 1) / 2, 77);
    assert_eq!(sums, vec![want; n]);
}

#[test]
fn deregistering_unmaps_the_peers_and_frees_the_slot_for_the_next_window() {
    let outcomes = on_ranks(2, |comm| {
        let a = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let b = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let win = comm.register_window(&a)?;
        let peer = 1 - comm.lsa_rank();
        let peer_addr = win
            .lsa_ptr(64, peer)
            .ok_or(Error::InvalidArgument("lsa_ptr".into()))?;
        // The peer's copy in the flat VA is memory the runtime knows, as on a GPU.
        let found = symcomm::cuda::find_allocation(peer_addr)?;
        let mapped_before = found.base == peer_addr - 64;
        drop(found);
        let first_base = win.descriptor().lsa_flat_base;
        comm.bootstrap().barrier()?;
        win.deregister()?;
        let gone = symcomm::cuda::find_allocation(peer_addr).is_err();
        let usage = comm
            .symmetric_usage()
            .map(|u| (u.windows, u.slot_bytes_used));
        let again = comm.register_window(&b)?;
        let same_slot = again.descriptor().lsa_flat_base == first_base;
        Ok((mapped_before, gone, usage, same_slot))
    });
    assert_eq!(outcomes, vec![(true, true, Some((0, 0)), true); 2]);
}

#[test]
fn an_emulated_stream_is_a_null_handle_that_is_always_idle() {
    backend::use_backend(Backend::Emulated).unwrap();
    let s = symcomm::cuda::Stream::new().unwrap();
    assert!(
        s.raw().is_null(),
        "emulated launches ignore streams: no driver handle"
    );
    s.synchronize().unwrap();
}

/// `mmap(MAP_FIXED)` replaces whatever is mapped: a second mapping over a live one used to
/// succeed and leave the first one's memory inaccessible once either was dropped. As on the
/// driver, it is refused, and the first mapping keeps working.
#[test]
fn an_emulated_mapping_over_a_live_one_is_refused() {
    use symcomm::cuda::{Mapping, PhysicalMem, Shareable, VaRange};
    backend::use_backend(Backend::Emulated).unwrap();
    let mem = PhysicalMem::new(0, 1, Shareable::PosixFd).unwrap();
    let other = PhysicalMem::new(0, 1, Shareable::PosixFd).unwrap();
    let va = VaRange::reserve(2 * mem.size(), 0).unwrap();
    let first = Mapping::new(&va, 0, &mem, &[0]).unwrap();
    let err = Mapping::new(&va, 0, &other, &[0]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("overlaps the live mapping")),
        "{err}"
    );
    // Overlapping by a part is refused too; the other half of the range is free.
    assert!(Mapping::new(&va, mem.size() / 2, &other, &[0]).is_err());
    let second = Mapping::new(&va, mem.size(), &other, &[0]).unwrap();
    // SAFETY: both mappings are live, each 2 MiB of host memory.
    unsafe {
        word_at(first.ptr()).write(7);
        word_at(second.ptr()).write(9);
        assert_eq!(word_at(first.ptr()).read(), 7);
    }
    assert_eq!(
        symcomm::cuda::find_allocation(first.ptr())
            .unwrap()
            .mem
            .size(),
        mem.size()
    );
}
