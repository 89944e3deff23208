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
//! Typed launches ([`Function::launch_with`]) take a tuple of [`KernelArg`] values. The
//! module remembers every entry point's parameter list as declared in the PTX, and a launch
//! whose arguments differ in number or size from it is refused with an error instead of
//! handing the driver a wrong parameter buffer. Launches go to any stream, including one being
//! captured into a CUDA graph (kernel launches are capturable; nothing here synchronises).
//!
//! # Under the emulated backend
//! When the process runs on the CPU emulator ([`crate::backend::is_emulated`]), the same calls
//! run kernels on the host: [`Module::load`] needs no CUDA (it only reads the entry points
//! of the PTX), [`Module::function`] resolves the name against the kernels that `#[kernel]`
//! registered on the host (`symcomm_device::emu::registry`; the kernels crate must be linked
//! into the binary), and a launch checks its arguments against the registered parameter sizes
//! and runs the kernel with `symcomm_device::emu::Launch` over the whole grid. Emulated
//! launches are **synchronous**: they complete before returning, streams are ignored, and
//! stream capture into CUDA graphs is not emulated (there is no stream to capture).
//! [`synchronize`] does nothing. A kernel that panics, traps, deadlocks or outlives the
//! emulator's watchdog fails its launch with [`Error::Emulation`].

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::ptr;

use cudarc::driver::sys;

use symcomm_device::emu::registry::{self, KernelEntry};

use crate::cuda::check;
use crate::{Error, Result};

/// A loaded PTX module, unloaded on drop. Load it with the device's context current.
#[derive(Debug)]
pub struct Module {
    raw: sys::CUmodule,
    params: HashMap<String, Vec<usize>>,
    /// Every entry point's handle, already loaded onto the device (empty when emulated).
    functions: HashMap<String, sys::CUfunction>,
    /// True under the emulated backend: `raw` is null and kernels come from the registry.
    emulated: bool,
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
        if crate::backend::is_emulated()? {
            return Ok(Module {
                raw: ptr::null_mut(),
                params: entry_params(ptx),
                functions: HashMap::new(),
                emulated: true,
            });
        }
        let image = CString::new(ptx)
            .map_err(|_| Error::InvalidArgument("PTX text contains a NUL byte".into()))?;
        let mut raw = ptr::null_mut();
        match max_threads {
            // SAFETY: `image` is a NUL-terminated PTX string that outlives the call.
            None => check("cuModuleLoadData", unsafe {
                sys::cuModuleLoadData(&mut raw, image.as_ptr().cast())
            })?,
            Some(threads) => {
                let mut opts = [sys::CUjit_option::CU_JIT_THREADS_PER_BLOCK];
                // The driver reads (and writes back) an unsigned int passed by value in the
                // pointer-sized slot.
                let mut vals = [threads as usize as *mut std::ffi::c_void];
                // SAFETY: one option with its value slot; `image` as above.
                check("cuModuleLoadDataEx", unsafe {
                    sys::cuModuleLoadDataEx(
                        &mut raw,
                        image.as_ptr().cast(),
                        1,
                        opts.as_mut_ptr(),
                        vals.as_mut_ptr(),
                    )
                })?
            }
        }
        let mut module = Module {
            raw,
            params: entry_params(ptx),
            functions: HashMap::new(),
            emulated: false,
        };
        // Resolve and load every kernel now (see the module docs); on error, `module` drops
        // and unloads.
        let names: Vec<String> = module.params.keys().cloned().collect();
        for name in names {
            let f = module.get_function(&name)?;
            // SAFETY: `f` is a function of the loaded module.
            check("cuFuncLoad", unsafe { sys::cuFuncLoad(f) })?;
            module.functions.insert(name, f);
        }
        Ok(module)
    }

    /// `cuModuleGetFunction`; a missing name is an [`Error::InvalidArgument`].
    fn get_function(&self, name: &str) -> Result<sys::CUfunction> {
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("kernel name {name:?} contains NUL")))?;
        let mut raw = ptr::null_mut();
        // SAFETY: the module is loaded and `cname` is NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut raw, self.raw, cname.as_ptr())
        })
        .map_err(|e| match e {
            Error::Cuda {
                code: sys::CUresult::CUDA_ERROR_NOT_FOUND,
                ..
            } => Error::InvalidArgument(format!("no kernel named {name:?} in the module")),
            e => e,
        })?;
        Ok(raw)
    }

    /// The parameter sizes (bytes) of kernel `name` as declared in the PTX, if it exists.
    pub fn param_sizes(&self, name: &str) -> Option<&[usize]> {
        self.params.get(name).map(Vec::as_slice)
    }

    /// Looks up a kernel by name. Under the emulated backend the name must be an entry point
    /// of the PTX and a kernel registered by `#[kernel]` in this binary.
    ///
    /// On a GPU the handle comes from the table [`Module::load`] filled (no driver call); a
    /// name the PTX text did not list as an entry point is looked up and loaded now.
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        if self.emulated {
            return self.emulated_function(name);
        }
        let raw = match self.functions.get(name) {
            Some(&f) => f,
            None => {
                let f = self.get_function(name)?;
                // SAFETY: `f` is a function of this loaded module.
                check("cuFuncLoad", unsafe { sys::cuFuncLoad(f) })?;
                f
            }
        };
        Ok(Function {
            raw,
            name: name.to_owned(),
            params: self.params.get(name).cloned(),
            emu: None,
            _module: self,
        })
    }

    /// [`Module::function`] under the emulated backend: the registered kernel of that name
    /// (among several of the same name: the one whose parameter sizes match the PTX's).
    fn emulated_function(&self, name: &str) -> Result<Function<'_>> {
        let Some(declared) = self.params.get(name) else {
            return Err(Error::InvalidArgument(format!(
                "no kernel named {name:?} in the module"
            )));
        };
        let found: Vec<&'static KernelEntry> = registry::find(name).collect();
        let entry = match found.as_slice() {
            [] => {
                return Err(Error::InvalidArgument(format!(
                    "kernel {name:?} is in the PTX but not registered on the host: link its \
                     kernels crate into this binary to run it on the CPU emulator"
                )));
            }
            [one] => *one,
            several => {
                let matching: Vec<_> = several
                    .iter()
                    .filter(|e| e.param_sizes == declared.as_slice())
                    .collect();
                match matching.as_slice() {
                    [one] => **one,
                    _ => {
                        let paths: Vec<_> = several.iter().map(|e| e.module_path).collect();
                        return Err(Error::InvalidArgument(format!(
                            "kernel {name:?} is registered {} times on the host ({}): \
                             ambiguous on the CPU emulator",
                            several.len(),
                            paths.join(", ")
                        )));
                    }
                }
            }
        };
        Ok(Function {
            raw: ptr::null_mut(),
            name: name.to_owned(),
            params: Some(entry.param_sizes.to_vec()),
            emu: Some(entry),
            _module: self,
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.emulated {
            return;
        }
        // SAFETY: the module was loaded by `load` and is unloaded once; Functions borrow it.
        if let Err(e) = check("cuModuleUnload", unsafe { sys::cuModuleUnload(self.raw) }) {
            tracing::warn!("{e}");
        }
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
    raw: sys::CUfunction,
    name: String,
    params: Option<Vec<usize>>,
    /// The registered kernel, under the emulated backend.
    emu: Option<&'static KernelEntry>,
    _module: &'m Module,
}

impl Function<'_> {
    /// Whether the kernel's code is on the device (`cuFuncIsLoaded`). Always true for a
    /// function of a [`Module`] loaded by this crate (see the module docs) and under the
    /// emulated backend.
    pub fn is_loaded(&self) -> Result<bool> {
        if self.emu.is_some() {
            return Ok(true);
        }
        let mut state = sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_UNLOADED;
        // SAFETY: `raw` is a function of the live module this handle borrows.
        check("cuFuncIsLoaded", unsafe {
            sys::cuFuncIsLoaded(&mut state, self.raw)
        })?;
        Ok(state == sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_LOADED)
    }

    /// Launches the kernel on `stream` (null = the legacy default stream). Under the emulated
    /// backend: runs it to completion on the host (`stream` is ignored; see the module docs).
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
        let cluster = cfg.cluster.max(1);
        if cluster > MAX_CLUSTER || gx % cluster != 0 {
            return Err(Error::InvalidArgument(format!(
                "clusters of {cluster} blocks: at most {MAX_CLUSTER}, dividing the grid's x \
                 extent ({gx})"
            )));
        }
        if let Some(entry) = self.emu {
            // SAFETY: forwarded (the caller's argument contract). Emulated launches are
            // synchronous: a dependent launch has nothing to overlap.
            return unsafe { self.launch_emulated(entry, cfg, args) };
        }
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
            // SAFETY: as below; `config` and its attributes live across the call.
            return check("cuLaunchKernelEx", unsafe {
                sys::cuLaunchKernelEx(&config, self.raw, args.as_mut_ptr(), ptr::null_mut())
            });
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

    /// Launches the kernel with typed arguments on `stream` (null = legacy default stream),
    /// after checking them against the parameter list the PTX declares.
    ///
    /// # Safety
    /// - The argument types match the kernel's Rust signature (the size check cannot tell a
    ///   `u64` from a pointer).
    /// - Every pointer the kernel dereferences is valid for the accesses it makes, for the
    ///   whole execution of the kernel (which is asynchronous: until the stream is synchronised
    ///   or, under capture, for every replay of the graph).
    pub unsafe fn launch_with<A: KernelArgs>(
        &self,
        cfg: LaunchConfig,
        stream: sys::CUstream,
        args: A,
    ) -> Result<()> {
        let mut values = args;
        let sizes = A::sizes();
        if let Some(declared) = &self.params
            && declared.as_slice() != sizes.as_slice()
        {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` takes parameters of {declared:?} bytes, but the launch passes {sizes:?}",
                self.name
            )));
        }
        let mut ptrs = values.pointers();
        // SAFETY: the pointers address the fields of `values`, which outlives the call; the
        // sizes match the PTX declaration (checked above); the caller keeps the rest.
        unsafe { self.launch(cfg, stream, ptrs.as_mut()) }
    }

    /// Runs `entry` over the launch's grid on the CPU emulator and waits for it.
    ///
    /// # Safety
    /// As [`Function::launch`]; the pointers are read by every emulated thread.
    unsafe fn launch_emulated(
        &self,
        entry: &'static KernelEntry,
        cfg: LaunchConfig,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        if args.len() != entry.param_sizes.len() {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` takes {} parameters, but the launch passes {}",
                self.name,
                entry.param_sizes.len(),
                args.len()
            )));
        }
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        let launch = symcomm_device::emu::Launch::new((gx, gy, gz), (bx, by, bz))
            .shared(cfg.shared_mem_bytes)
            .cluster(cfg.cluster.max(1));
        let args: *const *mut c_void = args.as_ptr();
        // SAFETY: `args` holds one pointer per parameter to a value of its type (the caller's
        // contract), alive until this synchronous launch returns; the kernel only reads them.
        // Every pointer the kernel dereferences is valid for the whole run (the caller's
        // contract), which ends before `run_unsync` returns.
        unsafe { launch.run_unsync(|| (entry.shim)(args)) }.map_err(|e| Error::Emulation {
            kernel: self.name.clone(),
            detail: e.to_string(),
        })
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw driver handle (null under the emulated backend).
    pub fn raw(&self) -> sys::CUfunction {
        self.raw
    }
}

// ANCHOR: kernel_arg
/// A value that can be a kernel argument: its bytes are copied into the parameter buffer.
///
/// # Safety
/// Implementors are plain data (`Copy`, no padding that matters, no references) whose size and
/// layout equal the kernel parameter they are passed for: scalars, raw device pointers, and
/// `#[repr(C)]` structs shared with the device crate (such as the device communicator).
pub unsafe trait KernelArg: Copy {}
// ANCHOR_END: kernel_arg

macro_rules! kernel_arg {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive scalar is plain data of its own size.
        unsafe impl KernelArg for $t {}
    )* };
}
kernel_arg!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);
// SAFETY: the device communicator is `#[repr(C)]` plain data, passed by value (its layout is
// asserted in the device crate).
unsafe impl KernelArg for symcomm_device::comm::DevComm {}
// SAFETY: a symmetric pointer is `#[repr(C)]` `{window pointer, offset}` plain data.
unsafe impl<T> KernelArg for symcomm_device::ptr::SymPtr<T> {}
// SAFETY: raw pointers are 8-byte plain data; what they point to is the launcher's contract.
unsafe impl<T> KernelArg for *const T {}
// SAFETY: as above.
unsafe impl<T> KernelArg for *mut T {}

/// A tuple of [`KernelArg`]s: the whole argument list of a launch.
pub trait KernelArgs {
    /// The pointer array `cuLaunchKernel` takes, one pointer to each field of `self`.
    type Pointers: AsMut<[*mut c_void]>;
    /// Pointers to each argument, in order. They point into `self`.
    fn pointers(&mut self) -> Self::Pointers;
    /// The size of each argument, in order.
    fn sizes() -> Vec<usize>;
}

macro_rules! kernel_args {
    ($n:literal; $($name:ident : $idx:tt),*) => {
        impl<$($name: KernelArg),*> KernelArgs for ($($name,)*) {
            type Pointers = [*mut c_void; $n];
            #[allow(clippy::unused_unit)]
            fn pointers(&mut self) -> Self::Pointers {
                [$((&raw mut self.$idx).cast()),*]
            }
            fn sizes() -> Vec<usize> {
                vec![$(std::mem::size_of::<$name>()),*]
            }
        }
    };
}
kernel_args!(0;);
kernel_args!(1; A: 0);
kernel_args!(2; A: 0, B: 1);
kernel_args!(3; A: 0, B: 1, C: 2);
kernel_args!(4; A: 0, B: 1, C: 2, D: 3);
kernel_args!(5; A: 0, B: 1, C: 2, D: 3, E: 4);
kernel_args!(6; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);
kernel_args!(7; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6);
kernel_args!(8; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7);
kernel_args!(9; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8);
kernel_args!(10; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9);
kernel_args!(11; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10);
kernel_args!(12; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11);

/// Reads every `.entry`'s parameter sizes out of PTX text.
///
/// Parameters look like `.param .u64 .ptr .align 1 k_param_0` (scalar: size from the type)
/// or `.param .align 8 .b8 k_param_4[240]` (aggregate: the array length).
fn entry_params(ptx: &str) -> HashMap<String, Vec<usize>> {
    let mut out = HashMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let l = line.trim();
        let Some(rest) = l
            .strip_prefix(".visible .entry")
            .or_else(|| l.strip_prefix(".entry"))
        else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(open) = rest.find('(') else { continue };
        let name = rest[..open].trim().to_owned();
        let mut sizes = Vec::new();
        let mut decl = rest[open + 1..].to_owned();
        // The parameter list ends at the first ')' (possibly on a later line).
        while !decl.contains(')') {
            match lines.next() {
                Some(next) => {
                    decl.push(' ');
                    decl.push_str(next.trim());
                }
                None => break,
            }
        }
        let list = decl.split(')').next().unwrap_or("");
        for param in list.split(',') {
            if let Some(size) = param_size(param.trim()) {
                sizes.push(size);
            }
        }
        out.insert(name, sizes);
    }
    out
}

/// The size of one `.param` declaration. Brackets only make an array when a `[` comes before
/// the last `]` (others, e.g. in a trailing comment, are ignored); `None` (the parameter is not
/// counted) when the text declares no size this reader understands, including an array whose
/// byte size overflows.
fn param_size(decl: &str) -> Option<usize> {
    let decl = decl.strip_prefix(".param")?.trim();
    if let (Some(open), Some(close)) = (decl.rfind('['), decl.rfind(']'))
        && open < close
    {
        let n: usize = decl[open + 1..close].trim().parse().ok()?;
        let elem = decl.split_whitespace().find_map(scalar_size).unwrap_or(1);
        return n.checked_mul(elem);
    }
    decl.split_whitespace().find_map(scalar_size)
}

fn scalar_size(word: &str) -> Option<usize> {
    match word {
        ".u8" | ".s8" | ".b8" => Some(1),
        ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
        ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
        ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
        _ => None,
    }
}

/// Waits until all work on the current context has finished; surfaces asynchronous errors
/// (a trapped kernel shows up here). Does nothing under the emulated backend, whose launches
/// complete before they return.
pub fn synchronize() -> Result<()> {
    if matches!(
        crate::backend::backend(),
        Ok(crate::backend::Backend::Emulated)
    ) {
        return Ok(());
    }
    // SAFETY: no preconditions beyond a current context.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".version 8.3\n.target sm_90\n\
        .visible .entry vector_add(\n\t.param .u64 .ptr .align 1 vector_add_param_0,\n\
        \t.param .u32 vector_add_param_1,\n\t.param .align 8 .b8 vector_add_param_2[240],\n\
        \t.param .f32 vector_add_param_3\n)\n{\n\tret;\n}\n\
        .visible .entry no_params()\n{\n\tret;\n}\n";

    #[test]
    fn parameter_sizes_come_from_the_ptx_declaration() {
        let p = entry_params(PTX);
        assert_eq!(p["vector_add"], vec![8, 4, 240, 4]);
        assert_eq!(p["no_params"], Vec::<usize>::new());
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn malformed_parameter_declarations_are_skipped_not_a_panic() {
        // A `]` before the last `[` (here from a comment) does not make an array; an array
        // whose byte size overflows is not counted; the well-formed parameters still are.
        let ptx = ".visible .entry odd(\n\t.param .u32 odd_param_0 // a[i]; b] [\n,\
            \t.param .u64 odd_param_1[18446744073709551615],\n\
            \t.param .align 4 .b32 odd_param_2[3]\n)\n{\n\tret;\n}\n";
        let p = entry_params(ptx);
        assert_eq!(p["odd"], vec![4, 12]);
        assert_eq!(param_size(".param x] ["), None);
        assert_eq!(param_size(".param .u64 x[4]"), Some(32));
        assert_eq!(param_size(".param .u64 x[4611686018427387904]"), None);
    }

    #[test]
    fn tuple_arguments_report_their_sizes_and_point_at_their_fields() {
        assert_eq!(<(u64, u32, f32)>::sizes(), vec![8, 4, 4]);
        let mut args = (7u64, 3u32, 1.5f32);
        let mut ptrs = args.pointers();
        let ptrs = ptrs.as_mut();
        // SAFETY: the pointers point at the tuple's fields, which are alive and typed as read.
        unsafe {
            assert_eq!(*(ptrs[0] as *const u64), 7);
            assert_eq!(*(ptrs[1] as *const u32), 3);
            assert_eq!(*(ptrs[2] as *const f32), 1.5);
        }
    }
}
