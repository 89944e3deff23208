//! Element types and reduction operators the gallery supports, and the names of the kernels
//! that implement them.

/// Implements, for a fieldless enum whose variants each have a name: `ALL` (every variant, in
/// order), `name` (the variant's name), `parse` (its inverse) and `Display` (the name). `all`
/// and `name` are the docs of `ALL` and `name`.
macro_rules! names {
    (
        $ty:ident { $($variant:ident => $name:literal),+ $(,)? },
        all: $all:literal,
        name: $name_doc:literal $(,)?
    ) => {
        impl $ty {
            #[doc = $all]
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];

            #[doc = $name_doc]
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }

            #[doc = concat!("Parses [`", stringify!($ty), "::name`].")]
            pub fn parse(s: &str) -> Option<$ty> {
                Self::ALL.into_iter().find(|v| v.name() == s)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use names;

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

names!(
    DataType { F32 => "f32", Bf16 => "bf16", F16 => "f16", I32 => "i32" },
    all: "Every supported type.",
    name: "The name used in kernel names and on the command line (`f32`, `bf16`, `f16`, `i32`).",
);

impl DataType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::I32 => 4,
            DataType::Bf16 | DataType::F16 => 2,
        }
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

names!(
    RedOp { Sum => "sum", Min => "min", Max => "max" },
    all: "Every supported operator.",
    name: "The name used in kernel names and on the command line.",
);

/// True when NVLink SHARP can reduce `t` with `op` (`multimem.ld_reduce`): every type's sum,
/// and minima and maxima of every type but f32 (PTX has no f32 `min`/`max` there).
pub fn multimem_reduces(t: DataType, op: RedOp) -> bool {
    t != DataType::F32 || op == RedOp::Sum
}

/// The kernel of `collective` (`all_reduce_one_shot`, `all_reduce_two_shot`,
/// `all_reduce_two_shot_push`, `all_reduce_multimem_one_shot`, `reduce_scatter`, …) for `t`
/// and `op`.
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
            "rmsnorm_residual_elements_bf16",
            "bench_fill",
        ] {
            assert!(entries.contains(&name), "{name} missing");
        }
        // Multimem: what the switch reduces (f32 sums only; PTX has no f32 min/max there).
        for t in DataType::ALL {
            for op in RedOp::ALL {
                let name = reducing_kernel("all_reduce_multimem_one_shot", t, op);
                let want = multimem_reduces(t, op);
                assert_eq!(entries.contains(&name.as_str()), want, "{name}");
                let two = name.replace("one_shot", "two_shot");
                assert_eq!(entries.contains(&two.as_str()), want, "{two}");
            }
        }
    }

    /// The PTX of entry `name`, up to the next entry.
    fn body(name: &str) -> &'static str {
        let ptx = crate::kernels::PTX;
        let start = ptx.find(&format!(".entry {name}(")).expect(name);
        let end = ptx[start + 1..]
            .find(".entry ")
            .map_or(ptx.len(), |e| start + 1 + e);
        &ptx[start..end]
    }

    #[test]
    fn each_multimem_kernel_asks_the_switch_for_its_type_and_operator() {
        let ld = "multimem.ld_reduce.relaxed.sys.global.";
        for (t, op, form, store) in [
            (DataType::F32, RedOp::Sum, "add.v4.f32", "v4.f32"),
            (
                DataType::Bf16,
                RedOp::Sum,
                "add.acc::f32.v4.bf16x2",
                "v4.bf16x2",
            ),
            (
                DataType::F16,
                RedOp::Sum,
                "add.acc::f32.v4.f16x2",
                "v4.f16x2",
            ),
            (DataType::I32, RedOp::Sum, "add.s32", "v4.f32"),
            (DataType::Bf16, RedOp::Min, "min.v4.bf16x2", "v4.bf16x2"),
            (DataType::Bf16, RedOp::Max, "max.v4.bf16x2", "v4.bf16x2"),
            (DataType::F16, RedOp::Min, "min.v4.f16x2", "v4.f16x2"),
            (DataType::F16, RedOp::Max, "max.v4.f16x2", "v4.f16x2"),
            (DataType::I32, RedOp::Min, "min.s32", "v4.f32"),
            (DataType::I32, RedOp::Max, "max.s32", "v4.f32"),
        ] {
            let (t, op) = (t.name(), op.name());
            let one = body(&format!("all_reduce_multimem_one_shot_{t}_{op}"));
            let two = body(&format!("all_reduce_multimem_two_shot_{t}_{op}"));
            for (kernel, shot) in [(one, "one"), (two, "two")] {
                let want = format!("{ld}{form} ");
                assert!(kernel.contains(&want), "{shot}-shot {t} {op}: no `{want}`");
                // One kind of reduction per kernel.
                let kinds = kernel.matches(ld).count();
                assert_eq!(kinds, kernel.matches(&want).count(), "{shot}-shot {t} {op}");
            }
            // Only the two-shot stores through the switch.
            let st = format!("multimem.st.relaxed.sys.global.{store} ");
            assert!(two.contains(&st), "two-shot {t} {op}: no `{st}`");
            assert!(
                !one.contains("multimem.st."),
                "one-shot {t} {op} stores through the switch"
            );
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
