//! Recording a run's time-lapse ([`crate::model::timelapse`]): the probe of
//! one frame, computed by the backend's own forward pass ([`Backend::probe`])
//! on the weights it holds, so that a frame recorded at step s is what
//! `tinygpt heads` computes from the checkpoint saved at step s.

use crate::backend::{Backend, BackendError};
use crate::model::params::NamedTensor;
use crate::model::timelapse::{
    Frame, HeadScore, TensorNorms, induction_score, previous_token_score,
};
use crate::probe::ProbeRequest;

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
    let (layers, heads) = (config.n_layer, config.n_head);
    let mut induction = vec![0.0f64; layers * heads];
    let mut previous = vec![0.0f64; layers * heads];
    let (mut copy, mut fresh) = (0.0f64, 0.0f64);
    let (mut copies, mut freshes) = (0usize, 0usize);
    let mut predictions = Vec::new();
    let mut maps = Vec::new();
    for (s, seq) in sequences.iter().enumerate() {
        let m = seq.len() / 2;
        let n = 2 * m;
        let request =
            ProbeRequest::for_prompt(&config, seq).map_err(BackendError::BadProbe)?;
        let result = backend.probe(&request)?;
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
    let heads = (0..layers * heads)
        .map(|i| HeadScore {
            layer: i / heads,
            head: i % heads,
            induction: (induction[i] / count) as f32,
            previous_token: (previous[i] / count) as f32,
        })
        .collect();
    Ok(HeadProbe {
        heads,
        copy_loss: (copy / copies.max(1) as f64) as f32,
        fresh_loss: (fresh / freshes.max(1) as f64) as f32,
        predictions,
        maps,
    })
}

/// −log softmax(logits)[target], in f64.
fn cross_entropy(logits: &[f32], target: u8) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// The frame of step `step`: the probe of the weights the backend holds,
/// and each parameter's norms (`before`: the weights before the step, for
/// the update; `grads`: whether the backend holds this step's gradients).
pub fn record_frame(
    backend: &mut dyn Backend,
    sequences: &[Vec<u8>],
    step: u64,
    loss: Option<f32>,
    val_loss: Option<f32>,
    before: Option<&[NamedTensor]>,
) -> Result<Frame, BackendError> {
    let program = backend.program().clone();
    let mut tensors = Vec::new();
    for id in program.params() {
        let t = &program.tensors[id];
        if t.is_frozen() {
            continue;
        }
        let weight = backend.read(&t.name)?;
        let grad = match (before, t.grad) {
            (Some(_), Some(g)) => Some(norm(&backend.read(&program.tensors[g].name)?)),
            _ => None,
        };
        let update = before
            .and_then(|b| b.iter().find(|p| p.name == t.name))
            .map(|b| {
                let sum: f64 = b
                    .values
                    .iter()
                    .zip(&weight)
                    .map(|(&x, &y)| ((y - x) as f64).powi(2))
                    .sum();
                sum.sqrt() as f32
            });
        tensors.push(TensorNorms {
            name: t.name.clone(),
            weight: norm(&weight),
            grad,
            update,
        });
    }
    let probe = probe_heads(backend, sequences)?;
    Ok(Frame {
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
    })
}

fn norm(values: &[f32]) -> f32 {
    values
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt() as f32
}
