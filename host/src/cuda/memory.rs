//! Plain (non-VMM) device and host-mapped memory for small runtime objects.
//!
//! - [`DeviceBox<T>`]: one `T` in device memory (`cuMemAlloc` / `cuMemFree`), e.g. a window
//!   descriptor that kernels read through a pointer.
//! - [`HostMapped<T>`]: one `T` in pinned host memory that the device can address
//!   (`cuMemHostAlloc(DEVICEMAP)`), e.g. an abort flag the host raises while kernels run.
//!
//! Under the emulated backend ([`crate::backend`]) both are a heap allocation whose address
//! is the "device" address.

use std::marker::PhantomData;
use std::ptr;

use cudarc::driver::sys;

use super::check;
use crate::Result;
use crate::backend::{Backend, backend};

/// One value of plain data in device memory; freed on drop.
#[derive(Debug)]
pub struct DeviceBox<T: Copy> {
    ptr: sys::CUdeviceptr,
    /// Emulated backend: `ptr` is a leaked `Box<T>`.
    emulated: bool,
    _t: PhantomData<T>,
}

impl<T: Copy> DeviceBox<T> {
    /// Allocates device memory for a `T` and copies `value` into it (synchronously).
    pub fn new(value: &T) -> Result<Self> {
        if backend()? == Backend::Emulated {
            return Ok(DeviceBox {
                ptr: Box::into_raw(Box::new(*value)) as u64,
                emulated: true,
                _t: PhantomData,
            });
        }
        let mut ptr = 0;
        let bytes = std::mem::size_of::<T>().max(1);
        // SAFETY: `ptr` is a valid out-pointer.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
        let b = DeviceBox {
            ptr,
            emulated: false,
            _t: PhantomData,
        };
        b.write(value)?;
        Ok(b)
    }

    /// Overwrites the value (synchronously). No kernel may be reading it concurrently.
    pub fn write(&self, value: &T) -> Result<()> {
        if self.emulated {
            // SAFETY: `ptr` is the live Box<T> made in `new`; no kernel reads it concurrently.
            unsafe { ptr::write_volatile(self.ptr as *mut T, *value) };
            return Ok(());
        }
        // SAFETY: the allocation holds size_of::<T>() bytes; `value` is a valid T.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(
                self.ptr,
                (value as *const T).cast(),
                std::mem::size_of::<T>(),
            )
        })
    }

    /// Reads the value back (synchronously).
    pub fn read(&self) -> Result<T> {
        if self.emulated {
            // SAFETY: `ptr` is the live Box<T> made in `new`, holding a T.
            return Ok(unsafe { ptr::read_volatile(self.ptr as *const T) });
        }
        let mut out = std::mem::MaybeUninit::<T>::uninit();
        // SAFETY: copies exactly size_of::<T>() bytes into `out`, which then holds a T written
        // by `new`/`write` (T is plain data).
        unsafe {
            check(
                "cuMemcpyDtoH",
                sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr, std::mem::size_of::<T>()),
            )?;
            Ok(out.assume_init())
        }
    }

    /// The device address of the value.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
}

impl<T: Copy> Drop for DeviceBox<T> {
    fn drop(&mut self) {
        if self.emulated {
            // SAFETY: made by Box::into_raw in `new`, freed once.
            drop(unsafe { Box::from_raw(self.ptr as *mut T) });
            return;
        }
        // SAFETY: allocated by cuMemAlloc in `new`, freed once.
        if let Err(e) = check("cuMemFree", unsafe { sys::cuMemFree_v2(self.ptr) }) {
            tracing::warn!("{e}");
        }
    }
}

/// One value of plain data in pinned host memory mapped into the device's address space;
/// freed on drop. The host reads and writes it with volatile accesses; kernels see it at
/// [`HostMapped::device_ptr`].
#[derive(Debug)]
pub struct HostMapped<T: Copy> {
    host: *mut T,
    dev: sys::CUdeviceptr,
    /// Emulated backend: `host` is a leaked `Box<T>` and `dev` its address.
    emulated: bool,
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
            let host = Box::into_raw(Box::new(value));
            return Ok(HostMapped {
                host,
                dev: host as u64,
                emulated: true,
            });
        }
        let mut host: *mut std::ffi::c_void = ptr::null_mut();
        let bytes = std::mem::size_of::<T>().max(1);
        // SAFETY: `host` is a valid out-pointer; DEVICEMAP asks for a device mapping.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP)
        })?;
        let mut out = HostMapped {
            host: host.cast(),
            dev: 0,
            emulated: false,
        };
        // SAFETY: `host` is the pinned allocation made above.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut out.dev, host, 0)
        })?;
        out.set(value);
        Ok(out)
    }

    /// Writes the value (volatile; kernels polling it see the change).
    pub fn set(&self, value: T) {
        // SAFETY: `host` points to a live, aligned T-sized pinned allocation.
        unsafe { ptr::write_volatile(self.host, value) }
    }

    /// Reads the value (volatile).
    pub fn get(&self) -> T {
        // SAFETY: as in `set`; the memory holds a T.
        unsafe { ptr::read_volatile(self.host) }
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> u64 {
        self.dev
    }
}

impl<T: Copy> Drop for HostMapped<T> {
    fn drop(&mut self) {
        if self.emulated {
            // SAFETY: made by Box::into_raw in `new`, freed once.
            drop(unsafe { Box::from_raw(self.host) });
            return;
        }
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once.
        if let Err(e) = check("cuMemFreeHost", unsafe {
            sys::cuMemFreeHost(self.host.cast())
        }) {
            tracing::warn!("{e}");
        }
    }
}
