//! The emulated backend's memory primitives (see [`crate::backend`]): host memory standing in
//! for device memory, with the same shapes as the VMM API.
//!
//! - physical memory is a memfd (`memfd_create` + `ftruncate`), named after its device so an
//!   importer can tell where it "lives"; exporting it is a `dup`, importing one is keeping the
//!   received descriptor;
//! - a VA reservation is `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`, so
//!   reserving `lsa_size × 4 GiB` commits nothing;
//! - a mapping is `mmap(MAP_FIXED | MAP_SHARED)` of the memfd inside a reservation; unmapping
//!   maps `PROT_NONE` anonymous memory back over it, so the reservation stays whole;
//! - [`register`]/[`lookup`] keep the live mappings by address range (the emulated
//!   `cuMemRetainAllocationHandle` / `cuMemGetAddressRange`).
//!
//! Everything here is plain POSIX; errors name the call and carry `errno`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use super::vmm::PhysicalMem;
use crate::{Error, Result};

fn os_error(call: &str) -> Error {
    Error::InvalidArgument(format!(
        "emulated memory: {call} failed: {}",
        std::io::Error::last_os_error()
    ))
}

/// Creates a memfd of `size` bytes for "device" `device`.
pub(crate) fn create(device: i32, size: usize) -> Result<OwnedFd> {
    let name = CString::new(format!("symcomm-emu-dev{device}"))
        .map_err(|_| Error::InvalidArgument("memfd name".into()))?;
    // SAFETY: `name` is a valid NUL-terminated string; the flags are valid.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os_error("memfd_create"));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(size)
        .map_err(|_| Error::InvalidArgument(format!("allocation size {size} too large")))?;
    // SAFETY: `fd` is a live memfd.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(os_error("ftruncate"));
    }
    Ok(fd)
}

/// The size of the file behind `fd`.
pub(crate) fn file_size(fd: BorrowedFd<'_>) -> Result<usize> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is live and `st` a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(os_error("fstat"));
    }
    usize::try_from(st.st_size).map_err(|_| Error::InvalidArgument("negative file size".into()))
}

/// The device a memfd made by [`create`] belongs to (from its name), or -1.
pub(crate) fn device_of(fd: BorrowedFd<'_>) -> i32 {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    link.ok()
        .and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            let rest = s.split("symcomm-emu-dev").nth(1)?.to_owned();
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(-1)
}

/// Reserves `size` bytes of inaccessible address space aligned to `align` (a power of two or 0).
pub(crate) fn reserve(size: usize, align: usize) -> Result<u64> {
    let align = align.max(page_size());
    if !align.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "VA alignment {align} is not a power of two"
        )));
    }
    let padded = size
        .checked_add(align)
        .ok_or_else(|| Error::InvalidArgument(format!("VA range of {size} bytes overflows")))?;
    // SAFETY: a fresh anonymous reservation at an address of the kernel's choosing.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            padded,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(os_error("mmap (reserve)"));
    }
    let start = raw as usize;
    let base = start.next_multiple_of(align);
    let (head, tail) = (base - start, start + padded - (base + size));
    // SAFETY: both trimmed pieces lie inside the reservation made above and are not in use.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((base + size) as *mut libc::c_void, tail);
        }
    }
    Ok(base as u64)
}

/// Releases a reservation made by [`reserve`].
///
/// # Safety
/// `[base, base + size)` is exactly one reservation from [`reserve`], no longer in use.
pub(crate) unsafe fn release(base: u64, size: usize) {
    // SAFETY: the caller's contract.
    if unsafe { libc::munmap(base as *mut libc::c_void, size) } != 0 {
        tracing::warn!("{}", os_error("munmap"));
    }
}

/// Maps all `size` bytes of `fd` read/write and shared at `addr`.
///
/// # Safety
/// `[addr, addr + size)` lies inside a live reservation and holds no other mapping.
pub(crate) unsafe fn map_fixed(addr: u64, size: usize, fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: the caller guarantees the range is ours to replace; `fd` is live.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_error("mmap (map)"));
    }
    Ok(())
}

/// Puts the reservation back over `[addr, addr + size)` (the mapping there goes away).
///
/// # Safety
/// The range is a mapping made by [`map_fixed`] that nothing uses any more.
pub(crate) unsafe fn unmap(addr: u64, size: usize) {
    // SAFETY: the caller's contract; MAP_FIXED replaces exactly that range.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        tracing::warn!("{}", os_error("mmap (unmap)"));
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}

/// One live mapping: `[base, base + size)` shows `mem`.
struct Entry {
    base: u64,
    size: usize,
    mem: Weak<PhysicalMem>,
}

static MAPPINGS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn mappings() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    // A panic while holding the lock leaves the list consistent (every update is one push or
    // one retain), so a poisoned lock is still usable.
    MAPPINGS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that `[base, base + size)` maps `mem`.
pub(crate) fn register(base: u64, size: usize, mem: &Arc<PhysicalMem>) {
    mappings().push(Entry {
        base,
        size,
        mem: Arc::downgrade(mem),
    });
}

/// Forgets the mapping at `base`.
pub(crate) fn unregister(base: u64) {
    mappings().retain(|e| e.base != base);
}

/// The mapping containing `ptr`: its base, size and memory.
pub(crate) fn lookup(ptr: u64) -> Option<(u64, usize, Arc<PhysicalMem>)> {
    mappings().iter().find_map(|e| {
        let inside = ptr >= e.base && ptr - e.base < e.size as u64;
        inside
            .then(|| e.mem.upgrade().map(|m| (e.base, e.size, m)))
            .flatten()
    })
}
