//! The flat virtual-address layout of symmetric windows, and the checks a registration must
//! pass before anything is mapped. Pure arithmetic: no CUDA calls.
//!
//! Every rank reserves one flat VA range of `lsa_size × stride` bytes. Slot `p` (at
//! `flat_base + p × stride`) holds LSA peer `p`'s memory; a window at offset `o` of the slots
//! is at `flat_base + p × stride + o` for peer `p`, on every rank. The stride is the largest
//! device memory in the team rounded up to 4 GiB (or `SYMCOMM_WIN_STRIDE`), always a multiple
//! of 4 GiB so that device code can add `p × stride4g` to the high 32 bits of an address
//! (the `add4G` trick, see the device crate's `Window`).
//!
//! Offsets inside a slot come from the deterministic [`crate::space::Space`] with
//! `limit = stride`; registration all-gathers one [`super::RegistrationRecord`] per rank and
//! [`validate_registration`] turns disagreement into the same [`Error::Mismatch`] on every
//! rank.

use super::record::{HandleKind, RegistrationRecord};
use crate::{Error, Result};

/// The stride unit: strides are multiples of 4 GiB.
pub const STRIDE_UNIT: u64 = 1 << 32;

/// Required alignment of a window's first byte inside its physical allocation.
pub const WINDOW_ALIGN: u64 = 4096;

/// Environment variable that overrides the stride (e.g. `144G`; `auto` or `0` = automatic).
pub const STRIDE_ENV: &str = "SYMCOMM_WIN_STRIDE";

/// Parses a byte count with an optional binary suffix: `4096`, `64K`, `2M`, `144G`, `1T`
/// (also `144GiB`, `144GB`; case-insensitive; suffixes are powers of 1024).
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let bad = |why: &str| Error::InvalidArgument(format!("size {text:?} {why}"));
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad("does not start with a number"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("is too large"))?;
    let lower = suffix.to_ascii_lowercase();
    let unit_letter = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let shift = match unit_letter {
        "" if lower.is_empty() || lower == "b" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(bad("has an unknown suffix (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| bad("is too large"))
}

/// The stride for a team whose devices have `device_total_mem` bytes each, honouring an
/// override (the value of [`STRIDE_ENV`], if set).
///
/// Automatic: the maximum over the team rounded up to a multiple of 4 GiB. An override must
/// be a non-zero multiple of 4 GiB; `auto`, `0` or an empty value mean automatic.
pub fn team_stride(device_total_mem: &[u64], env_override: Option<&str>) -> Result<u64> {
    if let Some(value) = env_override.map(str::trim)
        && !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("auto"))
    {
        let env = |reason: String| Error::Env {
            var: STRIDE_ENV.into(),
            reason,
        };
        let stride = parse_size(value).map_err(|e| env(format!("{value:?}: {}", e.detail())))?;
        if !stride.is_multiple_of(STRIDE_UNIT) {
            let up = stride.div_ceil(STRIDE_UNIT);
            return Err(env(format!(
                "{value} ({stride} bytes) is not a multiple of 4 GiB (try {}G)",
                up * 4
            )));
        }
        return Ok(stride);
    }
    let max = device_total_mem.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return Err(Error::Internal(
            "cannot derive the window stride: no device reported its memory size".into(),
        ));
    }
    max.checked_next_multiple_of(STRIDE_UNIT)
        .ok_or_else(|| Error::Internal(format!("device memory size {max} overflows")))
}

/// [`team_stride`] with the override read from the environment ([`STRIDE_ENV`]).
pub fn team_stride_from_env(device_total_mem: &[u64]) -> Result<u64> {
    let value = std::env::var(STRIDE_ENV).ok();
    team_stride(device_total_mem, value.as_deref())
}

/// The flat VA of one rank: `lsa_size` slots of `stride` bytes, this rank being `lsa_rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatLayout {
    lsa_size: usize,
    lsa_rank: usize,
    stride: u64,
}

impl FlatLayout {
    /// Checks and builds the layout: `stride` a non-zero multiple of 4 GiB,
    /// `lsa_rank < lsa_size`, and `lsa_size × stride` representable.
    pub fn new(lsa_size: usize, lsa_rank: usize, stride: u64) -> Result<FlatLayout> {
        if stride == 0 || !stride.is_multiple_of(STRIDE_UNIT) {
            return Err(Error::InvalidArgument(format!(
                "window stride {stride} is not a non-zero multiple of 4 GiB"
            )));
        }
        if lsa_rank >= lsa_size {
            return Err(Error::InvalidArgument(format!(
                "LSA rank {lsa_rank} is outside a team of {lsa_size}"
            )));
        }
        if (lsa_size as u64).checked_mul(stride).is_none() {
            return Err(Error::InvalidArgument(format!(
                "flat VA of {lsa_size} slots of {stride} bytes overflows"
            )));
        }
        Ok(FlatLayout {
            lsa_size,
            lsa_rank,
            stride,
        })
    }

    /// Bytes per slot.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// The stride in units of 4 GiB, as the device window stores it.
    #[doc(alias = "stride4G")]
    pub fn stride4g(&self) -> u32 {
        // stride < 2^64, so stride >> 32 < 2^32.
        (self.stride >> 32) as u32
    }

    /// Number of slots (LSA team size).
    pub fn lsa_size(&self) -> usize {
        self.lsa_size
    }

    /// Bytes of VA to reserve: `lsa_size × stride`.
    pub fn total_size(&self) -> u64 {
        // Checked in `new`.
        self.lsa_size as u64 * self.stride
    }

    /// Offset from the flat base of byte `offset` of peer `peer`'s slot:
    /// `peer × stride + offset`. `peer < lsa_size` and `offset < stride`, else an error.
    pub fn peer_offset(&self, peer: usize, offset: u64) -> Result<u64> {
        if peer >= self.lsa_size {
            return Err(Error::InvalidArgument(format!(
                "LSA peer {peer} is outside a team of {}",
                self.lsa_size
            )));
        }
        if offset >= self.stride {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is outside a slot of {} bytes",
                self.stride
            )));
        }
        Ok(peer as u64 * self.stride + offset)
    }

    /// Address of byte `offset` of peer `peer`'s slot: `flat_base + peer × stride + offset`.
    #[doc(alias = "ncclGetLsaPointer")]
    pub fn peer_addr(&self, flat_base: u64, peer: usize, offset: u64) -> Result<u64> {
        let rel = self.peer_offset(peer, offset)?;
        flat_base.checked_add(rel).ok_or_else(|| {
            Error::InvalidArgument(format!("flat base {flat_base:#x} + {rel:#x} overflows"))
        })
    }

    /// Address of byte `offset` of this rank's own slot.
    #[cfg(test)]
    pub fn local_addr(&self, flat_base: u64, offset: u64) -> Result<u64> {
        self.peer_addr(flat_base, self.lsa_rank, offset)
    }
}

/// Checks that a window `[ptr, ptr + size)` can be registered out of the physical allocation
/// mapped at `[alloc_base, alloc_base + alloc_size)`, and returns its offset in the allocation.
///
/// The window must be non-empty, lie inside the allocation and start 4 KiB-aligned relative to
/// the allocation's start.
pub fn window_offset_in_alloc(
    ptr: u64,
    size: u64,
    alloc_base: u64,
    alloc_size: u64,
) -> Result<u64> {
    if size == 0 {
        return Err(Error::InvalidArgument("window size is 0".into()));
    }
    let outside = || {
        Error::InvalidArgument(format!(
            "window [{ptr:#x}, +{size}) is not inside its allocation [{alloc_base:#x}, +{alloc_size})"
        ))
    };
    let offset = ptr.checked_sub(alloc_base).ok_or_else(outside)?;
    if offset.checked_add(size).is_none_or(|end| end > alloc_size) {
        return Err(outside());
    }
    if !offset.is_multiple_of(WINDOW_ALIGN) {
        return Err(Error::InvalidArgument(format!(
            "window start {ptr:#x} is {offset} bytes into its allocation, not a multiple of {WINDOW_ALIGN}"
        )));
    }
    Ok(offset)
}

/// What every rank agreed on for one registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgreedRegistration {
    /// The registration's sequence number.
    pub seq_no: u64,
    /// Window size in bytes.
    pub window_size: u64,
    /// Offset of the window inside each rank's allocation.
    pub offset_in_alloc: u64,
    /// Size of each rank's allocation.
    pub alloc_size: u64,
    /// Allocation granularity (the space-allocator alignment).
    pub granularity: u64,
    /// How memory is shared.
    pub handle_kind: HandleKind,
    /// The largest device memory in the team (input to [`team_stride`]).
    pub max_device_total_mem: u64,
}

impl AgreedRegistration {
    /// The `(size, align)` to ask the window [`crate::space::Space`] for: the allocation size
    /// rounded up to the granularity, aligned to the granularity. Identical on every rank, so
    /// the space hands out the same offset everywhere.
    pub fn space_request(&self) -> Result<(u64, u64)> {
        let size = self
            .alloc_size
            .checked_next_multiple_of(self.granularity)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "allocation size {} overflows when rounded to {}",
                    self.alloc_size, self.granularity
                ))
            })?;
        Ok((size, self.granularity))
    }
}

/// The error for something rank `peer` sent during a window registration that breaks the
/// protocol (the reporting rank is added by the caller, [`Error::reported_by`]).
pub(crate) fn registration_fault(peer: usize, what: String) -> Error {
    Error::PeerProtocol {
        rank: None,
        step: "window registration".into(),
        peer,
        what,
    }
}

/// Checks the gathered records of one registration (one per rank, in increasing rank order)
/// and returns what they agree on.
///
/// Every rank calls this on the same records and therefore gets the same result. Checks, in
/// this order, reporting the first failure:
/// 1. the records are non-empty ([`Error::Internal`]) and in strictly increasing rank order
///    ([`Error::InvalidArgument`]: the caller passes them so; each record's rank must be its
///    sender's, which registration checks as it decodes them);
/// 2. each record on its own: window size > 0, granularity a power of two, window offset a
///    multiple of 4 KiB, window inside the allocation ([`Error::PeerProtocol`] naming the
///    record's rank: every rank checked its own record before sending it);
/// 3. against the first record, field by field (sequence number, handle kind, granularity,
///    window offset, window size, allocation size): the first rank that differs gives
///    [`Error::Mismatch`] between the first record's rank and that rank.
pub fn validate_registration(records: &[RegistrationRecord]) -> Result<AgreedRegistration> {
    let Some(first) = records.first() else {
        return Err(Error::Internal("no registration records gathered".into()));
    };
    for pair in records.windows(2) {
        if pair[1].rank <= pair[0].rank {
            return Err(Error::InvalidArgument(format!(
                "registration records are not in rank order (rank {} follows rank {})",
                pair[1].rank, pair[0].rank
            )));
        }
    }
    for r in records {
        let sender = r.rank as usize;
        let bad = |why: String| {
            registration_fault(sender, format!("an invalid registration record: {why}"))
        };
        if r.window_size == 0 {
            return Err(bad("window size is 0".into()));
        }
        if !r.granularity.is_power_of_two() {
            return Err(bad(format!(
                "granularity {} is not a power of two",
                r.granularity
            )));
        }
        if !r.offset_in_alloc.is_multiple_of(WINDOW_ALIGN) {
            return Err(bad(format!(
                "window offset {} in its allocation is not a multiple of {WINDOW_ALIGN}",
                r.offset_in_alloc
            )));
        }
        if r.offset_in_alloc
            .checked_add(r.window_size)
            .is_none_or(|end| end > r.alloc_size)
        {
            return Err(bad(format!(
                "window of {} bytes at offset {} exceeds its {}-byte allocation",
                r.window_size, r.offset_in_alloc, r.alloc_size
            )));
        }
    }
    type Field = (&'static str, fn(&RegistrationRecord) -> String);
    let fields: [Field; 7] = [
        ("window registration sequence number", |r| {
            r.seq_no.to_string()
        }),
        ("memory handle kind", |r| r.handle_kind.to_string()),
        ("allocation granularity", |r| r.granularity.to_string()),
        ("window offset in its allocation", |r| {
            r.offset_in_alloc.to_string()
        }),
        ("window size", |r| r.window_size.to_string()),
        ("allocation size", |r| r.alloc_size.to_string()),
        (
            "live window slots (windows deregistered in a different order?)",
            |r| format!("digest {:08x}", r.slots_digest),
        ),
    ];
    for (what, get) in fields {
        let value_a = get(first);
        if let Some(other) = records.iter().find(|r| get(r) != value_a) {
            return Err(Error::Mismatch {
                what: what.into(),
                rank_a: first.rank as usize,
                value_a,
                rank_b: other.rank as usize,
                value_b: get(other),
            });
        }
    }
    Ok(AgreedRegistration {
        seq_no: first.seq_no,
        window_size: first.window_size,
        offset_in_alloc: first.offset_in_alloc,
        alloc_size: first.alloc_size,
        granularity: first.granularity,
        handle_kind: first.handle_kind,
        max_device_total_mem: records
            .iter()
            .map(|r| r.device_total_mem)
            .max()
            .unwrap_or(0),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("2m").unwrap(), 2 << 20);
        assert_eq!(parse_size("144G").unwrap(), 144 * GIB);
        assert_eq!(parse_size(" 144GiB ").unwrap(), 144 * GIB);
        assert_eq!(parse_size("144gb").unwrap(), 144 * GIB);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("7B").unwrap(), 7);
        for bad in [
            "",
            "G",
            "4Gbb",
            "4iB",
            "-4G",
            "4.5G",
            "4X",
            "4GG",
            "4 G",
            "99999999999999999999",
            "16777216T",
        ] {
            assert!(
                matches!(parse_size(bad), Err(Error::InvalidArgument(_))),
                "{bad:?} parsed"
            );
        }
    }

    #[test]
    fn stride_is_max_device_memory_rounded_up_to_4_gib() {
        // 8×H200: 141 GiB-ish devices → 144 GiB.
        let h200 = 150_754_820_096u64;
        assert_eq!(team_stride(&[h200; 8], None).unwrap(), 144 * GIB);
        assert_eq!(
            team_stride(&[8 * GIB, 80 * GIB, 79 * GIB], None).unwrap(),
            80 * GIB
        );
        assert_eq!(team_stride(&[1], None).unwrap(), 4 * GIB);
        assert_eq!(team_stride(&[4 * GIB + 1], None).unwrap(), 8 * GIB);
        assert!(team_stride(&[], None).is_err());
        assert!(team_stride(&[0, 0], None).is_err());
        assert!(team_stride(&[u64::MAX], None).is_err());
    }

    #[test]
    fn stride_override_must_be_a_multiple_of_4_gib() {
        assert_eq!(team_stride(&[80 * GIB], Some("144G")).unwrap(), 144 * GIB);
        assert_eq!(team_stride(&[80 * GIB], Some("8G")).unwrap(), 8 * GIB);
        for auto in ["auto", "AUTO", "0", "", "  "] {
            assert_eq!(team_stride(&[80 * GIB], Some(auto)).unwrap(), 80 * GIB);
        }
        let err = team_stride(&[80 * GIB], Some("141G")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable SYMCOMM_WIN_STRIDE: 141G (151397597184 bytes) is not a multiple of 4 GiB (try 144G)"
        );
        assert!(
            team_stride(&[80 * GIB], Some("lots"))
                .unwrap_err()
                .to_string()
                .contains("SYMCOMM_WIN_STRIDE")
        );
    }

    #[test]
    fn peers_are_a_stride_apart_in_the_flat_va() {
        let l = FlatLayout::new(8, 3, 144 * GIB).unwrap();
        assert_eq!(l.stride4g(), 36);
        assert_eq!(l.total_size(), 8 * 144 * GIB);
        let base = 0x7f00_0000_0000;
        assert_eq!(l.peer_addr(base, 0, 0).unwrap(), base);
        assert_eq!(
            l.peer_addr(base, 5, 4096).unwrap(),
            base + 5 * 144 * GIB + 4096
        );
        assert_eq!(l.local_addr(base, 10).unwrap(), base + 3 * 144 * GIB + 10);
        // The device computes the same address by adding peer × stride4g to the high word.
        let hi_add = base + ((5 * l.stride4g() as u64) << 32) + 4096;
        assert_eq!(l.peer_addr(base, 5, 4096).unwrap(), hi_add);
        assert_eq!(
            l.peer_addr(base, 7, 144 * GIB - 1).unwrap(),
            base + 8 * 144 * GIB - 1
        );
    }

    #[test]
    fn flat_layout_rejects_out_of_range_inputs() {
        assert!(FlatLayout::new(8, 0, 0).is_err());
        assert!(FlatLayout::new(8, 0, 144 * GIB + 4096).is_err());
        assert!(FlatLayout::new(8, 8, 144 * GIB).is_err());
        assert!(FlatLayout::new(0, 0, 4 * GIB).is_err());
        assert!(FlatLayout::new(1 << 40, 0, 1 << 32).is_err());
        let l = FlatLayout::new(2, 1, 4 * GIB).unwrap();
        assert!(l.peer_offset(2, 0).is_err());
        assert!(l.peer_offset(0, 4 * GIB).is_err());
        assert!(l.peer_addr(u64::MAX - 10, 1, 0).is_err());
    }

    #[test]
    fn window_offsets_must_be_aligned_and_inside_the_allocation() {
        let base = 0x7000_0000_0000;
        let mb = 1 << 20;
        assert_eq!(
            window_offset_in_alloc(base, 2 * mb, base, 2 * mb).unwrap(),
            0
        );
        assert_eq!(
            window_offset_in_alloc(base + 8192, 100, base, 2 * mb).unwrap(),
            8192
        );
        assert_eq!(
            window_offset_in_alloc(base + mb, mb, base, 2 * mb).unwrap(),
            mb
        );
        let msg = |r: Result<u64>| r.unwrap_err().to_string();
        assert!(
            msg(window_offset_in_alloc(base + 100, 100, base, 2 * mb))
                .contains("not a multiple of 4096")
        );
        assert!(msg(window_offset_in_alloc(base, 0, base, 2 * mb)).contains("size is 0"));
        assert!(msg(window_offset_in_alloc(base - 4096, 100, base, 2 * mb)).contains("not inside"));
        assert!(
            msg(window_offset_in_alloc(base + mb, mb + 1, base, 2 * mb)).contains("not inside")
        );
        assert!(
            msg(window_offset_in_alloc(base + 4096, u64::MAX, base, 2 * mb)).contains("not inside")
        );
    }

    /// A valid record of `rank` (the other tests of registration use it too).
    pub(crate) fn rec(rank: u32) -> RegistrationRecord {
        RegistrationRecord {
            rank,
            seq_no: 3,
            window_size: 1 << 20,
            offset_in_alloc: 4096,
            alloc_size: 2 << 20,
            granularity: 2 << 20,
            device_total_mem: 80 * GIB + rank as u64,
            handle_kind: HandleKind::PosixFd,
            slots_digest: 0xabcd,
        }
    }

    #[test]
    fn agreeing_records_validate_to_the_common_values() {
        let records: Vec<_> = (0..8).map(rec).collect();
        let agreed = validate_registration(&records).unwrap();
        assert_eq!(agreed.seq_no, 3);
        assert_eq!(agreed.window_size, 1 << 20);
        assert_eq!(agreed.offset_in_alloc, 4096);
        assert_eq!(agreed.alloc_size, 2 << 20);
        assert_eq!(agreed.granularity, 2 << 20);
        assert_eq!(agreed.handle_kind, HandleKind::PosixFd);
        assert_eq!(agreed.max_device_total_mem, 80 * GIB + 7);
        assert_eq!(agreed.space_request().unwrap(), (2 << 20, 2 << 20));
        let odd = AgreedRegistration {
            alloc_size: (2 << 20) + 4096,
            ..agreed
        };
        assert_eq!(odd.space_request().unwrap(), (4 << 20, 2 << 20));
        let huge = AgreedRegistration {
            alloc_size: u64::MAX - 1,
            ..agreed
        };
        assert!(huge.space_request().is_err());
        // Ranks may be a non-contiguous subset (e.g. world ranks of an LSA team).
        assert!(validate_registration(&[rec(8), rec(9), rec(12)]).is_ok());
    }

    #[test]
    fn mismatches_name_the_first_differing_rank_against_the_first_record() {
        let mut records: Vec<_> = (0..4).map(rec).collect();
        records[2].window_size = 4096;
        records[3].window_size = 8192;
        let err = validate_registration(&records).unwrap_err();
        assert_eq!(
            err.to_string(),
            "window size differs across ranks: rank 0 has 1048576, rank 2 has 4096"
        );
        // A sequence-number mismatch is reported before any other field: it is the root cause.
        records[3].seq_no = 4;
        let err = validate_registration(&records).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Mismatch { what, rank_a: 0, rank_b: 3, value_a, value_b }
                    if what == "window registration sequence number" && value_a == "3" && value_b == "4"
            ),
            "{err}"
        );
    }

    #[test]
    fn every_rank_gets_the_same_error_for_the_same_records() {
        let mut records: Vec<_> = (0..6).map(rec).collect();
        records[4].offset_in_alloc = 8192;
        records[1].handle_kind = HandleKind::Fabric;
        // Each rank validates its own copy of the all-gather result.
        let errors: Vec<String> = (0..6)
            .map(|_| {
                validate_registration(&records.clone())
                    .unwrap_err()
                    .to_string()
            })
            .collect();
        assert!(errors.iter().all(|e| e == &errors[0]));
        assert_eq!(
            errors[0],
            "memory handle kind differs across ranks: rank 0 has posix-fd, rank 1 has fabric"
        );
        let mut records: Vec<_> = (0..3).map(rec).collect();
        records[2].granularity = 1 << 21 << 1;
        records[2].alloc_size = 4 << 20;
        assert!(
            validate_registration(&records)
                .unwrap_err()
                .to_string()
                .starts_with("allocation granularity differs")
        );
        let mut records: Vec<_> = (0..3).map(rec).collect();
        records[1].alloc_size = 4 << 20;
        assert!(
            validate_registration(&records)
                .unwrap_err()
                .to_string()
                .starts_with("allocation size differs")
        );
    }

    #[test]
    fn malformed_records_are_rejected_naming_the_rank() {
        let check = |edit: fn(&mut RegistrationRecord), want: &str| {
            let mut records: Vec<_> = (0..3).map(rec).collect();
            edit(&mut records[1]);
            let err = validate_registration(&records).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        };
        let record = "window registration: rank 1 sent an invalid registration record: ";
        check(|r| r.window_size = 0, &format!("{record}window size is 0"));
        check(|r| r.granularity = 3 << 20, &format!("{record}granularity"));
        check(
            |r| r.offset_in_alloc = 100,
            &format!("{record}window offset 100"),
        );
        check(
            |r| r.window_size = 2 << 20,
            &format!("{record}window of 2097152 bytes at offset 4096 exceeds"),
        );
        check(
            |r| r.offset_in_alloc = u64::MAX - 4095,
            &format!("{record}window of"),
        );
        check(|r| r.rank = 0, "not in rank order");
        assert!(matches!(
            validate_registration(&[]),
            Err(Error::Internal(_))
        ));
    }
}
