//! The CPU backend's own f32 GEMM on x86-64 (AVX-512 or AVX2 with FMA): a
//! packed, BLIS-shaped product whose B is packed once and shared by every
//! thread, with wider micro-kernels than `matrixmultiply`'s (12×32 on
//! AVX-512, 6×16 on AVX2), and buffers kept per thread instead of allocated
//! per call. It computes every element of C with exactly the operations
//! `matrixmultiply` 0.3 does, so a step's numbers stay bit for bit what they
//! were (the shipped checkpoints still reproduce from their commands):
//!
//! - K is walked in blocks of [`KC`] = 256 (matrixmultiply's `S_KC`);
//! - in a block, `ab = fma(a_ik, b_kj, ab)` from `ab = +0`, k in order;
//! - the first block stores `α·ab` where β = 0 (C is not read), else
//!   `fma(α, ab, β·C)`; later blocks store `fma(α, ab, C)`.
//!
//! (matrixmultiply's edge tiles round `α·ab` once more before adding C; the
//! two agree wherever α = 1 or β = 0 in the first block, which is every call
//! the backend makes but attention's dQ and dK, whose shapes fill whole
//! tiles on both.) Elsewhere (wasm32, other CPUs, f64) the backend calls
//! `matrixmultiply` as before. `TINYGPT_CPU_GEMM=matrixmultiply` (or `avx2`)
//! picks a path by hand, for benchmarks and tests.

use rayon::prelude::*;
use std::cell::RefCell;

/// K block: matrixmultiply's `S_KC`, which fixes the order of the sums.
pub const KC: usize = 256;

/// Which GEMM the f32 products run on here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `matrixmultiply`'s own (no FMA here, not x86-64, or asked for).
    MatrixMultiply,
    /// This module with the 6×16 AVX2 + FMA micro-kernel.
    Avx2,
    /// This module with the 12×32 AVX-512 micro-kernel.
    Avx512,
}

impl Path {
    /// The name `tinygpt bench --gemm` prints for it, threaded.
    pub fn name(self) -> &'static str {
        match self {
            Path::MatrixMultiply => "matrixmultiply + rayon",
            Path::Avx2 => "packed AVX2 6×16 + rayon",
            Path::Avx512 => "packed AVX-512 12×32 + rayon",
        }
    }
}

/// The path this machine takes: the widest its CPU has, unless
/// `TINYGPT_CPU_GEMM` names a narrower one (`matrixmultiply`, `avx2`).
pub fn path() -> Path {
    static PATH: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| {
        let best = detect();
        match std::env::var("TINYGPT_CPU_GEMM").as_deref() {
            Ok("matrixmultiply") => Path::MatrixMultiply,
            Ok("avx2") if best != Path::MatrixMultiply => Path::Avx2,
            _ => best,
        }
    })
}

fn detect() -> Path {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return Path::Avx512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Path::Avx2;
        }
    }
    Path::MatrixMultiply
}

/// Strided read-only matrix: element (i, j) at `ptr + i·rs + j·cs`.
#[derive(Clone, Copy)]
pub struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}
unsafe impl Send for Mat {}
unsafe impl Sync for Mat {}

#[derive(Clone, Copy)]
struct Out(*mut f32);
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Rows of A packed at a time (a multiple of both kernels' MR): 96 × 256
/// floats, 96 KB, stay in L2 while B's panels pass.
const MC: usize = 96;

/// Packed B is held at most this many floats at once (64 MB); wider
/// products go in column chunks.
const MAX_PACKED_B: usize = 16 << 20;

thread_local! {
    /// This thread's packing buffers: B (packed by the calling thread) and A
    /// (packed by each task). A thread that finds one in use (a nested call)
    /// takes a fresh vector instead.
    static PACKED_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PACKED_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PARTIAL_SUMS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's buffer `key` grown to `len` floats.
fn with_buffer<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// `C (m×n, row stride ldc, columns contiguous) = α·A·B + β·C` on `path`
/// (not [`Path::MatrixMultiply`]), over rayon's threads when `parallel`.
///
/// # Safety
/// A (m×k) and B (k×n) must be readable through their strides, C writable
/// at `c + i·ldc + j` for i < m, j < n, and nothing else may touch C.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    path: Path,
    parallel: bool,
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat,
    b: Mat,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // C ← β·C, as matrixmultiply (β = 0 writes zeros without reading).
        for i in 0..m {
            for j in 0..n {
                let p = unsafe { c.add(i * ldc + j) };
                unsafe { *p = if beta == 0.0 { 0.0 } else { *p * beta } };
            }
        }
        return;
    }
    match path {
        Path::Avx512 => unsafe { driver::<Avx512>(parallel, m, k, n, alpha, a, b, beta, c, ldc) },
        Path::Avx2 => unsafe { driver::<Avx2>(parallel, m, k, n, alpha, a, b, beta, c, ldc) },
        Path::MatrixMultiply => unreachable!("sgemm on the matrixmultiply path"),
    }
}

/// A micro-kernel: an MR×NR tile of C from packed panels of A (MR rows, k
/// major) and B (NR columns, k major).
trait Kernel {
    const MR: usize;
    const NR: usize;
    /// [`pack_a`] and [`pack_b`] at this kernel's sizes.
    unsafe fn pack_a(kc: usize, rows: usize, a: Mat, i0: usize, k0: usize, out: *mut f32);
    unsafe fn pack_b(kc: usize, cols: usize, b: Mat, k0: usize, j0: usize, out: *mut f32);
    /// `kc` steps of the chain, from zero or from the sums at `from` (MR ×
    /// NR, row-major; not null); then the sums are kept at `to` (not null)
    /// for the chain's next steps, or stored to C by the rule of the
    /// module's doc with `beta` (the caller's in K's first block, else 1).
    /// `rows` × `cols` of the tile are in C.
    ///
    /// # Safety
    /// The panels hold `kc·MR` and `kc·NR` floats; C is writable there.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        kc: usize,
        a: *const f32,
        b: *const f32,
        from: *const f32,
        to: *mut f32,
        c: *mut f32,
        ldc: usize,
        alpha: f32,
        beta: f32,
        rows: usize,
        cols: usize,
    );
}

/// Steps of K per micro-kernel call: a K block's 256 are walked in two
/// calls, the sums kept between them, so that the B panel a call reads
/// (128 × 32 floats, 16 KB) stays in L1 while A's panels pass. The chain
/// is the same: an f32 stored and loaded back is the same f32.
const KS: usize = 128;

/// The store rule for one element (edge tiles, from the tile's sums).
#[inline(always)]
fn store(c: &mut f32, ab: f32, alpha: f32, beta: f32) {
    *c = if beta == 0.0 {
        alpha * ab
    } else {
        alpha.mul_add(ab, *c * beta)
    };
}

#[allow(clippy::too_many_arguments)]
unsafe fn driver<K: Kernel>(
    parallel: bool,
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat,
    b: Mat,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    // Columns per chunk so that the packed B stays under MAX_PACKED_B.
    let chunk = (MAX_PACKED_B / k).max(K::NR) / K::NR * K::NR;
    let mut j0 = 0;
    while j0 < n {
        let cols = chunk.min(n - j0);
        let b_part = Mat {
            ptr: b.ptr.wrapping_offset(j0 as isize * b.cs),
            ..b
        };
        unsafe { columns::<K>(parallel, m, k, cols, alpha, a, b_part, beta, c.add(j0), ldc) };
        j0 += cols;
    }
}

/// One chunk of columns: pack all of B (every K block), then the tasks.
#[allow(clippy::too_many_arguments)]
unsafe fn columns<K: Kernel>(
    parallel: bool,
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat,
    b: Mat,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    let panels = n.div_ceil(K::NR);
    // Packed B: for each K block, `panels` panels of kc × NR.
    let len = k * panels * K::NR;
    with_buffer(&PACKED_B, len, |packed_b| {
        let blocks = k.div_ceil(KC);
        let units: Vec<(usize, usize)> = (0..blocks)
            .flat_map(|kb| (0..panels).map(move |p| (kb, p)))
            .collect();
        let out = Out(packed_b.as_mut_ptr());
        let pack = |&(kb, p): &(usize, usize)| {
            let k0 = kb * KC;
            let kc = KC.min(k - k0);
            let at = k0 * panels * K::NR + p * kc * K::NR;
            let out = out;
            // SAFETY: each unit writes its own kc × NR run of the buffer.
            unsafe {
                K::pack_b(
                    kc,
                    K::NR.min(n - p * K::NR),
                    b,
                    k0,
                    p * K::NR,
                    out.0.add(at),
                )
            };
        };
        if parallel && units.len() > 1 {
            units.par_iter().for_each(pack);
        } else {
            units.iter().for_each(pack);
        }
        let packed_b: &[f32] = packed_b;

        let threads = if parallel {
            rayon::current_num_threads()
        } else {
            1
        };
        let (rows_per, panels_per) = grid(m.div_ceil(K::MR), panels, m * n * k, threads);
        let (rows_per, row_blocks) = (rows_per * K::MR, m.div_ceil(rows_per * K::MR));
        let col_blocks = panels.div_ceil(panels_per);
        let c_out = Out(c);
        let task = |t: usize| {
            let (rb, cb) = (t / col_blocks, t % col_blocks);
            let r0 = rb * rows_per;
            let rows = rows_per.min(m - r0);
            let p0 = cb * panels_per;
            let p1 = (p0 + panels_per).min(panels);
            let c_out = c_out;
            // SAFETY: tasks own disjoint tiles of C.
            unsafe {
                rows_of::<K>(
                    r0, rows, p0, p1, k, n, alpha, a, packed_b, panels, beta, c_out.0, ldc,
                )
            };
        };
        let tasks = row_blocks * col_blocks;
        if parallel && tasks > 1 {
            (0..tasks).into_par_iter().for_each(task);
        } else {
            (0..tasks).for_each(task);
        }
    });
}

/// The tasks' tile, in micro-rows and panels: the grid over `micro_rows` ×
/// `panels` whose slowest thread has the least to do (tasks in waves of
/// `threads`), at least [`MIN_TASK_WORK`] multiply-adds a task; ties go to
/// fewer tasks, then to fewer column blocks (each packs its rows of A).
fn grid(micro_rows: usize, panels: usize, work: usize, threads: usize) -> (usize, usize) {
    let most = (work / MIN_TASK_WORK).clamp(1, 4 * threads);
    let mut best = (usize::MAX, usize::MAX, 0, (micro_rows, panels));
    for row_blocks in 1..=most.min(micro_rows) {
        let rows_per = micro_rows.div_ceil(row_blocks);
        for col_blocks in 1..=(most / row_blocks).min(panels) {
            let panels_per = panels.div_ceil(col_blocks);
            let tasks = micro_rows.div_ceil(rows_per) * panels.div_ceil(panels_per);
            let cost = tasks.div_ceil(threads) * rows_per * panels_per;
            let col_blocks = panels.div_ceil(panels_per);
            if (cost, tasks, col_blocks) < (best.0, best.1, best.2) {
                best = (cost, tasks, col_blocks, (rows_per, panels_per));
            }
        }
    }
    best.3
}

/// Multiply-adds a task does at least: less costs more to schedule.
const MIN_TASK_WORK: usize = 96 * 1024;

/// One task: rows `r0..r0+rows` of C over B's panels `p0..p1`, every K block.
#[allow(clippy::too_many_arguments)]
unsafe fn rows_of<K: Kernel>(
    r0: usize,
    rows: usize,
    p0: usize,
    p1: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: Mat,
    packed_b: &[f32],
    panels: usize,
    beta: f32,
    c: *mut f32,
    ldc: usize,
) {
    let mc = MC.div_ceil(K::MR) * K::MR;
    let tile = K::MR * K::NR;
    with_buffer(&PACKED_A, mc * KC.min(k), |packed_a| {
        with_buffer(&PARTIAL_SUMS, (mc / K::MR) * (p1 - p0) * tile, |sums| {
            for (kb, k0) in (0..k).step_by(KC).enumerate() {
                let kc = KC.min(k - k0);
                let beta_here = if kb == 0 { beta } else { 1.0 };
                let b_block = &packed_b[k0 * panels * K::NR..];
                // A in blocks of MC rows (they stay in L2 while B's panels pass).
                for m0 in (r0..r0 + rows).step_by(mc) {
                    let m1 = (m0 + mc).min(r0 + rows);
                    let micro_rows = (m1 - m0).div_ceil(K::MR);
                    for i in 0..micro_rows {
                        let ri = m0 + i * K::MR;
                        unsafe {
                            K::pack_a(
                                kc,
                                K::MR.min(m1 - ri),
                                a,
                                ri,
                                k0,
                                packed_a.as_mut_ptr().add(i * K::MR * kc),
                            )
                        };
                    }
                    for ks0 in (0..kc).step_by(KS) {
                        let ks = KS.min(kc - ks0);
                        let (first, last) = (ks0 == 0, ks0 + ks == kc);
                        for p in p0..p1 {
                            let cols = K::NR.min(n - p * K::NR);
                            let bp = b_block[p * kc * K::NR + ks0 * K::NR..].as_ptr();
                            for i in 0..micro_rows {
                                let ri = m0 + i * K::MR;
                                let part = sums[((p - p0) * micro_rows + i) * tile..].as_mut_ptr();
                                unsafe {
                                    K::tile(
                                        ks,
                                        packed_a.as_ptr().add(i * K::MR * kc + ks0 * K::MR),
                                        bp,
                                        if first { std::ptr::null() } else { part },
                                        if last { std::ptr::null_mut() } else { part },
                                        c.add(ri * ldc + p * K::NR),
                                        ldc,
                                        alpha,
                                        beta_here,
                                        K::MR.min(m1 - ri),
                                        cols,
                                    )
                                };
                            }
                        }
                    }
                }
            }
        })
    });
}

/// Packs rows `k0..k0+kc` × columns `j0..j0+cols` of B into `NR`-wide rows
/// (k major), zero past `cols`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pack_b<const NR: usize>(
    kc: usize,
    cols: usize,
    b: Mat,
    k0: usize,
    j0: usize,
    out: *mut f32,
) {
    unsafe {
        pack::<NR>(
            kc,
            cols,
            b.ptr.offset(k0 as isize * b.rs + j0 as isize * b.cs),
            b.cs,
            b.rs,
            out,
        )
    }
}

/// Packs rows `i0..i0+rows` × columns `k0..k0+kc` of A into `MR`-tall
/// columns (k major), zero past `rows`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pack_a<const MR: usize>(
    kc: usize,
    rows: usize,
    a: Mat,
    i0: usize,
    k0: usize,
    out: *mut f32,
) {
    unsafe {
        pack::<MR>(
            kc,
            rows,
            a.ptr.offset(i0 as isize * a.rs + k0 as isize * a.cs),
            a.rs,
            a.cs,
            out,
        )
    }
}

/// `out[kk·W + w] = src[w·ws + kk·ks]` for w < `width` (zero to W), kk < kc.
#[inline(always)]
unsafe fn pack<const W: usize>(
    kc: usize,
    width: usize,
    src: *const f32,
    ws: isize,
    ks: isize,
    out: *mut f32,
) {
    unsafe {
        if width == W && ws == 1 {
            // W contiguous floats per step of k: fixed-size copies.
            for kk in 0..kc {
                let (s, d) = (src.offset(kk as isize * ks), out.add(kk * W));
                for w in 0..W {
                    *d.add(w) = *s.add(w);
                }
            }
        } else if width == W && ks == 1 {
            // W rows, each contiguous along k: read the W together.
            let rows: [*const f32; W] = std::array::from_fn(|w| src.offset(w as isize * ws));
            for kk in 0..kc {
                let d = out.add(kk * W);
                for (w, r) in rows.iter().enumerate() {
                    *d.add(w) = *r.add(kk);
                }
            }
        } else {
            for kk in 0..kc {
                let d = out.add(kk * W);
                for w in 0..W {
                    *d.add(w) = if w < width {
                        *src.offset(w as isize * ws + kk as isize * ks)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Writes an edge tile's sums (`ab`, MR × NR row-major) to C.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe fn store_edge(
    ab: &[f32],
    nr: usize,
    c: *mut f32,
    ldc: usize,
    alpha: f32,
    beta: f32,
    rows: usize,
    cols: usize,
) {
    for i in 0..rows {
        for j in 0..cols {
            store(
                unsafe { &mut *c.add(i * ldc + j) },
                ab[i * nr + j],
                alpha,
                beta,
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// 12 × 32 on AVX-512: 24 accumulators, two B vectors, one broadcast.
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Kernel for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;
    unsafe fn pack_a(kc: usize, rows: usize, a: Mat, i0: usize, k0: usize, out: *mut f32) {
        unsafe { pack_a::<12>(kc, rows, a, i0, k0, out) }
    }
    unsafe fn pack_b(kc: usize, cols: usize, b: Mat, k0: usize, j0: usize, out: *mut f32) {
        unsafe { pack_b::<32>(kc, cols, b, k0, j0, out) }
    }
    unsafe fn tile(
        kc: usize,
        a: *const f32,
        b: *const f32,
        from: *const f32,
        to: *mut f32,
        c: *mut f32,
        ldc: usize,
        alpha: f32,
        beta: f32,
        rows: usize,
        cols: usize,
    ) {
        unsafe { tile_avx512(kc, a, b, from, to, c, ldc, alpha, beta, rows, cols) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_avx512(
    kc: usize,
    a: *const f32,
    b: *const f32,
    from: *const f32,
    to: *mut f32,
    c: *mut f32,
    ldc: usize,
    alpha: f32,
    beta: f32,
    rows: usize,
    cols: usize,
) {
    const MR: usize = 12;
    const NR: usize = 32;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    if !from.is_null() {
        for (i, row) in acc.iter_mut().enumerate() {
            for (h, v) in row.iter_mut().enumerate() {
                *v = unsafe { _mm512_loadu_ps(from.add(i * NR + 16 * h)) };
            }
        }
    }
    for kk in 0..kc {
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_ps(b.add(kk * NR)),
                _mm512_loadu_ps(b.add(kk * NR + 16)),
            )
        };
        let ak = unsafe { a.add(kk * MR) };
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = _mm512_set1_ps(unsafe { *ak.add(i) });
            row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
            row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
        }
    }
    if !to.is_null() {
        for (i, row) in acc.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                unsafe { _mm512_storeu_ps(to.add(i * NR + 16 * h), v) };
            }
        }
        return;
    }
    let va = _mm512_set1_ps(alpha);
    if rows == MR && cols == NR {
        for (i, row) in acc.iter().enumerate() {
            for (h, &ab) in row.iter().enumerate() {
                let p = unsafe { c.add(i * ldc + 16 * h) };
                let v = if beta == 0.0 {
                    _mm512_mul_ps(va, ab)
                } else {
                    let cb = _mm512_mul_ps(unsafe { _mm512_loadu_ps(p) }, _mm512_set1_ps(beta));
                    _mm512_fmadd_ps(va, ab, cb)
                };
                unsafe { _mm512_storeu_ps(p, v) };
            }
        }
    } else {
        let mut ab = [0.0f32; MR * NR];
        for (i, row) in acc.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                unsafe { _mm512_storeu_ps(ab.as_mut_ptr().add(i * NR + 16 * h), v) };
            }
        }
        unsafe { store_edge(&ab, NR, c, ldc, alpha, beta, rows, cols) };
    }
}

/// 6 × 16 on AVX2 + FMA: 12 accumulators, two B vectors, one broadcast.
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Kernel for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
    unsafe fn pack_a(kc: usize, rows: usize, a: Mat, i0: usize, k0: usize, out: *mut f32) {
        unsafe { pack_a::<6>(kc, rows, a, i0, k0, out) }
    }
    unsafe fn pack_b(kc: usize, cols: usize, b: Mat, k0: usize, j0: usize, out: *mut f32) {
        unsafe { pack_b::<16>(kc, cols, b, k0, j0, out) }
    }
    unsafe fn tile(
        kc: usize,
        a: *const f32,
        b: *const f32,
        from: *const f32,
        to: *mut f32,
        c: *mut f32,
        ldc: usize,
        alpha: f32,
        beta: f32,
        rows: usize,
        cols: usize,
    ) {
        unsafe { tile_avx2(kc, a, b, from, to, c, ldc, alpha, beta, rows, cols) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_avx2(
    kc: usize,
    a: *const f32,
    b: *const f32,
    from: *const f32,
    to: *mut f32,
    c: *mut f32,
    ldc: usize,
    alpha: f32,
    beta: f32,
    rows: usize,
    cols: usize,
) {
    const MR: usize = 6;
    const NR: usize = 16;
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    if !from.is_null() {
        for (i, row) in acc.iter_mut().enumerate() {
            for (h, v) in row.iter_mut().enumerate() {
                *v = unsafe { _mm256_loadu_ps(from.add(i * NR + 8 * h)) };
            }
        }
    }
    for kk in 0..kc {
        let (b0, b1) = unsafe {
            (
                _mm256_loadu_ps(b.add(kk * NR)),
                _mm256_loadu_ps(b.add(kk * NR + 8)),
            )
        };
        let ak = unsafe { a.add(kk * MR) };
        for (i, row) in acc.iter_mut().enumerate() {
            let ai = _mm256_set1_ps(unsafe { *ak.add(i) });
            row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
            row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
        }
    }
    if !to.is_null() {
        for (i, row) in acc.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                unsafe { _mm256_storeu_ps(to.add(i * NR + 8 * h), v) };
            }
        }
        return;
    }
    let va = _mm256_set1_ps(alpha);
    if rows == MR && cols == NR {
        for (i, row) in acc.iter().enumerate() {
            for (h, &ab) in row.iter().enumerate() {
                let p = unsafe { c.add(i * ldc + 8 * h) };
                let v = if beta == 0.0 {
                    _mm256_mul_ps(va, ab)
                } else {
                    let cb = _mm256_mul_ps(unsafe { _mm256_loadu_ps(p) }, _mm256_set1_ps(beta));
                    _mm256_fmadd_ps(va, ab, cb)
                };
                unsafe { _mm256_storeu_ps(p, v) };
            }
        }
    } else {
        let mut ab = [0.0f32; MR * NR];
        for (i, row) in acc.iter().enumerate() {
            for (h, &v) in row.iter().enumerate() {
                unsafe { _mm256_storeu_ps(ab.as_mut_ptr().add(i * NR + 8 * h), v) };
            }
        }
        unsafe { store_edge(&ab, NR, c, ldc, alpha, beta, rows, cols) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Kernel for Avx512 {
    const MR: usize = 1;
    const NR: usize = 1;
    unsafe fn pack_a(kc: usize, rows: usize, a: Mat, i0: usize, k0: usize, out: *mut f32) {
        unsafe { pack_a::<1>(kc, rows, a, i0, k0, out) }
    }
    unsafe fn pack_b(kc: usize, cols: usize, b: Mat, k0: usize, j0: usize, out: *mut f32) {
        unsafe { pack_b::<1>(kc, cols, b, k0, j0, out) }
    }
    unsafe fn tile(
        _: usize,
        _: *const f32,
        _: *const f32,
        _: *const f32,
        _: *mut f32,
        _: *mut f32,
        _: usize,
        _: f32,
        _: f32,
        _: usize,
        _: usize,
    ) {
        unreachable!("no AVX-512 off x86-64")
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Kernel for Avx2 {
    const MR: usize = 1;
    const NR: usize = 1;
    unsafe fn pack_a(kc: usize, rows: usize, a: Mat, i0: usize, k0: usize, out: *mut f32) {
        unsafe { pack_a::<1>(kc, rows, a, i0, k0, out) }
    }
    unsafe fn pack_b(kc: usize, cols: usize, b: Mat, k0: usize, j0: usize, out: *mut f32) {
        unsafe { pack_b::<1>(kc, cols, b, k0, j0, out) }
    }
    unsafe fn tile(
        _: usize,
        _: *const f32,
        _: *const f32,
        _: *const f32,
        _: *mut f32,
        _: *mut f32,
        _: usize,
        _: f32,
        _: f32,
        _: usize,
        _: usize,
    ) {
        unreachable!("no AVX2 off x86-64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::rng::Rng;

    /// The rule of the module's doc, one element at a time.
    #[allow(clippy::too_many_arguments)]
    fn rule(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: Mat,
        b: Mat,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
    ) {
        let at = |x: Mat, i: usize, j: usize| unsafe {
            *x.ptr.offset(i as isize * x.rs + j as isize * x.cs)
        };
        for i in 0..m {
            for j in 0..n {
                let cij = &mut c[i * ldc + j];
                if k == 0 {
                    *cij = if beta == 0.0 { 0.0 } else { *cij * beta };
                }
                for (kb, k0) in (0..k).step_by(KC).enumerate() {
                    let mut ab = 0.0f32;
                    for kk in k0..(k0 + KC).min(k) {
                        ab = at(a, i, kk).mul_add(at(b, kk, j), ab);
                    }
                    store(cij, ab, alpha, if kb == 0 { beta } else { 1.0 });
                }
            }
        }
    }

    fn paths() -> Vec<Path> {
        let best = detect();
        [Path::Avx2, Path::Avx512]
            .into_iter()
            .filter(|&p| best == Path::Avx512 || (best == Path::Avx2 && p == Path::Avx2))
            .collect()
    }

    #[test]
    fn every_element_is_the_rule_and_matrixmultiplys_sums() {
        let paths = paths();
        if paths.is_empty() {
            eprintln!("skipped: this CPU has neither AVX2 with FMA nor AVX-512");
            return;
        }
        let mut rng = Rng::new(11);
        for &(m, k, n) in &[
            (1, 1, 1),
            (13, 7, 33),
            (12, 256, 32),
            (37, 257, 65),
            (96, 600, 70),
            (130, 40, 300),
            (5, 0, 4),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.normal() as f32).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.normal() as f32).collect();
            let c0: Vec<f32> = (0..m * (n + 3)).map(|_| rng.normal() as f32).collect();
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let am = if ta {
                    Mat {
                        ptr: a.as_ptr(),
                        rs: 1,
                        cs: m as isize,
                    }
                } else {
                    Mat {
                        ptr: a.as_ptr(),
                        rs: k as isize,
                        cs: 1,
                    }
                };
                let bm = if tb {
                    Mat {
                        ptr: b.as_ptr(),
                        rs: 1,
                        cs: k as isize,
                    }
                } else {
                    Mat {
                        ptr: b.as_ptr(),
                        rs: n as isize,
                        cs: 1,
                    }
                };
                for (alpha, beta) in [
                    (1.0f32, 0.0f32),
                    (1.0, 1.0),
                    (0.25, 0.0),
                    (0.3, 1.0),
                    (1.0, 0.5),
                ] {
                    let ldc = n + 3;
                    let mut want = c0.clone();
                    rule(m, k, n, alpha, am, bm, beta, &mut want, ldc);
                    if alpha == 1.0 || (beta == 0.0 && k <= KC) {
                        // Where matrixmultiply's edge tiles round as its
                        // whole ones, it is the rule.
                        let mut mm = c0.clone();
                        unsafe {
                            matrixmultiply::sgemm(
                                m,
                                k,
                                n,
                                alpha,
                                am.ptr,
                                am.rs,
                                am.cs,
                                bm.ptr,
                                bm.rs,
                                bm.cs,
                                beta,
                                mm.as_mut_ptr(),
                                ldc as isize,
                                1,
                            )
                        };
                        assert!(
                            mm.iter()
                                .zip(&want)
                                .all(|(x, y)| x.to_bits() == y.to_bits()),
                            "matrixmultiply is not the rule at ({m},{k},{n}) α={alpha} β={beta}"
                        );
                    }
                    for &path in &paths {
                        for parallel in [false, true] {
                            let mut got = c0.clone();
                            unsafe {
                                sgemm(
                                    path,
                                    parallel,
                                    m,
                                    k,
                                    n,
                                    alpha,
                                    am,
                                    bm,
                                    beta,
                                    got.as_mut_ptr(),
                                    ldc,
                                )
                            };
                            let bad = got
                                .iter()
                                .zip(&want)
                                .position(|(x, y)| x.to_bits() != y.to_bits());
                            assert!(
                                bad.is_none(),
                                "{path:?} parallel={parallel} ({m},{k},{n}) ta={ta} tb={tb} α={alpha} β={beta}: element {} is {} not {}",
                                bad.unwrap(),
                                got[bad.unwrap()],
                                want[bad.unwrap()]
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_tasks_fill_the_threads_in_whole_waves() {
        // large's forward on 16 threads: 16 tasks of 8 micro-rows × all 24 panels.
        assert_eq!(grid(128, 24, 1536 * 192 * 768, 16), (8, 24));
        // Its weight gradient (768 × 1536 × 192): 16 tasks, none idle in a second wave.
        let (r, p) = grid(64, 6, 768 * 1536 * 192, 16);
        assert_eq!(64usize.div_ceil(r) * 6usize.div_ceil(p), 16);
        // One thread: one task.
        assert_eq!(grid(128, 24, 1536 * 192 * 768, 1), (128, 24));
        // Too little work for a second task.
        assert_eq!(grid(2, 2, 24 * 64 * 64, 16), (2, 2));
    }

    #[test]
    fn a_nested_call_takes_its_own_buffers() {
        let Some(&path) = paths().first() else { return };
        let (m, k, n) = (40, 300, 50);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
        let (am, bm) = (
            Mat {
                ptr: a.as_ptr(),
                rs: k as isize,
                cs: 1,
            },
            Mat {
                ptr: b.as_ptr(),
                rs: n as isize,
                cs: 1,
            },
        );
        let mut want = vec![0.0f32; m * n];
        rule(m, k, n, 1.0, am, bm, 0.0, &mut want, n);
        // On a pool of one thread, whose only worker holds its buffers while
        // the products run (on that same worker).
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let results: Vec<Vec<f32>> = pool.install(|| {
            PACKED_B.with(|held| {
                let _held = held.borrow_mut();
                (0..4)
                    .into_par_iter()
                    .map(|_| {
                        let mut c = vec![0.0f32; m * n];
                        unsafe { sgemm(path, true, m, k, n, 1.0, am, bm, 0.0, c.as_mut_ptr(), n) };
                        c
                    })
                    .collect()
            })
        });
        for c in results {
            assert_eq!(c, want);
        }
    }
}
