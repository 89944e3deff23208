//! `gin`: GIN puts, inline values, signals and counters between two ranks, a signal ping-pong
//! with an exact check each round, and an ordering probe (does a signal arrive before the data
//! of an earlier put?). Every wait is bounded by `timeout_ns` and the abort flag; codes are
//! [`WaitError::result_code`]s (0 ok, 1 timeout, 2 aborted).

use symcomm_device::gin::{Gin, LocalAction, RemoteAction};
use symcomm_device::prelude::*;

/// The remote action of kind `kind` (0 inc, 1 add `value`, 2 set `value`) on `signal`, weak
/// unless `strong`.
fn action(kind: u32, signal: u32, value: u64, strong: bool) -> RemoteAction {
    let a = match kind {
        0 => RemoteAction::inc(signal),
        1 => RemoteAction::add(signal, value),
        _ => RemoteAction::set(signal, value),
    };
    if strong { a } else { a.weak() }
}

fn first_err(code: &mut u64, r: Result<(), WaitError>) {
    if *code == 0 {
        *code = WaitError::result_code(r) as u64;
    }
}

/// Zeroes signals `0..n_signals` and counters `0..n_counters` of context 0 (run it on every
/// rank, then a host barrier, before a test that uses them).
///
/// # Safety
/// `comm` has GIN with at least those signals and counters; one thread.
#[kernel]
pub unsafe fn gin_reset(comm: DevComm, n_signals: u32, n_counters: u32) {
    let gin = Gin::new(&comm, 0);
    for s in 0..n_signals {
        gin.reset_signal(s);
    }
    for c in 0..n_counters {
        gin.reset_counter(c);
    }
}

/// One block, on GIN context `context`: a put of `bytes` bytes from `win` at `src_off` to
/// world rank `peer`'s `win` at
/// `dst_off` with the remote action `kind`/`strong` on signal 0 (operand `value`) and counter 0
/// on completion; then a `put_value` of `value ^ VALUE_XOR` (u64) to `dst_off + bytes` with a
/// weak add of 7 on signal 1; then a strong inc of signal 2 with no data. Waits for counter 0,
/// flushes, and waits for the partner's three signals (signal 0 reaching 1 for an inc, else
/// `their_value`, the partner's `value`).
///
/// `out` (6 u64): first error code, signal 0, 1 and 2 as seen at the end, counter 0, and
/// 1 if the signal-2 wait ended before signal 0 and 1 had arrived (a strong-order failure).
///
/// # Safety
/// `win` is registered for GIN on every rank and holds `dst_off + bytes + 8` and
/// `src_off + bytes` bytes; `comm` has > `context` contexts, ≥ 3 signals, ≥ 1 counter; `out`
/// holds 6 u64; the partner launches the same kernel towards this rank.
#[kernel]
pub unsafe fn gin_put_signal(
    comm: DevComm,
    win: WindowHandle,
    peer: u32,
    bytes: u64,
    src_off: u64,
    dst_off: u64,
    kind: u32,
    strong: u32,
    value: u64,
    their_value: u64,
    context: u32,
    timeout_ns: u64,
    out: *mut u64,
) {
    let cta = Cta::new();
    let gin = Gin::new(&comm, context).with_timeout(timeout_ns);
    let world = comm.world_team();
    let p = peer as i32;
    let mut code = 0u64;
    // ANCHOR: gin_put
    // SAFETY: launch contract (registered windows, ranges inside them).
    let r = unsafe {
        gin.put(
            &cta,
            &world,
            p,
            win,
            dst_off as usize,
            win,
            src_off as usize,
            bytes as usize,
            action(kind, 0, value, strong != 0),
            LocalAction::Counter(0),
        )
    };
    first_err(&mut code, r);
    // SAFETY: as above; `dst_off + bytes` is 8-byte aligned by the host.
    let r = unsafe {
        gin.put_value(
            &cta,
            &world,
            p,
            win,
            (dst_off + bytes) as usize,
            value ^ VALUE_XOR,
            RemoteAction::add(1, 7).weak(),
        )
    };
    first_err(&mut code, r);
    first_err(&mut code, gin.signal(&cta, &world, p, RemoteAction::inc(2)));
    first_err(&mut code, gin.wait_counter(0, 1).map(|_| ()));
    first_err(&mut code, gin.flush(&cta));
    first_err(&mut code, gin.wait_signal(2, 1).map(|_| ()));
    // ANCHOR_END: gin_put
    // The strong inc of signal 2 came after the put and the put_value: both landed.
    let want0 = if kind == 0 { 1 } else { their_value };
    let early = gin.read_signal(0) != want0 || gin.read_signal(1) != 7;
    first_err(&mut code, gin.wait_signal(0, want0).map(|_| ()));
    first_err(&mut code, gin.wait_signal(1, 7).map(|_| ()));
    cta.sync();
    if cta.is_leader() {
        // SAFETY: out holds 6 u64 (launch contract).
        unsafe {
            *out = code;
            *out.add(1) = gin.read_signal(0);
            *out.add(2) = gin.read_signal(1);
            *out.add(3) = gin.read_signal(2);
            *out.add(4) = gin.read_counter(0);
            *out.add(5) = early as u64;
        }
    }
}

/// What `gin_put_signal` XORs into its inline value.
pub const VALUE_XOR: u64 = 0x5a5a_0f0f_3c3c_9696;

// ANCHOR: gin_pingpong
/// One thread: `rounds` signal round trips with world rank `peer` on signal `signal` (this rank
/// starts when `initiator != 0`). Each round waits for exactly `round + 1` and counts a round
/// whose value differs (a duplicate or a lost signal shows).
///
/// `out` (3 u64): first error code, rounds with a wrong value, the final signal value.
///
/// # Safety
/// `comm` has ≥ 1 context and > `signal` signals, reset to 0 on both ranks; `out` holds 3
/// u64; the partner launches the same kernel with the other `initiator`.
#[kernel]
pub unsafe fn gin_pingpong(
    comm: DevComm,
    peer: u32,
    signal: u32,
    rounds: u32,
    initiator: u32,
    timeout_ns: u64,
    out: *mut u64,
) {
    let t = Thread::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let (mut code, mut wrong) = (0u64, 0u64);
    for r in 0..rounds as u64 {
        if initiator != 0 {
            first_err(
                &mut code,
                gin.signal(&t, &world, peer as i32, RemoteAction::inc(signal)),
            );
        }
        match gin.wait_signal(signal, r + 1) {
            Ok(v) => wrong += (v != r + 1 || gin.read_signal(signal) != r + 1) as u64,
            Err(e) => {
                first_err(&mut code, Err(e));
                break;
            }
        }
        if initiator == 0 {
            first_err(
                &mut code,
                gin.signal(&t, &world, peer as i32, RemoteAction::inc(signal)),
            );
        }
        if code != 0 {
            break;
        }
    }
    // SAFETY: out holds 3 u64.
    unsafe {
        *out = code;
        *out.add(1) = wrong;
        *out.add(2) = gin.read_signal(signal);
    }
}

// ANCHOR_END: gin_pingpong

/// The ordering probe, one block. The sender (`role == 0`) runs `rounds` rounds: fill its
/// `n` u32 at `src_off` with `round + 1`, put them to `peer`'s `dst_off` (no remote action,
/// counter 1 on completion), then signal 3 += 1 (strong if `strong`), then wait for the
/// receiver's acknowledgement (signal 4 ≥ round + 1) and for counter 1 before the next fill.
/// The receiver (`role == 1`) waits for signal 3 ≥ round + 1, then checks all `n` values, and
/// counts the rounds where any was not `round + 1` yet (the signal was seen before the data),
/// then acknowledges.
///
/// `out` (2 u64): first error code, rounds whose data was not there yet.
///
/// # Safety
/// `win` is registered for GIN and holds `src_off + 4n` and `dst_off + 4n` bytes; `comm` has
/// ≥ 5 signals and ≥ 2 counters, reset to 0; the partner runs the other role.
#[kernel]
pub unsafe fn gin_order(
    comm: DevComm,
    win: WindowHandle,
    peer: u32,
    n: u64,
    src_off: u64,
    dst_off: u64,
    rounds: u32,
    strong: u32,
    role: u32,
    timeout_ns: u64,
    out: *mut u64,
) {
    let cta = Cta::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let p = peer as i32;
    let (mut code, mut early) = (0u64, 0u64);
    let tid = thread_idx().x as u64;
    let nt = block_dim().x as u64;
    // SAFETY: `win` is live; the ranges are inside it (launch contract).
    let src = unsafe { win.get().local_ptr(src_off as usize) }.cast::<u32>();
    // SAFETY: as above.
    let dst = unsafe { win.get().local_ptr(dst_off as usize) }.cast::<u32>();
    for r in 0..rounds as u64 {
        let want = (r + 1) as u32;
        if role == 0 {
            let mut i = tid;
            while i < n {
                // SAFETY: i < n (launch contract); nobody reads it until the put below.
                unsafe { *src.add(i as usize) = want };
                i += nt;
            }
            // SAFETY: launch contract.
            let res = unsafe {
                gin.put(
                    &cta,
                    &world,
                    p,
                    win,
                    dst_off as usize,
                    win,
                    src_off as usize,
                    (n * 4) as usize,
                    RemoteAction::None,
                    LocalAction::Counter(1),
                )
            };
            first_err(&mut code, res);
            let a = if strong != 0 {
                RemoteAction::inc(3)
            } else {
                RemoteAction::inc(3).weak()
            };
            first_err(&mut code, gin.signal(&cta, &world, p, a));
            first_err(&mut code, gin.wait_signal(4, r + 1).map(|_| ()));
            first_err(&mut code, gin.wait_counter(1, r + 1).map(|_| ()));
        } else {
            first_err(&mut code, gin.wait_signal(3, r + 1).map(|_| ()));
            let mut stale = false;
            let mut i = tid;
            while i < n {
                // SAFETY: i < n; the sender does not write until our acknowledgement. A read
                // racing with the late data is the point of the probe (volatile).
                stale |= unsafe { dst.add(i as usize).read_volatile() } != want;
                i += nt;
            }
            if cta.any(stale) {
                early += 1;
            }
            first_err(&mut code, gin.signal(&cta, &world, p, RemoteAction::inc(4)));
        }
        cta.sync();
        if code != 0 {
            break;
        }
    }
    if cta.is_leader() {
        // SAFETY: out holds 2 u64.
        unsafe {
            *out = code;
            *out.add(1) = early;
        }
    }
}

/// One thread posts a put of `bytes` bytes from `win` at `src_off` to world rank `peer`'s
/// `win` at `dst_off`, with a strong inc of signal 0, and ends without waiting for anything
/// (not even its local completion). `out[0]` = the result code of the post.
///
/// # Safety
/// `win` is registered for GIN on both ranks and holds both ranges; `comm` has ≥ 1 context and
/// signal 0; `out` holds 1 u64.
#[kernel]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gin_put_and_go(
    comm: DevComm,
    win: WindowHandle,
    peer: u32,
    bytes: u64,
    src_off: u64,
    dst_off: u64,
    timeout_ns: u64,
    out: *mut u64,
) {
    let t = Thread::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    // SAFETY: launch contract (registered window, both ranges inside it).
    let r = unsafe {
        gin.put(
            &t,
            &comm.world_team(),
            peer as i32,
            win,
            dst_off as usize,
            win,
            src_off as usize,
            bytes as usize,
            RemoteAction::inc(0),
            LocalAction::None,
        )
    };
    // SAFETY: out holds 1 u64.
    unsafe { *out = WaitError::result_code(r) as u64 };
}

/// One thread waits (no timeout: only the abort flag ends it) for signal `signal` ≥ `least`;
/// `out[0]` = the result code.
///
/// # Safety
/// `comm` has ≥ 1 context and > `signal` signals; `out` holds 1 u64.
#[kernel]
pub unsafe fn gin_wait_forever(comm: DevComm, signal: u32, least: u64, out: *mut u64) {
    let gin = Gin::new(&comm, 0);
    let r = gin.wait_signal(signal, least).map(|_| ());
    // SAFETY: out holds 1 u64.
    unsafe { *out = WaitError::result_code(r) as u64 };
}

/// One thread posts one deliberately bad operation (`what`): 0 a put reaching `bytes` past
/// `src_off` of `win` (the proxy refuses it), 1 a signal index of `index` (the device check
/// stops the kernel), 2 a peer of `index` (likewise), 3 a counter of `index`. Then waits for
/// signal 0 ≥ 1 (which never comes): `out[0]` = its result code.
///
/// # Safety
/// `comm` has GIN; `win` is registered for GIN; `out` holds 1 u64.
#[kernel]
pub unsafe fn gin_bad(
    comm: DevComm,
    win: WindowHandle,
    what: u32,
    peer: u32,
    index: u32,
    src_off: u64,
    bytes: u64,
    timeout_ns: u64,
    out: *mut u64,
) {
    let t = Thread::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let r = match what {
        // SAFETY: deliberately out of range: the proxy checks it before reading anything.
        0 => unsafe {
            gin.put(
                &t,
                &world,
                peer as i32,
                win,
                0,
                win,
                src_off as usize,
                bytes as usize,
                RemoteAction::inc(0),
                LocalAction::None,
            )
        },
        1 => gin.signal(&t, &world, peer as i32, RemoteAction::inc(index)),
        2 => gin.signal(&t, &world, index as i32, RemoteAction::inc(0)),
        // SAFETY: the window is fine; the counter index is checked on the device.
        _ => unsafe {
            gin.put(
                &t,
                &world,
                peer as i32,
                win,
                0,
                win,
                0,
                8,
                RemoteAction::None,
                LocalAction::Counter(index),
            )
        },
    };
    let r = r.and_then(|()| gin.wait_signal(0, 1).map(|_| ()));
    // SAFETY: out holds 1 u64.
    unsafe { *out = WaitError::result_code(r) as u64 };
}

/// The value rank `world_rank` publishes in barrier round `round` (1-based).
pub const fn barrier_tag(round: u64, world_rank: u32) -> u64 {
    round.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((world_rank as u64) << 48) ^ 0x00ab_cdef
}

// ANCHOR: gin_barrier_rounds
/// One block runs `rounds` barrier rounds of kind `kind` (0: world GIN barrier 0, 1: rail GIN
/// barrier 0, 2: the hybrid barrier 0) with fence `Put`. Each round first publishes
/// [`barrier_tag`]`(round, rank)` into slot `rank` of parity `round & 1` of every member it
/// synchronises with: by GIN `put_value` (no signal) to the GIN team's members, by a plain
/// store into the LSA peers' copies for the hybrid barrier's LSA half. After the barrier it
/// checks every slot those members wrote in this round. (Two parities: a fast rank's next
/// round writes the other one, while this rank may still be checking.)
///
/// `win` holds `2 × n_ranks` u64. `out` (3 u64): first error code, wrong slots seen, rounds.
///
/// # Safety
/// `comm` has GIN (≥ 1 context), world and rail GIN barrier 0 and LSA barrier 0; `win` is
/// registered for GIN on every rank; every rank runs the same kind and rounds; `out` holds 3
/// u64.
#[kernel]
pub unsafe fn gin_barrier_rounds(
    comm: DevComm,
    win: WindowHandle,
    kind: u32,
    rounds: u32,
    timeout_ns: u64,
    out: *mut u64,
) {
    use symcomm_device::gin::{Barrier, GinBarrier, GinFence};
    let cta = Cta::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let n = comm.n_ranks as usize;
    let me = comm.rank;
    // The GIN team: world, or the rail team for the rail and hybrid barriers.
    let team = if kind == 0 {
        comm.world_team()
    } else {
        comm.rail_team()
    };
    let lsa = comm.lsa_team();
    // SAFETY: launch contract (sessions opened by every rank, index 0 exists).
    let (mut gb, mut hb) = unsafe {
        match kind {
            0 => (Some(GinBarrier::world(&cta, &gin, &comm, 0)), None),
            1 => (Some(GinBarrier::rail(&cta, &gin, &comm, 0)), None),
            _ => (None, Some(Barrier::new(&cta, &gin, &comm, 0))),
        }
    };
    let (mut code, mut wrong) = (0u64, 0u64);
    let mut done = 0u64;
    for r in 1..=rounds as u64 {
        let slot = |rank: i32| ((r & 1) as usize * n + rank as usize) * 8;
        let tag = barrier_tag(r, me as u32);
        // Publish to the GIN team's other members.
        for q in team.peers() {
            // SAFETY: slot(me) lies in the window (2 × n u64).
            let res =
                unsafe { gin.put_value(&cta, &team, q, win, slot(me), tag, RemoteAction::None) };
            first_err(&mut code, res);
        }
        // Publish to the LSA peers by stores (hybrid).
        if kind == 2 && cta.is_leader() {
            for q in lsa.peers() {
                // SAFETY: a live window; slot(me) is inside every copy.
                unsafe {
                    let p = win.get().lsa_ptr(slot(me), q).cast::<u64>();
                    p.write_volatile(tag);
                }
            }
        }
        let res = match (&mut gb, &mut hb) {
            (Some(b), _) => b.sync(&cta, Ordering::AcqRel, GinFence::Put),
            (_, Some(b)) => b.sync(&cta, Ordering::AcqRel, GinFence::Put),
            _ => Ok(()),
        };
        first_err(&mut code, res);
        if code != 0 {
            break;
        }
        // Check what this round's members wrote here.
        let mut bad = 0u64;
        if cta.is_leader() {
            // SAFETY: a live window.
            let local = unsafe { win.get().local_ptr(0) }.cast::<u64>();
            for q in team.peers() {
                let w = team.to_world(me, q);
                // SAFETY: inside the window.
                bad += (unsafe { local.add(slot(w) / 8).read_volatile() }
                    != barrier_tag(r, w as u32)) as u64;
            }
            if kind == 2 {
                for q in lsa.peers() {
                    let w = lsa.to_world(me, q);
                    // SAFETY: inside the window.
                    bad += (unsafe { local.add(slot(w) / 8).read_volatile() }
                        != barrier_tag(r, w as u32)) as u64;
                }
            }
        }
        wrong += bad;
        done = r;
    }
    match (gb, hb) {
        (Some(b), _) => b.finish(&cta),
        (_, Some(b)) => b.finish(&cta),
        _ => {}
    }
    if cta.is_leader() {
        // SAFETY: out holds 3 u64.
        unsafe {
            *out = code;
            *out.add(1) = wrong;
            *out.add(2) = done;
        }
    }
}
// ANCHOR_END: gin_barrier_rounds
