//! [`Builder`]: the configuration of one kernels build and the steps that run it from a build
//! script (nested cargo, linker, PTX copied to `OUT_DIR`, generated module, `rerun-if` lines),
//! giving a [`Ptx`].
//!
//! The toolchain comes from [`crate::toolchain`], the nested cargo's environment and report
//! from [`crate::nested_cargo`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::files::{mkdir, write};
use crate::nested_cargo::{
    BuildReport, dep_info_sources, lockfile_config, outer_cargo_offline, scrub_cargo_env,
    seeded_lock_file, target_root,
};
use crate::toolchain::{Toolchain, toolchain_for_kernels};
use crate::{ARCH_ENV, DEFAULT_ARCH, DEFAULT_PTX_ISA, Error, TARGET, TOOLCHAIN_ENV, linker, ptx};

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
    toolchain: Option<String>,
    ptx_isa: (u32, u32),
    profile: Profile,
    features: Vec<String>,
    rustflags: Vec<String>,
    host_crate: HostCrate,
}

/// How the generated module names the kernels crate's host build.
#[derive(Debug, Clone)]
enum HostCrate {
    /// Under the kernels crate's library name.
    Default,
    /// Under the name the host crate's `Cargo.toml` gives the dependency.
    Named(String),
    /// Not at all.
    None,
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
            toolchain: None,
            ptx_isa: DEFAULT_PTX_ISA,
            profile: Profile::Release,
            features: Vec::new(),
            rustflags: Vec::new(),
            host_crate: HostCrate::Default,
        }
    }

    /// The GPU architecture, e.g. `sm_90` (default; `$SYMCOMM_ARCH` overrides), `sm_80`, `sm_100`.
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = Some(arch.into());
        self
    }

    /// The rustup toolchain the kernels are compiled with (default [`PINNED_TOOLCHAIN`](crate::PINNED_TOOLCHAIN);
    /// `$SYMCOMM_TOOLCHAIN` overrides both). It must be a nightly with the `rust-src` and
    /// `llvm-tools` components that the device crate builds with.
    pub fn toolchain(mut self, toolchain: impl Into<String>) -> Self {
        self.toolchain = Some(toolchain.into());
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

    /// The name under which the host crate depends on the kernels crate, when its
    /// `Cargo.toml` renames the dependency (`k = { package = "my-kernels", path = "kernels" }`
    /// → `"k"`; a `-` in it stands for `_`, as cargo has it). By default the generated module names the kernels crate by its library name.
    ///
    /// The generated module contains `extern crate <name> as _;`: that links the kernels'
    /// host build (where `#[kernel]` registers each kernel for the CPU emulator) into every
    /// binary that embeds the PTX, even one whose code never names the kernels crate. The host
    /// crate must therefore list the kernels crate among its `[dependencies]`.
    pub fn host_crate(mut self, name: impl Into<String>) -> Self {
        self.host_crate = HostCrate::Named(name.into());
        self
    }

    /// The generated module does not name the kernels crate: for a host crate that only
    /// embeds the PTX and does not depend on the kernels crate. Its binaries cannot run the
    /// kernels on the CPU emulator.
    pub fn without_host_crate(mut self) -> Self {
        self.host_crate = HostCrate::None;
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
        let (toolchain, chosen) = toolchain_for_kernels(self.toolchain.as_deref());
        let tc = Toolchain::probe(&toolchain, chosen)?;
        let target_dir = nested_target.join(&arch);
        mkdir(&target_dir)?;
        let linker = tc.linker_exe(&target_dir)?;
        let outer_manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
        let lock = seeded_lock_file(outer_manifest_dir.as_deref(), &self.crate_dir, &target_dir)?;

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
        if let Some(lock) = &lock {
            cmd.arg("--config").arg(lockfile_config(lock));
        }
        if outer_cargo_offline() {
            cmd.env("CARGO_NET_OFFLINE", "true");
        }
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
        // Cargo names a dependency's crate with `-` as `_` (`my-k` is `my_k` in Rust).
        let host_crate = match &self.host_crate {
            HostCrate::Default => Some(name.replace('-', "_")),
            HostCrate::Named(n) => Some(n.replace('-', "_")),
            HostCrate::None => None,
        };
        write(
            &module_rs,
            generated_module(&name, &path, &entry_points, &arch, host_crate.as_deref()).as_bytes(),
        )?;

        println!("cargo:rerun-if-changed={}", manifest.display());
        println!(
            "cargo:rerun-if-changed={}",
            self.crate_dir.join("src").display()
        );
        if let Some(lock) =
            outer_manifest_dir.and_then(|d| crate::files::find_upwards(&d, "Cargo.lock"))
        {
            println!("cargo:rerun-if-changed={}", lock.display());
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

/// The generated module text: `PTX`, `ENTRY_POINTS`, `ARCH`, and the `extern crate` line
/// that links the kernels' host build when `host_crate` names it.
pub(crate) fn generated_module(
    name: &str,
    ptx: &Path,
    entries: &[String],
    arch: &str,
    host_crate: Option<&str>,
) -> String {
    let list = entries
        .iter()
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let link = match host_crate {
        Some(krate) => format!(
            "// Links the kernels' host build (the CPU emulator runs it) into every binary that\n\
             // embeds this PTX. \"can't find crate\" here: add the kernels crate to the host\n\
             // crate's [dependencies], or see symcomm_build::Builder::host_crate.\n\
             extern crate {krate} as _;\n"
        ),
        None => String::new(),
    };
    format!(
        "// Generated by symcomm-build for kernels crate `{name}`; do not edit.\n\
         {link}\
         /// PTX of kernels crate `{name}`, built for {arch}.\n\
         pub const PTX: &str = include_str!({path:?});\n\
         /// Names of the kernels (`.visible .entry`) in [`PTX`].\n\
         #[allow(dead_code)]\n\
         pub const ENTRY_POINTS: &[&str] = &[{list}];\n\
         /// GPU architecture the PTX targets.\n\
         #[allow(dead_code)]\n\
         pub const ARCH: &str = {arch:?};\n",
        path = ptx.display().to_string(),
    )
}
