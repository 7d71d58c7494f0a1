//! Inside the model: one prompt's forward pass read at one position, for the
//! picture of a transformer computing (issue 32) and `tinygpt flow --json`.
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
use crate::train::sample::{SampleOptions, next_byte_distribution};

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

/// Runs the forward pass of `prompt` on `backend` (whose program is
/// [`config_for`]'s, with the weights `params` already written) and reads it
/// at `position`. `params` are the same weights, for the lens.
pub fn run(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
    position: Option<usize>,
) -> Result<Flow, String> {
    let program: Program = backend.program().clone();
    let config = &program.config;
    if config.batch != 1 {
        return Err("a flow runs on a batch-1 program (flow::config_for)".into());
    }
    let (tokens, position, batch) = batch_for(config, prompt, position)?;
    backend.eval_loss(&batch);
    let (t, c) = (config.ctx, config.d_model);
    // The nodes: every activation (1, T, width), in the program's order.
    let node_tensors: Vec<&crate::program::TensorInfo> = program
        .tensors
        .iter()
        .filter(|x| {
            x.kind == TensorKind::Activation && matches!(x.shape[..], [1, rows, _] if rows == t)
        })
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
        .chain(std::iter::once("logits"))
        .collect();
    let all = backend.read_many(&names).map_err(|e| e.to_string())?;
    let row =
        |values: &[f32], width: usize| values[position * width..(position + 1) * width].to_vec();
    let mut nodes = Vec::new();
    for (tensor, values) in node_tensors.iter().zip(&all) {
        let width = tensor.shape[2];
        let layer = program.layers[tensor.layer]
            .name
            .strip_prefix("h.")
            .and_then(|i| i.parse().ok());
        nodes.push(Node {
            name: tensor.name.clone(),
            layer,
            shape: tensor.shape.clone(),
            values: row(values, width),
            grad: None,
        });
    }
    let residual: Vec<Vec<f32>> = all[node_tensors.len()..node_tensors.len() + stream.len()]
        .iter()
        .map(|v| row(v, c))
        .collect();
    let logits = row(all.last().expect("the logits were read"), VOCAB);
    // Each head's row of P at the position, from the probe (FlashAttention
    // never stores P; the probe recomputes it from Q, K and the log-sum-exp).
    let request = crate::probe::ProbeRequest::for_prompt(config, prompt)?;
    let probe = backend.probe(&request).map_err(|e| e.to_string())?;
    let n = probe.n();
    let attention = (0..probe.blocks.len())
        .map(|k| {
            (0..probe.n_head)
                .map(|head| probe.p(k, head)[position * n..position * n + position + 1].to_vec())
                .collect()
        })
        .collect();
    let probs = next_byte_probs(&logits);
    let lens = residual
        .iter()
        .map(|r| lens_at(params, r, c).map(|logits| top5(&next_byte_probs(&logits))))
        .collect::<Result<_, _>>()?;
    Ok(Flow {
        tokens,
        position,
        residual,
        probs,
        lens,
        attention,
        nodes,
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

/// Runs the backward pass of the loss at `flow`'s position — predicting
/// `target` next — through the program's own backward entries (the
/// step-through's), and fills in each node's gradient at the position and
/// each parameter's gradient norm. The program's loss is the mean over all
/// T positions; its cross-entropy backward writes (softmax − onehot) / T in
/// every row of dlogits, and only the position's row is kept (times T), so
/// what flows back is the gradient of that one position's loss.
pub fn backward(backend: &mut dyn Backend, flow: &mut Flow, target: u8) -> Result<(), String> {
    use crate::program::{Op, Step};
    let program: Program = backend.program().clone();
    let config = &program.config;
    let (_, position, mut batch) = batch_for(config, &flow.tokens, Some(flow.position))?;
    batch.targets[position] = target as u32;
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
    let rows = config.ctx as f32;
    let mut seed = backend.read(&dlogits).map_err(err)?;
    for (row, values) in seed.chunks_mut(VOCAB).enumerate() {
        for v in values {
            *v = if row == position { *v * rows } else { 0.0 };
        }
    }
    backend.write(&dlogits, &seed).map_err(err)?;
    backend.run_entries(ce + 1..clip);
    let loss = backend
        .read(&program.tensors[program.losses].name)
        .map_err(err)?[position];
    let t = config.ctx;
    // Each node's gradient and each parameter's, read back at once.
    let node_grads: Vec<(usize, String)> = flow
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(k, node)| {
            let grad = program.tensors[program.tensor_id(&node.name)?].grad?;
            Some((k, program.tensors[grad].name.clone()))
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
    let all = backend.read_many(&names).map_err(err)?;
    for ((k, _), values) in node_grads.iter().zip(&all) {
        let width = flow.nodes[*k].values.len();
        if values.len() == t * width {
            flow.nodes[*k].grad = Some(values[position * width..(position + 1) * width].to_vec());
        }
    }
    let param_grad_norms = param_grads
        .iter()
        .zip(&all[node_grads.len()..])
        .map(|((name, _), values)| ParamGrad {
            name: name.clone(),
            norm: values
                .iter()
                .map(|&x| x as f64 * x as f64)
                .sum::<f64>()
                .sqrt() as f32,
        })
        .collect();
    flow.backward = Some(Backward {
        target,
        loss,
        param_grad_norms,
        adamw: None,
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
    use crate::program::Step;
    let program: Program = backend.program().clone();
    let err = |e: crate::backend::BackendError| e.to_string();
    let Some(back) = flow.backward.as_mut() else {
        return Err("run the backward pass first".into());
    };
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
    let (_, position, mut batch) = batch_for(&program.config, &flow.tokens, Some(flow.position))?;
    batch.targets[position] = back.target as u32;
    // The batch is the same; the step parameters switch AdamW on (the
    // program has no dropout here: config_for).
    backend.load_step(&batch, Some(step));
    backend.run_entries(clip..program.steps.len());
    let after = backend.read_many(&names).map_err(err)?;
    let mut updates = Vec::with_capacity(params.len());
    for ((name, old), new) in params.iter().zip(&before).zip(&after) {
        let norm = new
            .iter()
            .zip(old)
            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
            .sum::<f64>()
            .sqrt() as f32;
        updates.push(ParamGrad {
            name: name.clone(),
            norm,
        });
    }
    back.adamw = Some(updates);
    Ok(())
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
