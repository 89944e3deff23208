//! Device queries that decide whether (and how) symmetric memory can work: total memory (the
//! flat-VA stride), VMM and POSIX-fd handle support, and peer access between two devices.
//!
//! Each query initialises the driver first ([`init_driver`]), so on a machine without
//! one it returns [`Error::NoDriver`] instead of aborting. No context is needed. Devices are
//! named by their ordinal in this process (after `CUDA_VISIBLE_DEVICES`).

use cudarc::driver::sys;

use super::driver::{self, init_driver};
use crate::{Error, Result};

/// The driver's handle for device `ordinal`.
fn cu_device(ordinal: usize) -> Result<sys::CUdevice> {
    init_driver()?;
    let ord = i32::try_from(ordinal)
        .map_err(|_| Error::InvalidArgument(format!("device ordinal {ordinal} is out of range")))?;
    driver::device_get(ord)
}

/// Total memory of device `ordinal` in bytes.
#[doc(alias = "cuDeviceTotalMem")]
pub fn total_memory(ordinal: usize) -> Result<u64> {
    Ok(driver::device_total_mem(cu_device(ordinal)?)? as u64)
}

/// A raw device attribute of device `ordinal`.
#[doc(alias = "cuDeviceGetAttribute")]
pub fn attribute(ordinal: usize, attr: sys::CUdevice_attribute) -> Result<i32> {
    driver::device_get_attribute(attr, cu_device(ordinal)?)
}

/// Whether device `ordinal` supports the virtual-memory-management API (`cuMemCreate`, …).
pub fn supports_vmm(ordinal: usize) -> Result<bool> {
    attribute(
        ordinal,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    )
    .map(|v| v != 0)
}

/// Whether VMM memory of device `ordinal` can be exported as a POSIX file descriptor.
pub fn supports_posix_fd_handles(ordinal: usize) -> Result<bool> {
    attribute(
        ordinal,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
    )
    .map(|v| v != 0)
}

/// Whether device `ordinal` can access memory of device `peer` directly (load/store over
/// NVLink or PCIe). A device can always access itself.
#[doc(alias = "cuDeviceCanAccessPeer")]
pub fn can_access_peer(ordinal: usize, peer: usize) -> Result<bool> {
    if ordinal == peer {
        // The driver answers 0 for a device and itself; for us that access is trivially fine.
        cu_device(ordinal)?;
        return Ok(true);
    }
    driver::device_can_access_peer(cu_device(ordinal)?, cu_device(peer)?)
}

/// Checks that device `ordinal` can host symmetric windows shared by POSIX fd: VMM support
/// and POSIX-fd export. [`Error::Unsupported`] names the missing capability.
pub fn require_symmetric_memory_support(ordinal: usize) -> Result<()> {
    if !supports_vmm(ordinal)? {
        return Err(Error::Unsupported {
            what: format!("virtual memory management on device {ordinal}"),
            hint: "symmetric memory needs cuMemCreate/cuMemMap (a recent driver on a Pascal or newer GPU)".into(),
        });
    }
    if !supports_posix_fd_handles(ordinal)? {
        return Err(Error::Unsupported {
            what: format!("POSIX file-descriptor export of memory on device {ordinal}"),
            hint: "the driver or platform cannot share VMM memory between processes by fd".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_fail_cleanly_for_missing_drivers_or_devices() {
        // On a machine without a driver every query is NoDriver; with one, a device ordinal
        // far past any real device is a CUDA error. Either way: an error, no abort.
        let far = 1 << 20;
        for result in [
            total_memory(far).map(|_| ()),
            supports_vmm(far).map(|_| ()),
            supports_posix_fd_handles(far).map(|_| ()),
            can_access_peer(far, 0).map(|_| ()),
            can_access_peer(far, far).map(|_| ()),
            require_symmetric_memory_support(far),
        ] {
            assert!(
                matches!(result, Err(Error::NoDriver(_) | Error::Cuda { .. })),
                "{result:?}"
            );
        }
        assert!(matches!(
            total_memory(usize::MAX),
            Err(Error::NoDriver(_) | Error::InvalidArgument(_))
        ));
    }
}
