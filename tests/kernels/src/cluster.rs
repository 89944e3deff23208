//! `cluster`: thread block clusters exchanging words through peer shared memory
//! (`st.async` counted on `mbarrier` transaction barriers), as the fused RMSNorm's row join
//! does. The block-level `arch` primitives are in `arch`.

use symcomm_device::arch;
use symcomm_device::prelude::*;
use symcomm_device::shared_array;

/// Most blocks per cluster and warps per block of [`cluster_exchange`].
pub const CLUSTER_MAX: usize = 8;
/// See [`CLUSTER_MAX`].
pub const CLUSTER_MAX_WARPS: usize = 8;

/// Thread block clusters: for `rounds` rounds, warp `w` of every block stores the word
/// `input[(block × warps + w) × rounds + k]` into slot `rank × warps + w` of every block of its
/// cluster (itself included) with `cluster::store_async_u32`, counted on that block's
/// transaction barrier; each block waits for all `size × warps` words of the round and thread
/// `t < size × warps` writes slot `t` to `out[(block × rounds + k) × size × warps + t]`. The
/// slots and barriers alternate between two buffers, as in the fused RMSNorm's row join.
/// Block 0's thread 0 also writes `[rank, size]` of every block to `geo[2 × block ..]`
/// (every block writes its own pair).
///
/// # Safety
/// 1-D launch in clusters of at most [`CLUSTER_MAX`] blocks, blocks of a multiple of 32
/// threads and at most [`CLUSTER_MAX_WARPS`] warps; `input` holds `blocks × warps × rounds`
/// words, `out` `blocks × rounds × size × warps`, `geo` `2 × blocks`; `status` one word per
/// block (wait result code).
#[kernel]
pub unsafe fn cluster_exchange(
    input: *const u32,
    out: *mut u32,
    geo: *mut u32,
    status: *mut u32,
    rounds: u32,
) {
    use symcomm_device::cluster::{self, Mbarrier};
    let bars: *mut u64 = shared_array!(TEST_CLUSTER_BARS: [u64; 2]);
    let slots: *mut u32 =
        shared_array!(TEST_CLUSTER_SLOTS: [u32; 2 * CLUSTER_MAX * CLUSTER_MAX_WARPS]);
    let (rank, size) = (cluster::rank(), cluster::size());
    let (t, block) = (thread_idx().x, block_idx().x);
    let warps = block_dim().x / 32;
    let (lane, warp) = (t % 32, t / 32);
    if t == 0 {
        // SAFETY: this block's shared words, not yet used.
        unsafe {
            Mbarrier::new(bars).init(1);
            Mbarrier::new(bars.add(1)).init(1);
            *geo.add(2 * block as usize) = rank;
            *geo.add(2 * block as usize + 1) = size;
        }
        cluster::fence_init();
    }
    // Every block's barriers are initialised and every block has started.
    cluster::sync();
    let entries = size * warps;
    let mut code = 0;
    for k in 0..rounds {
        let buf = (k & 1) as usize;
        // SAFETY: buffer `buf` of two (entries ≤ CLUSTER_MAX × CLUSTER_MAX_WARPS).
        let (bar, mine) = unsafe {
            (
                Mbarrier::new(bars.add(buf)),
                slots.add(buf * CLUSTER_MAX * CLUSTER_MAX_WARPS),
            )
        };
        if t == 0 {
            // SAFETY: initialised; one arrival per phase.
            unsafe { bar.arrive_expect_tx(4 * entries) };
        }
        if lane < size {
            // SAFETY: the launch contract; block `lane` of the cluster waits for this word.
            unsafe {
                let v = *input.add(((block * warps + warp) * rounds + k) as usize);
                let dst = cluster::map(mine.add((rank * warps + warp) as usize), lane);
                cluster::store_async_u32(dst, v, bar.remote(lane));
            }
        }
        // SAFETY: initialised; phase `k / 2` of this barrier is the current one.
        if let Err(e) = unsafe { bar.wait_parity((k >> 1) & 1, core::ptr::null(), 1_000_000_000) } {
            code = WaitError::result_code(Err(e));
        }
        if t < entries {
            // SAFETY: landed before the phase completed; `out` as in the contract.
            unsafe {
                *out.add(((block * rounds + k) * entries + t) as usize) =
                    mine.add(t as usize).read_volatile();
            }
        }
        // Every thread has read buffer `buf` before this block sends its next round's words
        // (which peers wait for before they write buffer `buf` again).
        arch::sync_threads();
    }
    if t == 0 {
        // SAFETY: the launch contract.
        unsafe { *status.add(block as usize) = code };
    }
}
