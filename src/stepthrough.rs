//! Stepping through one training step, entry by entry: the program's step
//! list ([`Program::steps`]) as a timeline ([`entries`]), and for each entry
//! the tensors it reads and writes, read back around its execution on the
//! real backend ([`EntryRun`]) and summarised for the view ([`EntryView`]).
//!
//! Nothing here computes an op: an entry runs through
//! [`Backend::run_entries`], the code [`Backend::train_step`] runs. The
//! trainer's step cursor ([`crate::train::StepCursor`]) drives it for the
//! CLI (`tinygpt step`) and the tests; the app's Step scene drives the same
//! [`EntryRun`] without waiting for the GPU.

use crate::backend::{Backend, BackendError, PendingRead};
use crate::data::Batch;
use crate::program::{Op, Program, Step, TensorId, TensorKind};
use serde::Serialize;

/// The part of the training step an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Backward,
    Clip,
    Optimizer,
}

impl Phase {
    pub fn key(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Clip => "clip",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// One entry of the step list, described for people.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    /// Index into [`Program::steps`].
    pub index: usize,
    #[serde(skip)]
    pub step: Step,
    pub phase: Phase,
    /// Index into [`Program::layers`] (the clip and AdamW: the last layer).
    #[serde(skip)]
    pub layer: usize,
    /// The layer's name (`embeddings`, `h.0`, …, `ln_f`, `head`), or `all`.
    #[serde(rename = "layer")]
    pub layer_name: String,
    /// The op's label, e.g. `h.0.attn.c_attn` or `h.0.attn.c_attn backward`.
    #[serde(rename = "op")]
    pub label: String,
    /// The kernel family, e.g. `linear`, `zero_grad`, `adamw`.
    pub kind: String,
    /// One line of maths for what the entry computes.
    pub math: String,
}

/// The timeline: every entry of the program's step, in order.
pub fn entries(program: &Program) -> Vec<Entry> {
    let last_layer = program.layers.len() - 1;
    program
        .steps
        .iter()
        .enumerate()
        .filter_map(|(index, &step)| {
            let (phase, layer, label, kind, math) = match step {
                Step::Forward(i) => {
                    let node = &program.ops[i];
                    (
                        Phase::Forward,
                        node.layer,
                        node.label.clone(),
                        node.op.kind_name().to_string(),
                        forward_math(&node.op),
                    )
                }
                Step::Backward(i) => {
                    let node = &program.ops[i];
                    (
                        Phase::Backward,
                        node.layer,
                        format!("{} backward", node.label),
                        node.op.kind_name().to_string(),
                        backward_math(&node.op, program),
                    )
                }
                Step::ZeroGrads => (
                    Phase::Backward,
                    last_layer,
                    "zero_grad".into(),
                    "zero_grad".into(),
                    "grad = 0 for every tensor: the backward ops then add (+=) into them".into(),
                ),
                Step::ClipGradNorm => (
                    Phase::Clip,
                    last_layer,
                    "clip_grad_norm".into(),
                    "clip".into(),
                    format!(
                        "‖g‖ = √Σ g² over every parameter;  g ← g · min(1, {} / (‖g‖ + 1e-6))",
                        program.config.grad_clip
                    ),
                ),
                Step::AdamW => (
                    Phase::Optimizer,
                    last_layer,
                    "adamw".into(),
                    "adamw".into(),
                    "m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²,  w ← w·(1 − lr·λ) − lr · (m/(1−β₁^t)) / (√(v/(1−β₂^t)) + ε)"
                        .into(),
                ),
                Step::AttentionProbs(_) => return None,
            };
            Some(Entry {
                index,
                step,
                phase,
                layer,
                layer_name: if matches!(phase, Phase::Clip | Phase::Optimizer) {
                    "all".into()
                } else {
                    program.layers[layer].name.clone()
                },
                label,
                kind,
                math,
            })
        })
        .collect()
}

fn forward_math(op: &Op) -> String {
    match op {
        Op::Embedding { wpe: Some(_), .. } => "x[b,t] = wte[token[b,t]] + wpe[t]".into(),
        Op::Embedding { wpe: None, .. } => {
            "x[b,t] = wte[token[b,t]]   (lab: no position embeddings, so nothing says where a byte is)".into()
        }
        Op::LayerNorm { .. } => "y = (x − mean(x)) / √(var(x) + 1e-5) · γ + β   (per row)".into(),
        Op::Linear { .. } => "out = inp · Wᵀ + b".into(),
        Op::LowRank { scale, .. } => format!(
            "down = inp · Aᵀ,  out = base + {scale} · down · Bᵀ   (LoRA: W stays frozen; A and B learn)"
        ),
        Op::Attention { causal: true, .. } => {
            "P = softmax(QKᵀ/√D + causal mask),  y = P·V   (FlashAttention: P is never stored; lse = log Σ exp(row))".into()
        }
        Op::Attention { causal: false, .. } => {
            "P = softmax(QKᵀ/√D),  y = P·V   (lab: no causal mask, so position t also reads t+1, the byte it must predict)".into()
        }
        Op::Gelu { .. } => "y = ½ x (1 + erf(x / √2))".into(),
        Op::Residual { .. } => "out = a + b   (the residual stream)".into(),
        Op::Dropout { p, .. } => format!("y = x · mask / (1 − {p}),  mask ~ Bernoulli(1 − {p})"),
        Op::TiedHead { .. } => "logits = x · wteᵀ   (the head shares the token embedding)".into(),
        Op::CrossEntropy { .. } => {
            "loss[b,t] = −log softmax(logits[b,t])[target[b,t]];  the loss is their mean".into()
        }
    }
}

fn backward_math(op: &Op, program: &Program) -> String {
    let frozen = |id: TensorId| program.tensors[id].is_frozen();
    match op {
        Op::Embedding { wte, .. } if frozen(*wte) => {
            "nothing: the embeddings are frozen (a LoRA fine-tune)".into()
        }
        Op::LayerNorm { weight, .. } if frozen(*weight) => {
            "dx += rstd · (dn − mean(dn) − n · mean(dn · n)),  n = (x − mean)·rstd, dn = dy·γ   (γ, β frozen)".into()
        }
        Op::Linear { weight, .. } if frozen(*weight) => {
            "dinp += dout · W   (W and b frozen: no gradient, no AdamW state)".into()
        }
        Op::TiedHead { wte, .. } if frozen(*wte) => "dx += dlogits · wte   (wte frozen)".into(),
        Op::Embedding { wpe: Some(_), .. } => "dwte[token] += dx,  dwpe[t] += Σ_b dx[b,t]".into(),
        Op::Embedding { wpe: None, .. } => "dwte[token] += dx   (no position embeddings to train)".into(),
        Op::LayerNorm { .. } => {
            "dx += rstd · (dn − mean(dn) − n · mean(dn · n)),  n = (x − mean)·rstd, dn = dy·γ;  dγ += Σ dy·n,  dβ += Σ dy".into()
        }
        Op::Linear { .. } => "dinp += dout · W,  dW += doutᵀ · inp,  db += Σ_rows dout".into(),
        Op::LowRank { scale, .. } => format!(
            "dbase += dout,  dB += {scale} · doutᵀ · down,  ddown = {scale} · dout · B,  dA += ddownᵀ · inp,  dinp += ddown · A"
        ),
        Op::Attention { .. } => {
            "dV = Pᵀ·dy,  dP = dy·Vᵀ,  dS = P ∘ (dP − rowsum(dy ∘ y)),  dQ = dS·K/√D,  dK = dSᵀ·Q/√D   (P recomputed from lse)".into()
        }
        Op::Gelu { .. } => "dx += dy · gelu′(x)".into(),
        Op::Residual { .. } => "da += dout,  db += dout   (the gradient flows down both paths)".into(),
        Op::Dropout { p, .. } => format!("dx += dy · mask / (1 − {p})   (the same mask)"),
        Op::TiedHead { .. } => "dx += dlogits · wte,  dwte += dlogitsᵀ · x".into(),
        Op::CrossEntropy { .. } => "dlogits = (softmax(logits) − onehot(target)) / (B·T)".into(),
    }
}

/// What a tensor is to the entry that shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An activation (or token ids) the op reads.
    Input,
    /// A parameter the op reads.
    Param,
    /// What the forward op writes.
    Output,
    /// What the forward op saves for the backward pass.
    Saved,
    /// The gradient arriving from above (of the op's output).
    Upstream,
    /// A gradient the op accumulates into (of an input or a parameter).
    Grad,
    /// A parameter's gradient after clipping.
    Clipped,
    /// AdamW: the weights before / after the update.
    WeightBefore,
    WeightAfter,
    /// AdamW: the first and second moments after the update.
    Momentum,
    Variance,
    /// AdamW: w_after − w_before.
    Update,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Param => "parameter",
            Role::Output => "output",
            Role::Saved => "saved for backward",
            Role::Upstream => "upstream gradient",
            Role::Grad => "gradient (accumulated)",
            Role::Clipped => "gradient after clipping",
            Role::WeightBefore => "w before",
            Role::WeightAfter => "w after",
            Role::Momentum => "m (1st moment)",
            Role::Variance => "v (2nd moment)",
            Role::Update => "Δw = update",
        }
    }
}

/// Summary statistics of a tensor, in f64.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub l2: f64,
}

impl Stats {
    pub fn of(values: &[f32]) -> Stats {
        let n = values.len().max(1) as f64;
        let (mut sum, mut sq) = (0.0f64, 0.0f64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for &v in values {
            let v = v as f64;
            sum += v;
            sq += v * v;
            min = min.min(v);
            max = max.max(v);
        }
        let mean = sum / n;
        Stats {
            mean,
            std: (sq / n - mean * mean).max(0.0).sqrt(),
            min: if values.is_empty() { 0.0 } else { min },
            max: if values.is_empty() { 0.0 } else { max },
            l2: sq.sqrt(),
        }
    }

    pub fn is_finite(&self) -> bool {
        [self.mean, self.std, self.min, self.max, self.l2]
            .iter()
            .all(|x| x.is_finite())
    }
}

/// Largest preview, in cells: a bigger tensor shows its top-left corner.
pub const PREVIEW_MAX_ROWS: usize = 512;
pub const PREVIEW_MAX_COLS: usize = 1024;

/// What the view draws of a tensor: a rows × columns grid of values.
#[derive(Clone, Debug)]
pub struct Preview {
    pub rows: usize,
    pub cols: usize,
    /// Row-major, rows × cols.
    pub values: Vec<f32>,
    /// The byte each row stands for (activations: the row's input byte;
    /// wte: the byte of the row).
    pub row_bytes: Option<Vec<u8>>,
    /// What the grid shows of the whole tensor, e.g. `batch row 0: T × C`.
    pub caption: String,
}

/// One tensor of an entry's view.
#[derive(Clone, Debug)]
pub struct TensorView {
    pub role: Role,
    pub name: String,
    pub shape: Vec<usize>,
    pub stats: Stats,
    /// For accumulated gradients: the statistics of what this entry added.
    pub added: Option<Stats>,
    pub preview: Preview,
}

/// Everything the view shows of an entry after it ran.
#[derive(Clone, Debug)]
pub struct EntryView {
    pub entry: Entry,
    pub tensors: Vec<TensorView>,
    /// Named numbers (the loss, the gradient norm, the clip factor, the
    /// learning rate, …).
    pub scalars: Vec<(String, f64)>,
}

/// Where a diverged step first produced a value that is not finite.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NonFinite {
    /// The entry's label, e.g. `h.1.mlp.c_fc` or `h.0.attn backward`.
    pub op: String,
    pub phase: Phase,
    /// The tensor it wrote that holds NaN or ±inf.
    pub tensor: String,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({} pass), in what it wrote to `{}`",
            self.op,
            self.phase.key(),
            self.tensor
        )
    }
}

impl EntryView {
    /// The first tensor this entry wrote that holds a value that is not
    /// finite (its statistics are then not finite: NaN and ±inf propagate
    /// into the sum of squares).
    pub fn first_non_finite(&self) -> Option<NonFinite> {
        self.tensors
            .iter()
            .filter(|t| {
                matches!(
                    t.role,
                    Role::Output | Role::Saved | Role::Grad | Role::Clipped
                )
            })
            .find(|t| !(t.stats.l2.is_finite() && t.stats.mean.is_finite()))
            .map(|t| NonFinite {
                op: self.entry.label.clone(),
                phase: self.entry.phase,
                tensor: t.name.clone(),
            })
    }

    /// The JSON object `tinygpt step --json` prints for this entry.
    pub fn to_json(&self, program: &Program) -> serde_json::Value {
        let main = self
            .tensors
            .iter()
            .find(|t| matches!(t.role, Role::Output | Role::WeightAfter))
            .or_else(|| self.tensors.iter().find(|t| t.role == Role::Clipped))
            .or_else(|| self.tensors.iter().find(|t| t.role == Role::Grad))
            .or_else(|| self.tensors.iter().find(|t| t.role == Role::Saved));
        let mut o = serde_json::json!({
            "index": self.entry.index,
            "phase": self.entry.phase,
            "layer": self.entry.layer_name,
            "op": self.entry.label,
            "kind": self.entry.kind,
            "math": self.entry.math,
        });
        let map = o.as_object_mut().expect("an object");
        if let Some(t) = main {
            map.insert("output".into(), t.name.clone().into());
            map.insert("shape".into(), serde_json::json!(t.shape));
            for (k, v) in stats_json(&t.stats) {
                map.insert(k, v);
            }
        }
        let grads: Vec<serde_json::Value> = self
            .tensors
            .iter()
            .filter(|t| matches!(t.role, Role::Grad))
            .map(|t| {
                let mut g = serde_json::json!({ "name": t.name, "shape": t.shape });
                let m = g.as_object_mut().expect("an object");
                for (k, v) in stats_json(&t.stats) {
                    m.insert(k, v);
                }
                if let Some(a) = &t.added {
                    m.insert("added".into(), serde_json::to_value(a).expect("numbers"));
                }
                g
            })
            .collect();
        if self.entry.phase == Phase::Backward && self.entry.step != Step::ZeroGrads {
            map.insert("grads".into(), grads.into());
        }
        if !self.scalars.is_empty() {
            let s: serde_json::Map<String, serde_json::Value> = self
                .scalars
                .iter()
                .map(|(k, v)| (k.clone(), finite_or_null(*v)))
                .collect();
            map.insert("scalars".into(), s.into());
        }
        let _ = program;
        o
    }
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        x.into()
    } else {
        serde_json::Value::Null
    }
}

fn stats_json(s: &Stats) -> Vec<(String, serde_json::Value)> {
    [
        ("mean", s.mean),
        ("std", s.std),
        ("min", s.min),
        ("max", s.max),
        ("l2", s.l2),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), finite_or_null(v)))
    .collect()
}

/// Which tensors an entry's view reads, before and after it runs.
#[derive(Clone, Debug, Default)]
pub struct ReadPlan {
    pub before: Vec<(Role, TensorId)>,
    pub after: Vec<(Role, TensorId)>,
}

/// The tensors of `entry`: inputs and outputs of a forward op; the upstream
/// gradient and the gradients a backward op accumulates into (before and
/// after, so the view shows what it added); the clip's statistics and the
/// `focus` parameter's gradient; AdamW's w, g, m, v and Δw of `focus`.
pub fn read_plan(program: &Program, entry: &Entry, focus: TensorId) -> ReadPlan {
    let t = &program.tensors;
    let mut plan = ReadPlan::default();
    match entry.step {
        Step::Forward(i) => {
            let (ins, outs) = program.ops[i].op.io();
            for id in ins {
                let role = if t[id].kind == TensorKind::Param {
                    Role::Param
                } else {
                    Role::Input
                };
                plan.after.push((role, id));
            }
            for id in outs {
                let role = if t[id].kind == TensorKind::Saved {
                    Role::Saved
                } else {
                    Role::Output
                };
                plan.after.push((role, id));
            }
            if matches!(program.ops[i].op, Op::CrossEntropy { .. }) {
                plan.after.push((Role::Saved, program.stats));
            }
        }
        Step::Backward(i) => {
            let (ins, outs) = program.ops[i].op.io();
            for id in outs {
                if let Some(g) = t[id].grad {
                    plan.before.push((Role::Upstream, g));
                }
            }
            if matches!(program.ops[i].op, Op::CrossEntropy { .. }) {
                // Its upstream gradient is 1 (d loss / d loss); show the logits.
                let Op::CrossEntropy { logits, .. } = program.ops[i].op else {
                    unreachable!()
                };
                plan.before.push((Role::Input, logits));
            }
            for id in ins {
                if let Some(g) = t[id].grad {
                    plan.before.push((Role::Grad, g));
                    plan.after.push((Role::Grad, g));
                }
            }
        }
        Step::ZeroGrads => {}
        Step::ClipGradNorm => {
            let g = t[focus].grad.expect("a parameter has a gradient");
            plan.before.push((Role::Grad, g));
            plan.after.push((Role::Clipped, g));
            plan.after.push((Role::Saved, program.stats));
        }
        Step::AdamW => {
            let g = t[focus].grad.expect("a parameter has a gradient");
            let (m, v) = t[focus].adam.expect("a parameter has moments");
            plan.before.push((Role::WeightBefore, focus));
            plan.before.push((Role::Clipped, g));
            plan.before.push((Role::Saved, program.stats));
            plan.after.push((Role::WeightAfter, focus));
            plan.after.push((Role::Momentum, m));
            plan.after.push((Role::Variance, v));
        }
        Step::AttentionProbs(_) => {}
    }
    plan
}

/// The parameter the clip and AdamW views show unless another is chosen:
/// the token embedding (its rows are bytes; only bytes in the batch get a
/// gradient, yet AdamW moves the others too).
/// In a LoRA fine-tune (whose embedding is frozen), the first adapter.
pub fn default_focus(program: &Program) -> TensorId {
    program
        .tensor_id("transformer.wte.weight")
        .filter(|&id| !program.tensors[id].is_frozen())
        .unwrap_or_else(|| program.trained().next().expect("a model has parameters"))
}

/// One entry on its way: the reads before it, its execution, the reads
/// after. Start it with [`EntryRun::start`], then call
/// [`EntryRun::try_finish`] (after polling, on the GPU) until it gives the
/// view. On the CPU both happen at once.
pub struct EntryRun {
    entry: Entry,
    plan: ReadPlan,
    before: Option<PendingRead>,
    after: Option<PendingRead>,
    before_values: Option<Vec<f32>>,
    /// The step's learning rate, for the AdamW view.
    lr: f32,
    /// [`Backend::clips_in_place`] of the backend it runs on.
    clips_in_place: bool,
}

impl EntryRun {
    /// Reads what the view needs from before, runs the entry (the backend
    /// must have the step loaded: [`Backend::load_step`]), and reads what
    /// it needs from after. Queued in that order on the GPU.
    pub fn start(
        backend: &mut dyn Backend,
        entry: Entry,
        focus: TensorId,
        lr: f32,
    ) -> Result<EntryRun, BackendError> {
        let program = backend.program().clone();
        let plan = read_plan(&program, &entry, focus);
        let names = |list: &[(Role, TensorId)]| -> Vec<String> {
            list.iter()
                .filter(|(_, id)| program.tensors[*id].kind != TensorKind::Input)
                .map(|(_, id)| program.tensors[*id].name.clone())
                .collect()
        };
        let before_names = names(&plan.before);
        let after_names = names(&plan.after);
        let before_refs: Vec<&str> = before_names.iter().map(String::as_str).collect();
        let after_refs: Vec<&str> = after_names.iter().map(String::as_str).collect();
        let before = backend.start_reads(&before_refs)?;
        backend.run_entries(entry.index..entry.index + 1);
        let after = backend.start_reads(&after_refs)?;
        Ok(EntryRun {
            entry,
            plan,
            before: Some(before),
            after: Some(after),
            before_values: None,
            lr,
            clips_in_place: backend.clips_in_place(),
        })
    }

    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// The view once both reads have arrived, else None (try again later).
    pub fn try_finish(&mut self, backend: &mut dyn Backend, batch: &Batch) -> Option<EntryView> {
        if let Some(read) = self.before.take() {
            match backend.try_take_reads(read) {
                Ok(v) => self.before_values = Some(v),
                Err(r) => {
                    self.before = Some(r);
                    return None;
                }
            }
        }
        let after = match backend.try_take_reads(self.after.take()?) {
            Ok(v) => v,
            Err(r) => {
                self.after = Some(r);
                return None;
            }
        };
        let before = self.before_values.take().unwrap_or_default();
        Some(build_view(
            backend.program(),
            &self.entry,
            &self.plan,
            batch,
            &before,
            &after,
            self.lr,
            self.clips_in_place,
        ))
    }

    /// Runs to the end, waiting (the CLI and tests).
    pub fn finish_blocking(mut self, backend: &mut dyn Backend, batch: &Batch) -> EntryView {
        loop {
            backend.poll();
            if let Some(v) = self.try_finish(backend, batch) {
                return v;
            }
            std::thread::yield_now();
        }
    }
}

/// Splits flat read values into the plan's tensors (inputs from the batch).
fn split<'a>(
    program: &Program,
    list: &[(Role, TensorId)],
    values: &'a [f32],
    batch: &Batch,
) -> Vec<(Role, TensorId, std::borrow::Cow<'a, [f32]>)> {
    let mut at = 0;
    list.iter()
        .map(|&(role, id)| {
            let info = &program.tensors[id];
            if info.kind == TensorKind::Input {
                let ids = if id == program.tokens {
                    &batch.inputs
                } else {
                    &batch.targets
                };
                let v: Vec<f32> = ids.iter().map(|&x| x as f32).collect();
                (role, id, std::borrow::Cow::Owned(v))
            } else {
                let n = info.numel();
                let end = (at + n).min(values.len());
                let v = &values[at..end];
                at = end;
                (role, id, std::borrow::Cow::Borrowed(v))
            }
        })
        .collect()
}

fn build_view(
    program: &Program,
    entry: &Entry,
    plan: &ReadPlan,
    batch: &Batch,
    before: &[f32],
    after: &[f32],
    lr: f32,
    clips_in_place: bool,
) -> EntryView {
    let before = split(program, &plan.before, before, batch);
    let mut after = split(program, &plan.after, after, batch);
    // Where the clip leaves the factor to AdamW (the GPU), the gradient it
    // hands on is the buffer times the factor: show that, as the CPU's is.
    let factor = |list: &[(Role, TensorId, std::borrow::Cow<[f32]>)]| {
        list.iter()
            .find(|(_, id, _)| *id == program.stats)
            .map(|(_, _, v)| v[2])
    };
    let mut before = before;
    if !clips_in_place {
        let (list, s) = match entry.step {
            Step::ClipGradNorm => {
                let s = factor(&after);
                (&mut after, s)
            }
            Step::AdamW => {
                let s = factor(&before);
                (&mut before, s)
            }
            _ => (&mut after, None),
        };
        if let Some(s) = s {
            for (role, _, v) in list.iter_mut() {
                if *role == Role::Clipped {
                    *v = std::borrow::Cow::Owned(v.iter().map(|x| x * s).collect());
                }
            }
        }
    }
    let mut tensors = Vec::new();
    let mut scalars = Vec::new();
    let view = |role: Role, id: TensorId, values: &[f32], added: Option<Stats>| {
        let info = &program.tensors[id];
        TensorView {
            role,
            name: info.name.clone(),
            shape: info.shape.clone(),
            stats: Stats::of(values),
            added,
            preview: preview(program, id, values, batch),
        }
    };
    let stats_of = |list: &[(Role, TensorId, std::borrow::Cow<[f32]>)]| {
        list.iter()
            .find(|(_, id, _)| *id == program.stats)
            .map(|(_, _, v)| v.to_vec())
    };
    match entry.step {
        Step::Backward(_) => {
            for (role, id, v) in &before {
                if *role != Role::Grad {
                    tensors.push(view(*role, *id, v, None));
                }
            }
            for (role, id, v) in &after {
                let was = before
                    .iter()
                    .find(|(r, b, _)| *r == Role::Grad && b == id)
                    .map(|(_, _, b)| b);
                let added = was.map(|b| {
                    let d: Vec<f32> = v.iter().zip(b.iter()).map(|(a, b)| a - b).collect();
                    Stats::of(&d)
                });
                tensors.push(view(*role, *id, v, added));
            }
        }
        Step::AdamW => {
            let find = |list: &[(Role, TensorId, std::borrow::Cow<[f32]>)], r: Role| {
                list.iter()
                    .find(|(role, _, _)| *role == r)
                    .map(|(_, id, v)| (*id, v.to_vec()))
            };
            let (w_id, w0) = find(&before, Role::WeightBefore).expect("planned");
            let (g_id, g) = find(&before, Role::Clipped).expect("planned");
            let (_, w1) = find(&after, Role::WeightAfter).expect("planned");
            let (m_id, m) = find(&after, Role::Momentum).expect("planned");
            let (v_id, v) = find(&after, Role::Variance).expect("planned");
            let dw: Vec<f32> = w1.iter().zip(&w0).map(|(a, b)| a - b).collect();
            tensors.push(view(Role::WeightBefore, w_id, &w0, None));
            tensors.push(view(Role::Clipped, g_id, &g, None));
            tensors.push(view(Role::Momentum, m_id, &m, None));
            tensors.push(view(Role::Variance, v_id, &v, None));
            let mut update = view(Role::Update, w_id, &dw, None);
            update.name = format!("Δ {}", program.tensors[w_id].name);
            tensors.push(update);
            tensors.push(view(Role::WeightAfter, w_id, &w1, None));
            let cfg = &program.config;
            let g_rms = Stats::of(&g).l2 / (g.len().max(1) as f64).sqrt();
            let dw_rms = Stats::of(&dw).l2 / (dw.len().max(1) as f64).sqrt();
            scalars.push(("lr".into(), lr as f64));
            scalars.push(("beta1".into(), cfg.beta1 as f64));
            scalars.push(("beta2".into(), cfg.beta2 as f64));
            scalars.push(("eps".into(), cfg.eps as f64));
            scalars.push((
                "weight_decay".into(),
                if program.decays(w_id) {
                    cfg.weight_decay as f64
                } else {
                    0.0
                },
            ));
            scalars.push(("rms_grad".into(), g_rms));
            scalars.push(("rms_update".into(), dw_rms));
            scalars.push(("rms_update_over_lr".into(), dw_rms / lr.max(1e-30) as f64));
        }
        _ => {
            for (role, id, v) in before.iter().chain(&after) {
                if *id != program.stats {
                    tensors.push(view(*role, *id, v, None));
                }
            }
        }
    }
    if let Some(s) = stats_of(&after) {
        match entry.step {
            Step::ClipGradNorm => {
                scalars.push(("grad_norm".into(), s[1] as f64));
                scalars.push(("clip".into(), program.config.grad_clip as f64));
                scalars.push(("factor".into(), s[2] as f64));
            }
            _ => scalars.push(("loss".into(), s[0] as f64)),
        }
    }
    EntryView {
        entry: entry.clone(),
        tensors,
        scalars,
    }
}

/// The grid the view draws for tensor `id`: activations (B, T, X) as batch
/// row 0's T × X, (B, T) as 1 × T, (B, H, T) as row 0's H × T, matrices as
/// they are, vectors as one row; capped at [`PREVIEW_MAX_ROWS`] ×
/// [`PREVIEW_MAX_COLS`].
pub fn preview(program: &Program, id: TensorId, values: &[f32], batch: &Batch) -> Preview {
    let info = &program.tensors[id];
    let cfg = &program.config;
    let (b, t) = (cfg.batch, cfg.ctx);
    let row0: Vec<u8> = batch.inputs[..t.min(batch.inputs.len())]
        .iter()
        .map(|&x| x as u8)
        .collect();
    let is_wte = info.name.ends_with("transformer.wte.weight");
    let (rows, cols, offset, row_bytes, caption) = match info.shape.as_slice() {
        [bb, tt, x] if *bb == b && *tt == t => (
            t,
            *x,
            0,
            Some(row0.clone()),
            crate::t!(
                "preview-positions-by",
                batch = b.to_string(),
                positions = t.to_string(),
                width = x.to_string()
            ),
        ),
        [bb, h, tt] if *bb == b && *tt == t => (
            *h,
            t,
            0,
            None,
            crate::t!(
                "preview-heads-by-positions",
                batch = b.to_string(),
                heads = h.to_string(),
                positions = t.to_string()
            ),
        ),
        [bb, tt] if *bb == b && *tt == t => {
            let caption = crate::t!(
                "preview-positions",
                batch = b.to_string(),
                positions = t.to_string()
            );
            (1, t, 0, None, caption)
        }
        [r, c] => (
            *r,
            *c,
            0,
            is_wte.then(|| (0..*r).map(|x| x as u8).collect()),
            format!("{r} × {c}"),
        ),
        [n] => (1, *n, 0, None, format!("{n}")),
        other => (1, other.iter().product(), 0, None, format!("{other:?}")),
    };
    let (show_r, show_c) = (rows.min(PREVIEW_MAX_ROWS), cols.min(PREVIEW_MAX_COLS));
    let mut grid = Vec::with_capacity(show_r * show_c);
    for r in 0..show_r {
        let start = offset + r * cols;
        let end = (start + show_c).min(values.len());
        grid.extend_from_slice(values.get(start..end).unwrap_or(&[]));
        grid.resize((r + 1) * show_c, 0.0);
    }
    let caption = if (show_r, show_c) != (rows, cols) {
        crate::t!(
            "preview-showing",
            caption = caption,
            rows = show_r.to_string(),
            cols = show_c.to_string()
        )
    } else {
        caption
    };
    Preview {
        rows: show_r,
        cols: show_c,
        values: grid,
        row_bytes: row_bytes.map(|v| v[..show_r.min(v.len())].to_vec()),
        caption,
    }
}
