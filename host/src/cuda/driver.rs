//! Checked driver calls: one thin function per CUDA driver entry point the runtime uses, each
//! returning a [`Result`] whose error names the call (cudarc's `result` layer, for the calls
//! cudarc does not wrap the way symcomm needs them).
//!
//! This is the only place that calls `cudarc::driver::sys::cu*`. The RAII types of
//! [`vmm`](super::vmm), [`memory`](super::memory), [`stream`](super::stream),
//! [`multicast`](super::multicast) and [`launch`](crate::launch) are built on these functions,
//! and their emulated counterparts on the same-named functions of `memfd`. A function is
//! `unsafe` when the driver cannot check what it is given (a handle or address that must be
//! live, memory that must hold the bytes copied); out-pointers are always this layer's own.
//!
//! The driver must be loaded first ([`init_driver`]): cudarc's bindings abort the process if
//! the library is missing, [`init_driver`] checks for it.

use std::ffi::{CStr, c_int, c_void};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;

use cudarc::driver::sys;

use crate::{Error, Result};

/// Turns a raw driver status into a [`Result`] that names the call.
fn check(call: &'static str, status: sys::CUresult) -> Result<()> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda { call, code: status })
    }
}

/// Loads and initialises the CUDA driver; [`Error::NoDriver`] when there is none.
///
/// Call this before anything else that touches CUDA: cudarc's raw bindings abort the process
/// if the driver library is missing, this check does not.
pub fn init_driver() -> Result<()> {
    // SAFETY: probing for the library has no preconditions; it only tries to dlopen it.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDriver(
            "libcuda.so could not be loaded (no NVIDIA driver on this machine)".into(),
        ));
    }
    // SAFETY: cuInit takes flags 0 and may be called any number of times.
    check("cuInit", unsafe { sys::cuInit(0) })
}

// ---- devices and contexts ----

/// `cuDeviceGetCount`.
pub(crate) fn device_get_count() -> Result<i32> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the driver reports an uninitialised state itself.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

/// `cuDeviceGet`.
pub(crate) fn device_get(ordinal: i32) -> Result<sys::CUdevice> {
    let mut dev = 0;
    // SAFETY: `dev` is a valid out-pointer; the driver checks the ordinal.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&mut dev, ordinal)
    })?;
    Ok(dev)
}

/// `cuDeviceTotalMem`.
pub(crate) fn device_total_mem(dev: sys::CUdevice) -> Result<usize> {
    let mut bytes = 0usize;
    // SAFETY: `bytes` is a valid out-pointer; the driver checks the device.
    check("cuDeviceTotalMem", unsafe {
        sys::cuDeviceTotalMem_v2(&mut bytes, dev)
    })?;
    Ok(bytes)
}

/// `cuDeviceGetAttribute`.
pub(crate) fn device_get_attribute(
    attr: sys::CUdevice_attribute,
    dev: sys::CUdevice,
) -> Result<i32> {
    let mut value = 0;
    // SAFETY: `value` is a valid out-pointer; the driver checks the device and attribute.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, attr, dev)
    })?;
    Ok(value)
}

/// `cuDeviceCanAccessPeer`.
pub(crate) fn device_can_access_peer(dev: sys::CUdevice, peer: sys::CUdevice) -> Result<bool> {
    let mut can = 0;
    // SAFETY: `can` is a valid out-pointer; the driver checks both devices.
    check("cuDeviceCanAccessPeer", unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, dev, peer)
    })?;
    Ok(can != 0)
}

/// `cuCtxSynchronize`: waits for all work of the current context.
pub(crate) fn ctx_synchronize() -> Result<()> {
    // SAFETY: no preconditions beyond a current context, which the driver checks.
    check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
}

/// `cuMemGetInfo`: free and total bytes of the current context's device.
pub(crate) fn mem_get_info() -> Result<(usize, usize)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers; the driver checks for a current context.
    check("cuMemGetInfo", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    })?;
    Ok((free, total))
}

// ---- virtual memory management ----

/// `cuMemGetAllocationGranularity` (recommended granularity).
pub(crate) fn mem_get_allocation_granularity(prop: &sys::CUmemAllocationProp) -> Result<usize> {
    let mut g = 0usize;
    // SAFETY: `prop` is a fully initialised property struct and `g` a valid out-pointer.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    })?;
    Ok(g)
}

/// `cuMemCreate`: a new physical allocation handle (the caller releases it).
pub(crate) fn mem_create(
    size: usize,
    prop: &sys::CUmemAllocationProp,
) -> Result<sys::CUmemGenericAllocationHandle> {
    let mut handle = 0;
    // SAFETY: `prop` is initialised and `handle` a valid out-pointer; the driver checks size.
    check("cuMemCreate", unsafe {
        sys::cuMemCreate(&mut handle, size, prop, 0)
    })?;
    Ok(handle)
}

/// `cuMemRelease`: drops this reference to the allocation (the physical memory goes once no
/// handle and no mapping refers to it any more).
///
/// # Safety
/// `handle` is a live allocation handle owned by the caller and released once; it is not used
/// afterwards.
pub(crate) unsafe fn mem_release(handle: sys::CUmemGenericAllocationHandle) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
}

/// `cuMemExportToShareableHandle` as a POSIX file descriptor (a new descriptor the caller
/// owns; the call fails unless the handle was created exportable that way).
///
/// # Safety
/// `handle` is a live allocation handle.
pub(crate) unsafe fn mem_export_to_posix_fd(
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<c_int> {
    let mut fd: c_int = -1;
    // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver writes one `int` to the
    // out-pointer; `fd` is a live int. The handle is live (the caller's contract).
    check("cuMemExportToShareableHandle", unsafe {
        sys::cuMemExportToShareableHandle(
            (&raw mut fd).cast(),
            handle,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    })?;
    if fd < 0 {
        return Err(Error::Cuda {
            call: "cuMemExportToShareableHandle",
            code: sys::CUresult::CUDA_ERROR_INVALID_HANDLE,
        });
    }
    Ok(fd)
}

/// `cuMemImportFromShareableHandle` of a POSIX file descriptor: a new handle the caller
/// releases. The descriptor stays the caller's.
pub(crate) fn mem_import_from_posix_fd(
    fd: BorrowedFd<'_>,
) -> Result<sys::CUmemGenericAllocationHandle> {
    let mut handle = 0;
    // SAFETY: for POSIX fds the driver takes the descriptor value itself, cast to a pointer;
    // it only reads the descriptor (which `fd` keeps open) and does not take it.
    check("cuMemImportFromShareableHandle", unsafe {
        sys::cuMemImportFromShareableHandle(
            &mut handle,
            fd.as_raw_fd() as usize as *mut c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(handle)
}

/// `cuMemRetainAllocationHandle`: a new reference to the allocation mapped at `ptr`, which the
/// caller releases.
pub(crate) fn mem_retain_allocation_handle(ptr: u64) -> Result<sys::CUmemGenericAllocationHandle> {
    let mut handle = 0;
    // SAFETY: `handle` is a valid out-pointer; the driver only looks the address up.
    check("cuMemRetainAllocationHandle", unsafe {
        sys::cuMemRetainAllocationHandle(&mut handle, ptr as *mut c_void)
    })?;
    Ok(handle)
}

/// `cuMemGetAddressRange`: the base and size of the allocation (for VMM: the mapping) that
/// contains `ptr`.
pub(crate) fn mem_get_address_range(ptr: u64) -> Result<(u64, usize)> {
    let (mut base, mut size) = (0, 0);
    // SAFETY: `base` and `size` are valid out-pointers; the driver only looks the address up.
    check("cuMemGetAddressRange", unsafe {
        sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr)
    })?;
    Ok((base, size))
}

/// `cuMemGetAllocationPropertiesFromHandle`. The result is zero-initialised before the driver
/// fills it, so every byte is initialised; enum fields may still hold values this binding does
/// not know (a newer driver): read them as raw integers.
///
/// # Safety
/// `handle` is a live allocation handle.
pub(crate) unsafe fn mem_get_allocation_properties(
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<MaybeUninit<sys::CUmemAllocationProp>> {
    let mut prop = MaybeUninit::<sys::CUmemAllocationProp>::zeroed();
    // SAFETY: `prop` is writable storage for one CUmemAllocationProp; the handle is live.
    check("cuMemGetAllocationPropertiesFromHandle", unsafe {
        sys::cuMemGetAllocationPropertiesFromHandle(prop.as_mut_ptr(), handle)
    })?;
    Ok(prop)
}

/// `cuMemAddressReserve` of `size` bytes aligned to `align` (0: the default), at an address of
/// the driver's choosing; the caller frees it.
pub(crate) fn mem_address_reserve(size: usize, align: usize) -> Result<u64> {
    let mut base = 0;
    // SAFETY: `base` is a valid out-pointer; no fixed address is requested.
    check("cuMemAddressReserve", unsafe {
        sys::cuMemAddressReserve(&mut base, size, align, 0, 0)
    })?;
    Ok(base)
}

/// `cuMemAddressFree`.
///
/// # Safety
/// `[base, base + size)` is exactly one reservation from [`mem_address_reserve`], freed once,
/// with nothing mapped in it any more.
pub(crate) unsafe fn mem_address_free(base: u64, size: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemAddressFree", unsafe {
        sys::cuMemAddressFree(base, size)
    })
}

/// `cuMemMap` of all `size` bytes of `handle` at `ptr` (the driver refuses a range that is
/// already mapped).
///
/// # Safety
/// `[ptr, ptr + size)` lies inside a live reservation; `handle` is live and `size` bytes long.
pub(crate) unsafe fn mem_map(
    ptr: u64,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemMap", unsafe {
        sys::cuMemMap(ptr, size, 0, handle, 0)
    })
}

/// `cuMemUnmap`.
///
/// # Safety
/// `[ptr, ptr + size)` is exactly one mapping made by [`mem_map`], unmapped once, that nothing
/// uses any more.
pub(crate) unsafe fn mem_unmap(ptr: u64, size: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) })
}

/// `cuMemSetAccess`: read/write access to `[ptr, ptr + size)` for each of `devices`.
///
/// # Safety
/// The range is mapped (by [`mem_map`]).
pub(crate) unsafe fn mem_set_access(ptr: u64, size: usize, devices: &[i32]) -> Result<()> {
    let descs: Vec<sys::CUmemAccessDesc> = devices
        .iter()
        .map(|&d| {
            // SAFETY: CUmemAccessDesc is a plain C struct; all-zero is valid.
            let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
            desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
            desc.location.id = d;
            desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            desc
        })
        .collect();
    // SAFETY: the range is mapped (the caller's contract) and `descs` holds `descs.len()`
    // valid descriptors.
    check("cuMemSetAccess", unsafe {
        sys::cuMemSetAccess(ptr, size, descs.as_ptr(), descs.len())
    })
}

// ---- plain allocations and copies ----

/// `cuMemAlloc` of `bytes` (at least 1) of device memory; the caller frees it.
pub(crate) fn mem_alloc(bytes: usize) -> Result<u64> {
    let mut ptr = 0;
    // SAFETY: `ptr` is a valid out-pointer; the driver checks for a current context.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
    Ok(ptr)
}

/// `cuMemFree`.
///
/// # Safety
/// `ptr` came from [`mem_alloc`] and is freed once; no kernel uses it any more.
pub(crate) unsafe fn mem_free(ptr: u64) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
}

/// `cuMemHostAlloc(DEVICEMAP)` of `bytes` (at least 1) of pinned host memory the device can
/// address; the caller frees it.
pub(crate) fn mem_host_alloc_mapped(bytes: usize) -> Result<*mut c_void> {
    let mut host: *mut c_void = ptr::null_mut();
    // SAFETY: `host` is a valid out-pointer; DEVICEMAP asks for a device mapping.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut host, bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP)
    })?;
    Ok(host)
}

/// `cuMemHostGetDevicePointer`: the device address of pinned host memory.
///
/// # Safety
/// `host` is a live allocation from [`mem_host_alloc_mapped`].
pub(crate) unsafe fn mem_host_get_device_pointer(host: *mut c_void) -> Result<u64> {
    let mut dev = 0;
    // SAFETY: `dev` is a valid out-pointer; `host` is live (the caller's contract).
    check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut dev, host, 0)
    })?;
    Ok(dev)
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `host` came from [`mem_host_alloc_mapped`] and is freed once; no kernel uses it any more.
pub(crate) unsafe fn mem_free_host(host: *mut c_void) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(host) })
}

/// `cuMemcpyHtoD` (synchronous).
///
/// # Safety
/// `dst` is device memory valid for `bytes` bytes of writes; `src` is valid for `bytes` bytes
/// of reads.
pub(crate) unsafe fn memcpy_htod(dst: u64, src: *const c_void, bytes: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(dst, src, bytes)
    })
}

/// `cuMemcpyDtoH` (synchronous).
///
/// # Safety
/// `src` is device memory valid for `bytes` bytes of reads; `dst` is valid for `bytes` bytes
/// of writes.
pub(crate) unsafe fn memcpy_dtoh(dst: *mut c_void, src: u64, bytes: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(dst, src, bytes)
    })
}

/// `cuMemcpyHtoDAsync` on `stream`.
///
/// # Safety
/// `dst` is device memory valid for `bytes` bytes of writes and `src` valid for `bytes` bytes
/// of reads until the stream has run the copy; `stream` is live.
pub(crate) unsafe fn memcpy_htod_async(
    dst: u64,
    src: *const c_void,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src, bytes, stream)
    })
}

/// `cuMemcpyDtoHAsync` on `stream`.
///
/// # Safety
/// `src` is device memory valid for `bytes` bytes of reads and `dst` valid for `bytes` bytes
/// of writes until the stream has run the copy; `stream` is live.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: u64,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst, src, bytes, stream)
    })
}

/// One write of a [`stream_write_values`] batch: `value` to `addr`, 8 bytes when `wide`
/// (`addr` 8-byte aligned), else its low 4 bytes (`addr` 4-byte aligned).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueWrite {
    pub addr: u64,
    pub value: u64,
    pub wide: bool,
}

/// Most writes of one [`stream_write_values`] batch (the driver takes fewer than 256).
pub(crate) const MAX_VALUE_WRITES: usize = 32;

/// `cuStreamBatchMemOp` of `writes` (at most [`MAX_VALUE_WRITES`]) on `stream`: stream memory
/// operations, carried out by the GPU's front end in order, each after a memory fence that
/// orders it after the writes before it (the driver's default for a write-value), without a
/// copy engine.
///
/// # Safety
/// Every address is device memory (or mapped host memory's device address) valid for the
/// write, aligned as [`ValueWrite`] says, until the stream has run the batch; `stream` is
/// live.
pub(crate) unsafe fn stream_write_values(
    stream: sys::CUstream,
    writes: &[ValueWrite],
) -> Result<()> {
    assert!(
        writes.len() <= MAX_VALUE_WRITES,
        "{} value writes",
        writes.len()
    );
    // SAFETY: the params are plain data; all zeroes is a valid (empty) value of the union.
    let mut ops: [sys::CUstreamBatchMemOpParams; MAX_VALUE_WRITES] = unsafe { std::mem::zeroed() };
    for (op, w) in ops.iter_mut().zip(writes) {
        // Plain-data fields of the union's write-value member (writes are safe).
        op.writeValue.operation = if w.wide {
            sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_64
        } else {
            sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32
        };
        op.writeValue.address = w.addr;
        if w.wide {
            op.writeValue.__bindgen_anon_1.value64 = w.value;
        } else {
            op.writeValue.__bindgen_anon_1.value = w.value as u32;
        }
    }
    // SAFETY: `writes.len()` initialised ops; the addresses are the caller's contract.
    check("cuStreamBatchMemOp", unsafe {
        sys::cuStreamBatchMemOp_v2(stream, writes.len() as u32, ops.as_mut_ptr(), 0)
    })
}

/// `cuStreamQuery`: `Ok(true)` when everything queued on `stream` has run.
///
/// # Safety
/// `stream` is live.
pub(crate) unsafe fn stream_query(stream: sys::CUstream) -> Result<bool> {
    // SAFETY: the caller's contract.
    let status = unsafe { sys::cuStreamQuery(stream) };
    if status == sys::CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuStreamQuery", status).map(|()| true)
}

/// `cuMemsetD8Async` on `stream`.
///
/// # Safety
/// `ptr` is device memory valid for `bytes` bytes of writes until the stream has run the
/// memset; `stream` is live.
pub(crate) unsafe fn memset_d8_async(
    ptr: u64,
    value: u8,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMemsetD8Async", unsafe {
        sys::cuMemsetD8Async(ptr, value, bytes, stream)
    })
}

// ---- streams ----

/// `cuStreamCreate(CU_STREAM_NON_BLOCKING)` in the current context; the caller destroys it.
pub(crate) fn stream_create_non_blocking() -> Result<sys::CUstream> {
    let mut raw = ptr::null_mut();
    // SAFETY: a valid out-pointer; the driver needs a current context, or says so.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    })?;
    Ok(raw)
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `stream` is live.
pub(crate) unsafe fn stream_synchronize(stream: sys::CUstream) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream)
    })
}

/// Waits for `stream` by spinning on `cuStreamQuery` (no yield or sleep in the driver: for
/// short copies whose latency matters).
///
/// # Safety
/// `stream` is live.
pub(crate) unsafe fn stream_spin(stream: sys::CUstream) -> Result<()> {
    loop {
        // SAFETY: the caller's contract.
        let status = unsafe { sys::cuStreamQuery(stream) };
        if status != sys::CUresult::CUDA_ERROR_NOT_READY {
            return check("cuStreamQuery", status);
        }
        std::hint::spin_loop();
    }
}

/// `cuStreamDestroy`. Work still queued completes first (the driver defers the release).
///
/// # Safety
/// `stream` came from [`stream_create_non_blocking`] and is destroyed once.
pub(crate) unsafe fn stream_destroy(stream: sys::CUstream) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuStreamDestroy", unsafe {
        sys::cuStreamDestroy_v2(stream)
    })
}

// ---- modules and launches ----

/// `cuModuleLoadData`, or `cuModuleLoadDataEx` with `CU_JIT_THREADS_PER_BLOCK` when
/// `max_threads` is given; the caller unloads the module.
pub(crate) fn module_load_data(image: &CStr, max_threads: Option<u32>) -> Result<sys::CUmodule> {
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
            let mut vals = [threads as usize as *mut c_void];
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
    Ok(raw)
}

/// `cuModuleUnload`.
///
/// # Safety
/// `module` came from [`module_load_data`], is unloaded once, and none of its functions is
/// used afterwards.
pub(crate) unsafe fn module_unload(module: sys::CUmodule) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
}

/// `cuModuleGetFunction`.
///
/// # Safety
/// `module` is a loaded module.
pub(crate) unsafe fn module_get_function(
    module: sys::CUmodule,
    name: &CStr,
) -> Result<sys::CUfunction> {
    let mut raw = ptr::null_mut();
    // SAFETY: the module is loaded (the caller's contract) and `name` is NUL-terminated.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut raw, module, name.as_ptr())
    })?;
    Ok(raw)
}

/// `cuFuncLoad`: puts the function's code on the device now.
///
/// # Safety
/// `f` is a function of a loaded module.
pub(crate) unsafe fn func_load(f: sys::CUfunction) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuFuncLoad", unsafe { sys::cuFuncLoad(f) })
}

/// `cuFuncIsLoaded`.
///
/// # Safety
/// `f` is a function of a loaded module.
pub(crate) unsafe fn func_is_loaded(f: sys::CUfunction) -> Result<bool> {
    let mut state = sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_UNLOADED;
    // SAFETY: `f` is live (the caller's contract); `state` is a valid out-pointer.
    check("cuFuncIsLoaded", unsafe {
        sys::cuFuncIsLoaded(&mut state, f)
    })?;
    Ok(state == sys::CUfunctionLoadingState::CU_FUNCTION_LOADING_STATE_LOADED)
}

/// `cuLaunchKernel` of `f` over `grid × block` on `stream`.
///
/// # Safety
/// `f` is a function of a loaded module; `args` holds one pointer per kernel parameter to a
/// value of exactly its type; every pointer the kernel dereferences is valid for its whole run.
pub(crate) unsafe fn launch_kernel(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem_bytes: u32,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            shared_mem_bytes,
            stream,
            args.as_mut_ptr(),
            ptr::null_mut(),
        )
    })
}

/// `cuLaunchKernelEx` of `f` with `config` (its attributes live across the call).
///
/// # Safety
/// As [`launch_kernel`]; `config.attrs` points to `config.numAttrs` valid attributes.
pub(crate) unsafe fn launch_kernel_ex(
    config: &sys::CUlaunchConfig,
    f: sys::CUfunction,
    args: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuLaunchKernelEx", unsafe {
        sys::cuLaunchKernelEx(config, f, args.as_mut_ptr(), ptr::null_mut())
    })
}

// ---- multicast (callers gate these behind SYMCOMM_NVLS=1) ----

/// `cuMulticastGetGranularity` (recommended).
pub(crate) fn multicast_get_granularity(prop: &sys::CUmulticastObjectProp) -> Result<usize> {
    let mut g = 0;
    // SAFETY: `prop` is initialised and `g` is a valid out-pointer.
    check("cuMulticastGetGranularity", unsafe {
        sys::cuMulticastGetGranularity(
            &mut g,
            prop,
            sys::CUmulticastGranularity_flags::CU_MULTICAST_GRANULARITY_RECOMMENDED,
        )
    })?;
    Ok(g)
}

/// `cuMulticastCreate`: a new multicast object handle (released with [`mem_release`]).
pub(crate) fn multicast_create(
    prop: &sys::CUmulticastObjectProp,
) -> Result<sys::CUmemGenericAllocationHandle> {
    let mut handle = 0;
    // SAFETY: `prop` is initialised; `handle` is a valid out-pointer.
    check("cuMulticastCreate", unsafe {
        sys::cuMulticastCreate(&mut handle, prop)
    })?;
    Ok(handle)
}

/// `cuMulticastAddDevice`.
///
/// # Safety
/// `mc` is a live multicast object handle.
pub(crate) unsafe fn multicast_add_device(
    mc: sys::CUmemGenericAllocationHandle,
    device: i32,
) -> Result<()> {
    // SAFETY: the caller's contract; the driver checks the device.
    check("cuMulticastAddDevice", unsafe {
        sys::cuMulticastAddDevice(mc, device)
    })
}

/// `cuMulticastBindMem` of all `size` bytes of `mem` at `mc_offset` of `mc`.
///
/// # Safety
/// Both handles are live; the range fits the object.
pub(crate) unsafe fn multicast_bind_mem(
    mc: sys::CUmemGenericAllocationHandle,
    mc_offset: usize,
    mem: sys::CUmemGenericAllocationHandle,
    size: usize,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMulticastBindMem", unsafe {
        sys::cuMulticastBindMem(mc, mc_offset, mem, 0, size, 0)
    })
}

/// `cuMulticastUnbind`.
///
/// # Safety
/// Exactly this range was bound by [`multicast_bind_mem`] for `device`, and is unbound once.
pub(crate) unsafe fn multicast_unbind(
    mc: sys::CUmemGenericAllocationHandle,
    device: i32,
    mc_offset: usize,
    size: usize,
) -> Result<()> {
    // SAFETY: the caller's contract.
    check("cuMulticastUnbind", unsafe {
        sys::cuMulticastUnbind(mc, device, mc_offset, size)
    })
}
