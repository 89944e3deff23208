//! End-to-end tests of the nested kernels build: a throwaway kernels crate is built to PTX,
//! edited and rebuilt, and broken on purpose.

use std::path::{Path, PathBuf};

use symcomm_build::{Builder, Error};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A standalone kernels crate under `target/` (so the repo's rust-toolchain.toml applies).
struct ScratchCrate {
    dir: PathBuf,
}

impl ScratchCrate {
    fn new(name: &str) -> ScratchCrate {
        let root = repo_root();
        let dir = root.join("target/symcomm-build-tests").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let manifest = format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
             [lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\
             [dependencies]\nsymcomm-device = {{ path = {:?} }}\n[workspace]\n",
            root.join("device").display().to_string()
        );
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
        // Reuse the workspace's resolved versions so the scratch build resolves offline.
        std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
        ScratchCrate { dir }
    }

    fn write_kernels(&self, body: &str) {
        let src = format!(
            "#![no_std]\n#![cfg_attr(target_arch = \"nvptx64\", feature(abi_ptx))]\n\
             use symcomm_device::prelude::*;\n{body}\n"
        );
        std::fs::write(self.dir.join("src/lib.rs"), src).unwrap();
    }

    fn build(&self) -> Result<symcomm_build::Ptx, Error> {
        Builder::new(&self.dir).build_into(&repo_root().join("target/ptx"), &self.dir.join("out"))
    }
}

const KERNEL_A: &str = "/// Writes the thread index.\n/// # Safety\n/// `out` valid for one write per thread.\n\
    #[kernel]\npub unsafe fn probe_a(out: *mut u32) { unsafe { *out.add(thread_idx().x as usize) = 7 } }\n";
const KERNEL_B: &str = "/// Second kernel.\n/// # Safety\n/// `out` valid for one write.\n\
    #[kernel]\npub unsafe fn probe_b(out: *mut u32) { unsafe { *out = 9 } }\n";

#[test]
fn editing_a_kernel_rebuilds_the_ptx_and_names_its_sources() {
    let k = ScratchCrate::new("symcomm_build_probe_edit");
    k.write_kernels(KERNEL_A);
    let first = k.build().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.entry_points, ["probe_a"]);
    let text = std::fs::read_to_string(&first.path).unwrap();
    assert!(text.contains(".target sm_90"));
    assert!(
        first
            .sources
            .iter()
            .any(|s| s.ends_with("src/lib.rs") && s.starts_with(&k.dir)),
        "the kernel source is not among the rerun-if-changed files: {:?}",
        first.sources
    );
    assert!(
        first
            .sources
            .iter()
            .any(|s| s.ends_with("device/src/arch/mod.rs")),
        "the device crate is not among the rerun-if-changed files: {:?}",
        first.sources
    );

    k.write_kernels(&format!("{KERNEL_A}{KERNEL_B}"));
    let second = k.build().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(second.entry_points, ["probe_a", "probe_b"]);
    let module = std::fs::read_to_string(&second.module_rs).unwrap();
    assert!(module.contains("&[\"probe_a\", \"probe_b\"]"));
}

#[test]
fn a_compile_error_in_a_kernel_is_reported_with_the_compilers_message() {
    let k = ScratchCrate::new("symcomm_build_probe_broken");
    k.write_kernels(
        "/// Broken.\n/// # Safety\n/// none.\n#[kernel]\npub unsafe fn broken(out: *mut u32) { let x: u32 = \"text\"; unsafe { *out = x } }\n",
    );
    match k.build() {
        Err(e @ Error::Compile { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("symcomm_build_probe_broken"), "{msg}");
            assert!(msg.contains("mismatched types"), "{msg}");
            assert!(msg.contains("src/lib.rs"), "{msg}");
        }
        Err(e) => panic!("expected a compile error, got: {e}"),
        Ok(_) => panic!("a kernel with a type error compiled"),
    }
}

#[test]
fn a_missing_kernels_crate_is_a_clear_error() {
    let err = Builder::new(repo_root().join("target/no-such-kernels-crate"))
        .build_into(&repo_root().join("target/ptx"), Path::new("/tmp"))
        .unwrap_err();
    assert!(err.to_string().starts_with("no kernels crate at"), "{err}");
}

#[test]
fn a_toolchain_that_is_not_installed_is_named_with_the_command_installing_it() {
    let k = ScratchCrate::new("symcomm_build_probe_no_toolchain");
    k.write_kernels(KERNEL_A);
    if std::env::var_os(symcomm_build::TOOLCHAIN_ENV).is_some() {
        return; // the variable overrides the builder's choice; nothing to test then
    }
    let err = Builder::new(&k.dir)
        .toolchain("nightly-2001-01-01")
        .build_into(&repo_root().join("target/ptx"), &k.dir.join("out"))
        .unwrap_err();
    assert!(matches!(err, Error::MissingToolchain { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(
            "rustup toolchain install nightly-2001-01-01 --profile minimal --component rust-src,llvm-tools"
        ),
        "{msg}"
    );
}
