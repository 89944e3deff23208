//! The TCP transport: rendezvous at the root, a full mesh of connections, and one reader thread
//! per connection that drains it into the rank's [`Mailbox`].
//!
//! Setup, all under one deadline (`SYMCOMM_TIMEOUT`):
//! 1. **Rendezvous.** Rank 0 listens at the unique id's address. Every other rank binds its own
//!    mesh listener (same interface it reaches the root through, any port) and starts accepting
//!    on it at once (step 2), connects to the root (retrying while the root is not up yet) and
//!    sends a [`Hello`] with the magic, protocol version, its rank, the world size and its mesh
//!    port. The root reads the hellos of all its connections at once, without blocking on any
//!    (`tcp/hellos.rs`), each within 10 s of its accept however its bytes trickle in, so silent,
//!    slow or garbage connections delay nobody. A connection with a wrong magic, version or role,
//!    a malformed hello, or a claim to rank 0, to a rank out of range or to a rank that has
//!    already joined is refused (a reject frame saying why) and dropped; the job keeps waiting
//!    for the real rank, and the first claim to a rank keeps it. Only a right magic with a wrong
//!    world size fails the job, at once: then the job itself is misconfigured. When more than
//!    1024 connections are pending, the oldest is refused for now (a reject frame marked
//!    "retry"; a real rank sends its hello at once, so the oldest is the least likely to be
//!    real); a rank turned away like that, or whose connection the root closed before
//!    answering, dials again until the deadline, unless the root no longer accepts connections
//!    (it is gone). When all ranks have joined, the root sends each a welcome: the magic and
//!    every rank's mesh address. A rank waits for its welcome a little past the deadline (a
//!    quarter of the timeout, at most 2 s), so that when ranks are missing it gets the root's
//!    abort naming them rather than a bare timeout.
//! 2. **Mesh.** Rank `j` dials every rank `0 < i < j` and accepts from every rank `k > j`; each
//!    link starts with a mesh hello answered by an ack, both checked (magic, version, size,
//!    sender, addressee). The acceptor reads hellos like the root does, and refuses and drops,
//!    without failing the set-up, any connection that is not a rank due here (wrong or
//!    malformed hello, addressed to another rank, from a rank that does not dial this one, or
//!    a second claim to a rank already connected). The rendezvous connection is the link
//!    between the root and each rank.
//! 3. **Running.** Each link gets a reader thread that reads frames (size-checked by [`wire`])
//!    into the mailbox; the rank's calling thread writes frames directly. End of stream without
//!    a goodbye, a reset or a malformed frame marks the peer dead in the mailbox, which is how a
//!    crashed peer is noticed within milliseconds instead of at the timeout.
//!
//! A full mesh costs `size - 1` sockets and threads per rank: fine for the tens to hundreds of
//! ranks this runtime targets, not for tens of thousands.
//!
//! Failures during the set-up: every wait of the rendezvous and the mesh also watches for
//! `symcomm-run`'s notices ([`crate::fault`]), so a rank killed at any point of the set-up, even
//! before it connected anywhere, fails the others at once, naming it; a rank whose mesh set-up
//! fails tells rank 0 whom it blames before its link closes; and a set-up error that only names
//! a consequence (the root went away) is restated as the launcher's first notice.
//!
//! The magic is the only authentication: a process that knows it is trusted to be the rank it
//! claims (the first such claim wins). Anyone else who can open a TCP connection to rank 0 or
//! to a mesh port costs the set-up one socket for at most 10 s, not a delay or a failure.
//!
//! Known limits: without `symcomm-run` (e.g. under torchrun, whose agent stops every rank when
//! one fails), a rank still building the mesh does not read its root link, so if a peer dies
//! during mesh setup the others fail at the setup deadline rather than at once. A flood of
//! more than 1024 new connections between two reads of a real rank's hello can turn that rank
//! away; it dials again, so this costs time, not the job. A flood that fills the kernel's
//! accept queue (128 connections) faster than they are accepted can make a real rank's connect
//! wait for the kernel's SYN retry (1 s, then 3 s).
//!
//! Layout: the rendezvous ([`RootListener`], rank 0's `serve` and the other ranks' `join`) in
//! `tcp/rendezvous.rs`, the mesh in `tcp/mesh.rs`, the listening side both share (reading the
//! hellos of accepted connections) in `tcp/hellos.rs`, the dialing side (dialing, reading an
//! answer against a deadline, reject and abort frames) in `tcp/handshake.rs` and the wording
//! of their errors in `tcp/errors.rs`; the running links and their reader threads in
//! `tcp/links.rs`.
//!
//! [`Mailbox`]: super::mailbox::Mailbox
//! [`Hello`]: super::wire::Hello
//! [`wire`]: super::wire

mod errors;
pub(crate) mod handshake;
pub(crate) mod hellos;
mod links;
mod mesh;
mod rendezvous;

pub(crate) use hellos::close_leftovers;
pub(crate) use links::{SendError, TcpLinks};
pub use rendezvous::RootListener;
#[cfg(test)]
pub(crate) use rendezvous::join_on;
pub(crate) use rendezvous::{join, serve};
