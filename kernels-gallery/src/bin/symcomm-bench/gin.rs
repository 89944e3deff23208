//! `symcomm-bench --coll gin [--threads N] [--sizes LIST] [--iters K] [--rounds R]`: GIN
//! between two ranks on two nodes (threads of this process that declare nodes `node0` and
//! `node1`, or the processes of a launcher whose ranks are on two nodes).
//!
//! - **ping-pong**: `R` round trips of an 8-byte `put_value` carrying a strong signal
//!   increment, timed on the GPU clock, median of `K` runs; next to it, `R` round trips of
//!   8 bytes over a raw TCP connection between the same two endpoints (`TCP_NODELAY`, as the
//!   transport's), median of `K`.
//! - **put bandwidth** by size (default 8 B … 256 MiB): `count` puts of `size` bytes, the last
//!   carrying a strong signal, timed from the first post until the receiver's acknowledgement
//!   of that signal (so to remote landing), median of `K`; next to it, the same bytes written
//!   to the raw TCP connection in writes of `size` and acknowledged by one byte. The
//!   destination is checked byte for byte after every size.
//!
//! Windows are GPU memory on a GPU and host memory under the emulator (`SYMCOMM_BACKEND=emu`).
//! With host windows the raw stream runs between the windows themselves (the same source and
//! destination bytes as the puts: the emulator's shared memory, which sockets copy more
//! slowly than heap memory), and a last column gives the raw stream between heap buffers;
//! with GPU windows it runs between heap buffers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::{all_passed, run_ranks};
use symcomm::{
    CommOptions, Communicator, DevComm, Device, Error, Requirements, Result, SymmetricMemory,
};
use symcomm_gallery::kernels;
use symcomm_gallery_kernels::gin_bench::{GinBenchPingpong, GinBenchStream};

const TIMEOUT_NS: u64 = 60_000_000_000;

/// The command line of the GIN benchmark.
#[derive(Debug, Clone)]
pub struct GinOpts {
    threads: Option<usize>,
    sizes: Vec<usize>,
    iters: usize,
    rounds: u32,
}

/// Parses the GIN benchmark's arguments (`--coll gin` already seen).
pub fn parse(args: &[String]) -> std::result::Result<GinOpts, String> {
    let mut o = GinOpts {
        threads: None,
        sizes: vec![
            8,
            64,
            512,
            4 << 10,
            32 << 10,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
            64 << 20,
            256 << 20,
        ],
        iters: 5,
        rounds: 2000,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--coll" => {
                value()?;
            }
            "--threads" => o.threads = Some(value()?.parse().map_err(|_| "--threads: a number")?),
            "--iters" => o.iters = value()?.parse().map_err(|_| "--iters: a number")?,
            "--rounds" => o.rounds = value()?.parse().map_err(|_| "--rounds: a number")?,
            "--sizes" => {
                o.sizes = value()?
                    .split(',')
                    .map(|s| crate::opts::parse_bytes(s).ok_or(format!("--sizes: bad size {s}")))
                    .collect::<std::result::Result<_, _>>()?
            }
            _ => return Err(format!("--coll gin: unknown argument {a}")),
        }
    }
    if o.iters == 0 || o.sizes.is_empty() || o.sizes.contains(&0) {
        return Err("--coll gin: --iters and every size must be at least 1".into());
    }
    Ok(o)
}

/// Runs the GIN benchmark; true when every rank passed.
pub fn run(o: &GinOpts) -> bool {
    let results = match o.threads {
        None => run_ranks(None, |comm| rank(&comm, o)),
        Some(n) => {
            let one = std::env::var("SYMCOMM_DEVICE")
                .ok()
                .and_then(|d| d.parse().ok());
            let comms = Communicator::init_threads_with(n, Duration::from_secs(120), |r| {
                CommOptions::new()
                    .device(one.unwrap_or(r))
                    .node_id(format!("node{r}"))
            });
            match comms {
                Err(e) => vec![(0, Err(e))],
                Ok(comms) => std::thread::scope(|s| {
                    let hs: Vec<_> = comms
                        .into_iter()
                        .map(|c| s.spawn(move || (c.rank(), rank(&c, o))))
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect()
                }),
            }
        }
    };
    all_passed(
        results,
        |r, lines: Vec<String>| {
            if r == 0 {
                for l in lines {
                    println!("{l}");
                }
            }
            true
        },
        |r, e| eprintln!("symcomm-bench: rank {r} FAILED: {e}"),
    )
}

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The raw TCP connection between the two ranks (rank 0 dials rank 1).
fn raw_tcp(comm: &Communicator) -> Result<TcpStream> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    let me = comm.rank();
    let listener = TcpListener::bind(SocketAddr::new(comm.bootstrap().local_ip(), 0))
        .map_err(io("binding the raw TCP listener"))?;
    let addr = listener.local_addr().map_err(io("raw TCP address"))?;
    let all = comm.bootstrap().all_gather(addr.to_string().as_bytes())?;
    let st = if me == 0 {
        let peer: SocketAddr = String::from_utf8_lossy(&all[1])
            .parse()
            .map_err(|_| fail("raw TCP: bad peer address".into()))?;
        TcpStream::connect(peer).map_err(io("raw TCP connect"))?
    } else {
        listener.accept().map_err(io("raw TCP accept"))?.0
    };
    st.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    comm.bootstrap().barrier()?;
    Ok(st)
}

/// `rounds` 8-byte round trips over `st`; µs per round trip.
fn tcp_pingpong(st: &mut TcpStream, me: usize, rounds: u32) -> Result<f64> {
    let io = |source| Error::Io {
        what: "raw TCP ping-pong".into(),
        source,
    };
    let mut b = [0u8; 8];
    let t0 = Instant::now();
    for r in 0..u64::from(rounds) {
        if me == 0 {
            st.write_all(&r.to_le_bytes()).map_err(io)?;
            st.read_exact(&mut b).map_err(io)?;
        } else {
            st.read_exact(&mut b).map_err(io)?;
            st.write_all(&b).map_err(io)?;
        }
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds.max(1)))
}

/// `count` writes of `size` bytes from rank 0 to rank 1 and a one-byte acknowledgement;
/// seconds on rank 0.
fn tcp_stream(
    st: &mut TcpStream,
    me: usize,
    size: usize,
    count: u32,
    buf: &mut [u8],
) -> Result<f64> {
    let io = |source| Error::Io {
        what: "raw TCP stream".into(),
        source,
    };
    let t0 = Instant::now();
    if me == 0 {
        for _ in 0..count {
            st.write_all(&buf[..size]).map_err(io)?;
        }
        st.read_exact(&mut buf[..1]).map_err(io)?;
    } else {
        let mut left = size as u64 * u64::from(count);
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            st.read_exact(&mut buf[..n]).map_err(io)?;
            left -= n as u64;
        }
        st.write_all(&[1]).map_err(io)?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// One rank of the benchmark: rank 0 returns the report's lines.
fn rank(comm: &Communicator, o: &GinOpts) -> Result<Vec<String>> {
    let (me, n) = (comm.rank(), comm.size());
    if n != 2 || comm.node_count() != 2 {
        return Err(fail(format!(
            "--coll gin runs 2 ranks on 2 nodes, not {n} ranks on {} nodes",
            comm.node_count()
        )));
    }
    let peer = 1 - me;
    let max = o.sizes.iter().copied().max().unwrap_or(8).max(8);
    // Each half of the window (source, destination) is at least 1 MiB: the raw stream reads
    // in chunks of a half, under the emulator from the window itself.
    let region = max.max(1 << 20);
    let dst_off = region.next_multiple_of(4096);
    let dev = Device::for_rank(comm)?;
    let stream = dev.stream()?;
    let module = Module::load(kernels::PTX)?;
    let mem = SymmetricMemory::alloc(comm, dst_off + region)?;
    let win = comm.register_window(&mem)?;
    let devcomm = DevComm::create(comm, Requirements::new().gin_contexts(1).gin_signals(3))?;
    let out = dev.alloc(3 * 8)?;
    let src: Vec<u8> = (0..max)
        .map(|i| {
            (i as u64)
                .wrapping_mul(0x9e37_79b1)
                .wrapping_add(me as u64 * 77) as u8
                >> 1
        })
        .collect();
    stream.copy_to_device(&mem, 0, &src)?;
    stream.synchronize()?;
    let mut tcp = raw_tcp(comm)?;
    let mut lines = Vec::new();
    let check = |code: u64, what: &str| -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(fail(format!(
                "{what}: wait code {code} (1 timeout, 2 aborted)"
            )))
        }
    };

    // Ping-pong.
    let ping = module.kernel::<GinBenchPingpong>()?;
    let mut base0 = 0u64;
    // GIN and raw TCP runs alternate, so that both see the same machine state.
    let mut gin_rt = Vec::new();
    let mut tcp_rt = Vec::new();
    for it in 0..=o.iters {
        let rounds = if it == 0 { 100.min(o.rounds) } else { o.rounds };
        let args = (
            devcomm.raw(),
            win.handle(),
            peer as u32,
            rounds,
            u32::from(me == 0),
            base0,
            TIMEOUT_NS,
            out.as_mut_ptr::<u64>(),
        );
        // SAFETY: the window holds 8 bytes at 0; signal 0 holds base0 on both ranks; the peer
        // runs the other side.
        unsafe { ping.launch(LaunchConfig::linear(1, 1), &stream, args)? };
        // Asleep: a thread spinning in the driver slows the receive threads' driver calls
        // (measured: 2.9 µs per landing instead of 1.8).
        stream.synchronize_asleep()?;
        let mut r = [0u64; 3];
        stream.copy_to_host(&out, 0, &mut r)?;
        check(r[0], "ping-pong")?;
        base0 += u64::from(rounds);
        if r[2] != base0 {
            return Err(fail(format!(
                "ping-pong: signal 0 is {}, want {base0}",
                r[2]
            )));
        }
        comm.bootstrap().barrier()?;
        let t = tcp_pingpong(&mut tcp, me, rounds)?;
        if it > 0 {
            gin_rt.push(r[1] as f64 / 1e3 / f64::from(rounds));
            tcp_rt.push(t);
        }
        comm.bootstrap().barrier()?;
    }
    let (g, t) = (median(gin_rt), median(tcp_rt));
    lines.push(format!(
        "# symcomm-bench --coll gin: 2 ranks on 2 nodes, {} windows, socket transport; median of {} runs",
        if dev.is_emulated() { "host (emulated)" } else { "GPU" },
        o.iters
    ));
    lines.push(format!(
        "# {:>12} {:>10} {:>12} {:>12} {:>8}",
        "test", "bytes", "symcomm_us", "raw_tcp_us", "ratio"
    ));
    lines.push(format!(
        "  {:>12} {:>10} {:>12.2} {:>12.2} {:>8.2}",
        "ping-pong",
        8,
        g,
        t,
        g / t
    ));

    // Put bandwidth.
    let mut head = format!(
        "# {:>12} {:>10} {:>6} {:>12} {:>12} {:>12} {:>8} {:>7}",
        "test", "bytes", "count", "symcomm_us", "symcomm_GB/s", "raw_tcp_GB/s", "ratio", "#wrong"
    );
    if dev.is_emulated() {
        head += &format!(" {:>13}", "heap_tcp_GB/s");
    }
    lines.push(head);
    let put = module.kernel::<GinBenchStream>()?;
    let mut base = 0u64;
    let mut heap = vec![0u8; region];
    // Under the emulator the windows are host memory of this process, and the raw stream also
    // runs between them (from the sender's window at 0, into the receiver's window at
    // `dst_off`, as the puts): the emulator's memory is shared memory (memfd), which sockets
    // copy more slowly than private heap memory, and the ratio should compare transports over
    // the same memory. The raw stream between heap buffers is reported next to it.
    let window_half = dev
        .is_emulated()
        .then(|| mem.device_ptr() + if me == 0 { 0 } else { dst_off as u64 });
    for &size in &o.sizes {
        let count = ((256usize << 20) / size).clamp(1, 2000) as u32;
        let total = size as f64 * f64::from(count);
        stream.fill_bytes(&mem, 0)?;
        stream.copy_to_device(&mem, 0, &src)?;
        stream.synchronize()?;
        comm.bootstrap().barrier()?;
        let mut secs = Vec::new();
        for it in 0..=o.iters {
            let args = (
                devcomm.raw(),
                win.handle(),
                peer as u32,
                size as u64,
                dst_off as u64,
                count,
                me as u32,
                base,
                TIMEOUT_NS,
                out.as_mut_ptr::<u64>(),
            );
            // SAFETY: both ranges lie in the window; signals 1 and 2 hold `base`; the peer
            // runs the other role.
            unsafe { put.launch(LaunchConfig::linear(1, 1), &stream, args)? };
            stream.synchronize()?;
            let mut r = [0u64; 2];
            stream.copy_to_host(&out, 0, &mut r)?;
            check(r[0], "put stream")?;
            base += 1;
            if it > 0 {
                secs.push(r[1] as f64 / 1e9);
            }
            comm.bootstrap().barrier()?;
        }
        // Every byte the sender's puts left at the receiver.
        let wrong = if me == 1 {
            let mut got = vec![0u8; size];
            stream.copy_to_host(&mem, dst_off, &mut got)?;
            let want: Vec<u8> = (0..size)
                .map(|i| (i as u64).wrapping_mul(0x9e37_79b1) as u8 >> 1)
                .collect();
            got.iter().zip(&want).filter(|(a, b)| a != b).count() as u64
        } else {
            0
        };
        let wrong = comm.bootstrap().all_gather(&wrong.to_le_bytes())?[1]
            .as_slice()
            .try_into()
            .map(u64::from_le_bytes)
            .unwrap_or(u64::MAX);
        let mut raw = |buf: &mut [u8]| -> Result<f64> {
            tcp_stream(&mut tcp, me, size.min(buf.len()), 1, buf)?; // warm-up
            let mut tsecs = Vec::new();
            for _ in 0..o.iters {
                tsecs.push(tcp_stream(&mut tcp, me, size, count, buf)?);
            }
            Ok(median(tsecs))
        };
        let heap_secs = raw(&mut heap)?;
        let ts = match window_half {
            Some(addr) => {
                // SAFETY: under the emulator a window's device address is the host address of
                // its memory in this process; `region` bytes from `addr` lie in the allocation
                // (`dst_off + region` bytes), alive while `mem` is. Nothing else touches them
                // while the slice lives: this size's GIN runs and checks are over, the next
                // size's copies start after it.
                let w = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, region) };
                raw(w)?
            }
            None => heap_secs,
        };
        comm.bootstrap().barrier()?;
        let gs = median(secs);
        let mut line = format!(
            "  {:>12} {:>10} {:>6} {:>12.2} {:>12.3} {:>12.3} {:>8.2} {:>7}",
            "put",
            size,
            count,
            gs * 1e6 / f64::from(count),
            total / gs / 1e9,
            total / ts / 1e9,
            (total / gs) / (total / ts),
            wrong
        );
        if window_half.is_some() {
            line += &format!(" {:>13.3}", total / heap_secs / 1e9);
        }
        lines.push(line);
        if wrong != 0 {
            return Err(fail(format!("put of {size} bytes: {wrong} wrong bytes")));
        }
    }
    let st = devcomm
        .gin_stats()
        .ok_or_else(|| Error::Internal("no GIN".into()))?;
    lines.push(format!(
        "# rank {me} transport: sent {} B in {} frames, received {} B in {} frames",
        st.bytes_sent, st.frames_sent, st.bytes_received, st.frames_received
    ));
    comm.bootstrap().barrier()?;
    Ok(lines)
}
