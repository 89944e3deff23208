//! `symcomm-gallery`: collectives written only against the public device API.

#![warn(missing_docs)]

/// The gallery kernels as PTX, with their entry points.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_gallery_kernels.rs"));
}
