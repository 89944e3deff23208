//! Token rows split across blocks for the fused RMSNorm kernels: the `(row, segment)` work
//! items, the grid the host launches and the layout of the fused scratch region.
//!
//! A row of `ppr` packs is cut into `segs` contiguous segments ([`seg_range`]); work item
//! `row × segs + seg` is one block's share of a row, and block `b` of a grid of `g` takes
//! items `b, b + g, …`. When `g` is a multiple of `segs` (what [`split`] plans), the items of
//! a row are all taken in the same pass, by the `segs` consecutive blocks that the host
//! launches as one thread block cluster; they combine the row's sum of squares through each
//! other's shared memory (`RowJoin` in [`crate::rmsnorm`]).
//!
//! The fused region of the gallery scratch window (`Collectives::fused_off`), used by the
//! barrier two-shot:
//!
//! | bytes | what |
//! |---|---|
//! | [`inv_off`] | the scales `rsqrt(mean(h²) + eps)` of the items (f32 each, pushed by the row's owner) |
//! | [`h_off`] | the `h` rows (pushed by the row's owner) |

use crate::plan;

/// Most packs of a row one thread of the row kernels holds (so
/// `hidden ≤ 8 × MAX_PACKS × block size`); a segment of a row fits one block when it has at
/// most `MAX_PACKS × threads` packs.
pub const MAX_PACKS: usize = 2;

/// Most bytes of rows (`tokens × hidden` bf16: 128 × 8192 and beyond) the two-shot fused
/// kernel with barriers takes: what the `h` rows of the fused region hold.
pub const FUSED_ROW_BYTES: u64 = 8 << 20;

/// Bytes of the fused region of the scratch window: the scales of [`MAX_ITEMS`] items, then
/// [`FUSED_ROW_BYTES`] of `h` rows.
pub const FUSED_SCRATCH_BYTES: u64 = H_BASE + FUSED_ROW_BYTES;

/// Most segments of a row.
pub const MAX_SEGS: u64 = 8;

/// Most work items (`tokens × segs`) that have a scale in the fused region: the barrier
/// two-shot refuses more rows, and [`split`] keeps one block per row beyond it.
pub const MAX_ITEMS: u64 = 1 << 16;

/// Most threads of a fused launch, all blocks together: every block of a row must be
/// resident at once (64 blocks of 512 threads, 128 of 256: far below what an H100/H200
/// holds).
pub const MAX_GRID_THREADS: u32 = 64 * 512;

/// Byte offset in the fused region of the scale (f32 bits) of item `item` of the barrier
/// two-shot.
#[inline(always)]
pub const fn inv_off(item: u64) -> u64 {
    item * 4
}

/// Byte offset in the fused region of row `row`'s `h` copy (barrier two-shot).
#[inline(always)]
pub const fn h_off(row: u64, hidden: u64) -> u64 {
    MAX_ITEMS * 4 + row * hidden * 2
}

/// Bytes of the fused region before the `h` rows.
pub const H_BASE: u64 = h_off(0, 0);

/// `(first, end)` packs of segment `seg` of a row of `ppr` packs cut into `segs` balanced
/// segments (lengths differ by at most one; none is empty when `segs ≤ ppr`).
#[inline(always)]
pub const fn seg_range(ppr: u64, segs: u64, seg: u64) -> (u64, u64) {
    (seg * ppr / segs, (seg + 1) * ppr / segs)
}

/// Segments per row and blocks of a fused launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Segments per row (1: one block per row, no join, no cluster).
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
        // Too many items for the scales: one block per row.
        assert_eq!(split(MAX_ITEMS, 1, 1024, 512, 64).segs, 1);
    }

    #[test]
    fn the_regions_of_the_fused_scratch_do_not_overlap() {
        assert_eq!(inv_off(0), 0);
        assert!(inv_off(MAX_ITEMS) <= H_BASE);
        assert_eq!(H_BASE % 16, 0);
        assert_eq!(h_off(3, 8), H_BASE + 48);
    }
}
