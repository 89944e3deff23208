//! The emulated device's memory capacity set by `SYMCOMM_EMU_DEVICE_MEMORY`: the device
//! reports it, allocations beyond it are refused, and freeing gives it back. One test only: the
//! variable is set for this whole process before the first allocation, and the capacity is
//! shared by every allocation of the process.

use symcomm::backend::{self, Backend};
use symcomm::cuda::{PhysicalMem, Shareable, VmmBuffer};

const MIB: usize = 1 << 20;

#[test]
fn a_configured_capacity_is_reported_enforced_and_given_back_on_free() {
    // SAFETY: the only test of this binary, and it sets the variable before anything in the
    // process reads the environment from another thread.
    unsafe { std::env::set_var("SYMCOMM_EMU_DEVICE_MEMORY", "64M") };
    backend::use_backend(Backend::Emulated).unwrap();
    assert_eq!(Backend::Emulated.total_memory(0).unwrap(), 64 << 20);

    let first = VmmBuffer::new(0, 48 * MIB).unwrap();
    let err = VmmBuffer::new(0, 32 * MIB).map(|b| b.len()).unwrap_err();
    let msg = err.to_string();
    for fact in [
        "out of device memory",
        "33554432 bytes",
        "48 MiB of 64 MiB in use",
    ] {
        assert!(msg.contains(fact), "{fact:?} missing from: {msg}");
    }
    // Exactly the rest fits.
    let rest = PhysicalMem::new(0, 16 * MIB, Shareable::PosixFd).unwrap();
    assert!(PhysicalMem::new(0, 1, Shareable::No).is_err());
    drop(rest);
    drop(first);
    // Freed memory is available again, all of it.
    let again = VmmBuffer::new(0, 64 * MIB).unwrap();
    assert_eq!(again.len(), 64 * MIB);
    drop(again);
    // An imported handle is the exporter's memory: it does not count on the importer.
    let mine = PhysicalMem::new(0, 64 * MIB, Shareable::PosixFd).unwrap();
    let fd = mine.export_fd().unwrap();
    use std::os::fd::AsFd;
    let imported = PhysicalMem::import_fd(fd.as_fd(), 64 * MIB).unwrap();
    assert_eq!(imported.size(), 64 * MIB);
    drop((imported, mine));
}
