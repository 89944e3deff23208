//! `ll`: a round trip of LL lines between two blocks, with an unwritten line that must time
//! out.

use symcomm_device::ll;
use symcomm_device::prelude::*;

/// LL round trip: block 0 sends `data[i]` in line `i` (`i < n`) for round `epoch`; block 1
/// receives every line with a timed wait and writes `got[i]` and `codes[i]` (result code).
/// Block 1 also polls line `n` (never written in this round; the host pre-fills it with the
/// previous epoch) with `short_timeout_ns` and writes its code to `codes[n]` (expected:
/// timeout).
///
/// # Safety
/// Two blocks; `lines` holds n + 1 lines, `data`/`got` n u64, `codes` n + 1 u32.
#[allow(clippy::too_many_arguments)] // a kernel's parameters are its interface
#[kernel]
pub unsafe fn ll_roundtrip(
    lines: *mut ll::Line,
    data: *const u64,
    got: *mut u64,
    codes: *mut u32,
    n: u32,
    epoch: u32,
    timeout_ns: u64,
    short_timeout_ns: u64,
) {
    let t = thread_idx().x;
    let step = block_dim().x;
    if block_idx().x == 0 {
        let mut i = t;
        while i < n {
            // SAFETY: launch contract.
            unsafe { ll::store(lines.add(i as usize), *data.add(i as usize), epoch) };
            i += step;
        }
    } else if block_idx().x == 1 {
        let mut i = t;
        while i < n {
            // SAFETY: launch contract.
            let r =
                unsafe { ll::load(lines.add(i as usize), epoch, core::ptr::null(), timeout_ns) };
            // SAFETY: launch contract.
            unsafe {
                *got.add(i as usize) = r.unwrap_or(0);
                *codes.add(i as usize) = WaitError::result_code(r.map(|_| ()));
            }
            i += step;
        }
        if t == 0 {
            // SAFETY: launch contract.
            let r = unsafe {
                ll::load(
                    lines.add(n as usize),
                    epoch,
                    core::ptr::null(),
                    short_timeout_ns,
                )
            };
            // SAFETY: launch contract.
            unsafe { *codes.add(n as usize) = WaitError::result_code(r.map(|_| ())) };
        }
    }
}
