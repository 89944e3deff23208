//! Check of the `window`/`ptr` kernel (`tests/kernels/src/window.rs`): window and `SymPtr`
//! address arithmetic on the GPU equals the host's and a flat-VA model, and writes through
//! `SymPtr::local` land in the window's local copy.

use symcomm::Result;
use symcomm::launch::LaunchConfig;
use symcomm_device::comm::{DevComm, ResourceWindow};
use symcomm_device::ptr::SymPtr;
use symcomm_device::window::{Window, WindowHandle, add4g};
use symcomm_test_kernels as k;
use symcomm_tests::reference::{self as refs, compare};

use crate::harness::{Ctx, Verdict};

pub fn check_window(ctx: &Ctx) -> Result<Verdict> {
    let threads = 256usize;
    let target = ctx.poisoned::<f32>(64 + threads)?;
    let stride4g = 2u32;
    let lsa_rank = 1;
    // Byte 0 of the window in LSA rank 0's slot, so that our own copy is `target`.
    let base = add4g(
        target.device_ptr(),
        (lsa_rank as u32 * stride4g).wrapping_neg(),
    );
    let w = Window {
        win_host: 0x1234,
        lsa_flat_base: base,
        lsa_rank,
        world_rank: 5,
        stride4g,
        mc_offset4k: 9,
        ..Window::default()
    };
    let wb = ctx.upload(&[w])?;
    let mut comm = DevComm::new(5, 8, lsa_rank, 4);
    comm.lsa_multimem.mc_base = 0x7000_0000_0000; // an address only: never dereferenced
    comm.resource = ResourceWindow {
        lsa_flat_base: 0x5000_0000_0000,
        stride4g: 3,
        mc_offset4k: 4,
    };
    comm.resource_window = wb.device_ptr();
    // The uploaded descriptor, as a kernel takes a window.
    let win = WindowHandle::from_addr(wb.device_ptr());
    let sym: SymPtr<f32> = win.sym(64);
    let out = ctx.poisoned::<u64>(k::WINDOW_MATH_WORDS)?;
    ctx.run::<k::WindowMath>(
        LaunchConfig::linear(1, threads as u32),
        (win, comm, sym, out.as_mut_ptr()),
    )?;
    let got: Vec<u64> = ctx.download(&out, k::WINDOW_MATH_WORDS)?;
    // The same arithmetic on the host, against a host copy of the descriptor.
    let want = refs::window_math_words(&w, &comm, 256);
    // Independent spot checks of the model: our copy is `target`, peer p is p * 8 GiB away.
    let spot = [
        (got[0], target.device_ptr()),
        (got[11], target.device_ptr() + 256),
        (got[13], target.device_ptr() + 256 + 20),
        (got[4], target.device_ptr() + 16 + 2 * (8 << 30)),
        (got[7], 0),
        (got[8], 0),
        (got[10], 0x7000_0000_0000 + 9 * 4096 + 64),
    ];
    let written: Vec<f32> = ctx.download(&target, 64 + threads)?;
    let want_written: Vec<f32> = (0..threads).map(|i| (i + 1) as f32).collect();
    Ok(compare("pointer words", &got, &want)
        .and_then(|()| {
            let (g, e): (Vec<u64>, Vec<u64>) = spot.iter().copied().unzip();
            compare("flat-VA spot checks", &g, &e)
        })
        .and_then(|()| compare("writes through SymPtr::local", &written[64..], &want_written))
        .map(|()| "local/lsa/peer/try_peer/team/multimem pointers and SymPtr math match the host; writes land".into()))
}
