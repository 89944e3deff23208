//! What the benchmark runs: the collectives ([`Coll`]) and one case of them ([`Case`]: a
//! collective, size, type and operator), with what a case moves per rank and the values every
//! element of its output must hold.

use symcomm_gallery::check::reduced;
use symcomm_gallery::{Algo, DataType, RedOp};
use symcomm_gallery_kernels::pattern;

/// A collective of the benchmark (`--coll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    /// The fused all-reduce + residual + RMSNorm (its own rows: `norm`).
    RmsNorm,
}

impl Coll {
    pub const ALL: [Coll; 6] = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
        Coll::Broadcast,
        Coll::RmsNorm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
            Coll::Broadcast => "broadcast",
            Coll::RmsNorm => "rmsnorm",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Coll::AllReduce | Coll::RmsNorm => 2.0 * (n - 1.0) / n,
            Coll::AllGather | Coll::ReduceScatter | Coll::AllToAll => (n - 1.0) / n,
            Coll::Broadcast => 1.0,
        }
    }

    pub fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter)
    }

    /// The sizes (bytes, nccl-tests' size) a case of this collective over `n` ranks with
    /// elements of `elem` bytes takes: whole elements per rank block (any count runs).
    pub fn unit(self, n: usize, elem: usize) -> usize {
        match self {
            Coll::AllReduce | Coll::Broadcast => elem,
            _ => elem * n,
        }
    }
}

/// What one (collective, size, type, op) case needs.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub coll: Coll,
    /// nccl-tests' size: the larger of the input and the output, per rank.
    pub bytes: usize,
    pub t: DataType,
    pub op: RedOp,
    pub seed: u32,
    /// All-reduce only: the forced algorithm (`None`: by size).
    pub algo: Option<Algo>,
}

impl Case {
    /// (input bytes, output bytes) per rank over `n` ranks.
    pub fn sizes(&self, n: usize) -> (usize, usize) {
        match self.coll {
            Coll::AllReduce | Coll::AllToAll | Coll::Broadcast | Coll::RmsNorm => {
                (self.bytes, self.bytes)
            }
            Coll::AllGather => (self.bytes / n, self.bytes),
            Coll::ReduceScatter => (self.bytes, self.bytes / n),
        }
    }

    /// Element `i` of rank `rank`'s output (`count` elements) over `n` ranks, every rank's
    /// input filled with the pattern under `seed` (a broadcast's root is rank 0).
    pub fn expected(&self, n: u32, rank: u64, count: usize) -> impl Fn(usize) -> i32 {
        let (c, s) = (*self, self.seed);
        let per = count / n as usize;
        move |i: usize| match c.coll {
            Coll::AllReduce => reduced(c.op, s, n, i as u64),
            Coll::ReduceScatter => reduced(c.op, s, n, rank * count as u64 + i as u64),
            Coll::AllGather => pattern::value(s, (i / per) as u32, (i % per) as u64),
            Coll::AllToAll => {
                pattern::value(s, (i / per) as u32, rank * per as u64 + (i % per) as u64)
            }
            Coll::Broadcast | Coll::RmsNorm => pattern::value(s, 0, i as u64),
        }
    }
}
