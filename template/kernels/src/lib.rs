//! The kernels of `my-app`: one fused kernel, an all-reduce followed by an element-wise
//! operation. Built to PTX by `build.rs` in the host crate; its host build is what the CPU
//! emulator runs.

// ANCHOR: crate_attrs
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use symcomm_device::prelude::*;
// ANCHOR_END: crate_attrs

// ANCHOR: kernel
/// `y[i] = scale × Σ_p x_p[i] + bias[i]` for every `i < n`, where `x_p` is LSA peer `p`'s copy
/// of the window `x`: an all-reduce (sum) fused with a scale and a bias, one pass, no
/// intermediate buffer. Every rank gets the same bits (the sum runs in LSA-rank order).
///
/// On the host, `#[kernel]` also makes `AllReduceScaleBias`, the type the host launches it
/// through: its arguments are checked by the compiler.
///
/// `status[block]` receives the block's barrier result (0 ok, 1 timed out, 2 aborted).
///
// ANCHOR: contract
/// # Safety
/// - `comm` comes from `DevComm::create` with at least `grid_dim.x` LSA barriers;
/// - `x` is a window whose every copy holds `n` f32 at offset 0, written before the launch;
/// - `bias` holds `n` f32 and `y` room for `n` f32 of this device (`y` outside the window);
///   `status` holds `grid_dim.x` u32;
/// - every LSA rank launches this kernel with the same grid, block and `n`.
// ANCHOR_END: contract
#[kernel]
pub unsafe fn all_reduce_scale_bias(
    comm: DevComm,
    x: WindowHandle,
    n: u64,
    scale: f32,
    bias: *const f32,
    y: *mut f32,
    timeout_ns: u64,
    status: *mut u32,
) {
    // ANCHOR: open
    let cta = Cta::new();
    let b = block_idx().x;
    // SAFETY: one session per block index, and every LSA rank opens it (launch contract).
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    // ANCHOR_END: open

    // ANCHOR: first_barrier
    // Every peer's input was written before its launch: after this round (its release half
    // on their side, acquire half on ours) this block may read it.
    let mut res = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
    // ANCHOR_END: first_barrier
    if res.is_ok() {
        // ANCHOR: reduce
        // The n f32 from element 0 of the window, on every rank (a typed view: the peer and
        // the index are checked on the emulator and in `bounds-checks` builds).
        let n = n as usize;
        let x = SymSlice::<f32>::new(x.sym(0), n);
        let stride = block_dim().x as usize * grid_dim().x as usize;
        let mut i = b as usize * block_dim().x as usize + thread_idx().x as usize;
        while i < n {
            let mut sum = 0.0f32;
            // SAFETY: `x` is a live window whose copies hold n f32 (launch contract).
            for x_p in unsafe { x.lsa_peers(&comm) } {
                // SAFETY: i < n; the peers wrote their copies before the barrier above.
                sum += unsafe { x_p.read(i) };
            }
            // SAFETY: i < n; `bias` and `y` hold n f32 (launch contract).
            unsafe { *y.add(i) = sum * scale + *bias.add(i) };
            i += stride;
        }
        // ANCHOR_END: reduce
        // ANCHOR: second_barrier
        // No rank returns (and overwrites its input for the next call) while a peer may
        // still be reading it: our loads are ordered before our arrival (release), the
        // peers' before our return (acquire).
        res = bar.sync_timeout(&cta, Ordering::AcqRel, timeout_ns);
        // ANCHOR_END: second_barrier
    }
    // ANCHOR: finish
    // Saves the barrier's epoch for the next launch's session on this index.
    bar.finish(&cta);
    if cta.is_leader() {
        // SAFETY: `status` holds grid_dim.x words.
        unsafe { *status.add(b as usize) = WaitError::result_code(res) };
    }
    // ANCHOR_END: finish
}
// ANCHOR_END: kernel
