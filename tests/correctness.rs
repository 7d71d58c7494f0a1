//! The GPU checked against the CPU ([`tinygpt::correctness`]): one step on
//! both backends from the same weights agrees within the parity tests'
//! tolerance for every tensor; a finite difference in f64 agrees with the
//! analytic gradient within the gradient checks' tolerance; and `tinygpt
//! correctness --json` prints it. The GPU runs on whatever adapter wgpu
//! finds (lavapipe in CI).

mod common;

use common::{config, gpu_context};
use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::correctness::{compare_step, finite_difference, load_weights};
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Corpus;
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::Config;
use tinygpt::program::Program;
use tinygpt::train::Trainer;

/// A run of `cfg` on the CPU after `steps` steps (so AdamW's moments are
/// not zero), its next batch and step parameters, and a GPU backend holding
/// the same weights and moments.
fn both(
    cfg: &Config,
    steps: usize,
) -> (
    Trainer,
    Box<dyn Backend>,
    tinygpt::data::Batch,
    tinygpt::backend::StepParams,
) {
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let cpu = Box::new(CpuBackend::<f32>::new(Program::new(cfg)));
    let mut trainer = Trainer::new(cpu, corpus, 9).unwrap();
    for _ in 0..steps {
        trainer.train_step().unwrap();
    }
    let ck = trainer.checkpoint(true).unwrap();
    let opt = ck.optimizer.as_ref().unwrap();
    let mut gpu: Box<dyn Backend> =
        Box::new(GpuBackend::new(gpu_context(), Program::new(cfg)).unwrap());
    load_weights(gpu.as_mut(), &ck.params, Some((&opt.m, &opt.v))).unwrap();
    let batch = trainer.peek_next_batch();
    let params = trainer.step_params(trainer.step);
    (trainer, gpu, batch, params)
}

#[test]
fn one_step_on_both_backends_agrees_for_every_tensor() {
    for dropout in [0.0, 0.1] {
        // Awkward sizes: T 37, three heads of 16.
        let cfg = config(2, 3, 48, 37, 3, dropout);
        let (mut trainer, mut gpu, batch, params) = both(&cfg, 3);
        let diffs = compare_step(trainer.backend.as_mut(), gpu.as_mut(), &batch, params).unwrap();
        let program = Program::new(&cfg);
        let compared = program
            .tensors
            .iter()
            .enumerate()
            .filter(|(id, t)| {
                *id != program.stats
                    && !matches!(
                        t.kind,
                        tinygpt::program::TensorKind::Input | tinygpt::program::TensorKind::Probe
                    )
            })
            .count();
        assert_eq!(diffs.len(), compared, "every tensor is compared");
        for kind in ["param", "activation", "saved", "grad", "adam_m", "adam_v"] {
            assert!(diffs.iter().any(|d| d.kind == kind), "no {kind} compared");
        }
        for d in &diffs {
            // The whole-step parity test's tolerance (tests/gpu.rs).
            assert!(
                d.rel_l2 <= 1e-4,
                "dropout {dropout}: `{}` ({}, {}) differs: rel L2 {:e}, max abs {:e} at {} (cpu {}, gpu {})",
                d.name,
                d.kind,
                d.read,
                d.rel_l2,
                d.max_abs,
                d.worst,
                d.cpu_at_worst,
                d.gpu_at_worst
            );
        }
    }
}

#[test]
fn a_difference_is_reported_where_it_is() {
    // Change one entry of one weight on the GPU only: the comparison names
    // that tensor, that entry and the size of the change.
    let cfg = config(1, 2, 32, 20, 2, 0.0);
    let (mut trainer, mut gpu, batch, params) = both(&cfg, 0);
    let name = "transformer.h.0.attn.c_attn.weight";
    let mut w = gpu.read(name).unwrap();
    w[17] += 0.5;
    gpu.write(name, &w).unwrap();
    let diffs = compare_step(trainer.backend.as_mut(), gpu.as_mut(), &batch, params).unwrap();
    let d = diffs.iter().find(|d| d.name == name).unwrap();
    assert_eq!(d.worst, 17);
    assert!((d.max_abs - 0.5).abs() < 0.01, "{d:?}");
    let out = diffs
        .iter()
        .find(|d| {
            d.read == "after_backward" && d.name.contains("h.0.attn") && d.kind == "activation"
        })
        .unwrap();
    assert!(out.rel_l2 > 1e-4, "the change shows downstream: {out:?}");
}

#[test]
fn finite_differences_agree_with_the_analytic_gradient() {
    for dropout in [0.0, 0.1] {
        let cfg = config(2, 2, 32, 24, 2, dropout);
        let (mut trainer, _gpu, batch, params) = both(&cfg, 2);
        let program = Program::new(&cfg);
        let weights = trainer.params().unwrap();
        // The run's own f32 gradient picks, in a few parameters, the entry
        // with the largest gradient (where the check means most).
        trainer.backend.load_step(&batch, Some(params));
        let clip = program
            .steps
            .iter()
            .position(|&s| s == tinygpt::program::Step::ClipGradNorm)
            .unwrap();
        trainer.backend.run_entries(0..clip);
        for name in [
            "transformer.wte.weight",
            "transformer.h.0.attn.c_attn.weight",
            "transformer.h.1.mlp.c_proj.bias",
            "transformer.ln_f.weight",
        ] {
            let id = program.tensor_id(name).unwrap();
            let g = trainer
                .backend
                .read(&program.tensors[program.tensors[id].grad.unwrap()].name)
                .unwrap();
            let index = (0..g.len())
                .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
                .unwrap();
            let fd =
                finite_difference(&program, &weights, &batch, params.dropout_seed, name, index)
                    .unwrap();
            assert!(
                fd.rel_err <= 1e-6,
                "dropout {dropout}: {name}[{index}]: analytic {} numeric {} ({:e})",
                fd.analytic,
                fd.numeric,
                fd.rel_err
            );
            // And the f32 backend's gradient is that gradient.
            assert!(
                ((g[index] as f64 - fd.analytic) / fd.analytic).abs() < 1e-4,
                "{name}[{index}]: f32 {} f64 {}",
                g[index],
                fd.analytic
            );
        }
    }
    let cfg = config(1, 2, 32, 20, 2, 0.0);
    let program = Program::new(&cfg);
    let batch =
        tinygpt::data::BatchSampler::new(1).next(&Corpus::tiny_shakespeare(20).unwrap(), 2, 20);
    let err = finite_difference(&program, &[], &batch, 0, "transformer.nope", 0).unwrap_err();
    assert!(err.contains("no parameter named"), "{err}");
    let err = finite_difference(&program, &[], &batch, 0, "transformer.ln_f.bias", 32).unwrap_err();
    assert!(err.contains("has 32 entries"), "{err}");
}

#[test]
fn the_cli_compares_every_tensor_and_checks_a_gradient() {
    let lines = common::json_lines(&[
        "correctness",
        "--preset",
        "tiny",
        "--fd",
        "transformer.ln_f.bias:3",
        "--json",
    ]);
    let (summary, rest) = lines.split_last().unwrap();
    assert_eq!(summary["summary"], true);
    let tensors: Vec<_> = rest.iter().filter(|v| v.get("name").is_some()).collect();
    assert_eq!(summary["tensors"], tensors.len());
    for t in &tensors {
        for key in [
            "kind", "shape", "read", "max_abs", "max_rel", "rel_l2", "worst",
        ] {
            assert!(t.get(key).is_some(), "{key} missing from {t}");
        }
    }
    let largest = tensors
        .iter()
        .map(|t| t["max_rel"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(summary["max_rel"].as_f64().unwrap(), largest);
    let fd = rest
        .iter()
        .find_map(|v| v.get("finite_difference"))
        .expect("the --fd check");
    assert_eq!(fd["param"], "transformer.ln_f.bias");
    assert_eq!(fd["index"], 3);

    let bad = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "correctness",
            "--preset",
            "tiny",
            "--fd",
            "transformer.ln_f.bias",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("PARAM:INDEX"));
}
