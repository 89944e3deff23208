//! `symcomm-gallery`: collectives written only against the public device API — all-reduce
//! (one-shot LL and two-shot), reduce-scatter, all-gather, broadcast, all-to-all and a fused
//! all-reduce + residual add + RMSNorm — with a host API that picks the algorithm by size,
//! and the `symcomm-bench` benchmark (symcomm and NCCL side by side).
//!
//! ```ignore
//! let gallery = Collectives::from_env(&comm)?;               // collective
//! let win = comm.register_window(&mem)?;                     // collective
//! gallery.all_reduce(Buf::whole(&win), Buf::whole(&win), n, DataType::Bf16, RedOp::Sum, stream)?;
//! ```
//!
//! The kernels live in `kernels-gallery/kernels` (crate `symcomm-gallery-kernels`).

#![warn(missing_docs)]

pub mod buffer;
pub mod check;
pub mod collectives;
pub mod ranks;
pub mod rmsnorm;
pub mod tuning;
pub mod types;

pub use buffer::Buf;
pub use collectives::Collectives;
pub use rmsnorm::NormBuffers;
pub use tuning::{Algo, Tuning};
pub use types::{DataType, RedOp};

/// The gallery kernels as PTX, with their entry points.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_gallery_kernels.rs"));
}
