//! Unit tests of the VMM types: error mapping, handle properties, rounding; and the GPU
//! checks (run with `cargo test -p symcomm -- --ignored gpu_`).

use super::gpu::{HandleProperties, not_device_memory, not_vmm_memory};
use super::*;

fn cuda_error(call: &'static str, code: sys::CUresult) -> Error {
    Error::Cuda { call, code }
}

#[test]
fn non_vmm_pointers_get_a_clear_error_but_driver_failures_pass_through() {
    let miss = cuda_error(
        "cuMemRetainAllocationHandle",
        sys::CUresult::CUDA_ERROR_INVALID_VALUE,
    );
    let msg = not_vmm_memory(0x7f00_0000_1000, miss).to_string();
    assert!(
        msg.starts_with(
            "invalid argument: address 0x7f0000001000 is not memory from the CUDA VMM API"
        ),
        "{msg}"
    );
    assert!(msg.contains("not cudaMalloc"), "{msg}");
    assert!(
        msg.contains("(cuMemRetainAllocationHandle returned CUDA_ERROR_INVALID_VALUE)"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    let broken = cuda_error(
        "cuMemRetainAllocationHandle",
        sys::CUresult::CUDA_ERROR_NOT_INITIALIZED,
    );
    assert!(matches!(not_vmm_memory(1, broken), Error::Cuda { .. }));
    let miss = cuda_error("cuMemGetAddressRange", sys::CUresult::CUDA_ERROR_NOT_FOUND);
    assert!(
        not_device_memory(0x10, miss)
            .to_string()
            .contains("0x10 is not device memory")
    );
    let broken = cuda_error(
        "cuMemGetAddressRange",
        sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED,
    );
    assert!(matches!(not_device_memory(1, broken), Error::Cuda { .. }));
}

#[test]
fn handle_properties_decode_location_and_shareability() {
    let device = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32;
    let fd_bits = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
    let p = HandleProperties {
        location_type: device,
        location_id: 3,
        handle_types: fd_bits | 8,
    };
    assert_eq!(p.device().unwrap(), 3);
    assert_eq!(p.shareable(), Shareable::PosixFd);
    let p = HandleProperties {
        location_type: device,
        location_id: 0,
        handle_types: 8,
    };
    assert_eq!(p.shareable(), Shareable::No);
    let host = HandleProperties {
        location_type: 2,
        location_id: 0,
        handle_types: 0,
    };
    assert!(matches!(host.device(), Err(Error::Unsupported { .. })));
    let unknown = HandleProperties {
        location_type: 77,
        location_id: 0,
        handle_types: 0,
    };
    assert!(
        unknown
            .device()
            .unwrap_err()
            .to_string()
            .contains("location type 77")
    );
}

#[test]
fn sizes_round_up_to_the_granule() {
    assert_eq!(round_up(1, 2 << 20).unwrap(), 2 << 20);
    assert_eq!(round_up(2 << 20, 2 << 20).unwrap(), 2 << 20);
    assert_eq!(round_up((2 << 20) + 1, 2 << 20).unwrap(), 4 << 20);
    assert!(round_up(0, 4096).is_err());
    assert!(round_up(usize::MAX, 4096).is_err());
}

// --- GPU checks (run with `cargo test -p symcomm -- --ignored gpu_`) ---------------------

const GPU_CHILD_ENV: &str = "SYMCOMM_GPU_TEST_CHILD";

fn write_words(ptr: u64, words: &[u32]) {
    // SAFETY: the caller passes a mapped device range of at least `words.len()` u32s.
    unsafe { driver::memcpy_htod(ptr, words.as_ptr().cast(), std::mem::size_of_val(words)) }
        .unwrap();
}

fn read_words(ptr: u64, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    // SAFETY: the caller passes a mapped device range of at least `n` u32s.
    unsafe { driver::memcpy_dtoh(out.as_mut_ptr().cast(), ptr, n * 4) }.unwrap();
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_exported_memory_imports_maps_and_is_found_from_pointers() {
    use crate::cuda::{device, open_device};
    let _ctx = open_device(0).unwrap();
    let total = device::total_memory(0).unwrap();
    assert!(total > 1 << 30, "total memory {total}");
    device::require_symmetric_memory_support(0).unwrap();
    assert!(device::can_access_peer(0, 0).unwrap());
    let mem = PhysicalMem::new(0, 3 << 20, Shareable::PosixFd).unwrap();
    let va = VaRange::reserve(mem.size(), 0).unwrap();
    let map = Mapping::new(&va, 0, &mem, &[0]).unwrap();
    let words: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(2654435761)).collect();
    write_words(map.ptr(), &words);

    // Pointer → allocation, as window registration does it.
    let found = find_allocation(map.ptr() + 8192).unwrap();
    assert_eq!((found.base, found.size), (map.ptr(), mem.size()));
    assert_eq!(found.mem.device(), 0);
    assert_eq!(found.mem.shareable(), Shareable::PosixFd);
    let off = crate::symmem::layout::window_offset_in_alloc(
        map.ptr() + 8192,
        4096,
        found.base,
        found.size as u64,
    );
    assert_eq!(off.unwrap(), 8192);
    drop(found);

    // Export → import → second mapping of the same physical memory.
    let fd = mem.export_fd().unwrap();
    let imported = PhysicalMem::import_fd(std::os::fd::AsFd::as_fd(&fd), mem.size()).unwrap();
    drop(fd);
    assert_eq!(imported.device(), 0);
    let va2 = VaRange::reserve(imported.size(), 0).unwrap();
    let map2 = Mapping::new(&va2, 0, &imported, &[0]).unwrap();
    assert_eq!(read_words(map2.ptr(), words.len()), words);
    write_words(map2.ptr() + 4, &[0xdead_beef]);
    assert_eq!(read_words(map.ptr(), 2), [words[0], 0xdead_beef]);

    // Non-VMM memory and non-device addresses are errors, not crashes.
    let legacy = driver::mem_alloc(1 << 20).unwrap();
    let err = find_allocation(legacy + 4096).unwrap_err();
    println!("cuMemAlloc pointer: {err}");
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("not memory from the CUDA VMM API")),
        "{err}"
    );
    // SAFETY: freeing what cuMemAlloc returned, once.
    unsafe { driver::mem_free(legacy) }.unwrap();
    let err = find_allocation(0x1000).unwrap_err();
    println!("host address: {err}");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let local = PhysicalMem::new(0, 1, Shareable::No).unwrap();
    assert!(matches!(local.export_fd(), Err(Error::InvalidArgument(_))));
}

/// Not a test on its own: the importing process of
/// `gpu_memory_crosses_processes_through_the_fd_server`.
#[test]
#[ignore = "helper process of gpu_memory_crosses_processes_through_the_fd_server"]
fn gpu_child_importer() {
    let Ok(spec) = std::env::var(GPU_CHILD_ENV) else {
        return;
    };
    let v: Vec<u64> = spec.split(',').map(|x| x.parse().unwrap()).collect();
    let (id, size, dev) = (v[0], v[1] as usize, v[2] as i32);
    let _ctx = crate::cuda::open_device(dev as usize).unwrap();
    let fd = crate::ipc::fetch_fd(id, 1, 0, 1, std::time::Duration::from_secs(10)).unwrap();
    let mem = PhysicalMem::import_fd(std::os::fd::AsFd::as_fd(&fd), size).unwrap();
    drop(fd);
    let va = VaRange::reserve(mem.size(), 0).unwrap();
    let map = Mapping::new(&va, 0, &mem, &[dev]).unwrap();
    let got = read_words(map.ptr(), 1024);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &w)| w == 0x5eed_0000 + i as u32),
        "child read wrong data"
    );
    write_words(map.ptr() + 4096, &[0xc0ff_ee00; 16]);
    println!("SYMCOMM-GPU-CHILD ok device {dev}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_memory_crosses_processes_through_the_fd_server() {
    use std::process::{Command, Stdio};
    let n_dev = crate::cuda::device_count().unwrap();
    let child_dev = if n_dev > 1 { 1 } else { 0 };
    let _ctx = crate::cuda::open_device(0).unwrap();
    let mem = PhysicalMem::new(0, 2 << 20, Shareable::PosixFd).unwrap();
    let va = VaRange::reserve(mem.size(), 0).unwrap();
    let map = Mapping::new(&va, 0, &mem, &[0]).unwrap();
    let words: Vec<u32> = (0..1024u32).map(|i| 0x5eed_0000 + i).collect();
    write_words(map.ptr(), &words);
    let id = (std::process::id() as u64) << 32 | 0x6a;
    let server = crate::ipc::FdServer::bind(id, 0).unwrap();
    server.publish(1, mem.export_fd().unwrap()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cuda::vmm::tests::gpu_child_importer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(GPU_CHILD_ENV, format!("{id},{},{child_dev}", mem.size()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("SYMCOMM-GPU-CHILD ok"),
        "child failed: {stdout}"
    );
    // The child's write into the shared physical memory is visible here.
    assert_eq!(read_words(map.ptr() + 4096, 16), [0xc0ff_ee00; 16]);
    assert_eq!(read_words(map.ptr(), 1024), words);
}
