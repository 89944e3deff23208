//! The two ways a benchmark step fails besides the library's own errors: a CUDA driver call
//! (cudarc's error, with the call's name) and anything else the benchmark refuses.

use symcomm::Error;

/// Maps cudarc's error of driver call `call` to [`Error::Cuda`].
pub fn cu(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda { call, code: e.0 }
}

/// An error of the benchmark itself (bad input, NCCL, a missing graph).
pub fn fail(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}
