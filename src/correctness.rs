//! The GPU checked against the CPU, tensor by tensor: one training step on
//! both backends from the same weights, moments and batch, every tensor of
//! the program compared ([`compare_step`]), and any gradient entry checked
//! against a central finite difference of the loss in f64 on the CPU
//! ([`finite_difference`]). The data behind `tinygpt correctness`.
//!
//! Activations, saved values and gradients are compared after the backward
//! pass, before the clip (the GPU leaves the clip factor to AdamW's kernel,
//! so its gradient buffers are never scaled: see
//! [`Backend::clips_in_place`]); parameters and AdamW's moments after AdamW.

use crate::backend::{Backend, BackendError, StepParams};
use crate::cpu::CpuBackend;
use crate::data::Batch;
use crate::model::params::NamedTensor;
use crate::program::{Program, Step, TensorKind};
use serde::Serialize;

/// How one tensor differs between the backends.
#[derive(Clone, Debug, Serialize)]
pub struct TensorDiff {
    pub name: String,
    /// `param`, `activation`, `saved`, `grad`, `adam_m` or `adam_v`.
    pub kind: &'static str,
    pub shape: Vec<usize>,
    /// When it was read: `after_backward` or `after_adamw`.
    pub read: &'static str,
    /// max |gpu − cpu|.
    pub max_abs: f64,
    /// max |gpu − cpu| / max |cpu|: the largest error on the tensor's scale.
    pub max_rel: f64,
    /// ‖gpu − cpu‖ / ‖cpu‖.
    pub rel_l2: f64,
    /// The flat index of the largest |gpu − cpu|, and both values there.
    pub worst: usize,
    pub cpu_at_worst: f32,
    pub gpu_at_worst: f32,
}

impl TensorDiff {
    pub fn of(program: &Program, id: usize, read: &'static str, cpu: &[f32], gpu: &[f32]) -> Self {
        let t = &program.tensors[id];
        let (mut worst, mut max_abs, mut diff2, mut norm2, mut scale) =
            (0, 0.0f64, 0.0, 0.0, 0.0f64);
        for (i, (&c, &g)) in cpu.iter().zip(gpu).enumerate() {
            let d = (g as f64 - c as f64).abs();
            if d > max_abs || (d.is_nan() && !max_abs.is_nan()) {
                max_abs = d;
                worst = i;
            }
            diff2 += d * d;
            norm2 += (c as f64).powi(2);
            scale = scale.max((c as f64).abs());
        }
        let rel = |x: f64, by: f64| if by > 0.0 { x / by } else { x };
        Self {
            name: t.name.clone(),
            kind: kind_key(t.kind),
            shape: t.shape.clone(),
            read,
            max_abs,
            max_rel: rel(max_abs, scale),
            rel_l2: rel(diff2.sqrt(), norm2.sqrt()),
            worst,
            cpu_at_worst: cpu.get(worst).copied().unwrap_or(f32::NAN),
            gpu_at_worst: gpu.get(worst).copied().unwrap_or(f32::NAN),
        }
    }
}

pub fn kind_key(kind: TensorKind) -> &'static str {
    match kind {
        TensorKind::Input => "input",
        TensorKind::Param => "param",
        TensorKind::Activation => "activation",
        TensorKind::Saved => "saved",
        TensorKind::Grad => "grad",
        TensorKind::AdamM => "adam_m",
        TensorKind::AdamV => "adam_v",
        TensorKind::Probe => "probe",
    }
}

/// When a tensor is compared: `Some(false)` after the backward pass (the
/// step's activations, saved values and gradients), `Some(true)` after AdamW
/// (the weights and moments), `None` never (inputs, probes, the stats).
pub fn read_after_adamw(program: &Program, id: usize) -> Option<bool> {
    let t = &program.tensors[id];
    if id == program.stats {
        return None;
    }
    match t.kind {
        TensorKind::Input | TensorKind::Probe => None,
        TensorKind::Param | TensorKind::AdamM | TensorKind::AdamV => Some(true),
        TensorKind::Activation | TensorKind::Saved | TensorKind::Grad => Some(false),
    }
}

/// The key of [`TensorDiff::read`] for a tensor.
pub fn read_key(program: &Program, id: usize) -> &'static str {
    if read_after_adamw(program, id) == Some(true) {
        "after_adamw"
    } else {
        "after_backward"
    }
}

/// The compared tensors read after the backward pass (`false`) or after AdamW.
pub fn compared(program: &Program, after_adamw: bool) -> Vec<usize> {
    (0..program.tensors.len())
        .filter(|&id| read_after_adamw(program, id) == Some(after_adamw))
        .collect()
}

/// Runs one training step on `backend` (holding the weights and moments to
/// step from) and reads every compared tensor when it is compared: the
/// entries up to the clip, the scratch out, the clip and AdamW, the weights
/// and moments out. Blocking (a worker, the CLI, the tests).
pub fn step_and_read(
    backend: &mut dyn Backend,
    batch: &Batch,
    params: StepParams,
) -> Result<std::collections::HashMap<usize, Vec<f32>>, BackendError> {
    let program = backend.program().clone();
    let clip = program
        .steps
        .iter()
        .position(|&s| s == Step::ClipGradNorm)
        .expect("every step list clips");
    let mut values = std::collections::HashMap::new();
    backend.load_step(batch, Some(params));
    backend.run_entries(0..clip);
    for id in compared(&program, false) {
        values.insert(id, backend.read(&program.tensors[id].name)?);
    }
    backend.run_entries(clip..program.steps.len());
    for id in compared(&program, true) {
        values.insert(id, backend.read(&program.tensors[id].name)?);
    }
    Ok(values)
}

/// Copies the parameters (and AdamW's moments, if given) into a backend.
pub fn load_weights(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    moments: Option<(&[NamedTensor], &[NamedTensor])>,
) -> Result<(), BackendError> {
    for p in params {
        backend.write(&p.name, &p.values)?;
    }
    if let Some((m, v)) = moments {
        for t in m.iter().chain(v) {
            backend.write(&t.name, &t.values)?;
        }
    }
    Ok(())
}

/// One training step on both backends (which must hold the same weights and
/// moments), on `batch` with `params`; every compared tensor's difference,
/// in program order. Blocking: the CLI and the tests.
pub fn compare_step(
    cpu: &mut dyn Backend,
    gpu: &mut dyn Backend,
    batch: &Batch,
    params: StepParams,
) -> Result<Vec<TensorDiff>, BackendError> {
    let program = cpu.program().clone();
    let c = step_and_read(cpu, batch, params)?;
    let g = step_and_read(gpu, batch, params)?;
    let mut ids: Vec<usize> = c.keys().copied().collect();
    ids.sort_unstable();
    Ok(ids
        .into_iter()
        .map(|id| TensorDiff::of(&program, id, read_key(&program, id), &c[&id], &g[&id]))
        .collect())
}

/// A gradient entry, analytic against numeric, both in f64 on the CPU.
#[derive(Clone, Debug, Serialize)]
pub struct FiniteDifference {
    pub param: String,
    pub index: usize,
    /// The backward pass's ∂loss/∂w.
    pub analytic: f64,
    /// (loss(w + h) − loss(w − h)) / 2h.
    pub numeric: f64,
    pub h: f64,
    /// |analytic − numeric| / max(|analytic|, |numeric|, 1e-12).
    pub rel_err: f64,
}

/// Checks ∂loss/∂`param`[`index`] against a central finite difference of
/// the training loss (the same batch and dropout seed, so the same dropout
/// masks), in f64 on the CPU backend, from the f32 weights `weights`.
pub fn finite_difference(
    program: &Program,
    weights: &[NamedTensor],
    batch: &Batch,
    dropout_seed: u32,
    param: &str,
    index: usize,
) -> Result<FiniteDifference, String> {
    let id = program
        .tensor_id(param)
        .filter(|&id| program.tensors[id].kind == TensorKind::Param)
        .ok_or_else(|| {
            format!(
                "no parameter named `{param}`; the parameters are: {}",
                program
                    .params()
                    .map(|p| program.tensors[p].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    if program.tensors[id].is_frozen() {
        return Err(format!(
            "`{param}` is frozen in this LoRA fine-tune, so it has no gradient to check; check one of the adapters: {}",
            program
                .trained()
                .map(|p| program.tensors[p].name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let numel = program.tensors[id].numel();
    if index >= numel {
        return Err(format!(
            "`{param}` has {numel} entries (0 to {}); {index} is past them",
            numel - 1
        ));
    }
    let mut be = CpuBackend::<f64>::new(program.clone());
    for w in weights {
        be.write(&w.name, &w.values).map_err(|e| e.to_string())?;
    }
    be.set_batch(batch);
    be.set_mode(true, dropout_seed);
    be.forward();
    be.backward();
    let grad = program.tensors[id].grad.expect("parameters have gradients");
    let analytic = be.tensor(grad)[index];
    // Central differences err by O(h²) and by f64's rounding of the loss
    // over h (about 1e-16 · loss / h): h = 1e-4 keeps both small. (At the
    // entries checked in tests/correctness.rs, extrapolating from h/2 as
    // well changed the error by less than the error itself.)
    let x0 = be.tensor(id)[index];
    let h = 1e-4;
    be.tensor_mut(id)[index] = x0 + h;
    be.forward();
    let plus = be.loss();
    be.tensor_mut(id)[index] = x0 - h;
    be.forward();
    let minus = be.loss();
    be.tensor_mut(id)[index] = x0;
    let numeric = (plus - minus) / (2.0 * h);
    let rel_err = (analytic - numeric).abs() / analytic.abs().max(numeric.abs()).max(1e-12);
    Ok(FiniteDifference {
        param: param.to_string(),
        index,
        analytic,
        numeric,
        h,
        rel_err,
    })
}
