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
    let s = x.signum();
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    s * (1.0 - poly * (-a * a).exp())
}

#[cfg(test)]
mod tests {
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
