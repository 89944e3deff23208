//! The 128-byte descriptor a kernel posts into a GIN ring, and the plain-data [`GinHandle`] that
//! tells kernels where the rings, signals and counters are. Both are read by the host proxy
//! too, so their layouts are fixed (asserted at compile time) and documented word by word.
//!
//! A ring belongs to one (context, peer slot) pair and holds `queue_depth` descriptors. A
//! descriptor is sixteen little-endian `u64` words:
//!
//! | word | contents |
//! |---|---|
//! | 0 | bits 0–7 [`Op`], 8–15 [`SignalOp`], bit 16 strong, bit 17 counter on completion, bits 32–63 signal index |
//! | 1 | bits 0–31 counter index, bits 32–63 destination window id |
//! | 2 | bits 0–31 source window id, bits 32–63 inline value size in bytes (`put_value`) |
//! | 3 | destination offset in bytes |
//! | 4 | source offset in bytes |
//! | 5 | bytes to put |
//! | 6 | inline value (`put_value`, little-endian, low `size` bytes) |
//! | 7 | signal operand (add / set) |
//! | 8–14 | zero (reserved) |
//! | 15 | stamp: ring index of the entry + 1 |
//!
//! The stamp is written last, after a system-scope fence: the proxy takes an entry only when
//! its stamp equals the index it expects next, so a half-written entry is never read, and an
//! entry of the previous lap (stamp `index + 1 − depth`) never passes for a new one.

/// What a descriptor asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Copy `bytes` from the source window to the peer's destination window.
    Put = 1,
    /// Write the inline value (1–8 bytes) to the peer's destination window.
    PutValue = 2,
    /// No data: only the remote signal action.
    Signal = 3,
}

impl Op {
    /// The op of a descriptor's low byte, `None` for anything else.
    pub const fn from_u8(v: u8) -> Option<Op> {
        match v {
            1 => Some(Op::Put),
            2 => Some(Op::PutValue),
            3 => Some(Op::Signal),
            _ => None,
        }
    }
}

/// What happens to the peer's signal when the operation is applied there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SignalOp {
    /// Nothing.
    None = 0,
    /// Add 1.
    Inc = 1,
    /// Add the operand.
    Add = 2,
    /// Store the operand.
    Set = 3,
}

impl SignalOp {
    /// The signal op of a descriptor's second byte, `None` for anything else.
    pub const fn from_u8(v: u8) -> Option<SignalOp> {
        match v {
            0 => Some(SignalOp::None),
            1 => Some(SignalOp::Inc),
            2 => Some(SignalOp::Add),
            3 => Some(SignalOp::Set),
            _ => None,
        }
    }
}

/// Word 0 bit: the signal is strong (applied only after every earlier operation of the same
/// context to the same peer has landed there).
pub const FLAG_STRONG: u64 = 1 << 16;
/// Word 0 bit: increment the counter of word 1 once the source may be reused.
pub const FLAG_COUNTER: u64 = 1 << 17;

/// Bytes of one descriptor.
pub const DESCRIPTOR_BYTES: usize = 128;

/// One ring entry (see the module docs for the meaning of each word).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Descriptor {
    /// The sixteen words.
    pub words: [u64; 16],
}

const _: () = assert!(core::mem::size_of::<Descriptor>() == DESCRIPTOR_BYTES);

impl Descriptor {
    /// The stamp word's index.
    pub const STAMP: usize = 15;

    /// A descriptor with every field given (stamp 0).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub const fn new(
        op: Op,
        signal_op: SignalOp,
        strong: bool,
        signal: u32,
        signal_value: u64,
        counter: Option<u32>,
        dst_win: u32,
        dst_off: u64,
        src_win: u32,
        src_off: u64,
        bytes: u64,
        value: u64,
        value_size: u32,
    ) -> Descriptor {
        let mut w0 = op as u64 | (signal_op as u64) << 8 | (signal as u64) << 32;
        if strong {
            w0 |= FLAG_STRONG;
        }
        let counter_id = match counter {
            Some(c) => {
                w0 |= FLAG_COUNTER;
                c
            }
            None => 0,
        };
        let mut words = [0u64; 16];
        words[0] = w0;
        words[1] = counter_id as u64 | (dst_win as u64) << 32;
        words[2] = src_win as u64 | (value_size as u64) << 32;
        words[3] = dst_off;
        words[4] = src_off;
        words[5] = bytes;
        words[6] = value;
        words[7] = signal_value;
        Descriptor { words }
    }

    /// The operation, `None` for an unknown code.
    pub const fn op(&self) -> Option<Op> {
        Op::from_u8(self.words[0] as u8)
    }
    /// The signal action, `None` for an unknown code.
    pub const fn signal_op(&self) -> Option<SignalOp> {
        SignalOp::from_u8((self.words[0] >> 8) as u8)
    }
    /// Whether the signal is strong.
    pub const fn strong(&self) -> bool {
        self.words[0] & FLAG_STRONG != 0
    }
    /// The signal index.
    pub const fn signal(&self) -> u32 {
        (self.words[0] >> 32) as u32
    }
    /// The counter to increment on completion, if any.
    pub const fn counter(&self) -> Option<u32> {
        if self.words[0] & FLAG_COUNTER != 0 {
            Some(self.words[1] as u32)
        } else {
            None
        }
    }
    /// The destination window id.
    pub const fn dst_win(&self) -> u32 {
        (self.words[1] >> 32) as u32
    }
    /// The source window id.
    pub const fn src_win(&self) -> u32 {
        self.words[2] as u32
    }
    /// The inline value's size in bytes.
    pub const fn value_size(&self) -> u32 {
        (self.words[2] >> 32) as u32
    }
    /// The destination offset.
    pub const fn dst_off(&self) -> u64 {
        self.words[3]
    }
    /// The source offset.
    pub const fn src_off(&self) -> u64 {
        self.words[4]
    }
    /// The byte count of a put.
    pub const fn bytes(&self) -> u64 {
        self.words[5]
    }
    /// The inline value.
    pub const fn value(&self) -> u64 {
        self.words[6]
    }
    /// The signal operand.
    pub const fn signal_value(&self) -> u64 {
        self.words[7]
    }
}

/// How the GIN peers of a rank are connected (NCCL's `ginConnectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GinConnection {
    /// No GIN.
    None = 0,
    /// Every rank to every rank (rings per world peer).
    Full = 1,
    /// Every rank to the ranks of its rail team (the same LSA index on every node; rings per
    /// rail peer).
    Rail = 2,
}

/// Where a device communicator's GIN state is (zero when it has none). Part of
/// [`DevComm`](crate::comm::DevComm); written by the host runtime.
///
/// All arrays are indexed by `ring = context × peer_slots + slot`, where `slot` is the world
/// peer (full connectivity) or the rail-team rank (rail connectivity).
#[doc(alias = "ncclGinHandle")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GinHandle {
    /// Device address of the rings (device-mapped host memory): `rings × queue_depth`
    /// [`Descriptor`]s.
    pub rings: u64,
    /// Device address of the producer indices (device memory), one `u64` per ring: the next
    /// ring index to hand out; followed by one `u64` per ring, the cached credit limit (the
    /// consumer index + depth last read, 0 at first).
    pub producers: u64,
    /// Device address of the consumer indices (device-mapped host memory, written by the
    /// proxy), one `u64` per ring: entries below it are done with (their source was read).
    pub consumers: u64,
    /// Device address of the signals (device-mapped host memory), `n_signals` `u64`.
    pub signals: u64,
    /// Device address of the counters (device-mapped host memory), `n_counters` `u64`.
    pub counters: u64,
    /// Number of contexts (independent queues).
    pub n_contexts: u32,
    /// Entries per ring (a power of two).
    pub queue_depth: u32,
    /// Number of signals.
    pub n_signals: u32,
    /// Number of counters.
    pub n_counters: u32,
    /// Peer slots per context.
    pub peer_slots: u32,
    /// A [`GinConnection`] as its `u32`.
    pub connection: u32,
    /// Device address of the GIN barriers' persisted epochs (device memory, one `u64` per
    /// barrier: the world barriers, then the rail barriers).
    pub barrier_epochs: u64,
    /// Index of the first barrier signal: world barrier `b`'s slot for team member `p` is
    /// signal `barrier_signals + b × world size + p`; rail barrier `b`'s follow all the world
    /// barriers' at `… + world_barriers × world size + b × rail size + p`. Barrier signals lie
    /// past the `n_signals` a kernel may name.
    pub barrier_signals: u32,
    /// Number of GIN barriers over the world team.
    pub world_barriers: u32,
    /// Number of GIN barriers over the rail team.
    pub rail_barriers: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<GinHandle>() == 88);
    assert!(offset_of!(GinHandle, barrier_epochs) == 64);
    assert!(offset_of!(GinHandle, reserved) == 84);
    assert!(offset_of!(GinHandle, producers) == 8);
    assert!(offset_of!(GinHandle, counters) == 32);
    assert!(offset_of!(GinHandle, n_contexts) == 40);
    assert!(offset_of!(GinHandle, connection) == 60);
};

// SAFETY: `repr(C)` integers whose offsets (asserted above) leave no padding; every bit
// pattern is a value.
unsafe impl bytemuck::Zeroable for GinHandle {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for GinHandle {}
// SAFETY: sixteen `u64`, no padding.
unsafe impl bytemuck::Zeroable for Descriptor {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for Descriptor {}

impl GinHandle {
    /// True when the communicator has GIN.
    #[inline(always)]
    pub const fn is_present(&self) -> bool {
        self.n_contexts != 0
    }
}
