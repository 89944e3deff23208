//! The pinned toolchain the kernels are built with: which one (`$SYMCOMM_TOOLCHAIN` or the
//! nearest `rust-toolchain.toml`), its sysroot and LLVM tools (checking the components the
//! device build needs), and the PTX linker compiled with it on first use.
//!
//! Used by [`crate::builder`]; the linker's source is [`crate::linker`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::files::{find_upwards, mkdir, write};
use crate::{Error, TOOLCHAIN_ENV};

/// The pinned toolchain's sysroot facts.
pub(crate) struct Toolchain {
    name: String,
    pub(crate) sysroot: PathBuf,
    pub(crate) llvm_tools: PathBuf,
}

impl Toolchain {
    pub(crate) fn probe(name: &str) -> Result<Toolchain, Error> {
        let rustc = |args: &[&str]| -> Result<String, Error> {
            let out = Command::new("rustc")
                .env("RUSTUP_TOOLCHAIN", name)
                .env_remove("RUSTC")
                .args(args)
                .output()
                .map_err(|e| Error::Io {
                    what: format!("run rustc of toolchain {name}"),
                    source: e,
                })?;
            if !out.status.success() {
                return Err(Error::Io {
                    what: format!("run rustc of toolchain {name}"),
                    source: std::io::Error::other(
                        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    ),
                });
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        let sysroot = PathBuf::from(rustc(&["--print", "sysroot"])?);
        let host = rustc(&["-vV"])?
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
            .unwrap_or_else(|| "x86_64-unknown-linux-gnu".to_owned());
        let llvm_tools = sysroot.join("lib/rustlib").join(host).join("bin");
        if !llvm_tools.join("llc").is_file() {
            return Err(Error::MissingComponent {
                toolchain: name.to_owned(),
                component: "llvm-tools",
            });
        }
        if !sysroot
            .join("lib/rustlib/src/rust/library/core/Cargo.toml")
            .is_file()
        {
            return Err(Error::MissingComponent {
                toolchain: name.to_owned(),
                component: "rust-src",
            });
        }
        Ok(Toolchain {
            name: name.to_owned(),
            sysroot,
            llvm_tools,
        })
    }

    /// Compiles the linker (src/linker.rs, std only) into `dir` unless an up-to-date copy
    /// is already there.
    pub(crate) fn linker_exe(&self, dir: &Path) -> Result<PathBuf, Error> {
        const LINKER_SRC: &str = include_str!("linker.rs");
        const MAIN_SRC: &str = "mod linker;\nfn main() { std::process::exit(linker::main()); }\n";
        let exe = dir.join("symcomm-ptx-link");
        let stamp = dir.join("symcomm-ptx-link.stamp");
        let want = format!("{}\n{:016x}", self.name, fnv1a(LINKER_SRC.as_bytes()));
        if exe.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&want) {
            return Ok(exe);
        }
        // Build in a directory of this process's own and move the result into place: two
        // builds racing to create the linker (parallel build scripts or tests) never share
        // rustc's intermediate files or see a half-written executable.
        static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let private = dir.join(format!("symcomm-ptx-link-build.{}.{n}", std::process::id()));
        mkdir(&private)?;
        write(&private.join("linker.rs"), LINKER_SRC.as_bytes())?;
        write(&private.join("main.rs"), MAIN_SRC.as_bytes())?;
        let built = private.join("symcomm-ptx-link");
        let out = Command::new("rustc")
            .env("RUSTUP_TOOLCHAIN", &self.name)
            .env_remove("RUSTC")
            .args([
                "--edition",
                "2021",
                "-O",
                "--crate-name",
                "symcomm_ptx_link",
            ])
            .arg(private.join("main.rs"))
            .arg("-o")
            .arg(&built)
            .output()
            .map_err(|e| Error::Io {
                what: "compile the PTX linker".into(),
                source: e,
            })?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&private);
            return Err(Error::Io {
                what: "compile the PTX linker".into(),
                source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
            });
        }
        let moved = std::fs::rename(&built, &exe).map_err(|e| Error::Io {
            what: format!("move the PTX linker to {}", exe.display()),
            source: e,
        });
        let _ = std::fs::remove_dir_all(&private);
        moved?;
        write(&stamp, want.as_bytes())?;
        Ok(exe)
    }
}

/// The toolchain for kernels: `$SYMCOMM_TOOLCHAIN`, else the `channel` of the nearest
/// `rust-toolchain.toml` above the kernels crate, else `nightly`.
pub(crate) fn toolchain_for(crate_dir: &Path) -> String {
    if let Ok(tc) = std::env::var(TOOLCHAIN_ENV)
        && !tc.is_empty()
    {
        return tc;
    }
    find_upwards(crate_dir, "rust-toolchain.toml")
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|text| channel_of(&text))
        .unwrap_or_else(|| "nightly".to_owned())
}

/// The `channel = "..."` value of a `rust-toolchain.toml`.
pub(crate) fn channel_of(toml: &str) -> Option<String> {
    toml.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "channel").then(|| value.trim().trim_matches('"').to_owned())
    })
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
