//! `reduce`: packed-vector reductions of every element type (16-bit floats, f32, integers,
//! 64-bit), compared bit for bit with the host.

use symcomm_device::mem::U32x4;
use symcomm_device::prelude::*;
use symcomm_device::reduce::{Bf16, F16, Max, Min, Prod, Sum, reduce_pack};

use crate::geometry::gid;

/// Outputs per input pair written by [`reduce_packs`].
pub const REDUCE_OPS: usize = 8;

// ANCHOR: reduce_packs
/// For every `i < n`: `out[8 i + k]` = reduction `k` of `a[i]` and `b[i]`:
/// F16 Sum, Bf16 Sum, f32 Sum, f32 Max, i32 Min, u32 Prod, u64 Sum, f64 Sum.
///
/// # Safety
/// `a`, `b` hold `n` vectors, `out` 8n.
#[kernel]
pub unsafe fn reduce_packs(a: *const U32x4, b: *const U32x4, out: *mut U32x4, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: launch contract.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        let r = [
            reduce_pack::<F16, Sum>(x, y),
            reduce_pack::<Bf16, Sum>(x, y),
            reduce_pack::<f32, Sum>(x, y),
            reduce_pack::<f32, Max>(x, y),
            reduce_pack::<i32, Min>(x, y),
            reduce_pack::<u32, Prod>(x, y),
            reduce_pack::<u64, Sum>(x, y),
            reduce_pack::<f64, Sum>(x, y),
        ];
        for (k, v) in r.into_iter().enumerate() {
            // SAFETY: launch contract.
            unsafe { *out.add(REDUCE_OPS * i + k) = v };
        }
        i += stride;
    }
}
// ANCHOR_END: reduce_packs
