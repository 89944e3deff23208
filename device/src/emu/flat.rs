//! A flat virtual range for emulated ranks that run kernels without the host runtime (unit
//! tests of multi-rank kernels): `n` slots at a 4 GiB stride, as the host runtime lays out a
//! window's copies, of which the first bytes of each slot are usable memory.

use std::format;
use std::string::String;

/// `n` slots at `base + r × STRIDE`; the first `slot_bytes` of each are readable, writable
/// and zeroed, the rest of the range is reserved and inaccessible (a stray access faults).
/// Unmapped on drop.
#[derive(Debug)]
pub struct FlatVa {
    base: u64,
    len: usize,
}

// SAFETY: the range is plain memory that the emulated ranks (threads) share, as GPUs share
// peer memory; `FlatVa` only hands out addresses.
unsafe impl Send for FlatVa {}
// SAFETY: as above.
unsafe impl Sync for FlatVa {}

impl FlatVa {
    /// The distance between two ranks' slots: 4 GiB, the smallest stride a window descriptor
    /// can express (`stride4g = 1`).
    pub const STRIDE: u64 = 4 << 30;

    /// Reserves `n` slots and opens the first `slot_bytes` of each; the error names the call
    /// that failed.
    pub fn new(n: usize, slot_bytes: usize) -> Result<FlatVa, String> {
        if slot_bytes as u64 > Self::STRIDE {
            return Err(format!(
                "{slot_bytes} bytes do not fit a slot of {} bytes",
                Self::STRIDE
            ));
        }
        let len = (n as u64)
            .checked_mul(Self::STRIDE)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| format!("{n} slots overflow the address space"))?;
        // SAFETY: a fresh private reservation at an address of the kernel's choosing.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "mmap of {len} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        // From here on `va` owns the reservation: an error below unmaps it.
        let va = FlatVa {
            base: p as u64,
            len,
        };
        for r in 0..n as u64 {
            // SAFETY: the first `slot_bytes` of slot `r` lie inside the reservation.
            let rc = unsafe {
                libc::mprotect(
                    va.slot(r as usize) as *mut libc::c_void,
                    slot_bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                return Err(format!(
                    "mprotect of slot {r}: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        Ok(va)
    }

    /// The address of slot 0 (the `lsa_flat_base` of a window whose offset is 0).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The address of rank `rank`'s slot.
    pub fn slot(&self, rank: usize) -> u64 {
        self.base + rank as u64 * Self::STRIDE
    }
}

impl Drop for FlatVa {
    fn drop(&mut self) {
        // SAFETY: exactly the reservation made in `new`, unmapped once; the kernels using it
        // have finished (their launches returned before the owner could drop it).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
