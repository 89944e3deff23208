//! An owned CUDA stream that does not synchronise with the legacy default stream.
//!
//! Communication kernels of two ranks must be able to run at the same time. On the legacy
//! default stream (stream 0, one per context) they cannot when the ranks share a context
//! (ranks as threads on one GPU), and work on a blocking stream also waits for stream 0. A
//! [`Stream`] is created `CU_STREAM_NON_BLOCKING`, and [`Stream::synchronize`] waits for this
//! stream only, not for every kernel of the context as `cuCtxSynchronize` does.
//!
//! Under the emulated backend launches are synchronous and ignore their stream: a [`Stream`]
//! is then a null handle and [`Stream::synchronize`] returns at once.

use std::ptr;

use cudarc::driver::sys;

use crate::Result;
use crate::backend::{Backend, backend};
use crate::cuda::driver;

/// A non-blocking CUDA stream of the current context, destroyed on drop.
#[derive(Debug)]
pub struct Stream {
    /// `None` under the emulated backend.
    owned: Option<OwnedStream>,
}

impl Stream {
    /// Creates a stream in the current context (`CU_STREAM_NON_BLOCKING`); a null handle
    /// under the emulated backend.
    ///
    /// # Errors
    /// [`crate::Error::Cuda`] when the driver refuses (no current context, say).
    pub fn new() -> Result<Stream> {
        let owned = match backend()? {
            Backend::Emulated => None,
            Backend::Gpu => Some(OwnedStream {
                raw: driver::stream_create_non_blocking()?,
            }),
        };
        Ok(Stream { owned })
    }

    /// The raw handle, for launches and driver calls. It stays valid while `self` lives.
    pub fn raw(&self) -> sys::CUstream {
        self.owned.as_ref().map_or(ptr::null_mut(), |s| s.raw)
    }

    /// Waits until everything queued on this stream has finished (`cuStreamSynchronize`);
    /// other streams of the context are not waited for.
    ///
    /// # Errors
    /// [`crate::Error::Cuda`] with the error of a failed kernel or copy on the stream.
    pub fn synchronize(&self) -> Result<()> {
        match &self.owned {
            // SAFETY: a stream this value created and has not destroyed.
            Some(s) => unsafe { driver::stream_synchronize(s.raw) },
            None => Ok(()),
        }
    }
}

/// A stream handle from `cuStreamCreate`, destroyed on drop.
#[derive(Debug)]
struct OwnedStream {
    raw: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread of the process (with its context
// current there, which every call here requires anyway); it has no thread-local state.
unsafe impl Send for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: created by `Stream::new`, destroyed once. Work still queued completes first
        // (the driver defers the release); an error here has no one to report to.
        let _ = unsafe { driver::stream_destroy(self.raw) };
    }
}
