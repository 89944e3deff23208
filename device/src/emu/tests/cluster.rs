//! Thread block clusters: the cluster barrier, `map`, `store_async_u32` and `Mbarrier`,
//! and the misuse of each.

use super::*;
use crate::cluster;

/// What block `sender` (linear index) stores into cluster rank `to` in `round`.
fn cluster_word(sender: u32, to: u32, round: u32) -> u32 {
    0x0100_0000 * (round + 1) + 0x100 * sender + to
}

/// Every block of each cluster stores one word into every block of its cluster (itself
/// included) with `store_async_u32`, counted on the receiver's `Mbarrier`, `rounds` times
/// (phases 0, 1, 0, ...); every block writes what it received to
/// `out[(block * rounds + round) * size + sender rank]`.
fn cluster_exchange(launch: &Launch, rounds: u32, out: &[AtomicU32]) -> Result<(), EmuError> {
    launch.run(|| {
        let word: *mut u64 = crate::shared_array!(EMU_TEST_CLUSTER_MBAR: [u64; 1]);
        let inbox: *mut u32 = crate::shared_array!(EMU_TEST_CLUSTER_INBOX: [u32; 16]);
        let (rank, size) = (cluster::rank(), cluster::size());
        let (t, b) = (arch::thread_idx().x, arch::block_idx().x);
        // SAFETY: an 8-byte aligned word of this block's shared memory, used only as this barrier.
        let mbar = unsafe { cluster::Mbarrier::new(word) };
        if t == 0 {
            // SAFETY: one arrival per phase (thread 0's); nobody else uses it yet.
            unsafe { mbar.init(1) };
            cluster::fence_init();
        }
        cluster::sync();
        for round in 0..rounds {
            if t == 0 {
                // SAFETY: initialised; the phase expects thread 0's arrival; `size` words.
                unsafe { mbar.arrive_expect_tx(4 * size) };
            }
            if t < size {
                // SAFETY: `rank < 16` words of the inbox, `t < size`; every block of the
                // cluster passed the cluster barrier above after it started, and waits for
                // these bytes in this phase.
                unsafe {
                    let dst = cluster::map(inbox.add(rank as usize), t);
                    cluster::store_async_u32(dst, cluster_word(b, t, round), mbar.remote(t));
                }
            }
            // SAFETY: initialised; the phase of this round is the current one; no abort flag.
            unsafe { mbar.wait_parity(round & 1, core::ptr::null(), 20_000_000_000) }.unwrap();
            if t < size {
                // SAFETY: `t < size ≤ 16`; the completed phase acquired the stores.
                let v = unsafe { inbox.add(t as usize).read_volatile() };
                out[((b * rounds + round) * size + t) as usize].store(v, A::Relaxed);
            }
            // Every block has read its inbox before the next round overwrites it.
            cluster::sync();
        }
    })
}

fn check_cluster_exchange(blocks: u32, size: u32, rounds: u32, out: &[AtomicU32]) {
    for b in 0..blocks {
        for round in 0..rounds {
            for j in 0..size {
                let sender = b / size * size + j;
                assert_eq!(
                    out[((b * rounds + round) * size + j) as usize].load(A::Relaxed),
                    cluster_word(sender, b % size, round),
                    "block {b} round {round} from rank {j}"
                );
            }
        }
    }
}

#[test]
fn cluster_blocks_exchange_words_through_peer_shared_memory() {
    let (blocks, size, rounds) = (8, 4, 3);
    let out: Vec<AtomicU32> = (0..blocks * rounds * size)
        .map(|_| AtomicU32::new(0))
        .collect();
    cluster_exchange(&Launch::new(blocks, 64).cluster(size), rounds, &out).unwrap();
    check_cluster_exchange(blocks, size, rounds, &out);
}

/// More clusters than resident slots: successive clusters reuse the slots (and their barrier
/// state); the resident count is rounded to whole clusters (2 → 4, 6 → 4).
#[test]
fn clusters_run_in_rounds_when_the_grid_exceeds_the_resident_slots() {
    let (blocks, size, rounds) = (32, 4, 2);
    for resident in [2, 6] {
        let out: Vec<AtomicU32> = (0..blocks * rounds * size)
            .map(|_| AtomicU32::new(0))
            .collect();
        let l = Launch::new(blocks, 32)
            .cluster(size)
            .resident_blocks(resident)
            .timeout(Some(Duration::from_secs(60)));
        cluster_exchange(&l, rounds, &out).unwrap();
        check_cluster_exchange(blocks, size, rounds, &out);
    }
}

#[test]
fn cluster_rank_and_size_follow_the_block_index() {
    let seen: Vec<AtomicU32> = (0..24).map(|_| AtomicU32::new(0)).collect();
    Launch::new((12, 2), 32)
        .cluster(3)
        .resident_blocks(7)
        .run(|| {
            let (rank, size) = crate::emu::cluster_geometry().unwrap();
            assert_eq!((cluster::rank(), cluster::size()), (rank, size));
            if arch::thread_idx().x == 0 {
                seen[linear_block()].store(0x100 | (size << 4) | rank, A::Relaxed);
            }
        })
        .unwrap();
    for (b, s) in seen.iter().enumerate() {
        assert_eq!(s.load(A::Relaxed), 0x130 | (b as u32 % 12 % 3), "block {b}");
    }
    let plain = AtomicU32::new(0);
    Launch::new(4, 32)
        .run(|| {
            if cluster::rank() != 0 || cluster::size() != 1 {
                plain.fetch_add(1, A::Relaxed);
            }
            cluster::sync();
        })
        .unwrap();
    assert_eq!(plain.load(A::Relaxed), 0);
    assert_eq!(crate::emu::cluster_geometry(), None);
    assert_eq!((cluster::rank(), cluster::size()), (0, 1));
    cluster::sync();
}

#[test]
fn bad_cluster_configurations_are_refused() {
    let refused: [(Dim3, u32); 5] = [
        (6.into(), 4),
        (8.into(), 0),
        (17.into(), 17),
        (34.into(), 17),
        ((3, 2).into(), 2),
    ];
    for (grid, size) in refused {
        let e = Launch::new(grid, 32).cluster(size).run(|| {}).unwrap_err();
        assert!(matches!(e, EmuError::InvalidLaunch(_)), "{e}");
    }
    Launch::new((16, 2), 1).cluster(16).run(|| {}).unwrap();
}

#[test]
fn cluster_map_outside_the_cluster_or_shared_memory_is_an_error() {
    let e = Launch::new(4, 32)
        .cluster(2)
        .run(|| {
            let s: *mut u32 = crate::shared_array!(EMU_TEST_CLUSTER_MAP: [u32; 4]);
            if arch::block_idx().x == 3 && arch::thread_idx().x == 1 {
                // SAFETY: none; rank 2 is outside the cluster of two, which is the point.
                let _ = unsafe { cluster::map(s, 2) };
            }
        })
        .unwrap_err();
    assert_eq!(
        e,
        EmuError::Misuse {
            block: Dim3 { x: 3, y: 0, z: 0 },
            thread: Dim3 { x: 1, y: 0, z: 0 },
            detail: "cluster::map to rank 2 in a cluster of 2 blocks".to_string(),
        }
    );
    let mut global = 0u32;
    let p = &raw mut global;
    // SAFETY: as above (not shared memory); `p` is only passed around.
    let e = unsafe {
        Launch::new(2, 1).cluster(2).run_unsync(|| {
            let _ = cluster::map(p, 1);
        })
    };
    assert!(
        e.unwrap_err()
            .to_string()
            .contains("not in this block's shared memory")
    );
}

/// `map` of the dynamic shared memory and of a static array that the peer has not touched
/// yet (allocated for it then).
#[test]
fn cluster_map_reaches_dynamic_and_untouched_static_shared_memory() {
    let out: Vec<AtomicU32> = (0..4).map(|_| AtomicU32::new(0)).collect();
    Launch::new(4, 32)
        .cluster(2)
        .shared(64)
        .run(|| {
            let (rank, t) = (cluster::rank(), arch::thread_idx().x);
            let dynamic: *mut u32 = arch::dynamic_shared();
            cluster::sync();
            if rank == 0 && t == 0 {
                let s: *mut u32 = crate::shared_array!(EMU_TEST_CLUSTER_LAZY: [u32; 8]);
                // `crate::cluster` has no plain remote store: the hook behind `cluster::map`.
                let remote =
                    |p: *mut u32| crate::emu::cluster_map(p.cast(), 1).unwrap().cast::<u32>();
                // SAFETY: words 3 of 8 and 5 of 16 in shared memory; the peer passed the
                // barrier above and reads them after the next one.
                unsafe {
                    remote(s.add(3)).write_volatile(11);
                    remote(dynamic.add(5)).write_volatile(22);
                }
            }
            cluster::sync();
            if rank == 1 && t == 0 {
                let s: *mut u32 = crate::shared_array!(EMU_TEST_CLUSTER_LAZY: [u32; 8]);
                let b = arch::block_idx().x as usize;
                // SAFETY: as above.
                unsafe {
                    out[b].store(s.add(3).read_volatile(), A::Relaxed);
                    out[b - 1].store(dynamic.add(5).read_volatile(), A::Relaxed);
                }
            }
        })
        .unwrap();
    let got: Vec<u32> = out.iter().map(|o| o.load(A::Relaxed)).collect();
    assert_eq!(got, [22, 11, 22, 11]);
}

#[test]
fn cluster_arrive_and_wait_out_of_turn_are_errors() {
    let twice = Launch::new(2, 32)
        .cluster(2)
        .run(|| {
            cluster::arrive();
            cluster::arrive();
        })
        .unwrap_err();
    assert!(
        twice.to_string().contains("cluster::arrive twice"),
        "{twice}"
    );
    let no_arrive = Launch::new(2, 32)
        .cluster(2)
        .run(|| {
            if arch::block_idx().x == 1 {
                cluster::wait();
            }
        })
        .unwrap_err();
    assert!(
        matches!(
            no_arrive,
            EmuError::Misuse {
                block: Dim3 { x: 1, .. },
                ..
            }
        ),
        "{no_arrive}"
    );
}

/// As on the GPU, the cluster barrier waits for the threads that have not exited: a block
/// that returns early, and threads that arrive and leave without waiting, hold nobody up.
#[test]
fn the_cluster_barrier_does_not_wait_for_exited_threads() {
    let passed = AtomicU32::new(0);
    Launch::new(8, 64)
        .cluster(4)
        .timeout(Some(Duration::from_secs(30)))
        .run(|| {
            let t = arch::thread_idx().x;
            match cluster::rank() {
                0 => return,
                1 if t >= 32 => {
                    cluster::arrive();
                    return;
                }
                _ => {}
            }
            for _ in 0..3 {
                cluster::sync();
            }
            passed.fetch_add(1, A::Relaxed);
        })
        .unwrap();
    assert_eq!(passed.load(A::Relaxed), 2 * (32 + 64 + 64));
}

#[test]
fn a_cluster_barrier_a_block_never_reaches_ends_in_an_error() {
    // The block of rank 2 waits for a flag that never rises: the others wait in the cluster
    // barrier until the watchdog fires.
    let flag = AtomicU32::new(0);
    let e = Launch::new(4, 32)
        .cluster(4)
        .timeout(Some(Duration::from_millis(300)))
        .run(|| {
            if cluster::rank() == 2 {
                // SAFETY: no abort flag.
                let mut spin = unsafe { crate::wait::Spin::new(core::ptr::null(), u64::MAX) };
                let _ = spin.until(|| flag.load(A::Relaxed) != 0);
            }
            cluster::sync();
        })
        .unwrap_err();
    assert!(matches!(e, EmuError::Timeout { .. }), "{e}");
    // A failure elsewhere stops the waiting threads at once (long before the watchdog).
    let e = Launch::new(4, 32)
        .cluster(4)
        .timeout(Some(Duration::from_secs(60)))
        .run(|| {
            if cluster::rank() == 2 {
                arch::nanosleep(1_000_000);
                if arch::thread_idx().x == 7 {
                    arch::trap();
                }
            }
            cluster::sync();
        })
        .unwrap_err();
    assert_eq!(
        e,
        EmuError::Trap {
            block: Dim3 { x: 2, y: 0, z: 0 },
            thread: Dim3 { x: 7, y: 0, z: 0 }
        }
    );
}

/// The shared words of [`late_or_early_store`]: an initialised barrier and an inbox word.
fn cluster_target() -> (cluster::Mbarrier, *mut u32) {
    let word: *mut u64 = crate::shared_array!(EMU_TEST_CLUSTER_LIFE_MBAR: [u64; 1]);
    let inbox: *mut u32 = crate::shared_array!(EMU_TEST_CLUSTER_LIFE_INBOX: [u32; 1]);
    // SAFETY: an 8-byte aligned word of this block's shared memory, used only as this barrier.
    let mbar = unsafe { cluster::Mbarrier::new(word) };
    if arch::thread_idx().x == 0 {
        // SAFETY: one arrival per phase; nobody else uses it yet.
        unsafe { mbar.init(1) };
        cluster::fence_init();
    }
    (mbar, inbox)
}

/// Thread 0 of the calling block stores one word into cluster rank `to`.
fn store_to(mbar: cluster::Mbarrier, inbox: *mut u32, to: u32) {
    if arch::thread_idx().x == 0 {
        // SAFETY: none for the block `to` (the tests break the lifetime rule on purpose);
        // the addresses are shared memory of a block of the cluster.
        unsafe { cluster::store_async_u32(cluster::map(inbox, to), 7, mbar.remote(to)) };
    }
}

fn assert_misuse(e: &EmuError, block: u32, needle: &str) {
    match e {
        EmuError::Misuse {
            block: b, detail, ..
        } if b.x == block && detail.contains(needle) => {}
        other => panic!("expected a misuse by block {block} naming `{needle}`, got: {other}"),
    }
}

/// The lifetime rule of `crate::cluster`, checked: a store into a block of the cluster that
/// has exited fails the launch (on the GPU it would land in freed shared memory, or in the
/// next block's).
#[test]
fn st_async_into_an_exited_block_is_an_error() {
    let e = Launch::new(2, 32)
        .cluster(2)
        .timeout(Some(Duration::from_secs(30)))
        .run(|| {
            let (mbar, inbox) = cluster_target();
            cluster::sync();
            if cluster::rank() == 1 {
                return;
            }
            // Block 1 never arrives again: this completes once all its threads have exited.
            cluster::sync();
            store_to(mbar, inbox, 1);
        })
        .unwrap_err();
    assert_misuse(&e, 0, "(cluster rank 1), which has exited");
}

/// ... and so does a store into a block that has not started: here block 3, whose slot
/// still runs block 1 (of the previous cluster) when block 2 stores without a cluster
/// barrier first.
#[test]
fn st_async_into_a_block_that_has_not_started_is_an_error() {
    let never = AtomicU32::new(0);
    let e = Launch::new(4, 32)
        .cluster(2)
        .resident_blocks(2)
        .timeout(Some(Duration::from_secs(30)))
        .run(|| {
            match arch::block_idx().x {
                0 | 3 => {}
                1 => {
                    // SAFETY: no abort flag; the launch's failure stops the spin.
                    let mut spin = unsafe { crate::wait::Spin::new(core::ptr::null(), u64::MAX) };
                    let _ = spin.until(|| never.load(A::Relaxed) != 0);
                }
                _ => {
                    let (mbar, inbox) = cluster_target();
                    store_to(mbar, inbox, 1);
                }
            }
        })
        .unwrap_err();
    assert_misuse(&e, 2, "block 3 (cluster rank 1), which has not started");
}

#[test]
fn st_async_signalling_another_blocks_barrier_is_an_error() {
    let e = Launch::new(2, 32)
        .cluster(2)
        .run(|| {
            let (mbar, inbox) = cluster_target();
            cluster::sync();
            if cluster::rank() == 0 && arch::thread_idx().x == 0 {
                // SAFETY: none: the word goes to rank 1, its barrier is rank 0's, the misuse
                // under test.
                unsafe { cluster::store_async_u32(cluster::map(inbox, 1), 7, mbar.remote(0)) };
            }
            cluster::sync();
        })
        .unwrap_err();
    assert_misuse(&e, 0, "which is not in that block's shared memory");
}

/// Mbarrier misuse the GPU would not survive: a barrier used before `init`, a phase given
/// more arrivals than its count, an `init` count of zero.
/// One misuse of a fresh barrier, and a word its error names.
type MbarCase = (&'static str, fn(cluster::Mbarrier));

#[test]
fn mbarrier_misuse_is_an_error() {
    let cases: [MbarCase; 4] = [
        ("not initialised", |m| {
            // SAFETY: none: not initialised, the misuse under test.
            unsafe { m.arrive_expect_tx(4) }
        }),
        ("not initialised", |m| {
            // SAFETY: as above.
            let _ = unsafe { m.test_parity(0) };
        }),
        ("more arrivals than", |m| {
            // SAFETY: one arrival expected per phase; the second one is the misuse, while
            // the first phase still waits for its 4 bytes.
            unsafe {
                m.init(1);
                m.arrive_expect_tx(4);
                m.arrive_expect_tx(0);
            }
        }),
        ("count outside", |m| {
            // SAFETY: none: a count of zero, the misuse under test.
            unsafe { m.init(0) }
        }),
    ];
    for (needle, case) in cases {
        let e = Launch::new(1, 32)
            .run(|| {
                let word: *mut u64 = crate::shared_array!(EMU_TEST_MBAR_MISUSE: [u64; 1]);
                if arch::thread_idx().x == 0 {
                    // SAFETY: an 8-byte aligned shared word used only as this barrier.
                    case(unsafe { cluster::Mbarrier::new(word) });
                }
            })
            .unwrap_err();
        assert_misuse(&e, 0, needle);
    }
}
