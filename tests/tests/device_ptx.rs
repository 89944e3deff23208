//! The device API emits the PTX it promises: each test kernel of `symcomm-test-kernels`
//! contains the instructions of the primitive it exercises, found in **that kernel's body**
//! (so the assertion proves which primitive produced the instruction), and kernels that ask
//! for an ordered read-modify-write contain no plain (relaxed, GPU-scope) `atom.global.add`,
//! which is what LLVM 22 silently produces for `core::sync::atomic` RMWs.

use symcomm_tests::kernels::{ENTRY_POINTS, PTX};

/// The text of kernel `name`: from its `.entry name(` line to the next `.entry` (or `.func`,
/// or the end of the module).
fn body(name: &str) -> &'static str {
    let start = PTX
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no `.entry {name}(` in the test kernels' PTX"));
    let rest = &PTX[start + 1..];
    let end = [".entry ", ".func "]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    &PTX[start..start + 1 + end]
}

/// Asserts that kernel `name` contains every needle.
fn has(name: &str, needles: &[&str]) {
    let b = body(name);
    for n in needles {
        assert!(b.contains(n), "kernel `{name}` lacks `{n}`");
    }
}

/// Asserts that kernel `name` contains none of the needles.
fn lacks(name: &str, needles: &[&str]) {
    let b = body(name);
    for n in needles {
        assert!(!b.contains(n), "kernel `{name}` contains `{n}`");
    }
}

/// Plain RMWs that would mean an ordered request lost its order/scope.
const PLAIN_RMW: &[&str] = &[
    "atom.global.add",
    "atom.global.cas",
    "atom.global.exch",
    "red.global.add",
];

#[test]
fn every_test_kernel_is_exported() {
    for k in [
        "geometry",
        "fill_u32",
        "copy_u32",
        "smem_static_reverse",
        "smem_dynamic_reverse",
        "cluster_exchange",
        "warp_ops",
        "block_votes",
        "timers",
        "pdl_producer",
        "pdl_consumer",
        "coop_probe",
        "warp_any_orders",
        "block_named_barrier",
        "atomic_add_acq_rel",
        "red_add_release",
        "atomic_cas_counter",
        "atomic_exch_chain",
        "message_pass",
        "vector_roundtrip",
        "load_const_copy",
        "store_low_if_slots",
        "div_fast",
        "team_probe",
        "window_math",
        "reduce_packs",
        "ll_roundtrip",
        "barrier_rounds",
        "barrier_pair",
        "barrier_lonely",
        "multimem_ops",
        "barrier_multimem",
    ] {
        assert!(ENTRY_POINTS.contains(&k), "entry point {k} missing");
    }
    assert_eq!(body("geometry").matches(".entry ").count(), 1);
}

#[test]
fn ordered_rmws_are_inline_ptx_with_order_and_scope() {
    has("atomic_add_acq_rel", &["atom.acq_rel.sys.global.add.u32"]);
    has(
        "red_add_release",
        &[
            "red.release.sys.global.add.u32",
            "red.release.gpu.global.add.u64",
            "atom.acquire.gpu.global.add.u64",
        ],
    );
    has(
        "atomic_cas_counter",
        &[
            "atom.acq_rel.sys.global.cas.b32",
            "ld.relaxed.sys.global.b32",
        ],
    );
    has(
        "atomic_exch_chain",
        &[
            "atom.acq_rel.sys.global.exch.b32",
            "atom.release.gpu.global.exch.b64",
        ],
    );
    for k in [
        "atomic_add_acq_rel",
        "red_add_release",
        "atomic_cas_counter",
        "atomic_exch_chain",
        "barrier_rounds",
        "barrier_pair",
        "barrier_lonely",
        "barrier_multimem",
        "message_pass",
        "multimem_ops",
    ] {
        lacks(k, PLAIN_RMW);
    }
}

#[test]
fn ordered_loads_stores_and_fences_appear_where_requested() {
    has(
        "message_pass",
        &[
            "st.release.sys.global.b32",
            "ld.acquire.sys.global.b32",
            "fence.acq_rel.sys",
            "fence.sc.sys",
            "fence.proxy.alias",
            "st.relaxed.sys.global.b32",
            "%globaltimer",
        ],
    );
}

#[test]
fn vector_accesses_move_16_bytes_per_instruction() {
    has(
        "vector_roundtrip",
        &[
            "ld.global.v4.u32",
            "st.global.v4.u32",
            "ld.relaxed.gpu.global.v4.f32",
            "st.release.sys.global.v4.f32",
            "ld.acquire.sys.global.v2.u64",
            "st.volatile.global.v2.u64",
        ],
    );
}

#[test]
fn partial_stores_are_predicated_not_branched() {
    has(
        "store_low_if_slots",
        &[
            "@%stp st.global.u8",
            "@%stp st.global.u16",
            "@%stp st.global.u32",
            "@%stp st.global.u64",
        ],
    );
}

#[test]
fn constant_loads_use_the_non_coherent_path() {
    has(
        "load_const_copy",
        &[
            "ld.global.nc.v4.u32",
            "ld.global.nc.b64",
            "ld.global.nc.b32",
        ],
    );
    // Window descriptors are read through ld.global.nc by the pointer functions too.
    has("window_math", &["ld.global.nc.b64", "ld.global.nc.b32"]);
}

#[test]
fn arch_primitives_map_to_their_instructions() {
    has(
        "smem_static_reverse",
        &[
            "cvta.shared.u64",
            "symcomm_smem_TEST_REVERSE_TILE",
            "bar.sync",
        ],
    );
    assert!(
        PTX.contains(".shared .align 16 .b8 symcomm_smem_TEST_REVERSE_TILE[1024];"),
        "static shared array of 256 u32 not declared"
    );
    assert!(PTX.contains(".extern .shared .align 16 .b8 symcomm_dynamic_smem[];"));
    has(
        "smem_dynamic_reverse",
        &["symcomm_dynamic_smem", "%dynamic_smem_size"],
    );
    has(
        "cluster_exchange",
        &[
            "%cluster_ctarank",
            "%cluster_nctarank",
            "mbarrier.init.shared::cta.b64",
            "fence.mbarrier_init.release.cluster",
            "barrier.cluster.arrive.release.aligned",
            "barrier.cluster.wait.acquire.aligned",
            "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64",
            "mapa.shared::cluster.u32",
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32",
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
        ],
    );
    has(
        "warp_ops",
        &[
            "shfl.sync.idx.b32",
            "shfl.sync.bfly.b32",
            "shfl.sync.up.b32",
            "shfl.sync.down.b32",
            "vote.sync.ballot.b32",
            "vote.sync.all.pred",
            "vote.sync.any.pred",
            "%laneid",
            "%lanemask_lt",
            "activemask.b32",
        ],
    );
    has("block_votes", &["bar.red.popc.u32", "bar.red.or.pred"]);
    has("timers", &["%globaltimer", "%clock64", "nanosleep.u32"]);
    has("pdl_producer", &["griddepcontrol.launch_dependents"]);
    has("pdl_consumer", &["griddepcontrol.wait"]);
    has(
        "coop_probe",
        &[
            "bar.warp.sync",
            "vote.sync.any.pred",
            "bar.red.or.pred",
            "bar.sync",
        ],
    );
}

#[test]
fn warp_level_any_orders_memory_with_bar_warp_sync() {
    // One `bar.warp.sync` per warp-level `any` (Tile<4>, Warp, Lanes): `vote.sync` alone
    // gives no memory ordering, and `LsaBarrier::wait` syncs its group only through `any`.
    let b = body("warp_any_orders");
    assert!(b.contains("vote.sync.any.pred"), "{b}");
    assert!(
        b.matches("bar.warp.sync").count() >= 3,
        "`any` of a warp-level group lacks `bar.warp.sync`:\n{b}"
    );
}

#[test]
fn whole_block_named_barriers_pass_the_block_count() {
    // `n_threads = 0` is the whole block (as in the emulator): `bar.arrive` needs a non-zero
    // count, and a count-less `bar.sync` cannot meet a counted `bar.arrive` (illegal
    // instruction on H200), so both pass the block's thread count from %ntid.
    let b = body("block_named_barrier")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for n in [
        "bar.sync 3, %r",
        "bar.arrive 3, %r",
        "%ntid.x",
        "%ntid.y",
        "%ntid.z",
    ] {
        assert!(b.contains(n), "`block_named_barrier` lacks `{n}`:\n{b}");
    }
    for n in ["bar.sync 3;", "bar.sync 3, 0;", "bar.arrive 3, 0;"] {
        assert!(!b.contains(n), "`block_named_barrier` contains `{n}`:\n{b}");
    }
}

#[test]
fn barriers_follow_the_nccl_lsa_algorithm() {
    // Unicast: release fence + relaxed system-scope stores on arrive, acquire system-scope
    // loads on wait, timed by %globaltimer, abort flag polled with a relaxed system load.
    for k in ["barrier_rounds", "barrier_pair"] {
        has(
            k,
            &[
                "fence.acq_rel.sys",
                "st.relaxed.sys.global.b32",
                "ld.acquire.sys.global.b32",
                "%globaltimer",
                "bar.red.or.pred",
            ],
        );
    }
    has("barrier_pair", &["bar.warp.sync", "vote.sync.any.pred"]);
    has(
        "barrier_lonely",
        &[
            "ld.acquire.sys.global.b32",
            "ld.relaxed.sys.global.b32",
            "%globaltimer",
        ],
    );
    // Multimem: one multicast add per arrival, release when the order has a release half.
    has(
        "barrier_multimem",
        &[
            "multimem.red.release.sys.global.add.u32",
            "multimem.red.relaxed.sys.global.add.u32",
            "ld.acquire.sys.global.b32",
        ],
    );
}

#[test]
fn ll_lines_are_single_16_byte_relaxed_system_accesses() {
    has(
        "ll_roundtrip",
        &[
            "st.relaxed.sys.global.v4.u32",
            "ld.relaxed.sys.global.v4.u32",
            "%globaltimer",
        ],
    );
}

#[test]
fn multimem_forms_are_emitted_and_16_bit_sums_accumulate_in_fp32() {
    has(
        "multimem_ops",
        &[
            "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2",
            "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2",
            "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2",
            "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.f16x2",
            "multimem.ld_reduce.relaxed.sys.global.add.v4.f32",
            "multimem.ld_reduce.relaxed.sys.global.add.f32",
            "multimem.ld_reduce.relaxed.sys.global.add.f64",
            "multimem.ld_reduce.relaxed.sys.global.add.u32",
            "multimem.ld_reduce.relaxed.sys.global.add.s32",
            "multimem.ld_reduce.relaxed.sys.global.add.u64",
            "multimem.ld_reduce.relaxed.sys.global.min.v4.bf16x2",
            "multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2",
            "multimem.ld_reduce.relaxed.sys.global.min.bf16x2",
            "multimem.ld_reduce.relaxed.sys.global.max.bf16x2",
            "multimem.ld_reduce.relaxed.sys.global.min.f16x2",
            "multimem.ld_reduce.relaxed.sys.global.max.f16x2",
            "multimem.ld_reduce.relaxed.sys.global.min.u32",
            "multimem.ld_reduce.relaxed.sys.global.max.u32",
            "multimem.ld_reduce.relaxed.sys.global.min.s32",
            "multimem.ld_reduce.relaxed.sys.global.max.s32",
            "multimem.ld_reduce.relaxed.sys.global.min.u64",
            "multimem.ld_reduce.relaxed.sys.global.max.u64",
            "multimem.ld_reduce.relaxed.sys.global.min.s64",
            "multimem.ld_reduce.relaxed.sys.global.max.s64",
            "multimem.st.relaxed.sys.global.v4.f32",
            "multimem.st.relaxed.sys.global.v4.bf16x2",
            "multimem.st.relaxed.sys.global.v4.f16x2",
            "multimem.st.relaxed.sys.global.f64",
            "multimem.st.relaxed.sys.global.u64",
            "multimem.red.release.sys.global.add.u32",
            "multimem.red.relaxed.sys.global.add.u32",
            "multimem.red.release.sys.global.add.v4.f32",
            "multimem.red.relaxed.sys.global.add.v4.bf16x2",
            "multimem.red.relaxed.sys.global.add.f64",
        ],
    );
}

#[test]
fn multimem_stays_in_the_load_only_kernels() {
    for k in ENTRY_POINTS {
        if *k != "multimem_ops" && *k != "barrier_multimem" {
            lacks(k, &["multimem."]);
        }
    }
}
