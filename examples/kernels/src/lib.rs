//! Kernels of the symcomm examples. Built to PTX by `examples/build.rs`.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use symcomm_device::prelude::*;

/// `c[i] = a[i] + b[i]` for every `i < n`, grid-stride over any launch shape.
///
/// # Safety
/// - `a` and `b` are valid for `n` reads of `f32`, `c` for `n` writes, all device memory
///   of the launching device; `c` does not overlap `a` or `b`.
#[kernel]
pub unsafe fn vector_add(a: *const f32, b: *const f32, c: *mut f32, n: u64) {
    let stride = u64::from(block_dim().x) * u64::from(grid_dim().x);
    let mut i = u64::from(block_idx().x) * u64::from(block_dim().x) + u64::from(thread_idx().x);
    while i < n {
        // SAFETY: i < n, and the caller guarantees the three buffers hold n elements.
        unsafe { *c.add(i as usize) = *a.add(i as usize) + *b.add(i as usize) };
        i += stride;
    }
}
