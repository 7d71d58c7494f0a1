//! The program: one training step of TinyGPT as an ordered list of ops over
//! named tensors, built from a [`Config`].
//!
//! Every backend executes this list (the CPU reference, the GPU kernels), the
//! trainer runs it whole, a step-through view can run it one op at a time, and
//! the app mirrors its layers, ops and tensors as entities. Nothing about the
//! model's structure is written down anywhere else.
//!
//! Shape letters, used in every comment: B batch, T context (time), C width
//! (`d_model`), H heads, D head_dim = C/H, L layers, V vocab (256), N = B·T rows.

pub mod cost;

use crate::model::config::{Config, Lora, VOCAB};

/// Index of a tensor in [`Program::tensors`].
pub type TensorId = usize;

/// What a tensor holds, which decides who allocates, writes and saves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorKind {
    /// Token ids of the batch (u32), written by the data pipeline.
    Input,
    /// A trainable parameter, saved in checkpoints.
    Param,
    /// An activation the forward pass writes (and the backward pass reads).
    Activation,
    /// A value saved by the forward pass for the backward pass only
    /// (LayerNorm mean and 1/std, attention log-sum-exp).
    Saved,
    /// The gradient of the loss with respect to a parameter or activation.
    Grad,
    /// AdamW's first moment of a parameter.
    AdamM,
    /// AdamW's second moment of a parameter.
    AdamV,
    /// What a probe (outside the training step) writes for the explainer to
    /// read: the attention weights P of one batch row.
    Probe,
}

#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Unique name; parameters use nanoGPT's checkpoint names.
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: TensorKind,
    /// The layer this tensor belongs to (index into [`Program::layers`]).
    pub layer: usize,
    /// Its gradient tensor, for parameters and activations that have one
    /// (a frozen parameter has none).
    pub grad: Option<TensorId>,
    /// For trained parameters: AdamW moments (weight decay applies to ≥2-D).
    pub adam: Option<(TensorId, TensorId)>,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// A parameter that training leaves as it is: a LoRA fine-tune's base
    /// weights, which get no gradient and no optimizer state.
    pub fn is_frozen(&self) -> bool {
        self.kind == TensorKind::Param && self.grad.is_none()
    }
}

/// A forward op. Each op's backward is derived from it: it reads the op's
/// inputs, outputs and saved values and *accumulates* into the inputs' grads,
/// except where [`Program::writes_gradient`] says it is the gradient's first
/// writer: there it writes the gradient outright, so a whole step need not
/// zero it first ([`Program::written_gradients`]). Both give the same
/// numbers (0 + x = x); the write saves a pass over memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `out[b,t] = wte[tokens[b,t]] + wpe[t]`. tokens (B,T), wte (V,C), wpe (T,C) -> out (B,T,C)
    /// `wpe` is `None` in the lab without position embeddings: `out = wte[tokens]`
    /// (the parameter stays in the checkpoint, unread and untrained).
    Embedding {
        tokens: TensorId,
        wte: TensorId,
        wpe: Option<TensorId>,
        out: TensorId,
    },
    /// Per-row LayerNorm, eps 1e-5. inp (N,C) -> out (N,C), mean (N), rstd (N)
    LayerNorm {
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        mean: TensorId,
        rstd: TensorId,
    },
    /// `out = inp · weightᵀ + bias`, weight in PyTorch's [out, in] layout.
    /// inp (N,IN), weight (OUT,IN), bias (OUT) -> out (N,OUT)
    Linear {
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        in_features: usize,
        out_features: usize,
    },
    /// Causal multi-head self-attention on the fused q|k|v projection, scale
    /// 1/√D, dropout `p` on the attention weights (stream `stream`).
    /// `causal` is false only in the lab without the mask: every position
    /// then attends to all T positions.
    /// qkv (B,T,3C) -> out (B,T,C), lse (B,H,T) (the log-sum-exp of each score row)
    Attention {
        qkv: TensorId,
        out: TensorId,
        lse: TensorId,
        n_head: usize,
        causal: bool,
        dropout: f32,
        stream: u32,
    },
    /// GELU, the erf form `½x(1 + erf(x/√2))` (f32 backends: erf by
    /// Abramowitz & Stegun 7.1.26, |error| ≤ 1.5e-7). inp (N,F) -> out (N,F)
    Gelu { inp: TensorId, out: TensorId },
    /// Residual connection `out = a + b`. (B,T,C)
    Residual {
        a: TensorId,
        b: TensorId,
        out: TensorId,
    },
    /// Inverted dropout with probability `p`; identity when evaluating.
    Dropout {
        inp: TensorId,
        out: TensorId,
        p: f32,
        stream: u32,
    },
    /// LoRA's low-rank update of a frozen linear's output `base`:
    /// `mid = inp · Aᵀ`, `out = base + scale · mid · Bᵀ` (scale = α/r).
    /// inp (N,IN), lora_a (R,IN), lora_b (OUT,R), base (N,OUT) -> mid (N,R), out (N,OUT)
    LowRank {
        inp: TensorId,
        lora_a: TensorId,
        lora_b: TensorId,
        base: TensorId,
        mid: TensorId,
        out: TensorId,
        rank: usize,
        in_features: usize,
        out_features: usize,
        scale: f32,
    },
    /// The LM head tied to the token embedding: `logits = inp · wteᵀ`. inp (N,C), wte (V,C) -> logits (N,V)
    TiedHead {
        inp: TensorId,
        wte: TensorId,
        out: TensorId,
    },
    /// Fused softmax + cross-entropy; the mean over rows is the loss. Its
    /// backward writes `dlogits = (softmax - onehot) / N`.
    /// logits (N,V), targets (N) -> losses (N)
    CrossEntropy {
        logits: TensorId,
        targets: TensorId,
        losses: TensorId,
    },
}

impl Op {
    /// Short kernel-family name, as the GPU shaders and the UI call it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Embedding { .. } => "embedding",
            Op::LayerNorm { .. } => "layernorm",
            Op::Linear { .. } => "linear",
            Op::LowRank { .. } => "lora",
            Op::Attention { .. } => "attention",
            Op::Gelu { .. } => "gelu",
            Op::Residual { .. } => "residual",
            Op::Dropout { .. } => "dropout",
            Op::TiedHead { .. } => "tied_head",
            Op::CrossEntropy { .. } => "cross_entropy",
        }
    }

    /// Whether this op's backward can write the gradient of its input
    /// `input` outright rather than add to it (the backends have a writing
    /// form of these kernels; the others always add).
    pub fn can_write_gradient_of(&self, input: TensorId) -> bool {
        match *self {
            Op::Residual { a, b, .. } => a != b,
            Op::Dropout { .. } | Op::Gelu { .. } => true,
            Op::Linear { inp, .. } | Op::TiedHead { inp, .. } => input == inp,
            _ => false,
        }
    }

    /// (inputs, outputs) of the forward op.
    pub fn io(&self) -> (Vec<TensorId>, Vec<TensorId>) {
        match *self {
            Op::Embedding {
                tokens,
                wte,
                wpe,
                out,
            } => match wpe {
                Some(wpe) => (vec![tokens, wte, wpe], vec![out]),
                None => (vec![tokens, wte], vec![out]),
            },
            Op::LayerNorm {
                inp,
                weight,
                bias,
                out,
                mean,
                rstd,
            } => (vec![inp, weight, bias], vec![out, mean, rstd]),
            Op::Linear {
                inp,
                weight,
                bias,
                out,
                ..
            } => (vec![inp, weight, bias], vec![out]),
            Op::LowRank {
                inp,
                lora_a,
                lora_b,
                base,
                mid,
                out,
                ..
            } => (vec![inp, lora_a, lora_b, base], vec![mid, out]),
            Op::Attention { qkv, out, lse, .. } => (vec![qkv], vec![out, lse]),
            Op::Gelu { inp, out } => (vec![inp], vec![out]),
            Op::Residual { a, b, out } => (vec![a, b], vec![out]),
            Op::Dropout { inp, out, .. } => (vec![inp], vec![out]),
            Op::TiedHead { inp, wte, out } => (vec![inp, wte], vec![out]),
            Op::CrossEntropy {
                logits,
                targets,
                losses,
            } => (vec![logits, targets], vec![losses]),
        }
    }
}

/// A forward op with the layer it belongs to and a readable label.
#[derive(Clone, Debug)]
pub struct OpNode {
    pub op: Op,
    pub layer: usize,
    /// e.g. `h.0.attn.c_attn`
    pub label: String,
}

/// One entry of the step: what a backend does, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Zero every gradient (the backward ops accumulate): between the
    /// forward ops and the first backward op. A whole training step zeroes
    /// only those no backward op writes outright
    /// ([`Program::written_gradients`]); run on its own (the step-through),
    /// it zeroes all, so a view sees each gradient start from zero.
    ZeroGrads,
    /// Run forward op `i` of [`Program::ops`].
    Forward(usize),
    /// Run the backward of forward op `i`.
    Backward(usize),
    /// Compute the global gradient norm and scale the grads to `grad_clip`.
    ClipGradNorm,
    /// AdamW update of every parameter.
    AdamW,
    /// A probe, not part of the training step (see [`Program::probes`]):
    /// after a forward pass, recompute the attention weights of forward op
    /// `i` (an [`Op::Attention`]) for one batch row from the saved q, k and
    /// log-sum-exp, `P[h,i,j] = exp(q_i·k_j/√D − lse[h,i])` for j ≤ i, else 0
    /// (for every j < n without the causal mask),
    /// into [`Program::probs`] as (H, n, n) for the row's first n positions.
    /// FlashAttention never stores P; this is how it is seen. The row and n
    /// are set on the backend before it runs ([`ProbeWindow`]).
    AttentionProbs(usize),
}

/// Which part of a forward pass a probe looks at: batch row `row`, positions
/// `0..n` (n ≤ T). Causal attention makes these positions independent of the
/// row's later bytes, so a prompt of n bytes padded to T shows exactly the
/// prompt's own attention. (Without the mask the padding is seen too, so a
/// probe of such a model shows all T positions.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeWindow {
    pub row: usize,
    pub n: usize,
}

/// A layer of the model as the explainer shows it.
#[derive(Clone, Debug)]
pub struct LayerInfo {
    /// `embeddings`, `h.0` … `h.{L-1}`, `ln_f`, `head`
    pub name: String,
    pub title: String,
}

/// The whole step: tensors, forward ops and the ordered step list.
#[derive(Clone, Debug)]
pub struct Program {
    pub config: Config,
    pub tensors: Vec<TensorInfo>,
    pub layers: Vec<LayerInfo>,
    pub ops: Vec<OpNode>,
    pub steps: Vec<Step>,
    /// Tokens (B,T) and targets (B,T).
    pub tokens: TensorId,
    pub targets: TensorId,
    /// Per-position losses (B,T); their mean is the loss.
    pub losses: TensorId,
    pub logits: TensorId,
    /// The probes the explainer can run after a forward pass, one
    /// [`Step::AttentionProbs`] per attention op, in layer order. Not part of
    /// [`Program::steps`]: training never runs them.
    pub probes: Vec<Step>,
    /// Where [`Step::AttentionProbs`] writes: (H, T, T) capacity, holding
    /// (H, n, n) after a probe of n positions.
    pub probs: TensorId,
    /// `step.stats` (4): the cross-entropy forward writes [0] the mean loss,
    /// [`Step::ClipGradNorm`] writes [1] the gradient norm before clipping,
    /// [2] the factor the gradients were scaled by and [3] Σ grad².
    pub stats: TensorId,
}

struct Builder {
    tensors: Vec<TensorInfo>,
    layers: Vec<LayerInfo>,
    ops: Vec<OpNode>,
    layer: usize,
    next_stream: u32,
    /// Every tensor name so far (a linear scan made a 1000-layer program
    /// take seconds to build: the fuzzer's first finding).
    names: std::collections::HashSet<String>,
    /// The LoRA fine-tune, if this is one: then every base parameter is
    /// frozen and the targeted linears gain their adapters.
    lora: Option<Lora>,
}

impl Builder {
    fn layer(&mut self, name: &str, title: &str) {
        self.layers.push(LayerInfo {
            name: name.into(),
            title: title.into(),
        });
        self.layer = self.layers.len() - 1;
    }

    fn tensor(&mut self, name: &str, shape: &[usize], kind: TensorKind) -> TensorId {
        assert!(self.names.insert(name.into()), "duplicate tensor {name}");
        self.tensors.push(TensorInfo {
            name: name.into(),
            shape: shape.to_vec(),
            kind,
            layer: self.layer,
            grad: None,
            adam: None,
        });
        self.tensors.len() - 1
    }

    /// A parameter of the model: trained (with its gradient and AdamW
    /// moments), or frozen in a LoRA fine-tune (with neither).
    fn param(&mut self, name: &str, shape: &[usize]) -> TensorId {
        if self.lora.is_some() {
            return self.tensor(name, shape, TensorKind::Param);
        }
        self.trained_param(name, shape)
    }

    /// A parameter with its gradient and AdamW moments.
    fn trained_param(&mut self, name: &str, shape: &[usize]) -> TensorId {
        let id = self.tensor(name, shape, TensorKind::Param);
        let g = self.tensor(&format!("grad.{name}"), shape, TensorKind::Grad);
        let m = self.tensor(&format!("adam.m.{name}"), shape, TensorKind::AdamM);
        let v = self.tensor(&format!("adam.v.{name}"), shape, TensorKind::AdamV);
        self.tensors[id].grad = Some(g);
        self.tensors[id].adam = Some((m, v));
        id
    }

    /// An activation with its gradient.
    fn act(&mut self, name: &str, shape: &[usize]) -> TensorId {
        let id = self.tensor(name, shape, TensorKind::Activation);
        let g = self.tensor(&format!("grad.{name}"), shape, TensorKind::Grad);
        self.tensors[id].grad = Some(g);
        id
    }

    fn op(&mut self, label: &str, op: Op) {
        self.ops.push(OpNode {
            op,
            layer: self.layer,
            label: label.into(),
        });
    }

    /// A linear `inp · weightᵀ + bias` (weight and bias named
    /// `{param}.weight`, `.bias`) into a new activation `out_name` of shape
    /// `out_shape`; with LoRA on this linear, its low-rank update after it
    /// (`out_name` is then the adapted output, `{out_name}.base` the frozen
    /// linear's).
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &mut self,
        label: &str,
        param: &str,
        inp: TensorId,
        out_name: &str,
        out_shape: &[usize],
        in_features: usize,
        out_features: usize,
    ) -> TensorId {
        let lora = self.lora.filter(|l| l.targets.adapts(label));
        let base_name = match lora {
            Some(_) => format!("{out_name}.base"),
            None => out_name.to_string(),
        };
        let out = self.act(&base_name, out_shape);
        let weight = self.param(&format!("{param}.weight"), &[out_features, in_features]);
        let bias = self.param(&format!("{param}.bias"), &[out_features]);
        self.op(
            label,
            Op::Linear {
                inp,
                weight,
                bias,
                out,
                in_features,
                out_features,
            },
        );
        let Some(lora) = lora else {
            return out;
        };
        let r = lora.rank;
        let lora_a = self.trained_param(&format!("{param}.lora_A.weight"), &[r, in_features]);
        let lora_b = self.trained_param(&format!("{param}.lora_B.weight"), &[out_features, r]);
        let mut mid_shape = out_shape.to_vec();
        *mid_shape.last_mut().expect("an activation has a shape") = r;
        let mid = self.act(&format!("{label}.lora.down"), &mid_shape);
        let adapted = self.act(out_name, out_shape);
        self.op(
            &format!("{label}.lora"),
            Op::LowRank {
                inp,
                lora_a,
                lora_b,
                base: out,
                mid,
                out: adapted,
                rank: r,
                in_features,
                out_features,
                scale: lora.scale(),
            },
        );
        adapted
    }

    fn stream(&mut self) -> u32 {
        self.next_stream += 1;
        self.next_stream
    }

    /// Dropout after `inp` when the config has dropout, else `inp` itself.
    fn dropout(&mut self, name: &str, inp: TensorId, p: f32, shape: &[usize]) -> TensorId {
        if p == 0.0 {
            return inp;
        }
        let out = self.act(name, shape);
        let stream = self.stream();
        self.op(
            name,
            Op::Dropout {
                inp,
                out,
                p,
                stream,
            },
        );
        out
    }
}

impl Program {
    pub fn new(config: &Config) -> Self {
        let (b, t, c, l, h) = (
            config.batch,
            config.ctx,
            config.d_model,
            config.n_layer,
            config.n_head,
        );
        let p = config.dropout;
        let mut g = Builder {
            tensors: vec![],
            layers: vec![],
            ops: vec![],
            layer: 0,
            next_stream: 0,
            names: Default::default(),
            lora: config.lora,
        };

        let lab = config.lab;
        g.layer(
            "embeddings",
            if lab.position_embeddings {
                "Token + position embeddings"
            } else {
                "Token embeddings (lab: no position embeddings)"
            },
        );
        let tokens = g.tensor("tokens", &[b, t], TensorKind::Input);
        let targets = g.tensor("targets", &[b, t], TensorKind::Input);
        let wte = g.param("transformer.wte.weight", &[VOCAB, c]);
        let wpe = g.param("transformer.wpe.weight", &[t, c]);
        let emb = g.act("emb", &[b, t, c]);
        g.op(
            "embedding",
            Op::Embedding {
                tokens,
                wte,
                wpe: lab.position_embeddings.then_some(wpe),
                out: emb,
            },
        );
        let mut x = g.dropout("emb.drop", emb, p, &[b, t, c]);

        for i in 0..l {
            let n = format!("transformer.h.{i}");
            g.layer(&format!("h.{i}"), &format!("Block {i}"));
            // x = x + attn(ln_1(x))
            let ln1 = g.act(&format!("h.{i}.ln_1.out"), &[b, t, c]);
            let ln1_mean = g.tensor(&format!("h.{i}.ln_1.mean"), &[b, t], TensorKind::Saved);
            let ln1_rstd = g.tensor(&format!("h.{i}.ln_1.rstd"), &[b, t], TensorKind::Saved);
            let ln1_w = g.param(&format!("{n}.ln_1.weight"), &[c]);
            let ln1_b = g.param(&format!("{n}.ln_1.bias"), &[c]);
            g.op(
                &format!("h.{i}.ln_1"),
                Op::LayerNorm {
                    inp: x,
                    weight: ln1_w,
                    bias: ln1_b,
                    out: ln1,
                    mean: ln1_mean,
                    rstd: ln1_rstd,
                },
            );
            let qkv = g.linear(
                &format!("h.{i}.attn.c_attn"),
                &format!("{n}.attn.c_attn"),
                ln1,
                &format!("h.{i}.attn.qkv"),
                &[b, t, 3 * c],
                c,
                3 * c,
            );
            let y = g.act(&format!("h.{i}.attn.y"), &[b, t, c]);
            let lse = g.tensor(&format!("h.{i}.attn.lse"), &[b, h, t], TensorKind::Saved);
            let stream = if p > 0.0 { g.stream() } else { 0 };
            g.op(
                &format!("h.{i}.attn"),
                Op::Attention {
                    qkv,
                    out: y,
                    lse,
                    n_head: h,
                    causal: lab.causal_mask,
                    dropout: p,
                    stream,
                },
            );
            let proj = g.linear(
                &format!("h.{i}.attn.c_proj"),
                &format!("{n}.attn.c_proj"),
                y,
                &format!("h.{i}.attn.proj"),
                &[b, t, c],
                c,
                c,
            );
            let proj = g.dropout(&format!("h.{i}.attn.drop"), proj, p, &[b, t, c]);
            let res1 = g.act(&format!("h.{i}.res_1"), &[b, t, c]);
            g.op(
                &format!("h.{i}.res_1"),
                Op::Residual {
                    a: x,
                    b: proj,
                    out: res1,
                },
            );
            // x = x + mlp(ln_2(x))
            let ln2 = g.act(&format!("h.{i}.ln_2.out"), &[b, t, c]);
            let ln2_mean = g.tensor(&format!("h.{i}.ln_2.mean"), &[b, t], TensorKind::Saved);
            let ln2_rstd = g.tensor(&format!("h.{i}.ln_2.rstd"), &[b, t], TensorKind::Saved);
            let ln2_w = g.param(&format!("{n}.ln_2.weight"), &[c]);
            let ln2_b = g.param(&format!("{n}.ln_2.bias"), &[c]);
            g.op(
                &format!("h.{i}.ln_2"),
                Op::LayerNorm {
                    inp: res1,
                    weight: ln2_w,
                    bias: ln2_b,
                    out: ln2,
                    mean: ln2_mean,
                    rstd: ln2_rstd,
                },
            );
            let fc = g.linear(
                &format!("h.{i}.mlp.c_fc"),
                &format!("{n}.mlp.c_fc"),
                ln2,
                &format!("h.{i}.mlp.fc"),
                &[b, t, 4 * c],
                c,
                4 * c,
            );
            let gelu = g.act(&format!("h.{i}.mlp.gelu"), &[b, t, 4 * c]);
            g.op(&format!("h.{i}.mlp.gelu"), Op::Gelu { inp: fc, out: gelu });
            let mproj = g.linear(
                &format!("h.{i}.mlp.c_proj"),
                &format!("{n}.mlp.c_proj"),
                gelu,
                &format!("h.{i}.mlp.proj"),
                &[b, t, c],
                4 * c,
                c,
            );
            let mproj = g.dropout(&format!("h.{i}.mlp.drop"), mproj, p, &[b, t, c]);
            let res2 = g.act(&format!("h.{i}.res_2"), &[b, t, c]);
            g.op(
                &format!("h.{i}.res_2"),
                Op::Residual {
                    a: res1,
                    b: mproj,
                    out: res2,
                },
            );
            x = res2;
        }

        g.layer("ln_f", "Final LayerNorm");
        let lnf = g.act("ln_f.out", &[b, t, c]);
        let lnf_mean = g.tensor("ln_f.mean", &[b, t], TensorKind::Saved);
        let lnf_rstd = g.tensor("ln_f.rstd", &[b, t], TensorKind::Saved);
        let lnf_w = g.param("transformer.ln_f.weight", &[c]);
        let lnf_b = g.param("transformer.ln_f.bias", &[c]);
        g.op(
            "ln_f",
            Op::LayerNorm {
                inp: x,
                weight: lnf_w,
                bias: lnf_b,
                out: lnf,
                mean: lnf_mean,
                rstd: lnf_rstd,
            },
        );

        g.layer("head", "LM head (tied to wte) + cross-entropy");
        let logits = g.act("logits", &[b, t, VOCAB]);
        g.op(
            "lm_head",
            Op::TiedHead {
                inp: lnf,
                wte,
                out: logits,
            },
        );
        let losses = g.tensor("losses", &[b, t], TensorKind::Saved);
        g.op(
            "cross_entropy",
            Op::CrossEntropy {
                logits,
                targets,
                losses,
            },
        );

        // What the step measures, for the trainer and the step-through:
        // [mean loss, gradient norm before clipping, clip factor, Σ grad²].
        let stats = g.tensor("step.stats", &[4], TensorKind::Saved);

        // The probes' output, one for all layers (each probe overwrites it).
        let probs = g.tensor("attn.probs", &[h, t, t], TensorKind::Probe);

        let n_ops = g.ops.len();
        let probes = g
            .ops
            .iter()
            .enumerate()
            .filter(|(_, node)| matches!(node.op, Op::Attention { .. }))
            .map(|(i, _)| Step::AttentionProbs(i))
            .collect();
        // The gradients are zeroed between the passes (the forward ops never
        // touch them), so the list reads as the step does: forward, then
        // backward, clip and update.
        let mut steps: Vec<Step> = (0..n_ops).map(Step::Forward).collect();
        steps.push(Step::ZeroGrads);
        steps.extend((0..n_ops).rev().map(Step::Backward));
        steps.push(Step::ClipGradNorm);
        steps.push(Step::AdamW);

        Program {
            config: config.clone(),
            tensors: g.tensors,
            layers: g.layers,
            ops: g.ops,
            steps,
            tokens,
            targets,
            losses,
            logits,
            probes,
            probs,
            stats,
        }
    }

    pub fn tensor_id(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// The op that writes tensor `id` in the forward pass (its index in
    /// `ops`), if one does: none for the inputs and the parameters. A tensor
    /// has one writer at most (a test says so).
    pub fn writer(&self, id: TensorId) -> Option<usize> {
        self.ops.iter().position(|o| o.op.io().1.contains(&id))
    }

    /// For each tensor, the last forward op that reads it: the first whose
    /// backward reaches its gradient, since the backward runs in reverse.
    pub fn last_readers(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.tensors.len()];
        for (i, node) in self.ops.iter().enumerate() {
            for id in node.op.io().0 {
                last[id] = Some(i);
            }
        }
        last
    }

    /// Whether the backward of op `op` writes the gradient of its input
    /// `input` outright: the input is an activation, `op` is its last reader
    /// (`last_readers`, so nothing has added to the gradient yet this step)
    /// and its backward has a writing form. Every backend follows this.
    pub fn writes_gradient(&self, last_readers: &[Option<usize>], op: usize, input: TensorId) -> bool {
        self.tensors[input].kind == TensorKind::Activation
            && self.tensors[input].grad.is_some()
            && last_readers[input] == Some(op)
            && self.ops[op].op.can_write_gradient_of(input)
    }

    /// The gradients some backward op writes outright before any adds to
    /// them: a whole training step leaves them unzeroed (the step-through's
    /// [`Step::ZeroGrads`] still zeroes every gradient, for the view).
    pub fn written_gradients(&self) -> std::collections::HashSet<TensorId> {
        let last = self.last_readers();
        (0..self.ops.len())
            .flat_map(|i| {
                let last = &last;
                self.ops[i]
                    .op
                    .io()
                    .0
                    .into_iter()
                    .filter(move |&x| self.writes_gradient(last, i, x))
            })
            .filter_map(|x| self.tensors[x].grad)
            .collect()
    }

    /// Parameter ids in program order (the checkpoint's order).
    pub fn params(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.kind == TensorKind::Param)
            .map(|(i, _)| i)
    }

    /// The parameters training updates, in program order: all of them, or
    /// a LoRA fine-tune's adapters only.
    pub fn trained(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.params().filter(|&id| !self.tensors[id].is_frozen())
    }

    /// A LoRA fine-tune's frozen base parameters (none otherwise).
    pub fn frozen(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.params().filter(|&id| self.tensors[id].is_frozen())
    }

    /// Whether AdamW decays this parameter: every tensor with ≥2 dimensions.
    pub fn decays(&self, id: TensorId) -> bool {
        self.tensors[id].shape.len() >= 2
    }

    /// The attention probe of transformer block `block` (0-based).
    pub fn attention_probe(&self, block: usize) -> Option<Step> {
        self.probes.get(block).copied()
    }

    /// The op family an entry of the step belongs to, as the kernel timings
    /// group it: `fwd linear`, `bwd attention`, `ZeroGrads`, `AdamW`, ...
    pub fn family(&self, step: Step) -> String {
        match step {
            Step::Forward(i) => format!("fwd {}", self.ops[i].op.kind_name()),
            Step::Backward(i) => format!("bwd {}", self.ops[i].op.kind_name()),
            other => format!("{other:?}"),
        }
    }

    /// Rows of the residual stream, N = B·T.
    pub fn rows(&self) -> usize {
        self.config.batch * self.config.ctx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_tensors_add_up_to_the_formula() {
        for (id, _) in crate::model::config::BUILTIN_PRESETS {
            let cfg = Config::load(id).unwrap();
            let p = Program::new(&cfg);
            let n: usize = p.params().map(|i| p.tensors[i].numel()).sum();
            assert_eq!(n, cfg.param_count(), "{id}");
        }
    }

    #[test]
    fn a_written_gradient_has_nothing_added_before_its_writer() {
        // Walk the backward as the step runs it: each written gradient's
        // writer comes first, before any op adds to it, and is its only
        // writer; a whole step zeroes only the others.
        let mut dropout = Config::load("tiny").unwrap();
        dropout.dropout = 0.1;
        for cfg in [Config::load("nanogpt-char").unwrap(), dropout] {
            let p = Program::new(&cfg);
            let last = p.last_readers();
            let written = p.written_gradients();
            let mut touched = std::collections::HashSet::new();
            for step in &p.steps {
                let Step::Backward(i) = *step else { continue };
                for x in p.ops[i].op.io().0 {
                    let Some(g) = p.tensors[x].grad else { continue };
                    if p.writes_gradient(&last, i, x) {
                        assert!(written.contains(&g));
                        assert!(touched.insert(g), "{} is written after something added to it", p.tensors[g].name);
                    } else {
                        touched.insert(g);
                    }
                }
            }
            // Most activations' gradients are written outright: all but
            // attention's q|k|v and the logits, whose backwards add.
            let activations = p.tensors.iter().filter(|t| t.kind == TensorKind::Activation).count();
            assert!(written.len() * 4 >= activations * 3, "{} of {activations}", written.len());
            assert!(written.iter().all(|&g| p.tensors[g].kind == TensorKind::Grad));
        }
    }

    #[test]
    fn every_op_input_is_written_before_it_is_read() {
        let cfg = Config::load("nanogpt-char").unwrap();
        let p = Program::new(&cfg);
        let mut ready: Vec<bool> = p
            .tensors
            .iter()
            .map(|t| matches!(t.kind, TensorKind::Input | TensorKind::Param))
            .collect();
        for node in &p.ops {
            let (ins, outs) = node.op.io();
            for i in ins {
                assert!(
                    ready[i],
                    "{} reads {} before it is written",
                    node.label, p.tensors[i].name
                );
            }
            for o in outs {
                assert!(!ready[o], "{} is written twice", p.tensors[o].name);
                ready[o] = true;
            }
        }
        // Program::writer finds each activation's one writer.
        for (id, t) in p.tensors.iter().enumerate() {
            let activation = !matches!(t.kind, TensorKind::Input | TensorKind::Param);
            assert_eq!(p.writer(id).is_some(), ready[id] && activation, "{}", t.name);
        }
    }
}
