//! What each entry of the step costs in arithmetic and memory traffic: the
//! FLOPs it does and the bytes it must move, counted from the program's
//! shapes. The roofline of the Speedup scene plots them against measured
//! time and this machine's ceilings.
//!
//! The bytes are the *compulsory* traffic in f32, the least any kernel could
//! move: every tensor an entry reads is read once and every tensor it writes
//! is written once; a gradient a backward accumulates into (`+=`) counts as
//! one write, since a kernel that is its only writer may overwrite it. Real
//! kernels move more (tiles re-read from memory, caches missed, gradients
//! read back to add to), so the bandwidth shown is a lower bound. FLOPs count multiply and add as two; the
//! element-wise ops count a fixed number per element, named below.

use super::{Op, Program, Step, TensorKind};

/// FLOPs of one GELU (the polynomial erf, the multiplies around it) per element.
pub const GELU_FLOPS: f64 = 20.0;
/// FLOPs of GELU's derivative per element.
pub const GELU_BACKWARD_FLOPS: f64 = 25.0;
/// FLOPs of one AdamW update per parameter (moments, bias corrections,
/// square root, decay, step).
pub const ADAMW_FLOPS: f64 = 15.0;

/// FLOPs and compulsory bytes of one entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Cost {
    pub flops: f64,
    pub bytes: f64,
}

impl Cost {
    /// FLOPs per byte: where the entry sits on the roofline's x axis.
    pub fn intensity(&self) -> f64 {
        self.flops / self.bytes.max(1.0)
    }
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.flops += o.flops;
        self.bytes += o.bytes;
    }
}

/// f32 elements to bytes.
fn b(elements: f64) -> f64 {
    4.0 * elements
}

impl Program {
    /// FLOPs and compulsory bytes of one entry of [`Program::steps`]
    /// (probes, which training never runs, cost nothing here).
    pub fn cost(&self, step: Step) -> Cost {
        let n = self.rows() as f64;
        let numel = |id: usize| self.tensors[id].numel() as f64;
        // What training updates: every parameter, or LoRA's adapters.
        let params: f64 = self.trained().map(numel).sum();
        let frozen = |id: usize| self.tensors[id].is_frozen();
        let (flops, bytes) = match step {
            Step::ZeroGrads => {
                let grads: f64 = self
                    .tensors
                    .iter()
                    .filter(|t| t.kind == TensorKind::Grad)
                    .map(|t| t.numel() as f64)
                    .sum();
                (0.0, b(grads))
            }
            // Σg² (two per element) and g ·= factor: at least one read of
            // every gradient (a fused kernel scales them as AdamW reads them).
            Step::ClipGradNorm => (3.0 * params, b(params)),
            // Read p, g, m, v; write p, m, v.
            Step::AdamW => (ADAMW_FLOPS * params, b(7.0 * params)),
            Step::AttentionProbs(_) => (0.0, 0.0),
            Step::Forward(i) => match self.ops[i].op {
                Op::Embedding { wpe, out, .. } => {
                    // One add per element, none without position embeddings.
                    let (x, pos) = (numel(out), wpe.map_or(0.0, numel));
                    (if wpe.is_some() { x } else { 0.0 }, b(n + x + pos + x))
                }
                Op::LayerNorm { inp, weight, .. } => {
                    let x = numel(inp);
                    (8.0 * x, b(2.0 * x + 2.0 * numel(weight) + 2.0 * n))
                }
                Op::Linear {
                    in_features: k,
                    out_features: m,
                    ..
                } => {
                    let (k, m) = (k as f64, m as f64);
                    (2.0 * n * k * m + n * m, b(n * k + k * m + m + n * m))
                }
                Op::Attention { qkv, lse, .. } => {
                    let (pairs, d) = self.attention_pairs(i);
                    (
                        4.0 * pairs * d + 5.0 * pairs,
                        b(numel(qkv) + numel(qkv) / 3.0 + numel(lse)),
                    )
                }
                Op::Gelu { inp, .. } => (GELU_FLOPS * numel(inp), b(2.0 * numel(inp))),
                Op::Residual { out, .. } => (numel(out), b(3.0 * numel(out))),
                Op::Dropout { inp, .. } => (numel(inp), b(2.0 * numel(inp))),
                Op::LowRank {
                    rank,
                    in_features: k,
                    out_features: m,
                    ..
                } => {
                    let (r, k, m) = (rank as f64, k as f64, m as f64);
                    (
                        2.0 * n * r * (k + m) + 2.0 * n * m,
                        b(n * k + r * k + n * r + r * m + 2.0 * n * m + n * m),
                    )
                }
                Op::TiedHead { inp, wte, out } => (
                    2.0 * numel(inp) * c_vocab(self, wte),
                    b(numel(inp) + numel(wte) + numel(out)),
                ),
                Op::CrossEntropy { logits, .. } => {
                    (4.0 * numel(logits), b(numel(logits) + 2.0 * n))
                }
            },
            Step::Backward(i) => match self.ops[i].op {
                // A frozen embedding (LoRA) has no gradient to compute.
                Op::Embedding { wte, .. } if frozen(wte) => (0.0, 0.0),
                // Scatter-add into the rows of wte's gradient and into wpe's.
                Op::Embedding { wpe, out, .. } => {
                    let (x, pos) = (numel(out), wpe.map_or(0.0, numel));
                    (2.0 * x, b(x + n + x + pos))
                }
                Op::LayerNorm { inp, weight, .. } => {
                    let x = numel(inp);
                    let w = numel(weight);
                    // A frozen gain and bias (LoRA): dx only.
                    let (params_flops, params_bytes) = if frozen(weight) {
                        (0.0, 0.0)
                    } else {
                        (5.0 * x, 2.0 * w)
                    };
                    (
                        9.0 * x + params_flops,
                        b(2.0 * x + 2.0 * n + w + x + params_bytes),
                    )
                }
                Op::Linear {
                    weight,
                    in_features: k,
                    out_features: m,
                    ..
                } => {
                    let (k, m) = (k as f64, m as f64);
                    if frozen(weight) {
                        // dinp only: the frozen weight gets no gradient.
                        (2.0 * n * k * m, b(n * m + k * m + 2.0 * n * k))
                    } else {
                        (
                            4.0 * n * k * m + n * m,
                            b(n * m + n * k + k * m + n * k + k * m + m),
                        )
                    }
                }
                Op::LowRank {
                    rank,
                    in_features: k,
                    out_features: m,
                    ..
                } => {
                    // dbase, dB, dmid, dA, dinp.
                    let (r, k, m) = (rank as f64, k as f64, m as f64);
                    (
                        n * m + 4.0 * n * r * m + 4.0 * n * r * k,
                        b(3.0 * n * m + 2.0 * r * m + 3.0 * n * r + 2.0 * r * k + 3.0 * n * k),
                    )
                }
                Op::Attention { qkv, lse, .. } => {
                    let (pairs, d) = self.attention_pairs(i);
                    let x = numel(qkv);
                    // S and P recomputed, dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q.
                    (
                        10.0 * pairs * d + 8.0 * pairs,
                        b(x + 2.0 * x / 3.0 + numel(lse) + x),
                    )
                }
                Op::Gelu { inp, .. } => (GELU_BACKWARD_FLOPS * numel(inp), b(3.0 * numel(inp))),
                Op::Residual { out, .. } => (2.0 * numel(out), b(3.0 * numel(out))),
                Op::Dropout { inp, .. } => (numel(inp), b(2.0 * numel(inp))),
                Op::TiedHead { inp, wte, out } if frozen(wte) => (
                    2.0 * numel(inp) * c_vocab(self, wte),
                    b(numel(out) + numel(wte) + 2.0 * numel(inp)),
                ),
                Op::TiedHead { inp, wte, out } => (
                    4.0 * numel(inp) * c_vocab(self, wte),
                    b(numel(out) + numel(inp) + numel(wte) + numel(inp) + numel(wte)),
                ),
                Op::CrossEntropy { logits, .. } => {
                    (4.0 * numel(logits), b(2.0 * numel(logits) + n))
                }
            },
        };
        Cost { flops, bytes }
    }

    /// The score pairs (b, h, i, j ≤ i) causal attention op `i` computes
    /// (every j without the mask), and D.
    fn attention_pairs(&self, i: usize) -> (f64, f64) {
        let c = &self.config;
        let Op::Attention { n_head, causal, .. } = self.ops[i].op else {
            unreachable!("attention_pairs of a non-attention op")
        };
        let t = c.ctx as f64;
        let per_head = if causal { t * (t + 1.0) / 2.0 } else { t * t };
        let pairs = (c.batch * n_head) as f64 * per_head;
        (pairs, (c.d_model / n_head) as f64)
    }

    /// The whole step's cost.
    pub fn step_cost(&self) -> Cost {
        let mut total = Cost::default();
        for s in &self.steps {
            total += self.cost(*s);
        }
        total
    }
}

/// The vocabulary the tied head multiplies by (rows of wte).
fn c_vocab(p: &Program, wte: usize) -> f64 {
    p.tensors[wte].shape[0] as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::{BUILTIN_PRESETS, Config};

    /// The matmuls (every linear and the tied head, forward and backward)
    /// do 6·N FLOPs per weight they multiply by, plus the bias adds: the
    /// "6 × parameters × tokens" rule, counted from the weights' own shapes.
    #[test]
    fn matmul_flops_follow_the_six_n_rule() {
        for (id, _) in BUILTIN_PRESETS {
            let p = Program::new(&Config::load(id).unwrap());
            let n = p.rows() as f64;
            let mut counted = 0.0;
            for s in &p.steps {
                if let Step::Forward(i) | Step::Backward(i) = s
                    && matches!(p.ops[*i].op, Op::Linear { .. } | Op::TiedHead { .. })
                {
                    counted += p.cost(*s).flops;
                }
            }
            // Weights that multiply: every 2-D parameter but the position table.
            let mut expected = 0.0;
            let mut biases = 0.0;
            for t in p.params() {
                let info = &p.tensors[t];
                if info.shape.len() == 2 && !info.name.contains("wpe") {
                    expected += 6.0 * n * info.numel() as f64;
                } else if info.name.ends_with(".bias") && !info.name.contains("ln") {
                    biases += 2.0 * n * info.numel() as f64;
                }
            }
            assert_eq!(counted, expected + biases, "{id}");
        }
    }

    /// AdamW reads four tensors and writes three of every parameter's size.
    #[test]
    fn adamw_moves_seven_words_per_parameter() {
        let cfg = Config::load("tiny").unwrap();
        let p = Program::new(&cfg);
        assert_eq!(p.cost(Step::AdamW).bytes, 28.0 * cfg.param_count() as f64);
    }

    /// Matmuls are the compute-bound part: at every preset the linears'
    /// intensity is several times GELU's and two orders above a residual add's.
    #[test]
    fn linears_have_more_flops_per_byte_than_element_wise_ops() {
        for id in ["small", "xl", "nanogpt-char"] {
            let p = Program::new(&Config::load(id).unwrap());
            let of = |kind: &str| {
                p.steps
                    .iter()
                    .filter(|s| matches!(s, Step::Forward(i) if p.ops[*i].op.kind_name() == kind))
                    .map(|s| p.cost(*s).intensity())
                    .fold(f64::INFINITY, f64::min)
            };
            assert!(of("linear") > 100.0 * of("residual"), "{id}");
            assert!(of("linear") > 5.0 * of("gelu"), "{id}");
        }
    }
}
