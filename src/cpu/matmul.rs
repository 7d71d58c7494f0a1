//! Matrix multiplication for the CPU backend: a rayon-parallel driver over the
//! `matrixmultiply` SIMD GEMM, and the plain triple loop it is tested against.
//!
//! The work is split into row blocks (or column blocks when there are few
//! rows). Every element of C is computed by the same sequence of operations
//! whatever the split (the GEMM walks K in the same blocks for every tile), so
//! results are bit-identical however many threads run them (a test checks).
//! `docs/performance.md` records the measurement that chose this GEMM.

use super::float::Float;
use rayon::prelude::*;

/// A read-only matrix view: pointer offset into a slice, with strides.
#[derive(Clone, Copy)]
pub struct View<'a, F> {
    pub data: &'a [F],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, F> View<'a, F> {
    /// Row-major `rows × cols`.
    pub fn rows(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }
    /// The transpose of a row-major matrix with `cols` columns.
    pub fn transposed(data: &'a [F], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }
}

/// Minimum output elements per parallel task: below this a task costs more
/// to schedule than to compute.
const MIN_TASK_WORK: usize = 64 * 1024;

/// `c (m×n, row-major, row stride ldc) = alpha·a·b + beta·c`, in parallel.
#[allow(clippy::too_many_arguments)]
pub fn gemm<F: Float>(
    m: usize,
    k: usize,
    n: usize,
    alpha: F,
    a: View<F>,
    b: View<F>,
    beta: F,
    c: &mut [F],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    check_view(a, m, k, "a");
    check_view(b, k, n, "b");
    assert!(c.len() >= (m - 1) * ldc + n, "gemm: c too small");
    let work = m * n * k.max(1);
    // Enough tasks to balance the threads, few enough that each task's
    // packing of the shared operand stays small next to its arithmetic.
    let tasks = (work / MIN_TASK_WORK).clamp(1, 2 * rayon::current_num_threads());
    if tasks == 1 {
        unsafe { serial(m, k, n, alpha, a, b, beta, c.as_mut_ptr(), ldc) };
        return;
    }
    if m >= tasks * 16 || m >= n {
        // Split rows.
        let rows_per = m.div_ceil(tasks).next_multiple_of(8);
        c.par_chunks_mut(rows_per * ldc)
            .enumerate()
            .for_each(|(i, chunk)| {
                let r0 = i * rows_per;
                if r0 >= m {
                    return;
                }
                let rows = rows_per.min(m - r0);
                let a_off = View {
                    data: &a.data[r0 * a.rs..],
                    rs: a.rs,
                    cs: a.cs,
                };
                unsafe { serial(rows, k, n, alpha, a_off, b, beta, chunk.as_mut_ptr(), ldc) };
            });
    } else {
        // Split columns: each task owns a column block of every row of c.
        let cols_per = n.div_ceil(tasks).next_multiple_of(8);
        let blocks = n.div_ceil(cols_per);
        let c_ptr = SendPtr(c.as_mut_ptr());
        (0..blocks).into_par_iter().for_each(|j| {
            let c0 = j * cols_per;
            let cols = cols_per.min(n - c0);
            let b_off = View {
                data: &b.data[c0 * b.cs..],
                rs: b.rs,
                cs: b.cs,
            };
            // SAFETY: column blocks are disjoint, so tasks never write the same element.
            unsafe { serial(m, k, cols, alpha, a, b_off, beta, c_ptr.get().add(c0), ldc) };
        });
    }
}

#[derive(Clone, Copy)]
struct SendPtr<F>(*mut F);
unsafe impl<F> Send for SendPtr<F> {}
unsafe impl<F> Sync for SendPtr<F> {}
impl<F> SendPtr<F> {
    fn get(self) -> *mut F {
        self.0
    }
}

fn check_view<F>(v: View<F>, rows: usize, cols: usize, name: &str) {
    if rows == 0 || cols == 0 {
        return;
    }
    let last = (rows - 1) * v.rs + (cols - 1) * v.cs;
    assert!(
        last < v.data.len(),
        "gemm: {name} view out of bounds ({rows}×{cols}, len {})",
        v.data.len()
    );
}

/// Single-threaded GEMM (the per-task kernel; also used inside parallel loops).
///
/// # Safety
/// `c` must point to an `m×n` matrix with row stride `ldc` that nothing else
/// accesses during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn serial<F: Float>(
    m: usize,
    k: usize,
    n: usize,
    alpha: F,
    a: View<F>,
    b: View<F>,
    beta: F,
    c: *mut F,
    ldc: usize,
) {
    check_view(a, m, k, "a");
    check_view(b, k, n, "b");
    unsafe {
        F::gemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c,
            ldc as isize,
            1,
        )
    }
}

/// Safe single-threaded GEMM into a slice.
#[allow(clippy::too_many_arguments)]
pub fn gemm_serial<F: Float>(
    m: usize,
    k: usize,
    n: usize,
    alpha: F,
    a: View<F>,
    b: View<F>,
    beta: F,
    c: &mut [F],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "gemm: c too small");
    unsafe { serial(m, k, n, alpha, a, b, beta, c.as_mut_ptr(), ldc) }
}

/// The plain triple loop: the oracle the fast paths are tested against, and
/// the hand-written contender in the matmul benchmark.
#[allow(clippy::too_many_arguments)]
pub fn naive<F: Float>(
    m: usize,
    k: usize,
    n: usize,
    alpha: F,
    a: View<F>,
    b: View<F>,
    beta: F,
    c: &mut [F],
    ldc: usize,
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = F::zero();
            for p in 0..k {
                acc += a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs];
            }
            let dst = &mut c[i * ldc + j];
            *dst = alpha * acc
                + if beta == F::zero() {
                    F::zero()
                } else {
                    beta * *dst
                };
        }
    }
}

/// A cache-friendly hand-written parallel matmul (`C = A·B`, row-major, i-k-j
/// order so the inner loop vectorises): the strongest loop we wrote by hand,
/// kept for the benchmark that compares it with the GEMM crate.
pub fn handwritten_ikj(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    c.par_chunks_mut(n)
        .take(m)
        .enumerate()
        .for_each(|(i, row)| {
            row.iter_mut().for_each(|x| *x = 0.0);
            for p in 0..k {
                let aip = a[i * k + p];
                let brow = &b[p * n..p * n + n];
                for (x, &bv) in row.iter_mut().zip(brow) {
                    *x += aip * bv;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::rng::Rng;

    fn rand(n: usize, rng: &mut Rng) -> Vec<f64> {
        (0..n).map(|_| rng.normal()).collect()
    }

    #[test]
    fn parallel_gemm_matches_naive_in_every_layout() {
        let mut rng = Rng::new(5);
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (257, 33, 65),
            (20, 300, 700),
            (700, 300, 20),
            (5, 2000, 5),
        ] {
            let a = rand(m * k, &mut rng);
            let b = rand(k * n, &mut rng);
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let av = if ta {
                    View::transposed(&a, m)
                } else {
                    View::rows(&a, k)
                };
                let bv = if tb {
                    View::transposed(&b, k)
                } else {
                    View::rows(&b, n)
                };
                let c0 = rand(m * n, &mut rng);
                let mut want = c0.clone();
                naive(m, k, n, 0.5, av, bv, 2.0, &mut want, n);
                let mut got = c0.clone();
                gemm(m, k, n, 0.5, av, bv, 2.0, &mut got, n);
                let err = want
                    .iter()
                    .zip(&got)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                assert!(err < 1e-9, "({m},{k},{n}) ta={ta} tb={tb}: {err}");
            }
        }
    }

    #[test]
    fn result_does_not_depend_on_the_thread_count() {
        let mut rng = Rng::new(6);
        let (m, k, n) = (300, 700, 500);
        let a: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.normal() as f32).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut c = vec![0.0f32; m * n];
            pool.install(|| {
                gemm(
                    m,
                    k,
                    n,
                    1.0,
                    View::rows(&a, k),
                    View::transposed(&b, k),
                    0.0,
                    &mut c,
                    n,
                )
            });
            c
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert!(
                one.iter()
                    .zip(run(threads))
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{threads} threads differ"
            );
        }
    }

    #[test]
    fn handwritten_matches_naive() {
        let mut rng = Rng::new(9);
        let (m, k, n) = (33, 17, 45);
        let a: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.normal() as f32).collect();
        let mut want = vec![0.0f32; m * n];
        naive(
            m,
            k,
            n,
            1.0,
            View::rows(&a, k),
            View::rows(&b, n),
            0.0,
            &mut want,
            n,
        );
        let mut got = vec![0.0f32; m * n];
        handwritten_ikj(m, k, n, &a, &b, &mut got);
        for (x, y) in want.iter().zip(&got) {
            assert!((x - y).abs() < 1e-4);
        }
    }
}
