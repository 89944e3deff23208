//! Launch shapes and scratch sizes: the grid of each kind of launch for its work, the packs
//! per slot of the pipelined push, and the sizes of the scratch windows the knobs imply.

use symcomm_gallery_kernels::plan;

use super::knobs::Tuning;

impl Tuning {
    /// Bytes of the push scratch window for `n` ranks: the counters of `max_blocks` blocks,
    /// then the slots (0 when the push kernels are off).
    pub fn push_window_bytes(&self, n: usize) -> u64 {
        if self.push_scratch == 0 {
            return 0;
        }
        plan::pipe_flags_bytes(u64::from(self.max_blocks), n as u64) + self.push_scratch as u64
    }

    /// `(blocks, chunk)` of a pipelined push launch over `n` ranks whose largest slice is
    /// `slice` packs: blocks as for any barrier-based kernel, and the packs per slot: what
    /// the scratch holds for that grid, no more than one block's part of the slice, rounded
    /// down to whole passes of the block's threads when it is larger than one pass.
    pub fn push_shape(&self, n: usize, slice: u64, threads: u32) -> (u32, u64) {
        let g = plan::blocks_for(slice, threads, self.max_blocks);
        let room = plan::pipe_chunk(
            self.push_window_bytes(n),
            u64::from(g),
            n as u64,
            u64::from(self.push_slots),
        );
        let part = slice.div_ceil(u64::from(g)).max(1);
        let mut chunk = room.min(part);
        let pass = u64::from(threads);
        if chunk > pass {
            chunk -= chunk % pass;
        }
        (g, chunk)
    }

    /// `(blocks, threads)` of a barrier-based kernel for `work` packs, one per thread per
    /// pass (spread over the grid: [`plan::spread`]).
    pub fn shape(&self, work: u64) -> (u32, u32) {
        plan::spread(work, self.min_threads, plan::THREADS, self.max_blocks)
    }

    /// `(blocks, threads)` of an LL kernel for `packs` packs.
    pub fn ll_shape(&self, packs: u64) -> (u32, u32) {
        plan::spread(packs, self.ll_min_threads, plan::LL_THREADS, self.ll_blocks)
    }

    /// LL capacity in packs per sender for `n` ranks: a one-shot all-reduce sends its whole
    /// input, a two-shot LL all-reduce two `n`-ths, an LL all-gather / reduce-scatter /
    /// all-to-all one `n`-th of its size.
    pub fn ll_cap_packs(&self, n: usize) -> u64 {
        let n = n.max(1);
        // The two-shot LL kernel sends two slices of `ceil(packs / n)` per sender.
        // So do the fused kernel's (whole rows per owner: at least that much).
        let two_shot_ll = |max: usize| 2 * (max as u64).div_ceil(plan::PACK).div_ceil(n as u64);
        let bytes = self
            .one_shot_max
            .max(self.fused_one_shot_max)
            .max(self.ll_max.div_ceil(n));
        // A range that starts inside a pack touches one pack more than its size in packs,
        // which spreads over the slices of the two-shot: two more packs cover both.
        (bytes as u64)
            .div_ceil(plan::PACK)
            .max(two_shot_ll(self.two_shot_ll_max))
            .max(two_shot_ll(self.fused_two_shot_ll_max))
            .max(1)
            + 2
    }
}
