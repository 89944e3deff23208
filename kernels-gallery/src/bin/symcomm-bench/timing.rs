//! Timing one op on this rank ([`Clock::median_us`]): `--iters` ops captured into a graph,
//! replayed back to back with an event between replays (the default), or the same rounds
//! launched op by op (`--eager`). Each gives the median round time per op. The same code
//! runs on the CPU emulator, where a graph replay runs the captured ops again, synchronously,
//! and events hold the host time.

use symcomm::{Communicator, Result, Stream};

use crate::opts::Opts;

/// What timing needs of a rank: its communicator (for the barriers between phases), its
/// stream and the counts of the command line.
pub struct Clock<'a> {
    pub comm: &'a Communicator,
    pub stream: &'a Stream,
    pub opts: &'a Opts,
}

impl Clock<'_> {
    /// The median time of one `op` on this rank, in µs (collective: every rank times the
    /// same op).
    pub fn median_us(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        if self.opts.eager {
            self.eager(op)
        } else {
            self.graph(op)
        }
    }

    /// Captures `iters` ops into a graph, replays it `warmup` times, then [`Clock::rounds`]
    /// of one replay each.
    fn graph(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        let s = self.stream;
        let graph = s.capture(|_| (0..self.opts.iters).try_for_each(|_| op()))?;
        graph.upload()?;
        self.comm.bootstrap().barrier()?;
        for _ in 0..self.opts.warmup {
            graph.launch()?;
        }
        s.synchronize()?;
        self.comm.bootstrap().barrier()?;
        self.rounds(|| graph.launch())
    }

    /// The median times of one `a` and one `b` in µs, their graphs' replays interleaved: each
    /// captured as [`Clock::median_us`] does, both warmed up, then `replays` rounds of a
    /// replay of `a` and a replay of `b`, an event between any two replays.
    pub fn paired_us(
        &self,
        a: impl Fn() -> Result<()>,
        b: impl Fn() -> Result<()>,
    ) -> Result<(f64, f64)> {
        let s = self.stream;
        let ga = s.capture(|_| (0..self.opts.iters).try_for_each(|_| a()))?;
        let gb = s.capture(|_| (0..self.opts.iters).try_for_each(|_| b()))?;
        ga.upload()?;
        gb.upload()?;
        self.comm.bootstrap().barrier()?;
        for _ in 0..self.opts.warmup {
            ga.launch()?;
            gb.launch()?;
        }
        s.synchronize()?;
        self.comm.bootstrap().barrier()?;
        let mut events = vec![s.record()?];
        for _ in 0..self.opts.replays {
            ga.launch()?;
            events.push(s.record()?);
            gb.launch()?;
            events.push(s.record()?);
        }
        s.synchronize()?;
        let mut ta = Vec::new();
        let mut tb = Vec::new();
        for (k, w) in events.windows(2).enumerate() {
            let ms = w[0].elapsed_ms(&w[1])?;
            if k % 2 == 0 { &mut ta } else { &mut tb }.push(ms);
        }
        let median = |mut v: Vec<f32>| {
            v.sort_by(f32::total_cmp);
            f64::from(v[v.len() / 2]) * 1000.0 / f64::from(self.opts.iters)
        };
        Ok((median(ta), median(tb)))
    }

    /// `--eager`: `warmup` rounds, a barrier, then [`Clock::rounds`] of `iters` ops launched
    /// one by one on the stream.
    fn eager(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        let round = || (0..self.opts.iters).try_for_each(|_| op());
        for _ in 0..self.opts.warmup {
            round()?;
        }
        self.stream.synchronize()?;
        self.comm.bootstrap().barrier()?;
        self.rounds(round)
    }

    /// `replays` rounds of `round` back to back on the stream, an event between rounds; the
    /// median round time / `iters`, in µs.
    fn rounds(&self, round: impl Fn() -> Result<()>) -> Result<f64> {
        let s = self.stream;
        let mut events = vec![s.record()?];
        for _ in 0..self.opts.replays {
            round()?;
            events.push(s.record()?);
        }
        s.synchronize()?;
        let mut ms = events
            .windows(2)
            .map(|w| w[0].elapsed_ms(&w[1]))
            .collect::<Result<Vec<f32>>>()?;
        ms.sort_by(f32::total_cmp);
        Ok(f64::from(ms[ms.len() / 2]) * 1000.0 / f64::from(self.opts.iters))
    }
}
