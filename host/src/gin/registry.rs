//! The windows a rank's proxy may read from and write to: the communicator's registered
//! windows, found by their GIN id (registration number + 1, the same on every rank). Looked up
//! at every access, under the symmetric state's lock, which deregistration takes before it
//! unmaps a window: a window registered after the device communicator is found, a deregistered
//! one is refused, and none is unmapped while a proxy copies into or out of it.

use crate::Error;
use crate::symmem::state::StateSlot;

/// A view of the communicator's window registrations.
pub(crate) struct Registry {
    state: StateSlot,
}

impl Registry {
    pub(crate) fn new(state: StateSlot) -> Registry {
        Registry { state }
    }

    /// This rank's copy of window `id` (its flat-range address) and its size.
    pub(crate) fn lookup(&self, id: u32) -> Option<(u64, usize)> {
        let seq = u64::from(id).checked_sub(1)?;
        let guard = self.state.lock().ok()?;
        guard
            .as_ref()?
            .windows
            .iter()
            .find(|w| w.seq == seq)
            .map(|w| (w.local, w.size))
    }

    /// Runs `f` with the address of bytes `off..off + len` of window `id`, holding the lock that
    /// keeps the window mapped. `Err(Ok(why))` when the window is not registered or the range
    /// is outside it; `Err(Err(e))` when `f` fails.
    pub(crate) fn with(
        &self,
        id: u32,
        off: u64,
        len: usize,
        f: impl FnOnce(u64) -> crate::Result<()>,
    ) -> std::result::Result<(), std::result::Result<String, Error>> {
        let guard = self.state.lock().map_err(|_| {
            Err(Error::Internal(
                "the symmetric state's lock is poisoned".into(),
            ))
        })?;
        let seq = u64::from(id).checked_sub(1);
        let Some(w) = guard
            .as_ref()
            .and_then(|s| s.windows.iter().find(|w| Some(w.seq) == seq))
        else {
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
