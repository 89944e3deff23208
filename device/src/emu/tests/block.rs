//! Inside one block: geometry, block barriers, shared memory, warp collectives and their
//! misuse.

use super::*;

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
