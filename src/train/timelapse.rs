//! Recording a run's time-lapse ([`crate::model::timelapse`]): the probe of
//! one frame, computed by the backend's own forward pass ([`Backend::probe`])
//! on the weights it holds, so that a frame recorded at step s is what
//! `tinygpt heads` computes from the checkpoint saved at step s.

use crate::backend::{Backend, BackendError};
use crate::model::timelapse::{
    Frame, HeadScore, KEPT_WEIGHTS_MAX, TensorNorms, induction_score, previous_token_score,
    trained_values,
};
use crate::probe::{ProbeRequest, ProbeResult};
use crate::program::Program;
use std::sync::Arc;

/// What the probe strings give: every head's scores (the mean over the
/// strings), the losses on the copied and the fresh letters, the greedy
/// predictions along the first string and its attention maps (L × H × n × n).
#[derive(Clone, Debug, PartialEq)]
pub struct HeadProbe {
    pub heads: Vec<HeadScore>,
    pub copy_loss: f32,
    pub fresh_loss: f32,
    pub predictions: Vec<u8>,
    pub maps: Vec<f32>,
}

/// Probes `sequences` (each `m` letters written twice) on the weights the
/// backend holds.
pub fn probe_heads(
    backend: &mut dyn Backend,
    sequences: &[Vec<u8>],
) -> Result<HeadProbe, BackendError> {
    let config = backend.program().config.clone();
    let results = sequences
        .iter()
        .map(|seq| {
            let request =
                ProbeRequest::for_prompt(&config, seq).map_err(BackendError::BadProbe)?;
            backend.probe(&request)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(heads_from(sequences, &results, config.n_layer, config.n_head))
}

/// The probe requests of `sequences` on a model of `config` (what
/// [`heads_from`] reads the results of).
pub fn probe_requests(
    config: &crate::model::config::Config,
    sequences: &[Vec<u8>],
) -> Result<Vec<ProbeRequest>, String> {
    sequences
        .iter()
        .map(|seq| ProbeRequest::for_prompt(config, seq))
        .collect()
}

/// [`HeadProbe`] of the probes of `sequences` (`results`, in order), on a
/// model of `layers` blocks of `heads` heads.
pub fn heads_from(
    sequences: &[Vec<u8>],
    results: &[ProbeResult],
    layers: usize,
    heads: usize,
) -> HeadProbe {
    let mut induction = vec![0.0f64; layers * heads];
    let mut previous = vec![0.0f64; layers * heads];
    let (mut copy, mut fresh) = (0.0f64, 0.0f64);
    let (mut copies, mut freshes) = (0usize, 0usize);
    let mut predictions = Vec::new();
    let mut maps = Vec::new();
    for (s, (seq, result)) in sequences.iter().zip(results).enumerate() {
        let m = seq.len() / 2;
        let n = 2 * m;
        let window = result.n();
        for (k, &layer) in result.blocks.iter().enumerate() {
            for head in 0..heads {
                // The strings' own n × n (without the causal mask, a lab,
                // the window is all T positions).
                let full = result.p(k, head);
                let p: Vec<f32> = (0..n)
                    .flat_map(|i| full[i * window..i * window + n].iter().copied())
                    .collect();
                induction[layer * heads + head] += induction_score(&p, m) as f64;
                previous[layer * heads + head] += previous_token_score(&p, n) as f64;
                if s == 0 {
                    maps.extend_from_slice(&p);
                }
            }
        }
        // Position i predicts byte i + 1: the fresh letters 1..m from
        // positions 0..m−1 (the first letter has nothing before it), the
        // copy's letters m+1..2m from positions m..2m−1 (its first letter
        // could have been a new one).
        for i in 0..n - 1 {
            let logits = result.logits_at(i);
            let loss = cross_entropy(logits, seq[i + 1]);
            if i + 1 < m {
                fresh += loss;
                freshes += 1;
            } else if i >= m {
                copy += loss;
                copies += 1;
            }
            if s == 0 {
                predictions.push(crate::data::tasks::argmax(logits));
            }
        }
        if s == 0 {
            predictions.push(crate::data::tasks::argmax(result.logits_at(n - 1)));
        }
    }
    let count = sequences.len().max(1) as f64;
    let scores = (0..layers * heads)
        .map(|i| HeadScore {
            layer: i / heads,
            head: i % heads,
            induction: (induction[i] / count) as f32,
            previous_token: (previous[i] / count) as f32,
        })
        .collect();
    HeadProbe {
        heads: scores,
        copy_loss: (copy / copies.max(1) as f64) as f32,
        fresh_loss: (fresh / freshes.max(1) as f64) as f32,
        predictions,
        maps,
    }
}

/// −log softmax(logits)[target], in f64.
fn cross_entropy(logits: &[f32], target: u8) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// The most parameters a frame measures the norms of: above it (a model
/// of more than 16 M parameters) its frames hold no norms, so that a frame
/// never reads back more than one read's worth of the weights.
pub const NORMS_MAX_VALUES: usize = crate::backend::READ_CHUNK_FLOATS;

/// What a frame's norms read, in order: each trained parameter, then, with
/// `grads`, each one's gradient. Empty for a model above [`NORMS_MAX_VALUES`].
pub fn norm_names(program: &Program, grads: bool) -> Vec<String> {
    let trained: Vec<_> = program
        .params()
        .filter(|&id| !program.tensors[id].is_frozen())
        .collect();
    let total: usize = trained.iter().map(|&id| program.tensors[id].numel()).sum();
    if total > NORMS_MAX_VALUES {
        return vec![];
    }
    let mut names: Vec<String> = trained
        .iter()
        .map(|&id| program.tensors[id].name.clone())
        .collect();
    if grads {
        names.extend(trained.iter().filter_map(|&id| {
            program.tensors[id]
                .grad
                .map(|g| program.tensors[g].name.clone())
        }));
    }
    names
}

/// Each trained parameter's norms from `values`, the tensors of
/// [`norm_names`] one after another; `before`: the weights before the step
/// (the same names, in order), for the update.
pub fn norms_from(
    program: &Program,
    values: &[f32],
    grads: bool,
    before: Option<&[f32]>,
) -> Vec<TensorNorms> {
    let names = norm_names(program, false);
    let sizes: Vec<usize> = names
        .iter()
        .map(|n| program.tensors[program.tensor_id(n).expect("a parameter")].numel())
        .collect();
    let weights_len: usize = sizes.iter().sum();
    let grads_len: usize = names
        .iter()
        .zip(&sizes)
        .filter(|(n, _)| {
            grads
                && program.tensors[program.tensor_id(n).expect("a parameter")]
                    .grad
                    .is_some()
        })
        .map(|(_, &size)| size)
        .sum();
    // Reads of another shape (never ours) measure nothing.
    if values.len() != weights_len + grads_len {
        return vec![];
    }
    let before = before.filter(|b| b.len() == weights_len);
    let mut at = 0;
    let mut grad_at = weights_len;
    let mut out = Vec::with_capacity(names.len());
    for (name, size) in names.into_iter().zip(sizes) {
        let weight = &values[at..at + size];
        let has_grad = grads
            && program.tensors[program.tensor_id(&name).expect("a parameter")]
                .grad
                .is_some();
        let grad = has_grad.then(|| {
            let g = norm(&values[grad_at..grad_at + size]);
            grad_at += size;
            g
        });
        let update = before.map(|b| {
            let sum: f64 = b[at..at + size]
                .iter()
                .zip(weight)
                .map(|(&x, &y)| ((y - x) as f64).powi(2))
                .sum();
            sum.sqrt() as f32
        });
        out.push(TensorNorms {
            name,
            weight: norm(weight),
            grad,
            update,
        });
        at += size;
    }
    out
}

/// The weights a frame keeps from `values` (the tensors of [`norm_names`]:
/// the trained weights first): those weights, for a model of at most
/// [`KEPT_WEIGHTS_MAX`] trained values.
pub fn kept_weights(program: &Program, values: &[f32]) -> Option<Arc<Vec<f32>>> {
    let len = trained_values(program);
    (len > 0 && len <= KEPT_WEIGHTS_MAX && values.len() >= len).then(|| Arc::new(values[..len].to_vec()))
}

/// A frame of step `step` from the head probe, the norms and the weights
/// it keeps ([`kept_weights`]).
pub fn frame_from(
    step: u64,
    loss: Option<f32>,
    val_loss: Option<f32>,
    probe: HeadProbe,
    tensors: Vec<TensorNorms>,
    weights: Option<Arc<Vec<f32>>>,
) -> Frame {
    Frame {
        weights,
        step,
        loss,
        val_loss,
        copy_loss: probe.copy_loss,
        fresh_loss: probe.fresh_loss,
        heads: probe.heads,
        tensors,
        predictions: probe.predictions,
        attention: Some(
            probe
                .maps
                .iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect(),
        ),
    }
}

/// Reads `names` from the backend, one after another.
pub fn read_all(backend: &mut dyn Backend, names: &[String]) -> Result<Vec<f32>, BackendError> {
    let mut values = Vec::new();
    for name in names {
        values.extend(backend.read(name)?);
    }
    Ok(values)
}

/// The frame of step `step`: the probe of the weights the backend holds,
/// and each parameter's norms (`before`: the weights before the step, as
/// [`norm_names`] without gradients lists them, for the update; with it,
/// the backend holds that step's gradients too).
pub fn record_frame(
    backend: &mut dyn Backend,
    sequences: &[Vec<u8>],
    step: u64,
    loss: Option<f32>,
    val_loss: Option<f32>,
    before: Option<&[f32]>,
) -> Result<Frame, BackendError> {
    let program = backend.program().clone();
    let grads = before.is_some();
    let values = read_all(backend, &norm_names(&program, grads))?;
    let tensors = if values.is_empty() {
        vec![]
    } else {
        norms_from(&program, &values, grads, before)
    };
    let weights = kept_weights(&program, &values);
    let probe = probe_heads(backend, sequences)?;
    Ok(frame_from(step, loss, val_loss, probe, tensors, weights))
}

fn norm(values: &[f32]) -> f32 {
    values
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt() as f32
}
