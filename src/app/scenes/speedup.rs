//! The "Speedup" scene: the training-speed bench of `tinygpt bench`, run
//! from the app on this machine ([`crate::bench::bench_until`]: the same
//! measurement, the same JSON fields), the GPU-over-CPU curve growing point
//! by point against parameter count, with the original TinyGPT's published
//! curve as a reference. A saved run (`bench.jsonl`) loads for a class with
//! no GPU; the chart exports as SVG (the report's own, `bench::report::svg`)
//! and PNG (the app's [`crate::app::export`]). Its second tab times one
//! training step per kernel and puts each op family on the roofline of this
//! adapter ([`crate::bench::kernels`]).
//!
//! The measurements run on the async-compute pool (a worker thread
//! natively), one (preset, backend) after another, the GPU ones on a
//! device of their own (natively); results come back through an
//! inbox the frame reads. Cancel stops between two steps. The run pauses
//! while a bench runs (they would share the machine), and the window
//! redraws at 10 Hz meanwhile.

use super::Scene;
use crate::app::training::{AppStatus, GpuDevice, Run, RunState};
use crate::app::ui::UiState;
use crate::bench::kernels::KernelTimes;
use crate::bench::{BenchOptions, BenchResult, bench_until, report};
use crate::model::config::{BUILTIN_PRESETS, Config};
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task};
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use egui_plot::{Legend, Line, Plot, PlotPoints, Points};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a bench worker reports.
#[derive(Debug)]
enum Msg {
    Started(String),
    Done(BenchResult),
    Failed(String),
    Finished,
}

struct BenchJob {
    _task: Task<()>,
    inbox: Arc<Mutex<Vec<Msg>>>,
    cancel: Arc<AtomicBool>,
    total: usize,
    done: usize,
    current: String,
}

/// Times one step of `preset` per kernel with the adapter's ceilings,
/// blocking: on a worker. The app's device first, then one of its own (the
/// app's may have been opened without timestamp queries), then the CPU.
fn time_kernels(
    preset: &str,
    app_gpu: Option<crate::gpu::GpuContext>,
) -> Result<KernelTimes, String> {
    let config = Config::load(preset).map_err(|e| e.to_string())?;
    #[cfg(not(target_arch = "wasm32"))]
    let own = || crate::gpu::GpuContext::new_blocking().ok();
    #[cfg(not(target_arch = "wasm32"))]
    let contexts = app_gpu
        .into_iter()
        .chain(std::iter::once_with(own).flatten());
    // In the page, reading timestamps back would wait on the GPU in the
    // page's one thread: the CPU's op times, with the reason.
    #[cfg(target_arch = "wasm32")]
    let contexts = {
        let _ = app_gpu;
        std::iter::empty()
    };
    let mut times = crate::bench::kernels::time_step(preset, &config, contexts, true)?;
    if cfg!(target_arch = "wasm32") {
        times.note = Some(
            "in the browser, reading GPU timestamps back would wait in the page's one thread: the CPU backend's op times instead".into(),
        );
    }
    Ok(times)
}

/// Which half of the scene shows: the curve, or one step's kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SpeedupTab {
    #[default]
    Curve,
    Kernels,
}

/// The scene's state and what it measured (headless runs print `results`).
#[derive(Resource)]
pub struct SpeedupView {
    /// Built-in presets and whether to measure each.
    pub presets: Vec<(String, bool)>,
    pub cpu: bool,
    pub gpu: bool,
    /// Seconds of timed steps per measurement, at least.
    pub seconds: f64,
    job: Option<BenchJob>,
    pub results: Vec<BenchResult>,
    pub message: Option<String>,
    /// The file to load from or save to.
    pub path: String,
    /// Files this view saved (replaced unasked), and the path whose
    /// replacement the last Save asked to confirm (a second Save replaces).
    saved: std::collections::HashSet<String>,
    confirm: Option<String>,
    /// Start at once (the command line's `--bench`).
    pub start: bool,
    /// The preset whose step the kernel view times, and its result.
    pub kernels_preset: String,
    kernels_job: Option<Task<Result<KernelTimes, String>>>,
    pub kernels: Option<Result<KernelTimes, String>>,
    /// Time the kernels as soon as the scene opens (`--kernels`).
    pub kernels_start: bool,
    pub tab: SpeedupTab,
    /// Where the curve was last drawn (physical pixels), for its PNG.
    curve_px: Option<[f32; 4]>,
    /// The kernel tab's PNG button was pressed.
    export_kernels: bool,
    /// Press Cancel this many frames into a bench (`--cancel-bench-after`).
    pub cancel_after_frames: Option<u32>,
    /// Frames drawn since the bench started, and since Cancel was pressed.
    pub bench_frames: u32,
    pub frames_since_cancel: Option<u32>,
    /// The run's step when the bench paused it (the bench leaves it there).
    pub paused_run_at: Option<u64>,
    /// The CPU/GPU boxes were set by the user or the command line; else the
    /// first frame leaves a software adapter's GPU box unticked.
    pub backends_chosen: bool,
    /// Why the GPU box starts unticked.
    gpu_note: Option<String>,
}

impl SpeedupView {
    /// The kernel view's data as JSON (`tinygpt bench --kernels --json`'s
    /// object, or its error; null before a measurement).
    pub fn kernels_json(&self) -> serde_json::Value {
        match &self.kernels {
            Some(Ok(k)) => serde_json::to_value(k).expect("plain data"),
            Some(Err(e)) => serde_json::json!({ "error": e }),
            None => serde_json::Value::Null,
        }
    }

    /// Measures `presets` (the command line's `--bench`) as soon as the scene opens.
    pub fn starting(presets: Option<&[String]>) -> Self {
        let mut view = Self::default();
        if let Some(list) = presets {
            for (id, on) in &mut view.presets {
                *on = list.iter().any(|p| p == id);
            }
            view.start = true;
            view.seconds = 0.5;
        }
        view
    }

    pub fn running(&self) -> bool {
        self.job.is_some() || self.kernels_job.is_some()
    }

    /// Times the kernels of `preset`'s step as soon as the scene opens (`--kernels`).
    pub fn with_kernels(mut self, preset: Option<&str>) -> Self {
        if let Some(p) = preset {
            self.kernels_preset = p.to_string();
            self.kernels_start = true;
            self.tab = SpeedupTab::Kernels;
        }
        self
    }

    fn start_kernels(&mut self, gpu: &GpuDevice) {
        let (preset, ctx) = (self.kernels_preset.clone(), gpu.context.clone());
        self.kernels = None;
        self.kernels_job =
            Some(AsyncComputeTaskPool::get().spawn(async move { time_kernels(&preset, ctx) }));
    }
}

impl Default for SpeedupView {
    fn default() -> Self {
        Self {
            presets: BUILTIN_PRESETS
                .iter()
                .map(|(id, _)| (id.to_string(), matches!(*id, "tiny" | "small" | "medium")))
                .collect(),
            cpu: true,
            gpu: true,
            seconds: 2.0,
            job: None,
            results: Vec::new(),
            message: None,
            path: "bench.jsonl".into(),
            saved: Default::default(),
            confirm: None,
            start: false,
            kernels_preset: "small".into(),
            kernels_job: None,
            kernels: None,
            kernels_start: false,
            tab: SpeedupTab::Curve,
            curve_px: None,
            export_kernels: false,
            cancel_after_frames: None,
            bench_frames: 0,
            frames_since_cancel: None,
            paused_run_at: None,
            backends_chosen: false,
            gpu_note: None,
        }
    }
}

/// Picture rectangles (pixels) for the headless line.
#[derive(Resource, Debug, Clone, Default)]
pub struct SpeedupShown {
    pub regions: Vec<(String, egui::Rect)>,
}

pub struct SpeedupScenePlugin {
    /// Presets to measure at once (`--bench`), and the preset whose kernels
    /// to time at once (`--kernels`).
    pub initial: Option<Vec<String>>,
    pub kernels: Option<String>,
}

impl Plugin for SpeedupScenePlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(
            SpeedupView::starting(self.initial.as_deref()).with_kernels(self.kernels.as_deref()),
        )
        .init_resource::<SpeedupShown>()
        .add_systems(
            Update,
            collect
                .in_set(crate::app::AppSystems::Scene)
                .run_if(in_state(Scene::Speedup)),
        )
        .add_systems(
            EguiPrimaryContextPass,
            draw.after(crate::app::ui::draw_ui)
                .run_if(in_state(Scene::Speedup)),
        );
        #[cfg(not(target_arch = "wasm32"))]
        app.add_systems(Update, quiet_while_measuring);
    }
}

/// Starts a bench of the chosen presets and backends on a worker.
fn start(view: &mut SpeedupView, gpu: &GpuDevice) -> Result<(), String> {
    let presets: Vec<String> = view
        .presets
        .iter()
        .filter(|(_, on)| *on)
        .map(|(id, _)| id.clone())
        .collect();
    if presets.is_empty() || !(view.cpu || view.gpu) {
        return Err("choose at least one preset and one backend".into());
    }
    let app_ctx = if view.gpu {
        if cfg!(target_arch = "wasm32") {
            return Err("in the browser a GPU bench would wait on the GPU in the page's one thread; measure the CPU here, or load a saved run".into());
        }
        Some(gpu.context.clone().ok_or_else(|| {
            gpu.missing
                .clone()
                .unwrap_or_else(|| "no GPU device is available to the app".into())
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
    }
    let opts = BenchOptions {
        min_seconds: view.seconds,
        ..BenchOptions::default()
    };
    let inbox: Arc<Mutex<Vec<Msg>>> = Arc::default();
    let cancel = Arc::new(AtomicBool::new(false));
    let (out, stop) = (inbox.clone(), cancel.clone());
    let total = plan.len();
    let task = AsyncComputeTaskPool::get().spawn(async move {
        let send = |m: Msg| out.lock().unwrap().push(m);
        // The GPU bench on a device of its own: each step waits only on
        // its own work, not on the app's frames queued on the app's device
        // (on the H100 host the app's device cost xl 32% per step).
        #[cfg(not(target_arch = "wasm32"))]
        let gpu_ctx = app_ctx
            .as_ref()
            .map(|app| crate::gpu::GpuContext::new_blocking().unwrap_or_else(|_| app.clone()));
        #[cfg(target_arch = "wasm32")]
        let gpu_ctx = app_ctx;
        for (preset, kind) in plan {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            send(Msg::Started(format!("{preset} on the {kind}")));
            let result = Config::load(&preset)
                .map_err(|e| e.to_string())
                .and_then(|config| {
                    let t0 = web_time::Instant::now();
                    let backend: Box<dyn crate::backend::Backend> = match (&gpu_ctx, kind) {
                        (Some(ctx), "gpu") => Box::new(
                            crate::gpu::GpuBackend::new(
                                ctx.clone(),
                                crate::program::Program::new(&config),
                            )
                            .map_err(|e| e.to_string())?,
                        ),
                        _ => crate::bench::cpu_backend(&config),
                    };
                    let setup_ms = t0.elapsed().as_secs_f64() * 1e3;
                    bench_until(&preset, kind, backend, setup_ms, opts, &|| {
                        stop.load(Ordering::Relaxed)
                    })
                });
            match result {
                Ok(r) => send(Msg::Done(r)),
                Err(e) => send(Msg::Failed(format!("{preset} on the {kind}: {e}"))),
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
fn collect(
    mut view: ResMut<SpeedupView>,
    run: Option<ResMut<Run>>,
    gpu: Res<GpuDevice>,
    mut status: ResMut<AppStatus>,
) {
    if !view.backends_chosen {
        view.backends_chosen = true;
        if cfg!(target_arch = "wasm32") {
            view.gpu = false;
        } else if let Some(ctx) = &gpu.context
            && crate::backend::software_adapter(ctx).is_some()
        {
            view.gpu = false;
            view.gpu_note = Some(format!(
                "{} is a software renderer: it draws this window too, so its bench would freeze the picture while it runs (tick GPU to measure it anyway)",
                ctx.info.name
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
        status.info = Some("training paused while the bench measures".into());
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
            view.message = Some("cancelled".into());
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
fn quiet_while_measuring(
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
fn add_result(results: &mut Vec<BenchResult>, mut r: BenchResult) {
    results.retain(|x| !(x.preset == r.preset && x.backend == r.backend));
    if r.backend == "gpu" {
        let cpu = results
            .iter()
            .find(|x| x.preset == r.preset && x.backend == "cpu");
        r.gpu_over_cpu = cpu.map(|c| c.median_ms / r.median_ms);
    } else if let Some(g) = results
        .iter_mut()
        .find(|x| x.preset == r.preset && x.backend == "gpu")
    {
        g.gpu_over_cpu = Some(r.median_ms / g.median_ms);
    }
    results.push(r);
}

#[allow(clippy::too_many_arguments)]
fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    mut view: ResMut<SpeedupView>,
    gpu: Res<GpuDevice>,
    mut shown: ResMut<SpeedupShown>,
    mut export: MessageWriter<crate::app::export::ExportPng>,
    mut files: MessageWriter<crate::app::export::ExportFile>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let Some(area) = ui_state.central_rect(&ctx) else {
        return Ok(());
    };
    let body = area.shrink2(egui::vec2(14.0, 10.0));
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "speedup-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("speedup-body-layer"),
            ))
            .max_rect(body),
    );
    ui.set_clip_rect(body);
    let mut regions = Vec::new();
    let view = &mut *view;
    ui.label(
        egui::RichText::new("Why do GPUs win? Measured on this machine")
            .size(20.0)
            .strong(),
    );
    ui.horizontal_wrapped(|ui| {
        for (tab, name) in [
            (SpeedupTab::Curve, "📈 Speedup curve: GPU over CPU"),
            (
                SpeedupTab::Kernels,
                "⏱ Where a step's time goes: kernels and roofline",
            ),
        ] {
            ui.selectable_value(&mut view.tab, tab, egui::RichText::new(name).size(16.0));
        }
    });
    ui.add_space(4.0);
    if view.tab == SpeedupTab::Kernels {
        let area = ui.available_rect_before_wrap();
        let mut kernels_ui = ui.new_child(egui::UiBuilder::new().max_rect(area));
        kernels_ui.set_clip_rect(area.intersect(body));
        regions.extend(kernels_view(&mut kernels_ui, view, &gpu, &mut files));
        if std::mem::take(&mut view.export_kernels) {
            let r = area * ctx.pixels_per_point();
            export.write(crate::app::export::ExportPng {
                name: "speedup-kernels".into(),
                rect: Some([r.min.x, r.min.y, r.max.x, r.max.y]),
            });
        }
        shown.regions = regions
            .into_iter()
            .map(|(n, r)| (n, r * ctx.pixels_per_point()))
            .collect();
        return Ok(());
    }
    ui.horizontal_wrapped(|ui| {
        ui.label("presets:");
        for (id, on) in &mut view.presets {
            ui.checkbox(on, id.as_str());
        }
    });
    let mut cancel_pressed = false;
    ui.horizontal_wrapped(|ui| {
        ui.checkbox(&mut view.cpu, "CPU");
        ui.checkbox(&mut view.gpu, "GPU");
        ui.add(egui::Slider::new(&mut view.seconds, 0.5..=10.0).text("s per measurement"));
        if let Some(job) = &view.job {
            ui.add(
                egui::ProgressBar::new(job.done as f32 / job.total.max(1) as f32)
                    .desired_width(220.0)
                    .text(format!("{}/{} · {}", job.done, job.total, job.current)),
            );
            if ui.button("✖ Cancel").clicked() {
                job.cancel.store(true, Ordering::Relaxed);
                cancel_pressed = true;
            }
        } else if ui.button("▶ Measure").clicked()
            && let Err(e) = start(view, &gpu)
        {
            view.message = Some(e);
        }
        ui.separator();
        ui.add(egui::TextEdit::singleline(&mut view.path).desired_width(160.0));
        if ui
            .button("Load")
            .on_hover_text("a bench.jsonl from `tinygpt bench --report` or Save")
            .clicked()
        {
            match load(&view.path) {
                Ok(results) => {
                    view.message = Some(format!(
                        "loaded {} measurements from {}",
                        results.len(),
                        view.path
                    ));
                    view.results.clear();
                    for r in results {
                        add_result(&mut view.results, r);
                    }
                }
                Err(e) => view.message = Some(e),
            }
        }
        if ui
            .button("Save")
            .on_hover_text("the measurements as JSON lines, and the chart as an SVG beside them")
            .clicked()
        {
            let path = view.path.trim().to_string();
            let replace = view.saved.contains(&path) || view.confirm.as_ref() == Some(&path);
            view.confirm = None;
            view.message = Some(match save(&path, &view.results, replace) {
                Ok(svg) => {
                    view.saved.insert(path.clone());
                    format!("saved {path} and {svg}")
                }
                Err(SaveRefused::Exists(e)) => {
                    view.confirm = Some(path);
                    format!("{e}: press Save again to replace it, or type another name")
                }
                Err(SaveRefused::Other(e)) => e,
            });
        }
        if ui
            .button("📷 PNG")
            .on_hover_text(
                "the chart as a PNG (tinygpt-speedup-curve.png; a download in the browser)",
            )
            .clicked()
        {
            export.write(crate::app::export::ExportPng {
                name: "speedup-curve".into(),
                rect: view.curve_px,
            });
        }
    });
    if let Some(note) = view.gpu_note.as_ref().filter(|_| !view.gpu) {
        ui.label(egui::RichText::new(note).size(12.0).weak());
    }
    if cancel_pressed {
        view.frames_since_cancel = Some(0);
    }
    if let Some(m) = &view.message {
        ui.label(egui::RichText::new(m).color(egui::Color32::from_rgb(240, 190, 80)));
    }
    if cfg!(target_arch = "wasm32") {
        ui.label(
            egui::RichText::new(
                "In the browser the CPU bench runs on the page's one thread (the page pauses while it measures) and the GPU bench is off; a saved run from a desktop loads here.",
            )
            .weak(),
        );
    }
    let mut devices: Vec<&str> = Vec::new();
    for r in &view.results {
        if !devices.contains(&r.device.as_str()) {
            devices.push(&r.device);
        }
    }
    if !devices.is_empty() {
        ui.label(
            egui::RichText::new(format!("measured on: {}", devices.join("; ")))
                .size(12.0)
                .weak(),
        );
    }
    // The curve: GPU-over-CPU against parameters (log10 on x).
    let ours: Vec<[f64; 2]> = {
        let mut v: Vec<_> = view
            .results
            .iter()
            .filter_map(|r| Some([(r.params as f64).log10(), r.gpu_over_cpu?]))
            .collect();
        v.sort_by(|a, b| a[0].total_cmp(&b[0]));
        v
    };
    let original: Vec<[f64; 2]> = report::ORIGINAL
        .iter()
        .map(|&(_, params, _, speedup)| [(params as f64).log10(), speedup])
        .collect();
    let results = view.results.clone();
    let plot_h = (ui.available_height() * 0.62).max(160.0);
    let response = Plot::new("speedup")
        .height(plot_h)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .x_axis_label("parameters (log scale)")
        .y_axis_label("GPU over CPU (×)")
        .x_axis_formatter(|mark, _| {
            let n = 10f64.powf(mark.value);
            if n >= 1e6 {
                format!("{:.1} M", n / 1e6)
            } else {
                format!("{:.0} K", n / 1e3)
            }
        })
        .include_y(0.0)
        .label_formatter(move |hover| {
            let egui_plot::HoverPosition::NearDataPoint {
                plot_name,
                position: p,
                ..
            } = hover
            else {
                return None;
            };
            let near = results
                .iter()
                .filter(|r| ((r.params as f64).log10() - p.x).abs() < 0.05)
                .map(|r| format!("{} {}: {:.2} ms/step", r.preset, r.backend, r.median_ms))
                .collect::<Vec<_>>();
            Some(format!(
                "{plot_name}\n{:.0} parameters, {:.1}×{}",
                10f64.powf(p.x),
                p.y,
                if near.is_empty() {
                    String::new()
                } else {
                    format!("\n{}", near.join("\n"))
                }
            ))
        })
        .show(&mut ui, |plot| {
            plot.line(Line::new(
                "original TinyGPT (M-series laptop: WebGPU over WASM SIMD)",
                PlotPoints::from(original.clone()),
            ));
            plot.points(
                Points::new(
                    "original TinyGPT (M-series laptop: WebGPU over WASM SIMD)",
                    PlotPoints::from(original),
                )
                .radius(4.0),
            );
            if !ours.is_empty() {
                plot.line(
                    Line::new("this machine: GPU over CPU", PlotPoints::from(ours.clone()))
                        .width(2.5),
                );
                plot.points(
                    Points::new("this machine: GPU over CPU", PlotPoints::from(ours)).radius(6.0),
                );
            }
        });
    regions.push(("curve".to_string(), response.response.rect));
    let r = response.response.rect * ctx.pixels_per_point();
    view.curve_px = Some([r.min.x, r.min.y, r.max.x, r.max.y]);
    // Below: the table.
    let mut table_ui =
        ui.new_child(egui::UiBuilder::new().max_rect(ui.available_rect_before_wrap()));
    table_ui.set_clip_rect(ui.available_rect_before_wrap().intersect(body));
    let table = egui::ScrollArea::vertical()
        .id_salt("speedup-table-scroll")
        .auto_shrink([false, false])
        .show(&mut table_ui, |ui| {
            egui::Grid::new("speedup-table")
                .striped(true)
                .spacing(egui::vec2(16.0, 4.0))
                .show(ui, |ui| {
                    for h in [
                        "preset",
                        "parameters",
                        "CPU ms/step",
                        "GPU ms/step",
                        "GPU/CPU",
                    ] {
                        ui.label(egui::RichText::new(h).strong());
                    }
                    ui.end_row();
                    let mut presets: Vec<(&str, usize)> = view
                        .results
                        .iter()
                        .map(|r| (r.preset.as_str(), r.params))
                        .collect();
                    presets.sort_by_key(|p| p.1);
                    presets.dedup();
                    for (preset, params) in presets {
                        let of = |kind: &str| {
                            view.results
                                .iter()
                                .find(|r| r.preset == preset && r.backend == kind)
                        };
                        ui.label(preset);
                        ui.label(crate::model::config::group_thousands(params));
                        ui.label(of("cpu").map_or("—".into(), |r| format!("{:.2}", r.median_ms)));
                        ui.label(of("gpu").map_or("—".into(), |r| format!("{:.2}", r.median_ms)));
                        ui.label(of("gpu").and_then(|r| r.gpu_over_cpu).map_or(
                            "—".into(),
                            |x| {
                                if x < 1.0 {
                                    format!("{x:.3}×")
                                } else {
                                    format!("{x:.1}×")
                                }
                            },
                        ));
                        ui.end_row();
                    }
                })
        });
    regions.push(("table".to_string(), table.inner.response.rect));
    shown.regions = regions
        .into_iter()
        .map(|(n, r)| (n, r * ctx.pixels_per_point()))
        .collect();
    Ok(())
}

/// Measurements from a `bench.jsonl`.
fn load(path: &str) -> Result<Vec<BenchResult>, String> {
    let text = crate::data::read_text(std::path::Path::new(path.trim())).map_err(|e| {
        format!(
            "cannot read {path}: {e} (save a run here first, or use `tinygpt bench --report DIR`)"
        )
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                format!("{path}, line {}: not a bench measurement ({e}); bench.jsonl from `tinygpt bench --report` loads", i + 1)
            })
        })
        .collect()
}

/// Why a save did not happen: a file there that this app did not write (a
/// second Save replaces it), or anything else.
enum SaveRefused {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))] // a download replaces nothing
    Exists(String),
    Other(String),
}

/// Writes the measurements as JSON lines and the chart (`report::svg`) as
/// an SVG beside them; returns the SVG's path. Files that exist are only
/// replaced when `replace` (see `crate::output`).
fn save(path: &str, results: &[BenchResult], replace: bool) -> Result<String, SaveRefused> {
    if results.is_empty() {
        return Err(SaveRefused::Other("nothing measured yet".into()));
    }
    #[cfg(target_arch = "wasm32")]
    {
        let lines: String = results
            .iter()
            .map(|r| serde_json::to_string(r).expect("plain data") + "\n")
            .collect();
        crate::app::web::download("bench.jsonl", lines.as_bytes());
        crate::app::web::download("speedup.svg", report::svg(results).as_bytes());
        let _ = (path, replace);
        Ok("speedup.svg (downloads)".into())
    }
    #[cfg(not(target_arch = "wasm32"))]
    save_files(path, results, replace)
}

/// [`save`] natively: the two files.
#[cfg(not(target_arch = "wasm32"))]
fn save_files(path: &str, results: &[BenchResult], replace: bool) -> Result<String, SaveRefused> {
    let path = std::path::Path::new(path.trim());
    let svg_path = path.with_extension("svg");
    for p in [path, svg_path.as_path()] {
        crate::output::check_save(p, "the save path", replace).map_err(|r| match r {
            crate::output::SaveRefusal::Ask => {
                SaveRefused::Exists(format!("{} exists and this app did not write it", p.display()))
            }
            crate::output::SaveRefusal::Refused(e) => SaveRefused::Other(e),
        })?;
    }
    let lines: String = results
        .iter()
        .map(|r| serde_json::to_string(r).expect("plain data") + "\n")
        .collect();
    let write = |p: &std::path::Path, bytes: &[u8]| {
        crate::output::write_atomic(p, bytes)
            .map_err(|e| SaveRefused::Other(format!("cannot write {}: {e}", p.display())))
    };
    write(path, lines.as_bytes())?;
    write(&svg_path, report::svg(results).as_bytes())?;
    Ok(svg_path.display().to_string())
}

/// Colours of the op families in the stacked bar.
const FAMILY_COLOURS: [egui::Color32; 10] = [
    egui::Color32::from_rgb(86, 156, 230),
    egui::Color32::from_rgb(236, 140, 64),
    egui::Color32::from_rgb(96, 200, 120),
    egui::Color32::from_rgb(186, 120, 230),
    egui::Color32::from_rgb(230, 90, 90),
    egui::Color32::from_rgb(230, 210, 90),
    egui::Color32::from_rgb(90, 210, 210),
    egui::Color32::from_rgb(200, 150, 110),
    egui::Color32::from_rgb(150, 160, 250),
    egui::Color32::from_rgb(160, 160, 160),
];

/// Where one training step's time goes: the preset and the button, a bar
/// stacked by op family, the families' table and the roofline. Returns the
/// rectangles it drew (`kernels`, `roofline`).
fn kernels_view(
    ui: &mut egui::Ui,
    view: &mut SpeedupView,
    gpu: &GpuDevice,
    files: &mut MessageWriter<crate::app::export::ExportFile>,
) -> Vec<(String, egui::Rect)> {
    let top = ui.cursor().min;
    let mut regions = Vec::new();
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new("One training step of").size(16.0));
        egui::ComboBox::from_id_salt("kernels-preset")
            .selected_text(&view.kernels_preset)
            .show_ui(ui, |ui| {
                for (id, _) in BUILTIN_PRESETS {
                    ui.selectable_value(&mut view.kernels_preset, id.to_string(), *id);
                }
            });
        let busy = view.running();
        if ui
            .add_enabled(!busy, egui::Button::new("⏱ Time one step"))
            .on_hover_text("this adapter's matmul and copy ceilings, then every kernel of one training step with GPU timestamps (each in a pass of its own)")
            .clicked()
        {
            view.start_kernels(gpu);
        }
        if view.kernels_job.is_some() {
            ui.spinner();
            ui.label("measuring this GPU's ceilings, then timing every kernel of the step…");
        }
        if view.kernels.as_ref().is_some_and(|k| k.is_ok())
            && ui
                .button("📷 PNG")
                .on_hover_text("the bar, the table and the roofline as a PNG")
                .clicked()
        {
            view.export_kernels = true;
        }
        if let Some(Ok(k)) = &view.kernels
            && ui
                .button("SVG + JSON")
                .on_hover_text("the roofline as tinygpt-roofline.svg, and every kernel's time as tinygpt-kernels.json")
                .clicked()
        {
            files.write(crate::app::export::ExportFile::new("roofline", "svg", k.roofline_chart().to_svg()));
            files.write(crate::app::export::ExportFile::new(
                "kernels",
                "json",
                serde_json::to_vec_pretty(k).expect("plain data"),
            ));
        }
    });
    let k = match &view.kernels {
        None if view.kernels_job.is_some() => {
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        None => {
            ui.label(
                egui::RichText::new(
                    "Press ⏱ to time every kernel of one step on this machine's GPU, and to measure how fast it can multiply (TFLOP/s) and copy (GB/s).",
                )
                .weak(),
            );
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        Some(Err(e)) => {
            ui.colored_label(egui::Color32::from_rgb(255, 110, 100), e);
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        Some(Ok(k)) => k.clone(),
    };
    let total = k.total_ms();
    let what = match k.source.as_str() {
        "gpu_timestamps" => format!(
            "{}: {total:.2} ms of kernel time in {} dispatches on {} (each timed in a pass of its own, so more than a step takes)",
            k.preset,
            k.rows.len(),
            k.device
        ),
        _ => format!("{}: {total:.2} ms per step on {}", k.preset, k.device),
    };
    ui.label(egui::RichText::new(what).size(13.0));
    if let Some(note) = &k.note {
        ui.label(
            egui::RichText::new(note)
                .size(13.0)
                .color(egui::Color32::from_rgb(240, 190, 80)),
        );
    }
    let colour = |i: usize| FAMILY_COLOURS[i % FAMILY_COLOURS.len()];
    let (rect, _) =
        ui.allocate_exact_size(egui::vec2(ui.available_width(), 28.0), egui::Sense::hover());
    let mut x = rect.min.x;
    for (i, f) in k.families.iter().enumerate() {
        let w = rect.width() * (f.ms / total.max(1e-12)) as f32;
        let seg =
            egui::Rect::from_min_size(egui::pos2(x, rect.min.y), egui::vec2(w, rect.height()));
        ui.painter().rect_filled(seg, 0.0, colour(i));
        let name = ui.painter().layout_no_wrap(
            f.family.clone(),
            egui::FontId::proportional(13.0),
            egui::Color32::from_gray(15),
        );
        if name.size().x + 8.0 < w {
            ui.painter()
                .galley(seg.center() - name.size() / 2.0, name, egui::Color32::BLACK);
        }
        if let Some(p) = ui.ctx().pointer_hover_pos()
            && seg.contains(p)
        {
            egui::Tooltip::always_open(
                ui.ctx().clone(),
                ui.layer_id(),
                egui::Id::new("kernels-hover"),
                egui::PopupAnchor::Pointer,
            )
            .show(|ui| ui.label(format!("{}: {:.3} ms", f.family, f.ms)));
        }
        x += w;
    }
    ui.add_space(6.0);
    // Below the bar: the families and the roofline, side by side where
    // there is room, else the roofline above the (scrolling) table.
    let below = ui.available_rect_before_wrap();
    let (table_rect, roof_rect) = if below.width() >= 960.0 {
        let mid = below.min.x + below.width() * 0.5;
        (
            egui::Rect::from_min_max(below.min, egui::pos2(mid - 8.0, below.max.y)),
            egui::Rect::from_min_max(egui::pos2(mid + 8.0, below.min.y), below.max),
        )
    } else {
        let mid = below.min.y + below.height() * 0.6;
        (
            egui::Rect::from_min_max(egui::pos2(below.min.x, mid + 6.0), below.max),
            egui::Rect::from_min_max(below.min, egui::pos2(below.max.x, mid - 6.0)),
        )
    };
    let mut table_ui = ui.new_child(egui::UiBuilder::new().max_rect(table_rect));
    table_ui.set_clip_rect(table_rect.intersect(ui.clip_rect()));
    let gpu_rows = k.source == "gpu_timestamps";
    let table = egui::ScrollArea::vertical()
        .id_salt("kernels-legend")
        .auto_shrink([false, false])
        .show(&mut table_ui, |ui| {
            egui::Grid::new("kernels-legend-grid")
                .striped(true)
                .spacing(egui::vec2(12.0, 3.0))
                .show(ui, |ui| {
                    for h in [
                        "",
                        "op family",
                        "ms",
                        "share",
                        "FLOP/byte",
                        "GFLOP/s",
                        "bound",
                    ] {
                        ui.label(egui::RichText::new(h).strong());
                    }
                    ui.end_row();
                    for (i, f) in k.families.iter().enumerate() {
                        let (sw, _) =
                            ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
                        ui.painter().rect_filled(sw, 2.0, colour(i));
                        ui.label(&f.family).on_hover_text(if gpu_rows {
                            format!("{} dispatches", f.count)
                        } else {
                            String::new()
                        });
                        ui.label(format!("{:.3}", f.ms));
                        ui.label(format!("{:.1}%", 100.0 * f.ms / total.max(1e-12)));
                        ui.label(if f.flops > 0.0 {
                            format!("{:.2}", f.intensity)
                        } else {
                            "—".into()
                        });
                        ui.label(if f.flops > 0.0 {
                            format!("{:.1}", f.gflops)
                        } else {
                            format!("{:.0} GB/s", f.gbps)
                        });
                        ui.label(match (&f.bound, f.attainable_gflops) {
                            (Some(b), Some(a)) if f.flops > 0.0 => {
                                format!("{b} ({:.0}% of roof)", 100.0 * f.gflops / a)
                            }
                            (Some(b), _) => b.clone(),
                            _ => "—".into(),
                        });
                        ui.end_row();
                    }
                })
        });
    regions.push((
        "kernels".to_string(),
        rect.union(table.inner_rect)
            .union(egui::Rect::from_min_size(top, egui::vec2(1.0, 1.0))),
    ));
    let mut roof_ui = ui.new_child(egui::UiBuilder::new().max_rect(roof_rect));
    roof_ui.set_clip_rect(roof_rect.intersect(ui.clip_rect()));
    regions.push(("roofline".to_string(), roofline(&mut roof_ui, &k)));
    regions
}

/// The roofline: each op family at (FLOPs per byte, GFLOP/s reached), log
/// on both axes, under the adapter's roof min(matmul peak, intensity × copy
/// bandwidth). Returns the rectangle it drew in.
fn roofline(ui: &mut egui::Ui, k: &KernelTimes) -> egui::Rect {
    match &k.ceilings {
        Some(c) => {
            ui.label(
                egui::RichText::new(format!(
                    "Roofline of this adapter: matmul {}, copy {:.0} GB/s (measured just now); ridge at {:.1} FLOP/byte",
                    crate::bench::kernels::human_flops(c.matmul_tflops * 1e3),
                    c.copy_gbps,
                    c.matmul_tflops * 1e3 / c.copy_gbps
                ))
                .size(13.0),
            );
        }
        None => {
            ui.label(
                egui::RichText::new(
                    "No GPU ceilings here: the CPU's ops are placed by intensity and speed, without a roof.",
                )
                .size(13.0)
                .weak(),
            );
        }
    }
    ui.label(
        egui::RichText::new(
            "Below the slanted roof an op waits on memory; under the flat one, on arithmetic. Bytes are each tensor read or written once.",
        )
        .size(12.0)
        .weak(),
    );
    let points: Vec<(usize, &crate::bench::kernels::Family)> = k
        .families
        .iter()
        .enumerate()
        .filter(|(_, f)| f.flops > 0.0 && f.ms > 0.0)
        .collect();
    let xs: Vec<f64> = points.iter().map(|(_, f)| f.intensity.log10()).collect();
    let (mut x0, mut x1) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    if let Some(c) = &k.ceilings {
        let ridge = (c.matmul_tflops * 1e3 / c.copy_gbps).log10();
        x0 = x0.min(ridge);
        x1 = x1.max(ridge);
    }
    if !x0.is_finite() {
        (x0, x1) = (-1.0, 2.0);
    }
    let (x0, x1) = (x0.floor() - 0.3, x1.ceil() + 0.3);
    let total = k.total_ms().max(1e-12);
    // Lines at every decade (labelled) and at 2..9 times it (faint).
    let decades = |input: egui_plot::GridInput| -> Vec<egui_plot::GridMark> {
        let (lo, hi) = input.bounds;
        let mut marks = Vec::new();
        for d in (lo.floor() as i64)..=(hi.ceil() as i64) {
            for m in 1..10 {
                let value = d as f64 + (m as f64).log10();
                if value >= lo && value <= hi {
                    marks.push(egui_plot::GridMark {
                        value,
                        step_size: if m == 1 { 1.0 } else { 0.1 },
                    });
                }
            }
        }
        marks
    };
    let decade = |mark: egui_plot::GridMark, _: &std::ops::RangeInclusive<f64>| {
        if (mark.value - mark.value.round()).abs() > 1e-9 {
            return String::new();
        }
        let v = 10f64.powf(mark.value.round());
        if v >= 100.0 {
            format!("{v:.0}")
        } else if v >= 1.0 {
            format!("{v:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        } else {
            format!("{v:.2}")
        }
    };
    let names: Vec<(f64, f64, String)> = points
        .iter()
        .map(|(_, f)| {
            (
                f.intensity.log10(),
                f.gflops.log10(),
                format!(
                    "{}: {:.3} ms, {:.2} FLOP/byte, {:.1} GFLOP/s, {:.0} GB/s{}",
                    f.family,
                    f.ms,
                    f.intensity,
                    f.gflops,
                    f.gbps,
                    f.bound
                        .as_ref()
                        .map_or(String::new(), |b| format!(", {b}-bound"))
                ),
            )
        })
        .collect();
    let response = Plot::new("roofline")
        .x_axis_label("FLOPs per byte (log)")
        .y_axis_label("GFLOP/s (log)")
        .x_axis_formatter(decade)
        .y_axis_formatter(decade)
        .x_grid_spacer(decades)
        .y_grid_spacer(decades)
        .include_x(x0)
        .include_x(x1)
        .include_y(
            k.ceilings
                .as_ref()
                .map_or(0.0, |c| (c.matmul_tflops * 1e3).log10() + 0.4),
        )
        .allow_scroll(false)
        .label_formatter(move |hover| {
            let egui_plot::HoverPosition::NearDataPoint { position: p, .. } = hover else {
                return None;
            };
            names
                .iter()
                .filter(|(x, y, _)| (x - p.x).abs() < 1e-9 && (y - p.y).abs() < 1e-9)
                .map(|(_, _, s)| s.clone())
                .next()
        })
        .show(ui, |plot| {
            if let Some(c) = &k.ceilings {
                let peak = c.matmul_tflops * 1e3;
                let roof: Vec<[f64; 2]> = (0..=200)
                    .map(|i| {
                        let x = x0 + (x1 - x0) * i as f64 / 200.0;
                        [x, (10f64.powf(x) * c.copy_gbps).min(peak).log10()]
                    })
                    .collect();
                plot.line(
                    Line::new("roof", PlotPoints::from(roof))
                        .color(egui::Color32::from_gray(220))
                        .width(2.5),
                );
                plot.text(
                    egui_plot::Text::new(
                        "peak",
                        egui_plot::PlotPoint::new(x1 - 0.05, peak.log10() + 0.12),
                        egui::RichText::new(format!(
                            "matmul {}",
                            crate::bench::kernels::human_flops(c.matmul_tflops * 1e3)
                        ))
                        .size(13.0),
                    )
                    .anchor(egui::Align2::RIGHT_BOTTOM)
                    .color(egui::Color32::from_gray(220)),
                );
                let bw_x = x0 + 0.3;
                plot.text(
                    egui_plot::Text::new(
                        "bandwidth",
                        egui_plot::PlotPoint::new(
                            bw_x,
                            (10f64.powf(bw_x) * c.copy_gbps).log10() + 0.1,
                        ),
                        egui::RichText::new(format!("copy {:.0} GB/s", c.copy_gbps)).size(13.0),
                    )
                    .anchor(egui::Align2::LEFT_BOTTOM)
                    .color(egui::Color32::from_gray(220)),
                );
            }
            // Labels for the families that take time; a label near one
            // already placed goes to the left of its point instead.
            let mut placed: Vec<[f64; 2]> = Vec::new();
            for (i, f) in &points {
                let share = f.ms / total;
                if share >= 0.05 {
                    let at = [f.intensity.log10(), f.gflops.log10()];
                    let crowded = placed
                        .iter()
                        .any(|p| (p[0] - at[0]).abs() < 0.8 && (p[1] - at[1]).abs() < 0.2);
                    placed.push(at);
                    let (text, anchor) = if crowded {
                        (format!("{}  ", f.family), egui::Align2::RIGHT_CENTER)
                    } else {
                        (format!("  {}", f.family), egui::Align2::LEFT_CENTER)
                    };
                    plot.text(
                        egui_plot::Text::new(
                            f.family.clone(),
                            egui_plot::PlotPoint::new(at[0], at[1]),
                            egui::RichText::new(text).size(13.0),
                        )
                        .anchor(anchor)
                        .color(FAMILY_COLOURS[i % FAMILY_COLOURS.len()]),
                    );
                }
                plot.points(
                    Points::new(
                        f.family.clone(),
                        PlotPoints::from(vec![[f.intensity.log10(), f.gflops.log10()]]),
                    )
                    .color(FAMILY_COLOURS[i % FAMILY_COLOURS.len()])
                    .radius(3.5 + 10.0 * share.sqrt() as f32),
                );
            }
        });
    response.response.rect
}
