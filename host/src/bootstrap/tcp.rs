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
//! Known limits: a rank still building the mesh does not read its root link, so if a peer dies
//! during mesh setup the others fail at the setup deadline rather than at once; mesh hellos are
//! read one at a time, so a silent stray connection to a rank's (ephemeral) mesh port delays that
//! rank's setup by up to 10 s.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::mailbox::{Closed, CollMsg, DeliverError, Failure, Incoming, Mailbox, Op};
use super::unique_id::UniqueId;
use super::wire::{
    self, HELLO_LEN, Hello, Kind, MAX_MESSAGE_BYTES, MAX_REASON_BYTES, PROTOCOL_VERSION, Role,
    WireError,
};
use crate::time::{deadline_after, remaining};
use crate::{Error, Result};

/// How long one connection may take to say hello before it is dropped.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// Most connections whose hello the root reads at once; more are dropped unread.
const MAX_PENDING_HELLOS: usize = 256;
/// Pause between polls of a non-blocking listener, and between connection attempts.
const POLL: Duration = Duration::from_millis(1);
const RETRY: Duration = Duration::from_millis(20);
/// How much longer than the root a rank waits for the welcome (at most; a quarter of the
/// timeout when that is shorter).
const WELCOME_GRACE: Duration = Duration::from_secs(2);
/// How long a goodbye may take to write when a communicator is closed.
const GOODBYE_LIMIT: Duration = Duration::from_millis(200);

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
    let mut rejected: Vec<String> = Vec::new();
    while joined < size {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..size).filter(|&r| links[r].is_none()).collect();
            let mut step = format!("rendezvous waiting for {}", rank_list(&missing));
            if !rejected.is_empty() {
                step += &format!(
                    " (rejected {} connection(s): {})",
                    rejected.len(),
                    rejected.join("; ")
                );
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
                rejected.push(format!("{from}: {why}"));
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
    let mut root = dial(id.addr(), rank, 0, deadline, timeout, step)?;
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

    let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    links[0] = Some(root);
    let stop = AtomicBool::new(false);
    let (dialed, accepted) = thread::scope(|scope| {
        let acceptor = thread::Builder::new()
            .name(format!("symcomm-accept{rank}"))
            .spawn_scoped(scope, || {
                accept_mesh(&listener, rank, size, magic, deadline, timeout, &stop)
            });
        let acceptor = match acceptor {
            Ok(a) => a,
            Err(e) => {
                let e = io_error(rank, "mesh setup: starting the acceptor thread", e);
                return (Err(e), Ok(Vec::new()));
            }
        };
        let dialed = dial_mesh(&table, rank, size, magic, deadline, timeout);
        if dialed.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let accepted = acceptor.join().unwrap_or_else(|_| {
            Err(protocol(
                rank,
                "mesh setup",
                "the acceptor thread panicked".into(),
            ))
        });
        (dialed, accepted)
    });
    for (r, s) in dialed?.into_iter().chain(accepted?) {
        links[r] = Some(s);
    }
    tracing::debug!("rank {rank}: mesh complete");
    Ok(links)
}

/// Dials every rank `0 < i < rank`.
fn dial_mesh(
    table: &[SocketAddr],
    rank: usize,
    size: usize,
    magic: u64,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<(usize, TcpStream)>> {
    let step = "mesh setup";
    let mut out = Vec::new();
    for (to, &addr) in table.iter().enumerate().take(rank).skip(1) {
        let mut s = dial(addr, rank, to, deadline, timeout, step)?;
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

/// Accepts a mesh link from every rank `k > rank`.
fn accept_mesh(
    listener: &TcpListener,
    rank: usize,
    size: usize,
    magic: u64,
    deadline: Instant,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<Vec<(usize, TcpStream)>> {
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

/// Reads and checks the first frame of an accepted connection. A wrong magic, version or role
/// gets a reject frame; the error says why, for the log.
fn read_hello(
    mut s: TcpStream,
    magic: u64,
    role: Role,
    deadline: Instant,
) -> std::result::Result<(TcpStream, Hello), String> {
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let left = remaining(deadline).min(HANDSHAKE_LIMIT).max(POLL);
    s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
    let _ = s.set_write_timeout(Some(HANDSHAKE_LIMIT));
    let f = match wire::read_frame(&mut s, HELLO_LEN) {
        Ok(f) => f,
        Err(e) if e.is_timeout() => return Err("sent no hello in time".into()),
        Err(e) => {
            send_reason(&mut s, Kind::Reject, 0, &format!("bad hello: {e}"));
            return Err(format!("bad hello: {e}"));
        }
    };
    let h = match (f.kind, Hello::decode(&f.payload)) {
        (Kind::Hello, Ok(h)) => h,
        (Kind::Hello, Err(why)) => return Err(why),
        (k, _) => return Err(format!("sent a {k:?} frame instead of a hello")),
    };
    let why = if h.magic != magic {
        "wrong magic: this connection belongs to a different job (check SYMCOMM_UNIQUE_ID / MASTER_ADDR / MASTER_PORT)".to_string()
    } else if h.version != PROTOCOL_VERSION {
        format!(
            "protocol version {} does not match {PROTOCOL_VERSION} (mixed symcomm builds)",
            h.version
        )
    } else if h.role != role {
        format!("a {:?} hello where a {role:?} hello was expected", h.role)
    } else {
        return Ok((s, h));
    };
    send_reason(&mut s, Kind::Reject, 0, &why);
    Err(why)
}

/// Connects to `addr`, retrying until `deadline` while nobody listens there yet.
fn dial(
    addr: SocketAddr,
    rank: usize,
    to: usize,
    deadline: Instant,
    timeout: Duration,
    step: &str,
) -> Result<TcpStream> {
    loop {
        let left = remaining(deadline);
        let attempt = TcpStream::connect_timeout(&addr, left.clamp(POLL, Duration::from_secs(2)));
        match attempt {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_write_timeout(Some(timeout));
                return Ok(s);
            }
            Err(e) => {
                if Instant::now() + RETRY >= deadline {
                    return Err(Error::Timeout {
                        rank: Some(rank),
                        step: format!("{step} connecting to rank {to} at {addr} (last error: {e})"),
                        after: timeout,
                    });
                }
                thread::sleep(RETRY);
            }
        }
    }
}

/// The established links of one rank, with their reader threads.
pub(crate) struct TcpLinks {
    rank: usize,
    writers: Vec<Option<Mutex<TcpStream>>>,
    readers: Vec<JoinHandle<()>>,
    mailbox: Arc<Mailbox>,
}

/// Why a frame could not be sent.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The peer is gone; the text says how.
    Closed(String),
    /// The write did not finish within the timeout.
    TimedOut,
}

impl TcpLinks {
    /// Starts a reader thread for every link. If that fails part-way, the links already
    /// started are closed (no goodbye) and their readers joined before the error is returned;
    /// the links not reached yet are dropped, which closes them.
    pub fn start(
        rank: usize,
        links: Vec<Option<TcpStream>>,
        mailbox: Arc<Mailbox>,
        timeout: Duration,
    ) -> Result<TcpLinks> {
        let size = links.len();
        let mut this = TcpLinks {
            rank,
            writers: Vec::with_capacity(links.len()),
            readers: Vec::new(),
            mailbox,
        };
        for (peer, link) in links.into_iter().enumerate() {
            let Some(s) = link else {
                this.writers.push(None);
                continue;
            };
            if let Err(e) = this.start_link(peer, s, size, timeout) {
                this.close(false);
                return Err(e);
            }
        }
        Ok(this)
    }

    /// Configures the link to `peer` and starts its reader thread.
    fn start_link(
        &mut self,
        peer: usize,
        s: TcpStream,
        size: usize,
        timeout: Duration,
    ) -> Result<()> {
        let rank = self.rank;
        let setup = |what: &str, source| io_error(rank, what, source);
        s.set_read_timeout(None)
            .map_err(|e| setup("configuring a link", e))?;
        s.set_write_timeout(Some(timeout))
            .map_err(|e| setup("configuring a link", e))?;
        let reader = s.try_clone().map_err(|e| setup("duplicating a link", e))?;
        let mailbox = self.mailbox.clone();
        // The writer is registered first, so that `close` shuts the socket down (and the reader
        // ends) even if the reader thread is the step that fails.
        self.writers.push(Some(Mutex::new(s)));
        let handle = thread::Builder::new()
            .name(format!("symcomm-rx{rank}-{peer}"))
            .spawn(move || read_loop(reader, peer, size, &mailbox))
            .map_err(|e| setup("starting a reader thread", e))?;
        self.readers.push(handle);
        Ok(())
    }

    /// Writes one frame to `peer`.
    pub fn send(
        &self,
        peer: usize,
        kind: Kind,
        aux: u32,
        step: u64,
        payload: &[u8],
    ) -> std::result::Result<(), SendError> {
        let Some(Some(w)) = self.writers.get(peer) else {
            return Err(SendError::Closed("is not connected".into()));
        };
        let mut s = w.lock().unwrap_or_else(|p| p.into_inner());
        wire::write_frame(&mut *s, kind, aux, step, payload).map_err(|e| {
            if wire::is_timeout(&e) {
                SendError::TimedOut
            } else {
                SendError::Closed(format!("disconnected ({e})"))
            }
        })
    }

    /// Tells `peer` (best effort) that this rank gives up because of `culprit`.
    pub fn abort(&self, peer: usize, culprit: usize, reason: &str) {
        let _ = self.send(
            peer,
            Kind::Abort,
            culprit as u32,
            0,
            wire::reason_bytes(reason),
        );
    }

    /// Closes every link (with a goodbye first when `graceful`) and joins the reader threads.
    pub fn close(&mut self, graceful: bool) {
        self.mailbox.shut_down();
        for w in self.writers.iter().flatten() {
            let mut s = w.lock().unwrap_or_else(|p| p.into_inner());
            if graceful {
                let _ = s.set_write_timeout(Some(GOODBYE_LIMIT));
                let _ = wire::write_frame(&mut *s, Kind::Goodbye, 0, 0, &[]);
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for h in self.readers.drain(..) {
            if h.join().is_err() {
                tracing::warn!("rank {}: a reader thread panicked", self.rank);
            }
        }
    }
}

/// Reads frames from `peer` into the mailbox until the link ends.
fn read_loop(stream: TcpStream, peer: usize, size: usize, mailbox: &Mailbox) {
    let mut r = io::BufReader::with_capacity(64 << 10, stream);
    loop {
        let f = match wire::read_frame(&mut r, MAX_MESSAGE_BYTES) {
            Ok(f) => f,
            Err(e) => {
                if !mailbox.is_shut_down() {
                    let how = match e {
                        WireError::Eof => "disconnected".to_string(),
                        WireError::Io(e) => format!("disconnected ({e})"),
                        WireError::Malformed(m) => format!("sent a malformed frame: {m}"),
                    };
                    tracing::debug!("link to rank {peer}: {how}");
                    mailbox.close(peer, Closed::Died(how));
                }
                let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        let incoming = match f.kind {
            Kind::Collective => match Op::from_u32(f.aux) {
                Some(op) => Incoming::Coll(CollMsg {
                    op,
                    step: f.step,
                    data: f.payload,
                }),
                None => {
                    mailbox.close(
                        peer,
                        Closed::Died(format!("sent an unknown collective {}", f.aux)),
                    );
                    let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
                    return;
                }
            },
            Kind::PointToPoint => Incoming::P2p(f.payload),
            Kind::Abort => {
                let culprit = f.aux as usize;
                let culprit = if culprit < size { culprit } else { peer };
                mailbox.abort_from(
                    peer,
                    Failure {
                        culprit,
                        reason: format!(
                            "{} (reported by rank {peer})",
                            wire::reason_text(&f.payload)
                        ),
                    },
                );
                continue;
            }
            Kind::Goodbye => {
                mailbox.close(peer, Closed::Left);
                return;
            }
            k => {
                mailbox.close(
                    peer,
                    Closed::Died(format!("sent an unexpected {k:?} frame")),
                );
                let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        if let Err(DeliverError::ShutDown) = mailbox.deliver(peer, incoming, None) {
            return;
        }
    }
}

/// Sends a reject or abort frame, ignoring failure (the other end may be gone already).
fn send_reason(s: &mut TcpStream, kind: Kind, culprit: usize, reason: &str) {
    let _ = wire::write_frame(s, kind, culprit as u32, 0, wire::reason_bytes(reason));
}

/// Tells every connected rank that the setup failed because of `culprit`.
fn abort_links(links: &mut [Option<TcpStream>], culprit: usize, reason: &str) {
    for s in links.iter_mut().flatten() {
        send_reason(s, Kind::Abort, culprit, reason);
    }
}

fn set_read_deadline(s: &TcpStream, deadline: Instant, rank: usize) -> Result<()> {
    let left = remaining(deadline).max(POLL);
    s.set_read_timeout(Some(left))
        .map_err(|source| io_error(rank, "setting a read timeout", source))
}

/// Maps a failed handshake read from `peer` to an error naming the step.
fn read_error(
    rank: usize,
    peer: usize,
    step: &str,
    waiting: &str,
    timeout: Duration,
    e: WireError,
) -> Error {
    if e.is_timeout() {
        return Error::Timeout {
            rank: Some(rank),
            step: waiting.into(),
            after: timeout,
        };
    }
    match e {
        WireError::Malformed(m) => protocol(
            rank,
            step,
            format!("rank {peer} sent a malformed frame: {m}"),
        ),
        e => Error::PeerFailed {
            rank: Some(rank),
            step: step.into(),
            peer,
            reason: match e {
                WireError::Io(e) => format!("disconnected ({e})"),
                _ => "disconnected".into(),
            },
        },
    }
}

fn protocol(rank: usize, step: &str, reason: String) -> Error {
    Error::Protocol {
        rank: Some(rank),
        step: step.into(),
        reason,
    }
}

fn io_error(rank: usize, what: &str, source: io::Error) -> Error {
    Error::Io {
        what: format!("rank {rank}: {what}"),
        source,
    }
}

fn local_addr(l: &TcpListener, what: &str) -> Result<SocketAddr> {
    l.local_addr().map_err(|source| Error::Io {
        what: what.into(),
        source,
    })
}

/// `rank 3`, `ranks 1, 2, 5` (at most 16 listed).
fn rank_list(ranks: &[usize]) -> String {
    let mut s: Vec<String> = ranks.iter().take(16).map(|r| r.to_string()).collect();
    if ranks.len() > 16 {
        s.push(format!("and {} more", ranks.len() - 16));
    }
    let plural = if ranks.len() == 1 { "" } else { "s" };
    format!("rank{plural} {}", s.join(", "))
}
