//! The GPU backend of [`vmm`](super): one RAII type per driver object, each built on the
//! checked calls of [`driver`] and undoing exactly its own call on drop.

use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::sys;

use super::Shareable;
use crate::cuda::driver;
use crate::{Error, Result};

/// A physical allocation handle (`cuMemCreate`, imported, retained or a multicast object),
/// released once with `cuMemRelease` on drop.
#[derive(Debug)]
pub(super) struct DeviceMem {
    handle: sys::CUmemGenericAllocationHandle,
}

impl DeviceMem {
    /// Allocates `size` bytes (a multiple of the granularity) of pinned memory on `device`.
    pub(super) fn create(device: i32, size: usize, share: Shareable) -> Result<DeviceMem> {
        let handle = driver::mem_create(size, &alloc_prop(device, share))?;
        Ok(DeviceMem { handle })
    }

    /// Takes ownership of a handle the driver returned.
    pub(super) fn from_owned(handle: sys::CUmemGenericAllocationHandle) -> DeviceMem {
        DeviceMem { handle }
    }

    /// Imports a peer's exported descriptor; returns the handle and the device it lives on.
    pub(super) fn import_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<(DeviceMem, i32)> {
        // From here on `mem` owns the handle: any error below releases it.
        let mem = DeviceMem::from_owned(driver::mem_import_from_posix_fd(fd)?);
        let device = mem.properties()?.device()?;
        Ok((mem, device))
    }

    /// Retains the allocation mapped at `ptr`; the handle with its device and shareability.
    /// Memory that is not VMM memory gets a clear [`Error::InvalidArgument`].
    pub(super) fn retain(ptr: u64) -> Result<(DeviceMem, i32, Shareable)> {
        let handle =
            driver::mem_retain_allocation_handle(ptr).map_err(|e| not_vmm_memory(ptr, e))?;
        // From here on `mem` owns the retained handle: any error below releases it.
        let mem = DeviceMem::from_owned(handle);
        let props = mem.properties()?;
        Ok((mem, props.device()?, props.shareable()))
    }

    /// The raw handle (stays owned by `self`).
    pub(super) fn raw(&self) -> sys::CUmemGenericAllocationHandle {
        self.handle
    }

    /// A new POSIX descriptor of the memory, owned by the caller.
    pub(super) fn export_fd(&self) -> Result<OwnedFd> {
        // SAFETY: the handle is live (owned by `self`).
        let fd = unsafe { driver::mem_export_to_posix_fd(self.handle) }?;
        // SAFETY: the driver returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn properties(&self) -> Result<HandleProperties> {
        // SAFETY: the handle is live (owned by `self`).
        let prop = unsafe { driver::mem_get_allocation_properties(self.handle) }?;
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
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: the handle is owned by `self` and released exactly once. Mappings through
        // this handle hold an Arc to the PhysicalMem that owns `self`, so none is left; other
        // mappings of the same memory (a retained or imported handle's) keep the physical
        // memory alive, as the driver counts them.
        if let Err(e) = unsafe { driver::mem_release(self.handle) } {
            tracing::warn!("{e}");
        }
    }
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

/// The recommended allocation granularity of pinned memory on `device`.
pub(super) fn granularity(device: i32, share: Shareable) -> Result<usize> {
    let g = driver::mem_get_allocation_granularity(&alloc_prop(device, share))?;
    if g == 0 {
        return Err(Error::Unsupported {
            what: "VMM allocation granularity reported as 0".into(),
            hint: "the driver does not support cuMemCreate on this device".into(),
        });
    }
    Ok(g)
}

/// The start and size of the device allocation containing `ptr`.
pub(super) fn address_range(ptr: u64) -> Result<(u64, usize)> {
    driver::mem_get_address_range(ptr).map_err(|e| not_device_memory(ptr, e))
}

/// A reserved device address range, freed with `cuMemAddressFree` on drop.
#[derive(Debug)]
pub(super) struct DeviceVa {
    pub(super) base: u64,
    pub(super) size: usize,
}

impl DeviceVa {
    pub(super) fn reserve(size: usize, align: usize) -> Result<DeviceVa> {
        let base = driver::mem_address_reserve(size, align)?;
        Ok(DeviceVa { base, size })
    }
}

impl Drop for DeviceVa {
    fn drop(&mut self) {
        // SAFETY: the range came from cuMemAddressReserve and is freed once; Mappings hold an
        // Arc to the VaRange that owns `self`, so nothing is mapped in it any more.
        if let Err(e) = unsafe { driver::mem_address_free(self.base, self.size) } {
            tracing::warn!("{e}");
        }
    }
}

/// Physical memory mapped at `ptr` with access set, unmapped with `cuMemUnmap` on drop.
#[derive(Debug)]
pub(super) struct DeviceMapping {
    ptr: u64,
    size: usize,
}

impl DeviceMapping {
    /// Maps all `size` bytes of `mem` at `ptr` and grants read/write access to `devices` (the
    /// driver refuses a range that is already mapped).
    ///
    /// # Safety
    /// `[ptr, ptr + size)` lies inside a live reservation that outlives the mapping, and `mem`
    /// is `size` bytes long and outlives the mapping.
    pub(super) unsafe fn map(
        ptr: u64,
        size: usize,
        mem: &DeviceMem,
        devices: &[i32],
    ) -> Result<DeviceMapping> {
        // SAFETY: the caller's contract.
        unsafe { driver::mem_map(ptr, size, mem.raw()) }?;
        // On error `mapping` is dropped here, which unmaps.
        let mapping = DeviceMapping { ptr, size };
        // SAFETY: the range is mapped (just above).
        unsafe { driver::mem_set_access(ptr, size, devices) }?;
        Ok(mapping)
    }
}

impl DeviceMapping {
    /// The address of the first mapped byte.
    pub(super) fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for DeviceMapping {
    fn drop(&mut self) {
        // SAFETY: exactly this range was mapped by `map`; it is unmapped once.
        if let Err(e) = unsafe { driver::mem_unmap(self.ptr, self.size) } {
            tracing::warn!("{e}");
        }
    }
}

/// The driver's description of an allocation handle.
#[derive(Debug, Clone, Copy)]
pub(super) struct HandleProperties {
    /// `CUmemLocationType` as a raw value (read without trusting it to be a known variant).
    pub(super) location_type: u32,
    pub(super) location_id: i32,
    /// `CUmemAllocationHandleType` bits requested at creation.
    pub(super) handle_types: u32,
}

impl HandleProperties {
    /// The device the memory lives on; an error for host or other locations.
    pub(super) fn device(&self) -> Result<i32> {
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

    pub(super) fn shareable(&self) -> Shareable {
        let posix = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
        if self.handle_types & posix != 0 {
            Shareable::PosixFd
        } else {
            Shareable::No
        }
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

pub(super) fn not_device_memory(ptr: u64, e: Error) -> Error {
    match lookup_miss(&e) {
        Some(why) => Error::InvalidArgument(format!(
            "address {ptr:#x} is not device memory known to CUDA ({why})"
        )),
        None => e,
    }
}

pub(super) fn not_vmm_memory(ptr: u64, e: Error) -> Error {
    match lookup_miss(&e) {
        Some(why) => Error::InvalidArgument(format!(
            "address {ptr:#x} is not memory from the CUDA VMM API ({why}); allocate it with cuMemCreate + cuMemMap (SymmetricMemory::alloc), not cudaMalloc or a memory pool"
        )),
        None => e,
    }
}
