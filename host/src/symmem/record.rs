//! The per-rank registration record that window registration all-gathers, and its wire form.
//!
//! Each rank describes the window it is registering in one [`RegistrationRecord`]; the records
//! of all ranks are exchanged with the bootstrap all-gather and checked with
//! [`super::layout::validate_registration`]. The wire form is explicit little-endian with a
//! fixed size of [`RegistrationRecord::WIRE_SIZE`] bytes (no `#[repr(C)]` struct is ever sent),
//! starting with a magic and a version, so a record from another program or another version is
//! rejected with an error instead of being misread.
//!
//! Wire layout (byte offset: field):
//! `0` magic `b"SCRG"`, `4` version `u16`, `6` handle kind `u16`, `8` rank `u32`,
//! `12` slots digest `u32`, `16` seq no, `24` window size, `32` window offset in its
//! allocation, `40` allocation size, `48` granularity, `56` device total memory (all `u64`).

use std::fmt;

use crate::{Error, Result};

/// How a rank's physical memory is shared with its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    /// A POSIX file descriptor, passed over a Unix socket (see [`crate::ipc`]).
    PosixFd,
    /// A CUDA fabric handle (multi-node NVLink, IMEX), exchanged by value.
    Fabric,
    /// A memfd of the emulated backend ([`crate::backend`]), passed like a POSIX fd; never
    /// mixed with GPU memory in one registration.
    EmulatedFd,
}

impl HandleKind {
    fn to_wire(self) -> u16 {
        match self {
            HandleKind::PosixFd => 1,
            HandleKind::Fabric => 2,
            HandleKind::EmulatedFd => 3,
        }
    }

    fn from_wire(v: u16) -> Option<HandleKind> {
        match v {
            1 => Some(HandleKind::PosixFd),
            2 => Some(HandleKind::Fabric),
            3 => Some(HandleKind::EmulatedFd),
            _ => None,
        }
    }
}

impl fmt::Display for HandleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleKind::PosixFd => "posix-fd",
            HandleKind::Fabric => "fabric",
            HandleKind::EmulatedFd => "emulated-fd",
        })
    }
}

/// What one rank tells the others about the window it registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationRecord {
    /// The sender's rank (in the team the record is gathered over).
    pub rank: u32,
    /// How many registrations this rank started before this one; must agree on all ranks.
    pub seq_no: u64,
    /// Window size in bytes.
    pub window_size: u64,
    /// Offset of the window's first byte from the start of its physical allocation.
    pub offset_in_alloc: u64,
    /// Size of the physical allocation behind the window (what gets mapped for each peer).
    pub alloc_size: u64,
    /// The allocation granularity the rank used.
    pub granularity: u64,
    /// Total memory of the rank's device (the flat-VA stride is derived from the maximum).
    pub device_total_mem: u64,
    /// How the rank's memory will be shared.
    pub handle_kind: HandleKind,
    /// A digest of the rank's live window slots ([`crate::space::Space::digest`]): the same
    /// on ranks that registered and deregistered the same windows in the same order, so a
    /// divergence is caught here instead of giving silently different slot offsets.
    pub slots_digest: u32,
}

const MAGIC: [u8; 4] = *b"SCRG";
const VERSION: u16 = 2;

impl RegistrationRecord {
    /// Bytes of the wire form.
    pub const WIRE_SIZE: usize = 64;

    /// The little-endian wire form.
    pub fn encode(&self) -> [u8; Self::WIRE_SIZE] {
        let mut out = [0u8; Self::WIRE_SIZE];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&self.handle_kind.to_wire().to_le_bytes());
        out[8..12].copy_from_slice(&self.rank.to_le_bytes());
        out[12..16].copy_from_slice(&self.slots_digest.to_le_bytes());
        let words = [
            self.seq_no,
            self.window_size,
            self.offset_in_alloc,
            self.alloc_size,
            self.granularity,
            self.device_total_mem,
        ];
        for (i, w) in words.iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Parses one wire-form record; [`Error::InvalidArgument`] on a wrong length, magic,
    /// version or handle kind.
    pub fn decode(bytes: &[u8]) -> Result<RegistrationRecord> {
        let bytes: &[u8; Self::WIRE_SIZE] = bytes.try_into().map_err(|_| {
            Error::InvalidArgument(format!(
                "registration record has {} bytes, expected {}",
                bytes.len(),
                Self::WIRE_SIZE
            ))
        })?;
        if bytes[0..4] != MAGIC {
            return Err(Error::InvalidArgument(format!(
                "registration record has magic {:02x?}, expected {:02x?} (not a symcomm record)",
                &bytes[0..4],
                MAGIC
            )));
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let version = u16_at(4);
        if version != VERSION {
            return Err(Error::InvalidArgument(format!(
                "registration record version {version}, expected {VERSION} (mixed symcomm versions?)"
            )));
        }
        let kind = u16_at(6);
        let handle_kind = HandleKind::from_wire(kind).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "registration record has unknown handle kind {kind}"
            ))
        })?;
        Ok(RegistrationRecord {
            rank: u32_at(8),
            seq_no: u64_at(16),
            window_size: u64_at(24),
            offset_in_alloc: u64_at(32),
            alloc_size: u64_at(40),
            granularity: u64_at(48),
            device_total_mem: u64_at(56),
            handle_kind,
            slots_digest: u32_at(12),
        })
    }

    /// Parses the concatenated records of an all-gather (rank order); an error if the length
    /// is not a multiple of [`RegistrationRecord::WIRE_SIZE`] or any record is bad.
    #[cfg(test)]
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<RegistrationRecord>> {
        if !bytes.len().is_multiple_of(Self::WIRE_SIZE) {
            return Err(Error::InvalidArgument(format!(
                "gathered registration records have {} bytes, not a multiple of {}",
                bytes.len(),
                Self::WIRE_SIZE
            )));
        }
        bytes
            .chunks_exact(Self::WIRE_SIZE)
            .map(RegistrationRecord::decode)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rank: u32) -> RegistrationRecord {
        RegistrationRecord {
            rank,
            seq_no: 0x0102_0304_0506_0708,
            window_size: 3 << 30,
            offset_in_alloc: 4096,
            alloc_size: 4 << 30,
            granularity: 2 << 20,
            device_total_mem: 150_000_000_000,
            handle_kind: HandleKind::PosixFd,
            slots_digest: 0x1122_3344,
        }
    }

    #[test]
    fn records_round_trip_through_the_wire_form() {
        for kind in [
            HandleKind::PosixFd,
            HandleKind::Fabric,
            HandleKind::EmulatedFd,
        ] {
            let r = RegistrationRecord {
                handle_kind: kind,
                ..sample(7)
            };
            assert_eq!(RegistrationRecord::decode(&r.encode()).unwrap(), r);
        }
        let max = RegistrationRecord {
            rank: u32::MAX,
            seq_no: u64::MAX,
            window_size: u64::MAX,
            offset_in_alloc: u64::MAX,
            alloc_size: u64::MAX,
            granularity: u64::MAX,
            device_total_mem: u64::MAX,
            handle_kind: HandleKind::Fabric,
            slots_digest: u32::MAX,
        };
        assert_eq!(RegistrationRecord::decode(&max.encode()).unwrap(), max);
    }

    #[test]
    fn wire_form_is_little_endian_at_fixed_offsets() {
        let bytes = sample(0x0a0b_0c0d).encode();
        assert_eq!(&bytes[0..4], b"SCRG");
        assert_eq!(&bytes[4..8], &[2, 0, 1, 0]);
        assert_eq!(&bytes[8..12], &[0x0d, 0x0c, 0x0b, 0x0a]);
        assert_eq!(&bytes[12..16], &[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(&bytes[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&bytes[32..40], &4096u64.to_le_bytes());
        assert_eq!(&bytes[48..56], &(2u64 << 20).to_le_bytes());
    }

    #[test]
    fn decode_rejects_wrong_lengths() {
        let bytes = sample(1).encode();
        for len in [0, 1, 63, 65, 128] {
            let mut v = bytes.to_vec();
            v.resize(len, 0);
            let err = RegistrationRecord::decode(&v).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid argument: registration record has {len} bytes, expected 64")
            );
        }
    }

    #[test]
    fn decode_rejects_foreign_or_corrupt_records() {
        let good = sample(1).encode();
        let corrupt = |i: usize, v: u8| {
            let mut b = good;
            b[i] = v;
            RegistrationRecord::decode(&b)
        };
        assert!(corrupt(0, b'X').unwrap_err().to_string().contains("magic"));
        assert!(corrupt(4, 1).unwrap_err().to_string().contains("version 1"));
        assert!(
            corrupt(6, 0)
                .unwrap_err()
                .to_string()
                .contains("handle kind 0")
        );
        assert!(
            corrupt(6, 4)
                .unwrap_err()
                .to_string()
                .contains("handle kind 4")
        );
        // Every other byte is payload and decodes to a (different) valid record.
        assert!(corrupt(20, 0xff).is_ok());
    }

    #[test]
    fn decode_all_splits_gathered_records_in_rank_order() {
        let mut buf = Vec::new();
        for r in 0..4 {
            buf.extend_from_slice(&sample(r).encode());
        }
        let all = RegistrationRecord::decode_all(&buf).unwrap();
        assert_eq!(all.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert!(RegistrationRecord::decode_all(&buf[..buf.len() - 1]).is_err());
        assert_eq!(RegistrationRecord::decode_all(&[]).unwrap(), vec![]);
        buf[64] = 0;
        assert!(RegistrationRecord::decode_all(&buf).is_err());
    }
}
