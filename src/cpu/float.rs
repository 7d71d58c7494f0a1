//! The scalar types the CPU backend runs in: f32 for training, f64 for the
//! finite-difference gradient checks (tight tolerances need the precision).

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

pub trait Float:
    num_traits::Float
    + Send
    + Sync
    + Default
    + Debug
    + Sum
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    fn c(x: f64) -> Self;
    fn f64(self) -> f64;
    fn erf(self) -> Self;
    /// e^x; in f32 a branch-free polynomial that vectorises (see [`exp_fast`]).
    fn exp_fast(self) -> Self;

    /// `C = alpha·A·B + beta·C` with arbitrary strides (row stride, column
    /// stride) for each matrix; single-threaded.
    ///
    /// # Safety
    /// The pointers and strides must describe valid, non-overlapping (for C)
    /// `m×k`, `k×n` and `m×n` matrices.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl Float for f32 {
    fn c(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        self as f64
    }
    /// A fast erf (Abramowitz & Stegun 7.1.26, |error| ≤ 1e-6 in f32, below
    /// the resolution of GELU's 1 + erf): libm's erff made GELU a fifth of a CPU step. The
    /// GPU kernels use the same formula. f64 keeps the exact erf for the
    /// finite-difference checks.
    fn erf(self) -> Self {
        erf_as7126(self)
    }
    fn exp_fast(self) -> Self {
        exp_fast(self)
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        unsafe {
            matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

impl Float for f64 {
    fn c(x: f64) -> Self {
        x
    }
    fn f64(self) -> f64 {
        self
    }
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn exp_fast(self) -> Self {
        self.exp()
    }
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        unsafe {
            matrixmultiply::dgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
        }
    }
}

/// erf by Abramowitz & Stegun formula 7.1.26 (max absolute error 1.5e-7).
#[inline]
pub fn erf_as7126(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152_1,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    (1.0 - poly * exp_fast(-a * a)).copysign(x)
}

/// e^x in f32 without a libm call, so loops over it vectorise: x = n·ln 2 + r
/// (Cody–Waite), e^r by Cephes' `expf` polynomial, 2^n through the exponent
/// bits. Relative error ≤ 2e-7 over the normal range; clamps to it.
#[inline]
pub fn exp_fast(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5e-1;
    let e = p * r * r + r + 1.0;
    // SAFETY: n is an integer in [-126, 127] after the clamp (a plain `as`
    // cast adds saturation checks that stop the loop from vectorising).
    let n: i32 = unsafe { n.to_int_unchecked() };
    e * f32::from_bits(((n + 127) << 23) as u32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fast_exp_is_within_its_bound() {
        for i in -87_000..=88_000 {
            let x = i as f32 / 1000.0;
            let want = (x as f64).exp();
            let rel = ((super::exp_fast(x) as f64 - want) / want).abs();
            assert!(rel < 2e-7, "exp({x}): relative error {rel}");
        }
    }

    #[test]
    fn fast_erf_is_within_its_bound() {
        for i in -4000..=4000 {
            let x = i as f64 / 1000.0;
            let err = (super::erf_as7126(x as f32) as f64 - libm::erf(x)).abs();
            // 1.5e-7 from the formula, plus f32 cancellation in 1 − poly·e^(−x²)
            // near 0; GELU uses 1 + erf, where this is below f32's resolution.
            assert!(err < 1e-6, "erf({x}): error {err}");
        }
    }
}
