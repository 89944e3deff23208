//! The harness every check of `gpu_device` runs on: the loaded test kernels and the device
//! buffers a check fills, launches on and reads back ([`Ctx`]), and the [`Verdict`] a check
//! returns. The check modules (one per device-crate module) build on it; it knows none of them.

use symcomm::Result;
use symcomm::cuda::VmmBuffer;
use symcomm::launch::{Kernel, LaunchConfig, Module, synchronize};
use symcomm_test_kernels as k;

/// The verdict of one check: `Ok(detail)` passed, `Err(detail)` failed.
pub type Verdict = std::result::Result<String, String>;

/// `Ok` when `cond` holds, else `Err(msg())`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> std::result::Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

/// The device and the test kernels' module loaded on it.
pub struct Ctx {
    /// The CUDA device ordinal.
    pub dev: i32,
    /// The test kernels (`symcomm_tests::kernels::PTX`).
    pub module: Module,
}

impl Ctx {
    /// A device buffer of `n` elements of `T`, poisoned with 0xFF bytes.
    pub fn poisoned<T>(&self, n: usize) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, (n * size_of::<T>()).max(16))?;
        b.fill_bytes(0xff)?;
        Ok(b)
    }

    /// A device buffer of `n` elements of `T`, zeroed.
    pub fn zeroed<T>(&self, n: usize) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, (n * size_of::<T>()).max(16))?;
        b.fill_bytes(0)?;
        Ok(b)
    }

    /// A device buffer holding `data`.
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<VmmBuffer> {
        let b = VmmBuffer::new(self.dev, size_of_val(data).max(16))?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// The first `n` elements of `b`.
    pub fn download<T: Copy + Default>(&self, b: &VmmBuffer, n: usize) -> Result<Vec<T>> {
        let mut v = vec![T::default(); n];
        b.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Launches kernel `K` with the argument tuple `args` (its parameter types, so a wrong
    /// argument does not compile) and waits for it (errors name the failing driver call).
    pub fn run<K: Kernel>(&self, cfg: LaunchConfig, args: K::Args) -> Result<()> {
        let f = self.module.kernel::<K>()?;
        // SAFETY: `args` has the kernel's parameter types (checked by the type system and by
        // `Module::kernel` against the module), and the checks size every buffer as the
        // kernel's `# Safety` section asks; the buffers outlive the kernel, which
        // `synchronize` waits for before they can drop.
        unsafe { f.launch(cfg, std::ptr::null_mut(), args)? };
        synchronize()
    }

    /// `dst[0..n] = value` on any device memory (also custom VA mappings).
    pub fn fill(&self, dst: u64, n: u64, value: u32) -> Result<()> {
        let dst = std::ptr::with_exposed_provenance_mut::<u32>(dst as usize);
        self.run::<k::FillU32>(LaunchConfig::linear(64, 256), (dst, n, value))
    }

    /// Copies `n` u32 from any device memory into a fresh host vector.
    pub fn read_u32(&self, src: u64, n: usize) -> Result<Vec<u32>> {
        let out = self.poisoned::<u32>(n)?;
        let src = std::ptr::with_exposed_provenance::<u32>(src as usize);
        self.run::<k::CopyU32>(
            LaunchConfig::linear(64, 256),
            (src, out.as_mut_ptr(), n as u64),
        )?;
        self.download(&out, n)
    }
}
