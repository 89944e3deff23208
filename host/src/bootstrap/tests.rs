//! Bootstrap behaviour over both transports, within one test process (ranks on threads).
//! The multi-process acceptance tests live in `host/tests/bootstrap_processes.rs`.

use super::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;

const T: Duration = Duration::from_secs(10);

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Tcp,
    InProc,
}

/// Runs `f` on every rank of an `n`-rank group, each on its own thread.
fn group<R: Send>(
    mode: Mode,
    n: usize,
    timeout: Duration,
    f: impl Fn(Bootstrap) -> R + Sync,
) -> Vec<Result<R>> {
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = match mode {
            Mode::InProc => Bootstrap::in_process(n, timeout)
                .unwrap()
                .into_iter()
                .map(|b| s.spawn(move || Ok(f(b))))
                .collect(),
            Mode::Tcp => {
                let root = RootListener::bind(loopback()).unwrap();
                let id = root.unique_id();
                let mut hs = vec![s.spawn(move || Bootstrap::serve_tcp(root, n, timeout).map(f))];
                for r in 1..n {
                    hs.push(s.spawn(move || Bootstrap::connect_tcp(&id, r, n, timeout).map(f)));
                }
                hs
            }
        };
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn exercise(b: &Bootstrap) -> Result<()> {
    let (r, n) = (b.rank(), b.size());
    let jobs = b.all_gather(&b.job_id().to_le_bytes())?;
    assert!(jobs.iter().all(|j| *j == jobs[0]), "job ids differ");
    for round in 0..20usize {
        // Lengths differ per rank and per round.
        let mine = vec![(r * 7 + round) as u8; r + round];
        let all = b.all_gather(&mine)?;
        for (p, d) in all.iter().enumerate() {
            assert_eq!(d, &vec![(p * 7 + round) as u8; p + round]);
        }
        let root = round % n;
        let got = b.broadcast(root, format!("round {round} from {r}").as_bytes())?;
        assert_eq!(got, format!("round {round} from {root}").as_bytes());
        b.barrier()?;
        // Ring exchange, plus a message to self.
        b.send((r + 1) % n, &[r as u8, round as u8])?;
        assert_eq!(
            b.recv((r + n - 1) % n)?,
            [((r + n - 1) % n) as u8, round as u8]
        );
        b.send(r, b"self")?;
        assert_eq!(b.recv(r)?, b"self");
        // Sub-group all-gather: the even ranks and the odd ranks separately, listed backwards.
        let team: Vec<usize> = (0..n).rev().filter(|p| p % 2 == r % 2).collect();
        let sub = b.all_gather_ranks(&team, &[r as u8])?;
        assert_eq!(sub, team.iter().map(|&p| vec![p as u8]).collect::<Vec<_>>());
    }
    Ok(())
}

#[test]
fn collectives_and_point_to_point_deliver_every_ranks_data() {
    for mode in [Mode::InProc, Mode::Tcp] {
        for n in [1, 2, 5] {
            for r in group(mode, n, T, |b| exercise(&b)) {
                r.unwrap().unwrap_or_else(|e| panic!("{mode:?} n={n}: {e}"));
            }
        }
    }
}

#[test]
fn a_timeout_of_duration_max_means_no_limit_not_a_panic() {
    for mode in [Mode::InProc, Mode::Tcp] {
        for r in group(mode, 2, Duration::MAX, |b| {
            b.barrier()?;
            let all = b.all_gather(&[b.rank() as u8])?;
            assert_eq!(all, vec![vec![0], vec![1]]);
            b.send(1 - b.rank(), b"hi")?;
            assert_eq!(b.recv(1 - b.rank())?, b"hi");
            b.broadcast(0, b"root")
        }) {
            let got = r.unwrap().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            assert_eq!(got, b"root");
        }
    }
    let comms =
        crate::Communicator::init_threads_with(2, Duration::MAX, |_| crate::CommOptions::new())
            .unwrap();
    assert_eq!(comms.len(), 2);
}

#[test]
fn endpoints_can_be_shared_and_moved_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Bootstrap>();
    send_sync::<crate::Communicator>();
}

#[test]
fn a_world_of_one_needs_no_network() {
    let id = UniqueId::new("192.0.2.1:1".parse().unwrap(), 1);
    let b = Bootstrap::connect_tcp(&id, 0, 1, Duration::from_millis(10)).unwrap();
    assert_eq!(b.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    b.barrier().unwrap();
}

#[test]
fn invalid_arguments_are_refused_without_communicating() {
    let bs = Bootstrap::in_process(2, T).unwrap();
    let b = &bs[0];
    for e in [
        b.broadcast(2, b"").unwrap_err(),
        b.send(7, b"").unwrap_err(),
        b.recv(2).unwrap_err(),
        b.all_gather_ranks(&[1], b"").unwrap_err(),
        b.all_gather_ranks(&[0, 0], b"").unwrap_err(),
        b.all_gather(&vec![0; MAX_MESSAGE_BYTES + 1]).unwrap_err(),
    ] {
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    assert!(Bootstrap::in_process(0, T).is_err());
    // None of that broke the group.
    thread::scope(|s| {
        for b in &bs {
            s.spawn(move || b.barrier().unwrap());
        }
    });
}

#[test]
fn ranks_in_different_collectives_get_an_error_not_each_others_data() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 2, T, |b| {
            if b.rank() == 0 {
                b.barrier().map(|_| ())
            } else {
                b.all_gather(b"x").map(|_| ())
            }
        });
        for r in res {
            let e = r.unwrap().unwrap_err();
            // Each rank blames the other, unless the other's abort (which blames it) arrives
            // first: the rank at fault is told too. Either way an error, not a timeout.
            assert!(matches!(&e, Error::PeerFailed { .. }), "{mode:?}: {e}");
            assert!(e.to_string().contains("different collective"), "{e}");
        }
    }
}

#[test]
fn a_missing_rank_times_out_naming_it_and_the_step() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let t = Duration::from_millis(300);
        let res = group(mode, 3, t, |b| {
            let start = Instant::now();
            if b.rank() == 2 {
                // Stays alive but never joins the barrier.
                thread::sleep(t * 3);
                return (Ok(()), start.elapsed());
            }
            (b.barrier(), start.elapsed())
        });
        for r in res.into_iter().take(2) {
            let (r, took) = r.unwrap();
            let e = r.unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("barrier #") && text.contains("rank 2"),
                "{mode:?}: {text}"
            );
            assert!(took < t * 3, "{mode:?}: took {took:?}");
        }
    }
}

#[test]
fn runtime_and_user_collectives_never_read_each_others_data() {
    // Before: both were plain all-gathers, so a user all-gather received the runtime's data
    // (e.g. registration records) and returned Ok.
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 2, T, |b| {
            if b.rank() == 0 {
                b.all_gather(b"user data").map(|_| ())
            } else {
                b.runtime_all_gather(b"runtime data").map(|_| ())
            }
        });
        for r in res {
            let e = r.unwrap().unwrap_err().to_string();
            assert!(e.contains("different collective"), "{mode:?}: {e}");
        }
        // Each space works on its own.
        let res = group(mode, 3, T, |b| {
            b.runtime_barrier()?;
            let all = b.runtime_all_gather_ranks(&[0, 1, 2], &[b.rank() as u8])?;
            b.barrier()?;
            Ok::<_, Error>(all)
        });
        for r in res {
            assert_eq!(r.unwrap().unwrap(), vec![vec![0], vec![1], vec![2]]);
        }
    }
}

#[test]
fn ranks_that_name_different_broadcast_roots_all_get_a_mismatch() {
    // Before: each rank that named itself "sent" and returned its own data (Ok), the others
    // returned whichever root's data reached them.
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 3, T, |b| {
            let root = if b.rank() == 2 { 2 } else { 0 };
            b.broadcast(root, &[b.rank() as u8; 3])
        });
        for (rank, r) in res.into_iter().enumerate() {
            let e = r.unwrap().unwrap_err();
            assert!(
                matches!(&e, Error::Mismatch { what, .. } if what == "broadcast root"),
                "{mode:?} rank {rank}: {e}"
            );
        }
        // The same root everywhere: everyone gets the root's data.
        let res = group(mode, 3, T, |b| b.broadcast(1, &[b.rank() as u8 + 10; 5]));
        for r in res {
            assert_eq!(r.unwrap().unwrap(), vec![11; 5]);
        }
    }
}

/// Drops `b` the way a crashing rank does: while its thread panics, so no goodbye is sent.
fn crash(b: Bootstrap) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let owned = b;
        panic!("rank {} crashes (expected)", owned.rank());
    }));
    assert!(r.is_err());
}

#[test]
fn a_dead_peer_fails_the_others_fast_and_by_name() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 4, T, |b| {
            b.barrier()?;
            if b.rank() == 2 {
                crash(b);
                return Ok(Duration::ZERO);
            }
            let start = Instant::now();
            let e = b.barrier().unwrap_err();
            // Later calls keep failing with the same culprit.
            let again = b.all_gather(b"").unwrap_err();
            assert!(
                matches!(again, Error::PeerFailed { peer: 2, .. }),
                "{again}"
            );
            match e {
                Error::PeerFailed { peer: 2, .. } => Ok(start.elapsed()),
                e => Err(e),
            }
        });
        for (rank, r) in res.into_iter().enumerate() {
            let took = r
                .unwrap()
                .unwrap_or_else(|e| panic!("{mode:?} rank {rank}: {e}"));
            assert!(took < Duration::from_secs(5), "{mode:?}: took {took:?}");
        }
    }
}

#[test]
fn the_rank_blamed_for_a_timeout_is_told_and_does_not_blame_an_innocent_rank() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let t = Duration::from_millis(500);
        let res = group(mode, 2, t, |b| {
            if b.rank() == 1 {
                // Late: rank 0 gives up on it first (with a wide margin on a loaded machine).
                thread::sleep(t * 3);
            }
            let start = Instant::now();
            let e = b.barrier().unwrap_err();
            (e, start.elapsed())
        });
        let (late, took) = res.into_iter().nth(1).unwrap().unwrap();
        // Before: rank 1 waited its own full timeout and then blamed rank 0.
        assert!(
            matches!(&late, Error::PeerFailed { peer: 1, reason, .. } if reason.contains("did not respond")),
            "{mode:?}: {late}"
        );
        assert!(took < t / 2, "{mode:?}: rank 1 took {took:?}");
    }
}

#[test]
fn a_death_reaches_failure_watchers_while_nobody_waits() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 3, T, |b| {
            b.barrier()?;
            if b.rank() == 2 {
                crash(b);
                return Ok(Duration::ZERO);
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let tx = std::sync::Mutex::new(tx);
            let watch = b.watch_failure(move |e| {
                let _ = tx.lock().unwrap().send(e.to_string());
            });
            let start = Instant::now();
            // No bootstrap call is in progress: the watcher alone learns of the death.
            let text = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("no failure seen");
            let took = start.elapsed();
            assert!(text.contains("rank 2"), "{text}");
            assert!(watch.failure("check").is_some());
            assert!(b.failure().is_some());
            drop(watch);
            Ok(took)
        });
        for (rank, r) in res.into_iter().enumerate() {
            let took = r
                .unwrap()
                .unwrap_or_else(|e: Error| panic!("{mode:?} rank {rank}: {e}"));
            assert!(took < Duration::from_secs(3), "{mode:?}: took {took:?}");
        }
    }
}

#[test]
fn a_peer_that_closed_on_purpose_is_reported_as_such() {
    for mode in [Mode::InProc, Mode::Tcp] {
        let res = group(mode, 2, T, |b| {
            b.barrier()?;
            if b.rank() == 1 {
                drop(b);
                return Ok::<_, Error>(String::new());
            }
            Ok(b.barrier().unwrap_err().to_string())
        });
        let text = res.into_iter().next().unwrap().unwrap().unwrap();
        assert!(
            text.contains("rank 1 closed its communicator"),
            "{mode:?}: {text}"
        );
    }
}

/// Connects to the root and sends `bytes`; returns what the root answered before closing.
fn poke(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let _ = s.write_all(bytes);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    answer
}

fn hello(magic: u64, rank: u32, size: u32) -> Vec<u8> {
    let h = wire::Hello {
        magic,
        version: PROTOCOL_VERSION,
        role: wire::Role::Rendezvous,
        rank,
        size,
        to: 0,
        port: 1,
    };
    let mut b = Vec::new();
    wire::write_frame(&mut b, Kind::Hello, 0, 0, &h.encode()).unwrap();
    b
}

fn rejection(answer: &[u8]) -> String {
    let f = wire::read_frame(&mut &answer[..], 4096).unwrap();
    assert_eq!(f.kind, Kind::Reject);
    wire::reason_text(&f.payload)
}

#[test]
fn garbage_huge_prefixes_and_wrong_magic_are_rejected_and_the_job_still_forms() {
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    let addr = id.addr();
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 2, T));
        // Garbage: an HTTP request.
        let a = poke(addr, b"GET / HTTP/1.1\r\nHost: symcomm\r\n\r\n");
        assert!(rejection(&a).contains("marker"), "{}", rejection(&a));
        // A valid header announcing a 1 TiB hello: refused from the header alone.
        let mut huge = vec![0u8; wire::HEADER_LEN];
        wire::write_frame(&mut huge.as_mut_slice(), Kind::Hello, 0, 0, &[]).unwrap();
        huge[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(rejection(&poke(addr, &huge)).contains("1099511627776"));
        // The right rank with the wrong magic.
        let a = poke(addr, &hello(id.magic() ^ 1, 1, 2));
        assert!(rejection(&a).contains("wrong magic"));
        // A full Bootstrap with the wrong magic gets a clear error.
        let wrong = UniqueId::new(addr, id.magic() ^ 1);
        let e = Bootstrap::connect_tcp(&wrong, 1, 2, T).unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(
            e.to_string().contains("rejected this rank: wrong magic"),
            "{e}"
        );
        // The real rank 1 is still welcome.
        let b1 = Bootstrap::connect_tcp(&id, 1, 2, T).unwrap();
        let b0 = server.join().unwrap().unwrap();
        s.spawn(move || b1.barrier().unwrap());
        b0.barrier().unwrap();
    });
}

#[test]
fn a_root_that_never_completes_reports_the_missing_ranks_and_rejections() {
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    let t = Duration::from_millis(500);
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 3, t));
        let wrong = UniqueId::new(id.addr(), id.magic().wrapping_add(1));
        let _ = Bootstrap::connect_tcp(&wrong, 2, 3, t);
        let joined = s.spawn(move || Bootstrap::connect_tcp(&id, 1, 3, T));
        let e = server.join().unwrap().unwrap_err().to_string();
        assert!(
            e.contains("rendezvous waiting for rank 2 (rejected 1"),
            "{e}"
        );
        assert!(e.contains("wrong magic"), "{e}");
        // Rank 1 is told at once instead of waiting for its own (longer) timeout.
        let e = joined.join().unwrap().unwrap_err();
        assert!(matches!(e, Error::PeerFailed { peer: 2, .. }), "{e}");
    });
}

#[test]
fn a_misconfigured_world_size_fails_everyone_fast_but_a_duplicate_rank_is_only_refused() {
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    thread::scope(|s| {
        let start = Instant::now();
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 2, T));
        let e = Bootstrap::connect_tcp(&id, 1, 3, T).unwrap_err();
        assert!(e.to_string().contains("world size"), "{e}");
        let e = server.join().unwrap().unwrap_err();
        assert!(matches!(e, Error::Mismatch { .. }), "{e}");
        assert!(start.elapsed() < T / 2);
    });
    // Two processes claim rank 1: the first to say hello keeps it, the second is refused at
    // once, and the job forms. (Before, the second claim failed the whole job.)
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 3, T));
        let claims: Vec<_> = (0..2)
            .map(|_| s.spawn(move || Bootstrap::connect_tcp(&id, 1, 3, T)))
            .collect();
        // Rank 2 joins once the second claim is settled (else the job may form before it).
        let until = Instant::now() + T;
        while !claims.iter().any(|c| c.is_finished()) && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
        let rank2 = s.spawn(move || Bootstrap::connect_tcp(&id, 2, 3, T));
        let (mut won, mut refused) = (Vec::new(), Vec::new());
        for c in claims {
            match c.join().unwrap() {
                Ok(b) => won.push(b),
                Err(e) => refused.push(e.to_string()),
            }
        }
        assert_eq!((won.len(), refused.len()), (1, 1), "{refused:?}");
        assert!(
            refused[0].contains("rejected this rank: rank 1 has already joined"),
            "{}",
            refused[0]
        );
        let b0 = server.join().unwrap().unwrap();
        let b2 = rank2.join().unwrap().unwrap();
        thread::scope(|s| {
            for b in [&b0, &won[0], &b2] {
                s.spawn(move || assert_eq!(b.all_gather(&[b.rank() as u8]).unwrap().len(), 3));
            }
        });
    });
}

/// A hand-made "rank 1" that passes the handshake and then misbehaves.
fn rogue_rank(id: UniqueId) -> TcpStream {
    let mut s = TcpStream::connect(id.addr()).unwrap();
    s.write_all(&hello(id.magic(), 1, 2)).unwrap();
    let f = wire::read_frame(&mut s, 4096).unwrap();
    assert_eq!(f.kind, Kind::Welcome);
    // Take part in the connect barrier like a real rank.
    wire::write_frame(&mut s, Kind::Collective, Op::Connect as u32, 1, &[]).unwrap();
    s
}

#[test]
fn a_peer_announcing_a_huge_message_after_the_handshake_is_cut_off() {
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 2, T));
        let mut rogue = rogue_rank(id);
        let b0 = server.join().unwrap().unwrap();
        let mut huge = Vec::new();
        wire::write_frame(&mut huge, Kind::Collective, Op::Barrier as u32, 2, &[]).unwrap();
        huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        rogue.write_all(&huge).unwrap();
        let e = b0.barrier().unwrap_err();
        assert!(matches!(e, Error::PeerFailed { peer: 1, .. }), "{e}");
        assert!(e.to_string().contains("malformed frame"), "{e}");
    });
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 2, T));
        let mut rogue = rogue_rank(id);
        let b0 = server.join().unwrap().unwrap();
        rogue.write_all(&[0xab; 100]).unwrap();
        let e = b0.recv(1).unwrap_err();
        assert!(e.to_string().contains("marker"), "{e}");
    });
}

#[test]
fn a_root_flooded_with_rejected_connections_reports_them_in_one_bounded_line() {
    let root = RootListener::bind(loopback()).unwrap();
    let id = root.unique_id();
    let t = Duration::from_millis(1500);
    thread::scope(|s| {
        let server = s.spawn(move || Bootstrap::serve_tcp(root, 2, t));
        // Seventy strangers with another job's magic, each rejected with a long reason.
        for _ in 0..70 {
            poke(id.addr(), &hello(id.magic() ^ 1, 1, 2));
        }
        let e = server.join().unwrap().unwrap_err().to_string();
        assert!(e.len() <= 1000, "{} characters: {e}", e.len());
        assert!(!e.contains('\n'), "{e}");
        for fact in [
            "rendezvous waiting for rank 1",
            "rejected 70 connection(s)",
            "wrong magic",
            "more",
        ] {
            assert!(e.contains(fact), "{fact:?} missing from: {e}");
        }
    });
}

#[test]
fn a_long_bad_rank_list_is_refused_in_one_bounded_line_naming_the_culprit() {
    let bs = Bootstrap::in_process(2, T).unwrap();
    let b = &bs[0];
    let mut repeated: Vec<usize> = vec![0, 1];
    repeated.extend(std::iter::repeat_n(1, 5000));
    let mut outside: Vec<usize> = (0..2).collect();
    outside.extend(1_000_000..1_002_000);
    for (list, fact) in [
        (repeated, "repeats rank 1"),
        (outside, "rank 1000000 is out of range"),
    ] {
        let e = b.all_gather_ranks(&list, b"").unwrap_err().to_string();
        assert!(e.len() <= 1000, "{} characters: {e}", e.len());
        assert!(e.contains(fact), "{fact:?} missing from: {e}");
        assert!(e.contains(&format!("{} entries", list.len())), "{e}");
    }
}
