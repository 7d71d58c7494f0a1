//! FlashAttention-2's tiling, replayed from the real kernels: what the Flash
//! scene animates and `tinygpt flash-trace --json` prints.
//!
//! A [`FlashRequest`] names a batch, a row, a transformer block and a head.
//! The backend runs the program's step on that batch in evaluation mode up to
//! and including the block's attention backward (so q, k, v, the output, the
//! saved log-sum-exp and the upstream gradient dO are the model's own), then
//! traces the attention of the chosen (row, head):
//! - the GPU dispatches attention.wgsl's traced pipelines (the override
//!   `TRACE` = true) on a copy of the row; each workgroup records every visit
//!   of its tile to a block of the other side and every block causality skips;
//! - the CPU runs [`model_head`], a CPU model of the same loops with the same
//!   tile ([`ATTENTION_TILE`], from the kernel registry), writing the same
//!   records.
//!
//! Both come back as one flat list of floats ([`Parts`] says where each part
//! lies) that [`FlashTrace::decode`] turns into visits, the head's tensors,
//! a naive f64 attention of the same q, k, v and dO to compare with, and the
//! memory and traffic figures of the run.

use crate::backend::{Backend, BackendError, PendingRead};
use crate::data::Batch;
use crate::gpu::kernels::ATTENTION_TILE;
use crate::model::config::Config;
use crate::program::{Op, Program, Step, TensorId};
use serde::Serialize;
use serde_json::json;

/// Floats before the first record (`HEADER` in attention.wgsl); float 0 names
/// the traced b·H + h.
pub const HEADER: usize = 16;
/// Offset of the per-row statistics in a record (`ROWS`).
const ROWS: usize = 16;
/// Floats per row of statistics.
const ROW_STRIDE: usize = 8;
/// Offset of block A (`BLOCK_A`): scores (forward) or P (backward).
const BLOCK_A: usize = ROWS + ROW_STRIDE * ATTENTION_TILE;
/// Offset of block B (`BLOCK_B`): exp(S − m) (forward) or dS (backward).
const BLOCK_B: usize = BLOCK_A + ATTENTION_TILE * ATTENTION_TILE;
/// Floats per record (`REC`).
pub const REC: usize = BLOCK_B + ATTENTION_TILE * ATTENTION_TILE;
/// The start of a running max in the kernel (`NEG_FLT_MAX`); a score that is
/// masked reads this too.
const NEG_FLT_MAX: f32 = -3.4028234e38;

/// The three passes the kernels make over the tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pass {
    /// `attention_forward`: each query tile walks the key blocks up to the diagonal.
    Forward,
    /// `attention_backward_dkdv`: each key block walks the query tiles from the diagonal down.
    BackwardDkdv,
    /// `attention_backward_dq`: each query tile walks the key blocks again.
    BackwardDq,
}

impl Pass {
    pub const ALL: [Pass; 3] = [Pass::Forward, Pass::BackwardDkdv, Pass::BackwardDq];

    /// The name in the JSON (`pass`).
    pub fn key(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::BackwardDkdv => "backward_dkdv",
            Pass::BackwardDq => "backward_dq",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Pass::Forward => "Forward: O = softmax(QKᵀ/√D)·V",
            Pass::BackwardDkdv => "Backward: dK, dV",
            Pass::BackwardDq => "Backward: dQ",
        }
    }

    /// The kernel that makes this pass.
    pub fn kernel(self) -> &'static str {
        match self {
            Pass::Forward => "attention_forward",
            Pass::BackwardDkdv => "attention_backward_dkdv",
            Pass::BackwardDq => "attention_backward_dq",
        }
    }

    pub fn from_key(key: &str) -> Option<Pass> {
        Pass::ALL.into_iter().find(|p| p.key() == key)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether a workgroup of this pass owns a key block (else a query tile).
    pub fn walks_queries(self) -> bool {
        self == Pass::BackwardDkdv
    }
}

/// What to trace: one (batch row, head) of one transformer block's attention,
/// on a batch the program runs in evaluation mode (no dropout).
#[derive(Clone, Debug, PartialEq)]
pub struct FlashRequest {
    pub batch: Batch,
    pub row: usize,
    /// Positions of the row that hold the text asked for (a prompt is padded
    /// to the context; the kernel runs over all T).
    pub n: usize,
    /// Transformer block, 0-based.
    pub layer: usize,
    pub head: usize,
}

impl FlashRequest {
    /// The request for a probe's batch and row (see [`crate::probe`]).
    pub fn from_probe(probe: crate::probe::ProbeRequest, layer: usize, head: usize) -> Self {
        Self {
            batch: probe.batch,
            row: probe.window.row,
            n: probe.window.n,
            layer,
            head,
        }
    }

    /// Why this request cannot run on `config`'s program, if it cannot.
    pub fn check(&self, config: &Config) -> Result<(), String> {
        if self.batch.batch != config.batch || self.batch.ctx != config.ctx {
            return Err(format!(
                "the trace's batch is {}×{}, the model's {}×{}",
                self.batch.batch, self.batch.ctx, config.batch, config.ctx
            ));
        }
        if self.row >= config.batch {
            return Err(format!(
                "batch row {} does not exist; the batch has rows 0 to {}",
                self.row,
                config.batch - 1
            ));
        }
        if self.layer >= config.n_layer {
            return Err(format!(
                "block {} does not exist; the model has blocks 0 to {}",
                self.layer,
                config.n_layer - 1
            ));
        }
        if self.head >= config.n_head {
            return Err(format!(
                "head {} does not exist; the model has heads 0 to {}",
                self.head,
                config.n_head - 1
            ));
        }
        Ok(())
    }
}

/// Tiles along T.
pub fn tiles(t: usize) -> usize {
    t.div_ceil(ATTENTION_TILE)
}

/// Floats of the trace buffer for a context of `t`.
pub fn trace_len(t: usize) -> usize {
    HEADER + 3 * tiles(t) * tiles(t) * REC
}

/// Where a record lies in the trace buffer (`rec_at` in attention.wgsl).
fn record_at(nt: usize, pass: Pass, a: usize, c: usize) -> usize {
    HEADER + REC * ((pass.index() * nt + a) * nt + c)
}

/// Where each part of a flat trace result lies (in floats). `ref_*` are the
/// program's own (untraced) values for the row; the others the traced run's.
#[derive(Clone, Debug)]
pub struct Parts {
    pub trace: std::ops::Range<usize>,
    /// (T, 3C) q | k | v of the row.
    pub qkv: std::ops::Range<usize>,
    /// (T, C) gradient of the attention output.
    pub dout: std::ops::Range<usize>,
    pub ref_out: std::ops::Range<usize>,
    /// (H, T)
    pub ref_lse: std::ops::Range<usize>,
    pub ref_dqkv: std::ops::Range<usize>,
    pub out: std::ops::Range<usize>,
    pub lse: std::ops::Range<usize>,
    pub dqkv: std::ops::Range<usize>,
    pub len: usize,
}

impl Parts {
    pub fn new(config: &Config) -> Self {
        let (t, c, h) = (config.ctx, config.d_model, config.n_head);
        let mut at = 0;
        let mut take = |n: usize| {
            let r = at..at + n;
            at += n;
            r
        };
        let trace = take(trace_len(t));
        let qkv = take(t * 3 * c);
        let dout = take(t * c);
        let ref_out = take(t * c);
        let ref_lse = take(h * t);
        let ref_dqkv = take(t * 3 * c);
        let out = take(t * c);
        let lse = take(h * t);
        let dqkv = take(t * 3 * c);
        Self {
            trace,
            qkv,
            dout,
            ref_out,
            ref_lse,
            ref_dqkv,
            out,
            lse,
            dqkv,
            len: at,
        }
    }
}

/// The tensors of the block's attention op: qkv, out, lse.
pub fn attention_tensors(program: &Program, layer: usize) -> Option<(usize, [TensorId; 3])> {
    let Some(Step::AttentionProbs(i)) = program.attention_probe(layer) else {
        return None;
    };
    match program.ops[i].op {
        Op::Attention { qkv, out, lse, .. } => Some((i, [qkv, out, lse])),
        _ => None,
    }
}

/// Loads the request's batch in evaluation mode and runs the program's
/// entries up to and including the block's attention backward: every tensor
/// the trace reads then holds the model's values. (Gradients and
/// activations are scratch that the next step rewrites; parameters and
/// AdamW's moments are not touched.)
pub fn run_to_attention_backward<B: Backend + ?Sized>(
    backend: &mut B,
    request: &FlashRequest,
) -> Result<(), BackendError> {
    let program = backend.program();
    request
        .check(&program.config)
        .map_err(BackendError::BadProbe)?;
    let (op, _) = attention_tensors(program, request.layer)
        .ok_or_else(|| BackendError::BadProbe(format!("no attention in block {}", request.layer)))?;
    let last = program
        .steps
        .iter()
        .position(|&s| s == Step::Backward(op))
        .expect("every op has its backward in the step list");
    backend.load_step(&request.batch, None);
    backend.run_entries(0..last + 1);
    Ok(())
}

/// The CPU's trace: the program's own attention (the CPU backend's), and the
/// CPU model of the kernels' tiling ([`model_head`]) for the chosen head, in
/// the flat layout of [`Parts`]. Any backend can run it.
pub fn cpu_model<B: Backend + ?Sized>(
    backend: &mut B,
    request: &FlashRequest,
) -> Result<Vec<f32>, BackendError> {
    run_to_attention_backward(backend, request)?;
    let program = backend.program().clone();
    let cfg = &program.config;
    let (t, c, h) = (cfg.ctx, cfg.d_model, cfg.n_head);
    let (_, [qkv, out, lse]) = attention_tensors(&program, request.layer).expect("checked");
    let grad = |id: TensorId| program.tensors[id].grad.expect("activations have gradients");
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
pub fn model_head(
    dims: &HeadDims,
    qkv: &[f32],
    dout: &[f32],
    trace: &mut [f32],
) -> HeadOutputs {
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
            header(trace, record_at(nt, Pass::BackwardDkdv, kb, qt), 2.0, qt, kb, 0);
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
                    let (p, ds) = if i < t && j <= i { p_ds(i, j) } else { (0.0, 0.0) };
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
            header(trace, record_at(nt, Pass::BackwardDq, qt, kb), 2.0, qt, kb, 0);
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

/// Starts a trace on any backend: the GPU's traced kernels, or the CPU model.
pub fn start(
    backend: &mut dyn Backend,
    request: &FlashRequest,
) -> Result<PendingRead, BackendError> {
    backend.start_flash_trace(request)
}

/// Who computed a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceSource {
    /// attention.wgsl's traced pipelines on the GPU.
    Kernel,
    /// [`model_head`] on the CPU: the same tiling, modelled.
    CpuModel,
}

/// One visit of a workgroup's tile to a block of the other side (or a block
/// causality skipped), as the kernel recorded it.
#[derive(Clone, Debug)]
pub struct Visit {
    pub pass: Pass,
    pub q_tile: usize,
    pub k_block: usize,
    pub skipped: bool,
    /// The visit's number in its workgroup's loop (0 for skipped blocks).
    pub order: usize,
    /// Per row of the tile (queries; keys in backward_dkdv), 8 floats:
    /// forward m before, m after, l before, l after, rescale;
    /// backward Σ P, Σ dS over the block.
    pub rows: Vec<[f32; ROW_STRIDE]>,
    /// TILE×TILE, query-major: forward S (NEG_FLT_MAX where masked),
    /// backward P.
    pub block_a: Vec<f32>,
    /// Forward exp(S − m after); backward dS.
    pub block_b: Vec<f32>,
}

impl Visit {
    /// Rows of the tile that hold positions < T.
    pub fn valid_rows(&self, t: usize) -> usize {
        let first = if self.pass.walks_queries() {
            self.k_block
        } else {
            self.q_tile
        } * ATTENTION_TILE;
        t.saturating_sub(first).min(ATTENTION_TILE)
    }

    /// The JSON object `tinygpt flash-trace` prints; `blocks` adds the
    /// TILE×TILE blocks (`s` and `p` forward, `p` and `ds` backward).
    pub fn to_json(&self, t: usize, blocks: bool) -> serde_json::Value {
        let n = if self.skipped { 0 } else { self.valid_rows(t) };
        let col = |k: usize| -> Vec<f32> { self.rows[..n].iter().map(|r| r[k]).collect() };
        let forward = self.pass == Pass::Forward && !self.skipped;
        let mut v = json!({
            "pass": self.pass.key(),
            "q_tile": self.q_tile,
            "k_block": self.k_block,
            "skipped": self.skipped,
            "visit": self.order,
            "m_before": forward.then(|| col(0).into_iter().map(finite_or_null).collect::<Vec<_>>()),
            "m_after": forward.then(|| col(1)),
            "l_before": forward.then(|| col(2)),
            "l_after": forward.then(|| col(3)),
            "rescale": forward.then(|| col(4)),
        });
        if !self.skipped && self.pass != Pass::Forward {
            v["p_sum"] = json!(col(0));
            v["ds_sum"] = json!(col(1));
        }
        if blocks && !self.skipped {
            let a: Vec<Option<f32>> = self.block_a.iter().map(|&x| finite_or_null(x)).collect();
            if self.pass == Pass::Forward {
                v["s"] = json!(a);
                v["p"] = json!(self.block_b);
            } else {
                v["p"] = json!(a);
                v["ds"] = json!(self.block_b);
            }
        }
        v
    }
}

/// −FLT_MAX (the running max's start, a masked score) as null.
fn finite_or_null(x: f32) -> Option<f32> {
    (x > NEG_FLT_MAX).then_some(x)
}

/// Counts of one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub visited: usize,
    pub skipped: usize,
}

/// Bytes of global (GPU) memory read and written by one head of one layer,
/// tiled (as the kernels do) and standard (S and P written out as T×T).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Traffic {
    pub tiled_forward: u64,
    pub standard_forward: u64,
    pub tiled_backward: u64,
    pub standard_backward: u64,
}

impl Traffic {
    /// The traffic model of this run (floats of 4 bytes):
    /// - tiled forward: each query tile reads its Q once and, per visited
    ///   block, a K and a V tile; writes O and the log-sum-exp;
    /// - standard forward: reads Q and K, writes S (T×T), reads it back,
    ///   writes P, reads P and V, writes O;
    /// - tiled backward: delta (reads O, dO; writes T), then each of the two
    ///   kernels reads its own tile's two inputs once and, per visited
    ///   block, two tiles and the block's log-sum-exp and delta; writes its
    ///   gradients;
    /// - standard backward: reads P and dO, V (dP = dO·Vᵀ: writes T×T),
    ///   reads P and dP, writes dS, then three matmuls read dS or P (T×T)
    ///   with Q, K or dO and write dQ, dK, dV.
    pub fn of(t: usize, d: usize, visited: Counts) -> Self {
        let (t, d, tile) = (t as u64, d as u64, ATTENTION_TILE as u64);
        let nt = t.div_ceil(tile);
        let v = visited.visited as u64;
        let tt = t * t;
        let tiled_forward = nt * tile * d + v * 2 * tile * d + t * d + t;
        let standard_forward = 2 * t * d + tt + tt + tt + tt + t * d + t * d;
        let delta = 2 * t * d + t;
        let per_kernel = nt * 2 * tile * d + v * (2 * tile * d + 2 * tile);
        let tiled_backward = delta + 2 * per_kernel + 3 * t * d;
        let standard_backward = (tt + t * d + t * d + tt) + (2 * tt + tt) + 3 * (tt + t * d) + 3 * t * d;
        Self {
            tiled_forward: tiled_forward * 4,
            standard_forward: standard_forward * 4,
            tiled_backward: tiled_backward * 4,
            standard_backward: standard_backward * 4,
        }
    }
}

/// Memory the attention never allocated (P, T×T per head) beside what it
/// kept (the log-sum-exp, T per head), per layer and for the whole model.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Memory {
    /// B·H·T·T·4: the attention weights of one layer, were they stored.
    pub never_allocated_per_layer: u64,
    /// B·H·T·4: the log-sum-exp of one layer.
    pub allocated_per_layer: u64,
    pub never_allocated_model: u64,
    pub allocated_model: u64,
}

impl Memory {
    pub fn of(config: &Config) -> Self {
        let bht = (config.batch * config.n_head * config.ctx) as u64;
        let layers = config.n_layer as u64;
        Self {
            never_allocated_per_layer: bht * config.ctx as u64 * 4,
            allocated_per_layer: bht * 4,
            never_allocated_model: bht * config.ctx as u64 * 4 * layers,
            allocated_model: bht * 4 * layers,
        }
    }
}

/// Naive attention of one head in f64: S = QKᵀ/√D + causal mask, P =
/// softmax(S), O = P·V; backward dP = dO·Vᵀ, dS = P∘(dP − rowsum(dO∘O)),
/// dQ = dS·K/√D, dK = dSᵀ·Q/√D, dV = Pᵀ·dO. (T, D) row-major.
#[derive(Clone, Debug)]
pub struct Naive {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
}

impl Naive {
    pub fn of(t: usize, d: usize, q: &[f32], k: &[f32], v: &[f32], dout: &[f32]) -> Self {
        let scale = 1.0 / (d as f64).sqrt();
        let at = |x: &[f32], i: usize, dd: usize| x[i * d + dd] as f64;
        let mut p = vec![0.0f64; t * t];
        let mut lse = vec![0.0f64; t];
        for i in 0..t {
            let row = &mut p[i * t..i * t + t];
            for (j, s) in row.iter_mut().enumerate().take(i + 1) {
                *s = (0..d).map(|dd| at(q, i, dd) * at(k, j, dd)).sum::<f64>() * scale;
            }
            let m = row[..=i].iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row[..=i].iter().map(|s| (s - m).exp()).sum();
            lse[i] = m + sum.ln();
            for s in row[..=i].iter_mut() {
                *s = (*s - lse[i]).exp();
            }
        }
        let mut o = vec![0.0f64; t * d];
        for i in 0..t {
            for j in 0..=i {
                for dd in 0..d {
                    o[i * d + dd] += p[i * t + j] * at(v, j, dd);
                }
            }
        }
        let (mut dq, mut dk, mut dv) = (vec![0.0; t * d], vec![0.0; t * d], vec![0.0; t * d]);
        for i in 0..t {
            let delta: f64 = (0..d).map(|dd| at(dout, i, dd) * o[i * d + dd]).sum();
            for j in 0..=i {
                let dp: f64 = (0..d).map(|dd| at(dout, i, dd) * at(v, j, dd)).sum();
                let pij = p[i * t + j];
                let ds = pij * (dp - delta);
                for dd in 0..d {
                    dq[i * d + dd] += ds * at(k, j, dd) * scale;
                    dk[j * d + dd] += ds * at(q, i, dd) * scale;
                    dv[j * d + dd] += pij * at(dout, i, dd);
                }
            }
        }
        Self { o, lse, dq, dk, dv }
    }
}

/// The largest |a − b|.
fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, f64::max)
}

/// What the summary says about one trace.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub source: TraceSource,
    pub layer: usize,
    pub head: usize,
    pub row: usize,
    /// The batch's rows and the model's heads (a pass runs tiles × B × H workgroups).
    pub batch: usize,
    pub n_head: usize,
    pub tile_q: usize,
    pub tile_k: usize,
    pub t: usize,
    pub d: usize,
    pub tiles: usize,
    /// The forward pass's blocks visited and skipped.
    pub visited: usize,
    pub skipped: usize,
    pub passes: std::collections::BTreeMap<&'static str, Counts>,
    /// max |O − naive O| of the traced head.
    pub max_abs_diff_vs_naive: f64,
    pub lse_max_abs_diff_vs_naive: f64,
    /// max over dQ, dK, dV of |traced − naive|.
    pub backward_max_abs_diff_vs_naive: f64,
    /// max |m + ln l − saved log-sum-exp| over the rows, from each query
    /// tile's last forward visit.
    pub lse_from_trace_max_abs_diff: f64,
    /// Whether the traced run's O, log-sum-exp and dQKV of the whole row (all
    /// heads) equal the program's own untraced values bit for bit (the GPU;
    /// the CPU model is compared with the CPU backend's own attention).
    pub bit_identical_to_untraced: bool,
    pub untraced_max_abs_diff: f64,
    pub traffic: Traffic,
    pub memory: Memory,
}

/// A decoded trace: the visits, the traced head's tensors and the summary.
#[derive(Clone, Debug)]
pub struct FlashTrace {
    pub request: FlashRequest,
    pub source: TraceSource,
    pub t: usize,
    pub d: usize,
    pub tiles: usize,
    /// Every record, pass by pass, each workgroup's in its loop's order
    /// (visited first, then the blocks causality skipped).
    pub visits: Vec<Visit>,
    /// The row's bytes (T).
    pub tokens: Vec<u8>,
    /// (T, D) of the traced head; `o`, `lse`, `dq`, `dk`, `dv` from the traced run.
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub dout: Vec<f32>,
    pub o: Vec<f32>,
    pub lse: Vec<f32>,
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub naive: Naive,
    pub summary: Summary,
}

impl FlashTrace {
    /// Decodes a backend's flat result (laid out as [`Parts`]); None when it
    /// is short (the device was lost).
    pub fn decode(
        config: &Config,
        request: &FlashRequest,
        source: TraceSource,
        flat: &[f32],
    ) -> Option<Self> {
        let parts = Parts::new(config);
        if flat.len() < parts.len {
            return None;
        }
        let (t, c, h) = (config.ctx, config.d_model, config.n_head);
        let d = c / h;
        let nt = tiles(t);
        let tile = ATTENTION_TILE;
        let trace = &flat[parts.trace.clone()];
        let mut visits = Vec::new();
        for pass in Pass::ALL {
            for a in 0..nt {
                let mut own: Vec<Visit> = (0..nt)
                    .map(|c| {
                        let rec = record_at(nt, pass, a, c);
                        let r = &trace[rec..rec + REC];
                        Visit {
                            pass,
                            q_tile: r[1] as usize,
                            k_block: r[2] as usize,
                            skipped: r[0] != 1.0,
                            order: r[3] as usize,
                            rows: (0..tile)
                                .map(|k| {
                                    let mut row = [0.0; ROW_STRIDE];
                                    row.copy_from_slice(
                                        &r[ROWS + ROW_STRIDE * k..ROWS + ROW_STRIDE * (k + 1)],
                                    );
                                    row
                                })
                                .collect(),
                            block_a: r[BLOCK_A..BLOCK_B].to_vec(),
                            block_b: r[BLOCK_B..REC].to_vec(),
                        }
                    })
                    .collect();
                own.sort_by_key(|v| (v.skipped, v.order, v.q_tile, v.k_block));
                visits.extend(own);
            }
        }
        let head = request.head;
        let slice = |src: &[f32], stride: usize, offset: usize| -> Vec<f32> {
            (0..t)
                .flat_map(|i| {
                    let at = i * stride + offset + head * d;
                    src[at..at + d].to_vec()
                })
                .collect()
        };
        let qkv = &flat[parts.qkv.clone()];
        let dqkv = &flat[parts.dqkv.clone()];
        let q = slice(qkv, 3 * c, 0);
        let k = slice(qkv, 3 * c, c);
        let v = slice(qkv, 3 * c, 2 * c);
        let dout = slice(&flat[parts.dout.clone()], c, 0);
        let o = slice(&flat[parts.out.clone()], c, 0);
        let lse = flat[parts.lse.clone()][head * t..head * t + t].to_vec();
        let dq = slice(dqkv, 3 * c, 0);
        let dk = slice(dqkv, 3 * c, c);
        let dv = slice(dqkv, 3 * c, 2 * c);
        let naive = Naive::of(t, d, &q, &k, &v, &dout);

        let mut passes = std::collections::BTreeMap::new();
        for pass in Pass::ALL {
            let mut counts = Counts::default();
            for visit in visits.iter().filter(|v| v.pass == pass) {
                if visit.skipped {
                    counts.skipped += 1;
                } else {
                    counts.visited += 1;
                }
            }
            passes.insert(pass.key(), counts);
        }
        let forward = passes[Pass::Forward.key()];
        // The last forward visit of each query tile holds its rows' final m and l.
        let mut lse_from_trace = 0.0f64;
        for visit in visits
            .iter()
            .filter(|v| v.pass == Pass::Forward && !v.skipped && v.k_block == v.q_tile)
        {
            for r in 0..visit.valid_rows(t) {
                let i = visit.q_tile * tile + r;
                let [_, m, _, l, ..] = visit.rows[r];
                let from_trace = m as f64 + (l as f64).ln();
                lse_from_trace = lse_from_trace.max((from_trace - lse[i] as f64).abs());
            }
        }
        let traced_all = [&parts.out, &parts.lse, &parts.dqkv];
        let refs_all = [&parts.ref_out, &parts.ref_lse, &parts.ref_dqkv];
        let mut identical = true;
        let mut untraced = 0.0f64;
        for (a, b) in traced_all.iter().zip(refs_all) {
            for (&x, &y) in flat[(*a).clone()].iter().zip(&flat[b.clone()]) {
                identical &= x.to_bits() == y.to_bits();
                untraced = untraced.max((x as f64 - y as f64).abs());
            }
        }
        let summary = Summary {
            source,
            layer: request.layer,
            head,
            row: request.row,
            batch: config.batch,
            n_head: h,
            tile_q: tile,
            tile_k: tile,
            t,
            d,
            tiles: nt,
            visited: forward.visited,
            skipped: forward.skipped,
            passes,
            max_abs_diff_vs_naive: max_diff(&o, &naive.o),
            lse_max_abs_diff_vs_naive: max_diff(&lse, &naive.lse),
            backward_max_abs_diff_vs_naive: max_diff(&dq, &naive.dq)
                .max(max_diff(&dk, &naive.dk))
                .max(max_diff(&dv, &naive.dv)),
            lse_from_trace_max_abs_diff: lse_from_trace,
            bit_identical_to_untraced: identical,
            untraced_max_abs_diff: untraced,
            traffic: Traffic::of(t, d, forward),
            memory: Memory::of(config),
        };
        let row = request.row;
        let tokens = request.batch.inputs[row * t..row * t + t]
            .iter()
            .map(|&x| x as u8)
            .collect();
        Some(Self {
            request: request.clone(),
            source,
            t,
            d,
            tiles: nt,
            visits,
            tokens,
            q,
            k,
            v,
            dout,
            o,
            lse,
            dq,
            dk,
            dv,
            naive,
            summary,
        })
    }

    /// The visits of one pass, in replay order.
    pub fn pass(&self, pass: Pass) -> impl Iterator<Item = &Visit> {
        self.visits.iter().filter(move |v| v.pass == pass)
    }

    /// The summary object `tinygpt flash-trace` prints last.
    pub fn summary_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.summary).expect("plain data");
        v["summary"] = json!(true);
        v
    }
}

/// Runs a trace and waits for it (the CLI and the tests).
pub fn trace_blocking(
    backend: &mut dyn Backend,
    request: &FlashRequest,
) -> Result<FlashTrace, BackendError> {
    let source = if backend.as_gpu().is_some() {
        TraceSource::Kernel
    } else {
        TraceSource::CpuModel
    };
    let mut pending = start(backend, request)?;
    let flat = loop {
        match backend.try_take_reads(pending) {
            Ok(values) => break values,
            Err(p) => {
                pending = p;
                backend.poll();
                std::thread::yield_now();
            }
        }
    };
    FlashTrace::decode(&backend.program().config, request, source, &flat)
        .ok_or(BackendError::DeviceLost)
}

/// Bytes for people: `1.5 MB`, `24 KB`, `512 B` (powers of 1024).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut x = n as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if x < 10.0 {
        format!("{x:.1} {}", UNITS[unit])
    } else {
        format!("{x:.0} {}", UNITS[unit])
    }
}

/// What a view asks to trace, before it is a request: a run turns it into
/// one with [`FlashWant::request`] (a prompt, or a row of its next batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashWant {
    pub source: crate::probe::ProbeSource,
    pub layer: usize,
    pub head: usize,
}

impl FlashWant {
    /// The request on `trainer`'s model and next batch.
    pub fn request(&self, trainer: &crate::train::Trainer) -> Result<FlashRequest, String> {
        let probe = trainer.probe_request(&self.source)?;
        let request = FlashRequest::from_probe(probe, self.layer, self.head);
        request.check(&trainer.config)?;
        Ok(request)
    }
}
