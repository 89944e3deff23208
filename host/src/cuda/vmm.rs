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
//! The calls need the device's context current on the calling thread (see
//! [`crate::cuda::open_device`]).

use std::sync::Arc;

use cudarc::driver::sys;

use super::check;
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

/// Physical device memory from `cuMemCreate`; released on drop.
#[derive(Debug)]
pub struct PhysicalMem {
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
    device: i32,
    share: Shareable,
}

impl PhysicalMem {
    /// Allocates at least `bytes` of pinned memory on `device`, rounded up to the granularity.
    pub fn new(device: i32, bytes: usize, share: Shareable) -> Result<Arc<Self>> {
        let size = round_up(bytes, granularity(device, share)?)?;
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
        }))
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

    /// The raw driver handle (stays owned by `self`).
    pub fn raw(&self) -> sys::CUmemGenericAllocationHandle {
        self.handle
    }
}

impl Drop for PhysicalMem {
    fn drop(&mut self) {
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
}

impl VaRange {
    /// Reserves `size` bytes of device virtual address space aligned to `align` (0 = default).
    pub fn reserve(size: usize, align: usize) -> Result<Arc<Self>> {
        if size == 0 {
            return Err(Error::InvalidArgument("VA range size is 0".into()));
        }
        let mut base = 0;
        // SAFETY: `base` is a valid out-pointer; no fixed address is requested.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut base, size, align, 0, 0)
        })?;
        Ok(Arc::new(VaRange { base, size }))
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
        let mem = PhysicalMem::new(device, bytes, Shareable::No)?;
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
        // SAFETY: the source holds at least `bytes` mapped bytes; `dst` is a valid slice.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.device_ptr(), bytes)
        })
    }

    /// Sets every byte of the buffer to `value` (synchronous), e.g. to poison outputs.
    pub fn fill_bytes(&self, value: u8) -> Result<()> {
        // SAFETY: `len` bytes are mapped at device_ptr().
        check("cuMemsetD8", unsafe {
            sys::cuMemsetD8_v2(self.device_ptr(), value, self.len)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_the_granule() {
        assert_eq!(round_up(1, 2 << 20).unwrap(), 2 << 20);
        assert_eq!(round_up(2 << 20, 2 << 20).unwrap(), 2 << 20);
        assert_eq!(round_up((2 << 20) + 1, 2 << 20).unwrap(), 4 << 20);
        assert!(round_up(0, 4096).is_err());
        assert!(round_up(usize::MAX, 4096).is_err());
    }
}
