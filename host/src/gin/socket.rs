//! The socket transport: TCP between the proxies of ranks that exchange operations, two
//! connections ("lanes") per pair and direction of first use: lane 0 for signals, inline values
//! and puts of at most [`SMALL_PUT`] bytes, lane 1 for larger puts, so that a signal is not
//! queued behind bulk data (and strong signals really depend on the ordering rules of
//! [`super::landing`]).
//!
//! Set-up (collective, inside `DevComm::create`): every rank listens on the address its
//! bootstrap links use (port chosen by the OS) and all-gathers the address and a random 64-bit
//! token; that is all (one listening socket and one wake-up descriptor per rank, whatever the
//! job's size). **Connections are made on first use**: the first operation a rank sends to a
//! peer on a lane dials that peer and sends a hello carrying the *peer's* token; the peer's
//! receive thread accepts it and, if it has no connection of its own to this rank on that lane
//! yet, sends its own operations back on it. Two ranks that dial each other at once simply have
//! two connections on that lane, both read. Hellos are read as the bootstrap reads its own
//! (every pending connection at once, each with its own deadline, a bounded number pending), so
//! a stranger that connects and sends nothing or garbage holds up nobody, and one without the
//! token (which only the job's ranks learnt, through the bootstrap) is refused.
//!
//! The receive thread polls the listener and every connection and applies what arrives
//! ([`super::landing`]). A test-only mode ([`TEST_DELAY_ENV`]) holds every lane-1 put for a
//! while before it lands, so that data lands after signals sent later on lane 0.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::mover::{Mover, VALUE_WRITE_BYTES, write_all_vectored};
use super::state::{Shared, Target};
use super::transport::Transport;
use super::wire::{Frame, HEADER, Kind};
use crate::bootstrap::tcp::handshake::dial;
use crate::bootstrap::tcp::hellos::{Arrival, Hellos};
use crate::bootstrap::wire::{self, Hello, PROTOCOL_VERSION, Role};
use crate::comm::Communicator;
use crate::device::Device;
use crate::{Error, Result};

/// Puts of at most this many bytes travel on lane 0 with the signals.
pub(crate) const SMALL_PUT: u64 = 4096;
/// Connections per connected pair.
pub(crate) const LANES: usize = 2;
/// Descriptors a rank's transport holds from set-up on: the listener and the receive thread's
/// wake-up `eventfd`.
pub(crate) const SETUP_FDS: usize = 2;
/// How long the receive thread polls without blocking after a frame.
const RX_SPIN: Duration = Duration::from_micros(100);
/// Test-only: microseconds every lane-1 put is held by the receiver before it lands (unset: 0).
/// For the ordering tests; never set it in production.
pub const TEST_DELAY_ENV: &str = "SYMCOMM_GIN_TEST_DELAY_US";

/// One lane to a peer, as the sending half sees it.
enum Lane {
    /// No connection yet: the first operation dials one.
    Unconnected,
    /// This rank writes its operations here.
    Open(Arc<TcpStream>),
    /// Broken after an error that may have left a frame half-written: never written again (the
    /// peer would read the next header as data).
    Broken,
}

/// The sending halves, per peer and lane.
pub(crate) struct Writers {
    lanes: Vec<[Mutex<Lane>; LANES]>,
    /// Serialises the dialing of each peer (the receive thread adopts a connection only when
    /// nobody is dialing that peer).
    connecting: Vec<Mutex<()>>,
    /// Peers that said goodbye: their device communicator is gone.
    left: Vec<AtomicBool>,
    /// Sockets of connections this rank holds (dialed or accepted).
    sockets: AtomicUsize,
    /// Accepted connections not adopted as a lane: never written but for notices (the dialer
    /// reads them), and shut down with the others at close.
    accepted: Mutex<Vec<(usize, Arc<TcpStream>)>>,
}

impl Writers {
    /// Sends a control frame of `kind` carrying `why` to `peer`, best effort and without
    /// blocking: on lane 0 if this rank writes one, else on a connection it accepted from
    /// `peer`; if the lane is busy or the peer is not reading, nothing is sent (and a half-sent
    /// frame breaks the lane).
    fn notice(&self, peer: usize, kind: Kind, why: &str) {
        if !self.notice_on(peer, 0, kind, why)
            && let Ok(acc) = self.accepted.lock()
            && let Some((_, st)) = acc.iter().find(|(p, _)| *p == peer)
        {
            let _ = send_notice(st, kind, why);
        }
    }

    /// [`Writers::notice`] on lane `lane` only; false when the lane is not open.
    fn notice_on(&self, peer: usize, lane: usize, kind: Kind, why: &str) -> bool {
        let Some(lane) = self.lanes.get(peer).and_then(|l| l.get(lane)) else {
            return false;
        };
        let Ok(mut guard) = lane.try_lock() else {
            return true; // busy: open, in use
        };
        let Lane::Open(st) = &*guard else {
            return false;
        };
        if !send_notice(st, kind, why) {
            // Part of the frame went out (or the connection failed): the lane is unusable.
            let _ = st.shutdown(std::net::Shutdown::Both);
            *guard = Lane::Broken;
        }
        true
    }

    /// [`Writers::notice`] to every peer this rank has a connection with.
    fn notice_all(&self, kind: Kind, why: &str) {
        for peer in 0..self.lanes.len() {
            self.notice(peer, kind, why);
        }
    }
}

/// Writes one control frame without blocking; false when it may be half-written or the
/// connection failed.
fn send_notice(st: &TcpStream, kind: Kind, why: &str) -> bool {
    let mut f = Frame::new(kind);
    f.bytes = why.len() as u64;
    let mut frame = f.encode().to_vec();
    frame.extend_from_slice(why.as_bytes());
    let _ = st.set_nonblocking(true);
    let sent = (&*st).write(&frame);
    let _ = st.set_nonblocking(false);
    matches!(sent, Ok(n) if n == frame.len())
        || matches!(sent, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// New connections for the receive thread, and the `eventfd` that wakes it.
struct Inbox {
    conns: Mutex<Vec<(usize, usize, Arc<TcpStream>)>>,
    wake: OwnedFd,
    /// Set when the transport closes: the receive thread shuts its connections and ends.
    stop: AtomicBool,
}

impl Inbox {
    fn new() -> Result<Inbox> {
        // SAFETY: eventfd(2) with valid flags; the descriptor is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io {
                what: "creating the GIN receive thread's eventfd".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Inbox {
            conns: Mutex::new(Vec::new()),
            // SAFETY: a fresh descriptor, owned by nothing else.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            stop: AtomicBool::new(false),
        })
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write of a live buffer to our eventfd (never blocks: non-blocking).
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    fn drain_wake(&self) {
        let mut b = [0u8; 8];
        // SAFETY: an 8-byte read into a live buffer from our non-blocking eventfd.
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }
}

/// The socket transport of one rank.
pub(crate) struct Sockets {
    me: usize,
    size: usize,
    job: u64,
    timeout: Duration,
    /// Every rank's listener address and token.
    peers: Vec<(SocketAddr, u64)>,
    writers: Arc<Writers>,
    inbox: Arc<Inbox>,
    receiver: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

impl Sockets {
    /// Collective set-up (see the module docs); starts the receive thread.
    pub(crate) fn connect(
        comm: &Communicator,
        shared: Arc<Shared>,
        device: &Device,
    ) -> Result<Sockets> {
        let me = comm.rank();
        let size = comm.size();
        let boot = comm.bootstrap();
        let listener = TcpListener::bind(SocketAddr::new(boot.local_ip(), 0))
            .map_err(io_err("binding the GIN listener".into()));
        let token = crate::bootstrap::random_token();
        let mine = match &listener {
            Ok(l) => match l.local_addr() {
                Ok(a) => format!("{a} {token}"),
                Err(e) => format!("! {e}"),
            },
            Err(e) => format!("! {e}"),
        };
        let all = boot.runtime_all_gather(mine.as_bytes())?;
        let mut peers = Vec::with_capacity(size);
        for (r, b) in all.iter().enumerate() {
            let text = String::from_utf8_lossy(b);
            let mut it = text.split(' ');
            let parsed = match (it.next(), it.next()) {
                (Some(a), Some(t)) => a.parse::<SocketAddr>().ok().zip(t.parse::<u64>().ok()),
                _ => None,
            };
            match parsed {
                Some(p) => peers.push(p),
                None => {
                    return Err(Error::PeerFailed {
                        rank: Some(me),
                        step: "GIN set-up".into(),
                        peer: r,
                        reason: format!("could not listen for GIN connections: {text}"),
                    });
                }
            }
        }
        let built = listener.and_then(|listener| {
            let delay = std::env::var(TEST_DELAY_ENV)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_micros)
                .filter(|d| !d.is_zero());
            let writers = Arc::new(Writers {
                lanes: (0..size)
                    .map(|_| std::array::from_fn(|_| Mutex::new(Lane::Unconnected)))
                    .collect(),
                connecting: (0..size).map(|_| Mutex::new(())).collect(),
                left: (0..size).map(|_| AtomicBool::new(false)).collect(),
                sockets: AtomicUsize::new(0),
                accepted: Mutex::new(Vec::new()),
            });
            let inbox = Arc::new(Inbox::new()?);
            let rx = Receiver {
                shared: Arc::clone(&shared),
                writers: Arc::clone(&writers),
                inbox: Arc::clone(&inbox),
                mover: Mover::new(device)?,
                listener,
                token,
                size,
                timeout: boot.timeout(),
                delay,
            };
            let receiver = std::thread::Builder::new()
                .name(format!("symcomm-gin-rx{me}"))
                .spawn(move || rx.run())
                .map_err(io_err("starting the GIN receive thread".into()))?;
            Ok(Sockets {
                me,
                size,
                job: comm.job_id(),
                timeout: boot.timeout(),
                peers,
                writers,
                inbox,
                receiver: Mutex::new(Some(receiver)),
                shared: Arc::clone(&shared),
            })
        });
        // Every rank learns whether every rank's transport came up.
        if let Err(e) = comm.agree("GIN set-up", "GIN", built.as_ref().err(), &[]) {
            if let Ok(s) = &built {
                s.close();
            }
            return Err(built.err().unwrap_or(e));
        }
        let sockets = built?;
        let w = Arc::clone(&sockets.writers);
        // A failure of this rank's GIN reaches every peer it talks to (they stop waiting for
        // this rank).
        let _ = shared
            .notify
            .set(Box::new(move |why: &str| w.notice_all(Kind::Failed, why)));
        Ok(sockets)
    }

    /// Dials `peer` on `lane` unless a connection is there already (dialed or adopted).
    fn connect_lane(&self, peer: usize, lane: usize) -> Result<()> {
        let w = &self.writers;
        let _dialing = w.connecting[peer]
            .lock()
            .map_err(|_| Error::Internal("a GIN connecting lock is poisoned".into()))?;
        let unconnected = matches!(
            *w.lanes[peer][lane]
                .lock()
                .map_err(|_| Error::Internal("a GIN connection's lock is poisoned".into()))?,
            Lane::Unconnected
        );
        if !unconnected {
            return Ok(());
        }
        let (addr, token) = self.peers[peer];
        let deadline = Instant::now() + self.timeout;
        let mut st = dial(
            addr,
            (self.me, self.job),
            peer,
            deadline,
            self.timeout,
            "GIN connect",
        )?;
        let hello = Hello {
            magic: token,
            version: PROTOCOL_VERSION,
            role: Role::Gin,
            rank: self.me as u32,
            size: self.size as u32,
            to: peer as u32,
            port: lane as u16,
        };
        wire::write_frame(&mut st, wire::Kind::Hello, 0, 0, &hello.encode())
            .map_err(io_err(format!("sending a GIN hello to rank {peer}")))?;
        let _ = st.set_nodelay(true);
        let _ = st.set_write_timeout(Some(self.timeout));
        let st = Arc::new(st);
        w.sockets.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = w.lanes[peer][lane].lock() {
            *l = Lane::Open(Arc::clone(&st));
        }
        if let Ok(mut c) = self.inbox.conns.lock() {
            c.push((peer, lane, st));
        }
        self.inbox.wake();
        Ok(())
    }

    fn write_frame(
        &self,
        peer: usize,
        lane: usize,
        f: &Frame,
        body: Body,
        mover: &mut Mover,
    ) -> Result<()> {
        let me = self.me;
        let failed = |reason: String| Error::PeerFailed {
            rank: Some(me),
            step: "GIN".into(),
            peer,
            reason,
        };
        if peer >= self.size || peer == me {
            return Err(Error::InvalidArgument(format!(
                "GIN: no connection to rank {peer}"
            )));
        }
        if self.writers.left[peer].load(Ordering::Acquire) {
            return Err(failed(format!(
                "destroyed its device communicator, and this rank still sent it a {:?}",
                f.kind
            )));
        }
        let lock = || {
            self.writers.lanes[peer][lane]
                .lock()
                .map_err(|_| Error::Internal("a GIN connection's lock is poisoned".into()))
        };
        let mut guard = lock()?;
        if matches!(*guard, Lane::Unconnected) {
            drop(guard);
            self.connect_lane(peer, lane)?;
            guard = lock()?;
        }
        let st = match &*guard {
            Lane::Open(st) => Arc::clone(st),
            _ => {
                return Err(failed(
                    "has no working GIN connection to this rank any more".into(),
                ));
            }
        };
        let sent: std::result::Result<usize, Error> = {
            let io = |e: std::io::Error| failed(format!("GIN connection lost: {e}"));
            let mut w: &TcpStream = &st;
            let head = f.encode();
            match body {
                Body::None => w.write_all(&head).map(|()| 0).map_err(io),
                Body::Bytes(b) => write_all_vectored(&mut w, &head, b)
                    .map(|()| b.len())
                    .map_err(io),
                Body::Window { win, off, len } => {
                    match mover.send(&self.shared.registry, (win, off, len), &head, &mut w) {
                        Ok(()) => Ok(len),
                        Err(Ok(why)) => Err(Error::InvalidArgument(format!(
                            "GIN: a put from {why} (the window went while it was being sent)"
                        ))),
                        Err(Err(e)) => Err(failed(format!("GIN connection lost: {e}"))),
                    }
                }
            }
        };
        match sent {
            Ok(n) => {
                let s = &self.shared.stats;
                s.bytes_sent
                    .fetch_add((HEADER + n) as u64, Ordering::Relaxed);
                s.frames_sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                // The header is out, the frame perhaps not: the lane cannot carry another.
                let _ = st.shutdown(std::net::Shutdown::Both);
                *guard = Lane::Broken;
                Err(e)
            }
        }
    }
}

/// What follows a header.
pub(crate) enum Body<'a> {
    None,
    #[cfg_attr(not(test), allow(dead_code))] // forged frames of the tests
    Bytes(&'a [u8]),
    Window {
        win: u32,
        off: u64,
        len: usize,
    },
}

impl Transport for Sockets {
    fn fds(&self) -> usize {
        SETUP_FDS + self.writers.sockets.load(Ordering::Relaxed)
    }

    fn send(
        &self,
        peer: usize,
        f: &Frame,
        src: Option<(u32, u64, usize)>,
        mover: &mut Mover,
    ) -> Result<()> {
        let lane = usize::from(f.kind == Kind::Put && f.bytes > SMALL_PUT);
        let body = match src {
            Some((win, off, len)) => Body::Window { win, off, len },
            None => Body::None,
        };
        self.write_frame(peer, lane, f, body, mover)
    }

    #[cfg(test)]
    fn send_raw(&self, peer: usize, f: &Frame, body: &[u8]) -> Result<()> {
        let dev = crate::device::Device::open(0)?;
        let mut mover = Mover::new(&dev)?;
        self.write_frame(peer, 0, f, Body::Bytes(body), &mut mover)
    }

    fn close(&self) {
        let w = &self.writers;
        for peer in 0..w.lanes.len() {
            for lane in 0..LANES {
                // A goodbye on every connection (each ends with one), then it is shut (no
                // blocking write: a peer that stopped reading must not hold up this rank's
                // teardown; shutting it also ends a read the receive thread is blocked in).
                w.notice_on(peer, lane, Kind::Close, "");
                if let Ok(mut g) = w.lanes[peer][lane].lock()
                    && let Lane::Open(st) = &*g
                {
                    let _ = st.shutdown(std::net::Shutdown::Both);
                    *g = Lane::Broken;
                }
            }
        }
        if let Ok(acc) = w.accepted.lock() {
            for (_, st) in acc.iter() {
                send_notice(st, Kind::Close, "");
                let _ = st.shutdown(std::net::Shutdown::Both);
            }
        }
        self.inbox.stop.store(true, Ordering::Release);
        self.inbox.wake();
        let handle = self.receiver.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// One connection as the receive thread sees it.
struct Conn {
    peer: usize,
    lane: usize,
    stream: Arc<TcpStream>,
    open: bool,
}

/// A put held back by the test-only delay.
struct Held {
    due: Instant,
    from: usize,
    frame: Frame,
    data: Vec<u8>,
}

/// The receive thread's state.
struct Receiver {
    /// First, so that it is dropped first: its stream is synchronised (queued landings run)
    /// while the rank's mapped memory is still alive.
    mover: Mover,
    shared: Arc<Shared>,
    writers: Arc<Writers>,
    inbox: Arc<Inbox>,
    listener: TcpListener,
    token: u64,
    size: usize,
    timeout: Duration,
    delay: Option<Duration>,
}

impl Receiver {
    /// Polls the wake-up descriptor, the listener and every connection until the transport
    /// closes; accepts connections and lands what arrives.
    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let writers = Arc::clone(&self.writers);
        if let Err(e) = self.mover.bind() {
            shared.fail(e);
            return;
        }
        let mut hellos = match Hellos::new(&self.listener, self.token, Role::Gin) {
            Ok(h) => h,
            Err(e) => {
                shared.fail(Error::Io {
                    what: "reading GIN hellos".into(),
                    source: e,
                });
                return;
            }
        };
        let mut conns: Vec<Conn> = Vec::new();
        let mut held: VecDeque<Held> = VecDeque::new();
        let mut last_frame = Instant::now()
            .checked_sub(RX_SPIN)
            .unwrap_or_else(Instant::now);
        // Whether windows of queued landings are still held (see `Shared::release_landed`).
        let mut holding = false;
        loop {
            if holding {
                holding = shared.release_landed();
            }
            // Land held puts that are due.
            while held.front().is_some_and(|h| h.due <= Instant::now()) {
                let Some(h) = held.pop_front() else { break };
                let at = (h.frame.dst_win, h.frame.dst_off);
                match self.mover.write(&shared.registry, at, &h.data) {
                    Ok(()) => shared.landed(h.from, &h.frame),
                    Err(Ok(why)) => shared.fail(Error::Gin {
                        rank: None,
                        reason: format!("a put from rank {} could not land: {why}", h.from),
                    }),
                    Err(Err(e)) => shared.fail(e),
                }
            }
            if self.inbox.stop.load(Ordering::Acquire) {
                for c in &conns {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
            // New connections this rank dialed.
            if let Ok(mut new) = self.inbox.conns.lock() {
                conns.extend(new.drain(..).map(|(peer, lane, stream)| Conn {
                    peer,
                    lane,
                    stream,
                    open: true,
                }));
            }
            conns.retain(|c| c.open);
            // Right after a frame, poll without sleeping for a while (a reply often follows
            // within tens of microseconds, and a wake-up costs several); then block.
            let wait_ms = if last_frame.elapsed() < RX_SPIN {
                std::thread::yield_now();
                0
            } else {
                // Holding windows for queued landings: look again soon, so that a
                // deregistration waiting for one goes on.
                let most = if holding { 1 } else { 100 };
                match held.front() {
                    Some(h) => h
                        .due
                        .saturating_duration_since(Instant::now())
                        .as_millis()
                        .min(most) as i32,
                    None => most as i32,
                }
            };
            let mut fds: Vec<libc::pollfd> =
                [self.inbox.wake.as_raw_fd(), self.listener.as_raw_fd()]
                    .into_iter()
                    .chain(conns.iter().map(|c| c.stream.as_raw_fd()))
                    .map(|fd| libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
            // SAFETY: `fds` holds `fds.len()` initialised pollfds, alive for the whole call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
            if fds[0].revents != 0 {
                self.inbox.drain_wake();
            }
            // Accept and read hellos (also while some are pending, to expire them).
            if fds[1].revents != 0 || !hellos.is_idle() {
                for a in hellos.next(Duration::ZERO) {
                    self.arrival(a, &mut conns);
                }
            }
            if n <= 0 {
                continue;
            }
            last_frame = Instant::now();
            for (k, c) in conns.iter_mut().enumerate() {
                if fds.get(k + 2).is_none_or(|f| f.revents == 0) {
                    continue;
                }
                holding = true;
                match read_one(&shared, &writers, &mut self.mover, c, self.delay, &mut held) {
                    Ok(true) => {}
                    Ok(false) => c.open = false,
                    Err(e) => {
                        c.open = false;
                        if !shared.stopping() && !self.inbox.stop.load(Ordering::Acquire) {
                            shared.fail(e);
                        }
                    }
                }
            }
        }
    }

    /// A connection whose hello is complete: checked, then read; adopted for this rank's own
    /// operations to that peer on that lane when it has none and nobody is dialing one.
    fn arrival(&self, a: Arrival, conns: &mut Vec<Conn>) {
        let me = self.shared.cfg.rank;
        match a {
            Arrival::Hello {
                stream,
                from,
                hello,
            } => {
                let (p, lane) = (hello.rank as usize, hello.port as usize);
                let fits = hello.to as usize == me
                    && hello.size as usize == self.size
                    && p < self.size
                    && p != me
                    && self.shared.connected(p)
                    && lane < LANES;
                if !fits {
                    tracing::warn!(
                        "rank {me}: GIN: refused a connection from {from} (hello for rank {} of \
                         {} from rank {p}, lane {lane})",
                        hello.to,
                        hello.size
                    );
                    return;
                }
                let _ = stream.set_nodelay(true);
                let _ = stream.set_write_timeout(Some(self.timeout));
                let stream = Arc::new(stream);
                self.writers.sockets.fetch_add(1, Ordering::Relaxed);
                // Never block here: the proxy may hold the lane for a long write that only
                // this thread's reading lets finish.
                let adopted = if let Ok(_nobody_dialing) = self.writers.connecting[p].try_lock()
                    && let Ok(mut l) = self.writers.lanes[p][lane].try_lock()
                    && matches!(*l, Lane::Unconnected)
                {
                    *l = Lane::Open(Arc::clone(&stream));
                    true
                } else {
                    false
                };
                if !adopted && let Ok(mut acc) = self.writers.accepted.lock() {
                    acc.push((p, Arc::clone(&stream)));
                }
                conns.push(Conn {
                    peer: p,
                    lane,
                    stream,
                    open: true,
                });
            }
            Arrival::Dropped { from, why } => {
                tracing::warn!("rank {me}: GIN: dropped a connection from {from}: {why}");
            }
        }
    }
}

/// Reads and handles one frame of `c`; `Ok(false)` once the connection is closed on purpose.
fn read_one(
    shared: &Shared,
    writers: &Writers,
    mover: &mut Mover,
    c: &mut Conn,
    delay: Option<Duration>,
    held: &mut VecDeque<Held>,
) -> Result<bool> {
    let me = shared.cfg.rank;
    let from = c.peer;
    let gone = |why: String| Error::PeerFailed {
        rank: Some(me),
        step: "GIN".into(),
        peer: from,
        reason: why,
    };
    let mut head = [0u8; HEADER];
    match (&*c.stream).read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(gone(
                "closed its GIN connection without notice (it died or failed)".into(),
            ));
        }
        Err(e) => return Err(gone(format!("GIN connection failed: {e}"))),
    }
    let f = Frame::decode(&head).map_err(|w| {
        writers.notice(from, Kind::Refused, &w);
        Error::PeerProtocol {
            rank: Some(me),
            step: "GIN".into(),
            peer: from,
            what: w,
        }
    })?;
    shared
        .stats
        .bytes_received
        .fetch_add(HEADER as u64, Ordering::Relaxed);
    match f.kind {
        Kind::Close => {
            writers.left[from].store(true, Ordering::Release);
            return Ok(false);
        }
        Kind::Refused | Kind::Failed => {
            let mut why = vec![0u8; f.bytes.min(4096) as usize];
            let _ = (&*c.stream).read_exact(&mut why);
            let what = if f.kind == Kind::Refused {
                "refused an operation of this rank"
            } else {
                "failed its GIN"
            };
            return Err(gone(format!("{what}: {}", String::from_utf8_lossy(&why))));
        }
        _ => {}
    }
    shared.stats.frames_received.fetch_add(1, Ordering::Relaxed);
    let target = match shared.check_incoming(from, &f).and_then(|t| {
        shared.admit(from, &f)?;
        Ok(t)
    }) {
        Ok(t) => t,
        Err(why) => {
            writers.notice(from, Kind::Refused, &why);
            return Err(Error::PeerProtocol {
                rank: Some(me),
                step: "GIN".into(),
                peer: from,
                what: format!("{why}: refused"),
            });
        }
    };
    if let Target::Bytes { win, off, len } = target {
        let landing = |r: std::result::Result<(), std::result::Result<String, Error>>| match r {
            Ok(()) => Ok(()),
            Err(Ok(why)) => Err(Error::Gin {
                rank: None,
                reason: format!("a {:?} from rank {from} could not land: {why}", f.kind),
            }),
            Err(Err(e)) => Err(gone(format!("GIN data could not be received: {e}"))),
        };
        match f.kind {
            Kind::PutValue => {
                let b = f.value.to_le_bytes();
                match shared.land_values(from, &f, mover, (win, off), &b[..len]) {
                    // Landed (queued for the GPU) with its signals.
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    Err(e) => landing(Err(e))?,
                }
                landing(mover.write(&shared.registry, (win, off), &b[..len]))?;
            }
            _ => {
                shared
                    .stats
                    .bytes_received
                    .fetch_add(len as u64, Ordering::Relaxed);
                if let (Some(d), 1) = (delay, c.lane) {
                    let mut data = vec![0u8; len];
                    (&*c.stream)
                        .read_exact(&mut data)
                        .map_err(|e| gone(format!("GIN data could not be received: {e}")))?;
                    held.push_back(Held {
                        due: Instant::now() + d,
                        from,
                        frame: f,
                        data,
                    });
                    return Ok(true);
                }
                if mover.is_gpu() && len <= VALUE_WRITE_BYTES {
                    let mut b = [0u8; VALUE_WRITE_BYTES];
                    (&*c.stream)
                        .read_exact(&mut b[..len])
                        .map_err(|e| gone(format!("GIN data could not be received: {e}")))?;
                    match shared.land_values(from, &f, mover, (win, off), &b[..len]) {
                        Ok(true) => return Ok(true),
                        Ok(false) => {}
                        Err(e) => landing(Err(e))?,
                    }
                    landing(mover.write(&shared.registry, (win, off), &b[..len]))?;
                } else {
                    landing(mover.receive(&shared.registry, (win, off, len), &mut &*c.stream))?;
                }
            }
        }
    }
    shared.landed(from, &f);
    Ok(true)
}
