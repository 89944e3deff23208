//! A machine without NVLink SHARP, on the CPU emulator (`SYMCOMM_EMU_MULTICAST=0`, set before
//! anything runs: this file is its own test process): device communicators that ask for
//! multicast are refused on every rank with `Unsupported`, and gallery collectives created
//! with `Tuning::multimem` go on without it, running forced multimem all-reduces as the
//! choice by size.

use symcomm::backend::EMU_MULTICAST_ENV;
use symcomm::{Communicator, DevComm, Error, Requirements, Result, SymmetricMemory};
use symcomm_gallery::check::{encode, find_wrong};
use symcomm_gallery::{Algo, Buf, Collectives, DataType, RedOp, Tuning};
use symcomm_gallery_kernels::pattern;

/// 64 packs of bf16 per rank (above the one-shot limit below, so the fallback is a two-shot).
const BYTES: usize = 64 * 16;

fn rank(comm: Communicator) -> Result<(bool, usize)> {
    // The runtime refuses alike on every rank.
    let mem = SymmetricMemory::alloc(&comm, BYTES)?;
    let win = comm.register_window(&mem)?;
    match DevComm::create(&comm, Requirements::new().lsa_multimem(true)) {
        Err(Error::Unsupported { hint, .. }) => assert!(hint.contains(EMU_MULTICAST_ENV), "{hint}"),
        other => panic!("multicast was not refused: {other:?}"),
    }
    let tuning = Tuning {
        multimem: true,
        one_shot_max: 512,
        two_shot_ll_max: 512,
        max_blocks: 2,
        ll_blocks: 2,
        ..Tuning::default()
    };
    let g = Collectives::new(&comm, tuning)?;
    let (me, n) = (comm.rank() as u32, comm.size() as u32);
    let count = BYTES / 2;
    let input: Vec<u8> = (0..count)
        .flat_map(|i| encode(DataType::Bf16, pattern::value(5, me, i as u64)))
        .collect();
    mem.buffer().copy_from_host(&input)?;
    comm.bootstrap().barrier()?;
    let buf = Buf::whole(&win);
    let null = std::ptr::null_mut();
    let used = g.all_reduce_with(
        Some(Algo::MultimemTwoShot),
        buf,
        buf,
        count,
        DataType::Bf16,
        RedOp::Sum,
        null,
    )?;
    assert_eq!(used, Algo::TwoShot, "the choice by size runs");
    comm.bootstrap().barrier()?;
    let mut got = vec![0u8; BYTES];
    mem.buffer().copy_to_host(&mut got)?;
    g.check_status()?;
    let wrong = find_wrong(
        &got,
        DataType::Bf16,
        count,
        |i| pattern::sum(5, n, i as u64),
        4,
    )
    .count;
    Ok((g.tuning().multimem, wrong))
}

#[test]
fn without_multicast_device_comms_are_refused_and_collectives_fall_back() {
    // SAFETY: set before this process starts any other thread (one test in this file).
    unsafe { std::env::set_var(EMU_MULTICAST_ENV, "0") };
    for n in [2, 3] {
        for (r, res) in symcomm::ranks::run_emulated(n, rank) {
            let (multimem, wrong) = res.unwrap_or_else(|e| panic!("rank {r}/{n}: {e}"));
            assert!(
                !multimem,
                "rank {r}/{n}: the tuning still asks for multimem"
            );
            assert_eq!(wrong, 0, "rank {r}/{n}: {wrong} wrong elements");
        }
    }
}
