//! The FlashAttention trace's format, which both backends write and
//! [`super::FlashTrace::decode`] reads: the request (batch, row, block,
//! head), the record layout of attention.wgsl's traced pipelines, and where
//! each part of the flat result lies ([`Parts`]). It sits with the backend
//! interface ([`crate::backend`]), below the backends that implement it.

use crate::data::Batch;
use crate::model::config::Config;
use crate::program::{Op, Program, Step, TensorId};
use serde::Serialize;

/// The FlashAttention kernels' tile: queries per tile and keys per block
/// (`TILE` in attention.wgsl, templated in; the workgroup is TILE×TILE).
/// The plan's workgroup counts and the trace's CPU model read it here.
pub const ATTENTION_TILE: usize = 16;

/// Floats before the first record (`HEADER` in attention.wgsl); float 0 names
/// the traced b·H + h.
pub const HEADER: usize = 16;
/// Offset of the per-row statistics in a record (`ROWS`).
pub(crate) const ROWS: usize = 16;
/// Floats per row of statistics.
pub(crate) const ROW_STRIDE: usize = 8;
/// Offset of block A (`BLOCK_A`): scores (forward) or P (backward).
pub(crate) const BLOCK_A: usize = ROWS + ROW_STRIDE * ATTENTION_TILE;
/// Offset of block B (`BLOCK_B`): exp(S − m) (forward) or dS (backward).
pub(crate) const BLOCK_B: usize = BLOCK_A + ATTENTION_TILE * ATTENTION_TILE;
/// Floats per record (`REC`).
pub const REC: usize = BLOCK_B + ATTENTION_TILE * ATTENTION_TILE;
/// The start of a running max in the kernel (`NEG_FLT_MAX`); a score that is
/// masked reads this too.
pub(crate) const NEG_FLT_MAX: f32 = -3.4028234e38;

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
        if !config.lab.causal_mask {
            return Err(
                "this run is the lab without the causal mask; the FlashAttention replay \
                 follows the causal kernel, whose skipped blocks are the point: \
                 turn the mask back on (Reset with the intact model) to replay it"
                    .into(),
            );
        }
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
pub(crate) fn record_at(nt: usize, pass: Pass, a: usize, c: usize) -> usize {
    HEADER + REC * ((pass.index() * nt + a) * nt + c)
}

/// Where each part of a flat trace result lies (in floats). `ref_*` are the
/// untraced values for the row (the GPU: the traced kernels run untraced;
/// the CPU: the program's own); the others the traced run's.
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

/// The program's entries a trace runs first: up to and including the
/// block's attention backward, on the request's batch loaded in evaluation
/// mode (`load_step(batch, None)`), so that every tensor the trace reads
/// holds the model's values. (Gradients and activations are scratch that
/// the next step rewrites; parameters and AdamW's moments are not touched.)
/// Refuses a request the model cannot answer.
pub fn entries_to_attention_backward(
    program: &Program,
    request: &FlashRequest,
) -> Result<std::ops::Range<usize>, String> {
    request.check(&program.config)?;
    let (op, _) = attention_tensors(program, request.layer)
        .ok_or_else(|| format!("no attention in block {}", request.layer))?;
    let last = program
        .steps
        .iter()
        .position(|&s| s == Step::Backward(op))
        .expect("every op has its backward in the step list");
    Ok(0..last + 1)
}

