//! The emulation layer: the memory calls of [`driver`](super::driver) done with plain POSIX,
//! host memory standing in for device memory (the emulated backend, [`crate::backend`]).
//!
//! Same function names and shapes as the driver layer, so the two backends of
//! [`vmm`](super::vmm) and [`memory`](super::memory) read alike:
//! - physical memory is a memfd (`memfd_create` + `ftruncate`), named after its device so an
//!   importer can tell where it "lives"; exporting it is a `dup`, importing one is keeping a
//!   duplicate of the received descriptor;
//! - a VA reservation is `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)`, so
//!   reserving `lsa_size × 4 GiB` commits nothing;
//! - a mapping is `mmap(MAP_FIXED | MAP_SHARED)` of the memfd inside a reservation; unmapping
//!   maps `PROT_NONE` anonymous memory back over it, so the reservation stays whole;
//! - copies and fills are plain memory operations.
//!
//! OS failures name the call and carry `errno` ([`Error::Io`]); sizes and alignments the
//! caller passed are checked first ([`Error::InvalidArgument`]).

use std::ffi::{CString, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::{Error, Result};

fn os_error(call: &str) -> Error {
    Error::Io {
        what: format!("emulated memory: {call}"),
        source: io::Error::last_os_error(),
    }
}

/// A memfd of `size` bytes for "device" `device` (the emulated `cuMemCreate`).
pub(crate) fn mem_create(device: i32, size: usize) -> Result<OwnedFd> {
    let name = CString::new(format!("symcomm-emu-dev{device}"))
        .map_err(|_| Error::Internal("memfd name contains NUL".into()))?;
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

/// A new descriptor of the same memfd (the emulated `cuMemExportToShareableHandle`).
pub(crate) fn mem_export_to_posix_fd(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    fd.try_clone_to_owned().map_err(|source| Error::Io {
        what: "emulated memory: dup".into(),
        source,
    })
}

/// Keeps a duplicate of a received memfd of at least `size` bytes, and the device it was made
/// for (the emulated `cuMemImportFromShareableHandle`; -1 when the name says none).
pub(crate) fn mem_import_from_posix_fd(fd: BorrowedFd<'_>, size: usize) -> Result<(OwnedFd, i32)> {
    let have = file_size(fd)?;
    if have < size {
        return Err(Error::InvalidArgument(format!(
            "imported emulated allocation holds {have} bytes, {size} expected"
        )));
    }
    Ok((mem_export_to_posix_fd(fd)?, device_of(fd)))
}

/// The size of the file behind `fd`.
fn file_size(fd: BorrowedFd<'_>) -> Result<usize> {
    // SAFETY: an all-zero stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is live and `st` a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(os_error("fstat"));
    }
    usize::try_from(st.st_size)
        .map_err(|_| Error::Internal("fstat returned a negative size".into()))
}

/// The device a memfd made by [`mem_create`] belongs to (from its name), or -1.
fn device_of(fd: BorrowedFd<'_>) -> i32 {
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

/// Reserves `size` bytes of inaccessible address space aligned to `align` (a power of two or
/// 0) (the emulated `cuMemAddressReserve`).
pub(crate) fn mem_address_reserve(size: usize, align: usize) -> Result<u64> {
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
            libc::munmap((base + size) as *mut c_void, tail);
        }
    }
    Ok(base as u64)
}

/// Releases a reservation (the emulated `cuMemAddressFree`).
///
/// # Safety
/// `[base, base + size)` is exactly one reservation from [`mem_address_reserve`], freed once,
/// with nothing mapped in it any more.
pub(crate) unsafe fn mem_address_free(base: u64, size: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    if unsafe { libc::munmap(base as *mut c_void, size) } != 0 {
        return Err(os_error("munmap"));
    }
    Ok(())
}

/// Maps all `size` bytes of `fd` read/write and shared at `addr` (the emulated `cuMemMap` +
/// `cuMemSetAccess`). Unlike the driver, `mmap(MAP_FIXED)` silently replaces what is mapped
/// there: the caller checks that first.
///
/// # Safety
/// `[addr, addr + size)` lies inside a live reservation and holds no other mapping.
pub(crate) unsafe fn mem_map(addr: u64, size: usize, fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: the caller guarantees the range is ours to replace; `fd` is live.
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
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

/// Puts the reservation back over `[addr, addr + size)`, so the mapping there goes away (the
/// emulated `cuMemUnmap`).
///
/// # Safety
/// The range is a mapping made by [`mem_map`] that nothing uses any more.
pub(crate) unsafe fn mem_unmap(addr: u64, size: usize) -> Result<()> {
    // SAFETY: the caller's contract; MAP_FIXED replaces exactly that range.
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_error("mmap (unmap)"));
    }
    Ok(())
}

/// Copies `bytes` from host memory into emulated device memory (the emulated `cuMemcpyHtoD`).
///
/// # Safety
/// As [`driver::memcpy_htod`](super::driver::memcpy_htod); the two ranges do not overlap.
pub(crate) unsafe fn memcpy_htod(dst: u64, src: *const c_void, bytes: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst as *mut u8, bytes) }
}

/// Copies `bytes` from emulated device memory into host memory (the emulated `cuMemcpyDtoH`).
///
/// # Safety
/// As [`driver::memcpy_dtoh`](super::driver::memcpy_dtoh); the two ranges do not overlap.
pub(crate) unsafe fn memcpy_dtoh(dst: *mut c_void, src: u64, bytes: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.cast::<u8>(), bytes) }
}

/// Sets `bytes` bytes at `ptr` to `value` (the emulated `cuMemsetD8`, synchronous).
///
/// # Safety
/// `ptr` is valid for `bytes` bytes of writes.
pub(crate) unsafe fn memset_d8(ptr: u64, value: u8, bytes: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::write_bytes(ptr as *mut u8, value, bytes) }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(4096)
}
