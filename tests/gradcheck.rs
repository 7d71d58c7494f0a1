//! Finite-difference checks of every op's backward, and of the whole model's
//! loss, in f64 with a tight tolerance (relative error ≤ 1e-6).

use tinygpt::cpu::CpuBackend;
mod common;

use tinygpt::cpu::ops::{self, AttnDims};
use tinygpt::data::Batch;
use tinygpt::data::rng::Rng;
use tinygpt::model::config::Config;
use tinygpt::model::params::init_params;
use tinygpt::program::Program;

const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

fn randn(n: usize, rng: &mut Rng, std: f64) -> Vec<f64> {
    (0..n).map(|_| rng.normal() * std).collect()
}

/// ‖a − b‖ / max(‖a‖, ‖b‖)
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt();
    let scale = a
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(b.iter().map(|x| x * x).sum::<f64>().sqrt());
    if scale == 0.0 { diff } else { diff / scale }
}

/// Checks `backward` against central differences of L = Σ forward(x) ⊙ R.
fn check(
    name: &str,
    inputs: Vec<Vec<f64>>,
    out_len: usize,
    forward: impl Fn(&[Vec<f64>]) -> Vec<f64>,
    backward: impl Fn(&[Vec<f64>], &[f64]) -> Vec<Vec<f64>>,
) {
    let mut rng = Rng::new(99);
    let r = randn(out_len, &mut rng, 1.0);
    let loss = |xs: &[Vec<f64>]| forward(xs).iter().zip(&r).map(|(o, r)| o * r).sum::<f64>();
    let analytic = backward(&inputs, &r);
    for (i, grad) in analytic.iter().enumerate() {
        let mut numeric = vec![0.0; grad.len()];
        let mut xs = inputs.clone();
        for j in 0..grad.len() {
            let x0 = xs[i][j];
            xs[i][j] = x0 + H;
            let lp = loss(&xs);
            xs[i][j] = x0 - H;
            let lm = loss(&xs);
            xs[i][j] = x0;
            numeric[j] = (lp - lm) / (2.0 * H);
        }
        let e = rel_err(grad, &numeric);
        let (worst, _) = grad
            .iter()
            .zip(&numeric)
            .enumerate()
            .map(|(k, (a, b))| (k, (a - b).abs()))
            .fold((0, 0.0), |acc, x| if x.1 > acc.1 { x } else { acc });
        assert!(
            e <= TOL,
            "{name}: input {i} relative error {e:e} (worst at {worst}: analytic {} numeric {})",
            grad[worst],
            numeric[worst]
        );
    }
}

#[test]
fn embedding_backward() {
    let (b, t, c, v) = (2, 3, 4, 256);
    let mut rng = Rng::new(1);
    let tokens: Vec<u32> = vec![3, 7, 3, 255, 0, 7];
    let inputs = vec![randn(v * c, &mut rng, 1.0), randn(t * c, &mut rng, 1.0)];
    check(
        "embedding",
        inputs,
        b * t * c,
        |x| {
            let mut out = vec![0.0; b * t * c];
            ops::embedding_forward(&mut out, &tokens, &x[0], Some(&x[1]), t, c);
            out
        },
        |x, dout| {
            let (mut dwte, mut dwpe) = (vec![0.0; x[0].len()], vec![0.0; x[1].len()]);
            ops::embedding_backward(&mut dwte, Some(&mut dwpe), dout, &tokens, t, c);
            vec![dwte, dwpe]
        },
    );
}

#[test]
fn layernorm_backward() {
    let (n, c) = (5, 7);
    let mut rng = Rng::new(2);
    let inputs = vec![
        randn(n * c, &mut rng, 2.0),
        randn(c, &mut rng, 1.0),
        randn(c, &mut rng, 1.0),
    ];
    check(
        "layernorm",
        inputs,
        n * c,
        |x| {
            let (mut out, mut m, mut s) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
            ops::layernorm_forward(&mut out, &mut m, &mut s, &x[0], &x[1], &x[2], c);
            out
        },
        |x, dout| {
            let (mut out, mut m, mut s) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
            ops::layernorm_forward(&mut out, &mut m, &mut s, &x[0], &x[1], &x[2], c);
            let (mut di, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c], vec![0.0; c]);
            ops::layernorm_backward(&mut di, Some((&mut dw, &mut db)), dout, &x[0], &x[1], &m, &s, c);
            vec![di, dw, db]
        },
    );
}

#[test]
fn linear_backward() {
    let (n, i, o) = (6, 5, 7);
    let mut rng = Rng::new(3);
    let inputs = vec![
        randn(n * i, &mut rng, 1.0),
        randn(o * i, &mut rng, 1.0),
        randn(o, &mut rng, 1.0),
    ];
    check(
        "linear",
        inputs,
        n * o,
        |x| {
            let mut out = vec![0.0; n * o];
            ops::linear_forward(&mut out, &x[0], &x[1], &x[2], i, o);
            out
        },
        |x, dout| {
            let (mut di, mut dw, mut db) = (vec![0.0; n * i], vec![0.0; o * i], vec![0.0; o]);
            ops::linear_backward(&mut di, Some((&mut dw, &mut db)), dout, &x[0], &x[1], i, o, false);
            vec![di, dw, db]
        },
    );
}

/// LoRA's update: every input's gradient, A's and B's included (B not zero,
/// so that A gets one).
#[test]
fn lowrank_backward() {
    let (n, i, o, r) = (6, 5, 7, 3);
    let d = ops::LowRankDims {
        rank: r,
        n_in: i,
        n_out: o,
        scale: 1.5,
    };
    let mut rng = Rng::new(13);
    let inputs = vec![
        randn(n * i, &mut rng, 1.0),
        randn(r * i, &mut rng, 1.0),
        randn(o * r, &mut rng, 1.0),
        randn(n * o, &mut rng, 1.0),
    ];
    let forward = move |x: &[Vec<f64>]| {
        let (mut mid, mut out) = (vec![0.0; n * r], vec![0.0; n * o]);
        ops::lowrank_forward(&mut mid, &mut out, &x[0], &x[1], &x[2], &x[3], d);
        (mid, out)
    };
    check(
        "lowrank",
        inputs,
        n * o,
        |x| forward(x).1,
        |x, dout| {
            let mid = forward(x).0;
            let mut g = [n * i, r * i, o * r, n * o].map(|len| vec![0.0; len]);
            // dmid holds garbage: the op overwrites it.
            let mut dmid = vec![f64::NAN; n * r];
            let [di, da, db, dbase] = &mut g;
            ops::lowrank_backward(
                di, da, db, dbase, &mut dmid, dout, &x[0], &x[1], &x[2], &mid, d,
            );
            g.to_vec()
        },
    );
}

fn attention_case(b: usize, t: usize, c: usize, h: usize, p: f32) {
    attention_case_masked(b, t, c, h, p, true);
}

fn attention_case_masked(b: usize, t: usize, c: usize, h: usize, p: f32, causal: bool) {
    let dims = || AttnDims { b, t, c, h, causal };
    let mut rng = Rng::new(4);
    let inputs = vec![randn(b * t * 3 * c, &mut rng, 1.0)];
    let fwd = |x: &[Vec<f64>]| {
        let (mut out, mut lse) = (vec![0.0; b * t * c], vec![0.0; b * h * t]);
        ops::attention_forward(&mut out, &mut lse, &x[0], &dims(), p, 1234, 7, true);
        (out, lse)
    };
    check(
        &format!("attention b{b} t{t} c{c} h{h} p{p} causal {causal}"),
        inputs,
        b * t * c,
        |x| fwd(x).0,
        |x, dout| {
            let (_, lse) = fwd(x);
            let mut dqkv = vec![0.0; x[0].len()];
            ops::attention_backward(&mut dqkv, dout, &x[0], &lse, &dims(), p, 1234, 7);
            vec![dqkv]
        },
    );
}

#[test]
fn attention_backward() {
    attention_case(2, 5, 6, 2, 0.0);
    attention_case(1, 1, 4, 1, 0.0);
    attention_case(1, 7, 6, 3, 0.0);
}

#[test]
fn attention_backward_with_dropout() {
    attention_case(2, 6, 6, 2, 0.3);
}

#[test]
fn attention_backward_without_the_causal_mask() {
    // The "no causal mask" lab: every query sees every key.
    attention_case_masked(2, 5, 6, 2, 0.0, false);
    attention_case_masked(1, 7, 6, 3, 0.0, false);
    attention_case_masked(2, 6, 6, 2, 0.3, false);
}

#[test]
fn gelu_backward() {
    let n = 40;
    let mut rng = Rng::new(5);
    let inputs = vec![randn(n, &mut rng, 2.0)];
    check(
        "gelu",
        inputs,
        n,
        |x| {
            let mut out = vec![0.0; n];
            ops::gelu_forward(&mut out, &x[0]);
            out
        },
        |x, dout| {
            let mut d = vec![0.0; n];
            ops::gelu_backward(&mut d, dout, &x[0], false);
            vec![d]
        },
    );
}

#[test]
fn residual_and_dropout_backward() {
    let n = 50;
    let mut rng = Rng::new(6);
    check(
        "residual",
        vec![randn(n, &mut rng, 1.0), randn(n, &mut rng, 1.0)],
        n,
        |x| {
            let mut out = vec![0.0; n];
            ops::residual_forward(&mut out, &x[0], &x[1]);
            out
        },
        |_, dout| {
            let (mut da, mut db) = (vec![0.0; n], vec![0.0; n]);
            ops::accumulate(&mut da, dout, false);
            ops::accumulate(&mut db, dout, false);
            vec![da, db]
        },
    );
    check(
        "dropout",
        vec![randn(n, &mut rng, 1.0)],
        n,
        |x| {
            let mut out = vec![0.0; n];
            ops::dropout_forward(&mut out, &x[0], 0.4, 77, 3, true);
            out
        },
        |_, dout| {
            let mut d = vec![0.0; n];
            ops::dropout_backward(&mut d, dout, 0.4, 77, 3, false);
            vec![d]
        },
    );
}

#[test]
fn tied_head_and_cross_entropy_backward() {
    let (n, c, v) = (4, 5, 256);
    let mut rng = Rng::new(7);
    check(
        "tied_head",
        vec![randn(n * c, &mut rng, 1.0), randn(v * c, &mut rng, 1.0)],
        n * v,
        |x| {
            let mut out = vec![0.0; n * v];
            ops::tied_head_forward(&mut out, &x[0], &x[1], c, v);
            out
        },
        |x, dout| {
            let (mut di, mut dw) = (vec![0.0; n * c], vec![0.0; v * c]);
            ops::tied_head_backward(&mut di, Some(&mut dw), dout, &x[0], &x[1], c, v, false);
            vec![di, dw]
        },
    );
    // Cross-entropy: L = mean(losses), so check with R = 1/N... the helper
    // uses a random R, so compare against Σ losses·R with per-row weights.
    let targets: Vec<u32> = vec![0, 17, 255, 17];
    let logits = randn(n * v, &mut rng, 2.0);
    let mean_loss = |l: &[f64]| {
        let mut losses = vec![0.0; n];
        ops::cross_entropy_forward(&mut losses, l, &targets, v);
        losses.iter().sum::<f64>() / n as f64
    };
    let mut analytic = vec![0.0; n * v];
    ops::cross_entropy_backward(&mut analytic, &logits, &targets, v);
    let mut numeric = vec![0.0; n * v];
    let mut x = logits.clone();
    for j in 0..n * v {
        let x0 = x[j];
        x[j] = x0 + H;
        let lp = mean_loss(&x);
        x[j] = x0 - H;
        let lm = mean_loss(&x);
        x[j] = x0;
        numeric[j] = (lp - lm) / (2.0 * H);
    }
    let e = rel_err(&analytic, &numeric);
    assert!(e <= TOL, "cross_entropy: relative error {e:e}");
}

fn small_config(dropout: f32) -> Config {
    let mut cfg = common::config(2, 2, 8, 5, 3, dropout);
    cfg.steps = 10;
    cfg
}

/// The whole model: every parameter's gradient of the loss, in f64.
fn whole_model(dropout: f32) {
    whole_model_of(small_config(dropout));
}

/// Every trained parameter's gradient of `cfg`'s loss against central
/// differences, in f64; frozen parameters (LoRA's base) have none.
fn whole_model_of(cfg: Config) {
    let dropout = cfg.dropout;
    let program = Program::new(&cfg);
    let mut be = CpuBackend::<f64>::new(program.clone());
    // Bigger than GPT-2 init so that every path carries signal.
    let mut rng = Rng::new(11);
    for t in init_params(&program, 3) {
        let id = program.tensor_id(&t.name).unwrap();
        let vals: Vec<f64> = t
            .values
            .iter()
            .map(|&v| v as f64 + rng.normal() * 0.3)
            .collect();
        be.tensor_mut(id).copy_from_slice(&vals);
    }
    let data: Vec<u8> = (0..200).map(|i| ((i * 37 + 11) % 256) as u8).collect();
    let batch = Batch::sample(&data, cfg.batch, cfg.ctx, &mut Rng::new(5));
    be.set_batch(&batch);
    be.set_mode(true, 4242);
    be.forward();
    be.backward();
    for pid in program.trained().collect::<Vec<_>>() {
        let info = &program.tensors[pid];
        let analytic = be.tensor(info.grad.unwrap()).to_vec();
        let mut numeric = vec![0.0; analytic.len()];
        for j in 0..analytic.len() {
            let x0 = be.tensor(pid)[j];
            be.tensor_mut(pid)[j] = x0 + H;
            be.forward();
            let lp = be.loss();
            be.tensor_mut(pid)[j] = x0 - H;
            be.forward();
            let lm = be.loss();
            be.tensor_mut(pid)[j] = x0;
            numeric[j] = (lp - lm) / (2.0 * H);
        }
        let e = rel_err(&analytic, &numeric);
        assert!(
            e <= TOL,
            "whole model (dropout {dropout}): {} relative error {e:e}",
            info.name
        );
    }
}

#[test]
fn whole_model_gradients() {
    whole_model(0.0);
}

#[test]
fn whole_model_gradients_with_dropout() {
    whole_model(0.25);
}

/// A LoRA fine-tune on every linear (attention and MLP): A's and B's
/// gradients through the whole model (B perturbed away from zero by the
/// helper's noise, so that A gets a gradient), with dropout.
#[test]
fn whole_model_lora_gradients() {
    use tinygpt::model::config::{Lora, LoraTargets};
    let mut cfg = small_config(0.25);
    cfg.lora = Some(Lora {
        rank: 2,
        alpha: 3.0,
        targets: LoraTargets::parse("attn,mlp").unwrap(),
        base: 0,
    });
    let program = Program::new(&cfg);
    assert!(program.trained().count() == 2 * 4 * cfg.n_layer);
    whole_model_of(cfg);
}

/// The f32 training path computes the same function as the f64 reference.
#[test]
fn f32_backend_agrees_with_f64() {
    let cfg = small_config(0.1);
    let program = Program::new(&cfg);
    let mut b32 = CpuBackend::<f32>::new(program.clone());
    let mut b64 = CpuBackend::<f64>::new(program.clone());
    use tinygpt::backend::Backend;
    b32.initialize(8).unwrap();
    b64.initialize(8).unwrap();
    let data: Vec<u8> = (0..300).map(|i| ((i * 91 + 5) % 256) as u8).collect();
    let batch = Batch::sample(&data, cfg.batch, cfg.ctx, &mut Rng::new(1));
    let sp = tinygpt::backend::StepParams {
        lr: 1e-2,
        adam_t: 1,
        dropout_seed: 9,
    };
    let l32 = b32.train_step(&batch, sp);
    let l64 = b64.train_step(&batch, sp);
    assert!(
        ((l32.loss - l64.loss) / l64.loss).abs() < 1e-6,
        "loss {} vs {}",
        l32.loss,
        l64.loss
    );
    assert!(((l32.grad_norm - l64.grad_norm) / l64.grad_norm).abs() < 1e-5);
    // The (clipped) gradients of every parameter. (Parameters after an Adam
    // step are not compared: Adam divides by √v, which amplifies rounding in
    // near-zero gradients.)
    for pid in program.params() {
        let name = format!("grad.{}", program.tensors[pid].name);
        let a: Vec<f64> = b32.read(&name).unwrap().iter().map(|&x| x as f64).collect();
        let b: Vec<f64> = b64.read(&name).unwrap().iter().map(|&x| x as f64).collect();
        let e = rel_err(&a, &b);
        assert!(e < 1e-5, "{name}: f32 vs f64: {e:e}");
    }
}

/// AdamW against its formula, written out here step by step from the paper
/// (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", Alg. 2, as
/// PyTorch implements it), in f64, over three steps with and without decay:
/// m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ),
/// p ← p·(1 − lr·λ) − lr·m̂/(√v̂ + ε).
#[test]
fn adamw_follows_its_formula() {
    let mut rng = Rng::new(21);
    let n = 257;
    for decay in [true, false] {
        let mut p = randn(n, &mut rng, 1.0);
        let (mut m, mut v) = (vec![0.0f64; n], vec![0.0f64; n]);
        let (mut p_ref, mut m_ref, mut v_ref) = (p.clone(), m.clone(), v.clone());
        // The hyperparameters as the f32 the optimizer is given.
        let [lr, b1, b2, eps, wd] = [1e-2f32, 0.9, 0.95, 1e-8, 0.1].map(f64::from);
        for t in 1..=3u64 {
            let g = randn(n, &mut rng, 0.5);
            ops::adamw_update(
                &mut p,
                &mut m,
                &mut v,
                &g,
                ops::AdamW {
                    lr: lr as f32,
                    beta1: b1 as f32,
                    beta2: b2 as f32,
                    eps: eps as f32,
                    weight_decay: wd as f32,
                    t,
                },
                decay,
            );
            for i in 0..n {
                m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g[i];
                v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * g[i] * g[i];
                let m_hat = m_ref[i] / (1.0 - b1.powi(t as i32));
                let v_hat = v_ref[i] / (1.0 - b2.powi(t as i32));
                let lambda = if decay { wd } else { 0.0 };
                p_ref[i] = p_ref[i] * (1.0 - lr * lambda) - lr * m_hat / (v_hat.sqrt() + eps);
            }
        }
        // The same arithmetic in f64: equal up to its rounding.
        for i in 0..n {
            for (name, got, want) in [
                ("p", p[i], p_ref[i]),
                ("m", m[i], m_ref[i]),
                ("v", v[i], v_ref[i]),
            ] {
                assert!(
                    (got - want).abs() <= 1e-12 * want.abs().max(1e-3),
                    "decay {decay}, {name}[{i}]: {got} vs {want}"
                );
            }
        }
    }
}
