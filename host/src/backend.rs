//! Which memory backend this process runs on: CUDA GPUs, or the CPU emulator.
//!
//! The host runtime has one code path for symmetric memory (allocation, the flat VA, window
//! registration with its all-gather, validation, slot allocator and fd exchange, device
//! communicators); only the lowest layer, [`crate::cuda`], differs by backend:
//!
//! | primitive | [`Backend::Gpu`] | [`Backend::Emulated`] |
//! |---|---|---|
//! | physical memory | `cuMemCreate` | `memfd_create` + `ftruncate` |
//! | export / import | `cuMemExport/ImportToShareableHandle` | the memfd itself / `dup` |
//! | VA reservation | `cuMemAddressReserve` | `mmap(PROT_NONE, MAP_NORESERVE)` |
//! | mapping | `cuMemMap` + `cuMemSetAccess` | `mmap(MAP_FIXED \| MAP_SHARED, memfd)` |
//! | unmapping | `cuMemUnmap` | `mmap(PROT_NONE, MAP_FIXED)` over it (the reservation stays) |
//! | pointer → allocation | `cuMemRetainAllocationHandle` | a registry of live mappings |
//! | small objects (`DeviceBox`, `HostMapped`) | `cuMemAlloc`, `cuMemHostAlloc` | heap boxes |
//! | multicast range | `cuMulticast*` (opt-in) | a reserved range resolved to the LSA peers |
//!
//! The backend is chosen once per process, at first use: `SYMCOMM_BACKEND=gpu|emu` forces
//! it; otherwise it is the GPU when the CUDA driver loads and initialises, else the emulator.
//! Under emulation "device memory" is host memory, device pointers are host addresses, and
//! kernels run on the host through `symcomm_device::emu`. An emulated device has
//! [`EMULATED_DEVICE_MEMORY`] (`SYMCOMM_EMU_DEVICE_MEMORY` sets another size): it reports that
//! much, and refuses physical memory beyond it as a GPU would, so that a mistaken size fails
//! instead of exhausting the host.

use std::sync::OnceLock;

use crate::{Error, Result};

/// The environment variable that forces the backend (`gpu` or `emu`; unset or `auto`: probe).
pub const BACKEND_ENV: &str = "SYMCOMM_BACKEND";

/// `0` makes the emulator refuse LSA multicast with [`Error::Unsupported`], as a machine
/// without NVLink SHARP does (to test fallbacks without a GPU); unset or anything else: the
/// emulated multicast range is available.
pub const EMU_MULTICAST_ENV: &str = "SYMCOMM_EMU_MULTICAST";

/// What the memory layer runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// CUDA devices through the driver's virtual-memory API.
    Gpu,
    /// Host memory (memfd + `mmap`): the CPU emulator.
    Emulated,
}

/// Why the backend was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `SYMCOMM_BACKEND` named it.
    Forced,
    /// The CUDA driver loaded and initialised.
    DriverFound,
    /// No usable CUDA driver (the message says why).
    NoDriver(String),
}

/// The memory of an emulated device unless [`EMU_DEVICE_MEMORY_ENV`] says otherwise: what it
/// reports (the flat-VA stride, rounded up to 4 GiB, is reserved, never committed) and what
/// the emulated allocations of this process may hold at once.
pub const EMULATED_DEVICE_MEMORY: u64 = 4 << 30;

/// The memory of an emulated device (a size such as `512M` or `16G`; unset or empty: the
/// default, [`EMULATED_DEVICE_MEMORY`]). The device reports it, and physical memory created
/// under emulation (`PhysicalMem::new`, so every `SymmetricMemory` and `VmmBuffer`) is
/// refused with [`Error::OutOfMemory`] once the live allocations of this process would
/// exceed it, as a GPU refuses what it does not have: a memfd is lazy, so without the cap a
/// terabyte "succeeds" and the first write exhausts the host. Counted per process, over all
/// its emulated devices (ranks as threads share it); memory imported from a peer counts on
/// the peer only.
pub const EMU_DEVICE_MEMORY_ENV: &str = "SYMCOMM_EMU_DEVICE_MEMORY";

/// Allocation granularity of emulated physical memory (the GPU's usual 2 MiB, so slot
/// layouts match).
pub const EMULATED_GRANULARITY: usize = 2 << 20;

/// The memory of an emulated device for a value `value` of [`EMU_DEVICE_MEMORY_ENV`]: a size
/// of at least one allocation granule ([`EMULATED_GRANULARITY`]).
pub fn parse_device_memory(value: Option<&str>) -> std::result::Result<u64, String> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(EMULATED_DEVICE_MEMORY);
    };
    let bytes = crate::symmem::layout::parse_size(text).map_err(|e| e.detail())?;
    if bytes < EMULATED_GRANULARITY as u64 {
        return Err(format!(
            "{text:?} is less than one allocation granule ({} bytes)",
            EMULATED_GRANULARITY
        ));
    }
    Ok(bytes)
}

/// The memory of an emulated device in this process (read once from
/// [`EMU_DEVICE_MEMORY_ENV`]); [`Error::Env`] when that holds no valid size.
pub fn emulated_device_memory() -> Result<u64> {
    static MEMORY: OnceLock<std::result::Result<u64, String>> = OnceLock::new();
    MEMORY
        .get_or_init(|| {
            let value = std::env::var(EMU_DEVICE_MEMORY_ENV).ok();
            parse_device_memory(value.as_deref())
        })
        .clone()
        .map_err(|reason| Error::Env {
            var: EMU_DEVICE_MEMORY_ENV.into(),
            reason,
        })
}

static CHOICE: OnceLock<std::result::Result<(Backend, Reason), String>> = OnceLock::new();

/// The backend of this process, chosen at the first call (see the module docs);
/// [`Error::Env`] when `SYMCOMM_BACKEND` holds something else than `gpu`, `emu` or `auto`.
pub fn backend() -> Result<Backend> {
    selection().map(|(b, _)| b)
}

/// The backend and why it was chosen.
pub fn selection() -> Result<(Backend, Reason)> {
    CHOICE
        .get_or_init(|| {
            let forced = std::env::var(BACKEND_ENV).ok();
            choose(forced.as_deref(), crate::cuda::driver::init_driver)
        })
        .clone()
        .map_err(|reason| Error::Env {
            var: BACKEND_ENV.into(),
            reason,
        })
}

/// Chooses `wanted` for this process if nothing was chosen yet (tests and tools that must run
/// emulated whatever the machine has); [`Error::InvalidArgument`] when the process already
/// runs on the other backend.
pub fn use_backend(wanted: Backend) -> Result<()> {
    let got = CHOICE
        .get_or_init(|| Ok((wanted, Reason::Forced)))
        .clone()
        .map_err(|reason| Error::Env {
            var: BACKEND_ENV.into(),
            reason,
        })?;
    if got.0 == wanted {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "this process already runs on the {:?} backend, not {wanted:?}",
            got.0
        )))
    }
}

/// True when this process runs on the emulator.
pub fn is_emulated() -> Result<bool> {
    Ok(backend()? == Backend::Emulated)
}

/// The choice for an override value `forced` and a driver probe `probe` (called only when
/// nothing is forced).
pub fn choose(
    forced: Option<&str>,
    probe: impl FnOnce() -> Result<()>,
) -> std::result::Result<(Backend, Reason), String> {
    match forced.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("gpu" | "cuda") => Ok((Backend::Gpu, Reason::Forced)),
        Some("emu" | "emulated" | "cpu") => Ok((Backend::Emulated, Reason::Forced)),
        None | Some("" | "auto") => match probe() {
            Ok(()) => Ok((Backend::Gpu, Reason::DriverFound)),
            Err(Error::NoDriver(why)) => Ok((Backend::Emulated, Reason::NoDriver(why))),
            // A driver that loads but fails to initialise stays the GPU backend, so the CUDA
            // error surfaces where it did before emulation existed.
            Err(_) => Ok((Backend::Gpu, Reason::DriverFound)),
        },
        Some(other) => Err(format!("{other:?} is not a backend (use gpu, emu or auto)")),
    }
}

/// `Some(line)` announcing the emulator when this process runs on it, for program `prog`
/// (`"<prog>: no CUDA driver; running on the CPU emulator"`), `None` on GPUs. What a program
/// with a GPU path and an emulated one prints once before it starts.
pub fn emulator_notice(prog: &str) -> Result<Option<String>> {
    Ok(match selection()? {
        (Backend::Gpu, _) => None,
        (Backend::Emulated, Reason::NoDriver(_)) => Some(format!(
            "{prog}: no CUDA driver; running on the CPU emulator"
        )),
        (Backend::Emulated, _) => Some(format!(
            "{prog}: {BACKEND_ENV}=emu; running on the CPU emulator"
        )),
    })
}

/// Runs `kernel` (a call of a kernel's host build, with its arguments) over `blocks × threads`
/// emulated GPU threads (`symcomm_device::emu`) and waits for it. A panic, trap, misused
/// barrier, deadlock or watchdog expiry in the kernel is an error naming the block and thread.
/// Every GPU thread is an OS thread: keep grids small (e.g. 2 × 64); a grid beyond the
/// process's thread or memory-map limits is refused with [`Error::Emulation`].
///
/// # Safety
/// `kernel` runs on every emulated thread at once: what it captures (usually raw pointers into
/// emulated device memory) must be valid for that, as for the GPU launch it stands for.
pub unsafe fn emulated_launch(blocks: u32, threads: u32, kernel: impl Fn()) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { symcomm_device::emu::Launch::new(blocks, threads).run_unsync(kernel) }.map_err(|e| {
        Error::Emulation {
            kernel: "closure passed to emulated_launch".into(),
            detail: e.to_string(),
        }
    })
}

impl Backend {
    /// Total memory of device `ordinal` (what the flat-VA stride is derived from); under
    /// emulation [`emulated_device_memory`].
    pub fn total_memory(self, ordinal: usize) -> Result<u64> {
        match self {
            Backend::Gpu => crate::cuda::device::total_memory(ordinal),
            Backend::Emulated => emulated_device_memory(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_wins_and_auto_follows_the_driver_probe() {
        let unreachable = || -> Result<()> { panic!("probed although forced") };
        assert_eq!(
            choose(Some("gpu"), unreachable),
            Ok((Backend::Gpu, Reason::Forced))
        );
        assert_eq!(
            choose(Some(" EMU "), unreachable),
            Ok((Backend::Emulated, Reason::Forced))
        );
        assert_eq!(
            choose(None, || Ok(())),
            Ok((Backend::Gpu, Reason::DriverFound))
        );
        assert_eq!(
            choose(Some("auto"), || Err(Error::NoDriver("none".into()))),
            Ok((Backend::Emulated, Reason::NoDriver("none".into())))
        );
        let err = choose(Some("tpu"), || Ok(())).unwrap_err();
        assert!(err.contains("\"tpu\" is not a backend"), "{err}");
    }

    #[test]
    fn the_emulated_device_memory_is_a_size_of_at_least_one_granule() {
        assert_eq!(parse_device_memory(None), Ok(EMULATED_DEVICE_MEMORY));
        assert_eq!(parse_device_memory(Some(" ")), Ok(EMULATED_DEVICE_MEMORY));
        assert_eq!(parse_device_memory(Some("512M")), Ok(512 << 20));
        assert_eq!(parse_device_memory(Some("16G")), Ok(16 << 30));
        let err = parse_device_memory(Some("1K")).unwrap_err();
        assert_eq!(
            err,
            "\"1K\" is less than one allocation granule (2097152 bytes)"
        );
        let err = parse_device_memory(Some("lots")).unwrap_err();
        assert!(
            err.contains("\"lots\" does not start with a number"),
            "{err}"
        );
    }
}
