//! Any count at any element offset: how a body moves a byte range in 16-byte packs.
//!
//! A body works in the packs of its **destination**: pack `j` is the 16 bytes at
//! `floor16(dst) + 16 j`, and a range of `len` bytes touches [`Span::packs`] of them. Whole
//! packs are stored with one `st.v4`; the first and the last pack of a range that does not
//! start or end on a pack boundary are stored in aligned pieces of 1 to 8 bytes
//! ([`Dst::store`]; [`Dst::store_straight`], predicated, in the LL kernels), so no byte outside
//! the range is ever written (another rank's block, or the user's data next to the
//! buffer). The barrier all-gather's bodies for two and four ranks and the all-to-all's for
//! two instead pass over the whole packs only ([`Span::inner`]) and move the bytes around
//! them one per thread ([`Edges`], [`EdgeBytes`]).
//!
//! The source is read in the destination's packs ([`Shift`]). Where it sits at the same
//! position within its pack as the destination (every 16-byte aligned call, every in-place
//! call), destination pack `j` is source pack `j`: one load. Otherwise its 16 bytes straddle two
//! source packs; both are loaded and funnel-shifted into place. A load never touches a pack
//! that holds no byte of the source range, and such packs lie inside the window's mapping
//! (windows are mapped in whole granules, so the pack holding a window's last byte is mapped
//! whole). Loaded bytes outside the range are garbage: reductions fold them lane by lane like
//! the others (any value: NaN, integer overflow wraps) and no store writes them, so every rank
//! still gets the same bits for every byte of the range.
//!
//! The 16-byte aligned case takes the same instructions as before plus, per pack, the test
//! that the pack is whole ([`Span::whole`]) and that the shift is zero: both the same for every
//! thread of a launch.

use symcomm_device::arch::byte_perm;
use symcomm_device::mem::U32x4;

use crate::common::{grid_stride, ld, pack_off, st, unroll};
use crate::plan::{self, PACK};

/// The address of the pack holding byte address `addr`.
#[inline(always)]
pub const fn floor(addr: u64) -> u64 {
    addr & !(PACK - 1)
}

/// [`floor`] of each of `N` addresses (a loop with a constant bound: unrolled, the addresses
/// stay in registers).
#[inline(always)]
pub fn floor_each<const N: usize>(mut a: [u64; N]) -> [u64; N] {
    let mut k = 0;
    while k < N {
        a[k] = floor(a[k]);
        k += 1;
    }
    a
}

// ANCHOR: span
/// A destination range: `len` bytes from byte `lead` of its first pack. With `ANY = false`
/// the caller promises a 16-byte aligned range (`lead == 0`, `len` a multiple of 16) and every
/// test below folds away.
#[derive(Clone, Copy)]
pub struct Span<const ANY: bool> {
    /// Position of the first byte in its pack (`0..16`).
    pub lead: u64,
    /// Bytes.
    pub len: u64,
}

impl<const ANY: bool> Span<ANY> {
    /// The range of `len` bytes from address or window offset `addr` (only its position in a
    /// pack matters, the same in every rank's copy and for the offset: a window's byte 0 is
    /// 16-byte aligned in every copy). Bodies pass the offset: the range's packs, and so the
    /// loop bounds, are then known before any descriptor is read.
    #[inline(always)]
    pub const fn new(addr: u64, len: u64) -> Self {
        Span {
            lead: addr % PACK,
            len,
        }
    }

    /// The packs the range touches ([`plan::span_packs`]).
    #[inline(always)]
    pub const fn packs(self) -> u64 {
        if ANY {
            plan::span_packs(self.lead, self.len)
        } else {
            self.len / PACK
        }
    }

    /// The same range as a `Span<true>` (what the any-shape helpers take; only called where
    /// `ANY` holds).
    #[inline(always)]
    pub const fn any(self) -> Span<true> {
        Span {
            lead: self.lead,
            len: self.len,
        }
    }

    /// Whether every byte of pack `j` (`j < packs()`) is in the range.
    #[inline(always)]
    pub const fn whole(self, j: u64) -> bool {
        !ANY || (j > 0 || self.lead == 0) && self.lead + self.len >= pack_off(j + 1)
    }

    /// `(first, end)` of the bytes of pack `j` (`j < packs()`) that are in the range.
    #[inline(always)]
    pub const fn part(self, j: u64) -> (u32, u32) {
        let lo = if j == 0 { self.lead } else { 0 };
        let end = self.lead + self.len - pack_off(j);
        (lo as u32, if end < PACK { end as u32 } else { PACK as u32 })
    }
}

// ANCHOR_END: span

impl<const ANY: bool> Span<ANY> {
    /// Settles (`common::settle`) both fields: the span is computed before this point.
    #[inline(always)]
    pub fn settle(&mut self) {
        crate::common::settle(&mut self.lead);
        crate::common::settle(&mut self.len);
    }
}

impl Span<true> {
    /// The packs whose every byte is in the range: `(first, end)`, `first ≤ end` (none when
    /// the range lies inside one pack and does not fill it).
    #[inline(always)]
    pub const fn inner(self) -> (u64, u64) {
        let e = Edges::of(self);
        let first = if e.head > 0 { 1 } else { 0 };
        (first, first + (self.len - e.head) / PACK)
    }
}

/// The bytes of a range outside its [`inner`](Span::inner) packs: up to 15 at its start (in
/// its first pack, from its lead on) and up to 15 at its end (in the pack after the inner
/// ones). Bodies that move whole packs with `st.v4` and shifted loads move these bytes one
/// per thread instead, from the source's byte to the destination's byte at the same place in
/// the range ([`ld_byte`], [`st_byte`]): no partial pack, no shift, no pieces.
#[derive(Clone, Copy)]
pub struct Edges {
    /// Bytes at the start (`0..16`).
    pub head: u64,
    /// Bytes at the end (`0..16`).
    pub tail: u64,
    /// The range's length.
    len: u64,
}

impl Edges {
    /// The edge bytes of `span`.
    #[inline(always)]
    pub const fn of(span: Span<true>) -> Self {
        let head = if span.lead == 0 {
            0
        } else if span.len < PACK - span.lead {
            span.len
        } else {
            PACK - span.lead
        };
        Edges {
            head,
            tail: (span.len - head) % PACK,
            len: span.len,
        }
    }

    /// How many (at most 30).
    #[inline(always)]
    pub const fn count(self) -> u64 {
        self.head + self.tail
    }

    /// Edge byte `i` (`i < count()`) as an offset in the range: the head's bytes, then the
    /// tail's.
    #[inline(always)]
    pub const fn off(self, i: u64) -> u64 {
        if i < self.head {
            i
        } else {
            self.len - (self.count() - i)
        }
    }
}

/// This thread's share of a range's [`Edges`], for copies of the range from `N` sources
/// (source `k` to destination `k`): edge byte `i` goes to the `i`-th thread from the grid's
/// last, then every grid's threads further (only grids of fewer than 30 threads give a thread
/// two). In a grid-stride loop the last threads have the fewest packs.
///
/// A body loads its first byte ([`load`](Self::load)) before its passes and stores it
/// ([`store`](Self::store)) after them: the load's latency hides behind the passes, and the
/// passes carry no code for partial packs.
#[derive(Clone, Copy)]
pub struct EdgeBytes {
    edges: Edges,
    /// This thread's first edge byte.
    i: u64,
    stride: u64,
}

impl EdgeBytes {
    /// This thread's share of `edges`.
    #[inline(always)]
    pub fn new(edges: Edges) -> Self {
        let (first, stride) = grid_stride();
        EdgeBytes {
            edges,
            i: stride - 1 - first,
            stride,
        }
    }

    /// Settles (`common::settle`) every field: computed before this point.
    #[inline(always)]
    pub fn settle(&mut self) {
        crate::common::settle(&mut self.edges.head);
        crate::common::settle(&mut self.edges.tail);
        crate::common::settle(&mut self.edges.len);
        crate::common::settle(&mut self.i);
        crate::common::settle(&mut self.stride);
    }

    /// Whether this thread moves any edge byte.
    #[inline(always)]
    pub fn any(self) -> bool {
        self.i < self.edges.count()
    }

    /// This thread's first edge byte of each source (the source's first byte at `src[k]`);
    /// zeros when it has none.
    ///
    /// # Safety
    /// Each source holds the range (as for [`ld_byte`]).
    #[inline(always)]
    pub unsafe fn load<const N: usize>(self, src: &[u64; N]) -> [u8; N] {
        if self.any() {
            // SAFETY: forwarded.
            unsafe { self.load_at(self.i, src) }
        } else {
            [0; N]
        }
    }

    /// Stores `first` (what [`load`](Self::load) gave) into each destination (its first byte
    /// at `dst[k]`), then moves this thread's other edge bytes, if any.
    ///
    /// # Safety
    /// Each source and destination holds the range; only this thread of this rank writes
    /// these bytes of the destinations.
    #[inline(always)]
    pub unsafe fn store<const N: usize>(self, first: [u8; N], src: &[u64; N], dst: &[u64; N]) {
        let mut i = self.i;
        let mut b = first;
        while i < self.edges.count() {
            let off = self.edges.off(i);
            if i != self.i {
                // SAFETY: forwarded.
                b = unsafe { self.load_at(i, src) };
            }
            unroll::<N>(|k| {
                // SAFETY: a byte of the range in destination `k` (forwarded).
                unsafe { st_byte(dst[k] + off, b[k]) };
            });
            i += self.stride;
        }
    }

    /// Edge byte `i` (`i < count()`) of each source.
    ///
    /// # Safety
    /// As [`load`](Self::load).
    #[inline(always)]
    unsafe fn load_at<const N: usize>(self, i: u64, src: &[u64; N]) -> [u8; N] {
        let off = self.edges.off(i);
        let mut b = [0u8; N];
        unroll::<N>(|k| {
            // SAFETY: a byte of the range in source `k` (forwarded).
            b[k] = unsafe { ld_byte(src[k] + off) };
        });
        b
    }
}

/// A destination copy: the address of its pack 0 and its [`Span`].
#[derive(Clone, Copy)]
pub struct Dst<const ANY: bool> {
    /// Address of pack 0 (16-byte aligned).
    pub base: u64,
    /// The range.
    pub span: Span<ANY>,
}

impl<const ANY: bool> Dst<ANY> {
    /// The same copy as a `Dst<true>` (what the any-shape helpers take; only called where
    /// `ANY` holds).
    #[inline(always)]
    pub const fn any(self) -> Dst<true> {
        Dst {
            base: self.base,
            span: self.span.any(),
        }
    }

    /// The copy whose first byte is at address `addr`, of range `span`.
    #[inline(always)]
    pub const fn at(addr: u64, span: Span<ANY>) -> Self {
        Dst {
            base: if ANY { floor(addr) } else { addr },
            span,
        }
    }

    // ANCHOR: dst_store
    /// Stores the bytes of `v` that belong to the range into pack `j` (`j < span.packs()`):
    /// one `st.v4` when the pack is whole, else in aligned pieces (`st_part`).
    ///
    /// # Safety
    /// The range is valid for writes in this copy; no other thread writes its bytes of pack `j`.
    #[inline(always)]
    pub unsafe fn store(self, j: u64, v: U32x4) {
        let at = self.base + pack_off(j);
        if self.span.whole(j) {
            // SAFETY: a whole pack of the range.
            unsafe { st(at, v) }
        } else {
            let (lo, hi) = self.span.part(j);
            // SAFETY: bytes lo..hi of the pack are in the range.
            unsafe { st_part(at, v, lo, hi) }
        }
    }
    // ANCHOR_END: dst_store

    /// [`store`](Self::store) with the pieces of a partial pack in predicated stores
    /// (`st_part_straight`), for the LL kernels. There the pieces behind a branch each (a
    /// reconvergence point per piece) cost an odd 4 KiB all-gather or all-to-all about 0.1 µs
    /// (2.46 → 2.36 µs and 2.45 → 2.35 µs, two ranks on one H100). Not for the barriered
    /// bodies: with them in their loops, the two-shot all-reduce of 64 MiB and a bit took
    /// 1.09× the next multiple of 16 bytes (1.03× without), the broadcast of 1 MiB and a bit
    /// 1.06–1.12× (1.02×), marking the partial branch cold or not. (The predicated stores are
    /// inline assembly, which LLVM keeps other memory accesses from moving across. The LL
    /// bodies' line stores already are inline assembly, so the LL bodies lose nothing.)
    ///
    /// # Safety
    /// As [`store`](Self::store).
    #[inline(always)]
    pub unsafe fn store_straight(self, j: u64, v: U32x4) {
        let at = self.base + pack_off(j);
        if self.span.whole(j) {
            // SAFETY: a whole pack of the range.
            unsafe { st(at, v) }
        } else {
            let (lo, hi) = self.span.part(j);
            // SAFETY: bytes lo..hi of the pack are in the range.
            unsafe { st_part_straight(at, v, lo, hi) }
        }
    }
}

/// How a source range is read in the packs of a destination [`Span`] of the same length.
#[derive(Clone, Copy)]
pub struct Shift<const ANY: bool> {
    /// Bytes from the start of source pack `j + k0` to destination pack `j`'s first byte.
    sh: u32,
    /// `0`, or `u64::MAX` (−1) when the source's lead is smaller than the destination's.
    k0: u64,
    /// Packs the source range touches.
    packs: u64,
}

impl<const ANY: bool> Shift<ANY> {
    /// The source range that starts at address `src` (any copy) read in the packs of `dst`.
    #[inline(always)]
    pub const fn new(src: u64, dst: Span<ANY>) -> Self {
        let lead = src % PACK;
        let q = lead.wrapping_sub(dst.lead);
        Shift {
            sh: (q % PACK) as u32,
            k0: if lead < dst.lead { u64::MAX } else { 0 },
            packs: plan::span_packs(lead, dst.len),
        }
    }

    /// The same shift as a `Shift<true>` (what the any-shape helpers take; only called where
    /// `ANY` holds).
    #[inline(always)]
    pub const fn any(self) -> Shift<true> {
        Shift {
            sh: self.sh,
            k0: self.k0,
            packs: self.packs,
        }
    }

    /// The address of pack 0 of the source copy whose first byte is at `addr` (`addr` itself
    /// in the whole-pack form).
    #[inline(always)]
    pub const fn base(self, addr: u64) -> u64 {
        if ANY { floor(addr) } else { addr }
    }

    // ANCHOR: shift_load
    /// The bytes of destination pack `j` (`j` below the destination's packs), read from the
    /// source copy whose pack 0 is at `base`: one load when the source sits where the
    /// destination does in its packs (`sh == 0`, the same for every thread), else
    /// [`load_flat`](Self::load_flat). Bytes outside the range are unspecified.
    ///
    /// # Safety
    /// The source range is valid for reads in that copy.
    #[inline(always)]
    pub unsafe fn load(self, base: u64, j: u64) -> U32x4 {
        if !ANY || self.sh == 0 {
            // SAFETY: destination pack j is source pack j, which holds bytes of the range.
            return unsafe { ld(base + pack_off(j)) };
        }
        // SAFETY: forwarded.
        unsafe { self.load_flat(base, j) }
    }

    /// [`load`](Self::load) without a branch: the two source packs that destination pack `j`
    /// straddles (each index clamped into the source's packs: a pack outside holds no byte
    /// of the range, so the one loaded instead is as good), funnel-shifted by `sh` with
    /// selects. Loops with a constant bound over it unroll, so their arrays stay in
    /// registers.
    ///
    /// # Safety
    /// As [`load`](Self::load).
    #[inline(always)]
    pub unsafe fn load_flat(self, base: u64, j: u64) -> U32x4 {
        let last = self.packs.saturating_sub(1);
        let k = j.wrapping_add(self.k0);
        // Without a shift the second pack is the first again (a cache hit, not a new line).
        let next = if self.sh == 0 { k } else { k.wrapping_add(1) };
        let (k, k1) = (k.min(last), next.min(last));
        // SAFETY: packs 0..packs of the source, each holding bytes of the range.
        let (a, b) = unsafe { (ld(base + pack_off(k)), ld(base + pack_off(k1))) };
        funnel(a, b, self.sh)
    }

    // ANCHOR_END: shift_load

    /// Whether the source sits elsewhere in its packs than the destination (the any-shape
    /// form with a shift that is not zero): the same for every thread of a launch.
    #[inline(always)]
    pub const fn is_flat(self) -> bool {
        ANY && self.sh != 0
    }

    /// [`load_flat`](Self::load_flat) when `FLAT`, else the one load of destination pack `j`
    /// (only where [`is_flat`](Self::is_flat) is false). A body that picks `FLAT` once per
    /// launch runs straight-line code per pass, so all of a pass's loads are issued before
    /// the first is used ([`load`](Self::load) branches per call, which lets the shifts of
    /// one copy wait for its loads before the next copy's are issued).
    ///
    /// # Safety
    /// As [`load`](Self::load); `FLAT` or the shift is zero.
    #[inline(always)]
    pub unsafe fn load_as<const FLAT: bool>(self, base: u64, j: u64) -> U32x4 {
        if FLAT {
            // SAFETY: forwarded.
            unsafe { self.load_flat(base, j) }
        } else {
            // SAFETY: destination pack j is source pack j (no shift).
            unsafe { ld(base + pack_off(j)) }
        }
    }

    /// [`load_as`](Self::load_as) of a pack `j` that the destination range fills
    /// ([`Span::whole`], as the [`inner`](Span::inner) packs): when `FLAT`, source packs
    /// `j + k0` and the one after, both holding bytes of the range (the destination's 16 bytes
    /// are all in it), so no index is clamped. The bodies that pass over the inner packs only
    /// take this: the clamps of [`load_flat`](Self::load_flat), two 64-bit compares and
    /// selects per load, came between the entry barrier's wait and the first loads.
    ///
    /// # Safety
    /// As [`load`](Self::load); pack `j` of the destination is whole; `FLAT` or the shift is
    /// zero.
    #[inline(always)]
    pub unsafe fn load_inner<const FLAT: bool>(self, base: u64, j: u64) -> U32x4 {
        if FLAT {
            // SAFETY: forwarded.
            unsafe { self.load_at::<true>(self.pack_at(base, j)) }
        } else {
            // SAFETY: forwarded (no shift).
            unsafe { self.load_as::<false>(base, j) }
        }
    }

    /// The address [`load_at`](Self::load_at) reads destination pack `j` from, in the source
    /// copy whose pack 0 is at `base`: that of source pack `j + k0`, where the pack's bytes
    /// begin. Packs `s` apart in the destination are `16 × s` bytes apart here too, so a loop
    /// may step this address instead of `j`. Wrapping arithmetic: a thread computes it for its
    /// first pack before knowing whether it has one (pack 0 with `k0` at −1 is no pack to read).
    #[inline(always)]
    pub const fn pack_at(self, base: u64, j: u64) -> u64 {
        base.wrapping_add(j.wrapping_add(self.k0).wrapping_mul(PACK))
    }

    /// [`load_inner`](Self::load_inner) of destination pack `j` from `at`, its
    /// [`pack_at`](Self::pack_at): when `FLAT`, the source pack at `at` and the one after,
    /// funnel-shifted; else the one at `at` (`k0` is zero without a shift).
    ///
    /// # Safety
    /// As [`load_inner`](Self::load_inner) of pack `j` from the copy whose pack 0 is at `base`
    /// (valid for reads of the range); `at` is `pack_at(base, j)`.
    #[inline(always)]
    pub unsafe fn load_at<const FLAT: bool>(self, at: u64) -> U32x4 {
        if FLAT {
            // SAFETY: source packs `j + k0` and `j + k0 + 1` hold bytes of the range.
            let (a, b) = unsafe { (ld(at), ld(at + PACK)) };
            funnel(a, b, self.sh)
        } else {
            // SAFETY: destination pack j is source pack j (no shift).
            unsafe { ld(at) }
        }
    }

    /// [`load`](Self::load) of pack `j` from each of the `N` copies `base`, every load issued
    /// before any is used ([`load_flat`](Self::load_flat) for any shape: no branch in the
    /// loop, so it unrolls and the packs stay in registers).
    ///
    /// # Safety
    /// As [`load`](Self::load), for every copy.
    #[inline(always)]
    pub unsafe fn load_each<const N: usize>(self, base: &[u64; N], j: u64) -> [U32x4; N] {
        if !ANY {
            // SAFETY: forwarded.
            return unsafe { crate::common::ld_each(base, pack_off(j)) };
        }
        let mut v = [U32x4::default(); N];
        let mut k = 0;
        while k < N {
            // SAFETY: forwarded.
            v[k] = unsafe { self.load_flat(base[k], j) };
            k += 1;
        }
        v
    }
}

/// A source copy read in a destination's packs: the address of its pack 0 and its [`Shift`].
#[derive(Clone, Copy)]
pub struct Src<const ANY: bool> {
    /// Address of the pack holding the first byte.
    pub base: u64,
    /// The shift to the destination's packs.
    pub shift: Shift<ANY>,
}

impl<const ANY: bool> Src<ANY> {
    /// The copy whose first byte is at address `addr`, read in the packs of `dst`.
    #[inline(always)]
    pub const fn at(addr: u64, dst: Span<ANY>) -> Self {
        Src {
            base: if ANY { floor(addr) } else { addr },
            shift: Shift::new(addr, dst),
        }
    }

    /// Destination pack `j` ([`Shift::load`]).
    ///
    /// # Safety
    /// As [`Shift::load`].
    #[inline(always)]
    pub unsafe fn load(self, j: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { self.shift.load(self.base, j) }
    }

    /// Destination pack `j` ([`Shift::load_as`]).
    ///
    /// # Safety
    /// As [`Shift::load_as`].
    #[inline(always)]
    pub unsafe fn load_as<const FLAT: bool>(self, j: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { self.shift.load_as::<FLAT>(self.base, j) }
    }
}

impl Src<true> {
    /// Destination pack `j`, a whole one ([`Shift::load_inner`]).
    ///
    /// # Safety
    /// As [`Shift::load_inner`].
    #[inline(always)]
    pub unsafe fn load_inner<const FLAT: bool>(self, j: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { self.shift.load_inner::<FLAT>(self.base, j) }
    }

    /// Where destination pack `j` is read from ([`Shift::pack_at`]).
    #[inline(always)]
    pub const fn pack_at(self, j: u64) -> u64 {
        self.shift.pack_at(self.base, j)
    }

    /// Destination pack `j`, a whole one, from its [`pack_at`](Self::pack_at) `at`
    /// ([`Shift::load_at`]).
    ///
    /// # Safety
    /// As [`Shift::load_at`].
    #[inline(always)]
    pub unsafe fn load_at<const FLAT: bool>(self, at: u64) -> U32x4 {
        // SAFETY: forwarded.
        unsafe { self.shift.load_at::<FLAT>(at) }
    }
}

impl<const ANY: bool> Src<ANY> {
    /// Settles (`common::settle`) every field: the copy is computed before this point.
    #[inline(always)]
    pub fn settle(&mut self) {
        crate::common::settle(&mut self.base);
        crate::common::settle(&mut self.shift.k0);
        crate::common::settle(&mut self.shift.packs);
        let mut sh = u64::from(self.shift.sh);
        crate::common::settle(&mut sh);
        self.shift.sh = sh as u32;
    }

    /// The same copy as a `Src<true>` (what the any-shape helpers take; only called where
    /// `ANY` holds).
    #[inline(always)]
    pub const fn any(self) -> Src<true> {
        Src {
            base: self.base,
            shift: self.shift.any(),
        }
    }
}

impl Src<false> {
    /// A 16-byte aligned source read pack for pack (`addr` a multiple of 16, and so is the
    /// destination's start): what the fused kernels' rows are.
    #[inline(always)]
    pub const fn aligned(addr: u64) -> Self {
        Src {
            base: addr,
            shift: Shift {
                sh: 0,
                k0: 0,
                packs: u64::MAX,
            },
        }
    }
}

/// Bytes `sh..sh + 16` of the 32 bytes `a` then `b` (`sh` in `0..16`): the five words from
/// word `sh / 4` on, picked with selects (twelve, no branch: a switch here became a jump
/// table after each pair of loads, and the next copy's loads waited behind it), then four
/// byte permutes (`prmt`) for the rest of the shift. No array is indexed at run time.
#[inline(always)]
fn funnel(a: U32x4, b: U32x4, sh: u32) -> U32x4 {
    let [a0, a1, a2, a3] = a.0;
    let [b0, b1, b2, b3] = b.0;
    let w = [a0, a1, a2, a3, b0, b1, b2, b3];
    let (odd, two) = (sh & 4 != 0, sh & 8 != 0);
    // Word m + (sh / 4) % 2, then word m + sh / 4.
    let s = |m: usize| if odd { w[m + 1] } else { w[m] };
    let (s0, s1, s2, s3, s4, s5, s6) = (s(0), s(1), s(2), s(3), s(4), s(5), s(6));
    let c = |lo: u32, hi: u32| if two { hi } else { lo };
    let (c0, c1, c2, c3, c4) = (c(s0, s2), c(s1, s3), c(s2, s4), c(s3, s5), c(s4, s6));
    let sel = 0x3210 + 0x1111 * (sh % 4);
    let f = |lo: u32, hi: u32| byte_perm(lo, hi, sel);
    U32x4([f(c0, c1), f(c1, c2), f(c2, c3), f(c3, c4)])
}

/// [`st_part`] with each piece one predicated store ([`piece`]): straight-line, no branch.
/// What [`Dst::store_straight`] takes.
///
/// # Safety
/// As [`st_part`].
#[inline(always)]
unsafe fn st_part_straight(at: u64, v: U32x4, lo: u32, hi: u32) {
    let [w0, w1, w2, w3] = v.0;
    let halves = (
        u64::from(w0) | u64::from(w1) << 32,
        u64::from(w2) | u64::from(w3) << 32,
    );
    let mut off = lo;
    // SAFETY: each piece lies in lo..hi (forwarded).
    unsafe {
        piece::<1>(at, &mut off, true, hi, halves);
        piece::<2>(at, &mut off, true, hi, halves);
        piece::<4>(at, &mut off, true, hi, halves);
        piece::<8>(at, &mut off, true, hi, halves);
        piece::<8>(at, &mut off, false, hi, halves);
        piece::<4>(at, &mut off, false, hi, halves);
        piece::<2>(at, &mut off, false, hi, halves);
        piece::<1>(at, &mut off, false, hi, halves);
    }
}

/// One piece of [`st_part_straight`]: bytes `off..off + W` of the pack at `at`, from `halves`
/// (the pack's bytes 0–7 and 8–15), stored when they end by `hi` and, widening (`up`), when
/// `off` has bit `W` set; `off` then moves past them. The earlier pieces leave `off` a
/// multiple of `W` (widening: the narrower pieces cleared its lower bits; narrowing: every
/// lower bit is clear already), so the piece is `W`-aligned. On the GPU a predicated store,
/// no branch.
///
/// # Safety
/// As [`st_part_straight`], for the bytes stored.
#[inline(always)]
unsafe fn piece<const W: u32>(at: u64, off: &mut u32, up: bool, hi: u32, halves: (u64, u64)) {
    let o = *off;
    let fits = (!up || o & W != 0) && o + W <= hi;
    // The bytes of the pack from byte `o` on, in the low bytes.
    let word = (if o < 8 { halves.0 } else { halves.1 }) >> (8 * (o % 8));
    let addr = at + u64::from(o);
    debug_assert!(
        !fits || o.is_multiple_of(W),
        "a piece of {W} bytes at byte {o}"
    );
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: stored only when they fit: then inside lo..hi, `W`-aligned (forwarded).
    unsafe {
        symcomm_device::mem::store_low_if::<W>(addr as *mut u8, word, fits)
    };
    #[cfg(not(target_arch = "nvptx64"))]
    if fits {
        // SAFETY: as above.
        unsafe { st_n(addr, word, W) };
    }
    *off = if fits { o + W } else { o };
}

/// Stores bytes `lo..hi` (`lo < hi ≤ 16`, not the whole pack: [`Dst::store`] stores that with
/// one `st.v4`, and these pieces would miss its last byte) of `v` at the same bytes of the pack at `at`, in
/// naturally aligned stores of 1, 2, 4 or 8 bytes: widening from `lo` to the next 8-byte
/// boundary (a store for each low bit of the position that is set, while it fits), then
/// narrowing to `hi` (a store for each width that still fits). At most eight stores, and an
/// element-aligned end takes few: the last 14 bytes of a bf16 range are 8 + 4 + 2.
///
/// Straight-line and inlined: a call here (out of line, byte by byte) cost an all-gather of
/// an odd size 0.6 µs more per call than this on H100 (two ranks on one GPU, 1 MiB), most of
/// what an odd size cost there.
///
/// # Safety
/// Those bytes are valid for writes; no other thread writes them concurrently.
#[inline(always)]
unsafe fn st_part(at: u64, v: U32x4, lo: u32, hi: u32) {
    let [w0, w1, w2, w3] = v.0;
    let (low, high) = (
        u64::from(w0) | u64::from(w1) << 32,
        u64::from(w2) | u64::from(w3) << 32,
    );
    // The bytes of `v` from byte `off` on, in the low bytes.
    let word = |off: u32| (if off < 8 { low } else { high }) >> (8 * (off % 8));
    let mut off = lo;
    let mut up = |w: u32| {
        if off & w != 0 && off + w <= hi {
            // SAFETY: bytes off..off + w lie in lo..hi, `w`-aligned.
            unsafe { st_n(at + u64::from(off), word(off), w) };
            off += w;
        }
    };
    up(1);
    up(2);
    up(4);
    up(8);
    let mut down = |w: u32| {
        if off + w <= hi {
            // SAFETY: as above (`off` is a multiple of `w` here: every lower bit is clear).
            unsafe { st_n(at + u64::from(off), word(off), w) };
            off += w;
        }
    };
    down(8);
    down(4);
    down(2);
    down(1);
}

/// A plain store of the low `w` bytes (1, 2, 4 or 8) of `v` at `addr` (`st.u8` … `st.u64`).
/// On the host (the emulator) the bytes are written through the 8-byte word that holds them
/// (one relaxed atomic read-modify-write of the word): other threads may read that word at
/// the same time as half of a pack (the emulator's 16-byte accesses are two atomic 8-byte
/// halves), and mixing atomic accesses of different sizes on the same bytes is not allowed.
/// Only this thread writes these bytes; other threads' writes to the word's other bytes are
/// read-modify-writes too, so none is lost.
///
/// # Safety
/// `addr` is `w`-byte aligned and valid for a `w`-byte write, no other thread writes those
/// bytes concurrently, and on the host the 8-byte word holding them is valid memory.
#[inline(always)]
unsafe fn st_n(addr: u64, v: u64, w: u32) {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: forwarded.
    unsafe {
        match w {
            1 => *(addr as *mut u8) = v as u8,
            2 => *(addr as *mut u16) = v as u16,
            4 => *(addr as *mut u32) = v as u32,
            _ => *(addr as *mut u64) = v,
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
        let shift = (addr % 8) * 8;
        let mask = if w == 8 {
            u64::MAX
        } else {
            ((1u64 << (8 * w)) - 1) << shift
        };
        // SAFETY: the aligned word holding the bytes lies in the same 16-byte pack, which the
        // caller's range touches (valid memory, caller's contract).
        let word = unsafe { AtomicU64::from_ptr((addr & !7) as *mut u64) };
        let set = |x: u64| Some((x & !mask) | ((v << shift) & mask));
        // Never fails: the closure always gives a value.
        let _ = word.fetch_update(Relaxed, Relaxed, set);
    }
}

/// The byte at `addr` (a plain `ld.u8`). On the host (the emulator) it is read through the
/// 8-byte word that holds it (one relaxed atomic load): other threads may write that word's
/// other bytes at the same time, with atomics of that size (see `st_n`).
///
/// # Safety
/// `addr` is valid for a 1-byte read; on the host the 8-byte word holding it is valid memory;
/// no other thread writes that byte concurrently.
#[inline(always)]
pub unsafe fn ld_byte(addr: u64) -> u8 {
    #[cfg(target_arch = "nvptx64")]
    // SAFETY: forwarded.
    unsafe {
        *(addr as *const u8)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
        // SAFETY: the aligned word holding the byte is valid memory (caller's contract).
        let word = unsafe { AtomicU64::from_ptr((addr & !7) as *mut u64) }.load(Relaxed);
        (word >> ((addr % 8) * 8)) as u8
    }
}

/// Stores the byte `v` at `addr` (a plain `st.u8`; on the host one relaxed atomic
/// read-modify-write of the 8-byte word that holds it).
///
/// # Safety
/// `addr` is valid for a 1-byte write; on the host the 8-byte word holding it is valid
/// memory; no other thread writes that byte concurrently.
#[inline(always)]
pub unsafe fn st_byte(addr: u64, v: u8) {
    // SAFETY: forwarded.
    unsafe { st_n(addr, u64::from(v), 1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// Every destination lead, source lead and length up to 3 packs: the destination's bytes
    /// after a copy through `Src::load` and `Dst::store` (or `Dst::store_straight`) equal the
    /// source's, and bytes around them stay untouched (0xee).
    #[test]
    fn copies_through_the_pack_form_move_every_byte_and_nothing_else() {
        for straight in [false, true] {
            copies_every_byte_and_nothing_else(straight);
        }
    }

    /// Every lead and length up to 5 packs: the inner packs are whole, and they and the edge
    /// bytes cover each byte of the range exactly once, at most 30 edge bytes.
    #[test]
    fn inner_packs_and_edge_bytes_cover_the_range_once() {
        for lead in 0..16u64 {
            for len in 0..80u64 {
                let span = Span::<true>::new(lead, len);
                let (first, end) = span.inner();
                let e = Edges::of(span);
                let what = std::format!("lead {lead}, {len} bytes");
                assert!(first <= end && end <= span.packs(), "{what}");
                assert!(e.count() <= 30 && e.head < 16 && e.tail < 16, "{what}");
                let mut seen = std::vec![0u32; len as usize];
                for j in first..end {
                    assert!(span.whole(j), "{what}: pack {j}");
                    for b in 0..16 {
                        seen[(pack_off(j) + b - lead) as usize] += 1;
                    }
                }
                for i in 0..e.count() {
                    seen[e.off(i) as usize] += 1;
                }
                assert!(seen.iter().all(|&c| c == 1), "{what}: {seen:?}");
            }
        }
    }

    /// Every destination lead, two source leads and lengths up to 5 packs, copied as a body
    /// does: the inner packs through `Src::load_inner` (odd lengths: through `Src::load_at`
    /// from an address stepped from `Src::pack_at` of the first inner pack, computed for every
    /// length as the bodies do, packs or none) and `st`, the edge bytes through
    /// `EdgeBytes`. Outside an emulated launch the grid is one thread, so that thread takes
    /// every edge byte (the loop of `EdgeBytes::store`). Each destination then holds its
    /// source's bytes, and the bytes around it are untouched.
    #[test]
    fn inner_packs_and_edge_bytes_copy_two_sources_into_two_destinations() {
        #[repr(align(16))]
        struct Buf([u8; 128]);
        for dl in 0..16u64 {
            for sl in [(dl + 3) % 16, (dl * 7 + 5) % 16] {
                for len in 0..80u64 {
                    let mut src = [Buf([0; 128]), Buf([0; 128])];
                    for (k, s) in src.iter_mut().enumerate() {
                        for (i, b) in s.0.iter_mut().enumerate() {
                            *b = (i as u8).wrapping_mul(13).wrapping_add(k as u8 * 101 + 1);
                        }
                    }
                    let mut dst = [Buf([0xee; 128]), Buf([0xee; 128])];
                    // Source 0 at lead `sl`, source 1 at the destinations' lead.
                    let s0 = [
                        src[0].0.as_ptr() as u64 + 16 + sl,
                        src[1].0.as_ptr() as u64 + 16 + dl,
                    ];
                    let d0 = [
                        dst[0].0.as_mut_ptr() as u64 + 16 + dl,
                        dst[1].0.as_mut_ptr() as u64 + 16 + dl,
                    ];
                    let span = Span::<true>::new(d0[0], len);
                    let (first, end) = span.inner();
                    // Pack `j` by its index (`load_inner`), or by an address stepped a pack
                    // at a time from the first's (`pack_at`, `load_at`): `walk`.
                    let walk = len % 2 == 1;
                    for k in 0..2 {
                        let from = Src::at(s0[k], span);
                        let flat = from.shift.is_flat();
                        let mut at = from.pack_at(first);
                        for j in first..end {
                            // SAFETY: whole packs inside the buffers (as the bodies read them:
                            // no index clamp).
                            let v = unsafe {
                                match (walk, flat) {
                                    (false, true) => from.load_inner::<true>(j),
                                    (false, false) => from.load_inner::<false>(j),
                                    (true, true) => from.load_at::<true>(at),
                                    (true, false) => from.load_at::<false>(at),
                                }
                            };
                            at += PACK;
                            // SAFETY: as above.
                            unsafe { st(floor(d0[k]) + pack_off(j), v) };
                        }
                    }
                    let edges = EdgeBytes::new(Edges::of(span));
                    // SAFETY: the ranges lie inside the buffers.
                    unsafe {
                        let b = edges.load(&s0);
                        edges.store(b, &s0, &d0);
                    }
                    let what = std::format!("dst lead {dl}, src lead {sl}, {len} bytes, {walk}");
                    for k in 0..2 {
                        let lead = if k == 0 { sl } else { dl };
                        for i in 0..128u64 {
                            let inside = i >= 16 + dl && i < 16 + dl + len;
                            let want = if inside {
                                src[k].0[(i - dl + lead) as usize]
                            } else {
                                0xee
                            };
                            assert_eq!(dst[k].0[i as usize], want, "{what}: copy {k}, byte {i}");
                        }
                    }
                }
            }
        }
    }

    fn copies_every_byte_and_nothing_else(straight: bool) {
        #[repr(align(16))]
        struct Buf([u8; 96]);
        for dl in 0..16u64 {
            for sl in 0..16u64 {
                for len in 0..50u64 {
                    let mut src = Buf([0; 96]);
                    for (i, b) in src.0.iter_mut().enumerate() {
                        *b = (i as u8).wrapping_mul(7).wrapping_add(1);
                    }
                    let mut dst = Buf([0xee; 96]);
                    let s0 = src.0.as_ptr() as u64 + 16 + sl;
                    let d0 = dst.0.as_mut_ptr() as u64 + 16 + dl;
                    let span = Span::<true>::new(d0, len);
                    let (from, to) = (Src::at(s0, span), Dst::at(d0, span));
                    let mut wrote = Vec::new();
                    for j in 0..span.packs() {
                        // SAFETY: inside the buffers (2 packs of room around the ranges).
                        unsafe {
                            if straight {
                                to.store_straight(j, from.load(j))
                            } else {
                                to.store(j, from.load(j))
                            }
                        };
                        wrote.push(span.whole(j));
                    }
                    let what = std::format!(
                        "dst lead {dl}, src lead {sl}, {len} bytes, straight: {straight}"
                    );
                    for i in 0..96u64 {
                        let inside = i >= 16 + dl && i < 16 + dl + len;
                        let want = if inside {
                            src.0[(i - dl + sl) as usize]
                        } else {
                            0xee
                        };
                        assert_eq!(dst.0[i as usize], want, "{what}: byte {i}");
                    }
                    if dl == 0 && len % 16 == 0 {
                        assert!(wrote.iter().all(|&w| w), "{what}: aligned packs are whole");
                    }
                    let packs = if len == 0 { 0 } else { (dl + len).div_ceil(16) };
                    assert_eq!(span.packs(), packs, "{what}");
                }
            }
        }
    }
}
