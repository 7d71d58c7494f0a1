//! A trace decoded: the visits in replay order, the traced head's tensors,
//! naive f64 attention of the same inputs, and the summary (counts, the
//! checks, the bytes moved and the memory never allocated).

use super::{
    BLOCK_A, BLOCK_B, FlashRequest, NEG_FLT_MAX, Parts, Pass, REC, ROW_STRIDE, ROWS, record_at,
    tiles,
};
use super::ATTENTION_TILE;
use crate::model::config::Config;
use serde::Serialize;
use serde_json::json;

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
        let standard_backward =
            (tt + t * d + t * d + tt) + (2 * tt + tt) + 3 * (tt + t * d) + 3 * t * d;
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
    /// heads) equal the same kernels' untraced values bit for bit (the GPU:
    /// the 16×16-tile kernels, run untraced on the row first; the CPU model
    /// is compared with the CPU backend's own attention).
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
