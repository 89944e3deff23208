//! The multimem (NVLink SHARP) all-reduce kernels, which the shared GPU node must never run,
//! on the CPU emulator: real host runtime (`SymmetricMemory`, windows, `DevComm` with an LSA
//! multicast range), ranks as threads, the emulator standing in for the switch (`ld_reduce`
//! folds every copy by the operator, `multimem.st` writes every copy). This checks what the
//! kernels decide (slices, multicast addressing, the barrier brackets, which instruction each
//! type and operator uses), not the switch.

use symcomm::backend::emulated_launch;
use symcomm::cuda::VmmBuffer;
use symcomm::{Communicator, DevComm, Requirements, Result, SymmetricMemory};
use symcomm_device::ptr::SymPtr;
use symcomm_gallery::check::{encode, reduced};
use symcomm_gallery::{DataType, RedOp};
use symcomm_gallery_kernels as k;
use symcomm_gallery_kernels::pattern;

const BLOCKS: u32 = 2;
const THREADS: u32 = 32;
const TIMEOUT_NS: u64 = 20_000_000_000;
/// 37 packs: not a multiple of 2, 3 or 4 ranks, so the two-shot's slices are ragged.
const PACKS: u64 = 37;

/// A gallery multimem kernel as the emulator calls it.
type Kernel = unsafe fn(symcomm_device::comm::DevComm, SymPtr<u8>, SymPtr<u8>, u64, u64, *mut u32);

/// Every multimem kernel pair: (element type, operator, one-shot, two-shot).
const PAIRS: [(DataType, RedOp, Kernel, Kernel); 10] = [
    (
        DataType::F32,
        RedOp::Sum,
        k::all_reduce_multimem_one_shot_f32_sum,
        k::all_reduce_multimem_two_shot_f32_sum,
    ),
    (
        DataType::Bf16,
        RedOp::Sum,
        k::all_reduce_multimem_one_shot_bf16_sum,
        k::all_reduce_multimem_two_shot_bf16_sum,
    ),
    (
        DataType::F16,
        RedOp::Sum,
        k::all_reduce_multimem_one_shot_f16_sum,
        k::all_reduce_multimem_two_shot_f16_sum,
    ),
    (
        DataType::I32,
        RedOp::Sum,
        k::all_reduce_multimem_one_shot_i32_sum,
        k::all_reduce_multimem_two_shot_i32_sum,
    ),
    (
        DataType::Bf16,
        RedOp::Min,
        k::all_reduce_multimem_one_shot_bf16_min,
        k::all_reduce_multimem_two_shot_bf16_min,
    ),
    (
        DataType::Bf16,
        RedOp::Max,
        k::all_reduce_multimem_one_shot_bf16_max,
        k::all_reduce_multimem_two_shot_bf16_max,
    ),
    (
        DataType::F16,
        RedOp::Min,
        k::all_reduce_multimem_one_shot_f16_min,
        k::all_reduce_multimem_two_shot_f16_min,
    ),
    (
        DataType::F16,
        RedOp::Max,
        k::all_reduce_multimem_one_shot_f16_max,
        k::all_reduce_multimem_two_shot_f16_max,
    ),
    (
        DataType::I32,
        RedOp::Min,
        k::all_reduce_multimem_one_shot_i32_min,
        k::all_reduce_multimem_two_shot_i32_min,
    ),
    (
        DataType::I32,
        RedOp::Max,
        k::all_reduce_multimem_one_shot_i32_max,
        k::all_reduce_multimem_two_shot_i32_max,
    ),
];

/// Every multimem kernel: (name, element type, operator, one-shot?, kernel).
fn kernels() -> Vec<(String, DataType, RedOp, bool, Kernel)> {
    PAIRS
        .into_iter()
        .flat_map(|(t, op, one, two)| {
            [("one-shot", true, one), ("two-shot", false, two)].map(|(shot, is_one, f)| {
                let name = format!("{shot} {} {}", t.name(), op.name());
                (name, t, op, is_one, f)
            })
        })
        .collect()
}

/// One rank: every kernel out of place (`src` → `dst` window) and the two-shots in place
/// (`src` → `src`), each output poisoned first (status words zeroed: kernels write only
/// errors). Returns one line per wrong output (empty: all right).
fn rank(comm: Communicator) -> Result<Vec<String>> {
    let (me, n) = (comm.rank() as u32, comm.size() as u32);
    let bytes = (PACKS * 16) as usize;
    let (src, dst) = (
        SymmetricMemory::alloc(&comm, bytes)?,
        SymmetricMemory::alloc(&comm, bytes)?,
    );
    let (ws, wd) = (comm.register_window(&src)?, comm.register_window(&dst)?);
    let dev = DevComm::create(
        &comm,
        Requirements::new().lsa_barriers(BLOCKS).lsa_multimem(true),
    )?;
    let status = VmmBuffer::new(comm.device() as i32, 4)?;
    let mut wrong = Vec::new();
    for (case, (name, t, op, one_shot, kernel)) in kernels().into_iter().enumerate() {
        for in_place in [false, true] {
            // In place, a one-shot rank could overwrite its input while a peer still reads it
            // (its contract has `dst` apart); the two-shot reads and writes only its own slice.
            if one_shot && in_place {
                continue;
            }
            let seed = 900 + 2 * case as u32 + u32::from(in_place);
            let count = bytes / t.size();
            let input: Vec<u8> = (0..count)
                .flat_map(|i| encode(t, pattern::value(seed, me, i as u64)))
                .collect();
            src.buffer().copy_from_host(&input)?;
            dst.buffer().fill_bytes(0x7f)?;
            status.fill_bytes(0)?;
            comm.bootstrap().barrier()?;
            let out = if in_place { &ws } else { &wd };
            let (raw, s_ptr, o_ptr, st) = (
                dev.raw(),
                ws.sym::<u8>(0),
                out.sym::<u8>(0),
                status.as_mut_ptr::<u32>(),
            );
            // SAFETY: both windows hold PACKS packs on every rank and are bound to the LSA
            // multicast range; BLOCKS barriers; every rank launches the same shape.
            unsafe {
                emulated_launch(BLOCKS, THREADS, || {
                    kernel(raw, s_ptr, o_ptr, PACKS * 16, TIMEOUT_NS, st)
                })?
            };
            comm.bootstrap().barrier()?;
            let mut code = [0u32];
            status.copy_to_host(&mut code)?;
            let mut got = vec![0u8; bytes];
            let mem = if in_place { &src } else { &dst };
            mem.buffer().copy_to_host(&mut got)?;
            let want: Vec<u8> = (0..count)
                .flat_map(|i| encode(t, reduced(op, seed, n, i as u64)))
                .collect();
            let bad = got
                .chunks(t.size())
                .zip(want.chunks(t.size()))
                .filter(|(g, w)| g != w)
                .count();
            let place = if in_place { "in place" } else { "out of place" };
            if bad != 0 || code[0] != 0 {
                wrong.push(format!(
                    "rank {me}/{n}: {name} {place}: {bad} of {count} wrong, status {}",
                    code[0]
                ));
            }
        }
    }
    Ok(wrong)
}

#[test]
fn multimem_all_reduces_reduce_every_rank_on_the_emulated_switch() {
    for n in [2, 3, 4] {
        let mut wrong = Vec::new();
        for (r, res) in symcomm::ranks::run_emulated(n, rank) {
            match res {
                Ok(lines) => wrong.extend(lines),
                Err(e) => wrong.push(format!("rank {r}/{n}: {e}")),
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
