//! The browser build's side of its page (`web/index.html`): how the app
//! starts on wasm32, the renderer it asks for (WebGPU, or WebGL2 where the
//! browser has no WebGPU, training then on the CPU), files the page hands in
//! (file input and drag-and-drop), checkpoints saved as downloads, the view
//! kept in the URL fragment ([`super::link`]), and a status line the page
//! shows and the browser test reads.
//!
//! The page defines `window.tinygptHost` before it loads the wasm; the
//! functions below are its methods.

use super::browser::{
    get_fragment, has_webgpu, report, set_fragment, take_file_bytes, take_file_name,
};
use super::link::Link;
use super::training::{AppStatus, BackendChoice, Run, RunSettings, RunState, Snapshots};
use super::{AppOptions, files};
use crate::model::config::{BUILTIN_PRESETS, Config, DEFAULT_PRESET};
use bevy::prelude::*;

/// The wasm entry: reads the link, starts the app in the page's canvas.
pub fn main() {
    let webgpu = has_webgpu();
    let (link, problems) = Link::parse(&get_fragment());
    // Without WebGPU the CPU trains in one thread: start with the preset that
    // keeps frames smooth there unless the link names one.
    let preset = link
        .preset
        .clone()
        .unwrap_or_else(|| if webgpu { DEFAULT_PRESET } else { "tiny" }.to_string());
    let config = Config::load(&preset).expect("a built-in preset parses (tested)");
    let mut settings = RunSettings::from_preset(&preset, config);
    if let Some(seed) = link.seed {
        settings.seed = seed;
    }
    if let Some(backend) = link.backend {
        settings.backend = backend;
    }
    // The plain address opens as the native app does: a trained model
    // predicting, in 3D (the shipped small with WebGPU;
    // without it, the shipped tiny, which the page's one CPU thread keeps
    // up with).
    let bare = link.is_bare();
    // The page fetches it (the wasm holds no checkpoint).
    let opening = bare.then(|| if webgpu { "small" } else { "tiny" }.to_string());
    let mut app = super::build(AppOptions {
        settings,
        scene: link.scene.unwrap_or(if bare {
            super::scenes::Scene::Walk
        } else {
            Default::default()
        }),
        step_op: 0,
        flash_pass: crate::flash::Pass::Forward,
        flash_visit: None,
        bench: link.bench.clone(),
        kernels: None,
        walk_beat: None,
        walk_zoom: None,
        timeline_step: None,
        train: link.train,
        wide: false,
        lesson: link.lesson.as_ref().and_then(|(name, step)| {
            let lesson = crate::lesson::Lesson::load(name).ok()?;
            let step = (*step).min(lesson.steps.len() - 1);
            Some((name.clone(), lesson, step))
        }),
        headless: None,
        checkpoint: None,
        adapter: None,
        gallery: link.model.clone().or(opening),
        locked: link.locked,
        language: link.lang.unwrap_or_default(),
        class: link
            .class
            .clone()
            .map(|c| (c, super::browser::class_socket_url())),
    });
    if let Some(view) = link.view {
        app.world_mut().resource_mut::<Snapshots>().set_view(view);
    }
    if let Some(theme) = link.theme {
        app.world_mut().insert_resource(theme);
    }
    app.world_mut()
        .resource_mut::<AppStatus>()
        .errors
        .extend(problems);
    app.add_plugins(WebPlugin);
    app.run();
}

pub struct WebPlugin;

impl Plugin for WebPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<PageState>().add_systems(
            Update,
            (
                files_from_page.in_set(super::schedule::AppSystems::Input),
                (keep_link, gather_scene_fields, report_to_page)
                    .chain()
                    .in_set(super::schedule::AppSystems::Scene),
            ),
        );
    }
}

/// What was last written to the page.
#[derive(Resource, Default)]
struct PageState {
    fragment: String,
    report: String,
    frames: u64,
    /// The scenes' fields of the report, from the registry this frame.
    scene_fields: Vec<(&'static str, serde_json::Value)>,
}

/// Asks the registry for the scenes' fields of the page's report.
fn gather_scene_fields(world: &mut World) {
    let fields = super::registry::SceneRegistry::fields(world, super::registry::Report::Page);
    world.resource_mut::<PageState>().scene_fields = fields;
}

fn files_from_page(
    mut out: MessageWriter<super::training::RunCommand>,
    mut status: ResMut<AppStatus>,
    workshop: Res<super::workshop::Workshop>,
) {
    while let Some(name) = take_file_name() {
        let bytes = take_file_bytes();
        if workshop.locked {
            status.error(super::workshop::no_files());
            continue;
        }
        match files::command_for(&name, bytes) {
            Ok(command) => {
                out.write(command);
            }
            Err(e) => status.error(e),
        }
    }
}

/// Writes the Run panel's preset and seed, the scene and the heatmap view
/// to the fragment when they change.
fn keep_link(
    lesson: Res<super::lesson::LessonPlayer>,
    settings: Res<RunSettings>,
    scene: Res<State<super::scenes::Scene>>,
    snapshots: Res<Snapshots>,
    run: Option<Res<Run>>,
    mut page: ResMut<PageState>,
    workshop: Res<super::workshop::Workshop>,
    language: Res<super::language::AppLanguage>,
    class: Res<super::class::ClassClient>,
    theme: Res<super::canvas::CanvasTheme>,
) {
    let link = Link {
        // A preset loaded from a file cannot travel in a link.
        preset: BUILTIN_PRESETS
            .iter()
            .any(|(id, _)| *id == settings.preset)
            .then(|| settings.preset.clone()),
        seed: Some(settings.seed),
        scene: Some(*scene.get()),
        view: Some(snapshots.view),
        backend: Some(settings.backend).filter(|b| *b != BackendChoice::Auto),
        train: run.as_ref().is_some_and(|r| r.state == RunState::Training),
        // A bench runs once, when the link opens; reloading does not repeat it.
        bench: None,
        lesson: lesson
            .lesson
            .as_ref()
            .map(|(name, _)| (name.clone(), lesson.step)),
        model: run.as_ref().and_then(|r| r.gallery.clone()),
        locked: workshop.locked,
        lang: Some(language.current),
        // In a class, its code and the seat: a reload rejoins in it.
        class: class.link.clone(),
        theme: Some(*theme),
    };
    let fragment = link.fragment();
    if fragment != page.fragment {
        set_fragment(&fragment);
        page.fragment = fragment;
    }
}

/// The app's state for the page: the loading screen goes when the first
/// report arrives; the browser test waits on `step` and `loss`.
fn report_to_page(
    run: Option<Res<Run>>,
    status: Res<AppStatus>,
    sample: Res<super::sample::SampleState>,
    mut page: ResMut<PageState>,
    ui_state: Res<super::ui::UiState>,
    (scene, lesson, workshop, shown, probes, language, class): (
        Res<State<super::scenes::Scene>>,
        Res<super::lesson::LessonPlayer>,
        Res<super::workshop::Workshop>,
        Res<super::workshop::PanelsShown>,
        Res<super::training::Probes>,
        Res<super::language::AppLanguage>,
        Res<super::class::ClassClient>,
    ),
) {
    page.frames += 1;
    let Some(run) = run else { return };
    let last = run.last;
    let sample_text = sample.text.lock().map(|t| t.clone()).unwrap_or_default();
    let mut value = serde_json::json!({
        "frames": page.frames,
        "backend": run.backend_label.split(' ').next().unwrap_or(""),
        "backend_label": run.backend_label,
        "preset": run.preset,
        "state": format!("{:?}", run.state),
        "step": run.step(),
        // The step of the last host copy of a GPU run (what a lost device
        // leaves), if one was read back.
        "recovery_step": run.recovery.as_ref().map(|c| c.step),
        "loss": last.map(|m| m.loss as f64).filter(|l| l.is_finite()),
        "loss_finite": last.map(|m| m.loss.is_finite()),
        "val_loss": last.and_then(|m| m.val_loss),
        "ms_per_step": last.map(|m| m.ms),
        // Threads of the page's trainer worker while it holds the run (a
        // CPU run in a cross-origin isolated page; src/app/remote.rs).
        "worker_threads": run.engine.worker_threads(),
        // The run's time-lapse: how many frames it has recorded so far.
        "timelapse_frames": run.engine.timelapse().map_or(0, |t| t.frames.len()),
        "corpus": run.corpus_name,
        "gallery": run.gallery,
        "ui": shown.to_json(*workshop),
        "language": language.current.code(),
        // The attention weights the Attention scene draws: the step whose
        // weights they saw and the bytes they cover.
        "attention": probes.latest.as_ref().map(|(step, r)| serde_json::json!({ "step": step, "n": r.n() })),
        "sample": { "text": sample_text, "from_step": sample.from_step, "error": sample.error },
        "notice": run.notice,
        "info": status.info,
        "errors": status.errors,
        "scene": scene.get().key(),
        "lesson": lesson.lesson.as_ref().map(|(name, l)| serde_json::json!({
            "name": name,
            "step": lesson.step + 1,
            "steps": l.steps.len(),
            "narration_drawn": lesson.narration_rect.is_some(),
            "chosen": lesson.chosen,
        })),
        "class": super::class::report(&class),
        "reduced_motion": ui_state.reduced_motion,
    });
    // The Speedup scene's bench and the CPU-vs-GPU scene's comparison.
    for (key, field) in std::mem::take(&mut page.scene_fields) {
        value[key] = field;
    }
    // Frames change every time; send only when something else did, or
    // once a second.
    let mut key = value.clone();
    key["frames"] = serde_json::Value::Null;
    let key = key.to_string();
    if key != page.report || page.frames % 60 == 0 {
        report(&value.to_string());
        page.report = key;
    }
}
