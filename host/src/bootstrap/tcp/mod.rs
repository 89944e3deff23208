//! The TCP transport: rendezvous at the root, a full mesh of connections, and one reader thread
//! per connection that drains it into the rank's [`Mailbox`].
//!
//! Setup, all under one deadline (`SYMCOMM_TIMEOUT`):
//! 1. **Rendezvous.** Rank 0 listens at the unique id's address. Every other rank binds its own
//!    mesh listener (same interface it reaches the root through, any port), connects to the root
//!    (retrying while the root is not up yet) and sends a [`Hello`] with the magic, protocol
//!    version, its rank, the world size and its mesh port. The root checks each hello in its own
//!    thread (at most 256 at once), so a silent or garbage connection delays nobody: a wrong
//!    magic or version is rejected (the connection gets a reject frame, the root keeps waiting for the real rank);
//!    a right magic with a wrong world size, an out-of-range or a duplicate rank means the job
//!    itself is misconfigured, so the root aborts everyone at once. When all ranks have joined,
//!    the root sends each a welcome: the magic and every rank's mesh address. A rank waits for
//!    its welcome a little past the deadline (a quarter of the timeout, at most 2 s), so that
//!    when ranks are missing it gets the root's abort naming them rather than a bare timeout.
//! 2. **Mesh.** Rank `j` dials every rank `0 < i < j` and accepts from every rank `k > j`; each
//!    link starts with a mesh hello answered by an ack, both checked (magic, version, size,
//!    sender, addressee). The rendezvous connection is the link between the root and each rank.
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
//! Known limits: without `symcomm-run` (e.g. under torchrun, whose agent stops every rank when
//! one fails), a rank still building the mesh does not read its root link, so if a peer dies
//! during mesh setup the others fail at the setup deadline rather than at once; mesh hellos are
//! read one at a time, so a silent stray connection to a rank's (ephemeral) mesh port delays that
//! rank's setup by up to 10 s.
//!
//! Layout: the rendezvous ([`RootListener`], rank 0's `serve` and the other ranks' `join`) in
//! `tcp/rendezvous.rs`, the mesh in `tcp/mesh.rs`, what both share (dialing, reading a hello,
//! reject and abort frames) in `tcp/handshake.rs` and the wording of their errors in
//! `tcp/errors.rs`; the running links and their reader threads in `tcp/links.rs`.
//!
//! [`Mailbox`]: super::mailbox::Mailbox
//! [`Hello`]: super::wire::Hello
//! [`wire`]: super::wire

mod errors;
mod handshake;
mod links;
mod mesh;
mod rendezvous;

pub(crate) use links::{SendError, TcpLinks};
pub use rendezvous::RootListener;
pub(crate) use rendezvous::{join, serve};
