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
//! [`Shareable::PosixFd`] into a file descriptor (sent to peers with [`crate::ipc`]), and
//! [`PhysicalMem::import_fd`] turns a peer's descriptor back into a [`PhysicalMem`] that can be
//! mapped like local memory. [`find_allocation`] goes the other way, from a user's device
//! pointer to the VMM allocation behind it (what window registration needs); memory from
//! `cudaMalloc`/`cuMemAlloc` is not VMM memory and is rejected with a clear error.
//!
//! The calls need the device's context current on the calling thread (see
//! [`crate::cuda::open_device`]).
//!
//! Under the emulated backend ([`crate::backend`]) the same types hold host memory instead:
//! a memfd for [`PhysicalMem`], an `mmap` reservation for [`VaRange`], a shared fixed mapping
//! for [`Mapping`] (the private `cuda::emu` module); ownership and teardown order are the
//! same.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use super::{check, emu};
use crate::backend::{Backend, EMULATED_GRANULARITY, backend};
use crate::{Error, Result};

/// How physical memory may be shared with other processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shareable {
    /// Not exportable: local use only.
    No,
    /// Exportable as a POSIX file descriptor (single node, passed over a Unix socket).
    PosixFd,
}

fn alloc_prop(device: i32, share: Shareable) -> sys::CUmemAllocationProp {
    // SAFETY: CUmemAllocationProp is a plain C struct for which all-zero is a valid value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes = match share {
        Shareable::No => sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        Shareable::PosixFd => {
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        }
    };
    prop
}

/// The recommended allocation granularity (bytes) of pinned memory on `device`.
pub fn granularity(device: i32, share: Shareable) -> Result<usize> {
    if backend()? == Backend::Emulated {
        return Ok(EMULATED_GRANULARITY);
    }
    let prop = alloc_prop(device, share);
    let mut g = 0usize;
    // SAFETY: `prop` is fully initialised and `g` is a valid out-pointer.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    })?;
    if g == 0 {
        return Err(Error::Unsupported {
            what: "VMM allocation granularity reported as 0".into(),
            hint: "the driver does not support cuMemCreate on this device".into(),
        });
    }
    Ok(g)
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
/// handle is released (`cuMemRelease`) once, on drop.
#[derive(Debug)]
pub struct PhysicalMem {
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
    device: i32,
    share: Shareable,
    /// Emulated backend: the memfd holding the memory (`handle` is then 0).
    host: Option<OwnedFd>,
}

impl PhysicalMem {
    /// Allocates at least `bytes` of pinned memory on `device`, rounded up to the granularity.
    pub fn new(device: i32, bytes: usize, share: Shareable) -> Result<Arc<Self>> {
        let size = round_up(bytes, granularity(device, share)?)?;
        if backend()? == Backend::Emulated {
            return Ok(Arc::new(PhysicalMem {
                handle: 0,
                size,
                device,
                share,
                host: Some(emu::create(device, size)?),
            }));
        }
        let prop = alloc_prop(device, share);
        let mut handle = 0;
        // SAFETY: `prop` is valid and `size` is a positive multiple of the granularity.
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        Ok(Arc::new(PhysicalMem {
            handle,
            size,
            device,
            share,
            host: None,
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
            handle,
            size,
            device,
            share,
            host: None,
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
        self.handle
    }

    /// True for host memory of the emulated backend.
    pub fn is_emulated(&self) -> bool {
        self.host.is_some()
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
        if let Some(host) = &self.host {
            return host
                .try_clone()
                .map_err(|e| Error::InvalidArgument(format!("emulated memory: dup failed: {e}")));
        }
        let mut fd: libc::c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver writes one `int` to
        // the out-pointer; `fd` is a live int. The handle is live (owned by `self`).
        check("cuMemExportToShareableHandle", unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut libc::c_int).cast(),
                self.handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        if fd < 0 {
            return Err(Error::Cuda {
                call: "cuMemExportToShareableHandle",
                code: sys::CUresult::CUDA_ERROR_INVALID_HANDLE,
            });
        }
        // SAFETY: the driver returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Imports memory another process exported with [`PhysicalMem::export_fd`]; `size` is
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
        if backend()? == Backend::Emulated {
            let have = emu::file_size(fd)?;
            if have < size {
                return Err(Error::InvalidArgument(format!(
                    "imported emulated allocation holds {have} bytes, {size} expected"
                )));
            }
            let host = fd
                .try_clone_to_owned()
                .map_err(|e| Error::InvalidArgument(format!("emulated memory: dup failed: {e}")))?;
            return Ok(Arc::new(PhysicalMem {
                handle: 0,
                size,
                device: emu::device_of(fd),
                share: Shareable::PosixFd,
                host: Some(host),
            }));
        }
        let mut handle = 0;
        // SAFETY: for POSIX fds the driver takes the descriptor value itself, cast to a
        // pointer; it only reads the descriptor (which `fd` keeps open) and does not take it.
        check("cuMemImportFromShareableHandle", unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd.as_raw_fd() as usize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        })?;
        // From here on `mem` owns the handle: any error below releases it.
        let mut mem = PhysicalMem {
            handle,
            size,
            device: -1,
            share: Shareable::PosixFd,
            host: None,
        };
        mem.device = handle_properties(handle)?.device()?;
        Ok(Arc::new(mem))
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
        return emu::lookup(ptr)
            .map(|(base, size, mem)| Allocation { base, size, mem })
            .ok_or_else(|| not_emulated_memory(ptr));
    }
    let (base, size) = address_range(ptr)?;
    let mut handle = 0;
    // SAFETY: `handle` is a valid out-pointer; the driver only looks the address up.
    let status =
        unsafe { sys::cuMemRetainAllocationHandle(&mut handle, ptr as *mut std::ffi::c_void) };
    check("cuMemRetainAllocationHandle", status).map_err(|e| not_vmm_memory(ptr, e))?;
    // From here on `mem` owns the retained handle: any error below releases it.
    let mut mem = PhysicalMem {
        handle,
        size,
        device: -1,
        share: Shareable::No,
        host: None,
    };
    let props = handle_properties(handle)?;
    mem.device = props.device()?;
    mem.share = props.shareable();
    Ok(Allocation {
        base,
        size,
        mem: Arc::new(mem),
    })
}

/// The start and size of the device allocation (for VMM: the mapping) containing `ptr`.
#[doc(alias = "cuMemGetAddressRange")]
pub fn address_range(ptr: u64) -> Result<(u64, usize)> {
    if backend()? == Backend::Emulated {
        return emu::lookup(ptr)
            .map(|(base, size, _)| (base, size))
            .ok_or_else(|| not_emulated_memory(ptr));
    }
    let (mut base, mut size) = (0, 0);
    // SAFETY: `base` and `size` are valid out-pointers; the driver only looks the address up.
    let status = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    check("cuMemGetAddressRange", status).map_err(|e| not_device_memory(ptr, e))?;
    Ok((base, size))
}

impl Drop for PhysicalMem {
    fn drop(&mut self) {
        if self.host.is_some() {
            return; // the memfd closes with `host`
        }
        // SAFETY: `handle` came from cuMemCreate and is released exactly once; every Mapping of
        // it holds an Arc to `self`, so none is still mapped here.
        if let Err(e) = check("cuMemRelease", unsafe { sys::cuMemRelease(self.handle) }) {
            tracing::warn!("{e}");
        }
    }
}

/// A reserved virtual address range; freed on drop.
#[derive(Debug)]
pub struct VaRange {
    base: sys::CUdeviceptr,
    size: usize,
    /// Emulated backend: an `mmap` reservation.
    emulated: bool,
}

impl VaRange {
    /// Reserves `size` bytes of device virtual address space aligned to `align` (0 = default).
    pub fn reserve(size: usize, align: usize) -> Result<Arc<Self>> {
        if size == 0 {
            return Err(Error::InvalidArgument("VA range size is 0".into()));
        }
        if backend()? == Backend::Emulated {
            return Ok(Arc::new(VaRange {
                base: emu::reserve(size, align)?,
                size,
                emulated: true,
            }));
        }
        let mut base = 0;
        // SAFETY: `base` is a valid out-pointer; no fixed address is requested.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut base, size, align, 0, 0)
        })?;
        Ok(Arc::new(VaRange {
            base,
            size,
            emulated: false,
        }))
    }

    /// The first address of the range.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for VaRange {
    fn drop(&mut self) {
        if self.emulated {
            // SAFETY: the reservation made in `reserve`; Mappings hold an Arc to `self`, so
            // nothing is mapped in it any more.
            unsafe { emu::release(self.base, self.size) };
            return;
        }
        // SAFETY: the range came from cuMemAddressReserve; Mappings hold an Arc to `self`, so
        // nothing is mapped in it any more.
        if let Err(e) = check("cuMemAddressFree", unsafe {
            sys::cuMemAddressFree(self.base, self.size)
        }) {
            tracing::warn!("{e}");
        }
    }
}

/// Physical memory mapped at `offset` inside a [`VaRange`], readable and writable by the
/// listed devices; unmapped on drop (before the range or memory can go away).
#[derive(Debug)]
pub struct Mapping {
    va: Arc<VaRange>,
    mem: Arc<PhysicalMem>,
    offset: usize,
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
        if va.emulated || mem.is_emulated() {
            let fd = match (&mem.host, va.emulated) {
                (Some(fd), true) => fd,
                _ => {
                    return Err(Error::InvalidArgument(
                        "cannot map emulated memory into a device VA range or vice versa".into(),
                    ));
                }
            };
            // SAFETY: the range lies inside the live reservation (checked above) and, as on
            // the GPU, the caller maps each part of a range once.
            unsafe { emu::map_fixed(ptr, mem.size(), std::os::fd::AsFd::as_fd(fd))? };
            emu::register(ptr, mem.size(), mem);
            return Ok(Mapping {
                va: Arc::clone(va),
                mem: Arc::clone(mem),
                offset,
            });
        }
        // SAFETY: [ptr, ptr + size) lies inside the reserved range (checked above) and the
        // handle is live for as long as `mem` is.
        check("cuMemMap", unsafe {
            sys::cuMemMap(ptr, mem.size(), 0, mem.raw(), 0)
        })?;
        let mapping = Mapping {
            va: Arc::clone(va),
            mem: Arc::clone(mem),
            offset,
        };
        // On error `mapping` is dropped here, which unmaps.
        mapping.set_access(devices)?;
        Ok(mapping)
    }

    fn set_access(&self, devices: &[i32]) -> Result<()> {
        let descs: Vec<sys::CUmemAccessDesc> = devices
            .iter()
            .map(|&d| {
                // SAFETY: CUmemAccessDesc is a plain C struct; all-zero is valid.
                let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
                desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                desc.location.id = d;
                desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                desc
            })
            .collect();
        // SAFETY: the range is mapped and `descs` holds `descs.len()` valid descriptors.
        check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(self.ptr(), self.size(), descs.as_ptr(), descs.len())
        })
    }

    /// The device address of the first mapped byte.
    pub fn ptr(&self) -> u64 {
        self.va.base() + self.offset as u64
    }

    /// Mapped bytes.
    pub fn size(&self) -> usize {
        self.mem.size()
    }

    /// The physical memory behind the mapping.
    pub fn memory(&self) -> &Arc<PhysicalMem> {
        &self.mem
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.va.emulated {
            emu::unregister(self.ptr());
            // SAFETY: exactly this range was mapped by `new`; it is unmapped once.
            unsafe { emu::unmap(self.ptr(), self.size()) };
            return;
        }
        // SAFETY: exactly this range was mapped by `new`; it is unmapped once.
        if let Err(e) = check("cuMemUnmap", unsafe {
            sys::cuMemUnmap(self.ptr(), self.size())
        }) {
            tracing::warn!("{e}");
        }
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
        if self.mapping.va.emulated {
            // SAFETY: the destination holds at least `bytes` mapped host bytes; `src` is a
            // valid slice of another allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr().cast::<u8>(),
                    self.device_ptr() as *mut u8,
                    bytes,
                )
            };
            return Ok(());
        }
        // SAFETY: the destination holds at least `bytes` mapped bytes; `src` is a valid slice.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.device_ptr(), src.as_ptr().cast(), bytes)
        })
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
        if self.mapping.va.emulated {
            // SAFETY: the source holds at least `bytes` mapped host bytes; `dst` is a valid
            // slice of another allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.device_ptr() as *const u8,
                    dst.as_mut_ptr().cast::<u8>(),
                    bytes,
                )
            };
            return Ok(());
        }
        // SAFETY: the source holds at least `bytes` mapped bytes; `dst` is a valid slice.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.device_ptr(), bytes)
        })
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
        if self.mapping.va.emulated {
            // SAFETY: `len` host bytes are mapped at device_ptr().
            unsafe { std::ptr::write_bytes(self.device_ptr() as *mut u8, value, self.len) };
            return Ok(());
        }
        let stream = super::Stream::new()?;
        // SAFETY: `len` bytes are mapped at device_ptr(); the stream lives across the call.
        // Waiting for the stream means that what follows (e.g. a peer writing into freshly
        // zeroed barrier inboxes after a registration barrier) can never be overwritten by it.
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(self.device_ptr(), value, self.len, stream.raw())
        })?;
        stream.synchronize()
    }
}

// Private helpers of the sharing API.

/// The driver's description of an allocation handle.
#[derive(Debug, Clone, Copy)]
struct HandleProperties {
    /// `CUmemLocationType` as a raw value (read without trusting it to be a known variant).
    location_type: u32,
    location_id: i32,
    /// `CUmemAllocationHandleType` bits requested at creation.
    handle_types: u32,
}

impl HandleProperties {
    /// The device the memory lives on; an error for host or other locations.
    fn device(&self) -> Result<i32> {
        if self.location_type == sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32 {
            Ok(self.location_id)
        } else {
            Err(Error::Unsupported {
                what: format!(
                    "allocation in location type {} (not device memory)",
                    self.location_type
                ),
                hint: "symmetric windows need device memory from cuMemCreate".into(),
            })
        }
    }

    fn shareable(&self) -> Shareable {
        let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
        if self.handle_types & posix != 0 {
            Shareable::PosixFd
        } else {
            Shareable::No
        }
    }
}

fn handle_properties(handle: sys::CUmemGenericAllocationHandle) -> Result<HandleProperties> {
    let mut prop = std::mem::MaybeUninit::<sys::CUmemAllocationProp>::zeroed();
    // SAFETY: `prop` is writable storage for one CUmemAllocationProp; the handle is live.
    check("cuMemGetAllocationPropertiesFromHandle", unsafe {
        sys::cuMemGetAllocationPropertiesFromHandle(prop.as_mut_ptr(), handle)
    })?;
    let p = prop.as_ptr();
    // SAFETY: the storage was zeroed and then filled by the driver, so every field holds
    // initialised bytes. The location type and handle types are read as raw integers
    // (both are 32-bit C enums) rather than as Rust enums, so a value this binding does not
    // know (a newer driver) cannot produce an invalid enum.
    unsafe {
        Ok(HandleProperties {
            location_type: std::ptr::addr_of!((*p).location.type_).cast::<u32>().read(),
            location_id: std::ptr::addr_of!((*p).location.id).read(),
            handle_types: std::ptr::addr_of!((*p).requestedHandleTypes)
                .cast::<u32>()
                .read(),
        })
    }
}

/// For driver codes that mean "this address is not what the lookup expects" (as opposed to a
/// broken driver or context): `call returned CODE`, formatted without calling into the driver.
fn lookup_miss(e: &Error) -> Option<String> {
    use sys::CUresult::*;
    match e {
        Error::Cuda {
            call,
            code:
                code @ (CUDA_ERROR_INVALID_VALUE
                | CUDA_ERROR_NOT_FOUND
                | CUDA_ERROR_NOT_SUPPORTED
                | CUDA_ERROR_NOT_PERMITTED),
        } => Some(format!("{call} returned {code:?}")),
        _ => None,
    }
}

fn not_device_memory(ptr: u64, e: Error) -> Error {
    match lookup_miss(&e) {
        Some(why) => Error::InvalidArgument(format!(
            "address {ptr:#x} is not device memory known to CUDA ({why})"
        )),
        None => e,
    }
}

fn not_emulated_memory(ptr: u64) -> Error {
    Error::InvalidArgument(format!(
        "address {ptr:#x} is not emulated device memory (allocate it with \
         SymmetricMemory::alloc or VmmBuffer)"
    ))
}

fn not_vmm_memory(ptr: u64, e: Error) -> Error {
    match lookup_miss(&e) {
        Some(why) => Error::InvalidArgument(format!(
            "address {ptr:#x} is not memory from the CUDA VMM API ({why}); allocate it with cuMemCreate + cuMemMap (SymmetricMemory::alloc), not cudaMalloc or a memory pool"
        )),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cuda_error(call: &'static str, code: sys::CUresult) -> Error {
        Error::Cuda { call, code }
    }

    #[test]
    fn non_vmm_pointers_get_a_clear_error_but_driver_failures_pass_through() {
        let miss = cuda_error(
            "cuMemRetainAllocationHandle",
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        );
        let msg = not_vmm_memory(0x7f00_0000_1000, miss).to_string();
        assert!(
            msg.starts_with(
                "invalid argument: address 0x7f0000001000 is not memory from the CUDA VMM API"
            ),
            "{msg}"
        );
        assert!(msg.contains("not cudaMalloc"), "{msg}");
        assert!(
            msg.contains("(cuMemRetainAllocationHandle returned CUDA_ERROR_INVALID_VALUE)"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
        let broken = cuda_error(
            "cuMemRetainAllocationHandle",
            sys::CUresult::CUDA_ERROR_NOT_INITIALIZED,
        );
        assert!(matches!(not_vmm_memory(1, broken), Error::Cuda { .. }));
        let miss = cuda_error("cuMemGetAddressRange", sys::CUresult::CUDA_ERROR_NOT_FOUND);
        assert!(
            not_device_memory(0x10, miss)
                .to_string()
                .contains("0x10 is not device memory")
        );
        let broken = cuda_error(
            "cuMemGetAddressRange",
            sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        );
        assert!(matches!(not_device_memory(1, broken), Error::Cuda { .. }));
    }

    #[test]
    fn handle_properties_decode_location_and_shareability() {
        let device = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32;
        let fd_bits = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
        let p = HandleProperties {
            location_type: device,
            location_id: 3,
            handle_types: fd_bits | 8,
        };
        assert_eq!(p.device().unwrap(), 3);
        assert_eq!(p.shareable(), Shareable::PosixFd);
        let p = HandleProperties {
            location_type: device,
            location_id: 0,
            handle_types: 8,
        };
        assert_eq!(p.shareable(), Shareable::No);
        let host = HandleProperties {
            location_type: 2,
            location_id: 0,
            handle_types: 0,
        };
        assert!(matches!(host.device(), Err(Error::Unsupported { .. })));
        let unknown = HandleProperties {
            location_type: 77,
            location_id: 0,
            handle_types: 0,
        };
        assert!(
            unknown
                .device()
                .unwrap_err()
                .to_string()
                .contains("location type 77")
        );
    }

    #[test]
    fn sizes_round_up_to_the_granule() {
        assert_eq!(round_up(1, 2 << 20).unwrap(), 2 << 20);
        assert_eq!(round_up(2 << 20, 2 << 20).unwrap(), 2 << 20);
        assert_eq!(round_up((2 << 20) + 1, 2 << 20).unwrap(), 4 << 20);
        assert!(round_up(0, 4096).is_err());
        assert!(round_up(usize::MAX, 4096).is_err());
    }

    // --- GPU checks (run with `cargo test -p symcomm -- --ignored gpu_`) ---------------------

    const GPU_CHILD_ENV: &str = "SYMCOMM_GPU_TEST_CHILD";

    fn write_words(ptr: u64, words: &[u32]) {
        // SAFETY: the caller passes a mapped device range of at least `words.len()` u32s.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(ptr, words.as_ptr().cast(), std::mem::size_of_val(words))
        })
        .unwrap();
    }

    fn read_words(ptr: u64, n: usize) -> Vec<u32> {
        let mut out = vec![0u32; n];
        // SAFETY: the caller passes a mapped device range of at least `n` u32s.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptr, n * 4)
        })
        .unwrap();
        out
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn gpu_exported_memory_imports_maps_and_is_found_from_pointers() {
        use crate::cuda::{device, open_device};
        let _ctx = open_device(0).unwrap();
        let total = device::total_memory(0).unwrap();
        assert!(total > 1 << 30, "total memory {total}");
        device::require_symmetric_memory_support(0).unwrap();
        assert!(device::can_access_peer(0, 0).unwrap());
        let mem = PhysicalMem::new(0, 3 << 20, Shareable::PosixFd).unwrap();
        let va = VaRange::reserve(mem.size(), 0).unwrap();
        let map = Mapping::new(&va, 0, &mem, &[0]).unwrap();
        let words: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(2654435761)).collect();
        write_words(map.ptr(), &words);

        // Pointer → allocation, as window registration does it.
        let found = find_allocation(map.ptr() + 8192).unwrap();
        assert_eq!((found.base, found.size), (map.ptr(), mem.size()));
        assert_eq!(found.mem.device(), 0);
        assert_eq!(found.mem.shareable(), Shareable::PosixFd);
        let off = crate::symmem::window_offset_in_alloc(
            map.ptr() + 8192,
            4096,
            found.base,
            found.size as u64,
        );
        assert_eq!(off.unwrap(), 8192);
        drop(found);

        // Export → import → second mapping of the same physical memory.
        let fd = mem.export_fd().unwrap();
        let imported = PhysicalMem::import_fd(std::os::fd::AsFd::as_fd(&fd), mem.size()).unwrap();
        drop(fd);
        assert_eq!(imported.device(), 0);
        let va2 = VaRange::reserve(imported.size(), 0).unwrap();
        let map2 = Mapping::new(&va2, 0, &imported, &[0]).unwrap();
        assert_eq!(read_words(map2.ptr(), words.len()), words);
        write_words(map2.ptr() + 4, &[0xdead_beef]);
        assert_eq!(read_words(map.ptr(), 2), [words[0], 0xdead_beef]);

        // Non-VMM memory and non-device addresses are errors, not crashes.
        let mut legacy = 0;
        // SAFETY: valid out-pointer, context current.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut legacy, 1 << 20)
        })
        .unwrap();
        let err = find_allocation(legacy + 4096).unwrap_err();
        println!("cuMemAlloc pointer: {err}");
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("not memory from the CUDA VMM API")),
            "{err}"
        );
        // SAFETY: freeing what cuMemAlloc returned.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(legacy) }).unwrap();
        let err = find_allocation(0x1000).unwrap_err();
        println!("host address: {err}");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        let local = PhysicalMem::new(0, 1, Shareable::No).unwrap();
        assert!(matches!(local.export_fd(), Err(Error::InvalidArgument(_))));
    }

    /// Not a test on its own: the importing process of
    /// `gpu_memory_crosses_processes_through_the_fd_server`.
    #[test]
    #[ignore = "helper process of gpu_memory_crosses_processes_through_the_fd_server"]
    fn gpu_child_importer() {
        let Ok(spec) = std::env::var(GPU_CHILD_ENV) else {
            return;
        };
        let v: Vec<u64> = spec.split(',').map(|x| x.parse().unwrap()).collect();
        let (id, size, dev) = (v[0], v[1] as usize, v[2] as i32);
        let _ctx = crate::cuda::open_device(dev as usize).unwrap();
        let fd = crate::ipc::fetch_fd(id, 1, 0, 1, std::time::Duration::from_secs(10)).unwrap();
        let mem = PhysicalMem::import_fd(std::os::fd::AsFd::as_fd(&fd), size).unwrap();
        drop(fd);
        let va = VaRange::reserve(mem.size(), 0).unwrap();
        let map = Mapping::new(&va, 0, &mem, &[dev]).unwrap();
        let got = read_words(map.ptr(), 1024);
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, &w)| w == 0x5eed_0000 + i as u32),
            "child read wrong data"
        );
        write_words(map.ptr() + 4096, &[0xc0ff_ee00; 16]);
        println!("SYMCOMM-GPU-CHILD ok device {dev}");
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn gpu_memory_crosses_processes_through_the_fd_server() {
        use std::process::{Command, Stdio};
        let n_dev = crate::cuda::device_count().unwrap();
        let child_dev = if n_dev > 1 { 1 } else { 0 };
        let _ctx = crate::cuda::open_device(0).unwrap();
        let mem = PhysicalMem::new(0, 2 << 20, Shareable::PosixFd).unwrap();
        let va = VaRange::reserve(mem.size(), 0).unwrap();
        let map = Mapping::new(&va, 0, &mem, &[0]).unwrap();
        let words: Vec<u32> = (0..1024u32).map(|i| 0x5eed_0000 + i).collect();
        write_words(map.ptr(), &words);
        let id = (std::process::id() as u64) << 32 | 0x6a;
        let server = crate::ipc::FdServer::bind(id, 0).unwrap();
        server.publish(1, mem.export_fd().unwrap()).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cuda::vmm::tests::gpu_child_importer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(GPU_CHILD_ENV, format!("{id},{},{child_dev}", mem.size()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            out.status.success() && stdout.contains("SYMCOMM-GPU-CHILD ok"),
            "child failed: {stdout}"
        );
        // The child's write into the shared physical memory is visible here.
        assert_eq!(read_words(map.ptr() + 4096, 16), [0xc0ff_ee00; 16]);
        assert_eq!(read_words(map.ptr(), 1024), words);
    }
}
