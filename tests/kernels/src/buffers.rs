//! Helpers for the host side of the GPU tests: filling and copying device memory that
//! cuMemset/cuMemcpy cannot reach because it is mapped in a custom VA range (the flat VA of
//! the barrier checks). Grid-stride loops over [`gid`](crate::geometry::gid).

use symcomm_device::prelude::*;

use crate::geometry::gid;

/// `dst[i] = value` for `i < n`, grid-stride.
///
/// # Safety
/// `dst` is valid for `n` u32 writes.
#[kernel]
pub unsafe fn fill_u32(dst: *mut u32, n: u64, value: u32) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: i < n.
        unsafe { *dst.add(i) = value };
        i += stride;
    }
}

/// `dst[i] = src[i]` for `i < n`, grid-stride.
///
/// # Safety
/// `src`/`dst` are valid for `n` u32 reads/writes and do not overlap.
#[kernel]
pub unsafe fn copy_u32(src: *const u32, dst: *mut u32, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: i < n.
        unsafe { *dst.add(i) = *src.add(i) };
        i += stride;
    }
}
