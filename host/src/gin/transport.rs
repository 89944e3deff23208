//! The transport interface: what the proxy needs to carry an operation to a peer. The socket
//! transport (`socket.rs`) implements it; an RDMA one would too.

use super::mover::Mover;
use super::wire::Frame;
use crate::Result;

/// Moves operations between proxies.
pub(crate) trait Transport: Send + Sync {
    /// Sends `f` to `peer`, followed by `len` bytes of window `win` from `off` when `src` is
    /// `(win, off, len)`;
    /// returns once the source has been read (it may be reused).
    fn send(
        &self,
        peer: usize,
        f: &Frame,
        src: Option<(u32, u64, usize)>,
        mover: &mut Mover,
    ) -> Result<()>;
    /// File descriptors the transport holds.
    fn fds(&self) -> usize;
    /// Tells every peer this rank is leaving, then stops receiving (joins its threads).
    fn close(&self);
    /// Test-only: sends a frame as given, with `body` after it (forged operations).
    #[cfg(test)]
    fn send_raw(&self, peer: usize, f: &Frame, body: &[u8]) -> Result<()>;
}
