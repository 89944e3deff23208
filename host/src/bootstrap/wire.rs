//! Framing of the bootstrap's TCP byte streams, and the size limits that keep it safe.
//!
//! Every message on a bootstrap connection is one frame: a fixed 24-byte little-endian header
//! (`marker u16 = 0x5343`, `kind u8`, `reserved u8`, `aux u32`, `step u64`, `len u64`)
//! followed by `len` payload bytes. The reader checks the marker, the kind and the length
//! **before** it allocates anything, and each kind has its own ceiling (a hello is exactly
//! [`HELLO_LEN`] bytes, a reason text at most [`MAX_REASON_BYTES`], a payload at most
//! [`MAX_MESSAGE_BYTES`]). The payload buffer then grows only with the bytes that actually
//! arrive, so a peer that announces a large frame and stalls costs nothing.
//!
//! Neighbours: [`super::tcp`] writes and reads these frames; the in-process transport never
//! serialises anything. The first frame on every connection is a [`Hello`] carrying the
//! job's magic, the protocol version and the ranks involved; both ends check it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Largest payload one bootstrap message may carry (64 MiB). Larger sends are refused before
/// anything is sent; larger announced frames are refused before anything is allocated.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Largest world the bootstrap accepts.
pub const MAX_WORLD_SIZE: usize = 1 << 16;

/// Version of the wire protocol; both ends of every connection must agree.
pub const PROTOCOL_VERSION: u32 = 1;

/// Length of a [`Hello`] payload.
pub(crate) const HELLO_LEN: usize = 32;
/// Longest reason text carried by a reject or abort frame.
pub(crate) const MAX_REASON_BYTES: usize = 1024;
/// The `aux` of a reject frame that refuses a connection for now only (the listener is busy):
/// the rank should dial again. Any other `aux` makes the refusal final.
pub(crate) const REJECT_RETRY: u32 = 1;
/// Length of the frame header.
pub(crate) const HEADER_LEN: usize = 24;
const MARKER: u16 = 0x5343;
const WELCOME_HEAD: usize = 12;
const WELCOME_ENTRY: usize = 19;
/// Initial capacity of a payload buffer; it grows only as bytes arrive.
const INITIAL_CAPACITY: usize = 64 << 10;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Handshake; payload is a [`Hello`].
    Hello = 1,
    /// Root's answer to a rendezvous hello: the magic and every rank's mesh address.
    Welcome = 2,
    /// The other end refuses this connection; payload is the reason, `aux` is
    /// [`REJECT_RETRY`] when the refusal is only for now.
    Reject = 3,
    /// One rank's contribution to a collective; `aux` = operation, `step` = its number.
    Collective = 4,
    /// A point-to-point message.
    PointToPoint = 5,
    /// The sender gave up; `aux` = the rank it blames, payload = the reason.
    Abort = 6,
    /// The sender closed its communicator on purpose.
    Goodbye = 7,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Reject,
            4 => Kind::Collective,
            5 => Kind::PointToPoint,
            6 => Kind::Abort,
            7 => Kind::Goodbye,
            _ => return None,
        })
    }

    /// The largest payload a frame of this kind may have.
    fn max_len(self) -> usize {
        match self {
            Kind::Hello => HELLO_LEN,
            Kind::Welcome => WELCOME_HEAD + WELCOME_ENTRY * MAX_WORLD_SIZE,
            Kind::Reject | Kind::Abort => MAX_REASON_BYTES,
            Kind::Collective | Kind::PointToPoint => MAX_MESSAGE_BYTES,
            Kind::Goodbye => 0,
        }
    }
}

/// One decoded frame.
#[derive(Debug)]
pub(crate) struct Frame {
    pub kind: Kind,
    pub aux: u32,
    pub step: u64,
    pub payload: Vec<u8>,
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The stream ended cleanly before the first header byte.
    Eof,
    /// The OS reported an error (including a read timeout: `WouldBlock` / `TimedOut`).
    Io(io::Error),
    /// The bytes are not a valid frame; the connection must be dropped.
    Malformed(String),
}

impl WireError {
    /// True for a read that hit its socket timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(self, WireError::Io(e) if is_timeout(e))
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Eof => f.write_str("connection closed"),
            WireError::Io(e) => write!(f, "{e}"),
            WireError::Malformed(m) => f.write_str(m),
        }
    }
}

/// True for the error kinds a socket timeout produces.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Reads one frame, refusing any payload longer than `limit` (and than its kind allows)
/// before allocating for it.
pub(crate) fn read_frame(r: &mut impl Read, limit: usize) -> Result<Frame, WireError> {
    let mut head = [0u8; HEADER_LEN];
    match fill(r, &mut head).map_err(WireError::Io)? {
        0 => return Err(WireError::Eof),
        HEADER_LEN => {}
        n => {
            return Err(WireError::Malformed(format!(
                "connection closed after {n} of {HEADER_LEN} header bytes"
            )));
        }
    }
    let (kind, len) = parse_header(&head, limit)?;
    let aux = u32::from_le_bytes(le4(&head[4..8]));
    let step = u64::from_le_bytes(le8(&head[8..16]));
    let mut payload = Vec::with_capacity(len.min(INITIAL_CAPACITY));
    let got = r
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(WireError::Io)?;
    if got != len {
        return Err(WireError::Malformed(format!(
            "connection closed after {got} of {len} payload bytes"
        )));
    }
    Ok(Frame {
        kind,
        aux,
        step,
        payload,
    })
}

/// Checks a frame header (marker, kind, and length against `limit` and the kind's own
/// ceiling); returns the kind and the payload length.
pub(crate) fn parse_header(
    head: &[u8; HEADER_LEN],
    limit: usize,
) -> Result<(Kind, usize), WireError> {
    let marker = u16::from_le_bytes([head[0], head[1]]);
    if marker != MARKER {
        return Err(WireError::Malformed(format!(
            "bad frame marker {marker:#06x} (not a symcomm bootstrap peer, or a corrupted stream)"
        )));
    }
    let kind = Kind::from_u8(head[2])
        .ok_or_else(|| WireError::Malformed(format!("unknown frame kind {}", head[2])))?;
    let len = u64::from_le_bytes(le8(&head[16..24]));
    let max = limit.min(kind.max_len());
    if len > max as u64 {
        return Err(WireError::Malformed(format!(
            "{kind:?} frame announces {len} bytes, more than the limit of {max}"
        )));
    }
    // `len <= max <= usize::MAX` was checked just above.
    Ok((kind, len as usize))
}

/// Writes one frame (header and payload in one write when the payload is small).
pub(crate) fn write_frame(
    w: &mut impl Write,
    kind: Kind,
    aux: u32,
    step: u64,
    payload: &[u8],
) -> io::Result<()> {
    let mut head = [0u8; HEADER_LEN];
    head[0..2].copy_from_slice(&MARKER.to_le_bytes());
    head[2] = kind as u8;
    head[4..8].copy_from_slice(&aux.to_le_bytes());
    head[8..16].copy_from_slice(&step.to_le_bytes());
    head[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    if payload.len() <= INITIAL_CAPACITY {
        let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
        buf.extend_from_slice(&head);
        buf.extend_from_slice(payload);
        w.write_all(&buf)?;
    } else {
        w.write_all(&head)?;
        w.write_all(payload)?;
    }
    w.flush()
}

/// Which handshake a [`Hello`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A rank introducing itself to the root.
    Rendezvous = 1,
    /// A rank opening a mesh link to a lower rank.
    Mesh = 2,
    /// The lower rank's answer on a mesh link.
    MeshAck = 3,
    /// A GIN proxy connection (`port` carries the lane).
    Gin = 4,
}

/// The handshake payload, checked by both ends of every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub magic: u64,
    pub version: u32,
    pub role: Role,
    /// The sender's rank.
    pub rank: u32,
    /// The world size the sender believes in.
    pub size: u32,
    /// The rank the sender wants to talk to.
    pub to: u32,
    /// The sender's mesh listening port (rendezvous only).
    pub port: u16,
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(self.role as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.rank.to_le_bytes());
        b[20..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..28].copy_from_slice(&self.to.to_le_bytes());
        b[28..30].copy_from_slice(&self.port.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Hello, String> {
        if b.len() != HELLO_LEN {
            return Err(format!("hello of {} bytes, expected {HELLO_LEN}", b.len()));
        }
        let role = match u32::from_le_bytes(le4(&b[12..16])) {
            1 => Role::Rendezvous,
            2 => Role::Mesh,
            3 => Role::MeshAck,
            4 => Role::Gin,
            r => return Err(format!("unknown hello role {r}")),
        };
        Ok(Hello {
            magic: u64::from_le_bytes(le8(&b[0..8])),
            version: u32::from_le_bytes(le4(&b[8..12])),
            role,
            rank: u32::from_le_bytes(le4(&b[16..20])),
            size: u32::from_le_bytes(le4(&b[20..24])),
            to: u32::from_le_bytes(le4(&b[24..28])),
            port: u16::from_le_bytes([b[28], b[29]]),
        })
    }
}

/// The payload length of a welcome for `size` ranks.
pub(crate) fn welcome_len(size: usize) -> usize {
    WELCOME_HEAD + WELCOME_ENTRY * size
}

/// Encodes the root's welcome: the magic, the world size and every rank's mesh address.
pub(crate) fn encode_welcome(magic: u64, table: &[SocketAddr]) -> Vec<u8> {
    let mut b = Vec::with_capacity(welcome_len(table.len()));
    b.extend_from_slice(&magic.to_le_bytes());
    b.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for a in table {
        let (family, octets) = match a.ip() {
            IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => (6u8, v6.octets()),
        };
        b.push(family);
        b.extend_from_slice(&octets);
        b.extend_from_slice(&a.port().to_le_bytes());
    }
    b
}

/// Decodes a welcome, checking its magic and size against what this rank expects.
pub(crate) fn decode_welcome(b: &[u8], magic: u64, size: usize) -> Result<Vec<SocketAddr>, String> {
    if b.len() != welcome_len(size) {
        return Err(format!(
            "welcome of {} bytes, expected {} for {size} ranks",
            b.len(),
            welcome_len(size)
        ));
    }
    if u64::from_le_bytes(le8(&b[0..8])) != magic {
        return Err("welcome carries a different magic".into());
    }
    let n = u32::from_le_bytes(le4(&b[8..12])) as usize;
    if n != size {
        return Err(format!("welcome lists {n} ranks, expected {size}"));
    }
    let mut table = Vec::with_capacity(size);
    for e in b[WELCOME_HEAD..].chunks_exact(WELCOME_ENTRY) {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&e[1..17]);
        let v6 = Ipv6Addr::from(octets);
        let ip = match e[0] {
            4 => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED)),
            6 => IpAddr::V6(v6),
            f => return Err(format!("unknown address family {f} in welcome")),
        };
        table.push(SocketAddr::new(ip, u16::from_le_bytes([e[17], e[18]])));
    }
    Ok(table)
}

/// A peer-provided reason text, made safe to put in a one-line error message.
pub(crate) fn reason_text(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(MAX_REASON_BYTES)]);
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Encodes a reason text for a reject or abort frame, cut to the allowed length.
pub(crate) fn reason_bytes(reason: &str) -> &[u8] {
    let mut end = reason.len().min(MAX_REASON_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason.as_bytes()[..end]
}

/// Reads until `buf` is full or the stream ends; returns how many bytes were read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn le4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    a
}

fn le8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that yields a fixed prefix and then claims to have endless data, counting
    /// how many bytes were asked for.
    struct Endless {
        prefix: Vec<u8>,
        pos: usize,
        served: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = if self.pos < self.prefix.len() {
                let n = buf.len().min(self.prefix.len() - self.pos);
                buf[..n].copy_from_slice(&self.prefix[self.pos..self.pos + n]);
                self.pos += n;
                n
            } else {
                buf.fill(0);
                buf.len()
            };
            self.served += n;
            Ok(n)
        }
    }

    fn header(kind: u8, len: u64) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_LEN];
        h[0..2].copy_from_slice(&MARKER.to_le_bytes());
        h[2] = kind;
        h[16..24].copy_from_slice(&len.to_le_bytes());
        h
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Kind::Collective, 7, 42, b"hello").unwrap();
        let f = read_frame(&mut buf.as_slice(), MAX_MESSAGE_BYTES).unwrap();
        assert_eq!(f.kind, Kind::Collective);
        assert_eq!((f.aux, f.step), (7, 42));
        assert_eq!(f.payload, b"hello");
    }

    #[test]
    fn huge_length_prefix_is_refused_before_reading_the_payload() {
        let mut r = Endless {
            prefix: header(Kind::Collective as u8, 1 << 40),
            pos: 0,
            served: 0,
        };
        let e = read_frame(&mut r, MAX_MESSAGE_BYTES).unwrap_err();
        assert!(
            matches!(&e, WireError::Malformed(m) if m.contains("1099511627776")),
            "{e}"
        );
        // Only the header was consumed: nothing was read (let alone allocated) for the payload.
        assert_eq!(r.served, HEADER_LEN);
    }

    #[test]
    fn each_kind_has_its_own_ceiling() {
        for (kind, len) in [
            (Kind::Hello, HELLO_LEN as u64 + 1),
            (Kind::Reject, MAX_REASON_BYTES as u64 + 1),
            (Kind::Goodbye, 1),
        ] {
            let mut r = Endless {
                prefix: header(kind as u8, len),
                pos: 0,
                served: 0,
            };
            assert!(matches!(
                read_frame(&mut r, MAX_MESSAGE_BYTES),
                Err(WireError::Malformed(_))
            ));
            assert_eq!(r.served, HEADER_LEN);
        }
        // The caller's limit applies too.
        let mut r = Endless {
            prefix: header(Kind::PointToPoint as u8, 100),
            pos: 0,
            served: 0,
        };
        assert!(matches!(
            read_frame(&mut r, 99),
            Err(WireError::Malformed(_))
        ));
    }

    #[test]
    fn garbage_is_rejected_by_its_marker() {
        let garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        let e = read_frame(&mut garbage.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(
            matches!(&e, WireError::Malformed(m) if m.contains("marker")),
            "{e}"
        );
        let mut unknown = header(99, 0);
        let e = read_frame(&mut unknown.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(
            matches!(&e, WireError::Malformed(m) if m.contains("kind 99")),
            "{e}"
        );
        unknown.truncate(5);
        let e = read_frame(&mut unknown.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(
            matches!(&e, WireError::Malformed(m) if m.contains("5 of 24")),
            "{e}"
        );
        assert!(matches!(read_frame(&mut &[][..], 10), Err(WireError::Eof)));
    }

    #[test]
    fn truncated_payload_is_an_error_not_a_short_message() {
        let mut b = header(Kind::PointToPoint as u8, 10);
        b.extend_from_slice(b"abc");
        let e = read_frame(&mut b.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(
            matches!(&e, WireError::Malformed(m) if m.contains("3 of 10")),
            "{e}"
        );
    }

    #[test]
    fn hello_and_welcome_round_trip_and_check_their_fields() {
        let h = Hello {
            magic: 0xdead_beef_0123_4567,
            version: PROTOCOL_VERSION,
            role: Role::Mesh,
            rank: 5,
            size: 8,
            to: 2,
            port: 4242,
        };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        assert!(Hello::decode(&[0u8; 31]).is_err());
        let table: Vec<SocketAddr> =
            vec!["127.0.0.1:1".parse().unwrap(), "[::1]:2".parse().unwrap()];
        let w = encode_welcome(9, &table);
        assert_eq!(decode_welcome(&w, 9, 2), Ok(table));
        assert!(decode_welcome(&w, 8, 2).unwrap_err().contains("magic"));
        assert!(decode_welcome(&w, 9, 3).is_err());
    }

    #[test]
    fn peer_reasons_become_one_bounded_line() {
        assert_eq!(reason_text(b"a\nb\x07c"), "a b c");
        let long = "é".repeat(MAX_REASON_BYTES);
        assert!(reason_bytes(&long).len() <= MAX_REASON_BYTES);
        assert!(std::str::from_utf8(reason_bytes(&long)).is_ok());
    }
}
