//! Algorithm selection and launch shapes: what the host API picks for a given size, and the
//! environment knobs that change it.
//!
//! Every rank must pick the same algorithm and shape for the same call, so the knobs must be
//! set identically on every rank (the launcher passes the environment to all of them);
//! `Collectives::new` compares them across ranks ([`Tuning::agreed_knobs`]) and refuses to
//! start, on every rank, where they differ.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `SYMCOMM_ALGO` | force the all-reduce algorithm: `one_shot`, `two_shot_ll`, `two_shot`, `two_shot_push`, `multimem_one_shot` or `multimem_two_shot` (the last two only with `SYMCOMM_NVLS=1`) | by size |
//! | `SYMCOMM_NVLS` | `1`: create the LSA multicast object (NVLink SHARP) with the collectives, which the multimem algorithms need; the runtime refuses it without the same opt-in ([`Tuning::multimem`]) | off |
//! | `SYMCOMM_ONE_SHOT_MAX` | largest all-reduce (bytes) that uses the one-shot LL kernel | 64 KiB (256 KiB on 2 ranks, 128 KiB on 3: [`Tuning::for_ranks`]) |
//! | `SYMCOMM_FUSED_ONE_SHOT_MAX` / `SYMCOMM_FUSED_TWO_SHOT_LL_MAX` | the same limits for the fused all-reduce + RMSNorm | 64 KiB (as the one-shot's on 2 and 3 ranks) / 256 KiB |
//! | `SYMCOMM_TWO_SHOT_LL_MAX` | largest all-reduce (bytes) that uses the two-shot LL kernel (never above the one-shot limit by default) | 64 KiB |
//! | `SYMCOMM_FUSED_DIRECT_MAX` | largest fused two-shot (bytes of rows) with window outputs (`all_reduce_rmsnorm_into`) whose row owners write every rank's `out` and `residual_out` themselves; above it they push `h` once and every rank normalises locally | no limit |
//! | `SYMCOMM_LL_MAX` | largest all-gather / reduce-scatter / all-to-all (bytes, nccl-tests size) on LL kernels | 256 KiB |
//! | `SYMCOMM_PUSH_SCRATCH` | bytes of slots of the pipelined push (stores-only) all-reduce and reduce-scatter, i.e. their scratch size (plus a few KiB of counters); 0 = off | 32 MiB |
//! | `SYMCOMM_PUSH_SLOTS` | slots per block and peer of the pipelined push kernels (2–16; steps in flight) | 2 |
//! | `SYMCOMM_PUSH_MIN` | smallest all-reduce (bytes) that uses the pipelined push when it is on | 16 MiB |
//! | `SYMCOMM_RS_PUSH_MIN` | smallest reduce-scatter (bytes, nccl-tests size) that uses it | never (the pulling reduce-scatter is faster on 4×H200) |
//! | `SYMCOMM_MAX_BLOCKS` | most blocks of a barrier-based kernel (1–128) | 128 |
//! | `SYMCOMM_MIN_THREADS` | fewest threads per block of a barrier-based kernel (32–512, a multiple of 32): grids take up to `SYMCOMM_MAX_BLOCKS` blocks this narrow before blocks grow (see `plan::spread`) | 128 |
//! | `SYMCOMM_LL_BLOCKS` | most blocks of an LL kernel (1–64; all must be resident at once) | 64 |
//! | `SYMCOMM_LL_MIN_THREADS` | the same as `SYMCOMM_MIN_THREADS` for the LL kernels, and for the fused LL kernels on rows wider than one full block (there at least one pack per thread in 8 blocks) | 64 |
//! | `SYMCOMM_TIMEOUT_MS` | bound of every device-side wait | 10 000 |
//! | `SYMCOMM_PDL` | which launches use programmatic dependent launch: `all`, `ll` (the LL kernels) or `off` ([`DependentLaunch`]) | `all` |

use symcomm::{Error, Result};

use symcomm_gallery_kernels::plan;

/// Most blocks of a barrier-based launch ([`Tuning::max_blocks`]).
pub const MAX_BLOCKS: u32 = 128;

/// Most blocks of an LL launch ([`Tuning::ll_blocks`]; all must be resident at once).
pub const MAX_LL_BLOCKS: u32 = 64;

/// Largest [`Tuning::one_shot_max`] and [`Tuning::ll_max`] (64 MiB): the LL scratch holds
/// that much per sender.
pub const LL_LIMIT: u64 = 64 << 20;

/// Largest [`Tuning::two_shot_ll_max`], [`Tuning::fused_one_shot_max`] and
/// [`Tuning::fused_two_shot_ll_max`] (256 MiB).
pub const LL_TWO_SHOT_LIMIT: u64 = 256 << 20;

/// Largest [`Tuning::push_scratch`] (16 GiB).
pub const PUSH_SCRATCH_LIMIT: u64 = 16 << 30;

/// Most [`Tuning::push_slots`] (at least 2).
pub const MAX_PUSH_SLOTS: u32 = 16;

// Every LL launch and every fused two-shot launch finds one launch counter per block in the
// LL header.
const _: () =
    assert!(MAX_LL_BLOCKS as u64 <= plan::LL_COUNTERS && MAX_BLOCKS as u64 <= plan::LL_COUNTERS);

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
    MultimemOneShot,
    /// NVLink SHARP: rank `r` `multimem.ld_reduce`s slice `r` and `multimem.st`s the result to
    /// every rank at once. Only when forced, with [`Tuning::multimem`] on; never run on our
    /// test node.
    MultimemTwoShot,
}

impl Algo {
    /// `one_shot` / `two_shot`.
    pub const fn name(self) -> &'static str {
        match self {
            Algo::OneShot => "one_shot",
            Algo::TwoShotLl => "two_shot_ll",
            Algo::TwoShot => "two_shot",
            Algo::TwoShotPush => "two_shot_push",
            Algo::MultimemOneShot => "multimem_one_shot",
            Algo::MultimemTwoShot => "multimem_two_shot",
        }
    }

    /// True for the NVLink SHARP algorithms.
    pub const fn is_multimem(self) -> bool {
        matches!(self, Algo::MultimemOneShot | Algo::MultimemTwoShot)
    }

    /// Parses [`Algo::name`].
    pub fn parse(s: &str) -> Option<Algo> {
        match s {
            "one_shot" => Some(Algo::OneShot),
            "two_shot_ll" => Some(Algo::TwoShotLl),
            "two_shot" => Some(Algo::TwoShot),
            "two_shot_push" => Some(Algo::TwoShotPush),
            "multimem_one_shot" => Some(Algo::MultimemOneShot),
            "multimem_two_shot" => Some(Algo::MultimemTwoShot),
            _ => None,
        }
    }
}

/// The knobs of the host API (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Forced all-reduce algorithm (`None`: by size).
    pub algo: Option<Algo>,
    /// Largest all-reduce in bytes that runs one-shot.
    pub one_shot_max: usize,
    /// Largest all-reduce in bytes that runs two-shot on LL lines.
    pub two_shot_ll_max: usize,
    /// Largest fused all-reduce + RMSNorm (bytes of rows) that runs one-shot.
    pub fused_one_shot_max: usize,
    /// Largest fused all-reduce + RMSNorm (bytes of rows) that runs two-shot on LL lines.
    pub fused_two_shot_ll_max: usize,
    /// Largest fused two-shot with window outputs (bytes of rows) that runs direct: the
    /// owner of a row pushes both `h` and `out` to every rank, and there is no second pass.
    /// Above it, the owner pushes `h` (and its scale) once and every rank writes its own
    /// `out` and `residual_out` in a second pass: the same NVLink traffic as a plain
    /// all-reduce, where direct adds half of it again (see
    /// `Collectives::all_reduce_rmsnorm_into`).
    pub fused_direct_max: usize,
    /// Largest all-gather / reduce-scatter / all-to-all in bytes (the larger of input and
    /// output, as nccl-tests counts size) that runs on the LL kernels.
    pub ll_max: usize,
    /// Most blocks of a barrier-based kernel (the device communicator gets this many
    /// barriers; 1 to [`MAX_BLOCKS`]).
    pub max_blocks: u32,
    /// Fewest threads per block of a barrier-based kernel (a multiple of 32, at most
    /// [`plan::THREADS`]; see [`plan::spread`]).
    pub min_threads: u32,
    /// Most blocks of an LL kernel (1 to [`MAX_LL_BLOCKS`]).
    pub ll_blocks: u32,
    /// Fewest threads per block of an LL kernel (a multiple of 32, at most
    /// [`plan::LL_THREADS`]).
    pub ll_min_threads: u32,
    /// Bound of every device-side wait, in nanoseconds.
    pub timeout_ns: u64,
    /// Bytes of slots of the pipelined push kernels, i.e. the size of their scratch window
    /// without its counters (0: they are off and no scratch is allocated).
    pub push_scratch: usize,
    /// Slots per block and peer of the pipelined push kernels (at least 2).
    pub push_slots: u32,
    /// Smallest all-reduce in bytes that uses the push two-shot (when it is on).
    pub push_min: usize,
    /// Smallest reduce-scatter in bytes (the nccl-tests size: the input) that uses the
    /// pipelined push reduce-scatter (when it is on).
    pub rs_push_min: usize,
    /// Which kernels are launched with programmatic dependent launch
    /// (`symcomm::launch::LaunchConfig::dependent_launch`; see [`DependentLaunch`]).
    pub dependent_launch: DependentLaunch,
    /// Ask for the LSA multicast range (NVLink SHARP) when the collectives are created, so
    /// that a forced multimem algorithm ([`Algo::MultimemOneShot`],
    /// [`Algo::MultimemTwoShot`]) can run; without it they fall back to the choice by size.
    /// When on, `Collectives::new` **creates a multicast object** (a scarce switch resource)
    /// whether or not a multimem algorithm is ever forced. Where multicast is refused (no
    /// NVLink SHARP, or a rank without `SYMCOMM_NVLS=1`: the runtime's refusals come back
    /// alike on every rank) it logs a warning and goes on without it, with this knob off in
    /// `Collectives::tuning`; other failures of the multicast set-up are errors. On GPUs the
    /// runtime refuses multicast unless every rank has `SYMCOMM_NVLS=1` (which also sets
    /// this); set it only on machines where creating multicast objects is allowed. The
    /// multimem kernels have run on the CPU emulator only.
    pub multimem: bool,
}

/// Which gallery launches use programmatic dependent launch: the kernel may start while the
/// kernel ahead of it on the stream finishes, and waits for it on the device (every gallery
/// kernel does so before it touches memory, so the stream order holds either way); their
/// launch latencies overlap.
///
/// On 2×H200 (one process per GPU, graphs of 20 collectives, bf16), `all` was faster than
/// `off` in every one of 44 rows of all-reduce, all-gather, reduce-scatter and all-to-all
/// from 4 KiB to 4 MiB, and in the six fused shapes: the LL kernels by 0.2–0.45 µs (all-reduce 4 KiB 3.16 → 2.74 µs, all-gather 4 KiB 2.84 →
/// 2.74), the barrier kernels by 0.1–0.5 µs (all-reduce 1 MiB 8.75 → 8.27), the fused
/// kernel by 0.3–0.5 µs (1 × 4096 4.14 → 3.82, 128 × 4096 12.25 → 11.75). So `all` is the
/// default. (Two ranks sharing one H100 had shown the barrier kernels slower with it, and
/// slower after LL kernels had used it; on separate GPUs neither happened.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependentLaunch {
    /// Every launch waits for the previous kernel to finish (`SYMCOMM_PDL=off`).
    Off,
    /// The LL kernels (one-shot and LL two-shot all-reduce, LL all-gather, reduce-scatter
    /// and all-to-all, LL fused kernels) only (`SYMCOMM_PDL=ll`).
    Ll,
    /// Every gallery kernel (`SYMCOMM_PDL=all`, the default).
    All,
}

impl DependentLaunch {
    /// The `SYMCOMM_PDL` spelling.
    pub fn name(self) -> &'static str {
        match self {
            DependentLaunch::Off => "off",
            DependentLaunch::Ll => "ll",
            DependentLaunch::All => "all",
        }
    }

    /// Whether a launch of an LL kernel (`ll`) or of another kernel uses it.
    pub fn applies(self, ll: bool) -> bool {
        match self {
            DependentLaunch::Off => false,
            DependentLaunch::Ll => ll,
            DependentLaunch::All => true,
        }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            algo: None,
            // Measured on 4×H200 (bf16): the barrier two-shot beats the LL two-shot at every
            // size from 128 KiB to 2 MiB (1 MiB: 11.8 vs 23.5 µs) and the one-shot from 128 KiB,
            // so by default the LL two-shot is never picked (raise SYMCOMM_TWO_SHOT_LL_MAX to
            // use it).
            one_shot_max: 64 << 10,
            two_shot_ll_max: 64 << 10,
            fused_one_shot_max: 64 << 10,
            fused_two_shot_ll_max: 256 << 10,
            // Ranks sharing one H100 (the only measurement yet): direct was faster at every
            // shape (4 ranks, 128 × 8192: 19.3 against 26.8 µs), but there every "peer"
            // store is local memory; over NVLink direct moves 1.5× the bytes.
            fused_direct_max: usize::MAX,
            // 4×H200, bf16: LL all-gather / reduce-scatter at 512 KiB–1 MiB took 10–16 µs, the
            // barrier kernels 11–13 µs already at 2 MiB (reduce-scatter at 1 MiB: 1.40× NCCL).
            ll_max: 256 << 10,
            max_blocks: 128,
            // 2×H200, bf16, 128-thread blocks against 512-thread ones (the same threads in
            // all, on four times the SMs): two-shot all-reduce 128 KiB–1 MiB 6.2–8.7 µs
            // against 7.5–9.7; all-gather, reduce-scatter and all-to-all at 512 KiB–1 MiB
            // 1.2 µs faster; no change from 2 MiB (the blocks are full-width there).
            min_threads: 128,
            // The same for the LL kernels, with more blocks: one-shot all-reduce 64 KiB
            // 3.95 µs (64 blocks of 64 threads) against 4.51 (8 of 512); LL all-gather,
            // reduce-scatter and all-to-all 10–15% faster at 16–256 KiB.
            ll_blocks: 64,
            ll_min_threads: 64,
            timeout_ns: 10_000_000_000,
            push_scratch: 32 << 20,
            push_slots: 2,
            // 4×H200, bf16: the push two-shot beats the pulling one from 16 MiB (83 vs 87 µs;
            // 1 GiB: 349 vs 318 GB/s busbw); the pulling reduce-scatter beats the pushing one
            // at every size from 16 MiB (256 MiB: 316 vs 293 GB/s busbw).
            push_min: 16 << 20,
            rs_push_min: usize::MAX,
            // 2×H200: never slower, 0.1–0.5 µs faster per collective (see `DependentLaunch`).
            dependent_launch: DependentLaunch::All,
            multimem: false,
        }
    }
}

impl Tuning {
    /// The defaults for `n` ranks: [`Tuning::default`] (measured on 4 ranks), with the
    /// one-shot limits (plain and fused) raised for fewer ranks, where a one-shot moves fewer
    /// bytes: ×4 on 2 ranks, ×2 on 3. On 2×H200 (bf16) the one-shot took 4.4 µs at 128 KiB and
    /// 6.2 µs at 256 KiB against the two-shot's 6.4 and 6.5 µs (8.6 against 7.4 µs at
    /// 512 KiB); the fused one-shot 5.4 / 7.7 µs for 16 rows of 4096 / 8192 against the LL
    /// two-shot's 7.4 / 9.0 µs.
    pub fn for_ranks(n: usize) -> Tuning {
        let scale = match n {
            2 => 4,
            3 => 2,
            _ => 1,
        };
        let t = Tuning::default();
        Tuning {
            one_shot_max: t.one_shot_max * scale,
            fused_one_shot_max: t.fused_one_shot_max * scale,
            ..t
        }
    }

    /// The defaults for 4 ranks, overridden by the `SYMCOMM_*` variables that are set.
    pub fn from_env() -> Result<Tuning> {
        Tuning::from_env_for(4)
    }

    /// [`Tuning::for_ranks`]`(n)`, overridden by the `SYMCOMM_*` variables that are set.
    pub fn from_env_for(n: usize) -> Result<Tuning> {
        Tuning::from_lookup_for(n, |k| std::env::var(k).ok())
    }

    /// The defaults for 4 ranks, overridden by what `get` returns for the variable names.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Tuning> {
        Tuning::from_lookup_for(4, get)
    }

    /// [`Tuning::for_ranks`]`(n)`, overridden by what `get` returns for the variable names.
    pub fn from_lookup_for(n: usize, get: impl Fn(&str) -> Option<String>) -> Result<Tuning> {
        let mut t = Tuning::for_ranks(n);
        if let Some(v) = get("SYMCOMM_ALGO") {
            t.algo = Some(Algo::parse(&v).ok_or_else(|| Error::Env {
                var: "SYMCOMM_ALGO".into(),
                reason: format!(
                    "{v:?} is not one_shot, two_shot_ll, two_shot, two_shot_push, \
                     multimem_one_shot or multimem_two_shot"
                ),
            })?);
        }
        // The runtime's own opt-in: only `1` turns multicast on (anything else leaves it off,
        // as `symcomm` reads it).
        t.multimem = get(symcomm::cuda::multicast::NVLS_ENV).as_deref() == Some("1");
        let num = |var: &str, min: u64, max: u64| -> Result<Option<u64>> {
            match get(var) {
                None => Ok(None),
                Some(v) => match v.parse::<u64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
                    _ => Err(Error::Env {
                        var: var.into(),
                        reason: format!("{v:?} is not a number in {min}..={max}"),
                    }),
                },
            }
        };
        if let Some(n) = num("SYMCOMM_ONE_SHOT_MAX", 0, LL_LIMIT)? {
            t.one_shot_max = n as usize;
        }
        if let Some(n) = num("SYMCOMM_TWO_SHOT_LL_MAX", 0, LL_TWO_SHOT_LIMIT)? {
            t.two_shot_ll_max = n as usize;
        }
        if let Some(n) = num("SYMCOMM_FUSED_ONE_SHOT_MAX", 0, LL_TWO_SHOT_LIMIT)? {
            t.fused_one_shot_max = n as usize;
        }
        if let Some(n) = num("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", 0, LL_TWO_SHOT_LIMIT)? {
            t.fused_two_shot_ll_max = n as usize;
        }
        if let Some(n) = num("SYMCOMM_FUSED_DIRECT_MAX", 0, u64::MAX)? {
            t.fused_direct_max = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = num("SYMCOMM_LL_MAX", 0, LL_LIMIT)? {
            t.ll_max = n as usize;
        }
        if let Some(n) = num("SYMCOMM_MAX_BLOCKS", 1, u64::from(MAX_BLOCKS))? {
            t.max_blocks = n as u32;
        }
        let warps = |var: &str, max: u32| -> Result<Option<u32>> {
            match num(var, 32, u64::from(max))? {
                Some(n) if n % 32 != 0 => Err(Error::Env {
                    var: var.into(),
                    reason: format!("{n} is not a multiple of 32"),
                }),
                n => Ok(n.map(|n| n as u32)),
            }
        };
        if let Some(n) = warps("SYMCOMM_MIN_THREADS", plan::THREADS)? {
            t.min_threads = n;
        }
        if let Some(n) = warps("SYMCOMM_LL_MIN_THREADS", plan::LL_THREADS)? {
            t.ll_min_threads = n;
        }
        if let Some(n) = num("SYMCOMM_LL_BLOCKS", 1, u64::from(MAX_LL_BLOCKS))? {
            t.ll_blocks = n as u32;
        }
        if let Some(n) = num("SYMCOMM_PUSH_SCRATCH", 0, PUSH_SCRATCH_LIMIT)? {
            t.push_scratch = n as usize;
        }
        if let Some(n) = num("SYMCOMM_PUSH_SLOTS", 2, u64::from(MAX_PUSH_SLOTS))? {
            t.push_slots = n as u32;
        }
        if let Some(n) = num("SYMCOMM_PUSH_MIN", 0, u64::MAX)? {
            t.push_min = n as usize;
        }
        if let Some(n) = num("SYMCOMM_RS_PUSH_MIN", 0, u64::MAX)? {
            t.rs_push_min = n as usize;
        }
        if let Some(n) = num("SYMCOMM_TIMEOUT_MS", 1, 3_600_000)? {
            t.timeout_ns = n * 1_000_000;
        }
        if let Some(v) = get("SYMCOMM_PDL") {
            t.dependent_launch = match v.as_str() {
                "off" | "0" => DependentLaunch::Off,
                "ll" => DependentLaunch::Ll,
                "all" | "1" => DependentLaunch::All,
                _ => {
                    return Err(Error::Env {
                        var: "SYMCOMM_PDL".into(),
                        reason: format!("{v:?} is not off, ll or all"),
                    });
                }
            };
        }
        t.validate()?;
        Ok(t)
    }

    /// Checks the limits the kernels rely on: `max_blocks` in 1..=[`MAX_BLOCKS`], `ll_blocks`
    /// in 1..=[`MAX_LL_BLOCKS`] (each block of an LL or fused launch owns one launch counter of
    /// the scratch header, [`plan::LL_COUNTERS`] in all), and `min_threads` / `ll_min_threads`
    /// multiples of 32 from 32 to [`plan::THREADS`] / [`plan::LL_THREADS`] (the block sums
    /// shuffle across full warps); the LL limits up to [`LL_LIMIT`] / [`LL_TWO_SHOT_LIMIT`],
    /// `push_scratch` up to [`PUSH_SCRATCH_LIMIT`] and `push_slots` in 2..=[`MAX_PUSH_SLOTS`]
    /// (the scratch windows are sized from them). The `SYMCOMM_*` variables take the same
    /// ranges.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field and its range.
    pub fn validate(&self) -> Result<()> {
        let check = |what: &str, v: u64, lo: u64, hi: u64, step: u64| {
            if (lo..=hi).contains(&v) && v.is_multiple_of(step) {
                Ok(())
            } else {
                let mult = if step > 1 {
                    format!(", a multiple of {step}")
                } else {
                    String::new()
                };
                Err(Error::InvalidArgument(format!(
                    "gallery tuning: {what} is {v}, not in {lo}..={hi}{mult}"
                )))
            }
        };
        let u = |v: u32| u64::from(v);
        check("max_blocks", u(self.max_blocks), 1, u(MAX_BLOCKS), 1)?;
        check("ll_blocks", u(self.ll_blocks), 1, u(MAX_LL_BLOCKS), 1)?;
        check("min_threads", u(self.min_threads), 32, u(plan::THREADS), 32)?;
        let ll_threads = u(plan::LL_THREADS);
        check("ll_min_threads", u(self.ll_min_threads), 32, ll_threads, 32)?;
        // The LL scratch is sized from these limits: bounded, its size cannot overflow.
        let b = |v: usize| v as u64;
        check("one_shot_max", b(self.one_shot_max), 0, LL_LIMIT, 1)?;
        check("ll_max", b(self.ll_max), 0, LL_LIMIT, 1)?;
        for (what, v) in [
            ("two_shot_ll_max", self.two_shot_ll_max),
            ("fused_one_shot_max", self.fused_one_shot_max),
            ("fused_two_shot_ll_max", self.fused_two_shot_ll_max),
        ] {
            check(what, b(v), 0, LL_TWO_SHOT_LIMIT, 1)?;
        }
        check(
            "push_scratch",
            b(self.push_scratch),
            0,
            PUSH_SCRATCH_LIMIT,
            1,
        )?;
        check("push_slots", u(self.push_slots), 2, u(MAX_PUSH_SLOTS), 1)
    }

    /// The knobs every rank must set alike, named by their variables, with their values:
    /// every one that changes which kernel runs, its grid or the scratch layout. Not
    /// `SYMCOMM_TIMEOUT_MS` and `SYMCOMM_PDL`, which only change this rank's waits and
    /// launches. `Collectives::new` refuses to start when they differ between ranks.
    pub fn agreed_knobs(&self) -> Vec<(&'static str, String)> {
        // Destructured in full, so that a new field must be placed on one side or the other.
        let Tuning {
            algo,
            one_shot_max,
            two_shot_ll_max,
            fused_one_shot_max,
            fused_two_shot_ll_max,
            fused_direct_max,
            ll_max,
            max_blocks,
            min_threads,
            ll_blocks,
            ll_min_threads,
            timeout_ns: _,
            push_scratch,
            push_slots,
            push_min,
            rs_push_min,
            dependent_launch: _,
            multimem,
        } = *self;
        let s = |v: &dyn ToString| v.to_string();
        vec![
            ("SYMCOMM_ALGO", s(&algo.map_or("by size", Algo::name))),
            ("SYMCOMM_ONE_SHOT_MAX", s(&one_shot_max)),
            ("SYMCOMM_TWO_SHOT_LL_MAX", s(&two_shot_ll_max)),
            ("SYMCOMM_FUSED_ONE_SHOT_MAX", s(&fused_one_shot_max)),
            ("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", s(&fused_two_shot_ll_max)),
            ("SYMCOMM_FUSED_DIRECT_MAX", s(&fused_direct_max)),
            ("SYMCOMM_LL_MAX", s(&ll_max)),
            ("SYMCOMM_MAX_BLOCKS", s(&max_blocks)),
            ("SYMCOMM_MIN_THREADS", s(&min_threads)),
            ("SYMCOMM_LL_BLOCKS", s(&ll_blocks)),
            ("SYMCOMM_LL_MIN_THREADS", s(&ll_min_threads)),
            ("SYMCOMM_PUSH_SCRATCH", s(&push_scratch)),
            ("SYMCOMM_PUSH_SLOTS", s(&push_slots)),
            ("SYMCOMM_PUSH_MIN", s(&push_min)),
            ("SYMCOMM_RS_PUSH_MIN", s(&rs_push_min)),
            ("SYMCOMM_NVLS", s(&u8::from(multimem))),
        ]
    }

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
    /// size) with `per_peer` bytes per peer block, over `n` ranks, uses its LL
    /// (barrier-free) kernel.
    pub fn ll_for(&self, total: usize, per_peer: usize, n: usize) -> bool {
        total <= self.ll_max && per_peer as u64 <= self.ll_cap_packs(n) * plan::PACK
    }

    /// Whether a broadcast of `bytes` over `n` ranks runs on the LL kernel: its root sends
    /// what an all-gather rank sends for a block of `bytes`, so the all-gather's limit applies
    /// to `n × bytes` (2 ranks: up to 128 KiB by default; 8 ranks: 32 KiB).
    pub fn broadcast_ll(&self, bytes: usize, n: usize) -> bool {
        bytes
            .checked_mul(n)
            .is_some_and(|total| self.ll_for(total, bytes, n))
    }

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
        (bytes as u64)
            .div_ceil(plan::PACK)
            .max(two_shot_ll(self.two_shot_ll_max))
            .max(two_shot_ll(self.fused_two_shot_ll_max))
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn validate_bounds_every_knob_that_sizes_a_scratch_or_a_grid() {
        for n in [1, 2, 3, 4, 8] {
            Tuning::for_ranks(n).validate().unwrap();
        }
        type Set = fn(&mut Tuning);
        let bad: [(&str, Set); 10] = [
            ("one_shot_max", |t| t.one_shot_max = usize::MAX),
            ("ll_max", |t| t.ll_max = LL_LIMIT as usize + 1),
            ("two_shot_ll_max", |t| t.two_shot_ll_max = usize::MAX),
            ("fused_one_shot_max", |t| {
                t.fused_one_shot_max = LL_TWO_SHOT_LIMIT as usize + 1
            }),
            ("fused_two_shot_ll_max", |t| {
                t.fused_two_shot_ll_max = usize::MAX
            }),
            ("push_scratch", |t| t.push_scratch = usize::MAX),
            ("push_slots", |t| t.push_slots = 1),
            ("push_slots", |t| t.push_slots = MAX_PUSH_SLOTS + 1),
            ("max_blocks", |t| t.max_blocks = 0),
            ("ll_min_threads", |t| t.ll_min_threads = 48),
        ];
        for (name, set) in bad {
            let mut t = Tuning::default();
            set(&mut t);
            let e = t.validate().unwrap_err().to_string();
            assert!(e.contains(&format!("{name} is")), "{name}: {e}");
        }
        // The largest values the environment takes are valid.
        let t = Tuning {
            one_shot_max: LL_LIMIT as usize,
            ll_max: LL_LIMIT as usize,
            two_shot_ll_max: LL_TWO_SHOT_LIMIT as usize,
            fused_one_shot_max: LL_TWO_SHOT_LIMIT as usize,
            fused_two_shot_ll_max: LL_TWO_SHOT_LIMIT as usize,
            push_scratch: PUSH_SCRATCH_LIMIT as usize,
            push_slots: MAX_PUSH_SLOTS,
            ..Tuning::default()
        };
        t.validate().unwrap();
    }

    #[test]
    fn agreed_knobs_are_named_by_the_variables_that_set_them() {
        let base = Tuning::from_lookup(lookup(&[])).unwrap().agreed_knobs();
        let names: Vec<&str> = base.iter().map(|k| k.0).collect();
        // A valid value other than the default for each variable: setting it changes exactly
        // the knob of that name.
        let set = [
            ("SYMCOMM_ALGO", "two_shot"),
            ("SYMCOMM_ONE_SHOT_MAX", "1024"),
            ("SYMCOMM_TWO_SHOT_LL_MAX", "2048"),
            ("SYMCOMM_FUSED_ONE_SHOT_MAX", "3072"),
            ("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", "4096"),
            ("SYMCOMM_FUSED_DIRECT_MAX", "1048576"),
            ("SYMCOMM_LL_MAX", "5120"),
            ("SYMCOMM_MAX_BLOCKS", "7"),
            ("SYMCOMM_MIN_THREADS", "64"),
            ("SYMCOMM_LL_BLOCKS", "5"),
            ("SYMCOMM_LL_MIN_THREADS", "96"),
            ("SYMCOMM_PUSH_SCRATCH", "65536"),
            ("SYMCOMM_PUSH_SLOTS", "3"),
            ("SYMCOMM_PUSH_MIN", "12345"),
            ("SYMCOMM_RS_PUSH_MIN", "54321"),
            ("SYMCOMM_NVLS", "1"),
        ];
        assert_eq!(names, set.iter().map(|p| p.0).collect::<Vec<_>>());
        for (var, v) in set {
            let k = Tuning::from_lookup(lookup(&[(var, v)]))
                .unwrap()
                .agreed_knobs();
            for (a, b) in base.iter().zip(&k) {
                if a.0 == var {
                    assert_eq!(b.1, v, "{var}");
                } else {
                    assert_eq!(a, b, "{var} changed {}", a.0);
                }
            }
        }
        // Local-only knobs are not compared.
        let local = lookup(&[("SYMCOMM_TIMEOUT_MS", "5"), ("SYMCOMM_PDL", "all")]);
        assert_eq!(Tuning::from_lookup(local).unwrap().agreed_knobs(), base);
    }

    #[test]
    fn broadcasts_use_the_ll_kernel_below_the_all_gather_limit_of_n_blocks() {
        let t = Tuning::default();
        assert!(t.broadcast_ll(16, 8) && t.broadcast_ll(32 << 10, 8));
        assert!(!t.broadcast_ll((32 << 10) + 16, 8));
        assert!(t.broadcast_ll(128 << 10, 2) && !t.broadcast_ll(256 << 10, 2));
        assert!(!t.broadcast_ll(usize::MAX / 2, 4));
    }

    #[test]
    fn dependent_launch_is_on_by_default_and_symcomm_pdl_sets_it() {
        let d = Tuning::default().dependent_launch;
        assert_eq!(d, DependentLaunch::All);
        assert!(d.applies(true) && d.applies(false));
        assert!(Tuning::for_ranks(8).dependent_launch.applies(false));
        assert!(DependentLaunch::Ll.applies(true) && !DependentLaunch::Ll.applies(false));
        for (v, want) in [
            ("off", DependentLaunch::Off),
            ("0", DependentLaunch::Off),
            ("ll", DependentLaunch::Ll),
            ("all", DependentLaunch::All),
            ("1", DependentLaunch::All),
        ] {
            let t = Tuning::from_lookup(lookup(&[("SYMCOMM_PDL", v)])).unwrap();
            assert_eq!(t.dependent_launch, want, "SYMCOMM_PDL={v}");
        }
        assert!(!DependentLaunch::Off.applies(true));
        assert!(DependentLaunch::All.applies(false));
        let e = Tuning::from_lookup(lookup(&[("SYMCOMM_PDL", "yes")])).unwrap_err();
        assert!(e.to_string().contains("SYMCOMM_PDL"), "{e}");
    }

    #[test]
    fn small_all_reduces_go_one_shot_and_large_ones_two_shot() {
        let t = Tuning::default();
        assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
        assert_eq!(t.all_reduce_algo(64 << 10), Algo::OneShot);
        assert_eq!(t.all_reduce_algo((64 << 10) + 16), Algo::TwoShot);
        assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShot);
        assert_eq!(t.all_reduce_algo(1 << 30), Algo::TwoShotPush);
        // The LL two-shot is used between the two limits when they are raised apart.
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_TWO_SHOT_LL_MAX", "1048576")])).unwrap();
        assert_eq!(t.all_reduce_algo((64 << 10) + 16), Algo::TwoShotLl);
        assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShotLl);
        assert_eq!(t.all_reduce_algo((1 << 20) + 16), Algo::TwoShot);
    }

    #[test]
    fn the_fused_kernel_keeps_its_ll_protocols_longer_than_the_plain_all_reduce() {
        let t = Tuning::default();
        assert_eq!(t.fused_algo(8 << 10), Algo::OneShot);
        assert_eq!(t.fused_algo(64 << 10), Algo::OneShot);
        assert_eq!(t.fused_algo(128 << 10), Algo::TwoShotLl);
        assert_eq!(t.fused_algo(256 << 10), Algo::TwoShotLl);
        // The LL scratch holds what the fused LL protocols send, not only the plain ones.
        assert!(t.ll_cap_packs(4) >= 2 * (256 << 10) / 16 / 4);
        assert_eq!(t.fused_algo((256 << 10) + 16), Algo::TwoShot);
        let forced = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "two_shot")])).unwrap();
        assert_eq!(forced.fused_algo(8 << 10), Algo::TwoShot);
    }

    #[test]
    fn the_environment_forces_an_algorithm_within_the_scratch_capacity() {
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "two_shot")])).unwrap();
        assert_eq!(t.all_reduce_algo(16), Algo::TwoShot);
        let t = Tuning::from_lookup(lookup(&[
            ("SYMCOMM_ALGO", "one_shot"),
            ("SYMCOMM_ONE_SHOT_MAX", "65536"),
            ("SYMCOMM_TWO_SHOT_LL_MAX", "1048576"),
        ]))
        .unwrap();
        assert_eq!(t.all_reduce_algo(65536), Algo::OneShot);
        // Beyond its limit a forced one-shot cannot run: the choice by size instead.
        assert_eq!(t.all_reduce_algo(65536 + 16), Algo::TwoShotLl);
        assert_eq!(t.all_reduce_algo(4 << 20), Algo::TwoShot);
        // The two-shot LL limit (two slices of 1 MiB / 8 per sender) sizes the scratch.
        assert_eq!(t.ll_cap_packs(8), 16384);
        assert_eq!(t.ll_cap_packs(1), 131072);
    }

    #[test]
    fn multimem_runs_only_when_forced_and_asked_for() {
        for a in [Algo::MultimemOneShot, Algo::MultimemTwoShot] {
            assert_eq!(Algo::parse(a.name()), Some(a));
            assert!(a.is_multimem());
            let set = [("SYMCOMM_ALGO", a.name())];
            // Without SYMCOMM_NVLS=1 (or with another value) the choice is by size.
            for nvls in [None, Some("0"), Some("yes")] {
                let mut vars = set.to_vec();
                vars.extend(nvls.map(|v| ("SYMCOMM_NVLS", v)));
                let t = Tuning::from_lookup(lookup(&vars)).unwrap();
                assert!(!t.multimem, "{nvls:?}");
                assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
                assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShot);
            }
            let on = Tuning::from_lookup(lookup(&[set[0], ("SYMCOMM_NVLS", "1")])).unwrap();
            assert!(on.multimem);
            assert_eq!(on.all_reduce_algo(4096), a);
            assert_eq!(on.all_reduce_algo(1 << 30), a);
            // There is no fused multimem kernel: the fused choice stays by size.
            assert_eq!(on.fused_algo(8 << 10), Algo::OneShot);
            assert_eq!(on.fused_algo(1 << 20), Algo::TwoShot);
        }
        // The choice by size never picks it, multicast or not.
        let on = Tuning::from_lookup(lookup(&[("SYMCOMM_NVLS", "1")])).unwrap();
        for bytes in [16, 4096, 1 << 20, 1 << 30] {
            assert!(!on.all_reduce_algo(bytes).is_multimem(), "{bytes}");
        }
        for a in [
            Algo::OneShot,
            Algo::TwoShotLl,
            Algo::TwoShot,
            Algo::TwoShotPush,
        ] {
            assert!(!a.is_multimem() && Algo::parse(a.name()) == Some(a));
        }
    }

    #[test]
    fn the_push_two_shot_runs_only_with_its_scratch_and_above_its_minimum() {
        let t = Tuning::default();
        assert_eq!(t.all_reduce_algo(1 << 30), Algo::TwoShotPush);
        assert_eq!(t.all_reduce_algo((16 << 20) - 16), Algo::TwoShot);
        assert_eq!(t.all_reduce_algo(16 << 20), Algo::TwoShotPush);
        let off = Tuning::from_lookup(lookup(&[("SYMCOMM_PUSH_SCRATCH", "0")])).unwrap();
        assert_eq!(
            off.all_reduce_algo_with(Some(Algo::TwoShotPush), 1 << 30),
            Algo::TwoShot
        );
        assert_eq!(off.push_window_bytes(8), 0);
        let t = Tuning::from_lookup(lookup(&[
            ("SYMCOMM_PUSH_SCRATCH", "268435456"),
            ("SYMCOMM_PUSH_MIN", "2097152"),
        ]))
        .unwrap();
        assert_eq!(t.all_reduce_algo((2 << 20) - 16), Algo::TwoShot);
        assert_eq!(t.all_reduce_algo(2 << 20), Algo::TwoShotPush);
        assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
        assert_eq!(
            t.all_reduce_algo_with(Some(Algo::TwoShot), 1 << 30),
            Algo::TwoShot
        );
        assert!(Tuning::from_lookup(lookup(&[("SYMCOMM_PUSH_SLOTS", "1")])).is_err());
        assert_eq!(Algo::parse("two_shot_push"), Some(Algo::TwoShotPush));
    }

    #[test]
    fn push_launches_fit_the_scratch_and_use_whole_passes() {
        let t = Tuning::default();
        for n in [2usize, 4, 8] {
            for slice in [1u64, 1000, 1 << 16, 1 << 20, 1 << 24] {
                let (g, chunk) = t.push_shape(n, slice, 512);
                assert!(g >= 1 && g <= t.max_blocks);
                assert!(chunk >= 1);
                let end = plan::pipe_slot_off(
                    u64::from(g),
                    n as u64,
                    u64::from(t.push_slots),
                    chunk,
                    u64::from(g),
                    0,
                    0,
                );
                assert!(end <= t.push_window_bytes(n), "n {n} slice {slice}");
                assert!(chunk <= 512 || chunk % 512 == 0);
                assert!(chunk <= slice.div_ceil(u64::from(g)));
            }
        }
        // 1 GiB over 8 ranks: 128 blocks, 1024-pack (16 KiB) slots, 64 steps.
        let slice = (1u64 << 30) / 16 / 8;
        assert_eq!(t.push_shape(8, slice, 512), (128, 1024));
        assert_eq!(plan::pipe_steps(slice, 128, 1024), 64);
    }

    #[test]
    fn malformed_knobs_are_rejected_with_the_variable_named() {
        let e = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "three_shot")])).unwrap_err();
        assert!(e.to_string().contains("SYMCOMM_ALGO"), "{e}");
        let e = Tuning::from_lookup(lookup(&[("SYMCOMM_MAX_BLOCKS", "0")])).unwrap_err();
        assert!(e.to_string().contains("SYMCOMM_MAX_BLOCKS"), "{e}");
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_TIMEOUT_MS", "250")])).unwrap();
        assert_eq!(t.timeout_ns, 250_000_000);
    }

    #[test]
    fn the_fused_direct_limit_is_inclusive_and_zero_turns_it_off() {
        assert!(Tuning::default().fused_direct(crate::rmsnorm::FUSED_ROW_BYTES as usize));
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "1048576")])).unwrap();
        assert!(t.fused_direct(1 << 20));
        assert!(!t.fused_direct((1 << 20) + 16));
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "0")])).unwrap();
        assert!(!t.fused_direct(16));
        let e = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "-1")])).unwrap_err();
        assert!(e.to_string().contains("SYMCOMM_FUSED_DIRECT_MAX"), "{e}");
    }

    #[test]
    fn small_data_movement_uses_ll_within_the_scratch() {
        let t = Tuning::default();
        assert!(t.ll_for(256 << 10, 32 << 10, 8));
        assert!(!t.ll_for((256 << 10) + 128, 32 << 10, 8));
        let t = Tuning::from_lookup(lookup(&[
            ("SYMCOMM_LL_MAX", "0"),
            ("SYMCOMM_ONE_SHOT_MAX", "0"),
            ("SYMCOMM_TWO_SHOT_LL_MAX", "0"),
            ("SYMCOMM_FUSED_ONE_SHOT_MAX", "0"),
            ("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", "0"),
        ]))
        .unwrap();
        assert!(!t.ll_for(4096, 512, 8));
        assert_eq!(t.ll_cap_packs(8), 1);
    }

    #[test]
    fn tunings_outside_the_kernels_limits_are_refused() {
        assert!(Tuning::default().validate().is_ok());
        let breakers: [fn(&mut Tuning); 5] = [
            |t| t.max_blocks = MAX_BLOCKS + 1,
            |t| t.max_blocks = 0,
            |t| t.ll_blocks = MAX_LL_BLOCKS + 1,
            |t| t.min_threads = 100,
            |t| t.ll_min_threads = 1024,
        ];
        for breaker in breakers {
            let mut bad = Tuning::default();
            breaker(&mut bad);
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("gallery tuning"), "{e}");
        }
    }

    #[test]
    fn fewer_ranks_keep_the_one_shot_longer_unless_the_environment_says_otherwise() {
        let four = Tuning::for_ranks(4);
        assert_eq!(four, Tuning::default());
        assert_eq!(Tuning::for_ranks(8), four);
        let two = Tuning::for_ranks(2);
        assert_eq!(two.all_reduce_algo(128 << 10), Algo::OneShot);
        assert_eq!(two.all_reduce_algo(256 << 10), Algo::OneShot);
        assert_eq!(two.all_reduce_algo((256 << 10) + 16), Algo::TwoShot);
        assert_eq!(four.all_reduce_algo(128 << 10), Algo::TwoShot);
        assert_eq!(two.fused_algo(256 << 10), Algo::OneShot);
        assert_eq!(four.fused_algo(256 << 10), Algo::TwoShotLl);
        assert_eq!(Tuning::for_ranks(3).one_shot_max, 128 << 10);
        // The LL scratch holds what the raised limit sends.
        assert!(two.ll_cap_packs(2) * plan::PACK >= 256 << 10);
        // A limit set in the environment is taken as it is.
        let set = Tuning::from_lookup_for(2, lookup(&[("SYMCOMM_ONE_SHOT_MAX", "4096")])).unwrap();
        assert_eq!(set.one_shot_max, 4096);
        assert_eq!(set.fused_one_shot_max, 256 << 10);
    }

    #[test]
    fn block_counts_follow_the_work_and_the_cap() {
        let t = Tuning::default();
        // Narrow blocks first, as many as allowed, then wider ones.
        assert_eq!(t.shape(1), (1, 128));
        assert_eq!(t.shape(128 * 3), (3, 128));
        assert_eq!(t.shape(128 * 128), (128, 128));
        // One pack more: blocks a warp wider, so fewer of them cover the work.
        assert_eq!(t.shape(128 * 128 + 1), (103, 160));
        assert_eq!(t.shape(1 << 30), (128, 512));
        assert_eq!(t.ll_shape(256), (4, 64));
        assert_eq!(t.ll_shape(1 << 20), (64, 512));
    }
}
