//! Loading PTX modules and launching kernels.
//!
//! [`Module`] owns a loaded module (`cuModuleLoadData` / `cuModuleUnload`); [`Function`]
//! borrows it, so a function handle can never outlive its module. The driver JIT-compiles
//! the PTX for the current device when the module is loaded.
//!
//! Typed launches ([`Function::launch_with`]) take a tuple of [`KernelArg`] values. The
//! module remembers every entry point's parameter list as declared in the PTX, and a launch
//! whose arguments differ in number or size from it is refused with an error instead of
//! handing the driver a wrong parameter buffer. Launches go to any stream, including one being
//! captured into a CUDA graph (kernel launches are capturable; nothing here synchronises).

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::ptr;

use cudarc::driver::sys;

use crate::cuda::check;
use crate::{Error, Result};

/// A loaded PTX module, unloaded on drop. Load it with the device's context current.
#[derive(Debug)]
pub struct Module {
    raw: sys::CUmodule,
    params: HashMap<String, Vec<usize>>,
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
        Ok(Module {
            raw,
            params: entry_params(ptx),
        })
    }

    /// The parameter sizes (bytes) of kernel `name` as declared in the PTX, if it exists.
    pub fn param_sizes(&self, name: &str) -> Option<&[usize]> {
        self.params.get(name).map(Vec::as_slice)
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
            Error::Cuda {
                code: sys::CUresult::CUDA_ERROR_NOT_FOUND,
                ..
            } => Error::InvalidArgument(format!("no kernel named {name:?} in the module")),
            e => e,
        })?;
        Ok(Function {
            raw,
            name: name.to_owned(),
            params: self.params.get(name).cloned(),
            _module: self,
        })
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
    name: String,
    params: Option<Vec<usize>>,
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

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw driver handle.
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

fn param_size(decl: &str) -> Option<usize> {
    let decl = decl.strip_prefix(".param")?.trim();
    if let (Some(open), Some(close)) = (decl.rfind('['), decl.rfind(']')) {
        let n: usize = decl[open + 1..close].trim().parse().ok()?;
        let elem = decl.split_whitespace().find_map(scalar_size).unwrap_or(1);
        return Some(n * elem);
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
/// (a trapped kernel shows up here).
pub fn synchronize() -> Result<()> {
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
