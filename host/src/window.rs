//! Windows: buffers registered collectively so that every LSA peer's copy is reachable from a
//! kernel with one multiply-add.
//!
//! Each rank reserves one flat virtual range of `lsa_size × stride` bytes (stride = the team's
//! largest device memory rounded up to 4 GiB, or `SYMCOMM_WIN_STRIDE`). Registering a window
//! allocates the same slot offset on every rank from a deterministic first-fit
//! `Space` and maps LSA peer `p`'s physical allocation at
//! `flat_base + p × stride + slot_offset` on every rank. A 72-byte device descriptor
//! ([`symcomm_device::window::Window`], NCCL's `ncclWindow_vidmem` layout) lets kernels turn
//! `(offset, peer)` into a pointer.
//!
//! Registration is collective and validated: every rank all-gathers either its registration
//! record or the reason it cannot register, so a bad pointer or a size that differs across
//! ranks gives every rank the same error instead of a hang. What can still fail on one rank
//! after that agreement is done as prepare/commit: each rank prepares (symmetric state on first
//! use, slot, publishing its fd), all vote; then each maps its peers' memory and writes the
//! descriptor, and all vote again. A failed vote undoes the step on every rank, and every rank
//! returns the same [`Error::PeerFailed`] naming the first rank that failed and the step; the
//! communicator stays usable. The fd exchange asks the bootstrap before every retry whether
//! the peer is still alive, so a rank that dies there fails the others at once. File descriptors of the physical
//! allocations travel over abstract Unix sockets (symcomm's fd server, `ipc`); nothing needs ptrace
//! rights. Deregistration is local (drop the [`Window`] or call [`Window::deregister`]) and
//! must happen in the same order on every rank, because it frees slot space that later
//! registrations reuse.
//!
//! Ownership keeps teardown ordered: a window owns its mappings, each mapping holds the flat
//! range and the physical memory it maps, so nothing is released while still mapped.
//!
//! Everything here runs unchanged on the emulated backend ([`crate::backend`]): only the
//! memory primitives underneath differ. The one emulation-specific part is the LSA multicast
//! range, which is an address range registered with the device crate's emulated multimem
//! (resolved to the LSA peers' copies in the flat VA) instead of an NVLink SHARP object.

use std::sync::Arc;

use symcomm_device::ptr::SymPtr;
use symcomm_device::window::{Window as DeviceWindow, WindowHandle};

use crate::backend::{Backend, backend};
use crate::comm::Communicator;
use crate::cuda::memory::DeviceBox;
use crate::cuda::vmm::{self, Mapping, PhysicalMem, Shareable, VaRange, VmmBuffer};
use crate::ipc::FdServer;
use crate::space::Space;
use crate::symmem::layout::{
    AgreedRegistration, FlatLayout, registration_fault, team_stride_from_env,
    validate_registration, window_offset_in_alloc,
};
use crate::symmem::record::{HandleKind, RegistrationRecord};
use crate::symmem::state::{
    GinRuntimes, GinTable, GinWindow, McTeam, StateSlot, SymState, WindowEntry, lock,
};
use crate::{Error, Result};

/// Device memory that can be registered as a window: a cuMem allocation exportable as a POSIX
/// file descriptor, mapped for this rank's device. NCCL's `ncclMemAlloc`.
///
/// Local (not collective). Freed on drop; a window registered on it keeps the physical memory
/// alive until the window is gone too.
#[doc(alias = "ncclMemAlloc")]
#[derive(Debug)]
pub struct SymmetricMemory {
    buf: VmmBuffer,
}

impl SymmetricMemory {
    /// Allocates at least `bytes` on the communicator's device (rounded up to the allocation
    /// granularity). On GPUs the device's context must be current on this thread; under
    /// emulation it is a memfd mapped into this process.
    pub fn alloc(comm: &Communicator, bytes: usize) -> Result<SymmetricMemory> {
        let device = comm.device_i32()?;
        Ok(SymmetricMemory {
            buf: VmmBuffer::with_share(device, bytes, Shareable::PosixFd)?,
        })
    }

    /// The device address of byte 0.
    pub fn device_ptr(&self) -> u64 {
        self.buf.device_ptr()
    }

    /// The device address of byte 0 as a pointer to `T`: a kernel argument of type
    /// `*const T` (not dereferenceable on the host, except under the emulator).
    pub fn as_ptr<T>(&self) -> *const T {
        std::ptr::with_exposed_provenance(self.device_ptr() as usize)
    }

    /// As [`as_ptr`](Self::as_ptr), for a kernel argument of type `*mut T`.
    pub fn as_mut_ptr<T>(&self) -> *mut T {
        std::ptr::with_exposed_provenance_mut(self.device_ptr() as usize)
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Never true (zero-byte allocations are refused).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The underlying buffer (host copies, fills).
    pub fn buffer(&self) -> &VmmBuffer {
        &self.buf
    }
}

// SAFETY: the allocation's `len()` bytes are mapped at `device_ptr()` while it lives.
unsafe impl crate::cuda::DeviceMemory for SymmetricMemory {
    fn device_ptr(&self) -> u64 {
        SymmetricMemory::device_ptr(self)
    }
    fn byte_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: this rank's copy of the window in the flat range (`size()` bytes at the descriptor's
// local address), which the window itself maps and keeps mapped while it lives, whatever
// happens to the allocation it was registered from (its own mapping, `user_ptr()`, goes when
// that is dropped). Kernels take the window itself as `Window::handle()`, a type of its own.
unsafe impl crate::cuda::DeviceMemory for Window {
    fn device_ptr(&self) -> u64 {
        // SAFETY: `host` is this window's descriptor, a plain host value that nothing modifies.
        unsafe { self.host.local_ptr(0) as u64 }
    }
    fn byte_len(&self) -> usize {
        self.size()
    }
}

/// A registered window, seen from this rank. Deregistered on drop.
#[derive(Debug)]
pub struct Window {
    state: StateSlot,
    gin_table: GinTable,
    gin_runtimes: GinRuntimes,
    gin_id: u32,
    descriptor: DeviceBox<DeviceWindow>,
    host: DeviceWindow,
    user_ptr: u64,
    size: usize,
    slot_offset: u64,
    slot_size: u64,
    layout: FlatLayout,
    flat_base: u64,
    mappings: Vec<Mapping>,
    active: bool,
}

impl Window {
    /// The window as kernels take it: the handle of its device descriptor (a kernel argument
    /// of type `WindowHandle`; NCCL's `ncclWindow_t`). Its own type, so it cannot be passed
    /// where a kernel takes a data pointer, nor a data pointer where it takes a window. (As
    /// [`DeviceMemory`](crate::DeviceMemory), a window is this rank's copy of its data.)
    #[doc(alias = "ncclWindow_t")]
    pub fn handle(&self) -> WindowHandle {
        WindowHandle::from_addr(self.descriptor.device_ptr())
    }

    /// A symmetric pointer to element `index` of type `T` in this window (a kernel argument).
    pub fn sym<T>(&self, index: usize) -> SymPtr<T> {
        self.handle().sym(index)
    }

    /// The descriptor's contents as written to the device.
    pub fn descriptor(&self) -> &DeviceWindow {
        &self.host
    }

    /// The registered pointer (this rank's own copy, in its original mapping).
    #[doc(alias = "ncclWinGetUserPtr")]
    pub fn user_ptr(&self) -> u64 {
        self.user_ptr
    }

    /// Window size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Address of byte `offset` of LSA peer `peer`'s copy, in this rank's flat range (host
    /// arithmetic; `None` when out of range).
    #[doc(alias = "ncclGetLsaDevicePointer")]
    pub fn lsa_ptr(&self, offset: usize, peer: usize) -> Option<u64> {
        if offset >= self.size {
            return None;
        }
        let in_slot = self.host.lsa_flat_base - self.flat_base + offset as u64;
        self.layout.peer_addr(self.flat_base, peer, in_slot).ok()
    }

    /// Deregisters now (otherwise done on drop). Local, but every rank must deregister its
    /// windows in the same order, since later registrations reuse the freed slot space. The
    /// caller guarantees no kernel still uses the window. GIN operations that ended kernels
    /// posted are carried out first: a put from the window whose kernel did not wait for its
    /// local completion is sent whole before the window goes. So a deregistration may wait for
    /// all the GIN traffic that this rank's kernels have posted (to any peer, from any window)
    /// to be sent; it warns after 1 s, and goes on without it only once a proxy has made no
    /// progress for 10 s (an operation from the window may then fail the rank's GIN).
    #[doc(alias = "ncclCommWindowDeregister")]
    pub fn deregister(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        crate::fault::pause_point("deregister", self.host.world_rank as usize);
        self.active = false;
        // The proxies first carry out what kernels posted before (a put from this window
        // among it is sent whole); the caller's contract says no kernel posts more for it.
        if self.gin_id != 0 {
            self.gin_runtimes.wait_picked_up();
        }
        // Out of the GIN table first: once the write lock is ours, no proxy copies into or out
        // of the window, and none finds it again. Then wait for its token: a send from it ends
        // (each of its socket writes has a timeout), and a landing queued for the GPU is let go
        // once it has run (the receive thread looks every millisecond).
        let removed = {
            let mut t = match self.gin_table.write() {
                Ok(t) => t,
                Err(p) => p.into_inner(),
            };
            let at = t.iter().position(|w| w.id == self.gin_id);
            at.map(|k| t.remove(k))
        };
        if let Some(w) = removed {
            let t0 = std::time::Instant::now();
            let mut warned = false;
            while Arc::strong_count(&w.busy) > 1 {
                if !warned && t0.elapsed() > std::time::Duration::from_secs(1) {
                    tracing::warn!(
                        "rank {}: deregistration waits for GIN traffic of its window (for 1 s \
                         now)",
                        self.host.world_rank
                    );
                    warned = true;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            // Acquire: the last holder's accesses come before the unmapping below (the count
            // is read relaxed).
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        }
        self.mappings.clear(); // unmap every peer before the slot can be reused
        let mut guard = lock(&self.state)?;
        if let Some(state) = guard.as_mut() {
            if let Some(McTeam::Gpu(team)) = state.mc.as_mut() {
                team.bindings.retain(|(off, _)| *off != self.slot_offset);
            }
            state.space.free(self.slot_offset, self.slot_size)?;
            // By identity (its slot), not by (pointer, size): the same buffer may be
            // registered twice, and dropping one window must leave the other registered.
            state.windows.retain(|w| w.slot_offset != self.slot_offset);
        }
        Ok(())
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!("deregistering a window: {e}");
        }
    }
}

/// What the symmetric-memory state of a communicator holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymmetricUsage {
    /// Base of the flat virtual range (reserved once, at the first registration).
    pub flat_base: u64,
    /// Size of the flat virtual range (`lsa_size × stride`).
    pub flat_bytes: u64,
    /// Bytes of each rank's slot currently allocated to windows.
    pub slot_bytes_used: u64,
    /// Windows currently registered.
    pub windows: usize,
}

/// What one rank says in a registration's all-gather.
enum Offer {
    Ready(RegistrationRecord),
    Refused(String),
}

impl Offer {
    fn encode(&self) -> Vec<u8> {
        match self {
            Offer::Ready(r) => [&b"R"[..], &r.encode()].concat(),
            Offer::Refused(why) => [&b"E"[..], why.as_bytes()].concat(),
        }
    }

    /// The offer rank `rank` sent (a record must name its sender).
    fn decode(rank: usize, bytes: &[u8]) -> Result<Offer> {
        let sent = |what: String| registration_fault(rank, what);
        match bytes.split_first() {
            Some((b'R', rest)) => match RegistrationRecord::decode(rest) {
                Ok(r) if r.rank as usize == rank => Ok(Offer::Ready(r)),
                Ok(r) => Err(sent(format!(
                    "a registration record that names rank {}",
                    r.rank
                ))),
                Err(e) => Err(sent(format!(
                    "a malformed registration record: {}",
                    e.detail()
                ))),
            },
            Some((b'E', rest)) => Ok(Offer::Refused(String::from_utf8_lossy(rest).into_owned())),
            _ => Err(sent("a malformed registration message".into())),
        }
    }
}

/// Everything a rank checks about its own pointer before it may register.
struct LocalPart {
    alloc: vmm::Allocation,
    handle_kind: HandleKind,
    offset_in_alloc: u64,
    granularity: u64,
    total_mem: u64,
}

impl Communicator {
    /// Collective: every rank of the communicator calls this, in the same order relative to
    /// its other registrations, with a window of the same size. Registers `size` bytes at
    /// device address `ptr` (VMM memory, e.g. from [`SymmetricMemory::alloc`], starting at a
    /// 4 KiB-aligned offset of its allocation) as a window.
    ///
    /// On a bad pointer on any rank, or sizes/offsets that differ across ranks, every rank gets
    /// the same error naming the rank(s) at fault. The device's context must be current.
    #[doc(alias = "ncclCommWindowRegister")]
    pub fn register_window_ptr(&self, ptr: u64, size: usize) -> Result<Window> {
        let me = self.rank();
        let local = self.check_local(ptr, size);
        let (seq, slots_digest) = self.peek_seq()?;
        let offer = match &local {
            Ok(l) => Offer::Ready(RegistrationRecord {
                rank: me as u32,
                seq_no: seq,
                window_size: size as u64,
                offset_in_alloc: l.offset_in_alloc,
                alloc_size: l.alloc.size as u64,
                granularity: l.granularity,
                device_total_mem: l.total_mem,
                handle_kind: l.handle_kind,
                slots_digest,
            }),
            Err(e) => Offer::Refused(e.to_string()),
        };
        // ANCHOR: gather
        let gathered = self.bootstrap().runtime_all_gather(&offer.encode())?;
        let mut records = Vec::with_capacity(gathered.len());
        for (rank, bytes) in gathered.iter().enumerate() {
            match Offer::decode(rank, bytes).map_err(|e| e.reported_by(me))? {
                Offer::Ready(r) => records.push(r),
                Offer::Refused(why) => {
                    return Err(if rank == me {
                        local.err().unwrap_or_else(|| {
                            Error::Internal(format!("this rank's offer came back refused: {why}"))
                        })
                    } else {
                        Error::PeerFailed {
                            rank: Some(me),
                            step: "window registration".into(),
                            peer: rank,
                            reason: format!("refused it: {why}"),
                        }
                    });
                }
            }
        }
        let agreed = validate_registration(&records).map_err(|e| e.reported_by(me))?;
        let local = local?; // every rank was ready, including this one
        let (slot_size, align) = agreed.space_request()?;
        // ANCHOR_END: gather
        crate::fault::pause_point("register", me);

        // ANCHOR: commit
        // Prepare: every local step that can fail, then a vote, so that one rank's failure
        // (its stride setting, binding its fd socket, its slot, its fds) reaches every rank
        // before anyone waits for that rank's memory.
        let prepared = self.prepare_registration(&records, &local, seq, slot_size, align);
        let voted = self.commit_vote(prepared.as_ref().map(|_| ()).map_err(|(w, e)| (*w, e)));
        let (state_arc, slot_offset) = match (prepared, voted) {
            (Ok(p), Ok(())) => p,
            (prepared, voted) => {
                if let Ok((state_arc, slot_offset)) = prepared {
                    undo_prepare(&state_arc, seq, slot_offset, slot_size);
                }
                return Err(voted.err().unwrap_or_else(|| {
                    Error::Internal("a failed preparation passed the vote".into())
                }));
            }
        };
        // Map: fetch and import every peer's memory, write the descriptor and bind the
        // multicast range if there is one; a second vote commits (nobody withdraws its fd, or
        // uses the multicast range, before every rank has imported and bound) or undoes it
        // everywhere.
        crate::fault::pause_point("register-fds", me);
        // A rank that cannot even look at its state still votes, so nobody waits for it.
        let fail_vote =
            |what: &'static str, e: Error| self.commit_vote(Err((what, &e))).err().unwrap_or(e);
        let mut guard = lock(&state_arc).map_err(|e| fail_vote("locking its state", e))?;
        let Some(state) = guard.as_mut() else {
            let e = Error::Internal("symmetric state missing after its creation".into());
            return Err(fail_vote("locking its state", e));
        };
        let mapped = state.map_and_bind(self, &local, &agreed, seq, slot_offset);
        if mapped.is_ok() {
            crate::fault::pause_point("register-mapped", me);
        }
        let voted = self.commit_vote(mapped.as_ref().map(|_| ()).map_err(|(w, e)| (*w, e)));
        state.server.withdraw(seq);
        let Mapped {
            mappings,
            host,
            descriptor,
            binding,
        } = match (mapped, voted) {
            (Ok(m), Ok(())) => m,
            (mapped, voted) => {
                drop(mapped); // unbind and unmap before the slot can be reused
                let _ = state.space.free(slot_offset, slot_size);
                return Err(voted.err().unwrap_or_else(|| {
                    Error::Internal("a failed mapping passed the vote".into())
                }));
            }
        };
        state.next_seq = seq + 1;
        if let (Some(b), Some(McTeam::Gpu(team))) = (binding, state.mc.as_mut()) {
            team.bindings.push((slot_offset, b));
        }
        // ANCHOR_END: commit
        let (layout, flat_base) = (state.layout, state.flat.base());
        // SAFETY: `host` is this window's descriptor, a plain host value.
        let local_copy = unsafe { host.local_ptr(0) as u64 };
        let gin_id = host.gin_wins[0] as u32;
        state.windows.push(WindowEntry {
            user_ptr: ptr,
            size,
            descriptor: descriptor.device_ptr(),
            slot_offset,
            mem: Arc::clone(&local.alloc.mem),
        });
        drop(guard);
        tracing::debug!(
            "rank {me}: window {size} B at {ptr:#x} registered (slot offset {slot_offset:#x}, seq {seq})"
        );
        if gin_id != 0 {
            let w = GinWindow {
                id: gin_id,
                local: local_copy,
                size,
                busy: Arc::default(),
            };
            match self.gin_table().write() {
                Ok(mut t) => t.push(w),
                Err(p) => p.into_inner().push(w),
            }
        }
        Ok(Window {
            state: state_arc,
            gin_table: Arc::clone(self.gin_table()),
            gin_runtimes: self.gin_runtimes().clone(),
            gin_id,
            descriptor,
            host,
            user_ptr: ptr,
            size,
            slot_offset,
            slot_size,
            layout,
            flat_base,
            mappings,
            active: true,
        })
    }

    /// Collective: registers all of `mem` as a window (see
    /// [`Communicator::register_window_ptr`]).
    #[doc(alias = "ncclCommWindowRegister")]
    pub fn register_window(&self, mem: &SymmetricMemory) -> Result<Window> {
        self.register_window_ptr(mem.device_ptr(), mem.len())
    }

    /// The handle of the registered window that contains `ptr`, if any.
    #[doc(alias = "ncclFindWindow")]
    pub fn find_window(&self, ptr: u64) -> Option<WindowHandle> {
        let state = self.symm_slot();
        let guard = lock(state).ok()?;
        guard.as_ref()?.windows.iter().find_map(|w| {
            (ptr >= w.user_ptr && ptr - w.user_ptr < w.size as u64)
                .then_some(WindowHandle::from_addr(w.descriptor))
        })
    }

    /// The symmetric-memory state, or `None` before the first registration.
    pub fn symmetric_usage(&self) -> Option<SymmetricUsage> {
        let guard = lock(self.symm_slot()).ok()?;
        let s = guard.as_ref()?;
        Some(SymmetricUsage {
            flat_base: s.flat.base(),
            flat_bytes: s.flat.size() as u64,
            slot_bytes_used: s.space.used(),
            windows: s.windows.len(),
        })
    }

    /// The local steps of a registration that can fail once every rank agreed to it: the
    /// symmetric state (on first use), the slot, publishing this rank's fd. On failure, undoes
    /// what it did and says which step failed.
    fn prepare_registration(
        &self,
        records: &[RegistrationRecord],
        local: &LocalPart,
        seq: u64,
        slot_size: u64,
        align: u64,
    ) -> std::result::Result<(StateSlot, u64), (&'static str, Error)> {
        let setting_up = "setting up symmetric memory";
        let state_arc = self.symmetric_state(records).map_err(|e| (setting_up, e))?;
        let mut guard = lock(&state_arc).map_err(|e| (setting_up, e))?;
        let state = guard.as_mut().ok_or_else(|| {
            let e = Error::Internal("symmetric state missing after its creation".into());
            (setting_up, e)
        })?;
        let slot_offset = state
            .space
            .alloc(slot_size, align)
            .map_err(|e| ("allocating the window's slot", e))?;
        let published = local
            .alloc
            .mem
            .export_fd()
            .and_then(|fd| state.server.publish(seq, fd));
        if let Err(e) = published {
            let _ = state.space.free(slot_offset, slot_size);
            return Err(("publishing its memory's file descriptor", e));
        }
        drop(guard);
        Ok((state_arc, slot_offset))
    }

    /// Collective: every rank says whether its part of a registration step succeeded; returns
    /// `Ok` only if every rank's did, else on every rank the same error naming the first rank
    /// that failed, the step and why (or the bootstrap's failure, e.g. a rank that died).
    fn commit_vote(&self, mine: std::result::Result<(), (&str, &Error)>) -> Result<()> {
        const MAX_REASON: usize = 480;
        let me = self.rank();
        let vote = match mine {
            Ok(()) => b"K".to_vec(),
            Err((what, e)) => {
                tracing::warn!("rank {me}: window registration failed {what}: {e}");
                let mut why = format!("failed {what}: {e}");
                if why.len() > MAX_REASON {
                    let mut cut = MAX_REASON;
                    while !why.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    why.truncate(cut);
                    why.push('…');
                }
                [&b"F"[..], why.as_bytes()].concat()
            }
        };
        let votes = self.bootstrap().runtime_all_gather(&vote)?;
        for (rank, v) in votes.iter().enumerate() {
            match v.split_first() {
                Some((b'K', [])) => {}
                Some((b'F', why)) => {
                    return Err(Error::PeerFailed {
                        rank: Some(me),
                        step: "window registration".into(),
                        peer: rank,
                        reason: String::from_utf8_lossy(why).into_owned(),
                    });
                }
                _ => {
                    return Err(
                        registration_fault(rank, "a malformed commit vote".into()).reported_by(me)
                    );
                }
            }
        }
        Ok(())
    }

    /// The device descriptor of a window at `slot_offset`.
    fn window_descriptor(
        &self,
        state: &SymState,
        local: &LocalPart,
        slot_offset: u64,
        seq: u64,
    ) -> DeviceWindow {
        // Every window has a GIN id, the same on every rank: its registration number + 1
        // (0 means "not registered"). The socket transport has one registration per window,
        // so the four per-connection slots (context c uses slot c mod 4) hold the same id.
        let gin_id = u32::try_from(seq + 1).map_or(0, u64::from);
        DeviceWindow {
            win_host: 0,
            lsa_flat_base: state.flat.base() + slot_offset + local.offset_in_alloc,
            lsa_rank: self.lsa_rank() as i32,
            world_rank: self.rank() as i32,
            stride4g: state.layout.stride4g(),
            mc_offset4k: ((slot_offset + local.offset_in_alloc) >> 12) as u32,
            gin_offset4k: (local.offset_in_alloc >> 12) as u32,
            lsa_size: self.lsa_size() as u32,
            gin_wins: [gin_id; 4],
        }
    }

    fn check_local(&self, ptr: u64, size: usize) -> Result<LocalPart> {
        if size == 0 {
            return Err(Error::InvalidArgument("window size is 0".into()));
        }
        let device = self.device_i32()?;
        let alloc = vmm::find_allocation(ptr)?;
        let offset_in_alloc =
            window_offset_in_alloc(ptr, size as u64, alloc.base, alloc.size as u64)?;
        if alloc.mem.shareable() != Shareable::PosixFd {
            return Err(Error::InvalidArgument(format!(
                "the allocation behind {ptr:#x} cannot be exported as a POSIX fd; allocate it \
                 with SymmetricMemory::alloc (or cuMemCreate with POSIX_FILE_DESCRIPTOR handles)"
            )));
        }
        if alloc.mem.device() != device {
            return Err(Error::InvalidArgument(format!(
                "{ptr:#x} is memory of device {}, but this rank uses device {device}",
                alloc.mem.device()
            )));
        }
        let backend = backend()?;
        Ok(LocalPart {
            handle_kind: match backend {
                Backend::Gpu => HandleKind::PosixFd,
                Backend::Emulated => HandleKind::EmulatedFd,
            },
            granularity: vmm::granularity(device, Shareable::PosixFd)? as u64,
            total_mem: backend.total_memory(self.device())?,
            offset_in_alloc,
            alloc,
        })
    }

    /// The sequence number the next registration will carry, and the digest of the live
    /// window slots.
    fn peek_seq(&self) -> Result<(u64, u32)> {
        let guard = lock(self.symm_slot())?;
        Ok(guard.as_ref().map_or((0, Space::new(0).digest()), |s| {
            (s.next_seq, s.space.digest())
        }))
    }

    /// Creates the symmetric state on first use (collective: every rank is here, right after
    /// the same all-gather) and returns it.
    fn symmetric_state(&self, records: &[RegistrationRecord]) -> Result<StateSlot> {
        let slot = self.symm_slot();
        if lock(slot)?.is_some() {
            return Ok(Arc::clone(slot));
        }
        let lsa = self.lsa_size();
        let lsa_world_ranks = self.lsa_team_ranks();
        let mems: Vec<u64> = lsa_world_ranks
            .iter()
            .filter_map(|&r| records.get(r).map(|rec| rec.device_total_mem))
            .collect();
        let stride = team_stride_from_env(&mems)?;
        let layout = FlatLayout::new(lsa, self.lsa_rank(), stride)?;
        let granularity = records.first().map_or(2 << 20, |r| r.granularity) as usize;
        let flat = VaRange::reserve(layout.total_size() as usize, granularity)?;
        // The job id (the same on every rank) names this job's fd sockets.
        let server = FdServer::bind(self.job_id(), self.rank())?;
        tracing::info!(
            "rank {}: flat VA {:#x} + {} × {} GiB (LSA team of {lsa})",
            self.rank(),
            flat.base(),
            lsa,
            stride >> 30
        );
        *lock(slot)? = Some(SymState {
            layout,
            flat,
            space: Space::new(stride),
            server,
            next_seq: 0,
            lsa_world_ranks,
            windows: Vec::new(),
            mc: None,
        });
        Ok(Arc::clone(slot))
    }
}

/// What the mapping step of a registration made; dropping it undoes it (the multicast binding
/// goes before the mappings it covers).
struct Mapped {
    binding: Option<crate::cuda::multicast::McBinding>,
    mappings: Vec<Mapping>,
    host: DeviceWindow,
    descriptor: DeviceBox<DeviceWindow>,
}

/// Undoes [`Communicator::prepare_registration`] after a failed vote.
fn undo_prepare(state: &StateSlot, seq: u64, slot_offset: u64, slot_size: u64) {
    if let Ok(mut guard) = lock(state)
        && let Some(state) = guard.as_mut()
    {
        state.server.withdraw(seq);
        let _ = state.space.free(slot_offset, slot_size);
    }
}

impl SymState {
    /// The local part of a registration's mapping step (fetch, import and map every LSA
    /// peer's memory, write the descriptor, bind the multicast range); on failure, what
    /// failed.
    fn map_and_bind(
        &mut self,
        comm: &Communicator,
        local: &LocalPart,
        agreed: &AgreedRegistration,
        seq: u64,
        slot_offset: u64,
    ) -> std::result::Result<Mapped, (&'static str, Error)> {
        // Fetch the LSA team's fds (this rank's is published already) and map every member's
        // allocation at its slot, own included. The caller withdraws the fd once every rank
        // has voted (so every peer has imported it).
        let mappings = (|| -> Result<Vec<Mapping>> {
            let device = comm.device_i32()?;
            let me = comm.rank();
            let peers: Vec<usize> = self
                .lsa_world_ranks
                .iter()
                .copied()
                .filter(|&r| r != me)
                .collect();
            // ANCHOR: map_peers
            let step = "window registration (fetching file descriptors)";
            let bootstrap = comm.bootstrap();
            let alive = |peer| bootstrap.check_alive(step, peer);
            let fds = self
                .server
                .fetch_watching(&peers, seq, bootstrap.timeout(), &alive)?;
            let mut mappings = Vec::with_capacity(self.lsa_world_ranks.len());
            let mut fds = fds.into_iter();
            for (lsa_peer, &world) in self.lsa_world_ranks.iter().enumerate() {
                let mem: Arc<PhysicalMem> = if world == me {
                    Arc::clone(&local.alloc.mem)
                } else {
                    let fd = fds.next().ok_or_else(|| {
                        Error::Internal(format!("no fd received from rank {world}"))
                    })?;
                    PhysicalMem::import_fd(
                        std::os::fd::AsFd::as_fd(&fd),
                        agreed.alloc_size as usize,
                    )
                    .map_err(|e| match e {
                        // The peer's memory does not match the size it agreed to.
                        Error::InvalidArgument(m) => {
                            registration_fault(world, format!("an fd that does not import: {m}"))
                                .reported_by(me)
                        }
                        e => e,
                    })?
                };
                let offset = self.layout.peer_offset(lsa_peer, slot_offset)?;
                mappings.push(Mapping::new(&self.flat, offset as usize, &mem, &[device])?);
            }
            Ok(mappings)
            // ANCHOR_END: map_peers
        })()
        .map_err(|e| ("mapping its peers' memory", e))?;
        let host = comm.window_descriptor(self, local, slot_offset, seq);
        let descriptor =
            DeviceBox::new(&host).map_err(|e| ("writing the window's descriptor", e))?;
        let binding = match self.mc.as_mut() {
            Some(McTeam::Gpu(team)) => Some(
                comm.device_i32()
                    .and_then(|device| team.mc.bind(slot_offset as usize, &local.alloc.mem, device))
                    .map_err(|e| ("binding its memory to the multicast range", e))?,
            ),
            _ => None,
        };
        Ok(Mapped {
            binding,
            mappings,
            host,
            descriptor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symmem::layout::tests::rec as record;

    #[test]
    fn registration_offers_round_trip() {
        let ready = Offer::Ready(record(5)).encode();
        match Offer::decode(5, &ready) {
            Ok(Offer::Ready(r)) => assert_eq!(r, record(5)),
            _ => panic!("a ready offer did not decode"),
        }
        let refused = Offer::Refused("window start is not 4096-aligned".into()).encode();
        match Offer::decode(2, &refused) {
            Ok(Offer::Refused(why)) => assert_eq!(why, "window start is not 4096-aligned"),
            _ => panic!("a refusal did not decode"),
        }
    }

    #[test]
    fn a_garbled_offer_is_an_error_naming_the_rank() {
        for bad in [&b""[..], b"X", b"R\x01\x02"] {
            let err = Offer::decode(6, bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("window registration: rank 6 sent a malformed"),
                "{err}"
            );
            assert!(!err.contains("invalid argument"), "no nested prefix: {err}");
        }
        // A well-formed record must name its sender.
        let err = Offer::decode(6, &Offer::Ready(record(5)).encode()).err();
        assert!(
            matches!(err, Some(Error::PeerProtocol { peer: 6, .. })),
            "{err:?}"
        );
    }
}
