//! The knobs' limits, their variables and the choices they make.

use std::collections::HashMap;

use symcomm_gallery_kernels::plan;

use super::*;

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn validate_bounds_every_knob_that_sizes_a_scratch_or_a_grid() {
    for n in [1, 2, 3, 4, 8] {
        Tuning::for_ranks(n).validate().unwrap();
    }
    type Set = fn(&mut Tuning);
    let bad: [(&str, Set); 10] = [
        ("one_shot_max", |t| t.one_shot_max = usize::MAX),
        ("ll_max", |t| t.ll_max = LL_LIMIT as usize + 1),
        ("two_shot_ll_max", |t| t.two_shot_ll_max = usize::MAX),
        ("fused_one_shot_max", |t| {
            t.fused_one_shot_max = LL_TWO_SHOT_LIMIT as usize + 1
        }),
        ("fused_two_shot_ll_max", |t| {
            t.fused_two_shot_ll_max = usize::MAX
        }),
        ("push_scratch", |t| t.push_scratch = usize::MAX),
        ("push_slots", |t| t.push_slots = 1),
        ("push_slots", |t| t.push_slots = MAX_PUSH_SLOTS + 1),
        ("max_blocks", |t| t.max_blocks = 0),
        ("ll_min_threads", |t| t.ll_min_threads = 48),
    ];
    for (name, set) in bad {
        let mut t = Tuning::default();
        set(&mut t);
        let e = t.validate().unwrap_err().to_string();
        assert!(e.contains(&format!("{name} is")), "{name}: {e}");
    }
    // The largest values the environment takes are valid.
    let t = Tuning {
        one_shot_max: LL_LIMIT as usize,
        ll_max: LL_LIMIT as usize,
        two_shot_ll_max: LL_TWO_SHOT_LIMIT as usize,
        fused_one_shot_max: LL_TWO_SHOT_LIMIT as usize,
        fused_two_shot_ll_max: LL_TWO_SHOT_LIMIT as usize,
        push_scratch: PUSH_SCRATCH_LIMIT as usize,
        push_slots: MAX_PUSH_SLOTS,
        ..Tuning::default()
    };
    t.validate().unwrap();
}

#[test]
fn agreed_knobs_are_named_by_the_variables_that_set_them() {
    let base = Tuning::from_lookup(lookup(&[])).unwrap().agreed_knobs();
    let names: Vec<&str> = base.iter().map(|k| k.0).collect();
    // A valid value other than the default for each variable: setting it changes exactly
    // the knob of that name.
    let set = [
        ("SYMCOMM_ALGO", "two_shot"),
        ("SYMCOMM_ONE_SHOT_MAX", "1024"),
        ("SYMCOMM_TWO_SHOT_LL_MAX", "2048"),
        ("SYMCOMM_FUSED_ONE_SHOT_MAX", "3072"),
        ("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", "4096"),
        ("SYMCOMM_FUSED_DIRECT_MAX", "1048576"),
        ("SYMCOMM_LL_MAX", "5120"),
        ("SYMCOMM_MAX_BLOCKS", "7"),
        ("SYMCOMM_MIN_THREADS", "64"),
        ("SYMCOMM_LL_BLOCKS", "5"),
        ("SYMCOMM_LL_MIN_THREADS", "96"),
        ("SYMCOMM_PUSH_SCRATCH", "65536"),
        ("SYMCOMM_PUSH_SLOTS", "3"),
        ("SYMCOMM_PUSH_MIN", "12345"),
        ("SYMCOMM_RS_PUSH_MIN", "54321"),
        ("SYMCOMM_NVLS", "1"),
    ];
    assert_eq!(names, set.iter().map(|p| p.0).collect::<Vec<_>>());
    for (var, v) in set {
        let k = Tuning::from_lookup(lookup(&[(var, v)]))
            .unwrap()
            .agreed_knobs();
        for (a, b) in base.iter().zip(&k) {
            if a.0 == var {
                assert_eq!(b.1, v, "{var}");
            } else {
                assert_eq!(a, b, "{var} changed {}", a.0);
            }
        }
    }
    // Local-only knobs are not compared.
    let local = lookup(&[("SYMCOMM_TIMEOUT_MS", "5"), ("SYMCOMM_PDL", "all")]);
    assert_eq!(Tuning::from_lookup(local).unwrap().agreed_knobs(), base);
}

#[test]
fn broadcasts_use_the_ll_kernel_below_the_all_gather_limit_of_n_blocks() {
    let t = Tuning::default();
    let ll = |bytes: usize, n| t.broadcast_ll(bytes, bytes.div_ceil(16) as u64, n);
    assert!(ll(16, 8) && ll(32 << 10, 8));
    assert!(!ll((32 << 10) + 16, 8));
    assert!(ll(128 << 10, 2) && !ll(256 << 10, 2));
    assert!(!ll(usize::MAX / 2, 4));
    // Any size: 7 bytes starting inside a pack still take the LL kernel.
    assert!(t.broadcast_ll(7, 2, 8));
}

#[test]
fn dependent_launch_is_on_by_default_and_symcomm_pdl_sets_it() {
    let d = Tuning::default().dependent_launch;
    assert_eq!(d, DependentLaunch::All);
    assert!(d.applies(true) && d.applies(false));
    assert!(Tuning::for_ranks(8).dependent_launch.applies(false));
    assert!(DependentLaunch::Ll.applies(true) && !DependentLaunch::Ll.applies(false));
    for (v, want) in [
        ("off", DependentLaunch::Off),
        ("0", DependentLaunch::Off),
        ("ll", DependentLaunch::Ll),
        ("all", DependentLaunch::All),
        ("1", DependentLaunch::All),
    ] {
        let t = Tuning::from_lookup(lookup(&[("SYMCOMM_PDL", v)])).unwrap();
        assert_eq!(t.dependent_launch, want, "SYMCOMM_PDL={v}");
    }
    assert!(!DependentLaunch::Off.applies(true));
    assert!(DependentLaunch::All.applies(false));
    let e = Tuning::from_lookup(lookup(&[("SYMCOMM_PDL", "yes")])).unwrap_err();
    assert!(e.to_string().contains("SYMCOMM_PDL"), "{e}");
}

#[test]
fn small_all_reduces_go_one_shot_and_large_ones_two_shot() {
    let t = Tuning::default();
    assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
    assert_eq!(t.all_reduce_algo(64 << 10), Algo::OneShot);
    assert_eq!(t.all_reduce_algo((64 << 10) + 16), Algo::TwoShot);
    assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShot);
    assert_eq!(t.all_reduce_algo(1 << 30), Algo::TwoShotPush);
    // The LL two-shot is used between the two limits when they are raised apart.
    let t = Tuning::from_lookup(lookup(&[("SYMCOMM_TWO_SHOT_LL_MAX", "1048576")])).unwrap();
    assert_eq!(t.all_reduce_algo((64 << 10) + 16), Algo::TwoShotLl);
    assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShotLl);
    assert_eq!(t.all_reduce_algo((1 << 20) + 16), Algo::TwoShot);
}

#[test]
fn the_fused_kernel_keeps_its_ll_protocols_longer_than_the_plain_all_reduce() {
    let t = Tuning::default();
    assert_eq!(t.fused_algo(8 << 10), Algo::OneShot);
    assert_eq!(t.fused_algo(64 << 10), Algo::OneShot);
    assert_eq!(t.fused_algo(128 << 10), Algo::TwoShotLl);
    assert_eq!(t.fused_algo(256 << 10), Algo::TwoShotLl);
    // The LL scratch holds what the fused LL protocols send, not only the plain ones.
    assert!(t.ll_cap_packs(4) >= 2 * (256 << 10) / 16 / 4);
    assert_eq!(t.fused_algo((256 << 10) + 16), Algo::TwoShot);
    let forced = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "two_shot")])).unwrap();
    assert_eq!(forced.fused_algo(8 << 10), Algo::TwoShot);
}

#[test]
fn the_environment_forces_an_algorithm_within_the_scratch_capacity() {
    let t = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "two_shot")])).unwrap();
    assert_eq!(t.all_reduce_algo(16), Algo::TwoShot);
    let t = Tuning::from_lookup(lookup(&[
        ("SYMCOMM_ALGO", "one_shot"),
        ("SYMCOMM_ONE_SHOT_MAX", "65536"),
        ("SYMCOMM_TWO_SHOT_LL_MAX", "1048576"),
    ]))
    .unwrap();
    assert_eq!(t.all_reduce_algo(65536), Algo::OneShot);
    // Beyond its limit a forced one-shot cannot run: the choice by size instead.
    assert_eq!(t.all_reduce_algo(65536 + 16), Algo::TwoShotLl);
    assert_eq!(t.all_reduce_algo(4 << 20), Algo::TwoShot);
    // The two-shot LL limit (two slices of 1 MiB / 8 per sender) sizes the scratch.
    // (Two packs more: a range that starts inside a pack touches one more.)
    assert_eq!(t.ll_cap_packs(8), 16384 + 2);
    assert_eq!(t.ll_cap_packs(1), 131072 + 2);
}

#[test]
fn multimem_runs_only_when_forced_and_asked_for() {
    for a in [Algo::MultimemOneShot, Algo::MultimemTwoShot] {
        assert_eq!(Algo::parse(a.name()), Some(a));
        assert!(a.is_multimem());
        let set = [("SYMCOMM_ALGO", a.name())];
        // Without SYMCOMM_NVLS=1 (or with another value) the choice is by size.
        for nvls in [None, Some("0"), Some("yes")] {
            let mut vars = set.to_vec();
            vars.extend(nvls.map(|v| ("SYMCOMM_NVLS", v)));
            let t = Tuning::from_lookup(lookup(&vars)).unwrap();
            assert!(!t.multimem, "{nvls:?}");
            assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
            assert_eq!(t.all_reduce_algo(1 << 20), Algo::TwoShot);
        }
        let on = Tuning::from_lookup(lookup(&[set[0], ("SYMCOMM_NVLS", "1")])).unwrap();
        assert!(on.multimem);
        assert_eq!(on.all_reduce_algo(4096), a);
        assert_eq!(on.all_reduce_algo(1 << 30), a);
        // There is no fused multimem kernel: the fused choice stays by size.
        assert_eq!(on.fused_algo(8 << 10), Algo::OneShot);
        assert_eq!(on.fused_algo(1 << 20), Algo::TwoShot);
    }
    // The choice by size never picks it, multicast or not.
    let on = Tuning::from_lookup(lookup(&[("SYMCOMM_NVLS", "1")])).unwrap();
    for bytes in [16, 4096, 1 << 20, 1 << 30] {
        assert!(!on.all_reduce_algo(bytes).is_multimem(), "{bytes}");
    }
    for a in [
        Algo::OneShot,
        Algo::TwoShotLl,
        Algo::TwoShot,
        Algo::TwoShotPush,
    ] {
        assert!(!a.is_multimem() && Algo::parse(a.name()) == Some(a));
    }
}

#[test]
fn the_push_two_shot_runs_only_with_its_scratch_and_above_its_minimum() {
    let t = Tuning::default();
    assert_eq!(t.all_reduce_algo(1 << 30), Algo::TwoShotPush);
    assert_eq!(t.all_reduce_algo((16 << 20) - 16), Algo::TwoShot);
    assert_eq!(t.all_reduce_algo(16 << 20), Algo::TwoShotPush);
    let off = Tuning::from_lookup(lookup(&[("SYMCOMM_PUSH_SCRATCH", "0")])).unwrap();
    assert_eq!(
        off.all_reduce_algo_with(Some(Algo::TwoShotPush), 1 << 30),
        Algo::TwoShot
    );
    assert_eq!(off.push_window_bytes(8), 0);
    let t = Tuning::from_lookup(lookup(&[
        ("SYMCOMM_PUSH_SCRATCH", "268435456"),
        ("SYMCOMM_PUSH_MIN", "2097152"),
    ]))
    .unwrap();
    assert_eq!(t.all_reduce_algo((2 << 20) - 16), Algo::TwoShot);
    assert_eq!(t.all_reduce_algo(2 << 20), Algo::TwoShotPush);
    assert_eq!(t.all_reduce_algo(4096), Algo::OneShot);
    assert_eq!(
        t.all_reduce_algo_with(Some(Algo::TwoShot), 1 << 30),
        Algo::TwoShot
    );
    assert!(Tuning::from_lookup(lookup(&[("SYMCOMM_PUSH_SLOTS", "1")])).is_err());
    assert_eq!(Algo::parse("two_shot_push"), Some(Algo::TwoShotPush));
}

#[test]
fn push_launches_fit_the_scratch_and_use_whole_passes() {
    let t = Tuning::default();
    for n in [2usize, 4, 8] {
        for slice in [1u64, 1000, 1 << 16, 1 << 20, 1 << 24] {
            let (g, chunk) = t.push_shape(n, slice, 512);
            assert!(g >= 1 && g <= t.max_blocks);
            assert!(chunk >= 1);
            let end = plan::pipe_slot_off(
                u64::from(g),
                n as u64,
                u64::from(t.push_slots),
                chunk,
                u64::from(g),
                0,
                0,
            );
            assert!(end <= t.push_window_bytes(n), "n {n} slice {slice}");
            assert!(chunk <= 512 || chunk % 512 == 0);
            assert!(chunk <= slice.div_ceil(u64::from(g)));
        }
    }
    // 1 GiB over 8 ranks: 128 blocks, 1024-pack (16 KiB) slots, 64 steps.
    let slice = (1u64 << 30) / 16 / 8;
    assert_eq!(t.push_shape(8, slice, 512), (128, 1024));
    assert_eq!(plan::pipe_steps(slice, 128, 1024), 64);
}

#[test]
fn malformed_knobs_are_rejected_with_the_variable_named() {
    let e = Tuning::from_lookup(lookup(&[("SYMCOMM_ALGO", "three_shot")])).unwrap_err();
    assert!(e.to_string().contains("SYMCOMM_ALGO"), "{e}");
    let e = Tuning::from_lookup(lookup(&[("SYMCOMM_MAX_BLOCKS", "0")])).unwrap_err();
    assert!(e.to_string().contains("SYMCOMM_MAX_BLOCKS"), "{e}");
    let t = Tuning::from_lookup(lookup(&[("SYMCOMM_TIMEOUT_MS", "250")])).unwrap();
    assert_eq!(t.timeout_ns, 250_000_000);
}

#[test]
fn the_fused_direct_limit_is_inclusive_and_zero_turns_it_off() {
    assert!(Tuning::default().fused_direct(crate::rmsnorm::FUSED_ROW_BYTES as usize));
    let t = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "1048576")])).unwrap();
    assert!(t.fused_direct(1 << 20));
    assert!(!t.fused_direct((1 << 20) + 16));
    let t = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "0")])).unwrap();
    assert!(!t.fused_direct(16));
    let e = Tuning::from_lookup(lookup(&[("SYMCOMM_FUSED_DIRECT_MAX", "-1")])).unwrap_err();
    assert!(e.to_string().contains("SYMCOMM_FUSED_DIRECT_MAX"), "{e}");
}

#[test]
fn small_data_movement_uses_ll_within_the_scratch() {
    let t = Tuning::default();
    assert!(t.ll_for(256 << 10, (32 << 10) / 16, 8));
    assert!(!t.ll_for((256 << 10) + 128, (32 << 10) / 16, 8));
    // Blocks that touch more packs than a sender's LL slots hold take the barrier kernel.
    assert!(!t.ll_for(1024, t.ll_cap_packs(8) + 1, 8));
    let t = Tuning::from_lookup(lookup(&[
        ("SYMCOMM_LL_MAX", "0"),
        ("SYMCOMM_ONE_SHOT_MAX", "0"),
        ("SYMCOMM_TWO_SHOT_LL_MAX", "0"),
        ("SYMCOMM_FUSED_ONE_SHOT_MAX", "0"),
        ("SYMCOMM_FUSED_TWO_SHOT_LL_MAX", "0"),
    ]))
    .unwrap();
    assert!(!t.ll_for(4096, 32, 8));
    assert_eq!(t.ll_cap_packs(8), 3);
}

#[test]
fn tunings_outside_the_kernels_limits_are_refused() {
    assert!(Tuning::default().validate().is_ok());
    let breakers: [fn(&mut Tuning); 5] = [
        |t| t.max_blocks = MAX_BLOCKS + 1,
        |t| t.max_blocks = 0,
        |t| t.ll_blocks = MAX_LL_BLOCKS + 1,
        |t| t.min_threads = 100,
        |t| t.ll_min_threads = 1024,
    ];
    for breaker in breakers {
        let mut bad = Tuning::default();
        breaker(&mut bad);
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("gallery tuning"), "{e}");
    }
}

#[test]
fn fewer_ranks_keep_the_one_shot_longer_unless_the_environment_says_otherwise() {
    let four = Tuning::for_ranks(4);
    assert_eq!(four, Tuning::default());
    assert_eq!(Tuning::for_ranks(8), four);
    let two = Tuning::for_ranks(2);
    assert_eq!(two.all_reduce_algo(128 << 10), Algo::OneShot);
    assert_eq!(two.all_reduce_algo(256 << 10), Algo::OneShot);
    assert_eq!(two.all_reduce_algo((256 << 10) + 16), Algo::TwoShot);
    assert_eq!(four.all_reduce_algo(128 << 10), Algo::TwoShot);
    assert_eq!(two.fused_algo(256 << 10), Algo::OneShot);
    assert_eq!(four.fused_algo(256 << 10), Algo::TwoShotLl);
    assert_eq!(Tuning::for_ranks(3).one_shot_max, 128 << 10);
    // The LL scratch holds what the raised limit sends.
    assert!(two.ll_cap_packs(2) * plan::PACK >= 256 << 10);
    // A limit set in the environment is taken as it is.
    let set = Tuning::from_lookup_for(2, lookup(&[("SYMCOMM_ONE_SHOT_MAX", "4096")])).unwrap();
    assert_eq!(set.one_shot_max, 4096);
    assert_eq!(set.fused_one_shot_max, 256 << 10);
}

#[test]
fn block_counts_follow_the_work_and_the_cap() {
    let t = Tuning::default();
    // Narrow blocks first, as many as allowed, then wider ones.
    assert_eq!(t.shape(1), (1, 128));
    assert_eq!(t.shape(128 * 3), (3, 128));
    assert_eq!(t.shape(128 * 128), (128, 128));
    // One pack more: blocks a warp wider, so fewer of them cover the work.
    assert_eq!(t.shape(128 * 128 + 1), (103, 160));
    assert_eq!(t.shape(1 << 30), (128, 512));
    assert_eq!(t.ll_shape(256), (4, 64));
    assert_eq!(t.ll_shape(1 << 20), (64, 512));
}
