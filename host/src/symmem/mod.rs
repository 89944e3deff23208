//! Symmetric memory: the building blocks of window registration (the pure ones, [`layout`]
//! and [`record`]) and the per-communicator state they fill.
//!
//! - [`layout`]: the flat VA (`lsa_size × stride` slots), stride derivation, per-peer
//!   addresses, window-offset checks, and the cross-rank validation of a registration;
//! - [`record`]: the per-rank record that registration all-gathers, and its wire form;
//! - `state`: the per-communicator symmetric state that the first registration creates (flat
//!   VA, slot space, fd server, registered windows, multicast range);
//! - `multicast`: the collective set-up of the LSA team's multicast range.
//!
//! Offsets inside a slot come from [`crate::space::Space`]; file descriptors travel through
//! [`crate::ipc`]; the CUDA side (export, import, map) is [`crate::cuda::vmm`]. The collective
//! `register_window` that ties them to the bootstrap is in [`crate::window`]; with these
//! blocks one registration is, on every rank of the LSA team:
//!
//! 1. [`crate::cuda::vmm::find_allocation`] on the user pointer, then
//!    [`window_offset_in_alloc`];
//! 2. all-gather [`RegistrationRecord::encode`]d records, [`RegistrationRecord::decode_all`],
//!    [`validate_registration`] (every rank gets the same error on disagreement);
//! 3. prepare: the state on first use, `Space::alloc` with
//!    [`AgreedRegistration::space_request`] → the slot offset (the same on every rank), export
//!    the allocation ([`crate::cuda::PhysicalMem::export_fd`]) and
//!    [publish](crate::ipc::FdServer::publish) it under the registration's sequence number;
//!    then a vote of every rank (a failure anywhere undoes this everywhere);
//! 4. [fetch](crate::ipc::FdServer::fetch_watching) every peer's fd (watching that the peer
//!    lives), import, map at [`FlatLayout::peer_addr`]`(flat_base, peer, slot_offset)`, set
//!    access, write the descriptor, bind the multicast range if any;
//! 5. a second vote (everyone has imported, or everyone undoes), then
//!    [withdraw](crate::ipc::FdServer::withdraw) the key.
//!
//! Deregistration frees the same `(offset, size)` from the space, in the same order on all
//! ranks.

pub mod layout;
mod multicast;
pub mod record;
pub(crate) mod state;
