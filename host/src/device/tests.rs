//! Tests of [`Device`] and the [`Stream`] calls it hands out: copies (bounds included), fills,
//! events and graphs on the emulator, windows and allocations as [`DeviceMemory`]; and the same
//! calls on a GPU (`--ignored gpu_`), with cudarc interop.

use super::*;
use crate::SymmetricMemory;
use crate::backend::use_backend;
use crate::cuda::{CudarcView, DeviceMemory};
use crate::ranks::{all_ok, run_emulated};

fn words(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i ^ seed).wrapping_mul(0x9e37_79b1).rotate_left(7) ^ seed)
        .collect()
}

/// Copies at an offset and back, a fill, and the bounds of both directions.
fn copies_and_fills(dev: &Device) {
    let stream = dev.stream().unwrap();
    let buf = dev.alloc(4096).unwrap();
    stream.fill_bytes(&buf, 0x5a).unwrap();
    let data = words(17, 1000);
    stream.copy_to_device(&buf, 3, &data).unwrap();
    let mut all = vec![0u32; 1024];
    stream.copy_to_host(&buf, 0, &mut all).unwrap();
    assert_eq!(&all[..3], &[0x5a5a_5a5a; 3]);
    assert_eq!(&all[3..1003], &data[..]);
    assert_eq!(&all[1003..], &[0x5a5a_5a5a; 21]);
    let mut back = vec![0u32; 1000];
    stream.copy_to_host(&buf, 3, &mut back).unwrap();
    assert_eq!(back, data);
    // 1022 + 3 words are 4100 bytes: one word too many, nothing copied.
    let err = stream
        .copy_to_device(&buf, 1022, &[1u32, 2, 3])
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("do not fit in 4096 bytes"), "{msg}");
    assert!(stream.copy_to_host(&buf, usize::MAX, &mut back).is_err());
    stream.copy_to_host(&buf, 1021, &mut all[..3]).unwrap();
    assert_eq!(&all[..3], &[0x5a5a_5a5a; 3], "a refused copy wrote");
}

#[test]
fn emu_device_streams_copy_fill_and_check_bounds() {
    use_backend(Backend::Emulated).unwrap();
    let dev = Device::open(0).unwrap();
    assert!(dev.is_emulated() && dev.cudarc_context().is_none());
    copies_and_fills(&dev);
    let stream = dev.stream().unwrap();
    assert!(stream.as_cudarc().is_none());
    let (a, b) = (stream.record().unwrap(), stream.record().unwrap());
    assert!(a.elapsed_ms(&b).unwrap() >= 0.0);
}

#[test]
fn emu_graphs_replay_their_work_at_each_launch_not_at_capture() {
    use_backend(Backend::Emulated).unwrap();
    let dev = Device::open(0).unwrap();
    let stream = dev.stream().unwrap();
    let buf = dev.alloc(64).unwrap();
    let runs = std::cell::Cell::new(0u8);
    let graph = stream
        .capture(|s| {
            runs.set(runs.get() + 1);
            s.fill_bytes(&buf, runs.get())
        })
        .unwrap();
    assert_eq!(runs.get(), 0, "captured work ran at capture");
    for n in 1..=2u8 {
        graph.launch().unwrap();
        let mut got = [0u8; 64];
        stream.copy_to_host(&buf, 0, &mut got).unwrap();
        assert_eq!(got, [n; 64]);
    }
    let failing = stream
        .capture(|_| Err(Error::InvalidArgument("the work failed".into())))
        .unwrap();
    assert!(
        failing
            .launch()
            .unwrap_err()
            .to_string()
            .contains("the work failed")
    );
}

#[test]
fn emu_windows_and_symmetric_memory_are_device_memory() {
    let results = run_emulated(2, |comm| {
        let dev = Device::for_rank(&comm)?;
        let stream = dev.stream()?;
        let mem = SymmetricMemory::alloc(&comm, 1 << 16)?;
        let win = comm.register_window(&mem)?;
        assert_ne!(win.device_ptr(), win.handle().addr()); // data, not the descriptor
        let data = words(comm.rank() as u32 + 1, 1 << 14);
        stream.copy_to_device(&win, 0, &data)?;
        let mut got = vec![0u32; 1 << 14];
        stream.copy_to_host(&mem, 0, &mut got)?;
        assert_eq!(got, data); // the window's copy is the allocation's memory
        // The window stays usable as memory after the allocation's own mapping is gone.
        drop(mem);
        let mut again = vec![0u32; 1 << 14];
        stream.copy_to_host(&win, 0, &mut again)?;
        assert_eq!(again, data);
        comm.bootstrap().barrier()?;
        Ok(())
    });
    all_ok(results).unwrap();
}

/// Four bytes into a buffer: memory misaligned for `u64`.
struct Misaligned(u64);

// SAFETY: 8 bytes at 4 bytes into a live buffer of 64 KiB (the test keeps the buffer alive).
unsafe impl DeviceMemory for Misaligned {
    fn device_ptr(&self) -> u64 {
        self.0 + 4
    }
    fn byte_len(&self) -> usize {
        8
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_device_streams_copy_fill_time_and_capture() {
    use_backend(Backend::Gpu).unwrap();
    let dev = Device::open(0).unwrap();
    assert!(!dev.is_emulated());
    copies_and_fills(&dev);
    let stream = dev.stream().unwrap();
    assert!(stream.as_cudarc().is_some());
    let buf = dev.alloc(1 << 20).unwrap();
    let start = stream.record().unwrap();
    let graph = stream.capture(|s| s.fill_bytes(&buf, 0xc3)).unwrap();
    let end = stream.record().unwrap();
    end.synchronize().unwrap();
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
    let mut got = vec![0u8; 1 << 20];
    stream.copy_to_host(&buf, 0, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b != 0xc3),
        "captured work ran at capture"
    );
    graph.launch().unwrap();
    stream.copy_to_host(&buf, 0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0xc3), "the graph did not fill");
    drop(graph);
    // A capture whose work fails, or panics, is ended: the stream works afterwards.
    let err = stream
        .capture(|s| {
            s.fill_bytes(&buf, 1)?;
            Err(Error::InvalidArgument("the work failed".into()))
        })
        .unwrap_err();
    assert!(err.to_string().contains("the work failed"), "{err}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = stream.capture(|_| panic!("work panicked"));
    }));
    assert!(panicked.is_err());
    stream.fill_bytes(&buf, 0x3c).unwrap();
    stream.copy_to_host(&buf, 0, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == 0x3c),
        "the stream is unusable after a failed capture"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_cudarc_streams_and_views_share_symcomm_memory() {
    use_backend(Backend::Gpu).unwrap();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap(); // the user's context
    let user = ctx.new_stream().unwrap(); // and stream
    let dev = Device::from_cudarc(ctx.clone()).unwrap();
    let buf = dev.alloc(1 << 16).unwrap();
    let data = words(99, 1 << 14);
    let stream = Stream::from_cudarc(user.clone()).unwrap();
    stream.copy_to_device(&buf, 0, &data).unwrap();
    // cudarc reads symcomm memory through the DevicePtr view, on its own stream.
    let view = CudarcView::<u32>::new(&buf, &user).unwrap();
    let got: Vec<u32> = user.clone_dtoh(&view).unwrap();
    assert_eq!(got, data);
    // And writes it through DevicePtrMut.
    let mut view = CudarcView::<u32>::new(&buf, &user).unwrap();
    user.memset_zeros(&mut view).unwrap();
    let mut back = vec![1u32; 1 << 14];
    stream.copy_to_host(&buf, 0, &mut back).unwrap();
    assert!(back.iter().all(|&w| w == 0));
    let misaligned = Misaligned(buf.device_ptr());
    assert!(CudarcView::<u64>::new(&misaligned, &user).is_err());
    assert!(CudarcView::<u32>::new(&misaligned, &user).is_ok());
}
