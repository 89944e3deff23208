//! The gallery's checked mode (`SYMCOMM_CHECK=1`): every collective first agrees on its
//! arguments, so ranks that pass different ones all get the same error instead of a wrong
//! result or a kernel timeout. Ranks are threads of this process on the CPU emulator; the
//! variable is set once, before any thread starts (this file has a single test).

use std::time::{Duration, Instant};

use symcomm::{Error, Result, SymmetricMemory, ranks};
use symcomm_gallery::{Buf, Collectives, DataType, RedOp, Tuning};

fn tuning() -> Tuning {
    Tuning {
        max_blocks: 2,
        ll_blocks: 2,
        timeout_ns: 60_000_000_000,
        ..Tuning::default()
    }
}

#[test]
fn mismatched_gallery_calls_give_every_rank_the_same_error_in_checked_mode() {
    // SAFETY: the only test of this binary sets the variable before it starts any thread.
    unsafe { std::env::set_var("SYMCOMM_CHECK", "1") };
    let results = ranks::run_emulated(2, |comm| -> Result<Vec<String>> {
        assert!(comm.checked());
        let g = Collectives::new(&comm, tuning())?;
        let mem = SymmetricMemory::alloc(&comm, 64 << 10)?;
        let win = comm.register_window(&mem)?;
        let buf = Buf::whole(&win);
        let me = comm.rank();
        let mut errors = Vec::new();
        let mut keep =
            |r: Result<()>| errors.push(r.err().map(|e| e.to_string()).unwrap_or_default());
        // Before: one rank all-reduced 1024 elements and the other 2048; the kernels met on
        // the first 1024 and the rest was silently not reduced (or a wait timed out).
        let count = if me == 0 { 1024 } else { 2048 };
        let null = std::ptr::null_mut();
        keep(
            g.all_reduce(buf, buf, count, DataType::F32, RedOp::Sum, null)
                .map(|_| ()),
        );
        // Another type, another root, another collective.
        let t = if me == 0 {
            DataType::F32
        } else {
            DataType::Bf16
        };
        keep(g.all_gather(buf, buf, 256, t, null));
        keep(g.broadcast(buf, buf, 256, DataType::F32, me, null));
        if me == 0 {
            keep(g.all_gather(buf, buf, 256, DataType::F32, null));
        } else {
            keep(g.all_to_all(buf, buf, 256, DataType::F32, null));
        }
        // Matching calls still run, and cost one agreement each.
        let start = Instant::now();
        for _ in 0..20 {
            g.all_reduce(buf, buf, 1024, DataType::F32, RedOp::Sum, null)?;
        }
        g.check_status()?;
        let per_call = start.elapsed() / 20;
        assert!(per_call < Duration::from_secs(5));
        drop(g);
        win.deregister()?;
        Ok(errors)
    });
    let mut per_rank = Vec::new();
    for (rank, r) in results {
        per_rank.push(r.unwrap_or_else(|e: Error| panic!("rank {rank}: {e}")));
    }
    let want = [
        "argument count differs across ranks: rank 0 has 1024, rank 1 has 2048",
        "argument type differs across ranks: rank 0 has f32, rank 1 has bf16",
        "argument root differs across ranks: rank 0 has 0, rank 1 has 1",
        "argument collective differs across ranks: rank 0 has all_gather, rank 1 has all_to_all",
    ];
    for errors in &per_rank {
        assert_eq!(errors.len(), want.len());
        for (got, want) in errors.iter().zip(want) {
            assert_eq!(got, want);
        }
    }
}
