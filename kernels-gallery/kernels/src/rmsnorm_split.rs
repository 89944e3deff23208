//! Token rows split across blocks for the fused RMSNorm kernels: the `(row, segment)` work
//! items, the grid the host launches, the layout of the fused scratch region, and the tagged
//! partial sums through which the blocks of one row agree on its sum of squares.
//!
//! A row of `ppr` packs is cut into `segs` contiguous segments ([`seg_range`]); work item
//! `row × segs + seg` is one block's share of a row, and block `b` of a grid of `g` takes
//! items `b, b + g, …`. When `g` is a multiple of `segs` (what [`split`] plans), the items of
//! a row are all taken in the same pass, by co-resident blocks.
//!
//! Combining a row in the LL kernels: the blocks of a row form one thread block cluster and
//! exchange their partial sums through each other's shared memory (`RowJoin` in
//! [`crate::rmsnorm`]). In the barrier two-shot, whose row owner combines the segments before
//! pushing the row's scale: each block computes the sum of squares of its segment and
//! publishes it in the item's slot as one 8-byte word `{f32 bits, tag}` ([`slot_word`]), the tag being the
//! launch's (never 0, [`tag`]). Every block that needs the row's total reads the `segs` slots
//! of the row in segment order, polling (bounded) until each carries this launch's tag, so
//! every block, on every rank, adds the same partials in the same order and gets the same
//! total. Slots are never reset: a word left by an earlier launch carries an older tag.
//!
//! The fused region of the gallery scratch window (`Collectives::fused_off`):
//!
//! | bytes | what |
//! |---|---|
//! | `[0, HEADER)` | launch counters of the barrier two-shot (the LL header layout) |
//! | [`bar_slot_off`] | partials of the barrier two-shot (written and read on the row's owner) |
//! | [`inv_off`] | the scales `rsqrt(mean(h²) + eps)` of the barrier two-shot's items (f32 each, pushed by the row's owner) |
//! | [`h_off`] | the `h` rows of the barrier two-shot |

use symcomm_device::mem::{self, LoadOrder, Scope, StoreOrder};
use symcomm_device::wait::{Spin, WaitError};

use crate::plan;
use crate::rmsnorm::MAX_PACKS;

/// Most segments of a row.
pub const MAX_SEGS: u64 = 8;

/// Most work items (`tokens × segs`) that have a slot: the barrier two-shot refuses more rows,
/// and [`split`] keeps one block per row beyond it.
pub const MAX_ITEMS: u64 = 1 << 16;

/// Most threads of a fused launch, all blocks together: every block of a row must be
/// resident at once (64 blocks of 512 threads, 128 of 256: far below what an H100/H200
/// holds).
pub const MAX_GRID_THREADS: u32 = 64 * 512;

/// Bytes of one slot.
pub const SLOT: u64 = 8;

/// Bytes of the header at the start of the fused region (the LL header layout: one launch
/// counter per block index).
pub const HEADER: u64 = plan::LL_HEADER;

/// Byte offset in the fused region of the barrier two-shot's slot of item `item`.
#[inline(always)]
pub const fn bar_slot_off(item: u64) -> u64 {
    HEADER + item * SLOT
}

/// Byte offset in the fused region of the scale (f32 bits) of item `item` of the barrier
/// two-shot.
#[inline(always)]
pub const fn inv_off(item: u64) -> u64 {
    HEADER + MAX_ITEMS * SLOT + item * 4
}

/// Byte offset in the fused region of row `row`'s `h` copy (barrier two-shot).
#[inline(always)]
pub const fn h_off(row: u64, hidden: u64) -> u64 {
    HEADER + MAX_ITEMS * SLOT + MAX_ITEMS * 4 + row * hidden * 2
}

/// Bytes of the fused region before the `h` rows.
pub const H_BASE: u64 = h_off(0, 0);

/// `(first, end)` packs of segment `seg` of a row of `ppr` packs cut into `segs` balanced
/// segments (lengths differ by at most one; none is empty when `segs ≤ ppr`).
#[inline(always)]
pub const fn seg_range(ppr: u64, segs: u64, seg: u64) -> (u64, u64) {
    (seg * ppr / segs, (seg + 1) * ppr / segs)
}

/// The slot tag of launch number `counter`: never 0 (the value of a zeroed slot), different
/// for consecutive counters (also across the wrap), repeating only after about 2³² launches.
#[inline(always)]
pub const fn tag(counter: u32) -> u32 {
    if counter == u32::MAX { 2 } else { counter + 1 }
}

/// The slot word carrying `partial` for the launch tagged `tag`.
#[inline(always)]
pub const fn slot_word(tag: u32, partial: f32) -> u64 {
    partial.to_bits() as u64 | (tag as u64) << 32
}

/// The partial in `word` if it carries `tag`.
#[inline(always)]
pub const fn slot_value(word: u64, tag: u32) -> Option<f32> {
    if (word >> 32) as u32 == tag {
        Some(f32::from_bits(word as u32))
    } else {
        None
    }
}

/// Segments per row and blocks of a fused launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Segments per row (1: one block per row, no slots).
    pub segs: u64,
    /// Blocks of the launch (a multiple of `segs`).
    pub blocks: u32,
}

/// The split of a launch whose blocks process `rows` rows of `ppr` packs (`tokens` rows in
/// all), `threads`-thread blocks, at most `max_blocks` blocks: a grid as wide as the plain
/// all-reduce would use for those packs (one pack per thread per pass, at most `max_blocks`
/// blocks and [`MAX_GRID_THREADS`] threads), with rows cut into as many segments as that
/// grid has room for (at most [`MAX_SEGS`] and `ppr`; 1 if `tokens × segs` exceeds
/// [`MAX_ITEMS`]), and into at least as many as a block needs to hold a segment
/// (`MAX_PACKS × threads` packs) where that is possible.
///
/// A segment fits one block (`ppr.div_ceil(segs) ≤ MAX_PACKS × threads`) whenever a row
/// does, and otherwise only if the row could be cut that finely within those limits: the
/// caller checks it on the result.
#[inline(always)]
pub const fn split(tokens: u64, rows: u64, ppr: u64, threads: u32, max_blocks: u32) -> Split {
    let most = MAX_GRID_THREADS / if threads == 0 { 1 } else { threads };
    let cap = if max_blocks == 0 {
        1
    } else if max_blocks > most {
        most
    } else {
        max_blocks
    };
    let cap = if cap == 0 { 1 } else { cap };
    let rows = if rows == 0 { 1 } else { rows };
    let want = plan::blocks_for(rows * ppr, threads, cap) as u64;
    let mut segs = want / rows;
    let fit = ppr.div_ceil(MAX_PACKS as u64 * threads as u64);
    if segs < fit {
        segs = fit;
    }
    if segs > MAX_SEGS {
        segs = MAX_SEGS;
    }
    if segs > ppr {
        segs = ppr;
    }
    if segs > cap as u64 {
        segs = cap as u64;
    }
    if segs == 0 || tokens.saturating_mul(segs) > MAX_ITEMS {
        segs = 1;
    }
    // `segs ≤ cap`, so at least one row's segments fit the grid.
    let per_pass = (cap as u64 / segs) * segs;
    let items = rows * segs;
    let blocks = if items < per_pass { items } else { per_pass };
    Split {
        segs,
        blocks: blocks as u32,
    }
}

/// True when a segment of `split` holds at most `MAX_PACKS × threads` packs of a `ppr`-pack
/// row (one block can hold it).
#[inline(always)]
pub const fn fits(s: Split, ppr: u64, threads: u32) -> bool {
    ppr.div_ceil(s.segs) <= MAX_PACKS as u64 * threads as u64
}

/// Publishes `partial` in the slot at `slot` for the launch tagged `tag`. One thread calls it.
///
/// # Safety
/// `slot` is an 8-byte aligned global address (this GPU's or an LSA peer's) that only this
/// item's block writes in this launch.
///
/// # Ordering
/// Relaxed at system scope: the word carries its own tag, it publishes nothing else.
#[inline(always)]
pub unsafe fn publish(slot: u64, tag: u32, partial: f32) {
    // SAFETY: the caller's slot.
    unsafe {
        mem::store(
            slot as *mut u64,
            slot_word(tag, partial),
            StoreOrder::Relaxed,
            Scope::Sys,
        )
    };
}

/// Calls `f(0)`, …, `f(MAX_SEGS - 1)` as straight-line code, so that arrays indexed by the
/// segment stay in registers.
#[inline(always)]
fn each_seg(mut f: impl FnMut(usize)) {
    f(0);
    f(1);
    f(2);
    f(3);
    f(4);
    f(5);
    f(6);
    f(7);
}
const _: () = assert!(MAX_SEGS == 8, "each_seg spells out MAX_SEGS calls");

/// The sum, in segment order, of the `segs` partials of a row tagged `tag` at
/// `slots[0..segs]` (this GPU's memory), each polled until it carries `tag` (bounded wait).
/// The first load of every slot is issued before any is looked at, so partials that are
/// already there cost one memory round trip, not one per segment.
///
/// # Safety
/// `slots` is an 8-byte aligned global address valid for `segs ≤ MAX_SEGS` slots, each of
/// which some block publishes in this launch; `abort` is null or a valid global `u32`.
///
/// # Ordering
/// Relaxed at system scope (the partials carry their tags).
///
/// # Errors
/// [`WaitError`] if a slot does not get this launch's tag in time (or the abort flag rises).
#[inline(always)]
pub unsafe fn gather(
    slots: u64,
    segs: u64,
    tag: u32,
    abort: *const u32,
    timeout_ns: u64,
) -> Result<f32, WaitError> {
    // SAFETY: slot `s < segs` lies inside the caller's slots.
    let load = |s: usize| unsafe {
        mem::load(
            (slots + s as u64 * SLOT) as *const u64,
            LoadOrder::Relaxed,
            Scope::Sys,
        )
    };
    let mut words = [0u64; MAX_SEGS as usize];
    each_seg(|s| {
        if (s as u64) < segs {
            words[s] = load(s);
        }
    });
    let mut total = 0.0f32;
    let mut res = Ok(());
    each_seg(|s| {
        if (s as u64) >= segs || res.is_err() {
            return;
        }
        let v = match slot_value(words[s], tag) {
            Some(v) => v,
            None => {
                // SAFETY: the caller's abort flag.
                let mut spin = unsafe { Spin::new(abort, timeout_ns) };
                let mut got = 0.0;
                res = spin.until(|| match slot_value(load(s), tag) {
                    Some(v) => {
                        got = v;
                        true
                    }
                    None => false,
                });
                got
            }
        };
        total += v;
    });
    res.map(|()| total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn segments_cover_every_pack_of_a_row_once() {
        for ppr in 1..300u64 {
            for segs in 1..=MAX_SEGS.min(ppr) {
                let mut next = 0;
                for seg in 0..segs {
                    let (lo, hi) = seg_range(ppr, segs, seg);
                    assert_eq!(lo, next, "ppr {ppr} segs {segs} seg {seg}");
                    assert!(hi > lo, "empty segment: ppr {ppr} segs {segs} seg {seg}");
                    assert!(hi - lo <= ppr.div_ceil(segs));
                    next = hi;
                }
                assert_eq!(next, ppr);
            }
        }
    }

    #[test]
    fn a_split_keeps_a_rows_segments_in_one_pass_of_a_coresident_grid() {
        for threads in [32u32, 64, 128, 256, 512] {
            for max_blocks in [1u32, 2, 3, 16, 64, 128] {
                for tokens in [1u64, 2, 3, 7, 16, 33, 128, 70_000] {
                    for ppr in [1u64, 2, 7, 64, 128, 512, 1024] {
                        let most = MAX_GRID_THREADS / threads;
                        let fit = ppr.div_ceil(MAX_PACKS as u64 * threads as u64);
                        if fit > MAX_SEGS.min(max_blocks.min(most) as u64)
                            || (fit > 1 && tokens * fit > MAX_ITEMS)
                        {
                            // No split fits: the caller sees it and takes wider blocks.
                            let s = split(tokens, rows_of(tokens), ppr, threads, max_blocks);
                            assert!(!fits(s, ppr, threads));
                            continue;
                        }
                        let rows = rows_of(tokens);
                        let s = split(tokens, rows, ppr, threads, max_blocks);
                        let what = format!(
                            "tokens {tokens} rows {rows} ppr {ppr} threads {threads} max {max_blocks}: {s:?}"
                        );
                        assert!(s.segs >= 1 && s.segs <= MAX_SEGS && s.segs <= ppr, "{what}");
                        assert!(s.blocks >= 1, "{what}");
                        assert!(s.blocks <= max_blocks.clamp(1, most), "{what}");
                        assert_eq!(s.blocks as u64 % s.segs, 0, "{what}");
                        assert!(s.blocks as u64 <= rows * s.segs, "{what}");
                        assert!(s.segs == 1 || tokens * s.segs <= MAX_ITEMS, "{what}");
                        // A segment fits one block's registers.
                        assert!(fits(s, ppr, threads), "{what}");
                    }
                }
            }
        }
    }

    /// Rows per launch of a test case: all of them, or a rank's share.
    fn rows_of(tokens: u64) -> u64 {
        tokens.div_ceil(1 + tokens % 3)
    }

    #[test]
    fn narrow_blocks_cut_rows_into_segments_that_fit_them() {
        // 128 × 8192 on 4 ranks with 128-thread blocks: a block holds 256 packs of 1024.
        let s = split(128, 32, 1024, 128, 128);
        assert_eq!(
            s,
            Split {
                segs: 4,
                blocks: 128
            }
        );
        assert!(fits(s, 1024, 128));
        // 128 × 4096 on 4 ranks: 128 blocks of 128 threads instead of 32 of 512.
        assert_eq!(
            split(128, 32, 512, 128, 128),
            Split {
                segs: 4,
                blocks: 128
            }
        );
        // A grid too small to cut the row finely enough: the caller falls back.
        assert!(!fits(split(128, 32, 1024, 128, 2), 1024, 128));
    }

    #[test]
    fn small_batches_spread_a_row_over_as_many_blocks_as_the_plain_all_reduce() {
        // 1 × 8192 bf16 (1024 packs), 512 threads: the plain one-shot uses 2 blocks.
        assert_eq!(split(1, 1, 1024, 512, 16), Split { segs: 2, blocks: 2 });
        // 1 × 4096: one block, as the plain all-reduce.
        assert_eq!(split(1, 1, 512, 512, 16), Split { segs: 1, blocks: 1 });
        // 128 × 8192 on 4 ranks (32 rows each): 64 blocks, 2 per row.
        assert_eq!(
            split(128, 32, 1024, 512, 64),
            Split {
                segs: 2,
                blocks: 64
            }
        );
        // 16 × 4096 one-shot: 16 blocks, one per row.
        assert_eq!(
            split(16, 16, 512, 512, 16),
            Split {
                segs: 1,
                blocks: 16
            }
        );
        // Too many rows for the slots: one block per row.
        assert_eq!(split(MAX_ITEMS, 1, 1024, 512, 64).segs, 1);
    }

    #[test]
    fn tags_are_never_zero_and_differ_between_consecutive_launches() {
        for c in (0..10u32).chain(u32::MAX - 10..=u32::MAX) {
            assert_ne!(tag(c), 0);
            assert_ne!(tag(c), tag(c.wrapping_add(1)), "counter {c}");
        }
        let w = slot_word(tag(5), 1.5);
        assert_eq!(slot_value(w, tag(5)), Some(1.5));
        assert_eq!(slot_value(w, tag(6)), None);
        assert_eq!(slot_value(0, tag(u32::MAX)), None);
    }

    #[test]
    fn the_regions_of_the_fused_scratch_do_not_overlap() {
        assert!(HEADER <= bar_slot_off(0));
        assert!(bar_slot_off(MAX_ITEMS) <= inv_off(0));
        assert!(inv_off(MAX_ITEMS) <= H_BASE);
        assert_eq!(H_BASE % 16, 0);
        assert_eq!(h_off(3, 8), H_BASE + 48);
    }
}
