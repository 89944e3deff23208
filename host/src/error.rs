//! The one error type of the host runtime.
//!
//! Variants carry what a user needs to act on: the CUDA call and its code, the rank and step
//! that failed or timed out, both values of a cross-rank mismatch, the missing capability and
//! how to get it. Messages are one line, lower-case, without a trailing period.

use std::time::Duration;

/// Result alias for the host runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the host runtime can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable CUDA driver on this machine.
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    /// A CUDA driver call failed. The code prints as its name (e.g. `CUDA_ERROR_OUT_OF_MEMORY`)
    /// without calling into the driver, so formatting works even when the driver is broken.
    #[error("{call} failed: {code:?}")]
    Cuda {
        /// The driver entry point, e.g. `cuMemCreate`.
        call: &'static str,
        /// The driver's status code.
        code: cudarc::driver::sys::CUresult,
    },
    /// An argument of this rank's call was rejected (before anything was done, or, for a
    /// collective call, with every rank told). Only for what the caller passed or asked for:
    /// a peer's fault is [`Error::PeerFailed`] or [`Error::PeerProtocol`], an OS failure
    /// [`Error::Io`], a broken invariant [`Error::Internal`].
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A blocking step did not finish in time.
    #[error("{}timed out after {after:?} during {step}", rank_prefix(*rank))]
    Timeout {
        /// The rank that gave up (this process's rank), if known.
        rank: Option<usize>,
        /// What was being waited for, naming the peer when one is known.
        step: String,
        /// How long it waited.
        after: Duration,
    },
    /// A value that must agree across ranks does not.
    #[error(
        "{what} differs across ranks: rank {rank_a} has {value_a}, rank {rank_b} has {value_b}"
    )]
    Mismatch {
        /// What was compared.
        what: String,
        /// One rank.
        rank_a: usize,
        /// Its value.
        value_a: String,
        /// Another rank.
        rank_b: usize,
        /// Its value.
        value_b: String,
    },
    /// The machine or driver lacks a capability.
    #[error("unsupported: {what} ({hint})")]
    Unsupported {
        /// The capability.
        what: String,
        /// How to get it, or what to do instead.
        hint: String,
    },
    /// A space allocator (e.g. the flat VA slot of the symmetric windows) has no free block
    /// large enough.
    #[error(
        "no space for {size} bytes (align {align}) within limit {limit}; largest free block {largest_free}"
    )]
    OutOfSpace {
        /// Bytes requested.
        size: u64,
        /// Alignment requested.
        align: u64,
        /// The allocator's exclusive upper bound.
        limit: u64,
        /// The largest free block at the time of the request.
        largest_free: u64,
    },
    /// An allocation would take more device memory than is left. Raised by the emulator
    /// ([`crate::backend`]), whose device has the capacity it reports
    /// ([`crate::backend::EMU_DEVICE_MEMORY_ENV`]), counted over the live allocations of this
    /// process; on GPUs the driver's refusal is [`Error::Cuda`] with `CUDA_ERROR_OUT_OF_MEMORY`.
    #[error(
        "out of device memory on device {device}: {requested} bytes ({}) requested, {} of {} in use ({hint})",
        human_bytes(*requested),
        human_bytes(*in_use),
        human_bytes(*capacity)
    )]
    OutOfMemory {
        /// The device (ordinal) the memory was asked of.
        device: i32,
        /// Bytes requested (after rounding to the allocation granularity).
        requested: u64,
        /// Bytes of live allocations when the request came.
        in_use: u64,
        /// The device's memory.
        capacity: u64,
        /// How to get more, e.g. the setting of the emulated capacity.
        hint: String,
    },
    /// A peer rank failed during a step: it disconnected, stopped answering, refused, or is in
    /// a different collective. Raised on every rank that notices, and on the ranks that those
    /// tell (the reason then says who reported it). What a peer sent that breaks a protocol
    /// is [`Error::PeerProtocol`].
    #[error("{}{step}: rank {peer} {reason}", rank_prefix(*rank))]
    PeerFailed {
        /// The rank that reports the failure (this process's rank), if known.
        rank: Option<usize>,
        /// The step that failed, e.g. `barrier #17`.
        step: String,
        /// The rank that failed.
        peer: usize,
        /// What happened to it, e.g. `disconnected`.
        reason: String,
    },
    /// A connection broke the bootstrap protocol: wrong magic or version, a malformed or
    /// oversized frame, an inconsistent rank; or the root rejected this rank.
    #[error("{}{step}: {reason}", rank_prefix(*rank))]
    Protocol {
        /// The rank that noticed (this process's rank), if known.
        rank: Option<usize>,
        /// The step, e.g. `rendezvous`.
        step: String,
        /// What was wrong.
        reason: String,
    },
    /// A peer rank sent something that breaks a runtime protocol: a malformed registration
    /// record or offer, an fd-exchange reply that is not one. The peer runs another build of
    /// symcomm, or is not a symcomm rank.
    #[error("{}{step}: rank {peer} sent {what}", rank_prefix(*rank))]
    PeerProtocol {
        /// The rank that noticed (this process's rank), if known.
        rank: Option<usize>,
        /// The step, e.g. `window registration`.
        step: String,
        /// The rank that sent it.
        peer: usize,
        /// What was wrong with what it sent.
        what: String,
    },
    /// An invariant of the runtime does not hold: a bug in symcomm, or state left inconsistent
    /// by a panic on another thread. Not something the caller can fix by changing arguments.
    #[error("internal error: {0}")]
    Internal(String),
    /// A thread the runtime started panicked: a rank's thread running the caller's function
    /// (`symcomm::ranks`), or a helper thread of a runtime step. The panic message went to
    /// standard error.
    #[error("{}{what} panicked", rank_prefix(*rank))]
    Panicked {
        /// The rank whose thread it was, if any.
        rank: Option<usize>,
        /// Which thread, e.g. `the rank's thread`.
        what: String,
    },
    /// A launch environment variable is missing or malformed.
    #[error("environment variable {var}: {reason}")]
    Env {
        /// The variable, e.g. `WORLD_SIZE`.
        var: String,
        /// What is wrong with it and how to fix it.
        reason: String,
    },
    /// A kernel launched on the CPU emulator failed: it panicked or trapped (the detail names
    /// the block and thread), misused a barrier or warp collective, deadlocked, outlived the
    /// emulator's watchdog, or the launch shape was invalid or beyond the host's thread or
    /// memory-map limits (refused before it started; the detail says what to shrink).
    #[error("emulated kernel `{kernel}` failed: {detail}")]
    Emulation {
        /// The kernel's name.
        kernel: String,
        /// What the emulator reported.
        detail: String,
    },
    /// An operating-system I/O step failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The GIN of a device communicator failed on this rank: its proxy refused a descriptor,
    /// a peer refused one of this rank's operations, or a GIN connection was lost. Every later
    /// device wait of the communicator returns `Aborted`.
    #[error("{}GIN failed: {reason}", rank_prefix(*rank))]
    Gin {
        /// The rank that reports it (this process's rank).
        rank: Option<usize>,
        /// What happened, naming the peer where one is involved.
        reason: String,
    },
}

fn rank_prefix(rank: Option<usize>) -> String {
    rank.map(|r| format!("rank {r}: ")).unwrap_or_default()
}

/// `n` bytes in the largest binary unit that is at most `n`: `0 B`, `512 B`, `2 MiB`,
/// `1.5 GiB` (one decimal unless exact).
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let exp = if n == 0 {
        0
    } else {
        (n.ilog2() / 10).min(UNITS.len() as u32 - 1)
    };
    let unit = 1u64 << (10 * exp);
    if n.is_multiple_of(unit) {
        format!("{} {}", n / unit, UNITS[exp as usize])
    } else {
        format!("{:.1} {}", n as f64 / unit as f64, UNITS[exp as usize])
    }
}

/// `text` cut to at most `max` characters, ending in `…` when cut (for a peer's or a nested
/// error's text inside a one-line message).
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max.saturating_sub(1)) {
        Some((end, _)) if text.chars().count() > max => format!("{}…", &text[..end]),
        _ => text.to_string(),
    }
}

/// The first `keep` items joined by `sep`, each clipped to `max_item` characters, then
/// `and N more` for the items left out: a list of any length as a bounded part of a message.
pub(crate) fn join_bounded<T: std::fmt::Display>(
    items: &[T],
    keep: usize,
    max_item: usize,
    sep: &str,
) -> String {
    let mut parts: Vec<String> = items
        .iter()
        .take(keep)
        .map(|i| clip(&i.to_string(), max_item))
        .collect();
    if items.len() > keep {
        parts.push(format!("and {} more", items.len() - keep));
    }
    parts.join(sep)
}

impl Error {
    /// The error's own message, without the `invalid argument: ` prefix of
    /// [`Error::InvalidArgument`] (for wrapping a checked value's complaint into another
    /// variant's message).
    pub(crate) fn detail(self) -> String {
        match self {
            Error::InvalidArgument(m) => m,
            e => e.to_string(),
        }
    }

    /// Names `me` as the rank reporting the error, where the variant has such a field and it
    /// is not set yet.
    pub(crate) fn reported_by(mut self, me: usize) -> Error {
        match &mut self {
            Error::Timeout { rank, .. }
            | Error::PeerFailed { rank, .. }
            | Error::Protocol { rank, .. }
            | Error::PeerProtocol { rank, .. }
            | Error::Panicked { rank, .. } => {
                rank.get_or_insert(me);
            }
            _ => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_the_facts() {
        let e = Error::Timeout {
            rank: Some(3),
            step: "barrier 7 waiting for rank 5".into(),
            after: Duration::from_secs(2),
        };
        assert_eq!(
            e.to_string(),
            "rank 3: timed out after 2s during barrier 7 waiting for rank 5"
        );
        let e = Error::Mismatch {
            what: "window size".into(),
            rank_a: 0,
            value_a: "4096".into(),
            rank_b: 2,
            value_b: "8192".into(),
        };
        assert_eq!(
            e.to_string(),
            "window size differs across ranks: rank 0 has 4096, rank 2 has 8192"
        );
        assert!(!e.to_string().contains('\n'));
        let e = Error::PeerFailed {
            rank: Some(2),
            step: "barrier #17".into(),
            peer: 5,
            reason: "disconnected".into(),
        };
        assert_eq!(e.to_string(), "rank 2: barrier #17: rank 5 disconnected");
        let e = Error::PeerProtocol {
            rank: Some(0),
            step: "window registration".into(),
            peer: 6,
            what: "a malformed registration record: 3 bytes".into(),
        };
        assert_eq!(
            e.to_string(),
            "rank 0: window registration: rank 6 sent a malformed registration record: 3 bytes"
        );
        let e = Error::Internal("symmetric state missing".into());
        assert_eq!(e.to_string(), "internal error: symmetric state missing");
        let e = Error::Panicked {
            rank: None,
            what: "the rank's thread".into(),
        };
        assert_eq!(
            e.reported_by(3).to_string(),
            "rank 3: the rank's thread panicked"
        );
        let e = Error::OutOfMemory {
            device: 1,
            requested: 3 << 29,
            in_use: 0,
            capacity: 1 << 30,
            hint: "emulated".into(),
        };
        assert_eq!(
            e.to_string(),
            "out of device memory on device 1: 1610612736 bytes (1.5 GiB) requested, 0 B of \
             1 GiB in use (emulated)"
        );
        assert_eq!(
            Error::InvalidArgument("size 0".into()).detail(),
            "size 0",
            "no nested prefix"
        );
    }

    #[test]
    fn sizes_are_written_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1 << 40), "1 TiB");
        assert_eq!(human_bytes((2 << 20) + 4096), "2.0 MiB");
    }

    #[test]
    fn long_lists_and_texts_are_cut_saying_so() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("ééé", 2), "é…");
        let items: Vec<usize> = (0..100).collect();
        assert_eq!(join_bounded(&items, 3, 10, ", "), "0, 1, 2, and 97 more");
        assert_eq!(join_bounded(&items[..2], 3, 10, ", "), "0, 1");
        assert_eq!(join_bounded(&["long text"], 1, 5, "; "), "long…");
    }
}
