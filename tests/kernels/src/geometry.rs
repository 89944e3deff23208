//! Thread indexing: [`gid`], the global 1-D thread index every grid-stride kernel of this crate
//! starts from, and the `geometry` kernel that reports the launch shape each thread sees.

use symcomm_device::prelude::*;

/// Global 1-D thread index.
#[inline(always)]
pub(crate) fn gid() -> usize {
    (block_idx().x * block_dim().x + thread_idx().x) as usize
}

/// Writes each thread's geometry as 8 words at `out[8 * global_id ..]`:
/// `thread_idx.{x,y,z}, block_idx.{x,y,z}, block_dim.x, grid_dim.x`.
///
/// # Safety
/// `out` is valid for `8 × total threads` u32 writes.
#[kernel]
pub unsafe fn geometry(out: *mut u32) {
    let (t, b, bd, gd) = (thread_idx(), block_idx(), block_dim(), grid_dim());
    let block_linear = (b.z * gd.y + b.y) * gd.x + b.x;
    let thread_linear = (t.z * bd.y + t.y) * bd.x + t.x;
    let id = (block_linear * (bd.x * bd.y * bd.z) + thread_linear) as usize;
    let words = [t.x, t.y, t.z, b.x, b.y, b.z, bd.x, gd.x];
    for (k, w) in words.into_iter().enumerate() {
        // SAFETY: id < total threads; the caller sized `out` for 8 words per thread.
        unsafe { *out.add(8 * id + k) = w };
    }
}
