//! How the TCP transport words its errors: protocol violations and I/O failures labelled with
//! the rank, and lists of ranks for timeouts. Used by every other file of [`super`].

use std::io;
use std::net::{SocketAddr, TcpListener};

use crate::{Error, Result};

pub(crate) fn protocol(rank: usize, step: &str, reason: String) -> Error {
    Error::Protocol {
        rank: Some(rank),
        step: step.into(),
        reason,
    }
}

pub(crate) fn io_error(rank: usize, what: &str, source: io::Error) -> Error {
    Error::Io {
        what: format!("rank {rank}: {what}"),
        source,
    }
}

pub(crate) fn local_addr(l: &TcpListener, what: &str) -> Result<SocketAddr> {
    l.local_addr().map_err(|source| Error::Io {
        what: what.into(),
        source,
    })
}

/// `rank 3`, `ranks 1, 2, 5` (at most 16 listed).
pub(crate) fn rank_list(ranks: &[usize]) -> String {
    let mut s: Vec<String> = ranks.iter().take(16).map(|r| r.to_string()).collect();
    if ranks.len() > 16 {
        s.push(format!("and {} more", ranks.len() - 16));
    }
    let plural = if ranks.len() == 1 { "" } else { "s" };
    format!("rank{plural} {}", s.join(", "))
}
