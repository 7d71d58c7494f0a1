//! Helpers shared by the integration tests.

use std::sync::OnceLock;
use tinygpt::gpu::GpuContext;
use tinygpt::model::config::{Config, Schedule};

/// One GPU context for all the tests of a test binary (whatever adapter wgpu
/// finds: lavapipe in CI); the GPU tests fail without one.
#[allow(dead_code)] // not every test binary runs on the GPU
pub fn gpu_context() -> GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        let ctx = GpuContext::new_blocking()
            .expect("the GPU tests need an adapter (CI installs lavapipe: mesa-vulkan-drivers)");
        eprintln!("GPU tests on {}", ctx.describe());
        ctx
    })
    .clone()
}

/// A model of the given shape with the reference training recipe (lr 1e-3,
/// AdamW 0.9/0.95, weight decay 0.1, clip 1.0) and no evaluation.
#[allow(dead_code)] // not every test binary uses it
pub fn config(
    n_layer: usize,
    n_head: usize,
    d_model: usize,
    ctx: usize,
    batch: usize,
    dropout: f32,
) -> Config {
    Config {
        n_layer,
        n_head,
        d_model,
        ctx,
        batch,
        steps: 100,
        lr: 1e-3,
        schedule: Schedule::Constant,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        dropout,
        eval_interval: 0,
        eval_batches: 1,
        lab: Default::default(),
        lora: None,
        precision: Default::default(),
    }
}

/// Runs `tinygpt ARGS`, asserts it succeeded (its standard error in the
/// message otherwise), and returns its standard output and error.
#[allow(dead_code)] // not every test binary runs the command line
pub fn tinygpt<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(
        out.status.success(),
        "tinygpt {}: {stderr}",
        shown.join(" ")
    );
    (
        String::from_utf8(out.stdout).expect("tinygpt writes UTF-8"),
        stderr,
    )
}

/// Runs `tinygpt ARGS`, asserts it succeeded, and parses each line of its
/// standard output as JSON (the `--json` commands).
#[allow(dead_code)] // not every test binary runs the command line
pub fn json_lines(args: &[&str]) -> Vec<serde_json::Value> {
    tinygpt(args)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A fresh folder for this test process's files, `tinygpt-{tag}-{pid}` in
/// the system's temporary directory.
#[allow(dead_code)] // not every test binary writes files
pub fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tinygpt-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A whole training step (`Backend::train_step`, which zeroes only the
/// gradients no backward op writes outright) against the same step run
/// entry by entry as the step-through does (`Step::ZeroGrads` zeroing every
/// gradient), from the same weights and batch: every parameter, moment and
/// gradient must come out bit for bit the same (a zero's sign aside). The whole step starts with
/// NaN in every gradient, as if a step before had left anything there: a
/// gradient read before its first writer wrote it would show.
#[allow(dead_code)] // not every test binary uses it
pub fn whole_step_is_the_step_through(
    whole: &mut dyn tinygpt::backend::Backend,
    entries: &mut dyn tinygpt::backend::Backend,
) {
    use tinygpt::backend::StepParams;
    use tinygpt::data::rng::Rng;
    use tinygpt::program::TensorKind;
    let program = whole.program().clone();
    let cfg = &program.config;
    let mut rng = Rng::new(9);
    for id in program.params() {
        let t = &program.tensors[id];
        let v: Vec<f32> = (0..t.numel()).map(|_| (rng.normal() * 0.2) as f32).collect();
        whole.write(&t.name, &v).unwrap();
        entries.write(&t.name, &v).unwrap();
    }
    for t in program.tensors.iter().filter(|t| t.kind == TensorKind::Grad) {
        whole.write(&t.name, &vec![f32::NAN; t.numel()]).unwrap();
    }
    let data: Vec<u8> = (0..cfg.ctx * cfg.batch * 4 + 64).map(|_| rng.below(256) as u8).collect();
    let batch = tinygpt::data::Batch::sample(&data, cfg.batch, cfg.ctx, &mut rng);
    let sp = StepParams {
        lr: 1e-3,
        adam_t: 1,
        dropout_seed: 5,
    };
    let outcome = whole.train_step(&batch, sp);
    assert!(outcome.loss.is_finite() && outcome.grad_norm.is_finite(), "{outcome:?}");
    entries.load_step(&batch, Some(sp));
    entries.run_entries(0..program.steps.len());
    let compared = [TensorKind::Param, TensorKind::Grad, TensorKind::AdamM, TensorKind::AdamV];
    for t in program.tensors.iter().filter(|t| compared.contains(&t.kind)) {
        let (a, b) = (whole.read(&t.name).unwrap(), entries.read(&t.name).unwrap());
        // Bit for bit, but for the sign of a zero: a write keeps -0 where
        // adding it to a zeroed gradient made +0 (the same number).
        let differ = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits() && x != y);
        assert!(
            differ.is_none(),
            "`{}` at {}: the whole step made {}, the entries {}",
            t.name,
            differ.unwrap(),
            a[differ.unwrap()],
            b[differ.unwrap()]
        );
    }
}
