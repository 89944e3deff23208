//! The nested `cargo build` of a kernels crate, seen from outside: the environment it must not
//! inherit from the outer build script, whether the outer cargo runs offline, the lock file it
//! resolves from (a copy of the outer one), what it reports on stdout (JSON messages), where
//! the outer target directory is, and which source files a build read (its dep-info).
//!
//! [`crate::builder`] runs the command; this file only prepares and reads around it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;
use crate::files::{find_upwards, fnv1a, mkdir};

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

/// Whether the cargo that runs this build script was told not to use the network: by
/// `CARGO_NET_OFFLINE` (which the nested cargo inherits anyway), or by `--offline`, `--frozen`
/// or `--config net.offline=true` on its command line. Cargo passes none of these to build
/// scripts, so the command line is read from `/proc/<parent>/cmdline`: a build script's parent
/// is the cargo process that runs it (rustup's proxy replaces itself with cargo).
pub(crate) fn outer_cargo_offline() -> bool {
    let env = std::env::var("CARGO_NET_OFFLINE").ok();
    let parent = std::os::unix::process::parent_id();
    let args = std::fs::read(format!("/proc/{parent}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    offline_from(env.as_deref(), &args)
}

/// [`outer_cargo_offline`] from the variable's value and the outer cargo's arguments.
pub(crate) fn offline_from(net_offline_env: Option<&str>, args: &[String]) -> bool {
    if net_offline_env.is_some_and(|v| v.trim() == "true" || v.trim() == "1") {
        return true;
    }
    let is_cargo = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("cargo"));
    if !is_cargo {
        return false;
    }
    let offline_config = |v: &str| {
        let v: String = v.chars().filter(|c| !c.is_whitespace()).collect();
        v == "net.offline=true"
    };
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            // Everything after `--` belongs to the program, not to cargo.
            "--" => break,
            "--offline" | "--frozen" => return true,
            "--config" => {
                if it.next().is_some_and(|v| offline_config(v)) {
                    return true;
                }
            }
            _ => {
                if a.strip_prefix("--config=").is_some_and(offline_config) {
                    return true;
                }
            }
        }
    }
    false
}

/// The lock file the nested cargo resolves with: a private copy of the first `Cargo.lock` above
/// the kernels crate (its own workspace's, which for a kernels crate inside the host crate's
/// folder is the outer build's), else above the crate that runs the build script, refreshed
/// whenever that file changes. `None` when there is none.
///
/// The kernels crate then gets the versions the outer build already resolved (and, offline,
/// already has), even when it is not a member of the outer workspace and has no lock file of
/// its own; and the nested cargo never rewrites the user's `Cargo.lock`. Each kernels crate
/// has its own copy under `dir`, since several build scripts may run at once.
pub(crate) fn seeded_lock_file(
    outer_manifest_dir: Option<&Path>,
    crate_dir: &Path,
    dir: &Path,
) -> Result<Option<PathBuf>, Error> {
    let Some(outer) = find_upwards(crate_dir, "Cargo.lock")
        .or_else(|| outer_manifest_dir.and_then(|d| find_upwards(d, "Cargo.lock")))
    else {
        return Ok(None);
    };
    let seed = std::fs::read(&outer).map_err(|e| Error::Io {
        what: format!("read {}", outer.display()),
        source: e,
    })?;
    let key = fnv1a(crate_dir.as_os_str().as_encoded_bytes());
    let dir = dir.join(format!("lock-{key:016x}"));
    mkdir(&dir)?;
    let lock = dir.join("Cargo.lock");
    let stamp = dir.join("seed");
    let seed_id = format!("{}\n{:016x}\n", outer.display(), fnv1a(&seed));
    if lock.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&seed_id) {
        return Ok(Some(lock));
    }
    // Written beside and renamed: the nested cargo never reads a half-written lock file.
    let tmp = dir.join(format!("Cargo.lock.{}", std::process::id()));
    let io = |what: String| move |e| Error::Io { what, source: e };
    std::fs::write(&tmp, &seed).map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, &lock).map_err(io(format!("move {} into place", tmp.display())))?;
    std::fs::write(&stamp, seed_id).map_err(io(format!("write {}", stamp.display())))?;
    Ok(Some(lock))
}

/// The `--config` value that points cargo at `lock` (a TOML basic string; cargo accepts the
/// `resolver.lockfile-path` key from Rust 1.97, the pinned nightly's).
pub(crate) fn lockfile_config(lock: &Path) -> String {
    let path = lock.to_string_lossy();
    let escaped: String = path
        .chars()
        .flat_map(|c| match c {
            '\\' | '"' => vec!['\\', c],
            _ => vec![c],
        })
        .collect();
    format!("resolver.lockfile-path=\"{escaped}\"")
}
