//! The windows a rank's proxy may read from and write to: the communicator's registered
//! windows, found by their GIN id (registration number + 1, the same on every rank), in the
//! communicator's GIN table. Looked up at every access: a window registered after the device
//! communicator is found, a deregistered one is refused. A copy into a window holds the
//! table's read lock (never across a socket write); a send holds the window's token
//! ([`Registry::pin`]) instead, for as long as it takes the peer to read it. Deregistration
//! removes its window under the write lock and waits for the token before it unmaps it, so no
//! window is unmapped while a proxy copies into or out of it. (Holding the read lock across a
//! socket write could deadlock: a waiting writer blocks new readers, and the peer's receive
//! thread may need its own read lock to take the bytes that would let the write finish.)

use crate::Error;
use crate::symmem::state::{GinTable, GinWindow};

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

    /// The address of bytes `off..off + len` of window `id` with the window's token: the window
    /// stays mapped while the [`Pinned`] lives (deregistration waits for it), without the
    /// table's lock. For sends, which take as long as the peer takes to read, and for landings
    /// queued for the GPU.
    pub(crate) fn pin(
        &self,
        id: u32,
        off: u64,
        len: usize,
    ) -> std::result::Result<Pinned, std::result::Result<String, Error>> {
        self.locate(id, off, len, |w| Pinned {
            addr: w.local + off,
            _busy: std::sync::Arc::clone(&w.busy),
        })
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
        self.locate(id, off, len, |w| f(w.local + off))?
            .map_err(Err)
    }

    /// Runs `f` with window `id` under the table's read lock, once `off..off + len` is known to
    /// lie in it; `Err(Ok(why))` when the window is not registered or the range is outside it.
    fn locate<R>(
        &self,
        id: u32,
        off: u64,
        len: usize,
        f: impl FnOnce(&GinWindow) -> R,
    ) -> std::result::Result<R, std::result::Result<String, Error>> {
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
            Some(end) if end <= w.size as u64 => Ok(f(w)),
            _ => Err(Ok(format!(
                "{len} bytes of window {id} at offset {off}, beyond its {} bytes",
                w.size
            ))),
        }
    }
}

/// Bytes of a registered window that stay mapped while this lives ([`Registry::pin`]).
pub(crate) struct Pinned {
    /// The address of the first byte.
    pub(crate) addr: u64,
    _busy: std::sync::Arc<()>,
}
