//! The receiving side of GIN: checks every incoming operation against this rank's own
//! registrations and requirements (never trusting the peer), writes its data and applies its
//! signal in the promised order.
//!
//! Order: operations of one (sender, context) stream carry consecutive sequence numbers (the
//! sender's ring indices). A weak signal is applied as soon as its own operation has landed; a
//! strong one once every operation of its stream up to and including its own has landed. Data
//! of different operations may land out of order (different connections, or the test-only
//! delay), so the landed set is tracked as a watermark (everything below it landed) plus the
//! numbers above it that landed early.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use symcomm_device::gin::SignalOp;

use super::registry::Pinned;
use super::wire::Frame;

/// The landing state of one (sender, context) stream.
#[derive(Default)]
struct Stream {
    /// Every operation below this has landed.
    watermark: u64,
    /// Operations at or above the watermark that landed early.
    early: BTreeSet<u64>,
    /// Strong signals waiting for the watermark to pass them: seq → (op, index, operand).
    waiting: BTreeMap<u64, (SignalOp, u32, u64)>,
    /// Operations admitted (checked, their data on its way) that have not landed yet.
    admitted: BTreeSet<u64>,
}

/// How far ahead of its stream's watermark an operation may be. An honest sender is never
/// this far ahead; the bound keeps a forged stream's bookkeeping small.
pub(crate) const MAX_AHEAD: u64 = 1 << 20;

/// The landing state of one rank.
#[derive(Default)]
pub(crate) struct Landing {
    streams: HashMap<(usize, u32), Stream>,
    /// Landings queued for the GPU to write.
    pub(crate) queued: Queued,
}

/// Batches of landings (data, then the signal updates it lets through) queued for the GPU's
/// front end to write, in order ([`super::state::Shared::land_values`]); each batch ends by
/// writing its number to the landing word.
#[derive(Default)]
pub(crate) struct Queued {
    /// The last batch queued (0: none yet).
    pub(crate) issued: u64,
    /// Signal → the last batch that writes it (a batch that writes a signal again waits for
    /// it first, and then reads the signal's value from memory).
    pub(crate) values: HashMap<u32, u64>,
    /// The windows written by queued batches, held mapped until the batch has run.
    pub(crate) pins: VecDeque<(u64, Pinned)>,
}

impl Landing {
    /// Admits operation `f` of `from`: refused when its number was seen before or is
    /// [`MAX_AHEAD`] or more past the first one that has not landed.
    pub(crate) fn admit(&mut self, from: usize, f: &Frame) -> Result<(), String> {
        let s = self.streams.entry((from, f.context)).or_default();
        if f.seq < s.watermark || s.early.contains(&f.seq) || s.admitted.contains(&f.seq) {
            return Err(format!(
                "operation {} of context {} a second time",
                f.seq, f.context
            ));
        }
        if f.seq - s.watermark >= MAX_AHEAD {
            return Err(format!(
                "operation {} of context {}, {} past the first that has not landed ({})",
                f.seq,
                f.context,
                f.seq - s.watermark,
                s.watermark
            ));
        }
        s.admitted.insert(f.seq);
        Ok(())
    }

    /// Records that operation `f` from `from` has landed; calls `apply` with every signal
    /// update that may now be seen, in the promised order (`strong_as_weak`: the deliberately
    /// broken build, see `Config`).
    pub(crate) fn landed(
        &mut self,
        from: usize,
        f: &Frame,
        strong_as_weak: bool,
        mut apply: impl FnMut((SignalOp, u32, u64)),
    ) {
        let s = self.streams.entry((from, f.context)).or_default();
        s.admitted.remove(&f.seq);
        if f.seq == s.watermark {
            s.watermark += 1;
            while s.early.remove(&s.watermark) {
                s.watermark += 1;
            }
        } else if f.seq > s.watermark {
            s.early.insert(f.seq);
        }
        if f.signal_op != SignalOp::None {
            let action = (f.signal_op, f.signal, f.signal_value);
            if f.strong && !strong_as_weak {
                s.waiting.insert(f.seq, action);
            } else {
                apply(action);
            }
        }
        // Strong signals whose every predecessor (and themselves) landed, in order.
        while let Some(entry) = s.waiting.first_entry() {
            if *entry.key() >= s.watermark {
                break;
            }
            apply(entry.remove());
        }
    }
}

/// The values a batch writes for `actions`, in order: a signal's value before the batch is
/// `now(index)`, read once; a later action on the same signal builds on the value an earlier
/// one in the batch gives it. Actions without an update write nothing.
pub(crate) fn batch_values(
    actions: &[(SignalOp, u32, u64)],
    mut now: impl FnMut(u32) -> u64,
) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::with_capacity(actions.len());
    for &(op, index, operand) in actions {
        if op == SignalOp::None {
            continue;
        }
        let before = match out.iter().rev().find(|w| w.0 == index) {
            Some(&(_, v)) => v,
            None => now(index),
        };
        let next = match op {
            SignalOp::None => continue,
            SignalOp::Inc | SignalOp::Add => before.wrapping_add(operand),
            SignalOp::Set => operand,
        };
        out.push((index, next));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gin::wire::Kind;

    fn op(seq: u64, strong: bool, signal: u32) -> Frame {
        let mut f = Frame::new(Kind::Put);
        f.seq = seq;
        f.strong = strong;
        f.signal_op = SignalOp::Inc;
        f.signal = signal;
        f.signal_value = 1;
        f
    }

    #[test]
    fn a_batch_that_updates_a_signal_twice_builds_on_its_own_first_update() {
        let mut reads = Vec::new();
        let got = batch_values(
            &[
                (SignalOp::Inc, 5, 1),
                (SignalOp::Inc, 5, 1),
                (SignalOp::Set, 6, 10),
                (SignalOp::Add, 6, 3),
                (SignalOp::None, 7, 9),
                (SignalOp::Add, 8, 2),
            ],
            |i| {
                reads.push(i);
                100 + u64::from(i)
            },
        );
        assert_eq!(got, [(5, 106), (5, 107), (6, 10), (6, 13), (8, 110)]);
        // Each signal's value in memory is read once, before its first update.
        assert_eq!(reads, [5, 6, 8]);
    }

    #[test]
    fn strong_signals_wait_for_every_earlier_operation_and_weak_ones_do_not() {
        let mut l = Landing::default();
        let mut seen = Vec::new();
        // Operations 0 and 1 are late; 2 carries a strong signal, 3 a weak one.
        l.landed(5, &op(2, true, 20), false, |a| seen.push(a.1));
        l.landed(5, &op(3, false, 30), false, |a| seen.push(a.1));
        assert_eq!(seen, [30]);
        l.landed(5, &op(1, false, 10), false, |a| seen.push(a.1));
        assert_eq!(seen, [30, 10]);
        // Another sender's stream is independent.
        l.landed(6, &op(0, true, 60), false, |a| seen.push(a.1));
        assert_eq!(seen, [30, 10, 60]);
        l.landed(5, &op(0, false, 0), false, |a| seen.push(a.1));
        assert_eq!(seen, [30, 10, 60, 0, 20]);
        // Numbers seen before, or far ahead, are refused.
        assert!(
            l.admit(5, &op(2, true, 0))
                .unwrap_err()
                .contains("a second time")
        );
        assert!(l.admit(5, &op(4, true, 0)).is_ok());
        assert!(
            l.admit(5, &op(4, true, 0))
                .unwrap_err()
                .contains("a second time")
        );
        assert!(
            l.admit(5, &op(4 + MAX_AHEAD, true, 0))
                .unwrap_err()
                .contains("past the first")
        );
        // The broken build applies strong signals at once.
        let mut b = Landing::default();
        let mut early = Vec::new();
        b.landed(1, &op(1, true, 7), true, |a| early.push(a.1));
        assert_eq!(early, [7]);
    }
}
