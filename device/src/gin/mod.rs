//! GIN — GPU-initiated networking: puts, signals and counters between ranks that share no
//! memory (other nodes), carried by a CPU proxy of the host runtime.
//!
//! A [`Gin`] is a view of one **context** of a device communicator (an independent set of
//! queues; NCCL's `ncclGin`). Operations are posted as 128-byte [`Descriptor`]s into a ring per
//! (context, peer) in device-mapped host memory; the rank's proxy thread takes them in ring
//! order, moves the data with the transport and applies the remote actions on the peer.
//!
//! # What each operation promises
//! - [`Gin::put`] / [`Gin::put_value`] / [`Gin::signal`] return once the operation is posted.
//!   The data is read from the source **after** the call (by the proxy), so the source must
//!   not change until the operation has *completed locally*: its counter reached
//!   ([`LocalAction::Counter`]), or [`Gin::flush`] returned.
//! - **Remote landing** is known only through a signal: when the peer sees a signal
//!   ([`Gin::wait_signal`], acquire at system scope), the data of the put it was attached to has
//!   landed in its window, and for a **strong** signal so has the data of every earlier
//!   operation of the same context to that peer. A **weak** signal promises only its own put.
//! - Operations of one context to one peer are *applied* in posting order when their signals
//!   are strong; data of different puts may land in any order.
//! - Signals are 64-bit and compared rolling (`(value − least) as i64 ≥ 0`), so they wrap.
//!
//! # Signal set
//! `Set` (beyond NCCL) stores its operand into the peer's signal when the operation is applied
//! there (after its own put for a weak signal, after every earlier operation of the context to
//! that peer for a strong one). It is one atomic step among the other updates of that signal:
//! an add applied before it is overwritten, an add applied after it adds to the operand. Adds
//! from other contexts or ranks are not ordered against it, so a signal that is set should have
//! one writer (a sequence number or epoch). A set may move a signal backwards; waits compare
//! rolling against the value they read, so a waiter for a larger value keeps waiting.
//!
//! # Waits
//! Every wait (ring credit, flush, counter, signal) ends: on success, after the `Gin`'s timeout
//! ([`Gin::with_timeout`]; none by default) with [`WaitError::Timeout`](crate::wait::WaitError::Timeout), or when the
//! communicator's abort flag is raised (a rank died, the proxy failed, or the host called
//! `DevComm::abort`) with [`WaitError::Aborted`](crate::wait::WaitError::Aborted).
//!
//! # Checks
//! Context, peer, signal and counter indices, windows not registered for GIN and inline values
//! of more than 8 bytes stop the kernel with a message in every build (a bad index would post
//! into another ring or read outside the arrays). Offsets and sizes are checked by the proxies
//! against their windows: a put outside a window fails the communicator with an error naming
//! the rank, the window and the range.

pub mod barrier;
mod context;
pub mod descriptor;

pub use barrier::{Barrier, GinBarrier, GinFence};
pub use context::{Gin, GinValue, LocalAction, RemoteAction, rolling_ge};
pub use descriptor::{Descriptor, GinConnection, GinHandle, Op, SignalOp};
