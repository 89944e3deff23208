//! The GPU backend of [`launch`](super): a module loaded by the driver (unloaded on drop), its
//! functions, and launches through `cuLaunchKernel(Ex)`.

use std::collections::HashMap;
use std::ffi::{CString, c_void};

use cudarc::driver::sys;

use super::LaunchConfig;
use crate::cuda::driver;
use crate::{Error, Result};

/// A module loaded by the driver with every entry point already on the device; unloaded
/// with `cuModuleUnload` on drop.
#[derive(Debug)]
pub(super) struct LoadedModule {
    raw: sys::CUmodule,
    /// Every entry point's handle, already loaded onto the device.
    functions: HashMap<String, sys::CUfunction>,
}

impl LoadedModule {
    /// Loads (and JIT-compiles) `ptx`, then resolves and loads each of `entry_points` now (see
    /// the module docs of [`launch`](super)).
    pub(super) fn load<'a>(
        ptx: &str,
        max_threads: Option<u32>,
        entry_points: impl Iterator<Item = &'a String>,
    ) -> Result<LoadedModule> {
        let image = CString::new(ptx)
            .map_err(|_| Error::InvalidArgument("PTX text contains a NUL byte".into()))?;
        let mut module = LoadedModule {
            raw: driver::module_load_data(&image, max_threads)?,
            functions: HashMap::new(),
        };
        // On error, `module` drops and unloads.
        for name in entry_points {
            let f = module.load_function(name)?;
            module.functions.insert(name.clone(), f);
        }
        Ok(module)
    }

    /// The handle of kernel `name`: from the table [`LoadedModule::load`] filled (no driver
    /// call), or looked up and loaded now for a name the PTX text did not list.
    pub(super) fn function(&self, name: &str) -> Result<sys::CUfunction> {
        match self.functions.get(name) {
            Some(&f) => Ok(f),
            None => self.load_function(name),
        }
    }

    /// `cuModuleGetFunction` + `cuFuncLoad`; a missing name is an [`Error::InvalidArgument`].
    fn load_function(&self, name: &str) -> Result<sys::CUfunction> {
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("kernel name {name:?} contains NUL")))?;
        // SAFETY: the module is loaded (owned by `self`).
        let f = unsafe { driver::module_get_function(self.raw, &cname) }.map_err(|e| match e {
            Error::Cuda {
                code: sys::CUresult::CUDA_ERROR_NOT_FOUND,
                ..
            } => Error::InvalidArgument(format!("no kernel named {name:?} in the module")),
            e => e,
        })?;
        // SAFETY: `f` is a function of this loaded module.
        unsafe { driver::func_load(f) }?;
        Ok(f)
    }
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        // SAFETY: loaded by `load` and unloaded once; Functions borrow the owning Module.
        if let Err(e) = unsafe { driver::module_unload(self.raw) } {
            tracing::warn!("{e}");
        }
    }
}

/// Launches `f` with `cfg` on `stream`: `cuLaunchKernelEx` when the launch has attributes
/// (dependent launch, clusters), else `cuLaunchKernel`.
///
/// # Safety
/// `f` is a function of a loaded module that outlives the call; `args` and the pointers the
/// kernel dereferences are valid as [`Function::launch`](super::Function::launch) requires;
/// the shape was checked.
pub(super) unsafe fn launch(
    f: sys::CUfunction,
    cfg: LaunchConfig,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<()> {
    let cluster = cfg.cluster.max(1);
    let mut attrs = Vec::with_capacity(2);
    if cfg.dependent_launch {
        attrs.push(sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                programmaticStreamSerializationAllowed: 1,
            },
        });
    }
    if cluster > 1 {
        attrs.push(sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                clusterDim: sys::CUlaunchAttributeValue_union__bindgen_ty_1 {
                    x: cluster,
                    y: 1,
                    z: 1,
                },
            },
        });
    }
    let ((gx, gy, gz), (bx, by, bz)) = (cfg.grid, cfg.block);
    if !attrs.is_empty() {
        let config = sys::CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        // SAFETY: the caller's contract; `config` and its attributes live across the call.
        return unsafe { driver::launch_kernel_ex(&config, f, args) };
    }
    // SAFETY: the caller's contract.
    unsafe { driver::launch_kernel(f, cfg.grid, cfg.block, cfg.shared_mem_bytes, stream, args) }
}
