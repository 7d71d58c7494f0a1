//! The CPU backend: executes the [`Program`] with the kernels in [`ops`],
//! parallel with rayon (one thread on wasm32), in f32 for training or f64 for
//! gradient checks. It is the numerical reference for every other backend.

pub mod float;
pub mod generate;
pub mod matmul;
pub mod ops;

use crate::backend::{Backend, BackendError, PendingRead, StepOutcome, StepParams};
use crate::data::Batch;
use crate::model::config::VOCAB;
use crate::probe::{ProbeRequest, ProbeResult};
use crate::program::{Op, ProbeWindow, Program, Step, TensorId, TensorKind};
use float::Float;
use ops::AttnDims;
use rayon::prelude::*;

/// A [`Op::LowRank`]'s sizes.
fn lowrank_dims(op: &Op) -> ops::LowRankDims {
    let Op::LowRank {
        rank,
        in_features,
        out_features,
        scale,
        ..
    } = *op
    else {
        unreachable!("lowrank_dims of a {}", op.kind_name());
    };
    ops::LowRankDims {
        rank,
        n_in: in_features,
        n_out: out_features,
        scale,
    }
}

pub struct CpuBackend<F: Float> {
    program: Program,
    /// One buffer per tensor of the program (empty for inputs).
    data: Vec<Vec<F>>,
    tokens: Vec<u32>,
    targets: Vec<u32>,
    /// Training mode applies dropout.
    training: bool,
    dropout_seed: u32,
    /// The gradient norm the last [`Step::ClipGradNorm`] measured (before clipping).
    last_grad_norm: f64,
    /// The row and positions [`Step::AttentionProbs`] looks at.
    probe_window: ProbeWindow,
    /// The step's learning rate and AdamW count, set by [`Backend::load_step`].
    step_params: Option<StepParams>,
    /// Parameters and AdamW moments put aside by [`Backend::stash_weights`].
    stash: Vec<(TensorId, Vec<F>)>,
    /// [`Program::last_readers`], for [`Program::writes_gradient`].
    last_readers: Vec<Option<usize>>,
    /// Per tensor: a gradient the backward writes outright, which a whole
    /// step does not zero first ([`Program::written_gradients`]).
    written: Vec<bool>,
}

impl<F: Float> CpuBackend<F> {
    /// Allocates every tensor of the program, zeroed. Parameters are set with
    /// [`Backend::write`] or [`CpuBackend::set_param_values`].
    pub fn new(program: Program) -> Self {
        let data = program
            .tensors
            .iter()
            .map(|t| {
                if t.kind == TensorKind::Input {
                    Vec::new()
                } else {
                    vec![F::zero(); t.numel()]
                }
            })
            .collect();
        Self {
            data,
            tokens: vec![],
            targets: vec![],
            training: true,
            dropout_seed: 0,
            last_grad_norm: 0.0,
            probe_window: ProbeWindow { row: 0, n: 0 },
            step_params: None,
            stash: Vec::new(),
            last_readers: program.last_readers(),
            written: {
                let written = program.written_gradients();
                (0..program.tensors.len()).map(|id| written.contains(&id)).collect()
            },
            program,
        }
    }

    /// AdamW's hyperparameters for the step `load_step` set (evaluation
    /// mode has none: its update would use a zero learning rate).
    fn adam_hyper(&self) -> Option<ops::AdamW> {
        let sp = self.step_params?;
        let cfg = &self.program.config;
        Some(ops::AdamW {
            lr: sp.lr,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            weight_decay: cfg.weight_decay,
            t: sp.adam_t,
        })
    }

    /// Sets the batch row and positions the next [`Step::AttentionProbs`] reads.
    pub fn set_probe_window(&mut self, window: ProbeWindow) {
        self.probe_window = window;
    }

    pub fn tensor(&self, id: TensorId) -> &[F] {
        &self.data[id]
    }

    pub fn tensor_mut(&mut self, id: TensorId) -> &mut [F] {
        &mut self.data[id]
    }

    pub fn set_batch(&mut self, batch: &Batch) {
        assert_eq!(
            batch.inputs.len(),
            self.program.rows(),
            "batch shape does not match the program"
        );
        self.tokens.clone_from(&batch.inputs);
        self.targets.clone_from(&batch.targets);
    }

    pub fn set_mode(&mut self, training: bool, dropout_seed: u32) {
        self.training = training;
        self.dropout_seed = dropout_seed;
    }

    /// Mean of the per-position losses of the last forward.
    pub fn loss(&self) -> f64 {
        let l = &self.data[self.program.losses];
        l.iter().map(|x| x.f64()).sum::<f64>() / l.len() as f64
    }

    /// Runs the forward ops (and so the loss) on the current batch.
    pub fn forward(&mut self) {
        for i in 0..self.program.ops.len() {
            self.run(Step::Forward(i), None);
        }
    }

    /// Zeroes the grads, then runs the backward ops in reverse.
    pub fn backward(&mut self) {
        self.run(Step::ZeroGrads, None);
        for i in (0..self.program.ops.len()).rev() {
            self.run(Step::Backward(i), None);
        }
    }

    /// Global gradient norm over the trained parameters.
    /// Parallel over tensors, each summed in order, the sums added in
    /// program order: deterministic, and one task per tensor rather than one
    /// parallel job per tensor.
    pub fn grad_norm(&self) -> f64 {
        let grads: Vec<&[F]> = self
            .program
            .trained()
            .map(|p| &self.data[self.grad_of(p)][..])
            .collect();
        let sums: Vec<f64> = grads
            .par_iter()
            .map(|g| g.iter().map(|&x| (x * x).f64()).sum::<f64>())
            .collect();
        sums.into_iter().sum::<f64>().sqrt()
    }

    fn take(&mut self, id: TensorId) -> Vec<F> {
        std::mem::take(&mut self.data[id])
    }

    fn grad_of(&self, id: TensorId) -> TensorId {
        self.program.tensors[id]
            .grad
            .expect("tensor has no gradient")
    }

    /// Zeroes the gradients: all of them, or (`whole_step`) those no
    /// backward op writes outright. One parallel pass in runs of equal size
    /// (a task per tensor left 16 threads waiting on the few large ones).
    fn zero_grads(&mut self, whole_step: bool) {
        let tensors = &self.program.tensors;
        let written = &self.written;
        let mut runs: Vec<&mut [F]> = self
            .data
            .iter_mut()
            .zip(tensors)
            .enumerate()
            .filter(|(id, (_, t))| t.kind == TensorKind::Grad && !(whole_step && written[*id]))
            .flat_map(|(_, (d, _))| d.chunks_mut(4 * ops::ADAMW_CHUNK))
            .collect();
        runs.par_iter_mut().for_each(|d| d.fill(F::zero()));
    }

    /// Executes one entry of the program's step list. `adam` is needed for
    /// [`Step::AdamW`] only.
    pub fn run(&mut self, step: Step, adam: Option<ops::AdamW>) {
        match step {
            Step::ZeroGrads => self.zero_grads(false),
            Step::Forward(i) => self.forward_op(i),
            Step::Backward(i) => self.backward_op(i),
            Step::AttentionProbs(i) => {
                let Op::Attention {
                    qkv,
                    lse,
                    n_head,
                    causal,
                    ..
                } = self.program.ops[i].op
                else {
                    panic!("AttentionProbs({i}) names an op that is not attention");
                };
                let cfg = &self.program.config;
                let dims = AttnDims {
                    b: cfg.batch,
                    t: cfg.ctx,
                    c: cfg.d_model,
                    h: n_head,
                    causal,
                };
                let ProbeWindow { row, n } = self.probe_window;
                let probs_id = self.program.probs;
                let mut probs = self.take(probs_id);
                ops::attention_probs_window(
                    &mut probs,
                    &self.data[qkv],
                    &self.data[lse],
                    &dims,
                    row,
                    n,
                );
                self.data[probs_id] = probs;
            }
            Step::ClipGradNorm => {
                let clip = self.program.config.grad_clip as f64;
                let norm = self.grad_norm();
                self.last_grad_norm = norm;
                let mut scale = F::one();
                if clip > 0.0 && norm.is_finite() {
                    let s = F::c((clip / (norm + 1e-6)).min(1.0));
                    scale = s;
                    if s < F::one() {
                        let mut is_param_grad = vec![false; self.data.len()];
                        for p in self.program.trained() {
                            is_param_grad[self.grad_of(p)] = true;
                        }
                        self.data
                            .par_iter_mut()
                            .zip(is_param_grad.par_iter())
                            .for_each(|(d, &clip_it)| {
                                if clip_it {
                                    d.iter_mut().for_each(|x| *x *= s);
                                }
                            });
                    }
                }
                let stats = &mut self.data[self.program.stats];
                stats[1] = F::c(norm);
                stats[2] = scale;
                stats[3] = F::c(norm * norm);
            }
            Step::AdamW => {
                // As on the GPU: a step whose loss or gradients are not
                // finite leaves the weights and moments as they were.
                let stats = &self.data[self.program.stats];
                if !(stats[0].f64().is_finite() && stats[1].f64().is_finite()) {
                    return;
                }
                let h = adam
                    .or_else(|| self.adam_hyper())
                    .expect("AdamW needs its hyperparameters (load_step with StepParams)");
                // Every parameter's runs in one parallel pass (a pass per
                // tensor paid rayon's start for each small bias); each
                // element's arithmetic is adamw_update's.
                let mut taken = Vec::new();
                for p in self.program.trained().collect::<Vec<_>>() {
                    let info = &self.program.tensors[p];
                    let (g, (m, v)) = (info.grad.unwrap(), info.adam.unwrap());
                    let decay = self.program.decays(p);
                    taken.push((p, m, v, g, decay, self.take(p), self.take(m), self.take(v)));
                }
                {
                    let data = &self.data;
                    let mut runs = Vec::new();
                    for (_, _, _, g, decay, pm, mm, vm) in taken.iter_mut() {
                        let chunks = pm
                            .chunks_mut(ops::ADAMW_CHUNK)
                            .zip(mm.chunks_mut(ops::ADAMW_CHUNK))
                            .zip(vm.chunks_mut(ops::ADAMW_CHUNK))
                            .zip(data[*g].chunks(ops::ADAMW_CHUNK));
                        runs.extend(chunks.map(|(((p, m), v), g)| (p, m, v, g, *decay)));
                    }
                    runs.into_par_iter()
                        .for_each(|(p, m, v, g, decay)| ops::adamw_chunk(p, m, v, g, h, decay));
                }
                for (p, m, v, _, _, pm, mm, vm) in taken {
                    self.data[p] = pm;
                    self.data[m] = mm;
                    self.data[v] = vm;
                }
            }
        }
    }

    fn forward_op(&mut self, i: usize) {
        let cfg = &self.program.config;
        let (t, c, b) = (cfg.ctx, cfg.d_model, cfg.batch);
        let op = self.program.ops[i].op.clone();
        match op {
            Op::Embedding { wte, wpe, out, .. } => {
                let mut o = self.take(out);
                ops::embedding_forward(
                    &mut o,
                    &self.tokens,
                    &self.data[wte],
                    wpe.map(|wpe| &self.data[wpe][..]),
                    t,
                    c,
                );
                self.data[out] = o;
            }
            Op::LayerNorm {
                inp,
                weight,
                bias,
                out,
                mean,
                rstd,
            } => {
                let (mut o, mut m, mut r) = (self.take(out), self.take(mean), self.take(rstd));
                let width = self.program.tensors[inp].shape.last().copied().unwrap();
                ops::layernorm_forward(
                    &mut o,
                    &mut m,
                    &mut r,
                    &self.data[inp],
                    &self.data[weight],
                    &self.data[bias],
                    width,
                );
                (self.data[out], self.data[mean], self.data[rstd]) = (o, m, r);
            }
            Op::Linear {
                inp,
                weight,
                bias,
                out,
                in_features,
                out_features,
            } => {
                let mut o = self.take(out);
                ops::linear_forward(
                    &mut o,
                    &self.data[inp],
                    &self.data[weight],
                    &self.data[bias],
                    in_features,
                    out_features,
                );
                self.data[out] = o;
            }
            Op::LowRank {
                inp,
                lora_a,
                lora_b,
                base,
                mid,
                out,
                ..
            } => {
                let (mut m, mut o) = (self.take(mid), self.take(out));
                let d = &self.data;
                ops::lowrank_forward(
                    &mut m,
                    &mut o,
                    &d[inp],
                    &d[lora_a],
                    &d[lora_b],
                    &d[base],
                    lowrank_dims(&op),
                );
                (self.data[mid], self.data[out]) = (m, o);
            }
            Op::Attention {
                qkv,
                out,
                lse,
                n_head,
                causal,
                dropout,
                stream,
            } => {
                let (mut o, mut l) = (self.take(out), self.take(lse));
                let dims = AttnDims {
                    b,
                    t,
                    c,
                    h: n_head,
                    causal,
                };
                let seed = self.dropout_seed;
                ops::attention_forward(
                    &mut o,
                    &mut l,
                    &self.data[qkv],
                    &dims,
                    dropout,
                    seed,
                    stream,
                    self.training,
                );
                (self.data[out], self.data[lse]) = (o, l);
            }
            Op::Gelu { inp, out } => {
                let mut o = self.take(out);
                ops::gelu_forward(&mut o, &self.data[inp]);
                self.data[out] = o;
            }
            Op::Residual { a, b, out } => {
                let mut o = self.take(out);
                ops::residual_forward(&mut o, &self.data[a], &self.data[b]);
                self.data[out] = o;
            }
            Op::Dropout {
                inp,
                out,
                p,
                stream,
            } => {
                let mut o = self.take(out);
                ops::dropout_forward(
                    &mut o,
                    &self.data[inp],
                    p,
                    self.dropout_seed,
                    stream,
                    self.training,
                );
                self.data[out] = o;
            }
            Op::TiedHead { inp, wte, out } => {
                let mut o = self.take(out);
                ops::tied_head_forward(
                    &mut o,
                    &self.data[inp],
                    &self.data[wte],
                    c,
                    crate::model::config::VOCAB,
                );
                self.data[out] = o;
            }
            Op::CrossEntropy { logits, losses, .. } => {
                let mut l = self.take(losses);
                ops::cross_entropy_forward(
                    &mut l,
                    &self.data[logits],
                    &self.targets,
                    crate::model::config::VOCAB,
                );
                self.data[losses] = l;
                let loss = self.loss();
                self.data[self.program.stats][0] = F::c(loss);
            }
        }
    }

    fn backward_op(&mut self, i: usize) {
        let cfg = &self.program.config;
        let (t, c, b) = (cfg.ctx, cfg.d_model, cfg.batch);
        let op = self.program.ops[i].op.clone();
        // Whether this op writes its input's gradient outright (its first
        // writer) rather than adding to it.
        let written: Vec<TensorId> = (op.io().0.into_iter())
            .filter(|&x| self.program.writes_gradient(&self.last_readers, i, x))
            .collect();
        let write = move |input: TensorId| written.contains(&input);
        match op {
            // A frozen embedding (a LoRA fine-tune) has nothing to learn.
            Op::Embedding { wte, .. } if self.program.tensors[wte].is_frozen() => {}
            Op::Embedding { wte, wpe, out, .. } => {
                let (gwte, gout) = (self.grad_of(wte), self.grad_of(out));
                let gwpe = wpe.map(|wpe| self.grad_of(wpe));
                let mut dwte = self.take(gwte);
                let mut dwpe = gwpe.map(|g| self.take(g));
                ops::embedding_backward(
                    &mut dwte,
                    dwpe.as_deref_mut(),
                    &self.data[gout],
                    &self.tokens,
                    t,
                    c,
                );
                self.data[gwte] = dwte;
                if let (Some(g), Some(d)) = (gwpe, dwpe) {
                    self.data[g] = d;
                }
            }
            Op::LayerNorm {
                inp,
                weight,
                bias,
                out,
                mean,
                rstd,
            } => {
                let (gi, go) = (self.grad_of(inp), self.grad_of(out));
                let mut di = self.take(gi);
                let mut grads = self.take_param_grads(weight, bias);
                let width = self.program.tensors[inp].shape.last().copied().unwrap();
                let d = &self.data;
                ops::layernorm_backward(
                    &mut di,
                    grads.as_mut().map(|(w, b)| (&mut w.1[..], &mut b.1[..])),
                    &d[go],
                    &d[inp],
                    &d[weight],
                    &d[mean],
                    &d[rstd],
                    width,
                );
                self.data[gi] = di;
                self.put_param_grads(grads);
            }
            Op::Linear {
                inp,
                weight,
                bias,
                out,
                in_features,
                out_features,
            } => {
                let (gi, go) = (self.grad_of(inp), self.grad_of(out));
                let mut di = self.take(gi);
                let mut grads = self.take_param_grads(weight, bias);
                let d = &self.data;
                ops::linear_backward(
                    &mut di,
                    grads.as_mut().map(|(w, b)| (&mut w.1[..], &mut b.1[..])),
                    &d[go],
                    &d[inp],
                    &d[weight],
                    in_features,
                    out_features,
                    write(inp),
                );
                self.data[gi] = di;
                self.put_param_grads(grads);
            }
            Op::LowRank {
                inp,
                lora_a,
                lora_b,
                base,
                mid,
                out,
                ..
            } => {
                let [gi, ga, gb, gbase, gmid, go] =
                    [inp, lora_a, lora_b, base, mid, out].map(|id| self.grad_of(id));
                let [mut di, mut da, mut db, mut dbase, mut dmid] =
                    [gi, ga, gb, gbase, gmid].map(|g| self.take(g));
                let d = &self.data;
                ops::lowrank_backward(
                    &mut di,
                    &mut da,
                    &mut db,
                    &mut dbase,
                    &mut dmid,
                    &d[go],
                    &d[inp],
                    &d[lora_a],
                    &d[lora_b],
                    &d[mid],
                    lowrank_dims(&op),
                );
                for (g, values) in [gi, ga, gb, gbase, gmid]
                    .into_iter()
                    .zip([di, da, db, dbase, dmid])
                {
                    self.data[g] = values;
                }
            }
            Op::Attention {
                qkv,
                out,
                lse,
                n_head,
                causal,
                dropout,
                stream,
            } => {
                let (gq, go) = (self.grad_of(qkv), self.grad_of(out));
                let mut dq = self.take(gq);
                let dims = AttnDims {
                    b,
                    t,
                    c,
                    h: n_head,
                    causal,
                };
                let d = &self.data;
                ops::attention_backward(
                    &mut dq,
                    &d[go],
                    &d[qkv],
                    &d[lse],
                    &dims,
                    dropout,
                    self.dropout_seed,
                    stream,
                );
                self.data[gq] = dq;
            }
            Op::Gelu { inp, out } => {
                let (gi, go) = (self.grad_of(inp), self.grad_of(out));
                let mut di = self.take(gi);
                ops::gelu_backward(&mut di, &self.data[go], &self.data[inp], write(inp));
                self.data[gi] = di;
            }
            Op::Residual { a, b, out } => {
                let (ga, gb, go) = (self.grad_of(a), self.grad_of(b), self.grad_of(out));
                for (g, input) in [(ga, a), (gb, b)] {
                    let mut d = self.take(g);
                    ops::accumulate(&mut d, &self.data[go], write(input));
                    self.data[g] = d;
                }
            }
            Op::Dropout {
                inp,
                out,
                p,
                stream,
            } => {
                let (gi, go) = (self.grad_of(inp), self.grad_of(out));
                let mut di = self.take(gi);
                ops::dropout_backward(&mut di, &self.data[go], p, self.dropout_seed, stream, write(inp));
                self.data[gi] = di;
            }
            Op::TiedHead { inp, wte, out } => {
                let (gi, go) = (self.grad_of(inp), self.grad_of(out));
                let gw = self.program.tensors[wte].grad;
                let mut di = self.take(gi);
                let mut dw = gw.map(|g| self.take(g));
                let v = crate::model::config::VOCAB;
                ops::tied_head_backward(
                    &mut di,
                    dw.as_deref_mut(),
                    &self.data[go],
                    &self.data[inp],
                    &self.data[wte],
                    c,
                    v,
                    write(inp),
                );
                self.data[gi] = di;
                if let (Some(g), Some(d)) = (gw, dw) {
                    self.data[g] = d;
                }
            }
            Op::CrossEntropy { logits, .. } => {
                let gl = self.grad_of(logits);
                let mut dl = self.take(gl);
                ops::cross_entropy_backward(
                    &mut dl,
                    &self.data[logits],
                    &self.targets,
                    crate::model::config::VOCAB,
                );
                self.data[gl] = dl;
            }
        }
    }

    /// The gradients of a weight and a bias, taken out to be written (with
    /// their ids); `None` when they are frozen.
    #[allow(clippy::type_complexity)]
    fn take_param_grads(
        &mut self,
        weight: TensorId,
        bias: TensorId,
    ) -> Option<((TensorId, Vec<F>), (TensorId, Vec<F>))> {
        let (gw, gb) = (
            self.program.tensors[weight].grad?,
            self.program.tensors[bias].grad?,
        );
        Some(((gw, self.take(gw)), (gb, self.take(gb))))
    }

    #[allow(clippy::type_complexity)]
    fn put_param_grads(&mut self, grads: Option<((TensorId, Vec<F>), (TensorId, Vec<F>))>) {
        if let Some(((gw, dw), (gb, db))) = grads {
            self.data[gw] = dw;
            self.data[gb] = db;
        }
    }

    fn id(&self, name: &str) -> Result<TensorId, BackendError> {
        self.program
            .tensor_id(name)
            .ok_or_else(|| BackendError::UnknownTensor(name.to_string()))
    }
}

impl<F: Float> CpuBackend<F> {
    /// [`Backend::train_step`] on the calling thread.
    fn train_step_in_pool(&mut self, batch: &Batch, sp: StepParams) -> StepOutcome {
        self.load_step(batch, Some(sp));
        // The whole step: the gradients the backward writes outright are
        // not zeroed first (nothing reads them before it does).
        for i in 0..self.program.steps.len() {
            match self.program.steps[i] {
                Step::ZeroGrads => self.zero_grads(true),
                step => self.run(step, None),
            }
        }
        let stats = &self.data[self.program.stats];
        let (loss, grad_norm) = (stats[0].f64(), self.last_grad_norm);
        StepOutcome {
            loss: loss as f32,
            grad_norm: grad_norm as f32,
            applied: loss.is_finite() && grad_norm.is_finite(),
            skipped: false,
        }
    }
}

impl<F: Float> Backend for CpuBackend<F> {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn describe(&self) -> String {
        format!(
            "cpu ({}, rayon, {} threads)",
            std::any::type_name::<F>(),
            rayon::current_num_threads()
        )
    }

    fn program(&self) -> &Program {
        &self.program
    }

    fn train_step(&mut self, batch: &Batch, sp: StepParams) -> StepOutcome {
        // The whole step on a thread of rayon's pool: each op's parallel
        // loop then starts and ends inside the pool, instead of being
        // handed to it from outside and its caller woken at the end (a
        // wake-up per op: tiny's step runs about 200 of them).
        rayon::scope(|_| self.train_step_in_pool(batch, sp))
    }

    fn load_step(&mut self, batch: &Batch, params: Option<StepParams>) {
        self.set_batch(batch);
        self.set_mode(params.is_some(), params.map_or(0, |p| p.dropout_seed));
        self.step_params = params;
    }

    fn run_entries(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            let step = self.program.steps[i];
            self.run(step, None);
        }
    }

    fn stash_weights(&mut self) {
        let ids: Vec<TensorId> = self
            .program
            .trained()
            .flat_map(|p| {
                let (m, v) = self.program.tensors[p].adam.unwrap();
                [p, m, v]
            })
            .collect();
        self.stash = ids
            .into_iter()
            .map(|id| (id, self.data[id].clone()))
            .collect();
    }

    fn restore_weights(&mut self) {
        for (id, values) in std::mem::take(&mut self.stash) {
            self.data[id] = values;
        }
    }

    fn discard_stash(&mut self) {
        self.stash.clear();
    }

    fn start_reads(&mut self, names: &[&str]) -> Result<PendingRead, BackendError> {
        let mut all = Vec::new();
        for name in names {
            all.extend(self.read(name)?);
        }
        Ok(PendingRead::Ready(all))
    }

    fn try_take_reads(&mut self, read: PendingRead) -> Result<Vec<f32>, PendingRead> {
        match read {
            PendingRead::Ready(values) => Ok(values),
            other => Err(other),
        }
    }

    fn eval_loss(&mut self, batch: &Batch) -> f32 {
        self.set_batch(batch);
        self.set_mode(false, 0);
        self.forward();
        self.loss() as f32
    }

    fn probe(&mut self, request: &ProbeRequest) -> Result<ProbeResult, BackendError> {
        request
            .check(&self.program.config)
            .map_err(BackendError::BadProbe)?;
        self.set_batch(&request.batch);
        self.set_mode(false, 0);
        self.forward();
        self.set_probe_window(request.window);
        let ProbeWindow { row, n } = request.window;
        let n_head = self.program.config.n_head;
        let mut flat = Vec::with_capacity(request.result_len(n_head));
        for &block in &request.blocks {
            let step = self
                .program
                .attention_probe(block)
                .expect("check() bounds the block");
            self.run(step, None);
            flat.extend(
                self.data[self.program.probs][..n_head * n * n]
                    .iter()
                    .map(|x| x.f64() as f32),
            );
        }
        let t = self.program.config.ctx;
        let logits = &self.data[self.program.logits][row * t * VOCAB..(row * t + n) * VOCAB];
        flat.extend(logits.iter().map(|x| x.f64() as f32));
        Ok(request
            .result_from_flat(n_head, &flat)
            .expect("sized by result_len"))
    }

    fn read(&mut self, name: &str) -> Result<Vec<f32>, BackendError> {
        let id = self.id(name)?;
        Ok(match self.program.tensors[id].kind {
            TensorKind::Input if id == self.program.tokens => {
                self.tokens.iter().map(|&x| x as f32).collect()
            }
            TensorKind::Input => self.targets.iter().map(|&x| x as f32).collect(),
            _ => self.data[id].iter().map(|x| x.f64() as f32).collect(),
        })
    }

    fn write(&mut self, name: &str, values: &[f32]) -> Result<(), BackendError> {
        let id = self.id(name)?;
        let expected = self.program.tensors[id].numel();
        if values.len() != expected || self.program.tensors[id].kind == TensorKind::Input {
            return Err(BackendError::WrongSize {
                name: name.to_string(),
                expected,
                got: values.len(),
            });
        }
        self.data[id] = values.iter().map(|&x| F::c(x as f64)).collect();
        Ok(())
    }
}
