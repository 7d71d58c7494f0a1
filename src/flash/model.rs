//! The CPU model of attention.wgsl's tiling: the same tiles, the same loops
//! in the same order, the same online softmax, in f32, writing the records
//! the traced kernels write. The CPU backend's trace (and the browser's
//! without WebGPU) comes from here.

use super::{
    BLOCK_A, BLOCK_B, FlashRequest, NEG_FLT_MAX, Parts, Pass, ROW_STRIDE, ROWS, attention_tensors,
    record_at, entries_to_attention_backward, tiles,
};
use crate::backend::{Backend, BackendError};
use super::ATTENTION_TILE;
use crate::program::TensorId;

/// The CPU's trace: the program's own attention (the CPU backend's), and the
/// CPU model of the kernels' tiling ([`model_head`]) for the chosen head, in
/// the flat layout of [`Parts`]. Any backend can run it.
pub fn cpu_model<B: Backend + ?Sized>(
    backend: &mut B,
    request: &FlashRequest,
) -> Result<Vec<f32>, BackendError> {
    let entries = entries_to_attention_backward(backend.program(), request)
        .map_err(BackendError::BadProbe)?;
    backend.load_step(&request.batch, None);
    backend.run_entries(entries);
    let program = backend.program().clone();
    let cfg = &program.config;
    let (t, c, h) = (cfg.ctx, cfg.d_model, cfg.n_head);
    let (_, [qkv, out, lse]) = attention_tensors(&program, request.layer).expect("checked");
    let grad = |id: TensorId| {
        program.tensors[id]
            .grad
            .expect("activations have gradients")
    };
    let mut read = |id: TensorId| backend.read(&program.tensors[id].name);
    let row = request.row;
    let qkv_row = read(qkv)?[row * t * 3 * c..(row + 1) * t * 3 * c].to_vec();
    let out_row = read(out)?[row * t * c..(row + 1) * t * c].to_vec();
    let lse_row = read(lse)?[row * h * t..(row + 1) * h * t].to_vec();
    let dout_row = read(grad(out))?[row * t * c..(row + 1) * t * c].to_vec();
    let dqkv_row = read(grad(qkv))?[row * t * 3 * c..(row + 1) * t * 3 * c].to_vec();

    let parts = Parts::new(cfg);
    let mut flat = vec![0.0f32; parts.len];
    flat[parts.trace.start] = request.head as f32;
    let dims = HeadDims {
        t,
        c,
        d: c / h,
        head: request.head,
    };
    let mut out_model = out_row.clone();
    let mut lse_model = lse_row.clone();
    let mut dqkv_model = dqkv_row.clone();
    // The traced head's values replace the CPU backend's own.
    let model = model_head(&dims, &qkv_row, &dout_row, &mut flat[parts.trace.clone()]);
    for i in 0..t {
        for d in 0..dims.d {
            let o = i * c + dims.head * dims.d + d;
            out_model[o] = model.o[i * dims.d + d];
            let q = i * 3 * c + dims.head * dims.d + d;
            dqkv_model[q] = model.dq[i * dims.d + d];
            dqkv_model[q + c] = model.dk[i * dims.d + d];
            dqkv_model[q + 2 * c] = model.dv[i * dims.d + d];
        }
        lse_model[dims.head * t + i] = model.lse[i];
    }
    for (range, values) in [
        (parts.qkv, &qkv_row),
        (parts.dout, &dout_row),
        (parts.ref_out, &out_row),
        (parts.ref_lse, &lse_row),
        (parts.ref_dqkv, &dqkv_row),
        (parts.out, &out_model),
        (parts.lse, &lse_model),
        (parts.dqkv, &dqkv_model),
    ] {
        flat[range].copy_from_slice(values);
    }
    Ok(flat)
}

/// Sizes of one head in a row: T, C = H·D, D, and which head.
#[derive(Clone, Copy, Debug)]
pub struct HeadDims {
    pub t: usize,
    pub c: usize,
    pub d: usize,
    pub head: usize,
}

impl HeadDims {
    fn q(&self, qkv: &[f32], i: usize, d: usize) -> f32 {
        qkv[i * 3 * self.c + self.head * self.d + d]
    }
    fn k(&self, qkv: &[f32], j: usize, d: usize) -> f32 {
        qkv[i3(self, j) + self.c + d]
    }
    fn v(&self, qkv: &[f32], j: usize, d: usize) -> f32 {
        qkv[i3(self, j) + 2 * self.c + d]
    }
    fn y(&self, y: &[f32], i: usize, d: usize) -> f32 {
        y[i * self.c + self.head * self.d + d]
    }
}

fn i3(dims: &HeadDims, i: usize) -> usize {
    i * 3 * dims.c + dims.head * dims.d
}

/// What the CPU model of the kernels computes for one head: (T, D) tensors
/// and the (T) log-sum-exp.
pub struct HeadOutputs {
    pub o: Vec<f32>,
    pub lse: Vec<f32>,
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
}

/// The CPU model of attention.wgsl for one head, in f32: the same tiles,
/// the same loops in the same order, the same online softmax; it writes the
/// records the traced kernels write into `trace` (laid out as the GPU's).
/// (Evaluation mode: no dropout, as every trace.)
pub fn model_head(dims: &HeadDims, qkv: &[f32], dout: &[f32], trace: &mut [f32]) -> HeadOutputs {
    let (t, d) = (dims.t, dims.d);
    let tile = ATTENTION_TILE;
    let nt = tiles(t);
    let scale = 1.0 / (d as f32).sqrt();
    let mut o_out = vec![0.0f32; t * d];
    let mut lse = vec![0.0f32; t];
    let score = |i: usize, j: usize| -> f32 {
        let mut acc = 0.0f32;
        for dd in 0..d {
            acc += dims.q(qkv, i, dd) * dims.k(qkv, j, dd);
        }
        acc
    };
    // Forward: a query tile at a time (one workgroup), key blocks up to the diagonal.
    for qt in 0..nt {
        let q0 = qt * tile;
        let last = (q0 + tile).min(t);
        let mut m = vec![NEG_FLT_MAX; tile];
        let mut l = vec![0.0f32; tile];
        let mut o = vec![0.0f32; tile * d];
        let visited = last.div_ceil(tile);
        for kb in 0..visited {
            let j0 = kb * tile;
            let rec = record_at(nt, Pass::Forward, qt, kb);
            header(trace, rec, 1.0, qt, kb, kb);
            for r in 0..tile {
                let i = q0 + r;
                let valid = i < t;
                let mut s_row = [NEG_FLT_MAX; ATTENTION_TILE];
                for (jj, s) in s_row.iter_mut().enumerate() {
                    let j = j0 + jj;
                    if valid && j <= i {
                        *s = score(i, j) * scale;
                    }
                }
                trace[rec + BLOCK_A + r * tile..rec + BLOCK_A + r * tile + tile]
                    .copy_from_slice(&s_row);
                if !valid {
                    continue;
                }
                let mut m_tile = m[r];
                for (jj, &s) in s_row.iter().enumerate() {
                    if j0 + jj <= i {
                        m_tile = m_tile.max(s);
                    }
                }
                let alpha = (m[r] - m_tile).exp();
                let stats = rec + ROWS + ROW_STRIDE * r;
                trace[stats] = m[r];
                trace[stats + 1] = m_tile;
                trace[stats + 2] = l[r];
                trace[stats + 4] = alpha;
                l[r] *= alpha;
                for x in &mut o[r * d..r * d + d] {
                    *x *= alpha;
                }
                for (jj, &s) in s_row.iter().enumerate() {
                    if j0 + jj <= i {
                        let p = (s - m_tile).exp();
                        l[r] += p;
                        for dd in 0..d {
                            o[r * d + dd] += p * dims.v(qkv, j0 + jj, dd);
                        }
                        trace[rec + BLOCK_B + r * tile + jj] = p;
                    }
                }
                m[r] = m_tile;
                trace[stats + 3] = l[r];
            }
        }
        for kb in visited..nt {
            header(trace, record_at(nt, Pass::Forward, qt, kb), 2.0, qt, kb, 0);
        }
        for r in 0..tile {
            let i = q0 + r;
            if i < t {
                for dd in 0..d {
                    o_out[i * d + dd] = o[r * d + dd] / l[r];
                }
                lse[i] = m[r] + l[r].ln();
            }
        }
    }
    // delta_i = Σ_d dO·O (attention_backward_delta), from the output just computed.
    let delta: Vec<f32> = (0..t)
        .map(|i| {
            let mut s = 0.0f32;
            for dd in 0..d {
                s += dims.y(dout, i, dd) * o_out[i * d + dd];
            }
            s
        })
        .collect();
    // P and dS of (query i, key j), as the backward kernels recompute them.
    let p_ds = |i: usize, j: usize| -> (f32, f32) {
        let mut s = 0.0f32;
        let mut dp = 0.0f32;
        for dd in 0..d {
            s += dims.q(qkv, i, dd) * dims.k(qkv, j, dd);
            dp += dims.y(dout, i, dd) * dims.v(qkv, j, dd);
        }
        let p = (s * scale - lse[i]).exp();
        (p, p * (dp - delta[i]))
    };
    // dK, dV: a key block at a time, query tiles from the diagonal down.
    let mut dk = vec![0.0f32; t * d];
    let mut dv = vec![0.0f32; t * d];
    for kb in 0..nt {
        let j0 = kb * tile;
        for qt in 0..kb {
            header(
                trace,
                record_at(nt, Pass::BackwardDkdv, kb, qt),
                2.0,
                qt,
                kb,
                0,
            );
        }
        let mut acc_k = vec![0.0f32; tile * d];
        let mut acc_v = vec![0.0f32; tile * d];
        for qt in kb..nt {
            let i0 = qt * tile;
            let rec = record_at(nt, Pass::BackwardDkdv, kb, qt);
            header(trace, rec, 1.0, qt, kb, qt - kb);
            let mut p = [[0.0f32; ATTENTION_TILE]; ATTENTION_TILE];
            let mut ds = [[0.0f32; ATTENTION_TILE]; ATTENTION_TILE];
            for (ii, (p_row, ds_row)) in p.iter_mut().zip(ds.iter_mut()).enumerate() {
                for jj in 0..tile {
                    let (i, j) = (i0 + ii, j0 + jj);
                    if j < t && i < t && j <= i {
                        (p_row[jj], ds_row[jj]) = p_ds(i, j);
                    }
                    trace[rec + BLOCK_A + ii * tile + jj] = p_row[jj];
                    trace[rec + BLOCK_B + ii * tile + jj] = ds_row[jj];
                }
            }
            for jj in 0..tile {
                let (mut p_sum, mut ds_sum) = (0.0f32, 0.0f32);
                for ii in 0..tile {
                    let (pij, dsij) = (p[ii][jj], ds[ii][jj]);
                    p_sum += pij;
                    ds_sum += dsij;
                    let i = (i0 + ii).min(t - 1);
                    for dd in 0..d {
                        // Rows past T load as zeros in the kernel; P and dS are 0 there.
                        let (q, g) = if i0 + ii < t {
                            (dims.q(qkv, i, dd), dims.y(dout, i, dd))
                        } else {
                            (0.0, 0.0)
                        };
                        acc_v[jj * d + dd] += pij * g;
                        acc_k[jj * d + dd] += dsij * q;
                    }
                }
                let stats = rec + ROWS + ROW_STRIDE * jj;
                trace[stats] = p_sum;
                trace[stats + 1] = ds_sum;
            }
        }
        for jj in 0..tile {
            let j = j0 + jj;
            if j < t {
                for dd in 0..d {
                    dk[j * d + dd] = scale * acc_k[jj * d + dd];
                    dv[j * d + dd] = acc_v[jj * d + dd];
                }
            }
        }
    }
    // dQ: a query tile at a time, key blocks up to the diagonal.
    let mut dq = vec![0.0f32; t * d];
    for qt in 0..nt {
        let q0 = qt * tile;
        let last = (q0 + tile).min(t);
        let visited = last.div_ceil(tile);
        let mut acc = vec![0.0f32; tile * d];
        for kb in 0..visited {
            let j0 = kb * tile;
            let rec = record_at(nt, Pass::BackwardDq, qt, kb);
            header(trace, rec, 1.0, qt, kb, kb);
            for r in 0..tile {
                let i = q0 + r;
                let (mut p_sum, mut ds_sum) = (0.0f32, 0.0f32);
                for jj in 0..tile {
                    let j = j0 + jj;
                    let (p, ds) = if i < t && j <= i {
                        p_ds(i, j)
                    } else {
                        (0.0, 0.0)
                    };
                    trace[rec + BLOCK_A + r * tile + jj] = p;
                    trace[rec + BLOCK_B + r * tile + jj] = ds;
                    p_sum += p;
                    ds_sum += ds;
                    if i < t && j < t {
                        for dd in 0..d {
                            acc[r * d + dd] += ds * dims.k(qkv, j, dd);
                        }
                    }
                }
                let stats = rec + ROWS + ROW_STRIDE * r;
                trace[stats] = p_sum;
                trace[stats + 1] = ds_sum;
            }
        }
        for kb in visited..nt {
            header(
                trace,
                record_at(nt, Pass::BackwardDq, qt, kb),
                2.0,
                qt,
                kb,
                0,
            );
        }
        for r in 0..tile {
            let i = q0 + r;
            if i < t {
                for dd in 0..d {
                    dq[i * d + dd] = scale * acc[r * d + dd];
                }
            }
        }
    }
    HeadOutputs {
        o: o_out,
        lse,
        dq,
        dk,
        dv,
    }
}

fn header(trace: &mut [f32], rec: usize, state: f32, q_tile: usize, k_block: usize, visit: usize) {
    trace[rec] = state;
    trace[rec + 1] = q_tile as f32;
    trace[rec + 2] = k_block as f32;
    trace[rec + 3] = visit as f32;
}
