//! Symmetric memory: the pure building blocks of window registration.
//!
//! - [`layout`]: the flat VA (`lsa_size × stride` slots), stride derivation, per-peer
//!   addresses, window-offset checks, and the cross-rank validation of a registration;
//! - [`record`]: the per-rank record that registration all-gathers, and its wire form.
//!
//! Offsets inside a slot come from [`crate::space::Space`]; file descriptors travel through
//! [`crate::ipc`]; the CUDA side (export, import, map) is [`crate::cuda::vmm`]. The collective
//! `register_window` that ties them to the bootstrap lives with the communicator.

pub mod layout;
pub mod record;

pub use layout::{
    AgreedRegistration, FlatLayout, STRIDE_ENV, STRIDE_UNIT, WINDOW_ALIGN, parse_size, team_stride,
    team_stride_from_env, validate_registration, window_offset_in_alloc,
};
pub use record::{HandleKind, RegistrationRecord};
