//! The attention probe ([`tinygpt::probe`]): P recomputed from q, k and the
//! saved log-sum-exp on both backends, against its definition and against
//! each other; the probe leaves training untouched; and `tinygpt attention
//! --json` prints what the Attention scene shows. The GPU tests run on
//! whatever adapter wgpu finds (lavapipe in CI) and fail without one.

mod common;

use common::config;
use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Corpus;
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::{Config, VOCAB};
use tinygpt::probe::{ProbeRequest, ProbeResult};
use tinygpt::program::Program;
use tinygpt::train::Trainer;

use common::gpu_context as context;

/// Awkward sizes: T not a multiple of the kernels' 16, D = 16, three heads,
/// dropout on (a probe evaluates, so it must not apply).
fn awkward() -> Config {
    config(2, 3, 48, 37, 3, 0.1)
}

fn trained_cpu(cfg: &Config, steps: usize) -> CpuBackend<f32> {
    let mut cpu = CpuBackend::<f32>::new(Program::new(cfg));
    cpu.initialize(7).unwrap();
    // A few steps, so that attention is not the near-uniform of the init.
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut trainer = Trainer::new(Box::new(cpu), corpus, 7).unwrap();
    for _ in 0..steps {
        trainer.train_step().unwrap();
    }
    let mut cpu = CpuBackend::<f32>::new(Program::new(cfg));
    for id in trainer.backend.program().params().collect::<Vec<_>>() {
        let name = trainer.backend.program().tensors[id].name.clone();
        let values = trainer.backend.read(&name).unwrap();
        cpu.write(&name, &values).unwrap();
    }
    cpu
}

fn copy_params(from: &mut dyn Backend, to: &mut dyn Backend) {
    let names: Vec<String> = from
        .program()
        .params()
        .map(|id| from.program().tensors[id].name.clone())
        .collect();
    for name in names {
        let values = from.read(&name).unwrap();
        to.write(&name, &values).unwrap();
    }
}

fn assert_rows_are_distributions(r: &ProbeResult) {
    let n = r.n();
    for k in 0..r.blocks.len() {
        for h in 0..r.n_head {
            let p = r.p(k, h);
            for i in 0..n {
                let row = &p[i * n..(i + 1) * n];
                let sum: f64 = row.iter().map(|&x| x as f64).sum();
                assert!(
                    (sum - 1.0).abs() < 1e-5,
                    "block {k} head {h} row {i} sums to {sum}"
                );
                assert!(row[..=i].iter().all(|&x| (0.0..=1.0).contains(&x)));
                assert!(
                    row[i + 1..].iter().all(|&x| x == 0.0),
                    "block {k} head {h} row {i} attends to a later position"
                );
            }
        }
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn cpu_probe_rows_are_causal_distributions_and_padding_changes_nothing() {
    let cfg = awkward();
    let mut cpu = trained_cpu(&cfg, 3);
    let prompt = b"ROMEO:\nO, she doth teach";
    let r = cpu
        .probe(&ProbeRequest::for_prompt(&cfg, prompt).unwrap())
        .unwrap();
    assert_eq!(r.n(), prompt.len());
    assert_eq!(r.blocks, vec![0, 1]);
    assert_eq!(r.tokens, prompt);
    assert_eq!(r.logits.len(), prompt.len() * VOCAB);
    assert_rows_are_distributions(&r);
    // The first position can only attend to itself.
    assert!((r.p(0, 0)[0] - 1.0).abs() < 1e-6);
    // Causality end to end: a longer prompt with the same start gives the
    // same weights on the shared positions.
    let longer = cpu
        .probe(&ProbeRequest::for_prompt(&cfg, b"ROMEO:\nO, she doth teach the torches").unwrap())
        .unwrap();
    let n = r.n();
    let m = longer.n();
    for i in 0..n {
        for j in 0..n {
            let (a, b) = (r.p(1, 2)[i * n + j], longer.p(1, 2)[i * m + j]);
            assert!((a - b).abs() < 1e-6, "({i},{j}) {a} vs {b}");
        }
    }
}

/// P from the GPU's recompute kernel against softmax(QKᵀ/√D + causal mask)
/// computed naively, in f64, from the q and k that the same forward pass
/// wrote; and against the CPU backend's probe of the same weights.
#[test]
fn gpu_probe_equals_naive_softmax_and_the_cpu_probe() {
    let cfg = awkward();
    let mut cpu = trained_cpu(&cfg, 3);
    let mut gpu = GpuBackend::new(context(), Program::new(&cfg)).unwrap();
    copy_params(&mut cpu, &mut gpu);
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let batch = tinygpt::data::BatchSampler::new(3).next(&corpus, cfg.batch, cfg.ctx);
    for row in [0, 2] {
        let request = ProbeRequest::for_batch_row(&cfg, batch.clone(), row).unwrap();
        let g = gpu.probe(&request).unwrap();
        let c = cpu.probe(&request).unwrap();
        assert_rows_are_distributions(&g);
        for k in 0..cfg.n_layer {
            let d = max_abs_diff(&g.probs[k], &c.probs[k]);
            assert!(
                d <= 1e-5,
                "row {row} block {k}: GPU P differs from CPU P by {d}"
            );
        }
        let d = max_abs_diff(&g.logits, &c.logits);
        assert!(d <= 1e-4, "row {row}: logits differ by {d}");

        // Naive attention from the GPU's own q, k of the last block probed.
        let (t, c_, h) = (cfg.ctx, cfg.d_model, cfg.n_head);
        let dh = c_ / h;
        let block = cfg.n_layer - 1;
        let qkv = gpu.read(&format!("h.{block}.attn.qkv")).unwrap();
        let n = g.n();
        for head in 0..h {
            let p = g.p(block, head);
            for i in 0..n {
                let q = &qkv[(row * t + i) * 3 * c_ + head * dh..][..dh];
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &qkv[(row * t + j) * 3 * c_ + c_ + head * dh..][..dh];
                        q.iter()
                            .zip(k)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for j in 0..n {
                    let want = if j <= i {
                        (scores[j] - m).exp() / z
                    } else {
                        0.0
                    };
                    let got = p[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5,
                        "head {head} ({i},{j}): kernel {got}, naive {want}"
                    );
                }
            }
        }
    }
}

/// Probes between training steps (as the Attention scene does while a run
/// trains) leave the run bit-identical to one without them, on both backends.
#[test]
fn probing_between_steps_leaves_training_bit_identical() {
    let cfg = awkward();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let make = |gpu: bool| -> Box<dyn Backend> {
        let program = Program::new(&cfg);
        if gpu {
            Box::new(GpuBackend::new(context(), program).unwrap())
        } else {
            Box::new(CpuBackend::<f32>::new(program))
        }
    };
    for gpu in [false, true] {
        let mut plain = Trainer::new(make(gpu), corpus.clone(), 11).unwrap();
        let mut probed = Trainer::new(make(gpu), corpus.clone(), 11).unwrap();
        let request = ProbeRequest::for_prompt(&cfg, b"To be, or not to be").unwrap();
        for _ in 0..4 {
            plain.train_step().unwrap();
            probed.backend.probe(&request).unwrap();
            probed.train_step().unwrap();
        }
        for id in plain.backend.program().params().collect::<Vec<_>>() {
            let tensor = &plain.backend.program().tensors[id];
            for name in [
                tensor.name.clone(),
                format!("adam.m.{}", tensor.name),
                format!("adam.v.{}", tensor.name),
            ] {
                let a = plain.backend.read(&name).unwrap();
                let b = probed.backend.read(&name).unwrap();
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{} differs after probing (gpu: {gpu})",
                    name
                );
            }
        }
    }
}

#[test]
fn a_bad_probe_is_refused_with_the_reason() {
    let cfg = awkward();
    let mut cpu = CpuBackend::<f32>::new(Program::new(&cfg));
    let request = ProbeRequest::for_prompt(&cfg, b"abc")
        .unwrap()
        .with_blocks(vec![5]);
    let err = cpu.probe(&request).unwrap_err().to_string();
    assert!(err.contains("block 5 does not exist"), "{err}");
    assert!(ProbeRequest::for_batch_row(&cfg, request.batch.clone(), 9).is_err());
}

/// `tinygpt attention --json`: one object per (layer, head), each n×n rows
/// that are causal distributions, on the CPU and on the GPU, and the two agree.
#[test]
fn the_cli_prints_every_layer_and_head() {
    let prompt = "ROMEO:\nWhat light";
    let run = |backend: &str| -> Vec<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args([
                "attention",
                "--preset",
                "tiny",
                "--seed",
                "5",
                "--json",
                "--backend",
                backend,
            ])
            .args(["--prompt", prompt])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect()
    };
    let cfg = Config::load("tiny").unwrap();
    let n = prompt.len();
    let cpu = run("cpu");
    assert_eq!(cpu.len(), cfg.n_layer * cfg.n_head);
    for (i, o) in cpu.iter().enumerate() {
        assert_eq!(o["layer"], i / cfg.n_head);
        assert_eq!(o["head"], i % cfg.n_head);
        let tokens: Vec<u8> = serde_json::from_value(o["tokens"].clone()).unwrap();
        assert_eq!(tokens, prompt.as_bytes());
        let p: Vec<Vec<f32>> = serde_json::from_value(o["p"].clone()).unwrap();
        assert_eq!(p.len(), n);
        for (r, row) in p.iter().enumerate() {
            assert_eq!(row.len(), n);
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
            assert!(row[r + 1..].iter().all(|&x| x == 0.0));
        }
    }
    let gpu = run("gpu");
    for (a, b) in cpu.iter().zip(&gpu) {
        let pa: Vec<Vec<f32>> = serde_json::from_value(a["p"].clone()).unwrap();
        let pb: Vec<Vec<f32>> = serde_json::from_value(b["p"].clone()).unwrap();
        let d = max_abs_diff(&pa.concat(), &pb.concat());
        assert!(
            d <= 1e-5,
            "layer {} head {}: CPU and GPU differ by {d}",
            a["layer"],
            a["head"]
        );
    }
    // Bad input: one line, the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["attention", "--preset", "tiny", "--prompt", ""])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("prompt is empty"));
}
