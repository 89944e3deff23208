//! The running TCP transport, step 3: [`TcpLinks`] holds one rank's established links, writes
//! frames on the calling thread and runs one reader thread per link that drains it into the
//! rank's [`Mailbox`].
//!
//! The links come from [`super::rendezvous`] (and [`super::mesh`]); the mailbox is how the
//! bootstrap ([`crate::bootstrap`]) sees messages, aborts and dead peers. [`SendError`] is shared
//! with the in-process transport.

use std::io;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::errors::io_error;
use crate::Result;
use crate::bootstrap::mailbox::{Closed, CollMsg, DeliverError, Failure, Incoming, Mailbox, Op};
use crate::bootstrap::wire::{self, Kind, MAX_MESSAGE_BYTES, WireError};

/// How long a goodbye or an abort may take to write.
const GOODBYE_LIMIT: Duration = Duration::from_millis(200);

/// The established links of one rank, with their reader threads.
pub(crate) struct TcpLinks {
    rank: usize,
    /// Shared with the reader threads, which tell every rank when a peer breaks the protocol.
    writers: Arc<Writers>,
    readers: Vec<JoinHandle<()>>,
    mailbox: Arc<Mailbox>,
}

/// The writing ends of the links, by peer (`None`: this rank, or not connected).
type Writers = Vec<Option<Mutex<TcpStream>>>;

/// Writes an abort frame to `peer` if its writer is free (best effort, within
/// [`GOODBYE_LIMIT`]): a peer that does not read must not hold up a failing rank, and a reader
/// thread must not wait behind a send that blocks.
fn write_abort(writers: &Writers, peer: usize, culprit: usize, reason: &str, wait_for_lock: bool) {
    let Some(Some(w)) = writers.get(peer) else {
        return;
    };
    let mut s = if wait_for_lock {
        w.lock().unwrap_or_else(|p| p.into_inner())
    } else {
        match w.try_lock() {
            Ok(s) => s,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    let usual = s.write_timeout().ok().flatten();
    let _ = s.set_write_timeout(Some(GOODBYE_LIMIT));
    let _ = wire::write_frame(
        &mut *s,
        Kind::Abort,
        culprit as u32,
        0,
        wire::reason_bytes(reason),
    );
    let _ = s.set_write_timeout(usual);
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
    /// The local address of this rank's links (the interface its peers reach it on), from
    /// the first connected one.
    pub(crate) fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.writers.iter().flatten().find_map(|w| {
            let s = w.lock().unwrap_or_else(|p| p.into_inner());
            s.local_addr().ok().map(|a| a.ip())
        })
    }

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
        let mut streams = Vec::with_capacity(size);
        let mut writers: Writers = Vec::with_capacity(size);
        for link in links {
            match link {
                Some(s) => {
                    let w = Self::configure(rank, &s, timeout).and_then(|()| {
                        s.try_clone()
                            .map_err(|e| io_error(rank, "duplicating a link", e))
                    });
                    match w {
                        Ok(w) => {
                            writers.push(Some(Mutex::new(w)));
                            streams.push(Some(s));
                        }
                        Err(e) => {
                            // Links not started yet are dropped, which closes them.
                            return Err(e);
                        }
                    }
                }
                None => {
                    writers.push(None);
                    streams.push(None);
                }
            }
        }
        let mut this = TcpLinks {
            rank,
            writers: Arc::new(writers),
            readers: Vec::new(),
            mailbox,
        };
        for (peer, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            if let Err(e) = this.start_reader(peer, s, size) {
                this.close(false);
                return Err(e);
            }
        }
        Ok(this)
    }

    fn configure(rank: usize, s: &TcpStream, timeout: Duration) -> Result<()> {
        let setup = |source| io_error(rank, "configuring a link", source);
        s.set_read_timeout(None).map_err(setup)?;
        s.set_write_timeout(Some(timeout)).map_err(setup)
    }

    /// Starts the reader thread of the link to `peer` (its writer is registered already, so
    /// that `close` shuts the socket down, and the reader ends, whatever fails here).
    fn start_reader(&mut self, peer: usize, reader: TcpStream, size: usize) -> Result<()> {
        let rank = self.rank;
        let mailbox = self.mailbox.clone();
        let writers = self.writers.clone();
        let handle = thread::Builder::new()
            .name(format!("symcomm-rx{rank}-{peer}"))
            .spawn(move || read_loop(reader, (rank, peer), size, &mailbox, &writers))
            .map_err(|e| io_error(rank, "starting a reader thread", e))?;
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

    /// Tells `peer` (best effort, within [`GOODBYE_LIMIT`]: a peer that does not read must not
    /// hold up a failing rank) that this rank gives up because of `culprit`.
    pub fn abort(&self, peer: usize, culprit: usize, reason: &str) {
        write_abort(&self.writers, peer, culprit, reason, true);
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

/// Reads frames from `peer` into the mailbox until the link ends. A peer that breaks the
/// protocol (a live peer, unlike one whose link merely ended) is reported to every rank,
/// itself included, so nobody waits for it.
fn read_loop(
    stream: TcpStream,
    (me, peer): (usize, usize),
    size: usize,
    mailbox: &Mailbox,
    writers: &Writers,
) {
    let broke = |how: String| {
        let stands = mailbox.fail(Failure {
            culprit: peer,
            reason: how.clone(),
        });
        if stands.culprit == peer && stands.reason == how {
            for p in (0..size).filter(|&p| p != me) {
                write_abort(writers, p, peer, &how, false);
            }
        }
        mailbox.close(peer, Closed::Died(how));
    };
    let mut r = io::BufReader::with_capacity(64 << 10, stream);
    loop {
        let f = match wire::read_frame(&mut r, MAX_MESSAGE_BYTES) {
            Ok(f) => f,
            Err(e) => {
                if !mailbox.is_shut_down() {
                    match e {
                        WireError::Eof => mailbox.close(peer, Closed::Died("disconnected".into())),
                        WireError::Io(e) => {
                            mailbox.close(peer, Closed::Died(format!("disconnected ({e})")))
                        }
                        WireError::Malformed(m) => broke(format!("sent a malformed frame: {m}")),
                    }
                    tracing::debug!("link to rank {peer} ended");
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
                    broke(format!("sent an unknown collective {}", f.aux));
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
                broke(format!("sent an unexpected {k:?} frame"));
                let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
                return;
            }
        };
        if let Err(DeliverError::ShutDown) = mailbox.deliver(peer, incoming, None) {
            return;
        }
    }
}
