//! Handle exchange: passing file descriptors between the ranks of one node.
//!
//! CUDA exports physical memory as a POSIX file descriptor, and a file descriptor only means
//! something inside its own process, so it has to travel through the kernel: over a
//! Unix-domain socket with `SCM_RIGHTS`. This needs no ptrace capability (unlike
//! `pidfd_getfd`), works in unprivileged containers that share a network namespace, and leaves
//! no files behind: the sockets live in Linux's **abstract namespace**, named after the
//! communicator's unique id and the rank (`@symcomm-<id as 16 hex digits>-<rank>`), and vanish
//! when closed.
//!
//! Shape (request/response, like NCCL's proxy `GetFd`): every rank runs one [`FdServer`]. It
//! [publishes](FdServer::publish) the fds it exports under 64-bit keys (e.g. the registration
//! sequence number, the same on every rank), and a background thread answers "give me the fd
//! for key K" with that fd. Peers [fetch](FdServer::fetch) what they need. Serving never waits
//! on the main thread, so N ranks that each export some fds and fetch all their peers' cannot
//! deadlock; a fetch for a key that is not published yet is retried until it appears or the
//! timeout passes.
//!
//! Invariants:
//! - every blocking step is bounded: connect, send and receive on the client by the caller's
//!   timeout ([`Error::Timeout`] naming this rank, the peer, the key and the step); one
//!   connection on the server by [`SERVE_IO_TIMEOUT`];
//! - every message is validated (exact length, magic, version, unique id, key, exactly one
//!   fd where one is due); any extra fds that arrive are closed; garbage gives an error on the
//!   client and a dropped connection on the server, never a panic;
//! - only processes of the same effective user are served (`SO_PEERCRED`);
//! - dropping the [`FdServer`] stops its thread and closes the socket; the published fds are
//!   closed with it.
//!
//! A fetched fd is only guaranteed to be served while the owner's [`FdServer`] lives and the
//! key stays published: ranks must agree (e.g. with a barrier) that everyone has fetched
//! before an owner withdraws a key or drops its server.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::time::{deadline_after, remaining};
use crate::{Error, Result};

/// The longest one server-side connection may take (reading the request, sending the reply).
/// A client that connects and stalls delays other clients by at most this much.
pub const SERVE_IO_TIMEOUT: Duration = Duration::from_secs(1);

/// The abstract socket name (without the leading NUL) of `rank` for unique id `id`.
pub fn socket_name(id: u64, rank: usize) -> String {
    format!("symcomm-{id:016x}-{rank}")
}

/// One rank's fd service: a bound abstract socket, the table of published fds, and the thread
/// that answers requests for them.
#[derive(Debug)]
pub struct FdServer {
    id: u64,
    rank: usize,
    table: Arc<Mutex<BTreeMap<u64, OwnedFd>>>,
    /// Written to wake the serving thread for shutdown.
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl FdServer {
    /// Binds `@symcomm-<id>-<rank>` and starts serving (nothing is published yet).
    ///
    /// Fails with [`Error::Io`] when the name is taken, e.g. by a live server with the same
    /// unique id and rank.
    pub fn bind(id: u64, rank: usize) -> Result<FdServer> {
        let name = socket_name(id, rank);
        let listener = bind_listener(&name).map_err(|source| Error::Io {
            what: format!("binding fd socket @{name}"),
            source,
        })?;
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked below.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        let wake = owned_or_last_error(wake).map_err(|source| Error::Io {
            what: "creating the fd server's wake-up eventfd".into(),
            source,
        })?;
        let wake_for_thread = wake.try_clone().map_err(|source| Error::Io {
            what: "duplicating the fd server's wake-up eventfd".into(),
            source,
        })?;
        let table = Arc::new(Mutex::new(BTreeMap::new()));
        let serving = Serving {
            id,
            rank,
            listener,
            wake: wake_for_thread,
            table: Arc::clone(&table),
        };
        let thread = std::thread::Builder::new()
            .name(format!("symcomm-fd-{rank}"))
            .spawn(move || serving.run())
            .map_err(|source| Error::Io {
                what: "starting the fd server thread".into(),
                source,
            })?;
        Ok(FdServer {
            id,
            rank,
            table,
            wake,
            thread: Some(thread),
        })
    }

    /// The unique id this server answers for.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Makes `fd` available to peers under `key`; the server owns it until
    /// [withdrawn](FdServer::withdraw) or dropped. Publishing a key twice is an error.
    pub fn publish(&self, key: u64, fd: OwnedFd) -> Result<()> {
        let mut table = lock(&self.table);
        if table.contains_key(&key) {
            return Err(Error::InvalidArgument(format!(
                "fd key {key} is already published by rank {}",
                self.rank
            )));
        }
        table.insert(key, fd);
        Ok(())
    }

    /// Stops serving `key` and hands its fd back (`None` if it was not published).
    pub fn withdraw(&self, key: u64) -> Option<OwnedFd> {
        lock(&self.table).remove(&key)
    }

    /// Fetches the fd `peer` published under `key` (same unique id), waiting up to `timeout`
    /// for the peer to bind and publish it. `peer` may be this rank.
    pub fn fetch(&self, peer: usize, key: u64, timeout: Duration) -> Result<OwnedFd> {
        fetch_fd(self.id, self.rank, peer, key, timeout)
    }

    /// Fetches `key` from each of `peers` in order, all within one `timeout`.
    pub fn fetch_from(&self, peers: &[usize], key: u64, timeout: Duration) -> Result<Vec<OwnedFd>> {
        let deadline = deadline_after(timeout);
        peers
            .iter()
            .map(|&peer| {
                let left = remaining(deadline);
                fetch_until(self.id, self.rank, peer, key, deadline, timeout - left)
            })
            .collect()
    }
}

impl Drop for FdServer {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: `wake` is a valid eventfd; we write exactly 8 bytes from a live u64.
        let written = unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                size_of::<u64>(),
            )
        };
        if written != size_of::<u64>() as isize {
            // Joining a thread that was never woken would hang: leave it detached instead.
            tracing::warn!(
                "fd server of rank {}: waking the serving thread failed, leaving it running: {}",
                self.rank,
                io::Error::last_os_error()
            );
            return;
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("fd server of rank {}: serving thread panicked", self.rank);
        }
    }
}

/// Fetches the fd that `peer` published under `key` for unique id `id`, waiting up to
/// `timeout` for the peer to bind and publish it; needs no [`FdServer`] of its own (e.g. in a
/// process that only imports). `my_rank` labels errors and the request.
pub fn fetch_fd(
    id: u64,
    my_rank: usize,
    peer: usize,
    key: u64,
    timeout: Duration,
) -> Result<OwnedFd> {
    fetch_until(
        id,
        my_rank,
        peer,
        key,
        deadline_after(timeout),
        Duration::ZERO,
    )
}

// ---------------------------------------------------------------------------------------------
// Wire format. Every message is one SOCK_SEQPACKET datagram of exactly 32 bytes, little-endian:
//   request: magic "SCFQ", version u16, reserved u16 (0), unique id u64, key u64, rank u64
//   reply:   magic "SCFR", version u16, status u16,       unique id u64, key u64, reserved u64
// A reply with status OK carries exactly one fd (SCM_RIGHTS); other replies carry none.

const MSG_SIZE: usize = 32;
const REQUEST_MAGIC: [u8; 4] = *b"SCFQ";
const REPLY_MAGIC: [u8; 4] = *b"SCFR";
const PROTOCOL_VERSION: u16 = 1;
const STATUS_OK: u16 = 0;
const STATUS_NOT_PUBLISHED: u16 = 1;
/// Control-message room for this many fds: more than are ever due, so extras are seen (and
/// closed) rather than silently truncated away.
const MAX_FDS_PER_MESSAGE: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Message {
    magic: [u8; 4],
    version: u16,
    /// Reserved (request) or status (reply).
    word: u16,
    id: u64,
    key: u64,
    /// Requesting rank (request) or reserved (reply).
    extra: u64,
}

impl Message {
    fn request(id: u64, key: u64, rank: usize) -> Message {
        Message {
            magic: REQUEST_MAGIC,
            version: PROTOCOL_VERSION,
            word: 0,
            id,
            key,
            extra: rank as u64,
        }
    }

    fn reply(id: u64, key: u64, status: u16) -> Message {
        Message {
            magic: REPLY_MAGIC,
            version: PROTOCOL_VERSION,
            word: status,
            id,
            key,
            extra: 0,
        }
    }

    fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        b[0..4].copy_from_slice(&self.magic);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.word.to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.extra.to_le_bytes());
        b
    }

    /// Parses a message of exactly [`MSG_SIZE`] bytes; `None` for any other length.
    fn decode(bytes: &[u8]) -> Option<Message> {
        let b: &[u8; MSG_SIZE] = bytes.try_into().ok()?;
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Some(Message {
            magic: [b[0], b[1], b[2], b[3]],
            version: u16::from_le_bytes([b[4], b[5]]),
            word: u16::from_le_bytes([b[6], b[7]]),
            id: u64_at(8),
            key: u64_at(16),
            extra: u64_at(24),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Server side.

struct Serving {
    id: u64,
    rank: usize,
    listener: OwnedFd,
    wake: OwnedFd,
    table: Arc<Mutex<BTreeMap<u64, OwnedFd>>>,
}

impl Serving {
    fn run(self) {
        let mut polls = [
            libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // SAFETY: `polls` is a valid array of two pollfd for the duration of the call.
            let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(
                    "fd server of rank {}: poll failed, stopping: {e}",
                    self.rank
                );
                return;
            }
            if polls[1].revents != 0 {
                return; // shutdown requested
            }
            if polls[0].revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                tracing::error!(
                    "fd server of rank {}: listening socket failed, stopping",
                    self.rank
                );
                return;
            }
            if polls[0].revents & libc::POLLIN == 0 {
                continue;
            }
            // SAFETY: the listener is a valid listening socket; no peer address is requested.
            let conn = unsafe {
                libc::accept4(
                    self.listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            match owned_or_last_error(conn) {
                Ok(conn) => {
                    if let Err(e) = self.answer(&conn) {
                        tracing::debug!(
                            "fd server of rank {}: dropped a connection: {e}",
                            self.rank
                        );
                    }
                }
                Err(e) => {
                    tracing::debug!("fd server of rank {}: accept failed: {e}", self.rank);
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
                    ) {
                        // Back off instead of spinning while the process is out of fds.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Reads one request from `conn` and answers it; errors only mean the connection is dropped.
    fn answer(&self, conn: &OwnedFd) -> io::Result<()> {
        let cred = peer_credentials(conn.as_fd())?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if cred.uid != me {
            return Err(invalid(format!(
                "pid {} runs as uid {}, not {me}",
                cred.pid, cred.uid
            )));
        }
        set_timeouts(conn.as_fd(), SERVE_IO_TIMEOUT)?;
        let mut buf = [0u8; MSG_SIZE + 1];
        // Any fds the client attached are owned by `received` and closed when it drops.
        let received = recv_with_fds(conn.as_fd(), &mut buf)?;
        let request = received
            .payload(&buf)
            .and_then(Message::decode)
            .ok_or_else(|| invalid(format!("request of {} bytes", received.len)))?;
        if request.magic != REQUEST_MAGIC || request.version != PROTOCOL_VERSION {
            return Err(invalid("request with a bad magic or version".into()));
        }
        if request.id != self.id {
            return Err(invalid(format!(
                "request for unique id {:016x}, this server is {:016x}",
                request.id, self.id
            )));
        }
        if !received.fds.is_empty() {
            return Err(invalid("request carried fds".into()));
        }
        let table = lock(&self.table);
        match table.get(&request.key) {
            Some(fd) => send_with_fds(
                conn.as_fd(),
                &Message::reply(self.id, request.key, STATUS_OK).encode(),
                &[fd.as_fd()],
            ),
            None => send_with_fds(
                conn.as_fd(),
                &Message::reply(self.id, request.key, STATUS_NOT_PUBLISHED).encode(),
                &[],
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Client side.

/// Fetches with retries until `deadline`; `spent_before` is how much of the caller's overall
/// timeout had already passed (for the error message).
fn fetch_until(
    id: u64,
    my_rank: usize,
    peer: usize,
    key: u64,
    deadline: Instant,
    spent_before: Duration,
) -> Result<OwnedFd> {
    let started = Instant::now();
    let name = socket_name(id, peer);
    let what = |step: &str| format!("fetching fd key {key} from rank {peer} (@{name}): {step}");
    let timeout = |step: &str| Error::Timeout {
        rank: Some(my_rank),
        step: what(step),
        after: spent_before + started.elapsed(),
    };
    let mut backoff = Duration::from_millis(1);
    loop {
        match try_fetch(id, my_rank, &name, key, deadline) {
            Ok(Attempt::Got(fd)) => return Ok(fd),
            Ok(Attempt::Retry(step)) => {
                let left = remaining(deadline);
                if left.is_zero() {
                    return Err(timeout(step));
                }
                std::thread::sleep(backoff.min(left));
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
            Err(Failure::TimedOut(step)) => return Err(timeout(step)),
            Err(Failure::Io(step, source)) => {
                return Err(Error::Io {
                    what: what(step),
                    source,
                });
            }
        }
    }
}

enum Attempt {
    Got(OwnedFd),
    /// Nothing wrong yet, try again (the string names what is awaited).
    Retry(&'static str),
}

enum Failure {
    TimedOut(&'static str),
    Io(&'static str, io::Error),
}

fn try_fetch(
    id: u64,
    my_rank: usize,
    name: &str,
    key: u64,
    deadline: Instant,
) -> Result<Attempt, Failure> {
    let left = || remaining(deadline).max(Duration::from_millis(1));
    let io_err = |step| {
        move |e: io::Error| {
            if is_timeout(&e) {
                Failure::TimedOut(step)
            } else {
                Failure::Io(step, e)
            }
        }
    };
    let sock = seqpacket_socket().map_err(io_err("creating a socket"))?;
    set_timeouts(sock.as_fd(), left()).map_err(io_err("setting socket timeouts"))?;
    let (addr, len) = abstract_addr(name).map_err(io_err("naming the socket"))?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            // Nobody bound yet (or the backlog is full): the peer may still be starting.
            Some(libc::ECONNREFUSED | libc::ENOENT | libc::EAGAIN | libc::EINTR) => {
                Ok(Attempt::Retry("waiting for the peer to listen (connect)"))
            }
            _ => Err(io_err("connect")(e)),
        };
    }
    set_timeouts(sock.as_fd(), left()).map_err(io_err("setting socket timeouts"))?;
    send_with_fds(
        sock.as_fd(),
        &Message::request(id, key, my_rank).encode(),
        &[],
    )
    .map_err(io_err("sending the request"))?;
    let mut buf = [0u8; MSG_SIZE + 1];
    let received =
        recv_with_fds(sock.as_fd(), &mut buf).map_err(io_err("waiting for the reply"))?;
    // From here on every received fd is owned by `received`; returning early closes them.
    let bad = |why: String| Failure::Io("checking the reply", invalid(why));
    if received.len == 0 && received.flags & libc::MSG_TRUNC == 0 {
        return Err(bad("the peer closed the connection without replying".into()));
    }
    if received.flags & libc::MSG_CTRUNC != 0 {
        return Err(bad(format!(
            "the reply carried more than {MAX_FDS_PER_MESSAGE} fds"
        )));
    }
    let reply = received
        .payload(&buf)
        .and_then(Message::decode)
        .ok_or_else(|| {
            bad(format!(
                "reply of {} bytes, expected {MSG_SIZE}",
                received.describe_len()
            ))
        })?;
    if reply.magic != REPLY_MAGIC {
        return Err(bad(format!("reply with magic {:02x?}", reply.magic)));
    }
    if reply.version != PROTOCOL_VERSION {
        return Err(bad(format!(
            "reply with protocol version {}, expected {PROTOCOL_VERSION}",
            reply.version
        )));
    }
    if reply.id != id || reply.key != key {
        return Err(bad(format!(
            "reply for unique id {:016x} key {}, asked for {id:016x} key {key}",
            reply.id, reply.key
        )));
    }
    let mut fds = received.fds;
    match (reply.word, fds.len()) {
        (STATUS_OK, 1) => Ok(Attempt::Got(fds.remove(0))),
        (STATUS_OK, n) => Err(bad(format!("reply carried {n} fds, expected 1"))),
        (STATUS_NOT_PUBLISHED, 0) => Ok(Attempt::Retry("waiting for the peer to publish the key")),
        (STATUS_NOT_PUBLISHED, n) => Err(bad(format!("'not published' reply carried {n} fds"))),
        (status, _) => Err(bad(format!("reply with unknown status {status}"))),
    }
}

// ---------------------------------------------------------------------------------------------
// Socket helpers (thin libc wrappers).

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the table half-updated (single inserts and
    // removes), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn owned_or_last_error(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: `fd` was just returned by a successful syscall and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket has no memory-safety preconditions; the result is checked.
    owned_or_last_error(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })
}

/// The address of abstract socket `name` and its exact length (no trailing NUL).
fn abstract_addr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is a plain C struct; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket name {name:?} is too long"),
        ));
    }
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, &src) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

fn bind_listener(name: &str) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    if unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` is a bound socket.
    if unsafe { libc::listen(sock.as_raw_fd(), 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

fn set_timeouts(sock: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    // A zero timeval would mean "forever".
    let t = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn peer_credentials(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: ucred is a plain C struct; all-zero is valid.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers sized for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 128]);

const fn cmsg_space(n_fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    unsafe { libc::CMSG_SPACE((n_fds * size_of::<c_int>()) as u32) as usize }
}

const _: () = assert!(cmsg_space(MAX_FDS_PER_MESSAGE) <= 128);

/// Sends one datagram with `fds` attached (none if empty).
fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = CmsgBuf([0; 128]);
    // SAFETY: msghdr is a plain C struct; all-zero is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space(fds.len()) as _;
        // SAFETY: the control buffer is aligned and at least CMSG_SPACE(fds) bytes long (checked
        // at compile time), so the first header and its data fit inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * size_of::<c_int>()) as u32) as _;
            let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` and `control`, which outlive the call; the data is
        // only read.
        let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if sent as usize != data.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
        return Ok(());
    }
}

/// What one `recvmsg` delivered: the bytes copied, the message flags, and every fd that came
/// with it (owned, so dropping closes them).
struct Received {
    len: usize,
    flags: c_int,
    fds: Vec<OwnedFd>,
}

impl Received {
    /// The payload if the datagram was not truncated.
    fn payload<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        (self.flags & libc::MSG_TRUNC == 0).then(|| &buf[..self.len.min(buf.len())])
    }

    fn describe_len(&self) -> String {
        if self.flags & libc::MSG_TRUNC != 0 {
            format!("more than {}", self.len)
        } else {
            self.len.to_string()
        }
    }
}

fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = CmsgBuf([0; 128]);
    // SAFETY: msghdr is a plain C struct; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space(MAX_FDS_PER_MESSAGE) as _;
    let len = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both live and writable for
        // the stated lengths.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with `msg.msg_controllen` bytes of well-formed control
    // messages; CMSG_FIRSTHDR/NXTHDR stay inside that length, and each SCM_RIGHTS payload is
    // an array of fds that now belong to this process (taken into OwnedFd exactly once).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let header = libc::CMSG_LEN(0) as usize;
                let n = ((*cmsg).cmsg_len as usize).saturating_sub(header) / size_of::<c_int>();
                let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                for i in 0..n {
                    let fd = data.add(i).read_unaligned();
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len,
        flags: msg.msg_flags,
        fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::FileExt;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;

    /// A unique id per test (and per test run), so tests running in parallel never share a
    /// socket name.
    fn test_id(tag: u64) -> u64 {
        (std::process::id() as u64) << 32 | tag
    }

    fn memfd_with(bytes: &[u8]) -> OwnedFd {
        // SAFETY: the name is a valid C string; the result is checked.
        let fd = unsafe { libc::memfd_create(c"symcomm-test".as_ptr(), libc::MFD_CLOEXEC) };
        let fd = owned_or_last_error(fd).unwrap();
        File::from(fd.try_clone().unwrap())
            .write_all(bytes)
            .unwrap();
        fd
    }

    fn read_fd(fd: &OwnedFd, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        File::from(fd.try_clone().unwrap())
            .read_exact_at(&mut out, 0)
            .unwrap();
        out
    }

    /// Connects a raw client socket to `name` (for sending garbage).
    fn raw_connect(name: &str) -> OwnedFd {
        let sock = seqpacket_socket().unwrap();
        let (addr, len) = abstract_addr(name).unwrap();
        // SAFETY: valid address of `len` bytes.
        let rc = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        set_timeouts(sock.as_fd(), Duration::from_secs(3)).unwrap();
        sock
    }

    /// True once every copy of the peer end of a socketpair is closed.
    fn peer_end_closed(end: &OwnedFd) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: valid socket and buffer.
        let n = unsafe {
            libc::recv(
                end.as_raw_fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_DONTWAIT,
            )
        };
        n == 0
    }

    fn socketpair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid out-array of two ints.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        (
            owned_or_last_error(fds[0]).unwrap(),
            owned_or_last_error(fds[1]).unwrap(),
        )
    }

    #[test]
    fn published_fds_are_fetched_with_their_contents() {
        let id = test_id(1);
        let a = FdServer::bind(id, 0).unwrap();
        let b = FdServer::bind(id, 1).unwrap();
        a.publish(7, memfd_with(b"from rank zero")).unwrap();
        b.publish(7, memfd_with(b"from rank one!")).unwrap();
        let fds = a.fetch_from(&[0, 1], 7, Duration::from_secs(5)).unwrap();
        assert_eq!(read_fd(&fds[0], 14), b"from rank zero");
        assert_eq!(read_fd(&fds[1], 14), b"from rank one!");
        // A published key cannot be published again, and a withdrawn key is no longer served.
        assert!(b.publish(7, memfd_with(b"x")).is_err());
        assert!(b.withdraw(7).is_some());
        assert!(b.withdraw(7).is_none());
        assert!(matches!(
            a.fetch(1, 7, Duration::from_millis(100)),
            Err(Error::Timeout { .. })
        ));
    }

    #[test]
    fn a_peer_that_never_appears_times_out_naming_rank_and_step() {
        let id = test_id(2);
        let server = FdServer::bind(id, 0).unwrap();
        let start = Instant::now();
        let err = server.fetch(5, 3, Duration::from_millis(300)).unwrap_err();
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
            "{elapsed:?}"
        );
        match &err {
            Error::Timeout {
                rank: Some(0),
                step,
                after,
            } => {
                assert!(step.contains("from rank 5"), "{step}");
                assert!(step.contains("key 3"), "{step}");
                assert!(step.contains("connect"), "{step}");
                assert!(*after >= Duration::from_millis(300));
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(!err.to_string().contains('\n'));
    }

    #[test]
    fn a_key_published_late_is_still_fetched_and_an_absent_one_times_out() {
        let id = test_id(3);
        let owner = FdServer::bind(id, 1).unwrap();
        let err = fetch_fd(id, 0, 1, 9, Duration::from_millis(200)).unwrap_err();
        assert!(
            matches!(&err, Error::Timeout { step, .. } if step.contains("publish") && step.contains("key 9")),
            "{err}"
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(150));
                owner.publish(9, memfd_with(b"late")).unwrap();
            });
            let fd = fetch_fd(id, 0, 1, 9, Duration::from_secs(5)).unwrap();
            assert_eq!(read_fd(&fd, 4), b"late");
        });
    }

    #[test]
    fn different_unique_ids_do_not_cross_talk() {
        let (id_a, id_b) = (test_id(4), test_id(5));
        let a = FdServer::bind(id_a, 0).unwrap();
        let b = FdServer::bind(id_b, 0).unwrap();
        a.publish(1, memfd_with(b"AAAA")).unwrap();
        b.publish(1, memfd_with(b"BBBB")).unwrap();
        assert_eq!(
            read_fd(&fetch_fd(id_a, 1, 0, 1, Duration::from_secs(5)).unwrap(), 4),
            b"AAAA"
        );
        assert_eq!(
            read_fd(&fetch_fd(id_b, 1, 0, 1, Duration::from_secs(5)).unwrap(), 4),
            b"BBBB"
        );
        // A request that names another id is refused even when it reaches this server.
        let sock = raw_connect(&socket_name(id_a, 0));
        send_with_fds(sock.as_fd(), &Message::request(id_b, 1, 1).encode(), &[]).unwrap();
        let mut buf = [0u8; 64];
        let got = recv_with_fds(sock.as_fd(), &mut buf).unwrap();
        assert_eq!(
            (got.len, got.fds.len()),
            (0, 0),
            "expected the connection to be dropped"
        );
    }

    #[test]
    fn garbage_requests_are_dropped_and_the_server_keeps_serving() {
        let id = test_id(6);
        let server = FdServer::bind(id, 0).unwrap();
        server.publish(1, memfd_with(b"still here")).unwrap();
        let name = socket_name(id, 0);
        let good = Message::request(id, 1, 3).encode();
        let mut wrong_magic = good;
        wrong_magic[0] = b'X';
        let mut wrong_version = good;
        wrong_version[4] = 9;
        let garbage: Vec<Vec<u8>> = vec![
            vec![],
            vec![1, 2, 3],
            vec![0xff; MSG_SIZE],
            wrong_magic.to_vec(),
            wrong_version.to_vec(),
            [good.as_slice(), &[0]].concat(),
            vec![0x5a; 1000],
        ];
        for g in &garbage {
            let sock = raw_connect(&name);
            send_with_fds(sock.as_fd(), g, &[]).unwrap();
            let mut buf = [0u8; 64];
            let got = recv_with_fds(sock.as_fd(), &mut buf).unwrap();
            assert_eq!(
                (got.len, got.fds.len()),
                (0, 0),
                "garbage {g:?} was answered"
            );
        }
        // A well-formed request that smuggles an fd in is refused, and the fd is closed.
        let (mine, theirs) = socketpair();
        let sock = raw_connect(&name);
        send_with_fds(sock.as_fd(), &good, &[theirs.as_fd()]).unwrap();
        drop(theirs);
        let mut buf = [0u8; 64];
        assert_eq!(recv_with_fds(sock.as_fd(), &mut buf).unwrap().len, 0);
        assert!(
            peer_end_closed(&mine),
            "the server kept the smuggled fd open"
        );
        // A client that connects and goes silent holds the server for at most SERVE_IO_TIMEOUT.
        let _silent = raw_connect(&name);
        let fd = server.fetch(0, 1, Duration::from_secs(5)).unwrap();
        assert_eq!(read_fd(&fd, 10), b"still here");
    }

    /// Runs a fake server at (`id`, rank 1) that answers one request with `reply` + `fds`.
    fn fake_server_reply(id: u64, reply: Vec<u8>, fds: Vec<OwnedFd>) -> JoinHandle<()> {
        let listener = bind_listener(&socket_name(id, 1)).unwrap();
        std::thread::spawn(move || {
            // SAFETY: valid listening socket.
            let conn = owned_or_last_error(unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            })
            .unwrap();
            let mut buf = [0u8; 64];
            recv_with_fds(conn.as_fd(), &mut buf).unwrap();
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            send_with_fds(conn.as_fd(), &reply, &borrowed).unwrap();
            // Keep the connection open until the client is done with it.
            let _ = recv_with_fds(conn.as_fd(), &mut buf);
        })
    }

    #[test]
    fn garbage_replies_are_errors_and_extra_fds_are_closed() {
        let ok = |id, key| Message::reply(id, key, STATUS_OK).encode();
        type MakeReply = Box<dyn Fn(u64) -> Vec<u8>>;
        let cases: Vec<(&str, MakeReply, usize, &str)> = vec![
            ("short", Box::new(|_| vec![1, 2, 3]), 0, "reply of 3 bytes"),
            ("long", Box::new(|_| vec![7; 100]), 0, "more than 33"),
            ("magic", Box::new(|_| vec![0; MSG_SIZE]), 0, "magic"),
            (
                "version",
                Box::new(|id| {
                    Message {
                        version: 2,
                        ..Message::reply(id, 4, STATUS_OK)
                    }
                    .encode()
                    .to_vec()
                }),
                1,
                "protocol version 2",
            ),
            (
                "wrong key",
                Box::new(move |id| ok(id, 5).to_vec()),
                1,
                "key 5",
            ),
            (
                "wrong id",
                Box::new(move |id| ok(id ^ 1, 4).to_vec()),
                1,
                "unique id",
            ),
            ("no fd", Box::new(move |id| ok(id, 4).to_vec()), 0, "0 fds"),
            (
                "two fds",
                Box::new(move |id| ok(id, 4).to_vec()),
                2,
                "2 fds",
            ),
            (
                "status",
                Box::new(|id| Message::reply(id, 4, 77).encode().to_vec()),
                0,
                "status 77",
            ),
            (
                "not published with fd",
                Box::new(|id| {
                    Message::reply(id, 4, STATUS_NOT_PUBLISHED)
                        .encode()
                        .to_vec()
                }),
                1,
                "'not published' reply carried 1 fds",
            ),
        ];
        for (i, (label, reply, n_fds, want)) in cases.into_iter().enumerate() {
            let id = test_id(0x100 + i as u64);
            let (mine, theirs) = socketpair();
            let fds = (0..n_fds).map(|_| theirs.try_clone().unwrap()).collect();
            drop(theirs);
            let server = fake_server_reply(id, reply(id), fds);
            let err = fetch_fd(id, 0, 1, 4, Duration::from_secs(5)).unwrap_err();
            assert!(
                matches!(&err, Error::Io { source, .. } if source.kind() == io::ErrorKind::InvalidData),
                "{label}: {err}"
            );
            assert!(err.to_string().contains(want), "{label}: {err}");
            assert!(err.to_string().contains("from rank 1"), "{label}: {err}");
            server.join().unwrap();
            if n_fds > 0 {
                assert!(peer_end_closed(&mine), "{label}: a received fd was leaked");
            }
        }
    }

    #[test]
    fn dropping_the_server_frees_its_name() {
        let id = test_id(7);
        let server = FdServer::bind(id, 2).unwrap();
        assert!(
            matches!(FdServer::bind(id, 2), Err(Error::Io { .. })),
            "name bound twice"
        );
        server.publish(1, memfd_with(b"x")).unwrap();
        drop(server);
        assert!(matches!(
            fetch_fd(id, 0, 2, 1, Duration::from_millis(100)),
            Err(Error::Timeout { .. })
        ));
        let again = FdServer::bind(id, 2).unwrap();
        assert_eq!(again.rank(), 2);
        assert_eq!(again.id(), id);
    }

    // --- Real processes -------------------------------------------------------------------

    const CHILD_ENV: &str = "SYMCOMM_IPC_TEST_CHILD";
    const CHILD_PAGE: usize = 4096;

    fn pattern(rank: usize, key: u64) -> u8 {
        (rank as u8 + 1) * 0x10 + key as u8
    }

    /// Not a test on its own: the body of one rank in
    /// `fds_cross_real_process_boundaries`, which runs this test binary as each rank with
    /// `SYMCOMM_IPC_TEST_CHILD=<id>,<rank>,<n>`. Without that variable it does nothing.
    #[test]
    #[ignore = "helper process of fds_cross_real_process_boundaries"]
    fn ipc_child_rank() {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return;
        };
        let v: Vec<u64> = spec.split(',').map(|x| x.parse().unwrap()).collect();
        let (id, rank, n) = (v[0], v[1] as usize, v[2] as usize);
        let server = FdServer::bind(id, rank).unwrap();
        for key in [1u64, 2] {
            server
                .publish(key, memfd_with(&[pattern(rank, key); CHILD_PAGE]))
                .unwrap();
        }
        let peers: Vec<usize> = (0..n).collect();
        for key in [1u64, 2] {
            let fds = server
                .fetch_from(&peers, key, Duration::from_secs(10))
                .unwrap();
            for (peer, fd) in fds.iter().enumerate() {
                // SAFETY: mapping CHILD_PAGE bytes of a memfd of that size, read-only and shared.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        CHILD_PAGE,
                        libc::PROT_READ,
                        libc::MAP_SHARED,
                        fd.as_raw_fd(),
                        0,
                    )
                };
                assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
                // SAFETY: `p` maps CHILD_PAGE readable bytes until the munmap below.
                let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), CHILD_PAGE) };
                let want = pattern(peer, key);
                assert!(
                    bytes.iter().all(|&b| b == want),
                    "rank {rank}: peer {peer} key {key} has wrong bytes"
                );
                // SAFETY: unmapping exactly what was mapped.
                unsafe { libc::munmap(p, CHILD_PAGE) };
            }
        }
        println!("SYMCOMM-IPC-CHILD ok {rank}");
        // Keep serving until the parent says every rank is done fetching.
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
    }

    #[test]
    fn fds_cross_real_process_boundaries() {
        const N: usize = 4;
        let id = test_id(8);
        let exe = std::env::current_exe().unwrap();
        let mut children: Vec<Child> = (0..N)
            .map(|rank| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "ipc::tests::ipc_child_rank",
                        "--ignored",
                        "--nocapture",
                        "--test-threads=1",
                        "-q",
                    ])
                    .env(CHILD_ENV, format!("{id},{rank},{N}"))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        for (rank, child) in children.iter_mut().enumerate() {
            let out = child.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    if line.starts_with("SYMCOMM-IPC-CHILD ok") {
                        let _ = tx.send(rank);
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut done = Vec::new();
        while done.len() < N {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(rank) => done.push(rank),
                Err(_) => break,
            }
        }
        let all_done = done.len() == N;
        for child in &mut children {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(b"exit\n");
            }
        }
        let mut statuses = Vec::new();
        for child in &mut children {
            let status = loop {
                match child.try_wait().unwrap() {
                    Some(s) => break Some(s),
                    None if Instant::now() > deadline + Duration::from_secs(2) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                    None => std::thread::sleep(Duration::from_millis(10)),
                }
            };
            statuses.push(status);
        }
        assert!(
            all_done,
            "only ranks {done:?} finished fetching; statuses {statuses:?}"
        );
        assert!(
            statuses.iter().all(|s| s.is_some_and(|s| s.success())),
            "child statuses {statuses:?}"
        );
    }
}
