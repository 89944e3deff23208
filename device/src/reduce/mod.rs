//! Element types and reduction operators on packed 16-byte vectors.
//!
//! The data path moves 16 bytes per thread per access ([`U32x4`]); this module interprets those
//! bytes as lanes of an [`Element`] type (`f32`, `f64`, [`F16`], [`Bf16`], `i32`, `u32`,
//! `u64`, `i64`) and combines two vectors lane by lane with a [`ReduceOp`] ([`Sum`], [`Min`],
//! [`Max`], [`Prod`]). 16-bit floats are computed in `f32` (convert, operate, round to nearest
//! even once), as NVLink SHARP's `.acc::f32` does. [`Accumulator`] keeps a running reduction
//! of many vectors in the accumulation type and rounds once at the end.
//!
//! Rust has no stable `f16`/`bf16` in `core`, so [`F16`] and [`Bf16`] are bit patterns with
//! software conversions (round-to-nearest-even, NaN kept quiet, overflow to infinity).
//! Integer operations wrap. Pure code, identical on the GPU and the host.

use core::marker::PhantomData;

use crate::mem::U32x4;

mod element;
mod float16;

pub use element::{Arith, Element};
pub use float16::{Bf16, F16, add_bf16x2, add_f16x2};

/// A reduction operator.
pub trait ReduceOp {
    /// Combines two values.
    fn apply<A: Arith>(a: A, b: A) -> A;
}

/// Addition.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sum;
/// Minimum.
#[derive(Debug, Clone, Copy, Default)]
pub struct Min;
/// Maximum.
#[derive(Debug, Clone, Copy, Default)]
pub struct Max;
/// Multiplication.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prod;

impl ReduceOp for Sum {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::add(a, b)
    }
}
impl ReduceOp for Min {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::min(a, b)
    }
}
impl ReduceOp for Max {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::max(a, b)
    }
}
impl ReduceOp for Prod {
    #[inline(always)]
    fn apply<A: Arith>(a: A, b: A) -> A {
        A::mul(a, b)
    }
}

/// `a op b` lane by lane, computed in `T::Acc` and rounded once per lane.
#[inline(always)]
pub fn reduce_pack<T: Element, O: ReduceOp>(a: U32x4, b: U32x4) -> U32x4 {
    let mut acc = [T::Acc::default(); 8];
    for (i, x) in acc.iter_mut().enumerate().take(T::LANES) {
        *x = O::apply(T::get(&a, i), T::get(&b, i));
    }
    T::pack(&acc)
}

/// A running reduction of packed vectors in the accumulation type; rounds once in
/// [`finish`](Accumulator::finish) (fp32 accumulation for 16-bit floats).
#[derive(Debug, Clone, Copy)]
pub struct Accumulator<T: Element, O: ReduceOp> {
    acc: [T::Acc; 8],
    _op: PhantomData<(T, O)>,
}

impl<T: Element, O: ReduceOp> Accumulator<T, O> {
    /// Starts with the lanes of `first`.
    #[inline(always)]
    pub fn new(first: U32x4) -> Self {
        let mut acc = [T::Acc::default(); 8];
        for (i, a) in acc.iter_mut().enumerate().take(T::LANES) {
            *a = T::get(&first, i);
        }
        Accumulator {
            acc,
            _op: PhantomData,
        }
    }

    /// Folds in the lanes of `v`.
    #[inline(always)]
    pub fn add(&mut self, v: U32x4) {
        for (i, a) in self.acc.iter_mut().enumerate().take(T::LANES) {
            *a = O::apply(*a, T::get(&v, i));
        }
    }

    /// The result, rounded to `T`.
    #[inline(always)]
    pub fn finish(&self) -> U32x4 {
        T::pack(&self.acc)
    }
}

#[cfg(test)]
mod tests;
