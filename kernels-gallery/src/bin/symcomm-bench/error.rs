//! The way a benchmark step fails besides the library's own errors: anything the benchmark
//! itself refuses.

use symcomm::Error;

/// An error of the benchmark itself (bad input, NCCL, a missing graph).
pub fn fail(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}
