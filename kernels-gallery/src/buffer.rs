//! Where a collective's data lives: a range of a registered window.

use symcomm::{Communicator, Error, Result, Window};
use symcomm_device::ptr::SymPtr;

/// A byte range start inside a registered window (this rank's copy and, at the same offset,
/// every LSA peer's). In-place collectives pass the same `Buf` as source and destination.
#[derive(Debug, Clone, Copy)]
pub struct Buf<'a> {
    window: &'a Window,
    offset: usize,
}

impl<'a> Buf<'a> {
    /// Byte `offset` of `window`.
    pub fn new(window: &'a Window, offset: usize) -> Buf<'a> {
        Buf { window, offset }
    }

    /// The whole window from byte 0.
    pub fn whole(window: &'a Window) -> Buf<'a> {
        Buf::new(window, 0)
    }

    /// The buffer at device address `ptr` (this rank's copy, as the allocation returned it),
    /// found among `windows`. Fails with a clear error when `ptr` is in no registered window
    /// of `comm`, or in one that is not among `windows`.
    pub fn find(comm: &Communicator, windows: &[&'a Window], ptr: u64) -> Result<Buf<'a>> {
        let Some(descriptor) = comm.find_window(ptr) else {
            return Err(Error::InvalidArgument(format!(
                "{ptr:#x} is not inside a registered window: allocate it with \
                 SymmetricMemory::alloc and register it with Communicator::register_window"
            )));
        };
        let w = windows
            .iter()
            .find(|w| w.handle() == descriptor)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{ptr:#x} is in a registered window that was not passed to Buf::find"
                ))
            })?;
        Ok(Buf::new(w, (ptr - w.user_ptr()) as usize))
    }

    /// The window.
    pub fn window(&self) -> &'a Window {
        self.window
    }

    /// The byte offset in the window.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// This rank's device address of the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.window.user_ptr() + self.offset as u64
    }

    /// The kernel argument for this buffer at `extra` more bytes.
    pub(crate) fn sym(&self, extra: usize) -> SymPtr<u8> {
        SymPtr::new(self.window.handle(), self.offset + extra)
    }

    /// Block `k` of `bytes` bytes from this start: this rank's block of a buffer holding one
    /// per rank. Saturating, so meaningful once the whole buffer passed [`Buf::check`].
    pub(crate) fn block(&self, bytes: usize, k: usize) -> Buf<'a> {
        Buf::new(
            self.window,
            self.offset.saturating_add(bytes.saturating_mul(k)),
        )
    }

    /// Checks that `bytes` bytes from the start fit the window. `what` and `role` name the
    /// buffer (`all_reduce`, `source`). Any offset and size: the collectives handle partial
    /// packs (the element alignment is checked by the caller, which knows the type).
    pub(crate) fn check(&self, what: &str, role: &str, bytes: usize) -> Result<()> {
        check_range(what, role, self.offset, bytes, self.window.size())
    }

    /// [`check`](Self::check), and the start is a whole number of `elem`-byte elements.
    pub(crate) fn check_elements(
        &self,
        what: &str,
        role: &str,
        bytes: usize,
        elem: usize,
    ) -> Result<()> {
        if !self.offset.is_multiple_of(elem) {
            return Err(Error::InvalidArgument(format!(
                "{what} {role}: byte offset {} is not a whole number of {elem}-byte elements",
                self.offset
            )));
        }
        self.check(what, role, bytes)
    }

    /// True when both name the same window and offset.
    pub(crate) fn same_as(&self, other: &Buf<'_>) -> bool {
        std::ptr::eq(self.window, other.window) && self.offset == other.offset
    }
}

/// The range check of [`Buf::check`], as plain arithmetic.
pub(crate) fn check_range(
    what: &str,
    role: &str,
    offset: usize,
    bytes: usize,
    size: usize,
) -> Result<()> {
    match offset.checked_add(bytes) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{what} {role}: {bytes} bytes at offset {offset} do not fit the {size}-byte window"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::check_range;

    #[test]
    fn ranges_must_be_inside_the_window() {
        assert!(check_range("x", "y", 0, 4096, 4096).is_ok());
        assert!(check_range("x", "y", 16, 4080, 4096).is_ok());
        assert!(check_range("x", "y", 16, 4096, 4096).is_err());
        // Any offset and size inside the window.
        assert!(check_range("x", "y", 8, 16, 4096).is_ok());
        assert!(check_range("x", "y", 2, 4094, 4096).is_ok());
        assert!(check_range("x", "y", 2, 4095, 4096).is_err());
        assert!(check_range("x", "y", usize::MAX - 15, 32, 4096).is_err());
    }
}
