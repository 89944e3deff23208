//! Logging setup: `tracing` events of the runtime, filtered by `SYMCOMM_LOG`.
//!
//! The runtime only emits events; printing them is the application's choice. Applications
//! without their own subscriber call [`init_logging`] once: `SYMCOMM_LOG=info` prints the
//! topology and team sizes, `debug` the bootstrap's steps; any `tracing` filter directive works
//! (e.g. `symcomm=debug,warn`).

use tracing_subscriber::EnvFilter;

/// Installs a stderr subscriber filtered by `SYMCOMM_LOG` (default `warn`). Does nothing if a
/// subscriber is already installed; a malformed filter falls back to `warn` with a warning.
pub fn init_logging() {
    let spec = std::env::var("SYMCOMM_LOG").unwrap_or_else(|_| "warn".into());
    let (filter, bad) = match EnvFilter::try_new(&spec) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("warn"), Some(e)),
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init()
        .is_ok();
    if installed && let Some(e) = bad {
        tracing::warn!("SYMCOMM_LOG={spec:?} is not a valid filter ({e}); using \"warn\"");
    }
}
