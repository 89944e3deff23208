//! The unique id: where the root listens, and the job's 64-bit magic.
//!
//! Every rank of a job must hold the same [`UniqueId`]. The address tells non-root ranks where
//! to find rank 0; the magic is checked in every handshake so that a stray process (another
//! job reusing the port, a port scanner, a misconfigured rank) is rejected instead of being
//! mistaken for a peer. The magic is an accident guard, not authentication: it travels in
//! clear text.
//!
//! Printable form: `<16 hex digits>@<host>:<port>`, e.g. `00c0ffee12345678@10.0.0.1:29500`
//! (`symcomm-run` passes it to its ranks as `SYMCOMM_UNIQUE_ID`).

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};

use crate::{Error, Result};

/// The root's socket address and the job's magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UniqueId {
    addr: SocketAddr,
    magic: u64,
}

impl UniqueId {
    /// A unique id from its two parts.
    pub fn new(addr: SocketAddr, magic: u64) -> UniqueId {
        UniqueId { addr, magic }
    }

    /// A unique id for a root at `addr` with a fresh random magic.
    pub fn random(addr: SocketAddr) -> UniqueId {
        UniqueId::new(addr, random_u64())
    }

    /// A unique id whose magic is derived from `seed` (for launchers that cannot hand every
    /// rank a random number, e.g. torchrun: the seed is then built from variables every rank
    /// sees identically).
    pub fn derived(addr: SocketAddr, seed: &str) -> UniqueId {
        UniqueId::new(addr, fnv1a64(seed.as_bytes()))
    }

    /// Parses the printable form `<hex magic>@<host>:<port>`, resolving the host name.
    pub fn parse(text: &str) -> Result<UniqueId> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "unique id {text:?}: {why} (expected <16 hex digits>@<host>:<port>)"
            ))
        };
        let (magic, addr) = text.trim().split_once('@').ok_or_else(|| bad("no '@'"))?;
        if magic.is_empty() || magic.len() > 16 {
            return Err(bad("the magic must be 1 to 16 hex digits"));
        }
        let magic = u64::from_str_radix(magic, 16).map_err(|_| bad("the magic is not hex"))?;
        let addr = resolve(addr).map_err(|e| bad(&e))?;
        Ok(UniqueId::new(addr, magic))
    }

    /// Where rank 0 listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The job's magic number.
    pub fn magic(&self) -> u64 {
        self.magic
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}@{}", self.magic, self.addr)
    }
}

/// Resolves `host:port` to one socket address, preferring IPv4.
pub(crate) fn resolve(host_port: &str) -> std::result::Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = host_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host_port:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{host_port:?} resolves to no address"))
}

/// 64 random bits from the OS (`/dev/urandom`), or, failing that, from std's per-process
/// random hash keys mixed with the time and the process id.
pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom")
        && f.read_exact(&mut b).is_ok()
    {
        return u64::from_le_bytes(b);
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

/// FNV-1a, 64-bit: a hash that is the same in every process and every build.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_form_round_trips() {
        let id = UniqueId::new("127.0.0.1:29500".parse().unwrap(), 0x00c0_ffee_1234_5678);
        assert_eq!(id.to_string(), "00c0ffee12345678@127.0.0.1:29500");
        assert_eq!(UniqueId::parse(&id.to_string()).unwrap(), id);
        let v6 = UniqueId::new("[::1]:7".parse().unwrap(), 1);
        assert_eq!(UniqueId::parse(&v6.to_string()).unwrap(), v6);
        assert_eq!(
            UniqueId::parse("ff@localhost:80").unwrap().addr().port(),
            80
        );
    }

    #[test]
    fn malformed_unique_ids_are_rejected_with_the_reason() {
        for bad in [
            "",
            "abc",
            "xyz@127.0.0.1:1",
            "1@nohostport",
            "12345678901234567@h:1",
        ] {
            let e = UniqueId::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid argument: unique id"), "{e}");
        }
    }

    #[test]
    fn random_magics_differ_and_derived_ones_agree() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_ne!(UniqueId::random(a).magic(), UniqueId::random(a).magic());
        assert_eq!(UniqueId::derived(a, "x"), UniqueId::derived(a, "x"));
        assert_ne!(UniqueId::derived(a, "x"), UniqueId::derived(a, "y"));
        // Known FNV-1a test vector.
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
