//! Bootstrap: how the ranks of a job find each other and exchange small host-side messages
//! (sizes, handles, node identities) before and besides any GPU communication.
//!
//! A [`Bootstrap`] is one rank's endpoint. It offers byte-oriented collectives
//! ([`all_gather`](Bootstrap::all_gather), [`all_gather_ranks`](Bootstrap::all_gather_ranks),
//! [`broadcast`](Bootstrap::broadcast), [`barrier`](Bootstrap::barrier)) and point-to-point
//! messages ([`send`](Bootstrap::send) / [`recv`](Bootstrap::recv)) over one of two transports
//! with identical semantics:
//! - **TCP** ([`Bootstrap::connect_tcp`], [`Bootstrap::serve_tcp`]): one process per rank; a
//!   rendezvous at rank 0 (address and magic from a [`UniqueId`]), then a full mesh of
//!   connections (the handshake is documented in `bootstrap/tcp/mod.rs`, the framing and its size
//!   limits in `bootstrap/wire.rs`);
//! - **in-process** ([`Bootstrap::in_process`]): ranks are threads of one process.
//!
//! Launch conventions (torchrun, Open MPI, `symcomm-run`) are read by [`LaunchEnv`].
//!
//! Guarantees:
//! - every blocking step has a deadline (the bootstrap's timeout, `SYMCOMM_TIMEOUT`); nothing
//!   waits forever;
//! - every message read from the network is size-checked before anything is allocated
//!   ([`MAX_MESSAGE_BYTES`] per message, each frame kind its own smaller ceiling); queues per
//!   peer are bounded;
//! - a peer that dies is noticed when its connection ends (during the set-up also when
//!   `symcomm-run` reports it: [`crate::fault`]), whatever this rank is doing; a rank that gives up tells all others (an
//!   abort), the rank it blames included, so every rank fails promptly with an error naming the
//!   dead rank and the step, e.g. `rank 2: barrier #17: rank 5 disconnected`. Failure listeners
//!   ([`Bootstrap::watch_failure`]: the abort flags of device communicators) are called at once;
//! - after one failure the bootstrap stays failed: every call started later reports that
//!   failure;
//! - collectives carry their kind, so ranks calling different collectives get an error instead
//!   of misreading each other's data; the runtime's own collectives (registration, agreement,
//!   device communicators) have kinds of their own, so a user collective that meets one is an
//!   error too, never a misread; a broadcast checks that every rank named the same root.
//!
//! Calls on one bootstrap are serialised (an internal lock): use it from one thread per rank at
//! a time. Collectives match by call order, like NCCL's.
//!
//! # Errors
//! Every call returns [`Error::InvalidArgument`] for a bad argument (out-of-range rank, message
//! over [`MAX_MESSAGE_BYTES`]) before communicating, and the bootstrap stays usable. Otherwise a
//! call fails with [`Error::PeerFailed`] naming the step (`barrier #17`, `recv #4 from rank 2`)
//! and the rank at fault when a rank it needs disconnected, closed its communicator, gave up,
//! sent something malformed or is in a different collective; or with [`Error::Timeout`] naming
//! the step and the rank it waited for. After such a failure every later call fails with
//! [`Error::PeerFailed`] naming the same rank.

mod agree;
mod env;
mod inproc;
mod mailbox;
mod slurm;
pub(crate) mod tcp;
mod unique_id;
pub(crate) mod wire;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use env::{DEFAULT_TIMEOUT, LaunchEnv, Launcher, parse_timeout};
pub use slurm::expand_nodelist;
pub use tcp::RootListener;
pub use unique_id::UniqueId;
pub use wire::{MAX_MESSAGE_BYTES, MAX_WORLD_SIZE, PROTOCOL_VERSION};

use crate::time::deadline_after;
use crate::{Error, Result};
use inproc::InProcLinks;
use mailbox::{CollMsg, Failure, Incoming, Mailbox, Op, WaitError};
use tcp::{SendError, TcpLinks};
use wire::Kind;

pub(crate) use unique_id::{fnv1a64, random_u64 as random_token, resolve};

/// One rank's endpoint of the bootstrap network. See the module documentation.
///
/// Cloning gives another handle to the same endpoint (e.g. for a component that must take part
/// in collectives later, like the gallery's checked mode): calls through all handles are
/// serialised and match other ranks' calls by their order, as if made through one. The links
/// close when the last handle is dropped.
#[derive(Clone)]
pub struct Bootstrap {
    s: Arc<Endpoint>,
}

/// What the handles of one bootstrap share.
struct Endpoint {
    rank: usize,
    size: usize,
    timeout: Duration,
    job: u64,
    mailbox: Arc<Mailbox>,
    transport: Transport,
    /// Number of calls made so far; the lock serialises calls.
    calls: Mutex<u64>,
}

enum Transport {
    Tcp(TcpLinks),
    InProc(InProcLinks),
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.s.rank)
            .field("size", &self.s.size)
            .field(
                "transport",
                &match self.s.transport {
                    Transport::Tcp(_) => "tcp",
                    Transport::InProc(_) => "in-process",
                },
            )
            .field("timeout", &self.s.timeout)
            .finish()
    }
}

impl Bootstrap {
    /// Collective: every rank of the job calls this with the same `id` and `size`, each with
    /// its own `rank`; returns once all ranks are connected to each other.
    ///
    /// Rank 0 listens at `id.addr()`; the others connect to it (retrying until it is up). Every
    /// rank gets an error if the job does not come together within `timeout` or if the world
    /// sizes disagree. A process with a different magic, or claiming a rank that has already
    /// joined, is rejected (it gets an error, the others keep waiting for the real rank);
    /// connections that are not ranks of this job at all (silent, slow or garbage) are dropped
    /// without delaying anyone.
    pub fn connect_tcp(
        id: &UniqueId,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<Bootstrap> {
        check_world(rank, size)?;
        if size == 1 {
            return Ok(Self::single(timeout, id.magic()));
        }
        if rank == 0 {
            return Self::serve_tcp(RootListener::bind_id(id)?, size, timeout);
        }
        let b = tcp::join(id, rank, size, timeout)
            .and_then(|links| Self::over_tcp(rank, size, id.magic(), links, timeout))
            .map_err(|e| prefer_launcher_notice(rank, id.magic(), e));
        tcp::close_leftovers(); // the set-up is over: now the strays it refused may go
        b
    }

    /// Collective: rank 0's side of [`Bootstrap::connect_tcp`], on a listener bound beforehand
    /// (e.g. on port 0, so that its [`RootListener::unique_id`] can be handed to the others).
    pub fn serve_tcp(root: RootListener, size: usize, timeout: Duration) -> Result<Bootstrap> {
        check_world(0, size)?;
        let job = root.unique_id().magic();
        if size == 1 {
            return Ok(Self::single(timeout, job));
        }
        let b = tcp::serve(root, size, timeout)
            .and_then(|links| Self::over_tcp(0, size, job, links, timeout))
            .map_err(|e| prefer_launcher_notice(0, job, e));
        tcp::close_leftovers(); // the set-up is over: now the strays it refused may go
        b
    }

    /// `size` endpoints of one in-process group, index = rank; hand each to its own thread.
    pub fn in_process(size: usize, timeout: Duration) -> Result<Vec<Bootstrap>> {
        check_world(0, size)?;
        let boxes: Arc<Vec<Arc<Mailbox>>> =
            Arc::new((0..size).map(|_| Arc::new(Mailbox::new(size))).collect());
        let job = unique_id::random_u64();
        Ok((0..size)
            .map(|rank| Self::in_process_rank(rank, &boxes, timeout, job))
            .collect())
    }

    /// This rank, in `0..size()`.
    pub fn rank(&self) -> usize {
        self.s.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.s.size
    }

    /// A number shared by every rank of this job and, with high probability, by no other job
    /// on the machine (the unique id's magic; random for an in-process group). Use it to name
    /// per-job resources, e.g. abstract Unix sockets.
    pub fn job_id(&self) -> u64 {
        self.s.job
    }

    /// The address this rank's peers reach it on: the local end of its TCP links, or the
    /// loopback address for an in-process group (or a world of one). Where a rank listens for
    /// a new group of some of the same ranks ([`Communicator::split`](crate::Communicator::split)).
    pub fn local_ip(&self) -> std::net::IpAddr {
        let loopback = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        match &self.s.transport {
            Transport::Tcp(links) => links.local_ip().unwrap_or(loopback),
            Transport::InProc(_) => loopback,
        }
    }

    /// The deadline applied to every blocking call.
    pub fn timeout(&self) -> Duration {
        self.s.timeout
    }

    /// The failure that broke this bootstrap (a peer died, gave up or broke the protocol), as
    /// the error this rank's later calls return; `None` while it is healthy.
    pub fn failure(&self) -> Option<Error> {
        failure_error(self.s.rank, &self.s.mailbox, "bootstrap")
    }

    /// Calls `on_failure` once with the error of the first failure of this bootstrap, at once if
    /// it has failed already, else from the thread that notices (a link's reader, the launcher
    /// notice reader or a caller's thread); it must be quick and must not call back into the
    /// bootstrap. The returned watch unregisters it on drop: once dropped, it never runs again.
    pub fn watch_failure(
        &self,
        on_failure: impl Fn(&Error) + Send + Sync + 'static,
    ) -> FailureWatch {
        let rank = self.s.rank;
        let id = self.s.mailbox.on_failure(Box::new(move |f: &Failure| {
            on_failure(&failure_as_error(rank, f, "bootstrap"));
        }));
        FailureWatch {
            rank,
            mailbox: Arc::clone(&self.s.mailbox),
            id,
        }
    }

    /// Fails (and tells every rank, if this is the first failure) when `peer` is gone or the
    /// group has failed; `step` names what this rank is doing. For waits outside the bootstrap
    /// that depend on `peer` (e.g. fetching its file descriptors).
    pub(crate) fn check_alive(&self, step: &str, peer: usize) -> Result<()> {
        if let Some(e) = failure_error(self.s.rank, &self.s.mailbox, step) {
            return Err(e);
        }
        match self.s.mailbox.closed_reason(peer) {
            Some(how) => Err(self.peer_failed(step, peer, how)),
            None => Ok(()),
        }
    }

    /// Collective: every rank calls this with its own `data` (lengths may differ); returns every
    /// rank's data, indexed by rank.
    ///
    /// Errors: see [the module documentation](self#errors).
    #[doc(alias = "bootstrapAllGather")]
    pub fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let everyone: Vec<usize> = (0..self.s.size).collect();
        self.gather(Op::AllGather, &everyone, data)
    }

    /// Collective over `ranks`: every rank listed calls this with the same list (distinct ranks,
    /// containing the caller); returns their data in the order of the list. Ranks not listed
    /// are not involved (e.g. an all-gather among the ranks of one node).
    ///
    /// Errors: see [the module documentation](self#errors).
    pub fn all_gather_ranks(&self, ranks: &[usize], data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.check_rank_list(ranks)?;
        self.gather(Op::AllGather, ranks, data)
    }

    /// The runtime's own [`all_gather`](Bootstrap::all_gather): the same, in a tag space
    /// apart from the user's (see [`Op::RuntimeAllGather`]).
    pub(crate) fn runtime_all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let everyone: Vec<usize> = (0..self.s.size).collect();
        self.gather(Op::RuntimeAllGather, &everyone, data)
    }

    /// The runtime's own [`all_gather_ranks`](Bootstrap::all_gather_ranks).
    pub(crate) fn runtime_all_gather_ranks(
        &self,
        ranks: &[usize],
        data: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        self.check_rank_list(ranks)?;
        self.gather(Op::RuntimeAllGather, ranks, data)
    }

    /// The runtime's own [`barrier`](Bootstrap::barrier).
    pub(crate) fn runtime_barrier(&self) -> Result<()> {
        self.barrier_tagged(Op::RuntimeBarrier)
    }

    fn check_rank_list(&self, ranks: &[usize]) -> Result<()> {
        // The list may be long: messages show its start and length, and name the culprit.
        let list = || {
            format!(
                "rank list [{}] ({} entries)",
                crate::error::join_bounded(ranks, 8, 12, ", "),
                ranks.len()
            )
        };
        let mut seen = vec![false; self.s.size];
        for &r in ranks {
            if r >= self.s.size {
                return Err(Error::InvalidArgument(format!(
                    "all_gather_ranks: rank {r} is out of range (world size {}) in the {}",
                    self.s.size,
                    list()
                )));
            }
            if std::mem::replace(&mut seen[r], true) {
                return Err(Error::InvalidArgument(format!(
                    "all_gather_ranks: the {} repeats rank {r}",
                    list()
                )));
            }
        }
        if !seen[self.s.rank] {
            return Err(Error::InvalidArgument(format!(
                "all_gather_ranks: the {} does not contain the caller (rank {})",
                list(),
                self.s.rank
            )));
        }
        Ok(())
    }

    /// Collective: every rank calls this with the same `root`; returns the root's `data` on
    /// every rank (the others' `data` is ignored). Every rank tells every other which root it
    /// named, so ranks that name different roots all get [`Error::Mismatch`] instead of
    /// silently different results.
    ///
    /// Errors: see [the module documentation](self#errors).
    #[doc(alias = "bootstrapBroadcast")]
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.s.size {
            return Err(Error::InvalidArgument(format!(
                "broadcast: root {root} is not a rank (world size {})",
                self.s.size
            )));
        }
        if data.len() > MAX_MESSAGE_BYTES - 4 {
            return Err(Error::InvalidArgument(format!(
                "broadcast of {} bytes exceeds the limit of {} bytes",
                data.len(),
                MAX_MESSAGE_BYTES - 4
            )));
        }
        // The root's root number, then its data; the others send only their root number.
        let mine = if root == self.s.rank {
            [&(root as u32).to_le_bytes()[..], data].concat()
        } else {
            (root as u32).to_le_bytes().to_vec()
        };
        let everyone: Vec<usize> = (0..self.s.size).collect();
        let all = self.gather(Op::Broadcast, &everyone, &mine)?;
        let named = |r: usize| {
            all[r]
                .get(..4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        for r in 0..self.s.size {
            match named(r) {
                Some(x) if x == root => {}
                Some(x) => {
                    return Err(Error::Mismatch {
                        what: "broadcast root".into(),
                        rank_a: self.s.rank,
                        value_a: root.to_string(),
                        rank_b: r,
                        value_b: x.to_string(),
                    });
                }
                None => {
                    return Err(self.peer_failed(
                        "broadcast",
                        r,
                        "sent a malformed broadcast message".into(),
                    ));
                }
            }
        }
        Ok(all[root][4..].to_vec())
    }

    /// Collective: returns once every rank has called it.
    ///
    /// Errors: see [the module documentation](self#errors).
    #[doc(alias = "bootstrapBarrier")]
    pub fn barrier(&self) -> Result<()> {
        self.barrier_tagged(Op::Barrier)
    }

    fn barrier_tagged(&self, op: Op) -> Result<()> {
        // Dissemination barrier: in round k every rank signals rank + 2^k and waits for
        // rank - 2^k; after ceil(log2 n) rounds everyone has (transitively) heard from everyone.
        // n log n messages instead of the n^2 of an all-to-all.
        let mut calls = self.lock_calls();
        *calls += 1;
        let n = *calls;
        let step = || format!("{} #{n}", op.name());
        let deadline = deadline_after(self.s.timeout);
        self.check_failed(&step)?;
        let (me, size) = (self.s.rank, self.s.size);
        let mut dist = 1;
        while dist < size {
            let to = (me + dist) % size;
            let from = (me + size - dist) % size;
            self.send_coll(to, op, n, &[], deadline)
                .map_err(|e| self.send_failed(&step(), to, e))?;
            let got = self
                .s
                .mailbox
                .take_coll(&[from], deadline)
                .map_err(|e| self.wait_failed(&step(), e))?;
            for m in &got {
                self.check_op(&step, from, op, m)?;
            }
            dist *= 2;
        }
        Ok(())
    }

    /// Sends `data` to `peer` (which receives it with [`recv`](Bootstrap::recv)). Returns once
    /// the message is handed to the transport; messages between two ranks arrive in order.
    ///
    /// Errors: see [the module documentation](self#errors).
    #[doc(alias = "bootstrapSend")]
    pub fn send(&self, peer: usize, data: &[u8]) -> Result<()> {
        self.check_peer("send", peer)?;
        check_len(data)?;
        let mut calls = self.lock_calls();
        *calls += 1;
        let n = *calls;
        let step = || format!("send #{n} to rank {peer}");
        let deadline = deadline_after(self.s.timeout);
        self.check_failed(&step)?;
        let sent = if peer == self.s.rank {
            self.s
                .mailbox
                .deliver(peer, Incoming::P2p(data.to_vec()), Some(deadline))
                .map_err(|_| SendError::TimedOut)
        } else {
            match &self.s.transport {
                Transport::Tcp(t) => t.send(peer, Kind::PointToPoint, 0, n, data),
                Transport::InProc(t) => t.send(peer, Incoming::P2p(data.to_vec()), deadline),
            }
        };
        sent.map_err(|e| self.send_failed(&step(), peer, e))
    }

    /// Receives the next message `peer` sent to this rank with [`send`](Bootstrap::send).
    ///
    /// Errors: see [the module documentation](self#errors).
    #[doc(alias = "bootstrapRecv")]
    pub fn recv(&self, peer: usize) -> Result<Vec<u8>> {
        self.check_peer("recv", peer)?;
        let mut calls = self.lock_calls();
        *calls += 1;
        let n = *calls;
        let step = || format!("recv #{n} from rank {peer}");
        self.check_failed(&step)?;
        self.s
            .mailbox
            .take_p2p(peer, deadline_after(self.s.timeout))
            .map_err(|e| self.wait_failed(&step(), e))
    }

    // ---- private helpers -------------------------------------------------------------------

    fn single(timeout: Duration, job: u64) -> Bootstrap {
        Self::in_process_rank(0, &Arc::new(vec![Arc::new(Mailbox::new(1))]), timeout, job)
    }

    fn in_process_rank(
        rank: usize,
        boxes: &Arc<Vec<Arc<Mailbox>>>,
        timeout: Duration,
        job: u64,
    ) -> Bootstrap {
        Bootstrap {
            s: Arc::new(Endpoint {
                rank,
                size: boxes.len(),
                timeout,
                job,
                mailbox: boxes[rank].clone(),
                transport: Transport::InProc(InProcLinks::new(rank, boxes.clone())),
                calls: Mutex::new(0),
            }),
        }
    }

    fn over_tcp(
        rank: usize,
        size: usize,
        job: u64,
        links: Vec<Option<std::net::TcpStream>>,
        timeout: Duration,
    ) -> Result<Bootstrap> {
        let mailbox = Arc::new(Mailbox::new(size));
        let links = TcpLinks::start(rank, links, mailbox.clone(), timeout)?;
        let b = Bootstrap {
            s: Arc::new(Endpoint {
                rank,
                size,
                timeout,
                job,
                mailbox,
                transport: Transport::Tcp(links),
                calls: Mutex::new(0),
            }),
        };
        // Confirms every link end to end before anyone uses the bootstrap.
        let everyone: Vec<usize> = (0..size).collect();
        b.gather(Op::Connect, &everyone, &[])?;
        tracing::debug!("rank {rank}: bootstrap connected to all {size} ranks over tcp");
        Ok(b)
    }

    fn lock_calls(&self) -> MutexGuard<'_, u64> {
        self.s.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// All-gather among `ranks` (already validated), tagged with `op`.
    fn gather(&self, op: Op, ranks: &[usize], data: &[u8]) -> Result<Vec<Vec<u8>>> {
        check_len(data)?;
        let mut calls = self.lock_calls();
        *calls += 1;
        let n = *calls;
        let step = || format!("{} #{n}", op.name());
        let deadline = deadline_after(self.s.timeout);
        self.check_failed(&step)?;
        let others: Vec<usize> = ranks
            .iter()
            .copied()
            .filter(|&p| p != self.s.rank)
            .collect();
        // Start with the next rank up, so that not every rank writes to the same peer first.
        let first = others.iter().position(|&p| p > self.s.rank).unwrap_or(0);
        for &p in others[first..].iter().chain(&others[..first]) {
            self.send_coll(p, op, n, data, deadline)
                .map_err(|e| self.send_failed(&step(), p, e))?;
        }
        let msgs = self
            .s
            .mailbox
            .take_coll(&others, deadline)
            .map_err(|e| self.wait_failed(&step(), e))?;
        let mut msgs = others.iter().zip(msgs);
        let mut out = Vec::with_capacity(ranks.len());
        for &r in ranks {
            if r == self.s.rank {
                out.push(data.to_vec());
            } else if let Some((&p, m)) = msgs.next() {
                self.check_op(&step, p, op, &m)?;
                out.push(m.data);
            }
        }
        Ok(out)
    }

    fn send_coll(
        &self,
        peer: usize,
        op: Op,
        n: u64,
        data: &[u8],
        deadline: Instant,
    ) -> std::result::Result<(), SendError> {
        match &self.s.transport {
            Transport::Tcp(t) => t.send(peer, Kind::Collective, op as u32, n, data),
            Transport::InProc(t) => t.send(
                peer,
                Incoming::Coll(CollMsg {
                    op,
                    step: n,
                    data: data.to_vec(),
                }),
                deadline,
            ),
        }
    }

    fn check_peer(&self, what: &str, peer: usize) -> Result<()> {
        if peer < self.s.size {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{what}: peer {peer} is not a rank (world size {})",
                self.s.size
            )))
        }
    }

    /// Fails at once when the bootstrap already failed.
    fn check_failed(&self, step: &dyn Fn() -> String) -> Result<()> {
        match failure_error(self.s.rank, &self.s.mailbox, &step()) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    fn check_op(&self, step: &dyn Fn() -> String, peer: usize, op: Op, m: &CollMsg) -> Result<()> {
        if m.op == op {
            return Ok(());
        }
        Err(self.peer_failed(
            &step(),
            peer,
            format!(
                "is in a different collective ({} #{} on that rank)",
                m.op.name(),
                m.step
            ),
        ))
    }

    /// Records that `peer` failed (telling every other rank, if this is the first failure)
    /// and returns the error for this rank.
    fn peer_failed(&self, step: &str, peer: usize, reason: String) -> Error {
        let f = self.record(peer, reason);
        Error::PeerFailed {
            rank: Some(self.s.rank),
            step: step.into(),
            peer: f.culprit,
            reason: f.reason,
        }
    }

    /// A handle that reports a failure to every rank, as a failed step of this bootstrap
    /// would, without keeping the bootstrap alive (for runtime parts that fail outside a
    /// bootstrap call: a device communicator's GIN).
    pub(crate) fn failure_reporter(&self) -> FailureReporter {
        FailureReporter(Arc::downgrade(&self.s))
    }

    /// Records a failure; if it is the first, sends an abort to every other rank still
    /// connected (the culprit too: a rank blamed for being slow or for what it sent learns why
    /// the others gave up instead of waiting for them).
    fn record(&self, culprit: usize, reason: String) -> Failure {
        let mine = Failure { culprit, reason };
        let stands = self.s.mailbox.fail(mine.clone());
        if stands.culprit == mine.culprit && stands.reason == mine.reason {
            tracing::warn!(
                "rank {}: rank {culprit} {}; telling the others",
                self.s.rank,
                mine.reason
            );
            for p in (0..self.s.size).filter(|&p| p != self.s.rank) {
                if self.s.mailbox.is_closed(p) {
                    continue;
                }
                match &self.s.transport {
                    Transport::Tcp(t) => t.abort(p, culprit, &mine.reason),
                    Transport::InProc(t) => t.abort(p, culprit, &mine.reason),
                }
            }
        }
        stands
    }

    fn wait_failed(&self, step: &str, e: WaitError) -> Error {
        match e {
            WaitError::Failed(f) => Error::PeerFailed {
                rank: Some(self.s.rank),
                step: step.into(),
                peer: f.culprit,
                reason: f.reason,
            },
            WaitError::Closed(p, how) => self.peer_failed(step, p, how.reason()),
            WaitError::TimedOut(p) => self.timed_out(step, p),
        }
    }

    fn send_failed(&self, step: &str, peer: usize, e: SendError) -> Error {
        match e {
            SendError::Closed(how) => {
                // The reader thread may know better (e.g. a goodbye): prefer its account.
                let how = self.s.mailbox.closed_reason(peer).unwrap_or(how);
                self.peer_failed(step, peer, how)
            }
            SendError::TimedOut => self.timed_out(step, peer),
        }
    }

    fn timed_out(&self, step: &str, peer: usize) -> Error {
        self.record(peer, format!("did not respond within {:?}", self.s.timeout));
        Error::Timeout {
            rank: Some(self.s.rank),
            step: format!("{step} waiting for rank {peer}"),
            after: self.s.timeout,
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let graceful = !std::thread::panicking();
        // A rank that leaves after a failure repeats the failure on every link before it
        // closes: messages on one link arrive in order, so every peer learns the root cause
        // (not merely "this rank closed") even when the news took another path to reach it.
        if let Some(f) = self.mailbox.failure() {
            for p in (0..self.size).filter(|&p| p != self.rank) {
                if self.mailbox.is_closed(p) {
                    continue;
                }
                match &self.transport {
                    Transport::Tcp(t) => t.abort(p, f.culprit, &f.reason),
                    Transport::InProc(t) => t.abort(p, f.culprit, &f.reason),
                }
            }
        }
        match &mut self.transport {
            Transport::Tcp(t) => t.close(graceful),
            Transport::InProc(t) => t.close(graceful),
        }
    }
}

/// How long a set-up error about a peer that went away waits for `symcomm-run` to report that
/// peer (a process that exits is reported within a few milliseconds).
const LAUNCHER_REPORT_GRACE: Duration = Duration::from_millis(200);

/// A set-up failure restated as the failure `symcomm-run` reported first, when this rank's own
/// account is a consequence of it: a timeout, or a peer that the launcher reports failed after
/// that first rank (e.g. the root exited because of it, and this rank only saw the root go). An
/// error about a rank the launcher does not report stands.
fn prefer_launcher_notice(rank: usize, job: u64, e: Error) -> Error {
    let peer = match &e {
        Error::PeerFailed { peer, .. } => Some(*peer),
        Error::Timeout { .. } => None,
        _ => return e,
    };
    let Some(mut reported) = crate::fault::launcher_notices(job) else {
        return e;
    };
    if let Some(p) = peer {
        // The peer may be exiting because of an earlier failure: let the launcher say so.
        let until = Instant::now() + LAUNCHER_REPORT_GRACE;
        while !reported.iter().any(|(r, _)| *r == p) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            reported = crate::fault::launcher_notices(job).unwrap_or_default();
        }
    }
    let Some((first, what)) = reported.first().cloned() else {
        return e;
    };
    match (e, peer) {
        (Error::PeerFailed { step, .. }, Some(p))
            if p != first && reported.iter().any(|(r, _)| *r == p) =>
        {
            Error::PeerFailed {
                rank: Some(rank),
                step,
                peer: first,
                reason: what,
            }
        }
        (Error::Timeout { step, .. }, _) => Error::PeerFailed {
            rank: Some(rank),
            step,
            peer: first,
            reason: what,
        },
        (e, _) => e,
    }
}

/// A registered failure listener ([`Bootstrap::watch_failure`]); unregisters it on drop. It
/// keeps the bootstrap's failure state (not its links) alive, so it may outlive the bootstrap.
pub struct FailureWatch {
    rank: usize,
    mailbox: Arc<Mailbox>,
    id: u64,
}

/// Reports a failure to every rank of a bootstrap that may be gone ([`Bootstrap::failure_reporter`]).
#[derive(Clone)]
pub(crate) struct FailureReporter(std::sync::Weak<Endpoint>);

impl FailureReporter {
    /// Records that `culprit` failed for `reason` and, if that is the bootstrap's first
    /// failure, tells every other rank; nothing once the bootstrap is gone.
    pub(crate) fn report(&self, culprit: usize, reason: String) {
        if let Some(s) = self.0.upgrade() {
            let _ = Bootstrap { s }.record(culprit, reason);
        }
    }
}

impl FailureWatch {
    /// The failure of the watched bootstrap, as the error this rank reports at `step`.
    pub fn failure(&self, step: &str) -> Option<Error> {
        failure_error(self.rank, &self.mailbox, step)
    }
}

impl std::fmt::Debug for FailureWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureWatch")
            .field("rank", &self.rank)
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for FailureWatch {
    fn drop(&mut self) {
        self.mailbox.remove_listener(self.id);
    }
}

/// The error rank `me` reports at `step` for the recorded failure, if any.
fn failure_error(me: usize, mailbox: &Mailbox, step: &str) -> Option<Error> {
    mailbox.failure().map(|f| failure_as_error(me, &f, step))
}

fn failure_as_error(me: usize, f: &Failure, step: &str) -> Error {
    Error::PeerFailed {
        rank: Some(me),
        step: step.into(),
        peer: f.culprit,
        reason: format!("{} (earlier failure)", f.reason),
    }
}

fn check_world(rank: usize, size: usize) -> Result<()> {
    if size == 0 || size > MAX_WORLD_SIZE {
        return Err(Error::InvalidArgument(format!(
            "world size {size} is not in 1..={MAX_WORLD_SIZE}"
        )));
    }
    if rank >= size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} is not below the world size {size}"
        )));
    }
    Ok(())
}

fn check_len(data: &[u8]) -> Result<()> {
    if data.len() > MAX_MESSAGE_BYTES {
        return Err(Error::InvalidArgument(format!(
            "bootstrap message of {} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes",
            data.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
