//! The 16-bit float formats as bit patterns: [`F16`] (binary16) and [`Bf16`] (bfloat16),
//! their software conversions to and from `f32`, the hardware conversions kernels use
//! (`cvt` on the GPU, the software rounding on the host), and packed `f16x2`/`bf16x2`
//! sums rounded per lane.

/// An IEEE-754 binary16 value as its bit pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

/// A bfloat16 value (the top half of an `f32`) as its bit pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Bf16(pub u16);

/// The body of `F16::pack2` / `Bf16::pack2`: the `cvt.rn.*x2.f32` instruction `$cvt` on the
/// GPU, `$t::from_f32` of both lanes on the host.
macro_rules! pack2 {
    ($t:ident, $cvt:literal, $lo:expr, $hi:expr) => {{
        #[cfg(target_arch = "nvptx64")]
        {
            let d: u32;
            // SAFETY: a register-only conversion (`hi` goes to the upper half of `d`).
            unsafe {
                core::arch::asm!(
                    concat!($cvt, " {d}, {hi}, {lo};"),
                    d = out(reg32) d,
                    hi = in(reg32) $hi,
                    lo = in(reg32) $lo,
                    options(pure, nomem, nostack),
                )
            };
            d
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            u32::from($t::from_f32($lo).0) | u32::from($t::from_f32($hi).0) << 16
        }
    }};
}

impl F16 {
    /// Rounds `x` to the nearest binary16 (ties to even; overflow to ±infinity; NaN stays a
    /// quiet NaN).
    pub const fn from_f32(x: f32) -> F16 {
        let x = x.to_bits();
        let sign = ((x >> 16) & 0x8000) as u16;
        let exp = ((x >> 23) & 0xff) as i32;
        let mant = x & 0x7f_ffff;
        if exp == 0xff {
            let nan = if mant != 0 {
                0x0200 | (mant >> 13) as u16
            } else {
                0
            };
            return F16(sign | 0x7c00 | nan);
        }
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            // Subnormal (or zero) in binary16: value = m * 2^(exp - 150), unit 2^-24.
            if e < -10 {
                return F16(sign);
            }
            let m = mant | 0x80_0000;
            let shift = (14 - e) as u32;
            let half = 1u32 << (shift - 1);
            let rem = m & ((1u32 << shift) - 1);
            let mut s = m >> shift;
            if rem > half || (rem == half && s & 1 == 1) {
                s += 1;
            }
            return F16(sign | s as u16);
        }
        let mut h = ((e as u32) << 10) | (mant >> 13);
        let rem = mant & 0x1fff;
        if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
            h += 1; // may carry into the exponent, up to infinity: both correct
        }
        F16(sign | h as u16)
    }

    /// The exact `f32` value.
    pub const fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let mant = h & 0x3ff;
        if exp == 0x1f {
            return f32::from_bits(sign | 0x7f80_0000 | (mant << 13));
        }
        if exp == 0 {
            let v = mant as f32 * (1.0 / 16_777_216.0); // mant * 2^-24, exact
            return if sign != 0 { -v } else { v };
        }
        f32::from_bits(sign | ((exp + 112) << 23) | (mant << 13))
    }

    /// [`from_f32`](Self::from_f32) as the hardware computes it: one `cvt.rn.f16.f32` on the
    /// GPU, the software rounding on the host. The two agree on every input that is not a
    /// NaN (round to nearest even, subnormals kept, overflow to ±infinity); a NaN becomes
    /// the canonical quiet NaN `0x7fff` on the GPU.
    ///
    /// Kernels use this rather than `from_f32`: the software rounding branches on the
    /// exponent, and eight of those per 16-byte pack kept LLVM from unrolling the lane loops
    /// of [`Accumulator`](crate::reduce::Accumulator), which then lived in local memory.
    #[inline(always)]
    pub fn round(x: f32) -> F16 {
        #[cfg(target_arch = "nvptx64")]
        {
            let h: u16;
            // SAFETY: a register-only conversion.
            unsafe {
                core::arch::asm!(
                    "cvt.rn.f16.f32 {h}, {x};",
                    h = out(reg16) h,
                    x = in(reg32) x,
                    options(pure, nomem, nostack),
                )
            };
            F16(h)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            F16::from_f32(x)
        }
    }

    /// [`to_f32`](Self::to_f32) as the hardware computes it: one exact `cvt.f32.f16` on the
    /// GPU (a NaN keeps its sign and payload, quieted), `to_f32` on the host.
    #[inline(always)]
    pub fn widen(self) -> f32 {
        #[cfg(target_arch = "nvptx64")]
        {
            let f: f32;
            // SAFETY: a register-only conversion.
            unsafe {
                core::arch::asm!(
                    "cvt.f32.f16 {f}, {h};",
                    f = out(reg32) f,
                    h = in(reg16) self.0,
                    options(pure, nomem, nostack),
                )
            };
            f
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            self.to_f32()
        }
    }

    /// Rounds `lo` and `hi` to binary16 and packs them into one word, `lo` in bits 0–15:
    /// [`round`](Self::round) of both, in one `cvt.rn.f16x2.f32` on the GPU (sm_80 and
    /// later; a NaN becomes the canonical `0x7fff`), `from_f32` of both on the host.
    #[inline(always)]
    pub fn pack2(lo: f32, hi: f32) -> u32 {
        pack2!(F16, "cvt.rn.f16x2.f32", lo, hi)
    }
}

impl Bf16 {
    /// The same as [`from_f32`](Self::from_f32) (which has no branch but the NaN test).
    #[inline(always)]
    pub fn round(x: f32) -> Bf16 {
        Bf16::from_f32(x)
    }

    /// The same as [`to_f32`](Self::to_f32) (a shift).
    #[inline(always)]
    pub fn widen(self) -> f32 {
        self.to_f32()
    }

    /// Rounds `x` to the nearest bfloat16 (ties to even; NaN stays a quiet NaN).
    pub const fn from_f32(x: f32) -> Bf16 {
        let b = x.to_bits();
        if x.is_nan() {
            return Bf16(((b >> 16) | 0x0040) as u16);
        }
        let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
        Bf16((r >> 16) as u16)
    }

    /// The exact `f32` value.
    pub const fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// Rounds `lo` and `hi` to bfloat16 (ties to even) and packs them into one word, `lo` in
    /// bits 0–15 (lane order of a pack): `from_f32(lo).0 | from_f32(hi).0 << 16` for every
    /// input that is not a NaN.
    ///
    /// On the GPU it is one `cvt.rn.bf16x2.f32` (sm_80 and later) instead of the integer
    /// rounding of [`from_f32`](Self::from_f32): round-to-nearest-even of an `f32` to the 8-bit
    /// significand of bfloat16, keeping subnormals and rounding overflow to infinity, which is
    /// what `from_f32` computes for every non-NaN input. A NaN becomes the canonical quiet NaN
    /// `0x7fff` there, where `from_f32` keeps the sign and payload. On the host (the
    /// emulator) it is `from_f32`.
    #[inline(always)]
    pub fn pack2(lo: f32, hi: f32) -> u32 {
        pack2!(Bf16, "cvt.rn.bf16x2.f32", lo, hi)
    }
}

/// Two packed binary16 lanes added in `f32` and rounded (one `f16x2` word, low lane first).
#[inline(always)]
pub fn add_f16x2(a: u32, b: u32) -> u32 {
    let lo = F16::from_f32(F16(a as u16).to_f32() + F16(b as u16).to_f32()).0;
    let hi = F16::from_f32(F16((a >> 16) as u16).to_f32() + F16((b >> 16) as u16).to_f32()).0;
    u32::from(lo) | (u32::from(hi) << 16)
}

/// Two packed bfloat16 lanes added in `f32` and rounded (one `bf16x2` word, low lane first).
#[inline(always)]
pub fn add_bf16x2(a: u32, b: u32) -> u32 {
    let lo = Bf16::from_f32(Bf16(a as u16).to_f32() + Bf16(b as u16).to_f32()).0;
    let hi = Bf16::from_f32(Bf16((a >> 16) as u16).to_f32() + Bf16((b >> 16) as u16).to_f32()).0;
    u32::from(lo) | (u32::from(hi) << 16)
}
