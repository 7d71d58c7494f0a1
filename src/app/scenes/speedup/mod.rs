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
//! redraws at 10 Hz meanwhile. In a browser both backends are measured on
//! the page's one thread without ever waiting ([`crate::bench::stepped`]:
//! CPU steps in chunks between frames, GPU steps submitted and timed by
//! timestamps read back asynchronously), so the page keeps drawing.

mod curve;
mod files;
mod kernels;
mod measure;
mod report;

use curve::draw;
use files::{SaveRefused, load, save};
use kernels::kernels_view;
#[cfg(not(target_arch = "wasm32"))]
use measure::quiet_while_measuring;
use measure::{BenchJob, add_result, collect, start, time_kernels};

use super::Scene;
use crate::app::lesson::LessonAction;
use crate::app::training::{AppStatus, GpuDevice, Run, RunState};
use crate::app::ui::UiState;
use crate::bench::kernels::KernelTimes;
use crate::bench::report as bench_report;
use crate::bench::{BenchOptions, BenchResult};
use crate::lesson::Action;
use crate::model::config::{BUILTIN_PRESETS, Config};
use bevy::prelude::*;
use bevy::tasks::Task;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use egui_plot::{Legend, Line, Plot, PlotPoints, Points};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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
    /// Also the GPU in mixed precision (the tensor cores), a series of its
    /// own (`gpu-mixed`), where the device has them.
    pub mixed: bool,
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
        self.kernels_job = Some(crate::app::schedule::spawn_blocking_work(time_kernels(
            preset, ctx,
        )));
    }
}

impl Default for SpeedupView {
    fn default() -> Self {
        Self {
            // In a browser a CPU step of medium holds the page's thread for
            // a large part of a second: tiny and small there.
            presets: BUILTIN_PRESETS
                .iter()
                .map(|(id, _)| {
                    let on = match *id {
                        "tiny" | "small" => true,
                        "medium" => !cfg!(target_arch = "wasm32"),
                        _ => false,
                    };
                    (id.to_string(), on)
                })
                .collect(),
            cpu: true,
            gpu: true,
            mixed: false,
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

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        // Presets to measure at once (`--bench`), and the preset whose
        // kernels to time at once (`--kernels`).
        let start = app
            .world()
            .get_resource::<super::SceneStart>()
            .cloned()
            .unwrap_or_default();
        app.insert_resource(
            SpeedupView::starting(start.bench.as_deref()).with_kernels(start.kernels.as_deref()),
        )
        .init_resource::<SpeedupShown>()
        .add_observer(lesson_action)
        .add_systems(
            Update,
            collect
                .in_set(crate::app::schedule::AppSystems::Scene)
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

/// A lesson step's bench of some presets, or its per-kernel timing of one
/// (not measured again when its results are already here).
fn lesson_action(event: On<LessonAction>, mut speedup: ResMut<SpeedupView>) {
    match &event.0 {
        Action::Bench(presets) => {
            for (id, on) in &mut speedup.presets {
                *on = presets.contains(id);
            }
            speedup.tab = SpeedupTab::Curve;
            let have = presets
                .iter()
                .all(|p| speedup.results.iter().any(|r| &r.preset == p));
            if !have && !speedup.running() {
                speedup.start = true;
            }
        }
        Action::Kernels(preset) => {
            speedup.tab = SpeedupTab::Kernels;
            // A step back or forth does not time the same preset again.
            let have = speedup
                .kernels
                .as_ref()
                .is_some_and(|k| k.as_ref().is_ok_and(|k| &k.preset == preset));
            if !have && !speedup.running() {
                speedup.kernels_preset = preset.clone();
                speedup.kernels_start = true;
            }
        }
        _ => {}
    }
}
