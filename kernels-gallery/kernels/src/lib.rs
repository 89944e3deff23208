//! Device kernels of the gallery collectives (written against `symcomm-device` only).

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]
