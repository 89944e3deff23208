//! The emulated backend of [`vmm`](super): host memory through the calls of [`memfd`], one
//! RAII type per resource, the registry of live mappings that stands in for the driver's
//! address lookups (`cuMemRetainAllocationHandle`, `cuMemGetAddressRange`), and the count of
//! live physical memory that holds it to the emulated device's capacity
//! ([`crate::backend::emulated_device_memory`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::PhysicalMem;
use crate::backend::{EMU_DEVICE_MEMORY_ENV, emulated_device_memory};
use crate::cuda::memfd;
use crate::{Error, Result};

/// Emulated physical memory: a memfd, closed on drop. Memory created here holds its bytes of
/// the process's capacity until then; imported memory is the exporter's and holds none.
#[derive(Debug)]
pub(super) struct HostMem {
    fd: OwnedFd,
    _charge: Option<Charge>,
}

impl HostMem {
    /// A memfd of `size` bytes for `device`, or [`Error::OutOfMemory`] (before anything is
    /// created) when the live memory of this process would exceed the emulated capacity.
    pub(super) fn create(device: i32, size: usize) -> Result<HostMem> {
        let charge = Charge::take(device, size, emulated_device_memory()?)?;
        Ok(HostMem {
            fd: memfd::mem_create(device, size)?,
            _charge: Some(charge),
        })
    }

    /// Keeps a duplicate of a peer's memfd of at least `size` bytes; returns it with the
    /// device it was made for.
    pub(super) fn import_fd(fd: BorrowedFd<'_>, size: usize) -> Result<(HostMem, i32)> {
        let (fd, device) = memfd::mem_import_from_posix_fd(fd, size)?;
        Ok((HostMem { fd, _charge: None }, device))
    }

    pub(super) fn export_fd(&self) -> Result<OwnedFd> {
        memfd::mem_export_to_posix_fd(self.fd.as_fd())
    }
}

/// Bytes of emulated physical memory this process created that are still alive.
static IN_USE: AtomicU64 = AtomicU64::new(0);

/// `bytes` of the emulated capacity, taken from [`IN_USE`] and given back on drop.
#[derive(Debug)]
struct Charge {
    bytes: u64,
}

impl Charge {
    /// Takes `bytes` for `device` if the live total stays within `capacity`.
    fn take(device: i32, bytes: usize, capacity: u64) -> Result<Charge> {
        let bytes = bytes as u64;
        // Relaxed: the counter publishes no other memory; the read-modify-write alone keeps
        // concurrent allocations from both taking the last bytes.
        IN_USE
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= capacity)
            })
            .map(|_| Charge { bytes })
            .map_err(|in_use| Error::OutOfMemory {
                device,
                requested: bytes,
                in_use,
                capacity,
                hint: format!(
                    "the emulated device's memory, counted over this process; \
                     {EMU_DEVICE_MEMORY_ENV} sets it"
                ),
            })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        IN_USE.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// An emulated VA reservation (`mmap(PROT_NONE)`), released on drop.
#[derive(Debug)]
pub(super) struct HostVa {
    pub(super) base: u64,
    pub(super) size: usize,
}

impl HostVa {
    pub(super) fn reserve(size: usize, align: usize) -> Result<HostVa> {
        let base = memfd::mem_address_reserve(size, align)?;
        Ok(HostVa { base, size })
    }
}

impl Drop for HostVa {
    fn drop(&mut self) {
        // SAFETY: the reservation made in `reserve`, released once; Mappings hold an Arc to the
        // VaRange that owns `self`, so nothing is mapped in it any more.
        if let Err(e) = unsafe { memfd::mem_address_free(self.base, self.size) } {
            tracing::warn!("{e}");
        }
    }
}

/// A memfd mapped at `ptr` and recorded in the registry; unrecorded and unmapped on drop.
#[derive(Debug)]
pub(super) struct HostMapping {
    ptr: u64,
    size: usize,
}

impl HostMapping {
    /// Maps all of `mem` (backed by `host`) at `ptr` and records the mapping; refuses, as the
    /// driver does, a range that overlaps a live mapping (`MAP_FIXED` would replace it).
    ///
    /// # Safety
    /// `[ptr, ptr + mem.size())` lies inside a live emulated reservation that outlives the
    /// mapping.
    pub(super) unsafe fn map(
        ptr: u64,
        mem: &Arc<PhysicalMem>,
        host: &HostMem,
    ) -> Result<HostMapping> {
        let size = mem.size();
        let mut live = mappings();
        let end = ptr.saturating_add(size as u64);
        if let Some(e) = live
            .iter()
            .find(|e| ptr < e.base.saturating_add(e.size as u64) && e.base < end)
        {
            return Err(Error::InvalidArgument(format!(
                "mapping {size} bytes at {ptr:#x} overlaps the live mapping of {} bytes at {:#x}",
                e.size, e.base
            )));
        }
        // SAFETY: the range lies in a live reservation (the caller's contract) and holds no
        // live mapping (checked above, under the registry's lock).
        unsafe { memfd::mem_map(ptr, size, host.fd.as_fd()) }?;
        live.push(Entry {
            base: ptr,
            size,
            mem: Arc::downgrade(mem),
        });
        Ok(HostMapping { ptr, size })
    }
}

impl HostMapping {
    /// The address of the first mapped byte.
    pub(super) fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        mappings().retain(|e| e.base != self.ptr);
        // SAFETY: exactly this range was mapped by `map`; it is unmapped once.
        if let Err(e) = unsafe { memfd::mem_unmap(self.ptr, self.size) } {
            tracing::warn!("{e}");
        }
    }
}

/// One live mapping: `[base, base + size)` shows `mem`.
struct Entry {
    base: u64,
    size: usize,
    mem: Weak<PhysicalMem>,
}

static MAPPINGS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn mappings() -> MutexGuard<'static, Vec<Entry>> {
    // A panic while holding the lock leaves the list consistent (every update is one push or
    // one retain), so a poisoned lock is still usable.
    MAPPINGS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mapping containing `ptr`: its base, size and memory (the emulated
/// `cuMemGetAddressRange` + `cuMemRetainAllocationHandle`).
pub(super) fn lookup(ptr: u64) -> Result<(u64, usize, Arc<PhysicalMem>)> {
    mappings()
        .iter()
        .find_map(|e| {
            let inside = ptr >= e.base && ptr - e.base < e.size as u64;
            inside
                .then(|| e.mem.upgrade().map(|m| (e.base, e.size, m)))
                .flatten()
        })
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "address {ptr:#x} is not emulated device memory (allocate it with \
                 SymmetricMemory::alloc or VmmBuffer)"
            ))
        })
}
