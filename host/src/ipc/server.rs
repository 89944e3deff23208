//! The serving side of the fd exchange: [`FdServer`] owns a rank's published fds and the
//! thread that answers peers' requests for them.
//!
//! The thread accepts one connection at a time on the rank's abstract socket, checks the
//! peer's user and the request ([`super::wire`]), and replies with the fd or "not published";
//! each connection is bounded by [`SERVE_IO_TIMEOUT`]. Fetching goes through
//! [`super::client`], which needs no server of its own.

use std::collections::BTreeMap;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::{fetch_fd, fetch_until};
use super::sys::{
    bind_listener, owned_or_last_error, peer_credentials, recv_with_fds, send_with_fds,
    set_timeouts,
};
use super::wire::{
    MSG_SIZE, Message, PROTOCOL_VERSION, REQUEST_MAGIC, STATUS_NOT_PUBLISHED, STATUS_OK, invalid,
    socket_name,
};
use crate::time::{deadline_after, remaining};
use crate::{Error, Result};

/// The longest one server-side connection may take (reading the request, sending the reply).
/// A client that connects and stalls delays other clients by at most this much.
pub const SERVE_IO_TIMEOUT: Duration = Duration::from_secs(1);

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
        self.fetch_watching(peers, key, timeout, &|_| Ok(()))
    }

    /// [`fetch_from`](FdServer::fetch_from), asking `alive(peer)` before every retry and
    /// failing with its error at once: how a caller that knows when a peer dies (the
    /// bootstrap) stops waiting for it.
    pub fn fetch_watching(
        &self,
        peers: &[usize],
        key: u64,
        timeout: Duration,
        alive: &dyn Fn(usize) -> Result<()>,
    ) -> Result<Vec<OwnedFd>> {
        let deadline = deadline_after(timeout);
        peers
            .iter()
            .map(|&peer| {
                let left = remaining(deadline);
                let alive = || alive(peer);
                fetch_until(
                    self.id,
                    self.rank,
                    peer,
                    key,
                    deadline,
                    timeout - left,
                    &alive,
                )
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the table half-updated (single inserts and
    // removes), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
