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
use tinygpt::program::Program;

const PROMPT: &[u8] = b"ROMEO:\nBut soft, what light through yonder";

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
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/checkpoints/tiny.safetensors"
    );
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
    // Moments as a run after a few steps would hold: small, non-zero.
    let moments: Vec<tinygpt::model::params::NamedTensor> = ck
        .params
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
        .collect();
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
        assert!(w.filled.ends_with(&tinygpt::worked::num(w.result)), "{}", w.filled);
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
