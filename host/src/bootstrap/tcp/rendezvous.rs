//! The rendezvous, step 1 of the TCP setup: rank 0 listens at the unique id's address
//! ([`RootListener`]), every other rank connects and says hello, and once all have joined rank 0
//! welcomes each with the table of mesh addresses ([`serve`] on rank 0, [`join`] elsewhere).
//!
//! [`join`] then hands over to [`super::mesh`] to connect the other ranks to each other; the
//! hello checks and dialing come from [`super::handshake`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::errors::{io_error, local_addr, protocol, rank_list};
use super::handshake::{
    NOTICE_POLL, POLL, RETRY, Until, abort_links, check_notice, dial, read_error, send_reason,
    wait_readable,
};
use super::hellos::{Arrival, Hellos};
use super::mesh;
use crate::bootstrap::unique_id::UniqueId;
use crate::bootstrap::wire::{
    self, Hello, Kind, MAX_REASON_BYTES, PROTOCOL_VERSION, REJECT_RETRY, Role, WireError,
};
use crate::time::{deadline_after, remaining};
use crate::{Error, Result};
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
///
/// The hellos of all connections are read at once ([`Hellos`]). A connection that is not a
/// rank of this job (wrong magic, version or role, a malformed or missing hello), claims a rank
/// that does not join (0 or out of range) or a rank that has already joined is refused and
/// dropped: the first claim to a rank keeps it, and the second gets a clear error. Only a
/// hello with this job's magic but another world size fails the job, at once: then the job
/// itself is misconfigured, and waiting would only delay the error.
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
    let mut hellos =
        Hellos::new(&listener, magic, Role::Rendezvous).map_err(|source| Error::Io {
            what: "rendezvous: configuring the root listener".into(),
            source,
        })?;
    let mut joined = 1;
    let mut refused = Refused::default();
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
            let step = format!("rendezvous waiting for {}{refused}", rank_list(&missing));
            let culprit = missing.first().copied().unwrap_or(0);
            abort_links(&mut links, culprit, "never joined the rendezvous");
            return Err(Error::Timeout {
                rank: Some(0),
                step,
                after: timeout,
            });
        }
        for arrival in hellos.next(NOTICE_POLL) {
            let (mut stream, from, h) = match arrival {
                Arrival::Hello {
                    stream,
                    from,
                    hello,
                } => (stream, from, hello),
                Arrival::Dropped { from, why } => {
                    tracing::warn!("rendezvous: rejected connection from {from}: {why}");
                    refused.note(from, why);
                    continue;
                }
            };
            let rank = h.rank as usize;
            if h.size as usize != size {
                let err = Error::Mismatch {
                    what: "world size".into(),
                    rank_a: 0,
                    value_a: size.to_string(),
                    rank_b: rank,
                    value_b: h.size.to_string(),
                };
                send_reason(&mut stream, Kind::Reject, 0, &err.to_string());
                // Blame the rank that disagrees, or rank 0 (the one reporting) when it claims
                // a rank outside this job.
                let culprit = if rank < size { rank } else { 0 };
                abort_links(&mut links, culprit, &err.to_string());
                return Err(err);
            }
            let why = if rank == 0 || rank >= size {
                Some(format!(
                    "a process at {from} claims to be rank {rank}, but ranks 1 to {} join rank 0 in a job of {size}",
                    size - 1
                ))
            } else if let Some(first) = &links[rank] {
                let first = first
                    .peer_addr()
                    .map_or_else(|_| "an earlier connection".into(), |a| a.to_string());
                Some(format!(
                    "rank {rank} has already joined from {first}; the second claim, from {from}, is refused"
                ))
            } else {
                None
            };
            if let Some(why) = why {
                tracing::warn!("rendezvous: {why}");
                send_reason(&mut stream, Kind::Reject, 0, &why);
                refused.note(from, why);
                continue;
            }
            tracing::debug!("rendezvous: rank {rank} joined from {from}");
            ports[rank] = h.port;
            links[rank] = Some(stream);
            joined += 1;
        }
    }
    // Hellos already in are told the job has formed; later ones find the listener closed.
    for arrival in hellos.next(Duration::ZERO) {
        if let Arrival::Hello {
            mut stream,
            from,
            hello,
        } = arrival
        {
            let why = format!(
                "rank {} came too late: all {size} ranks have joined the rendezvous",
                hello.rank
            );
            tracing::warn!("rendezvous: refused connection from {from}: {why}");
            send_reason(&mut stream, Kind::Reject, 0, &why);
        }
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
    // Only now, with the welcomes out: the connections still pending are closed.
    drop(hellos);
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
    join_on(id, rank, size, timeout, None)
}

/// [`join`], accepting the mesh links on `mesh` when given (bound by the caller, who then knows
/// its port: the tests use this to attack a mesh port) instead of on a listener bound here.
///
/// The mesh acceptor runs from before the hello to rank 0 on, in a thread of its own, so that
/// connections to the mesh port never pile up unaccepted while this rank waits for the others.
pub(crate) fn join_on(
    id: &UniqueId,
    rank: usize,
    size: usize,
    timeout: Duration,
    mesh: Option<TcpListener>,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = deadline_after(timeout);
    let magic = id.magic();
    let root = dial(id.addr(), (rank, magic), 0, deadline, timeout, "rendezvous")?;
    let ip = root
        .local_addr()
        .map_err(|source| io_error(rank, "rendezvous: local address", source))?
        .ip();
    let listener = match mesh {
        Some(l) => l,
        None => TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|source| io_error(rank, "rendezvous: binding the mesh listener", source))?,
    };
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
    let mesh = mesh::Mesh {
        rank,
        size,
        magic,
        deadline,
        timeout,
    };
    let stop = AtomicBool::new(false);
    let (dialed, accepted) = thread::scope(|scope| {
        let acceptor = thread::Builder::new()
            .name(format!("symcomm-accept{rank}"))
            .spawn_scoped(scope, || mesh.accept(&listener, &stop));
        let acceptor = match acceptor {
            Ok(a) => a,
            Err(e) => {
                let e = io_error(rank, "mesh setup: starting the acceptor thread", e);
                return (Err(e), Ok(Vec::new()));
            }
        };
        let dialed =
            greet_root(id, root, &hello, size, timeout, deadline).and_then(|(root, table)| {
                tracing::debug!("rank {rank}: rendezvous done, building the mesh");
                crate::fault::pause_point("mesh", rank);
                let mut links: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
                links[0] = Some(root);
                match mesh.dial(&table) {
                    Ok(d) => {
                        for (r, s) in d {
                            links[r] = Some(s);
                        }
                        Ok(links)
                    }
                    Err(e) => Err(blame(&mut links, e)),
                }
            });
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
    let mut links = dialed?;
    for (r, s) in accepted.map_err(|e| blame(&mut links, e))? {
        links[r] = Some(s);
    }
    tracing::debug!("rank {rank}: mesh complete");
    Ok(links)
}

/// Tells rank 0 whom this rank blames for the mesh error `e` before its link closes: otherwise
/// the root may blame this rank (its link ends first) instead of the one that failed.
fn blame(links: &mut [Option<TcpStream>], e: Error) -> Error {
    if let Error::PeerFailed { peer, reason, .. } = &e {
        abort_links(links, *peer, reason);
    }
    e
}

/// What rank 0 made of a hello.
enum Answer {
    /// The welcome, with every rank's mesh address.
    Welcome(Vec<SocketAddr>),
    /// Rank 0 refused the connection for now, or closed it before reading the hello: dial
    /// again (why, for the log).
    Again(String),
}

/// Says hello to rank 0 on `root` and waits for the welcome, dialing again for as long as rank
/// 0 answers [`Answer::Again`] (and still accepts connections). Returns the link to rank 0 and
/// the mesh address table.
fn greet_root(
    id: &UniqueId,
    mut root: TcpStream,
    hello: &Hello,
    size: usize,
    timeout: Duration,
    deadline: Instant,
) -> Result<(TcpStream, Vec<SocketAddr>)> {
    let rank = hello.rank as usize;
    // Wait a little longer than the root waits for the others, so that when the job does not
    // come together the root's report (which names the missing ranks) arrives first.
    let welcome_deadline = deadline
        .checked_add((timeout / 4).min(WELCOME_GRACE))
        .unwrap_or(deadline);
    loop {
        let why = match ask_root(&mut root, hello, size, timeout, welcome_deadline)? {
            Answer::Welcome(table) => return Ok((root, table)),
            Answer::Again(why) => why,
        };
        tracing::debug!("rank {rank}: rank 0 did not answer ({why}); dialing again");
        if Instant::now() + RETRY >= deadline {
            return Err(Error::Timeout {
                rank: Some(rank),
                step: format!(
                    "rendezvous: rank 0 at {} kept turning this rank away (last: {why})",
                    id.addr()
                ),
                after: timeout,
            });
        }
        thread::sleep(RETRY);
        root = redial(id, rank, &why, timeout, deadline)?;
    }
}

/// Sends `hello` on `root` and reads rank 0's answer.
fn ask_root(
    root: &mut TcpStream,
    hello: &Hello,
    size: usize,
    timeout: Duration,
    welcome_deadline: Instant,
) -> Result<Answer> {
    let (rank, magic) = (hello.rank as usize, hello.magic);
    let step = "rendezvous";
    if let Err(e) = wire::write_frame(root, Kind::Hello, 0, 0, &hello.encode()) {
        return Ok(Answer::Again(format!("sending the hello failed: {e}")));
    }
    crate::fault::pause_point("connect", rank);
    wait_readable(root, welcome_deadline, (rank, magic), step)?;
    let limit = wire::welcome_len(size).max(MAX_REASON_BYTES);
    let frame = match wire::read_frame(&mut Until::new(root, welcome_deadline), limit) {
        Ok(f) => f,
        Err(WireError::Eof) => return Ok(Answer::Again("it closed the connection".into())),
        Err(WireError::Io(e)) if !wire::is_timeout(&e) => {
            return Ok(Answer::Again(format!("connection lost: {e}")));
        }
        Err(e) => {
            return Err(read_error(
                rank,
                0,
                step,
                "rendezvous waiting for the root's welcome (rank 0 answers once every rank has joined)",
                timeout,
                e,
            ));
        }
    };
    match frame.kind {
        Kind::Welcome => wire::decode_welcome(&frame.payload, magic, size)
            .map(Answer::Welcome)
            .map_err(|why| protocol(rank, step, format!("rank 0 sent a bad welcome: {why}"))),
        Kind::Reject if frame.aux == REJECT_RETRY => Ok(Answer::Again(format!(
            "refused for now: {}",
            wire::reason_text(&frame.payload)
        ))),
        Kind::Reject => Err(protocol(
            rank,
            step,
            format!(
                "the root rejected this rank: {}",
                wire::reason_text(&frame.payload)
            ),
        )),
        Kind::Abort => Err(Error::PeerFailed {
            rank: Some(rank),
            step: step.into(),
            peer: (frame.aux as usize).min(size - 1),
            reason: format!("{} (reported by rank 0)", wire::reason_text(&frame.payload)),
        }),
        k => Err(protocol(
            rank,
            step,
            format!("rank 0 sent a {k:?} frame instead of a welcome"),
        )),
    }
}

/// Connects to rank 0 again after it turned this rank away (`why`). Unlike the first dial, a
/// refused connection is final: rank 0 was listening, so it is gone.
fn redial(
    id: &UniqueId,
    rank: usize,
    why: &str,
    timeout: Duration,
    deadline: Instant,
) -> Result<TcpStream> {
    loop {
        check_notice(rank, id.magic(), "rendezvous")?;
        let left = remaining(deadline);
        if left.is_zero() {
            return Err(Error::Timeout {
                rank: Some(rank),
                step: format!("rendezvous dialing rank 0 at {} again ({why})", id.addr()),
                after: timeout,
            });
        }
        match TcpStream::connect_timeout(&id.addr(), left.clamp(POLL, Duration::from_secs(2))) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_write_timeout(Some(timeout));
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(Error::PeerFailed {
                    rank: Some(rank),
                    step: "rendezvous".into(),
                    peer: 0,
                    reason: format!(
                        "disconnected before the welcome ({why}), and no longer listens"
                    ),
                });
            }
            Err(e) => {
                tracing::debug!("rank {rank}: dialing rank 0 again failed: {e}");
                thread::sleep(RETRY.min(remaining(deadline)));
            }
        }
    }
}

/// The connections the root refused, for its timeout report: how many, and the first few.
#[derive(Default)]
struct Refused {
    count: usize,
    first: Vec<String>,
}

impl Refused {
    /// How many refusals the report spells out.
    const LISTED: usize = 4;

    fn note(&mut self, from: SocketAddr, why: String) {
        self.count += 1;
        if self.first.len() < Self::LISTED {
            // A reason may quote what the connection sent: each is bounded too.
            self.first
                .push(format!("{from}: {}", crate::error::clip(&why, 200)));
        }
    }
}

/// ` (rejected 2 connection(s): a; b)`, or nothing when none was.
impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 0 {
            return Ok(());
        }
        write!(
            f,
            " (rejected {} connection(s): {}",
            self.count,
            self.first.join("; ")
        )?;
        if self.count > self.first.len() {
            write!(f, "; and {} more", self.count - self.first.len())?;
        }
        f.write_str(")")
    }
}
