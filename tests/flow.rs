//! `tinygpt flow` and `tinygpt::flow` (issue 32's data): one prompt's
//! forward pass read at one position is the program's, on both backends.
//! The stream entering block 0 is the embeddings, each block adds its
//! attention and MLP outputs to it, the probabilities are the Attention
//! probe's logits through softmax, and the logit lens at each point is ln_f
//! and the tied head recomputed here in f64.

mod common;

use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::flow::{Flow, config_for, run};
use tinygpt::gpu::GpuBackend;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::program::{Op, Program};

const PROMPT: &[u8] = b"ROMEO:\nBut soft, what light through yonder";

/// The shipped tiny checkpoint, as a user passes it to `--checkpoint`.
const SHIPPED_TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/checkpoints/tiny.safetensors"
);

fn shipped() -> Checkpoint {
    Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny").unwrap()
}

fn flow_on(backend: &mut dyn Backend, ck: &Checkpoint, position: Option<usize>) -> Flow {
    for p in &ck.params {
        backend.write(&p.name, &p.values).unwrap();
    }
    run(backend, &ck.params, PROMPT, position).unwrap()
}

fn param<'a>(ck: &'a Checkpoint, name: &str) -> &'a [f32] {
    &ck.params.iter().find(|p| p.name == name).unwrap().values
}

fn node<'a>(flow: &'a Flow, name: &str) -> &'a [f32] {
    &flow.nodes.iter().find(|n| n.name == name).unwrap().values
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn the_flow_is_the_programs_forward_pass_on_both_backends() {
    let ck = shipped();
    let config = config_for(&ck.config);
    let (c, l) = (config.d_model, config.n_layer);
    let mut cpu = CpuBackend::<f32>::new(Program::new(&config));
    for position in [None, Some(3)] {
        let flow = flow_on(&mut cpu, &ck, position);
        let pos = flow.position;
        // The prompt is longer than tiny's context: its last ctx bytes.
        assert_eq!(flow.tokens, PROMPT[PROMPT.len() - config.ctx..]);
        assert_eq!(pos, position.unwrap_or(config.ctx - 1));
        assert_eq!(flow.residual.len(), l + 1);
        // Entering block 0: the byte's embedding plus its position's.
        let tok = flow.tokens[pos] as usize;
        let (wte, wpe) = (
            param(&ck, "transformer.wte.weight"),
            param(&ck, "transformer.wpe.weight"),
        );
        let emb: Vec<f32> = (0..c)
            .map(|i| wte[tok * c + i] + wpe[pos * c + i])
            .collect();
        assert!(max_diff(&flow.residual[0], &emb) < 1e-6);
        // Each block adds its attention's and its MLP's outputs to the stream.
        for i in 0..l {
            let added: Vec<f32> = (0..c)
                .map(|k| {
                    flow.residual[i][k]
                        + node(&flow, &format!("h.{i}.attn.proj"))[k]
                        + node(&flow, &format!("h.{i}.mlp.proj"))[k]
                })
                .collect();
            assert!(max_diff(&flow.residual[i + 1], &added) < 1e-5, "block {i}");
        }
        // The probabilities: the Attention probe's logits at the position.
        let request = tinygpt::probe::ProbeRequest::for_prompt(&config, PROMPT).unwrap();
        let probe = cpu.probe(&request).unwrap();
        let logits = probe.logits_at(pos);
        let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let z: f64 = logits.iter().map(|&x| (x as f64 - m).exp()).sum();
        let softmax: Vec<f32> = logits
            .iter()
            .map(|&x| ((x as f64 - m).exp() / z) as f32)
            .collect();
        assert!(max_diff(&flow.probs, &softmax) < 1e-6);
        // Each head's attention from the position: P's row, summing to 1.
        assert_eq!(flow.attention.len(), l);
        for (k, heads) in flow.attention.iter().enumerate() {
            assert_eq!(heads.len(), config.n_head);
            for (head, row) in heads.iter().enumerate() {
                assert_eq!(row.len(), pos + 1);
                let n = probe.n();
                assert_eq!(
                    row.as_slice(),
                    &probe.p(k, head)[pos * n..pos * n + pos + 1]
                );
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "block {k} head {head}: {sum}");
            }
        }
        // The lens at the top is the prediction itself.
        let top = tinygpt::flow::top5(&flow.probs);
        assert_eq!(
            flow.lens[l].iter().map(|g| g.byte).collect::<Vec<_>>(),
            top.iter().map(|g| g.byte).collect::<Vec<_>>()
        );
        // The lens at every point: ln_f and the tied head, in f64 here.
        let (w, b) = (
            param(&ck, "transformer.ln_f.weight"),
            param(&ck, "transformer.ln_f.bias"),
        );
        for (i, stream) in flow.residual.iter().enumerate() {
            let x: Vec<f64> = stream.iter().map(|&v| v as f64).collect();
            let mean = x.iter().sum::<f64>() / c as f64;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c as f64;
            let ln: Vec<f64> = (0..c)
                .map(|k| (x[k] - mean) / (var + 1e-5).sqrt() * w[k] as f64 + b[k] as f64)
                .collect();
            let logits: Vec<f64> = (0..256)
                .map(|v| (0..c).map(|k| wte[v * c + k] as f64 * ln[k]).sum())
                .collect();
            let m = logits.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let z: f64 = logits.iter().map(|x| (x - m).exp()).sum();
            for guess in &flow.lens[i] {
                let p = (logits[guess.byte as usize] - m).exp() / z;
                assert!(
                    (guess.p as f64 - p).abs() < 1e-5,
                    "lens {i}, byte {}",
                    guess.byte
                );
            }
            let best = (0..256)
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            assert_eq!(flow.lens[i][0].byte as usize, best, "lens {i}");
        }
    }
    // The GPU computes the same flow.
    let cpu_flow = flow_on(&mut cpu, &ck, None);
    let mut gpu = GpuBackend::new(common::gpu_context(), Program::new(&config)).unwrap();
    let gpu_flow = flow_on(&mut gpu, &ck, None);
    for (a, b) in cpu_flow.residual.iter().zip(&gpu_flow.residual) {
        assert!(max_diff(a, b) < 1e-4);
    }
    assert!(max_diff(&cpu_flow.probs, &gpu_flow.probs) < 1e-5);
    for (a, b) in cpu_flow
        .attention
        .iter()
        .flatten()
        .zip(gpu_flow.attention.iter().flatten())
    {
        assert!(max_diff(a, b) < 1e-5);
    }
    assert_eq!(cpu_flow.nodes.len(), gpu_flow.nodes.len());
    for (a, b) in cpu_flow.nodes.iter().zip(&gpu_flow.nodes) {
        assert_eq!(a.name, b.name);
        let scale = a.values.iter().fold(1f32, |m, x| m.max(x.abs()));
        assert!(max_diff(&a.values, &b.values) < 1e-4 * scale, "{}", a.name);
    }
}

#[test]
fn tinygpt_flow_prints_the_json_and_refuses_a_bad_position() {
    let shipped = SHIPPED_TINY;
    let (out, _) = common::tinygpt(&[
        "flow",
        "--checkpoint",
        shipped,
        "--prompt",
        "ROMEO:",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let config = shipped_config();
    assert_eq!(v["tokens"].as_array().unwrap().len(), 6);
    assert_eq!(v["position"], 5);
    assert_eq!(v["residual"].as_array().unwrap().len(), config.n_layer + 1);
    assert_eq!(v["residual"][0].as_array().unwrap().len(), config.d_model);
    assert_eq!(v["probs"].as_array().unwrap().len(), 256);
    assert_eq!(v["lens"][0].as_array().unwrap().len(), 5);
    assert_eq!(v["attention"][0][0].as_array().unwrap().len(), 6);
    let names: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"h.0.attn.y") && names.ends_with(&["logits"]),
        "{names:?}"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "flow",
            "--checkpoint",
            shipped,
            "--prompt",
            "ROMEO:",
            "--position",
            "6",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("--position 6 is past the prompt"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // --backward at the last byte needs the byte to predict.
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "flow",
            "--checkpoint",
            shipped,
            "--prompt",
            "ROMEO:",
            "--backward",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && stderr.contains("--target"),
        "{stderr}"
    );
    let (out, _) = common::tinygpt(&[
        "flow",
        "--checkpoint",
        shipped,
        "--prompt",
        "ROMEO:",
        "--backward",
        "--target",
        "\\n",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["backward"]["target"], 10);
    assert!(
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["grad"].is_array())
    );
}

fn shipped_config() -> tinygpt::model::config::Config {
    shipped().config
}

/// `--backward`: the gradient of one position's loss, through the program's
/// own backward entries, equals a finite difference of that loss (in f64 on
/// the CPU) at an entry of the stream entering block 0 (moved through the
/// position's row of wpe, which only that position reads); the GPU's
/// gradients equal the CPU's.
#[test]
fn the_backward_pass_is_the_gradient_of_the_positions_loss() {
    use tinygpt::flow::{backward, target_at};
    let ck = shipped();
    let config = config_for(&ck.config);
    let c = config.d_model;
    let position = Some(20);
    let mut f64_cpu = CpuBackend::<f64>::new(Program::new(&config));
    let mut flow = flow_on(&mut f64_cpu, &ck, position);
    let pos = flow.position;
    let target = target_at(&flow.tokens, pos, None).unwrap();
    assert_eq!(target, flow.tokens[pos + 1]);
    backward(&mut f64_cpu, &mut flow, target).unwrap();
    let b = flow.backward.clone().unwrap();
    assert!(
        (b.loss - -flow.probs[target as usize].ln()).abs() < 1e-4,
        "{}",
        b.loss
    );
    let grad = node_grad(&flow, "emb");
    let wpe = param(&ck, "transformer.wpe.weight").to_vec();
    let eps = 1e-3f32;
    for k in [0, 7, c - 1] {
        let mut loss_with = |delta: f32| {
            let mut moved = wpe.clone();
            moved[pos * c + k] += delta;
            f64_cpu.write("transformer.wpe.weight", &moved).unwrap();
            let f = run(&mut f64_cpu, &ck.params, PROMPT, position).unwrap();
            -(f.probs[target as usize] as f64).ln()
        };
        let fd = (loss_with(eps) - loss_with(-eps)) / (2.0 * eps as f64);
        f64_cpu.write("transformer.wpe.weight", &wpe).unwrap();
        assert!(
            (fd - grad[k] as f64).abs() < 1e-3 * fd.abs().max(0.1),
            "entry {k}: finite difference {fd}, backward {}",
            grad[k]
        );
    }
    // Every weight the loss reaches has a gradient; the GPU agrees.
    assert!(b.param_grad_norms.iter().any(|g| g.norm > 0.0));
    let mut cpu = CpuBackend::<f32>::new(Program::new(&config));
    let mut gpu = GpuBackend::new(common::gpu_context(), Program::new(&config)).unwrap();
    let mut flows = Vec::new();
    for backend in [&mut cpu as &mut dyn Backend, &mut gpu] {
        let mut f = flow_on(backend, &ck, position);
        backward(backend, &mut f, target).unwrap();
        flows.push(f);
    }
    for (a, g) in flows[0].nodes.iter().zip(&flows[1].nodes) {
        let (Some(x), Some(y)) = (&a.grad, &g.grad) else {
            assert_eq!(a.grad.is_some(), g.grad.is_some(), "{}", a.name);
            continue;
        };
        let scale = x.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        assert!(max_diff(x, y) < 1e-3 * scale, "{}", a.name);
    }
    for (x, y) in flows[0]
        .backward
        .as_ref()
        .unwrap()
        .param_grad_norms
        .iter()
        .zip(&flows[1].backward.as_ref().unwrap().param_grad_norms)
    {
        assert!(
            (x.norm - y.norm).abs() < 1e-3 * x.norm.max(1e-3),
            "{}",
            x.name
        );
    }
}

fn node_grad(flow: &Flow, name: &str) -> Vec<f32> {
    flow.nodes
        .iter()
        .find(|n| n.name == name)
        .and_then(|n| n.grad.clone())
        .unwrap_or_else(|| panic!("no gradient for {name}"))
}

/// The flow's backward pass ends with the optimizer's step through the
/// program's own clip and AdamW entries: each weight's update norm equals
/// AdamW's formula applied here in f64 to the (clipped) gradient, the
/// moments given and the step's learning rate.
#[test]
fn adamw_after_the_flow_is_the_programs_step_on_that_gradient() {
    let ck = shipped();
    let config = config_for(&ck.config);
    let program = Program::new(&config);
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    let mut flow = flow_on(&mut cpu, &ck, Some(5));
    let target = tinygpt::flow::target_at(&flow.tokens, 5, None).unwrap();
    tinygpt::flow::backward(&mut cpu, &mut flow, target).unwrap();
    let moments = some_moments(&ck);
    let step = tinygpt::backend::StepParams {
        lr: 3e-4,
        adam_t: 7,
        dropout_seed: 0,
    };
    tinygpt::flow::adamw(&mut cpu, &mut flow, &moments, step).unwrap();
    let updates = flow.backward.as_ref().unwrap().adamw.as_ref().unwrap();
    assert_eq!(updates.len(), ck.params.len());
    let (b1, b2) = (config.beta1 as f64, config.beta2 as f64);
    let (bc1, bc2) = (1.0 - b1.powi(7), 1.0 - b2.powi(7));
    for (p, u) in ck.params.iter().zip(updates) {
        assert_eq!(p.name, u.name);
        // The CPU clips the gradient tensors in place: read back clipped.
        let g = cpu.read(&format!("grad.{}", p.name)).unwrap();
        let m0 = &moments
            .iter()
            .find(|m| m.name == format!("adam.m.{}", p.name))
            .unwrap()
            .values;
        let v0 = &moments
            .iter()
            .find(|m| m.name == format!("adam.v.{}", p.name))
            .unwrap()
            .values;
        let decay = program.decays(program.tensor_id(&p.name).unwrap());
        let lr = step.lr as f64;
        let expected = (0..g.len())
            .map(|i| {
                let (g, w) = (g[i] as f64, p.values[i] as f64);
                let m = b1 * m0[i] as f64 + (1.0 - b1) * g;
                let v = b2 * v0[i] as f64 + (1.0 - b2) * g * g;
                let shrink = if decay {
                    1.0 - lr * config.weight_decay as f64
                } else {
                    1.0
                };
                let new = w * shrink - lr * (m / bc1) / ((v / bc2).sqrt() + config.eps as f64);
                (new - w).powi(2)
            })
            .sum::<f64>()
            .sqrt();
        let rel = (u.norm as f64 - expected).abs() / expected.max(1e-12);
        assert!(
            rel < 1e-3,
            "{}: {} vs {expected} (rel {rel})",
            p.name,
            u.norm
        );
    }
}

/// Moments as a run after a few steps would hold: small, non-zero.
fn some_moments(ck: &Checkpoint) -> Vec<tinygpt::model::params::NamedTensor> {
    ck.params
        .iter()
        .flat_map(|p| {
            let m: Vec<f32> = p.values.iter().map(|w| w * 1e-3).collect();
            let v: Vec<f32> = p.values.iter().map(|w| w * w * 1e-4 + 1e-8).collect();
            [
                tinygpt::model::params::NamedTensor {
                    name: format!("adam.m.{}", p.name),
                    shape: p.shape.clone(),
                    values: m,
                },
                tinygpt::model::params::NamedTensor {
                    name: format!("adam.v.{}", p.name),
                    shape: p.shape.clone(),
                    values: v,
                },
            ]
        })
        .collect()
}

/// The walk-through's last beat: after the backward pass at every position,
/// AdamW's update of every weight, element by element, is AdamW's formula
/// applied here in f64 to the program's clipped gradient, the moments given
/// and the step's learning rate (f32 against f64: within 3e-7, a few units
/// in the last place of weights below 1).
#[test]
fn adamw_after_every_position_updates_each_weight_by_the_formula() {
    use tinygpt::flow::{adamw_all, backward_all, run_all};
    let ck = shipped();
    let config = config_for(&ck.config);
    let program = Program::new(&config);
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    for p in &ck.params {
        cpu.write(&p.name, &p.values).unwrap();
    }
    let mut all = run_all(&mut cpu, &ck.params, b"ROMEO: But soft").unwrap();
    backward_all(&mut cpu, &mut all, None).unwrap();
    let moments = some_moments(&ck);
    let step = tinygpt::backend::StepParams { lr: 3e-4, adam_t: 7, dropout_seed: 0 };
    let updates = adamw_all(&mut cpu, &all, &moments, step).unwrap();
    assert_eq!(updates.len(), ck.params.len());
    let (b1, b2) = (config.beta1 as f64, config.beta2 as f64);
    let (bc1, bc2) = (1.0 - b1.powi(7), 1.0 - b2.powi(7));
    let lr = step.lr as f64;
    let mut largest = 0.0f64;
    for (p, (name, update)) in ck.params.iter().zip(&updates) {
        assert_eq!(&p.name, name);
        assert_eq!(update.len(), p.values.len(), "{name}");
        let g = cpu.read(&format!("grad.{}", p.name)).unwrap();
        let moment = |kind: &str| &moments.iter().find(|m| m.name == format!("adam.{kind}.{}", p.name)).unwrap().values;
        let (m0, v0) = (moment("m"), moment("v"));
        let decay = program.decays(program.tensor_id(&p.name).unwrap());
        for i in 0..g.len() {
            let (g, w) = (g[i] as f64, p.values[i] as f64);
            let m = b1 * m0[i] as f64 + (1.0 - b1) * g;
            let v = b2 * v0[i] as f64 + (1.0 - b2) * g * g;
            let shrink = if decay { 1.0 - lr * config.weight_decay as f64 } else { 1.0 };
            let want = w * shrink - lr * (m / bc1) / ((v / bc2).sqrt() + config.eps as f64) - w;
            let got = update[i] as f64;
            assert!((got - want).abs() <= 3e-7, "{name}[{i}]: {got} vs {want}");
            largest = largest.max(want.abs());
        }
    }
    // Not a vacuous check: the step moves some weight by a good part of lr.
    assert!(largest > lr * 0.2, "largest update {largest}");
}

#[test]
fn each_ops_worked_example_redoes_the_programs_own_output() {
    // The op zoom's "worked out by hand": the formula filled in with the
    // flow's values and the weights, redone in f64, lands on the number the
    // program computed, for every kind of op that has one.
    let ck = shipped();
    let config = config_for(&ck.config);
    let program = Program::new(&config);
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    let flow = flow_on(&mut cpu, &ck, Some(5));
    let mut kinds = std::collections::BTreeSet::new();
    for (i, n) in flow.nodes.iter().enumerate() {
        let Some(w) = tinygpt::worked::worked(&program, &ck.params, &flow, i) else {
            continue;
        };
        let computed = n.values[w.index];
        assert_eq!(w.computed, computed, "{}", n.name);
        assert!(
            (w.result - computed as f64).abs() <= 1e-4 * (1.0 + computed.abs() as f64),
            "{}: redone {} vs the program's {computed}",
            n.name,
            w.result
        );
        // The worked output is the node's largest.
        assert!(n.values.iter().all(|v| v.abs() <= computed.abs()));
        assert!(
            w.filled.ends_with(&tinygpt::worked::num(w.result)),
            "{}",
            w.filled
        );
        if let Some(win) = &w.window {
            // A window of the product: its y are the node's values at its
            // rows, and its W the weight's entries.
            assert!(win.rows.contains(&w.index));
            let weight = param(&ck, &win.weight);
            let n_in = weight.len() / n.values.len();
            for (r, &row) in win.rows.iter().enumerate() {
                assert_eq!(win.y[r], n.values[row]);
                for (k, &col) in win.cols.iter().enumerate() {
                    assert_eq!(win.w[r][k], weight[row * n_in + col]);
                }
            }
            assert_eq!(win.cols.len(), tinygpt::worked::TERMS.min(n_in));
        }
        kinds.insert(
            w.formula
                .split(" = ")
                .nth(1)
                .map_or("", |f| {
                    if f.starts_with("Σ") {
                        "product"
                    } else if f.contains("erf") {
                        "gelu"
                    } else if f.contains("μ") {
                        "layernorm"
                    } else if f.starts_with("wte") {
                        "embedding"
                    } else {
                        "residual"
                    }
                })
                .to_string(),
        );
    }
    for kind in ["product", "gelu", "layernorm", "embedding", "residual"] {
        assert!(kinds.contains(kind), "no {kind} worked out: {kinds:?}");
    }
}

/// The forward pass of GPT-2 (nanoGPT's layout) in f64, written here from
/// the paper's equations and independent of the program: for the prompt's
/// `tokens`, the stream at each of its L + 1 points (T × C each) and each
/// named activation (T × width), keyed by the program's node names.
fn reference_forward(
    ck: &Checkpoint,
    tokens: &[u8],
) -> (Vec<Vec<f64>>, std::collections::HashMap<String, Vec<f64>>) {
    let config = &ck.config;
    let (t, c, h) = (tokens.len(), config.d_model, config.n_head);
    let hd = c / h;
    let p = |name: &str| -> Vec<f64> { param(ck, name).iter().map(|&x| x as f64).collect() };
    let layernorm = |x: &[f64], w: &[f64], b: &[f64]| -> Vec<f64> {
        x.chunks(c)
            .flat_map(|row| {
                let mean = row.iter().sum::<f64>() / c as f64;
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c as f64;
                let r = 1.0 / (var + 1e-5).sqrt();
                (0..c)
                    .map(move |k| (row[k] - mean) * r * w[k] + b[k])
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // out (T, OUT) = x (T, IN) · Wᵀ + b, W (OUT, IN).
    let linear = |x: &[f64], w: &[f64], b: &[f64], n_in: usize| -> Vec<f64> {
        let n_out = b.len();
        x.chunks(n_in)
            .flat_map(|row| {
                (0..n_out)
                    .map(|o| b[o] + (0..n_in).map(|i| row[i] * w[o * n_in + i]).sum::<f64>())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let erf = |x: f64| -> f64 {
        // Abramowitz–Stegun 7.1.26 is too coarse; integrate exp(−s²) by
        // Simpson's rule instead (fine enough for |x| < 10).
        let n = 2000;
        let step = x / n as f64;
        let f = |s: f64| (-s * s).exp();
        let mut sum = f(0.0) + f(x);
        for i in 1..n {
            sum += f(i as f64 * step) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        sum * step / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    };
    let mut nodes = std::collections::HashMap::new();
    let (wte, wpe) = (p("transformer.wte.weight"), p("transformer.wpe.weight"));
    let mut x: Vec<f64> = (0..t)
        .flat_map(|i| (0..c).map(move |k| (i, k)))
        .map(|(i, k)| wte[tokens[i] as usize * c + k] + wpe[i * c + k])
        .collect();
    nodes.insert("emb".to_string(), x.clone());
    let mut stream = vec![x.clone()];
    for l in 0..config.n_layer {
        let w = |s: &str| p(&format!("transformer.h.{l}.{s}"));
        let ln1 = layernorm(&x, &w("ln_1.weight"), &w("ln_1.bias"));
        let qkv = linear(&ln1, &w("attn.c_attn.weight"), &w("attn.c_attn.bias"), c);
        let mut y = vec![0.0; t * c];
        for head in 0..h {
            let at = |i: usize, part: usize, d: usize| qkv[i * 3 * c + part * c + head * hd + d];
            for i in 0..t {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..hd).map(|d| at(i, 0, d) * at(j, 1, d)).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for d in 0..hd {
                    y[i * c + head * hd + d] = (0..=i)
                        .map(|j| (scores[j] - m).exp() / z * at(j, 2, d))
                        .sum();
                }
            }
        }
        let proj = linear(&y, &w("attn.c_proj.weight"), &w("attn.c_proj.bias"), c);
        let res1: Vec<f64> = x.iter().zip(&proj).map(|(a, b)| a + b).collect();
        let ln2 = layernorm(&res1, &w("ln_2.weight"), &w("ln_2.bias"));
        let fc = linear(&ln2, &w("mlp.c_fc.weight"), &w("mlp.c_fc.bias"), c);
        let gelu: Vec<f64> = fc
            .iter()
            .map(|&v| 0.5 * v * (1.0 + erf(v / std::f64::consts::SQRT_2)))
            .collect();
        let mlp = linear(&gelu, &w("mlp.c_proj.weight"), &w("mlp.c_proj.bias"), 4 * c);
        x = res1.iter().zip(&mlp).map(|(a, b)| a + b).collect();
        for (name, v) in [
            ("ln_1.out", ln1),
            ("attn.qkv", qkv),
            ("attn.y", y),
            ("attn.proj", proj),
            ("res_1", res1),
            ("ln_2.out", ln2),
            ("mlp.fc", fc),
            ("mlp.gelu", gelu),
            ("mlp.proj", mlp),
            ("res_2", x.clone()),
        ] {
            nodes.insert(format!("h.{l}.{name}"), v);
        }
        stream.push(x.clone());
    }
    let lnf = layernorm(
        &x,
        &p("transformer.ln_f.weight"),
        &p("transformer.ln_f.bias"),
    );
    let logits: Vec<f64> = lnf
        .chunks(c)
        .flat_map(|row| {
            (0..256)
                .map(|v| (0..c).map(|k| wte[v * c + k] * row[k]).sum::<f64>())
                .collect::<Vec<_>>()
        })
        .collect();
    nodes.insert("ln_f.out".to_string(), lnf);
    nodes.insert("logits".to_string(), logits);
    (stream, nodes)
}

/// `--all-positions` (issue 50): the stream at every point and position,
/// and every node at every position, equal a float64 recomputation of the
/// forward pass written in this test; each position's slice is bit for bit
/// the one-position flow's; the GPU's agrees with the CPU's within 1e-5 of
/// each tensor's scale.
#[test]
fn the_flow_at_every_position_is_the_forward_pass() {
    use tinygpt::flow::run_all;
    let ck = shipped();
    let config = config_for(&ck.config);
    let prompt = &PROMPT[..20];
    let mut cpu = CpuBackend::<f32>::new(Program::new(&config));
    for p in &ck.params {
        cpu.write(&p.name, &p.values).unwrap();
    }
    let all = run_all(&mut cpu, &ck.params, prompt).unwrap();
    let t = prompt.len();
    assert_eq!(all.tokens, prompt);
    assert_eq!(all.residual.len(), config.n_layer + 1);
    assert_eq!(all.probs.len(), t);
    let (stream, reference) = reference_forward(&ck, prompt);
    let close = |got: &[Vec<f32>], want: &[f64], what: &str| {
        let width = want.len() / t;
        assert_eq!(got.len(), t, "{what}");
        let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
        for (i, row) in got.iter().enumerate() {
            assert_eq!(row.len(), width, "{what}");
            for (k, &v) in row.iter().enumerate() {
                let d = (v as f64 - want[i * width + k]).abs();
                assert!(
                    d < 2e-5 * scale,
                    "{what} at position {i}, {k}: {v} vs {}",
                    want[i * width + k]
                );
            }
        }
    };
    for (k, point) in all.residual.iter().enumerate() {
        close(point, &stream[k], &format!("the stream at point {k}"));
    }
    for node in &all.nodes {
        let want = reference
            .get(&node.name)
            .unwrap_or_else(|| panic!("the reference has no {}", node.name));
        close(&node.values, want, &node.name);
    }
    // The probabilities at each position: the reference's logits' softmax.
    let logits = &reference["logits"];
    for (i, probs) in all.probs.iter().enumerate() {
        let row = &logits[i * 256..(i + 1) * 256];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
        for (b, &p) in probs.iter().enumerate() {
            assert!(
                (p as f64 - (row[b] - m).exp() / z).abs() < 1e-5,
                "position {i}, byte {b}"
            );
        }
    }
    // Each position's slice is the one-position flow, bit for bit.
    for position in [0, 7, t - 1] {
        let one = run(&mut cpu, &ck.params, prompt, Some(position)).unwrap();
        // FlowAll::at reads the same pass at the position (the 3D
        // walk-through's worked examples start from it).
        assert_eq!(all.at(position).as_ref(), Some(&one));
        for (k, r) in one.residual.iter().enumerate() {
            assert_eq!(r, &all.residual[k][position]);
            assert_eq!(one.lens[k], all.lens[k][position]);
        }
        assert_eq!(one.probs, all.probs[position]);
        for (a, b) in one.nodes.iter().zip(&all.nodes) {
            assert_eq!(a.values, b.values[position], "{}", a.name);
        }
        for (k, heads) in one.attention.iter().enumerate() {
            for (head, row) in heads.iter().enumerate() {
                assert_eq!(row, &all.attention[k][head][position]);
            }
        }
    }
    assert_eq!(all.at(t), None, "past the prompt");
    // Each LayerNorm's μ and 1/σ at each position: its input's mean and
    // 1/√(variance + 1e-5), recomputed in f64 from the reference.
    let program = Program::new(&config);
    let norms: Vec<_> = program
        .ops
        .iter()
        .filter_map(|node| match node.op {
            Op::LayerNorm { inp, mean, rstd, .. } => Some((inp, mean, rstd)),
            _ => None,
        })
        .collect();
    let norm_stats: Vec<_> = all.stats.iter().filter(|s| !s.name.contains(".attn.lse.")).cloned().collect();
    assert_eq!(norm_stats.len(), 2 * norms.len());
    let c = config.d_model;
    for ((inp, mean, rstd), pair) in norms.iter().zip(norm_stats.chunks(2)) {
        let x = &reference[&program.tensors[*inp].name];
        assert_eq!((pair[0].name.as_str(), pair[1].name.as_str()), (program.tensors[*mean].name.as_str(), program.tensors[*rstd].name.as_str()));
        for i in 0..t {
            let row = &x[i * c..(i + 1) * c];
            let mu = row.iter().sum::<f64>() / c as f64;
            let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / c as f64;
            let r = 1.0 / (var + 1e-5).sqrt();
            assert!((pair[0].values[i] as f64 - mu).abs() < 1e-5, "{} at {i}: {} vs {mu}", pair[0].name, pair[0].values[i]);
            assert!((pair[1].values[i] as f64 - r).abs() < 1e-5 * r, "{} at {i}: {} vs {r}", pair[1].name, pair[1].values[i]);
        }
    }
    // Each head's softmax normaliser at each query i: log Σ_{j ≤ i}
    // exp(q_i·k_j/√D), from the reference's Q and K in f64.
    let (h, d) = (config.n_head, c / config.n_head);
    for layer in 0..config.n_layer {
        let qkv = &reference[&format!("h.{layer}.attn.qkv")];
        for head in 0..h {
            let name = format!("h.{layer}.attn.lse.{head}");
            let got = &all.stats.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no {name}")).values;
            assert_eq!(got.len(), t);
            for i in 0..t {
                let q = &qkv[i * 3 * c + head * d..i * 3 * c + (head + 1) * d];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &qkv[j * 3 * c + c + head * d..j * 3 * c + c + (head + 1) * d];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let want = m + scores.iter().map(|s| (s - m).exp()).sum::<f64>().ln();
                assert!((got[i] as f64 - want).abs() < 1e-4 * want.abs().max(1.0), "{name} at {i}: {} vs {want}", got[i]);
            }
        }
    }
    // The GPU computes the same pass.
    let mut gpu = GpuBackend::new(common::gpu_context(), Program::new(&config)).unwrap();
    for p in &ck.params {
        gpu.write(&p.name, &p.values).unwrap();
    }
    let on_gpu = run_all(&mut gpu, &ck.params, prompt).unwrap();
    for (a, b) in all.stats.iter().zip(&on_gpu.stats) {
        let scale = a.values.iter().fold(1f32, |m, x| m.max(x.abs()));
        assert!(max_diff(&a.values, &b.values) < 1e-5 * scale, "{}", a.name);
    }
    for (a, b) in all.nodes.iter().zip(&on_gpu.nodes) {
        let scale = a.values.iter().flatten().fold(1f32, |m, x| m.max(x.abs()));
        for (x, y) in a.values.iter().zip(&b.values) {
            assert!(
                max_diff(x, y) < 1e-5 * scale,
                "{}: {}",
                a.name,
                max_diff(x, y)
            );
        }
    }
}

/// `--all-positions --backward`: the gradient of the mean loss over the
/// prompt's positions equals a finite difference of that mean (f64 on the
/// CPU), at entries of the stream entering block 0 at two positions; the
/// per-position losses are −log p(next byte); the CLI prints T × width.
#[test]
fn the_backward_pass_at_every_position_is_the_gradient_of_the_mean_loss() {
    use tinygpt::flow::{backward_all, run_all};
    let ck = shipped();
    let config = config_for(&ck.config);
    let c = config.d_model;
    let prompt = &PROMPT[..12];
    let mut f64_cpu = CpuBackend::<f64>::new(Program::new(&config));
    for p in &ck.params {
        f64_cpu.write(&p.name, &p.values).unwrap();
    }
    let mut all = run_all(&mut f64_cpu, &ck.params, prompt).unwrap();
    backward_all(&mut f64_cpu, &mut all, None).unwrap();
    let b = all.backward.clone().unwrap();
    let t = prompt.len();
    assert_eq!(b.targets[t - 1], None);
    for i in 0..t - 1 {
        let want = -(all.probs[i][prompt[i + 1] as usize] as f64).ln();
        assert!(
            (b.losses[i].unwrap() as f64 - want).abs() < 1e-4,
            "position {i}"
        );
    }
    let emb = all
        .nodes
        .iter()
        .find(|n| n.name == "emb")
        .and_then(|n| n.grad.clone())
        .unwrap();
    let wpe = param(&ck, "transformer.wpe.weight").to_vec();
    let eps = 1e-3f32;
    for (pos, k) in [(0, 3), (5, c - 1), (t - 1, 11)] {
        let mut loss_with = |delta: f32| {
            let mut moved = wpe.clone();
            moved[pos * c + k] += delta;
            f64_cpu.write("transformer.wpe.weight", &moved).unwrap();
            let f = run_all(&mut f64_cpu, &ck.params, prompt).unwrap();
            (0..t - 1)
                .map(|i| -(f.probs[i][prompt[i + 1] as usize] as f64).ln())
                .sum::<f64>()
                / (t - 1) as f64
        };
        let fd = (loss_with(eps) - loss_with(-eps)) / (2.0 * eps as f64);
        f64_cpu.write("transformer.wpe.weight", &wpe).unwrap();
        let g = emb[pos][k] as f64;
        assert!(
            (fd - g).abs() < 1e-3 * fd.abs().max(0.01),
            "position {pos}, entry {k}: finite difference {fd}, backward {g}"
        );
    }
    // The last position's loss takes no part without a target: its
    // embedding's gradient is zero (nothing after it reads it).
    assert!(emb[t - 1].iter().all(|&g| g == 0.0));
    // The CLI: every node's values and gradient are T × width.
    let shipped = SHIPPED_TINY;
    let (out, _) = common::tinygpt(&[
        "flow",
        "--checkpoint",
        shipped,
        "--prompt",
        "ROMEO:",
        "--all-positions",
        "--backward",
        "--target",
        "\\n",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["residual"].as_array().unwrap().len(), config.n_layer + 1);
    assert_eq!(v["residual"][0].as_array().unwrap().len(), 6);
    assert_eq!(v["residual"][0][5].as_array().unwrap().len(), c);
    assert_eq!(v["backward"]["targets"][5], 10);
    for node in v["nodes"].as_array().unwrap() {
        let width = node["shape"][2].as_u64().unwrap() as usize;
        for key in ["values", "grad"] {
            let rows = node[key]
                .as_array()
                .unwrap_or_else(|| panic!("{} has no {key}", node["name"]));
            assert_eq!(rows.len(), 6, "{}", node["name"]);
            assert!(rows.iter().all(|r| r.as_array().unwrap().len() == width));
        }
    }
}
