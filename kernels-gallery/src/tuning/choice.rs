//! The choice by size: which algorithm or protocol a collective of a given size runs, from the
//! limits of [`Tuning`] (a forced `SYMCOMM_ALGO` first, where it can run).

use super::algo::Algo;
use super::knobs::Tuning;

impl Tuning {
    /// The all-reduce algorithm for `bytes`: the forced one if it can run (the LL kernels
    /// need the data to fit the LL scratch: `one_shot_max`, `two_shot_ll_max`; the push
    /// two-shot needs its scratch, `push_scratch > 0`; the multimem ones need
    /// [`Tuning::multimem`]), else by size. The choice by size never picks multimem. A multimem
    /// algorithm has conditions of its own (type, operator, in place), which
    /// `Collectives::all_reduce_algo` applies: that is what runs.
    pub fn all_reduce_algo(&self, bytes: usize) -> Algo {
        self.all_reduce_algo_with(self.algo, bytes)
    }

    /// Whether a fused two-shot with window outputs of `bytes` of rows writes them direct
    /// (`bytes <= fused_direct_max`) rather than in a second pass on every rank.
    pub fn fused_direct(&self, bytes: usize) -> bool {
        bytes <= self.fused_direct_max
    }

    /// The protocol of the fused all-reduce + residual + RMSNorm for `bytes` of rows. Its LL
    /// variants stay ahead of its barrier two-shot up to larger sizes than the plain
    /// all-reduce's (4×H200, bf16: 16 × 8192 rows 12.2 µs on LL lines against 14.0 µs with
    /// barriers; 16 × 4096 rows 10.6 µs two-shot on LL lines against 11.0 µs one-shot), so it
    /// has its own limits ([`Tuning::fused_one_shot_max`], [`Tuning::fused_two_shot_ll_max`];
    /// 64 and 256 KiB by default). A forced `SYMCOMM_ALGO` applies as for the plain
    /// all-reduce, except a multimem one (there is no fused multimem kernel).
    pub fn fused_algo(&self, bytes: usize) -> Algo {
        if self.algo.is_some_and(|a| !a.is_multimem()) {
            return self.all_reduce_algo(bytes);
        }
        if bytes <= self.fused_one_shot_max {
            Algo::OneShot
        } else if bytes <= self.fused_two_shot_ll_max {
            Algo::TwoShotLl
        } else {
            Algo::TwoShot
        }
    }

    /// [`all_reduce_algo`](Self::all_reduce_algo) with `forced` in place of the configured
    /// choice.
    pub fn all_reduce_algo_with(&self, forced: Option<Algo>, bytes: usize) -> Algo {
        let push_on = self.push_scratch > 0;
        match forced {
            Some(Algo::OneShot) if bytes <= self.one_shot_max => Algo::OneShot,
            Some(Algo::TwoShotLl) if bytes <= self.two_shot_ll_max => Algo::TwoShotLl,
            Some(Algo::TwoShotPush) if push_on => Algo::TwoShotPush,
            Some(Algo::TwoShot) => Algo::TwoShot,
            Some(a) if a.is_multimem() && self.multimem => a,
            _ if bytes <= self.one_shot_max => Algo::OneShot,
            _ if bytes <= self.two_shot_ll_max => Algo::TwoShotLl,
            _ if push_on && bytes >= self.push_min => Algo::TwoShotPush,
            _ => Algo::TwoShot,
        }
    }

    /// True when a data-movement collective (all-gather, reduce-scatter, all-to-all) of
    /// `total` bytes (the larger of its per-rank input and output, as nccl-tests counts
    /// size) whose per-peer blocks touch at most `packs` 16-byte packs
    /// ([`block_packs`](symcomm_gallery_kernels::plan::block_packs)), over `n` ranks, uses its LL (barrier-free) kernel.
    pub fn ll_for(&self, total: usize, packs: u64, n: usize) -> bool {
        total <= self.ll_max && packs <= self.ll_cap_packs(n)
    }

    /// Whether a broadcast of `bytes` (`packs` packs of the destination) over `n` ranks runs
    /// on the LL kernel: its root sends what an all-gather rank sends for a block of `bytes`,
    /// so the all-gather's limit applies to `n × bytes` (2 ranks: up to 128 KiB by default;
    /// 8 ranks: 32 KiB).
    pub fn broadcast_ll(&self, bytes: usize, packs: u64, n: usize) -> bool {
        bytes
            .checked_mul(n)
            .is_some_and(|total| self.ll_for(total, packs, n))
    }

    /// Whether a reduce-scatter of `total` bytes (the nccl-tests size: the input) that does
    /// not run on LL lines ([`Tuning::ll_for`]) uses the pipelined push kernel: with its scratch
    /// on (`push_scratch > 0`) from `rs_push_min` bytes.
    pub fn reduce_scatter_push(&self, total: usize) -> bool {
        self.push_scratch > 0 && total >= self.rs_push_min
    }
}
