//! The host backend: a multicast address registered by the emulated host runtime
//! ([`crate::emu::multicast`]) resolves to every LSA peer's copy; any other address is taken
//! to be the only copy (a single rank). The emulated switch (`emu::switch`) does the work.

pub(super) use crate::emu::switch::*;
