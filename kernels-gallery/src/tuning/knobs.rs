//! The knobs themselves: [`Tuning`] with its defaults (measured, with the numbers behind each),
//! the limits the kernels and scratch sizes rely on ([`Tuning::validate`]), and the knobs every
//! rank must set alike ([`Tuning::agreed_knobs`]).

use symcomm::{Error, Result};
use symcomm_gallery_kernels::plan;

use super::algo::Algo;

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
}
