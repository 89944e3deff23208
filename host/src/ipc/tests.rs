//! Tests of the fd exchange: publishing and fetching within one process, timeouts, unique-id
//! isolation, garbage requests and replies (via raw sockets and a fake server), and fds
//! crossing real process boundaries (this test binary re-run as each rank).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sys::{
    abstract_addr, bind_listener, owned_or_last_error, recv_with_fds, send_with_fds,
    seqpacket_socket, set_timeouts,
};
use super::wire::{MSG_SIZE, Message, STATUS_NOT_PUBLISHED, STATUS_OK};
use super::{FdServer, fetch_fd, socket_name};
use crate::Error;

/// A unique id per test (and per test run), so tests running in parallel never share a
/// socket name.
fn test_id(tag: u64) -> u64 {
    (std::process::id() as u64) << 32 | tag
}

fn memfd_with(bytes: &[u8]) -> OwnedFd {
    // SAFETY: the name is a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"symcomm-test".as_ptr(), libc::MFD_CLOEXEC) };
    let fd = owned_or_last_error(fd).unwrap();
    File::from(fd.try_clone().unwrap())
        .write_all(bytes)
        .unwrap();
    fd
}

fn read_fd(fd: &OwnedFd, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    File::from(fd.try_clone().unwrap())
        .read_exact_at(&mut out, 0)
        .unwrap();
    out
}

/// Connects a raw client socket to `name` (for sending garbage).
fn raw_connect(name: &str) -> OwnedFd {
    let sock = seqpacket_socket().unwrap();
    let (addr, len) = abstract_addr(name).unwrap();
    // SAFETY: valid address of `len` bytes.
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    assert_eq!(rc, 0, "{}", io::Error::last_os_error());
    set_timeouts(sock.as_fd(), Duration::from_secs(3)).unwrap();
    sock
}

/// True once every copy of the peer end of a socketpair is closed.
fn peer_end_closed(end: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: valid socket and buffer.
    let n = unsafe {
        libc::recv(
            end.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_DONTWAIT,
        )
    };
    n == 0
}

fn socketpair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    (
        owned_or_last_error(fds[0]).unwrap(),
        owned_or_last_error(fds[1]).unwrap(),
    )
}

#[test]
fn published_fds_are_fetched_with_their_contents() {
    let id = test_id(1);
    let a = FdServer::bind(id, 0).unwrap();
    let b = FdServer::bind(id, 1).unwrap();
    a.publish(7, memfd_with(b"from rank zero")).unwrap();
    b.publish(7, memfd_with(b"from rank one!")).unwrap();
    let fds = a.fetch_from(&[0, 1], 7, Duration::from_secs(5)).unwrap();
    assert_eq!(read_fd(&fds[0], 14), b"from rank zero");
    assert_eq!(read_fd(&fds[1], 14), b"from rank one!");
    // A published key cannot be published again, and a withdrawn key is no longer served.
    assert!(b.publish(7, memfd_with(b"x")).is_err());
    assert!(b.withdraw(7).is_some());
    assert!(b.withdraw(7).is_none());
    assert!(matches!(
        a.fetch(1, 7, Duration::from_millis(100)),
        Err(Error::Timeout { .. })
    ));
}

#[test]
fn a_liveness_check_ends_the_retries_for_a_peer_that_is_gone() {
    let id = test_id(40);
    let server = FdServer::bind(id, 0).unwrap();
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let alive = |peer: usize| {
        // The third time it is asked, the caller has learned that the peer died.
        if asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            Ok(())
        } else {
            Err(Error::PeerFailed {
                rank: Some(0),
                step: "fetching".into(),
                peer,
                reason: "disconnected".into(),
            })
        }
    };
    let start = Instant::now();
    let err = server
        .fetch_watching(&[4], 1, Duration::from_secs(60), &alive)
        .unwrap_err();
    assert!(matches!(err, Error::PeerFailed { peer: 4, .. }), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_peer_that_never_appears_times_out_naming_rank_and_step() {
    let id = test_id(2);
    let server = FdServer::bind(id, 0).unwrap();
    let start = Instant::now();
    let err = server.fetch(5, 3, Duration::from_millis(300)).unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    match &err {
        Error::Timeout {
            rank: Some(0),
            step,
            after,
        } => {
            assert!(step.contains("from rank 5"), "{step}");
            assert!(step.contains("key 3"), "{step}");
            assert!(step.contains("connect"), "{step}");
            assert!(*after >= Duration::from_millis(300));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn a_key_published_late_is_still_fetched_and_an_absent_one_times_out() {
    let id = test_id(3);
    let owner = FdServer::bind(id, 1).unwrap();
    let err = fetch_fd(id, 0, 1, 9, Duration::from_millis(200)).unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { step, .. } if step.contains("publish") && step.contains("key 9")),
        "{err}"
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(150));
            owner.publish(9, memfd_with(b"late")).unwrap();
        });
        let fd = fetch_fd(id, 0, 1, 9, Duration::from_secs(5)).unwrap();
        assert_eq!(read_fd(&fd, 4), b"late");
    });
}

#[test]
fn different_unique_ids_do_not_cross_talk() {
    let (id_a, id_b) = (test_id(4), test_id(5));
    let a = FdServer::bind(id_a, 0).unwrap();
    let b = FdServer::bind(id_b, 0).unwrap();
    a.publish(1, memfd_with(b"AAAA")).unwrap();
    b.publish(1, memfd_with(b"BBBB")).unwrap();
    assert_eq!(
        read_fd(&fetch_fd(id_a, 1, 0, 1, Duration::from_secs(5)).unwrap(), 4),
        b"AAAA"
    );
    assert_eq!(
        read_fd(&fetch_fd(id_b, 1, 0, 1, Duration::from_secs(5)).unwrap(), 4),
        b"BBBB"
    );
    // A request that names another id is refused even when it reaches this server.
    let sock = raw_connect(&socket_name(id_a, 0));
    send_with_fds(sock.as_fd(), &Message::request(id_b, 1, 1).encode(), &[]).unwrap();
    let mut buf = [0u8; 64];
    let got = recv_with_fds(sock.as_fd(), &mut buf).unwrap();
    assert_eq!(
        (got.len, got.fds.len()),
        (0, 0),
        "expected the connection to be dropped"
    );
}

#[test]
fn garbage_requests_are_dropped_and_the_server_keeps_serving() {
    let id = test_id(6);
    let server = FdServer::bind(id, 0).unwrap();
    server.publish(1, memfd_with(b"still here")).unwrap();
    let name = socket_name(id, 0);
    let good = Message::request(id, 1, 3).encode();
    let mut wrong_magic = good;
    wrong_magic[0] = b'X';
    let mut wrong_version = good;
    wrong_version[4] = 9;
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        vec![0xff; MSG_SIZE],
        wrong_magic.to_vec(),
        wrong_version.to_vec(),
        [good.as_slice(), &[0]].concat(),
        vec![0x5a; 1000],
    ];
    for g in &garbage {
        let sock = raw_connect(&name);
        send_with_fds(sock.as_fd(), g, &[]).unwrap();
        let mut buf = [0u8; 64];
        let got = recv_with_fds(sock.as_fd(), &mut buf).unwrap();
        assert_eq!(
            (got.len, got.fds.len()),
            (0, 0),
            "garbage {g:?} was answered"
        );
    }
    // A well-formed request that smuggles an fd in is refused, and the fd is closed.
    let (mine, theirs) = socketpair();
    let sock = raw_connect(&name);
    send_with_fds(sock.as_fd(), &good, &[theirs.as_fd()]).unwrap();
    drop(theirs);
    let mut buf = [0u8; 64];
    assert_eq!(recv_with_fds(sock.as_fd(), &mut buf).unwrap().len, 0);
    assert!(
        peer_end_closed(&mine),
        "the server kept the smuggled fd open"
    );
    // A client that connects and goes silent holds the server for at most SERVE_IO_TIMEOUT.
    let _silent = raw_connect(&name);
    let fd = server.fetch(0, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(read_fd(&fd, 10), b"still here");
}

/// Runs a fake server at (`id`, rank 1) that answers one request with `reply` + `fds`.
fn fake_server_reply(id: u64, reply: Vec<u8>, fds: Vec<OwnedFd>) -> JoinHandle<()> {
    let listener = bind_listener(&socket_name(id, 1)).unwrap();
    std::thread::spawn(move || {
        // SAFETY: valid listening socket.
        let conn = owned_or_last_error(unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        })
        .unwrap();
        let mut buf = [0u8; 64];
        recv_with_fds(conn.as_fd(), &mut buf).unwrap();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        send_with_fds(conn.as_fd(), &reply, &borrowed).unwrap();
        // Keep the connection open until the client is done with it.
        let _ = recv_with_fds(conn.as_fd(), &mut buf);
    })
}

#[test]
fn a_peer_that_answers_with_nothing_is_reported_as_failed_not_as_garbage() {
    let id = test_id(0xc105ed);
    let server = fake_server_reply(id, Vec::new(), Vec::new());
    let err = fetch_fd(id, 0, 1, 4, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::PeerFailed {
                rank: Some(0),
                peer: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("rank 1 closed the connection without replying"),
        "{err}"
    );
    server.join().unwrap();
}

#[test]
fn garbage_replies_are_errors_and_extra_fds_are_closed() {
    let ok = |id, key| Message::reply(id, key, STATUS_OK).encode();
    type MakeReply = Box<dyn Fn(u64) -> Vec<u8>>;
    let cases: Vec<(&str, MakeReply, usize, &str)> = vec![
        ("short", Box::new(|_| vec![1, 2, 3]), 0, "reply of 3 bytes"),
        ("long", Box::new(|_| vec![7; 100]), 0, "more than 33"),
        ("magic", Box::new(|_| vec![0; MSG_SIZE]), 0, "magic"),
        (
            "version",
            Box::new(|id| {
                Message {
                    version: 2,
                    ..Message::reply(id, 4, STATUS_OK)
                }
                .encode()
                .to_vec()
            }),
            1,
            "protocol version 2",
        ),
        (
            "wrong key",
            Box::new(move |id| ok(id, 5).to_vec()),
            1,
            "key 5",
        ),
        (
            "wrong id",
            Box::new(move |id| ok(id ^ 1, 4).to_vec()),
            1,
            "unique id",
        ),
        ("no fd", Box::new(move |id| ok(id, 4).to_vec()), 0, "0 fds"),
        (
            "two fds",
            Box::new(move |id| ok(id, 4).to_vec()),
            2,
            "2 fds",
        ),
        (
            "status",
            Box::new(|id| Message::reply(id, 4, 77).encode().to_vec()),
            0,
            "status 77",
        ),
        (
            "not published with fd",
            Box::new(|id| {
                Message::reply(id, 4, STATUS_NOT_PUBLISHED)
                    .encode()
                    .to_vec()
            }),
            1,
            "'not published' reply that carried 1 fds",
        ),
    ];
    for (i, (label, reply, n_fds, want)) in cases.into_iter().enumerate() {
        let id = test_id(0x100 + i as u64);
        let (mine, theirs) = socketpair();
        let fds = (0..n_fds).map(|_| theirs.try_clone().unwrap()).collect();
        drop(theirs);
        let server = fake_server_reply(id, reply(id), fds);
        let err = fetch_fd(id, 0, 1, 4, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::PeerProtocol {
                    rank: Some(0),
                    peer: 1,
                    ..
                }
            ),
            "{label}: {err}"
        );
        assert!(err.to_string().contains(want), "{label}: {err}");
        assert!(err.to_string().contains("rank 1 sent a"), "{label}: {err}");
        server.join().unwrap();
        if n_fds > 0 {
            assert!(peer_end_closed(&mine), "{label}: a received fd was leaked");
        }
    }
}

#[test]
fn dropping_the_server_frees_its_name() {
    let id = test_id(7);
    let server = FdServer::bind(id, 2).unwrap();
    assert!(
        matches!(FdServer::bind(id, 2), Err(Error::Io { .. })),
        "name bound twice"
    );
    server.publish(1, memfd_with(b"x")).unwrap();
    drop(server);
    assert!(matches!(
        fetch_fd(id, 0, 2, 1, Duration::from_millis(100)),
        Err(Error::Timeout { .. })
    ));
    let again = FdServer::bind(id, 2).unwrap();
    assert_eq!(again.rank(), 2);
    assert_eq!(again.id(), id);
}

// --- Real processes -------------------------------------------------------------------

const CHILD_ENV: &str = "SYMCOMM_IPC_TEST_CHILD";
const CHILD_PAGE: usize = 4096;

fn pattern(rank: usize, key: u64) -> u8 {
    (rank as u8 + 1) * 0x10 + key as u8
}

/// Not a test on its own: the body of one rank in
/// `fds_cross_real_process_boundaries`, which runs this test binary as each rank with
/// `SYMCOMM_IPC_TEST_CHILD=<id>,<rank>,<n>`. Without that variable it does nothing.
#[test]
#[ignore = "helper process of fds_cross_real_process_boundaries"]
fn ipc_child_rank() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let v: Vec<u64> = spec.split(',').map(|x| x.parse().unwrap()).collect();
    let (id, rank, n) = (v[0], v[1] as usize, v[2] as usize);
    let server = FdServer::bind(id, rank).unwrap();
    for key in [1u64, 2] {
        server
            .publish(key, memfd_with(&[pattern(rank, key); CHILD_PAGE]))
            .unwrap();
    }
    let peers: Vec<usize> = (0..n).collect();
    for key in [1u64, 2] {
        let fds = server
            .fetch_from(&peers, key, Duration::from_secs(10))
            .unwrap();
        for (peer, fd) in fds.iter().enumerate() {
            // SAFETY: mapping CHILD_PAGE bytes of a memfd of that size, read-only and shared.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    CHILD_PAGE,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
            // SAFETY: `p` maps CHILD_PAGE readable bytes until the munmap below.
            let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), CHILD_PAGE) };
            let want = pattern(peer, key);
            assert!(
                bytes.iter().all(|&b| b == want),
                "rank {rank}: peer {peer} key {key} has wrong bytes"
            );
            // SAFETY: unmapping exactly what was mapped.
            unsafe { libc::munmap(p, CHILD_PAGE) };
        }
    }
    println!("SYMCOMM-IPC-CHILD ok {rank}");
    // Keep serving until the parent says every rank is done fetching.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

#[test]
fn fds_cross_real_process_boundaries() {
    const N: usize = 4;
    let id = test_id(8);
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = (0..N)
        .map(|rank| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "ipc::tests::ipc_child_rank",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                    "-q",
                ])
                .env(CHILD_ENV, format!("{id},{rank},{N}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    for (rank, child) in children.iter_mut().enumerate() {
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if line.starts_with("SYMCOMM-IPC-CHILD ok") {
                    let _ = tx.send(rank);
                }
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut done = Vec::new();
    while done.len() < N {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(rank) => done.push(rank),
            Err(_) => break,
        }
    }
    let all_done = done.len() == N;
    for child in &mut children {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"exit\n");
        }
    }
    let mut statuses = Vec::new();
    for child in &mut children {
        let status = loop {
            match child.try_wait().unwrap() {
                Some(s) => break Some(s),
                None if Instant::now() > deadline + Duration::from_secs(2) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        statuses.push(status);
    }
    assert!(
        all_done,
        "only ranks {done:?} finished fetching; statuses {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| s.is_some_and(|s| s.success())),
        "child statuses {statuses:?}"
    );
}

const STARVED_ENV: &str = "SYMCOMM_IPC_TEST_STARVED";

/// Not a test on its own: the client of `a_rank_out_of_fds_is_told_so_not_blamed_on_its_peer`,
/// run as a process of its own (`SYMCOMM_IPC_TEST_STARVED=<id>`), since it lowers its fd limit
/// to leave room for exactly one more fd: the socket of the fetch, not the fd the reply carries.
/// Prints the error. Without that variable it does nothing.
#[test]
#[ignore = "helper process of a_rank_out_of_fds_is_told_so_not_blamed_on_its_peer"]
fn ipc_starved_child() {
    let Ok(id) = std::env::var(STARVED_ENV) else {
        return;
    };
    let id: u64 = id.parse().unwrap();
    // SAFETY: dup of the open stderr; the new fd (the lowest free one) is closed at once.
    let lowest_free = unsafe { libc::dup(2) };
    assert!(lowest_free >= 0, "{}", io::Error::last_os_error());
    // SAFETY: closing the fd made just above.
    unsafe { libc::close(lowest_free) };
    // SAFETY: an all-zero rlimit is a valid out-buffer.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = lowest_free as libc::rlim_t + 1;
    // SAFETY: valid rlimit, lowering the soft limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let got = fetch_fd(id, 0, 1, 1, Duration::from_secs(5));
    println!(
        "SYMCOMM-IPC-STARVED limit {} {:?}",
        lim.rlim_cur,
        got.map(|_| ()).map_err(|e| e.to_string())
    );
}

#[test]
fn a_rank_out_of_fds_is_told_so_not_blamed_on_its_peer() {
    let id = test_id(0x57a4);
    let server = FdServer::bind(id, 1).unwrap();
    server.publish(1, memfd_with(&[1; 16])).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ipc::tests::ipc_starved_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(STARVED_ENV, id.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SYMCOMM-IPC-STARVED limit "))
        .unwrap_or_else(|| panic!("the child printed no result ({}): {stdout}", out.status));
    let (limit, result) = line.split_once(' ').unwrap();
    assert!(result.starts_with("Err("), "{line}");
    for fact in [
        format!("rank 0 ran out of file descriptors (limit {limit}, raise `ulimit -n`)"),
        "fetching fd key 1 from rank 1".into(),
        "receiving the fd".into(),
    ] {
        assert!(result.contains(&fact), "{fact:?} missing from: {result}");
    }
    assert!(!result.contains("more than"), "{result}");
}
