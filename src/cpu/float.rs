//! The scalar types the CPU backend runs in: f32 for training, f64 for the
//! finite-difference gradient checks (tight tolerances need the precision).

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

pub trait Float:
    num_traits::Float + Send + Sync + Default + Debug + Sum + AddAssign + SubAssign + MulAssign + DivAssign + 'static
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
        m: usize, k: usize, n: usize, alpha: Self,
        a: *const Self, rsa: isize, csa: isize,
        b: *const Self, rsb: isize, csb: isize,
        beta: Self, c: *mut Self, rsc: isize, csc: isize,
    );
}

impl Float for f32 {
    fn c(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        self as f64
    }
    fn erf(self) -> Self {
        libm::erff(self)
    }
    unsafe fn gemm(
        m: usize, k: usize, n: usize, alpha: f32,
        a: *const f32, rsa: isize, csa: isize,
        b: *const f32, rsb: isize, csb: isize,
        beta: f32, c: *mut f32, rsc: isize, csc: isize,
    ) {
        unsafe { matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
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
        m: usize, k: usize, n: usize, alpha: f64,
        a: *const f64, rsa: isize, csa: isize,
        b: *const f64, rsb: isize, csb: isize,
        beta: f64, c: *mut f64, rsc: isize, csc: isize,
    ) {
        unsafe { matrixmultiply::dgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
    }
}
