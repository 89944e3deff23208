//! The mesh, step 2 of the TCP setup: after the rendezvous, rank `j` dials every rank
//! `0 < i < j` and accepts from every rank `k > j`, each link starting with a mesh hello
//! answered by an ack, both checked.
//!
//! Driven by [`super::rendezvous`]'s `join`: it runs [`Mesh::accept`] in a thread of its own
//! from before its hello to rank 0 on, and [`Mesh::dial`] with the welcome's address table;
//! the link to rank 0 is the rendezvous connection itself.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::errors::{io_error, protocol, rank_list};
use super::handshake::{
    NOTICE_POLL, Until, check_notice, dial, read_error, send_reason, wait_readable,
};
use super::hellos::{Arrival, Hellos};
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
    /// Dials every rank `0 < i < rank` (addresses in `table`).
    pub(crate) fn dial(self, table: &[SocketAddr]) -> Result<Vec<(usize, TcpStream)>> {
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
            let waiting = format!("mesh setup waiting for rank {to}'s answer");
            let f = wire::read_frame(
                &mut Until::new(&s, deadline),
                HELLO_LEN.max(MAX_REASON_BYTES),
            )
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

    /// Accepts a mesh link from every rank `k > rank` on `listener`, until done or `stop` is
    /// raised. Runs from before the rendezvous on, so that connections to the mesh port never
    /// pile up unaccepted; the hellos of all pending connections are read at once
    /// ([`Hellos`]), and a connection that is not a rank of this job due here (a wrong or
    /// malformed hello, one addressed to another rank, from a rank that does not dial this one,
    /// or from a rank already connected) is refused and dropped without failing the set-up.
    pub(crate) fn accept(
        self,
        listener: &TcpListener,
        stop: &AtomicBool,
    ) -> Result<Vec<(usize, TcpStream)>> {
        let (rank, size, magic) = (self.rank, self.size, self.magic);
        let (deadline, timeout) = (self.deadline, self.timeout);
        let step = "mesh setup";
        let mut out: Vec<(usize, TcpStream)> = Vec::new();
        let expected = size - rank - 1;
        if expected == 0 {
            return Ok(out);
        }
        let mut hellos = Hellos::new(listener, magic, Role::Mesh)
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
            for arrival in hellos.next(NOTICE_POLL) {
                let (mut s, from, h) = match arrival {
                    Arrival::Hello {
                        stream,
                        from,
                        hello,
                    } => (stream, from, hello),
                    Arrival::Dropped { from, why } => {
                        tracing::warn!("rank {rank}: dropped mesh connection from {from}: {why}");
                        continue;
                    }
                };
                let peer = h.rank as usize;
                let why = if h.to as usize != rank {
                    Some(format!(
                        "a mesh hello addressed to rank {} reached rank {rank}",
                        h.to
                    ))
                } else if h.size as usize != size {
                    Some(format!(
                        "a mesh hello for a job of {} ranks reached a job of {size}",
                        h.size
                    ))
                } else if peer <= rank || peer >= size {
                    Some(format!(
                        "rank {peer} does not dial rank {rank} in a job of {size} ranks"
                    ))
                } else if out.iter().any(|(k, _)| *k == peer) {
                    Some(format!(
                        "rank {peer} is already connected to rank {rank}; second claim from {from} refused"
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    tracing::warn!("rank {rank}: refused mesh connection from {from}: {why}");
                    send_reason(&mut s, Kind::Reject, 0, &why);
                    continue;
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
        }
        Ok(out)
    }
}
