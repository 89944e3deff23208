//! Loading PTX modules and launching kernels.
//!
//! [`Module`] owns a loaded module (`cuModuleLoadData` / `cuModuleUnload`); [`Function`]
//! borrows it, so a function handle can never outlive its module. The driver JIT-compiles
//! the PTX for the current device when the module is loaded.

use std::ffi::{CString, c_void};
use std::ptr;

use cudarc::driver::sys;

use crate::cuda::check;
use crate::{Error, Result};

/// A loaded PTX module, unloaded on drop. Load it with the device's context current.
#[derive(Debug)]
pub struct Module {
    raw: sys::CUmodule,
}

impl Module {
    /// Loads (and JIT-compiles) PTX text.
    pub fn load(ptx: &str) -> Result<Module> {
        let image = CString::new(ptx)
            .map_err(|_| Error::InvalidArgument("PTX text contains a NUL byte".into()))?;
        let mut raw = ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut raw, image.as_ptr().cast())
        })?;
        Ok(Module { raw })
    }

    /// Looks up a kernel by name.
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("kernel name {name:?} contains NUL")))?;
        let mut raw = ptr::null_mut();
        // SAFETY: the module is loaded and `cname` is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut raw, self.raw, cname.as_ptr())
        })
        .map_err(|e| match e {
            Error::Cuda { code, .. } if code.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                Error::InvalidArgument(format!("no kernel named {name:?} in the module"))
            }
            e => e,
        })?;
        Ok(Function { raw, _module: self })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once; Functions borrow it.
        if let Err(e) = check("cuModuleUnload", unsafe { sys::cuModuleUnload(self.raw) }) {
            tracing::warn!("{e}");
        }
    }
}

/// Grid and block shape of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `blocks` blocks of `threads` threads, no dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// A kernel of a loaded [`Module`].
#[derive(Debug)]
pub struct Function<'m> {
    raw: sys::CUfunction,
    _module: &'m Module,
}

impl Function<'_> {
    /// Launches the kernel on `stream` (null = the legacy default stream).
    ///
    /// # Safety
    /// - `args` holds one pointer per kernel parameter, in order, each pointing to a value of
    ///   exactly the parameter's type and size; they need only live until this call returns.
    /// - Every pointer the kernel dereferences is valid for the accesses it makes, for the
    ///   whole execution of the kernel.
    pub unsafe fn launch(
        &self,
        cfg: LaunchConfig,
        stream: sys::CUstream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        if [gx, gy, gz, bx, by, bz].contains(&0) {
            return Err(Error::InvalidArgument(format!(
                "empty launch shape: grid {:?}, block {:?}",
                cfg.grid, cfg.block
            )));
        }
        // SAFETY: the caller upholds the argument contract above; shape is non-empty.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.raw,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                cfg.shared_mem_bytes,
                stream,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        })
    }

    /// The raw driver handle.
    pub fn raw(&self) -> sys::CUfunction {
        self.raw
    }
}

/// Waits until all work on the current context has finished; surfaces asynchronous errors
/// (a trapped kernel shows up here).
pub fn synchronize() -> Result<()> {
    // SAFETY: no preconditions beyond a current context.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}
