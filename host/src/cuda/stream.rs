//! [`Stream`]: where kernels, collectives, copies and fills are queued, the same on GPUs and on
//! the CPU emulator, and convertible to and from cudarc's `CudaStream`.
//!
//! Communication kernels of two ranks must be able to run at the same time. On the legacy
//! default stream (stream 0, one per context) they cannot when the ranks share a context
//! (ranks as threads on one GPU), and work on a blocking stream also waits for stream 0. A
//! [`Stream`] that symcomm creates is `CU_STREAM_NON_BLOCKING`, and [`Stream::synchronize`]
//! waits for this stream only, not for every kernel of the context as `cuCtxSynchronize` does.
//!
//! On the GPU a stream is either symcomm's own (destroyed on drop) or a cudarc stream of the
//! user's ([`Stream::from_cudarc`]); [`Stream::as_cudarc`] lends the cudarc view of either.
//! Under the emulated backend launches, copies and fills run at once, synchronously, and the
//! stream only keeps the API the same: [`Stream::synchronize`] returns at once, events hold
//! the host time they were recorded at, and a [`Graph`] replays its work by running the
//! captured closure again.
//!
//! # Ordering
//! Work queued on one stream runs in queue order; work on different streams is unordered
//! unless an [`Event`] orders it ([`Stream::wait`]). The copies and fills here return once
//! they are complete, so the host may reuse its slice, or drop the memory, at once; kernels
//! and collectives are asynchronous (their memory must outlive the stream's work, the launch
//! contract). A [`Graph`] borrows everything its captured closure borrows, so memory it fills
//! outlives its replays.

use std::cell::Cell;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream};

use super::region::{DeviceMemory, checked_range};
use crate::backend::{Backend, backend};
use crate::cuda::{driver, memfd};
use crate::{Error, Result};

/// A stream of the current device: symcomm's own non-blocking stream, or a cudarc stream.
#[derive(Debug)]
pub struct Stream {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    /// The emulated backend: everything runs at once.
    Emulated,
    /// A stream of the current context made by [`Stream::new`] (no cudarc view).
    Raw(OwnedStream),
    /// A cudarc stream: made by [`crate::Device::stream`] (cudarc owns it) or the user's.
    Cudarc(Arc<CudaStream>),
}

thread_local! {
    /// The stream this thread is capturing through [`Stream::capture`] (null: none).
    static CAPTURING: Cell<sys::CUstream> = const { Cell::new(ptr::null_mut()) };
}

impl Stream {
    /// Creates a stream in the current context (`CU_STREAM_NON_BLOCKING`); a null handle
    /// under the emulated backend. [`crate::Device::stream`] makes one that also converts to a
    /// cudarc stream.
    ///
    /// # Errors
    /// [`Error::Cuda`] when the driver refuses (no current context, say).
    pub fn new() -> Result<Stream> {
        let inner = match backend()? {
            Backend::Emulated => Inner::Emulated,
            Backend::Gpu => Inner::Raw(OwnedStream {
                raw: driver::stream_create_non_blocking()?,
            }),
        };
        Ok(Stream { inner })
    }

    /// A new non-blocking stream of `ctx` (cudarc's, which it destroys), or an emulated one.
    pub(crate) fn new_in(ctx: Option<&Arc<CudaContext>>) -> Result<Stream> {
        let Some(ctx) = ctx else {
            return Stream::new();
        };
        let stream = ctx.new_stream().map_err(cu("cuStreamCreate"))?;
        Ok(Stream {
            inner: Inner::Cudarc(stream),
        })
    }

    /// A stream on the user's cudarc stream (which stays the user's: dropping this `Stream`
    /// does not destroy it). Launches, collectives, copies and graphs queued on the result
    /// are queued on `stream`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] under the emulated backend, which has no CUDA streams.
    pub fn from_cudarc(stream: Arc<CudaStream>) -> Result<Stream> {
        match backend()? {
            Backend::Gpu => Ok(Stream {
                inner: Inner::Cudarc(stream),
            }),
            Backend::Emulated => Err(Error::Unsupported {
                what: "a cudarc stream on the emulated backend".into(),
                hint: "there is no CUDA driver: use Device::stream".into(),
            }),
        }
    }

    /// The cudarc stream this stream is, for cudarc's copies and launches (which take
    /// `&Arc<CudaStream>`; a clone keeps the stream alive): `None` under emulation and for
    /// streams made by [`Stream::new`]. cudarc's automatic ordering of its own allocations
    /// across streams depends on the context's event tracking, which contexts opened by
    /// [`crate::Device::open`] have off: order such work with events or synchronisation.
    pub fn as_cudarc(&self) -> Option<&Arc<CudaStream>> {
        match &self.inner {
            Inner::Cudarc(s) => Some(s),
            Inner::Raw(_) | Inner::Emulated => None,
        }
    }

    /// The raw handle, for launches and driver calls. It stays valid while `self` lives; null
    /// under emulation.
    pub fn raw(&self) -> sys::CUstream {
        match &self.inner {
            Inner::Raw(raw) => raw.raw,
            Inner::Cudarc(s) => s.cu_stream(),
            Inner::Emulated => ptr::null_mut(),
        }
    }

    /// True on the emulated backend, where everything queued runs at once.
    pub fn is_emulated(&self) -> bool {
        matches!(self.inner, Inner::Emulated)
    }

    /// Waits until everything queued on this stream has finished (`cuStreamSynchronize`);
    /// other streams of the context are not waited for.
    ///
    /// # Errors
    /// [`Error::Cuda`] with the error of a failed kernel or copy on the stream.
    pub fn synchronize(&self) -> Result<()> {
        match &self.inner {
            Inner::Emulated => Ok(()),
            // SAFETY: a live stream of this value's.
            _ => unsafe { driver::stream_synchronize(self.raw()) },
        }
    }

    /// Like [`synchronize`](Self::synchronize), but the calling thread sleeps until the work
    /// is done (an event made with `CU_EVENT_BLOCKING_SYNC`) instead of spinning in the
    /// driver. Waking takes longer, but the wait makes no driver calls meanwhile, which
    /// slow the driver calls of other threads of the process (GIN's proxy and receive
    /// threads land small puts through the driver). A stream made by [`Stream::new`] is
    /// waited for as `synchronize` does.
    ///
    /// # Errors
    /// [`Error::Cuda`] with the error of a failed kernel or copy on the stream.
    pub fn synchronize_asleep(&self) -> Result<()> {
        match &self.inner {
            Inner::Emulated => Ok(()),
            Inner::Cudarc(s) => s
                .record_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))
                .map_err(cu("cuEventRecord"))?
                .synchronize()
                .map_err(cu("cuEventSynchronize")),
            Inner::Raw(_) => self.synchronize(),
        }
    }

    /// Copies `src` into `dst` from element `offset` on (in units of `T`), after everything
    /// queued on this stream before it, and returns once the copy is complete.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the elements do not fit in `dst` (nothing is copied);
    /// [`Error::Cuda`] from the copy or from earlier work on the stream.
    pub fn copy_to_device<T: bytemuck::Pod, M: DeviceMemory + ?Sized>(
        &self,
        dst: &M,
        offset: usize,
        src: &[T],
    ) -> Result<()> {
        let (ptr, bytes) = checked_range::<T, M>(dst, offset, src.len(), "copy to device")?;
        if bytes == 0 {
            return Ok(());
        }
        match &self.inner {
            // SAFETY: `ptr..ptr + bytes` lies in `dst`'s mapped memory (checked_range and the
            // DeviceMemory contract); `src` is a live slice of `bytes` bytes, elsewhere.
            Inner::Emulated => unsafe { memfd::memcpy_htod(ptr, src.as_ptr().cast(), bytes) },
            _ => {
                // SAFETY: as above for the device side; the stream is live, and `src` stays
                // borrowed until the synchronisation below has seen the copy complete.
                unsafe { driver::memcpy_htod_async(ptr, src.as_ptr().cast(), bytes, self.raw()) }?;
                self.synchronize()?;
            }
        }
        Ok(())
    }

    /// Copies elements `offset..offset + dst.len()` (in units of `T`) of `src` into `dst`,
    /// after everything queued on this stream before it, and returns once the copy is
    /// complete.
    ///
    /// # Errors
    /// As [`Stream::copy_to_device`].
    pub fn copy_to_host<T: bytemuck::Pod, M: DeviceMemory + ?Sized>(
        &self,
        src: &M,
        offset: usize,
        dst: &mut [T],
    ) -> Result<()> {
        let (ptr, bytes) = checked_range::<T, M>(src, offset, dst.len(), "copy to host")?;
        if bytes == 0 {
            return Ok(());
        }
        match &self.inner {
            // SAFETY: `ptr..ptr + bytes` lies in `src`'s mapped memory; `dst` is a live,
            // exclusively borrowed slice of `bytes` bytes, elsewhere.
            Inner::Emulated => unsafe { memfd::memcpy_dtoh(dst.as_mut_ptr().cast(), ptr, bytes) },
            _ => {
                // SAFETY: as above; `dst` stays borrowed until the copy has completed.
                unsafe {
                    driver::memcpy_dtoh_async(dst.as_mut_ptr().cast(), ptr, bytes, self.raw())
                }?;
                self.synchronize()?;
            }
        }
        Ok(())
    }

    /// Sets every byte of `dst` to `value` (e.g. 0xff to poison an output before a kernel
    /// writes it), after everything queued on this stream before it, and returns once it is
    /// complete, so that `dst` may be dropped at once. Inside this thread's
    /// [`Stream::capture`] of this stream the fill is recorded into the graph instead (the
    /// graph borrows `dst` for its lifetime). Under emulation it runs at once.
    ///
    /// # Errors
    /// [`Error::Cuda`] from the fill or from earlier work on the stream, and when another
    /// capture of the stream is in progress (synchronising invalidates that capture, so its
    /// graph never holds the fill).
    pub fn fill_bytes<M: DeviceMemory + ?Sized>(&self, dst: &M, value: u8) -> Result<()> {
        let (ptr, bytes) = (dst.device_ptr(), dst.byte_len());
        if self.is_emulated() {
            // SAFETY: `bytes` mapped bytes at `ptr` (DeviceMemory contract).
            unsafe { memfd::memset_d8(ptr, value, bytes) };
            return Ok(());
        }
        // SAFETY: as above, and `dst` stays borrowed until the fill has completed (the
        // synchronisation below) or, in our own capture, for as long as the graph recording it
        // lives (`capture` keeps its closure, which borrows `dst`, until then).
        unsafe { driver::memset_d8_async(ptr, value, bytes, self.raw()) }?;
        if CAPTURING.with(Cell::get) == self.raw() {
            return Ok(());
        }
        self.synchronize()
    }

    /// Records an event at this point of the stream (for timing, or for [`Stream::wait`]).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a stream made by [`Stream::new`] (use
    /// [`crate::Device::stream`]); [`Error::Cuda`] when the driver refuses.
    pub fn record(&self) -> Result<Event> {
        match &self.inner {
            Inner::Emulated => Ok(Event {
                inner: EventInner::Emulated(Instant::now()),
            }),
            _ => {
                let s = self.require_cudarc("record an event")?;
                let event = s
                    .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(cu("cuEventRecord"))?;
                Ok(Event {
                    inner: EventInner::Gpu(event),
                })
            }
        }
    }

    /// Makes work queued on this stream from now on wait until `event` has completed.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a stream made by [`Stream::new`]; [`Error::Cuda`] when the
    /// driver refuses.
    pub fn wait(&self, event: &Event) -> Result<()> {
        match (&self.inner, &event.inner) {
            (Inner::Emulated, _) | (_, EventInner::Emulated(_)) => Ok(()),
            (_, EventInner::Gpu(e)) => {
                let s = self.require_cudarc("wait for an event")?;
                s.wait(e).map_err(cu("cuStreamWaitEvent"))
            }
        }
    }

    /// Captures the work that `work` queues on this stream into a graph, which
    /// [`Graph::launch`] replays on this stream. On the GPU `work` runs once, now, under stream
    /// capture (its kernels, collectives and fills are recorded, not run; copies and
    /// synchronisation are not allowed during capture); under emulation it does not run now,
    /// and every launch of the graph runs it again. The graph keeps `work` (and what it owns or
    /// borrows) until it is dropped, and dropping it waits for its replays.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a stream made by [`Stream::new`]; the error of `work`;
    /// [`Error::Cuda`] from the capture.
    pub fn capture<'s, F>(&'s self, work: F) -> Result<Graph<'s>>
    where
        F: Fn(&Stream) -> Result<()> + 's,
    {
        if self.is_emulated() {
            return Ok(Graph {
                stream: self,
                gpu: None,
                work: Box::new(work),
            });
        }
        let s = self.require_cudarc("capture a graph")?.clone();
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cu("cuStreamBeginCapture"))?;
        // Ends the capture on every path, a panic in `work` included, and marks this thread's
        // capture of this stream for `fill_bytes` meanwhile.
        let mut guard = CaptureGuard {
            stream: s,
            previous: CAPTURING.with(|c| c.replace(self.raw())),
            ended: false,
        };
        let captured = work(self);
        let ended = guard.end();
        captured?;
        let graph = ended
            .map_err(cu("cuStreamEndCapture"))?
            .ok_or_else(|| Error::InvalidArgument("the captured work queued nothing".into()))?;
        Ok(Graph {
            stream: self,
            gpu: Some(graph),
            work: Box::new(work),
        })
    }

    fn require_cudarc(&self, what: &str) -> Result<&Arc<CudaStream>> {
        self.as_cudarc().ok_or_else(|| Error::Unsupported {
            what: format!("{what} on a stream made by Stream::new"),
            hint: "make the stream with Device::stream".into(),
        })
    }
}

impl TryFrom<Arc<CudaStream>> for Stream {
    type Error = Error;

    fn try_from(stream: Arc<CudaStream>) -> Result<Stream> {
        Stream::from_cudarc(stream)
    }
}

/// What launches and collectives accept as their stream: a symcomm [`Stream`], a cudarc
/// `CudaStream` (by reference or `Arc`), or a raw `CUstream` handle.
pub trait AsStream {
    /// The raw handle (null: the legacy default stream, or the emulator).
    fn raw_stream(&self) -> sys::CUstream;
}

impl AsStream for Stream {
    fn raw_stream(&self) -> sys::CUstream {
        self.raw()
    }
}

impl AsStream for CudaStream {
    fn raw_stream(&self) -> sys::CUstream {
        self.cu_stream()
    }
}

impl AsStream for Arc<CudaStream> {
    fn raw_stream(&self) -> sys::CUstream {
        self.cu_stream()
    }
}

impl AsStream for sys::CUstream {
    fn raw_stream(&self) -> sys::CUstream {
        *self
    }
}

impl<S: AsStream + ?Sized> AsStream for &S {
    fn raw_stream(&self) -> sys::CUstream {
        (**self).raw_stream()
    }
}

/// A point in a stream's work ([`Stream::record`]): for timing and for ordering streams.
#[derive(Debug)]
pub struct Event {
    inner: EventInner,
}

#[derive(Debug)]
enum EventInner {
    Emulated(Instant),
    Gpu(CudaEvent),
}

impl Event {
    /// Waits until the work recorded before the event has completed.
    ///
    /// # Errors
    /// [`Error::Cuda`] with the error of failed work.
    pub fn synchronize(&self) -> Result<()> {
        match &self.inner {
            EventInner::Emulated(_) => Ok(()),
            EventInner::Gpu(e) => e.synchronize().map_err(cu("cuEventSynchronize")),
        }
    }

    /// Milliseconds from this event to `end` (both complete; under emulation, host time
    /// between the two records).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the two come from different backends; [`Error::Cuda`]
    /// when the driver refuses (an event not yet complete, say).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        match (&self.inner, &end.inner) {
            (EventInner::Emulated(a), EventInner::Emulated(b)) => {
                Ok(b.saturating_duration_since(*a).as_secs_f32() * 1e3)
            }
            (EventInner::Gpu(a), EventInner::Gpu(b)) => {
                a.elapsed_ms(b).map_err(cu("cuEventElapsedTime"))
            }
            _ => Err(Error::InvalidArgument(
                "events of different backends".into(),
            )),
        }
    }
}

/// Ends a stream capture when dropped, unless [`CaptureGuard::end`] did.
struct CaptureGuard {
    stream: Arc<CudaStream>,
    previous: sys::CUstream,
    ended: bool,
}

impl CaptureGuard {
    fn end(&mut self) -> std::result::Result<Option<CudaGraph>, cudarc::driver::DriverError> {
        self.ended = true;
        CAPTURING.with(|c| c.set(self.previous));
        self.stream.end_capture(sys::CUgraphInstantiate_flags(0))
    }
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        if !self.ended {
            // A panic in the captured work: end the capture so the stream is usable again.
            let _ = self.end();
        }
    }
}

/// Work captured from a stream ([`Stream::capture`]), replayed on it by [`Graph::launch`].
/// It keeps the captured closure (and so what the closure owns or borrows) alive, and its drop
/// waits for the stream, so no replay outlives them.
pub struct Graph<'s> {
    stream: &'s Stream,
    /// The instantiated CUDA graph; `None` under emulation, where `work` is run again.
    gpu: Option<CudaGraph>,
    work: Replay<'s>,
}

/// Work that a graph holds (and, under emulation, replays).
type Replay<'s> = Box<dyn Fn(&Stream) -> Result<()> + 's>;

impl std::fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.gpu.is_some() {
            "gpu"
        } else {
            "emulated"
        };
        f.debug_struct("Graph").field("kind", &kind).finish()
    }
}

impl Graph<'_> {
    /// Moves the graph's resources to the device now, so that the first [`Graph::launch`]
    /// pays no set-up (a no-op under emulation).
    ///
    /// # Errors
    /// [`Error::Cuda`] when the driver refuses.
    pub fn upload(&self) -> Result<()> {
        match &self.gpu {
            Some(g) => g.upload().map_err(cu("cuGraphUpload")),
            None => Ok(()),
        }
    }

    /// Queues one replay of the captured work on the stream it was captured from (under
    /// emulation: runs it).
    ///
    /// # Errors
    /// [`Error::Cuda`] from the launch; under emulation, the error of the work.
    pub fn launch(&self) -> Result<()> {
        match &self.gpu {
            Some(g) => g.launch().map_err(cu("cuGraphLaunch")),
            None => (self.work)(self.stream),
        }
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        if self.gpu.is_some() {
            // Replays still queued use what `work` holds: wait for them before it goes. An
            // error here (a failed kernel) has been or will be reported by the stream.
            let _ = self.stream.synchronize();
        }
    }
}

/// Maps a cudarc driver error to [`Error::Cuda`] naming `call`.
fn cu(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda { call, code: e.0 }
}

/// A stream handle from `cuStreamCreate`, destroyed on drop.
#[derive(Debug)]
struct OwnedStream {
    raw: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread of the process (with its context
// current there, which every call here requires anyway); it has no thread-local state.
unsafe impl Send for OwnedStream {}
// SAFETY: as above; the driver synchronises concurrent calls on one stream handle.
unsafe impl Sync for OwnedStream {}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: created by `Stream::new`, destroyed once. Work still queued completes first
        // (the driver defers the release); an error here has no one to report to.
        let _ = unsafe { driver::stream_destroy(self.raw) };
    }
}
