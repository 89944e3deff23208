//! Fused all-reduce + residual add + RMSNorm (host side).

/// Bytes of the scratch window reserved for the fused kernel's rows.
pub const FUSED_SCRATCH_BYTES: u64 = 8 << 20;
