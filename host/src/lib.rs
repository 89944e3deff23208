//! `symcomm`: the host runtime.
//!
//! Layered like cudarc: raw driver calls (`cudarc::driver::sys`) → checked calls that return
//! [`Error`] naming the call → RAII types whose `Drop` undoes exactly what their constructor
//! did. See the architecture in the book ("Inside the host runtime").

#![warn(missing_docs)]

pub mod bootstrap;
pub mod comm;
pub mod cuda;
pub mod error;
#[cfg(target_os = "linux")]
pub mod ipc;
pub mod launch;
pub mod launcher;
mod logging;
pub mod space;
pub mod symmem;

pub use bootstrap::Bootstrap;
pub use comm::{CommOptions, Communicator, Team};
pub use error::{Error, Result};
pub use logging::init_logging;
