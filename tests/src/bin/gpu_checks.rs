//! The device API's runtime checks, end to end, with kernels built with `bounds-checks`
//! (`symcomm-checked-kernels`): an LSA peer index equal to the team size, and a barrier
//! session that ends without `finish`. A failed check traps the kernel, which loses the CUDA
//! context, so each case runs in a child process; the parent checks that the child's launch
//! failed and that its output carries the check's message (printed by the kernel on a GPU,
//! carried by the launch error on the emulator). Every rank first runs the case's control (a
//! peer inside the team, a finished session), which must pass; after a bootstrap barrier, so
//! that no rank's trap can cut another's control short, rank 0 alone breaks the contract (the
//! ranks share the GPU's context, which the trap takes down for all of them).
//!
//! ```text
//! gpu_checks                    both cases; one line each; exit 1 on a failure
//! gpu_checks --case peer|session   one case, as the child (2 ranks as threads)
//! ```
//!
//! The ranks share GPU 0 unless `SYMCOMM_DEVICE` says otherwise.

use std::process::{Command, ExitCode};

use symcomm::launch::{LaunchConfig, Module};
use symcomm::ranks::run_ranks;
use symcomm::{Communicator, DevComm, Device, Error, Requirements, Result, SymmetricMemory};
use symcomm_checked_kernels::{BarrierSession, LsaPeerAddress};
use symcomm_tests::checked_kernels as checked;

const RANKS: usize = 2;

/// The cases: name, and what the child's output must contain.
const CASES: [(&str, &str); 2] = [
    (
        "peer",
        "symcomm: LSA peer 2 is not in the window's LSA team of 2 ranks",
    ),
    (
        "session",
        "symcomm: LSA barrier session 0 ended without finish()",
    ),
];

/// One rank of case `case`: the control launch, then (rank 0) the one that must fail. `Ok`
/// with the failure's text when it failed as it should.
fn rank(comm: Communicator, case: &str) -> Result<String> {
    let breaks = comm.rank() == 0;
    let dev = Device::for_rank(&comm)?;
    let stream = dev.stream()?;
    let module = Module::load(checked::PTX)?;
    let lsa = comm.lsa_size() as i32;
    let bad = match case {
        "peer" => {
            let kernel = module.kernel::<LsaPeerAddress>()?;
            let mem = SymmetricMemory::alloc(&comm, 4096)?;
            let out = dev.alloc(8)?;
            let win = comm.register_window(&mem)?; // collective
            // Control: the last peer of the team; the kernel's address is the host's.
            let launch = |peer: i32| {
                // SAFETY: `win` is this rank's live window, `out` holds one u64; both outlive
                // the synchronisation that follows every call.
                unsafe {
                    kernel.launch(
                        LaunchConfig::linear(1, 32),
                        &stream,
                        (win.handle(), peer, out.as_mut_ptr()),
                    )
                }
                .and_then(|()| stream.synchronize())
            };
            launch(lsa - 1)?;
            let mut got = [0u64];
            stream.copy_to_host(&out, 0, &mut got)?;
            if Some(got[0]) != win.lsa_ptr(0, lsa as usize - 1) {
                return Err(Error::InvalidArgument(format!(
                    "the control launch computed {:#x} for peer {}, the host {:?}",
                    got[0],
                    lsa - 1,
                    win.lsa_ptr(0, lsa as usize - 1)
                )));
            }
            comm.bootstrap().barrier()?; // every control is done
            if !breaks {
                return Ok("control passed; rank 0 breaks the contract".into());
            }
            launch(lsa) // peer == the team's size
        }
        "session" => {
            let kernel = module.kernel::<BarrierSession>()?;
            let devcomm = DevComm::create(&comm, Requirements::new().lsa_barriers(1))?;
            let launch = |finish: u32| {
                // SAFETY: the communicator has one barrier for the one block; every rank
                // launches the same shape.
                unsafe {
                    kernel.launch(
                        LaunchConfig::linear(1, 32),
                        &stream,
                        (devcomm.raw(), finish),
                    )
                }
                .and_then(|()| stream.synchronize())
            };
            launch(1)?; // control: finished
            comm.bootstrap().barrier()?; // every control is done
            if !breaks {
                return Ok("control passed; rank 0 breaks the contract".into());
            }
            launch(0)
        }
        _ => return Err(Error::InvalidArgument(format!("unknown case {case}"))),
    };
    match bad {
        Ok(()) => Err(Error::InvalidArgument(format!(
            "case {case}: the launch that breaks the contract succeeded"
        ))),
        Err(e) => Ok(format!("launch failed as it should: {e}")),
    }
}

/// The child: runs `case` on `RANKS` ranks as threads; exit 0 when every rank's launch failed.
fn child(case: &str) -> ExitCode {
    let results = run_ranks(Some(RANKS), |comm| rank(comm, case));
    let mut ok = true;
    for (r, res) in results {
        match res {
            Ok(line) => println!("rank {r}: {line}"),
            Err(e) => {
                ok = false;
                println!("rank {r}: FAILED: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, case] = args.as_slice()
        && flag == "--case"
    {
        return child(case);
    }
    if !args.is_empty() {
        eprintln!("usage: gpu_checks [--case peer|session]");
        return ExitCode::from(2);
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("gpu_checks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut all = true;
    for (case, message) in CASES {
        let mut cmd = Command::new(&exe);
        cmd.args(["--case", case]);
        if std::env::var_os("SYMCOMM_DEVICE").is_none() {
            cmd.env("SYMCOMM_DEVICE", "0");
        }
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) => {
                println!("{case}: FAILED to start the child: {e}");
                all = false;
                continue;
            }
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let shown = text.lines().find(|l| l.contains(message));
        match (out.status.success(), shown) {
            (true, Some(line)) => println!("{case}: PASS: {}", line.trim()),
            _ => {
                all = false;
                println!(
                    "{case}: FAILED (child {}, message {message:?} not seen):",
                    out.status
                );
                for line in text.lines().take(40) {
                    println!("  | {line}");
                }
            }
        }
    }
    if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
