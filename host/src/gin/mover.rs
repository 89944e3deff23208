//! Moving bytes between a rank's windows and its sockets, one staging chunk at a time: straight
//! from and to the memory on the emulated backend (windows are host memory of this process),
//! through a pinned staging buffer and a non-blocking stream on GPUs (a blocking stream would
//! wait for the very kernel that waits for this data). Every access of a window happens inside
//! [`Registry::with`], so a window cannot be unmapped under it. Sending reads a chunk into the
//! staging buffer under the lock and writes it to the socket outside it, so no lock is held
//! while a peer is slow to read; receiving into host memory reads from the socket straight
//! into the window under the (read) lock, which is safe because the sender writes a frame's
//! body without holding any lock.

use std::io::{Read, Write};

use super::registry::Registry;
use crate::cuda::driver;
use crate::cuda::memory::PinnedBytes;
use crate::device::Device;
use crate::{Error, Result};

/// Bytes of one staging chunk.
pub(crate) const STAGING_BYTES: usize = 4 << 20;

/// The chunk of a send from host memory (emulated windows).
const HOST_SEND_CHUNK: usize = 256 << 10;

/// Copies of at most this many bytes are waited for by spinning on the stream (their
/// latency is the latency of a small put); larger ones by `cuStreamSynchronize`.
const SPIN_COPY_BYTES: usize = 64 << 10;

/// The data mover of one proxy or receive thread.
pub(crate) struct Mover {
    gpu: Option<cudarc::driver::sys::CUstream>,
    /// Pinned on GPUs; a page-aligned heap allocation under emulation.
    staging: PinnedBytes,
    device: Device,
}

// SAFETY: the stream handle is used by one thread at a time (the mover is moved into the thread
// that uses it, which binds the device's context first: `Mover::bind`); the staging buffer is
// owned.
unsafe impl Send for Mover {}

impl Mover {
    /// A mover with its stream and staging buffer ([`STAGING_BYTES`]), made on the calling
    /// thread (with `device`'s context bound); the thread that uses it calls
    /// [`bind`](Self::bind) first.
    pub(crate) fn new(device: &Device) -> Result<Mover> {
        let staging = PinnedBytes::new(STAGING_BYTES)?;
        if device.is_emulated() {
            return Ok(Mover {
                gpu: None,
                staging,
                device: device.clone(),
            });
        }
        device.bind_to_thread()?;
        let stream = driver::stream_create_non_blocking()?;
        Ok(Mover {
            gpu: Some(stream),
            staging,
            device: device.clone(),
        })
    }

    /// Makes the device's context current on the calling thread (the thread that will use
    /// this mover).
    pub(crate) fn bind(&self) -> Result<()> {
        self.device.bind_to_thread()
    }

    /// The first `n` (≤ [`STAGING_BYTES`]) bytes of the staging buffer.
    fn chunk(&mut self, n: usize) -> &mut [u8] {
        assert!(n <= STAGING_BYTES, "a chunk of {n} bytes");
        // SAFETY: the staging buffer holds STAGING_BYTES bytes (n ≤ that, asserted), owned by
        // this mover, which `&mut self` borrows exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.staging.host_ptr(), n) }
    }

    /// Copies `n` bytes at `src` (a window's memory, live: the caller holds the registry) into
    /// the staging buffer.
    fn load(&mut self, src: u64, n: usize) -> Result<()> {
        match self.gpu {
            None => {
                // SAFETY: `src..src+n` is a live window of this process (caller); the staging
                // buffer is ours and holds n bytes.
                unsafe { std::ptr::copy(src as *const u8, self.chunk(n).as_mut_ptr(), n) };
                Ok(())
            }
            Some(stream) => {
                let dst = self.chunk(n).as_mut_ptr();
                // SAFETY: as above; the copy completes before the synchronisation returns.
                unsafe {
                    driver::memcpy_dtoh_async(dst.cast(), src, n, stream)?;
                    if n <= SPIN_COPY_BYTES {
                        driver::stream_spin(stream)
                    } else {
                        driver::stream_synchronize(stream)
                    }
                }
            }
        }
    }

    /// Copies the first `n` staging bytes to `dst` (a live window) and waits until they have
    /// landed.
    fn store(&mut self, dst: u64, n: usize) -> Result<()> {
        match self.gpu {
            None => {
                let src = self.chunk(n).as_ptr();
                // SAFETY: `dst..dst+n` is a live window of this process (caller).
                unsafe { std::ptr::copy(src, dst as *mut u8, n) };
                Ok(())
            }
            Some(stream) => {
                let src = self.chunk(n).as_ptr();
                // SAFETY: as above.
                unsafe {
                    driver::memcpy_htod_async(dst, src.cast(), n, stream)?;
                    if n <= SPIN_COPY_BYTES {
                        driver::stream_spin(stream)
                    } else {
                        driver::stream_synchronize(stream)
                    }
                }
            }
        }
    }

    /// Writes bytes `off..off + len` of window `win` to `w`. `Err(Ok(why))`: the window or the
    /// range is not valid (any more); `Err(Err(e))`: a copy or the connection failed.
    pub(crate) fn send(
        &mut self,
        reg: &Registry,
        (win, off, len): (u32, u64, usize),
        w: &mut impl Write,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        // Host memory goes out in chunks that stay in the core's cache between the copy into
        // the staging buffer and the socket's copy out of it.
        let step = if self.gpu.is_none() {
            HOST_SEND_CHUNK
        } else {
            STAGING_BYTES
        };
        let mut done = 0;
        while done < len {
            let n = (len - done).min(step);
            reg.with(win, off + done as u64, n, |addr| self.load(addr, n))?;
            w.write_all(self.chunk(n)).map_err(|e| {
                Err(Error::Io {
                    what: "sending GIN data".into(),
                    source: e,
                })
            })?;
            done += n;
        }
        Ok(())
    }

    /// Reads `len` bytes from `r` into window `win` at `off`; they have landed when it returns.
    pub(crate) fn receive(
        &mut self,
        reg: &Registry,
        (win, off, len): (u32, u64, usize),
        r: &mut impl Read,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(STAGING_BYTES);
            if self.gpu.is_none() {
                // Host memory: straight from the socket into the window. The read lock is held
                // while the chunk arrives; the sender writes a frame's body without holding any
                // lock, so the chunk keeps coming.
                reg.with(win, off + done as u64, n, |addr| {
                    // SAFETY: `addr..addr + n` is in a registered window of this process,
                    // mapped while the registry's read lock is held.
                    let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, n) };
                    r.read_exact(dst).map_err(|e| Error::Io {
                        what: "receiving GIN data".into(),
                        source: e,
                    })
                })?;
                done += n;
                continue;
            }
            r.read_exact(self.chunk(n)).map_err(|e| {
                Err(Error::Io {
                    what: "receiving GIN data".into(),
                    source: e,
                })
            })?;
            reg.with(win, off + done as u64, n, |addr| self.store(addr, n))?;
            done += n;
        }
        Ok(())
    }

    /// Writes `bytes` into window `win` at `off`; they have landed when it returns.
    pub(crate) fn write(
        &mut self,
        reg: &Registry,
        (win, off): (u32, u64),
        bytes: &[u8],
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        for (k, part) in bytes.chunks(STAGING_BYTES).enumerate() {
            let n = part.len();
            self.chunk(n).copy_from_slice(part);
            let at = off + (k * STAGING_BYTES) as u64;
            reg.with(win, at, n, |a| self.store(a, n))?;
        }
        Ok(())
    }

    /// Copies `len` bytes of window `src` at `src_off` to window `dst` at `dst_off` (a put to
    /// this rank itself).
    pub(crate) fn copy(
        &mut self,
        reg: &Registry,
        (dst, dst_off): (u32, u64),
        (src, src_off): (u32, u64),
        len: usize,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(STAGING_BYTES);
            reg.with(src, src_off + done as u64, n, |a| self.load(a, n))?;
            reg.with(dst, dst_off + done as u64, n, |a| self.store(a, n))?;
            done += n;
        }
        Ok(())
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        if let Some(stream) = self.gpu {
            // SAFETY: created in `new`, synchronised after every use, destroyed once.
            if let Err(e) = unsafe { driver::stream_destroy(stream) } {
                tracing::warn!("GIN: destroying a proxy stream: {e}");
            }
        }
    }
}
