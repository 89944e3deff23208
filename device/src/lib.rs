//! `symcomm-device`: what kernels are written against.
//!
//! The Rust counterpart of NCCL's `nccl_device.h`: `no_std`, inline PTX where Rust has no
//! intrinsic. Every function compiles for `nvptx64-nvidia-cuda` (the GPU) and for the host
//! (where the CPU emulator runs kernels; outside an emulated launch the thread-geometry
//! functions report a single thread).
//!
//! Modules, bottom-up:
//! - `geometry` (private): the plain types that the facades and the emulator share (`Dim3`,
//!   the warp and cluster sizes, the shuffle and vote modes), re-exported by [`arch`] and
//!   [`cluster`];
//! - [`arch`]: thread geometry, block/warp synchronisation, warp shuffles and votes, timers,
//!   shared memory, grid dependencies (programmatic dependent launch);
//! - [`mem`]: loads, stores and read-modify-writes with an explicit memory order and scope,
//!   fences, 16-byte vector accesses, non-coherent constant loads;
//! - [`util`]: wrap-safe compares, division by a precomputed reciprocal, flat-VA address
//!   steps ([`add4g`](util::add4g));
//! - [`wait`]: bounded spin-waiting (deadline on `%globaltimer`, abort flag);
//! - [`check`]: the runtime checks (peer and element indices, unfinished sessions): always
//!   on the host, on the GPU with the `bounds-checks` feature;
//! - [`team`], [`comm`], [`window`], [`ptr`], [`view`]: who the peers are and where their
//!   memory is, as raw and typed pointers and typed views;
//! - [`coop`]: groups of threads that act together;
//! - [`cluster`]: thread block clusters (cluster barrier, transaction barriers, stores into a
//!   peer block's shared memory);
//! - [`reduce`]: element types and packed reductions;
//! - [`multimem`], [`ll`]: the data path (NVLink SHARP, LL lines);
//! - [`barrier`]: the LSA barrier (unicast and multimem);
//! - `launch` (host only): kernels as the host sees them (the types `#[kernel]` emits for
//!   typed launches);
//! - `emu` (host only): the CPU emulator that runs kernels over a grid of OS threads, and the
//!   emulated NVLink switch that `multimem` uses on the host.
//!
//! [`arch`], [`mem`], [`cluster`] and [`multimem`] have a GPU and a host implementation: each
//! is a folder whose `mod.rs` holds the API and its contract, `nvptx.rs` the inline PTX and
//! `host.rs` the host side (on its own, or calling the emulator). No modules import each
//! other, directly or through others: each uses only modules listed above it, except that
//! host backends call into `emu`, whose launch machinery uses only `geometry` and whose
//! switch uses `mem` and `reduce`.
//!
//! Everything that maps to an NCCL device-API name carries `#[doc(alias = "nccl…")]`.

#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(
        stdarch_nvptx,
        asm_experimental_arch,
        allow_internal_unstable,
        link_llvm_intrinsics
    ),
    allow(internal_features)
)]
#![warn(missing_docs)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

pub mod arch;
pub mod barrier;
pub mod check;
pub mod cluster;
pub mod comm;
pub mod coop;
#[cfg(not(target_arch = "nvptx64"))]
pub mod emu;
mod geometry;
pub mod gin;
#[cfg(not(target_arch = "nvptx64"))]
pub mod launch;
pub mod ll;
pub mod mem;
pub mod multimem;
pub mod ptr;
pub mod reduce;
pub mod team;
pub mod util;
pub mod view;
pub mod wait;
pub mod window;

pub use symcomm_macros::kernel;

/// The plain-data traits of kernel arguments (`Pod`, `Zeroable`): implement or derive them for
/// a `#[repr(C)]` struct to pass it to a kernel by value.
pub use bytemuck;

// `#[kernel]` names this crate as `::symcomm_device`, also inside it.
extern crate self as symcomm_device;

/// What `#[kernel]` expands to on the host refers to (not a public API).
#[doc(hidden)]
#[cfg(not(target_arch = "nvptx64"))]
pub mod __private {
    pub use crate::emu::registry::{KERNELS, KernelEntry};
    pub use crate::launch::{Kernel, assert_pod};
    pub use core::any::TypeId;
    pub use core::ffi::c_void;
    pub use core::mem::size_of;
    pub use core::ptr::read_unaligned;
    pub use linkme;
}

/// Everything a kernel usually needs, in one import.
pub mod prelude {
    pub use crate::arch::{Dim3, block_dim, block_idx, grid_dim, lane_id, thread_idx};
    pub use crate::barrier::LsaBarrier;
    pub use crate::comm::DevComm;
    pub use crate::coop::{Coop, Cta, Lanes, Thread, Tile, Warp, WarpSpan};
    pub use crate::gin::{Gin, LocalAction, RemoteAction};
    pub use crate::kernel;
    pub use crate::mem::{LoadOrder, Ordering, Scope, StoreOrder};
    pub use crate::ptr::SymPtr;
    pub use crate::team::Team;
    pub use crate::view::{PeerSlice, SymSlice};
    pub use crate::wait::WaitError;
    pub use crate::window::{Window, WindowHandle};
}

/// On the GPU a panic traps the kernel (the launch then fails with an error on the host).
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    arch::trap()
}
