//! The emulator's own checks, with small kernels written here.

use std::string::ToString;
use std::sync::atomic::{AtomicU32, Ordering as A};
use std::time::Duration;
use std::vec::Vec;

use super::*;
use crate::arch::{self, FULL_MASK};
use crate::cluster;
use crate::coop::{Coop, Lanes, Warp};

fn linear_tid() -> usize {
    let (t, d) = (arch::thread_idx(), arch::block_dim());
    ((t.z * d.y + t.y) * d.x + t.x) as usize
}

fn linear_block() -> usize {
    let (b, g) = (arch::block_idx(), arch::grid_dim());
    ((b.z * g.y + b.y) * g.x + b.x) as usize
}

#[test]
fn every_thread_of_a_3d_grid_runs_once_with_its_geometry() {
    let (grid, block) = (Dim3 { x: 3, y: 2, z: 2 }, Dim3 { x: 8, y: 4, z: 2 });
    let n = 12 * 64;
    let seen: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    Launch::new(grid, block)
        .resident_blocks(5)
        .run(|| {
            assert_eq!((arch::block_dim(), arch::grid_dim()), (block, grid));
            let id = linear_block() * 64 + linear_tid();
            let t = arch::thread_idx();
            assert_eq!(arch::lane_id(), (linear_tid() % 32) as u32);
            let code = (t.x + 8 * t.y + 32 * t.z) as usize == linear_tid();
            seen[id].fetch_add(if code { 1 } else { 100 }, A::Relaxed);
        })
        .unwrap();
    assert!(seen.iter().all(|s| s.load(A::Relaxed) == 1));
}

#[test]
fn sync_threads_orders_shared_memory_in_a_block_of_1024() {
    let out: Vec<AtomicU32> = (0..2048).map(|_| AtomicU32::new(0)).collect();
    Launch::new(2, 1024)
        .run(|| {
            let tile: *mut u32 = crate::shared_array!(EMU_TEST_TILE: [u32; 1024]);
            let t = arch::thread_idx().x as usize;
            let b = arch::block_idx().x as usize;
            // SAFETY: t < 1024; every block has its own tile.
            unsafe { tile.add(t).write_volatile((b * 1024 + t) as u32 + 1) };
            let n = arch::sync_threads_count(t.is_multiple_of(3));
            // SAFETY: as above; the barrier ordered the writes.
            let v = unsafe { tile.add(1023 - t).read_volatile() };
            out[b * 1024 + t].store(v ^ (n << 16), A::Relaxed);
        })
        .unwrap();
    for (i, o) in out.iter().enumerate() {
        let (b, t) = (i / 1024, i % 1024);
        assert_eq!(
            o.load(A::Relaxed),
            ((b * 1024 + 1023 - t) as u32 + 1) ^ (342 << 16)
        );
    }
}

#[test]
fn shared_arrays_start_zeroed_in_every_block_of_a_slot() {
    let dirty = AtomicU32::new(0);
    Launch::new(6, 64)
        .shared(256)
        .resident_blocks(2)
        .run(|| {
            let s: *mut u32 = crate::shared_array!(EMU_TEST_ZEROED: [u32; 64]);
            let d: *mut u32 = arch::dynamic_shared();
            let t = arch::thread_idx().x as usize;
            assert_eq!(arch::dynamic_shared_size(), 256);
            // SAFETY: t < 64 words of each array.
            unsafe {
                if s.add(t).read_volatile() != 0 || d.add(t).read_volatile() != 0 {
                    dirty.fetch_add(1, A::Relaxed);
                }
            }
            arch::sync_threads();
            // SAFETY: as above.
            unsafe {
                s.add(t).write_volatile(7);
                d.add(t).write_volatile(9);
            }
        })
        .unwrap();
    assert_eq!(dirty.load(A::Relaxed), 0);
}

#[test]
fn warp_collectives_follow_ptx_and_partial_masks_meet_separately() {
    let out: Vec<AtomicU32> = (0..96 * 6).map(|_| AtomicU32::new(0)).collect();
    Launch::new(1, 96)
        .run(|| {
            let t = arch::thread_idx().x;
            let lane = arch::lane_id();
            let v = t * 10;
            let half = if lane < 16 { 0x0000_ffff } else { 0xffff_0000 };
            let l = Lanes::new(half);
            let words = [
                arch::shfl_idx(FULL_MASK, v, 3),
                arch::shfl_up(FULL_MASK, v, 2),
                arch::shfl_down(FULL_MASK, v, 31),
                arch::shfl_xor(FULL_MASK, (u64::from(v) << 32) | 5, 16) as u32,
                u32::from(l.any(t == 40)),
                arch::ballot(half, lane.is_multiple_of(2)),
            ];
            Warp::new().sync();
            for (k, w) in words.into_iter().enumerate() {
                out[6 * t as usize + k].store(w, A::Relaxed);
            }
        })
        .unwrap();
    for t in 0..96u32 {
        let lane = t % 32;
        let w0 = t - lane;
        let half = if lane < 16 {
            0x0000_ffffu32
        } else {
            0xffff_0000
        };
        let want = [
            (w0 + 3) * 10,
            if lane >= 2 { (t - 2) * 10 } else { t * 10 },
            if lane == 0 { (t + 31) * 10 } else { t * 10 },
            5,
            u32::from(t / 16 == 40 / 16),
            0x5555_5555 & half,
        ];
        let got: Vec<u32> = (0..6)
            .map(|k| out[6 * t as usize + k].load(A::Relaxed))
            .collect();
        assert_eq!(got, want, "thread {t}");
    }
}

#[test]
fn a_partial_last_warp_counts_only_its_existing_lanes() {
    let out = AtomicU32::new(0);
    Launch::new(1, 40)
        .run(|| {
            let b = arch::ballot(FULL_MASK, true);
            let active = arch::active_mask();
            if arch::thread_idx().x == 39 {
                out.store(b, A::Relaxed);
                assert_eq!(active, 0xff);
            }
        })
        .unwrap();
    assert_eq!(out.load(A::Relaxed), 0xff);
}

#[test]
fn activemask_leaves_out_lanes_that_returned_early() {
    let out: Vec<AtomicU32> = (0..64).map(|_| AtomicU32::new(0)).collect();
    Launch::new(1, 64)
        .run(|| {
            let t = arch::thread_idx().x;
            if arch::lane_id() < 16 {
                return;
            }
            let active = Lanes::coalesced();
            let v = arch::shfl_down(active.mask(), t, 1);
            out[t as usize].store(active.mask() ^ v, A::Relaxed);
        })
        .unwrap();
    for t in (0..64u32).filter(|t| t % 32 >= 16) {
        let next = if t % 32 == 31 { t } else { t + 1 };
        assert_eq!(
            out[t as usize].load(A::Relaxed),
            0xffff_0000 ^ next,
            "thread {t}"
        );
    }
}

#[test]
fn named_barriers_count_threads_and_arrive_does_not_wait() {
    let order = AtomicU32::new(0);
    let seen = AtomicU32::new(u32::MAX);
    Launch::new(1, 128)
        .run(|| {
            let t = arch::thread_idx().x;
            if t >= 64 {
                // producers (warps 2-3): publish, arrive, leave
                if t == 64 {
                    order.store(42, A::Relaxed);
                }
                arch::barrier_arrive(3, 128);
            } else {
                arch::barrier_sync(3, 128);
                if t == 0 {
                    seen.store(order.load(A::Relaxed), A::Relaxed);
                }
            }
        })
        .unwrap();
    assert_eq!(seen.load(A::Relaxed), 42);
}

#[test]
fn a_barrier_skipped_by_half_the_block_is_a_deadlock_error() {
    let e = Launch::new(2, 64)
        .run(|| {
            if arch::thread_idx().x < 32 {
                arch::sync_threads();
            }
        })
        .unwrap_err();
    assert!(matches!(e, EmuError::Deadlock { .. }), "{e}");
    assert!(e.to_string().contains("barrier 0 has"), "{e}");
}

#[test]
fn a_warp_collective_missing_exited_lanes_is_an_error() {
    let e = Launch::new(1, 32)
        .run(|| {
            if arch::lane_id() == 7 {
                return;
            }
            arch::shfl_xor(FULL_MASK, 1u32, 1);
        })
        .unwrap_err();
    assert!(matches!(e, EmuError::Misuse { .. }), "{e}");
}

#[test]
fn collectives_used_against_their_contract_are_reported() {
    let not_in_mask = Launch::new(1, 32)
        .run(|| {
            arch::sync_warp(0xffff_fffe);
        })
        .unwrap_err();
    assert!(
        not_in_mask
            .to_string()
            .contains("excludes the calling lane 0"),
        "{not_in_mask}"
    );
    let mixed = Launch::new(1, 32)
        .run(|| {
            if arch::lane_id() < 16 {
                arch::ballot(FULL_MASK, true);
            } else {
                arch::vote_any(FULL_MASK, true);
            }
        })
        .unwrap_err();
    assert!(
        mixed.to_string().contains("in different collectives"),
        "{mixed}"
    );
    let counts = Launch::new(1, 128)
        .run(|| {
            let n = if arch::thread_idx().x < 64 { 64 } else { 128 };
            arch::barrier_sync(1, n);
        })
        .unwrap_err();
    // Misuse when the two counts meet in one round, a deadlock when the 64 completed first.
    assert!(
        matches!(counts, EmuError::Misuse { .. } | EmuError::Deadlock { .. }),
        "{counts}"
    );
}

/// A `Lanes` whose mask leaves out the caller (an empty mask in particular: size 0) is no
/// group the caller belongs to; `Lanes::new` traps instead of building it.
#[test]
fn lanes_without_the_calling_lane_trap_at_construction() {
    for (mask, lane) in [(0u32, 0u32), (0b1, 3)] {
        let built = AtomicU32::new(0);
        let e = Launch::new(1, 32)
            .run(|| {
                if arch::lane_id() == lane {
                    let l = Lanes::new(mask);
                    built.store(1 + l.size(), A::Relaxed);
                }
            })
            .unwrap_err();
        assert_eq!(
            e,
            EmuError::Trap {
                block: Dim3 { x: 0, y: 0, z: 0 },
                thread: Dim3 {
                    x: lane,
                    y: 0,
                    z: 0
                }
            },
            "mask {mask:#b} on lane {lane}"
        );
        assert_eq!(built.load(A::Relaxed), 0);
    }
}

#[test]
fn trap_and_panic_name_the_block_and_thread() {
    let e = Launch::new(3, 32)
        .run(|| {
            if arch::block_idx().x == 2 && arch::thread_idx().x == 5 {
                arch::trap();
            }
            arch::sync_threads();
        })
        .unwrap_err();
    assert_eq!(
        e,
        EmuError::Trap {
            block: Dim3 { x: 2, y: 0, z: 0 },
            thread: Dim3 { x: 5, y: 0, z: 0 }
        }
    );
    let e = Launch::new(1, (4, 4))
        .run(|| {
            let t = arch::thread_idx();
            assert!(t.x != 1 || t.y != 2, "bad index");
            arch::sync_threads();
        })
        .unwrap_err();
    match e {
        EmuError::Panic {
            thread, message, ..
        } => {
            assert_eq!(
                (thread, message.as_str()),
                (Dim3 { x: 1, y: 2, z: 0 }, "bad index")
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn the_watchdog_ends_an_endless_wait() {
    let flag = AtomicU32::new(0);
    let e = Launch::new(1, 4)
        .timeout(Some(Duration::from_millis(200)))
        .run(|| {
            // SAFETY: no abort flag.
            let mut spin = unsafe { crate::wait::Spin::new(core::ptr::null(), u64::MAX) };
            let _ = spin.until(|| flag.load(A::Relaxed) != 0);
        })
        .unwrap_err();
    assert!(matches!(e, EmuError::Timeout { .. }), "{e}");
}

/// A spin on a bare `mem::load` (no `Spin`) still ends: the watchdog fails the launch and
/// the next load stops the thread; so does another thread's trap.
#[test]
fn a_spin_on_a_bare_load_ends_with_the_launch() {
    let mut flag = 0u32;
    let p = &raw mut flag;
    let spin = || {
        // SAFETY: `flag` outlives the launch; only loads here.
        while unsafe { crate::mem::load(p, crate::mem::LoadOrder::Relaxed, crate::mem::Scope::Sys) }
            == 0
        {}
    };
    // SAFETY: `p` is only loaded from.
    let e = unsafe {
        Launch::new(1, 2)
            .timeout(Some(Duration::from_millis(200)))
            .run_unsync(spin)
    }
    .unwrap_err();
    assert!(matches!(e, EmuError::Timeout { .. }), "{e}");
    // SAFETY: as above.
    let e = unsafe {
        Launch::new(2, 2)
            .timeout(Some(Duration::from_secs(60)))
            .run_unsync(|| {
                if arch::block_idx().x == 1 && arch::thread_idx().x == 0 {
                    arch::trap();
                }
                spin();
            })
    }
    .unwrap_err();
    assert!(matches!(e, EmuError::Trap { .. }), "{e}");
}

#[test]
fn bad_configurations_and_nested_launches_are_refused() {
    assert!(matches!(
        Launch::new(1, 1025).run(|| {}),
        Err(EmuError::InvalidLaunch(_))
    ));
    assert!(matches!(
        Launch::new(0, 1).run(|| {}),
        Err(EmuError::InvalidLaunch(_))
    ));
    let nested = std::sync::Mutex::new(None);
    launch(1, 1, 0, || {
        *nested.lock().unwrap() = Some(Launch::new(1, 1).run(|| {}));
    })
    .unwrap();
    assert!(matches!(
        nested.into_inner().unwrap(),
        Some(Err(EmuError::InvalidLaunch(_)))
    ));
}

#[test]
fn outside_a_launch_the_backends_describe_one_thread() {
    assert_eq!(arch::block_dim(), 1.into());
    assert_eq!(arch::ballot(FULL_MASK, true), 1);
    assert_eq!(Warp::new().thread_rank(), 0);
    arch::sync_threads();
}

/// A registered kernel: every thread adds `add` to its element.
#[crate::kernel]
#[allow(dead_code)]
unsafe fn registry_test_add(out: *mut u32, n: u64, add: u32) {
    let i = (arch::block_idx().x * arch::block_dim().x + arch::thread_idx().x) as u64;
    if i < n {
        // SAFETY: `out` holds `n` elements (the caller's contract).
        unsafe { *out.add(i as usize) += add };
    }
}

#[test]
fn kernels_are_registered_with_their_parameter_sizes_and_run_through_the_shim() {
    let found: Vec<_> = registry::find("registry_test_add").collect();
    assert_eq!(found.len(), 1);
    let e = found[0];
    assert_eq!(e.param_sizes, &[8, 8, 4]);
    assert!(e.module_path.ends_with("emu::tests"), "{}", e.module_path);
    assert!(!registry::all().is_empty());
    let mut data = [1u32; 100];
    let (mut out, mut n, mut add) = (data.as_mut_ptr(), 100u64, 5u32);
    let args: [*mut core::ffi::c_void; 3] = [
        (&raw mut out).cast(),
        (&raw mut n).cast(),
        (&raw mut add).cast(),
    ];
    let argp = args.as_ptr();
    // SAFETY: the pointers point at values of the declared types, alive for the launch; the
    // 4 × 32 threads cover 100 distinct elements of `data`.
    unsafe { Launch::new(4, 32).run_unsync(|| (e.shim)(argp)) }.unwrap();
    assert!(data.iter().all(|&x| x == 6));
}

// ---------------------------------------------------------------------------------------
// Thread block clusters.

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
            let (rank, size) = super::cluster_geometry().unwrap();
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
    assert_eq!(super::cluster_geometry(), None);
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
                let remote = |p: *mut u32| super::cluster_map(p.cast(), 1).unwrap().cast::<u32>();
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
