//! Taking the model apart (issue 33): the logit lens at every position,
//! knocking out a head or an MLP, activation patching and direct logit
//! attribution. Each runs the program itself on a backend of the batch-1
//! program ([`crate::flow::config_for`]), as the flow does; nothing here is
//! a second implementation of the model:
//!
//! - a **knockout** is a change of weights, which both backends honour as
//!   they honour any weights: zeroing head h's output before `c_proj` is
//!   zeroing the D columns of `c_proj.weight` that read it (W is (C, C),
//!   out × in), and zeroing the MLP's output before the add is zeroing
//!   `mlp.c_proj`'s weight and bias;
//! - **patching** runs the forward entries up to the op that writes the
//!   stream entering a block, overwrites one position's row with the clean
//!   run's, and runs the rest (the step-through's entry machinery);
//! - the **lens** and the **attribution** read the forward pass's own
//!   tensors and apply ln_f and the tied head through the CPU's kernels.

use crate::backend::Backend;
use crate::data::Batch;
use crate::data::tasks::argmax;
use crate::flow::{Guess, batch_for, lens_at, next_byte_probs, top5};
use crate::model::config::VOCAB;
use crate::model::params::NamedTensor;
use crate::program::{Op, Program, Step};
use serde::Serialize;

/// A part of the model that can be knocked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Part {
    Head { layer: usize, head: usize },
    Mlp { layer: usize },
}

impl Part {
    /// `h.1.head2`, `h.0.mlp`.
    pub fn label(self) -> String {
        match self {
            Part::Head { layer, head } => format!("h.{layer}.head{head}"),
            Part::Mlp { layer } => format!("h.{layer}.mlp"),
        }
    }

    /// Every head, then each layer's MLP, layer by layer.
    pub fn all(n_layer: usize, n_head: usize) -> Vec<Part> {
        (0..n_layer)
            .flat_map(|layer| {
                (0..n_head)
                    .map(move |head| Part::Head { layer, head })
                    .chain(std::iter::once(Part::Mlp { layer }))
            })
            .collect()
    }
}

fn param_mut<'a>(params: &'a mut [NamedTensor], name: &str) -> Result<&'a mut NamedTensor, String> {
    params
        .iter_mut()
        .find(|p| p.name == name)
        .ok_or(format!("parameter `{name}` is missing"))
}

fn param<'a>(params: &'a [NamedTensor], name: &str) -> Result<&'a [f32], String> {
    params
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.values.as_slice())
        .ok_or(format!("parameter `{name}` is missing"))
}

/// Knocks `part` out of `params` (a model of width `c` with `n_head` heads).
pub fn knock_out(
    params: &mut [NamedTensor],
    part: Part,
    c: usize,
    n_head: usize,
) -> Result<(), String> {
    match part {
        Part::Head { layer, head } => {
            if head >= n_head {
                return Err(format!("no head {head}: the model has {n_head} per layer"));
            }
            let d = c / n_head;
            let w = param_mut(params, &format!("transformer.h.{layer}.attn.c_proj.weight"))?;
            // (C_out, C_in): every output reads the head's D inputs. A LoRA
            // adapter's A (r, C_in) reads them too.
            for row in w.values.chunks_mut(c) {
                row[head * d..(head + 1) * d].fill(0.0);
            }
            let lora_a = format!("transformer.h.{layer}.attn.c_proj.lora_A.weight");
            if let Ok(a) = param_mut(params, &lora_a) {
                for row in a.values.chunks_mut(c) {
                    row[head * d..(head + 1) * d].fill(0.0);
                }
            }
        }
        Part::Mlp { layer } => {
            for name in ["weight", "bias"] {
                param_mut(params, &format!("transformer.h.{layer}.mlp.c_proj.{name}"))?
                    .values
                    .fill(0.0);
            }
            // A LoRA adapter's update of that output (B = 0 silences it).
            let lora_b = format!("transformer.h.{layer}.mlp.c_proj.lora_B.weight");
            if let Ok(b) = param_mut(params, &lora_b) {
                b.values.fill(0.0);
            }
        }
    }
    Ok(())
}

/// Writes `params` to the backend.
fn put(backend: &mut dyn Backend, params: &[NamedTensor]) -> Result<(), String> {
    for p in params {
        backend
            .write(&p.name, &p.values)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The prompt's loss: the mean cross-entropy of predicting bytes 1..n of
/// the prompt (after the context cut) from positions 0..n−1, with the
/// weights the backend holds.
pub fn prompt_loss(backend: &mut dyn Backend, prompt: &[u8]) -> Result<f32, String> {
    let program: Program = backend.program().clone();
    let (tokens, _, batch) = batch_for(&program.config, prompt, None)?;
    if tokens.len() < 2 {
        return Err(
            "the prompt needs at least two bytes: the loss predicts each byte from the ones before"
                .into(),
        );
    }
    backend.eval_loss(&batch);
    let losses = backend
        .read(&program.tensors[program.losses].name)
        .map_err(|e| e.to_string())?;
    let n = tokens.len() - 1;
    Ok((losses[..n].iter().map(|&x| x as f64).sum::<f64>() / n as f64) as f32)
}

/// The logit lens at every position: for each point of the stream
/// (entering block 0..L−1, then leaving the last block) and each position,
/// the top 5 of ln_f + the tied head applied there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LensGrid {
    pub tokens: Vec<u8>,
    /// Points × positions × 5.
    pub lens: Vec<Vec<Vec<Guess>>>,
}

/// The names of the stream's tensors entering each block (what its first
/// LayerNorm reads), then leaving the last block.
pub fn stream_points(program: &Program) -> Result<Vec<String>, String> {
    let mut points = Vec::new();
    for l in 0..program.config.n_layer {
        let label = format!("h.{l}.ln_1");
        let inp = program
            .ops
            .iter()
            .find_map(|o| match o.op {
                Op::LayerNorm { inp, .. } if o.label == label => Some(inp),
                _ => None,
            })
            .ok_or(format!("the program has no LayerNorm {label}"))?;
        points.push(program.tensors[inp].name.clone());
    }
    points.push(format!("h.{}.res_2", program.config.n_layer - 1));
    Ok(points)
}

/// [`LensGrid`] of `prompt` with the backend's weights (`params` the same).
pub fn lens(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
) -> Result<LensGrid, String> {
    let program: Program = backend.program().clone();
    let c = program.config.d_model;
    let (tokens, _, batch) = batch_for(&program.config, prompt, None)?;
    backend.eval_loss(&batch);
    let mut lens = Vec::new();
    let points = stream_points(&program)?;
    let names: Vec<&str> = points.iter().map(String::as_str).collect();
    for all in backend.read_many(&names).map_err(|e| e.to_string())? {
        let row = (0..tokens.len())
            .map(|t| {
                let logits = lens_at(params, &all[t * c..(t + 1) * c], c)?;
                Ok(top5(&next_byte_probs(&logits)))
            })
            .collect::<Result<Vec<_>, String>>()?;
        lens.push(row);
    }
    Ok(LensGrid { tokens, lens })
}

/// One part's knockout.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Knockout {
    pub layer: usize,
    pub head: Option<usize>,
    pub mlp: bool,
    pub loss: f32,
    /// `loss − intact_loss`: how much the model needed the part here.
    pub delta: f32,
}

/// What a knockout's loss is measured on: the prompt ([`prompt_loss`]), or
/// rows of the run's validation windows, each a batch of one row of `ctx`
/// bytes and their next bytes (the mean of their losses is the run's
/// validation loss when the rows are all of its validation batches).
#[derive(Clone, Copy, Debug)]
pub enum LossOn<'a> {
    Prompt(&'a [u8]),
    Rows(&'a [Batch]),
}

impl LossOn<'_> {
    /// `"prompt"` or `"validation"`.
    pub fn key(&self) -> &'static str {
        match self {
            LossOn::Prompt(_) => "prompt",
            LossOn::Rows(_) => "validation",
        }
    }
}

/// The mean loss over `rows` (batches of one row, the program's context),
/// with the weights the backend holds.
pub fn rows_loss(backend: &mut dyn Backend, rows: &[Batch]) -> Result<f32, String> {
    let ctx = backend.program().config.ctx;
    if rows.is_empty() {
        return Err("no validation rows to measure the loss on".into());
    }
    if let Some(r) = rows.iter().find(|r| r.batch != 1 || r.ctx != ctx) {
        return Err(format!(
            "a validation row of {} × {} bytes does not fit the model's 1 × {ctx}",
            r.batch, r.ctx
        ));
    }
    let sum: f64 = rows.iter().map(|r| backend.eval_loss(r) as f64).sum();
    Ok((sum / rows.len() as f64) as f32)
}

/// The loss on `on` with the weights the backend holds.
pub fn loss_on(backend: &mut dyn Backend, on: LossOn) -> Result<f32, String> {
    match on {
        LossOn::Prompt(prompt) => prompt_loss(backend, prompt),
        LossOn::Rows(rows) => rows_loss(backend, rows),
    }
}

/// Every part knocked out in turn, on the prompt or validation rows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ablation {
    /// What the loss is measured on: `"prompt"` or `"validation"`.
    pub on: &'static str,
    /// Validation rows measured (0 for the prompt).
    pub rows: usize,
    pub intact_loss: f32,
    pub parts: Vec<Knockout>,
}

/// [`Ablation`] on `on`: each of `parts` knocked out alone from `params`;
/// the backend is left holding `params` intact.
pub fn ablate(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    on: LossOn,
    parts: &[Part],
) -> Result<Ablation, String> {
    let config = backend.program().config.clone();
    put(backend, params)?;
    let intact_loss = loss_on(backend, on)?;
    let mut out = Vec::with_capacity(parts.len());
    for &part in parts {
        let mut edited = params.to_vec();
        knock_out(&mut edited, part, config.d_model, config.n_head)?;
        put(backend, &edited)?;
        let loss = loss_on(backend, on)?;
        let (layer, head, mlp) = match part {
            Part::Head { layer, head } => (layer, Some(head), false),
            Part::Mlp { layer } => (layer, None, true),
        };
        out.push(Knockout {
            layer,
            head,
            mlp,
            loss,
            delta: loss - intact_loss,
        });
    }
    put(backend, params)?;
    Ok(Ablation {
        on: on.key(),
        rows: match on {
            LossOn::Prompt(_) => 0,
            LossOn::Rows(r) => r.len(),
        },
        intact_loss,
        parts: out,
    })
}

/// Activation patching (causal tracing): how much of the clean run's answer
/// comes back when the corrupted run gets the clean stream at one (block,
/// position).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Patching {
    pub clean_answer: u8,
    pub corrupt_answer: u8,
    /// logit(clean answer) − logit(corrupt answer) at the last position,
    /// in each run.
    pub clean_diff: f32,
    pub corrupt_diff: f32,
    /// Blocks × positions: (patched − corrupt) / (clean − corrupt).
    pub restored: Vec<Vec<f32>>,
}

/// The index in `program.steps` of the forward entry that writes `name`,
/// and the end of the forward entries.
fn writer_of(program: &Program, name: &str) -> Result<(usize, usize), String> {
    let id = program
        .tensor_id(name)
        .ok_or(format!("no tensor `{name}`"))?;
    let at = program
        .writer(id)
        .and_then(|op| program.steps.iter().position(|s| *s == Step::Forward(op)))
        .ok_or(format!("no forward entry writes `{name}`"))?;
    let end = program
        .steps
        .iter()
        .position(|s| !matches!(s, Step::Forward(_)))
        .unwrap_or(program.steps.len());
    Ok((at, end))
}

/// The last position's logits of `prompt`'s forward pass, with `patch`
/// (a stream tensor, a position, its new row) written as soon as the entry
/// that writes the tensor has run.
pub fn last_logits(
    backend: &mut dyn Backend,
    prompt: &[u8],
    patch: Option<(&str, usize, &[f32])>,
) -> Result<Vec<f32>, String> {
    let program: Program = backend.program().clone();
    let (_, last, batch) = batch_for(&program.config, prompt, None)?;
    let err = |e: crate::backend::BackendError| e.to_string();
    backend.load_step(&batch, None);
    match patch {
        None => {
            let (_, end) = writer_of(&program, "logits")?;
            backend.run_entries(0..end);
        }
        Some((name, t, row)) => {
            let (at, end) = writer_of(&program, name)?;
            backend.run_entries(0..at + 1);
            let c = row.len();
            let mut all = backend.read(name).map_err(err)?;
            all[t * c..(t + 1) * c].copy_from_slice(row);
            backend.write(name, &all).map_err(err)?;
            backend.run_entries(at + 1..end);
        }
    }
    let logits = backend.read("logits").map_err(err)?;
    Ok(logits[last * VOCAB..(last + 1) * VOCAB].to_vec())
}

/// [`Patching`] of `clean` into `corrupt` (the same length after the
/// context cut), comparing the two runs' answers, or `bytes` (A, B) when
/// given.
pub fn patch(
    backend: &mut dyn Backend,
    clean: &[u8],
    corrupt: &[u8],
    bytes: Option<(u8, u8)>,
) -> Result<Patching, String> {
    let program: Program = backend.program().clone();
    for (which, prompt) in [("clean", clean), ("corrupted", corrupt)] {
        if prompt.is_empty() {
            return Err(format!(
                "the {which} prompt is empty; give it the same number of bytes as the other"
            ));
        }
    }
    let (clean_tokens, _, _) = batch_for(&program.config, clean, None)?;
    let (corrupt_tokens, _, _) = batch_for(&program.config, corrupt, None)?;
    if clean_tokens == corrupt_tokens {
        let ctx = program.config.ctx;
        let cut = if clean.len() > ctx {
            format!(" in their last {ctx} bytes (the context the model reads)")
        } else {
            String::new()
        };
        return Err(format!(
            "the clean and the corrupted prompt are the same{cut}, so there is nothing to patch; \
             change a byte of the corrupted one{}",
            if cut.is_empty() { "" } else { " within those bytes" }
        ));
    }
    if clean_tokens.len() != corrupt_tokens.len() {
        return Err(format!(
            "the clean prompt has {} bytes and the corrupted one {}: patching needs the same length (change bytes, do not add or remove them)",
            clean_tokens.len(),
            corrupt_tokens.len()
        ));
    }
    let c = program.config.d_model;
    let points = stream_points(&program)?;
    // The clean run's streams.
    let clean_logits = last_logits(backend, clean, None)?;
    let names: Vec<&str> = points[..program.config.n_layer]
        .iter()
        .map(String::as_str)
        .collect();
    let clean_streams = backend.read_many(&names).map_err(|e| e.to_string())?;
    let corrupt_logits = last_logits(backend, corrupt, None)?;
    let (a, b) = bytes.unwrap_or((argmax(&clean_logits), argmax(&corrupt_logits)));
    if a == b {
        return Err(format!(
            "both prompts lead to the same next byte ({}), so no logit difference separates them; choose another pair, or name the two bytes to compare",
            crate::probe::byte_label(a)
        ));
    }
    let diff = |l: &[f32]| l[a as usize] - l[b as usize];
    let (clean_diff, corrupt_diff) = (diff(&clean_logits), diff(&corrupt_logits));
    let span = clean_diff - corrupt_diff;
    // The shares are divided by the span: none to divide means none to restore.
    if !(span.abs() > f32::EPSILON * clean_diff.abs().max(corrupt_diff.abs()).max(1.0)) {
        return Err(format!(
            "logit({a}) − logit({b}) is {clean_diff:.4} in the clean run and {corrupt_diff:.4} in the corrupted \
             one: the change of prompt does not move it, so there is no share of it to restore; \
             choose a pair of prompts whose answers differ, or other bytes with --bytes",
            a = crate::probe::byte_label(a),
            b = crate::probe::byte_label(b),
        ));
    }
    let mut restored = Vec::new();
    for (l, name) in points[..program.config.n_layer].iter().enumerate() {
        let mut row = Vec::new();
        for t in 0..corrupt_tokens.len() {
            let clean_row = &clean_streams[l][t * c..(t + 1) * c];
            let logits = last_logits(backend, corrupt, Some((name, t, clean_row)))?;
            row.push((diff(&logits) - corrupt_diff) / span);
        }
        restored.push(row);
    }
    Ok(Patching {
        clean_answer: a,
        corrupt_answer: b,
        clean_diff,
        corrupt_diff,
        restored,
    })
}

/// Direct logit attribution: each part's share of logit(A) − logit(B) at
/// one position, through ln_f with the real forward pass's scale.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attribution {
    pub position: usize,
    pub a: u8,
    pub b: u8,
    /// The real logit(A) − logit(B).
    pub total: f32,
    /// (part, contribution): the embeddings, each head, each attention
    /// output's bias, each MLP, and ln_f's bias; they sum to `total`.
    pub parts: Vec<(String, f32)>,
}

/// [`Attribution`] of `prompt` at `position` (default: the last).
pub fn attribute(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
    position: Option<usize>,
    (a, b): (u8, u8),
) -> Result<Attribution, String> {
    let program: Program = backend.program().clone();
    let config = program.config.clone();
    let (c, n_head) = (config.d_model, config.n_head);
    let d = c / n_head;
    let (_, p, batch) = batch_for(&config, prompt, position)?;
    backend.eval_loss(&batch);
    let mut read_row = |name: &str| -> Result<Vec<f32>, String> {
        let all = backend.read(name).map_err(|e| e.to_string())?;
        let w = all.len() / config.ctx;
        Ok(all[p * w..(p + 1) * w].to_vec())
    };
    let points = stream_points(&program)?;
    let stream = read_row(&points[config.n_layer])?;
    // ln_f's scale at this position, from the real stream.
    let mean = stream.iter().map(|&x| x as f64).sum::<f64>() / c as f64;
    let var = stream
        .iter()
        .map(|&x| (x as f64 - mean).powi(2))
        .sum::<f64>()
        / c as f64;
    let rstd = 1.0 / (var + crate::cpu::ops::LN_EPS).sqrt();
    let gamma = param(params, "transformer.ln_f.weight")?;
    let beta = param(params, "transformer.ln_f.bias")?;
    let wte = param(params, "transformer.wte.weight")?;
    let dir: Vec<f64> = (0..c)
        .map(|k| {
            (wte[a as usize * c + k] as f64 - wte[b as usize * c + k] as f64) * gamma[k] as f64
        })
        .collect();
    // A vector's share: centred, scaled by the real rstd, on (wte[A] − wte[B]) ⊙ γ.
    let share = |v: &[f64]| -> f32 {
        let m = v.iter().sum::<f64>() / c as f64;
        (v.iter().zip(&dir).map(|(x, w)| (x - m) * w).sum::<f64>() * rstd) as f32
    };
    let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let mut parts = vec![(
        "embeddings".to_string(),
        share(&to64(&read_row(&points[0])?)),
    )];
    for l in 0..config.n_layer {
        let y = read_row(&format!("h.{l}.attn.y"))?;
        let w = param(params, &format!("transformer.h.{l}.attn.c_proj.weight"))?;
        for h in 0..n_head {
            // The head's part of c_proj: y[h·D..(h+1)·D] · W[:, h·D..(h+1)·D]ᵀ.
            let out: Vec<f64> = (0..c)
                .map(|o| {
                    (0..d)
                        .map(|k| y[h * d + k] as f64 * w[o * c + h * d + k] as f64)
                        .sum()
                })
                .collect();
            parts.push((format!("h.{l}.head{h}"), share(&out)));
        }
        let bias = param(params, &format!("transformer.h.{l}.attn.c_proj.bias"))?;
        parts.push((format!("h.{l}.attn bias"), share(&to64(bias))));
        parts.push((
            format!("h.{l}.mlp"),
            share(&to64(&read_row(&format!("h.{l}.mlp.proj"))?)),
        ));
    }
    parts.push((
        "ln_f bias".to_string(),
        (0..c)
            .map(|k| {
                beta[k] as f64 * (wte[a as usize * c + k] as f64 - wte[b as usize * c + k] as f64)
            })
            .sum::<f64>() as f32,
    ));
    let logits = read_row("logits")?;
    Ok(Attribution {
        position: p,
        a,
        b,
        total: logits[a as usize] - logits[b as usize],
        parts,
    })
}
