//! The training-speed benchmark behind `tinygpt bench`: real training steps of
//! a preset on TinyShakespeare, warm-up excluded and reported apart, the
//! median of enough steps to be stable, and the machine it ran on.

use crate::backend::Backend;
use crate::data::Corpus;
use crate::model::config::Config;
use crate::train::Trainer;
use serde::Serialize;
use web_time::Instant;

/// The machine a measurement was taken on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub os: String,
    pub arch: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Self { cpu, cores, os: std::env::consts::OS.into(), arch: std::env::consts::ARCH.into() }
    }
}

/// How long to measure.
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Untimed steps first (allocation, caches, shader compilation).
    pub warmup_steps: usize,
    pub min_steps: usize,
    pub max_steps: usize,
    /// Keep timing until this much time has passed (or `max_steps`).
    pub min_seconds: f64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self { warmup_steps: 3, min_steps: 5, max_steps: 100, min_seconds: 3.0 }
    }
}

/// One preset on one backend.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub preset: String,
    pub backend: String,
    pub params: usize,
    pub batch: usize,
    pub ctx: usize,
    /// Wall time of the untimed warm-up steps, together.
    pub warmup_ms: f64,
    pub steps: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub tokens_per_s: f64,
    pub machine: Machine,
}

/// Benchmarks `backend` (built for `config`) on training steps.
pub fn bench(preset: &str, backend: Box<dyn Backend>, opts: BenchOptions) -> Result<BenchResult, String> {
    let mut config = backend.program().config.clone();
    let description = backend.describe();
    let corpus = Corpus::tiny_shakespeare(config.ctx).map_err(|e| e.to_string())?;
    // No evaluations inside the timed steps.
    config.eval_interval = 0;
    let mut trainer = Trainer::new(backend, corpus, 42).map_err(|e| e.to_string())?;
    trainer.config.eval_interval = 0;
    trainer.config.steps = u64::MAX;
    let start = Instant::now();
    for _ in 0..opts.warmup_steps {
        trainer.train_step().map_err(|e| e.to_string())?;
    }
    let warmup_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut times = Vec::new();
    let timing = Instant::now();
    while times.len() < opts.min_steps || (times.len() < opts.max_steps && timing.elapsed().as_secs_f64() < opts.min_seconds) {
        times.push(trainer.train_step().map_err(|e| e.to_string())?.ms);
    }
    times.sort_by(f64::total_cmp);
    let median_ms = if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
    };
    Ok(BenchResult {
        preset: preset.to_string(),
        backend: description,
        params: config.param_count(),
        batch: config.batch,
        ctx: config.ctx,
        warmup_ms,
        steps: times.len(),
        median_ms,
        min_ms: times[0],
        max_ms: *times.last().unwrap(),
        tokens_per_s: config.tokens_per_step() as f64 / (median_ms / 1e3),
        machine: Machine::detect(),
    })
}

/// Convenience: the CPU backend in f32 for a config.
pub fn cpu_backend(config: &Config) -> Box<dyn Backend> {
    Box::new(crate::cpu::CpuBackend::<f32>::new(crate::program::Program::new(config)))
}
