//! [`DeviceMemory`]: a range of device memory that copies, fills and views address, whatever
//! owns it: a [`VmmBuffer`](super::VmmBuffer), a [`SymmetricMemory`](crate::SymmetricMemory),
//! this rank's copy of a [`Window`](crate::Window), a [`DeviceBox`](super::memory::DeviceBox).
//!
//! The same trait serves both backends: under emulation a device address is a host address
//! of this process, and [`Stream`](super::Stream)'s copies turn into `memcpy`.

/// A range of device memory of this rank's device: where it starts and how many bytes it has.
///
/// # Safety
/// `device_ptr()..device_ptr() + byte_len()` is memory of this process's device (or, under
/// emulation, mapped host memory) that stays valid for reads and writes as long as `self`
/// lives. Copies and views rely on it.
pub unsafe trait DeviceMemory {
    /// The device address of byte 0, as a number (for the driver and other libraries; kernel
    /// arguments take [`as_ptr`](Self::as_ptr) or [`as_mut_ptr`](Self::as_mut_ptr)).
    fn device_ptr(&self) -> u64;
    /// The number of bytes that may be read and written from [`DeviceMemory::device_ptr`].
    fn byte_len(&self) -> usize;

    /// The device address of byte 0 as a pointer to `T`: a kernel argument of type
    /// `*const T`. Not dereferenceable on the host (except under the emulator).
    fn as_ptr<T>(&self) -> *const T
    where
        Self: Sized,
    {
        std::ptr::with_exposed_provenance(self.device_ptr() as usize)
    }

    /// The device address of byte 0 as a pointer to `T`: a kernel argument of type `*mut T`.
    /// Not dereferenceable on the host (except under the emulator).
    fn as_mut_ptr<T>(&self) -> *mut T
    where
        Self: Sized,
    {
        std::ptr::with_exposed_provenance_mut(self.device_ptr() as usize)
    }
}

/// The byte range `[offset × size_of T, + count × size_of T)` of `mem`, or an error naming the
/// sizes when it does not fit.
pub(crate) fn checked_range<T, M: DeviceMemory + ?Sized>(
    mem: &M,
    offset: usize,
    count: usize,
    what: &str,
) -> crate::Result<(u64, usize)> {
    let size = std::mem::size_of::<T>();
    let start = offset.checked_mul(size);
    let bytes = count.checked_mul(size);
    match (start, bytes) {
        (Some(start), Some(bytes))
            if start
                .checked_add(bytes)
                .is_some_and(|e| e <= mem.byte_len()) =>
        {
            Ok((mem.device_ptr() + start as u64, bytes))
        }
        _ => Err(crate::Error::InvalidArgument(format!(
            "{what}: {count} elements of {size} bytes at element {offset} do not fit in {} bytes \
             of device memory",
            mem.byte_len()
        ))),
    }
}
