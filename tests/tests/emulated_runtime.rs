//! Kernels against the real host runtime on the emulated backend: `SymmetricMemory`,
//! `register_window`, `DevComm::create` (resource window, barriers, abort flag, LSA multicast
//! range), with ranks as threads of this process and kernels on the CPU emulator. The
//! multi-GPU checks of `gpu_symmem` (barrier stress over a registered window), the multimem
//! barrier and multimem loads/stores, with 2, 4 and 8 ranks.

use std::time::{Duration, Instant};

use symcomm::backend::emulated_launch;
use symcomm::cuda::VmmBuffer;
use symcomm::ranks;
use symcomm::{Communicator, DevComm, Requirements, Result, SymmetricMemory};
use symcomm_device::barrier::LsaBarrier;
use symcomm_device::comm::DevComm as RawDevComm;
use symcomm_device::coop::Cta;
use symcomm_device::mem::{self, Ordering, Scope};
use symcomm_device::multimem;
use symcomm_device::prelude::*;
use symcomm_device::wait::WaitError;
use symcomm_test_kernels::{STRESS_OUT_WORDS, barrier_stress};

const BLOCKS: u32 = 2;
const THREADS: u32 = 64;
const TIMEOUT_NS: u64 = 20_000_000_000;

/// Runs `f` on `n` in-process ranks of an emulated job; panics naming the failed rank.
fn on_ranks<T: Send>(n: usize, f: impl Fn(Communicator) -> Result<T> + Sync) -> Vec<T> {
    ranks::all_ok(ranks::run_emulated(n, f)).unwrap_or_else(|e| panic!("{n} ranks: {e}"))
}

/// `gpu_symmem`'s barrier stress on one rank: returns `[mismatches, codes, rounds]`.
fn stress(comm: Communicator, iters: u32) -> Result<Vec<u32>> {
    let words = 2 * (BLOCKS * THREADS) as usize;
    let mem = SymmetricMemory::alloc(&comm, words * 4)?;
    let win = comm.register_window(&mem)?;
    let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(BLOCKS))?;
    let out = VmmBuffer::new(comm.device() as i32, STRESS_OUT_WORDS * 4)?;
    out.fill_bytes(0)?;
    let (raw, w, o) = (dev.raw(), win.handle(), out.as_mut_ptr());
    // SAFETY: BLOCKS barriers, a window of 2 × grid × block words, 3 output words; every rank
    // launches the same shape.
    unsafe {
        emulated_launch(BLOCKS, THREADS, || {
            barrier_stress(raw, w, iters, TIMEOUT_NS, o)
        })?
    };
    let mut got = vec![0u32; STRESS_OUT_WORDS];
    out.copy_to_host(&mut got)?;
    comm.bootstrap().barrier()?;
    Ok(got)
}

#[test]
fn barrier_stress_over_a_registered_window_passes_with_2_4_and_8_ranks() {
    let iters = 10;
    for n in [2, 4, 8] {
        let t0 = Instant::now();
        let outs = on_ranks(n, |c| stress(c, iters));
        for (r, out) in outs.iter().enumerate() {
            assert_eq!(
                out,
                &[0, 0, BLOCKS * iters],
                "{n} ranks, rank {r}: [mismatches, codes, rounds]"
            );
        }
        println!(
            "barrier stress, {n} emulated ranks: {:.2} s",
            t0.elapsed().as_secs_f64()
        );
    }
}

/// Multimem round trip (host-only kernel): every thread stores `rank + 1` into word
/// `block × block_dim + thread` of its own copy, syncs on a **multimem** barrier, reads the sum
/// over the team through the multicast address (`ld_reduce`), syncs, and thread 0 of block 0 of
/// LSA rank 0 stores `77` to word `len` of every copy (`multimem.st`), then syncs again.
/// `out[0]` += wrong sums, `out[1]` += wait codes.
///
/// # Safety
/// `comm` has an LSA multicast range and `grid` barriers; `win` holds `grid × block + 1` words;
/// every rank launches the same shape; `out` holds 2 words.
#[kernel]
unsafe fn multimem_round_trip(comm: RawDevComm, win: WindowHandle, out: *mut u32) {
    let cta = Cta::new();
    let (b, t) = (block_idx().x, thread_idx().x);
    let word = (b * block_dim().x + t) as usize;
    let len = (grid_dim().x * block_dim().x) as usize;
    // SAFETY: one session per block on every rank (launch contract).
    let mut bar = unsafe { LsaBarrier::new_multimem(&cta, &comm, b) };
    // SAFETY: inside the window (launch contract).
    unsafe {
        win.get()
            .local_ptr(word * 4)
            .cast::<u32>()
            .write_volatile(comm.lsa_rank as u32 + 1)
    };
    let mut code = WaitError::result_code(bar.sync_timeout(&cta, Ordering::AcqRel, TIMEOUT_NS));
    // SAFETY: the multicast address of the same word.
    let sum = unsafe {
        multimem::ld_reduce_add_u32(win.get().multimem_ptr(word * 4, &comm).cast::<u32>())
    };
    let n = comm.lsa_size as u32;
    let bad = u32::from(sum != n * (n + 1) / 2);
    code |= WaitError::result_code(bar.sync_timeout(&cta, Ordering::AcqRel, TIMEOUT_NS));
    if comm.lsa_rank == 0 && b == 0 && t == 0 {
        // SAFETY: word `len` of the window, through its multicast address.
        unsafe { multimem::st_u32(win.get().multimem_ptr(len * 4, &comm).cast::<u32>(), 77) };
    }
    code |= WaitError::result_code(bar.sync_timeout(&cta, Ordering::AcqRel, TIMEOUT_NS));
    bar.finish(&cta);
    // SAFETY: `out` holds 2 words.
    unsafe {
        mem::red_add(out, bad, Ordering::Relaxed, Scope::Gpu);
        mem::red_add(out.add(1), code, Ordering::Relaxed, Scope::Gpu);
    }
}

/// One rank of the multimem check: `[wrong sums, codes, the word rank 0 multicast]`.
fn multimem_rank(comm: Communicator) -> Result<Vec<u32>> {
    let len = (BLOCKS * THREADS) as usize;
    let mem = SymmetricMemory::alloc(&comm, (len + 1) * 4)?;
    mem.buffer().fill_bytes(0)?;
    let win = comm.register_window(&mem)?;
    let dev = DevComm::create(
        &comm,
        Requirements::new().lsa_barriers(BLOCKS).lsa_multimem(true),
    )?;
    let out = VmmBuffer::new(comm.device() as i32, 8)?;
    out.fill_bytes(0)?;
    let (raw, w, o) = (dev.raw(), win.handle(), out.as_mut_ptr());
    // SAFETY: the kernel's contract holds (multicast range, BLOCKS barriers, len + 1 words).
    unsafe { emulated_launch(BLOCKS, THREADS, || multimem_round_trip(raw, w, o))? };
    let mut got = vec![0u32; 2];
    out.copy_to_host(&mut got)?;
    let mut words = vec![0u32; len + 1];
    mem.buffer().copy_to_host(&mut words)?;
    got.push(words[len]);
    comm.bootstrap().barrier()?;
    Ok(got)
}

#[test]
fn multimem_barriers_loads_and_stores_reach_every_lsa_peer_with_2_4_and_8_ranks() {
    for n in [2, 4, 8] {
        let outs = on_ranks(n, multimem_rank);
        assert_eq!(
            outs,
            vec![vec![0, 0, 77]; n],
            "{n} ranks: [wrong sums, codes, st]"
        );
    }
}

#[test]
fn raising_the_abort_flag_releases_a_barrier_a_peer_never_joins() {
    let outs = on_ranks(2, |comm| {
        let mem = SymmetricMemory::alloc(&comm, 4096)?;
        let _win = comm.register_window(&mem)?;
        let dev = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
        let out = VmmBuffer::new(comm.device() as i32, 8)?;
        out.fill_bytes(0xff)?;
        if comm.rank() == 1 {
            // Never joins; stays until rank 0 is done.
            comm.bootstrap().barrier()?;
            return Ok(vec![]);
        }
        let (raw, o) = (dev.raw(), out.as_mut_ptr());
        let t0 = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                dev.abort();
            });
            // SAFETY: one barrier, 2 output words; the peer's absence is the point.
            unsafe {
                emulated_launch(1, 32, || {
                    symcomm_test_kernels::barrier_timeout_probe(raw, TIMEOUT_NS, o)
                })
            }
        })?;
        let waited = t0.elapsed();
        assert!(dev.is_aborted());
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        let mut got = vec![0u32; 2];
        out.copy_to_host(&mut got)?;
        comm.bootstrap().barrier()?;
        Ok(got)
    });
    assert_eq!(
        outs[0],
        [2, 1],
        "[result code (2 = aborted), got past the wait]"
    );
}
