//! `gpu_interop`: symcomm on a program's own cudarc objects, on one GPU (the GPU suite's
//! `interop_cudarc_1gpu` check). Two ranks as threads share GPU 0; each rank
//! - creates its own cudarc context handle and stream, and hands them to symcomm
//!   (`Device::from_cudarc`, `Stream::from_cudarc`);
//! - writes random values into a registered window and reads them back with cudarc's
//!   `clone_dtoh` through the window's `DevicePtr` view, on its cudarc stream;
//! - runs a gallery all-reduce (f32 sum) on its cudarc stream, into a second window poisoned
//!   with NaN, and reads the result through the view again: every element must equal the sum
//!   of the two ranks' inputs (two terms: exact in either order).
//!
//! Usage: `SYMCOMM_DEVICE=0 gpu_interop [--n ELEMENTS]`. Exits 0 when every element matched.

use std::process::ExitCode;

use cudarc::driver::CudaContext;
use symcomm::cuda::CudarcView;
use symcomm::ranks::{all_passed, run_ranks};
use symcomm::{Communicator, Device, Error, Result, Stream, SymmetricMemory};
use symcomm_gallery::{Buf, Collectives, DataType, RedOp};

fn input(rank: usize, n: usize) -> Vec<f32> {
    let mut s = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            ((s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32) * 200.0
                - 100.0
        })
        .collect()
}

fn cu(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::Cuda { call, code: e.0 }
}

fn rank(comm: Communicator, n: usize) -> Result<String> {
    // The program's own cudarc objects, made before any collective call.
    let ctx = CudaContext::new(comm.device()).map_err(cu("cuDevicePrimaryCtxRetain"))?;
    let user = ctx.new_stream().map_err(cu("cuStreamCreate"))?;
    let _dev = Device::from_cudarc(ctx.clone())?;
    let stream = Stream::from_cudarc(user.clone())?;
    let gallery = Collectives::from_env(&comm)?; // collective
    let (src_mem, dst_mem) = (
        SymmetricMemory::alloc(&comm, n * 4)?,
        SymmetricMemory::alloc(&comm, n * 4)?,
    );
    let mine = input(comm.rank(), n);
    stream.copy_to_device(&src_mem, 0, &mine)?;
    stream.fill_bytes(&dst_mem, 0xff)?; // NaN until the all-reduce writes it
    stream.synchronize()?;
    let src = comm.register_window(&src_mem)?; // collective
    let dst = comm.register_window(&dst_mem)?; // collective

    // cudarc reads the window through its DevicePtr view, on the user's stream.
    let view = CudarcView::<f32>::new(&src, &user)?;
    let read: Vec<f32> = user.clone_dtoh(&view).map_err(cu("cuMemcpyDtoHAsync"))?;
    if read.len() < n || read[..n] != mine[..] {
        return Err(Error::InvalidArgument(
            "cudarc read different values from the window".into(),
        ));
    }

    // A gallery all-reduce queued on the user's CudaStream.
    let algo = gallery.all_reduce(
        Buf::whole(&src),
        Buf::whole(&dst),
        n,
        DataType::F32,
        RedOp::Sum,
        &*user,
    )?;
    user.synchronize().map_err(cu("cuStreamSynchronize"))?;
    gallery.check_status()?;
    let view = CudarcView::<f32>::new(&dst, &user)?;
    let got: Vec<f32> = user.clone_dtoh(&view).map_err(cu("cuMemcpyDtoHAsync"))?;
    let inputs: Vec<Vec<f32>> = (0..comm.size()).map(|r| input(r, n)).collect();
    let wrong = (0..n)
        .filter(|&i| {
            let want = inputs.iter().fold(0.0f32, |acc, x| acc + x[i]);
            got[i].to_bits() != want.to_bits()
        })
        .count();
    comm.bootstrap().barrier()?; // no rank deregisters while a peer still reads
    if wrong != 0 {
        return Err(Error::InvalidArgument(format!(
            "{wrong} of {n} elements of the all-reduce ({algo:?}) wrong"
        )));
    }
    Ok(format!(
        "gpu_interop: rank {}: window read by cudarc, all-reduce ({algo:?}) on a cudarc stream: \
         {n} elements checked",
        comm.rank()
    ))
}

fn main() -> ExitCode {
    symcomm::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = match args.as_slice() {
        [] => 1 << 20,
        [flag, v] if flag == "--n" => match v.parse::<usize>() {
            Ok(n) if n > 0 && n % 4 == 0 => n,
            _ => {
                eprintln!("gpu_interop: --n needs a positive multiple of 4");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: SYMCOMM_DEVICE=0 gpu_interop [--n ELEMENTS]");
            return ExitCode::from(2);
        }
    };
    let ok = all_passed(
        run_ranks(Some(2), |comm| rank(comm, n)),
        |_, line| {
            println!("{line}");
            true
        },
        |rank, e| eprintln!("gpu_interop: rank {rank} FAILED: {e}"),
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
