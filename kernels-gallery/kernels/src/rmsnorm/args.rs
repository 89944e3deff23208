//! What the RMSNorm kernels take and where rows live: the row arguments ([`NormArgs`], one
//! kernel parameter), the owner of a row in the two-shot split, and where a row's `h` copy
//! lies in the fused region.

use crate::rmsnorm_split::h_off;

/// The row arguments of the RMSNorm kernels (one kernel parameter; `#[repr(C)]`, 56 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NormArgs {
    /// Device address of the residual rows (`tokens × hidden` bf16, replicated on every rank).
    pub residual: u64,
    /// Device address of the weight (`hidden` bf16).
    pub weight: u64,
    /// Device address of the normalised output rows.
    pub out: u64,
    /// Device address of `h = sum + residual` (may equal `residual`).
    pub residual_out: u64,
    /// Rows.
    pub tokens: u64,
    /// Elements per row (a multiple of 8).
    pub hidden: u64,
    /// The epsilon inside the square root.
    pub eps: f32,
    /// Segments per row of the fused kernels (0 or 1: one block per row; see
    /// [`crate::rmsnorm_split::split`]); ignored by the unfused kernel.
    pub segs: u32,
}

const _: () = assert!(core::mem::size_of::<NormArgs>() == 56);

// SAFETY: `repr(C)`, six `u64` then an `f32` and a `u32`: 56 bytes (asserted) with no padding;
// every bit pattern is a value. A kernel argument by value (`#[kernel]` requires `Pod`).
unsafe impl symcomm_device::bytemuck::Zeroable for NormArgs {}
// SAFETY: as above.
unsafe impl symcomm_device::bytemuck::Pod for NormArgs {}

impl NormArgs {
    /// Segments per row of the fused kernels (at least 1).
    #[inline(always)]
    pub(crate) fn segs(&self) -> u64 {
        u64::from(self.segs.max(1))
    }
}

/// Byte offset of row `row`'s `h` copy in the fused region of the scratch window.
#[inline(always)]
pub const fn fused_h_off(row: u64, hidden: u64) -> u64 {
    h_off(row, hidden)
}

/// The rank that owns `row` when `tokens` rows are split into `n` slices of
/// `ceil(tokens / n)`.
#[inline(always)]
pub const fn owner_of(row: u64, tokens: u64, n: u64) -> u64 {
    row / tokens.div_ceil(n)
}
