//! The shape matrix (`symcomm_tests::shapes`) on one GPU: 2 and then 4 ranks as threads of
//! this process sharing GPU 0 (`SYMCOMM_DEVICE`, set to 0 when unset). Every shape is checked
//! element by element with guard bytes around its output. One line per rank count; exit 1 on
//! a failure.

use std::process::ExitCode;
use std::time::Instant;

use symcomm_tests::shapes::{full_matrix, run_matrix};

fn main() -> ExitCode {
    if std::env::var_os("SYMCOMM_DEVICE").is_none() {
        // SAFETY: set before any other thread of this process exists.
        unsafe { std::env::set_var("SYMCOMM_DEVICE", "0") };
    }
    let shapes = full_matrix();
    let mut ok = true;
    for n in [2, 4] {
        let t0 = Instant::now();
        match run_matrix(n, &shapes, false) {
            Ok(t) => println!(
                "gpu_shapes: {n} ranks on one GPU: {} shapes, {} ran (every element and guard \
                 checked), in {:.1} s",
                shapes.len(),
                t.ran,
                t0.elapsed().as_secs_f64()
            ),
            Err(e) => {
                ok = false;
                println!("gpu_shapes: FAILED: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
