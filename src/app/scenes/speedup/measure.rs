//! Measuring on workers: a bench of (preset, backend) pairs one after
//! another, or one step timed per kernel, on the async-compute pool; the
//! results come back through an inbox the frame reads ([`collect`]).
//! Natively the worker is a thread of its own and waits for each step (the
//! GPU on a device of its own); in the page it is a task on the page's one
//! thread that never waits: the bench of [`crate::bench::stepped`], which
//! pauses until the next frame between chunks of CPU steps and while the
//! GPU's steps and timestamps are out.

use super::*;

/// What a bench worker reports.
#[derive(Debug)]
pub(super) enum Msg {
    Started(String),
    Done(BenchResult),
    Failed(String),
    Finished,
}

pub(super) struct BenchJob {
    _task: Task<()>,
    inbox: Arc<Mutex<Vec<Msg>>>,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) total: usize,
    pub(super) done: usize,
    pub(super) current: String,
}

/// Times one step of `preset` per kernel with the adapter's ceilings,
/// blocking: on a worker. The app's device first, then one of its own (the
/// app's may have been opened without timestamp queries), then the CPU.
#[cfg(not(target_arch = "wasm32"))]
pub(super) async fn time_kernels(
    preset: String,
    app_gpu: Option<crate::gpu::GpuContext>,
) -> Result<KernelTimes, String> {
    let config = Config::load(&preset).map_err(|e| e.to_string())?;
    let own = || crate::gpu::GpuContext::new_blocking().ok();
    let contexts = app_gpu
        .into_iter()
        .chain(std::iter::once_with(own).flatten());
    crate::bench::kernels::time_step(&preset, &config, contexts, true)
}

/// Times one step of `preset` per kernel on the page's WebGPU device with
/// timestamp queries read back without waiting; where the browser grants
/// none, the CPU's op times and a line saying so. (No ceilings: measuring
/// them would hold the page's GPU for seconds.)
#[cfg(target_arch = "wasm32")]
pub(super) async fn time_kernels(
    preset: String,
    app_gpu: Option<crate::gpu::GpuContext>,
) -> Result<KernelTimes, String> {
    let config = Config::load(&preset).map_err(|e| e.to_string())?;
    crate::bench::stepped::time_step_stepped(
        &preset,
        &config,
        app_gpu,
        |why| crate::t!("speedup-web-timestamps", why = why),
        crate::app::schedule::next_frame,
    )
    .await
}

/// Starts a bench of the chosen presets and backends on a worker.
pub(super) fn start(view: &mut SpeedupView, gpu: &GpuDevice) -> Result<(), String> {
    let presets: Vec<String> = view
        .presets
        .iter()
        .filter(|(_, on)| *on)
        .map(|(id, _)| id.clone())
        .collect();
    if presets.is_empty() || !(view.cpu || view.gpu || view.mixed) {
        return Err(crate::t!("speedup-choose"));
    }
    // Mixed precision needs the tensor cores: refused up front, with why.
    if view.mixed {
        gpu.tensor_cores()
            .map_err(|why| crate::t!("precision-mixed-unavailable", why = why.as_str()))?;
    }
    let app_ctx = if view.gpu || view.mixed {
        Some(gpu.context.clone().ok_or_else(|| {
            if cfg!(target_arch = "wasm32") {
                crate::t!("speedup-web-no-gpu")
            } else {
                gpu.missing
                    .clone()
                    .unwrap_or_else(|| crate::t!("speedup-no-gpu"))
            }
        })?)
    } else {
        None
    };
    let mut plan = Vec::new();
    for p in &presets {
        if view.cpu {
            plan.push((p.clone(), "cpu"));
        }
        if view.gpu {
            plan.push((p.clone(), "gpu"));
        }
        if view.mixed {
            plan.push((p.clone(), "gpu-mixed"));
        }
    }
    let opts = BenchOptions {
        min_seconds: view.seconds,
        ..BenchOptions::default()
    };
    let inbox: Arc<Mutex<Vec<Msg>>> = Arc::default();
    let cancel = Arc::new(AtomicBool::new(false));
    let (out, stop) = (inbox.clone(), cancel.clone());
    let total = plan.len();
    let task = crate::app::schedule::spawn_blocking_work(async move {
        let send = |m: Msg| out.lock().unwrap().push(m);
        // The GPU bench on a device of its own: each step waits only on
        // its own work, not on the app's frames queued on the app's device
        // (on the H100 host the app's device cost xl 32% per step).
        #[cfg(not(target_arch = "wasm32"))]
        let gpu_ctx = app_ctx
            .as_ref()
            .map(|app| crate::gpu::GpuContext::new_blocking().unwrap_or_else(|_| app.clone()));
        #[cfg(target_arch = "wasm32")]
        let gpu_ctx = app_ctx.clone();
        // Mixed: a device of its own opened with the tensor cores (else the
        // app's, which has them: checked above), its matmuls on them.
        #[cfg(not(target_arch = "wasm32"))]
        let own_mixed = || crate::gpu::GpuContext::with_tensor_cores_blocking().ok().filter(|c| c.tensor_cores.is_ok());
        #[cfg(target_arch = "wasm32")]
        let own_mixed = || None::<crate::gpu::GpuContext>;
        let mixed_ctx = app_ctx.as_ref().filter(|_| plan.iter().any(|(_, k)| *k == "gpu-mixed")).map(|app| {
            let mut ctx = own_mixed().unwrap_or_else(|| app.clone());
            let _ = ctx.use_tensor_cores();
            ctx
        });
        for (preset, kind) in plan {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let backend = if kind == "gpu-mixed" { crate::t!("speedup-gpu-mixed") } else { kind.to_uppercase() };
            send(Msg::Started(crate::t!(
                "speedup-measuring",
                preset = preset.as_str(),
                backend = backend.as_str()
            )));
            let result = Config::load(&preset)
                .map_err(|e| e.to_string())
                .and_then(|config| {
                    let t0 = web_time::Instant::now();
                    let ctx = match kind {
                        "gpu-mixed" => &mixed_ctx,
                        _ => &gpu_ctx,
                    };
                    let backend: Box<dyn crate::backend::Backend> = match (ctx, kind) {
                        (Some(ctx), "gpu" | "gpu-mixed") => Box::new(
                            crate::gpu::GpuBackend::new(
                                ctx.clone(),
                                crate::program::Program::new(&config),
                            )
                            .map_err(|e| e.to_string())?,
                        ),
                        _ => crate::bench::cpu_backend(&config),
                    };
                    Ok((backend, t0.elapsed().as_secs_f64() * 1e3))
                });
            let cancelled = || stop.load(Ordering::Relaxed);
            #[cfg(not(target_arch = "wasm32"))]
            let result = result.and_then(|(backend, setup_ms)| {
                crate::bench::bench_until(&preset, kind, backend, setup_ms, opts, &cancelled)
            });
            #[cfg(target_arch = "wasm32")]
            let result = match result {
                Ok((backend, setup_ms)) => {
                    crate::bench::stepped::bench_stepped(
                        &preset,
                        kind,
                        backend,
                        setup_ms,
                        opts,
                        &cancelled,
                        crate::app::schedule::next_frame,
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(r) => send(Msg::Done(r)),
                Err(e) => send(Msg::Failed(crate::t!(
                    "speedup-failed",
                    preset = preset.as_str(),
                    backend = backend.as_str(),
                    error = e
                ))),
            }
            // In the page: the result reaches the frame (and the page's
            // report) before the next measurement builds its backend.
            #[cfg(target_arch = "wasm32")]
            {
                crate::app::schedule::next_frame().await;
                crate::app::schedule::next_frame().await;
            }
        }
        send(Msg::Finished);
    });
    view.results.clear();
    view.bench_frames = 0;
    view.frames_since_cancel = None;
    view.job = Some(BenchJob {
        _task: task,
        inbox,
        cancel,
        total,
        done: 0,
        current: String::new(),
    });
    view.message = None;
    Ok(())
}

/// Reads what the worker reported; pauses the run while a bench runs.
pub(super) fn collect(
    mut view: ResMut<SpeedupView>,
    run: Option<ResMut<Run>>,
    gpu: Res<GpuDevice>,
    mut status: ResMut<AppStatus>,
) {
    if !view.backends_chosen {
        view.backends_chosen = true;
        if cfg!(target_arch = "wasm32") {
            // The page's WebGPU, whatever it runs on: the page measures
            // what its students have.
            view.gpu = gpu.context.is_some();
        } else if let Some(ctx) = &gpu.context
            && crate::backends::software_adapter(ctx).is_some()
        {
            view.gpu = false;
            view.gpu_note = Some(crate::t!(
                "speedup-software-gpu",
                name = ctx.info.name.as_str()
            ));
        }
    }
    if view.start {
        view.start = false;
        if let Err(e) = start(&mut view, &gpu) {
            view.message = Some(e);
        }
    }
    if view.kernels_start && view.job.is_none() {
        view.kernels_start = false;
        view.start_kernels(&gpu);
    }
    if let Some(task) = view.kernels_job.as_mut()
        && let Some(result) = bevy::tasks::futures::check_ready(task)
    {
        view.kernels_job = None;
        view.kernels = Some(result);
    }
    if view.running()
        && let Some(mut run) = run
        && run.state == RunState::Training
    {
        run.state = RunState::Paused;
        view.paused_run_at = Some(run.step());
        status.info = Some(crate::t!("speedup-paused"));
    }
    if let Some(n) = view.frames_since_cancel.as_mut() {
        *n += 1;
    }
    let view = &mut *view;
    let Some(job) = view.job.as_mut() else { return };
    view.bench_frames += 1;
    if view
        .cancel_after_frames
        .is_some_and(|n| view.bench_frames >= n)
        && view.frames_since_cancel.is_none()
    {
        job.cancel.store(true, Ordering::Relaxed);
        view.frames_since_cancel = Some(0);
    }
    let msgs: Vec<Msg> = std::mem::take(&mut *job.inbox.lock().unwrap());
    let mut finished = false;
    let mut arrived = Vec::new();
    let mut failure = None;
    for m in msgs {
        match m {
            Msg::Started(what) => job.current = what,
            Msg::Done(r) => {
                job.done += 1;
                arrived.push(r);
            }
            Msg::Failed(e) => {
                job.done += 1;
                failure = Some(e);
            }
            Msg::Finished => finished = true,
        }
    }
    let cancelled = job.cancel.load(Ordering::Relaxed);
    if finished {
        view.job = None;
        if cancelled {
            view.message = Some(crate::t!("speedup-cancelled"));
        }
    }
    if let Some(e) = failure
        && !(cancelled && e.ends_with("cancelled"))
    {
        view.message = Some(e);
    }
    for r in arrived {
        add_result(&mut view.results, r);
    }
}

/// While a bench or the kernel timing runs, the window redraws at 10 Hz
/// (and at once on input): the app's own drawing would otherwise take GPU
/// and CPU time from what is being measured. Restored when it ends.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn quiet_while_measuring(
    view: Res<SpeedupView>,
    settings: Option<ResMut<bevy::winit::WinitSettings>>,
    mut saved: Local<Option<bevy::winit::WinitSettings>>,
) {
    let Some(mut settings) = settings else { return };
    match (view.running(), saved.is_some()) {
        (true, false) => {
            *saved = Some(settings.clone());
            let quiet =
                bevy::winit::UpdateMode::reactive_low_power(std::time::Duration::from_millis(100));
            settings.focused_mode = quiet;
            settings.unfocused_mode = quiet;
        }
        (false, true) => *settings = saved.take().expect("saved above"),
        _ => {}
    }
}

/// Adds a measurement, filling the GPU-over-CPU ratio as `tinygpt bench` does.
/// (The GPU in mixed precision, `gpu-mixed`, gets its own ratio to the
/// same CPU measurement.)
pub(super) fn add_result(results: &mut Vec<BenchResult>, mut r: BenchResult) {
    results.retain(|x| !(x.preset == r.preset && x.backend == r.backend));
    if r.backend == "gpu" || r.backend == "gpu-mixed" {
        let cpu = results
            .iter()
            .find(|x| x.preset == r.preset && x.backend == "cpu");
        r.gpu_over_cpu = cpu.map(|c| c.median_ms / r.median_ms);
    } else {
        for g in results
            .iter_mut()
            .filter(|x| x.preset == r.preset && (x.backend == "gpu" || x.backend == "gpu-mixed"))
        {
            g.gpu_over_cpu = Some(r.median_ms / g.median_ms);
        }
    }
    results.push(r);
}
