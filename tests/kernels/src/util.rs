//! `util`: the fast 32-bit division by a precomputed reciprocal, compared with the host's `/`
//! and `%`.

use symcomm_device::prelude::*;
use symcomm_device::util::{idiv_fast32, idiv_rcp32, imod_fast32};

use crate::geometry::gid;

/// `q[i] = idiv_fast32(x[i], d[i], idiv_rcp32(d[i]))`, `r[i] = imod_fast32(...)`.
///
/// # Safety
/// All buffers hold `n` u32; every `d[i] >= 1`.
#[kernel]
pub unsafe fn div_fast(x: *const u32, d: *const u32, q: *mut u32, r: *mut u32, n: u64) {
    let stride = (block_dim().x * grid_dim().x) as usize;
    let mut i = gid();
    while (i as u64) < n {
        // SAFETY: launch contract.
        unsafe {
            let (xi, di) = (*x.add(i), *d.add(i));
            let rcp = idiv_rcp32(di);
            *q.add(i) = idiv_fast32(xi, di, rcp);
            *r.add(i) = imod_fast32(xi, di, rcp);
        }
        i += stride;
    }
}
