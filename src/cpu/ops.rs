//! The CPU kernels: each op's forward and backward side by side, generic over
//! f32/f64. Outputs first, then inputs, then sizes. Backward kernels
//! *accumulate* (`+=`) into input gradients, as the program's backward expects.
//!
//! These are the numerical reference for every other backend, checked by
//! finite differences in `tests/gradcheck.rs`.

use super::float::Float;
use super::matmul::{View, gemm, gemm_serial, serial};
use crate::data::rng::dropout_keep;
use rayon::prelude::*;

pub const LN_EPS: f64 = 1e-5;

/// Rows per parallel task for row-wise kernels: enough work per task to pay
/// for scheduling, fixed by the shape alone (deterministic).
fn rows_per_task(width: usize) -> usize {
    (16 * 1024 / width.max(1)).max(1)
}

/// Sum of rows of `x (rows, width)` into `acc (width)`: fixed-size chunks,
/// partial sums added in order, so the result is deterministic.
fn column_sums_into<F: Float>(
    acc: &mut [F],
    rows: usize,
    width: usize,
    f: impl Fn(usize, &mut [F]) + Sync,
) {
    let per = rows_per_task(width) * 4;
    let partials: Vec<Vec<F>> = (0..rows.div_ceil(per))
        .into_par_iter()
        .map(|chunk| {
            let mut part = vec![F::zero(); width];
            for r in chunk * per..((chunk + 1) * per).min(rows) {
                f(r, &mut part);
            }
            part
        })
        .collect();
    for part in partials {
        for (a, p) in acc.iter_mut().zip(part) {
            *a += p;
        }
    }
}

// ---------------------------------------------------------------- embedding
// out (B,T,C) = wte[tokens] + wpe[t]; tokens (B,T), wte (V,C), wpe (T,C)

/// `wpe` is `None` without position embeddings (a lab): out = wte[tokens].
pub fn embedding_forward<F: Float>(
    out: &mut [F],
    tokens: &[u32],
    wte: &[F],
    wpe: Option<&[F]>,
    t: usize,
    c: usize,
) {
    out.par_chunks_mut(c).enumerate().for_each(|(row, o)| {
        let tok = tokens[row] as usize;
        o.copy_from_slice(&wte[tok * c..tok * c + c]);
        if let Some(wpe) = wpe {
            let pos = row % t;
            for (o, &p) in o.iter_mut().zip(&wpe[pos * c..pos * c + c]) {
                *o += p;
            }
        }
    });
}

/// `dwpe` is `None` without position embeddings (a lab).
pub fn embedding_backward<F: Float>(
    dwte: &mut [F],
    dwpe: Option<&mut [F]>,
    dout: &[F],
    tokens: &[u32],
    t: usize,
    c: usize,
) {
    let rows = tokens.len();
    // dwpe[pos] += Σ_b dout[b, pos]
    if let Some(dwpe) = dwpe {
        dwpe.par_chunks_mut(c).enumerate().for_each(|(pos, d)| {
            for row in (pos..rows).step_by(t) {
                for (d, &g) in d.iter_mut().zip(&dout[row * c..row * c + c]) {
                    *d += g;
                }
            }
        });
    }
    // dwte[v] += Σ_{rows with token v} dout[row], rows in order (deterministic).
    let mut rows_of: Vec<Vec<usize>> = vec![Vec::new(); dwte.len() / c];
    for (row, &tok) in tokens.iter().enumerate() {
        rows_of[tok as usize].push(row);
    }
    dwte.par_chunks_mut(c)
        .zip(rows_of.par_iter())
        .for_each(|(d, rows)| {
            for &row in rows {
                for (d, &g) in d.iter_mut().zip(&dout[row * c..row * c + c]) {
                    *d += g;
                }
            }
        });
}

// ---------------------------------------------------------------- layernorm
// out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N)

pub fn layernorm_forward<F: Float>(
    out: &mut [F],
    mean: &mut [F],
    rstd: &mut [F],
    inp: &[F],
    weight: &[F],
    bias: &[F],
    c: usize,
) {
    let per = rows_per_task(c);
    out.par_chunks_mut(per * c)
        .zip(mean.par_chunks_mut(per))
        .zip(rstd.par_chunks_mut(per))
        .enumerate()
        .for_each(|(chunk, ((out, mean), rstd))| {
            for (r, o) in out.chunks_mut(c).enumerate() {
                let row = chunk * per + r;
                let x = &inp[row * c..row * c + c];
                let m = x.iter().copied().sum::<F>() / F::c(c as f64);
                let var = x.iter().map(|&v| (v - m) * (v - m)).sum::<F>() / F::c(c as f64);
                let s = F::one() / (var + F::c(LN_EPS)).sqrt();
                for i in 0..c {
                    o[i] = (x[i] - m) * s * weight[i] + bias[i];
                }
                mean[r] = m;
                rstd[r] = s;
            }
        });
}

/// `params`: the gain's and bias's gradients, `None` when they are frozen
/// (a LoRA fine-tune), which skips their column sums.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward<F: Float>(
    dinp: &mut [F],
    params: Option<(&mut [F], &mut [F])>,
    dout: &[F],
    inp: &[F],
    weight: &[F],
    mean: &[F],
    rstd: &[F],
    c: usize,
) {
    let rows = mean.len();
    let inv_c = F::one() / F::c(c as f64);
    let per = rows_per_task(c);
    dinp.par_chunks_mut(per * c)
        .enumerate()
        .for_each(|(chunk, dinp)| {
            for (r, di) in dinp.chunks_mut(c).enumerate() {
                let row = chunk * per + r;
                let (x, g) = (&inp[row * c..row * c + c], &dout[row * c..row * c + c]);
                let (m, s) = (mean[row], rstd[row]);
                let mut dnorm_mean = F::zero();
                let mut dnorm_norm_mean = F::zero();
                for i in 0..c {
                    let norm = (x[i] - m) * s;
                    let dnorm = weight[i] * g[i];
                    dnorm_mean += dnorm;
                    dnorm_norm_mean += dnorm * norm;
                }
                dnorm_mean *= inv_c;
                dnorm_norm_mean *= inv_c;
                for i in 0..c {
                    let norm = (x[i] - m) * s;
                    let dnorm = weight[i] * g[i];
                    di[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
                }
            }
        });
    let Some((dweight, dbias)) = params else {
        return;
    };
    let mut dwb = vec![F::zero(); 2 * c];
    column_sums_into(&mut dwb, rows, 2 * c, |row, part| {
        let (x, g) = (&inp[row * c..row * c + c], &dout[row * c..row * c + c]);
        let (m, s) = (mean[row], rstd[row]);
        for i in 0..c {
            part[i] += g[i] * (x[i] - m) * s;
            part[c + i] += g[i];
        }
    });
    for i in 0..c {
        dweight[i] += dwb[i];
        dbias[i] += dwb[c + i];
    }
}

// ------------------------------------------------------------------- linear
// out (N,OUT) = inp (N,IN) · weightᵀ + bias; weight (OUT,IN)

pub fn linear_forward<F: Float>(
    out: &mut [F],
    inp: &[F],
    weight: &[F],
    bias: &[F],
    n_in: usize,
    n_out: usize,
) {
    let rows = inp.len() / n_in;
    out.par_chunks_mut(rows_per_task(n_out) * n_out)
        .for_each(|o| {
            for row in o.chunks_mut(n_out) {
                row.copy_from_slice(bias);
            }
        });
    gemm(
        rows,
        n_in,
        n_out,
        F::one(),
        View::rows(inp, n_in),
        View::transposed(weight, n_in),
        F::one(),
        out,
        n_out,
    );
}

/// `params`: the weight's and bias's gradients, `None` when they are frozen
/// (a LoRA fine-tune), which skips their matmul and sums. `write`: dinp is
/// written, not added to ([`crate::program::Program::writes_gradient`]).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward<F: Float>(
    dinp: &mut [F],
    params: Option<(&mut [F], &mut [F])>,
    dout: &[F],
    inp: &[F],
    weight: &[F],
    n_in: usize,
    n_out: usize,
    write: bool,
) {
    let rows = inp.len() / n_in;
    // dinp (N,IN) (+)= dout (N,OUT) · weight (OUT,IN)
    gemm(
        rows,
        n_out,
        n_in,
        F::one(),
        View::rows(dout, n_out),
        View::rows(weight, n_in),
        beta(write),
        dinp,
        n_in,
    );
    let Some((dweight, dbias)) = params else {
        return;
    };
    // dweight (OUT,IN) += doutᵀ (OUT,N) · inp (N,IN)
    gemm(
        n_out,
        rows,
        n_in,
        F::one(),
        View::transposed(dout, n_out),
        View::rows(inp, n_in),
        F::one(),
        dweight,
        n_in,
    );
    // dbias (OUT) += Σ_rows dout
    column_sums_into(dbias, rows, n_out, |row, part| {
        for (p, &g) in part.iter_mut().zip(&dout[row * n_out..row * n_out + n_out]) {
            *p += g;
        }
    });
}

// --------------------------------------------------------------------- lora
// mid (N,R) = inp (N,IN) · Aᵀ; out (N,OUT) = base + scale · mid · Bᵀ
// A (R,IN), B (OUT,R)

/// The sizes of a LoRA update: rank and the adapted linear's widths.
#[derive(Clone, Copy, Debug)]
pub struct LowRankDims {
    pub rank: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scale: f32,
}

pub fn lowrank_forward<F: Float>(
    mid: &mut [F],
    out: &mut [F],
    inp: &[F],
    lora_a: &[F],
    lora_b: &[F],
    base: &[F],
    d: LowRankDims,
) {
    let rows = inp.len() / d.n_in;
    // mid (N,R) = inp (N,IN) · Aᵀ (IN,R)
    gemm(
        rows,
        d.n_in,
        d.rank,
        F::one(),
        View::rows(inp, d.n_in),
        View::transposed(lora_a, d.n_in),
        F::zero(),
        mid,
        d.rank,
    );
    // out (N,OUT) = base + scale · mid (N,R) · Bᵀ (R,OUT)
    out.copy_from_slice(base);
    gemm(
        rows,
        d.rank,
        d.n_out,
        F::c(d.scale as f64),
        View::rows(mid, d.rank),
        View::transposed(lora_b, d.rank),
        F::one(),
        out,
        d.n_out,
    );
}

/// Accumulates the gradients of a LoRA update's inputs; `dmid` (the
/// gradient of `mid`, which nothing else reads) is overwritten.
#[allow(clippy::too_many_arguments)]
pub fn lowrank_backward<F: Float>(
    dinp: &mut [F],
    dlora_a: &mut [F],
    dlora_b: &mut [F],
    dbase: &mut [F],
    dmid: &mut [F],
    dout: &[F],
    inp: &[F],
    lora_a: &[F],
    lora_b: &[F],
    mid: &[F],
    d: LowRankDims,
) {
    let rows = inp.len() / d.n_in;
    let scale = F::c(d.scale as f64);
    // dbase += dout (the frozen linear's output passes straight through)
    accumulate(dbase, dout, false);
    // dB (OUT,R) += scale · doutᵀ (OUT,N) · mid (N,R)
    gemm(
        d.n_out,
        rows,
        d.rank,
        scale,
        View::transposed(dout, d.n_out),
        View::rows(mid, d.rank),
        F::one(),
        dlora_b,
        d.rank,
    );
    // dmid (N,R) = scale · dout (N,OUT) · B (OUT,R)
    gemm(
        rows,
        d.n_out,
        d.rank,
        scale,
        View::rows(dout, d.n_out),
        View::rows(lora_b, d.rank),
        F::zero(),
        dmid,
        d.rank,
    );
    // dA (R,IN) += dmidᵀ (R,N) · inp (N,IN)
    gemm(
        d.rank,
        rows,
        d.n_in,
        F::one(),
        View::transposed(dmid, d.rank),
        View::rows(inp, d.n_in),
        F::one(),
        dlora_a,
        d.n_in,
    );
    // dinp (N,IN) += dmid (N,R) · A (R,IN)
    gemm(
        rows,
        d.rank,
        d.n_in,
        F::one(),
        View::rows(dmid, d.rank),
        View::rows(lora_a, d.n_in),
        F::one(),
        dinp,
        d.n_in,
    );
}

// -------------------------------------------------------------------- gelu
// out = 0.5·x·(1 + erf(x/√2))

pub fn gelu_forward<F: Float>(out: &mut [F], inp: &[F]) {
    let inv_sqrt2 = F::c(std::f64::consts::FRAC_1_SQRT_2);
    let half = F::c(0.5);
    out.par_chunks_mut(16 * 1024)
        .zip(inp.par_chunks(16 * 1024))
        .for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = half * x * (F::one() + (x * inv_sqrt2).erf());
            }
        });
}

/// `write`: dinp is written, not added to.
pub fn gelu_backward<F: Float>(dinp: &mut [F], dout: &[F], inp: &[F], write: bool) {
    let inv_sqrt2 = F::c(std::f64::consts::FRAC_1_SQRT_2);
    let inv_sqrt_2pi = F::c(1.0 / (2.0 * std::f64::consts::PI).sqrt());
    let half = F::c(0.5);
    dinp.par_chunks_mut(16 * 1024)
        .zip(dout.par_chunks(16 * 1024))
        .zip(inp.par_chunks(16 * 1024))
        .for_each(|((d, g), x)| {
            for ((d, &g), &x) in d.iter_mut().zip(g).zip(x) {
                let cdf = half * (F::one() + (x * inv_sqrt2).erf());
                let pdf = (-half * x * x).exp_fast() * inv_sqrt_2pi;
                store(d, g * (cdf + x * pdf), write);
            }
        });
}

// --------------------------------------------------------- residual, dropout

pub fn residual_forward<F: Float>(out: &mut [F], a: &[F], b: &[F]) {
    out.par_chunks_mut(16 * 1024)
        .enumerate()
        .for_each(|(chunk, o)| {
            let base = chunk * 16 * 1024;
            for (i, o) in o.iter_mut().enumerate() {
                *o = a[base + i] + b[base + i];
            }
        });
}

/// `d += g` elementwise (the backward of a residual, for each input), or
/// `d = g` where `write`.
pub fn accumulate<F: Float>(d: &mut [F], g: &[F], write: bool) {
    if write {
        d.par_chunks_mut(16 * 1024)
            .zip(g.par_chunks(16 * 1024))
            .for_each(|(d, g)| d.copy_from_slice(g));
        return;
    }
    d.par_chunks_mut(16 * 1024)
        .zip(g.par_chunks(16 * 1024))
        .for_each(|(d, g)| {
            for (d, &g) in d.iter_mut().zip(g) {
                *d += g;
            }
        });
}

/// A backward's result into a gradient: written where `write` (its first
/// writer), else added.
#[inline(always)]
fn store<F: Float>(d: &mut F, value: F, write: bool) {
    if write {
        *d = value;
    } else {
        *d += value;
    }
}

/// The GEMM's β for a gradient: 0 where it is written, 1 where added to.
fn beta<F: Float>(write: bool) -> F {
    if write { F::zero() } else { F::one() }
}

/// Inverted dropout's multiplier for element `i`: 0 or 1/(1-p).
#[inline]
pub fn dropout_scale<F: Float>(seed: u32, stream: u32, i: usize, p: f32) -> F {
    if dropout_keep(seed, stream, i as u32, p) {
        F::one() / (F::one() - F::c(p as f64))
    } else {
        F::zero()
    }
}

pub fn dropout_forward<F: Float>(
    out: &mut [F],
    inp: &[F],
    p: f32,
    seed: u32,
    stream: u32,
    training: bool,
) {
    out.par_chunks_mut(16 * 1024)
        .enumerate()
        .for_each(|(chunk, o)| {
            let base = chunk * 16 * 1024;
            for (i, o) in o.iter_mut().enumerate() {
                let x = inp[base + i];
                *o = if training {
                    x * dropout_scale::<F>(seed, stream, base + i, p)
                } else {
                    x
                };
            }
        });
}

/// `write`: dinp is written, not added to.
pub fn dropout_backward<F: Float>(dinp: &mut [F], dout: &[F], p: f32, seed: u32, stream: u32, write: bool) {
    dinp.par_chunks_mut(16 * 1024)
        .enumerate()
        .for_each(|(chunk, d)| {
            let base = chunk * 16 * 1024;
            for (i, d) in d.iter_mut().enumerate() {
                store(d, dout[base + i] * dropout_scale::<F>(seed, stream, base + i, p), write);
            }
        });
}

// ---------------------------------------------------------------- attention
// qkv (B,T,3C) -> out (B,T,C), lse (B,H,T). Per (b, h): S = q·kᵀ/√D (causal
// unless the lab turns the mask off: `AttnDims::causal`),
// P = softmax(S) = exp(S - lse), out = dropout(P)·v. The backward recomputes P
// from lse, as FlashAttention-2 does; no T×T tensor outlives one (b, h).

/// Dropout index of attention weight (b, h, i, j): unique per element.
#[inline]
fn att_index(bh: usize, i: usize, j: usize, t: usize) -> usize {
    (bh * t + i) * t + j
}

pub struct AttnDims {
    pub b: usize,
    pub t: usize,
    pub c: usize,
    pub h: usize,
    /// The causal mask (false only in the lab without it).
    pub causal: bool,
}

impl AttnDims {
    /// How many keys query `i` sees: 0..=i under the causal mask, all T without.
    #[inline]
    fn keys(&self, i: usize) -> usize {
        if self.causal { i + 1 } else { self.t }
    }
    fn d(&self) -> usize {
        self.c / self.h
    }
    /// Views of q, k, v for (b, h) inside qkv: (T, D) each, row stride 3C.
    fn qkv_views<'a, F>(&self, qkv: &'a [F], b: usize, h: usize) -> [View<'a, F>; 3] {
        let (t, c, d) = (self.t, self.c, self.d());
        let base = b * t * 3 * c + h * d;
        [0, c, 2 * c].map(|off| View {
            data: &qkv[base + off..],
            rs: 3 * c,
            cs: 1,
        })
    }
}

/// Computes the probability matrix P (T×T, zero above the diagonal when causal) of
/// (b, h) into `p`; when `lse` is given it is filled, else P is recomputed
/// from the `saved_lse`.
fn attention_probs<F: Float>(
    p: &mut [F],
    dims: &AttnDims,
    qkv: &[F],
    b: usize,
    h: usize,
    lse: Option<&mut [F]>,
    saved_lse: Option<&[F]>,
) {
    let t = dims.t;
    let scale = F::one() / F::c(dims.d() as f64).sqrt();
    let [q, k, _] = dims.qkv_views(qkv, b, h);
    gemm_serial(
        t,
        dims.d(),
        t,
        scale,
        q,
        View {
            data: k.data,
            rs: 1,
            cs: k.rs,
        },
        F::zero(),
        p,
        t,
    );
    let mut lse = lse;
    for i in 0..t {
        let row = &mut p[i * t..i * t + t];
        let seen = dims.keys(i);
        let l = match saved_lse {
            Some(s) => s[i],
            None => {
                let m = row[..seen].iter().copied().fold(F::neg_infinity(), F::max);
                let sum: F = row[..seen].iter().map(|&s| (s - m).exp()).sum();
                m + sum.ln()
            }
        };
        for s in row[..seen].iter_mut() {
            *s = (*s - l).exp();
        }
        for s in row[seen..].iter_mut() {
            *s = F::zero();
        }
        if let Some(lse) = lse.as_deref_mut() {
            lse[i] = l;
        }
    }
}

/// The attention weights of batch row `row`, positions `0..n`, recomputed
/// from q, k and the saved log-sum-exp exactly as the backward pass does
/// (the same [`attention_probs`]): P (H, n, n), zero above the diagonal when causal.
/// qkv (B,T,3C), lse (B,H,T) -> probs (H,n,n) (the first H·n·n values).
pub fn attention_probs_window<F: Float>(
    probs: &mut [F],
    qkv: &[F],
    lse: &[F],
    dims: &AttnDims,
    row: usize,
    n: usize,
) {
    let (t, h) = (dims.t, dims.h);
    assert!(row < dims.b && n <= t && probs.len() >= h * n * n);
    probs[..h * n * n]
        .par_chunks_mut(n * n)
        .enumerate()
        .for_each_init(
            || vec![F::zero(); t * t],
            |p, (hh, out)| {
                let bh = row * h + hh;
                attention_probs(p, dims, qkv, row, hh, None, Some(&lse[bh * t..bh * t + t]));
                for i in 0..n {
                    out[i * n..i * n + n].copy_from_slice(&p[i * t..i * t + n]);
                }
            },
        );
}

/// A raw pointer that may cross threads: the attention kernels give each
/// (b, h) task a disjoint strided region of one output tensor.
#[derive(Clone, Copy)]
struct SharedMut<F>(*mut F);
unsafe impl<F> Send for SharedMut<F> {}
unsafe impl<F> Sync for SharedMut<F> {}
impl<F> SharedMut<F> {
    fn at(self, offset: usize) -> *mut F {
        unsafe { self.0.add(offset) }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn attention_forward<F: Float>(
    out: &mut [F],
    lse: &mut [F],
    qkv: &[F],
    dims: &AttnDims,
    p_drop: f32,
    seed: u32,
    stream: u32,
    training: bool,
) {
    let (t, c, h, d) = (dims.t, dims.c, dims.h, dims.d());
    assert!(
        out.len() >= dims.b * t * c
            && lse.len() >= dims.b * h * t
            && qkv.len() >= dims.b * t * 3 * c
    );
    let drop = training && p_drop > 0.0;
    let out_ptr = SharedMut(out.as_mut_ptr());
    // One task per (b, h); each owns lse[b, h, :] and the columns h·D.. of out[b].
    lse.par_chunks_mut(t).enumerate().for_each_init(
        || vec![F::zero(); t * t],
        |p, (bh, lse_bh)| {
            let (b, hh) = (bh / h, bh % h);
            attention_probs(p, dims, qkv, b, hh, Some(lse_bh), None);
            if drop {
                for i in 0..t {
                    for j in 0..dims.keys(i) {
                        p[i * t + j] *=
                            dropout_scale::<F>(seed, stream, att_index(bh, i, j, t), p_drop);
                    }
                }
            }
            let [_, _, v] = dims.qkv_views(qkv, b, hh);
            // out[b, :, hh·D..] (T,D) = P (T,T) · v (T,D)
            // SAFETY: in bounds (asserted above) and disjoint between tasks.
            unsafe {
                serial(
                    t,
                    t,
                    d,
                    F::one(),
                    View::rows(p, t),
                    v,
                    F::zero(),
                    out_ptr.at(b * t * c + hh * d),
                    c,
                )
            };
        },
    );
}

#[allow(clippy::too_many_arguments)]
pub fn attention_backward<F: Float>(
    dqkv: &mut [F],
    dout: &[F],
    qkv: &[F],
    lse: &[F],
    dims: &AttnDims,
    p_drop: f32,
    seed: u32,
    stream: u32,
) {
    let (t, c, h, d) = (dims.t, dims.c, dims.h, dims.d());
    assert!(
        dqkv.len() >= dims.b * t * 3 * c
            && dout.len() >= dims.b * t * c
            && lse.len() >= dims.b * h * t
    );
    let scale = F::one() / F::c(d as f64).sqrt();
    let drop = p_drop > 0.0;
    let dqkv_ptr = SharedMut(dqkv.as_mut_ptr());
    // One task per (b, h); each owns the q, k and v columns of head h in dqkv[b].
    (0..dims.b * h).into_par_iter().for_each_init(
        || {
            (
                vec![F::zero(); t * t],
                vec![F::zero(); t * t],
                vec![F::zero(); t * t],
                vec![F::one(); t * t],
            )
        },
        |(p, pd, dp, mask), bh| {
            let (b, hh) = (bh / h, bh % h);
            attention_probs(p, dims, qkv, b, hh, None, Some(&lse[bh * t..bh * t + t]));
            let [q, k, v] = dims.qkv_views(qkv, b, hh);
            let dout_bh = View {
                data: &dout[b * t * c + hh * d..],
                rs: c,
                cs: 1,
            };
            // Pd = P ∘ M (the dropped-out weights the forward actually used)
            for i in 0..t {
                for j in 0..t {
                    if drop && j < dims.keys(i) {
                        mask[i * t + j] =
                            dropout_scale::<F>(seed, stream, att_index(bh, i, j, t), p_drop);
                    }
                    pd[i * t + j] = p[i * t + j] * mask[i * t + j];
                }
            }
            let base = b * t * 3 * c;
            let (dq, dk, dv) = (base + hh * d, base + c + hh * d, base + 2 * c + hh * d);
            // SAFETY (all three writes below): in bounds (asserted above) and
            // disjoint between tasks.
            // dv (T,D) += Pdᵀ (T,T) · dout (T,D)
            unsafe {
                serial(
                    t,
                    t,
                    d,
                    F::one(),
                    View::transposed(pd, t),
                    dout_bh,
                    F::one(),
                    dqkv_ptr.at(dv),
                    3 * c,
                )
            };
            // dPd (T,T) = dout (T,D) · vᵀ (D,T)
            gemm_serial(
                t,
                d,
                t,
                F::one(),
                dout_bh,
                View {
                    data: v.data,
                    rs: 1,
                    cs: v.rs,
                },
                F::zero(),
                dp,
                t,
            );
            // dS = P ∘ (dP − rowsum(P ∘ dP)), dP = dPd ∘ M
            for i in 0..t {
                let seen = dims.keys(i);
                let mut dsum = F::zero();
                for j in 0..seen {
                    let dpij = dp[i * t + j] * mask[i * t + j];
                    dp[i * t + j] = dpij;
                    dsum += p[i * t + j] * dpij;
                }
                for j in 0..seen {
                    dp[i * t + j] = p[i * t + j] * (dp[i * t + j] - dsum);
                }
                for j in seen..t {
                    dp[i * t + j] = F::zero();
                }
            }
            // dq (T,D) += scale · dS (T,T) · k (T,D)
            unsafe {
                serial(
                    t,
                    t,
                    d,
                    scale,
                    View::rows(dp, t),
                    k,
                    F::one(),
                    dqkv_ptr.at(dq),
                    3 * c,
                )
            };
            // dk (T,D) += scale · dSᵀ (T,T) · q (T,D)
            unsafe {
                serial(
                    t,
                    t,
                    d,
                    scale,
                    View::transposed(dp, t),
                    q,
                    F::one(),
                    dqkv_ptr.at(dk),
                    3 * c,
                )
            };
        },
    );
}

// ------------------------------------------------------ tied head, softmax CE
// logits (N,V) = inp (N,C) · wteᵀ; losses (N) = lse(logits) − logits[target]

pub fn tied_head_forward<F: Float>(logits: &mut [F], inp: &[F], wte: &[F], c: usize, v: usize) {
    let rows = inp.len() / c;
    gemm(
        rows,
        c,
        v,
        F::one(),
        View::rows(inp, c),
        View::transposed(wte, c),
        F::zero(),
        logits,
        v,
    );
}

/// `dwte`: `None` when the embedding is frozen (a LoRA fine-tune). `write`:
/// dinp is written, not added to.
#[allow(clippy::too_many_arguments)]
pub fn tied_head_backward<F: Float>(
    dinp: &mut [F],
    dwte: Option<&mut [F]>,
    dlogits: &[F],
    inp: &[F],
    wte: &[F],
    c: usize,
    v: usize,
    write: bool,
) {
    let rows = inp.len() / c;
    // dinp (N,C) (+)= dlogits (N,V) · wte (V,C)
    gemm(
        rows,
        v,
        c,
        F::one(),
        View::rows(dlogits, v),
        View::rows(wte, c),
        beta(write),
        dinp,
        c,
    );
    let Some(dwte) = dwte else {
        return;
    };
    // dwte (V,C) += dlogitsᵀ (V,N) · inp (N,C)
    gemm(
        v,
        rows,
        c,
        F::one(),
        View::transposed(dlogits, v),
        View::rows(inp, c),
        F::one(),
        dwte,
        c,
    );
}

fn row_lse<F: Float>(row: &[F]) -> F {
    let m = row.iter().copied().fold(F::neg_infinity(), F::max);
    m + row.iter().map(|&x| (x - m).exp()).sum::<F>().ln()
}

pub fn cross_entropy_forward<F: Float>(losses: &mut [F], logits: &[F], targets: &[u32], v: usize) {
    losses.par_iter_mut().enumerate().for_each(|(row, loss)| {
        let l = &logits[row * v..row * v + v];
        *loss = row_lse(l) - l[targets[row] as usize];
    });
}

/// dlogits = (softmax(logits) − onehot(target)) · dloss, with dloss = 1/N for the mean.
pub fn cross_entropy_backward<F: Float>(
    dlogits: &mut [F],
    logits: &[F],
    targets: &[u32],
    v: usize,
) {
    let rows = targets.len();
    let dloss = F::one() / F::c(rows as f64);
    dlogits.par_chunks_mut(v).enumerate().for_each(|(row, d)| {
        let l = &logits[row * v..row * v + v];
        let lse = row_lse(l);
        for (j, d) in d.iter_mut().enumerate() {
            let p = (l[j] - lse).exp();
            let y = if j == targets[row] as usize {
                F::one()
            } else {
                F::zero()
            };
            *d += (p - y) * dloss;
        }
    });
}

// --------------------------------------------------------------------- AdamW

/// The hyperparameters of one AdamW update.
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1-based step count, for bias correction.
    pub t: u64,
}

/// PyTorch's AdamW: decoupled decay `p -= lr·wd·p`, then the Adam update with
/// bias-corrected moments.
pub fn adamw_update<F: Float>(
    param: &mut [F],
    m: &mut [F],
    v: &mut [F],
    grad: &[F],
    h: AdamW,
    decay: bool,
) {
    param
        .par_chunks_mut(ADAMW_CHUNK)
        .zip(m.par_chunks_mut(ADAMW_CHUNK))
        .zip(v.par_chunks_mut(ADAMW_CHUNK))
        .zip(grad.par_chunks(ADAMW_CHUNK))
        .for_each(|(((p, m), v), g)| adamw_chunk(p, m, v, g, h, decay));
}

/// Elements per parallel task of AdamW (and, four times it, of zeroing the
/// gradients).
pub const ADAMW_CHUNK: usize = 16 * 1024;

/// [`adamw_update`] on one run of elements, serially: the CPU backend runs
/// every parameter's runs in one parallel pass.
pub fn adamw_chunk<F: Float>(p: &mut [F], m: &mut [F], v: &mut [F], g: &[F], h: AdamW, decay: bool) {
    let (b1, b2) = (F::c(h.beta1 as f64), F::c(h.beta2 as f64));
    let bc1 = F::one() - F::c((h.beta1 as f64).powi(h.t as i32));
    let bc2 = F::one() - F::c((h.beta2 as f64).powi(h.t as i32));
    let lr = F::c(h.lr as f64);
    let eps = F::c(h.eps as f64);
    let shrink = if decay {
        F::one() - lr * F::c(h.weight_decay as f64)
    } else {
        F::one()
    };
    for i in 0..p.len() {
        m[i] = b1 * m[i] + (F::one() - b1) * g[i];
        v[i] = b2 * v[i] + (F::one() - b2) * g[i] * g[i];
        let mhat = m[i] / bc1;
        let vhat = v[i] / bc2;
        p[i] = p[i] * shrink - lr * mhat / (vhat.sqrt() + eps);
    }
}
