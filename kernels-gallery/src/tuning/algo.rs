//! The all-reduce algorithms ([`Algo`]) and their `SYMCOMM_ALGO` names.

use crate::types::names;

/// An all-reduce algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// One kernel, no barrier: every rank pushes its input to every peer as LL lines and
    /// reduces all of them itself (latency; traffic grows with the rank count).
    OneShot,
    /// Reduce-scatter and all-gather on LL lines, no barrier (medium sizes: a quarter of
    /// the one-shot's traffic, no barrier latency).
    TwoShotLl,
    /// Reduce-scatter by loads + all-gather by stores between an entry and an exit barrier
    /// (bandwidth-optimal).
    TwoShot,
    /// Reduce-scatter by stores into a scratch window + local reduction + all-gather by
    /// stores: every NVLink transfer is a store; pipelined in steps per block, paced by
    /// counters (entry and exit barrier only).
    TwoShotPush,
    /// NVLink SHARP: every rank `multimem.ld_reduce`s the whole buffer through the multicast
    /// address (between an entry and an exit barrier). Only when forced, with
    /// [`Tuning::multimem`] on; never run on our test node. Out of place only: a call in place
    /// runs [`Algo::MultimemTwoShot`], so every rank must make the same in-place choice (a
    /// rank writing its input while a peer still reads it corrupts the peer's result). Each
    /// rank asks the switch for every sum, and its order of addition is not specified: float
    /// results may differ in the last bits between ranks.
    ///
    /// [`Tuning::multimem`]: super::Tuning::multimem
    MultimemOneShot,
    /// NVLink SHARP: rank `r` `multimem.ld_reduce`s slice `r` and `multimem.st`s the result to
    /// every rank at once. Only when forced, with [`Tuning::multimem`] on; never run on our
    /// test node.
    ///
    /// [`Tuning::multimem`]: super::Tuning::multimem
    MultimemTwoShot,
}

names!(
    Algo {
        OneShot => "one_shot",
        TwoShotLl => "two_shot_ll",
        TwoShot => "two_shot",
        TwoShotPush => "two_shot_push",
        MultimemOneShot => "multimem_one_shot",
        MultimemTwoShot => "multimem_two_shot",
    },
    all: "Every algorithm.",
    name: "The `SYMCOMM_ALGO` spelling: `one_shot`, `two_shot_ll`, `two_shot`, …",
);

impl Algo {
    /// True for the NVLink SHARP algorithms.
    pub const fn is_multimem(self) -> bool {
        matches!(self, Algo::MultimemOneShot | Algo::MultimemTwoShot)
    }
}
