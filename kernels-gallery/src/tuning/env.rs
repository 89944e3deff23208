//! [`Tuning`] from the environment: the defaults for the rank count, overridden by the
//! `SYMCOMM_*` variables that are set (the module docs of [`crate::tuning`] list them), each
//! checked against the range [`Tuning::validate`] takes.

use symcomm::{Error, Result};
use symcomm_gallery_kernels::plan;

use super::algo::Algo;
use super::knobs::{
    DependentLaunch, LL_LIMIT, LL_TWO_SHOT_LIMIT, MAX_BLOCKS, MAX_LL_BLOCKS, MAX_PUSH_SLOTS,
    PUSH_SCRATCH_LIMIT, Tuning,
};

impl Tuning {
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
}
