//! The rows of the plain collectives: for each type, operator, size and (all-reduce)
//! algorithm, a case runs on symcomm and NCCL ([`measure`]: fill the input with the pattern,
//! poison the output, run once, check every element of every rank, then time).

use symcomm::Result;
use symcomm_gallery::{Algo, Buf, RedOp};
use symcomm_gallery_kernels::plan;

use crate::coll::{Case, Coll};
use crate::error::fail;
use crate::rank::Rank;
use crate::report::{self, Measured, Report};

/// Every row of `coll` (not the fused one) for the types, operators, sizes and algorithms of
/// the command line; `seed` counts on from case to case.
pub fn rows(r: &Rank<'_>, coll: Coll, seed: &mut u32, report: &mut Report) -> Result<()> {
    let opts = r.opts;
    let ops = if coll.reduces() {
        opts.ops.clone()
    } else {
        vec![RedOp::Sum]
    };
    let algos = if coll == Coll::AllReduce {
        opts.algos.clone()
    } else {
        vec![None]
    };
    for &t in &opts.types {
        for &op in &ops {
            for bytes in opts.byte_sizes() {
                *seed = seed.wrapping_add(1);
                let unit = coll.unit(r.n(), t.size());
                if !bytes.is_multiple_of(unit) {
                    if opts.sizes.is_some() {
                        // Asked for by name: say why there is no row.
                        report.note(&format!(
                            "# {} {t}: {bytes} bytes skipped (not a multiple of {unit} bytes, \
                             whole {t} elements per rank block for {} ranks)",
                            coll.name(),
                            r.n()
                        ));
                    }
                } else {
                    let base = Case {
                        coll,
                        bytes,
                        t,
                        op,
                        seed: *seed,
                        algo: None,
                    };
                    let whole = coll.unit(r.n(), 16);
                    if opts.vs_aligned && !bytes.is_multiple_of(whole) {
                        let aligned = Case {
                            bytes: bytes.next_multiple_of(whole),
                            ..base
                        };
                        pair_rows(r, base, aligned, report)?;
                    } else {
                        size_rows(r, base, &algos, report)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The rows of one size: symcomm with each of `algos`, NCCL once (shown on every row).
fn size_rows(r: &Rank<'_>, base: Case, algos: &[Option<Algo>], report: &mut Report) -> Result<()> {
    let mut nc = None;
    for (k, &algo) in algos.iter().enumerate() {
        let case = Case { algo, ..base };
        let sym = measure(r, &case, false)?;
        let mut wrong = sym.wrong;
        if k == 0 && r.nccl.is_some() {
            let m = measure(r, &case, true)?;
            wrong += m.wrong;
            nc = Some(m);
        }
        let line = report::row(&case, r.n(), algo_label(r, &case), sym, nc);
        report.row(&line, wrong);
    }
    Ok(())
}

/// `--vs-aligned`: case `odd` (not whole packs per rank block) and case `aligned` (the next
/// size that is), each checked, then timed with their replays interleaved; a row each and a
/// `#` line with the ratio and the difference of the times.
fn pair_rows(r: &Rank<'_>, odd: Case, aligned: Case, report: &mut Report) -> Result<()> {
    let mut wrong = [0u64; 2];
    for (k, c) in [odd, aligned].iter().enumerate() {
        prepare(r, c)?;
        r.barrier()?;
        r.gallery.clear_status();
        launch(r, c, false)?;
        r.sync()?;
        r.gallery.check_status()?;
        wrong[k] = r.sum(verify(r, c, "symcomm")?)?;
    }
    let (ta, tb) = r.time_pair(|| launch(r, &odd, false), || launch(r, &aligned, false))?;
    r.gallery.check_status()?;
    for (c, us, w) in [(&odd, ta, wrong[0]), (&aligned, tb, wrong[1])] {
        let line = report::row(c, r.n(), algo_label(r, c), Measured { us, wrong: w }, None);
        report.row(&line, w);
    }
    report.note(&format!(
        "# {} {}: {} B vs {} B (replays interleaved): {:.3}x, {:+.2} us",
        odd.coll.name(),
        odd.t,
        odd.bytes,
        aligned.bytes,
        ta / tb,
        ta - tb
    ));
    Ok(())
}

/// What symcomm runs for `c`: the all-reduce's algorithm, `ll` for the LL kernels of the
/// others, else `push` (stores to peers) or `pull` (loads from peers).
fn algo_label(r: &Rank<'_>, c: &Case) -> &'static str {
    let (g, n, bytes) = (&r.gallery, r.n(), c.bytes);
    if c.coll == Coll::AllReduce {
        return g
            .all_reduce_algo(c.algo, bytes, c.t, c.op, r.opts.inplace, bytes % 16 == 0)
            .name();
    }
    let tuning = g.tuning();
    let ll = match c.coll {
        Coll::Broadcast => tuning.broadcast_ll(bytes, bytes.div_ceil(16) as u64, n),
        _ => tuning.ll_for(bytes, plan::block_packs(0, (bytes / n) as u64, n as u64), n),
    };
    match c.coll {
        _ if ll => "ll",
        Coll::ReduceScatter if tuning.reduce_scatter_push(bytes) => "push",
        Coll::AllGather | Coll::AllToAll | Coll::Broadcast => "push",
        _ => "pull",
    }
}

/// Runs case `c` on symcomm (or NCCL): check once, then time. The wrong elements are summed
/// over ranks.
fn measure(r: &Rank<'_>, c: &Case, use_nccl: bool) -> Result<Measured> {
    prepare(r, c)?;
    r.barrier()?;
    r.gallery.clear_status();
    launch(r, c, use_nccl)?;
    r.sync()?;
    r.gallery.check_status()?;
    let wrong = verify(r, c, if use_nccl { "NCCL" } else { "symcomm" })?;
    let us = r.time(|| launch(r, c, use_nccl))?;
    r.gallery.check_status()?;
    let wrong = r.sum(wrong)?;
    Ok(Measured { us, wrong })
}

/// (source, destination) of a case: window a to window b, or in place (`--inplace`, not
/// the all-to-all) the one window the collective takes.
fn bufs<'r>(r: &'r Rank<'_>, c: &Case) -> (Buf<'r>, Buf<'r>) {
    let (inb, outb) = c.sizes(r.n());
    let k = r.rank();
    if !r.opts.inplace || c.coll == Coll::AllToAll {
        return (Buf::whole(&r.a), Buf::whole(&r.b));
    }
    match c.coll {
        Coll::AllGather => (Buf::new(&r.b, inb * k), Buf::whole(&r.b)),
        Coll::ReduceScatter => (Buf::whole(&r.a), Buf::new(&r.a, outb * k)),
        _ => (Buf::whole(&r.a), Buf::whole(&r.a)),
    }
}

/// Poisons the output window, then fills the input with the pattern.
fn prepare(r: &Rank<'_>, c: &Case) -> Result<()> {
    let (src, dst) = bufs(r, c);
    let out_mem = if std::ptr::eq(dst.window(), &r.a) {
        &r.a_mem
    } else {
        &r.b_mem
    };
    // Returns once the memset (on a stream of its own) is done.
    out_mem.buffer().fill_bytes(0x7f)?;
    let (inb, _) = c.sizes(r.n());
    let count = inb / c.t.size();
    // SAFETY: `src` holds `count` elements of the type (inside its window).
    unsafe {
        r.fill(
            src.device_ptr(),
            count,
            c.t,
            (r.rank() as u32, c.seed),
            1024,
        )?
    };
    r.sync()
}

/// Checks this rank's output; returns the wrong-element count (`what`: the implementation,
/// for the report of the first ones).
fn verify(r: &Rank<'_>, c: &Case, what: &str) -> Result<u64> {
    let (_, dst) = bufs(r, c);
    let (_, outb) = c.sizes(r.n());
    let mut got = vec![0u8; outb];
    // SAFETY: `dst` holds `outb` bytes of this device's memory; the stream is synchronised.
    unsafe { r.copy_to_host(&mut got, dst.device_ptr())? };
    let (n, k, t) = (r.n() as u32, r.rank() as u64, c.t);
    let count = outb / t.size();
    let m = symcomm_gallery::check::find_wrong(&got, t, count, c.expected(n, k, count), 4);
    if m.count != 0 {
        let first: Vec<String> = m
            .first
            .iter()
            .map(|(i, g, w)| format!("[{i}] got {g} want {w}"))
            .collect();
        eprintln!(
            "symcomm-bench: rank {k}: {what} {} {} B {t}: {} of {count} wrong; first: {}",
            c.coll.name(),
            c.bytes,
            m.count,
            first.join(", ")
        );
    }
    Ok(m.count as u64)
}

/// Launches one op of symcomm (`use_nccl == false`) or NCCL on the stream.
fn launch(r: &Rank<'_>, c: &Case, use_nccl: bool) -> Result<()> {
    let (src, dst) = bufs(r, c);
    let (inb, outb) = c.sizes(r.n());
    let (stream, t, n) = (r.stream(), c.t, r.n());
    if use_nccl {
        let nc = r.nccl.as_ref().ok_or_else(|| fail("NCCL is off"))?;
        // SAFETY: the windows hold the case's sizes (as the symcomm path checks them) on this
        // device, and outlive the stream's work.
        return unsafe { nc.launch(c, (src.device_ptr(), dst.device_ptr()), n, stream) };
    }
    let g = &r.gallery;
    match c.coll {
        Coll::AllReduce => g
            .all_reduce_with(c.algo, src, dst, inb / t.size(), t, c.op, stream)
            .map(|_| ()),
        Coll::AllGather => g.all_gather(src, dst, inb / t.size(), t, stream),
        Coll::ReduceScatter => g.reduce_scatter(src, dst, outb / t.size(), t, c.op, stream),
        Coll::AllToAll => g.all_to_all(src, dst, inb / t.size() / n, t, stream),
        Coll::Broadcast => g.broadcast(src, dst, inb / t.size(), t, 0, stream),
        Coll::RmsNorm => Err(fail("rmsnorm runs through its own bench")),
    }
}
