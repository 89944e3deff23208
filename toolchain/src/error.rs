//! [`Error`]: everything that can go wrong while building or verifying kernels, each variant
//! worded for the person running the build (the nested compile's messages included).

use std::fmt;
use std::path::PathBuf;

use crate::{PINNED_TOOLCHAIN, REQUIRED_COMPONENTS, TARGET, TOOLCHAIN_ENV};

/// Everything that can go wrong while building or verifying kernels.
#[derive(Debug)]
pub enum Error {
    /// A required environment variable (set by cargo for build scripts) is missing.
    NotInBuildScript(&'static str),
    /// The kernels crate has no `Cargo.toml` at the given path.
    NoKernelsCrate(PathBuf),
    /// The toolchain the kernels are built with is not installed.
    MissingToolchain {
        /// The toolchain name, e.g. `nightly-2026-05-20`.
        toolchain: String,
        /// What rustup (or the system) said.
        detail: String,
        /// Whether `$SYMCOMM_TOOLCHAIN` chose it (else it is [`PINNED_TOOLCHAIN`]).
        ///
        /// [`PINNED_TOOLCHAIN`]: crate::PINNED_TOOLCHAIN
        from_env: bool,
    },
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
            Error::MissingToolchain {
                toolchain,
                detail,
                from_env,
            } => {
                write!(
                    f,
                    "symcomm kernels are compiled with the Rust toolchain {toolchain}, which is \
                     not installed ({detail}); install it with\n    \
                     rustup toolchain install {toolchain} --profile minimal --component {}\n",
                    REQUIRED_COMPONENTS.join(",")
                )?;
                if *from_env {
                    write!(
                        f,
                        "({TOOLCHAIN_ENV}={toolchain} chose it; unset {TOOLCHAIN_ENV} to use \
                         the pinned {PINNED_TOOLCHAIN})"
                    )
                } else if toolchain == PINNED_TOOLCHAIN {
                    write!(
                        f,
                        "(only the kernels need it: the host crate builds with any toolchain; \
                         {TOOLCHAIN_ENV} names another nightly to use instead)"
                    )
                } else {
                    write!(f, "(the build script chose it with Builder::toolchain)")
                }
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
