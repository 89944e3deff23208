//! The LL ("low latency") protocol: data and its validity flag travel in the same 16-byte
//! store, so a receiver needs no barrier to know the data has arrived.
//!
//! A line is `{lo, epoch, hi, epoch}` (four `u32`, 16-byte aligned): 8 bytes of payload split
//! in two words, each followed by the epoch of the round that wrote it. The sender writes the
//! whole line with one `st.relaxed.sys.global.v4.u32`; the receiver polls it with
//! `ld.relaxed.sys.global.v4.u32` until **both** epoch words equal the round's epoch.
//!
//! **Assumption**: each naturally aligned 8-byte half of the line (`{lo, epoch}` and
//! `{hi, epoch}`) is written and read as one unit, so an epoch word of this round implies a
//! payload word of this round. PTX promises single-copy atomicity only per 4-byte element of
//! a `.v4.u32` access (see [`mem::load_v4_u32`]); like NCCL's LL protocol, which relies on the
//! same 8-byte atomicity of each half of its 16-byte accesses, this protocol relies on the
//! hardware never splitting an aligned 8-byte half. The line as a whole may tear (two halves
//! of different rounds): checking both epochs covers that. On the host, the `mem` backend
//! makes each half one 8-byte atomic access, so the emulator honours the assumption.
//!
//! Epochs are never 0, so a zeroed buffer holds no valid line; advance them with
//! [`next_epoch`], which skips 0 on wrap-around. Lines of the previous round hold the previous
//! epoch, so one buffer can be reused round after round as long as a receiver has read a line
//! before its sender overwrites it (double-buffer by epoch parity when that is not guaranteed).
//!
//! 16-byte payloads use two consecutive lines ([`store_pack`], [`load_pack`]).

use crate::mem::{self, LoadOrder, Scope, StoreOrder, U32x4};
use crate::wait::{NO_TIMEOUT, Spin, WaitError};

/// One LL line (16 bytes: `{lo, epoch, hi, epoch}`).
pub type Line = U32x4;

/// The epoch after `epoch`, skipping 0 (which marks "never written").
#[inline(always)]
pub const fn next_epoch(epoch: u32) -> u32 {
    let n = epoch.wrapping_add(1);
    if n == 0 { 1 } else { n }
}

// ANCHOR: ll_encode
/// The line that carries `data` in round `epoch`.
#[inline(always)]
pub const fn encode(data: u64, epoch: u32) -> Line {
    U32x4([data as u32, epoch, (data >> 32) as u32, epoch])
}

/// The payload of `line` if both its epoch words equal `epoch`.
#[inline(always)]
pub const fn decode(line: Line, epoch: u32) -> Option<u64> {
    let [lo, e0, hi, e1] = line.0;
    if e0 == epoch && e1 == epoch {
        Some(lo as u64 | ((hi as u64) << 32))
    } else {
        None
    }
}
// ANCHOR_END: ll_encode

/// Sends 8 bytes in round `epoch` (one `st.relaxed.sys.global.v4.u32`).
///
/// # Safety
/// - `line` is a 16-byte aligned global address (local or a peer's), valid for writes;
/// - `epoch != 0`, and no other thread writes the line in this round.
///
/// # Ordering
/// Relaxed at system scope; the data needs no other ordering (it carries its own flag). It
/// does **not** publish other memory: use a release (fence or barrier) for that.
#[inline(always)]
pub unsafe fn store(line: *mut Line, data: u64, epoch: u32) {
    // SAFETY: the caller upholds the contract above.
    unsafe { mem::store_v4_u32(line, encode(data, epoch), StoreOrder::Relaxed, Scope::Sys) }
}

/// Reads `line` once: the payload if it was written in round `epoch`, else `None`
/// (one `ld.relaxed.sys.global.v4.u32`).
///
/// # Safety
/// - `line` is a 16-byte aligned global address valid for reads.
///
/// # Ordering
/// Relaxed at system scope.
#[inline(always)]
pub unsafe fn try_load(line: *const Line, epoch: u32) -> Option<u64> {
    // SAFETY: the caller upholds the contract above.
    decode(
        unsafe { mem::load_v4_u32(line, LoadOrder::Relaxed, Scope::Sys) },
        epoch,
    )
}

/// Polls `line` until it carries round `epoch`'s payload, the abort flag is raised, or
/// `timeout_ns` passes ([`NO_TIMEOUT`] = never).
///
/// # Safety
/// As [`try_load`]; `abort_flag` is null or a valid global `u32`.
///
/// # Ordering
/// Relaxed at system scope.
///
/// # Errors
/// [`WaitError::Timeout`] or [`WaitError::Aborted`].
#[inline(always)]
pub unsafe fn load(
    line: *const Line,
    epoch: u32,
    abort_flag: *const u32,
    timeout_ns: u64,
) -> Result<u64, WaitError> {
    // SAFETY: the caller guarantees the flag.
    let mut spin = unsafe { Spin::new(abort_flag, timeout_ns) };
    loop {
        // SAFETY: the caller guarantees the line.
        if let Some(v) = unsafe { try_load(line, epoch) } {
            return Ok(v);
        }
        spin.check()?;
    }
}

/// Sends 16 bytes in round `epoch` as two lines at `lines[0..2]`.
///
/// # Safety
/// As [`store`], for two consecutive lines.
///
/// # Ordering
/// As [`store`].
#[inline(always)]
pub unsafe fn store_pack(lines: *mut Line, v: U32x4, epoch: u32) {
    let [a, b, c, d] = v.0;
    // SAFETY: the caller guarantees two lines.
    unsafe {
        store(lines, u64::from(a) | (u64::from(b) << 32), epoch);
        store(lines.add(1), u64::from(c) | (u64::from(d) << 32), epoch);
    }
}

/// Receives 16 bytes of round `epoch` from two lines at `lines[0..2]` (see [`load`]).
///
/// # Safety
/// As [`load`], for two consecutive lines.
///
/// # Ordering
/// As [`load`].
///
/// # Errors
/// As [`load`].
#[inline(always)]
pub unsafe fn load_pack(
    lines: *const Line,
    epoch: u32,
    abort_flag: *const u32,
    timeout_ns: u64,
) -> Result<U32x4, WaitError> {
    // SAFETY: the caller guarantees two lines and the flag.
    let (x, y) = unsafe {
        (
            load(lines, epoch, abort_flag, timeout_ns)?,
            load(lines.add(1), epoch, abort_flag, timeout_ns)?,
        )
    };
    Ok(U32x4([
        x as u32,
        (x >> 32) as u32,
        y as u32,
        (y >> 32) as u32,
    ]))
}

/// [`load`] with no timeout and no abort flag: waits until the line arrives.
///
/// # Safety
/// As [`try_load`]; the line **will** be written in round `epoch` (otherwise this never
/// returns).
///
/// # Ordering
/// As [`load`].
#[inline(always)]
pub unsafe fn load_blocking(line: *const Line, epoch: u32) -> u64 {
    // SAFETY: forwarded; with no flag and no deadline only success ends the wait.
    match unsafe { load(line, epoch, core::ptr::null(), NO_TIMEOUT) } {
        Ok(v) => v,
        Err(_) => crate::arch::trap(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_skip_zero_and_lines_round_trip() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(u32::MAX), 1);
        assert_eq!(
            decode(encode(0x1122_3344_5566_7788, 9), 9),
            Some(0x1122_3344_5566_7788)
        );
        assert_eq!(decode(encode(5, 9), 8), None);
        assert_eq!(decode(U32x4([1, 9, 2, 8]), 9), None); // half of another round
        assert_eq!(decode(U32x4::default(), 1), None);
        let mut lines = [U32x4::default(); 2];
        // SAFETY: `lines` holds the 16-byte aligned lines both calls access; no abort flag.
        unsafe {
            store_pack(lines.as_mut_ptr(), U32x4([1, 2, 3, 4]), 7);
            assert_eq!(
                load_pack(lines.as_ptr(), 7, core::ptr::null(), 1000)
                    .unwrap()
                    .0,
                [1, 2, 3, 4]
            );
            assert_eq!(
                load(lines.as_ptr(), 8, core::ptr::null(), 100_000),
                Err(WaitError::Timeout)
            );
            assert_eq!(load_blocking(lines.as_ptr(), 7), 1 | (2 << 32));
        }
    }
}
