//! `vector_add`: the first kernel. Adds two random vectors on one GPU, in memory obtained
//! through the CUDA virtual-memory API, and checks every element.
//!
//! Usage: `vector_add [--device N] [--n ELEMENTS]` (device defaults to `$LOCAL_RANK`, else 0).
//!
//! Without a CUDA driver (or with `SYMCOMM_BACKEND=emu`) it says so in one line and runs the
//! same code on the CPU emulator, over emulated device memory, checking every element.

use std::process::ExitCode;

use symcomm::launch::{LaunchConfig, Module};
use symcomm::{Device, Error, Result};
use symcomm_example_kernels::VectorAdd;
use symcomm_examples::kernels;

struct Args {
    device: usize,
    n: usize,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        device: std::env::var("LOCAL_RANK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        n: 1 << 24,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> std::result::Result<usize, String> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name}: not a number: {v}"))
        };
        match flag.as_str() {
            "--device" => args.device = value("--device")?,
            "--n" => args.n = value("--n")?,
            "-h" | "--help" => {
                return Err("usage: vector_add [--device N] [--n ELEMENTS]".into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.n == 0 {
        return Err("--n must be at least 1".into());
    }
    Ok(args)
}

/// A small deterministic generator (xorshift64*) for test inputs.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        bits as f32 / (1u64 << 24) as f32 * 200.0 - 100.0
    }
}

// ANCHOR: run
/// Runs the example; `Ok(wrong)` is the number of elements that came back wrong.
fn run(args: &Args) -> Result<usize> {
    let dev = Device::open(args.device)?; // the GPU's context (or the emulator's device)
    let stream = dev.stream()?;
    let bytes = args.n * std::mem::size_of::<f32>();
    let (a, b, c) = (dev.alloc(bytes)?, dev.alloc(bytes)?, dev.alloc(bytes)?);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (args.device as u64 + 1));
    let ha: Vec<f32> = (0..args.n).map(|_| rng.next_f32()).collect();
    let hb: Vec<f32> = (0..args.n).map(|_| rng.next_f32()).collect();
    stream.copy_to_device(&a, 0, &ha)?;
    stream.copy_to_device(&b, 0, &hb)?;
    stream.fill_bytes(&c, 0xff)?; // poison: every float is NaN until written

    let module = Module::load(kernels::PTX)?;
    // Typed by the kernel's signature: `vector_add(*const f32, *const f32, *mut f32, u64)`.
    let f = module.kernel::<VectorAdd>()?;
    let launch = LaunchConfig::linear(528, 256);
    let params = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), args.n as u64);
    // SAFETY: the three buffers hold n f32 each on this device and outlive the copy below,
    // which waits for the kernel (same stream).
    unsafe { f.launch(launch, &stream, params)? };

    let mut hc = vec![0f32; args.n];
    stream.copy_to_host(&c, 0, &mut hc)?;
    Ok(hc
        .iter()
        .zip(ha.iter().zip(&hb))
        .filter(|&(&got, (&x, &y))| got.to_bits() != (x + y).to_bits())
        .count())
}
// ANCHOR_END: run

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("vector_add: {msg}");
            return ExitCode::from(2);
        }
    };
    symcomm::init_logging(); // SYMCOMM_LOG
    let result = match symcomm::backend::emulator_notice("vector_add") {
        Ok(line) => {
            // The same code runs on the emulator: it only says so first.
            if let Some(line) = line {
                println!("{line}");
            }
            run(&args)
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(0) => {
            println!(
                "vector_add: device {} n={} ok (every element checked)",
                args.device, args.n
            );
            ExitCode::SUCCESS
        }
        Ok(wrong) => {
            eprintln!(
                "vector_add: FAILED on device {}: {wrong} of {} elements wrong",
                args.device, args.n
            );
            ExitCode::FAILURE
        }
        Err(e @ Error::NoDriver(_)) => {
            println!("vector_add: skipped: {e}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vector_add: FAILED on device {}: {e}", args.device);
            ExitCode::FAILURE
        }
    }
}
