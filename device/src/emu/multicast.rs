//! Emulated multicast ranges: what makes [`crate::multimem`] work on the host.
//!
//! On a GPU, a multicast address reaches the copy of every bound device. The emulated host
//! runtime reserves an (inaccessible) address range for the LSA team's multicast range and
//! [registers](register) it here with, per LSA peer, the address where that peer's copy of
//! byte 0 is mapped in this process (`flat_base + peer × stride`). The host backend of
//! `multimem` (the emulated switch, `emu/switch.rs`) [resolves](resolve) a multicast address
//! to those copies: `ld_reduce` sums over them, `st` stores to all of them, `red` adds to
//! all of them. An address in no registered range keeps the single-rank meaning (the address
//! itself is the only copy).
//!
//! The registry is process-global (every rank thread of a process sees it) and ranges must
//! not overlap; dropping the [`MulticastRange`] removes the range.

use std::string::{String, ToString};
use std::sync::{Arc, PoisonError, RwLock};
use std::vec::Vec;

struct Range {
    base: u64,
    size: u64,
    copies: Arc<[u64]>,
}

static RANGES: RwLock<Vec<Range>> = RwLock::new(Vec::new());

/// A registered multicast range; unregistered on drop.
#[derive(Debug)]
pub struct MulticastRange {
    base: u64,
}

/// Registers `[base, base + size)` as a multicast range whose byte `o` lives at
/// `copies[p] + o` for every member `p`. Fails when the range is empty, has no members or
/// overlaps a registered one.
///
/// # Safety
/// Until the returned [`MulticastRange`] is dropped, the host `multimem` functions, called by
/// any thread of the process, turn an access of `base + o` into accesses of `copies[p] + o`
/// for every member `p` (reads, stores and atomic read-modify-writes of up to 16 naturally
/// aligned bytes). For that whole time the caller guarantees that:
/// - every offset `o` that multimem callers may use (the range's *bound* part: the
///   `multimem` functions require a multicast address of bound memory) is backed on every
///   member: `copies[p] + o` is valid for reads and writes, and not freed or unmapped while
///   the range is registered;
/// - that memory is otherwise accessed only atomically (the `mem` functions, as emulated
///   kernels do) or under synchronisation that orders it with the multimem accesses, and no
///   Rust reference to it assumes that it does not change.
///
/// `base .. base + size` itself is never dereferenced (it may be an inaccessible
/// reservation).
pub unsafe fn register(base: u64, size: u64, copies: &[u64]) -> Result<MulticastRange, String> {
    if size == 0 || copies.is_empty() {
        return Err("an emulated multicast range needs a size and at least one member".to_string());
    }
    let end = base
        .checked_add(size)
        .ok_or_else(|| "emulated multicast range overflows".to_string())?;
    let mut ranges = RANGES.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(r) = ranges
        .iter()
        .find(|r| base < r.base + r.size && r.base < end)
    {
        return Err(std::format!(
            "emulated multicast range {base:#x}+{size:#x} overlaps {:#x}+{:#x}",
            r.base,
            r.size
        ));
    }
    ranges.push(Range {
        base,
        size,
        copies: copies.into(),
    });
    Ok(MulticastRange { base })
}

impl MulticastRange {
    /// The first multicast address.
    pub fn base(&self) -> u64 {
        self.base
    }
}

impl Drop for MulticastRange {
    fn drop(&mut self) {
        RANGES
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|r| r.base != self.base);
    }
}

/// The copies of multicast address `addr`: `(per-member base addresses, offset)`, so member
/// `p`'s copy is at `bases[p] + offset`; `None` when `addr` is in no registered range.
pub fn resolve(addr: u64) -> Option<(Arc<[u64]>, u64)> {
    let ranges = RANGES.read().unwrap_or_else(PoisonError::into_inner);
    ranges
        .iter()
        .find(|r| addr >= r.base && addr - r.base < r.size)
        .map(|r| (Arc::clone(&r.copies), addr - r.base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_to_every_copy_until_the_range_is_dropped() {
        let base = 0x7e00_0000_0000;
        // SAFETY: nothing accesses the range: only `resolve` (pure lookup) is called on it.
        let range = unsafe { register(base, 1 << 20, &[0x1000_0000, 0x2000_0000]) }.unwrap();
        let (copies, off) = resolve(base + 24).unwrap();
        assert_eq!((&copies[..], off), (&[0x1000_0000, 0x2000_0000][..], 24));
        assert!(resolve(base + (1 << 20)).is_none());
        // SAFETY: overlapping, so refused: nothing is registered.
        assert!(unsafe { register(base + 4096, 4096, &[1]) }.is_err());
        drop(range);
        assert!(resolve(base + 24).is_none());
    }
}
