//! The NCCL baseline: this rank's NCCL communicator ([`Nccl`], created over the symcomm
//! bootstrap) and the NCCL calls of each benchmarked collective. NCCL runs with
//! `NCCL_NVLS_ENABLE=0` (set in `main`).

use std::ffi::c_void;

use cudarc::driver::sys::CUstream;
use cudarc::nccl::{result as nccl, sys};
use symcomm::{Communicator, Error, Result};
use symcomm_gallery::{DataType, RedOp};

use crate::coll::{Case, Coll};
use crate::error::fail;

/// NCCL's communicator of this rank.
pub struct Nccl {
    comm: sys::ncclComm_t,
    /// `ncclGetVersion` (0 if it failed).
    pub version: i32,
}

impl Nccl {
    /// Collective: NCCL's communicator over the ranks of `comm` (rank 0's unique id travels
    /// over the symcomm bootstrap).
    pub fn init(comm: &Communicator) -> Result<Nccl> {
        // SAFETY: probing for the library only dlopens it.
        if !unsafe { sys::is_culib_present() } {
            return Err(fail("libnccl.so could not be loaded (use --no-nccl)"));
        }
        let id_bytes = if comm.rank() == 0 {
            let id = nccl::get_uniqueid().map_err(nccl_err("ncclGetUniqueId"))?;
            id.internal.iter().map(|&c| c as u8).collect::<Vec<u8>>()
        } else {
            Vec::new()
        };
        let got = comm.bootstrap().broadcast(0, &id_bytes)?;
        if got.len() != 128 {
            return Err(fail("malformed NCCL unique id from rank 0"));
        }
        let mut internal = [0 as std::ffi::c_char; 128];
        for (d, s) in internal.iter_mut().zip(&got) {
            *d = *s as std::ffi::c_char;
        }
        let id = sys::ncclUniqueId { internal };
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; every rank calls this with the same id.
        unsafe { nccl::comm_init_rank(&mut raw, comm.size() as i32, id, comm.rank() as i32) }
            .map_err(nccl_err("ncclCommInitRank"))?;
        let version = nccl::get_nccl_version().unwrap_or(0);
        Ok(Nccl { comm: raw, version })
    }

    /// `ncclAllReduce` of `count` elements of `t` from device address `src` to `dst`.
    ///
    /// # Safety
    /// - `src` and `dst` hold `count` elements of `t` on this rank's device, until `stream`
    ///   has run the call.
    pub unsafe fn all_reduce(
        &self,
        (src, dst): (u64, u64),
        count: usize,
        (t, op): (DataType, RedOp),
        stream: CUstream,
    ) -> Result<()> {
        let (sp, dp) = (src as *const c_void, dst as *mut c_void);
        let st = stream as sys::cudaStream_t;
        // SAFETY: the buffers as the caller promised; NCCL's communicator lives as long as
        // `self`.
        unsafe { nccl::all_reduce(sp, dp, count, dtype(t), redop(op), self.comm, st) }
            .map_err(nccl_err("ncclAllReduce"))
            .map(|_| ())
    }

    /// Launches NCCL's counterpart of case `c` over `n` ranks on `stream`, from device
    /// address `src` to `dst` (the all-to-all as grouped sends and receives).
    ///
    /// # Safety
    /// - `src` and `dst` hold the case's input and output bytes ([`Case::sizes`]) on this
    ///   rank's device, until `stream` has run the call.
    pub unsafe fn launch(
        &self,
        c: &Case,
        (src, dst): (u64, u64),
        n: usize,
        stream: CUstream,
    ) -> Result<()> {
        let (inb, outb) = c.sizes(n);
        let (sp, dp) = (src as *const c_void, dst as *mut c_void);
        let st = stream as sys::cudaStream_t;
        let (t, dt) = (c.t, dtype(c.t));
        let e = nccl_err;
        // SAFETY: the buffers as the caller promised; NCCL's communicator lives as long as
        // `self`.
        unsafe {
            match c.coll {
                Coll::AllReduce => {
                    self.all_reduce((src, dst), inb / t.size(), (t, c.op), stream)?;
                }
                Coll::AllGather => {
                    nccl::all_gather(sp, dp, inb / t.size(), dt, self.comm, st)
                        .map_err(e("ncclAllGather"))?;
                }
                Coll::ReduceScatter => {
                    let op = redop(c.op);
                    nccl::reduce_scatter(sp, dp, outb / t.size(), dt, op, self.comm, st)
                        .map_err(e("ncclReduceScatter"))?;
                }
                Coll::Broadcast => {
                    nccl::broadcast(sp, dp, inb / t.size(), dt, 0, self.comm, st)
                        .map_err(e("ncclBroadcast"))?;
                }
                Coll::AllToAll => {
                    let per = inb / n;
                    nccl::group_start().map_err(e("ncclGroupStart"))?;
                    for p in 0..n {
                        let off = (p * per) as u64;
                        let send = (src + off) as *const c_void;
                        let recv = (dst + off) as *mut c_void;
                        let (count, peer) = (per / t.size(), p as i32);
                        sys::ncclSend(send, count, dt, peer, self.comm, st)
                            .result()
                            .map_err(e("ncclSend"))?;
                        sys::ncclRecv(recv, count, dt, peer, self.comm, st)
                            .result()
                            .map_err(e("ncclRecv"))?;
                    }
                    nccl::group_end().map_err(e("ncclGroupEnd"))?;
                }
                Coll::RmsNorm => return Err(fail("rmsnorm runs through its own bench")),
            }
        }
        Ok(())
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: created by comm_init_rank, destroyed once, after all work was synchronised.
        let _ = unsafe { nccl::comm_destroy(self.comm) };
    }
}

/// Maps NCCL's error of call `what` to the benchmark's error.
fn nccl_err(what: &'static str) -> impl Fn(nccl::NcclError) -> Error {
    move |e| fail(format!("{what}: {e:?}"))
}

fn dtype(t: DataType) -> sys::ncclDataType_t {
    match t {
        DataType::F32 => sys::ncclDataType_t::ncclFloat32,
        DataType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        DataType::F16 => sys::ncclDataType_t::ncclFloat16,
        DataType::I32 => sys::ncclDataType_t::ncclInt32,
    }
}

fn redop(op: RedOp) -> sys::ncclRedOp_t {
    match op {
        RedOp::Sum => sys::ncclRedOp_t::ncclSum,
        RedOp::Min => sys::ncclRedOp_t::ncclMin,
        RedOp::Max => sys::ncclRedOp_t::ncclMax,
    }
}
