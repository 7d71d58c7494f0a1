//! The bench for a thread that must never wait: the page's one thread, where
//! a blocking step would freeze the page and a GPU readback cannot arrive
//! until control goes back to the browser. The same measurement as
//! [`super::bench_until`] and [`super::kernels::time_step`] ([`BenchRun`]
//! counts the steps, [`super::kernels`] groups the kernels), written as
//! futures that hand control back through `pause` (the app's: until the
//! next frame):
//! - the CPU runs its steps in chunks of about [`CPU_CHUNK_MS`], each step
//!   timed alone;
//! - the GPU submits its steps and collects them when the device is done,
//!   each step timed by timestamps around its pass where the adapter has
//!   timestamp queries, else by the wall time of its submit shared out
//!   (the waits between frames included: an upper bound);
//! - the kernel view's per-dispatch timestamps are read back the same way.

use super::kernels::KernelTimes;
use super::{BenchOptions, BenchResult, BenchRun};
use crate::backend::{Backend, StepParams};
use crate::model::config::Config;
use crate::program::Program;
use std::future::Future;
use web_time::Instant;

/// Wall time a CPU chunk runs before it pauses (the page draws between).
pub const CPU_CHUNK_MS: f64 = 4.0;
/// Steps in one GPU submit, at most.
const MAX_STEPS_PER_SUBMIT: usize = 16;
/// A submit is made longer (more steps) until it takes this long.
const SUBMIT_MS: f64 = 20.0;

/// How the page's GPU steps were timed, for [`BenchResult::timing`].
pub const TIMING_TIMESTAMPS: &str = "gpu timestamps around each step's pass";
pub const TIMING_SUBMIT_WALL: &str =
    "wall time of each submit shared out (no timestamp queries; frames included)";

/// [`super::bench_until`] without waiting: the CPU backend in chunks, a GPU
/// backend by submits collected when done. `cancelled` is checked between
/// chunks and submits.
pub async fn bench_stepped<F: Future<Output = ()>>(
    preset: &str,
    backend_kind: &str,
    backend: Box<dyn Backend>,
    setup_ms: f64,
    opts: BenchOptions,
    cancelled: &dyn Fn() -> bool,
    mut pause: impl FnMut() -> F,
) -> Result<BenchResult, String> {
    let mut run = super::BenchRun::new(preset, backend_kind, backend, setup_ms, opts)?;
    let check = || {
        if cancelled() {
            Err("cancelled".to_string())
        } else {
            Ok(())
        }
    };
    if run.trainer.backend.as_gpu().is_none() {
        loop {
            let chunk = Instant::now();
            while chunk.elapsed().as_secs_f64() * 1e3 < CPU_CHUNK_MS {
                let ms = run.trainer.train_step().map_err(|e| e.to_string())?.ms;
                if let Some(result) = run.record(ms) {
                    return Ok(result);
                }
            }
            pause().await;
            check()?;
        }
    }
    let timestamps = run
        .trainer
        .backend
        .as_gpu()
        .expect("checked above")
        .time_steps(true);
    run.timing = Some(
        if timestamps {
            TIMING_TIMESTAMPS
        } else {
            TIMING_SUBMIT_WALL
        }
        .to_string(),
    );
    // The kernels compiled one a frame, not all in the first step (a
    // page's GPU process draws nothing while it compiles: see `Kernels`).
    while run
        .trainer
        .backend
        .as_gpu()
        .expect("checked above")
        .warm_next_kernel()
    {
        pause().await;
        check()?;
    }
    let mut per_submit = 1;
    loop {
        let submitted = Instant::now();
        let mut flight = run
            .trainer
            .submit_gpu_steps(per_submit)
            .ok_or_else(|| lost(&mut run))?;
        let done = loop {
            match run.trainer.finish_gpu_steps(flight) {
                Ok(done) => break done,
                Err(f) => flight = f,
            }
            pause().await;
        };
        if let Some(e) = done.diverged {
            return Err(e.to_string());
        }
        if let Some(why) = run.trainer.backend.as_gpu().and_then(|g| g.device_lost()) {
            return Err(format!("the GPU was lost: {why}"));
        }
        let wall_ms = submitted.elapsed().as_secs_f64() * 1e3;
        let times: Vec<f64> = if done.gpu_ms.len() == done.metrics.len() {
            done.gpu_ms
        } else {
            done.metrics.iter().map(|m| m.ms).collect()
        };
        for ms in times {
            if let Some(result) = run.record(ms) {
                return Ok(result);
            }
        }
        if wall_ms < SUBMIT_MS {
            per_submit = (per_submit * 2).min(MAX_STEPS_PER_SUBMIT);
        }
        check()?;
    }
}

/// Why a GPU submit could not go out.
fn lost(run: &mut BenchRun) -> String {
    run.trainer
        .backend
        .as_gpu()
        .and_then(|g| g.device_lost())
        .map_or_else(
            || "the GPU took no more steps".to_string(),
            |why| format!("the GPU was lost: {why}"),
        )
}

/// [`super::kernels::time_step`] on one GPU device without waiting: the
/// fastest of three timestamped steps, each after a few training steps
/// (none on a software adapter). With no timestamp queries (the browser did
/// not grant them), the CPU backend's op times in chunks, with `no_timestamps`
/// saying why.
pub async fn time_step_stepped<F: Future<Output = ()>>(
    preset: &str,
    config: &Config,
    gpu: Option<crate::gpu::GpuContext>,
    no_timestamps: impl FnOnce(String) -> String,
    mut pause: impl FnMut() -> F,
) -> Result<KernelTimes, String> {
    let program = Program::new(config);
    let corpus = crate::data::Corpus::tiny_shakespeare(config.ctx).map_err(|e| e.to_string())?;
    let batch = crate::data::BatchSampler::new(1).next(&corpus, config.batch, config.ctx);
    let sp = StepParams {
        lr: config.lr,
        adam_t: 1,
        dropout_seed: 1,
    };
    let why = match gpu {
        None => "no WebGPU adapter".to_string(),
        Some(ctx) if !ctx.has_timestamps() => {
            format!("{} has no timestamp queries", ctx.describe())
        }
        Some(ctx) => {
            let device = ctx.describe();
            let software = ctx.info.device_type == wgpu::DeviceType::Cpu;
            let mut gpu =
                crate::gpu::GpuBackend::new(ctx, program.clone()).map_err(|e| e.to_string())?;
            gpu.initialize(42).map_err(|e| e.to_string())?;
            // The kernels compiled one a frame (see `bench_stepped`).
            while gpu.warm_next_kernel() {
                pause().await;
            }
            let total = |r: &[(String, &str, f64)]| r.iter().map(|x| x.2).sum::<f64>();
            let mut best: Option<Vec<(String, &str, f64)>> = None;
            // The first profile is cold (its staging buffer made, the
            // memory first touched); three more count.
            for round in 0..4 {
                if round > 0 && !software {
                    // The clocks up: about 0.2 s of steps, one submit at a
                    // time (a slow adapter takes one).
                    let warm = Instant::now();
                    while warm.elapsed().as_secs_f64() < 0.2 {
                        let mut handle = gpu.submit_steps(std::slice::from_ref(&batch), &[sp]);
                        loop {
                            gpu.poll();
                            match gpu.try_finish_steps(handle) {
                                Ok(_) => break,
                                Err(h) => handle = h,
                            }
                            pause().await;
                        }
                    }
                }
                let mut handle = gpu
                    .submit_profile(&batch, sp)
                    .ok_or_else(|| format!("{device} has no timestamp queries"))?;
                let rows = loop {
                    gpu.poll();
                    match gpu.try_finish_profile(handle) {
                        Ok(rows) => break rows,
                        Err(h) => handle = h,
                    }
                    pause().await;
                };
                if let Some(why) = gpu.device_lost() {
                    return Err(format!("the GPU was lost: {why}"));
                }
                if round > 0 && best.as_ref().is_none_or(|b| total(&rows) < total(b)) {
                    best = Some(rows);
                }
            }
            return Ok(KernelTimes::from_timestamps(
                preset,
                device,
                &program,
                best.expect("three rounds"),
                None,
            ));
        }
    };
    // The CPU's op times: one step at a time, pausing between.
    let mut profile = super::CpuProfile::new(config);
    for _ in 0..4 {
        profile.step();
        pause().await;
    }
    Ok(KernelTimes::from_cpu_ops(
        preset,
        &program,
        profile.families(),
        no_timestamps(why),
    ))
}
