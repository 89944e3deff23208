//! The windows a rank's proxy may read from and write to: the communicator's registered
//! windows, found by their GIN id (registration number + 1, the same on every rank), in the
//! communicator's GIN table. Looked up at every access: a window registered after the device
//! communicator is found, a deregistered one is refused. A copy holds the table's read lock
//! (never across network I/O), and deregistration removes its window under the write lock
//! before unmapping it, so no window is unmapped while a proxy copies into or out of it.

use crate::Error;
use crate::symmem::state::GinTable;

/// A view of the communicator's GIN table.
pub(crate) struct Registry {
    table: GinTable,
}

impl Registry {
    pub(crate) fn new(table: GinTable) -> Registry {
        Registry { table }
    }

    /// The size of window `id`, `None` when it is not registered.
    pub(crate) fn size(&self, id: u32) -> Option<usize> {
        let t = self.table.read().ok()?;
        t.iter().find(|w| w.id == id).map(|w| w.size)
    }

    /// Runs `f` with the address of bytes `off..off + len` of window `id`, holding the read
    /// lock that keeps the window mapped. `Err(Ok(why))` when the window is not registered or
    /// the range is outside it; `Err(Err(e))` when `f` fails.
    pub(crate) fn with(
        &self,
        id: u32,
        off: u64,
        len: usize,
        f: impl FnOnce(u64) -> crate::Result<()>,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        let t = self.table.read().map_err(|_| {
            Err(Error::Internal(
                "the GIN window table's lock is poisoned".into(),
            ))
        })?;
        let Some(w) = t.iter().find(|w| w.id == id) else {
            return Err(Ok(format!(
                "window {id}, which this rank has not registered"
            )));
        };
        match off.checked_add(len as u64) {
            Some(end) if end <= w.size as u64 => f(w.local + off).map_err(Err),
            _ => Err(Ok(format!(
                "{len} bytes of window {id} at offset {off}, beyond its {} bytes",
                w.size
            ))),
        }
    }
}
