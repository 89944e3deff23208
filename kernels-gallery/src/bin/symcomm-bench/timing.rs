//! Timing one op on this rank ([`Clock::median_us`]): `--iters` ops captured into a CUDA
//! graph, replayed back to back with an event between replays (the default); the same rounds
//! launched op by op (`--eager`); or, on the CPU emulator (no stream, no graphs), direct
//! synchronous launches on the host clock. Each gives the median round time per op.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaStream, sys};
use symcomm::{Communicator, Result};

use crate::error::{cu, fail};
use crate::opts::Opts;

/// What timing needs of a rank: its communicator (for the barriers between phases), its
/// stream and context (`None` on the CPU emulator) and the counts of the command line.
pub struct Clock<'a> {
    pub comm: &'a Communicator,
    pub gpu: Option<Gpu<'a>>,
    pub opts: &'a Opts,
}

/// A rank's stream, and the context its events come from.
#[derive(Clone, Copy)]
pub struct Gpu<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub ctx: &'a Arc<CudaContext>,
}

impl Clock<'_> {
    /// The median time of one `op` on this rank, in µs (collective: every rank times the
    /// same op).
    pub fn median_us(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        match self.gpu {
            None => self.direct(op),
            Some(gpu) if self.opts.eager => self.eager(gpu, op),
            Some(gpu) => self.graph(gpu, op),
        }
    }

    /// Captures `iters` ops into a graph, replays it `warmup` times, then [`Clock::rounds`]
    /// of one replay each.
    fn graph(&self, gpu: Gpu<'_>, op: impl Fn() -> Result<()>) -> Result<f64> {
        let s = gpu.stream;
        s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cu("cuStreamBeginCapture"))?;
        // Stop at the first failing op, but end the capture either way.
        let captured = (0..self.opts.iters).try_for_each(|_| op());
        let graph = s
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(cu("cuStreamEndCapture"))?;
        captured?;
        let graph = graph.ok_or_else(|| fail("capture produced no graph"))?;
        graph.upload().map_err(cu("cuGraphUpload"))?;
        self.comm.bootstrap().barrier()?;
        for _ in 0..self.opts.warmup {
            graph.launch().map_err(cu("cuGraphLaunch"))?;
        }
        s.synchronize().map_err(cu("cuStreamSynchronize"))?;
        self.comm.bootstrap().barrier()?;
        self.rounds(gpu, || graph.launch().map_err(cu("cuGraphLaunch")))
    }

    /// `--eager`: `warmup` rounds, a barrier, then [`Clock::rounds`] of `iters` ops launched
    /// one by one on the stream.
    fn eager(&self, gpu: Gpu<'_>, op: impl Fn() -> Result<()>) -> Result<f64> {
        let round = || (0..self.opts.iters).try_for_each(|_| op());
        for _ in 0..self.opts.warmup {
            round()?;
        }
        gpu.stream
            .synchronize()
            .map_err(cu("cuStreamSynchronize"))?;
        self.comm.bootstrap().barrier()?;
        self.rounds(gpu, round)
    }

    /// `replays` rounds of `round` back to back on `s`, an event between rounds; the median
    /// round time / `iters`, in µs.
    fn rounds(&self, gpu: Gpu<'_>, round: impl Fn() -> Result<()>) -> Result<f64> {
        let s = gpu.stream;
        let events = (0..=self.opts.replays)
            .map(|_| {
                gpu.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(cu("cuEventCreate"))
            })
            .collect::<Result<Vec<_>>>()?;
        events[0].record(s).map_err(cu("cuEventRecord"))?;
        for e in &events[1..] {
            round()?;
            e.record(s).map_err(cu("cuEventRecord"))?;
        }
        s.synchronize().map_err(cu("cuStreamSynchronize"))?;
        let mut ms = events
            .windows(2)
            .map(|w| w[0].elapsed_ms(&w[1]).map_err(cu("cuEventElapsedTime")))
            .collect::<Result<Vec<f32>>>()?;
        ms.sort_by(f32::total_cmp);
        Ok(f64::from(ms[ms.len() / 2]) * 1000.0 / f64::from(self.opts.iters))
    }

    /// The CPU emulator's stand-in for [`Clock::graph`]: `warmup` rounds, then `replays`
    /// rounds of `iters` direct (synchronous) launches timed on the host clock, each round
    /// after a bootstrap barrier; the median round time / `iters`, in µs.
    fn direct(&self, op: impl Fn() -> Result<()>) -> Result<f64> {
        let iters = self.opts.iters;
        for _ in 0..self.opts.warmup {
            self.comm.bootstrap().barrier()?;
            (0..iters).try_for_each(|_| op())?;
        }
        let mut us = Vec::new();
        for _ in 0..self.opts.replays {
            self.comm.bootstrap().barrier()?;
            let t0 = Instant::now();
            (0..iters).try_for_each(|_| op())?;
            us.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(iters));
        }
        us.sort_by(f64::total_cmp);
        Ok(us[us.len() / 2])
    }
}
