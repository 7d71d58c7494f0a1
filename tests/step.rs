//! The step-through ([`tinygpt::stepthrough`], [`Trainer::begin_step`]):
//! running the program's entries one at a time computes exactly the
//! training step (bit for bit on the CPU, within 1e-6 on the GPU); the
//! views of entries already run do not change; leaving a step undoes it;
//! and `tinygpt step --json` prints every entry once with the gradients
//! `train_step` computes. The GPU tests run on whatever adapter wgpu finds
//! (lavapipe in CI) and fail without one.

mod common;

use common::config;
use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Corpus;
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::Config;
use tinygpt::program::{Program, TensorKind};
use tinygpt::stepthrough::Phase;
use tinygpt::train::{StepSource, Trainer};

use common::gpu_context as context;

/// Awkward sizes with dropout on (so the stepped entries must reuse the
/// step's dropout seed) and evaluation every 2 steps.
fn awkward() -> Config {
    let mut c = config(2, 3, 48, 37, 3, 0.1);
    c.eval_interval = 2;
    c
}

fn trainer(cfg: &Config, gpu: bool) -> Trainer {
    let program = Program::new(cfg);
    let backend: Box<dyn Backend> = if gpu {
        Box::new(GpuBackend::new(context(), program).unwrap())
    } else {
        Box::new(CpuBackend::<f32>::new(program))
    };
    let mut t = Trainer::new(backend, Corpus::tiny_shakespeare(cfg.ctx).unwrap(), 11).unwrap();
    // No time-lapse: its probes run forward passes after a step, and these
    // tests compare the activations a step leaves behind.
    t.timelapse = None;
    t
}

/// Every tensor a step leaves behind that the next step reads or the run
/// keeps: parameters, gradients, moments, activations, saved values.
fn state(t: &mut Trainer) -> Vec<(String, Vec<f32>)> {
    let program = t.backend.program().clone();
    program
        .tensors
        .iter()
        .filter(|i| !matches!(i.kind, TensorKind::Input | TensorKind::Probe))
        .map(|i| (i.name.clone(), t.backend.read(&i.name).unwrap()))
        .collect()
}

fn stepped(t: &mut Trainer) {
    let mut cursor = t.begin_step(StepSource::NextBatch).unwrap();
    while t.step_entry(&mut cursor).unwrap().is_some() {}
    t.finish_step(cursor, true).unwrap();
}

fn assert_close(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)], rel: f32) {
    for ((name, x), (_, y)) in a.iter().zip(b) {
        let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
        let worst = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        if rel == 0.0 {
            assert!(
                x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "{name} differs (max |Δ| {worst})"
            );
        } else {
            assert!(
                worst / scale <= rel,
                "{name}: max |Δ| {worst} of scale {scale}"
            );
        }
    }
}

/// Two steps entry by entry against two `train_step`s, on one backend.
fn stepping_equals_training(gpu: bool, rel: f32) {
    let cfg = awkward();
    let (mut a, mut b) = (trainer(&cfg, gpu), trainer(&cfg, gpu));
    for _ in 0..2 {
        stepped(&mut a);
        b.train_step().unwrap();
        assert_close(&state(&mut a), &state(&mut b), rel);
    }
    assert_eq!(a.step, b.step);
    assert_eq!(a.sampler_state(), b.sampler_state());
    let losses = |t: &Trainer| -> Vec<(f32, Option<f32>)> {
        t.history.iter().map(|p| (p.loss, p.val_loss)).collect()
    };
    if rel == 0.0 {
        assert_eq!(losses(&a), losses(&b));
    }
    assert!(a.history[1].val_loss.is_some(), "step 2 evaluates");
}

#[test]
fn stepping_the_entries_is_the_training_step_on_the_cpu() {
    stepping_equals_training(false, 0.0);
}

#[test]
fn stepping_the_entries_is_the_training_step_on_the_gpu() {
    stepping_equals_training(true, 1e-6);
}

/// Views of entries already run stay as they were while later entries run,
/// and a new cursor after leaving the step shows the same values again.
#[test]
fn views_stay_and_stepping_again_shows_the_same_values() {
    let cfg = awkward();
    let mut t = trainer(&cfg, false);
    let json = |t: &Trainer, c: &tinygpt::train::StepCursor| -> Vec<String> {
        c.views
            .iter()
            .map(|v| v.to_json(t.backend.program()).to_string())
            .collect()
    };
    let mut cursor = t.begin_step(StepSource::NextBatch).unwrap();
    for _ in 0..10 {
        t.step_entry(&mut cursor).unwrap();
    }
    let early = json(&t, &cursor);
    while t.step_entry(&mut cursor).unwrap().is_some() {}
    let all = json(&t, &cursor);
    assert_eq!(&all[..10], &early[..], "running on changed what was shown");
    t.abandon_step(cursor);
    let mut again = t.begin_step(StepSource::NextBatch).unwrap();
    while t.step_entry(&mut again).unwrap().is_some() {}
    assert_eq!(json(&t, &again), all);
    t.abandon_step(again);
}

/// Leaving a step (of the next batch or of a prompt) after AdamW ran, then
/// training, gives the run that never stepped through.
fn leaving_changes_nothing(gpu: bool, rel: f32) {
    let cfg = awkward();
    let (mut a, mut b) = (trainer(&cfg, gpu), trainer(&cfg, gpu));
    a.train_step().unwrap();
    b.train_step().unwrap();
    for source in [
        StepSource::NextBatch,
        StepSource::Prompt(b"O Romeo, Romeo".to_vec()),
    ] {
        let mut cursor = a.begin_step(source).unwrap();
        while a.step_entry(&mut cursor).unwrap().is_some() {}
        assert!(cursor.done());
        a.abandon_step(cursor);
    }
    // Half a step, left in the backward pass.
    let mut cursor = a.begin_step(StepSource::NextBatch).unwrap();
    for _ in 0..30 {
        a.step_entry(&mut cursor).unwrap();
    }
    a.abandon_step(cursor);
    for _ in 0..2 {
        a.train_step().unwrap();
        b.train_step().unwrap();
    }
    let params = |s: Vec<(String, Vec<f32>)>| -> Vec<(String, Vec<f32>)> {
        s.into_iter()
            .filter(|(n, _)| n.starts_with("transformer.") || n.starts_with("adam."))
            .collect()
    };
    assert_close(&params(state(&mut a)), &params(state(&mut b)), rel);
    assert_eq!(a.sampler_state(), b.sampler_state());
}

#[test]
fn leaving_a_step_leaves_the_run_as_it_was_on_the_cpu() {
    leaving_changes_nothing(false, 0.0);
}

#[test]
fn leaving_a_step_leaves_the_run_as_it_was_on_the_gpu() {
    leaving_changes_nothing(true, 0.0);
}

fn tinygpt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tinygpt"))
}

#[test]
fn step_json_lists_every_entry_once_with_train_steps_gradients() {
    let lines = common::json_lines(&["step", "--preset", "tiny", "--seed", "5", "--json"]);
    let cfg = Config::load("tiny").unwrap();
    let program = Program::new(&cfg);
    let entries = tinygpt::stepthrough::entries(&program);
    assert_eq!(lines.len(), program.steps.len(), "one line per entry");
    for (i, (line, entry)) in lines.iter().zip(&entries).enumerate() {
        assert_eq!(line["index"], i);
        assert_eq!(line["op"], entry.label.as_str());
        assert_eq!(line["phase"], entry.phase.key());
        if entry.step != tinygpt::program::Step::ZeroGrads {
            for k in ["mean", "std", "min", "max", "l2"] {
                assert!(line[k].as_f64().is_some_and(f64::is_finite), "{i} {k}");
            }
            assert!(line["output"].is_string() && line["shape"].is_array());
        }
    }
    let forward = lines.iter().filter(|l| l["phase"] == "forward").count();
    assert_eq!(forward, program.ops.len());
    // The run's own step from the same state: its clipped gradients are the
    // stepped gradients times the clip factor the step reports.
    let mut t = Trainer::new(
        Box::new(CpuBackend::<f32>::new(program.clone())),
        Corpus::tiny_shakespeare(cfg.ctx).unwrap(),
        5,
    )
    .unwrap();
    t.train_step().unwrap();
    let clip = lines.iter().find(|l| l["phase"] == "clip").unwrap();
    let factor = clip["scalars"]["factor"].as_f64().unwrap();
    assert!(factor > 0.0 && factor <= 1.0);
    let mut checked = 0;
    for id in program.params().collect::<Vec<_>>() {
        let grad = &program.tensors[program.tensors[id].grad.unwrap()].name;
        // The last backward entry that writes this gradient has its final value.
        let last = lines
            .iter()
            .filter(|l| l["phase"] == "backward")
            .flat_map(|l| l["grads"].as_array().cloned().unwrap_or_default())
            .filter(|g| g["name"] == grad.as_str())
            .last()
            .unwrap_or_else(|| panic!("no backward entry writes {grad}"));
        let got = t.backend.read(grad).unwrap();
        let l2 = got.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        let want = last["l2"].as_f64().unwrap() * factor;
        assert!(
            (l2 - want).abs() <= 1e-5 * want.max(1e-12),
            "{grad}: train_step's ‖g‖ {l2}, stepped {want}"
        );
        checked += 1;
    }
    assert_eq!(checked, program.params().count());
    assert!(
        lines.last().unwrap()["phase"] == "optimizer",
        "AdamW comes last"
    );
    let _ = Phase::Forward;
}

#[test]
fn step_refuses_an_unknown_parameter_and_says_which_exist() {
    let out = tinygpt()
        .args(["step", "--preset", "tiny", "--param", "nope", "--json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no parameter named `nope`") && err.contains("transformer.wte.weight"),
        "{err}"
    );
}

/// The GPU's step shows what the CPU's shows, entry by entry (the GPU leaves
/// the clip factor to AdamW's kernel; its views apply it as the CPU does).
#[test]
fn gpu_and_cpu_step_views_agree() {
    let cfg = awkward();
    let views = |gpu: bool| -> Vec<serde_json::Value> {
        let mut t = trainer(&cfg, gpu);
        let mut c = t.begin_step(StepSource::NextBatch).unwrap();
        while t.step_entry(&mut c).unwrap().is_some() {}
        let v = c
            .views
            .iter()
            .map(|v| v.to_json(t.backend.program()))
            .collect();
        t.abandon_step(c);
        v
    };
    let (cpu, gpu) = (views(false), views(true));
    assert_eq!(cpu.len(), gpu.len());
    for (c, g) in cpu.iter().zip(&gpu) {
        assert_eq!(c["op"], g["op"]);
        for k in ["l2", "mean", "std"] {
            let (a, b) = (c[k].as_f64(), g[k].as_f64());
            if let (Some(a), Some(b)) = (a, b) {
                let scale = c["l2"].as_f64().unwrap().max(1e-12);
                assert!(
                    (a - b).abs() <= 1e-4 * scale,
                    "{} {k}: cpu {a}, gpu {b}",
                    c["op"]
                );
            }
        }
    }
}
