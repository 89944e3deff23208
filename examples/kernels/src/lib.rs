//! Kernels of the symcomm examples. Built to PTX by `examples/build.rs`.

// ANCHOR: crate_attrs
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use symcomm_device::prelude::*;
// ANCHOR_END: crate_attrs

// ANCHOR: vector_add
/// `c[i] = a[i] + b[i]` for every `i < n`, grid-stride over any launch shape.
///
/// # Safety
/// - `a` and `b` are valid for `n` reads of `f32`, `c` for `n` writes, all device memory
///   of the launching device; `c` does not overlap `a` or `b`.
#[kernel]
pub unsafe fn vector_add(a: *const f32, b: *const f32, c: *mut f32, n: u64) {
    let stride = u64::from(block_dim().x) * u64::from(grid_dim().x);
    let mut i = u64::from(block_idx().x) * u64::from(block_dim().x) + u64::from(thread_idx().x);
    while i < n {
        // SAFETY: i < n, and the caller guarantees the three buffers hold n elements.
        unsafe { *c.add(i as usize) = *a.add(i as usize) + *b.add(i as usize) };
        i += stride;
    }
}
// ANCHOR_END: vector_add

// ANCHOR: hello_pattern
/// The value LSA rank `rank` writes at index `i` of its slot in `hello_window`.
pub const fn hello_pattern(rank: u32, i: u64) -> u32 {
    rank.wrapping_mul(0x9e37_79b1) ^ (i as u32).wrapping_mul(0x85eb_ca77) ^ 0x0005_eed5
}
// ANCHOR_END: hello_pattern

// ANCHOR: hello_window
/// Every rank writes [`hello_pattern`] into *its* slot of *every* LSA peer's copy of the window,
/// then the LSA team synchronises; afterwards every rank's own copy holds every peer's pattern.
///
/// The window holds `lsa_size` slots of `n` u32; slot `p` is written by LSA rank `p`. Each block
/// synchronises on its own barrier (index = block index). `status[block]` receives the
/// barrier's result code (0 = ok, 1 = timed out after `timeout_ns`, 2 = aborted).
///
// ANCHOR: hello_contract
/// # Safety
/// - `comm` comes from `DevComm::create` with at least `grid_dim.x` LSA barriers;
/// - `win` is a window of at least `lsa_size × n × 4` bytes;
/// - `status` holds `grid_dim.x` u32 of this device;
/// - every LSA rank launches this kernel with the same grid, block and `n`.
// ANCHOR_END: hello_contract
#[kernel]
pub unsafe fn hello_window(
    comm: DevComm,
    win: WindowHandle,
    n: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    // ANCHOR: hello_open
    let cta = Cta::new();
    let b = block_idx().x;
    // SAFETY: one session per block index, every LSA rank opens it (launch contract).
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    // ANCHOR_END: hello_open
    // ANCHOR: hello_store
    // Our slot: the `n` u32 from element `lsa_rank × n`, on every rank.
    let n = n as usize;
    let slot = SymSlice::<u32>::new(win.sym(comm.lsa_rank as usize * n), n);
    let stride = block_dim().x as usize * grid_dim().x as usize;
    let first = b as usize * block_dim().x as usize + thread_idx().x as usize;
    // SAFETY: `win` is a live window whose every copy holds our slot (launch contract).
    for peer_copy in unsafe { slot.lsa_peers(&comm) } {
        let mut i = first;
        while i < n {
            // SAFETY: i < n; only this rank writes its slot, and no one reads it before the
            // barrier below.
            unsafe { peer_copy.write(i, hello_pattern(comm.rank as u32, i as u64)) };
            i += stride;
        }
    }
    // ANCHOR_END: hello_store
    // ANCHOR: hello_sync
    // Release our stores to the peers; acquire theirs into our copy.
    let res = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
    bar.finish(&cta);
    // ANCHOR_END: hello_sync
    if cta.is_leader() {
        // SAFETY: status holds grid_dim.x words.
        unsafe { *status.add(b as usize) = WaitError::result_code(res) };
    }
}
// ANCHOR_END: hello_window

// ANCHOR: ring_pattern
/// The value world rank `origin` contributes at index `i` of its block in launch `round` of
/// `ring_exchange` (the round is in the value, so a block left over from an earlier launch
/// shows).
pub const fn ring_pattern(origin: u32, round: u32, i: u64) -> u32 {
    origin.wrapping_mul(0x9e37_79b1)
        ^ round.wrapping_mul(0x7f4a_7c15)
        ^ (i as u32).wrapping_mul(0x85eb_ca77)
        ^ 0x0052_1e6c
}
// ANCHOR_END: ring_pattern

// ANCHOR: ring_exchange
/// A ring all-gather over GIN: afterwards slot `o` of every rank's window holds the block of
/// world rank `o` ([`ring_pattern`]`(o, round, i)` for `i < n`).
///
/// The window holds `n_ranks` slots of `n` u32. The block writes its own pattern into its own
/// slot, then for `n_ranks − 1` steps puts one block to its right neighbour (world rank
/// `rank + 1` mod `n_ranks`), into the same slot of the neighbour's window, with a strong
/// increment of the neighbour's signal 0. At step `s` it forwards the block that originated at
/// rank `rank − s`, which its left neighbour put here at step `s − 1`; after each put it waits
/// for its own signal 0 to reach `base + s + 1`: the left neighbour's `s + 1`-th put, and,
/// the increment being strong, every earlier one, have landed. Finally it flushes, so that the
/// host may overwrite the window as soon as the launch is over.
///
/// `status` (2 u32): the first result code (0 = ok, 1 = a wait timed out after `timeout_ns`,
/// 2 = aborted), then the number of steps completed.
///
/// # Safety
/// - `comm` comes from `DevComm::create` with at least 1 GIN context and 1 GIN signal, GIN
///   connecting every rank (`GinConnection::Full`);
/// - `win` is a window of that communicator of at least `n_ranks × n × 4` bytes on every
///   rank, which nothing but this launch (on every rank) reads or writes until it returns;
/// - signal 0 of every rank was `base` before any rank started this launch, and only this
///   kernel updates it (signals start at 0 and each launch adds `n_ranks − 1`: pass
///   `launches so far × (n_ranks − 1)`, and let no rank launch again before every rank's
///   previous launch has returned);
/// - `status` holds 2 u32 of this device;
/// - every rank launches this kernel with one block of the same size, and the same `n`,
///   `round` and `base`.
#[kernel]
pub unsafe fn ring_exchange(
    comm: DevComm,
    win: WindowHandle,
    n: u64,
    round: u32,
    base: u64,
    timeout_ns: u64,
    status: *mut u32,
) {
    let cta = Cta::new();
    let gin = Gin::new(&comm, 0).with_timeout(timeout_ns);
    let world = comm.world_team();
    let (me, size) = (comm.rank, comm.n_ranks);
    let right = (me + 1) % size;
    let n = n as usize;
    // The block that originated at world rank `o`: slot `o`, at the same offset in every
    // rank's window.
    let slot = |o: i32| SymSlice::<u32>::new(win.sym(o as usize * n), n);

    // Our own block, into our own slot (no one else writes it).
    // SAFETY: `win` is a live window holding `size` slots (launch contract).
    let mine = unsafe { slot(me).local() };
    let mut i = thread_idx().x as usize;
    while i < n {
        // SAFETY: i < n, inside our slot; only this block touches it now.
        unsafe { mine.write(i, ring_pattern(me as u32, round, i as u64)) };
        i += block_dim().x as usize;
    }

    let mut res = Ok(());
    let mut failed = false;
    let mut done = 0u32;
    for step in 0..size - 1 {
        let block = slot((me - step).rem_euclid(size)).start();
        // Every thread calls it; the group syncs first, so the writes above are in the data.
        // SAFETY: `win` is registered for GIN on every rank and holds the slot; the source
        // slot is not written again in this launch, and the flush below ends its use; only
        // we write that slot of our right neighbour's window.
        res = unsafe {
            gin.put_sym(
                &cta,
                &world,
                right,
                block,
                block,
                n,
                RemoteAction::inc(0),
                LocalAction::None,
            )
        };
        // One thread waits (acquire at system scope): it alone posts the next put, and the
        // proxy reads the forwarded block after that post.
        if res.is_ok() && cta.is_leader() {
            res = gin.wait_signal(0, base + step as u64 + 1).map(|_| ());
        }
        if cta.any(res.is_err()) {
            failed = true;
            break;
        }
        done += 1;
    }
    if !failed {
        // Every source read by the proxy: the host may poison the window for the next launch.
        res = gin.flush(&cta);
    }
    if cta.is_leader() {
        // SAFETY: status holds 2 u32 (launch contract).
        unsafe {
            *status = WaitError::result_code(res);
            *status.add(1) = done;
        }
    }
}
// ANCHOR_END: ring_exchange
