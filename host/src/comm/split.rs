//! `Communicator::split`: new communicators from groups of a communicator's ranks (NCCL's
//! `ncclCommSplit`).
//!
//! Every rank of the parent calls it with a color (or none) and a key. The ranks of one color
//! form a child, ranked by key and then by their rank in the parent; a rank without a color
//! takes part and gets no child. A child is a communicator of its own: its own bootstrap (a
//! TCP group whose root is the child's rank 0, listening on the address the parent's links
//! use; its own job id, so its windows' sockets never meet the parent's), its own teams
//! (derived from its ranks' nodes, as at creation), windows, device communicators and
//! failures. The parent stays usable, and either may be dropped first.
//!
//! The steps, all over the parent's bootstrap (runtime operations: they never meet the
//! user's own bootstrap collectives):
//! 1. every rank's request (color, key, and the child settings that creation agrees on) is
//!    gathered; the ranks of one color asking for different settings get, on every rank of
//!    the parent, the same [`Error::Mismatch`];
//! 2. each child's rank 0 binds its root listener, and every root's unique id (or its bind
//!    error) is gathered;
//! 3. each child connects and runs [`Communicator::init`];
//! 4. the parent agrees on the outcome ([`Bootstrap::agree`]): a child that failed anywhere
//!    fails the call on every rank of the parent (the failed ranks with their own error, the
//!    others with [`Error::PeerFailed`] naming the lowest failed rank), as creation does.

use std::net::SocketAddr;

use super::{CommOptions, Communicator};
use crate::bootstrap::{Bootstrap, RootListener, UniqueId};
use crate::{Error, Result};

/// One rank's request to [`Communicator::split`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Request {
    color: Option<u32>,
    key: i32,
    /// The child settings every rank of a color must share.
    lsa_cap: Option<usize>,
    declared: bool,
}

impl Request {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(18);
        b.push(u8::from(self.color.is_some()));
        b.extend_from_slice(&self.color.unwrap_or(0).to_le_bytes());
        b.extend_from_slice(&self.key.to_le_bytes());
        b.extend_from_slice(&(self.lsa_cap.unwrap_or(0) as u64).to_le_bytes());
        b.push(u8::from(self.declared));
        b
    }

    fn decode(b: &[u8]) -> Option<Request> {
        let b: &[u8; 18] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let cap = u64::from_le_bytes(b[9..17].try_into().ok()?);
        Some(Request {
            color: (b[0] == 1).then(|| u32_at(1)),
            key: u32_at(5) as i32,
            lsa_cap: (cap != 0).then_some(cap as usize),
            declared: b[17] == 1,
        })
    }
}

/// The members of `color` in child rank order: by key, then by parent rank.
fn members(requests: &[Request], color: u32) -> Vec<usize> {
    let mut m: Vec<usize> = (0..requests.len())
        .filter(|&r| requests[r].color == Some(color))
        .collect();
    m.sort_by_key(|&r| (requests[r].key, r));
    m
}

/// The first rank of a color whose child settings differ from its lowest rank's, as the
/// error every rank returns.
fn check_groups(requests: &[Request]) -> Result<()> {
    for (r, req) in requests.iter().enumerate() {
        let Some(c) = req.color else { continue };
        let Some(first) = requests.iter().position(|q| q.color == Some(c)) else {
            continue;
        };
        let base = &requests[first];
        let show = |cap: Option<usize>| cap.map_or("unset".into(), |k| k.to_string());
        let differs = if base.lsa_cap != req.lsa_cap {
            Some(("SYMCOMM_LSA_SIZE", show(base.lsa_cap), show(req.lsa_cap)))
        } else if base.declared != req.declared {
            let kind = |d: bool| if d { "declared" } else { "detected" }.to_string();
            Some(("node identity", kind(base.declared), kind(req.declared)))
        } else {
            None
        };
        if let Some((name, value_a, value_b)) = differs {
            return Err(Error::Mismatch {
                what: format!("split: color {c}'s child setting {name}"),
                rank_a: first,
                value_a,
                rank_b: r,
                value_b,
            });
        }
    }
    Ok(())
}

impl Communicator {
    /// Collective: every rank of this communicator calls it, in the same order as its other
    /// collective calls. Returns the communicator of the ranks that passed the same `color`,
    /// ranked by `key` and then by rank here; `None` for a rank that passed no color (it
    /// takes part, and gets no communicator: NCCL's `NCCL_SPLIT_NOCOLOR`). The child has the
    /// options this communicator was created with (device, node identity, LSA cap). Every
    /// rank gets an error where any child cannot be created: see [`split_with`](Self::split_with).
    #[doc(alias = "ncclCommSplit")]
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator>> {
        self.split_with(color, key, self.options.clone())
    }

    /// Collective: [`split`](Self::split) with `options` for the child (unset device: this
    /// communicator's). The ranks of one color must pass the same LSA cap and declare their
    /// nodes alike (or all detect them), which creation agrees on: where they do not, every
    /// rank of this communicator gets the same [`Error::Mismatch`], before anything is
    /// created. A child that fails to come together (a rank dies, a setting of its
    /// environment differs) fails the call on every rank of this communicator.
    #[doc(alias = "ncclCommSplit")]
    pub fn split_with(
        &self,
        color: Option<u32>,
        key: i32,
        mut options: CommOptions,
    ) -> Result<Option<Communicator>> {
        let boot = &self.bootstrap;
        let me = boot.rank();
        let mine = Request {
            color,
            key,
            lsa_cap: options.lsa_cap,
            declared: options.node_id.is_some(),
        };
        let all = boot.runtime_all_gather(&mine.encode())?;
        let mut requests = Vec::with_capacity(all.len());
        for (r, bytes) in all.iter().enumerate() {
            requests.push(Request::decode(bytes).ok_or_else(|| Error::Protocol {
                rank: Some(me),
                step: "split".into(),
                reason: format!("rank {r} sent a malformed split request"),
            })?);
        }
        check_groups(&requests)?;
        let group = color.map(|c| members(&requests, c));
        let child_rank = group.as_ref().and_then(|g| g.iter().position(|&r| r == me));
        // Each child's rank 0 listens where the parent's links reach it.
        let listener = match (&group, child_rank) {
            (Some(g), Some(0)) if g.len() > 1 => {
                Some(RootListener::bind(SocketAddr::new(boot.local_ip(), 0)))
            }
            _ => None,
        };
        let published = match &listener {
            Some(Ok(l)) => format!("id {}", l.unique_id()),
            Some(Err(e)) => format!("failed {e}"),
            None => String::new(),
        };
        let roots = boot.runtime_all_gather(published.as_bytes())?;
        options.device.get_or_insert(self.device);
        let child = match (group, child_rank) {
            (Some(g), Some(k)) => {
                let root = &roots[g[0]];
                connect_child(boot, &g, k, listener, root)
                    .and_then(|b| Communicator::init(b, options))
            }
            _ => Err(Error::Internal("no child".into())),
        };
        let child = match (color, child) {
            (None, _) => None,
            (Some(_), c) => Some(c),
        };
        let failed = child.as_ref().and_then(|c| c.as_ref().err());
        let agreed = boot.agree("split", "split", failed, &[]);
        match child {
            Some(Err(e)) => Err(e),
            Some(Ok(c)) => agreed.map(|()| Some(c)),
            None => agreed.map(|()| None),
        }
    }
}

/// The bootstrap of the child of members `group` (parent ranks, in child rank order) as its
/// rank `k`: served on `listener` by rank 0, joined through rank 0's published `root` (its
/// unique id, or why it has none) by the others.
fn connect_child(
    parent: &Bootstrap,
    group: &[usize],
    k: usize,
    listener: Option<Result<RootListener>>,
    root: &[u8],
) -> Result<Bootstrap> {
    let (size, timeout) = (group.len(), parent.timeout());
    if size == 1 {
        let mut one = Bootstrap::in_process(1, timeout)?;
        return one
            .pop()
            .ok_or_else(|| Error::Internal("no endpoint for a child of one rank".into()));
    }
    if let Some(l) = listener {
        return Bootstrap::serve_tcp(l?, size, timeout);
    }
    let text = String::from_utf8_lossy(root);
    match text.split_once(' ') {
        Some(("id", id)) => Bootstrap::connect_tcp(&UniqueId::parse(id)?, k, size, timeout),
        Some(("failed", why)) => Err(Error::PeerFailed {
            rank: Some(parent.rank()),
            step: "split".into(),
            peer: group[0],
            reason: format!("the child's rank 0 could not listen: {why}"),
        }),
        _ => Err(Error::Protocol {
            rank: Some(parent.rank()),
            step: "split".into(),
            reason: format!("rank {} published no child root", group[0]),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(color: Option<u32>, key: i32) -> Request {
        Request {
            color,
            key,
            lsa_cap: None,
            declared: false,
        }
    }

    #[test]
    fn requests_round_trip_and_members_order_by_key_then_rank() {
        let r = Request {
            color: Some(7),
            key: -3,
            lsa_cap: Some(2),
            declared: true,
        };
        assert_eq!(Request::decode(&r.encode()), Some(r));
        assert_eq!(Request::decode(&req(None, 5).encode()), Some(req(None, 5)));
        assert_eq!(Request::decode(&[1, 2, 3]), None);
        let reqs = [
            req(Some(1), 5),
            req(Some(0), 0),
            req(None, 0),
            req(Some(1), -1),
            req(Some(1), 5),
        ];
        assert_eq!(members(&reqs, 1), vec![3, 0, 4]);
        assert_eq!(members(&reqs, 0), vec![1]);
        assert!(members(&reqs, 9).is_empty());
        assert!(check_groups(&reqs).is_ok());
    }

    #[test]
    fn a_color_asking_for_different_settings_is_a_mismatch() {
        let mut reqs = vec![req(Some(1), 0), req(Some(2), 0), req(Some(1), 0)];
        reqs[2].lsa_cap = Some(2);
        match check_groups(&reqs) {
            Err(Error::Mismatch {
                what,
                rank_a,
                rank_b,
                value_a,
                value_b,
            }) => {
                assert!(
                    what.contains("color 1") && what.contains("SYMCOMM_LSA_SIZE"),
                    "{what}"
                );
                assert_eq!((rank_a, rank_b), (0, 2));
                assert_eq!((value_a.as_str(), value_b.as_str()), ("unset", "2"));
            }
            other => panic!("{other:?}"),
        }
    }
}
