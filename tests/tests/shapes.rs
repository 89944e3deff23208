//! The shape matrix of `symcomm_tests::shapes` on thread ranks of the CPU emulator: 2, 3 and
//! 4 ranks over the full matrix, 8 ranks over the subset; and the refusal of operands that do
//! not start on a whole element.

use std::time::Instant;

use symcomm_tests::shapes::{
    barrier_passes, barrier_passes_tuning, full_matrix, ll_passes, ll_passes_tuning,
    misaligned_messages, run_matrix, run_matrix_tuned, subset,
};

#[test]
fn every_collective_and_type_over_counts_and_offsets_on_2_3_and_4_ranks() {
    let shapes = full_matrix();
    for n in [2, 3, 4] {
        let t0 = Instant::now();
        let tally = run_matrix(n, &shapes, true).unwrap_or_else(|e| panic!("{e}"));
        println!(
            "{n} ranks: {} shapes, {} ran (every element and guard checked), in {:.1} s",
            shapes.len(),
            tally.ran,
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(tally.ran, shapes.len());
    }
}

#[test]
fn a_subset_on_8_ranks() {
    let shapes = subset();
    let t0 = Instant::now();
    let tally = run_matrix(8, &shapes, true).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "8 ranks: {} shapes, {} ran, in {:.1} s",
        shapes.len(),
        tally.ran,
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(tally.ran, shapes.len());
}

#[test]
fn ll_all_to_all_threads_go_round_their_loops() {
    let shapes = ll_passes();
    for n in [2, 3] {
        let tally = run_matrix_tuned(n, &shapes, true, ll_passes_tuning())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tally.ran, shapes.len());
    }
}

#[test]
fn barrier_all_gather_and_all_to_all_threads_go_round_their_loops() {
    let shapes = barrier_passes();
    for n in [2, 3, 4] {
        let tally = run_matrix_tuned(n, &shapes, true, barrier_passes_tuning())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tally.ran, shapes.len());
    }
}

#[test]
fn misaligned_elements_are_refused_naming_the_operand() {
    for messages in misaligned_messages(true).unwrap_or_else(|e| panic!("{e}")) {
        assert_eq!(messages.len(), 6);
        for (k, m) in messages.iter().enumerate() {
            let want = if k % 2 == 0 {
                "all_reduce destination: byte offset 6 is not a whole number of f32 elements \
                 (4 bytes each)"
            } else {
                "all_gather source: byte offset 2 is not a whole number of i32 elements"
            };
            assert!(m.contains(want), "{m}");
        }
    }
}
