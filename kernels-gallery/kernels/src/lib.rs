//! Device kernels of the gallery collectives (written against `symcomm-device` only).

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

// The collectives arrive with the gallery; until then this keeps the device crate (and, on
// the host, its std-backed panic handler) linked.
use symcomm_device as _;
