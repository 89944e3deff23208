use super::*;

#[test]
fn a_single_host_rank_reduces_into_its_own_copy() {
    let mut x = 3u32;
    let mut f = 1.5f32;
    let mut v = F32x4([1.0, 2.0, 3.0, 4.0]);
    // SAFETY: outside a registered multicast range each address is its only copy: live,
    // aligned locals that only this thread accesses.
    unsafe {
        red_add_u32(&raw mut x, 2, Ordering::Release);
        assert_eq!(ld_reduce_add_u32(&raw const x), 5);
        red_add_f32(&raw mut f, 0.25, Ordering::Relaxed);
        st_f32(&raw mut f, ld_reduce_add_f32(&raw const f) * 2.0);
        assert_eq!(f, 3.5);
        red_add_v4_f32(&raw mut v, F32x4([1.0; 4]), Ordering::Relaxed);
        assert_eq!(ld_reduce_add_v4_f32(&raw const v).0, [2.0, 3.0, 4.0, 5.0]);
        let one_one = 0x3c00_3c00u32; // f16x2 (1.0, 1.0)
        let mut h = one_one;
        red_add_f16x2(&raw mut h, one_one, Ordering::Relaxed);
        assert_eq!(h, 0x4000_4000); // (2.0, 2.0)
    }
}

#[test]
fn a_registered_multicast_address_reaches_every_copy() {
    // Three "peers" of four words each; the multicast range is a separate address range
    // that is never dereferenced itself.
    let mut copies = [
        [1u32, 0x3c00_3c00, 0, 0],
        [2, 0x3c00_3c00, 0, 0],
        [3, 0x4000_3c00, 0, 0],
    ];
    let bases: std::vec::Vec<u64> = copies.iter_mut().map(|c| c.as_mut_ptr() as u64).collect();
    let mc = 0x6f00_0000_0000u64;
    // SAFETY: each copy is 16 bytes of `copies`, which outlives `range` (dropped below,
    // before `copies` is read again) and is only accessed through the multimem calls.
    let range = unsafe { crate::emu::multicast::register(mc, 16, &bases) }.unwrap();
    let word = |i: u64| (mc + 4 * i) as *mut u32;
    // SAFETY: every word lies in the registered range, whose copies are alive (see above).
    unsafe {
        assert_eq!(ld_reduce_add_u32(word(0)), 6);
        // f16x2 (1, 1) + (1, 1) + (1, 2) = (3, 4), accumulated in f32.
        assert_eq!(ld_reduce_add_f16x2(word(1)), 0x4400_4200);
        st_u32(word(2), 7);
        red_add_u32(word(3), 5, Ordering::Release);
        red_add_u32(word(3), 1, Ordering::Relaxed);
    }
    drop(range);
    for c in &copies {
        assert_eq!(c[2..], [7, 6]);
    }
}

#[test]
fn min_and_max_pick_per_type_and_per_lane() {
    use crate::reduce::Bf16;
    /// One copy: an i32 word, an f16x2 word, a 64-bit word, eight bf16 lanes.
    #[repr(C, align(16))]
    struct Copy4 {
        s: i32,
        h: u32,
        d: i64,
        v: U32x4,
    }
    let ints = [-5i32, 3, 2];
    // f16x2, low lane first: (1, -2), (-1, 0.5), (2, 4).
    let halves = [0xc000_3c00u32, 0x3800_bc00, 0x4400_4000];
    let longs = [-1i64, 1, 7];
    let lane = |c: usize, i: usize| ((i * 3 + c * 5) % 7) as f32 - 3.0 + 0.25 * c as f32;
    let bf = |f: f32| u32::from(Bf16::from_f32(f).0);
    let packed = |c: usize| {
        U32x4(core::array::from_fn(|w| {
            bf(lane(c, 2 * w)) | bf(lane(c, 2 * w + 1)) << 16
        }))
    };
    let mut copies: std::vec::Vec<Copy4> = (0..3)
        .map(|c| Copy4 {
            s: ints[c],
            h: halves[c],
            d: longs[c],
            v: packed(c),
        })
        .collect();
    let bases: std::vec::Vec<u64> = copies.iter_mut().map(|c| (&raw mut *c) as u64).collect();
    let mc = 0x6e00_0000_0000u64;
    // SAFETY: each copy is 32 bytes of `copies`, which outlives `range` and is only read
    // through the multimem calls meanwhile.
    let range = unsafe { crate::emu::multicast::register(mc, 32, &bases) }.unwrap();
    let fold = |f: fn(f32, f32) -> f32| {
        U32x4(core::array::from_fn(|w| {
            let pick = |i| bf((0..3).map(|c| lane(c, i)).reduce(f).unwrap());
            pick(2 * w) | pick(2 * w + 1) << 16
        }))
    };
    // SAFETY: every address is an aligned word (or 16 bytes) of the registered range.
    unsafe {
        assert_eq!(ld_reduce_min_s32(mc as *const i32), -5);
        assert_eq!(ld_reduce_max_s32(mc as *const i32), 3);
        assert_eq!(ld_reduce_min_u32(mc as *const u32), 2);
        assert_eq!(ld_reduce_max_u32(mc as *const u32), -5i32 as u32);
        let h = (mc + 4) as *const u32;
        assert_eq!(ld_reduce_min_f16x2(h), 0xc000_bc00); // (-1, -2)
        assert_eq!(ld_reduce_max_f16x2(h), 0x4400_4000); // (2, 4)
        assert_eq!(ld_reduce_min_s64((mc + 8) as *const i64), -1);
        assert_eq!(ld_reduce_max_s64((mc + 8) as *const i64), 7);
        assert_eq!(ld_reduce_min_u64((mc + 8) as *const u64), 1);
        assert_eq!(ld_reduce_max_u64((mc + 8) as *const u64), u64::MAX);
        let v = (mc + 16) as *const U32x4;
        assert_eq!(ld_reduce_min_v4_bf16x2(v).0, fold(f32::min).0);
        assert_eq!(ld_reduce_max_v4_bf16x2(v).0, fold(f32::max).0);
        // The minimum of every lane is one copy's lane, and not always the same copy's.
        let first = ld_reduce_min_bf16x2(v.cast());
        assert_eq!(first, fold(f32::min).0[0]);
        assert_ne!(fold(f32::min).0, packed(0).0);
    }
    drop(range);
}
