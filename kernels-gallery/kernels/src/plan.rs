//! Pure arithmetic shared by the kernels and the host API: how work is split into 16-byte
//! packs, rank slices and launch shapes, and where things live in the gallery's scratch
//! window. Compiled for the GPU and the host alike, so the host plans exactly what the
//! kernels execute (and the math is unit-tested on the CPU).

// ANCHOR: pack_consts
/// Bytes moved per thread per access (one `v4.u32`).
pub const PACK: u64 = 16;

/// Most threads per block of a barrier-based gallery kernel (see [`spread`]).
pub const THREADS: u32 = 512;

/// Most threads per block of an LL kernel.
pub const LL_THREADS: u32 = 512;

/// Bytes of the LL header at offset 0 of the scratch window: the launch counters, one `u32`
/// per block index below [`LL_COUNTERS`] (all equal between launches; see `ll_path`).
pub const LL_HEADER: u64 = 4096;

/// Launch counters in the LL header: the most blocks an LL launch (or a fused two-shot launch,
/// which keeps its counters in the same layout) may have.
pub const LL_COUNTERS: u64 = 128;

const _: () = assert!(LL_COUNTERS * 4 <= LL_HEADER);

/// Bytes one 16-byte pack occupies in LL form (two `{lo, epoch, hi, epoch}` lines).
pub const LL_PACK: u64 = 32;
// ANCHOR_END: pack_consts

/// Packs touched by `len` bytes that start at byte `lead` (`0..16`) of a pack: 0 for none.
#[inline(always)]
pub const fn span_packs(lead: u64, len: u64) -> u64 {
    if len == 0 {
        0
    } else {
        (lead + len).div_ceil(PACK)
    }
}

/// The most packs any of blocks `0..n` touches when block `k` is the `bytes` bytes at byte
/// `first + k × bytes` (the per-rank blocks of an all-gather, reduce-scatter or all-to-all
/// buffer starting at byte offset `first`): what every rank's loop over packs covers.
#[inline(always)]
pub const fn block_packs(first: u64, bytes: u64, n: u64) -> u64 {
    let mut most = 0;
    let mut k = 0;
    // Leads repeat after 16 blocks.
    while k < n && k < PACK {
        let p = span_packs((first + k * bytes) % PACK, bytes);
        if p > most {
            most = p;
        }
        k += 1;
    }
    most
}

// ANCHOR: slice
/// `(first, end)` of the packs rank `rank` of `n` owns when `packs` are split into `n`
/// contiguous slices of `ceil(packs / n)` (the last ones may be shorter or empty).
#[inline(always)]
pub const fn slice(packs: u64, n: u64, rank: u64) -> (u64, u64) {
    let chunk = packs.div_ceil(n);
    let lo = min(rank * chunk, packs);
    let hi = min(lo + chunk, packs);
    (lo, hi)
}
// ANCHOR_END: slice

/// The largest slice of [`slice()`] (what one rank processes at most).
#[inline(always)]
pub const fn slice_len(packs: u64, n: u64) -> u64 {
    packs.div_ceil(n)
}

/// Whether the root of a broadcast over `n` ranks moves a slice like the others. With one
/// or two ranks it does (the data is cut into `n` slices): the root sends each byte once
/// anyway, and both ranks share the work. With more, it does not (see [`bcast_slice`]).
#[inline(always)]
pub const fn bcast_root_moves(n: u64) -> bool {
    n <= 2
}

/// `(first, end)` of the packs that rank `rank` reads from the root and stores into every
/// receiving rank in a broadcast of `packs` packs from `root` over `n` ranks. With
/// [`bcast_root_moves`], rank `rank` takes [`slice()`] `rank` of `n`. Otherwise the `n − 1`
/// ranks other than the root split the data, the `i`-th rank after the root
/// (`i = (rank − root − 1) mod n`) taking slice `i` of `n − 1`, and the root's slice is
/// empty: it sends each byte over NVLink once (its readers' slices), where `n` slices made
/// it send `2(n − 1)/n` of the data (also its own slice to every peer).
#[inline(always)]
pub const fn bcast_slice(packs: u64, n: u64, rank: u64, root: u64) -> (u64, u64) {
    if bcast_root_moves(n) {
        slice(packs, n, rank)
    } else if rank == root {
        (0, 0)
    } else {
        slice(packs, n - 1, (rank + n - root - 1) % n)
    }
}

/// The largest [`bcast_slice`] (what one rank moves at most).
#[inline(always)]
pub const fn bcast_slice_len(packs: u64, n: u64) -> u64 {
    if bcast_root_moves(n) {
        slice_len(packs, n)
    } else {
        slice_len(packs, n - 1)
    }
}

/// Blocks for `work` packs processed by `threads`-thread blocks, one pack per thread per
/// pass, between 1 and `max_blocks`.
#[inline(always)]
pub const fn blocks_for(work: u64, threads: u32, max_blocks: u32) -> u32 {
    let want = work.div_ceil(threads as u64);
    if want == 0 {
        1
    } else if want > max_blocks as u64 {
        max_blocks
    } else {
        want as u32
    }
}

/// Blocks and threads per block for `work` packs, one pack per thread per pass: the work
/// spread over as many blocks (at most `max_blocks`) of `min_threads` threads as it fills,
/// blocks growing (by warps, up to `max_threads`) only once there are `max_blocks` of them.
/// More, narrower blocks reach more SMs, so more loads and stores are in flight at once
/// (4×H200, bf16 two-shot all-reduce at 256 KiB: 7.9 µs with 128-thread blocks against
/// 9.1 µs with 512-thread ones, the same number of threads). Returns `(blocks, threads)`;
/// `min_threads ≤ max_threads`, both multiples of 32.
#[inline(always)]
pub const fn spread(work: u64, min_threads: u32, max_threads: u32, max_blocks: u32) -> (u32, u32) {
    let max_blocks = if max_blocks == 0 { 1 } else { max_blocks };
    let per_block = work.div_ceil(max_blocks as u64).div_ceil(32) * 32;
    let threads = if per_block < min_threads as u64 {
        min_threads
    } else if per_block > max_threads as u64 {
        max_threads
    } else {
        per_block as u32
    };
    (blocks_for(work, threads, max_blocks), threads)
}

// ANCHOR: ll_layout
/// The LL bank (0 or 1) and epoch (never 0) of LL launch number `counter`.
///
/// Banks alternate between consecutive launches, also across the wrap of the counter; a
/// bank's epochs grow by one every second launch, so a line left in the bank by an earlier
/// launch never carries the current epoch (until 2³¹ launches later).
#[inline(always)]
pub const fn ll_bank_epoch(counter: u32) -> (u32, u32) {
    (counter & 1, (counter >> 1) + 1)
}

/// Byte offset in the scratch window of the LL form of pack `pack`, sent by LSA rank `src`,
/// in bank `bank`, for a team of `n` ranks and a capacity of `cap` packs per sender.
#[inline(always)]
pub const fn ll_offset(bank: u32, src: u32, pack: u64, n: u32, cap: u64) -> u64 {
    LL_HEADER + ((bank as u64 * n as u64 + src as u64) * cap + pack) * LL_PACK
}
// ANCHOR_END: ll_layout

/// Bytes of the LL region (header included) for `n` ranks and `cap` packs per sender.
#[inline(always)]
pub const fn ll_region_bytes(n: u32, cap: u64) -> u64 {
    ll_offset(2, 0, 0, n, cap)
}

// ANCHOR: pipe_layout
/// Pipelined push kernels: bytes of the counter area at offset 0 of the push scratch for a
/// grid of `g` blocks and `n` ranks (two `u32` counters per block and peer, `ready` then
/// `freed`), rounded up to 4 KiB so the slots after it stay aligned.
#[inline(always)]
pub const fn pipe_flags_bytes(g: u64, n: u64) -> u64 {
    (2 * g * n * 4).div_ceil(4096) * 4096
}

/// Word index (in `u32`s from byte 0 of the push scratch) of block `b`'s `ready` counter for
/// sender `s` (`freed = false`) or its `freed` counter for receiver `s` (`freed = true`).
#[inline(always)]
pub const fn pipe_flag_word(g: u64, n: u64, b: u64, s: u64, freed: bool) -> u64 {
    (if freed { g * n } else { 0 }) + b * n + s
}

/// Byte offset in the push scratch of slot `q` (of `slots`) that sender `s` fills for block
/// `b`, each slot `chunk` packs.
#[inline(always)]
pub const fn pipe_slot_off(g: u64, n: u64, slots: u64, chunk: u64, b: u64, s: u64, q: u64) -> u64 {
    pipe_flags_bytes(g, n) + ((b * n + s) * slots + q) * chunk * PACK
}

/// Packs per slot when `scratch` bytes hold the counters and `g × n × slots` slots (0 when
/// they do not fit).
#[inline(always)]
pub const fn pipe_chunk(scratch: u64, g: u64, n: u64, slots: u64) -> u64 {
    let flags = pipe_flags_bytes(g, n);
    if scratch <= flags || g == 0 || n == 0 || slots == 0 {
        0
    } else {
        (scratch - flags) / (g * n * slots * PACK)
    }
}

/// Steps of a pipelined push kernel: every block walks the largest block range of the
/// largest slice (`slice` packs split over `g` blocks) in steps of `chunk` packs, so every
/// rank and block agrees on the count.
#[inline(always)]
pub const fn pipe_steps(slice: u64, g: u64, chunk: u64) -> u64 {
    if chunk == 0 {
        0
    } else {
        slice.div_ceil(g).div_ceil(chunk)
    }
}
// ANCHOR_END: pipe_layout

const fn min(a: u64, b: u64) -> u64 {
    if a < b { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_grids_cover_the_work_with_the_narrowest_blocks_that_fit_the_cap() {
        for (min, max) in [
            (32u32, 512u32),
            (64, 512),
            (128, 512),
            (512, 512),
            (96, 256),
        ] {
            for cap in [1u32, 2, 7, 16, 64, 128] {
                for work in [0u64, 1, 31, 32, 33, 255, 4096, 16_385, 1 << 20, 1 << 26] {
                    let (b, t) = spread(work, min, max, cap);
                    let what = std::format!("work {work} min {min} max {max} cap {cap}");
                    assert!(b >= 1 && b <= cap, "{what}: {b} blocks");
                    assert!(t >= min && t <= max && t % 32 == 0, "{what}: {t} threads");
                    if work <= u64::from(cap) * u64::from(max) {
                        // One pass covers the work.
                        assert!(u64::from(b) * u64::from(t) >= work, "{what}: {b} × {t}");
                    } else {
                        assert_eq!((b, t), (cap, max), "{what}");
                    }
                    if t > min {
                        // Narrower blocks would not have covered it with `cap` of them.
                        assert!(u64::from(cap) * u64::from(t - 32) < work, "{what}: {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn slices_cover_every_pack_exactly_once() {
        for packs in 0..200u64 {
            for n in 1..10u64 {
                let mut next = 0;
                for r in 0..n {
                    let (lo, hi) = slice(packs, n, r);
                    assert!(lo <= hi && hi <= packs);
                    assert!(hi - lo <= slice_len(packs, n));
                    if lo < hi {
                        assert_eq!(lo, next, "packs {packs} n {n} rank {r}");
                        next = hi;
                    }
                }
                assert_eq!(next, packs, "packs {packs} n {n}");
            }
        }
    }

    #[test]
    fn broadcast_slices_cover_every_pack_once_and_leave_the_root_out_from_three_ranks() {
        for packs in 0..120u64 {
            for n in 1..10u64 {
                for root in 0..n {
                    let mut seen = std::vec![0u32; packs as usize];
                    for r in 0..n {
                        let (lo, hi) = bcast_slice(packs, n, r, root);
                        assert!(lo <= hi && hi <= packs);
                        assert!(hi - lo <= bcast_slice_len(packs, n));
                        if r == root && n > 2 {
                            assert_eq!(lo, hi, "n {n}: the root moves nothing");
                        }
                        seen[lo as usize..hi as usize]
                            .iter_mut()
                            .for_each(|s| *s += 1);
                    }
                    assert!(
                        seen.iter().all(|&s| s == 1),
                        "packs {packs} n {n} root {root}: {seen:?}"
                    );
                }
            }
        }
        assert_eq!(bcast_slice_len(700, 8), 100);
        assert_eq!(bcast_slice_len(700, 2), 350);
    }

    #[test]
    fn span_and_block_packs_count_the_packs_a_range_touches() {
        // Counted byte by byte: the packs holding bytes lead..lead + len.
        let touched = |lead: u64, len: u64| {
            let mut packs = std::collections::BTreeSet::new();
            for b in lead..lead + len {
                packs.insert(b / PACK);
            }
            packs.len() as u64
        };
        for lead in 0..PACK {
            for len in 0..70 {
                assert_eq!(span_packs(lead, len), touched(lead, len), "{lead} {len}");
            }
        }
        // Blocks of `bytes` from `first`: the most any of `n` touches (leads repeat after 16).
        for first in [0u64, 4, 6, 8, 14] {
            for bytes in [0u64, 2, 4, 6, 20, 36, 4098] {
                for n in [1u64, 2, 3, 8, 17, 40] {
                    let most = (0..n)
                        .map(|k| touched((first + k * bytes) % PACK, bytes))
                        .max()
                        .unwrap_or(0);
                    assert_eq!(block_packs(first, bytes, n), most, "{first} {bytes} {n}");
                }
            }
        }
    }

    #[test]
    fn block_counts_stay_between_one_and_the_cap() {
        assert_eq!(blocks_for(0, 512, 32), 1);
        assert_eq!(blocks_for(1, 512, 32), 1);
        assert_eq!(blocks_for(513, 512, 32), 2);
        assert_eq!(blocks_for(1 << 30, 512, 32), 32);
    }

    #[test]
    fn ll_banks_alternate_and_epochs_never_repeat_in_a_bank_nor_hit_zero() {
        let mut last = [0u32; 2];
        for c in (0..100u32).chain(u32::MAX - 100..=u32::MAX).chain(0..4) {
            let (bank, epoch) = ll_bank_epoch(c);
            assert_ne!(epoch, 0);
            assert_eq!(bank, c & 1);
            assert_ne!(epoch, last[bank as usize], "counter {c}");
            last[bank as usize] = epoch;
        }
        // Across the wrap, consecutive launches still use different banks.
        assert_ne!(ll_bank_epoch(u32::MAX).0, ll_bank_epoch(0).0);
    }

    #[test]
    fn pipe_slots_and_counters_fit_the_scratch_without_overlapping() {
        for (scratch, g, n, slots) in [(32u64 << 20, 128u64, 8u64, 2u64), (1 << 20, 3, 4, 3)] {
            let chunk = pipe_chunk(scratch, g, n, slots);
            assert!(chunk > 0);
            let words = 2 * g * n;
            assert!(words * 4 <= pipe_flags_bytes(g, n));
            assert_eq!(pipe_flag_word(g, n, g - 1, n - 1, true), words - 1);
            assert_eq!(pipe_flag_word(g, n, 0, 0, true), g * n);
            let mut last_end = pipe_flags_bytes(g, n);
            for b in 0..g {
                for s in 0..n {
                    for q in 0..slots {
                        let o = pipe_slot_off(g, n, slots, chunk, b, s, q);
                        assert_eq!(o, last_end, "slots are contiguous and disjoint");
                        assert_eq!(o % 16, 0);
                        last_end = o + chunk * PACK;
                    }
                }
            }
            assert!(last_end <= scratch);
        }
        assert_eq!(pipe_chunk(4096, 1, 8, 2), 0);
    }

    #[test]
    fn pipe_steps_cover_the_largest_block_range() {
        for slice in [0u64, 1, 511, 512, 513, 100_000] {
            for g in [1u64, 7, 64] {
                for chunk in [1u64, 512, 2048] {
                    let steps = pipe_steps(slice, g, chunk);
                    for b in 0..g {
                        let (lo, hi) = super::slice(slice, g, b);
                        assert!(hi - lo <= steps * chunk);
                    }
                }
            }
        }
    }

    #[test]
    fn ll_slots_of_different_senders_and_banks_do_not_overlap() {
        let (n, cap) = (8u32, 100u64);
        let mut seen = std::collections::BTreeSet::new();
        for bank in 0..2 {
            for src in 0..n {
                for p in 0..cap {
                    let o = ll_offset(bank, src, p, n, cap);
                    assert!(o >= LL_HEADER && o + LL_PACK <= ll_region_bytes(n, cap));
                    assert_eq!(o % 16, 0);
                    assert!(seen.insert(o));
                }
            }
        }
    }
}
