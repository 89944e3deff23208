//! The plain types and constants of thread geometry used both by the facades (`arch`,
//! `cluster`) and by the CPU emulator (`emu`). A leaf: it uses nothing else of the crate, so
//! the emulator, which the facades' host backends call, never imports a facade.

/// A three-component index or extent (`threadIdx`, `blockDim`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dim3 {
    /// x component.
    pub x: u32,
    /// y component.
    pub y: u32,
    /// z component.
    pub z: u32,
}

/// Threads per warp.
pub const WARP_SIZE: u32 = 32;

/// A lane mask naming every lane of a warp.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// Most blocks in a cluster that every sm_90 GPU can launch (the portable limit).
pub const MAX_PORTABLE_SIZE: u32 = 8;

/// Which lane a shuffle reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Idx,
    Up,
    Down,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
}
