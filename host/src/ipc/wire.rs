//! The wire protocol of the fd exchange: where a rank's server listens and the two messages
//! a client and a server ([`super::client`], [`super::server`]) exchange.
//!
//! Every message is one SOCK_SEQPACKET datagram of exactly 32 bytes, little-endian:
//!
//! ```text
//!   request: magic "SCFQ", version u16, reserved u16 (0), unique id u64, key u64, rank u64
//!   reply:   magic "SCFR", version u16, status u16,       unique id u64, key u64, reserved u64
//! ```
//!
//! A reply with status OK carries exactly one fd (SCM_RIGHTS); other replies carry none.
//! Carrying the fd is [`super::sys`]'s business; this file only encodes and decodes bytes.

use std::io;

/// The abstract socket name (without the leading NUL) of `rank` for unique id `id`.
pub fn socket_name(id: u64, rank: usize) -> String {
    format!("symcomm-{id:016x}-{rank}")
}

pub(crate) const MSG_SIZE: usize = 32;
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"SCFQ";
pub(crate) const REPLY_MAGIC: [u8; 4] = *b"SCFR";
pub(crate) const PROTOCOL_VERSION: u16 = 1;
pub(crate) const STATUS_OK: u16 = 0;
pub(crate) const STATUS_NOT_PUBLISHED: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) magic: [u8; 4],
    pub(crate) version: u16,
    /// Reserved (request) or status (reply).
    pub(crate) word: u16,
    pub(crate) id: u64,
    pub(crate) key: u64,
    /// Requesting rank (request) or reserved (reply).
    pub(crate) extra: u64,
}

impl Message {
    pub(crate) fn request(id: u64, key: u64, rank: usize) -> Message {
        Message {
            magic: REQUEST_MAGIC,
            version: PROTOCOL_VERSION,
            word: 0,
            id,
            key,
            extra: rank as u64,
        }
    }

    pub(crate) fn reply(id: u64, key: u64, status: u16) -> Message {
        Message {
            magic: REPLY_MAGIC,
            version: PROTOCOL_VERSION,
            word: status,
            id,
            key,
            extra: 0,
        }
    }

    pub(crate) fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        b[0..4].copy_from_slice(&self.magic);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.word.to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    /// Parses a message of exactly [`MSG_SIZE`] bytes; `None` for any other length.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Message> {
        let b: &[u8; MSG_SIZE] = bytes.try_into().ok()?;
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Some(Message {
            magic: [b[0], b[1], b[2], b[3]],
            version: u16::from_le_bytes([b[4], b[5]]),
            word: u16::from_le_bytes([b[6], b[7]]),
            id: u64_at(8),
            key: u64_at(16),
            extra: u64_at(24),
        })
    }
}

/// An error for a message that breaks this format (wrong length, magic, version, ...).
pub(crate) fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}
