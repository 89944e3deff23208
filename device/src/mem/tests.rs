use super::*;

#[test]
fn host_atomics_follow_the_ptx_contracts() {
    let mut x = 5u32;
    let p = &raw mut x;
    // SAFETY: `p` is an aligned, live `u32` that only this thread accesses.
    unsafe {
        assert_eq!(atomic_add(p, 3, Ordering::AcqRel, Scope::Sys), 5);
        red_add(p, 2, Ordering::Release, Scope::Gpu);
        assert_eq!(load(p, LoadOrder::Acquire, Scope::Sys), 10);
        assert_eq!(atomic_cas(p, 9, 1, Ordering::AcqRel, Scope::Sys), 10);
        assert_eq!(atomic_cas(p, 10, 1, Ordering::AcqRel, Scope::Sys), 10);
        assert_eq!(atomic_exch(p, 7, Ordering::Acquire, Scope::Cta), 1);
        store(p, 8, StoreOrder::Release, Scope::Sys);
        assert_eq!(load_const_word(p.cast_const()), 8);
    }
    let mut v = U32x4([1, 2, 3, 4]);
    // SAFETY: `v` is a live, 16-byte aligned line that only this thread accesses.
    unsafe {
        store_v4_u32(
            &raw mut v,
            U32x4([5, 6, 7, 8]),
            StoreOrder::Relaxed,
            Scope::Sys,
        );
        assert_eq!(
            load_v4_u32(&raw const v, LoadOrder::Volatile, Scope::Sys).0,
            [5, 6, 7, 8]
        );
        assert_eq!(load_const_v4(&raw const v).0, [5, 6, 7, 8]);
    }
    let w = U64x2::from(v);
    assert_eq!(U32x4::from(w), v);
    assert_eq!(w.0[0], 5 | (6 << 32));
}

/// The LL protocol assumes each 8-byte half of a 16-byte access is one unit (see
/// [`load_v4_u32`]). One access per `u32` let a reader see `{payload, epoch}` of two
/// different rounds (the payload read before a store, the epoch after it), which an LL
/// receiver accepts as data of the new round.
#[test]
fn host_vector_accesses_never_tear_an_8_byte_half() {
    extern crate std;
    use core::sync::atomic::{AtomicBool, Ordering as A};
    let mut line = U32x4::default();
    let addr = &raw mut line as usize;
    let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let (torn, reads) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut torn, mut reads) = (0u64, 0u64);
            started.store(true, A::Relaxed);
            while !done.load(A::Relaxed) {
                // SAFETY: `line` outlives the scope; every access is a `mem` access.
                let [a, b, c, d] =
                    unsafe { load_v4_u32(addr as *const U32x4, LoadOrder::Relaxed, Scope::Sys).0 };
                torn += u64::from(a != b) + u64::from(c != d);
                reads += 1;
            }
            (torn, reads)
        });
        // Without this the writer can finish before the reader's first read.
        while !started.load(A::Relaxed) {
            std::thread::yield_now();
        }
        for k in 1..=500_000u32 {
            let v = U32x4([k, k, !k, !k]);
            // SAFETY: as above.
            unsafe { store_v4_u32(addr as *mut U32x4, v, StoreOrder::Relaxed, Scope::Sys) };
        }
        done.store(true, A::Relaxed);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    assert_eq!(torn, 0, "{torn} torn 8-byte halves in {reads} reads");
    assert_eq!(line.0[0], 500_000);
}

#[test]
fn orders_split_into_halves() {
    assert_eq!(Ordering::AcqRel.acquire_part(), Ordering::Acquire);
    assert_eq!(Ordering::AcqRel.release_part(), Ordering::Release);
    assert_eq!(Ordering::Acquire.release_part(), Ordering::Relaxed);
    assert_eq!(Ordering::Release.acquire_part(), Ordering::Relaxed);
    assert_eq!(Ordering::Release.load_order(), LoadOrder::Relaxed);
    assert_eq!(Ordering::AcqRel.store_order(), StoreOrder::Release);
}
