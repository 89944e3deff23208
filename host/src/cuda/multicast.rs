//! NVLink SHARP multicast objects: **off unless `SYMCOMM_NVLS=1`**.
//!
//! A multicast object is a range of addresses whose stores (`multimem.st`) reach every bound
//! device and whose loads (`multimem.ld_reduce`) are reduced by the NVSwitch. Every entry point
//! here first checks [`require_enabled`]; without `SYMCOMM_NVLS=1` no multicast driver call is
//! ever made. Multicast objects are a scarce switch resource and, on shared machines, can take
//! the host's GPUs out of service: never enable it there.
//!
//! Ownership follows [`super::vmm`]: a [`Multicast`] owns its handle (released on drop), a
//! [`McBinding`] keeps both the multicast object and the bound memory alive and unbinds on drop,
//! and a multicast range is mapped with an ordinary [`super::Mapping`].

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys;

use super::driver;
use super::vmm::{PhysicalMem, Shareable};
use crate::{Error, Result};

/// The environment variable that must be `1` before anything here touches the driver.
pub const NVLS_ENV: &str = "SYMCOMM_NVLS";

/// Errors with [`Error::Unsupported`] unless `SYMCOMM_NVLS=1`.
pub fn require_enabled() -> Result<()> {
    require_enabled_with(|k| std::env::var(k).ok())
}

/// [`require_enabled`], reading the environment through `get`.
pub fn require_enabled_with(get: impl Fn(&str) -> Option<String>) -> Result<()> {
    if get(NVLS_ENV).as_deref() == Some("1") {
        Ok(())
    } else {
        Err(Error::Unsupported {
            what: "NVLink SHARP multicast".into(),
            hint: format!(
                "it is off by default; set {NVLS_ENV}=1 only on machines where creating \
                 multicast objects is allowed (never on shared machines)"
            ),
        })
    }
}

fn prop(num_devices: usize, size: usize) -> sys::CUmulticastObjectProp {
    // SAFETY: a plain C struct for which all-zero is valid.
    let mut p: sys::CUmulticastObjectProp = unsafe { std::mem::zeroed() };
    p.numDevices = num_devices as u32;
    p.size = size;
    p.handleTypes =
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as u64;
    p
}

/// The recommended size granularity of a multicast object for `num_devices` devices.
pub fn granularity(num_devices: usize) -> Result<usize> {
    require_enabled()?;
    Ok(driver::multicast_get_granularity(&prop(num_devices, 0))?.max(1))
}

/// A multicast object (`cuMulticastCreate`), released on drop.
#[derive(Debug, Clone)]
pub struct Multicast {
    mem: Arc<PhysicalMem>,
}

impl Multicast {
    /// Creates a multicast object of at least `size` bytes for `num_devices` devices,
    /// exportable as a POSIX fd. `device` is the caller's device (recorded only).
    #[doc(alias = "cuMulticastCreate")]
    pub fn create(num_devices: usize, size: usize, device: i32) -> Result<Multicast> {
        require_enabled()?;
        let size = super::vmm::round_up(size, granularity(num_devices)?)?;
        let handle = driver::multicast_create(&prop(num_devices, size))?;
        Ok(Multicast {
            mem: PhysicalMem::from_owned_handle(handle, size, device, Shareable::PosixFd),
        })
    }

    /// Imports an object another process exported with [`Multicast::export_fd`].
    pub fn import_fd(fd: BorrowedFd<'_>, size: usize) -> Result<Multicast> {
        require_enabled()?;
        Ok(Multicast {
            mem: PhysicalMem::import_fd(fd, size)?,
        })
    }

    /// Exports the object as a POSIX fd for the other members.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        require_enabled()?;
        self.mem.export_fd()
    }

    /// Adds `device` to the object (every member adds its own device before binding).
    #[doc(alias = "cuMulticastAddDevice")]
    pub fn add_device(&self, device: i32) -> Result<()> {
        require_enabled()?;
        // SAFETY: the handle is a live multicast object (owned by `self.mem`).
        unsafe { driver::multicast_add_device(self.mem.raw(), device) }
    }

    /// Binds all of `mem` (memory of `device`) at `mc_offset` of the object.
    #[doc(alias = "cuMulticastBindMem")]
    pub fn bind(&self, mc_offset: usize, mem: &Arc<PhysicalMem>, device: i32) -> Result<McBinding> {
        require_enabled()?;
        let end = mc_offset.checked_add(mem.size());
        if end.is_none_or(|e| e > self.mem.size()) {
            return Err(Error::InvalidArgument(format!(
                "binding {} bytes at offset {mc_offset} exceeds the {}-byte multicast object",
                mem.size(),
                self.mem.size()
            )));
        }
        // SAFETY: both handles are live; the range fits the object (checked above).
        unsafe { driver::multicast_bind_mem(self.mem.raw(), mc_offset, mem.raw(), mem.size()) }?;
        Ok(McBinding {
            mc: Arc::clone(&self.mem),
            mem: Arc::clone(mem),
            device,
            offset: mc_offset,
        })
    }

    /// The object as mappable memory (map it with [`super::Mapping`]).
    pub fn as_mem(&self) -> &Arc<PhysicalMem> {
        &self.mem
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.mem.size()
    }
}

/// Memory bound into a multicast object; unbound on drop.
#[derive(Debug)]
pub struct McBinding {
    mc: Arc<PhysicalMem>,
    mem: Arc<PhysicalMem>,
    device: i32,
    offset: usize,
}

impl Drop for McBinding {
    fn drop(&mut self) {
        // SAFETY: exactly this range was bound by `Multicast::bind` for `device`, and is
        // unbound once; `self` keeps both handles alive.
        if let Err(e) = unsafe {
            driver::multicast_unbind(self.mc.raw(), self.device, self.offset, self.mem.size())
        } {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_is_refused_unless_enabled() {
        let err = require_enabled_with(|_| None).unwrap_err().to_string();
        assert!(err.contains("SYMCOMM_NVLS=1"), "{err}");
        assert!(require_enabled_with(|_| Some("0".into())).is_err());
        assert!(require_enabled_with(|_| Some("1".into())).is_ok());
    }

    #[test]
    fn without_the_opt_in_no_driver_call_is_made() {
        // There is no CUDA driver in CI: reaching the driver would abort the process, so an
        // ordinary error here proves the gate comes first.
        if std::env::var(NVLS_ENV).as_deref() != Ok("1") {
            assert!(matches!(
                Multicast::create(8, 1 << 30, 0),
                Err(Error::Unsupported { .. })
            ));
            assert!(matches!(granularity(8), Err(Error::Unsupported { .. })));
        }
    }
}
