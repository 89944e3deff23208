//! RAII over the CUDA virtual-memory-management (VMM) API.
//!
//! Three resources, each owning exactly one driver object:
//! - [`PhysicalMem`]: physical device memory (`cuMemCreate` / `cuMemRelease`);
//! - [`VaRange`]: a reserved virtual address range (`cuMemAddressReserve` / `cuMemAddressFree`);
//! - [`Mapping`]: physical memory mapped into part of a range, with access set
//!   (`cuMemMap` + `cuMemSetAccess` / `cuMemUnmap`).
//!
//! Teardown order is enforced by ownership: a [`Mapping`] holds `Arc`s of the range and the
//! memory it maps, so it is always unmapped before the range is freed or the memory released,
//! whatever order the user drops things in.
//!
//! Sharing across processes: [`PhysicalMem::export_fd`] turns memory created with
//! [`Shareable::PosixFd`] into a file descriptor (sent to peers over symcomm's fd server, `ipc`), and
//! [`PhysicalMem::import_fd`] turns a peer's descriptor back into a [`PhysicalMem`] that can be
//! mapped like local memory. [`find_allocation`] goes the other way, from a user's device
//! pointer to the VMM allocation behind it (what window registration needs); memory from
//! `cudaMalloc`/`cuMemAlloc` is not VMM memory and is rejected with a clear error.
//!
//! The calls need the device's context current on the calling thread (see
//! [`crate::cuda::open_device`]).
//!
//! Each type holds one backend's resource, chosen once when it is made ([`crate::backend`]):
//! the private `gpu` module's driver objects (built on the checked calls of `cuda::driver`),
//! or under the emulated backend the `emu` module's host memory (a memfd for [`PhysicalMem`],
//! an `mmap` reservation for [`VaRange`], a shared fixed mapping for [`Mapping`], through
//! `cuda::memfd`). Each backend type undoes its own call on drop; the types here have no
//! `Drop` of their own, and ownership and teardown order are the same on both backends.

mod emu;
mod gpu;
#[cfg(test)]
mod tests;

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::backend::{Backend, EMULATED_GRANULARITY, backend};
use crate::cuda::{driver, memfd};
use crate::{Error, Result};

/// How physical memory may be shared with other processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shareable {
    /// Not exportable: local use only.
    No,
    /// Exportable as a POSIX file descriptor (single node, passed over a Unix socket).
    PosixFd,
}

/// The recommended allocation granularity (bytes) of pinned memory on `device`.
pub fn granularity(device: i32, share: Shareable) -> Result<usize> {
    match backend()? {
        Backend::Emulated => Ok(EMULATED_GRANULARITY),
        Backend::Gpu => gpu::granularity(device, share),
    }
}

/// Rounds `bytes` up to a multiple of `granule`; an error on overflow or zero size.
pub fn round_up(bytes: usize, granule: usize) -> Result<usize> {
    if bytes == 0 {
        return Err(Error::InvalidArgument("allocation size is 0".into()));
    }
    bytes
        .checked_next_multiple_of(granule)
        .ok_or_else(|| Error::InvalidArgument(format!("allocation size {bytes} overflows")))
}

/// Physical device memory: created here (`cuMemCreate`), imported from a peer's fd
/// ([`PhysicalMem::import_fd`]) or retained from a mapped pointer ([`find_allocation`]); each
/// handle is released (`cuMemRelease`) once, when the last `Arc` goes.
#[derive(Debug)]
pub struct PhysicalMem {
    backing: MemBacking,
    size: usize,
    device: i32,
    share: Shareable,
}

/// The backend resource behind a [`PhysicalMem`].
#[derive(Debug)]
enum MemBacking {
    Gpu(gpu::DeviceMem),
    Emulated(emu::HostMem),
}

impl PhysicalMem {
    /// Allocates at least `bytes` of pinned memory on `device`, rounded up to the granularity.
    pub fn new(device: i32, bytes: usize, share: Shareable) -> Result<Arc<Self>> {
        let size = round_up(bytes, granularity(device, share)?)?;
        let backing = match backend()? {
            Backend::Emulated => MemBacking::Emulated(emu::HostMem::create(device, size)?),
            Backend::Gpu => MemBacking::Gpu(gpu::DeviceMem::create(device, size, share)?),
        };
        Ok(Arc::new(PhysicalMem {
            backing,
            size,
            device,
            share,
        }))
    }

    /// Takes ownership of a handle the driver returned (e.g. a multicast object): it is
    /// released with `cuMemRelease` on drop.
    pub(crate) fn from_owned_handle(
        handle: sys::CUmemGenericAllocationHandle,
        size: usize,
        device: i32,
        share: Shareable,
    ) -> Arc<Self> {
        Arc::new(PhysicalMem {
            backing: MemBacking::Gpu(gpu::DeviceMem::from_owned(handle)),
            size,
            device,
            share,
        })
    }

    /// Size in bytes (a multiple of the granularity).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The device it lives on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// How it may be shared.
    pub fn shareable(&self) -> Shareable {
        self.share
    }

    /// The raw driver handle (stays owned by `self`; 0 under the emulated backend).
    pub fn raw(&self) -> sys::CUmemGenericAllocationHandle {
        match &self.backing {
            MemBacking::Gpu(m) => m.raw(),
            MemBacking::Emulated(_) => 0,
        }
    }

    /// True for host memory of the emulated backend.
    pub fn is_emulated(&self) -> bool {
        matches!(self.backing, MemBacking::Emulated(_))
    }

    /// Exports the memory as a POSIX file descriptor that another process can import with
    /// [`PhysicalMem::import_fd`]. Each call returns a new descriptor, owned by the caller.
    ///
    /// The memory must have been created [`Shareable::PosixFd`]
    /// ([`Error::InvalidArgument`] otherwise).
    #[doc(alias = "cuMemExportToShareableHandle")]
    pub fn export_fd(&self) -> Result<OwnedFd> {
        if self.share != Shareable::PosixFd {
            return Err(Error::InvalidArgument(
                "memory was not created shareable as a POSIX fd (use Shareable::PosixFd)".into(),
            ));
        }
        match &self.backing {
            MemBacking::Gpu(m) => m.export_fd(),
            MemBacking::Emulated(m) => m.export_fd(),
        }
    }

    /// Imports memory another process exported with [`PhysicalMem::import_fd`]; `size` is
    /// the exporter's allocation size (learned from it, e.g. through the registration
    /// record). The descriptor stays owned by the caller and may be closed right after.
    ///
    /// The imported handle is released on drop; mappings of it keep the memory alive as usual.
    #[doc(alias = "cuMemImportFromShareableHandle")]
    pub fn import_fd(fd: BorrowedFd<'_>, size: usize) -> Result<Arc<Self>> {
        if size == 0 {
            return Err(Error::InvalidArgument(
                "imported allocation size is 0".into(),
            ));
        }
        let (backing, device) = match backend()? {
            Backend::Emulated => {
                let (m, device) = emu::HostMem::import_fd(fd, size)?;
                (MemBacking::Emulated(m), device)
            }
            Backend::Gpu => {
                let (m, device) = gpu::DeviceMem::import_fd(fd)?;
                (MemBacking::Gpu(m), device)
            }
        };
        Ok(Arc::new(PhysicalMem {
            backing,
            size,
            device,
            share: Shareable::PosixFd,
        }))
    }
}

/// The VMM allocation behind a device pointer: where its mapping starts, how long it is, and a
/// retained handle to its physical memory.
#[derive(Debug)]
pub struct Allocation {
    /// Device address of the mapping's first byte.
    pub base: u64,
    /// Bytes mapped from `base`.
    pub size: usize,
    /// The physical memory (a retained handle of the user's allocation, released on drop;
    /// its [`PhysicalMem::size`] is `size`).
    pub mem: Arc<PhysicalMem>,
}

/// Finds the VMM allocation that contains device address `ptr` and retains its handle.
///
/// Fails with [`Error::InvalidArgument`] when `ptr` is not device memory known to the driver,
/// or is device memory that did not come from the VMM API (`cudaMalloc`, `cuMemAlloc`,
/// memory pools): such memory cannot be exported to peers.
#[doc(alias = "cuMemRetainAllocationHandle")]
pub fn find_allocation(ptr: u64) -> Result<Allocation> {
    if backend()? == Backend::Emulated {
        let (base, size, mem) = emu::lookup(ptr)?;
        return Ok(Allocation { base, size, mem });
    }
    let (base, size) = gpu::address_range(ptr)?;
    let (mem, device, share) = gpu::DeviceMem::retain(ptr)?;
    Ok(Allocation {
        base,
        size,
        mem: Arc::new(PhysicalMem {
            backing: MemBacking::Gpu(mem),
            size,
            device,
            share,
        }),
    })
}

/// The start and size of the device allocation (for VMM: the mapping) containing `ptr`.
#[doc(alias = "cuMemGetAddressRange")]
pub fn address_range(ptr: u64) -> Result<(u64, usize)> {
    match backend()? {
        Backend::Emulated => emu::lookup(ptr).map(|(base, size, _)| (base, size)),
        Backend::Gpu => gpu::address_range(ptr),
    }
}

/// A reserved virtual address range; freed when the last `Arc` goes.
#[derive(Debug)]
pub struct VaRange {
    backing: VaBacking,
}

#[derive(Debug)]
enum VaBacking {
    Gpu(gpu::DeviceVa),
    Emulated(emu::HostVa),
}

impl VaRange {
    /// Reserves `size` bytes of device virtual address space aligned to `align` (0 = default).
    pub fn reserve(size: usize, align: usize) -> Result<Arc<Self>> {
        if size == 0 {
            return Err(Error::InvalidArgument("VA range size is 0".into()));
        }
        let backing = match backend()? {
            Backend::Emulated => VaBacking::Emulated(emu::HostVa::reserve(size, align)?),
            Backend::Gpu => VaBacking::Gpu(gpu::DeviceVa::reserve(size, align)?),
        };
        Ok(Arc::new(VaRange { backing }))
    }

    /// The first address of the range.
    pub fn base(&self) -> u64 {
        match &self.backing {
            VaBacking::Gpu(v) => v.base,
            VaBacking::Emulated(v) => v.base,
        }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        match &self.backing {
            VaBacking::Gpu(v) => v.size,
            VaBacking::Emulated(v) => v.size,
        }
    }
}

/// Physical memory mapped at `offset` inside a [`VaRange`], readable and writable by the
/// listed devices; unmapped on drop (before the range or memory can go away).
#[derive(Debug)]
pub struct Mapping {
    // Field order is teardown order: the mapping goes first, then the `Arc`s that keep the
    // range and the memory alive while it exists.
    mapped: MapBacking,
    _va: Arc<VaRange>,
    mem: Arc<PhysicalMem>,
}

#[derive(Debug)]
enum MapBacking {
    Gpu(gpu::DeviceMapping),
    Emulated(emu::HostMapping),
}

impl Mapping {
    /// Maps all of `mem` at `va.base() + offset` and grants read/write access to `devices`.
    pub fn new(
        va: &Arc<VaRange>,
        offset: usize,
        mem: &Arc<PhysicalMem>,
        devices: &[i32],
    ) -> Result<Self> {
        let end = offset.checked_add(mem.size());
        if end.is_none_or(|end| end > va.size()) {
            return Err(Error::InvalidArgument(format!(
                "mapping {} bytes at offset {offset} does not fit a VA range of {} bytes",
                mem.size(),
                va.size()
            )));
        }
        let ptr = va.base() + offset as u64;
        let mapped = match (&va.backing, &mem.backing) {
            (VaBacking::Gpu(_), MemBacking::Gpu(m)) => {
                // SAFETY: [ptr, ptr + size) lies inside the reserved range (checked above),
                // which the mapping keeps alive (`va`), as it keeps `mem`; the driver refuses a
                // range that is already mapped.
                let m = unsafe { gpu::DeviceMapping::map(ptr, mem.size(), m, devices) }?;
                MapBacking::Gpu(m)
            }
            (VaBacking::Emulated(_), MemBacking::Emulated(h)) => {
                // SAFETY: inside the live emulated reservation (checked above), which the
                // mapping keeps alive; `map` refuses a range that is already mapped.
                MapBacking::Emulated(unsafe { emu::HostMapping::map(ptr, mem, h) }?)
            }
            _ => {
                return Err(Error::InvalidArgument(
                    "cannot map emulated memory into a device VA range or vice versa".into(),
                ));
            }
        };
        Ok(Mapping {
            mapped,
            _va: Arc::clone(va),
            mem: Arc::clone(mem),
        })
    }

    /// The device address of the first mapped byte.
    pub fn ptr(&self) -> u64 {
        match &self.mapped {
            MapBacking::Gpu(m) => m.ptr(),
            MapBacking::Emulated(m) => m.ptr(),
        }
    }

    /// Mapped bytes.
    pub fn size(&self) -> usize {
        self.mem.size()
    }

    /// The physical memory behind the mapping.
    pub fn memory(&self) -> &Arc<PhysicalMem> {
        &self.mem
    }

    fn is_emulated(&self) -> bool {
        matches!(self.mapped, MapBacking::Emulated(_))
    }
}

// SAFETY: `len` bytes at `device_ptr()` are mapped (the mapping may be larger) for as long as
// the buffer lives.
unsafe impl crate::cuda::DeviceMemory for VmmBuffer {
    fn device_ptr(&self) -> u64 {
        self.mapping.ptr()
    }
    fn byte_len(&self) -> usize {
        self.len
    }
}

/// Device memory obtained through the VMM API and mapped for its own device only: the
/// simplest VMM allocation (physical memory + its own VA range + one mapping).
#[derive(Debug)]
pub struct VmmBuffer {
    mapping: Mapping,
    len: usize,
}

impl VmmBuffer {
    /// Allocates at least `bytes` on `device` (rounded up to the granularity).
    pub fn new(device: i32, bytes: usize) -> Result<Self> {
        Self::with_share(device, bytes, Shareable::No)
    }

    /// Like [`VmmBuffer::new`], with the physical memory shareable as `share` says.
    pub fn with_share(device: i32, bytes: usize, share: Shareable) -> Result<Self> {
        let mem = PhysicalMem::new(device, bytes, share)?;
        let va = VaRange::reserve(mem.size(), 0)?;
        let mapping = Mapping::new(&va, 0, &mem, &[device])?;
        Ok(VmmBuffer {
            mapping,
            len: bytes,
        })
    }

    /// The device address of byte 0.
    pub fn device_ptr(&self) -> u64 {
        self.mapping.ptr()
    }

    /// The device address of byte 0 as a pointer to `T`: a kernel argument of type
    /// `*const T` (not dereferenceable on the host, except under the emulator).
    pub fn as_ptr<T>(&self) -> *const T {
        std::ptr::with_exposed_provenance(self.device_ptr() as usize)
    }

    /// As [`as_ptr`](Self::as_ptr), for a kernel argument of type `*mut T`.
    pub fn as_mut_ptr<T>(&self) -> *mut T {
        std::ptr::with_exposed_provenance_mut(self.device_ptr() as usize)
    }

    /// The bytes asked for (the mapping may be larger).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when zero bytes were asked for (never: `new` rejects size 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` into the start of the buffer (synchronous).
    pub fn copy_from_host<T: Copy>(&self, src: &[T]) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        if bytes > self.len {
            return Err(Error::InvalidArgument(format!(
                "copy of {bytes} bytes into a {}-byte buffer",
                self.len
            )));
        }
        let (dst, src) = (self.device_ptr(), src.as_ptr().cast());
        if self.mapping.is_emulated() {
            // SAFETY: the destination holds at least `bytes` mapped host bytes; `src` is a
            // valid slice of another allocation.
            unsafe { memfd::memcpy_htod(dst, src, bytes) };
            return Ok(());
        }
        // SAFETY: the destination holds at least `bytes` mapped bytes; `src` is a valid slice.
        unsafe { driver::memcpy_htod(dst, src, bytes) }
    }

    /// Copies the start of the buffer into `dst` (synchronous).
    pub fn copy_to_host<T: Copy>(&self, dst: &mut [T]) -> Result<()> {
        let bytes = std::mem::size_of_val(dst);
        if bytes > self.len {
            return Err(Error::InvalidArgument(format!(
                "copy of {bytes} bytes out of a {}-byte buffer",
                self.len
            )));
        }
        let (dst, src) = (dst.as_mut_ptr().cast(), self.device_ptr());
        if self.mapping.is_emulated() {
            // SAFETY: the source holds at least `bytes` mapped host bytes; `dst` is a valid
            // slice of another allocation.
            unsafe { memfd::memcpy_dtoh(dst, src, bytes) };
            return Ok(());
        }
        // SAFETY: the source holds at least `bytes` mapped bytes; `dst` is a valid slice.
        unsafe { driver::memcpy_dtoh(dst, src, bytes) }
    }

    /// Sets every byte of the buffer to `value`, e.g. to poison outputs; returns once the
    /// memset has completed on the device.
    ///
    /// The memset runs on a stream of its own that does not synchronise with other streams
    /// (`CU_STREAM_NON_BLOCKING`), and only that stream is waited for: kernels running on other
    /// streams of the context (a collective waiting for its peers, say) neither delay nor
    /// block it. With the current context's legacy default stream it would wait for every
    /// blocking stream's work first.
    pub fn fill_bytes(&self, value: u8) -> Result<()> {
        if self.mapping.is_emulated() {
            // SAFETY: `len` host bytes are mapped at device_ptr().
            unsafe { memfd::memset_d8(self.device_ptr(), value, self.len) };
            return Ok(());
        }
        let stream = crate::cuda::stream::Stream::new()?;
        // SAFETY: `len` bytes are mapped at device_ptr(); the stream lives across the call.
        // Waiting for the stream means that what follows (e.g. a peer writing into freshly
        // zeroed barrier inboxes after a registration barrier) can never be overwritten by it.
        unsafe { driver::memset_d8_async(self.device_ptr(), value, self.len, stream.raw()) }?;
        stream.synchronize()
    }
}
