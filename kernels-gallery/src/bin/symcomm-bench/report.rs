//! What the benchmark prints, in nccl-tests' style (`scripts/bench-table`,
//! `scripts/sweep-summary` and the GPU suite parse it: keep the columns): the header, one row
//! per case and implementation, the fused rows, and the totals. Rank 0 prints ([`Report`]).

use symcomm_gallery::Algo;

use crate::coll::{Case, Coll};
use crate::opts::Opts;

/// The result of one implementation on one case.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    /// Time per op in µs (mean over ranks).
    pub us: f64,
    /// Wrong elements, summed over ranks.
    pub wrong: u64,
}

/// The lines of one rank: printed on rank 0; rows and their wrong elements counted on every
/// rank (the same on each).
pub struct Report {
    print: bool,
    rows: usize,
    wrong: u64,
}

impl Report {
    /// A report that prints when `print` (rank 0).
    pub fn new(print: bool) -> Report {
        Report {
            print,
            rows: 0,
            wrong: 0,
        }
    }

    /// A line that is not a row (a header, a comment).
    pub fn note(&self, line: &str) {
        if self.print {
            println!("{line}");
        }
    }

    /// A row, and the wrong elements it reports (summed over ranks).
    pub fn row(&mut self, line: &str, wrong: u64) {
        self.note(line);
        self.rows += 1;
        self.wrong += wrong;
    }

    /// `(rows, wrong elements)` so far.
    pub fn totals(&self) -> (usize, u64) {
        (self.rows, self.wrong)
    }
}

/// The lines before the rows: the run (ranks, mode, timing, NCCL) and the column heads.
pub fn header(
    opts: &Opts,
    n: usize,
    nccl_version: Option<i32>,
    emulated: bool,
    pdl: &str,
) -> String {
    let mode = match opts.threads {
        Some(t) => format!("one process driving {t} GPUs"),
        None => "one process per GPU".to_string(),
    };
    let nccl = match nccl_version {
        Some(v) => format!("NCCL {}.{}.{}", v / 10000, (v / 100) % 100, v % 100),
        None => "NCCL off".to_string(),
    };
    let (device, graphs) = if emulated {
        ("CPU emulator, ", "graphs replayed on the host clock")
    } else {
        ("", "CUDA graphs")
    };
    let timing = if opts.eager {
        format!(
            "eager launches, no graphs ({} ops per round, median of {} rounds, \
             SYMCOMM_PDL={pdl})",
            opts.iters, opts.replays
        )
    } else {
        format!(
            "{graphs} ({} ops per graph, median of {} replays, SYMCOMM_PDL={pdl})",
            opts.iters, opts.replays
        )
    };
    format!(
        "# symcomm-bench: {n} ranks ({mode}), {device}{timing}, \
         {nccl}, NCCL_NVLS_ENABLE={}, {}\n\
         # time in us, algbw and busbw in GB/s; ratio = symcomm/NCCL (time: lower is better, busbw: higher)\n\
         #{:>14} {:>11} {:>11} {:>5} {:>5} | {:>8} {:>10} {:>7} {:>7} {:>6} | {:>10} {:>7} {:>7} {:>6} | {:>6} {:>6}",
        std::env::var("NCCL_NVLS_ENABLE").unwrap_or_default(),
        if opts.inplace {
            "in-place"
        } else {
            "out-of-place"
        },
        "collective",
        "size",
        "count",
        "type",
        "redop",
        "algo",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "busbw",
    )
}

/// The line after the header: the module's kernels, and whether the multimem ones
/// (`multimem` of them) run (`on`: multicast is on).
pub fn module_line(kernels: usize, multimem: usize, on: bool) -> String {
    format!(
        "# module: {kernels} kernels loaded; {multimem} multimem kernels (all_reduce_multimem_*) \
         loaded, {}",
        if on {
            "run where --algos forces them (SYMCOMM_NVLS=1)"
        } else {
            "not run (no SYMCOMM_NVLS=1)"
        }
    )
}

/// The row of case `c` over `n` ranks: symcomm's result `sym` with algorithm `algo`, and
/// NCCL's (`-` without it).
pub fn row(c: &Case, n: usize, algo: &str, sym: Measured, nc: Option<Measured>) -> String {
    let f = c.coll.bus_factor(n);
    let algbw = bandwidth(c.bytes, sym.us);
    let mut s = format!(
        " {:>14} {:>11} {:>11} {:>5} {:>5} | {:>8} {:>10.2} {:>7.2} {:>7.2} {:>6} |",
        c.coll.name(),
        c.bytes,
        c.bytes / c.t.size(),
        c.t.name(),
        if c.coll.reduces() || c.coll == Coll::RmsNorm {
            c.op.name()
        } else {
            "none"
        },
        algo,
        sym.us,
        algbw,
        algbw * f,
        sym.wrong,
    );
    match nc {
        Some(m) => {
            let nalg = bandwidth(c.bytes, m.us);
            s += &format!(
                " {:>10.2} {:>7.2} {:>7.2} {:>6} | {:>6.2} {:>6.2}",
                m.us,
                nalg,
                nalg * f,
                m.wrong,
                sym.us / m.us,
                (algbw * f) / (nalg * f)
            );
        }
        None => {
            s += &format!(
                " {:>10} {:>7} {:>7} {:>6} | {:>6} {:>6}",
                "-", "-", "-", "-", "-", "-"
            )
        }
    }
    s
}

/// The column heads of the fused rows.
pub fn fused_header() -> String {
    format!(
        "#{:>14} {:>11} {:>6} {:>6} | {:>8} {:>10} {:>6} | {:>12} | {:>14} {:>6} | {:>9} {:>9}",
        "fused",
        "bytes",
        "tokens",
        "hidden",
        "algo",
        "time",
        "#wrong",
        "all_reduce",
        "NCCL+rmsnorm",
        "#wrong",
        "fused/AR",
        "fused/NC"
    )
}

/// One fused row: `tokens × hidden` rows (`bytes`), the fused kernel's result with its
/// algorithm, symcomm's plain all-reduce of the same rows, and NCCL's all-reduce + the unfused
/// kernel (`-` without NCCL).
pub struct FusedRow {
    pub bytes: usize,
    pub tokens: usize,
    pub hidden: usize,
    /// The algorithm, `direct` for the two-shot that writes window outputs itself.
    pub algo: &'static str,
    pub fused: Measured,
    pub all_reduce_us: f64,
    pub nccl: Option<Measured>,
}

impl FusedRow {
    /// The algorithm's label: `direct` for the two-shot that writes window outputs itself
    /// (`all_reduce_rmsnorm_into` with `windows`, up to `direct_max` bytes of rows).
    pub fn label(algo: Algo, windows: bool, direct: bool) -> &'static str {
        if windows && algo == Algo::TwoShot && direct {
            "direct"
        } else {
            algo.name()
        }
    }

    pub fn line(&self) -> String {
        let (fused, nc) = (self.fused.us, self.nccl.map(|m| m.us));
        format!(
            " {:>14} {:>11} {:>6} {:>6} | {:>8} {:>10.2} {:>6} | {:>12.2} | {:>14} {:>6} | {:>9.2} {:>9}",
            "ar_rmsnorm",
            self.bytes,
            self.tokens,
            self.hidden,
            self.algo,
            fused,
            self.fused.wrong,
            self.all_reduce_us,
            nc.map_or("-".to_string(), |u| format!("{u:.2}")),
            self.nccl.map_or(0, |m| m.wrong),
            fused / self.all_reduce_us,
            nc.map_or("-".to_string(), |u| format!("{:.2}", fused / u)),
        )
    }
}

/// The last line (rank 0).
pub fn totals(rows: usize, wrong: u64) -> String {
    format!("# {rows} rows, {wrong} wrong elements in total")
}

/// Bytes per µs as GB/s.
fn bandwidth(bytes: usize, us: f64) -> f64 {
    bytes as f64 / (us * 1e-6) / 1e9
}
