//! The nested `cargo build` of a kernels crate, seen from outside: the environment it must not
//! inherit from the outer build script, what it reports on stdout (JSON messages), where the
//! outer target directory is, and which source files a build read (its dep-info).
//!
//! [`crate::builder`] runs the command; this file only prepares and reads around it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the nested cargo reported on stdout (JSON messages).
pub(crate) struct BuildReport {
    pub(crate) crate_name: Option<String>,
    pub(crate) ptx: Option<PathBuf>,
    pub(crate) diagnostics: Vec<Diagnostic>,
}

pub(crate) struct Diagnostic {
    pub(crate) rendered: String,
    pub(crate) is_warning: bool,
}

impl BuildReport {
    pub(crate) fn parse(stdout: &str, crate_dir: &Path) -> BuildReport {
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
pub(crate) fn scrub_cargo_env(cmd: &mut Command) {
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

/// The cargo target directory that holds `out_dir` (the ancestor with `CACHEDIR.TAG`).
pub(crate) fn target_root(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("symcomm-ptx"))
}

/// Source files listed in a cargo dep-info file, minus the toolchain's own sources.
pub(crate) fn dep_info_sources(dep_file: &Path, sysroot: &Path) -> Vec<PathBuf> {
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
