//! Matrix multiplication for the CPU backend: a rayon-parallel driver over the
//! `matrixmultiply` SIMD GEMM, and the plain triple loop it is tested against.
//!
//! The work is split into tiles of C, up to twice as many as there are
//! threads, in the grid that packs least ([`tiles`]): on 16 threads each
//! task packs a part of A and a part of B (row blocks each packed all of B,
//! which kept the linears of large and xl at a fraction of their speed). Every element of C is computed
//! by the same sequence of operations whatever the tile (the GEMM walks K
//! in the same blocks for every tile), so results are bit-identical however
//! many threads run them (a test checks). `docs/performance.md` records
//! the measurements that chose this GEMM and this split.

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

/// Minimum multiply-adds per parallel task: below this a task costs more
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
    let (rows_per, cols_per) = tiles(m, k, n);
    if rows_per >= m && cols_per >= n {
        unsafe { serial(m, k, n, alpha, a, b, beta, c.as_mut_ptr(), ldc) };
        return;
    }
    let (row_blocks, col_blocks) = (m.div_ceil(rows_per), n.div_ceil(cols_per));
    let c_ptr = SendPtr(c.as_mut_ptr());
    (0..row_blocks * col_blocks).into_par_iter().for_each(|t| {
        let (r0, c0) = ((t / col_blocks) * rows_per, (t % col_blocks) * cols_per);
        let (rows, cols) = (rows_per.min(m - r0), cols_per.min(n - c0));
        let a_tile = View {
            data: &a.data[r0 * a.rs..],
            rs: a.rs,
            cs: a.cs,
        };
        let b_tile = View {
            data: &b.data[c0 * b.cs..],
            rs: b.rs,
            cs: b.cs,
        };
        // SAFETY: the tiles are disjoint, so tasks never write the same element.
        unsafe { serial(rows, k, cols, alpha, a_tile, b_tile, beta, c_ptr.get().add(r0 * ldc + c0), ldc) };
    });
}

/// The tile of C (rows, columns) one task computes. As many tasks as the
/// work allows (at least [`MIN_TASK_WORK`] each), at most twice the threads
/// (so they balance), laid out as the grid of row and column blocks whose
/// tasks pack the least: a task packs its rows of A and its columns of B,
/// so an r × c grid packs c copies of A and r of B. Few tasks make row
/// blocks (as many tasks as rows of blocks: B packed by each); 32 tasks at
/// large's shapes make an 8 × 4 grid, half the packing of 32 row blocks.
fn tiles(m: usize, k: usize, n: usize) -> (usize, usize) {
    let tasks = (m * n * k.max(1) / MIN_TASK_WORK).clamp(1, 2 * rayon::current_num_threads());
    if tasks == 1 {
        return (m, n);
    }
    // Ties go to more row blocks (rows of C are contiguous).
    let (r, c) = (1..=tasks)
        .rev()
        .map(|r| (r, tasks.div_ceil(r)))
        .min_by_key(|&(r, c)| c * m + r * n)
        .unwrap();
    (m.div_ceil(r).next_multiple_of(16).min(m), n.div_ceil(c).next_multiple_of(16).min(n))
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
    fn few_threads_split_rows_and_many_split_both_ways() {
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| tiles(1536, 192, 768))
        };
        // large's MLP (B·T × C → 4C): 4 tasks on 2 threads are row blocks;
        // 32 on 16 threads an 8 × 4 grid (B packed 8 times, not 32).
        assert_eq!(on(2), (384, 768));
        assert_eq!(on(16), (192, 192));
        // Too little work for a second task: one tile.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(16).build().unwrap();
        assert_eq!(pool.install(|| tiles(64, 32, 32)), (64, 32));
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
