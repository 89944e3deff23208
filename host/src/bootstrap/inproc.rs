//! The in-process transport: ranks are threads of one process (one process driving several
//! GPUs), and sending a message is pushing it into the receiver's [`Mailbox`].
//!
//! The semantics are those of the TCP transport, so code tested one way behaves the same the
//! other way: per-peer FIFO order, bounded queues, deadlines, and peer death (a rank whose
//! [`Bootstrap`](super::Bootstrap) is dropped while its thread panics is reported as
//! `panicked`; one dropped normally as having closed its communicator).

use std::sync::Arc;
use std::time::Instant;

use super::mailbox::{Closed, DeliverError, Failure, Incoming, Mailbox};
use super::tcp::SendError;

/// Every rank's mailbox, shared by all ranks of the group.
pub(crate) struct InProcLinks {
    rank: usize,
    boxes: Arc<Vec<Arc<Mailbox>>>,
}

impl InProcLinks {
    /// Rank `rank`'s links in the group whose mailboxes are `boxes` (index = rank).
    pub fn new(rank: usize, boxes: Arc<Vec<Arc<Mailbox>>>) -> InProcLinks {
        InProcLinks { rank, boxes }
    }

    /// Delivers `msg` to `peer`, waiting until `deadline` for room in its queue.
    pub fn send(
        &self,
        peer: usize,
        msg: Incoming,
        deadline: Instant,
    ) -> std::result::Result<(), SendError> {
        match self.boxes[peer].deliver(self.rank, msg, Some(deadline)) {
            Ok(()) => Ok(()),
            Err(DeliverError::TimedOut) => Err(SendError::TimedOut),
            Err(DeliverError::ShutDown) => Err(SendError::Closed(Closed::Left.reason())),
        }
    }

    /// Tells `peer` that this rank gives up because of `culprit`.
    pub fn abort(&self, peer: usize, culprit: usize, reason: &str) {
        self.boxes[peer].abort_from(
            self.rank,
            Failure {
                culprit,
                reason: format!("{reason} (reported by rank {})", self.rank),
            },
        );
    }

    /// Marks this rank as gone in every other rank's mailbox.
    pub fn close(&self, graceful: bool) {
        self.boxes[self.rank].shut_down();
        let how = if graceful {
            Closed::Left
        } else {
            Closed::Died("panicked".into())
        };
        for (peer, b) in self.boxes.iter().enumerate() {
            if peer != self.rank {
                b.close(self.rank, how.clone());
            }
        }
    }
}
