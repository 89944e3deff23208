//! The rendezvous, step 1 of the TCP setup: rank 0 listens at the unique id's address
//! ([`RootListener`]), every other rank connects and says hello, and once all have joined rank 0
//! welcomes each with the table of mesh addresses ([`serve`] on rank 0, [`join`] elsewhere).
//!
//! [`join`] then hands over to [`super::mesh`] to connect the other ranks to each other; the
//! hello checks and dialing come from [`super::handshake`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use super::errors::{io_error, local_addr, protocol, rank_list};
use super::handshake::{
    POLL, abort_links, check_notice, dial, read_error, read_hello, send_reason, set_read_deadline,
    wait_readable,
};
use super::mesh;
use crate::bootstrap::unique_id::UniqueId;
use crate::bootstrap::wire::{self, Hello, Kind, MAX_REASON_BYTES, PROTOCOL_VERSION, Role};
use crate::error::clip;
use crate::time::deadline_after;
use crate::{Error, Result};

/// Most connections whose hello the root reads at once; more are dropped unread.
const MAX_PENDING_HELLOS: usize = 256;
/// Rejected connections whose reasons a rendezvous timeout names (the others are counted).
const LISTED_REJECTIONS: usize = 3;
/// How much longer than the root a rank waits for the welcome (at most; a quarter of the
/// timeout when that is shorter).
const WELCOME_GRACE: Duration = Duration::from_secs(2);

/// Rank 0's listening socket, bound before the other ranks are started so that its address
/// (and with it the [`UniqueId`]) can be handed to them.
#[derive(Debug)]
pub struct RootListener {
    listener: TcpListener,
    id: UniqueId,
}

impl RootListener {
    /// Binds `addr` (port 0 picks a free port) and draws a random magic.
    pub fn bind(addr: SocketAddr) -> Result<RootListener> {
        let listener = TcpListener::bind(addr).map_err(|source| Error::Io {
            what: format!("rendezvous: binding the root listener at {addr}"),
            source,
        })?;
        let local = local_addr(&listener, "rendezvous: root listener address")?;
        Ok(RootListener {
            listener,
            id: UniqueId::random(local),
        })
    }

    /// Binds the address of `id` and keeps its magic. When that address is not local to this
    /// machine's interfaces as written (e.g. a name resolving to another interface), binds the
    /// same port on all interfaces instead.
    pub fn bind_id(id: &UniqueId) -> Result<RootListener> {
        let listener = match TcpListener::bind(id.addr()) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                let any: IpAddr = if id.addr().is_ipv4() {
                    Ipv4Addr::UNSPECIFIED.into()
                } else {
                    Ipv6Addr::UNSPECIFIED.into()
                };
                TcpListener::bind(SocketAddr::new(any, id.addr().port()))
                    .map_err(|source| bind_error(id.addr(), source))?
            }
            Err(source) => return Err(bind_error(id.addr(), source)),
        };
        Ok(RootListener { listener, id: *id })
    }

    /// The unique id to hand to the other ranks.
    pub fn unique_id(&self) -> UniqueId {
        self.id
    }
}

fn bind_error(addr: SocketAddr, source: io::Error) -> Error {
    let hint = if source.kind() == io::ErrorKind::AddrInUse {
        " (port in use: under torchrun set SYMCOMM_PORT to a free port)"
    } else {
        ""
    };
    Error::Io {
        what: format!("rendezvous: binding the root listener at {addr}{hint}"),
        source,
    }
}

/// Rank 0's side of the setup: waits for every rank, then welcomes them. Returns the link to
/// every rank (index 0 is `None`).
pub(crate) fn serve(
    root: RootListener,
    size: usize,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = deadline_after(timeout);
    let magic = root.id.magic();
    let listener = root.listener;
    let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut ports = vec![0u16; size];
    if size == 1 {
        return Ok(links);
    }
    listener.set_nonblocking(true).map_err(|source| Error::Io {
        what: "rendezvous: configuring the root listener".into(),
        source,
    })?;
    let (tx, rx) = mpsc::channel();
    let pending = Arc::new(AtomicUsize::new(0));
    let mut joined = 1;
    // The first few rejected connections (anything can connect to the root's port, any
    // number of times), and how many there were.
    let mut rejected: Vec<String> = Vec::new();
    let mut n_rejected = 0usize;
    crate::fault::pause_point("connect", 0);
    while joined < size {
        if let Err(e) = check_notice(0, magic, "rendezvous") {
            if let Error::PeerFailed { peer, reason, .. } = &e {
                abort_links(&mut links, *peer, reason);
            }
            return Err(e);
        }
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..size).filter(|&r| links[r].is_none()).collect();
            let mut step = format!("rendezvous waiting for {}", rank_list(&missing));
            if n_rejected > 0 {
                let mut listed = rejected.join("; ");
                if n_rejected > rejected.len() {
                    listed += &format!("; and {} more", n_rejected - rejected.len());
                }
                step += &format!(" (rejected {n_rejected} connection(s): {listed})");
            }
            let culprit = missing.first().copied().unwrap_or(0);
            abort_links(&mut links, culprit, "never joined the rendezvous");
            return Err(Error::Timeout {
                rank: Some(0),
                step,
                after: timeout,
            });
        }
        loop {
            match listener.accept() {
                Ok((stream, from)) => {
                    if pending.fetch_add(1, Ordering::SeqCst) >= MAX_PENDING_HELLOS {
                        pending.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!("rendezvous: too many pending connections, dropping {from}");
                        continue;
                    }
                    let tx = tx.clone();
                    let in_flight = pending.clone();
                    let spawned =
                        thread::Builder::new()
                            .name("symcomm-hello".into())
                            .spawn(move || {
                                let r = read_hello(stream, magic, Role::Rendezvous, deadline);
                                in_flight.fetch_sub(1, Ordering::SeqCst);
                                let _ = tx.send((from, r));
                            });
                    if let Err(e) = spawned {
                        pending.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!("rendezvous: dropping connection from {from}: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    tracing::warn!("rendezvous: accept failed: {e}");
                    break;
                }
            }
        }
        let (from, hello) = match rx.recv_timeout(POLL) {
            Ok(x) => x,
            Err(_) => continue,
        };
        let (mut stream, h) = match hello {
            Ok(x) => x,
            Err(why) => {
                tracing::warn!("rendezvous: rejected connection from {from}: {why}");
                n_rejected += 1;
                if rejected.len() < LISTED_REJECTIONS {
                    rejected.push(clip(&format!("{from}: {why}"), 200));
                }
                continue;
            }
        };
        let rank = h.rank as usize;
        let problem = if h.size as usize != size {
            Some(Error::Mismatch {
                what: "world size".into(),
                rank_a: 0,
                value_a: size.to_string(),
                rank_b: rank,
                value_b: h.size.to_string(),
            })
        } else if rank == 0 || rank >= size {
            Some(protocol(
                0,
                "rendezvous",
                format!("a process at {from} claims to be rank {rank} of {size}"),
            ))
        } else if links[rank].is_some() {
            Some(protocol(
                0,
                "rendezvous",
                format!("two processes claim to be rank {rank} (the second from {from})"),
            ))
        } else {
            None
        };
        if let Some(err) = problem {
            send_reason(&mut stream, Kind::Reject, 0, &err.to_string());
            abort_links(&mut links, rank.min(size - 1), &err.to_string());
            return Err(err);
        }
        tracing::debug!("rendezvous: rank {rank} joined from {from}");
        ports[rank] = h.port;
        links[rank] = Some(stream);
        joined += 1;
    }
    let mut table = vec![local_addr(&listener, "rendezvous: root listener address")?; size];
    for (r, link) in links.iter().enumerate().skip(1) {
        if let Some(s) = link {
            let ip = s
                .peer_addr()
                .map_err(|source| Error::Io {
                    what: format!("rendezvous: address of rank {r}"),
                    source,
                })?
                .ip();
            table[r] = SocketAddr::new(ip, ports[r]);
        }
    }
    let welcome = wire::encode_welcome(magic, &table);
    for r in 1..size {
        let sent = match &mut links[r] {
            Some(s) => wire::write_frame(s, Kind::Welcome, 0, 0, &welcome).is_ok(),
            None => false,
        };
        if !sent {
            abort_links(&mut links, r, "disconnected during the rendezvous");
            return Err(Error::PeerFailed {
                rank: Some(0),
                step: "rendezvous".into(),
                peer: r,
                reason: "disconnected before the welcome".into(),
            });
        }
    }
    tracing::debug!("rendezvous: all {size} ranks joined");
    crate::fault::pause_point("mesh", 0);
    Ok(links)
}

/// A non-root rank's side of the setup: joins the rendezvous, then builds its part of the
/// mesh. Returns the link to every other rank (its own index is `None`).
pub(crate) fn join(
    id: &UniqueId,
    rank: usize,
    size: usize,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = deadline_after(timeout);
    let magic = id.magic();
    let step = "rendezvous";
    let mut root = dial(id.addr(), (rank, magic), 0, deadline, timeout, step)?;
    let ip = root
        .local_addr()
        .map_err(|source| io_error(rank, "rendezvous: local address", source))?
        .ip();
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|source| io_error(rank, "rendezvous: binding the mesh listener", source))?;
    let port = local_addr(&listener, "rendezvous: mesh listener address")?.port();
    let hello = Hello {
        magic,
        version: PROTOCOL_VERSION,
        role: Role::Rendezvous,
        rank: rank as u32,
        size: size as u32,
        to: 0,
        port,
    };
    wire::write_frame(&mut root, Kind::Hello, 0, 0, &hello.encode()).map_err(|_| {
        Error::PeerFailed {
            rank: Some(rank),
            step: step.into(),
            peer: 0,
            reason: "disconnected before the hello".into(),
        }
    })?;
    // Wait a little longer than the root waits for the others, so that when the job does not
    // come together the root's report (which names the missing ranks) arrives first.
    let welcome_deadline = deadline
        .checked_add((timeout / 4).min(WELCOME_GRACE))
        .unwrap_or(deadline);
    crate::fault::pause_point("connect", rank);
    wait_readable(&root, welcome_deadline, (rank, magic), step)?;
    set_read_deadline(&root, welcome_deadline, rank)?;
    let limit = wire::welcome_len(size).max(MAX_REASON_BYTES);
    let frame = wire::read_frame(&mut root, limit).map_err(|e| {
        read_error(
            rank,
            0,
            step,
            "rendezvous waiting for the root's welcome (rank 0 answers once every rank has joined)",
            timeout,
            e,
        )
    })?;
    let table = match frame.kind {
        Kind::Welcome => wire::decode_welcome(&frame.payload, magic, size)
            .map_err(|why| protocol(rank, step, format!("rank 0 sent a bad welcome: {why}")))?,
        Kind::Reject => {
            return Err(protocol(
                rank,
                step,
                format!(
                    "the root rejected this rank: {}",
                    wire::reason_text(&frame.payload)
                ),
            ));
        }
        Kind::Abort => {
            return Err(Error::PeerFailed {
                rank: Some(rank),
                step: step.into(),
                peer: (frame.aux as usize).min(size - 1),
                reason: format!("{} (reported by rank 0)", wire::reason_text(&frame.payload)),
            });
        }
        k => {
            return Err(protocol(
                rank,
                step,
                format!("rank 0 sent a {k:?} frame instead of a welcome"),
            ));
        }
    };
    tracing::debug!("rank {rank}: rendezvous done, building the mesh");
    crate::fault::pause_point("mesh", rank);

    let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    links[0] = Some(root);
    let mesh = mesh::Mesh {
        rank,
        size,
        magic,
        deadline,
        timeout,
    };
    let built = match mesh.build(&listener, &table) {
        Ok(b) => b,
        Err(e) => {
            // Tell rank 0 whom this rank blames before its link closes: otherwise the root
            // may blame this rank (its link ends first) instead of the one that failed.
            if let Error::PeerFailed { peer, reason, .. } = &e {
                abort_links(&mut links, *peer, reason);
            }
            return Err(e);
        }
    };
    for (r, s) in built {
        links[r] = Some(s);
    }
    tracing::debug!("rank {rank}: mesh complete");
    Ok(links)
}
