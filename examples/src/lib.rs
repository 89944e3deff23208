//! Runnable examples of symcomm; each binary in `src/bin` is one example.
//!
//! The kernels live in the `symcomm-example-kernels` crate (`examples/kernels`), which
//! `build.rs` compiles to PTX with `symcomm-build`.

#![warn(missing_docs)]

// ANCHOR: embed
/// The example kernels as PTX, with their entry points.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_example_kernels.rs"));
}
// ANCHOR_END: embed
