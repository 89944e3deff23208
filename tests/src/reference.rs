//! Host references of the test kernels (`tests/kernels`), shared by the GPU program
//! `gpu_device` and the CPU emulator tests (`tests/emulator.rs`): the inputs both build, the
//! expected outputs of each kernel for given inputs, and the comparison both report with.
//!
//! The references are computed independently of the kernels' own code: where a kernel writes
//! the result of a device-crate function (team math, window arithmetic, packed reductions),
//! the reference calls the same function on the CPU in its own copy of the sequence, so a
//! change to what a kernel writes shows up as a mismatch. Only formulas both sides must
//! agree on by definition (a payload the kernel sends) come from the kernels crate.

use std::fmt::Debug;

use symcomm_device::comm::{DevComm, LsaBarrierHandle, ResourceWindow};
use symcomm_device::mem::U32x4;
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Bf16, F16, Max, Min, Prod, Sum, reduce_pack};
use symcomm_device::team::Team;
use symcomm_device::window::{Window, WindowHandle, add4g};
use symcomm_test_kernels as k;

// ---------------------------------------------------------------------------------------
// Inputs and comparison.

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The high 32 bits of the next 64.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A vector of four [`next_u32`](Self::next_u32), in order.
    pub fn next_u32x4(&mut self) -> U32x4 {
        U32x4([0; 4].map(|_| self.next_u32()))
    }
}

/// `Err` naming `what` with the first mismatch and the number of wrong elements (or the
/// lengths, when they differ); `Ok` when `got == want` element by element.
pub fn compare<T: PartialEq + Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    let wrong: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    match wrong.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{what}: {} of {} wrong, first at {i}: got {:?}, expected {:?}",
            wrong.len(),
            got.len(),
            got[i],
            want[i]
        )),
    }
}

/// Sorted copy equals `0..n` (as u64).
pub fn is_permutation(mut v: Vec<u64>, n: usize) -> bool {
    v.sort_unstable();
    v.len() == n && v.iter().enumerate().all(|(i, &x)| x == i as u64)
}

/// A device communicator of `n_ranks` LSA ranks (world = LSA) seen from `rank`, whose
/// resource window is the flat VA at `base` with `stride4g`, holding `n_barriers` LSA
/// barriers at its start.
pub fn lsa_comm(base: u64, stride4g: u32, rank: i32, n_ranks: i32, n_barriers: u32) -> DevComm {
    let mut comm = DevComm::new(rank, n_ranks, rank, n_ranks);
    comm.resource = ResourceWindow {
        lsa_flat_base: base,
        stride4g,
        mc_offset4k: 0,
    };
    comm.lsa_barrier = LsaBarrierHandle {
        buf_handle: 0,
        n_barriers: n_barriers as i32,
    };
    comm
}

// ---------------------------------------------------------------------------------------
// arch: geometry, shared memory, warp ops, block votes, coops.

/// What `geometry` writes for a 1-D launch of `blocks × threads`.
pub fn geometry_words(blocks: u32, threads: u32) -> Vec<u32> {
    (0..blocks * threads)
        .flat_map(|i| [i % threads, 0, 0, i / threads, 0, 0, threads, blocks])
        .collect()
}

/// `input` with each block of `t` elements reversed (`smem_static_reverse`,
/// `smem_dynamic_reverse`).
pub fn reversed_per_block(input: &[u32], t: usize) -> Vec<u32> {
    (0..input.len())
        .map(|i| input[(i / t) * t + (t - 1 - i % t)])
        .collect()
}

/// What `cluster_exchange` writes to `out` for `input` (`blocks × warps × rounds` words) on
/// `blocks` blocks of `warps` warps in clusters of `size`: for block `b`, round `k`, slot
/// `r × warps + w` holds the word warp `w` of block `r` of `b`'s cluster sent in round `k`.
pub fn cluster_exchange(
    input: &[u32],
    blocks: usize,
    warps: usize,
    size: usize,
    rounds: usize,
) -> Vec<u32> {
    let mut out = Vec::with_capacity(blocks * rounds * size * warps);
    for b in 0..blocks {
        let first = b - b % size;
        for k in 0..rounds {
            for r in 0..size {
                for w in 0..warps {
                    out.push(input[((first + r) * warps + w) * rounds + k]);
                }
            }
        }
    }
    out
}

/// The input of `warp_ops` for `n` threads (n ≥ 71): random words with bit 8 set, a zero at
/// 33 (warp 1: `vote_all(v != 0)` false) and the only multiple of 97 at 70 (warp 2:
/// `vote_any(v % 97 == 0)` true).
pub fn warp_ops_input(rng: &mut Rng, n: usize) -> Vec<u32> {
    let mut input: Vec<u32> = (0..n).map(|_| rng.next_u32() | 0x100).collect();
    input[33] = 0;
    input[70] = 97 * 1234;
    for (i, v) in input.iter_mut().enumerate() {
        if i != 70 && i != 33 && *v % 97 == 0 {
            *v += 1;
        }
    }
    input
}

/// What `warp_ops` writes for `input` (whole warps): 12 words per thread.
pub fn warp_ops_words(input: &[u32]) -> Vec<u32> {
    let mut want = Vec::with_capacity(k::WARP_OPS_WORDS * input.len());
    for i in 0..input.len() {
        let (lane, w0) = (i % 32, i - i % 32);
        let warp = &input[w0..w0 + 32];
        let v = input[i];
        let j = i ^ 5;
        let ballot = (0..32)
            .filter(|&l| warp[l] & 1 == 1)
            .fold(0u32, |m, l| m | 1 << l);
        want.extend([
            lane as u32,
            warp[0],
            input[i ^ 1],
            if lane == 0 { v } else { input[i - 1] },
            if lane == 31 { v } else { input[i + 1] },
            ballot,
            u32::from(warp.iter().all(|&x| x != 0)),
            u32::from(warp.iter().any(|&x| x % 97 == 0)),
            (1u32 << lane) - 1,
            !input[j],
            input[j],
            u32::MAX,
        ]);
    }
    want
}

/// The input of `block_votes` for `n` threads (n > 40): never 7 but at 40 (block 0, warp 1:
/// inside the 2-warp named-barrier span), odd on every third thread.
pub fn block_votes_input(rng: &mut Rng, n: usize) -> Vec<u32> {
    let mut input: Vec<u32> = (0..n).map(|_| rng.next_u32() & !0xf | 0x10).collect();
    for (i, v) in input.iter_mut().enumerate() {
        *v |= (i % 3 == 0) as u32;
    }
    input[40] = 7;
    input
}

/// What `block_votes` writes for `input` in blocks of `t` threads: per block the count of odd
/// words, whether any is 7, and 64 if any of the first 64 is 7 (else 0).
pub fn block_votes_words(input: &[u32], t: usize) -> Vec<u32> {
    let mut want = vec![];
    for chunk in input.chunks(t) {
        want.push(chunk.iter().filter(|&&v| v & 1 == 1).count() as u32);
        want.push(u32::from(chunk.contains(&7)));
        want.push(if chunk[..64].contains(&7) { 64 } else { 0 });
    }
    want
}

/// Threads of the one block `coop_probe` runs with.
pub const COOP_PROBE_THREADS: u32 = 128;
/// Words per thread written by `coop_probe`.
pub const COOP_PROBE_WORDS: usize = 20;

/// What `coop_probe` writes (one block of [`COOP_PROBE_THREADS`]).
pub fn coop_probe_words() -> Vec<u32> {
    let mut want = vec![];
    for t in 0..COOP_PROBE_THREADS {
        let (lane, warp) = (t % 32, t / 32);
        want.extend([
            0,
            1,
            u32::from(t == 70),
            lane % 4,
            4,
            u32::from(t / 4 == 70 / 4),
            lane,
            32,
            u32::from(warp == 2),
            lane % 16,
            16,
            u32::from(warp == 2 && lane < 16),
            t % 64,
            64,
            u32::from(t >= 64),
            t,
            128,
            1,
            0,
            0,
        ]);
    }
    want
}

// ---------------------------------------------------------------------------------------
// mem: atomics, message passing, constant loads.

/// The counters `[c32, c64, c64b]` after `red_add_release` ran on `n` threads.
pub fn red_add_totals(n: u64) -> [u64; 3] {
    [n, n * ((1 << 32) + 1), 3 * n]
}

/// What `message_pass` writes with `n` words per round: two ok codes, then the payloads
/// of both rounds.
pub fn message_pass_words(n: usize) -> Vec<u32> {
    let mut want = vec![0, 0];
    for round in 0..2 {
        want.extend((0..n).map(|i| k::message_payload(round, i)));
    }
    want
}

/// A window descriptor with random addresses (as `load_const_copy` gets it).
pub fn sample_window(rng: &mut Rng) -> Window {
    Window {
        win_host: rng.next_u64(),
        lsa_flat_base: rng.next_u64(),
        lsa_rank: 3,
        world_rank: 11,
        stride4g: 36,
        mc_offset4k: 77,
        gin_offset4k: 5,
        lsa_size: 8,
        gin_wins: [rng.next_u64(), rng.next_u64(), 0, 1],
    }
}

/// The 72 bytes of `w` as the 9 u64 `load_const_copy` writes.
pub fn window_words(w: &Window) -> Vec<u64> {
    vec![
        w.win_host,
        w.lsa_flat_base,
        u64::from(w.lsa_rank as u32) | (u64::from(w.world_rank as u32) << 32),
        u64::from(w.stride4g) | (u64::from(w.mc_offset4k) << 32),
        u64::from(w.gin_offset4k) | (u64::from(w.lsa_size) << 32),
        w.gin_wins[0],
        w.gin_wins[1],
        w.gin_wins[2],
        w.gin_wins[3],
    ]
}

// ---------------------------------------------------------------------------------------
// util / team / window / reduce: pure math.

/// The quotients and remainders `div_fast` must produce, by the host's `/` and `%`.
pub fn div_words(xs: &[u32], ds: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let q = xs.iter().zip(ds).map(|(x, d)| x / d).collect();
    let r = xs.iter().zip(ds).map(|(x, d)| x % d).collect();
    (q, r)
}

/// What `team_probe` writes for `comm`: an independent host copy of the kernels crate's
/// sequence (the same device-crate functions on the CPU), padded with -7.
pub fn team_probe_values(comm: &DevComm) -> Vec<i32> {
    let mut v = vec![];
    let (w, l, r) = (comm.world_team(), comm.lsa_team(), comm.rail_team());
    for t in [w, l, r] {
        v.extend([t.n_ranks, t.rank, t.stride]);
        v.extend((0..4).map(|m| comm.team_rank_to_world(&t, m)));
    }
    for m in 0..4 {
        v.push(i32::from(l.contains(&w, m)));
        v.push(l.try_rank_from(&w, m).unwrap_or(-1));
        v.push(i32::from(r.contains(&w, m)));
        v.push(r.try_rank_from(&w, m).unwrap_or(-1));
    }
    let inner: Team = w.inner_factor(comm.lsa_size);
    let outer: Team = w.outer_factor(comm.lsa_size);
    for t in [inner, outer] {
        v.extend([t.n_ranks, t.rank, t.stride]);
    }
    v.push(w.rank_in_difference(&l, 0));
    v.push(comm.team_rank_to_lsa(&r, r.rank));
    v.push(i32::from(comm.is_compatible()));
    v.resize(k::TEAM_PROBE_WORDS, -7);
    v
}

/// What `window_math` writes for a window whose descriptor holds the same values as `w`,
/// `comm`, and a `SymPtr<f32>` at byte `sym_offset` of the window: the same arithmetic on the
/// host, against the host copy `w` of the descriptor.
pub fn window_math_words(w: &Window, comm: &DevComm, sym_offset: usize) -> Vec<u64> {
    let hsym: SymPtr<f32> = SymPtr::new(WindowHandle::from_ptr(w), sym_offset);
    let team = comm.lsa_team();
    // SAFETY: `w` is a live host descriptor; nothing is dereferenced but the descriptor.
    unsafe {
        vec![
            w.local_ptr(0) as u64,
            w.local_ptr(4096) as u64,
            w.lsa_ptr(16, 0) as u64,
            w.lsa_ptr(16, 1) as u64,
            w.lsa_ptr(16, 3) as u64,
            w.peer_ptr(8, comm.rank + 1) as u64,
            w.try_peer_ptr(8, comm.rank + 1, comm)
                .map_or(0, |q| q as u64),
            w.try_peer_ptr(8, comm.rank + comm.lsa_size, comm)
                .map_or(0, |q| q as u64),
            w.try_peer_ptr(8, comm.rank - comm.lsa_rank - 1, comm)
                .map_or(0, |q| q as u64),
            w.team_peer_ptr(32, &team, 0) as u64,
            w.multimem_ptr(64, comm) as u64,
            hsym.local() as u64,
            (hsym + 5).local() as u64,
            (hsym + 5).lsa(1) as u64,
            hsym.peer(&team, 0) as u64,
            hsym.peer_world(comm.rank) as u64,
            hsym.lsa_multimem(comm) as u64,
            9,
            (sym_offset + 3 * size_of::<u64>()) as u64,
            add4g(0x0000_1234_5678_9abc, 7),
            comm.resource_local_ptr(3) as u64,
            comm.resource_lsa_ptr(1, 1) as u64,
            comm.resource_multimem_ptr(2) as u64,
            w.lsa_rank as u64,
        ]
    }
}

/// What `reduce_packs` writes for the pairs `a[i]`, `b[i]`: 8 reductions per pair, by the
/// device crate's `reduce_pack` on the CPU.
pub fn reduce_packs_words(a: &[U32x4], b: &[U32x4]) -> Vec<U32x4> {
    let mut want = Vec::with_capacity(k::REDUCE_OPS * a.len());
    for (&x, &y) in a.iter().zip(b) {
        want.extend([
            reduce_pack::<F16, Sum>(x, y),
            reduce_pack::<Bf16, Sum>(x, y),
            reduce_pack::<f32, Sum>(x, y),
            reduce_pack::<f32, Max>(x, y),
            reduce_pack::<i32, Min>(x, y),
            reduce_pack::<u32, Prod>(x, y),
            reduce_pack::<u64, Sum>(x, y),
            reduce_pack::<f64, Sum>(x, y),
        ]);
    }
    want
}

// ---------------------------------------------------------------------------------------
// ll and barriers.

/// The inputs of `ll_roundtrip` for `n` lines: this round's epoch (≥ 2), `n + 1` lines
/// holding junk of the previous round (never accepted in this one) and `n` payloads.
pub fn ll_inputs(rng: &mut Rng, n: usize) -> (u32, Vec<U32x4>, Vec<u64>) {
    let epoch = (rng.next_u32() | 2).max(2);
    let stale = epoch - 1;
    let lines = (0..=n)
        .map(|_| U32x4([rng.next_u32(), stale, rng.next_u32(), stale]))
        .collect();
    let data = (0..n).map(|_| rng.next_u64()).collect();
    (epoch, lines, data)
}

/// The result codes `ll_roundtrip` writes for `n` lines: all ok, and the unwritten line `n`
/// timed out.
pub fn ll_codes(n: usize) -> Vec<u32> {
    let mut want = vec![0u32; n];
    want.push(1);
    want
}

/// What `barrier_rounds` writes in launch `launch` (from 1) of `rounds` rounds on `blocks`
/// barriers that started at epoch 0: ok codes, then `launch × rounds` epochs.
pub fn barrier_rounds_words(blocks: u32, launch: u32, rounds: u32) -> Vec<u32> {
    let mut want = vec![0; blocks as usize];
    want.extend(vec![launch * rounds; blocks as usize]);
    want
}

/// What `barrier_pair` writes in launch `launch` (from 0) of `rounds` rounds: per rank
/// `[code, mismatch, epoch, rounds]`, two syncs a round.
pub fn barrier_pair_words(launch: u32, rounds: u32) -> [u32; 2 * k::BARRIER_PAIR_WORDS] {
    let epoch = 2 * rounds * (launch + 1);
    [0, 0, epoch, rounds, 0, 0, epoch, rounds]
}

/// The elapsed nanoseconds in words 1 (low) and 2 (high) of `barrier_lonely`'s output.
pub fn lonely_elapsed_ns(out: &[u32]) -> u64 {
    u64::from(out[1]) | (u64::from(out[2]) << 32)
}

/// What `store_low_if_slots` leaves in its output (poisoned with `poison` before): slot `i`
/// holds the low `W = 1 << (i % 4)` bytes of `src[i]` at byte `W × ((i / 4) % (16 / W))`
/// when `i % 3 != 0`, `poison` everywhere else.
pub fn store_low_if_slots(src: &[u64], poison: u8) -> Vec<u8> {
    let mut out = vec![poison; 16 * src.len()];
    for (i, v) in src.iter().enumerate() {
        let w = 1usize << (i % 4);
        let at = 16 * i + w * ((i / 4) % (16 / w));
        if !i.is_multiple_of(3) {
            out[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_self_consistent() {
        assert!(is_permutation(vec![2, 0, 1], 3));
        assert!(!is_permutation(vec![0, 0, 1], 3));
        assert!(compare("x", &[1, 2], &[1, 2]).is_ok());
        assert!(compare("x", &[1, 2], &[1, 3]).is_err());
        assert!(compare("x", &[1, 2], &[1, 2, 3]).is_err());
        let c = DevComm::new(5, 8, 1, 4);
        assert_eq!(team_probe_values(&c).len(), k::TEAM_PROBE_WORDS);
        // A descriptor that agrees with `c` (LSA rank 1 of 4, world rank 5), as the checks of
        // the peer indices and of the symmetric pointer's slot range need.
        let w = Window {
            lsa_rank: 1,
            world_rank: 5,
            stride4g: 2,
            lsa_size: 4,
            ..Window::default()
        };
        assert_eq!(window_math_words(&w, &c, 256).len(), k::WINDOW_MATH_WORDS);
        assert_eq!(coop_probe_words().len(), 128 * COOP_PROBE_WORDS);
        assert_eq!(lonely_elapsed_ns(&[9, 2, 1]), (1 << 32) | 2);
    }
}
