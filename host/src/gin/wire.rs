//! The frames GIN proxies exchange over a transport connection: a fixed 64-byte header,
//! followed, for a put, by its data. The sender is the rank at the other end of the connection
//! (checked at its hello), never a field of the frame.
//!
//! | bytes | field |
//! |---|---|
//! | 0–3 | marker `GINf` |
//! | 4 | [`Kind`] |
//! | 5 | signal op (`SignalOp` of the device crate) |
//! | 6 | bit 0: strong |
//! | 7 | inline value size (put value) |
//! | 8–11 | context |
//! | 12–15 | signal index |
//! | 16–23 | sequence number of the operation in its (context, sender → receiver) stream |
//! | 24–27 | destination window id |
//! | 32–39 | destination offset |
//! | 40–47 | payload bytes (put data, or an error's text) |
//! | 48–55 | inline value |
//! | 56–63 | signal operand |

use symcomm_device::gin::SignalOp;

/// Bytes of a frame header.
pub(crate) const HEADER: usize = 64;
const MARKER: u32 = u32::from_le_bytes(*b"GINf");

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Put = 1,
    PutValue = 2,
    Signal = 3,
    /// The sender closes the connection on purpose (its device communicator is destroyed).
    Close = 4,
    /// The sender refuses something this rank sent; the payload says what.
    Refused = 5,
    /// The sender's GIN failed (it stops); the payload says why.
    Failed = 6,
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub kind: Kind,
    pub signal_op: SignalOp,
    pub strong: bool,
    pub value_size: u8,
    pub context: u32,
    pub signal: u32,
    pub seq: u64,
    pub dst_win: u32,
    pub dst_off: u64,
    pub bytes: u64,
    pub value: u64,
    pub signal_value: u64,
}

impl Frame {
    /// A frame of `kind` with every other field zero.
    pub(crate) fn new(kind: Kind) -> Frame {
        Frame {
            kind,
            signal_op: SignalOp::None,
            strong: false,
            value_size: 0,
            context: 0,
            signal: 0,
            seq: 0,
            dst_win: 0,
            dst_off: 0,
            bytes: 0,
            value: 0,
            signal_value: 0,
        }
    }

    pub(crate) fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..4].copy_from_slice(&MARKER.to_le_bytes());
        b[4] = self.kind as u8;
        b[5] = self.signal_op as u8;
        b[6] = self.strong as u8;
        b[7] = self.value_size;
        b[8..12].copy_from_slice(&self.context.to_le_bytes());
        b[12..16].copy_from_slice(&self.signal.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.dst_win.to_le_bytes());
        b[32..40].copy_from_slice(&self.dst_off.to_le_bytes());
        b[40..48].copy_from_slice(&self.bytes.to_le_bytes());
        b[48..56].copy_from_slice(&self.value.to_le_bytes());
        b[56..64].copy_from_slice(&self.signal_value.to_le_bytes());
        b
    }

    /// The header in `b`, or what is wrong with it.
    pub(crate) fn decode(b: &[u8; HEADER]) -> Result<Frame, String> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        if u32_at(0) != MARKER {
            return Err(format!(
                "a frame without the GIN marker ({:#010x})",
                u32_at(0)
            ));
        }
        let kind = match b[4] {
            1 => Kind::Put,
            2 => Kind::PutValue,
            3 => Kind::Signal,
            4 => Kind::Close,
            5 => Kind::Refused,
            6 => Kind::Failed,
            k => return Err(format!("a frame of unknown kind {k}")),
        };
        let signal_op =
            SignalOp::from_u8(b[5]).ok_or_else(|| format!("an unknown signal op {}", b[5]))?;
        if b[6] > 1 {
            return Err(format!("unknown flags {:#x}", b[6]));
        }
        Ok(Frame {
            kind,
            signal_op,
            strong: b[6] == 1,
            value_size: b[7],
            context: u32_at(8),
            signal: u32_at(12),
            seq: u64_at(16),
            dst_win: u32_at(24),
            dst_off: u64_at(32),
            bytes: u64_at(40),
            value: u64_at(48),
            signal_value: u64_at(56),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_foreign_bytes_are_refused() {
        let f = Frame {
            kind: Kind::Put,
            signal_op: SignalOp::Set,
            strong: true,
            value_size: 0,
            context: 3,
            signal: 9,
            seq: 1 << 40,
            dst_win: 7,
            dst_off: 12345,
            bytes: 99,
            value: 0,
            signal_value: u64::MAX,
        };
        assert_eq!(Frame::decode(&f.encode()), Ok(f));
        let mut b = f.encode();
        b[0] = b'X';
        assert!(Frame::decode(&b).unwrap_err().contains("GIN marker"));
        let mut b = f.encode();
        b[4] = 9;
        assert!(Frame::decode(&b).unwrap_err().contains("unknown kind 9"));
        let mut b = f.encode();
        b[5] = 7;
        assert!(Frame::decode(&b).unwrap_err().contains("signal op 7"));
    }
}
