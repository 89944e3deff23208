//! Element types and reduction operators the gallery supports, and the names of the kernels
//! that implement them.

use std::fmt;

/// An element type of the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// IEEE binary32.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE binary16.
    F16,
    /// 32-bit signed integer (wrapping sums).
    I32,
}

impl DataType {
    /// Every supported type.
    pub const ALL: [DataType; 4] = [DataType::F32, DataType::Bf16, DataType::F16, DataType::I32];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::Bf16 | DataType::F16 => 2,
        }
    }

    /// The name used in kernel names and on the command line (`f32`, `bf16`, `f16`, `i32`).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::Bf16 => "bf16",
            DataType::F16 => "f16",
            DataType::I32 => "i32",
        }
    }

    /// Parses [`DataType::name`].
    pub fn parse(s: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.name() == s)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// Addition (fp32 accumulation for 16-bit floats, wrapping for integers).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl RedOp {
    /// Every supported operator.
    pub const ALL: [RedOp; 3] = [RedOp::Sum, RedOp::Min, RedOp::Max];

    /// The name used in kernel names and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Min => "min",
            RedOp::Max => "max",
        }
    }

    /// Parses [`RedOp::name`].
    pub fn parse(s: &str) -> Option<RedOp> {
        RedOp::ALL.into_iter().find(|o| o.name() == s)
    }
}

impl fmt::Display for RedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kernel of `collective` (`all_reduce_one_shot`, `all_reduce_two_shot`,
/// `all_reduce_two_shot_push`, `reduce_scatter`) for `t` and `op`.
pub fn reducing_kernel(collective: &str, t: DataType, op: RedOp) -> String {
    format!("{collective}_{}_{}", t.name(), op.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reducing_kernel_name_exists_in_the_gallery_ptx() {
        let entries = crate::kernels::ENTRY_POINTS;
        for t in DataType::ALL {
            for op in RedOp::ALL {
                for c in [
                    "all_reduce_one_shot",
                    "all_reduce_two_shot",
                    "reduce_scatter",
                ] {
                    let name = reducing_kernel(c, t, op);
                    assert!(entries.contains(&name.as_str()), "{name} missing");
                }
            }
        }
        for name in [
            "all_gather",
            "all_gather_ll",
            "all_to_all",
            "all_to_all_ll",
            "broadcast",
            "all_reduce_rmsnorm_one_shot_bf16",
            "all_reduce_rmsnorm_two_shot_bf16",
            "all_reduce_rmsnorm_two_shot_direct_bf16",
            "all_reduce_rmsnorm_two_shot_ll_bf16",
            "rmsnorm_residual_bf16",
            "bench_fill",
            "all_reduce_multimem_one_shot_f32_sum",
            "all_reduce_multimem_two_shot_f32_sum",
            "all_reduce_multimem_one_shot_bf16_sum",
            "all_reduce_multimem_two_shot_bf16_sum",
            "all_reduce_multimem_one_shot_f16_sum",
            "all_reduce_multimem_two_shot_f16_sum",
        ] {
            assert!(entries.contains(&name), "{name} missing");
        }
    }

    #[test]
    fn names_round_trip_through_parse() {
        for t in DataType::ALL {
            assert_eq!(DataType::parse(t.name()), Some(t));
        }
        for o in RedOp::ALL {
            assert_eq!(RedOp::parse(o.name()), Some(o));
        }
        assert_eq!(DataType::parse("f64"), None);
    }
}
