//! The "Correctness" scene: the GPU checked against the CPU for any tensor.
//! From the run's weights, AdamW moments and next batch, one training step
//! runs on a fresh CPU backend and a fresh GPU backend (on Bevy's device)
//! through the program's own entries ([`crate::correctness`]); every tensor
//! of the program is compared: parameters, activations, saved values,
//! gradients, AdamW's moments. Pick one: its CPU value, its GPU value and
//! their difference as heatmaps, with the max absolute and relative error.
//! Click a cell of a parameter's gradient (or a parameter) to check that
//! entry of the gradient against a finite difference of the loss, in f64
//! on the CPU, on a worker.
//!
//! Nothing waits in a frame: the CPU side runs on the async-compute pool
//! (a worker natively; the page's one thread in a browser), the GPU side's
//! reads come back by `map_async`. The run pauses while the scene is open
//! (the step must see the weights the snapshot read); the run's own
//! backend is never touched.

mod report;

use super::Scene;
use crate::app::heatmap;
use crate::app::training::{AppStatus, GpuDevice, Run, RunState, Snapshots, TensorWants};
use crate::app::ui::UiState;
use crate::backend::{Backend, PendingRead, StepParams};
use crate::correctness::{
    FiniteDifference, TensorDiff, finite_difference, read_key, step_and_read,
};
use crate::data::Batch;
use crate::model::params::NamedTensor;
use crate::program::{Program, TensorKind};
use bevy::platform::cell::SyncCell;
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use std::collections::HashMap;
use std::sync::Arc;

/// Floats one GPU read brings back at most (several reads cover a big model).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))] // the browser's path
const READ_CHUNK: usize = 16 << 20;

/// One tensor compared: the difference, and pooled pictures of both sides.
pub struct Compared {
    pub id: usize,
    pub diff: TensorDiff,
    /// (rows, cols) of the pictures, and the pooled CPU, GPU (means) and
    /// |GPU − CPU| (maxima) values.
    pub grid: (usize, usize),
    pub source: (usize, usize),
    pub cpu: Vec<f32>,
    pub gpu: Vec<f32>,
    pub diff_max: Vec<f32>,
}

/// What the step on both backends gave.
pub struct SideBySide {
    pub step: u64,
    pub tensors: Vec<Compared>,
    pub cpu: String,
    pub gpu: String,
    /// What a finite-difference check needs: the weights, the batch, the seed.
    weights: Vec<NamedTensor>,
    batch: Batch,
    dropout_seed: u32,
}

/// The CPU side's values, by tensor id: (after the backward pass, after AdamW).
type CpuValues = Result<(HashMap<usize, Vec<f32>>, String), String>;

/// The GPU side of a comparison. Natively it runs whole on a worker (building
/// a backend compiles every pipeline: seconds on a big model, not for a
/// frame); in a browser, where nothing may wait on the GPU, its reads come
/// back by `map_async` to the frame loop.
enum GpuSide {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))] // the native path
    Task(Task<CpuValues>, Option<CpuValues>),
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))] // the browser's path
    Reads {
        /// A cell: the app's resources must be `Sync`, a backend is only `Send`.
        backend: SyncCell<Box<dyn Backend>>,
        reads: Vec<(Vec<usize>, Option<PendingRead>)>,
        got: HashMap<usize, Vec<f32>>,
    },
}

impl GpuSide {
    /// Moves the side along; whether its values are all in.
    fn poll(&mut self, program: &Program) -> bool {
        match self {
            GpuSide::Task(task, done) => {
                if done.is_none() {
                    *done = check_ready(task);
                }
                done.is_some()
            }
            GpuSide::Reads {
                backend,
                reads,
                got,
            } => {
                let backend = backend.get();
                backend.poll();
                for (ids, read) in reads.iter_mut() {
                    let Some(pending) = read.take() else { continue };
                    match backend.try_take_reads(pending) {
                        Ok(values) => {
                            let mut at = 0;
                            for &id in ids.iter() {
                                let n = program.tensors[id].numel();
                                got.insert(id, values.get(at..at + n).unwrap_or_default().to_vec());
                                at += n;
                            }
                        }
                        Err(p) => *read = Some(p),
                    }
                }
                reads.iter().all(|(_, r)| r.is_none())
            }
        }
    }

    /// Its values, once [`GpuSide::poll`] said they are in (moved, not copied:
    /// hundreds of megabytes on a big model).
    fn take(self) -> CpuValues {
        match self {
            GpuSide::Task(_, done) => {
                done.unwrap_or_else(|| Err("the GPU side did not finish".into()))
            }
            GpuSide::Reads {
                mut backend, got, ..
            } => Ok((got, backend.get().describe())),
        }
    }
}

/// One side of the comparison, blocking: the weights and moments in, then
/// [`step_and_read`].
fn one_side(
    backend: &mut dyn Backend,
    tensors: &[(String, Arc<Vec<f32>>)],
    batch: &Batch,
    params: StepParams,
) -> Result<HashMap<usize, Vec<f32>>, String> {
    for (name, values) in tensors {
        backend.write(name, values).map_err(|e| e.to_string())?;
    }
    step_and_read(backend, batch, params).map_err(|e| e.to_string())
}

enum Job {
    /// Waiting for the snapshot of the weights and moments at this step.
    Snapshot,
    Running {
        step: u64,
        program: Program,
        weights: Vec<NamedTensor>,
        batch: Batch,
        params: StepParams,
        cpu: Task<CpuValues>,
        cpu_done: Option<CpuValues>,
        gpu: GpuSide,
    },
    /// Both sides are in; a worker compares them.
    Comparing(Task<SideBySide>),
    Done(SideBySide),
    Failed(String),
}

/// The scene's state; headless runs print what it shows.
#[derive(Resource)]
pub struct CorrectnessView {
    job: Option<Job>,
    /// The run generation and step the job is for.
    for_run: Option<(u64, u64)>,
    pub selected: Option<String>,
    fd: Option<Task<Result<FiniteDifference, String>>>,
    pub checks: Vec<FiniteDifference>,
    pub fd_error: Option<String>,
    textures: HashMap<(usize, &'static str), egui::TextureHandle>,
}

// SAFETY: in the browser (wasm32 without atomics) the app has one thread, so
// nothing is sent or shared between threads; wgpu just does not mark its
// handles `Send` there. Natively the view is `Send + Sync` on its own (the
// backend sits in a `SyncCell`) and this does not apply.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Send for CorrectnessView {}
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Sync for CorrectnessView {}

impl CorrectnessView {
    /// The data behind the view (the app's 💾 Data): every compared tensor's
    /// difference, and the finite-difference checks made so far.
    pub fn data_json(&self) -> serde_json::Value {
        let compared = match &self.job {
            Some(Job::Done(side)) => serde_json::json!({
                "step": side.step,
                "cpu": side.cpu,
                "gpu": side.gpu,
                "tensors": side.tensors.iter().map(|c| &c.diff).collect::<Vec<_>>(),
            }),
            Some(Job::Failed(e)) => serde_json::json!({ "error": e }),
            Some(_) => serde_json::json!({ "state": "comparing" }),
            None => serde_json::Value::Null,
        };
        serde_json::json!({
            "compared": compared,
            "finite_differences": self.checks,
            "finite_difference_error": self.fd_error,
        })
    }
}

impl Default for CorrectnessView {
    fn default() -> Self {
        Self {
            job: None,
            for_run: None,
            selected: None,
            fd: None,
            checks: Vec::new(),
            fd_error: None,
            textures: HashMap::new(),
        }
    }
}

/// What the picture shows now (the headless JSON line's `correctness`).
#[derive(Resource, Debug, Clone, Default)]
pub struct CorrectnessShown {
    pub state: String,
    pub tensors: usize,
    pub selected: Option<String>,
    pub max_rel: Option<f64>,
    pub worst_tensor: Option<String>,
    pub regions: Vec<(String, egui::Rect)>,
}

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.init_resource::<CorrectnessView>()
            .init_resource::<CorrectnessShown>()
            .add_systems(OnEnter(Scene::Correctness), enter)
            .add_systems(OnExit(Scene::Correctness), leave)
            .add_systems(
                Update,
                drive
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Correctness)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                draw.after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Correctness)),
            );
    }
}

fn enter(run: Option<ResMut<Run>>, mut status: ResMut<AppStatus>) {
    if let Some(mut run) = run
        && run.state == RunState::Training
    {
        run.state = RunState::Paused;
        status.info = Some(crate::t!("correctness-paused"));
    }
}

fn leave(
    mut view: ResMut<CorrectnessView>,
    mut wants: ResMut<TensorWants>,
    mut shown: ResMut<CorrectnessShown>,
) {
    wants.set("correctness", Vec::new());
    view.textures.clear();
    *shown = CorrectnessShown::default();
}

/// Moves the comparison along: the snapshot, then both sides, then the diff.
#[allow(clippy::too_many_arguments)]
fn drive(
    run: Option<ResMut<Run>>,
    mut view: ResMut<CorrectnessView>,
    mut wants: ResMut<TensorWants>,
    snapshots: Res<Snapshots>,
    gpu_device: Res<GpuDevice>,
) {
    let Some(mut run) = run else { return };
    if run.state == RunState::Training {
        run.state = RunState::Paused;
    }
    let program = run.program.clone();
    let key = (run.generation, run.step());
    if view.for_run != Some(key) {
        view.for_run = Some(key);
        view.job = Some(Job::Snapshot);
        view.checks.clear();
        view.textures.clear();
    }
    // Finite-difference checks come back from their worker.
    if let Some(task) = view.fd.as_mut()
        && let Some(result) = check_ready(task)
    {
        view.fd = None;
        match result {
            Ok(c) => {
                view.checks.insert(0, c);
                view.fd_error = None;
            }
            Err(e) => view.fd_error = Some(e),
        }
    }
    // Every weight, and the moments of those training updates.
    let names: Vec<String> = program
        .params()
        .flat_map(|id| {
            let t = &program.tensors[id];
            let n = t.name.clone();
            let moments = (!t.is_frozen()).then(|| [format!("adam.m.{n}"), format!("adam.v.{n}")]);
            moments.into_iter().flatten().chain([n])
        })
        .collect();
    match view.job.take() {
        Some(Job::Snapshot) => {
            wants.set("correctness", names.clone());
            let ready = snapshots.latest.as_ref().filter(|s| {
                s.step == run.step() && names.iter().all(|n| s.tensors.contains_key(n))
            });
            let Some(snapshot) = ready else {
                view.job = Some(Job::Snapshot);
                return;
            };
            let Some(gpu_ctx) = gpu_device.context.clone() else {
                view.job =
                    Some(Job::Failed(gpu_device.missing.clone().unwrap_or_else(
                        || "no GPU device is available to the app".into(),
                    )));
                return;
            };
            let Some(trainer) = run.engine.idle_trainer() else {
                view.job = Some(Job::Snapshot);
                return;
            };
            let batch = trainer.peek_next_batch();
            let params = trainer.step_params(trainer.step);
            let step = trainer.step;
            wants.set("correctness", Vec::new());
            let weights = snapshot.params(&program).expect("checked above");
            // The snapshot's values, shared with both workers (no copy).
            let tensors: Arc<Vec<(String, Arc<Vec<f32>>)>> = Arc::new(
                names
                    .iter()
                    .map(|n| (n.clone(), snapshot.tensors[n].clone()))
                    .collect(),
            );
            let gpu = start_gpu_side(gpu_ctx, &program, tensors.clone(), &batch, params);
            let gpu = match gpu {
                Ok(g) => g,
                Err(e) => {
                    view.job = Some(Job::Failed(e));
                    return;
                }
            };
            // The CPU side, on a worker.
            let (cpu_program, cpu_batch) = (program.clone(), batch.clone());
            let cpu = AsyncComputeTaskPool::get().spawn(async move {
                let mut cpu = crate::cpu::CpuBackend::<f32>::new(cpu_program.clone());
                let values = one_side(&mut cpu, &tensors, &cpu_batch, params)?;
                Ok((values, cpu.describe()))
            });
            view.job = Some(Job::Running {
                step,
                program: program.clone(),
                weights,
                batch,
                params,
                cpu,
                cpu_done: None,
                gpu,
            });
        }
        Some(Job::Running {
            step,
            program,
            weights,
            batch,
            params,
            mut cpu,
            mut cpu_done,
            mut gpu,
        }) => {
            if cpu_done.is_none() {
                cpu_done = check_ready(&mut cpu);
            }
            let gpu_done = gpu.poll(&program);
            if !(gpu_done && cpu_done.is_some()) {
                view.job = Some(Job::Running {
                    step,
                    program,
                    weights,
                    batch,
                    params,
                    cpu,
                    cpu_done,
                    gpu,
                });
                return;
            }
            let (cpu_values, gpu_values) = (cpu_done.expect("checked"), gpu.take());
            let job = match (cpu_values, gpu_values) {
                (Err(e), _) | (_, Err(e)) => Job::Failed(e),
                (Ok((cpu_values, cpu_name)), Ok((got, gpu_name))) => {
                    // Comparing every value and pooling the pictures takes
                    // seconds on a big model: a worker does it too.
                    let seed = params.dropout_seed;
                    Job::Comparing(AsyncComputeTaskPool::get().spawn(async move {
                        let mut tensors = Vec::new();
                        let mut ids: Vec<usize> = cpu_values.keys().copied().collect();
                        ids.sort_unstable();
                        for id in ids {
                            let (c, g) =
                                (&cpu_values[&id], got.get(&id).map_or(&[][..], |g| &g[..]));
                            if g.len() != c.len() {
                                continue;
                            }
                            tensors.push(picture_of(&program, id, read_key(&program, id), c, g));
                        }
                        SideBySide {
                            step,
                            tensors,
                            cpu: cpu_name,
                            gpu: gpu_name,
                            weights,
                            batch,
                            dropout_seed: seed,
                        }
                    }))
                }
            };
            view.job = Some(job);
        }
        Some(Job::Comparing(mut task)) => {
            view.job = Some(match check_ready(&mut task) {
                Some(side) => Job::Done(side),
                None => Job::Comparing(task),
            });
        }
        other => view.job = other,
    }
}

/// Starts the GPU side: on a worker natively; in a browser its entries and
/// reads go out now and come back to the frame loop (building the backend
/// there takes a frame: a browser has no thread to build it on).
fn start_gpu_side(
    ctx: crate::gpu::GpuContext,
    program: &Program,
    tensors: Arc<Vec<(String, Arc<Vec<f32>>)>>,
    batch: &Batch,
    params: StepParams,
) -> Result<GpuSide, String> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let (program, batch) = (program.clone(), batch.clone());
        let task = AsyncComputeTaskPool::get().spawn(async move {
            let mut gpu =
                crate::gpu::GpuBackend::new(ctx, program.clone()).map_err(|e| e.to_string())?;
            let values = one_side(&mut gpu, &tensors, &batch, params)?;
            Ok((values, gpu.describe()))
        });
        Ok(GpuSide::Task(task, None))
    }
    #[cfg(target_arch = "wasm32")]
    {
        use crate::correctness::compared;
        use crate::program::Step;
        let mut gpu: Box<dyn Backend> =
            Box::new(crate::gpu::GpuBackend::new(ctx, program.clone()).map_err(|e| e.to_string())?);
        for (name, values) in tensors.iter() {
            gpu.write(name, values).map_err(|e| e.to_string())?;
        }
        let clip = program
            .steps
            .iter()
            .position(|&s| s == Step::ClipGradNorm)
            .expect("every step list clips");
        gpu.load_step(batch, Some(params));
        gpu.run_entries(0..clip);
        let mut reads = Vec::new();
        let mut start = |gpu: &mut Box<dyn Backend>, ids: Vec<usize>| {
            // In chunks of at most READ_CHUNK floats (one staging buffer each).
            let mut chunks: Vec<Vec<usize>> = vec![Vec::new()];
            let mut floats = 0;
            for id in ids {
                let n = program.tensors[id].numel();
                if floats + n > READ_CHUNK && !chunks.last().unwrap().is_empty() {
                    chunks.push(Vec::new());
                    floats = 0;
                }
                chunks.last_mut().unwrap().push(id);
                floats += n;
            }
            for chunk in chunks.into_iter().filter(|c| !c.is_empty()) {
                let names: Vec<&str> = chunk
                    .iter()
                    .map(|&id| program.tensors[id].name.as_str())
                    .collect();
                let read = gpu.start_reads(&names).ok();
                reads.push((chunk, read));
            }
        };
        start(&mut gpu, compared(program, false));
        gpu.run_entries(clip..program.steps.len());
        start(&mut gpu, compared(program, true));
        Ok(GpuSide::Reads {
            backend: SyncCell::new(gpu),
            reads,
            got: HashMap::new(),
        })
    }
}

/// A tensor's difference and pooled pictures: the grid a heatmap shows
/// (rows × columns of the last dimension; at most 256 a side).
fn picture_of(
    program: &Program,
    id: usize,
    read: &'static str,
    cpu: &[f32],
    gpu: &[f32],
) -> Compared {
    let t = &program.tensors[id];
    let diff = TensorDiff::of(program, id, read, cpu, gpu);
    let cols = *t.shape.last().unwrap_or(&1);
    let rows = (t.numel() / cols.max(1)).max(1);
    let (tr, tc) = heatmap::texture_size(rows, cols);
    let abs: Vec<f32> = cpu.iter().zip(gpu).map(|(a, b)| (b - a).abs()).collect();
    Compared {
        id,
        diff,
        grid: (tr, tc),
        source: (rows, cols),
        cpu: heatmap::pool(cpu, rows, cols, tr, tc),
        gpu: heatmap::pool(gpu, rows, cols, tr, tc),
        diff_max: max_pool(&abs, rows, cols, tr, tc),
    }
}

/// The largest value of each texel's block (a difference must not average away).
fn max_pool(
    values: &[f32],
    rows: usize,
    cols: usize,
    out_rows: usize,
    out_cols: usize,
) -> Vec<f32> {
    let mut out = vec![0.0f32; out_rows * out_cols];
    for r in 0..rows {
        let tr = r * out_rows / rows;
        for c in 0..cols {
            let tc = c * out_cols / cols;
            let o = &mut out[tr * out_cols + tc];
            *o = o.max(values[r * cols + c]);
        }
    }
    out
}

const PANEL: egui::Color32 = egui::Color32::from_rgb(22, 25, 33);
const WEAK: egui::Color32 = egui::Color32::from_rgb(150, 156, 168);
const NUMBERS: egui::Color32 = egui::Color32::from_rgb(250, 226, 150);

/// A colour for a relative error: green (≤1e-6) through amber to red (≥1e-3).
fn error_colour(rel: f64) -> egui::Color32 {
    if !rel.is_finite() {
        return egui::Color32::from_rgb(255, 0, 255);
    }
    let u = ((rel.max(1e-9).log10() + 6.0) / 3.0).clamp(0.0, 1.0) as f32;
    let lerp = |a: u8, b: u8| (a as f32 + (b as f32 - a as f32) * u) as u8;
    egui::Color32::from_rgb(lerp(90, 240), lerp(200, 90), lerp(120, 80))
}

#[allow(clippy::too_many_arguments)]
fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    view: ResMut<CorrectnessView>,
    shown: ResMut<CorrectnessShown>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let (Some(area), Some(run)) = (ui_state.central_rect(&ctx), run) else {
        return Ok(());
    };
    let (mut view, mut shown) = (view, shown);
    let program = run.program.clone();
    // The job is taken out while the body borrows it (and the view's other fields).
    let job = view.job.take();
    draw_body(&ctx, area, &program, job.as_ref(), &mut view, &mut shown);
    view.job = job;
    Ok(())
}

fn draw_body(
    ctx: &egui::Context,
    area: egui::Rect,
    program: &Program,
    job: Option<&Job>,
    view: &mut CorrectnessView,
    shown: &mut CorrectnessShown,
) {
    let body = area.shrink2(egui::vec2(14.0, 10.0));
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "correctness-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("correctness-body-layer"),
            ))
            .max_rect(body),
    );
    ui.set_clip_rect(body);
    let mut regions = Vec::new();
    ui.label(
        egui::RichText::new(crate::t!("correctness-title"))
            .size(20.0)
            .strong(),
    );
    let side = match job {
        Some(Job::Done(s)) => s,
        Some(Job::Failed(e)) => {
            ui.label(
                egui::RichText::new(crate::t!("correctness-cannot", error = e.as_str())).size(16.0),
            );
            *shown = CorrectnessShown {
                state: "failed".into(),
                ..Default::default()
            };
            return;
        }
        _ => {
            let what = match job {
                Some(Job::Running { .. }) | Some(Job::Comparing(_)) => {
                    crate::t!("correctness-running")
                }
                _ => crate::t!("correctness-reading"),
            };
            ui.label(egui::RichText::new(what).size(16.0));
            if cfg!(target_arch = "wasm32") {
                ui.label(
                    egui::RichText::new(crate::t!("correctness-web-note"))
                        .size(13.0)
                        .color(WEAK),
                );
            }
            *shown = CorrectnessShown {
                state: "running".into(),
                ..Default::default()
            };
            return;
        }
    };
    let worst = side
        .tensors
        .iter()
        .max_by(|a, b| a.diff.max_rel.total_cmp(&b.diff.max_rel));
    ui.label(
        egui::RichText::new(crate::t!(
            "correctness-summary",
            step = side.step,
            cpu = side.cpu.as_str(),
            gpu = side.gpu.as_str(),
            tensors = side.tensors.len(),
            worst = format!("{:.2e}", worst.map_or(0.0, |w| w.diff.max_rel)),
            name = worst.map_or("—", |w| w.diff.name.as_str()),
        ))
        .size(13.0)
        .color(WEAK),
    );
    ui.add_space(6.0);
    let selected = view
        .selected
        .clone()
        .filter(|n| side.tensors.iter().any(|t| &t.diff.name == n))
        .or_else(|| worst.map(|w| w.diff.name.clone()));
    let list_w = (body.width() * 0.34).clamp(260.0, 460.0);
    let rest = ui.available_rect_before_wrap();
    let list_rect = egui::Rect::from_min_size(rest.min, egui::vec2(list_w, rest.height()));
    let detail_rect =
        egui::Rect::from_min_max(egui::pos2(list_rect.max.x + 14.0, rest.min.y), rest.max);
    // The list: every tensor, coloured by its error.
    let mut list_ui = ui.new_child(egui::UiBuilder::new().max_rect(list_rect));
    let mut pick = None;
    egui::Frame::new()
        .fill(PANEL)
        .corner_radius(6.0)
        .inner_margin(6.0)
        .show(&mut list_ui, |ui| {
            ui.set_min_size(ui.available_size());
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    ui.label(
                        egui::RichText::new(crate::t!("correctness-list-heading"))
                            .size(12.0)
                            .color(WEAK),
                    );
                    for t in &side.tensors {
                        let d = &t.diff;
                        let short = d
                            .name
                            .replace("transformer.", "")
                            .replace("adam.m.", "m·")
                            .replace("adam.v.", "v·")
                            .replace("grad.", "∇");
                        let text = egui::RichText::new(format!(
                            "{:.1e}  {short}  ({})",
                            d.max_rel, d.kind
                        ))
                        .size(13.0)
                        .monospace()
                        .color(error_colour(d.max_rel));
                        let label =
                            egui::Button::selectable(selected.as_ref() == Some(&d.name), text)
                                .wrap_mode(egui::TextWrapMode::Truncate);
                        if ui.add(label).on_hover_text(&d.name).clicked() {
                            pick = Some(d.name.clone());
                        }
                    }
                });
        });
    regions.push(("list".to_string(), list_rect));
    if let Some(p) = pick {
        view.selected = Some(p);
    }
    // The chosen tensor: three heatmaps and the numbers.
    let mut detail = ui.new_child(egui::UiBuilder::new().max_rect(detail_rect));
    let mut clicked: Option<(String, usize)> = None;
    if let Some(t) = side
        .tensors
        .iter()
        .find(|t| Some(&t.diff.name) == selected.as_ref())
    {
        let d = &t.diff;
        detail.label(egui::RichText::new(&d.name).size(18.0).strong());
        detail.label(
            egui::RichText::new(crate::t!(
                "correctness-detail",
                kind = d.kind.to_string(),
                shape = format!("{:?}", d.shape),
                read = d.read.replace('_', " "),
                abs = format!("{:.3e}", d.max_abs),
                rel = format!("{:.3e}", d.max_rel),
                l2 = format!("{:.3e}", d.rel_l2),
                worst = d.worst.to_string(),
                cpu = d.cpu_at_worst.to_string(),
                gpu = d.gpu_at_worst.to_string(),
            ))
            .size(14.0)
            .color(NUMBERS),
        );
        let w = (detail.available_width() - 24.0) / 3.0;
        let (tr, tc) = t.grid;
        let h = (w * tr as f32 / tc as f32)
            .min(detail.available_height() * 0.55)
            .max(24.0);
        let half = heatmap::abs_percentile(&t.cpu, 0.99).max(heatmap::abs_percentile(&t.gpu, 0.99));
        let dmax = t.diff_max.iter().fold(0.0f32, |m, &x| m.max(x));
        detail.horizontal_top(|ui| {
            for (name, values, diverging) in [
                ("cpu", &t.cpu, true),
                ("gpu", &t.gpu, true),
                ("|gpu − cpu|", &t.diff_max, false),
            ] {
                ui.vertical(|ui| {
                    ui.label(egui::RichText::new(name).size(14.0));
                    let key = (
                        t.id,
                        match name {
                            "cpu" => "cpu",
                            "gpu" => "gpu",
                            _ => "diff",
                        },
                    );
                    let texture = view.textures.entry(key).or_insert_with(|| {
                        let rgba: Vec<u8> = if diverging {
                            heatmap::colorize(values, half)
                        } else {
                            values
                                .iter()
                                .flat_map(|&x| {
                                    heatmap::sequential(if dmax > 0.0 { x / dmax } else { 0.0 })
                                })
                                .collect()
                        };
                        ctx.load_texture(
                            format!("correctness-{}-{}", t.id, key.1),
                            egui::ColorImage::from_rgba_unmultiplied([tc, tr], &rgba),
                            egui::TextureOptions::NEAREST,
                        )
                    });
                    let response = ui.add(
                        egui::Image::new((texture.id(), egui::vec2(w, h)))
                            .sense(egui::Sense::click()),
                    );
                    regions.push((format!("heatmap:{name}"), response.rect));
                    if let Some(p) = response.hover_pos().or(response.interact_pointer_pos()) {
                        let (sr, sc) = t.source;
                        let r =
                            (((p.y - response.rect.min.y) / h * sr as f32) as usize).min(sr - 1);
                        let c =
                            (((p.x - response.rect.min.x) / w * sc as f32) as usize).min(sc - 1);
                        let index = r * sc + c;
                        let kind = program.tensors[t.id].kind;
                        let param = match kind {
                            TensorKind::Param => Some(d.name.clone()),
                            TensorKind::Grad => program
                                .params()
                                .find(|&p| program.tensors[p].grad == Some(t.id))
                                .map(|p| program.tensors[p].name.clone()),
                            _ => None,
                        };
                        let hint = if param.is_some() {
                            crate::t!("correctness-fd-click")
                        } else {
                            crate::t!("correctness-fd-which")
                        };
                        response.clone().on_hover_text(crate::t!(
                            "correctness-cell-hover",
                            r = r,
                            c = c,
                            index = index,
                            hint = hint,
                        ));
                        if response.clicked()
                            && let Some(param) = param
                        {
                            clicked = Some((param, index));
                        }
                    }
                });
            }
        });
        if d.read == "after_adamw" {
            detail.label(
                egui::RichText::new(crate::t!("correctness-after-adamw"))
                    .size(13.0)
                    .color(WEAK),
            );
        }
        detail.add_space(8.0);
        detail.label(
            egui::RichText::new(crate::t!("correctness-fd-title"))
                .size(15.0)
                .strong(),
        );
        if view.fd.is_some() {
            detail.label(crate::t!("correctness-checking"));
        }
        if let Some(e) = &view.fd_error {
            detail.colored_label(egui::Color32::from_rgb(255, 110, 100), e);
        }
        for c in &view.checks {
            detail.label(
                egui::RichText::new(crate::t!(
                    "correctness-fd-line",
                    param = c.param.trim_start_matches("transformer."),
                    index = c.index,
                    analytic = format!("{:.6e}", c.analytic),
                    numeric = format!("{:.6e}", c.numeric),
                    h = format!("{:.0e}", c.h),
                    err = format!("{:.1e}", c.rel_err),
                ))
                .size(14.0)
                .monospace(),
            );
        }
    }
    regions.push(("detail".to_string(), detail_rect));
    if let Some((param, index)) = clicked
        && view.fd.is_none()
    {
        let (program, weights, batch, seed) = (
            program.clone(),
            side.weights.clone(),
            side.batch.clone(),
            side.dropout_seed,
        );
        view.fd = Some(AsyncComputeTaskPool::get().spawn(async move {
            finite_difference(&program, &weights, &batch, seed, &param, index)
        }));
    }
    *shown = CorrectnessShown {
        state: "done".into(),
        tensors: side.tensors.len(),
        selected: selected.clone(),
        max_rel: worst.map(|w| w.diff.max_rel),
        worst_tensor: worst.map(|w| w.diff.name.clone()),
        regions: regions
            .into_iter()
            .map(|(n, r)| (n, r * ctx.pixels_per_point()))
            .collect(),
    };
}
