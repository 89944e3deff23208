//! GIN checks on every rank of a job (the `gin_check` binary runs them): puts, inline values,
//! signals (inc / add / set × strong / weak) and counters with every byte checked; a signal
//! ping-pong with an exact check each round; the ordering probe; a peer killed while the others
//! wait; bad operations. Ranks pair up across the job: rank `r` with `(r + n/2) mod n`, which is
//! on another node when the job's nodes hold consecutive ranks.

use std::time::{Duration, Instant};

use symcomm::gin::GinConnection;
use symcomm::launch::{LaunchConfig, Module};
use symcomm::{
    Communicator, DevComm, Device, Error, Requirements, Result, SymmetricMemory, Window,
};
use symcomm_test_kernels::{
    GinBad, GinBarrierRounds, GinOrder, GinPingpong, GinPutAndGo, GinPutSignal, GinReset,
    GinWaitForever, VALUE_XOR,
};

use crate::kernels::PTX;

const TIMEOUT_NS: u64 = 20_000_000_000;
const WINDOW: usize = 1 << 20;
const SIGNALS: u32 = 8;
const COUNTERS: u32 = 2;

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(fail(format!("{what}: got {got:?}, want {want:?}")))
    }
}

/// This rank's partner: `(r + n/2) mod n`.
pub fn partner(comm: &Communicator) -> usize {
    (comm.rank() + comm.size() / 2) % comm.size()
}

/// The byte rank `r` puts at index `i` in round `round`.
pub fn pattern(r: usize, round: usize, i: usize) -> u8 {
    (((r as u64 * 0x9e37_79b1)
        ^ (round as u64 * 0x7f4a_7c15)
        ^ (i as u64).wrapping_mul(0x85eb_ca77))
        >> 7) as u8
}

/// A rank's GIN set-up: device, module, window and device communicator.
/// (Fields drop in order: the device communicator, whose proxy may still be landing data,
/// before the window.)
pub struct Setup {
    /// The device communicator with GIN.
    pub devcomm: DevComm,
    /// The 1 MiB window registered for GIN.
    pub win: Window,
    /// The window's memory.
    pub mem: SymmetricMemory,
    /// The test kernels.
    pub module: Module,
    /// The rank's device (held for the whole check).
    pub dev: Device,
}

/// GIN contexts of [`setup`]'s communicator ([`functional`] spreads its cases over them).
pub const CONTEXTS: u32 = 2;

/// Collective: allocates and registers a 1 MiB window and a device communicator with
/// [`CONTEXTS`] GIN contexts, 8 signals, 2 counters, one world and one rail GIN barrier and
/// one LSA barrier, connecting every rank (`rail`: only the rail team).
pub fn setup(comm: &Communicator, rail: bool) -> Result<Setup> {
    let dev = Device::for_rank(comm)?;
    let module = Module::load(PTX)?;
    let mem = SymmetricMemory::alloc(comm, WINDOW)?;
    let win = comm.register_window(&mem)?;
    let devcomm = DevComm::create(
        comm,
        Requirements::new()
            .lsa_barriers(1)
            .world_gin_barriers(1)
            .rail_gin_barriers(1)
            .gin_contexts(CONTEXTS)
            .gin_signals(SIGNALS)
            .gin_counters(COUNTERS)
            .gin_connection(if rail {
                GinConnection::Rail
            } else {
                GinConnection::Full
            }),
    )?;
    Ok(Setup {
        dev,
        module,
        mem,
        win,
        devcomm,
    })
}

impl Setup {
    /// Collective: zeroes the signals and counters on every rank, then a host barrier.
    fn reset(&self, comm: &Communicator) -> Result<()> {
        let k = self.module.kernel::<GinReset>()?;
        let stream = self.dev.stream()?;
        // SAFETY: the communicator has SIGNALS signals and COUNTERS counters; one thread.
        unsafe {
            k.launch(
                LaunchConfig::linear(1, 1),
                &stream,
                (self.devcomm.raw(), SIGNALS, COUNTERS),
            )?
        };
        stream.synchronize()?;
        comm.bootstrap().barrier()
    }

    fn check_failure(&self) -> Result<()> {
        match self.devcomm.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Puts, values, signals and counters: 3 actions × strong/weak × puts of no bytes (still one
/// operation, carrying its signal), 60 bytes (on GPUs
/// landed by stream memory operations, the value after it at an offset of 4 mod 8), 61 bytes
/// (not a multiple of 4: copied), 1000 bytes (lane 0) and 100 000 bytes (lane 1), spread over
/// the contexts, every byte of the destination checked, and the bytes around it.
pub fn functional(comm: &Communicator, s: &Setup) -> Result<String> {
    let (me, peer) = (comm.rank(), partner(comm));
    let stream = s.dev.stream()?;
    let k = s.module.kernel::<GinPutSignal>()?;
    let out_buf = s.dev.alloc(6 * 8)?;
    let mut cases = 0;
    for (round, bytes) in [0usize, 60, 61, 1000, 100_000].into_iter().enumerate() {
        for kind in 0..3u32 {
            for strong in [1u32, 0] {
                let round = round * 6 + kind as usize * 2 + strong as usize;
                s.reset(comm)?;
                let (src_off, dst_off) = (0usize, 256 * 1024);
                let src: Vec<u8> = (0..bytes).map(|i| pattern(me, round, i)).collect();
                stream.copy_to_device(&s.mem, src_off, &src)?;
                stream.fill_bytes(&s.mem, 0xee)?;
                stream.copy_to_device(&s.mem, src_off, &src)?;
                stream.synchronize()?;
                comm.bootstrap().barrier()?;
                let value = 0x1234_5678_9abc_def0u64 ^ ((round as u64) << 8) ^ me as u64;
                let their_value = 0x1234_5678_9abc_def0u64 ^ ((round as u64) << 8) ^ peer as u64;
                let args = (
                    s.devcomm.raw(),
                    s.win.handle(),
                    peer as u32,
                    bytes as u64,
                    src_off as u64,
                    dst_off as u64,
                    kind,
                    strong,
                    value,
                    their_value,
                    round as u32 % CONTEXTS,
                    TIMEOUT_NS,
                    out_buf.as_mut_ptr::<u64>(),
                );
                // SAFETY: the kernel's contract: registered window of 1 MiB holding both
                // ranges, 1 context, 8 signals, 2 counters; the partner launches it too.
                unsafe { k.launch(LaunchConfig::linear(1, 64), &stream, args)? };
                stream.synchronize()?;
                s.check_failure()?;
                let mut out = [0u64; 6];
                stream.copy_to_host(&out_buf, 0, &mut out)?;
                let want0 = if kind == 0 { 1 } else { their_value };
                let what = format!("kind {kind} strong {strong} bytes {bytes}");
                expect(
                    &format!("{what}: code, signals, counter, early"),
                    out,
                    [0, want0, 7, 1, 1, 0],
                )?;
                let mut got = vec![0u8; bytes + 16];
                stream.copy_to_host(&s.mem, dst_off - 8, &mut got)?;
                let wrong = (0..bytes)
                    .filter(|&i| got[8 + i] != pattern(peer, round, i))
                    .count();
                expect(&format!("{what}: wrong bytes"), wrong, 0)?;
                expect(&format!("{what}: guard before"), &got[..8], &[0xee; 8][..])?;
                let v = u64::from_le_bytes(got[8 + bytes..16 + bytes].try_into().unwrap());
                expect(&format!("{what}: put_value"), v, their_value ^ VALUE_XOR)?;
                let mut after = [0u8; 8];
                stream.copy_to_host(&s.mem, dst_off + bytes + 8, &mut after)?;
                expect(&format!("{what}: guard after"), after, [0xee; 8])?;
                cases += 1;
            }
        }
    }
    comm.bootstrap().barrier()?;
    Ok(format!(
        "{cases} put/put_value/signal cases (inc, add, set × strong, weak × 0, 60, 61, 1000 \
         and 100000 bytes, {CONTEXTS} contexts) to rank {peer}, every byte checked"
    ))
}

/// `rounds` signal round trips with the partner, an exact check each round.
pub fn pingpong(comm: &Communicator, s: &Setup, rounds: u32) -> Result<String> {
    let (me, peer) = (comm.rank(), partner(comm));
    s.reset(comm)?;
    let stream = s.dev.stream()?;
    let k = s.module.kernel::<GinPingpong>()?;
    let out_buf = s.dev.alloc(3 * 8)?;
    let t0 = Instant::now();
    let args = (
        s.devcomm.raw(),
        peer as u32,
        5u32,
        rounds,
        u32::from(me < peer),
        TIMEOUT_NS,
        out_buf.as_mut_ptr::<u64>(),
    );
    // SAFETY: 8 signals, reset on both ranks; the partner runs the other side.
    unsafe { k.launch(LaunchConfig::linear(1, 1), &stream, args)? };
    stream.synchronize()?;
    let secs = t0.elapsed().as_secs_f64();
    s.check_failure()?;
    let mut out = [0u64; 3];
    stream.copy_to_host(&out_buf, 0, &mut out)?;
    expect(
        "ping-pong: code, wrong rounds, final value",
        out,
        [0, 0, u64::from(rounds)],
    )?;
    comm.bootstrap().barrier()?;
    Ok(format!(
        "{rounds} signal round trips with rank {peer}, each value exact ({:.1} µs per round trip)",
        secs * 1e6 / f64::from(rounds.max(1))
    ))
}

/// A put from a window deregistered as soon as its kernel has ended. Collective. On a fresh
/// window of `2 × bytes`, the lower rank of each pair puts its first half into the partner's
/// second half ([`GinPutAndGo`]: no wait for the local completion), synchronises its stream
/// and deregisters the window at once, while the proxy may not have picked the put up yet or
/// may still be sending it. The deregistration must wait for that (never refuse the put or
/// unmap its source under the proxy): the partner receives every byte, and no rank's GIN
/// fails. The partner waits for the signal on the host, not in a kernel: ranks that are
/// threads share the GPU's context, and on an H100 the landing copy of the put did not
/// finish until a partner's kernel waiting for it had timed out, while the sender was
/// deregistering (the cause is not established). Returns the rank's line.
pub fn put_then_deregister(comm: &Communicator, s: &Setup, bytes: usize) -> Result<String> {
    let (me, peer) = (comm.rank(), partner(comm));
    s.reset(comm)?;
    let mem = SymmetricMemory::alloc(comm, 2 * bytes)?;
    let registered = comm.register_window(&mem)?;
    let handle = registered.handle();
    let mut win = Some(registered);
    let stream = s.dev.stream()?;
    let src: Vec<u8> = (0..bytes).map(|i| pattern(me, 99, i)).collect();
    stream.fill_bytes(&mem, 0xee)?;
    stream.copy_to_device(&mem, 0, &src)?;
    stream.synchronize()?;
    comm.bootstrap().barrier()?;
    let line = if me < peer {
        let out_buf = s.dev.alloc(8)?;
        let args = (
            s.devcomm.raw(),
            handle,
            peer as u32,
            bytes as u64,
            0u64,
            bytes as u64,
            TIMEOUT_NS,
            out_buf.as_mut_ptr::<u64>(),
        );
        let k = s.module.kernel::<GinPutAndGo>()?;
        // SAFETY: the window holds both halves on both ranks; the partner receives.
        unsafe { k.launch(LaunchConfig::linear(1, 1), &stream, args)? };
        stream.synchronize()?;
        let t0 = Instant::now();
        win.take().map_or(Ok(()), Window::deregister)?;
        let took = t0.elapsed();
        let mut code = [0u64; 1];
        stream.copy_to_host(&out_buf, 0, &mut code)?;
        expect("put_then_deregister: kernel code", code[0], 0)?;
        format!(
            "a {} KiB put from a window deregistered as soon as its kernel ended: the \
             deregistration waited {:.2} ms",
            bytes >> 10,
            took.as_secs_f64() * 1e3
        )
    } else {
        let deadline = Instant::now() + Duration::from_nanos(TIMEOUT_NS);
        while s.devcomm.gin_signal(0).unwrap_or(0) < 1 {
            s.check_failure()?;
            if Instant::now() > deadline {
                return Err(Error::InvalidArgument(format!(
                    "put_then_deregister: no signal from rank {peer} in {TIMEOUT_NS} ns"
                )));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut got = vec![0u8; bytes];
        stream.copy_to_host(&mem, bytes, &mut got)?;
        let wrong = (0..bytes)
            .filter(|&i| got[i] != pattern(peer, 99, i))
            .count();
        expect("put_then_deregister: wrong bytes", wrong, 0)?;
        win.take().map_or(Ok(()), Window::deregister)?;
        format!(
            "all {} KiB of a put from a window its sender deregistered at once arrived",
            bytes >> 10
        )
    };
    comm.bootstrap().barrier()?;
    s.check_failure()?;
    Ok(line)
}

/// The ordering probe with the partner (the lower rank sends): how many of `rounds` rounds saw
/// the signal before the data.
pub fn ordering(comm: &Communicator, s: &Setup, strong: bool, rounds: u32) -> Result<u64> {
    let (me, peer) = (comm.rank(), partner(comm));
    s.reset(comm)?;
    let stream = s.dev.stream()?;
    stream.fill_bytes(&s.mem, 0)?;
    stream.synchronize()?;
    comm.bootstrap().barrier()?;
    let k = s.module.kernel::<GinOrder>()?;
    let out_buf = s.dev.alloc(2 * 8)?;
    let n = 16 * 1024u64; // 64 KiB: a lane-1 put
    let args = (
        s.devcomm.raw(),
        s.win.handle(),
        peer as u32,
        n,
        0u64,
        512 * 1024u64,
        rounds,
        u32::from(strong),
        u32::from(me > peer),
        TIMEOUT_NS,
        out_buf.as_mut_ptr::<u64>(),
    );
    // SAFETY: the window holds both 64 KiB ranges; 8 signals, 2 counters, reset; the partner
    // runs the other role.
    unsafe { k.launch(LaunchConfig::linear(1, 128), &stream, args)? };
    stream.synchronize()?;
    s.check_failure()?;
    let mut out = [0u64; 2];
    stream.copy_to_host(&out_buf, 0, &mut out)?;
    expect("ordering probe: code", out[0], 0)?;
    comm.bootstrap().barrier()?;
    Ok(out[1])
}

/// Waits on a signal that never comes until the abort flag stops the wait (a peer died):
/// returns how long that took and the device communicator's failure.
pub fn wait_for_death(s: &Setup) -> Result<(Duration, String)> {
    let stream = s.dev.stream()?;
    let k = s.module.kernel::<GinWaitForever>()?;
    let out_buf = s.dev.alloc(8)?;
    let t0 = Instant::now();
    // SAFETY: signal 6 < 8; one thread.
    unsafe {
        k.launch(
            LaunchConfig::linear(1, 1),
            &stream,
            (s.devcomm.raw(), 6u32, 1u64, out_buf.as_mut_ptr::<u64>()),
        )?
    };
    stream.synchronize()?;
    let took = t0.elapsed();
    let mut out = [0u64; 1];
    stream.copy_to_host(&out_buf, 0, &mut out)?;
    expect("wait after a peer died: code (2 = aborted)", out[0], 2)?;
    let why = s
        .devcomm
        .failure()
        .map(|e| e.to_string())
        .unwrap_or_else(|| "no failure recorded".into());
    Ok((took, why))
}

/// A put reaching past the end of the window: this rank's proxy refuses it, the kernel's wait
/// is aborted and the failure names the range.
pub fn put_beyond_window(comm: &Communicator, s: &Setup) -> Result<String> {
    let stream = s.dev.stream()?;
    let k = s.module.kernel::<GinBad>()?;
    let out_buf = s.dev.alloc(8)?;
    let args = (
        s.devcomm.raw(),
        s.win.handle(),
        0u32,
        partner(comm) as u32,
        0u32,
        (WINDOW - 100) as u64,
        200u64,
        TIMEOUT_NS,
        out_buf.as_mut_ptr::<u64>(),
    );
    // SAFETY: the range is refused by the proxy before anything is read.
    unsafe { k.launch(LaunchConfig::linear(1, 1), &stream, args)? };
    stream.synchronize()?;
    let mut out = [0u64; 1];
    stream.copy_to_host(&out_buf, 0, &mut out)?;
    expect("bad put: wait code (2 = aborted)", out[0], 2)?;
    let why = s
        .devcomm
        .failure()
        .map(|e| e.to_string())
        .ok_or_else(|| fail("bad put: no failure recorded".into()))?;
    if !why.contains("a put of 200 bytes from window 1 at offset 1048476, beyond its 1048576 bytes")
    {
        return Err(fail(format!("bad put: unexpected failure: {why}")));
    }
    Ok(why)
}

/// A device-checked bad operation (`what`: 1 signal index, 2 peer, 3 counter index): the
/// launch must fail with `message` (emulator: the kernel thread's panic).
pub fn device_check(s: &Setup, what: u32, index: u32, message: &str) -> Result<()> {
    let stream = s.dev.stream()?;
    let k = s.module.kernel::<GinBad>()?;
    let out_buf = s.dev.alloc(8)?;
    let args = (
        s.devcomm.raw(),
        s.win.handle(),
        what,
        0u32,
        index,
        0u64,
        8u64,
        1_000_000_000u64,
        out_buf.as_mut_ptr::<u64>(),
    );
    // SAFETY: the bad index is caught on the device before anything is posted.
    let r = unsafe { k.launch(LaunchConfig::linear(1, 1), &stream, args) }
        .and_then(|()| stream.synchronize());
    match r {
        Err(e) if e.to_string().contains(message) => Ok(()),
        Err(e) => Err(fail(format!("bad op {what}: launch failed otherwise: {e}"))),
        Ok(()) => Err(fail(format!("bad op {what}: the launch succeeded"))),
    }
}

/// `rounds` rounds of barrier `kind` (0 world GIN, 1 rail GIN, 2 hybrid), each publishing data
/// before and checking it after the barrier; returns µs per round.
pub fn barriers(comm: &Communicator, s: &Setup, kind: u32, rounds: u32) -> Result<f64> {
    let stream = s.dev.stream()?;
    stream.fill_bytes(&s.win, 0)?;
    stream.synchronize()?;
    comm.bootstrap().barrier()?;
    let k = s.module.kernel::<GinBarrierRounds>()?;
    // One thread under the emulator (its block barriers are OS-thread rendezvous), a warp on
    // GPUs.
    let threads = if s.dev.is_emulated() { 1 } else { 32 };
    let out_buf = s.dev.alloc(3 * 8)?;
    let t0 = Instant::now();
    let args = (
        s.devcomm.raw(),
        s.win.handle(),
        kind,
        rounds,
        TIMEOUT_NS,
        out_buf.as_mut_ptr::<u64>(),
    );
    // SAFETY: the communicator has the barriers; the window holds 2 × n u64; every rank runs
    // the same kind and rounds.
    unsafe { k.launch(LaunchConfig::linear(1, threads), &stream, args)? };
    stream.synchronize()?;
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1));
    s.check_failure()?;
    let mut out = [0u64; 3];
    stream.copy_to_host(&out_buf, 0, &mut out)?;
    expect(
        &format!("barrier kind {kind}: code, wrong slots, rounds"),
        out,
        [0, 0, u64::from(rounds)],
    )?;
    comm.bootstrap().barrier()?;
    Ok(us)
}
