//! `symcomm-build`: turn a Rust kernels crate into linked, verified PTX from a `build.rs`.
//!
//! A host crate that launches kernels calls [`Builder`] from its build script:
//!
//! ```no_run
//! // build.rs: `kernels/` is the kernels crate, next to this crate's Cargo.toml.
//! symcomm_build::Builder::new("kernels").build_or_exit();
//! ```
//!
//! and embeds the result:
//!
//! ```ignore
//! pub mod kernels {
//!     include!(concat!(env!("OUT_DIR"), "/my_kernels.rs")); // PTX, ENTRY_POINTS, ARCH
//! }
//! ```
//!
//! What happens:
//! 1. A nested `cargo build --target nvptx64-nvidia-cuda -Zbuild-std=core --release` of the
//!    kernels crate runs with the nightly this crate pins ([`PINNED_TOOLCHAIN`], or
//!    `$SYMCOMM_TOOLCHAIN`) whatever toolchain runs the outer build (stable works), in its own
//!    target directory (`<target>/ptx/<arch>`), so it never contends with the outer build's
//!    lock and later builds are incremental. It runs offline when the outer build does
//!    (`--offline`, `--frozen`, `CARGO_NET_OFFLINE`), and resolves from a copy of the outer
//!    build's `Cargo.lock`, so it picks the versions the outer build already has.
//! 2. rustc links through our own linker ([`linker`]): the pinned toolchain's `llvm-link` →
//!    `opt` → `llc`. Nothing is downloaded; the tools are the `llvm-tools` component.
//! 3. The PTX is copied to `OUT_DIR/<crate>.ptx`, its entry points are read out, and
//!    `OUT_DIR/<crate>.rs` is generated with `PTX`, `ENTRY_POINTS` and `ARCH` constants. It
//!    also names the kernels crate (`extern crate <crate> as _;`), so the host build of the
//!    kernels, which the CPU emulator runs, is linked into every binary that embeds the PTX
//!    (see [`Builder::host_crate`]).
//! 4. `cargo:rerun-if-changed` lines name every source file the kernels crate was built from,
//!    so touching a kernel (or the device crate) rebuilds the PTX.
//!
//! Compiler errors in the kernels crate are printed as rustc renders them, followed by one
//! line naming the crate and target.
//!
//! Layout: [`Builder`] and the generated module in `builder.rs`, the pinned toolchain (probing
//! its sysroot, compiling the [`linker`]) in `toolchain.rs`, the nested cargo (its environment,
//! its JSON report, dep-info) in `nested_cargo.rs`, [`Error`] in `error.rs`, file helpers in
//! `files.rs`; PTX facts in [`ptx`], verification with [`ptxas`].

#![warn(missing_docs)]

mod builder;
mod error;
mod files;
pub mod linker;
mod nested_cargo;
pub mod ptx;
pub mod ptxas;
mod toolchain;

pub use builder::{Builder, Profile, Ptx};
pub use error::Error;

/// The GPU target triple kernels are compiled for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";
/// The default GPU architecture (Hopper: H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90";
/// The default PTX ISA version: 8.3 (multimem needs at least 8.1; driver 580 JITs up to 9.0).
pub const DEFAULT_PTX_ISA: (u32, u32) = (8, 3);
/// Environment variable that overrides the architecture of every kernels build (e.g. `sm_80`).
pub const ARCH_ENV: &str = "SYMCOMM_ARCH";
/// Environment variable that overrides the toolchain used for kernels.
pub const TOOLCHAIN_ENV: &str = "SYMCOMM_TOOLCHAIN";
/// The toolchain kernels are compiled with unless [`TOOLCHAIN_ENV`] names another: the
/// nightly the device crate is written for (inline PTX, `abi_ptx`, `-Zbuild-std=core`). It is
/// also the `channel` of symcomm's own `rust-toolchain.toml` (a test keeps the two equal); a
/// crate using symcomm needs no `rust-toolchain.toml` of its own.
pub const PINNED_TOOLCHAIN: &str = "nightly-2026-05-20";
/// The rustup components the kernels build needs from [`PINNED_TOOLCHAIN`].
pub const REQUIRED_COMPONENTS: &[&str] = &["rust-src", "llvm-tools"];

#[cfg(test)]
mod tests;
