//! The emulator's own checks, with small kernels written here: those of a whole launch
//! (errors, the watchdog, configurations, the kernel registry) in this file, those inside
//! one block in `block`, those of thread block clusters in `cluster`, grids beyond the
//! host's thread and memory-map limits in `limits`.

use std::string::ToString;
use std::sync::atomic::{AtomicU32, Ordering as A};
use std::time::Duration;
use std::vec::Vec;

use super::*;
use crate::arch::{self, FULL_MASK};
use crate::coop::{Coop, Lanes, Warp};

fn linear_tid() -> usize {
    let (t, d) = (arch::thread_idx(), arch::block_dim());
    ((t.z * d.y + t.y) * d.x + t.x) as usize
}

fn linear_block() -> usize {
    let (b, g) = (arch::block_idx(), arch::grid_dim());
    ((b.z * g.y + b.y) * g.x + b.x) as usize
}

mod block;
mod cluster;
mod limits;

#[test]
fn trap_and_panic_name_the_block_and_thread() {
    let e = Launch::new(3, 32)
        .run(|| {
            if arch::block_idx().x == 2 && arch::thread_idx().x == 5 {
                arch::trap();
            }
            arch::sync_threads();
        })
        .unwrap_err();
    assert_eq!(
        e,
        EmuError::Trap {
            block: Dim3 { x: 2, y: 0, z: 0 },
            thread: Dim3 { x: 5, y: 0, z: 0 }
        }
    );
    let e = Launch::new(1, (4, 4))
        .run(|| {
            let t = arch::thread_idx();
            assert!(t.x != 1 || t.y != 2, "bad index");
            arch::sync_threads();
        })
        .unwrap_err();
    match e {
        EmuError::Panic {
            thread, message, ..
        } => {
            assert_eq!(
                (thread, message.as_str()),
                (Dim3 { x: 1, y: 2, z: 0 }, "bad index")
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn the_watchdog_ends_an_endless_wait() {
    let flag = AtomicU32::new(0);
    let e = Launch::new(1, 4)
        .timeout(Some(Duration::from_millis(200)))
        .run(|| {
            // SAFETY: no abort flag.
            let mut spin = unsafe { crate::wait::Spin::new(core::ptr::null(), u64::MAX) };
            let _ = spin.until(|| flag.load(A::Relaxed) != 0);
        })
        .unwrap_err();
    assert!(matches!(e, EmuError::Timeout { .. }), "{e}");
}

/// A spin on a bare `mem::load` (no `Spin`) still ends: the watchdog fails the launch and
/// the next load stops the thread; so does another thread's trap.
#[test]
fn a_spin_on_a_bare_load_ends_with_the_launch() {
    let mut flag = 0u32;
    let p = &raw mut flag;
    let spin = || {
        // SAFETY: `flag` outlives the launch; only loads here.
        while unsafe { crate::mem::load(p, crate::mem::LoadOrder::Relaxed, crate::mem::Scope::Sys) }
            == 0
        {}
    };
    // SAFETY: `p` is only loaded from.
    let e = unsafe {
        Launch::new(1, 2)
            .timeout(Some(Duration::from_millis(200)))
            .run_unsync(spin)
    }
    .unwrap_err();
    assert!(matches!(e, EmuError::Timeout { .. }), "{e}");
    // SAFETY: as above.
    let e = unsafe {
        Launch::new(2, 2)
            .timeout(Some(Duration::from_secs(60)))
            .run_unsync(|| {
                if arch::block_idx().x == 1 && arch::thread_idx().x == 0 {
                    arch::trap();
                }
                spin();
            })
    }
    .unwrap_err();
    assert!(matches!(e, EmuError::Trap { .. }), "{e}");
}

#[test]
fn bad_configurations_and_nested_launches_are_refused() {
    assert!(matches!(
        Launch::new(1, 1025).run(|| {}),
        Err(EmuError::InvalidLaunch(_))
    ));
    assert!(matches!(
        Launch::new(0, 1).run(|| {}),
        Err(EmuError::InvalidLaunch(_))
    ));
    let nested = std::sync::Mutex::new(None);
    launch(1, 1, 0, || {
        *nested.lock().unwrap() = Some(Launch::new(1, 1).run(|| {}));
    })
    .unwrap();
    assert!(matches!(
        nested.into_inner().unwrap(),
        Some(Err(EmuError::InvalidLaunch(_)))
    ));
}

#[test]
fn outside_a_launch_the_backends_describe_one_thread() {
    assert_eq!(arch::block_dim(), 1.into());
    assert_eq!(arch::ballot(FULL_MASK, true), 1);
    assert_eq!(Warp::new().thread_rank(), 0);
    arch::sync_threads();
}

/// A registered kernel: every thread adds `add` to its element.
#[crate::kernel]
#[allow(dead_code)]
unsafe fn registry_test_add(out: *mut u32, n: u64, add: u32) {
    let i = (arch::block_idx().x * arch::block_dim().x + arch::thread_idx().x) as u64;
    if i < n {
        // SAFETY: `out` holds `n` elements (the caller's contract).
        unsafe { *out.add(i as usize) += add };
    }
}

#[test]
fn kernels_are_registered_with_their_parameter_sizes_and_run_through_the_shim() {
    let found: Vec<_> = registry::find("registry_test_add").collect();
    assert_eq!(found.len(), 1);
    let e = found[0];
    assert_eq!(e.param_sizes, &[8, 8, 4]);
    assert!(e.module_path.ends_with("emu::tests"), "{}", e.module_path);
    assert!(!registry::all().is_empty());
    let mut data = [1u32; 100];
    let (mut out, mut n, mut add) = (data.as_mut_ptr(), 100u64, 5u32);
    let args: [*mut core::ffi::c_void; 3] = [
        (&raw mut out).cast(),
        (&raw mut n).cast(),
        (&raw mut add).cast(),
    ];
    let argp = args.as_ptr();
    // SAFETY: the pointers point at values of the declared types, alive for the launch; the
    // 4 × 32 threads cover 100 distinct elements of `data`.
    unsafe { Launch::new(4, 32).run_unsync(|| (e.shim)(argp)) }.unwrap();
    assert!(data.iter().all(|&x| x == 6));
}
