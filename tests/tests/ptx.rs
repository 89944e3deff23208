//! Checks on every PTX module the workspace builds: the target, the entry points, and that
//! NVIDIA's assembler accepts it for sm_90.

use std::path::PathBuf;

use symcomm_build::{ptx, ptxas};
use symcomm_tests::{all_ptx, repo_root};

#[test]
fn example_ptx_targets_sm90_and_exports_vector_add() {
    let text = symcomm_examples::kernels::PTX;
    assert_eq!(ptx::target(text), Some("sm_90"));
    let (major, minor) = ptx::version(text).expect("PTX declares a .version");
    assert!(
        (major, minor) >= (8, 3),
        "PTX ISA {major}.{minor} is older than 8.3"
    );
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(".visible .entry vector_add(")),
        "no `.visible .entry vector_add(` in the example PTX"
    );
    assert_eq!(
        symcomm_examples::kernels::ENTRY_POINTS,
        ["hello_window", "ring_exchange", "vector_add"]
    );
}

#[test]
fn every_module_declares_sm90_and_lists_its_entry_points() {
    for m in all_ptx() {
        assert_eq!(ptx::target(m.ptx), Some("sm_90"), "{}", m.name);
        assert_eq!(ptx::entry_points(m.ptx), m.entry_points, "{}", m.name);
        assert!(!m.entry_points.is_empty(), "{} exports no kernel", m.name);
    }
}

#[test]
fn every_ptx_module_is_accepted_by_ptxas_for_sm90() {
    let root = repo_root();
    let Some(ptxas) = ptxas::find_for_checks(&root).unwrap_or_else(|e| panic!("{e}")) else {
        eprintln!("skipping: ptxas not found (run scripts/fetch-ptxas)");
        return;
    };
    let dir = root.join("target/ptxas-check");
    std::fs::create_dir_all(&dir).unwrap();
    for m in all_ptx() {
        let file: PathBuf = dir.join(format!("{}.ptx", m.name));
        std::fs::write(&file, m.ptx).unwrap();
        match ptxas::assemble(&ptxas, &file, "sm_90", &dir) {
            Ok(out) => {
                let cubin = std::fs::metadata(&out.cubin).unwrap();
                assert!(cubin.len() > 0, "{}: empty cubin", m.name);
            }
            Err(e) => panic!("{e}"),
        }
    }
}
