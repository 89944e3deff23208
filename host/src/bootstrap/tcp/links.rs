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

/// How long a goodbye may take to write when a communicator is closed.
const GOODBYE_LIMIT: Duration = Duration::from_millis(200);

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
