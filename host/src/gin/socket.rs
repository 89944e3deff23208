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
use std::sync::atomic::Ordering;
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
/// Test-only: microseconds every lane-1 put is held by the receiver before it lands (unset: 0).
/// For the ordering tests; never set it in production.
pub const TEST_DELAY_ENV: &str = "SYMCOMM_GIN_TEST_DELAY_US";

/// The socket transport of one rank.
pub(crate) struct Sockets {
    writers: Arc<Writers>,
    receiver: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

/// The sending halves: `[peer][lane]`, empty for peers this rank is not connected to.
pub(crate) struct Writers(Vec<Vec<Mutex<TcpStream>>>);

impl Writers {
    /// Tells `peer` that this rank refused an operation it sent (best effort: the refusal is
    /// this rank's failure either way).
    fn refuse(&self, peer: usize, why: &str) {
        let mut f = Frame::new(Kind::Refused);
        f.bytes = why.len() as u64;
        if let Some(lane) = self.0.get(peer).and_then(|l| l.first())
            && let Ok(mut st) = lane.lock()
        {
            let _ = st
                .write_all(&f.encode())
                .and_then(|_| st.write_all(why.as_bytes()));
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
        let mut writers: Vec<Vec<Mutex<TcpStream>>> = (0..size).map(|_| Vec::new()).collect();
        let mut readers: Vec<(usize, usize, TcpStream)> = Vec::new();
        // Accept the lower ranks while dialing the higher ones.
        let accepted = std::thread::scope(|s| {
            let acceptor = s.spawn(|| accept(&listener, me, size, token, &expected, deadline));
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
            let got = acceptor
                .join()
                .map_err(|_| Error::Internal("the GIN acceptor panicked".into()))??;
            Ok::<_, Error>((dialed, got))
        });
        // Every rank learns whether every rank's connections came up.
        let outcome = accepted.as_ref().err();
        comm.agree("GIN set-up", "GIN", outcome, &[])?;
        let (dialed, got) = accepted?;
        drop(listener);
        let mut all: Vec<(usize, usize, TcpStream)> = dialed.into_iter().chain(got).collect();
        all.sort_by_key(|c| (c.0, c.1));
        for (p, _lane, st) in all {
            let _ = st.set_nodelay(true);
            let _ = st.set_write_timeout(Some(boot.timeout()));
            let r = st
                .try_clone()
                .map_err(io_err("cloning a GIN connection".into()))?;
            readers.push((p, writers[p].len(), r));
            writers[p].push(Mutex::new(st));
        }
        let delay = std::env::var(TEST_DELAY_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_micros)
            .filter(|d| !d.is_zero());
        let writers = Arc::new(Writers(writers));
        let (sh, w) = (Arc::clone(&shared), Arc::clone(&writers));
        let dev = device.clone();
        let receiver = std::thread::Builder::new()
            .name(format!("symcomm-gin-rx{me}"))
            .spawn(move || receive(sh, w, dev, readers, delay))
            .map_err(io_err("starting the GIN receive thread".into()))?;
        Ok(Sockets {
            writers,
            receiver: Mutex::new(Some(receiver)),
            shared,
        })
    }

    fn write_frame(
        &self,
        peer: usize,
        lane: usize,
        f: &Frame,
        body: Body,
        mover: &mut Mover,
    ) -> Result<()> {
        let lanes = self
            .writers
            .0
            .get(peer)
            .filter(|l| l.len() == LANES)
            .ok_or_else(|| Error::InvalidArgument(format!("GIN: no connection to rank {peer}")))?;
        let mut st = lanes[lane]
            .lock()
            .map_err(|_| Error::Internal("a GIN connection's lock is poisoned".into()))?;
        let lost = |e: Error| Error::PeerFailed {
            rank: Some(self.shared.cfg.rank),
            step: "GIN".into(),
            peer,
            reason: format!("connection lost: {e}"),
        };
        st.write_all(&f.encode())
            .map_err(io_err("sending a GIN frame".into()))
            .map_err(lost)?;
        let n = match body {
            Body::None => 0,
            Body::Bytes(b) => {
                st.write_all(b)
                    .map_err(io_err("sending a GIN frame".into()))
                    .map_err(lost)?;
                b.len()
            }
            Body::Window { win, off, len } => {
                match mover.send(&self.shared.registry, (win, off, len), &mut *st) {
                    Ok(()) => {}
                    Err(Ok(why)) => {
                        return Err(Error::InvalidArgument(format!("GIN put from {why}")));
                    }
                    Err(Err(e)) => return Err(lost(e)),
                }
                len
            }
        };
        let s = &self.shared.stats;
        s.bytes_sent
            .fetch_add((HEADER + n) as u64, Ordering::Relaxed);
        s.frames_sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
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
        let f = Frame::new(Kind::Close).encode();
        for lanes in &self.writers.0 {
            for l in lanes {
                if let Ok(mut st) = l.lock() {
                    let _ = st.write_all(&f);
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
fn accept(
    listener: &TcpListener,
    me: usize,
    size: usize,
    token: u64,
    expected: &[usize],
    deadline: Instant,
) -> Result<Vec<(usize, usize, TcpStream)>> {
    let mut hellos =
        Hellos::new(listener, token, Role::Gin).map_err(io_err("reading GIN hellos".into()))?;
    let want = expected.len() * LANES;
    let mut got: Vec<(usize, usize, TcpStream)> = Vec::with_capacity(want);
    while got.len() < want {
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
    stream: TcpStream,
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
    device: Device,
    readers: Vec<(usize, usize, TcpStream)>,
    delay: Option<Duration>,
) {
    let mut mover = match Mover::new(&device) {
        Ok(m) => m,
        Err(e) => {
            shared.fail(e);
            return;
        }
    };
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
        let wait_ms = match held.front() {
            Some(h) => h
                .due
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(100) as i32,
            None => 100,
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
    match c.stream.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(gone(
                "closed its GIN connection without notice (it died or failed)".into(),
            ));
        }
        Err(e) => return Err(gone(format!("GIN connection failed: {e}"))),
    }
    let f = Frame::decode(&head).map_err(|w| {
        writers.refuse(from, &w);
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
        Kind::Close => return Ok(false),
        Kind::Refused => {
            let mut why = vec![0u8; f.bytes.min(4096) as usize];
            let _ = c.stream.read_exact(&mut why);
            return Err(gone(format!(
                "refused an operation of this rank: {}",
                String::from_utf8_lossy(&why)
            )));
        }
        _ => {}
    }
    shared.stats.frames_received.fetch_add(1, Ordering::Relaxed);
    let target = match shared.check_incoming(from, &f) {
        Ok(t) => t,
        Err(why) => {
            writers.refuse(from, &why);
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
                    c.stream
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
                landing(mover.receive(&shared.registry, (win, off, len), &mut c.stream))?;
            }
        }
    }
    shared.landed(from, &f);
    Ok(true)
}
