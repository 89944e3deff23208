//! Where a rank runs: its node (host name + boot id, or `SYMCOMM_NODE_ID`), device and
//! process, in the form the communicator all-gathers at creation.

use crate::bootstrap::fnv1a64;

/// Longest node name exchanged (longer ones are cut; the node id hashes the full name).
const MAX_NODE_NAME: usize = 255;

/// One rank's place, as every rank learns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RankInfo {
    pub(super) node: u64,
    pub(super) name: String,
    pub(super) device: usize,
    /// The rank's operating-system process.
    pub(super) pid: u32,
}

/// This machine's node identity: hash of host name and boot id, and the host name.
pub(super) fn detect_node() -> (u64, String) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let host = read("/proc/sys/kernel/hostname")
        .or_else(|| read("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    let boot = read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    (fnv1a64(format!("{host}\0{boot}").as_bytes()), host)
}

pub(super) fn encode_info(i: &RankInfo) -> Vec<u8> {
    let mut end = i.name.len().min(MAX_NODE_NAME);
    while !i.name.is_char_boundary(end) {
        end -= 1;
    }
    let name = &i.name.as_bytes()[..end];
    let mut b = Vec::with_capacity(21 + name.len());
    b.extend_from_slice(&i.node.to_le_bytes());
    b.extend_from_slice(&(i.device as u64).to_le_bytes());
    b.extend_from_slice(&i.pid.to_le_bytes());
    b.push(name.len() as u8);
    b.extend_from_slice(name);
    b
}

pub(super) fn decode_info(b: &[u8]) -> Option<RankInfo> {
    let node = u64::from_le_bytes(b.get(0..8)?.try_into().ok()?);
    let device = usize::try_from(u64::from_le_bytes(b.get(8..16)?.try_into().ok()?)).ok()?;
    let pid = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
    let len = usize::from(*b.get(20)?);
    let name = b.get(21..21 + len)?;
    if b.len() != 21 + len {
        return None;
    }
    Some(RankInfo {
        node,
        name: crate::bootstrap::wire::reason_text(name),
        device,
        pid,
    })
}

/// The first two ranks (in rank order) that run in different processes on the same device
/// of the same node, with that device.
pub(super) fn shared_device_across_processes(ranks: &[RankInfo]) -> Option<(usize, usize, usize)> {
    for (a, x) in ranks.iter().enumerate() {
        for (b, y) in ranks.iter().enumerate().skip(a + 1) {
            if x.node == y.node && x.device == y.device && x.pid != y.pid {
                return Some((a, b, x.device));
            }
        }
    }
    None
}
