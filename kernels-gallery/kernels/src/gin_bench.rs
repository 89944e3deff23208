//! The GIN kernels of `symcomm-bench --coll gin`: an 8-byte put + signal ping-pong and a put
//! stream measured to remote landing. Signals only grow: the host passes the values they held
//! before each launch (`base…`), so no reset is needed between measurements.

use symcomm_device::arch;
use symcomm_device::gin::{Gin, LocalAction, RemoteAction};
use symcomm_device::kernel;
use symcomm_device::prelude::{DevComm, WindowHandle};
use symcomm_device::wait::WaitError;

fn code(r: Result<(), WaitError>) -> u64 {
    u64::from(WaitError::result_code(r))
}

/// `rounds` round trips with world rank `peer`: an 8-byte `put_value` into `peer`'s `win` at
/// offset 0 (`initiator != 0` starts) carrying a strong increment of signal 0; each side
/// waits for its signal 0 to reach `base + round + 1` before answering.
///
/// `out` (3 u64): result code, elapsed `%globaltimer` ns, final signal 0.
///
/// # Safety
/// `comm` has GIN (≥ 1 context, ≥ 1 signal); `win` is registered for GIN and holds 8 bytes;
/// signal 0 holds `base`; the partner runs the other side; one thread.
#[kernel]
pub unsafe fn gin_bench_pingpong(
    comm: DevComm,
    win: WindowHandle,
    peer: u32,
    rounds: u32,
    initiator: u32,
    base: u64,
    timeout_ns: u64,
    out: *mut u64,
) {
    // Every gallery kernel waits for the kernel ahead of it first (dependent launch).
    arch::grid_dependency_wait();
    let t = symcomm_device::coop::Thread::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let p = peer as i32;
    let t0 = arch::globaltimer();
    let mut res = Ok(());
    for r in 0..u64::from(rounds) {
        if initiator != 0 {
            // SAFETY: 8 bytes at offset 0 of a registered window (launch contract).
            res = unsafe { gin.put_value(&t, &world, p, win, 0, r, RemoteAction::inc(0)) };
            if res.is_err() {
                break;
            }
        }
        res = gin.wait_signal(0, base + r + 1).map(|_| ());
        if res.is_err() {
            break;
        }
        if initiator == 0 {
            // SAFETY: as above.
            res = unsafe { gin.put_value(&t, &world, p, win, 0, r, RemoteAction::inc(0)) };
            if res.is_err() {
                break;
            }
        }
    }
    let t1 = arch::globaltimer();
    // SAFETY: out holds 3 u64 (launch contract).
    unsafe {
        *out = code(res);
        *out.add(1) = t1 - t0;
        *out.add(2) = gin.read_signal(0);
    }
}

/// The sender (`role == 0`) puts `bytes` bytes from its `win` at offset 0 into `peer`'s `win`
/// at `dst_off`, `count` times; the last put carries a strong increment of signal 1 (so it is
/// seen once every put has landed). It then waits for the receiver's acknowledgement (signal 2
/// reaching `base + 1`). The receiver (`role == 1`) waits for signal 1 to reach `base + 1`,
/// then increments the sender's signal 2.
///
/// `out` (2 u64): result code, elapsed `%globaltimer` ns (sender: first post to the
/// acknowledgement).
///
/// # Safety
/// `comm` has GIN (≥ 1 context, ≥ 3 signals); `win` is registered for GIN and holds
/// `max(bytes, dst_off + bytes)` bytes; signals 1 and 2 hold `base` on the ranks that wait on
/// them; the partner runs the other role; one thread.
#[kernel]
pub unsafe fn gin_bench_stream(
    comm: DevComm,
    win: WindowHandle,
    peer: u32,
    bytes: u64,
    dst_off: u64,
    count: u32,
    role: u32,
    base: u64,
    timeout_ns: u64,
    out: *mut u64,
) {
    arch::grid_dependency_wait();
    let t = symcomm_device::coop::Thread::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let p = peer as i32;
    let t0 = arch::globaltimer();
    let res = if role == 0 {
        let mut res = Ok(());
        for i in 0..count {
            let action = if i + 1 == count {
                RemoteAction::inc(1)
            } else {
                RemoteAction::None
            };
            // SAFETY: both ranges lie in the registered window (launch contract); the source
            // is never written while the kernel runs.
            res = unsafe {
                gin.put(
                    &t,
                    &world,
                    p,
                    win,
                    dst_off as usize,
                    win,
                    0,
                    bytes as usize,
                    action,
                    LocalAction::None,
                )
            };
            if res.is_err() {
                break;
            }
        }
        res.and_then(|()| gin.wait_signal(2, base + 1).map(|_| ()))
    } else {
        gin.wait_signal(1, base + 1)
            .map(|_| ())
            .and_then(|()| gin.signal(&t, &world, p, RemoteAction::inc(2)))
    };
    let t1 = arch::globaltimer();
    // SAFETY: out holds 2 u64 (launch contract).
    unsafe {
        *out = code(res);
        *out.add(1) = t1 - t0;
    }
}
