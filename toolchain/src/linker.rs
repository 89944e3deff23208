//! The PTX linker: our stand-in for rustc's `llvm-bitcode-linker` (linker flavour `llbc`).
//!
//! For `nvptx64-nvidia-cuda`, rustc emits LLVM bitcode objects and hands them to a linker
//! with the flags below. We link them with the pinned toolchain's own LLVM tools:
//!
//! ```text
//! llvm-link (all bitcode) → opt (internalize, globaldce, default<O3>, globaldce) → llc → .ptx
//! ```
//!
//! Internalizing *before* optimizing lets LLVM inline and constant-fold across crates; only
//! the exported kernel entry points stay visible. The tools come from the `llvm-tools`
//! component of the same toolchain as rustc (never the system's LLVM, which may be too old
//! to read rustc's bitcode).
//!
//! This file depends on `std` alone: `symcomm-build` compiles it with `rustc` into a small
//! executable on first use (see `crate::Builder`), and the `symcomm-ptx-link` binary target
//! of this crate includes it too.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable naming the directory that holds `llvm-link`, `opt` and `llc`.
pub const LLVM_TOOLS_ENV: &str = "SYMCOMM_LLVM_TOOLS";

/// What rustc asked the linker to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRequest {
    /// Bitcode objects and rlibs (archives of bitcode) to link, in order.
    pub inputs: Vec<PathBuf>,
    /// Symbols that stay visible (the kernel entry points).
    pub exports: Vec<String>,
    /// `--target-cpu`, e.g. `sm_90`.
    pub cpu: Option<String>,
    /// `--target-feature`, e.g. `+ptx83`.
    pub features: Option<String>,
    /// Output `.ptx` path.
    pub output: PathBuf,
    /// Optimisation level digit or letter (`0`–`3`, `s`, `z`).
    pub opt_level: String,
}

/// A linker failure, printed by rustc under "linking with ... failed".
#[derive(Debug)]
pub struct LinkError(pub String);

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "symcomm-ptx-link: {}", self.0)
    }
}

impl std::error::Error for LinkError {}

/// Parses the linker command line rustc passes for the `llbc` flavour (response files
/// `@path` are expanded, one argument per line).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<LinkRequest, LinkError> {
    let mut expanded = Vec::new();
    for arg in args {
        match arg.strip_prefix('@') {
            Some(file) if Path::new(file).is_file() => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| LinkError(format!("cannot read response file {file}: {e}")))?;
                expanded.extend(text.lines().map(str::to_owned));
            }
            _ => expanded.push(arg),
        }
    }
    let mut req = LinkRequest {
        inputs: Vec::new(),
        exports: Vec::new(),
        cpu: None,
        features: None,
        output: PathBuf::new(),
        opt_level: "3".to_owned(),
    };
    let mut it = expanded.into_iter();
    while let Some(arg) = it.next() {
        let mut value_of = |name: &str| {
            it.next()
                .ok_or_else(|| LinkError(format!("flag {name} is missing its value")))
        };
        match arg.as_str() {
            "--export-symbol" => req.exports.push(value_of("--export-symbol")?),
            "--target-cpu" => req.cpu = Some(value_of("--target-cpu")?),
            "--target-feature" => req.features = Some(value_of("--target-feature")?),
            "-o" => req.output = PathBuf::from(value_of("-o")?),
            "-L" | "--target" => {
                value_of(&arg)?;
            }
            "--debug" | "--lto" => {}
            _ => {
                if let Some(v) = arg.strip_prefix("--export-symbol=") {
                    req.exports.push(v.to_owned());
                } else if let Some(v) = arg.strip_prefix("--target-cpu=") {
                    req.cpu = Some(v.to_owned());
                } else if let Some(v) = arg.strip_prefix("--target-feature=") {
                    req.features = Some(v.to_owned());
                } else if let Some(v) = arg.strip_prefix("-O") {
                    req.opt_level = match v {
                        "0" | "1" | "2" | "3" | "s" | "z" => v.to_owned(),
                        _ => "3".to_owned(),
                    };
                } else if arg.starts_with("-L") || arg.starts_with("--target=") {
                } else if arg.starts_with('-') {
                    eprintln!("symcomm-ptx-link: ignoring unknown flag {arg}");
                } else {
                    req.inputs.push(PathBuf::from(arg));
                }
            }
        }
    }
    if req.output.as_os_str().is_empty() {
        return Err(LinkError("no output file given (-o)".into()));
    }
    if req.inputs.is_empty() {
        return Err(LinkError("no input objects given".into()));
    }
    Ok(req)
}

/// The `opt` pass pipeline for an optimisation level.
pub fn opt_passes(opt_level: &str) -> String {
    // opt's default<Os>/<Oz> exist; map the digit/letter straight through.
    format!("internalize,globaldce,default<O{opt_level}>,globaldce")
}

/// Finds the LLVM tools: `$SYMCOMM_LLVM_TOOLS`, else `<rustc sysroot>/lib/rustlib/<host>/bin`.
pub fn llvm_tools_dir() -> Result<PathBuf, LinkError> {
    if let Some(dir) = std::env::var_os(LLVM_TOOLS_ENV) {
        return Ok(PathBuf::from(dir));
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let run = |args: &[&str]| -> Result<String, LinkError> {
        let out = Command::new(&rustc)
            .args(args)
            .output()
            .map_err(|e| LinkError(format!("cannot run rustc to find the LLVM tools: {e}")))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let sysroot = run(&["--print", "sysroot"])?;
    let host = run(&["-vV"])?
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| LinkError("rustc -vV printed no host triple".into()))?;
    Ok(Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin"))
}

fn run_tool(tools: &Path, name: &str, args: &[OsString]) -> Result<(), LinkError> {
    let exe = tools.join(name);
    if !exe.is_file() {
        return Err(LinkError(format!(
            "{} not found; install the toolchain's LLVM tools with \
             `rustup component add llvm-tools` (or set {LLVM_TOOLS_ENV})",
            exe.display()
        )));
    }
    let status = Command::new(&exe)
        .args(args)
        .status()
        .map_err(|e| LinkError(format!("cannot run {}: {e}", exe.display())))?;
    if status.success() {
        Ok(())
    } else {
        Err(LinkError(format!("{name} failed ({status})")))
    }
}

/// Links a request into PTX with the tools in `tools`.
pub fn link(req: &LinkRequest, tools: &Path) -> Result<(), LinkError> {
    let stem = req.output.with_extension("");
    let linked = stem.with_extension("linked.bc");
    let optimized = stem.with_extension("opt.bc");
    let symbols = stem.with_extension("symbols.txt");
    std::fs::write(&symbols, req.exports.join("\n") + "\n")
        .map_err(|e| LinkError(format!("cannot write {}: {e}", symbols.display())))?;

    let mut args: Vec<OsString> = vec!["--ignore-non-bitcode".into()];
    args.extend(req.inputs.iter().map(|p| p.clone().into_os_string()));
    args.extend(["-o".into(), linked.clone().into_os_string()]);
    run_tool(tools, "llvm-link", &args)?;

    let mut api_file = OsString::from("--internalize-public-api-file=");
    api_file.push(&symbols);
    let args: Vec<OsString> = vec![
        linked.into_os_string(),
        "-o".into(),
        optimized.clone().into_os_string(),
        "--strip-debug".into(),
        api_file,
        format!("--passes={}", opt_passes(&req.opt_level)).into(),
    ];
    run_tool(tools, "opt", &args)?;

    let mut args: Vec<OsString> = Vec::new();
    if let Some(cpu) = &req.cpu {
        args.push(format!("--mcpu={cpu}").into());
    }
    if let Some(feat) = &req.features {
        args.push(format!("--mattr={feat}").into());
    }
    args.extend([
        optimized.into_os_string(),
        "-o".into(),
        req.output.clone().into_os_string(),
    ]);
    run_tool(tools, "llc", &args)
}

/// Entry point of the linker executable: returns the process exit code.
pub fn main() -> i32 {
    let result = parse_args(std::env::args().skip(1))
        .and_then(|req| llvm_tools_dir().and_then(|tools| link(&req, &tools)));
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}
