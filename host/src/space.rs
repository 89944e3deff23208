//! A deterministic first-fit allocator over the integer range `[0, limit)`.
//!
//! This is how windows get the same offset in the flat VA on every rank (the counterpart of
//! NCCL's `ncclSpace`): each rank runs the same [`Space`] with the same limit (the per-rank
//! slot size, see [`crate::symmem::layout`]) on the same sequence of `alloc`/`free` calls, so
//! each call returns the same offset everywhere. There is no randomness and no hashing; the
//! result depends only on the call sequence.
//!
//! What it supports:
//! - [`Space::alloc`]: the lowest offset that is a multiple of `align` (a power of two) and
//!   where `size` bytes are free (first fit);
//! - [`Space::free`]: releases exactly one earlier allocation, named by the `(offset, size)` it
//!   was given. Partial frees and splits (which `ncclSpace` allows) are **not** supported: a
//!   free that does not name a live allocation exactly is an error;
//! - [`Space::digest`]: a digest of the live allocations. A rank cannot see a divergence by
//!   itself (deregistering a different window than its peers frees a valid block), so window
//!   registration compares every rank's digest and refuses to register on a mismatch: ranks that
//!   deregistered in different orders get an error at their next registration instead of
//!   silently different slot offsets.
//!
//! Invariants (checked by the tests after every step): live allocations are sorted, do not
//! overlap, have non-zero size and lie inside `[0, limit)`. Free space is whatever lies between
//! them, so adjacent free space is always coalesced: freeing a block merges it with the free
//! space on both sides.

use std::collections::BTreeMap;

use crate::{Error, Result};

/// A first-fit allocator of offsets in `[0, limit)`; identical call sequences give identical
/// results on every rank.
#[doc(alias = "ncclSpace")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Space {
    limit: u64,
    /// Live allocations: offset → size (size > 0), sorted by offset, non-overlapping.
    blocks: BTreeMap<u64, u64>,
}

impl Space {
    /// An empty space covering `[0, limit)`.
    pub fn new(limit: u64) -> Space {
        Space {
            limit,
            blocks: BTreeMap::new(),
        }
    }

    /// A digest (FNV-1a, 32-bit) of the live allocations, offsets and sizes in order: equal on
    /// spaces that went through the same allocations and frees.
    pub fn digest(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        for (offset, size) in self.allocations() {
            for b in offset.to_le_bytes().into_iter().chain(size.to_le_bytes()) {
                h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
            }
        }
        h
    }

    /// The exclusive upper bound of the range.
    #[cfg(test)]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Allocates `size` bytes at the lowest offset that is a multiple of `align` and free.
    ///
    /// `align` must be a non-zero power of two and `size` non-zero
    /// ([`Error::InvalidArgument`] otherwise). When no free block can hold the request the
    /// error is [`Error::OutOfSpace`], naming the largest free block.
    #[doc(alias = "ncclSpaceAlloc")]
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64> {
        if size == 0 {
            return Err(Error::InvalidArgument("space allocation of 0 bytes".into()));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "space alignment {align} is not a power of two"
            )));
        }
        let found = self
            .gaps()
            .find_map(|(start, end)| fit_in_gap(start, end, size, align));
        match found {
            Some(offset) => {
                self.blocks.insert(offset, size);
                Ok(offset)
            }
            None => Err(Error::OutOfSpace {
                size,
                align,
                limit: self.limit,
                largest_free: self.largest_free(),
            }),
        }
    }

    /// Frees the allocation that [`Space::alloc`] returned as `offset` for `size` bytes.
    ///
    /// Anything else — an offset that is not the start of a live allocation, or a size that
    /// differs from the allocated one (partial frees are not supported) — is an
    /// [`Error::InvalidArgument`] and leaves the space unchanged.
    #[doc(alias = "ncclSpaceFree")]
    pub fn free(&mut self, offset: u64, size: u64) -> Result<()> {
        match self.blocks.get(&offset) {
            Some(&allocated) if allocated == size => {
                self.blocks.remove(&offset);
                Ok(())
            }
            Some(&allocated) => Err(Error::InvalidArgument(format!(
                "space free of {size} bytes at offset {offset}, but {allocated} bytes were allocated there"
            ))),
            None => Err(Error::InvalidArgument(format!(
                "space free at offset {offset} ({size} bytes) does not name a live allocation"
            ))),
        }
    }

    /// The size of the largest free block (0 when full).
    pub fn largest_free(&self) -> u64 {
        self.gaps().map(|(s, e)| e - s).max().unwrap_or(0)
    }

    /// Bytes currently allocated.
    pub fn used(&self) -> u64 {
        self.blocks.values().sum()
    }

    /// Live allocations as `(offset, size)`, in increasing offset order.
    pub fn allocations(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.blocks.iter().map(|(&o, &s)| (o, s))
    }

    /// Free blocks as `[start, end)` pairs in increasing order, each non-empty and maximal
    /// (so two free blocks are never adjacent).
    #[cfg(test)]
    pub fn free_blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.gaps()
    }

    /// Maximal free intervals `[start, end)` in increasing order (empty ones skipped).
    fn gaps(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let limit = self.limit;
        let mut cursor = 0u64;
        let mut blocks = self.blocks.iter();
        let mut done = false;
        std::iter::from_fn(move || {
            while !done {
                let (start, end) = match blocks.next() {
                    Some((&o, &s)) => {
                        let gap = (cursor, o);
                        cursor = o + s;
                        gap
                    }
                    None => {
                        done = true;
                        (cursor, limit)
                    }
                };
                if start < end {
                    return Some((start, end));
                }
            }
            None
        })
    }
}

/// The first offset in `[start, end)` aligned to `align` where `size` bytes fit.
fn fit_in_gap(start: u64, end: u64, size: u64, align: u64) -> Option<u64> {
    let offset = start.checked_next_multiple_of(align)?;
    let last = offset.checked_add(size)?;
    (last <= end).then_some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the documented invariants; panics (test-only) with the space on violation.
    fn assert_invariants(space: &Space) {
        let mut prev_end = 0;
        for (o, s) in space.allocations() {
            assert!(s > 0, "zero-size block in {space:?}");
            assert!(o >= prev_end, "overlap or disorder at {o} in {space:?}");
            assert!(o + s <= space.limit(), "block past the limit in {space:?}");
            prev_end = o + s;
        }
        let free: u64 = space.free_blocks().map(|(s, e)| e - s).sum();
        assert_eq!(
            free + space.used(),
            space.limit(),
            "bytes lost in {space:?}"
        );
        let gaps: Vec<_> = space.free_blocks().collect();
        for w in gaps.windows(2) {
            assert!(w[0].1 < w[1].0, "free blocks not coalesced in {space:?}");
        }
    }

    #[test]
    fn first_fit_packs_from_zero_and_respects_alignment() {
        let mut s = Space::new(1 << 20);
        assert_eq!(s.alloc(100, 1).unwrap(), 0);
        assert_eq!(s.alloc(100, 64).unwrap(), 128);
        assert_eq!(s.alloc(1, 4096).unwrap(), 4096);
        // The hole [228, 4096) is reused first when the request fits.
        assert_eq!(s.alloc(1000, 256).unwrap(), 256);
        assert_invariants(&s);
    }

    #[test]
    fn freed_space_is_reused_and_coalesced() {
        let mut s = Space::new(4096);
        let a = s.alloc(1024, 1024).unwrap();
        let b = s.alloc(1024, 1024).unwrap();
        let c = s.alloc(1024, 1024).unwrap();
        assert_eq!((a, b, c), (0, 1024, 2048));
        s.free(a, 1024).unwrap();
        s.free(b, 1024).unwrap();
        assert_invariants(&s);
        // a and b coalesce into one 2048-byte hole that a 2048-byte request fits exactly.
        assert_eq!(
            s.free_blocks().collect::<Vec<_>>(),
            vec![(0, 2048), (3072, 4096)]
        );
        assert_eq!(s.alloc(2048, 2048).unwrap(), 0);
        s.free(c, 1024).unwrap();
        assert_eq!(s.alloc(2048, 1024).unwrap(), 2048);
        assert_eq!(s.largest_free(), 0);
        assert_invariants(&s);
    }

    #[test]
    fn fragmentation_forces_allocations_past_small_holes() {
        let mut s = Space::new(10 * 100);
        let blocks: Vec<u64> = (0..10).map(|_| s.alloc(100, 1).unwrap()).collect();
        for &o in blocks.iter().step_by(2) {
            s.free(o, 100).unwrap();
        }
        // Five 100-byte holes, 500 bytes free in total, yet nothing larger than 100 fits.
        assert_eq!(s.largest_free(), 100);
        assert_eq!(s.limit() - s.used(), 500);
        assert!(matches!(s.alloc(101, 1), Err(Error::OutOfSpace { .. })));
        assert_eq!(s.alloc(100, 1).unwrap(), 0);
        assert_eq!(s.alloc(50, 1).unwrap(), 200);
        assert_eq!(s.alloc(50, 1).unwrap(), 250);
        assert_eq!(s.alloc(60, 1).unwrap(), 400);
        assert_invariants(&s);
    }

    #[test]
    fn exhaustion_names_request_limit_and_largest_free_block() {
        let mut s = Space::new(8192);
        s.alloc(4096, 4096).unwrap();
        s.alloc(100, 1).unwrap();
        let err = s.alloc(4096, 4096).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no space for 4096 bytes (align 4096) within limit 8192; largest free block 3996"
        );
        // Alignment can be the reason: 3996 bytes are free but not at an aligned start.
        let mut s = Space::new(8192);
        s.alloc(1, 1).unwrap();
        assert!(s.alloc(4096, 4096).is_ok());
        assert!(matches!(
            s.alloc(4096, 4096),
            Err(Error::OutOfSpace {
                largest_free: 4095,
                ..
            })
        ));
    }

    #[test]
    fn bad_frees_are_errors_and_change_nothing() {
        let mut s = Space::new(1 << 16);
        let a = s.alloc(4096, 4096).unwrap();
        let before = s.clone();
        assert!(s.free(a + 1, 4095).is_err(), "interior offset");
        assert!(s.free(a, 2048).is_err(), "partial free");
        assert!(s.free(a, 8192).is_err(), "size larger than allocated");
        assert!(s.free(1 << 20, 1).is_err(), "outside the limit");
        assert_eq!(s, before);
        s.free(a, 4096).unwrap();
        assert!(s.free(a, 4096).is_err(), "double free");
        assert_invariants(&s);
    }

    #[test]
    fn bad_requests_are_rejected() {
        let mut s = Space::new(1 << 16);
        assert!(matches!(s.alloc(0, 1), Err(Error::InvalidArgument(_))));
        assert!(matches!(s.alloc(1, 0), Err(Error::InvalidArgument(_))));
        assert!(matches!(s.alloc(1, 3), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            s.alloc(u64::MAX, 1),
            Err(Error::OutOfSpace { .. })
        ));
        let mut huge = Space::new(u64::MAX);
        huge.alloc(1, 1).unwrap();
        // Aligning past u64::MAX must not overflow or panic.
        assert!(matches!(
            huge.alloc(1, 1 << 63),
            Ok(o) if o == 1 << 63
        ));
        assert!(matches!(
            huge.alloc(2, 1 << 63),
            Err(Error::OutOfSpace { .. })
        ));
        assert_eq!(
            Space::new(0).alloc(1, 1).unwrap_err().to_string(),
            "no space for 1 bytes (align 1) within limit 0; largest free block 0"
        );
    }

    #[test]
    fn identical_call_sequences_give_identical_offsets() {
        let run = || {
            let mut s = Space::new(1 << 40);
            let mut out = Vec::new();
            let mut live = Vec::new();
            for i in 0..200u64 {
                let size = (i * 7919 % 13 + 1) << 21;
                let o = s.alloc(size, 1 << 21).unwrap();
                out.push(o);
                live.push((o, size));
                if i % 3 == 2 {
                    let (o, sz) = live.remove((i as usize * 31) % live.len());
                    s.free(o, sz).unwrap();
                }
            }
            out
        };
        assert_eq!(run(), run());
    }

    /// Brute-force reference: a bitmap of used bytes, first fit by scanning aligned starts.
    struct Bitmap {
        used: Vec<bool>,
    }

    impl Bitmap {
        fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
            let limit = self.used.len() as u64;
            let mut o = 0;
            while o + size <= limit {
                if (o..o + size).all(|b| !self.used[b as usize]) {
                    (o..o + size).for_each(|b| self.used[b as usize] = true);
                    return Some(o);
                }
                o += align;
            }
            None
        }
        fn largest_free(&self) -> u64 {
            let (mut best, mut run) = (0, 0);
            for &u in &self.used {
                run = if u { 0 } else { run + 1 };
                best = best.max(run);
            }
            best
        }
    }

    #[test]
    fn random_sequences_match_a_bitmap_reference() {
        // xorshift64*: deterministic, no dependency.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
        };
        for limit in [1u64, 7, 64, 100, 256] {
            let mut space = Space::new(limit);
            let mut reference = Bitmap {
                used: vec![false; limit as usize],
            };
            let mut live: Vec<(u64, u64)> = Vec::new();
            for step in 0..3000 {
                if live.is_empty() || rand(3) != 0 {
                    let size = rand(limit.min(40)) + 1;
                    let align = 1 << rand(5);
                    let got = space.alloc(size, align);
                    let want = reference.alloc(size, align);
                    match (got, want) {
                        (Ok(o), Some(w)) => {
                            assert_eq!(o, w, "step {step}: alloc({size}, {align})");
                            live.push((o, size));
                        }
                        (Err(Error::OutOfSpace { largest_free, .. }), None) => {
                            assert_eq!(largest_free, reference.largest_free(), "step {step}");
                        }
                        (got, want) => {
                            panic!(
                                "step {step}: alloc({size}, {align}) gave {got:?}, reference {want:?}"
                            )
                        }
                    }
                } else {
                    let (o, size) = live.swap_remove(rand(live.len() as u64) as usize);
                    space.free(o, size).unwrap();
                    (o..o + size).for_each(|b| reference.used[b as usize] = false);
                }
                assert_invariants(&space);
                assert_eq!(
                    space.largest_free(),
                    reference.largest_free(),
                    "step {step}"
                );
            }
        }
    }
}
