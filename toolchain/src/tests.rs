//! Unit tests of the crate's private helpers: the pinned toolchain, the outer cargo's offline
//! mode, the seeded lock file, dep-info parsing, the generated module, and the linker's
//! argument parsing.

use std::path::{Path, PathBuf};

use crate::builder::generated_module;
use crate::linker;
use crate::nested_cargo::{dep_info_sources, lockfile_config, offline_from, seeded_lock_file};
use crate::toolchain::{channel_of, not_installed};

#[test]
fn the_pinned_toolchain_is_the_workspaces() {
    let toml = "[toolchain]\nchannel = \"nightly-2026-05-20\"\ncomponents = [\"rust-src\"]\n";
    assert_eq!(channel_of(toml).as_deref(), Some("nightly-2026-05-20"));
    assert_eq!(channel_of("[toolchain]\n"), None);
    // Bumping the workspace's nightly without the constant (or the reverse) fails here.
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rust-toolchain.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(channel_of(&text).as_deref(), Some(crate::PINNED_TOOLCHAIN));
    let components = text
        .lines()
        .find(|l| l.trim_start().starts_with("components"))
        .unwrap();
    for c in crate::REQUIRED_COMPONENTS {
        assert!(components.contains(c), "{c} missing from {components}");
    }
}

#[test]
fn a_missing_toolchain_is_recognised_in_rustups_message() {
    let stderr = "error: toolchain 'nightly-2020-01-01-x86_64-unknown-linux-gnu' is not installed\n\
                  help: run `rustup toolchain install` to install it\n";
    assert_eq!(
        not_installed(stderr),
        Some("error: toolchain 'nightly-2020-01-01-x86_64-unknown-linux-gnu' is not installed")
    );
    assert_eq!(not_installed("error: could not compile"), None);
    let msg = crate::Error::MissingToolchain {
        toolchain: "nightly-2026-05-20".into(),
        detail: "not installed".into(),
        from_env: false,
    }
    .to_string();
    assert!(
        msg.contains(
            "rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src,llvm-tools"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("the host crate builds with any toolchain"),
        "{msg}"
    );
    let msg = crate::Error::MissingToolchain {
        toolchain: "nightly-2020-01-01".into(),
        detail: "not installed".into(),
        from_env: true,
    }
    .to_string();
    assert!(
        msg.contains("SYMCOMM_TOOLCHAIN=nightly-2020-01-01 chose it; unset SYMCOMM_TOOLCHAIN"),
        "{msg}"
    );
    let msg = crate::Error::MissingToolchain {
        toolchain: "nightly-2020-01-01".into(),
        detail: "not installed".into(),
        from_env: false,
    }
    .to_string();
    assert!(msg.contains("chose it with Builder::toolchain"), "{msg}");
    assert!(!msg.contains("unset"), "{msg}");
}

#[test]
fn offline_mode_is_read_from_the_outer_cargo() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cargo = "/root/.rustup/toolchains/stable/bin/cargo";
    assert!(offline_from(None, &args(&[cargo, "build", "--offline"])));
    assert!(offline_from(
        None,
        &args(&[cargo, "test", "--frozen", "-p", "x"])
    ));
    assert!(offline_from(
        None,
        &args(&[cargo, "build", "--config", "net.offline = true"])
    ));
    assert!(offline_from(
        None,
        &args(&[cargo, "build", "--config=net.offline=true"])
    ));
    assert!(offline_from(Some("true"), &args(&[cargo, "build"])));
    assert!(!offline_from(Some("false"), &args(&[cargo, "build"])));
    assert!(!offline_from(None, &args(&[cargo, "build", "--locked"])));
    assert!(!offline_from(
        None,
        &args(&[cargo, "run", "--", "--offline"])
    ));
    assert!(!offline_from(
        None,
        &args(&[cargo, "build", "--config", "net.offline=false"])
    ));
    // A parent that is not cargo (a test harness calling build_into) says nothing.
    assert!(!offline_from(None, &args(&["/usr/bin/make", "--offline"])));
}

#[test]
fn the_lock_file_is_a_private_copy_refreshed_when_the_outer_one_changes() {
    let dir = std::env::temp_dir().join(format!("symcomm-build-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (outer, kernels, target) = (dir.join("app"), dir.join("app/kernels"), dir.join("t"));
    std::fs::create_dir_all(&kernels).unwrap();
    assert_eq!(
        seeded_lock_file(Some(&outer), &kernels, &target).unwrap(),
        None
    );
    std::fs::write(outer.join("Cargo.lock"), "version = 4\n").unwrap();
    let lock = seeded_lock_file(Some(&outer), &kernels, &target)
        .unwrap()
        .unwrap();
    assert!(lock.starts_with(&target));
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "version = 4\n");
    // The nested cargo may rewrite its copy; the copy stays until the outer one changes.
    std::fs::write(&lock, "rewritten").unwrap();
    assert_eq!(
        seeded_lock_file(Some(&outer), &kernels, &target).unwrap(),
        Some(lock.clone())
    );
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "rewritten");
    std::fs::write(outer.join("Cargo.lock"), "version = 4\n# changed\n").unwrap();
    seeded_lock_file(Some(&outer), &kernels, &target).unwrap();
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "version = 4\n# changed\n"
    );
    // Another kernels crate gets a copy of its own; the user's file is never written.
    let other = seeded_lock_file(Some(&outer), &dir.join("other"), &target)
        .unwrap()
        .unwrap();
    assert_ne!(other, lock);
    assert_eq!(
        std::fs::read_to_string(outer.join("Cargo.lock")).unwrap(),
        "version = 4\n# changed\n"
    );
    // A kernels crate with a lock file of its own resolves from that one.
    let own = dir.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("Cargo.lock"), "# own\n").unwrap();
    let copy = seeded_lock_file(Some(&outer), &own, &target)
        .unwrap()
        .unwrap();
    assert_eq!(std::fs::read_to_string(copy).unwrap(), "# own\n");
    assert_eq!(
        lockfile_config(Path::new("/t/a \"b\"/Cargo.lock")),
        "resolver.lockfile-path=\"/t/a \\\"b\\\"/Cargo.lock\""
    );
    std::fs::remove_dir_all(&dir).unwrap();
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
fn generated_module_lists_entries_and_links_the_host_build() {
    let entries = ["a".to_string(), "b".to_string()];
    let m = generated_module("k", Path::new("/o/k.ptx"), &entries, "sm_90", Some("k"));
    assert!(m.contains("pub const ENTRY_POINTS: &[&str] = &[\"a\", \"b\"];"));
    assert!(m.contains("include_str!(\"/o/k.ptx\")"));
    assert!(m.contains("pub const ARCH: &str = \"sm_90\";"));
    assert!(m.contains("\nextern crate k as _;\n"), "{m}");
    let renamed = generated_module("k", Path::new("/o/k.ptx"), &entries, "sm_90", Some("kern"));
    assert!(renamed.contains("\nextern crate kern as _;\n"), "{renamed}");
    let none = generated_module("k", Path::new("/o/k.ptx"), &entries, "sm_90", None);
    assert!(!none.contains("extern crate"), "{none}");
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
