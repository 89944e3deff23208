//! Handle exchange: passing file descriptors between the ranks of one node.
//!
//! CUDA exports physical memory as a POSIX file descriptor, and a file descriptor only means
//! something inside its own process, so it has to travel through the kernel: over a
//! Unix-domain socket with `SCM_RIGHTS`. This needs no ptrace capability (unlike
//! `pidfd_getfd`), works in unprivileged containers that share a network namespace, and leaves
//! no files behind: the sockets live in Linux's **abstract namespace**, named after the
//! communicator's unique id and the rank (`@symcomm-<id as 16 hex digits>-<rank>`), and vanish
//! when closed.
//!
//! Shape (request/response, like NCCL's proxy `GetFd`): every rank runs one [`FdServer`]. It
//! [publishes](FdServer::publish) the fds it exports under 64-bit keys (e.g. the registration
//! sequence number, the same on every rank), and a background thread answers "give me the fd
//! for key K" with that fd. Peers [fetch](FdServer::fetch) what they need. Serving never waits
//! on the main thread, so N ranks that each export some fds and fetch all their peers' cannot
//! deadlock; a fetch for a key that is not published yet is retried until it appears or the
//! timeout passes.
//!
//! Invariants:
//! - every blocking step is bounded: connect, send and receive on the client by the caller's
//!   timeout ([`Error::Timeout`] naming this rank, the peer, the key and the step); one
//!   connection on the server by [`SERVE_IO_TIMEOUT`];
//! - every message is validated (exact length, magic, version, unique id, key, exactly one
//!   fd where one is due); any extra fds that arrive are closed; garbage gives an error on the
//!   client and a dropped connection on the server, never a panic;
//! - only processes of the same effective user are served (`SO_PEERCRED`);
//! - dropping the [`FdServer`] stops its thread and closes the socket; the published fds are
//!   closed with it.
//!
//! A fetched fd is only guaranteed to be served while the owner's [`FdServer`] lives and the
//! key stays published: ranks must agree (e.g. with a barrier) that everyone has fetched
//! before an owner withdraws a key or drops its server.
//!
//! Layout: the message format in `ipc/wire.rs`, the server and its thread in `ipc/server.rs`,
//! fetching with retries in `ipc/client.rs`, and the libc calls both share (abstract sockets,
//! timeouts, credentials, `SCM_RIGHTS`) in `ipc/sys.rs`. Deadlines come from `crate::time`.
//!
//! [`Error::Timeout`]: crate::Error::Timeout

mod client;
mod server;
mod sys;
mod wire;

#[cfg(test)]
pub(crate) use client::fetch_fd;
pub use server::FdServer;
pub use wire::socket_name;

#[cfg(test)]
mod tests;
