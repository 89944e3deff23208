//! Plain (non-VMM) device and host-mapped memory for small runtime objects.
//!
//! - [`DeviceBox<T>`]: one `T` in device memory (`cuMemAlloc` / `cuMemFree`), e.g. a window
//!   descriptor that kernels read through a pointer.
//! - [`HostMapped<T>`]: one `T` in pinned host memory that the device can address
//!   (`cuMemHostAlloc(DEVICEMAP)`), e.g. an abort flag the host raises while kernels run.
//!
//! Under the emulated backend ([`crate::backend`]) both are a heap allocation whose address
//! is the "device" address.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::AtomicU32;

use super::driver;
use crate::Result;
use crate::backend::{Backend, backend};

/// One value of plain data in device memory; freed on drop.
#[derive(Debug)]
pub struct DeviceBox<T: Copy> {
    alloc: BoxBacking<T>,
}

#[derive(Debug)]
enum BoxBacking<T> {
    Gpu(DeviceAlloc, PhantomData<T>),
    Emulated(HostBox<T>),
}

impl<T: Copy> DeviceBox<T> {
    /// Allocates device memory for a `T` and copies `value` into it (synchronously).
    pub fn new(value: &T) -> Result<Self> {
        if backend()? == Backend::Emulated {
            return Ok(DeviceBox {
                alloc: BoxBacking::Emulated(HostBox::new(*value)),
            });
        }
        let alloc = DeviceAlloc::new(std::mem::size_of::<T>().max(1))?;
        let mut b = DeviceBox {
            alloc: BoxBacking::Gpu(alloc, PhantomData),
        };
        b.write(value)?;
        Ok(b)
    }

    /// Overwrites the value (synchronously). No kernel may be reading it concurrently
    /// (`&mut self` rules out a concurrent host access).
    pub fn write(&mut self, value: &T) -> Result<()> {
        match &self.alloc {
            // SAFETY: the box holds a live T; no kernel reads it concurrently.
            BoxBacking::Emulated(b) => unsafe { ptr::write_volatile(b.ptr, *value) },
            // SAFETY: the allocation holds size_of::<T>() bytes; `value` is a valid T.
            BoxBacking::Gpu(a, _) => unsafe {
                driver::memcpy_htod(a.ptr, (value as *const T).cast(), std::mem::size_of::<T>())
            }?,
        }
        Ok(())
    }

    /// Reads the value back (synchronously).
    pub fn read(&self) -> Result<T> {
        match &self.alloc {
            // SAFETY: the box holds a live T.
            BoxBacking::Emulated(b) => Ok(unsafe { ptr::read_volatile(b.ptr) }),
            BoxBacking::Gpu(a, _) => {
                let mut out = std::mem::MaybeUninit::<T>::uninit();
                // SAFETY: copies exactly size_of::<T>() bytes into `out`, which then holds a T
                // written by `new`/`write` (T is plain data).
                unsafe {
                    driver::memcpy_dtoh(out.as_mut_ptr().cast(), a.ptr, std::mem::size_of::<T>())?;
                    Ok(out.assume_init())
                }
            }
        }
    }

    /// The device address of the value.
    pub fn device_ptr(&self) -> u64 {
        match &self.alloc {
            BoxBacking::Gpu(a, _) => a.ptr,
            BoxBacking::Emulated(b) => b.ptr as u64,
        }
    }

    /// The device address of the value, typed: a kernel argument of type `*const T` (not
    /// dereferenceable on the host).
    pub fn as_ptr(&self) -> *const T {
        std::ptr::with_exposed_provenance(self.device_ptr() as usize)
    }

    /// As [`as_ptr`](Self::as_ptr), for a kernel argument of type `*mut T`.
    pub fn as_mut_ptr(&self) -> *mut T {
        std::ptr::with_exposed_provenance_mut(self.device_ptr() as usize)
    }
}

/// One value of plain data in pinned host memory mapped into the device's address space;
/// freed on drop. The host reads and writes it with volatile accesses; kernels see it at
/// [`HostMapped::device_ptr`].
#[derive(Debug)]
pub struct HostMapped<T: Copy> {
    backing: PinnedBacking<T>,
}

#[derive(Debug)]
enum PinnedBacking<T> {
    Gpu(PinnedAlloc),
    /// The device address is the box's own.
    Emulated(HostBox<T>),
}

// SAFETY: the allocation is owned by this value; accesses go through volatile reads/writes
// of plain data.
unsafe impl<T: Copy + Send> Send for HostMapped<T> {}
// SAFETY: as above; concurrent volatile reads and writes of plain data are the intended use
// (a flag).
unsafe impl<T: Copy + Sync> Sync for HostMapped<T> {}

impl<T: Copy> HostMapped<T> {
    /// Allocates pinned, device-mapped host memory holding `value`.
    pub fn new(value: T) -> Result<Self> {
        if backend()? == Backend::Emulated {
            return Ok(HostMapped {
                backing: PinnedBacking::Emulated(HostBox::new(value)),
            });
        }
        let pinned = PinnedAlloc::new(std::mem::size_of::<T>().max(1))?;
        let out = HostMapped {
            backing: PinnedBacking::Gpu(pinned),
        };
        out.set(value);
        Ok(out)
    }

    /// Writes the value (volatile; kernels polling it see the change).
    pub fn set(&self, value: T) {
        // SAFETY: `host()` points to a live, aligned T-sized allocation owned by `self`.
        unsafe { ptr::write_volatile(self.host(), value) }
    }

    /// Reads the value (volatile).
    pub fn get(&self) -> T {
        // SAFETY: as in `set`; the memory holds a T.
        unsafe { ptr::read_volatile(self.host()) }
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> u64 {
        match &self.backing {
            PinnedBacking::Gpu(p) => p.dev,
            PinnedBacking::Emulated(b) => b.ptr as u64,
        }
    }

    /// The address kernels use, typed: a kernel argument of type `*mut T` (not dereferenceable
    /// on the host; [`get`](Self::get) and [`set`](Self::set) are the host's accesses).
    pub fn as_mut_ptr(&self) -> *mut T {
        std::ptr::with_exposed_provenance_mut(self.device_ptr() as usize)
    }

    /// The host's address of the value.
    fn host(&self) -> *mut T {
        match &self.backing {
            PinnedBacking::Gpu(p) => p.host.cast(),
            PinnedBacking::Emulated(b) => b.ptr,
        }
    }
}

impl HostMapped<u32> {
    /// The value as an atomic: for a flag that one host thread raises while others (and
    /// kernels) read it. Use it for every host access of such a flag ([`HostMapped::set`] and
    /// [`HostMapped::get`] are volatile, not atomic).
    pub fn atomic(&self) -> &AtomicU32 {
        // SAFETY: `host()` points to a live `u32` owned by `self` for as long as `&self`
        // lives, aligned for it (pinned allocations are page-aligned; the emulated one is a
        // `Box<u32>`); callers route concurrent host accesses of the flag through this atomic.
        unsafe { AtomicU32::from_ptr(self.host()) }
    }
}

/// Device memory from `cuMemAlloc`, freed with `cuMemFree` on drop.
#[derive(Debug)]
struct DeviceAlloc {
    ptr: u64,
}

impl DeviceAlloc {
    fn new(bytes: usize) -> Result<DeviceAlloc> {
        Ok(DeviceAlloc {
            ptr: driver::mem_alloc(bytes)?,
        })
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc in `new`, freed once.
        if let Err(e) = unsafe { driver::mem_free(self.ptr) } {
            tracing::warn!("{e}");
        }
    }
}

/// Pinned, device-mapped host memory from `cuMemHostAlloc`, freed with `cuMemFreeHost` on
/// drop.
#[derive(Debug)]
struct PinnedAlloc {
    host: *mut c_void,
    dev: u64,
}

impl PinnedAlloc {
    fn new(bytes: usize) -> Result<PinnedAlloc> {
        let host = driver::mem_host_alloc_mapped(bytes)?;
        // From here on `pinned` owns the allocation: an error below frees it.
        let mut pinned = PinnedAlloc { host, dev: 0 };
        // SAFETY: `host` is the live pinned allocation made above.
        pinned.dev = unsafe { driver::mem_host_get_device_pointer(host) }?;
        Ok(pinned)
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        if let Err(e) = unsafe { driver::mem_free_host(self.host) } {
            tracing::warn!("{e}");
        }
    }
}

/// The emulated backend's memory for one `T`: a heap box held as a raw pointer (emulated
/// kernels write through their own copies of the address, which a `Box` would not allow),
/// freed on drop.
#[derive(Debug)]
struct HostBox<T> {
    ptr: *mut T,
}

impl<T> HostBox<T> {
    fn new(value: T) -> HostBox<T> {
        HostBox {
            ptr: Box::into_raw(Box::new(value)),
        }
    }
}

// SAFETY: a HostBox owns its `T` as a `Box<T>` does; moving it to another thread moves that
// ownership.
unsafe impl<T: Send> Send for HostBox<T> {}
// SAFETY: through `&DeviceBox` the host only reads the value (`DeviceBox::write` takes
// `&mut`); `HostMapped`, the other owner of a HostBox, states its own `Sync` contract.
unsafe impl<T: Sync> Sync for HostBox<T> {}

impl<T> Drop for HostBox<T> {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in `new`, freed once.
        drop(unsafe { Box::from_raw(self.ptr) });
    }
}

/// Zeroed, page-aligned pinned host memory mapped into the device's address space, of any
/// size (the GIN rings, signals, counters and staging buffers); freed on drop. Under emulation
/// a page-aligned heap allocation whose address is also the device address.
#[derive(Debug)]
pub(crate) struct PinnedBytes {
    host: *mut u8,
    dev: u64,
    len: usize,
    backing: PinnedBytesBacking,
}

#[derive(Debug)]
enum PinnedBytesBacking {
    Gpu(#[allow(dead_code)] PinnedAlloc), // held for its Drop
    Emulated(std::alloc::Layout),
}

// SAFETY: the allocation is owned by this value; the host accesses it through raw pointers
// and atomics whose users state their own synchronisation.
unsafe impl Send for PinnedBytes {}
// SAFETY: as above.
unsafe impl Sync for PinnedBytes {}

/// Bytes of every live [`PinnedBytes`] of this process (what the GIN accounting is checked
/// against).
static PINNED_BYTES_LIVE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes of every live GIN pinned allocation of this process (rings, indices, signals,
/// counters, staging buffers), page-rounded as allocated.
pub(crate) fn pinned_bytes_live() -> u64 {
    PINNED_BYTES_LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

impl PinnedBytes {
    /// The bytes `new(len)` allocates: `len` (at least 1) rounded up to a page.
    pub(crate) const fn alloc_len(len: usize) -> usize {
        let len = if len == 0 { 1 } else { len };
        len.next_multiple_of(4096)
    }

    /// `len` zeroed bytes (at least one page is allocated).
    pub(crate) fn new(len: usize) -> Result<PinnedBytes> {
        let bytes = Self::alloc_len(len);
        PINNED_BYTES_LIVE.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        let out = Self::alloc(len, bytes);
        if out.is_err() {
            PINNED_BYTES_LIVE.fetch_sub(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        }
        out
    }

    fn alloc(len: usize, bytes: usize) -> Result<PinnedBytes> {
        if backend()? == Backend::Emulated {
            let layout = std::alloc::Layout::from_size_align(bytes, 4096)
                .map_err(|e| crate::Error::InvalidArgument(format!("{bytes} bytes: {e}")))?;
            // SAFETY: a non-zero size.
            let host = unsafe { std::alloc::alloc_zeroed(layout) };
            if host.is_null() {
                return Err(crate::Error::Io {
                    what: format!("allocating {bytes} bytes of emulated pinned memory"),
                    source: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
                });
            }
            return Ok(PinnedBytes {
                host,
                dev: host as u64,
                len,
                backing: PinnedBytesBacking::Emulated(layout),
            });
        }
        let pinned = PinnedAlloc::new(bytes)?;
        let host = pinned.host.cast::<u8>();
        // SAFETY: `bytes` bytes of the live allocation.
        unsafe { ptr::write_bytes(host, 0, bytes) };
        Ok(PinnedBytes {
            host,
            dev: pinned.dev,
            len,
            backing: PinnedBytesBacking::Gpu(pinned),
        })
    }

    /// The requested length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The host address of byte 0.
    pub(crate) fn host_ptr(&self) -> *mut u8 {
        self.host
    }

    /// The device address of byte 0.
    pub(crate) fn device_ptr(&self) -> u64 {
        self.dev
    }

    /// The `u64` at byte offset `8 × index`, as an atomic (host side).
    ///
    /// # Panics
    /// If the word is outside the allocation (an internal error).
    pub(crate) fn word(&self, index: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(
            index * 8 + 8 <= self.len,
            "word {index} of {} bytes",
            self.len
        );
        // SAFETY: in bounds (asserted), 8-byte aligned (page-aligned base), live while `self`
        // is; every host access of these words goes through atomics.
        unsafe { std::sync::atomic::AtomicU64::from_ptr(self.host.add(index * 8).cast()) }
    }
}

impl Drop for PinnedBytes {
    fn drop(&mut self) {
        PINNED_BYTES_LIVE.fetch_sub(
            Self::alloc_len(self.len) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        if let PinnedBytesBacking::Emulated(layout) = self.backing {
            // SAFETY: allocated with this layout in `new`, freed once.
            unsafe { std::alloc::dealloc(self.host, layout) };
        }
    }
}
