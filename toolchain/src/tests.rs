//! Unit tests of the crate's private helpers: the toolchain file, dep-info parsing, the
//! generated module, and the linker's argument parsing.

use std::path::{Path, PathBuf};

use crate::builder::generated_module;
use crate::linker;
use crate::nested_cargo::dep_info_sources;
use crate::toolchain::channel_of;

#[test]
fn channel_is_read_from_toolchain_file() {
    let toml = "[toolchain]\nchannel = \"nightly-2026-05-20\"\ncomponents = [\"rust-src\"]\n";
    assert_eq!(channel_of(toml).as_deref(), Some("nightly-2026-05-20"));
    assert_eq!(channel_of("[toolchain]\n"), None);
}

#[test]
fn dep_info_drops_sysroot_and_unescapes_spaces() {
    let dir = std::env::temp_dir().join(format!("symcomm-build-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.join("k.d");
    std::fs::write(
        &d,
        "/t/k.ptx: /src/a.rs /src/my\\ dir/b.rs /sys/lib/core.rs\n\n/src/a.rs:\n",
    )
    .unwrap();
    let got = dep_info_sources(&d, Path::new("/sys"));
    assert_eq!(
        got,
        vec![
            PathBuf::from("/src/a.rs"),
            PathBuf::from("/src/my dir/b.rs")
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_module_lists_entries() {
    let m = generated_module(
        "k",
        Path::new("/o/k.ptx"),
        &["a".into(), "b".into()],
        "sm_90",
    );
    assert!(m.contains("pub const ENTRY_POINTS: &[&str] = &[\"a\", \"b\"];"));
    assert!(m.contains("include_str!(\"/o/k.ptx\")"));
    assert!(m.contains("pub const ARCH: &str = \"sm_90\";"));
}

#[test]
fn linker_args_are_parsed_like_rustc_passes_them() {
    let args = [
        "--export-symbol",
        "vector_add",
        "/t/k.o",
        "/t/libcore.rlib",
        "-L",
        "/t/raw",
        "--target",
        "nvptx64-nvidia-cuda",
        "--target-cpu",
        "sm_90",
        "--target-feature=+ptx83",
        "-o",
        "/t/k.ptx",
        "-O3",
        "--debug",
    ]
    .map(String::from);
    let req = linker::parse_args(args).unwrap();
    assert_eq!(req.exports, vec!["vector_add"]);
    assert_eq!(
        req.inputs,
        vec![PathBuf::from("/t/k.o"), PathBuf::from("/t/libcore.rlib")]
    );
    assert_eq!(req.cpu.as_deref(), Some("sm_90"));
    assert_eq!(req.features.as_deref(), Some("+ptx83"));
    assert_eq!(req.output, PathBuf::from("/t/k.ptx"));
    assert_eq!(
        linker::opt_passes(&req.opt_level),
        "internalize,globaldce,default<O3>,globaldce"
    );
}

#[test]
fn linker_rejects_missing_output() {
    let err = linker::parse_args(["/t/k.o".to_string()]).unwrap_err();
    assert!(err.to_string().contains("no output file"));
}
