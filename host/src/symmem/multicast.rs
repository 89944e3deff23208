//! The LSA team's multicast range, set up on request (collective over the LSA team): an
//! NVLink SHARP multicast object with every window's memory bound at its slot offset on GPUs
//! (only with `SYMCOMM_NVLS=1`), or on the emulated backend a reserved range that the device
//! crate's emulated multimem resolves to the LSA peers' copies. The result lives in the
//! symmetric state ([`McTeam`]); window registration binds later windows into it.

use crate::backend::{Backend, backend};
use crate::comm::Communicator;
use crate::cuda::multicast::{self, Multicast};
use crate::cuda::vmm::{self, Mapping, VaRange};
use crate::symmem::state::{EmuMcTeam, GpuMcTeam, McTeam, lock};
use crate::{Error, Result};

/// fd-server key under which LSA rank 0 offers the multicast object.
const MC_KEY: u64 = u64::MAX;

/// Multicast binds windows' memory: asking before the first registration is a caller error.
fn no_window_yet() -> Error {
    Error::InvalidArgument("register a window before asking for multicast".into())
}

impl Communicator {
    /// Collective over the LSA team (every member calls it, after the same registrations):
    /// creates the team's NVLink SHARP multicast object once, maps it, and binds every
    /// window's memory at its slot offset (windows registered later are bound too). Returns
    /// the base of the multicast range: byte `o` of a window is at
    /// `base + 4096 × mc_offset4k + o`.
    ///
    /// Refused on every member unless every member has `SYMCOMM_NVLS=1` and a device with
    /// multicast support.
    pub(crate) fn lsa_multicast_base(&self) -> Result<u64> {
        if backend()? == Backend::Emulated {
            return self.emulated_multicast_base();
        }
        let device = self.device_i32()?;
        let local = multicast::require_enabled().and_then(|_| {
            let attr = sys_attr_multicast(self.device())?;
            if attr {
                Ok(())
            } else {
                Err(Error::Unsupported {
                    what: format!("multicast on device {device}"),
                    hint: "the device reports no NVLink SHARP multicast support".into(),
                })
            }
        });
        let lsa_ranks = self.lsa_team_ranks();
        let verdict = match &local {
            Ok(()) => Vec::new(),
            Err(e) => e.to_string().into_bytes(),
        };
        let votes = self
            .bootstrap()
            .runtime_all_gather_ranks(&lsa_ranks, &verdict)?;
        if let Some((i, why)) = votes.iter().enumerate().find(|(_, v)| !v.is_empty()) {
            return Err(match local {
                Err(e) => e,
                Ok(()) => Error::Unsupported {
                    what: "LSA multicast".into(),
                    hint: format!(
                        "rank {} cannot take part: {}",
                        lsa_ranks[i],
                        String::from_utf8_lossy(why)
                    ),
                },
            });
        }
        let mut guard = lock(self.symm_slot())?;
        let state = guard.as_mut().ok_or_else(no_window_yet)?;
        if let Some(team) = &state.mc {
            return Ok(team.base());
        }
        let lsa = self.lsa_size();
        let size = vmm::round_up(state.layout.stride() as usize, multicast::granularity(lsa)?)?;
        // LSA rank 0 creates the object and offers it; everyone learns whether that worked.
        let created = if self.lsa_rank() == 0 {
            Multicast::create(lsa, size, device)
                .and_then(|mc| state.server.publish(MC_KEY, mc.export_fd()?).map(|_| mc))
                .map(Some)
        } else {
            Ok(None)
        };
        let status = match &created {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().into_bytes(),
        };
        // From here on LSA rank 0 may have published the object: every exit, including an
        // error of this exchange, goes through the withdrawal below, so no exported fd keeps
        // the object alive and a retry can publish again.
        let result = (|| {
            let statuses = self
                .bootstrap()
                .runtime_all_gather_ranks(&lsa_ranks, &status)?;
            if !statuses[0].is_empty() {
                return Err(Error::Unsupported {
                    what: "LSA multicast".into(),
                    hint: format!(
                        "creating the multicast object failed on rank {}: {}",
                        lsa_ranks[0],
                        String::from_utf8_lossy(&statuses[0])
                    ),
                });
            }
            let mc = match created? {
                Some(mc) => mc,
                None => {
                    let step = "multicast set-up (fetching the multicast handle)";
                    let alive = |peer| self.bootstrap().check_alive(step, peer);
                    let fd = state
                        .server
                        .fetch_watching(
                            &lsa_ranks[..1],
                            MC_KEY,
                            self.bootstrap().timeout(),
                            &alive,
                        )?
                        .pop()
                        .ok_or_else(|| Error::Internal("no multicast handle fetched".into()))?;
                    Multicast::import_fd(std::os::fd::AsFd::as_fd(&fd), size)?
                }
            };
            mc.add_device(device)?;
            self.bootstrap().runtime_all_gather_ranks(&lsa_ranks, &[])?;
            let va = VaRange::reserve(mc.size(), multicast::granularity(lsa)?)?;
            let mapping = Mapping::new(&va, 0, mc.as_mem(), &[device])?;
            let mut bindings = Vec::with_capacity(state.windows.len());
            for w in &state.windows {
                bindings.push((
                    w.slot_offset,
                    mc.bind(w.slot_offset as usize, &w.mem, device)?,
                ));
            }
            self.bootstrap().runtime_all_gather_ranks(&lsa_ranks, &[])?;
            Ok(McTeam::Gpu(GpuMcTeam {
                bindings,
                mapping,
                mc,
            }))
        })();
        state.server.withdraw(MC_KEY);
        let team = result?;
        let base = team.base();
        tracing::info!("rank {}: LSA multicast range at {base:#x}", self.rank());
        state.mc = Some(team);
        Ok(base)
    }

    /// [`Communicator::lsa_multicast_base`] on the emulated backend: needs no opt-in (no
    /// switch resource is involved) and no exchange; each rank registers its own range. Still
    /// collective, so every rank leaves together.
    fn emulated_multicast_base(&self) -> Result<u64> {
        let lsa_ranks = self.lsa_team_ranks();
        let created = (|| -> Result<u64> {
            let env = crate::backend::EMU_MULTICAST_ENV;
            if std::env::var(env).as_deref() == Ok("0") {
                return Err(Error::Unsupported {
                    what: "emulated LSA multicast".into(),
                    hint: format!("{env}=0 emulates a machine without NVLink SHARP"),
                });
            }
            let mut guard = lock(self.symm_slot())?;
            let state = guard.as_mut().ok_or_else(no_window_yet)?;
            if let Some(team) = &state.mc {
                return Ok(team.base());
            }
            let stride = state.layout.stride();
            let va = VaRange::reserve(stride as usize, crate::backend::EMULATED_GRANULARITY)?;
            let copies = (0..state.layout.lsa_size())
                .map(|p| state.layout.peer_addr(state.flat.base(), p, 0))
                .collect::<Result<Vec<u64>>>()?;
            // SAFETY: the copies are the LSA peers' slots of this rank's flat VA; the bound part
            // of the range is the windows registered in them, whose memory stays mapped while
            // they are registered and which emulated kernels access only through the `mem` and
            // `multimem` functions. `state.mc` owns the range: it is unregistered with the
            // symmetric state, at the communicator's teardown.
            let range =
                unsafe { symcomm_device::emu::multicast::register(va.base(), stride, &copies) }
                    .map_err(|e| Error::Internal(format!("emulated multicast range: {e}")))?;
            let team = McTeam::Emulated(EmuMcTeam { _range: range, va });
            let base = team.base();
            state.mc = Some(team);
            tracing::info!(
                "rank {}: emulated LSA multicast range at {base:#x}",
                self.rank()
            );
            Ok(base)
        })();
        let status = match &created {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().into_bytes(),
        };
        let statuses = self
            .bootstrap()
            .runtime_all_gather_ranks(&lsa_ranks, &status)?;
        if let Some((i, why)) = statuses.iter().enumerate().find(|(_, s)| !s.is_empty()) {
            return Err(match created {
                Err(e) => e,
                Ok(_) => Error::Unsupported {
                    what: "emulated LSA multicast".into(),
                    hint: format!(
                        "rank {} could not set it up: {}",
                        lsa_ranks[i],
                        String::from_utf8_lossy(why)
                    ),
                },
            });
        }
        created
    }
}

fn sys_attr_multicast(device: usize) -> Result<bool> {
    crate::cuda::device::attribute(
        device,
        cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
    )
    .map(|v| v != 0)
}
