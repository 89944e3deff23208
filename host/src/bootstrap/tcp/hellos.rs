//! The listening side of both set-up steps: accepted connections whose hello is still being
//! read. Rank 0's rendezvous ([`super::rendezvous`]) and each rank's mesh acceptor
//! ([`super::mesh`]) read the hellos of all their pending connections at once, in one thread,
//! with non-blocking sockets and `poll`: a connection that sends nothing, or one byte at a
//! time, holds up nobody else.
//!
//! Each connection has [`HANDSHAKE_LIMIT`] from its accept to deliver its whole hello (however
//! its bytes trickle in), and at most [`MAX_PENDING`] are read at once: past that, the oldest
//! is refused for now (a reject frame marked [`REJECT_RETRY`], so that a real rank dials again)
//! to make room. A real rank sends its hello as soon as it is connected, so the oldest pending
//! connection is the one least likely to be real.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::handshake::{POLL, send_reason};
use crate::bootstrap::wire::{
    self, HEADER_LEN, HELLO_LEN, Hello, Kind, PROTOCOL_VERSION, REJECT_RETRY, Role,
};

/// How long an accepted connection has, from its accept, to deliver its whole hello.
pub(crate) const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);
/// Most connections whose hello is read at once.
const MAX_PENDING: usize = 1024;
/// Most connections accepted in one round, so that reading keeps up with a flood of them.
const ACCEPTS_PER_ROUND: usize = 256;
/// Most pending connections closed by the thread that drops a [`Hellos`]; more are closed in
/// the background.
const CLOSE_INLINE: usize = 16;

/// What became of an accepted connection.
pub(crate) enum Arrival {
    /// It sent a well-formed hello of this job and role (magic, version and role checked; the
    /// ranks are for the caller to check). The stream is blocking again.
    Hello {
        stream: TcpStream,
        from: SocketAddr,
        hello: Hello,
    },
    /// It was dropped (after a reject frame where the peer might read one); `why` is for the
    /// log.
    Dropped { from: SocketAddr, why: String },
}

/// A connection whose hello is not complete yet.
struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    /// The bytes of the hello frame received so far.
    buf: Vec<u8>,
    /// The announced payload length, once the header is in.
    payload: Option<usize>,
    until: Instant,
}

/// The connections accepted on one listener whose hello is being read.
pub(crate) struct Hellos<'l> {
    listener: &'l TcpListener,
    magic: u64,
    role: Role,
    /// Oldest first (so also the first to expire).
    pending: VecDeque<Pending>,
    /// [`MAX_PENDING`] and [`HANDSHAKE_LIMIT`] (smaller in tests).
    cap: usize,
    limit: Duration,
}

impl<'l> Hellos<'l> {
    /// Starts reading the hellos of connections to `listener` (made non-blocking), expecting
    /// `role` hellos of the job `magic`.
    pub(crate) fn new(listener: &'l TcpListener, magic: u64, role: Role) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Hellos {
            listener,
            magic,
            role,
            pending: VecDeque::new(),
            cap: MAX_PENDING,
            limit: HANDSHAKE_LIMIT,
        })
    }

    /// True when no accepted connection's hello is being read.
    pub(crate) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Waits at most `wait` for a connection or bytes to arrive, then accepts, reads and
    /// expires what it can without blocking; returns what became of the connections done with.
    pub(crate) fn next(&mut self, wait: Duration) -> Vec<Arrival> {
        let mut out = Vec::new();
        let wait = match self.pending.front() {
            Some(p) => wait.min(p.until.saturating_duration_since(Instant::now())),
            None => wait,
        };
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
            .chain(self.pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // Rounded up, so that a wait of less than a millisecond does not spin.
        let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` holds `fds.len()` initialised pollfds, alive for the whole call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!("set-up: polling connections failed: {e}");
                thread::sleep(POLL);
            }
        } else if ready > 0 {
            let mut kept = VecDeque::with_capacity(self.pending.len());
            let pending = std::mem::take(&mut self.pending);
            for (p, fd) in pending.into_iter().zip(&fds[1..]) {
                if fd.revents == 0 {
                    kept.push_back(p);
                    continue;
                }
                match self.advance(p) {
                    Ok(p) => kept.push_back(p),
                    Err(a) => out.push(a),
                }
            }
            self.pending = kept;
            if fds[0].revents != 0 {
                self.accept(&mut out);
            }
        }
        let now = Instant::now();
        while let Some(p) = self.pending.pop_front() {
            if p.until > now {
                self.pending.push_front(p);
                break;
            }
            let why = format!(
                "sent {} bytes of its hello within {:?}",
                p.buf.len(),
                self.limit
            );
            out.push(Arrival::Dropped { from: p.from, why });
        }
        out
    }

    /// Accepts what is waiting on the listener, making room when there are too many.
    fn accept(&mut self, out: &mut Vec<Arrival>) {
        for _ in 0..ACCEPTS_PER_ROUND {
            let (stream, from) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue;
                }
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && !self.pending.is_empty() =>
                {
                    // Out of descriptors: the oldest pending connection makes room.
                    self.refuse_oldest(out);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("set-up: accept failed: {e}");
                    thread::sleep(POLL);
                    return;
                }
            };
            if self.pending.len() >= self.cap {
                self.refuse_oldest(out);
            }
            if let Err(e) = stream.set_nonblocking(true) {
                let why = format!("could not be made non-blocking: {e}");
                out.push(Arrival::Dropped { from, why });
                continue;
            }
            let p = Pending {
                stream,
                from,
                buf: Vec::with_capacity(HEADER_LEN + HELLO_LEN),
                payload: None,
                until: Instant::now() + self.limit,
            };
            // A rank sends its hello as soon as it is connected: it is often here already.
            match self.advance(p) {
                Ok(p) => self.pending.push_back(p),
                Err(a) => out.push(a),
            }
        }
    }

    /// Refuses the oldest pending connection for now; a real rank dials again.
    fn refuse_oldest(&mut self, out: &mut Vec<Arrival>) {
        if let Some(mut p) = self.pending.pop_front() {
            let why = format!(
                "busy: more than {} connections at once, dial again",
                self.cap
            );
            let _ = wire::write_frame(
                &mut p.stream,
                Kind::Reject,
                REJECT_RETRY,
                0,
                wire::reason_bytes(&why),
            );
            let why = format!("refused for now to make room: {why}");
            out.push(Arrival::Dropped { from: p.from, why });
        }
    }

    /// Reads what `p` has sent so far: the connection back while its hello is incomplete, or
    /// what became of it.
    fn advance(&self, mut p: Pending) -> Result<Pending, Arrival> {
        let mut chunk = [0u8; HEADER_LEN + HELLO_LEN];
        loop {
            let need = HEADER_LEN + p.payload.unwrap_or(0);
            if p.buf.len() == need {
                if p.payload.is_some() {
                    return Err(self.finish(p));
                }
                let mut head = [0u8; HEADER_LEN];
                head.copy_from_slice(&p.buf);
                match wire::parse_header(&head, HELLO_LEN) {
                    Ok((_, len)) => p.payload = Some(len),
                    Err(e) => return Err(refuse(p.stream, p.from, format!("bad hello: {e}"))),
                }
                continue;
            }
            // Never more than the hello: nothing else is due before this side answers.
            let want = need - p.buf.len();
            match (&p.stream).read(&mut chunk[..want]) {
                Ok(0) => {
                    let why = if p.buf.is_empty() {
                        "closed without a hello".to_string()
                    } else {
                        format!("closed after {} bytes of its hello", p.buf.len())
                    };
                    return Err(Arrival::Dropped { from: p.from, why });
                }
                Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(p),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let why = format!("lost before its hello: {e}");
                    return Err(Arrival::Dropped { from: p.from, why });
                }
            }
        }
    }

    /// Checks a complete hello frame.
    fn finish(&self, p: Pending) -> Arrival {
        let Pending {
            stream, from, buf, ..
        } = p;
        let f = match wire::read_frame(&mut &buf[..], HELLO_LEN) {
            Ok(f) => f,
            Err(e) => return refuse(stream, from, format!("bad hello: {e}")),
        };
        let h = match (f.kind, Hello::decode(&f.payload)) {
            (Kind::Hello, Ok(h)) => h,
            (Kind::Hello, Err(why)) => return refuse(stream, from, format!("bad hello: {why}")),
            (k, _) => {
                return refuse(
                    stream,
                    from,
                    format!("sent a {k:?} frame instead of a hello"),
                );
            }
        };
        let why = if h.magic != self.magic {
            "wrong magic: this connection belongs to a different job (check SYMCOMM_UNIQUE_ID / MASTER_ADDR / MASTER_PORT)".to_string()
        } else if h.version != PROTOCOL_VERSION {
            format!(
                "protocol version {} does not match {PROTOCOL_VERSION} (mixed symcomm builds)",
                h.version
            )
        } else if h.role != self.role {
            format!(
                "a {:?} hello where a {:?} hello was expected",
                h.role, self.role
            )
        } else {
            // The caller answers with blocking writes and then hands the stream on.
            if let Err(e) = stream.set_nonblocking(false) {
                let why = format!("could not be made blocking: {e}");
                return Arrival::Dropped { from, why };
            }
            let _ = stream.set_nodelay(true);
            let _ = stream.set_write_timeout(Some(HANDSHAKE_LIMIT));
            return Arrival::Hello {
                stream,
                from,
                hello: h,
            };
        };
        refuse(stream, from, why)
    }
}

impl Drop for Hellos<'_> {
    /// Sets the connections still pending aside, to be closed once the set-up is over
    /// ([`close_leftovers`]): closing hundreds of sockets takes milliseconds, which a job
    /// under a flood of connections should not spend in its set-up.
    fn drop(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return;
        }
        let mut left = LEFTOVERS.lock().unwrap_or_else(|p| p.into_inner());
        left.extend(pending.into_iter().map(|p| p.stream));
    }
}

/// Connections of this process's set-ups that never became links, until [`close_leftovers`].
static LEFTOVERS: Mutex<Vec<TcpStream>> = Mutex::new(Vec::new());

/// Closes the connections that set-ups of this process set aside; called once a bootstrap has
/// connected (or failed). Many are closed in a short-lived thread of their own.
pub(crate) fn close_leftovers() {
    let left = std::mem::take(&mut *LEFTOVERS.lock().unwrap_or_else(|p| p.into_inner()));
    if left.len() > CLOSE_INLINE {
        // On failure the closure, and with it every connection, is dropped right here.
        let _ = thread::Builder::new()
            .name("symcomm-close".into())
            .spawn(move || drop(left));
    }
}

/// Sends a (final) reject frame saying `why` and drops the connection.
fn refuse(mut stream: TcpStream, from: SocketAddr, why: String) -> Arrival {
    send_reason(&mut stream, Kind::Reject, 0, &why);
    Arrival::Dropped { from, why }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const MAGIC: u64 = 0x5eed;

    fn hello_bytes() -> Vec<u8> {
        let h = Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            role: Role::Rendezvous,
            rank: 1,
            size: 2,
            to: 0,
            port: 1,
        };
        let mut b = Vec::new();
        wire::write_frame(&mut b, Kind::Hello, 0, 0, &h.encode()).unwrap();
        b
    }

    /// Runs rounds until `done` says so (or 5 s pass); returns every arrival seen.
    fn rounds(
        h: &mut Hellos<'_>,
        mut done: impl FnMut(&[Arrival], &Hellos<'_>) -> bool,
    ) -> Vec<Arrival> {
        let until = Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        while !done(&seen, h) && Instant::now() < until {
            seen.extend(h.next(Duration::from_millis(10)));
        }
        seen
    }

    #[test]
    fn when_full_the_oldest_connection_is_refused_for_now_and_the_newest_is_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut h = Hellos::new(&l, MAGIC, Role::Rendezvous).unwrap();
        h.cap = 2;
        let mut oldest = TcpStream::connect(addr).unwrap();
        let _idle = TcpStream::connect(addr).unwrap();
        rounds(&mut h, |_, h| h.pending.len() == 2);
        let mut real = TcpStream::connect(addr).unwrap();
        real.write_all(&hello_bytes()).unwrap();
        let seen = rounds(&mut h, |seen, _| {
            seen.iter().any(|a| matches!(a, Arrival::Hello { .. }))
        });
        let real_addr = real.local_addr().unwrap();
        assert!(seen.iter().any(
            |a| matches!(a, Arrival::Hello { from, hello, .. } if *from == real_addr && hello.rank == 1)
        ));
        let oldest_addr = oldest.local_addr().unwrap();
        assert!(seen.iter().any(
            |a| matches!(a, Arrival::Dropped { from, why } if *from == oldest_addr && why.contains("refused for now"))
        ));
        oldest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let f = wire::read_frame(&mut oldest, 4096).unwrap();
        assert_eq!((f.kind, f.aux), (Kind::Reject, REJECT_RETRY));
    }

    #[test]
    fn a_trickled_hello_gets_one_limit_from_the_accept_not_one_per_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut h = Hellos::new(&l, MAGIC, Role::Rendezvous).unwrap();
        h.limit = Duration::from_millis(300);
        let bytes = hello_bytes();
        let start = Instant::now();
        let mut slow = TcpStream::connect(addr).unwrap();
        let mut sent = 0;
        let seen = rounds(&mut h, |seen, _| {
            // One byte every 50 ms: the whole hello would take 2.8 s.
            if sent < bytes.len() && start.elapsed() >= Duration::from_millis(50) * sent as u32 {
                let _ = slow.write_all(&bytes[sent..sent + 1]);
                sent += 1;
            }
            !seen.is_empty()
        });
        let took = start.elapsed();
        assert!(
            matches!(&seen[..], [Arrival::Dropped { why, .. }] if why.contains("within 300ms")),
            "{}",
            seen.len()
        );
        assert!(sent < bytes.len(), "the whole hello went through");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
