//! Loading PTX modules and launching kernels.
//!
//! [`Module`] owns a loaded module (`cuModuleLoadData` / `cuModuleUnload`); [`Function`]
//! borrows it, so a function handle can never outlive its module. The driver JIT-compiles
//! the PTX for the current device when the module is loaded.
//!
//! Every kernel of the module is also loaded onto the device before [`Module::load`]
//! returns (`cuFuncLoad`), whatever `CUDA_MODULE_LOADING` says. Under the driver's default
//! lazy loading, a kernel's code reaches the device on first use, and that step may wait for
//! every kernel already running in the context. A communication kernel waits for kernels of
//! other ranks; if one of those waits, in turn, behind such a first use (another rank sharing
//! the context, a collective of another library in flight on another stream), neither ever
//! finishes. Loading everything up front moves that wait to [`Module::load`], where no
//! kernel of the module is running yet. [`Module::load`] itself still waits for the kernels
//! running in the context: load modules before any communication kernel of the context is
//! launched (with ranks as threads on one GPU, before the ranks' last collective setup call).
//!
//! Typed launches: [`Module::kernel`] takes the type `#[kernel]` emits for a kernel (its name
//! in `CamelCase`) and gives a [`TypedFunction`] whose `launch` takes exactly the kernel's
//! argument tuple, so a wrong argument type or count is a compile error. Where the kernel is
//! chosen at run time by name, [`Function::typed`] names the tuple and checks it: on the
//! emulator against the registered kernel's exact types, on a GPU against the parameter
//! sizes the PTX declares. Launches go to any stream, including one being captured into a
//! CUDA graph (kernel launches are capturable; nothing here synchronises).
//!
//! # Under the emulated backend
//! When the process runs on the CPU emulator ([`crate::backend::is_emulated`]), the same calls
//! run kernels on the host: [`Module::load`] needs no CUDA (it only reads the entry points
//! of the PTX), [`Module::function`] resolves the name against the kernels that `#[kernel]`
//! registered on the host (`symcomm_device::emu::registry`; the kernels crate must be linked
//! into the binary), and a launch checks its arguments against the registered parameter sizes
//! and runs the kernel with `symcomm_device::emu::Launch` over the whole grid. Emulated
//! launches are **synchronous**: they complete before returning, and streams only order
//! (a [`Stream`](crate::Stream)'s graphs replay by running their captured work again). Code
//! that sizes its own grids asks [`limits`] for the shapes the backend runs well.
//! [`synchronize`] does nothing. A kernel that panics, traps, deadlocks or outlives the
//! emulator's watchdog fails its launch with [`Error::Emulation`].

mod emu;
mod gpu;
mod limits;
mod ptx;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::sys;

use symcomm_device::emu::registry::KernelEntry;

pub use limits::{
    DEFAULT_EMU_BLOCKS, DEFAULT_EMU_THREADS, EMU_BLOCKS_ENV, EMU_THREADS_ENV,
    GPU_MAX_BLOCK_THREADS, LaunchLimits, limits,
};
pub use symcomm_device::launch::{Kernel, KernelArgs};

use crate::backend::{Backend, backend};
use crate::cuda::{AsStream, driver};
use crate::{Error, Result};

/// A loaded PTX module, unloaded on drop. Load it with the device's context current.
#[derive(Debug)]
pub struct Module {
    params: HashMap<String, Vec<usize>>,
    /// The driver's module; `None` under the emulated backend (kernels come from the
    /// registry).
    loaded: Option<gpu::LoadedModule>,
}

impl Module {
    /// Loads (and JIT-compiles) PTX text. Under the emulated backend: only reads its entry
    /// points (see the module docs).
    pub fn load(ptx: &str) -> Result<Module> {
        Module::load_jit(ptx, None)
    }

    /// [`Module::load`] for kernels launched with at most `max_threads` threads per block:
    /// the JIT keeps every kernel's registers within what such a block may use
    /// (`CU_JIT_THREADS_PER_BLOCK`, the module-wide form of CUDA's `__launch_bounds__`), so a
    /// launch of `max_threads` threads never fails for lack of registers.
    ///
    /// # Errors
    /// As [`Module::load`]; [`Error::InvalidArgument`] when `max_threads` is 0 or above 1024.
    pub fn load_for_block(ptx: &str, max_threads: u32) -> Result<Module> {
        if !(1..=1024).contains(&max_threads) {
            return Err(Error::InvalidArgument(format!(
                "threads per block {max_threads} is not in 1..=1024"
            )));
        }
        Module::load_jit(ptx, Some(max_threads))
    }

    fn load_jit(ptx: &str, max_threads: Option<u32>) -> Result<Module> {
        let params = ptx::entry_params(ptx);
        let loaded = match backend()? {
            Backend::Emulated => None,
            Backend::Gpu => Some(gpu::LoadedModule::load(ptx, max_threads, params.keys())?),
        };
        Ok(Module { params, loaded })
    }

    /// The parameter sizes (bytes) of kernel `name` as declared in the PTX, if it exists.
    pub fn param_sizes(&self, name: &str) -> Option<&[usize]> {
        self.params.get(name).map(Vec::as_slice)
    }

    /// The kernel `K` (the type `#[kernel]` emits next to it), typed by its own signature.
    ///
    /// # Errors
    /// As [`Module::function`] for `K::NAME`, and when the module's kernel of that name takes
    /// other parameters (another build of the kernels crate than the one linked).
    pub fn kernel<K: Kernel>(&self) -> Result<TypedFunction<'_, K::Args>> {
        self.function(K::NAME)?.typed::<K::Args>()
    }

    /// Looks up a kernel by name. Under the emulated backend the name must be an entry point
    /// of the PTX and a kernel registered by `#[kernel]` in this binary.
    ///
    /// On a GPU the handle comes from the table [`Module::load`] filled (no driver call); a
    /// name the PTX text did not list as an entry point is looked up and loaded now.
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let (kernel, params) = match &self.loaded {
            Some(m) => (Code::Gpu(m.function(name)?), self.params.get(name).cloned()),
            None => {
                let Some(declared) = self.params.get(name) else {
                    return Err(Error::InvalidArgument(format!(
                        "no kernel named {name:?} in the module"
                    )));
                };
                let entry = emu::resolve(name, declared)?;
                (Code::Emulated(entry), Some(entry.param_sizes.to_vec()))
            }
        };
        Ok(Function {
            kernel,
            name: name.to_owned(),
            params,
            _module: self,
        })
    }
}

/// Most blocks per cluster a launch may ask for ([`LaunchConfig::cluster`]).
pub const MAX_CLUSTER: u32 = 8;

/// Grid and block shape of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Programmatic dependent launch: the kernel may start before the kernel ahead of it on
    /// the stream has finished (as soon as that one's blocks have all called
    /// `symcomm_device::arch::launch_dependents` or exited), so its launch overlaps the
    /// other's tail. The kernel must call `symcomm_device::arch::grid_dependency_wait` before
    /// touching anything the kernel ahead of it writes (the stream order is otherwise kept).
    pub dependent_launch: bool,
    /// Blocks per thread block cluster along `x` (`symcomm_device::cluster`; 0 or 1: no
    /// clusters). The grid's `x` extent must be a multiple of it; at most 8 (the portable
    /// limit) so that every sm_90 GPU can place a cluster.
    pub cluster: u32,
}

impl LaunchConfig {
    /// A 1-D launch of `blocks` blocks of `threads` threads, no dynamic shared memory, no
    /// dependent launch.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
            dependent_launch: false,
            cluster: 0,
        }
    }

    /// This launch with programmatic dependent launch on (see
    /// [`dependent_launch`](Self::dependent_launch)).
    pub fn with_dependent_launch(self) -> Self {
        LaunchConfig {
            dependent_launch: true,
            ..self
        }
    }

    /// This launch in clusters of `blocks` blocks along `x` (see [`cluster`](Self::cluster)).
    pub fn with_cluster(self, blocks: u32) -> Self {
        LaunchConfig {
            cluster: blocks,
            ..self
        }
    }
}

/// A kernel of a loaded [`Module`].
#[derive(Debug)]
pub struct Function<'m> {
    kernel: Code,
    name: String,
    params: Option<Vec<usize>>,
    _module: &'m Module,
}

/// What runs when a [`Function`] is launched.
#[derive(Debug, Clone, Copy)]
enum Code {
    /// A function of the driver's module (which the [`Function`] borrows).
    Gpu(sys::CUfunction),
    /// The kernel registered on the host, under the emulated backend.
    Emulated(&'static KernelEntry),
}

impl<'m> Function<'m> {
    /// Whether the kernel's code is on the device (`cuFuncIsLoaded`). Always true for a
    /// function of a [`Module`] loaded by this crate (see the module docs) and under the
    /// emulated backend.
    pub fn is_loaded(&self) -> Result<bool> {
        match self.kernel {
            // SAFETY: `f` is a function of the live module this handle borrows.
            Code::Gpu(f) => unsafe { driver::func_is_loaded(f) },
            Code::Emulated(_) => Ok(true),
        }
    }

    /// Launches the kernel on `stream` (a [`Stream`](crate::Stream), a cudarc `CudaStream`, or
    /// a raw handle; null = the legacy default stream). Under the emulated backend: runs it to
    /// completion on the host (`stream` is ignored; see the module docs).
    ///
    /// # Safety
    /// - `args` holds one pointer per kernel parameter, in order, each pointing to a value of
    ///   exactly the parameter's type and size; they need only live until this call returns.
    /// - Every pointer the kernel dereferences is valid for the accesses it makes, for the
    ///   whole execution of the kernel.
    pub unsafe fn launch(
        &self,
        cfg: LaunchConfig,
        stream: impl AsStream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        let stream = stream.raw_stream();
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        if [gx, gy, gz, bx, by, bz].contains(&0) {
            return Err(Error::InvalidArgument(format!(
                "empty launch shape: grid {:?}, block {:?}",
                cfg.grid, cfg.block
            )));
        }
        let cluster = cfg.cluster.max(1);
        if cluster > MAX_CLUSTER || gx % cluster != 0 {
            return Err(Error::InvalidArgument(format!(
                "clusters of {cluster} blocks: at most {MAX_CLUSTER}, dividing the grid's x \
                 extent ({gx})"
            )));
        }
        match self.kernel {
            // SAFETY: forwarded (the caller's argument contract); `f` belongs to the module
            // this handle borrows; the shape was checked above.
            Code::Gpu(f) => unsafe { gpu::launch(f, cfg, stream, args) },
            // SAFETY: forwarded (the caller's argument contract). Emulated launches are
            // synchronous: a dependent launch has nothing to overlap.
            Code::Emulated(entry) => unsafe { emu::launch(entry, &self.name, cfg, args) },
        }
    }

    /// This kernel as taking the arguments `A` (a tuple of its parameter types), for kernels
    /// chosen by name at run time; prefer [`Module::kernel`], whose types the compiler checks.
    /// On a GPU only the sizes can be compared here: launching then makes the caller vouch for
    /// the types (see [`TypedFunction::launch`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming both parameter lists when `A` is not the kernel's:
    /// under the emulated backend, unless `A` is exactly the registered kernel's types; on a
    /// GPU, unless `A`'s sizes are the PTX's parameter sizes (a `u64` and a pointer look the
    /// same there).
    pub fn typed<A: KernelArgs>(self) -> Result<TypedFunction<'m, A>> {
        let passed = || format!("{} (sizes {:?})", std::any::type_name::<A>(), A::SIZES);
        match self.kernel {
            Code::Emulated(entry) if (entry.args_type)() != std::any::TypeId::of::<A>() => {
                return Err(Error::InvalidArgument(format!(
                    "kernel `{}` takes ({}), not {}",
                    self.name,
                    entry.params,
                    passed()
                )));
            }
            _ => {}
        }
        if let Some(declared) = &self.params
            && declared.as_slice() != A::SIZES
        {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` takes parameters of {declared:?} bytes, not {}",
                self.name,
                passed()
            )));
        }
        Ok(TypedFunction::new(self))
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw driver handle (null under the emulated backend).
    pub fn raw(&self) -> sys::CUfunction {
        match self.kernel {
            Code::Gpu(f) => f,
            Code::Emulated(_) => std::ptr::null_mut(),
        }
    }
}

/// Waits until all work on the current context has finished; surfaces asynchronous errors
/// (a trapped kernel shows up here). Does nothing under the emulated backend, whose launches
/// complete before they return.
pub fn synchronize() -> Result<()> {
    match backend() {
        Ok(Backend::Emulated) => Ok(()),
        _ => driver::ctx_synchronize(),
    }
}

/// The doc test of a launch of `scale` (see [`TypedFunction`]) with the argument tuple
/// `$args`, which must fail to compile with a type mismatch (E0308).
macro_rules! typed_launch_must_fail {
    ($args:literal) => {
        concat!(
            "\n```compile_fail,E0308\n",
            "# use symcomm::launch::{LaunchConfig, Module};\n",
            "# use symcomm::{DeviceMemory, Stream, Window, cuda::VmmBuffer};\n",
            "# use symcomm_device::prelude::*;\n",
            "# #[kernel]\n",
            "# pub unsafe fn scale(x: WindowHandle, y: *mut f32, n: u64) { let _ = (x, y, n); }\n",
            "# fn launch(m: &Module, x: &Window, y: &VmmBuffer, s: &Stream)\n",
            "#     -> symcomm::Result<()> {\n",
            "let k = m.kernel::<Scale>()?;\n",
            "let args = ",
            $args,
            ";\n",
            "unsafe { k.launch(LaunchConfig::linear(8, 128), s, args) }\n",
            "# }\n",
            "```\n"
        )
    };
}

/// A kernel of a loaded [`Module`] that takes the arguments `A` (a tuple).
///
/// A kernel, and a launch through the type `#[kernel]` emits for it (`Scale`):
///
/// ```no_run
/// use symcomm::launch::{LaunchConfig, Module};
/// use symcomm::{Stream, Window, cuda::VmmBuffer};
/// use symcomm_device::prelude::*;
///
/// /// `y[i] = 2 × (this rank's copy of the window x)[i]`.
/// #[kernel]
/// pub unsafe fn scale(x: WindowHandle, y: *mut f32, n: u64) {
///     # let _ = (x, y, n);
///     // …
/// }
///
/// fn launch(m: &Module, x: &Window, y: &VmmBuffer, s: &Stream) -> symcomm::Result<()> {
///     let k = m.kernel::<Scale>()?;
///     let args = (x.handle(), y.as_mut_ptr(), 1024u64);
///     // SAFETY: (not run) the window and `y` hold 1024 f32.
///     unsafe { k.launch(LaunchConfig::linear(8, 128), s, args) }
/// }
/// ```
///
/// The same launch does not compile with an argument of another type (here a `u32` count),
#[doc = typed_launch_must_fail!("(x.handle(), y.as_mut_ptr(), 1024u32)")]
/// with one argument too few,
#[doc = typed_launch_must_fail!("(x.handle(), y.as_mut_ptr())")]
/// with a data pointer where the kernel takes a window,
#[doc = typed_launch_must_fail!("(y.as_ptr::<f32>(), y.as_mut_ptr(), 1024u64)")]
/// or with the window's data address (a `u64`) in its place:
#[doc = typed_launch_must_fail!("(x.device_ptr(), y.as_mut_ptr(), 1024u64)")]
///
/// A kernel whose by-value parameter is not plain data does not compile either:
///
/// ```compile_fail,E0277
/// use symcomm_device::prelude::*;
///
/// #[kernel]
/// pub unsafe fn flag(on: bool) {
///     # let _ = on;
/// }
/// ```
#[derive(Debug)]
pub struct TypedFunction<'m, A> {
    function: Function<'m>,
    _args: PhantomData<fn(A)>,
}

impl<'m, A: KernelArgs> TypedFunction<'m, A> {
    /// `function`, already checked to take `A`.
    pub(super) fn new(function: Function<'m>) -> Self {
        TypedFunction {
            function,
            _args: PhantomData,
        }
    }

    /// Launches the kernel on `stream` (as [`Function::launch`]) with `args`, whose types
    /// are the kernel's parameter types.
    ///
    /// # Safety
    /// - The module's kernel of this name takes exactly the types of `A`. Checked on the
    ///   emulator; on a GPU only their sizes were compared with the PTX, so the caller vouches
    ///   for the types: a handle from [`Module::kernel`] has them when the module's PTX was
    ///   built from the kernels crate `K` comes from; one from [`Function::typed`] when `A` is
    ///   the kernel's parameter list;
    /// - every pointer the kernel dereferences is valid for the accesses it makes, for the
    ///   whole execution of the kernel (which is asynchronous: until the stream is synchronised
    ///   or, under capture, for every replay of the graph);
    /// - the rest of the kernel's own `# Safety` contract holds (sizes, launch shape, what
    ///   every rank launches).
    pub unsafe fn launch(&self, cfg: LaunchConfig, stream: impl AsStream, args: A) -> Result<()> {
        let mut values = args;
        let mut ptrs = values.pointers();
        // SAFETY: the pointers address the fields of `values`, which outlives the call; their
        // count and sizes match the kernel's parameters (checked when this handle was made)
        // and their types do (the caller's contract); the caller keeps the rest.
        unsafe { self.function.launch(cfg, stream, ptrs.as_mut()) }
    }

    /// The untyped function.
    pub fn function(&self) -> &Function<'m> {
        &self.function
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.function.name()
    }
}
