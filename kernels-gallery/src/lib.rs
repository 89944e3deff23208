//! `symcomm-gallery`: collectives written only against the public device API (all-reduce,
//! all-gather, reduce-scatter, broadcast, all-to-all, fused all-reduce + RMSNorm) and the
//! `symcomm-bench` benchmark. The kernels live in `kernels-gallery/kernels`.
//!
//! The collectives arrive once symmetric memory and device communicators exist; this crate
//! currently only reserves its place in the workspace.

#![warn(missing_docs)]
