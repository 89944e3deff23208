//! The kernels under the CPU emulator (`symcomm_device::emu`): the example `vector_add` over
//! blocks of 1024 threads, the device-API test kernels with the checks `gpu_device` makes on a
//! GPU (against the same host references, `symcomm_tests::reference`), ranks as concurrent
//! launches sharing a host flat VA, and deliberately broken kernels that the emulator must
//! catch (a harness that can fail).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use symcomm_device::arch;
use symcomm_device::barrier::LsaBarrier;
use symcomm_device::comm::{DevComm, LsaBarrierHandle};
use symcomm_device::coop::Cta;
use symcomm_device::emu::{EmuError, FlatVa, Launch};
use symcomm_device::ll;
use symcomm_device::mem::{self, LoadOrder, Ordering, Scope, StoreOrder, U32x4};
use symcomm_device::prelude::*;
use symcomm_device::shared_array;
use symcomm_device::util::rolling_le;
use symcomm_device::wait::WaitError;
use symcomm_example_kernels::vector_add;
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, Rng, is_permutation, lsa_comm};

/// Runs `kernel` under `l`.
fn run(l: Launch, kernel: impl Fn()) -> Result<(), EmuError> {
    // SAFETY: every kernel closure of this file captures only plain values and raw pointers
    // to buffers that outlive the launch; the kernels synchronise their own accesses.
    unsafe { l.run_unsync(kernel) }
}

/// Panics with the first mismatch and the number of wrong elements (or the lengths).
fn check<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    if let Err(e) = refs::compare(what, got, want) {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// The example kernel.

// ANCHOR: emulate
#[test]
fn vector_add_over_blocks_of_1024_threads_is_exact() {
    let (blocks, threads) = (4u32, 1024u32);
    let n = 2 * (blocks * threads) as usize + 77; // grid-stride: 2+ elements per thread
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let mut c = vec![f32::NAN; n];
    let (pa, pb, pc) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: three buffers of n elements, c disjoint from a and b.
    run(Launch::new(blocks, threads), || unsafe {
        vector_add(pa, pb, pc, n as u64)
    })
    .unwrap();
    let want: Vec<f32> = (0..n).map(|i| a[i] + b[i]).collect();
    check("c = a + b", &c, &want);
}
// ANCHOR_END: emulate

// ---------------------------------------------------------------------------------------
// arch: geometry, shared memory, warp ops, block votes, timers, coops.

#[test]
fn geometry_matches_the_launch() {
    let (blocks, threads) = (3u32, 64u32);
    let n = (blocks * threads) as usize;
    let mut out = vec![u32::MAX; 8 * n];
    let o = out.as_mut_ptr();
    // SAFETY: 8 words per thread.
    run(Launch::new(blocks, threads), || unsafe { k::geometry(o) }).unwrap();
    check(
        "geometry words",
        &out,
        &refs::geometry_words(blocks, threads),
    );
}

#[test]
fn static_and_dynamic_shared_memory_reverse_each_block() {
    let mut rng = Rng(1);
    let (blocks, t) = (4usize, k::STATIC_SMEM_THREADS as usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let mut out = vec![u32::MAX; blocks * t];
    let (i, o) = (input.as_ptr(), out.as_mut_ptr());
    // SAFETY: 256 threads per block, buffers of 256 × blocks.
    run(Launch::new(blocks as u32, t as u32), || unsafe {
        k::smem_static_reverse(i, o)
    })
    .unwrap();
    check("static reverse", &out, &refs::reversed_per_block(&input, t));

    let (blocks, t) = (3usize, 128usize);
    let input: Vec<u32> = (0..blocks * t).map(|_| rng.next_u32()).collect();
    let mut out = vec![u32::MAX; blocks * t];
    let mut sizes = vec![u32::MAX; blocks];
    let (i, o, s) = (input.as_ptr(), out.as_mut_ptr(), sizes.as_mut_ptr());
    // SAFETY: 4 bytes of dynamic shared memory per thread; buffers sized per the contract.
    run(
        Launch::new(blocks as u32, t as u32).shared((t * 4) as u32),
        || unsafe { k::smem_dynamic_reverse(i, o, s) },
    )
    .unwrap();
    check(
        "dynamic reverse",
        &out,
        &refs::reversed_per_block(&input, t),
    );
    check("dynamic_shared_size", &sizes, &vec![(t * 4) as u32; blocks]);
}

#[test]
fn cluster_exchange_moves_every_word_through_peer_shared_memory() {
    let mut rng = Rng(11);
    let (blocks, warps, rounds) = (8usize, 2usize, 3usize);
    for size in [1usize, 2, 4, 8] {
        let input: Vec<u32> = (0..blocks * warps * rounds)
            .map(|_| rng.next_u32())
            .collect();
        let mut out = vec![u32::MAX; blocks * rounds * size * warps];
        let mut geo = vec![u32::MAX; 2 * blocks];
        let mut status = vec![u32::MAX; blocks];
        let (i, o, g, st) = (
            input.as_ptr(),
            out.as_mut_ptr(),
            geo.as_mut_ptr(),
            status.as_mut_ptr(),
        );
        let l = Launch::new(blocks as u32, 32 * warps as u32).cluster(size as u32);
        // SAFETY: clusters of `size` ≤ 8 blocks of `warps` ≤ 8 warps; buffers per the contract.
        run(l, || unsafe {
            k::cluster_exchange(i, o, g, st, rounds as u32)
        })
        .unwrap();
        let want = refs::cluster_exchange(&input, blocks, warps, size, rounds);
        check(&format!("clusters of {size}"), &out, &want);
        let want_geo: Vec<u32> = (0..blocks)
            .flat_map(|b| [(b % size) as u32, size as u32])
            .collect();
        check("rank, size", &geo, &want_geo);
        check("wait codes", &status, &vec![0; blocks]);
    }
}

#[test]
fn warp_ops_match_the_ptx_reference() {
    let mut rng = Rng(2);
    let (blocks, t) = (2usize, 64usize);
    let n = blocks * t;
    let input = refs::warp_ops_input(&mut rng, n);
    let mut out = vec![u32::MAX; k::WARP_OPS_WORDS * n];
    let (i, o) = (input.as_ptr(), out.as_mut_ptr());
    // SAFETY: one input and 12 output words per thread.
    run(Launch::new(blocks as u32, t as u32), || unsafe {
        k::warp_ops(i, o)
    })
    .unwrap();
    check("warp op words", &out, &refs::warp_ops_words(&input));
}

#[test]
fn block_votes_and_named_barriers_reduce_over_the_block() {
    let mut rng = Rng(3);
    let (blocks, t) = (2usize, 128usize);
    let input = refs::block_votes_input(&mut rng, blocks * t);
    let mut out = vec![u32::MAX; 3 * blocks];
    let (i, o) = (input.as_ptr(), out.as_mut_ptr());
    // SAFETY: 128-thread blocks; 3 output words per block.
    run(Launch::new(blocks as u32, t as u32), || unsafe {
        k::block_votes(i, o)
    })
    .unwrap();
    check(
        "count/or/named-or",
        &out,
        &refs::block_votes_words(&input, t),
    );
}

#[test]
fn timers_advance_in_real_time() {
    let n = 64usize;
    let mut out = vec![u64::MAX; 4 * n];
    let o = out.as_mut_ptr();
    let t = Instant::now();
    // SAFETY: 4 u64 per thread.
    run(Launch::new(2, 32), || unsafe { k::timers(o) }).unwrap();
    let host_ns = t.elapsed().as_nanos() as u64;
    for i in 0..n {
        let [t0, t1, c0, c1] = [out[4 * i], out[4 * i + 1], out[4 * i + 2], out[4 * i + 3]];
        assert!(
            t1 > t0 && c1 > c0 && t1 - t0 <= host_ns,
            "thread {i}: {t0} -> {t1}, {c0} -> {c1}"
        );
    }
}

#[test]
fn cooperative_groups_report_ranks_sizes_and_votes() {
    let (threads, words) = (refs::COOP_PROBE_THREADS, refs::COOP_PROBE_WORDS);
    let mut out = vec![u32::MAX; words * threads as usize];
    let o = out.as_mut_ptr();
    // SAFETY: one block of 128 threads, 20 words each.
    run(Launch::new(1, threads), || unsafe { k::coop_probe(o) }).unwrap();
    check("rank/size/any words", &out, &refs::coop_probe_words());
}

// ---------------------------------------------------------------------------------------
// mem: atomics with exact counts, CAS chains, message passing, vectors, constant loads.

/// Runs the counter kernel `kernel` (`(counter, olds)`: every thread adds one to a zeroed
/// counter and records the value it replaced) on `blocks × t` threads and asserts that the
/// count is exact and the replaced values are a permutation of `0..threads`.
fn counts_exactly(what: &str, (blocks, t): (u32, u32), kernel: unsafe fn(*mut u32, *mut u32)) {
    let n = (blocks * t) as usize;
    let mut counter = 0u32;
    let mut olds = vec![u32::MAX; n];
    let (c, o) = (&raw mut counter, olds.as_mut_ptr());
    // SAFETY: a zeroed counter and one old value per thread, as the counter kernels ask.
    run(Launch::new(blocks, t), || unsafe { kernel(c, o) }).unwrap();
    assert_eq!(counter as usize, n, "{what}: count");
    assert!(
        is_permutation(olds.iter().map(|&x| u64::from(x)).collect(), n),
        "{what}: replaced values"
    );
}

#[test]
fn atomics_count_exactly_across_blocks() {
    let (blocks, t) = (8u32, 256u32);
    let n = (blocks * t) as usize;
    counts_exactly("atomic_add_acq_rel", (blocks, t), k::atomic_add_acq_rel);

    let (mut c32, mut c64, mut c64b) = (0u32, 0u64, 0u64);
    let (a, b, c) = (&raw mut c32, &raw mut c64, &raw mut c64b);
    // SAFETY: three zeroed counters.
    run(Launch::new(blocks, t), || unsafe {
        k::red_add_release(a, b, c)
    })
    .unwrap();
    let n64 = n as u64;
    assert_eq!([u64::from(c32), c64, c64b], refs::red_add_totals(n64));

    counts_exactly("CAS loop", (blocks, t), k::atomic_cas_counter);

    let (mut s32, mut s64) = (0u32, 0u64);
    let (mut o32, mut o64) = (vec![u32::MAX; n], vec![u64::MAX; n]);
    let (a, b, c, d) = (
        &raw mut s32,
        o32.as_mut_ptr(),
        &raw mut s64,
        o64.as_mut_ptr(),
    );
    // SAFETY: zeroed slots, one old value per thread.
    run(Launch::new(blocks, t), || unsafe {
        k::atomic_exch_chain(a, b, c, d)
    })
    .unwrap();
    let mut v32: Vec<u64> = o32.iter().map(|&x| u64::from(x)).collect();
    v32.push(u64::from(s32));
    o64.push(s64);
    assert!(is_permutation(v32, n + 1), "32-bit exchange chain");
    assert!(is_permutation(o64, n + 1), "64-bit exchange chain");
}

#[test]
fn message_passing_between_blocks_delivers_the_payload() {
    let n = 64usize;
    let mut data = vec![u32::MAX; 2 * n];
    let mut flags = [0u32; 2];
    let mut out = vec![u32::MAX; 2 + 2 * n];
    let (d, f, o) = (data.as_mut_ptr(), flags.as_mut_ptr(), out.as_mut_ptr());
    // SAFETY: two blocks; buffers sized per the contract.
    run(Launch::new(2, 32), || unsafe {
        k::message_pass(d, f, o, n as u32, 2_000_000_000)
    })
    .unwrap();
    check("codes + payload", &out, &refs::message_pass_words(n));
}

#[test]
fn vectors_and_constant_loads_copy_bit_exactly() {
    let mut rng = Rng(4);
    let n = 3000usize;
    let src: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let mut a = vec![U32x4([u32::MAX; 4]); n];
    let mut b = vec![mem::F32x4([f32::NAN; 4]); n];
    let mut c = vec![mem::U64x2([u64::MAX; 2]); n];
    let (s, pa, pb, pc) = (src.as_ptr(), a.as_mut_ptr(), b.as_mut_ptr(), c.as_mut_ptr());
    // SAFETY: n vectors everywhere.
    run(Launch::new(6, 128), || unsafe {
        k::vector_roundtrip(s, pa, pb, pc, n as u64)
    })
    .unwrap();
    check("v4.u32", &a, &src);
    let b: Vec<U32x4> = b.into_iter().map(U32x4::from).collect();
    check("v4.f32 (bits)", &b, &src);
    let c: Vec<U32x4> = c.into_iter().map(U32x4::from).collect();
    check("v2.u64", &c, &src);

    let w = refs::sample_window(&mut rng);
    let mut out = vec![U32x4([u32::MAX; 4]); n];
    let mut wout = [u64::MAX; 9];
    let (po, pw, pwo) = (
        out.as_mut_ptr(),
        WindowHandle::from_ptr(&raw const w),
        wout.as_mut_ptr(),
    );
    // SAFETY: n vectors; a handle of a live descriptor and 72 bytes of output.
    run(Launch::new(4, 128), || unsafe {
        k::load_const_copy(s, po, n as u64, pw, pwo)
    })
    .unwrap();
    check("ld.global.nc.v4", &out, &src);
    check("Window via load_const", &wout, &refs::window_words(&w));
}

#[test]
fn predicated_stores_write_only_their_bytes_and_only_when_asked() {
    let mut rng = Rng(5);
    let n = 1000usize;
    let src: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    #[repr(C, align(16))]
    struct Slot([u8; 16]);
    let mut out: Vec<Slot> = (0..n).map(|_| Slot([0xee; 16])).collect();
    let (s, o) = (src.as_ptr(), out.as_mut_ptr().cast::<u8>());
    // SAFETY: n values; n 16-byte aligned slots.
    run(Launch::new(3, 64), || unsafe {
        k::store_low_if_slots(s, o, n as u64)
    })
    .unwrap();
    let got: Vec<u8> = out.iter().flat_map(|x| x.0).collect();
    check("store_low_if", &got, &refs::store_low_if_slots(&src, 0xee));
}

// ---------------------------------------------------------------------------------------
// util / team / reduce: pure math in many threads.

#[test]
fn division_team_and_reduction_kernels_match_the_host() {
    let mut rng = Rng(5);
    let (mut xs, mut ds) = (vec![], vec![]);
    for d in (1u32..=1024)
        .step_by(7)
        .chain([65_535, 65_536, 1 << 31, u32::MAX])
    {
        for x in [0, 1, d - 1, d, d.wrapping_add(1), u32::MAX, rng.next_u32()] {
            xs.push(x);
            ds.push(d);
        }
    }
    let n = xs.len();
    let (mut q, mut r) = (vec![u32::MAX; n], vec![u32::MAX; n]);
    let (px, pd, pq, pr) = (xs.as_ptr(), ds.as_ptr(), q.as_mut_ptr(), r.as_mut_ptr());
    // SAFETY: n elements everywhere, divisors ≥ 1.
    run(Launch::new(4, 128), || unsafe {
        k::div_fast(px, pd, pq, pr, n as u64)
    })
    .unwrap();
    let (wq, wr) = refs::div_words(&xs, &ds);
    check("quotients", &q, &wq);
    check("remainders", &r, &wr);

    let comm = DevComm::new(5, 8, 1, 4);
    let mut out = [i32::MAX; k::TEAM_PROBE_WORDS];
    let o = out.as_mut_ptr();
    // SAFETY: 64 words of output.
    run(Launch::new(2, 64), || unsafe { k::team_probe(comm, o) }).unwrap();
    check("team facts", &out, &refs::team_probe_values(&comm));

    let n = 500usize;
    let a: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let b: Vec<U32x4> = (0..n).map(|_| rng.next_u32x4()).collect();
    let mut out = vec![U32x4([u32::MAX; 4]); k::REDUCE_OPS * n];
    let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
    // SAFETY: n vector pairs, 8n outputs.
    run(Launch::new(4, 64), || unsafe {
        k::reduce_packs(pa, pb, po, n as u64)
    })
    .unwrap();
    check("packed reductions", &out, &refs::reduce_packs_words(&a, &b));
}

// ---------------------------------------------------------------------------------------
// ll: a round trip between two blocks.

#[test]
fn ll_lines_round_trip_and_an_unwritten_line_times_out() {
    let mut rng = Rng(6);
    let n = 256usize;
    let (epoch, mut lines, data) = refs::ll_inputs(&mut rng, n);
    let stale = epoch - 1;
    let mut got = vec![u64::MAX; n];
    let mut codes = vec![u32::MAX; n + 1];
    let (pl, pd, pg, pc) = (
        lines.as_mut_ptr().cast::<ll::Line>(),
        data.as_ptr(),
        got.as_mut_ptr(),
        codes.as_mut_ptr(),
    );
    // SAFETY: n + 1 lines, n payloads, n + 1 codes.
    run(Launch::new(2, 128), || unsafe {
        k::ll_roundtrip(pl, pd, pg, pc, n as u32, epoch, 2_000_000_000, 1_000_000)
    })
    .unwrap();
    check("payloads", &got, &data);
    check(
        "result codes (last: unwritten line times out)",
        &codes,
        &refs::ll_codes(n),
    );
    assert!(rolling_le(stale, epoch));
}

// ---------------------------------------------------------------------------------------
// barrier: a team of one, ranks in one launch, ranks as concurrent launches, timeout, abort.

#[test]
fn a_team_of_one_passes_every_round_and_persists_epochs() {
    let (blocks, rounds) = (4u32, 5u32);
    let mut res = vec![0u32; LsaBarrierHandle::buffer_bytes(blocks, 1) / 4];
    let comm = lsa_comm(res.as_mut_ptr() as u64, 1, 0, 1, blocks);
    for launch in 1..=2u32 {
        let mut out = vec![u32::MAX; 2 * blocks as usize];
        let o = out.as_mut_ptr();
        // SAFETY: `blocks` barriers in a zeroed buffer; 2 words per block.
        run(Launch::new(blocks, 128), || unsafe {
            k::barrier_rounds(comm, o, rounds, 1_000_000_000)
        })
        .unwrap();
        check(
            &format!("launch {launch}: codes and epochs"),
            &out,
            &refs::barrier_rounds_words(blocks, launch, rounds),
        );
    }
    check(
        "persisted unicast epochs",
        &res[blocks as usize..2 * blocks as usize],
        &vec![2 * rounds; blocks as usize],
    );
}

/// Word `index` of rank `rank`'s slot of `va`.
fn word(va: &FlatVa, rank: usize, index: usize) -> u32 {
    // SAFETY: inside slot `rank`'s open bytes (the callers read the first words).
    unsafe { (va.slot(rank) as *const u32).add(index).read_volatile() }
}

#[test]
fn two_ranks_in_one_launch_exchange_data_through_the_flat_va() {
    let va = FlatVa::new(2, 1 << 16).unwrap();
    let comm = lsa_comm(va.base(), 1, 0, 2, 1);
    let rounds = 50u32;
    for (launch, coop_kind) in [0u32, 1].into_iter().enumerate() {
        let mut out = vec![u32::MAX; 2 * k::BARRIER_PAIR_WORDS];
        let o = out.as_mut_ptr();
        // SAFETY: the 2-slot flat VA with one LSA barrier; data at 4096 leaves room for 128
        // words; two blocks; 8 output words.
        run(Launch::new(2, 128), || unsafe {
            k::barrier_pair(comm, o, rounds, 4096, 2_000_000_000, coop_kind)
        })
        .unwrap();
        check(
            &format!("coop {coop_kind}: [code, mismatch, epoch, rounds] per rank"),
            &out,
            &refs::barrier_pair_words(launch as u32, rounds),
        );
    }
    assert_eq!([word(&va, 0, 1), word(&va, 1, 1)], [4 * rounds, 4 * rounds]);
}

/// The payload rank `r` sends to its ring successor in `round`, for thread `t` of block `b`.
fn ring_payload(r: i32, round: u32, b: u32, t: u32) -> u32 {
    (r as u32) << 24 ^ round << 14 ^ b << 10 ^ t ^ 0x5000_0000
}

/// A host-only kernel: a ring exchange between the LSA ranks of `comm`. Every block uses LSA
/// barrier `block_idx`; per round, thread `t` of block `b` writes its payload into word
/// `b * block_dim + t` of its successor's data area (byte `data_offset` of the peer's resource
/// window), `sync(AcqRel)`, checks its own data area holds its predecessor's payload,
/// `sync(Release)`. `out[0]` += mismatches, `out[1]` |= wait result codes.
///
/// # Safety
/// `comm` describes a flat VA whose slots hold the LSA barriers (zeroed) and the data areas;
/// every rank launches it with the same grid; `out` holds 2 words shared by all ranks.
#[kernel]
unsafe fn ring_exchange(comm: DevComm, data_offset: u64, rounds: u32, timeout: u64, out: *mut u32) {
    let cta = Cta::new();
    let (b, t, n) = (block_idx().x, thread_idx().x, comm.lsa_size);
    let me = comm.lsa_rank;
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let word = (b * block_dim().x + t) as usize;
    let theirs = comm
        .resource_lsa_ptr(0, next)
        .wrapping_add(data_offset as usize)
        .cast::<u32>()
        .wrapping_add(word);
    let mine = comm
        .resource_lsa_ptr(0, me)
        .wrapping_add(data_offset as usize)
        .cast::<u32>()
        .wrapping_add(word);
    // SAFETY: the launch contract.
    let mut bar = unsafe { LsaBarrier::new(&cta, &comm, b) };
    let (mut bad, mut code) = (0, 0);
    for round in 0..rounds {
        // SAFETY: the successor's data area (launch contract).
        unsafe {
            mem::store(
                theirs,
                ring_payload(me, round, b, t),
                StoreOrder::Weak,
                Scope::Sys,
            )
        };
        let r = bar.sync_timeout(&cta, Ordering::AcqRel, timeout);
        code |= WaitError::result_code(r);
        // SAFETY: our own data area.
        let seen = unsafe { mem::load(mine, LoadOrder::Weak, Scope::Sys) };
        bad += u32::from(seen != ring_payload(prev, round, b, t));
        code |= WaitError::result_code(bar.sync_timeout(&cta, Ordering::Release, timeout));
    }
    bar.finish(&cta);
    // SAFETY: the shared output words.
    unsafe {
        mem::atomic_add(out, bad, Ordering::Relaxed, Scope::Sys);
        mem::atomic_add(out.add(1), code, Ordering::Relaxed, Scope::Sys);
    }
}

/// `n_ranks` concurrent launches (one host thread each) of `ring_exchange`: asserts that no
/// payload was wrong and no wait failed, and that every rank's block-0 barrier persisted its
/// epoch (two syncs a round); returns the time the launches took.
fn ring(n_ranks: usize, blocks: u32, threads: u32, rounds: u32) -> Duration {
    let va = FlatVa::new(n_ranks, 1 << 20).unwrap();
    let data_offset = 64 * 1024u64;
    assert!(LsaBarrierHandle::buffer_bytes(blocks, n_ranks as u32) <= data_offset as usize);
    let mut out = [0u32; 2];
    let o = out.as_mut_ptr() as usize;
    let errors = Mutex::new(vec![]);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for r in 0..n_ranks {
            let comm = lsa_comm(va.base(), 1, r as i32, n_ranks as i32, blocks);
            let errors = &errors;
            s.spawn(move || {
                let o = o as *mut u32;
                // SAFETY: every rank runs the same grid over the zeroed flat VA.
                let res = run(Launch::new(blocks, threads), || unsafe {
                    ring_exchange(comm, data_offset, rounds, 20_000_000_000, o)
                });
                if let Err(e) = res {
                    errors.lock().unwrap().push(format!("rank {r}: {e}"));
                }
            });
        }
    });
    let dt = t0.elapsed();
    let errors = errors.into_inner().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let epochs: Vec<u32> = (0..n_ranks)
        .map(|r| word(&va, r, blocks as usize))
        .collect();
    assert_eq!(out, [0, 0], "[mismatches, wait codes]");
    assert_eq!(epochs, vec![2 * rounds; n_ranks]);
    dt
}

#[test]
fn ranks_as_concurrent_launches_pass_a_ring_through_lsa_barriers() {
    ring(2, 2, 64, 10);
}

#[test]
fn eight_ranks_of_four_blocks_of_256_threads_emulate_in_seconds() {
    let rounds = 8;
    let dt = ring(8, 4, 256, rounds);
    println!(
        "emulated 8 ranks × 4 blocks × 256 threads ({} OS threads), {rounds} ring rounds of \
         2 LSA barrier syncs each: {:.2} s",
        8 * 4 * 256,
        dt.as_secs_f64()
    );
}

#[test]
fn a_missing_peer_times_out_and_a_raised_abort_flag_ends_the_wait() {
    let mut res = vec![0u32; LsaBarrierHandle::buffer_bytes(1, 2) / 4];
    let mut comm = lsa_comm(res.as_mut_ptr() as u64, 0, 0, 2, 1);
    let timeout = 50_000_000u64;
    let mut out = [u32::MAX; 3];
    let o = out.as_mut_ptr();
    // SAFETY: one LSA barrier, nobody plays rank 1; 3 output words.
    run(Launch::new(1, 64), || unsafe {
        k::barrier_lonely(comm, o, timeout)
    })
    .unwrap();
    let dt = refs::lonely_elapsed_ns(&out);
    assert_eq!(out[0], 1, "timeout code");
    assert!(dt >= timeout && dt < 40 * timeout, "waited {dt} ns");

    res.iter_mut().for_each(|w| *w = 0);
    let flag = 1u32;
    comm.abort_flag = &raw const flag as u64;
    // SAFETY: as above, with a raised abort flag.
    run(Launch::new(1, 64), || unsafe {
        k::barrier_lonely(comm, o, 10_000_000_000)
    })
    .unwrap();
    let dt = refs::lonely_elapsed_ns(&out);
    assert_eq!(out[0], 2, "aborted code");
    assert!(dt < 1_000_000_000, "abort took {dt} ns");
}

// ---------------------------------------------------------------------------------------
// The harness can fail: broken kernels that the emulator must catch.

/// `smem_static_reverse` without its `sync_threads`: threads read slots of the tile that
/// other threads may not have written yet.
///
/// # Safety
/// As `smem_static_reverse`.
#[kernel]
unsafe fn broken_missing_barrier(input: *const u32, out: *mut u32) {
    let tile: *mut u32 = shared_array!(BROKEN_REVERSE_TILE: [u32; 256]);
    let t = thread_idx().x as usize;
    let base = block_idx().x as usize * 256;
    // SAFETY: t < 256.
    unsafe { tile.add(t).write_volatile(*input.add(base + t)) };
    // (missing: arch::sync_threads())
    // SAFETY: t < 256.
    unsafe { *out.add(base + t) = tile.add(255 - t).read_volatile() };
}

/// `vector_add` whose grid-stride loop starts one block too far (`block_idx + 1`): the first
/// block's elements are never written, and it stays in bounds (`i < n`).
///
/// # Safety
/// As `vector_add`.
#[kernel]
unsafe fn broken_off_by_one(a: *const f32, b: *const f32, c: *mut f32, n: u64) {
    let stride = u64::from(block_dim().x) * u64::from(grid_dim().x);
    let mut i = u64::from(block_idx().x + 1) * u64::from(block_dim().x) + u64::from(thread_idx().x);
    while i < n {
        // SAFETY: i < n.
        unsafe { *c.add(i as usize) = *a.add(i as usize) + *b.add(i as usize) };
        i += stride;
    }
}

/// `sync_threads` inside a branch that only the even warps take.
#[kernel]
fn broken_divergent_barrier() {
    if arch::warp_idx().is_multiple_of(2) {
        arch::sync_threads();
    }
}

#[test]
fn a_missing_barrier_gives_wrong_results_under_emulation() {
    let (blocks, t) = (2usize, 256usize);
    let input: Vec<u32> = (0..blocks * t).map(|i| i as u32 | 0x8000_0000).collect();
    let want = refs::reversed_per_block(&input, t);
    // A race: usually the first attempt shows it (thread 0 reads slot 255 long before the
    // thread that writes it starts); a few attempts make the test robust.
    let caught = (0..5).any(|_| {
        let mut out = vec![0u32; blocks * t];
        let (i, o) = (input.as_ptr(), out.as_mut_ptr());
        // SAFETY: as smem_static_reverse.
        run(Launch::new(blocks as u32, t as u32), || unsafe {
            broken_missing_barrier(i, o)
        })
        .unwrap();
        out != want
    });
    assert!(
        caught,
        "five runs without the barrier all gave the right result"
    );
}

#[test]
fn an_off_by_one_index_gives_wrong_results_under_emulation() {
    let n = 3000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b = vec![1.0f32; n];
    let mut c = vec![0.0f32; n];
    let (pa, pb, pc) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    // SAFETY: as vector_add.
    run(Launch::new(3, 256), || unsafe {
        broken_off_by_one(pa, pb, pc, n as u64)
    })
    .unwrap();
    let wrong = (0..n).filter(|&i| c[i] != a[i] + b[i]).count();
    assert_eq!(wrong, 256, "exactly the first block's elements are missing");
}

#[test]
fn a_divergent_barrier_is_reported_not_hung() {
    let e = run(Launch::new(2, 128), broken_divergent_barrier).unwrap_err();
    assert!(matches!(e, EmuError::Deadlock { .. }), "{e}");
}
