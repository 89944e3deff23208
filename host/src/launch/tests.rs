//! Unit tests of PTX parameter parsing.

use super::ptx::{entry_params, param_size};

const PTX: &str = ".version 8.3\n.target sm_90\n\
    .visible .entry vector_add(\n\t.param .u64 .ptr .align 1 vector_add_param_0,\n\
    \t.param .u32 vector_add_param_1,\n\t.param .align 8 .b8 vector_add_param_2[240],\n\
    \t.param .f32 vector_add_param_3\n)\n{\n\tret;\n}\n\
    .visible .entry no_params()\n{\n\tret;\n}\n";

#[test]
fn parameter_sizes_come_from_the_ptx_declaration() {
    let p = entry_params(PTX);
    assert_eq!(p["vector_add"], vec![8, 4, 240, 4]);
    assert_eq!(p["no_params"], Vec::<usize>::new());
    assert_eq!(p.len(), 2);
}

#[test]
fn malformed_parameter_declarations_are_skipped_not_a_panic() {
    // A `]` before the last `[` (here from a comment) does not make an array; an array
    // whose byte size overflows is not counted; the well-formed parameters still are.
    let ptx = ".visible .entry odd(\n\t.param .u32 odd_param_0 // a[i]; b] [\n,\
        \t.param .u64 odd_param_1[18446744073709551615],\n\
        \t.param .align 4 .b32 odd_param_2[3]\n)\n{\n\tret;\n}\n";
    let p = entry_params(ptx);
    assert_eq!(p["odd"], vec![4, 12]);
    assert_eq!(param_size(".param x] ["), None);
    assert_eq!(param_size(".param .u64 x[4]"), Some(32));
    assert_eq!(param_size(".param .u64 x[4611686018427387904]"), None);
}
