//! Inside the model: one prompt's forward pass read at one position, for the
//! picture of a transformer computing (issue 32) and `tinygpt flow --json`,
//! or at every position ([`run_all`], `tinygpt flow --all-positions`, the
//! 3D walk-through's data, issue 50).
//!
//! The program's own forward pass runs on the run's backend, for a batch of
//! one row (the prompt's last `ctx` bytes, padded after it: causal attention
//! keeps the padding out of every position before it), in evaluation mode.
//! What it wrote is then read at the chosen position:
//! - the residual stream where it enters each block and where it leaves the
//!   last (before ln_f): L + 1 vectors of C;
//! - every activation the forward pass wrote, in the program's order (the
//!   nodes a picture draws), each the position's row;
//! - the next-byte probabilities (the sampler's softmax at temperature 1);
//! - each head's attention from the position to every byte up to it (P's
//!   row, from the Attention scene's probe: BertViz's head view);
//! - the logit lens (nostalgebraist 2020): ln_f and the tied head applied to
//!   each residual point, through the CPU backend's own kernels, as if the
//!   model stopped there; its top 5 bytes.

use crate::backend::Backend;
use crate::data::Batch;
use crate::model::config::{Config, VOCAB};
use crate::model::params::NamedTensor;
use crate::program::{Program, TensorKind};
use crate::sample::{SampleOptions, next_byte_distribution};

/// A node of the picture: one activation of the forward pass at the position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Node {
    /// The program's name (`h.0.attn.y`).
    pub name: String,
    /// The block it belongs to, if any (None: embeddings, ln_f, the head).
    pub layer: Option<usize>,
    /// Its shape in the batch-1 program, (1, T, width).
    pub shape: Vec<usize>,
    /// The position's row: `width` values.
    pub values: Vec<f32>,
    /// After [`backward`]: dL/d(this node) at the position, where the node
    /// has a gradient (the loss is the position's alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad: Option<Vec<f32>>,
}

/// One byte and its probability.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Guess {
    pub byte: u8,
    pub p: f32,
}

/// The forward pass of one prompt at one position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Flow {
    /// The prompt's bytes after the context cut.
    pub tokens: Vec<u8>,
    /// The position read (0-based, in `tokens`).
    pub position: usize,
    /// The stream entering block 0, 1, …, L − 1, then leaving the last block.
    pub residual: Vec<Vec<f32>>,
    /// The 256 next-byte probabilities at the position (temperature 1).
    pub probs: Vec<f32>,
    /// At each residual point, the top 5 of ln_f + head applied to it.
    pub lens: Vec<Vec<Guess>>,
    /// Per block, per head: the weights the position gives bytes 0..=position.
    pub attention: Vec<Vec<Vec<f32>>>,
    /// Every activation, in the program's order.
    pub nodes: Vec<Node>,
    /// After [`backward`]: the loss it differentiated and each parameter's
    /// gradient norm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward: Option<Backward>,
}

/// The backward pass of one position's loss: predicting `target` after the
/// position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Backward {
    pub target: u8,
    /// −log p(target) at the position.
    pub loss: f32,
    /// Every parameter's gradient norm (L2), in the program's order.
    pub param_grad_norms: Vec<ParamGrad>,
    /// After [`adamw`]: the norm of each parameter's AdamW update for this
    /// gradient, in the program's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adamw: Option<Vec<ParamGrad>>,
}

/// A parameter and the norm of its gradient.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ParamGrad {
    pub name: String,
    pub norm: f32,
}

/// The config a flow runs: one batch row, no dropout.
pub fn config_for(config: &Config) -> Config {
    let mut c = config.clone();
    c.batch = 1;
    c.dropout = 0.0;
    c
}

/// The prompt's last `ctx` bytes and the batch-1 row that holds them
/// (padded with spaces); `position` defaults to the last byte.
pub fn batch_for(
    config: &Config,
    prompt: &[u8],
    position: Option<usize>,
) -> Result<(Vec<u8>, usize, Batch), String> {
    if prompt.is_empty() {
        return Err("the prompt is empty; give at least one byte with --prompt".into());
    }
    let t = config.ctx;
    let tokens = prompt[prompt.len().saturating_sub(t)..].to_vec();
    let position = position.unwrap_or(tokens.len() - 1);
    if position >= tokens.len() {
        return Err(format!(
            "--position {position} is past the prompt, which has positions 0 to {} (after the context cut)",
            tokens.len() - 1
        ));
    }
    let mut inputs: Vec<u32> = tokens.iter().map(|&b| b as u32).collect();
    inputs.resize(t, b' ' as u32);
    let mut targets = inputs[1..].to_vec();
    targets.push(b' ' as u32);
    Ok((
        tokens,
        position,
        Batch {
            batch: 1,
            ctx: t,
            inputs,
            targets,
        },
    ))
}

/// The forward pass of one prompt as the backend wrote it: every row.
struct Forward {
    tokens: Vec<u8>,
    /// Every activation (1, T, width) in the program's order: its name,
    /// block, shape and all T rows.
    nodes: Vec<(String, Option<usize>, Vec<usize>, Vec<f32>)>,
    /// The stream's L + 1 points, each T × C.
    stream: Vec<Vec<f32>>,
    /// The statistics in the program's order: name, block, T values.
    stats: Vec<(String, Option<usize>, Vec<f32>)>,
    /// T × V.
    logits: Vec<f32>,
    probe: crate::probe::ProbeResult,
}

/// Runs the forward pass of `prompt` on `backend` (a batch-1 program) and
/// reads back everything a flow shows, at every position.
fn forward(backend: &mut dyn Backend, prompt: &[u8]) -> Result<Forward, String> {
    let program: Program = backend.program().clone();
    let config = &program.config;
    if config.batch != 1 {
        return Err("a flow runs on a batch-1 program (flow::config_for)".into());
    }
    let (tokens, _, batch) = batch_for(config, prompt, None)?;
    backend.eval_loss(&batch);
    let t = config.ctx;
    // The nodes: every activation (1, T, width), in the program's order.
    let node_tensors: Vec<&crate::program::TensorInfo> = program
        .tensors
        .iter()
        .filter(|x| {
            x.kind == TensorKind::Activation && matches!(x.shape[..], [1, rows, _] if rows == t)
        })
        .collect();
    // The statistics, in the program's order: each LayerNorm's μ and 1/σ,
    // and each attention's log-sum-exp (all its heads in one tensor).
    let stat_tensors: Vec<&crate::program::TensorInfo> = program
        .ops
        .iter()
        .flat_map(|node| match node.op {
            crate::program::Op::LayerNorm { mean, rstd, .. } => vec![mean, rstd],
            crate::program::Op::Attention { lse, .. } => vec![lse],
            _ => vec![],
        })
        .map(|id| &program.tensors[id])
        .collect();
    // The stream: what enters block 0 is what block 0's first LayerNorm
    // reads (the embeddings, after their dropout); then each block's output.
    let stream_in = program
        .ops
        .iter()
        .find_map(|node| match node.op {
            crate::program::Op::LayerNorm { inp, .. } if node.label == "h.0.ln_1" => {
                Some(program.tensors[inp].name.clone())
            }
            _ => None,
        })
        .ok_or("the program has no LayerNorm h.0.ln_1")?;
    let stream: Vec<String> = std::iter::once(stream_in)
        .chain((0..config.n_layer).map(|i| format!("h.{i}.res_2")))
        .collect();
    // Everything read back at once (one wait, not one per tensor).
    let names: Vec<&str> = node_tensors
        .iter()
        .map(|x| x.name.as_str())
        .chain(stream.iter().map(String::as_str))
        .chain(stat_tensors.iter().map(|x| x.name.as_str()))
        .chain(std::iter::once("logits"))
        .collect();
    let mut all = backend.read_many(&names).map_err(|e| e.to_string())?;
    let logits = all.pop().expect("the logits were read");
    let stat_values = all.split_off(node_tensors.len() + stream.len());
    let stream = all.split_off(node_tensors.len());
    let layer_of = |tensor: &crate::program::TensorInfo| -> Option<usize> {
        program.layers[tensor.layer]
            .name
            .strip_prefix("h.")
            .and_then(|i| i.parse().ok())
    };
    // An attention's (1, H, T) log-sum-exp as one statistic a head:
    // NAME.0 … NAME.{H-1}.
    let stats = stat_tensors
        .iter()
        .zip(stat_values)
        .flat_map(|(tensor, values)| match tensor.shape[..] {
            [1, heads, _] if heads > 0 => values
                .chunks(t)
                .enumerate()
                .map(|(head, row)| (format!("{}.{head}", tensor.name), layer_of(tensor), row.to_vec()))
                .collect::<Vec<_>>(),
            _ => vec![(tensor.name.clone(), layer_of(tensor), values)],
        })
        .collect();
    let nodes = node_tensors
        .iter()
        .zip(all)
        .map(|(tensor, values)| (tensor.name.clone(), layer_of(tensor), tensor.shape.clone(), values))
        .collect();
    // Each head's P (FlashAttention never stores it; the probe recomputes
    // it from Q, K and the log-sum-exp).
    let request = crate::probe::ProbeRequest::for_prompt(config, prompt)?;
    let probe = backend.probe(&request).map_err(|e| e.to_string())?;
    Ok(Forward {
        tokens,
        nodes,
        stream,
        stats,
        logits,
        probe,
    })
}

impl Forward {
    /// Row `position` of a T × `width` tensor.
    fn row(values: &[f32], width: usize, position: usize) -> Vec<f32> {
        values[position * width..(position + 1) * width].to_vec()
    }

    /// Each block's heads' attention from `position` to bytes 0..=position.
    fn attention_at(&self, position: usize) -> Vec<Vec<Vec<f32>>> {
        let n = self.probe.n();
        (0..self.probe.blocks.len())
            .map(|k| {
                (0..self.probe.n_head)
                    .map(|head| {
                        self.probe.p(k, head)[position * n..position * n + position + 1].to_vec()
                    })
                    .collect()
            })
            .collect()
    }

    /// The stream's L + 1 points at `position`, each C.
    fn residual_at(&self, position: usize, c: usize) -> Vec<Vec<f32>> {
        self.stream
            .iter()
            .map(|v| Self::row(v, c, position))
            .collect()
    }

    /// The logit lens at each point of the stream at `position`.
    fn lens_at(
        &self,
        params: &[NamedTensor],
        residual: &[Vec<f32>],
        c: usize,
    ) -> Result<Vec<Vec<Guess>>, String> {
        residual
            .iter()
            .map(|r| lens_at(params, r, c).map(|logits| top5(&next_byte_probs(&logits))))
            .collect()
    }
}

/// Runs the forward pass of `prompt` on `backend` (whose program is
/// [`config_for`]'s, with the weights `params` already written) and reads it
/// at `position`. `params` are the same weights, for the lens.
pub fn run(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
    position: Option<usize>,
) -> Result<Flow, String> {
    let c = backend.program().config.d_model;
    let (_, position, _) = batch_for(&backend.program().config, prompt, position)?;
    let pass = forward(backend, prompt)?;
    let nodes = pass
        .nodes
        .iter()
        .map(|(name, layer, shape, values)| Node {
            name: name.clone(),
            layer: *layer,
            shape: shape.clone(),
            values: Forward::row(values, shape[2], position),
            grad: None,
        })
        .collect();
    let residual = pass.residual_at(position, c);
    let lens = pass.lens_at(params, &residual, c)?;
    Ok(Flow {
        probs: next_byte_probs(&Forward::row(&pass.logits, VOCAB, position)),
        attention: pass.attention_at(position),
        tokens: pass.tokens,
        position,
        residual,
        lens,
        nodes,
        backward: None,
    })
}

/// The forward pass of one prompt at every position of it
/// (`tinygpt flow --all-positions`): the same reads as [`Flow`], with a
/// position axis after the point or the node (T is the prompt's length
/// after the context cut, not the context).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FlowAll {
    pub tokens: Vec<u8>,
    /// (L + 1) × T × C: the stream entering each block, then leaving the last.
    pub residual: Vec<Vec<Vec<f32>>>,
    /// T × 256: the next-byte probabilities at each position.
    pub probs: Vec<Vec<f32>>,
    /// (L + 1) × T × 5: the logit lens.
    pub lens: Vec<Vec<Vec<Guess>>>,
    /// L × heads × T × (position + 1): each head's weights from each position.
    pub attention: Vec<Vec<Vec<Vec<f32>>>>,
    /// Every activation, in the program's order, its values T × width.
    pub nodes: Vec<NodeAll>,
    /// The per-position statistics the forward pass keeps for its backward,
    /// in the program's order, T values each: each LayerNorm's mean μ and
    /// reciprocal deviation 1/σ (`h.0.ln_1.mean`, `h.0.ln_1.rstd`), and
    /// each attention head's softmax normaliser, the log-sum-exp of its
    /// scores at each query (`h.0.attn.lse.0` for head 0).
    pub stats: Vec<StatAll>,
    /// After [`backward_all`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward: Option<BackwardAll>,
}

/// A statistic of every position (a LayerNorm's μ or 1/σ, a head's
/// log-sum-exp).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StatAll {
    pub name: String,
    pub layer: Option<usize>,
    /// One value per position, T.
    pub values: Vec<f32>,
}

/// A node at every position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NodeAll {
    pub name: String,
    pub layer: Option<usize>,
    /// Its shape in the batch-1 program, (1, ctx, width).
    pub shape: Vec<usize>,
    /// T × width.
    pub values: Vec<Vec<f32>>,
    /// After [`backward_all`]: dL/d(this node), T × width.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad: Option<Vec<Vec<f32>>>,
}

/// The backward pass of the mean loss over the prompt's positions.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BackwardAll {
    /// The byte each position predicts: the next byte of the prompt, and at
    /// the last position the given target (None: that position has no loss).
    pub targets: Vec<Option<u8>>,
    /// −log p(target) at each position (None where it has no target).
    pub losses: Vec<Option<f32>>,
    /// Their mean: the loss differentiated.
    pub loss: f32,
    /// Every parameter's gradient norm (L2), in the program's order.
    pub param_grad_norms: Vec<ParamGrad>,
    /// Every trained parameter's whole gradient dL/dW, by name, as the
    /// program's backward entries wrote it (the 3D walk-through draws
    /// them; left out of the JSON, whose norms say the same in brief).
    #[serde(skip)]
    pub param_grads: Vec<(String, Vec<f32>)>,
}

impl FlowAll {
    /// The forward pass read at one position, as [`run`] reads it (the same
    /// numbers: `run` and `run_all` read one pass of the program), without
    /// the backward pass (a [`Flow`]'s is of that one position's loss).
    pub fn at(&self, position: usize) -> Option<Flow> {
        (position < self.tokens.len()).then(|| Flow {
            tokens: self.tokens.clone(),
            position,
            residual: self.residual.iter().map(|r| r[position].clone()).collect(),
            probs: self.probs[position].clone(),
            lens: self.lens.iter().map(|l| l[position].clone()).collect(),
            attention: self
                .attention
                .iter()
                .map(|heads| heads.iter().map(|h| h[position].clone()).collect())
                .collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    name: n.name.clone(),
                    layer: n.layer,
                    shape: n.shape.clone(),
                    values: n.values[position].clone(),
                    grad: None,
                })
                .collect(),
            backward: None,
        })
    }
}

/// Runs the forward pass of `prompt` and reads it at every position.
pub fn run_all(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
) -> Result<FlowAll, String> {
    let c = backend.program().config.d_model;
    let pass = forward(backend, prompt)?;
    let n = pass.tokens.len();
    let per_position: Vec<Vec<Vec<f32>>> = (0..n).map(|i| pass.residual_at(i, c)).collect();
    let lens_per_position = per_position
        .iter()
        .map(|r| pass.lens_at(params, r, c))
        .collect::<Result<Vec<_>, _>>()?;
    let points = pass.stream.len();
    let residual = (0..points)
        .map(|k| per_position.iter().map(|r| r[k].clone()).collect())
        .collect();
    let lens = (0..points)
        .map(|k| lens_per_position.iter().map(|l| l[k].clone()).collect())
        .collect();
    let per_position_attention: Vec<_> = (0..n).map(|i| pass.attention_at(i)).collect();
    let attention = (0..pass.probe.blocks.len())
        .map(|k| {
            (0..pass.probe.n_head)
                .map(|head| {
                    per_position_attention
                        .iter()
                        .map(|a| a[k][head].clone())
                        .collect()
                })
                .collect()
        })
        .collect();
    let nodes = pass
        .nodes
        .iter()
        .map(|(name, layer, shape, values)| NodeAll {
            name: name.clone(),
            layer: *layer,
            shape: shape.clone(),
            values: (0..n).map(|i| Forward::row(values, shape[2], i)).collect(),
            grad: None,
        })
        .collect();
    Ok(FlowAll {
        probs: (0..n)
            .map(|i| next_byte_probs(&Forward::row(&pass.logits, VOCAB, i)))
            .collect(),
        tokens: pass.tokens,
        residual,
        lens,
        attention,
        nodes,
        stats: pass
            .stats
            .iter()
            .map(|(name, layer, values)| StatAll {
                name: name.clone(),
                layer: *layer,
                values: values[..n].to_vec(),
            })
            .collect(),
        backward: None,
    })
}

/// The target a backward pass differentiates at `position`: the byte that
/// follows it in the prompt, or at its last byte `target` (which must then
/// be given).
pub fn target_at(tokens: &[u8], position: usize, target: Option<u8>) -> Result<u8, String> {
    match (tokens.get(position + 1), target) {
        (_, Some(t)) => Ok(t),
        (Some(&next), None) => Ok(next),
        (None, None) => Err(format!(
            "position {position} is the prompt's last byte, so nothing in the prompt follows it; \
             give the byte to predict with --target"
        )),
    }
}

/// What the program's backward entries wrote for the mean loss over some
/// positions: every position's loss, each node's gradient (all T rows, by
/// node name) and each parameter's gradient norm.
struct Gradients {
    losses: Vec<f32>,
    nodes: Vec<(String, Vec<f32>)>,
    params: Vec<ParamGrad>,
    /// Each trained parameter's whole gradient, by name.
    param_values: Vec<(String, Vec<f32>)>,
}

/// Runs the backward pass of the mean of the losses of predicting
/// `targets[k].1` after position `targets[k].0` of `tokens`, through the
/// program's own backward entries (the step-through's). The program's loss
/// is the mean over all T positions; its cross-entropy backward writes
/// (softmax − onehot) / T in every row of dlogits: the rows of the chosen
/// positions are kept, times T / their count, and the others zeroed, so
/// what flows back is the gradient of the chosen positions' mean loss.
fn gradients(
    backend: &mut dyn Backend,
    tokens: &[u8],
    targets: &[(usize, u8)],
    nodes: &[String],
) -> Result<Gradients, String> {
    use crate::program::{Op, Step};
    let program: Program = backend.program().clone();
    let config = &program.config;
    if targets.is_empty() {
        return Err("no position has a byte to predict".into());
    }
    let (_, _, mut batch) = batch_for(config, tokens, None)?;
    for &(position, target) in targets {
        batch.targets[position] = target as u32;
    }
    let err = |e: crate::backend::BackendError| e.to_string();
    let ce = program
        .steps
        .iter()
        .position(|s| matches!(s, Step::Backward(i) if matches!(program.ops[*i].op, Op::CrossEntropy { .. })))
        .ok_or("the program has no cross-entropy backward")?;
    let clip = program
        .steps
        .iter()
        .position(|s| matches!(s, Step::ClipGradNorm))
        .ok_or("the program has no gradient clipping step")?;
    backend.load_step(&batch, None);
    backend.run_entries(0..ce + 1);
    let dlogits = program.tensors[program.logits]
        .grad
        .map(|g| program.tensors[g].name.clone())
        .ok_or("the logits have no gradient")?;
    let scale = config.ctx as f32 / targets.len() as f32;
    let mut seed = backend.read(&dlogits).map_err(err)?;
    for (row, values) in seed.chunks_mut(VOCAB).enumerate() {
        let kept = targets.iter().any(|&(p, _)| p == row);
        for v in values {
            *v = if kept { *v * scale } else { 0.0 };
        }
    }
    backend.write(&dlogits, &seed).map_err(err)?;
    backend.run_entries(ce + 1..clip);
    let losses = backend
        .read(&program.tensors[program.losses].name)
        .map_err(err)?;
    // Each node's gradient and each parameter's, read back at once.
    let node_grads: Vec<(String, String)> = nodes
        .iter()
        .filter_map(|name| {
            let grad = program.tensors[program.tensor_id(name)?].grad?;
            Some((name.clone(), program.tensors[grad].name.clone()))
        })
        .collect();
    // A LoRA fine-tune's frozen weights have none.
    let param_grads: Vec<(String, String)> = program
        .trained()
        .map(|id| {
            let info = &program.tensors[id];
            let grad = info.grad.expect("a trained parameter has a gradient");
            (info.name.clone(), program.tensors[grad].name.clone())
        })
        .collect();
    let names: Vec<&str> = node_grads
        .iter()
        .map(|(_, g)| g.as_str())
        .chain(param_grads.iter().map(|(_, g)| g.as_str()))
        .collect();
    let mut all = backend.read_many(&names).map_err(err)?;
    let param_values: Vec<(String, Vec<f32>)> = param_grads
        .iter()
        .map(|(name, _)| name.clone())
        .zip(all.split_off(node_grads.len()))
        .collect();
    let params = param_values
        .iter()
        .map(|(name, values)| ParamGrad {
            name: name.clone(),
            norm: values
                .iter()
                .map(|&x| x as f64 * x as f64)
                .sum::<f64>()
                .sqrt() as f32,
        })
        .collect();
    Ok(Gradients {
        losses,
        nodes: node_grads.into_iter().map(|(n, _)| n).zip(all).collect(),
        params,
        param_values,
    })
}

/// Runs the backward pass of the loss at `flow`'s position — predicting
/// `target` next — and fills in each node's gradient at the position and
/// each parameter's gradient norm ([`gradients`] with that one position).
pub fn backward(backend: &mut dyn Backend, flow: &mut Flow, target: u8) -> Result<(), String> {
    let position = flow.position;
    let names: Vec<String> = flow.nodes.iter().map(|n| n.name.clone()).collect();
    let g = gradients(backend, &flow.tokens, &[(position, target)], &names)?;
    for (name, values) in &g.nodes {
        let node = flow
            .nodes
            .iter_mut()
            .find(|n| &n.name == name)
            .expect("a node asked for");
        let width = node.values.len();
        if values.len() == node.shape[1] * width {
            node.grad = Some(Forward::row(values, width, position));
        }
    }
    flow.backward = Some(Backward {
        target,
        loss: g.losses[position],
        param_grad_norms: g.params,
        adamw: None,
    });
    Ok(())
}

/// Runs the backward pass of the mean loss over the prompt's positions —
/// each predicting the prompt's next byte, the last `last_target` where
/// given — and fills in each node's gradient at every position and each
/// parameter's gradient norm.
pub fn backward_all(
    backend: &mut dyn Backend,
    flow: &mut FlowAll,
    last_target: Option<u8>,
) -> Result<(), String> {
    let n = flow.tokens.len();
    let targets: Vec<Option<u8>> = (0..n)
        .map(|i| flow.tokens.get(i + 1).copied().or(last_target))
        .collect();
    let chosen: Vec<(usize, u8)> = targets
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.map(|t| (i, t)))
        .collect();
    if chosen.is_empty() {
        return Err(
            "the prompt is one byte, so nothing in it follows a position; \
             give the byte to predict after it with --target"
                .into(),
        );
    }
    let names: Vec<String> = flow.nodes.iter().map(|n| n.name.clone()).collect();
    let g = gradients(backend, &flow.tokens, &chosen, &names)?;
    for (name, values) in &g.nodes {
        let node = flow
            .nodes
            .iter_mut()
            .find(|x| &x.name == name)
            .expect("a node asked for");
        let width = node.shape[2];
        if values.len() == node.shape[1] * width {
            node.grad = Some((0..n).map(|i| Forward::row(values, width, i)).collect());
        }
    }
    let losses: Vec<Option<f32>> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| t.map(|_| g.losses[i]))
        .collect();
    let loss =
        (chosen.iter().map(|&(i, _)| g.losses[i] as f64).sum::<f64>() / chosen.len() as f64) as f32;
    flow.backward = Some(BackwardAll {
        targets,
        losses,
        loss,
        param_grad_norms: g.params,
        param_grads: g.param_values,
    });
    Ok(())
}

/// After [`backward`]: the optimizer's step on that gradient, through the
/// program's own remaining entries (the gradient clip, then AdamW) with the
/// run's moments `moments` (`adam.m.*`, `adam.v.*`) and `step` (the
/// learning rate of the run's next step and its AdamW count). Records each
/// parameter's update norm ‖w′ − w‖ in `flow.backward.adamw`; the backend's
/// weights are then the updated ones.
pub fn adamw(
    backend: &mut dyn Backend,
    flow: &mut Flow,
    moments: &[NamedTensor],
    step: crate::backend::StepParams,
) -> Result<(), String> {
    let Some(back) = flow.backward.as_ref() else {
        return Err("run the backward pass first".into());
    };
    let program: Program = backend.program().clone();
    let (_, position, mut batch) = batch_for(&program.config, &flow.tokens, Some(flow.position))?;
    batch.targets[position] = back.target as u32;
    let moved = optimizer_step(backend, &batch, moments, step)?;
    let updates = moved
        .into_iter()
        .map(|(name, before, after)| ParamGrad {
            name,
            norm: after
                .iter()
                .zip(&before)
                .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                .sum::<f64>()
                .sqrt() as f32,
        })
        .collect();
    if let Some(back) = flow.backward.as_mut() {
        back.adamw = Some(updates);
    }
    Ok(())
}

/// After [`backward_all`]: the optimizer's step on that gradient, as
/// [`adamw`] does it (the program's clip and AdamW entries, the run's
/// moments and next step), and each trained parameter's update w′ − w
/// (whole, by name, in program order). The backend's weights are then the
/// updated ones.
pub fn adamw_all(
    backend: &mut dyn Backend,
    flow: &FlowAll,
    moments: &[NamedTensor],
    step: crate::backend::StepParams,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let Some(back) = flow.backward.as_ref() else {
        return Err("run the backward pass first".into());
    };
    let program: Program = backend.program().clone();
    let (_, _, mut batch) = batch_for(&program.config, &flow.tokens, None)?;
    for (position, target) in back.targets.iter().enumerate() {
        if let Some(t) = target {
            batch.targets[position] = *t as u32;
        }
    }
    let trained: Vec<String> = program
        .trained()
        .map(|id| program.tensors[id].name.clone())
        .collect();
    Ok(optimizer_step(backend, &batch, moments, step)?
        .into_iter()
        .filter(|(name, ..)| trained.contains(name))
        .map(|(name, before, after)| {
            let update = after.iter().zip(&before).map(|(a, b)| a - b).collect();
            (name, update)
        })
        .collect())
}

/// The program's own remaining entries after a backward pass (the gradient
/// clip, then AdamW) on the gradient left in `backend`, with the run's
/// moments `moments` (`adam.m.*`, `adam.v.*`) and `step` (the learning rate
/// of the run's next step and its AdamW count): each parameter's name and
/// values before and after, in program order.
#[allow(clippy::type_complexity)]
fn optimizer_step(
    backend: &mut dyn Backend,
    batch: &Batch,
    moments: &[NamedTensor],
    step: crate::backend::StepParams,
) -> Result<Vec<(String, Vec<f32>, Vec<f32>)>, String> {
    use crate::program::Step;
    let program: Program = backend.program().clone();
    let err = |e: crate::backend::BackendError| e.to_string();
    let clip = program
        .steps
        .iter()
        .position(|s| matches!(s, Step::ClipGradNorm))
        .ok_or("the program has no gradient clipping step")?;
    for m in moments {
        backend.write(&m.name, &m.values).map_err(err)?;
    }
    let params: Vec<String> = program
        .params()
        .map(|id| program.tensors[id].name.clone())
        .collect();
    let names: Vec<&str> = params.iter().map(String::as_str).collect();
    let before = backend.read_many(&names).map_err(err)?;
    // The batch is the pass's; the step parameters switch AdamW on (the
    // program has no dropout here: config_for).
    backend.load_step(batch, Some(step));
    backend.run_entries(clip..program.steps.len());
    let after = backend.read_many(&names).map_err(err)?;
    Ok(params
        .into_iter()
        .zip(before)
        .zip(after)
        .map(|((name, before), after)| (name, before, after))
        .collect())
}

/// Softmax at temperature 1 over all 256 bytes, through the sampler's own
/// distribution, indexed by byte.
pub fn next_byte_probs(logits: &[f32]) -> Vec<f32> {
    let all = SampleOptions {
        temperature: 1.0,
        top_k: VOCAB,
        seed: 0,
    };
    let mut probs = vec![0.0; VOCAB];
    for (byte, p) in next_byte_distribution(logits, &all) {
        probs[byte as usize] = p as f32;
    }
    probs
}

/// The 5 most likely bytes, most likely first.
pub fn top5(probs: &[f32]) -> Vec<Guess> {
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(5)
        .map(|i| Guess {
            byte: i as u8,
            p: probs[i],
        })
        .collect()
}

/// ln_f and the tied head on one vector of the stream (C) → logits (V),
/// with the CPU backend's kernels.
pub fn lens_at(params: &[NamedTensor], stream: &[f32], c: usize) -> Result<Vec<f32>, String> {
    let get = |name: &str| {
        params
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.values.as_slice())
            .ok_or(format!("parameter `{name}` is missing"))
    };
    let (w, b, wte) = (
        get("transformer.ln_f.weight")?,
        get("transformer.ln_f.bias")?,
        get("transformer.wte.weight")?,
    );
    let (mut ln, mut mean, mut rstd) = (vec![0.0; c], [0.0f32], [0.0f32]);
    crate::cpu::ops::layernorm_forward(&mut ln, &mut mean, &mut rstd, stream, w, b, c);
    let mut logits = vec![0.0; VOCAB];
    crate::cpu::ops::tied_head_forward(&mut logits, &ln, wte, c, VOCAB);
    Ok(logits)
}

impl Flow {
    /// The JSON of `tinygpt flow --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data")
    }
}

impl FlowAll {
    /// The JSON of `tinygpt flow --all-positions --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data")
    }
}
