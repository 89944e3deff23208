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

/// Bytes of one staging buffer: a chunk of data ([`CHUNK_BYTES`]) and, last, the word that
/// stream memory operations report their completion in.
pub(crate) const STAGING_BYTES: usize = 4 << 20;

/// Bytes of one staging chunk.
const CHUNK_BYTES: usize = STAGING_BYTES - 64;

/// Byte offset of the completion word in the staging buffer.
const DONE_AT: usize = CHUNK_BYTES;

/// Landings of at most this many bytes (4-byte aligned, in GPU memory) are written by stream
/// memory operations, not copied: the GPU's front end carries them out, then writes a word in
/// mapped host memory that says so. A small copy by a copy engine, waited for with
/// `cuStreamQuery`, takes a few microseconds longer: the latency of a small put.
pub(crate) const VALUE_WRITE_BYTES: usize = 64;

/// Copies of at most this many bytes are waited for by spinning on the stream (their
/// latency is the latency of a small put); larger ones by `cuStreamSynchronize`.
const SPIN_COPY_BYTES: usize = 64 << 10;

/// Test-only: the most writes of one batch of stream memory operations (unset: 32; each
/// aligned 8 or 4 bytes of data, each signal update and the landing word take one). A
/// landing whose batch would be longer lands by copy, with its signals applied by the
/// receive thread once the batches before it have run, as when the driver refuses stream
/// memory operations. So `1` sends every small landing that way; `2` queues a put of no
/// bytes with one signal and copies what follows it; `3` also queues an 8-byte put with
/// one signal at an 8-byte aligned address. Never set it in production.
pub const TEST_VALUE_WRITES_ENV: &str = "SYMCOMM_GIN_TEST_VALUE_WRITES";

/// The data mover of one proxy or receive thread.
pub(crate) struct Mover {
    gpu: Option<cudarc::driver::sys::CUstream>,
    /// Pinned on GPUs; a page-aligned heap allocation under emulation.
    staging: PinnedBytes,
    device: Device,
    /// Whether small landings may use stream memory operations (until the driver refuses
    /// them once).
    value_writes: bool,
    /// The most writes of one batch ([`driver::MAX_VALUE_WRITES`], or fewer for tests:
    /// [`TEST_VALUE_WRITES_ENV`]); a larger batch lands by copy.
    max_writes: usize,
    /// The last value written to the completion word.
    ticket: u64,
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
                value_writes: false,
                max_writes: 0,
                ticket: 0,
            });
        }
        device.bind_to_thread()?;
        let stream = driver::stream_create_non_blocking()?;
        Ok(Mover {
            gpu: Some(stream),
            staging,
            device: device.clone(),
            value_writes: true,
            max_writes: std::env::var(TEST_VALUE_WRITES_ENV)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(driver::MAX_VALUE_WRITES, |n| {
                    n.min(driver::MAX_VALUE_WRITES)
                }),
            ticket: 0,
        })
    }

    /// Makes the device's context current on the calling thread (the thread that will use
    /// this mover).
    pub(crate) fn bind(&self) -> Result<()> {
        self.device.bind_to_thread()
    }

    /// The first `n` (≤ [`CHUNK_BYTES`]) bytes of the staging buffer.
    fn chunk(&mut self, n: usize) -> &mut [u8] {
        assert!(n <= CHUNK_BYTES, "a chunk of {n} bytes");
        // SAFETY: the staging buffer holds STAGING_BYTES bytes (n ≤ CHUNK_BYTES < that,
        // asserted), owned by this mover, which `&mut self` borrows exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.staging.host_ptr(), n) }
    }

    /// Copies `n` bytes at `src` (a window's memory, kept mapped by the caller: the registry's
    /// lock or the window's token) into the staging buffer.
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
                if self.writes_values(dst, n) {
                    match self.store_values(stream, dst, n) {
                        Ok(true) => return Ok(()),
                        Ok(false) => {}
                        Err(e) => return Err(e),
                    }
                }
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

    /// Whether this mover moves GPU memory (not the emulator's host memory).
    pub(crate) fn is_gpu(&self) -> bool {
        self.gpu.is_some()
    }

    /// Writes `bytes` to device address `dst` (in a window the caller keeps mapped) and waits
    /// until they have landed.
    pub(crate) fn store_now(&mut self, dst: u64, bytes: &[u8]) -> Result<()> {
        let n = bytes.len();
        self.chunk(n).copy_from_slice(bytes);
        self.store(dst, n)
    }

    /// Whether `n` bytes at device address `dst` may land by stream memory operations
    /// ([`queue_values`](Self::queue_values)).
    pub(crate) fn writes_values(&self, dst: u64, n: usize) -> bool {
        self.gpu.is_some()
            && self.value_writes
            && n <= VALUE_WRITE_BYTES
            && n.is_multiple_of(4)
            && dst.is_multiple_of(4)
    }

    /// Queues on this mover's stream one batch of stream memory operations: `bytes` to device
    /// address `dst` (as 8- and 4-byte values), then each `(address, value)` of `then` (8-byte
    /// words), then `done.1` to the 8-byte word at `done.0`. The GPU's front end carries them
    /// out in order, each after a memory fence, so a word written later is seen only after
    /// the writes before it. Nothing waits. `Ok(false)`, with nothing queued, when the batch
    /// would have more than [`driver::MAX_VALUE_WRITES`] writes (or [`TEST_VALUE_WRITES_ENV`]'s
    /// number), or when the driver refuses stream memory operations (copies are used from
    /// then on).
    ///
    /// # Safety
    /// [`writes_values`](Self::writes_values)`(dst, bytes.len())`; `dst..dst + bytes.len()`,
    /// every address of `then` and `done.0` stay device-accessible memory until the stream has
    /// run the batch.
    pub(crate) unsafe fn queue_values(
        &mut self,
        dst: u64,
        bytes: &[u8],
        then: &[(u64, u64)],
        done: (u64, u64),
    ) -> Result<bool> {
        let Some(stream) = self.gpu else {
            return Ok(false);
        };
        let mut writes = Vec::with_capacity(bytes.len() / 4 + then.len() + 1);
        let mut at = 0;
        while at < bytes.len() {
            let wide = (dst + at as u64).is_multiple_of(8) && bytes.len() - at >= 8;
            let width = if wide { 8 } else { 4 };
            let mut v = [0u8; 8];
            v[..width].copy_from_slice(&bytes[at..at + width]);
            writes.push(driver::ValueWrite {
                addr: dst + at as u64,
                value: u64::from_le_bytes(v),
                wide,
            });
            at += width;
        }
        for &(addr, value) in then.iter().chain(std::iter::once(&done)) {
            writes.push(driver::ValueWrite {
                addr,
                value,
                wide: true,
            });
        }
        if writes.len() > self.max_writes {
            return Ok(false);
        }
        // SAFETY: the caller's contract (alignment checked by `writes_values`); the stream is
        // ours.
        match unsafe { driver::stream_write_values(stream, &writes) } {
            Ok(()) => Ok(true),
            Err(e) => {
                tracing::debug!("GIN: landing small data by copies from now on: {e}");
                self.value_writes = false;
                Ok(false)
            }
        }
    }

    /// [`store`](Self::store) of a few aligned bytes by stream memory operations, waited for:
    /// the batch ends with the next ticket written to the completion word (the staging
    /// buffer's last word), which this thread polls; `cuStreamQuery` now and then catches a
    /// stream that failed. `Ok(false)` when the driver refuses them.
    fn store_values(
        &mut self,
        stream: cudarc::driver::sys::CUstream,
        dst: u64,
        n: usize,
    ) -> Result<bool> {
        let mut data = [0u8; VALUE_WRITE_BYTES];
        data[..n].copy_from_slice(self.chunk(n));
        let ticket = self.ticket + 1;
        let done_at = self.staging.device_ptr() + DONE_AT as u64;
        // SAFETY: `dst..dst + n` is device memory of a live window (caller), aligned (checked
        // by the caller); the completion word is the staging buffer's, owned by this mover; we
        // wait below until the stream has run the batch.
        if !unsafe { self.queue_values(dst, &data[..n], &[], (done_at, ticket))? } {
            return Ok(false);
        }
        self.ticket = ticket;
        let done = self.staging.word(DONE_AT / 8);
        let mut spins = 0u32;
        loop {
            // Acquire: nothing of the landing is reported before the GPU has written it.
            if done.load(std::sync::atomic::Ordering::Acquire) == ticket {
                return Ok(true);
            }
            spins = spins.wrapping_add(1);
            // SAFETY: our live stream.
            if spins.is_multiple_of(1024) && unsafe { driver::stream_query(stream)? } {
                // Everything queued has run: the word must hold the ticket now.
                if done.load(std::sync::atomic::Ordering::Acquire) == ticket {
                    return Ok(true);
                }
                return Err(Error::Internal(
                    "GIN: a landing's stream memory operations ran without reporting".into(),
                ));
            }
            std::hint::spin_loop();
        }
    }

    /// Writes `head` (a frame's header), then bytes `off..off + len` of window `win`, to `w`:
    /// the header with the first chunk in one call. Host memory goes out straight from the
    /// window, which the window's token keeps mapped ([`Registry::pin`]); GPU memory one staging
    /// chunk at a time. `Err(Ok(why))`: the window or the range is not valid (any more);
    /// `Err(Err(e))`: a copy or the connection failed.
    pub(crate) fn send(
        &mut self,
        reg: &Registry,
        (win, off, len): (u32, u64, usize),
        head: &[u8],
        w: &mut impl Write,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        let io = |e: std::io::Error| {
            Err(Error::Io {
                what: "sending GIN data".into(),
                source: e,
            })
        };
        // The window's token, held until the last byte is written: a deregistration waits for
        // the whole send (no lock is held while a slow peer reads).
        let pinned = reg.pin(win, off, len)?;
        if self.gpu.is_none() {
            // SAFETY: `len` bytes of a registered window of this process, mapped while
            // `pinned` lives. The kernel's contract keeps them unchanged until the put is done;
            // the slice is only read, by the socket's copy.
            let body = unsafe { std::slice::from_raw_parts(pinned.addr as *const u8, len) };
            return write_all_vectored(w, head, body).map_err(io);
        }
        let mut done = 0;
        let mut head = head;
        while done < len {
            let n = (len - done).min(CHUNK_BYTES);
            // `pinned` keeps the window mapped (see above).
            self.load(pinned.addr + done as u64, n).map_err(Err)?;
            write_all_vectored(w, head, self.chunk(n)).map_err(io)?;
            head = &[];
            done += n;
        }
        // A put of no bytes is still one frame.
        if !head.is_empty() {
            w.write_all(head).map_err(io)?;
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
            let n = (len - done).min(CHUNK_BYTES);
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
        for (k, part) in bytes.chunks(CHUNK_BYTES).enumerate() {
            let n = part.len();
            self.chunk(n).copy_from_slice(part);
            let at = off + (k * CHUNK_BYTES) as u64;
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
            let n = (len - done).min(CHUNK_BYTES);
            reg.with(src, src_off + done as u64, n, |a| self.load(a, n))?;
            reg.with(dst, dst_off + done as u64, n, |a| self.store(a, n))?;
            done += n;
        }
        Ok(())
    }
}

/// Writes all of `a`, then all of `b`, to `w`, with vectored writes (one call when the
/// socket takes both).
pub(crate) fn write_all_vectored(w: &mut impl Write, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let mut bufs = [std::io::IoSlice::new(a), std::io::IoSlice::new(b)];
    let mut bufs = &mut bufs[..];
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Drop for Mover {
    fn drop(&mut self) {
        if let Some(stream) = self.gpu {
            // Queued landings write the rank's mapped memory: let them finish before that
            // memory can go.
            // SAFETY: our live stream.
            if let Err(e) = unsafe { driver::stream_synchronize(stream) } {
                tracing::warn!("GIN: waiting for a proxy stream: {e}");
            }
            // SAFETY: created in `new`, synchronised above, destroyed once.
            if let Err(e) = unsafe { driver::stream_destroy(stream) } {
                tracing::warn!("GIN: destroying a proxy stream: {e}");
            }
        }
    }
}
