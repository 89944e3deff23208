//! Kernels that break the device API's contracts on purpose, built with `bounds-checks` so
//! that the GPU checks them too (`tests/src/bin/gpu_checks.rs` runs them and reads the
//! messages). On the host (the CPU emulator) the checks are on in every build.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use symcomm_device::prelude::*;

/// Thread 0 writes the address of byte 0 of LSA peer `peer`'s copy of `win` to `out`: with
/// `peer` outside the LSA team the check stops the kernel first, naming the peer and the size.
///
/// # Safety
/// `win` is a live window of the launching rank; `out` holds one `u64` of this device.
#[kernel]
pub unsafe fn lsa_peer_address(win: WindowHandle, peer: i32, out: *mut u64) {
    if thread_idx().x == 0 && block_idx().x == 0 {
        // SAFETY: the launch contract; only an address is computed (after the peer check).
        unsafe { out.write(win.get().lsa_ptr(0, peer) as u64) };
    }
}

/// Opens an LSA barrier session on barrier `block_idx().x` and, with `finish` 0, lets it end
/// without `finish`: the check stops the kernel, naming the barrier. With `finish` 1 it ends
/// the session properly (the control).
///
/// # Safety
/// `comm` has at least `grid_dim().x` LSA barriers; every LSA rank launches the same shape.
#[kernel]
pub unsafe fn barrier_session(comm: DevComm, finish: u32) {
    let cta = Cta::new();
    // SAFETY: one session per block index (launch contract).
    let bar = unsafe { LsaBarrier::new(&cta, &comm, block_idx().x) };
    if finish != 0 {
        bar.finish(&cta);
    }
}
