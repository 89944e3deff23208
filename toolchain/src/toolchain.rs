//! The pinned toolchain the kernels are built with: which one (`$SYMCOMM_TOOLCHAIN` or
//! [`PINNED_TOOLCHAIN`]), its sysroot and LLVM tools (checking that it is installed, with the
//! components the device build needs), and the PTX linker compiled with it on first use.
//!
//! Used by [`crate::builder`]; the linker's source is [`crate::linker`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::files::{fnv1a, mkdir, write};
use crate::{Error, PINNED_TOOLCHAIN, TOOLCHAIN_ENV};

/// The pinned toolchain's sysroot facts.
pub(crate) struct Toolchain {
    name: String,
    pub(crate) sysroot: PathBuf,
    pub(crate) llvm_tools: PathBuf,
}

impl Toolchain {
    pub(crate) fn probe(name: &str, chosen: Chosen) -> Result<Toolchain, Error> {
        let rustc = |args: &[&str]| -> Result<String, Error> {
            // RUSTUP_AUTO_INSTALL=0: a missing toolchain is reported (below) with the command
            // that installs it, instead of rustup downloading it in the middle of a build,
            // perhaps an offline one.
            let out = Command::new("rustc")
                .env("RUSTUP_TOOLCHAIN", name)
                .env("RUSTUP_AUTO_INSTALL", "0")
                .env_remove("RUSTC")
                .args(args)
                .output()
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Error::MissingToolchain {
                        toolchain: name.to_owned(),
                        detail: "no `rustc` on PATH; install rustup from https://rustup.rs".into(),
                        from_env: chosen == Chosen::Env,
                    },
                    _ => Error::Io {
                        what: format!("run rustc of toolchain {name}"),
                        source: e,
                    },
                })?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                if let Some(line) = not_installed(&stderr) {
                    return Err(Error::MissingToolchain {
                        toolchain: name.to_owned(),
                        detail: line.to_owned(),
                        from_env: chosen == Chosen::Env,
                    });
                }
                return Err(Error::Io {
                    what: format!("run rustc of toolchain {name}"),
                    source: std::io::Error::other(stderr.trim().to_owned()),
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

/// The toolchain for kernels: `$SYMCOMM_TOOLCHAIN` when set, else `chosen` (the builder's),
/// else [`PINNED_TOOLCHAIN`].
///
/// The user's own `rust-toolchain.toml` plays no part: it chooses the toolchain of the outer
/// build (which may be stable), while the kernels need this exact nightly.
pub(crate) fn toolchain_for_kernels(chosen: Option<&str>) -> (String, Chosen) {
    match std::env::var(TOOLCHAIN_ENV) {
        Ok(tc) if !tc.trim().is_empty() => (tc.trim().to_owned(), Chosen::Env),
        _ => match chosen {
            Some(tc) => (tc.to_owned(), Chosen::Builder),
            None => (PINNED_TOOLCHAIN.to_owned(), Chosen::Pinned),
        },
    }
}

/// Who chose the kernels' toolchain (for the missing-toolchain message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// `$SYMCOMM_TOOLCHAIN`.
    Env,
    /// `Builder::toolchain`.
    Builder,
    /// Nobody: [`PINNED_TOOLCHAIN`].
    Pinned,
}

/// The line of rustup's message saying that the requested toolchain is not installed.
pub(crate) fn not_installed(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.contains("is not installed"))
}

/// The `channel = "..."` value of a `rust-toolchain.toml`.
#[cfg(test)]
pub(crate) fn channel_of(toml: &str) -> Option<String> {
    toml.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "channel").then(|| value.trim().trim_matches('"').to_owned())
    })
}
