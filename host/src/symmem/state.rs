//! The per-communicator symmetric-memory state: what the first window registration creates
//! and every later one shares (the flat VA and its layout, the slot space, the fd server, the
//! registered windows) and, once asked for, the LSA team's multicast range.
//!
//! The communicator holds it in a shared slot ([`StateSlot`]) that windows keep too, so a
//! window can deregister after its communicator is gone. Registration (`crate::window`) and
//! the multicast set-up ([`super::multicast`]) fill it; this module only defines it.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use crate::cuda::multicast::{McBinding, Multicast};
use crate::cuda::vmm::{Mapping, PhysicalMem, VaRange};
use crate::ipc::FdServer;
use crate::space::Space;
use crate::symmem::layout::FlatLayout;
use crate::{Error, Result};

/// The communicator's slot for its symmetric state: empty until the first registration.
pub(crate) type StateSlot = Arc<Mutex<Option<SymState>>>;

/// A window as GIN proxies see it: its GIN id, this rank's copy (flat-range address) and size.
#[derive(Debug, Clone)]
pub(crate) struct GinWindow {
    pub(crate) id: u32,
    pub(crate) local: u64,
    pub(crate) size: usize,
    /// Held (cloned) by a proxy that sends from the window's host memory without the table's
    /// lock; deregistration waits until it is the only holder before it unmaps.
    pub(crate) busy: Arc<()>,
}

/// The windows GIN proxies may copy into and out of, behind a lock of their own: registration
/// holds the symmetric state's lock across collective steps, and a proxy must not wait for
/// those. A proxy holds the read lock for one bounded copy, or a clone of the window's `busy`
/// token while it writes the window's (host) memory to a socket; deregistration removes its
/// window under the write lock (so after every copy in progress), waits until no proxy holds
/// its token, and only then unmaps it.
pub(crate) type GinTable = Arc<RwLock<Vec<GinWindow>>>;

/// A GIN runtime as a deregistration sees it.
pub(crate) trait GinPickUp: Send + Sync {
    /// Returns once the proxy has carried out every operation that the kernels had posted
    /// when it was called (or the runtime has failed, or its proxy has made no progress for a
    /// bound).
    fn wait_picked_up(&self);
}

/// The communicator's live GIN runtimes. A deregistration first waits until each has picked
/// up what kernels had posted ([`GinPickUp`]): a put from the window posted by a kernel that
/// has ended is then sent whole, not refused because its window went first.
#[derive(Clone, Default)]
pub(crate) struct GinRuntimes(Arc<Mutex<Vec<Weak<dyn GinPickUp>>>>);

impl std::fmt::Debug for GinRuntimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GinRuntimes")
    }
}

impl GinRuntimes {
    /// Adds a runtime (dropped ones are forgotten).
    pub(crate) fn add(&self, runtime: Weak<dyn GinPickUp>) {
        let mut v = match self.0.lock() {
            Ok(v) => v,
            Err(p) => p.into_inner(),
        };
        v.retain(|r| r.strong_count() > 0);
        v.push(runtime);
    }

    /// [`GinPickUp::wait_picked_up`] of every live runtime, without holding the list's lock
    /// (dropped runtimes are forgotten).
    pub(crate) fn wait_picked_up(&self) {
        let live: Vec<Arc<dyn GinPickUp>> = {
            let mut v = match self.0.lock() {
                Ok(v) => v,
                Err(p) => p.into_inner(),
            };
            v.retain(|r| r.strong_count() > 0);
            v.iter().filter_map(Weak::upgrade).collect()
        };
        for r in live {
            r.wait_picked_up();
        }
    }
}

/// Per-communicator symmetric-memory state, created by the first registration.
#[derive(Debug)]
pub(crate) struct SymState {
    pub(crate) layout: FlatLayout,
    pub(crate) flat: Arc<VaRange>,
    pub(crate) space: Space,
    pub(crate) server: FdServer,
    pub(crate) next_seq: u64,
    pub(crate) lsa_world_ranks: Vec<usize>,
    pub(crate) windows: Vec<WindowEntry>,
    pub(crate) mc: Option<McTeam>,
}

#[derive(Debug, Clone)]
pub(crate) struct WindowEntry {
    pub(crate) user_ptr: u64,
    pub(crate) size: usize,
    pub(crate) descriptor: u64,
    pub(crate) slot_offset: u64,
    pub(crate) mem: Arc<PhysicalMem>,
}

/// The LSA team's multicast range.
#[derive(Debug)]
pub(crate) enum McTeam {
    Gpu(GpuMcTeam),
    Emulated(EmuMcTeam),
}

impl McTeam {
    pub(crate) fn base(&self) -> u64 {
        match self {
            McTeam::Gpu(t) => t.mapping.ptr(),
            McTeam::Emulated(t) => t.va.base(),
        }
    }
}

/// The LSA team's multicast object, mapped locally, with every window's memory bound at its
/// slot offset. Field order is teardown order: unbind, unmap, release.
#[derive(Debug)]
pub(crate) struct GpuMcTeam {
    pub(crate) bindings: Vec<(u64, McBinding)>,
    pub(crate) mapping: Mapping,
    pub(crate) mc: Multicast,
}

/// The emulated multicast range: a reserved, inaccessible range of `stride` bytes whose byte
/// `o` resolves (in the device crate's multimem) to byte `o` of every LSA peer's slot in the
/// flat VA; it covers every window, present and future, so nothing is bound per window.
/// Field order is teardown order: unregister, then free the addresses.
#[derive(Debug)]
pub(crate) struct EmuMcTeam {
    pub(crate) _range: symcomm_device::emu::multicast::MulticastRange,
    pub(crate) va: Arc<VaRange>,
}

/// Locks the state; a lock poisoned by a panic on another thread is an [`Error::Internal`].
pub(crate) fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| Error::Internal("symmetric-memory state poisoned by a panic".into()))
}
