//! `gpu_device`: runs the device-API test kernels on ONE GPU and checks every result.
//!
//! Usage: `gpu_device [--device N]` (device defaults to `$LOCAL_RANK`, else 0).
//!
//! Each check poisons its outputs first (0xFF bytes), fills inputs from a fixed-seed generator,
//! launches, synchronises and compares every element with a host reference
//! ([`symcomm_tests::reference`], shared with the CPU emulator tests; mostly the same
//! `symcomm-device` functions running on the CPU). It prints one line per check and a final
//! `N passed, M failed` line; the exit status is non-zero when any check failed. Without a CUDA
//! driver it prints `gpu_device: skipped: ...` and exits 0.
//!
//! Safety rules of the GPU test node: the multimem kernels are only **loaded** (JIT-compiled
//! with the module) and looked up, never launched, and nothing here creates a multicast object.
//! Every spin-wait in the kernels is timed, so no launch can hang.
//!
//! This file holds the program: its arguments, the module load check, and the list of checks
//! in the order they run. The checks live in one module per device-crate module, as the
//! kernels do in `tests/kernels/src/` (whose modules export the kernels' output layouts); they
//! all run on the [`harness`].

mod arch;
mod barrier;
mod cluster;
mod coop;
mod harness;
mod ll;
mod mem;
mod reduce;
mod team;
mod util;
mod window;

use std::process::ExitCode;

use symcomm::launch::Module;
use symcomm::{Error, Result, cuda};
use symcomm_tests::kernels;
use symcomm_tests::reference::Rng;

use harness::{Ctx, Verdict, ensure};

/// Runs before any launch: every kernel must already be on the device, so that no first
/// launch waits for the kernels running in the context (under lazy loading, the driver's
/// default, a kernel would be loaded only when first used; the suite runs this with
/// `CUDA_MODULE_LOADING=LAZY`).
fn check_module_load(ctx: &Ctx) -> Result<Verdict> {
    let mut unloaded = Vec::new();
    for name in kernels::ENTRY_POINTS {
        if !ctx.module.function(name)?.is_loaded()? {
            unloaded.push(*name);
        }
    }
    let lazy = std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "default".into());
    Ok(ensure(unloaded.is_empty(), || {
        format!("not loaded before their first launch: {unloaded:?}")
    })
    .map(|()| {
        format!(
            "{} kernels JIT-loaded, found and on the device before any launch \
             (CUDA_MODULE_LOADING={lazy}), multimem ones included (never launched)",
            kernels::ENTRY_POINTS.len()
        )
    }))
}

/// Runs before anything else holds the device: a `Device` opened, dropped (the process's last
/// handle) and opened again still loads a module. (Releasing the primary context with the
/// last handle left the next module load with `CUDA_ERROR_CONTEXT_IS_DESTROYED`.)
fn check_reopen(device: usize) -> Result<Verdict> {
    drop(symcomm::Device::open(device)?);
    let again = symcomm::Device::open(device)?;
    let loaded = Module::load(kernels::PTX).map(|m| m.function(kernels::ENTRY_POINTS[0]).is_ok());
    drop(again);
    Ok(match loaded {
        Ok(true) => Ok("a device opened, dropped and opened again loads a module".into()),
        Ok(false) => Err("the module loaded after reopening has no kernels".into()),
        Err(e) => Err(format!("module load after reopening the device: {e}")),
    })
}

struct Args {
    device: usize,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        device: std::env::var("LOCAL_RANK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--device" => {
                let v = it.next().ok_or("--device needs a value")?;
                args.device = v
                    .parse()
                    .map_err(|_| format!("--device: not a number: {v}"))?;
            }
            "-h" | "--help" => return Err("usage: gpu_device [--device N]".into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    symcomm::init_logging(); // SYMCOMM_LOG
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("gpu_device: {msg}");
            return ExitCode::from(2);
        }
    };
    match cuda::init_driver() {
        Ok(()) => {}
        Err(e @ Error::NoDriver(_)) => {
            println!("gpu_device: skipped: {e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpu_device: FAILED: {e}");
            return ExitCode::FAILURE;
        }
    }
    let reopen = check_reopen(args.device);
    let _ctx = match cuda::open_device(args.device) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu_device: FAILED: device {}: {e}", args.device);
            return ExitCode::FAILURE;
        }
    };
    let module = match Module::load(kernels::PTX) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("gpu_device: FAILED: loading the test kernels: {e}");
            println!("gpu_device: 0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let ctx = Ctx {
        dev: args.device as i32,
        module,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut passed, mut failed) = (0, 0);
    let mut report = |name: &str, r: Result<Verdict>| match r {
        Ok(Ok(detail)) => {
            passed += 1;
            println!("ok    {name:<18} {detail}");
        }
        Ok(Err(detail)) => {
            failed += 1;
            println!("FAIL  {name:<18} {detail}");
        }
        Err(e) => {
            failed += 1;
            println!("FAIL  {name:<18} {e}");
        }
    };
    println!(
        "gpu_device: device {}, {} test kernels",
        args.device,
        kernels::ENTRY_POINTS.len()
    );
    report("device_reopen", reopen);
    report("module_load", check_module_load(&ctx));
    report("geometry", arch::check_geometry(&ctx));
    report("dependent_launch", arch::check_dependent_launch(&ctx));
    report("synchronize_asleep", arch::check_synchronize_asleep(&ctx));
    report("smem_static", arch::check_smem_static(&ctx, &mut rng));
    report(
        "cluster_exchange",
        cluster::check_cluster_exchange(&ctx, &mut rng),
    );
    report("smem_dynamic", arch::check_smem_dynamic(&ctx, &mut rng));
    report("warp_ops", arch::check_warp_ops(&ctx, &mut rng));
    report("block_votes", arch::check_block_votes(&ctx, &mut rng));
    report("timers", arch::check_timers(&ctx));
    report("coop", coop::check_coop(&ctx));
    report("warp_any", coop::check_warp_any(&ctx));
    report("block_named_barrier", arch::check_block_named_barrier(&ctx));
    report("atomic_add", mem::check_atomic_add(&ctx));
    report("red_add", mem::check_red_add(&ctx));
    report("atomic_cas", mem::check_atomic_cas(&ctx));
    report("atomic_exch", mem::check_atomic_exch(&ctx));
    report("fences_message", mem::check_message_pass(&ctx));
    report("vectors", mem::check_vectors(&ctx, &mut rng));
    report("load_const", mem::check_load_const(&ctx, &mut rng));
    report("store_low_if", mem::check_store_low_if(&ctx, &mut rng));
    report("div_fast", util::check_div(&ctx, &mut rng));
    report("team_math", team::check_team(&ctx));
    report("window_symptr", window::check_window(&ctx));
    report("reduce_packs", reduce::check_reduce(&ctx, &mut rng));
    report("ll_roundtrip", ll::check_ll(&ctx, &mut rng));
    report("barrier_team1", barrier::check_barrier_team1(&ctx));
    report("barrier_pair", barrier::check_barrier_pair(&ctx));
    report("barrier_timeout", barrier::check_barrier_timeout(&ctx));
    report("barrier_abort", barrier::check_barrier_abort(&ctx));
    println!("gpu_device: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use symcomm_device::comm::{DevComm, LsaBarrierHandle};
    use symcomm_device::ptr::SymPtr;
    use symcomm_device::window::WindowHandle;
    use symcomm_tests::kernels;

    #[test]
    fn barrier_buffers_and_by_value_parameters_have_the_sizes_the_launches_assume() {
        assert_eq!(symcomm_device::util::idiv_rcp32(1), 0);
        assert_eq!(LsaBarrierHandle::buffer_bytes(4, 1) / 4, 16);
        // Every launch is typed by the kernel's signature, and on a GPU `Module::kernel` checks
        // those sizes against the PTX declaration: DevComm and SymPtr travel by value with their
        // Rust sizes, a WindowHandle as a plain u64 (not a pointer).
        assert_eq!(size_of::<DevComm>(), 168);
        assert_eq!(size_of::<SymPtr<f32>>(), 16);
        assert_eq!(size_of::<WindowHandle>(), 8);
        for decl in [
            ".param .u64 window_math_param_0,",
            ".param .align 8 .b8 window_math_param_1[168],",
            ".param .align 8 .b8 window_math_param_2[16],",
            ".param .u64 .ptr .align 1 window_math_param_3\n)",
            ".param .align 8 .b8 barrier_pair_param_0[168],",
            ".param .u64 .ptr .align 1 barrier_pair_param_1,",
            ".param .u32 barrier_pair_param_2,",
            ".param .u64 barrier_pair_param_3,",
            ".param .u64 barrier_pair_param_4,",
            ".param .u32 barrier_pair_param_5\n)",
        ] {
            assert!(kernels::PTX.contains(decl), "{decl}");
        }
    }
}
