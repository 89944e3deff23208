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
