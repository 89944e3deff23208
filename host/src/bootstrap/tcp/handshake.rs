//! What both setup steps ([`super::rendezvous`], [`super::mesh`]) share on the dialing side:
//! dialing a listener with retries, reading an answer against a deadline, sending reject and
//! abort frames, and mapping a failed handshake read to an error naming the step. (The
//! listening side, reading the hellos of accepted connections, is [`super::hellos`].)

use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use super::errors::protocol;
use crate::bootstrap::wire::{self, Kind, WireError};
use crate::time::remaining;
use crate::{Error, Result};

/// Shortest wait of a set-up read, and the pause after an unexpected poll or accept failure.
pub(crate) const POLL: Duration = Duration::from_millis(1);
/// Pause between connection attempts.
pub(crate) const RETRY: Duration = Duration::from_millis(20);
/// Longest a set-up wait goes without looking for a launcher notice ([`crate::fault`]).
pub(crate) const NOTICE_POLL: Duration = Duration::from_millis(20);

/// Fails when `symcomm-run` has reported a rank of job `job` dead: the set-up cannot complete,
/// and waiting for its deadline would only delay the error.
pub(crate) fn check_notice(rank: usize, job: u64, step: &str) -> Result<()> {
    match crate::fault::launcher_notice(job) {
        Some((dead, what)) => Err(Error::PeerFailed {
            rank: Some(rank),
            step: step.into(),
            peer: dead,
            reason: what,
        }),
        None => Ok(()),
    }
}

/// Waits until `s` has something to read (or its peer closed it) or `deadline` passes,
/// checking for launcher notices about job `job` meanwhile; the read that follows then finds
/// data or times out as it would have.
pub(crate) fn wait_readable(
    s: &TcpStream,
    deadline: Instant,
    (rank, job): (usize, u64),
    step: &str,
) -> Result<()> {
    loop {
        check_notice(rank, job, step)?;
        let left = remaining(deadline);
        if left.is_zero() {
            return Ok(());
        }
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.min(NOTICE_POLL).as_millis().max(1) as libc::c_int;
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut p, 1, ms) };
        if ready != 0 {
            return Ok(()); // readable, closed, or poll failed: let the read tell
        }
    }
}

/// Connects to `addr`, retrying until `deadline` while nobody listens there yet (and no rank of
/// job `job` was reported dead).
pub(crate) fn dial(
    addr: SocketAddr,
    (rank, job): (usize, u64),
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
                check_notice(rank, job, step)?;
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

/// Sends a reject or abort frame, ignoring failure (the other end may be gone already).
pub(crate) fn send_reason(s: &mut TcpStream, kind: Kind, culprit: usize, reason: &str) {
    let _ = wire::write_frame(s, kind, culprit as u32, 0, wire::reason_bytes(reason));
}

/// Tells every connected rank that the setup failed because of `culprit`.
pub(crate) fn abort_links(links: &mut [Option<TcpStream>], culprit: usize, reason: &str) {
    for s in links.iter_mut().flatten() {
        send_reason(s, Kind::Abort, culprit, reason);
    }
}

/// A socket read against an absolute deadline: each read waits only for the time left, so a
/// peer that trickles its bytes cannot stretch a handshake past the deadline.
pub(crate) struct Until<'a> {
    s: &'a TcpStream,
    deadline: Instant,
}

impl<'a> Until<'a> {
    pub(crate) fn new(s: &'a TcpStream, deadline: Instant) -> Until<'a> {
        Until { s, deadline }
    }
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = remaining(self.deadline);
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake deadline passed",
            ));
        }
        self.s.set_read_timeout(Some(left))?;
        let mut s = self.s;
        s.read(buf)
    }
}

/// Maps a failed handshake read from `peer` to an error naming the step.
pub(crate) fn read_error(
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
