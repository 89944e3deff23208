//! The socket transport: TCP between the proxies of every pair of connected ranks, two
//! connections ("lanes") per pair: lane 0 for signals, inline values and puts of at most
//! [`SMALL_PUT`] bytes, lane 1 for larger puts, so that a signal is not queued behind bulk
//! data (and strong signals really depend on the ordering rules of [`super::landing`]).
//!
//! Set-up (collective, inside `DevComm::create`): every rank listens on the address its
//! bootstrap links use (port chosen by the OS), and all-gathers the address and a random
//! 64-bit token. A rank dials every connected higher rank, once per lane, and sends a hello
//! carrying the *acceptor's* token; it accepts the lower ranks' connections. The listener reads
//! hellos as the bootstrap's do (every pending connection at once, each with its own deadline,
//! a bounded number pending), so a stranger that connects and sends nothing or garbage holds up
//! nobody, and one without the token (which only the job's ranks learnt, through the bootstrap)
//! is refused. The listener is closed when set-up ends: nothing is accepted afterwards.
//!
//! The receive thread polls every connection and applies what arrives ([`super::landing`]).
//! A test-only mode ([`TEST_DELAY_ENV`]) holds every lane-1 put for a while before it lands,
//! so that data lands after signals sent later on lane 0.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::mover::Mover;
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
/// How long the receive thread polls without blocking after a frame.
const RX_SPIN: Duration = Duration::from_micros(100);
/// Test-only: microseconds every lane-1 put is held by the receiver before it lands (unset: 0).
/// For the ordering tests; never set it in production.
pub const TEST_DELAY_ENV: &str = "SYMCOMM_GIN_TEST_DELAY_US";

/// The socket transport of one rank.
pub(crate) struct Sockets {
    /// Sockets this transport holds (one per lane per connected peer).
    fds: usize,
    writers: Arc<Writers>,
    receiver: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

/// The sending halves: `[peer][lane]`, empty for peers this rank is not connected to. A lane
/// is `None` once broken: after an error that may have left a frame half-written, it is shut
/// down and never written again (the peer would read the next header as data).
pub(crate) struct Writers {
    lanes: Vec<Vec<Mutex<Option<Arc<TcpStream>>>>>,
    /// Peers that said goodbye: their device communicator is gone.
    left: Vec<AtomicBool>,
}

impl Writers {
    /// Sends a control frame of `kind` carrying `why` to `peer` on lane 0, best effort and
    /// without blocking: if the lane is busy or the peer is not reading, nothing is sent (and
    /// a half-sent frame breaks the lane).
    fn notice(&self, peer: usize, kind: Kind, why: &str) {
        self.notice_on(peer, 0, kind, why);
    }

    /// [`Writers::notice`] on lane `lane`.
    fn notice_on(&self, peer: usize, lane: usize, kind: Kind, why: &str) {
        let mut f = Frame::new(kind);
        f.bytes = why.len() as u64;
        let Some(lane) = self.lanes.get(peer).and_then(|l| l.get(lane)) else {
            return;
        };
        let Ok(mut guard) = lane.try_lock() else {
            return;
        };
        let Some(st) = guard.as_mut() else {
            return;
        };
        let mut frame = f.encode().to_vec();
        frame.extend_from_slice(why.as_bytes());
        let _ = st.set_nonblocking(true);
        let sent = (&**st).write(&frame);
        let _ = st.set_nonblocking(false);
        if !matches!(sent, Ok(n) if n == frame.len())
            && !matches!(sent, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
        {
            // Part of the frame went out (or the connection failed): the lane is unusable.
            if let Some(st) = guard.take() {
                let _ = st.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// [`Writers::notice`] to every connected peer.
    fn notice_all(&self, kind: Kind, why: &str) {
        for peer in 0..self.lanes.len() {
            self.notice(peer, kind, why);
        }
    }
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
        let listener = listener?;
        let mut peers: Vec<Option<(SocketAddr, u64)>> = vec![None; size];
        for (r, b) in all.iter().enumerate() {
            let text = String::from_utf8_lossy(b);
            let mut it = text.split(' ');
            let parsed = match (it.next(), it.next()) {
                (Some(a), Some(t)) => a.parse::<SocketAddr>().ok().zip(t.parse::<u64>().ok()),
                _ => None,
            };
            match parsed {
                Some(p) => peers[r] = Some(p),
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
        let deadline = Instant::now() + boot.timeout();
        let expected: Vec<usize> = (0..me).filter(|&p| shared.connected(p)).collect();
        // One socket per lane, shared by the sending half (here) and the receive thread (one
        // file descriptor per lane, not two).
        let mut writers: Vec<Vec<Mutex<Option<Arc<TcpStream>>>>> =
            (0..size).map(|_| Vec::new()).collect();
        let mut readers: Vec<(usize, usize, Arc<TcpStream>)> = Vec::new();
        // The set-up's outcome, agreed below with every rank.
        // Accept the lower ranks while dialing the higher ones.
        let stop = AtomicBool::new(false);
        let accepted = std::thread::scope(|s| {
            let acceptor =
                s.spawn(|| accept(&listener, me, size, token, &expected, deadline, &stop, boot));
            let dialed = (|| {
                let mut dialed = Vec::new();
                for p in (me + 1..size).filter(|&p| shared.connected(p)) {
                    let Some((addr, their_token)) = peers[p] else {
                        continue;
                    };
                    for lane in 0..LANES {
                        let mut st = dial(
                            addr,
                            (me, comm.job_id()),
                            p,
                            deadline,
                            boot.timeout(),
                            "GIN set-up",
                        )?;
                        let hello = Hello {
                            magic: their_token,
                            version: PROTOCOL_VERSION,
                            role: Role::Gin,
                            rank: me as u32,
                            size: size as u32,
                            to: p as u32,
                            port: lane as u16,
                        };
                        wire::write_frame(&mut st, wire::Kind::Hello, 0, 0, &hello.encode())
                            .map_err(io_err(format!("sending a GIN hello to rank {p}")))?;
                        dialed.push((p, lane, st));
                    }
                }
                Ok::<_, Error>(dialed)
            })();
            if dialed.is_err() {
                stop.store(true, Ordering::Release);
            }
            let got = acceptor
                .join()
                .map_err(|_| Error::Internal("the GIN acceptor panicked".into()))?;
            Ok::<_, Error>((dialed?, got?))
        });
        drop(listener);
        let built = accepted.and_then(|(dialed, got)| {
            let mut all: Vec<(usize, usize, TcpStream)> = dialed.into_iter().chain(got).collect();
            all.sort_by_key(|c| (c.0, c.1));
            for (p, _lane, st) in all {
                let _ = st.set_nodelay(true);
                let _ = st.set_write_timeout(Some(boot.timeout()));
                let st = Arc::new(st);
                readers.push((p, writers[p].len(), Arc::clone(&st)));
                writers[p].push(Mutex::new(Some(st)));
            }
            let delay = std::env::var(TEST_DELAY_ENV)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_micros)
                .filter(|d| !d.is_zero());
            let writers = Arc::new(Writers {
                lanes: writers,
                left: (0..size).map(|_| AtomicBool::new(false)).collect(),
            });
            let (sh, w) = (Arc::clone(&shared), Arc::clone(&writers));
            let mover = Mover::new(device)?;
            let fds = readers.len();
            let receiver = std::thread::Builder::new()
                .name(format!("symcomm-gin-rx{me}"))
                .spawn(move || receive(sh, w, mover, readers, delay))
                .map_err(io_err("starting the GIN receive thread".into()))?;
            Ok(Sockets {
                writers,
                receiver: Mutex::new(Some(receiver)),
                shared: Arc::clone(&shared),
                fds,
            })
        });
        // Every rank learns whether every rank's connections came up.
        if let Err(e) = comm.agree("GIN set-up", "GIN", built.as_ref().err(), &[]) {
            if let Ok(s) = &built {
                s.shared.stop.store(true, Ordering::Release);
                s.close();
            }
            return Err(built.err().unwrap_or(e));
        }
        let sockets = built?;
        let w = Arc::clone(&sockets.writers);
        // A failure of this rank's GIN reaches every peer (they stop waiting for this rank).
        let _ = shared
            .notify
            .set(Box::new(move |why: &str| w.notice_all(Kind::Failed, why)));
        Ok(sockets)
    }

    fn write_frame(
        &self,
        peer: usize,
        lane: usize,
        f: &Frame,
        body: Body,
        mover: &mut Mover,
    ) -> Result<()> {
        let me = self.shared.cfg.rank;
        let failed = |reason: String| Error::PeerFailed {
            rank: Some(me),
            step: "GIN".into(),
            peer,
            reason,
        };
        let lanes = self
            .writers
            .lanes
            .get(peer)
            .filter(|l| l.len() == LANES)
            .ok_or_else(|| Error::InvalidArgument(format!("GIN: no connection to rank {peer}")))?;
        if self.writers.left[peer].load(Ordering::Acquire) {
            return Err(failed(format!(
                "destroyed its device communicator, and this rank still sent it a {:?}",
                f.kind
            )));
        }
        let mut guard = lanes[lane]
            .lock()
            .map_err(|_| Error::Internal("a GIN connection's lock is poisoned".into()))?;
        let Some(st) = guard.as_mut() else {
            return Err(failed(
                "has no working GIN connection to this rank any more".into(),
            ));
        };
        let sent = (|| -> std::result::Result<usize, Error> {
            let io = |e: std::io::Error| failed(format!("GIN connection lost: {e}"));
            let mut w: &TcpStream = st;
            w.write_all(&f.encode()).map_err(io)?;
            match body {
                Body::None => Ok(0),
                Body::Bytes(b) => w.write_all(b).map(|()| b.len()).map_err(io),
                Body::Window { win, off, len } => {
                    match mover.send(&self.shared.registry, (win, off, len), &mut w) {
                        Ok(()) => Ok(len),
                        Err(Ok(why)) => Err(Error::InvalidArgument(format!(
                            "GIN: a put from {why} (the window went while it was being sent)"
                        ))),
                        Err(Err(e)) => Err(failed(format!("GIN connection lost: {e}"))),
                    }
                }
            }
        })();
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
                if let Some(st) = guard.take() {
                    let _ = st.shutdown(std::net::Shutdown::Both);
                }
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
        self.fds
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
        for peer in 0..self.writers.lanes.len() {
            for lane in 0..self.writers.lanes[peer].len() {
                // A goodbye on every lane (each ends with one), then the lane is shut (no
                // blocking write: a peer that stopped reading must not hold up this rank's
                // teardown).
                self.writers.notice_on(peer, lane, Kind::Close, "");
                if let Ok(mut g) = self.writers.lanes[peer][lane].lock()
                    && let Some(st) = g.take()
                {
                    let _ = st.shutdown(std::net::Shutdown::Both);
                }
            }
        }
        let handle = self.receiver.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// Accepts the connections of the `expected` lower ranks, every lane of each.
#[allow(clippy::too_many_arguments)]
fn accept(
    listener: &TcpListener,
    me: usize,
    size: usize,
    token: u64,
    expected: &[usize],
    deadline: Instant,
    stop: &AtomicBool,
    boot: &crate::Bootstrap,
) -> Result<Vec<(usize, usize, TcpStream)>> {
    let mut hellos =
        Hellos::new(listener, token, Role::Gin).map_err(io_err("reading GIN hellos".into()))?;
    let want = expected.len() * LANES;
    let mut got: Vec<(usize, usize, TcpStream)> = Vec::with_capacity(want);
    while got.len() < want {
        // Give up at once when this rank's dialing failed, or a rank is known to have died.
        if stop.load(Ordering::Acquire) {
            return Err(Error::Internal("GIN set-up abandoned".into()));
        }
        if let Some(e) = boot.failure() {
            return Err(e);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let missing: Vec<usize> = expected
                .iter()
                .copied()
                .filter(|&p| got.iter().filter(|g| g.0 == p).count() < LANES)
                .collect();
            return Err(Error::Timeout {
                rank: Some(me),
                step: format!("GIN set-up waiting for the connections of ranks {missing:?}"),
                after: Duration::ZERO,
            });
        }
        for a in hellos.next(left.min(Duration::from_millis(100))) {
            match a {
                Arrival::Hello {
                    stream,
                    from,
                    hello,
                } => {
                    let (p, lane) = (hello.rank as usize, hello.port as usize);
                    let fits = hello.to as usize == me
                        && hello.size as usize == size
                        && expected.contains(&p)
                        && lane < LANES
                        && !got.iter().any(|g| g.0 == p && g.1 == lane);
                    if fits {
                        got.push((p, lane, stream));
                    } else {
                        tracing::warn!(
                            "rank {me}: GIN set-up: refused a connection from {from} (hello for \
                             rank {} of {} from rank {p}, lane {lane})",
                            hello.to,
                            hello.size
                        );
                    }
                }
                Arrival::Dropped { from, why } => {
                    tracing::warn!(
                        "rank {me}: GIN set-up: dropped a connection from {from}: {why}"
                    );
                }
            }
        }
    }
    Ok(got)
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

/// The receive thread: polls every connection until each is closed, lands what arrives.
fn receive(
    shared: Arc<Shared>,
    writers: Arc<Writers>,
    mut mover: Mover,
    readers: Vec<(usize, usize, Arc<TcpStream>)>,
    delay: Option<Duration>,
) {
    if let Err(e) = mover.bind() {
        shared.fail(e);
        return;
    }
    let mut conns: Vec<Conn> = readers
        .into_iter()
        .map(|(peer, lane, stream)| Conn {
            peer,
            lane,
            stream,
            open: true,
        })
        .collect();
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut last_frame = Instant::now()
        .checked_sub(RX_SPIN)
        .unwrap_or_else(Instant::now);
    loop {
        // Land held puts that are due.
        while held.front().is_some_and(|h| h.due <= Instant::now()) {
            let Some(h) = held.pop_front() else { break };
            let at = (h.frame.dst_win, h.frame.dst_off);
            match mover.write(&shared.registry, at, &h.data) {
                Ok(()) => shared.landed(h.from, &h.frame),
                Err(Ok(why)) => shared.fail(Error::Gin {
                    rank: None,
                    reason: format!("a put from rank {} could not land: {why}", h.from),
                }),
                Err(Err(e)) => shared.fail(e),
            }
        }
        let open: Vec<usize> = (0..conns.len()).filter(|&i| conns[i].open).collect();
        if open.is_empty() && held.is_empty() {
            return;
        }
        // Right after a frame, poll without sleeping for a while (a reply often follows within
        // tens of microseconds, and a wake-up costs several); then block in `poll`.
        let wait_ms = if last_frame.elapsed() < RX_SPIN {
            std::thread::yield_now();
            0
        } else {
            match held.front() {
                Some(h) => h
                    .due
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(100) as i32,
                None => 100,
            }
        };
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .map(|&i| libc::pollfd {
                fd: conns[i].stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` holds `fds.len()` initialised pollfds, alive for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        if n <= 0 {
            continue;
        }
        last_frame = Instant::now();
        for (k, &i) in open.iter().enumerate() {
            if fds[k].revents == 0 {
                continue;
            }
            let c = &mut conns[i];
            match read_one(&shared, &writers, &mut mover, c, delay, &mut held) {
                Ok(true) => {}
                Ok(false) => c.open = false,
                Err(e) => {
                    c.open = false;
                    if !shared.stopping() {
                        shared.fail(e);
                    }
                }
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
                landing(mover.receive(&shared.registry, (win, off, len), &mut &*c.stream))?;
            }
        }
    }
    shared.landed(from, &f);
    Ok(true)
}
