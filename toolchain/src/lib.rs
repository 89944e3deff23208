//! `symcomm-build`: turn a Rust kernels crate into linked, verified PTX from a `build.rs`.
//!
//! A host crate that launches kernels calls [`Builder`] from its build script:
//!
//! ```no_run
//! // build.rs: `kernels/` is the kernels crate, next to this crate's Cargo.toml.
//! symcomm_build::Builder::new("kernels").build_or_exit();
//! ```
//!
//! and embeds the result:
//!
//! ```ignore
//! pub mod kernels {
//!     include!(concat!(env!("OUT_DIR"), "/my_kernels.rs")); // PTX, ENTRY_POINTS, ARCH
//! }
//! ```
//!
//! What happens:
//! 1. A nested `cargo build --target nvptx64-nvidia-cuda -Zbuild-std=core --release` of the
//!    kernels crate runs with the toolchain pinned in the nearest `rust-toolchain.toml`, in its
//!    own target directory (`<target>/ptx/<arch>`), so it never contends with the outer build's
//!    lock and later builds are incremental.
//! 2. rustc links through our own linker ([`linker`]): the pinned toolchain's `llvm-link` →
//!    `opt` → `llc`. Nothing is downloaded; the tools are the `llvm-tools` component.
//! 3. The PTX is copied to `OUT_DIR/<crate>.ptx`, its entry points are read out, and
//!    `OUT_DIR/<crate>.rs` is generated with `PTX`, `ENTRY_POINTS` and `ARCH` constants.
//! 4. `cargo:rerun-if-changed` lines name every source file the kernels crate was built from,
//!    so touching a kernel (or the device crate) rebuilds the PTX.
//!
//! Compiler errors in the kernels crate are printed as rustc renders them, followed by one
//! line naming the crate and target.

#![warn(missing_docs)]

pub mod linker;
pub mod ptx;
pub mod ptxas;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The GPU target triple kernels are compiled for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";
/// The default GPU architecture (Hopper: H100/H200).
pub const DEFAULT_ARCH: &str = "sm_90";
/// The default PTX ISA version: 8.3 (multimem needs at least 8.1; driver 580 JITs up to 9.0).
pub const DEFAULT_PTX_ISA: (u32, u32) = (8, 3);
/// Environment variable that overrides the architecture of every kernels build (e.g. `sm_80`).
pub const ARCH_ENV: &str = "SYMCOMM_ARCH";
/// Environment variable that overrides the toolchain used for kernels.
pub const TOOLCHAIN_ENV: &str = "SYMCOMM_TOOLCHAIN";

/// Everything that can go wrong while building or verifying kernels.
#[derive(Debug)]
pub enum Error {
    /// A required environment variable (set by cargo for build scripts) is missing.
    NotInBuildScript(&'static str),
    /// The kernels crate has no `Cargo.toml` at the given path.
    NoKernelsCrate(PathBuf),
    /// The pinned toolchain lacks a component the device build needs.
    MissingComponent {
        /// The toolchain name, e.g. `nightly-2026-05-20`.
        toolchain: String,
        /// The rustup component, e.g. `rust-src`.
        component: &'static str,
    },
    /// An I/O step failed.
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The nested compile of the kernels crate failed.
    Compile {
        /// The kernels crate.
        krate: String,
        /// The GPU architecture.
        arch: String,
        /// The compiler's error messages, as rustc renders them.
        messages: String,
    },
    /// The nested build succeeded but produced no `.ptx` artefact.
    NoPtx(String),
    /// ptxas rejected a PTX file.
    Ptxas {
        /// The PTX file.
        ptx: PathBuf,
        /// The architecture it was assembled for.
        arch: String,
        /// ptxas's messages.
        messages: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotInBuildScript(var) => write!(
                f,
                "symcomm-build must run inside a build script (environment variable {var} is not set)"
            ),
            Error::NoKernelsCrate(p) => {
                write!(
                    f,
                    "no kernels crate at {} (Cargo.toml not found)",
                    p.display()
                )
            }
            Error::MissingComponent {
                toolchain,
                component,
            } => write!(
                f,
                "toolchain {toolchain} lacks the `{component}` component; install it with \
                 `rustup component add {component} --toolchain {toolchain}`"
            ),
            Error::Io { what, source } => write!(f, "cannot {what}: {source}"),
            Error::Compile {
                krate,
                arch,
                messages,
            } => {
                write!(
                    f,
                    "kernels crate `{krate}` failed to compile for {TARGET} ({arch})"
                )?;
                if messages.trim().is_empty() {
                    write!(f, "; see cargo's messages above")
                } else {
                    write!(f, ":\n{}", messages.trim_end())
                }
            }
            Error::NoPtx(krate) => write!(
                f,
                "building kernels crate `{krate}` produced no .ptx file (is its crate-type cdylib?)"
            ),
            Error::Ptxas {
                ptx,
                arch,
                messages,
            } => write!(
                f,
                "ptxas -arch={arch} rejected {}:\n{}",
                ptx.display(),
                messages.trim_end()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Which cargo profile the kernels are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `--release` (the default): optimised, no panic machinery.
    Release,
    /// The dev profile: unoptimised kernels, for debugging codegen only.
    Dev,
}

/// A built PTX module.
#[derive(Debug, Clone)]
pub struct Ptx {
    /// The kernels crate's library name (hyphens as underscores).
    pub name: String,
    /// The PTX file (in `OUT_DIR` when built from a build script).
    pub path: PathBuf,
    /// The generated Rust file with the `PTX`, `ENTRY_POINTS` and `ARCH` constants.
    pub module_rs: PathBuf,
    /// Kernel entry points, in file order.
    pub entry_points: Vec<String>,
    /// The architecture it was built for.
    pub arch: String,
    /// Source files the PTX was built from (announced to cargo with `rerun-if-changed`).
    pub sources: Vec<PathBuf>,
}

/// Configures and runs the build of one kernels crate.
#[derive(Debug, Clone)]
pub struct Builder {
    crate_dir: PathBuf,
    arch: Option<String>,
    ptx_isa: (u32, u32),
    profile: Profile,
    features: Vec<String>,
    rustflags: Vec<String>,
}

impl Builder {
    /// A build of the kernels crate at `kernels_crate` (relative to the calling crate's
    /// `CARGO_MANIFEST_DIR`, or absolute).
    pub fn new(kernels_crate: impl AsRef<Path>) -> Self {
        let p = kernels_crate.as_ref();
        let crate_dir = if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(p)
        };
        Builder {
            crate_dir,
            arch: None,
            ptx_isa: DEFAULT_PTX_ISA,
            profile: Profile::Release,
            features: Vec::new(),
            rustflags: Vec::new(),
        }
    }

    /// The GPU architecture, e.g. `sm_90` (default; `$SYMCOMM_ARCH` overrides), `sm_80`, `sm_100`.
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = Some(arch.into());
        self
    }

    /// The PTX ISA version to emit (default 8.3).
    pub fn ptx_isa(mut self, major: u32, minor: u32) -> Self {
        self.ptx_isa = (major, minor);
        self
    }

    /// The cargo profile (default release).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Enables a cargo feature of the kernels crate.
    pub fn feature(mut self, feature: impl Into<String>) -> Self {
        self.features.push(feature.into());
        self
    }

    /// Passes an extra flag to rustc for the kernels crate and its dependencies.
    pub fn rustflag(mut self, flag: impl Into<String>) -> Self {
        self.rustflags.push(flag.into());
        self
    }

    fn resolved_arch(&self) -> String {
        std::env::var(ARCH_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| self.arch.clone())
            .unwrap_or_else(|| DEFAULT_ARCH.to_owned())
    }

    /// Builds the kernels crate from a build script; writes `OUT_DIR/<crate>.{ptx,rs}` and
    /// prints the `cargo:rerun-if-*` lines.
    pub fn build(&self) -> Result<Ptx, Error> {
        let out_dir =
            PathBuf::from(std::env::var_os("OUT_DIR").ok_or(Error::NotInBuildScript("OUT_DIR"))?);
        let target_root = target_root(&out_dir);
        let ptx = self.build_into(&target_root.join("ptx"), &out_dir)?;
        println!("cargo:rerun-if-env-changed={ARCH_ENV}");
        println!("cargo:rerun-if-env-changed={TOOLCHAIN_ENV}");
        Ok(ptx)
    }

    /// Like [`Builder::build`], but on error prints the error and exits the build script
    /// with status 1 (no panic backtrace).
    pub fn build_or_exit(&self) -> Ptx {
        match self.build() {
            Ok(ptx) => ptx,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }

    /// Builds into `nested_target` (the nested cargo's target directory root) and copies the
    /// PTX and generated module into `out_dir`. Usable outside build scripts.
    pub fn build_into(&self, nested_target: &Path, out_dir: &Path) -> Result<Ptx, Error> {
        let manifest = self.crate_dir.join("Cargo.toml");
        if !manifest.is_file() {
            return Err(Error::NoKernelsCrate(self.crate_dir.clone()));
        }
        let arch = self.resolved_arch();
        let toolchain = toolchain_for(&self.crate_dir);
        let tc = Toolchain::probe(&toolchain)?;
        let target_dir = nested_target.join(&arch);
        mkdir(&target_dir)?;
        let linker = tc.linker_exe(&target_dir)?;

        let (major, minor) = self.ptx_isa;
        let mut flags = vec![
            format!("-Ctarget-cpu={arch}"),
            format!("-Ctarget-feature=+ptx{major}{minor}"),
        ];
        if self.profile == Profile::Release {
            flags.push("-Zunstable-options".into());
            flags.push("-Cpanic=immediate-abort".into());
        }
        flags.extend(self.rustflags.iter().cloned());

        let mut cmd = Command::new("cargo");
        scrub_cargo_env(&mut cmd);
        cmd.env("RUSTUP_TOOLCHAIN", &toolchain)
            .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_LINKER", &linker)
            .env(
                "CARGO_TARGET_NVPTX64_NVIDIA_CUDA_RUSTFLAGS",
                flags.join(" "),
            )
            .env(linker::LLVM_TOOLS_ENV, &tc.llvm_tools)
            .arg("build")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["--lib", "--target", TARGET, "-Zbuild-std=core"])
            .arg("--target-dir")
            .arg(&target_dir)
            .arg("--message-format=json")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if self.profile == Profile::Release {
            cmd.arg("--release");
        }
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        let output = cmd.output().map_err(|e| Error::Io {
            what: "run the nested `cargo build` for the kernels crate".into(),
            source: e,
        })?;
        let report = BuildReport::parse(&String::from_utf8_lossy(&output.stdout), &self.crate_dir);
        let krate = report
            .crate_name
            .clone()
            .unwrap_or_else(|| self.crate_dir.display().to_string());
        if !output.status.success() {
            let messages = report
                .diagnostics
                .iter()
                .filter(|d| !d.is_warning)
                .map(|d| d.rendered.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            return Err(Error::Compile {
                krate,
                arch,
                messages,
            });
        }
        for d in report.diagnostics.iter().filter(|d| d.is_warning) {
            for line in d.rendered.lines().take(2) {
                println!("cargo:warning=kernels: {line}");
            }
        }
        let built = report.ptx.ok_or_else(|| Error::NoPtx(krate.clone()))?;
        let name = built
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or(krate);

        let text = std::fs::read_to_string(&built).map_err(|e| Error::Io {
            what: format!("read {}", built.display()),
            source: e,
        })?;
        let entry_points = ptx::entry_points(&text);
        mkdir(out_dir)?;
        let path = out_dir.join(format!("{name}.ptx"));
        write(&path, text.as_bytes())?;
        let module_rs = out_dir.join(format!("{name}.rs"));
        write(
            &module_rs,
            generated_module(&name, &path, &entry_points, &arch).as_bytes(),
        )?;

        println!("cargo:rerun-if-changed={}", manifest.display());
        println!(
            "cargo:rerun-if-changed={}",
            self.crate_dir.join("src").display()
        );
        if let Some(tc_file) = find_upwards(&self.crate_dir, "rust-toolchain.toml") {
            println!("cargo:rerun-if-changed={}", tc_file.display());
        }
        let sources = dep_info_sources(&built.with_extension("d"), &tc.sysroot);
        for dep in &sources {
            println!("cargo:rerun-if-changed={}", dep.display());
        }
        Ok(Ptx {
            name,
            path,
            module_rs,
            entry_points,
            arch,
            sources,
        })
    }
}

/// The generated module text: `PTX`, `ENTRY_POINTS`, `ARCH`.
fn generated_module(name: &str, ptx: &Path, entries: &[String], arch: &str) -> String {
    let list = entries
        .iter()
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "// Generated by symcomm-build for kernels crate `{name}`; do not edit.\n\
         /// PTX of kernels crate `{name}`, built for {arch}.\n\
         pub const PTX: &str = include_str!({path:?});\n\
         /// Names of the kernels (`.visible .entry`) in [`PTX`].\n\
         pub const ENTRY_POINTS: &[&str] = &[{list}];\n\
         /// GPU architecture the PTX targets.\n\
         pub const ARCH: &str = {arch:?};\n",
        path = ptx.display().to_string(),
    )
}

/// The pinned toolchain's sysroot facts.
struct Toolchain {
    name: String,
    sysroot: PathBuf,
    llvm_tools: PathBuf,
}

impl Toolchain {
    fn probe(name: &str) -> Result<Toolchain, Error> {
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
    fn linker_exe(&self, dir: &Path) -> Result<PathBuf, Error> {
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

/// What the nested cargo reported on stdout (JSON messages).
struct BuildReport {
    crate_name: Option<String>,
    ptx: Option<PathBuf>,
    diagnostics: Vec<Diagnostic>,
}

struct Diagnostic {
    rendered: String,
    is_warning: bool,
}

impl BuildReport {
    fn parse(stdout: &str, crate_dir: &Path) -> BuildReport {
        let mut report = BuildReport {
            crate_name: None,
            ptx: None,
            diagnostics: Vec::new(),
        };
        for line in stdout.lines() {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let reason = msg["reason"].as_str().unwrap_or("");
            let manifest = msg["manifest_path"].as_str().map(Path::new);
            let ours = manifest.is_some_and(|m| m.parent() == Some(crate_dir));
            match reason {
                "compiler-message" => {
                    let text = msg["message"]["message"].as_str().unwrap_or("");
                    // Every crate warns that `+ptxNN` is an unstable target feature; that is
                    // expected for PTX ISA selection and says nothing about the user's code.
                    if text.starts_with("unstable feature specified for `-Ctarget-feature`") {
                        continue;
                    }
                    if let Some(rendered) = msg["message"]["rendered"].as_str() {
                        report.diagnostics.push(Diagnostic {
                            rendered: rendered.trim_end().to_owned(),
                            is_warning: msg["message"]["level"] == "warning",
                        });
                    }
                }
                "compiler-artifact" if ours => {
                    report.crate_name = msg["target"]["name"].as_str().map(str::to_owned);
                    if let Some(files) = msg["filenames"].as_array() {
                        report.ptx = files
                            .iter()
                            .filter_map(|f| f.as_str())
                            .find(|f| f.ends_with(".ptx"))
                            .map(PathBuf::from)
                            .or(report.ptx.take());
                    }
                }
                _ => {}
            }
        }
        report
    }
}

/// Removes the variables cargo sets for build scripts (and clippy's wrappers) so the nested
/// cargo configures itself from scratch; keeps user-level cargo settings.
fn scrub_cargo_env(cmd: &mut Command) {
    const KEEP: &[&str] = &[
        "CARGO_HOME",
        "CARGO_NET_OFFLINE",
        "CARGO_MAKEFLAGS",
        "CARGO_HTTP_",
        "CARGO_NET_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_TERM_",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let cargo_var = key.starts_with("CARGO") && !KEEP.iter().any(|k| key.starts_with(k));
        let rustc_var = key.starts_with("RUSTC")
            || key.starts_with("RUSTDOC")
            || matches!(
                key,
                "RUSTFLAGS"
                    | "RUSTUP_TOOLCHAIN"
                    | "OUT_DIR"
                    | "TARGET"
                    | "HOST"
                    | "NUM_JOBS"
                    | "OPT_LEVEL"
                    | "DEBUG"
                    | "PROFILE"
                    | "CLIPPY_ARGS"
                    | "CLIPPY_CONF_DIR"
            );
        if cargo_var || rustc_var {
            cmd.env_remove(key);
        }
    }
}

/// The toolchain for kernels: `$SYMCOMM_TOOLCHAIN`, else the `channel` of the nearest
/// `rust-toolchain.toml` above the kernels crate, else `nightly`.
fn toolchain_for(crate_dir: &Path) -> String {
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
fn channel_of(toml: &str) -> Option<String> {
    toml.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "channel").then(|| value.trim().trim_matches('"').to_owned())
    })
}

fn find_upwards(start: &Path, file: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join(file))
        .find(|p| p.is_file())
}

/// The cargo target directory that holds `out_dir` (the ancestor with `CACHEDIR.TAG`).
fn target_root(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("symcomm-ptx"))
}

/// Source files listed in a cargo dep-info file, minus the toolchain's own sources.
fn dep_info_sources(dep_file: &Path, sysroot: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(dep_file) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_, deps)) = line.split_once(": ") else {
            continue;
        };
        let mut cur = String::new();
        let mut chars = deps.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    cur.push(' ');
                    chars.next();
                }
                ' ' => {
                    if !cur.is_empty() {
                        out.push(PathBuf::from(std::mem::take(&mut cur)));
                    }
                }
                _ => cur.push(c),
            }
        }
        if !cur.is_empty() {
            out.push(PathBuf::from(cur));
        }
    }
    out.retain(|p| !p.starts_with(sysroot));
    out.sort();
    out.dedup();
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn mkdir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        what: format!("create {}", dir.display()),
        source: e,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        what: format!("write {}", path.display()),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
