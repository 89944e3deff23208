//! The mesh, step 2 of the TCP setup: after the rendezvous, rank `j` dials every rank
//! `0 < i < j` and accepts from every rank `k > j` (at the same time, in two threads), each link
//! starting with a mesh hello answered by an ack, both checked.
//!
//! Called by [`super::rendezvous`]'s `join` with the welcome's address table; the link to rank 0
//! is the rendezvous connection itself.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::errors::{io_error, protocol, rank_list};
use super::handshake::{
    POLL, check_notice, dial, read_error, read_hello, send_reason, set_read_deadline, wait_readable,
};
use crate::bootstrap::wire::{
    self, HELLO_LEN, Hello, Kind, MAX_REASON_BYTES, PROTOCOL_VERSION, Role,
};
use crate::{Error, Result};

/// This rank's part of the mesh: who it is, of which job, and until when it may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mesh {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) magic: u64,
    pub(crate) deadline: Instant,
    /// The whole step's timeout (for error messages; `deadline` bounds the waits).
    pub(crate) timeout: Duration,
}

impl Mesh {
    /// Builds this rank's part of the mesh: dials the ranks below it (addresses in `table`) while
    /// a second thread accepts the ranks above it on `listener`. Returns the links made, by peer
    /// rank (dialed first, then accepted).
    pub(crate) fn build(
        self,
        listener: &TcpListener,
        table: &[SocketAddr],
    ) -> Result<Vec<(usize, TcpStream)>> {
        let rank = self.rank;
        let stop = AtomicBool::new(false);
        let (dialed, accepted) = thread::scope(|scope| {
            let acceptor = thread::Builder::new()
                .name(format!("symcomm-accept{rank}"))
                .spawn_scoped(scope, || self.accept(listener, &stop));
            let acceptor = match acceptor {
                Ok(a) => a,
                Err(e) => {
                    let e = io_error(rank, "mesh setup: starting the acceptor thread", e);
                    return (Err(e), Ok(Vec::new()));
                }
            };
            let dialed = self.dial(table);
            if dialed.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            let accepted = acceptor.join().unwrap_or_else(|_| {
                Err(Error::Panicked {
                    rank: Some(rank),
                    what: "the mesh set-up's acceptor thread".into(),
                })
            });
            (dialed, accepted)
        });
        let mut out = dialed?;
        out.extend(accepted?);
        Ok(out)
    }

    /// Dials every rank `0 < i < rank`.
    fn dial(self, table: &[SocketAddr]) -> Result<Vec<(usize, TcpStream)>> {
        let (rank, size, magic) = (self.rank, self.size, self.magic);
        let (deadline, timeout) = (self.deadline, self.timeout);
        let step = "mesh setup";
        let mut out = Vec::new();
        for (to, &addr) in table.iter().enumerate().take(rank).skip(1) {
            let mut s = dial(addr, (rank, magic), to, deadline, timeout, step)?;
            let hello = Hello {
                magic,
                version: PROTOCOL_VERSION,
                role: Role::Mesh,
                rank: rank as u32,
                size: size as u32,
                to: to as u32,
                port: 0,
            };
            let lost = |_| Error::PeerFailed {
                rank: Some(rank),
                step: step.into(),
                peer: to,
                reason: "disconnected during the mesh handshake".into(),
            };
            wire::write_frame(&mut s, Kind::Hello, 0, 0, &hello.encode()).map_err(lost)?;
            wait_readable(&s, deadline, (rank, magic), step)?;
            set_read_deadline(&s, deadline, rank)?;
            let waiting = format!("mesh setup waiting for rank {to}'s answer");
            let f = wire::read_frame(&mut s, HELLO_LEN.max(MAX_REASON_BYTES))
                .map_err(|e| read_error(rank, to, step, &waiting, timeout, e))?;
            match f.kind {
                Kind::Hello => {}
                Kind::Reject => {
                    return Err(protocol(
                        rank,
                        step,
                        format!(
                            "rank {to} rejected the connection: {}",
                            wire::reason_text(&f.payload)
                        ),
                    ));
                }
                k => {
                    return Err(protocol(
                        rank,
                        step,
                        format!("rank {to} answered with a {k:?} frame"),
                    ));
                }
            }
            let ack = Hello::decode(&f.payload).map_err(|why| protocol(rank, step, why))?;
            let expected = Hello {
                magic,
                version: PROTOCOL_VERSION,
                role: Role::MeshAck,
                rank: to as u32,
                size: size as u32,
                to: rank as u32,
                port: 0,
            };
            if ack != expected {
                return Err(protocol(
                    rank,
                    step,
                    format!("the listener at {addr} is not rank {to} of this job"),
                ));
            }
            out.push((to, s));
        }
        Ok(out)
    }

    /// Accepts a mesh link from every rank `k > rank`, until done or `stop` is raised.
    fn accept(self, listener: &TcpListener, stop: &AtomicBool) -> Result<Vec<(usize, TcpStream)>> {
        let (rank, size, magic) = (self.rank, self.size, self.magic);
        let (deadline, timeout) = (self.deadline, self.timeout);
        let step = "mesh setup";
        let mut out: Vec<(usize, TcpStream)> = Vec::new();
        let expected = size - rank - 1;
        listener
            .set_nonblocking(true)
            .map_err(|source| io_error(rank, "mesh setup: configuring the listener", source))?;
        while out.len() < expected {
            if stop.load(Ordering::Relaxed) {
                return Ok(out);
            }
            check_notice(rank, magic, step)?;
            if Instant::now() >= deadline {
                let missing: Vec<usize> = (rank + 1..size)
                    .filter(|r| !out.iter().any(|(k, _)| k == r))
                    .collect();
                return Err(Error::Timeout {
                    rank: Some(rank),
                    step: format!("mesh setup waiting for {}", rank_list(&missing)),
                    after: timeout,
                });
            }
            let (stream, from) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(POLL);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("rank {rank}: mesh accept failed: {e}");
                    thread::sleep(POLL);
                    continue;
                }
            };
            let (mut s, h) = match read_hello(stream, magic, Role::Mesh, deadline) {
                Ok(x) => x,
                Err(why) => {
                    tracing::warn!("rank {rank}: rejected mesh connection from {from}: {why}");
                    continue;
                }
            };
            let peer = h.rank as usize;
            if h.to as usize != rank
                || h.size as usize != size
                || peer <= rank
                || peer >= size
                || out.iter().any(|(k, _)| *k == peer)
            {
                let why = format!(
                    "unexpected mesh hello from {from}: rank {peer} of {} addressed to rank {}",
                    h.size, h.to
                );
                send_reason(&mut s, Kind::Reject, 0, &why);
                return Err(protocol(rank, step, why));
            }
            let ack = Hello {
                magic,
                version: PROTOCOL_VERSION,
                role: Role::MeshAck,
                rank: rank as u32,
                size: size as u32,
                to: peer as u32,
                port: 0,
            };
            wire::write_frame(&mut s, Kind::Hello, 0, 0, &ack.encode()).map_err(|_| {
                Error::PeerFailed {
                    rank: Some(rank),
                    step: step.into(),
                    peer,
                    reason: "disconnected during the mesh handshake".into(),
                }
            })?;
            out.push((peer, s));
        }
        Ok(out)
    }
}
