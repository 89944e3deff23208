//! The fetching side of the fd exchange: asks a peer's [`FdServer`](super::FdServer) for the fd
//! it published under a key, retrying while the peer is not listening or has not published yet,
//! until the caller's deadline or until the caller's liveness check says the peer is gone.
//!
//! Every step (connect, send, receive) is bounded by what is left of the deadline; a timeout
//! names this rank, the peer, the key and the step, and a reply that breaks [`super::wire`]
//! is an error (any fds it carried are closed), never a panic. A reply whose fd this process
//! could not take because it is at its fd limit is this rank's error, naming the limit, not a
//! fault of the peer.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::sys::{
    MAX_FDS_PER_MESSAGE, abstract_addr, owned_or_last_error, recv_with_fds, send_with_fds,
    seqpacket_socket, set_timeouts,
};
use super::wire::{
    MSG_SIZE, Message, PROTOCOL_VERSION, REPLY_MAGIC, STATUS_NOT_PUBLISHED, STATUS_OK, socket_name,
};
use crate::time::{deadline_after, remaining};
use crate::{Error, Result};

/// Fetches the fd that `peer` published under `key` for unique id `id`, waiting up to
/// `timeout` for the peer to bind and publish it; needs no [`FdServer`] of its own (e.g. in a
/// process that only imports). `my_rank` labels errors and the request.
///
/// [`FdServer`]: super::FdServer
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
        &|| Ok(()),
    )
}

/// Fetches with retries until `deadline`; `spent_before` is how much of the caller's overall
/// timeout had already passed (for the error message). `alive` is asked before every retry and
/// its error returned at once (e.g. the bootstrap knows the peer died: retrying "connection
/// refused" until the deadline would only delay the same news).
pub(crate) fn fetch_until(
    id: u64,
    my_rank: usize,
    peer: usize,
    key: u64,
    deadline: Instant,
    spent_before: Duration,
    alive: &dyn Fn() -> Result<()>,
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
                alive()?;
                let left = remaining(deadline);
                if left.is_zero() {
                    return Err(timeout(step));
                }
                std::thread::sleep(backoff.min(left));
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
            Err(Failure::TimedOut(step)) => return Err(timeout(step)),
            Err(Failure::Peer(sent)) => {
                return Err(Error::PeerProtocol {
                    rank: Some(my_rank),
                    step: format!("fetching fd key {key} (@{name})"),
                    peer,
                    what: sent,
                });
            }
            Err(Failure::Closed) => {
                return Err(Error::PeerFailed {
                    rank: Some(my_rank),
                    step: format!("fetching fd key {key} (@{name})"),
                    peer,
                    reason: "closed the connection without replying (its server drops requests \
                             from another user or another job)"
                        .into(),
                });
            }
            Err(Failure::Io(step, source)) => {
                let mut what = what(step);
                if source.raw_os_error() == Some(libc::EMFILE) {
                    // Say whose limit it is: not the peer's fault, and not a protocol error.
                    what += &format!(
                        ": rank {my_rank} ran out of file descriptors ({}, raise `ulimit -n`)",
                        fd_limit().map_or("limit unknown".into(), |n| format!("limit {n}"))
                    );
                }
                return Err(Error::Io { what, source });
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
    /// The peer's reply breaks the protocol (what it sent).
    Peer(String),
    /// The peer closed the connection without replying.
    Closed,
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
    let bad = Failure::Peer;
    if received.len == 0 && received.flags & libc::MSG_TRUNC == 0 {
        return Err(Failure::Closed);
    }
    if received.flags & libc::MSG_CTRUNC != 0 {
        // Room for MAX_FDS_PER_MESSAGE fds: a full buffer means the peer sent more; fewer
        // means the kernel could not install one here (this process is at its fd limit).
        if received.fds.len() >= MAX_FDS_PER_MESSAGE {
            return Err(bad(format!(
                "a reply that carried more than {MAX_FDS_PER_MESSAGE} fds"
            )));
        }
        return Err(Failure::Io(
            "receiving the fd",
            why_fds_were_dropped(sock.as_fd()),
        ));
    }
    let reply = received
        .payload(&buf)
        .and_then(Message::decode)
        .ok_or_else(|| {
            bad(format!(
                "a reply of {} bytes, expected {MSG_SIZE}",
                received.describe_len()
            ))
        })?;
    if reply.magic != REPLY_MAGIC {
        return Err(bad(format!("a reply with magic {:02x?}", reply.magic)));
    }
    if reply.version != PROTOCOL_VERSION {
        return Err(bad(format!(
            "a reply with protocol version {}, expected {PROTOCOL_VERSION}",
            reply.version
        )));
    }
    if reply.id != id || reply.key != key {
        return Err(bad(format!(
            "a reply for unique id {:016x} key {}, asked for {id:016x} key {key}",
            reply.id, reply.key
        )));
    }
    let mut fds = received.fds;
    match (reply.word, fds.len()) {
        (STATUS_OK, 1) => Ok(Attempt::Got(fds.remove(0))),
        (STATUS_OK, n) => Err(bad(format!("a reply that carried {n} fds, expected 1"))),
        (STATUS_NOT_PUBLISHED, 0) => Ok(Attempt::Retry("waiting for the peer to publish the key")),
        (STATUS_NOT_PUBLISHED, n) => {
            Err(bad(format!("a 'not published' reply that carried {n} fds")))
        }
        (status, _) => Err(bad(format!("a reply with unknown status {status}"))),
    }
}

/// Why the kernel dropped fds of a received message although there was room for them:
/// `EMFILE` when this process cannot open another fd (probed with a `dup` of `sock`, closed at
/// once), else a description (the limit was reached only for a moment, or a security module
/// refused the fd).
fn why_fds_were_dropped(sock: BorrowedFd<'_>) -> io::Error {
    // SAFETY: F_DUPFD_CLOEXEC of a live fd; a new fd is taken into an OwnedFd (closed below).
    let probe =
        owned_or_last_error(unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) });
    match probe {
        Err(e) if e.raw_os_error() == Some(libc::EMFILE) => e,
        _ => io::Error::other(
            "the kernel dropped the fd the reply carried, though this process can open one \
             now (a file-descriptor limit reached for a moment, or a security policy)",
        ),
    }
}

/// This process's limit on open fds (`RLIMIT_NOFILE`, soft), if known.
fn fd_limit() -> Option<u64> {
    // SAFETY: an all-zero rlimit is a valid out-buffer.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `lim` is a valid out-pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur as u64)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
