//! One AdamW step of both backends against the formula, written out here in
//! float64 (Loshchilov & Hutter's decoupled weight decay, with PyTorch's
//! `clip_grad_norm_` before it) and fed the backend's own gradients:
//! `tinygpt eval --dump-grads` gives the gradients of the checkpoint's next
//! step, `--dump-step` the checkpoint after it. (The float64 PyTorch oracle,
//! `tests/reference/oracle.sh`, checks the gradients themselves on a host
//! with PyTorch; here `tests/gradcheck.rs` does, by finite differences.)

mod common;

use common::{scratch_dir, tinygpt};
use std::collections::HashMap;
use std::path::Path;
use tinygpt::model::checkpoint::Checkpoint;

fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    if norm == 0.0 { diff } else { diff / norm }
}

fn read_grads(path: &Path) -> HashMap<String, Vec<f32>> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            (name, values)
        })
        .collect()
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Checks the step after `checkpoint` on `backend`; returns the clip's scale.
fn one_step_matches_the_formula(backend: &str, checkpoint: &Path) -> f64 {
    let dir = scratch_dir(&format!("adamw-{backend}"));
    let shipped = checkpoint;
    let (grads_path, step_path) = (dir.join("grads.safetensors"), dir.join("step.safetensors"));
    tinygpt(&[
        "eval".as_ref(),
        "--backend".as_ref(),
        backend.as_ref(),
        "--checkpoint".as_ref(),
        shipped.as_os_str(),
        "--dump-grads".as_ref(),
        grads_path.as_os_str(),
        "--dump-step".as_ref(),
        step_path.as_os_str(),
    ]);
    let before = Checkpoint::load(shipped).unwrap();
    let after = Checkpoint::load(&step_path).unwrap();
    let grads = read_grads(&grads_path);
    assert_eq!(after.step, before.step + 1);
    assert_eq!(grads.len(), before.params.len());

    let c = &before.config;
    let t = (before.step + 1) as i32;
    let lr = tinygpt::train::schedule::learning_rate(c, before.step) as f64;
    let (b1, b2, eps, wd) = (
        c.beta1 as f64,
        c.beta2 as f64,
        c.eps as f64,
        c.weight_decay as f64,
    );
    // clip_grad_norm_: scale by max_norm / (‖g‖ + 1e-6) when that is below 1.
    let norm = grads
        .values()
        .flatten()
        .map(|&g| (g as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    let scale = (c.grad_clip as f64 / (norm + 1e-6)).min(1.0);
    let moments = before
        .optimizer
        .as_ref()
        .expect("the checkpoint has moments");
    let after_m = &after.optimizer.as_ref().unwrap().m;
    let after_v = &after.optimizer.as_ref().unwrap().v;
    for (i, p) in before.params.iter().enumerate() {
        let g = &grads[&format!("grad.{}", p.name)];
        assert_eq!(g.len(), p.values.len(), "{}", p.name);
        let decay = if p.shape.len() >= 2 { wd } else { 0.0 };
        let (mut w, mut m, mut v) = (
            widen(&p.values),
            widen(&moments.m[i].values),
            widen(&moments.v[i].values),
        );
        for j in 0..w.len() {
            let gj = g[j] as f64 * scale;
            m[j] = b1 * m[j] + (1.0 - b1) * gj;
            v[j] = b2 * v[j] + (1.0 - b2) * gj * gj;
            let m_hat = m[j] / (1.0 - b1.powi(t));
            let v_hat = v[j] / (1.0 - b2.powi(t));
            w[j] = w[j] * (1.0 - lr * decay) - lr * m_hat / (v_hat.sqrt() + eps);
        }
        let got = widen(&after.params[i].values);
        let update: Vec<f64> = w
            .iter()
            .zip(&p.values)
            .map(|(a, &b)| a - b as f64)
            .collect();
        let got_update: Vec<f64> = got
            .iter()
            .zip(&p.values)
            .map(|(a, &b)| a - b as f64)
            .collect();
        let errors = [
            ("weights", rel_err(&got, &w), 1e-6),
            ("update", rel_err(&got_update, &update), 1e-3),
            ("m", rel_err(&widen(&after_m[i].values), &m), 1e-5),
            ("v", rel_err(&widen(&after_v[i].values), &v), 1e-5),
        ];
        for (what, e, tolerance) in errors {
            assert!(
                e <= tolerance,
                "{backend}: `{}` {what} relative error {e:e} > {tolerance:e}",
                p.name
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    scale
}

/// Two cases: the shipped tiny, 2000 steps in (the clip acts: ‖g‖ ≈ 2.8),
/// and a fresh tiny 3 steps in (the bias corrections 1 − βᵗ matter).
fn both_cases(backend: &str) {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/checkpoints/tiny.safetensors");
    let scale = one_step_matches_the_formula(backend, &shipped);
    assert!(
        scale < 1.0,
        "the clip should act on the shipped tiny's step"
    );
    let dir = scratch_dir(&format!("adamw-early-{backend}"));
    let early = dir.join("tiny-3.safetensors");
    tinygpt(&[
        "train".as_ref(),
        "--preset".as_ref(),
        "tiny".as_ref(),
        "--steps".as_ref(),
        "3".as_ref(),
        "--backend".as_ref(),
        "cpu".as_ref(),
        "--out".as_ref(),
        early.as_os_str(),
    ]);
    one_step_matches_the_formula(backend, &early);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn one_adamw_step_on_the_cpu_matches_the_formula() {
    both_cases("cpu");
}

#[test]
fn one_adamw_step_on_the_gpu_matches_the_formula() {
    both_cases("gpu");
}
