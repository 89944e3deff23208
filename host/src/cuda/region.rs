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
    /// The device address of byte 0.
    fn device_ptr(&self) -> u64;
    /// The number of bytes that may be read and written from [`DeviceMemory::device_ptr`].
    fn byte_len(&self) -> usize;
}

/// Plain data that copies move between host slices and device memory: every bit pattern of its
/// size is a valid value (a copy back from the device may bring any bytes, a poison fill for
/// one), and it has no padding.
///
/// # Safety
/// Implementors are `Copy`, have no padding bytes, and every bit pattern of
/// `size_of::<Self>()` bytes is a valid value of the type (so not `bool`, `char`, references or
/// enums).
pub unsafe trait DeviceCopy: Copy {}

macro_rules! device_copy {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive integer or float: no padding, every bit pattern valid.
        unsafe impl DeviceCopy for $t {}
    )* };
}
device_copy!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64
);
// SAFETY: an array of such elements has no padding between them and no invalid patterns.
unsafe impl<T: DeviceCopy, const N: usize> DeviceCopy for [T; N] {}

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
