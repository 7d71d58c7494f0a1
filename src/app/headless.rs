//! Headless mode for checks: the real app without a window, rendering into
//! an offscreen image on whatever adapter there is (lavapipe in CI). After N
//! frames it saves the last frame as a PNG and prints one JSON line (frames,
//! frame time, steps trained, losses, how often a heatmap changed, the
//! scene, where its regions (layer blocks, attention maps) are in the
//! picture, and what the Attention scene's last probe saw), then exits.

use super::canvas::{BACKGROUND, HeadlessTarget, SceneCamera, SceneRegion, world_rect_to_px};
use super::registry::{Regions, Report, SceneRegistry};
use super::scenes::Scene;
use super::training::{Probes, Run, StepRecord};
use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, ScreenshotCaptured};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// What the headless run does.
#[derive(Resource, Clone, Debug)]
pub struct HeadlessConfig {
    pub frames: u32,
    pub screenshot: Option<PathBuf>,
    pub width: u32,
    pub height: u32,
    /// Frames per second to pace at, like a display's refresh (0: as fast
    /// as possible, which floods the GPU queue with frames).
    pub fps: f64,
    /// Before the screenshot, export this region of the scene (or `view`,
    /// all of it) through the app's PNG export, as its button does.
    pub export: Option<String>,
    /// `--force`: the checkpoint export may replace a file this app did not write.
    pub force: bool,
}

#[derive(Resource, Default)]
struct HeadlessState {
    frames: u32,
    /// Sum of frame intervals after the first frame (ms), how many, and the
    /// longest.
    frame_ms: f64,
    timed: u32,
    max_frame_ms: f64,
    /// 0 not asked, 1 capturing, 2 saved, 3 failed.
    capture: Arc<AtomicU8>,
    capture_error: Arc<std::sync::Mutex<Option<String>>>,
    /// The scenes' egui regions and their fields of the line, gathered
    /// from the registry as the run nears its end.
    scene_regions: Regions,
    scene_fields: Vec<(&'static str, serde_json::Value)>,
    /// The export of `--export` was asked for.
    export_asked: bool,
    /// `--export` named no region of the scene: what to say.
    export_refused: Option<String>,
    done: bool,
}

pub struct HeadlessPlugin(pub HeadlessConfig);

impl Plugin for HeadlessPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.0.clone())
            .init_resource::<HeadlessState>()
            .add_systems(Last, (gather_scene_parts, count_frames).chain());
    }
}

/// Asks the registry for the scenes' regions and fields once the run is
/// due to end (a region to export is looked up then, the line written after).
fn gather_scene_parts(world: &mut World) {
    let due = {
        let state = world.resource::<HeadlessState>();
        !state.done && state.frames + 1 >= world.resource::<HeadlessConfig>().frames
    };
    if !due {
        return;
    }
    let regions = SceneRegistry::regions(world);
    let fields = SceneRegistry::fields(world, Report::Headless);
    let mut state = world.resource_mut::<HeadlessState>();
    state.scene_regions = regions;
    state.scene_fields = fields;
}

#[allow(clippy::too_many_arguments)]
fn count_frames(
    mut commands: Commands,
    config: Res<HeadlessConfig>,
    target: Res<HeadlessTarget>,
    time: Res<Time<Real>>,
    mut state: ResMut<HeadlessState>,
    run: Option<Res<Run>>,
    records: Query<&StepRecord>,
    regions: Query<&SceneRegion>,
    scene: Res<State<Scene>>,
    probes: Res<Probes>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    mut data: (
        MessageWriter<super::data::ExportData>,
        MessageWriter<super::data::ExportLossChart>,
        MessageWriter<super::training::RunCommand>,
    ),
    (mut exit, mut export, exports, lesson, status, ui_state): (
        MessageWriter<AppExit>,
        MessageWriter<super::export::ExportPng>,
        Res<super::export::ExportResults>,
        Res<super::lesson::LessonPlayer>,
        Res<super::training::AppStatus>,
        Res<super::ui::state::UiState>,
    ),
    (workshop, shown, language, class): (
        Res<super::workshop::Workshop>,
        Res<super::workshop::PanelsShown>,
        Res<super::language::AppLanguage>,
        Res<super::class::ClassClient>,
    ),
) {
    if state.done {
        return;
    }
    state.frames += 1;
    if state.frames > 1 {
        let ms = time.delta_secs_f64() * 1e3;
        state.frame_ms += ms;
        state.max_frame_ms = state.max_frame_ms.max(ms);
        state.timed += 1;
    }
    // The picture waits for the language asked for and its font (a few
    // frames; the JSON line says which language it got if it never came).
    let language_ready = (language.wanted.is_none()
        && (!language.current.needs_cjk_font() || language.cjk_font_ready()))
        || state.frames > config.frames + 600;
    if state.frames < config.frames || !language_ready {
        return;
    }
    if let Some(name) = &config.export
        && !state.export_asked
    {
        state.export_asked = true;
        let found = state
            .scene_regions
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| [r.min.x, r.min.y, r.max.x, r.max.y]);
        if name == "data" {
            data.0.write(super::data::ExportData);
            return;
        }
        if name == "loss-chart" {
            data.1.write(super::data::ExportLossChart);
            return;
        }
        if name == "checkpoint" {
            // As the run panel's Save button does, to its path.
            data.2.write(super::training::RunCommand::SaveCheckpoint {
                path: ui_state.checkpoint_path.trim().into(),
                replace: config.force,
            });
            return;
        }
        if name == "view" || found.is_some() {
            export.write(super::export::ExportPng {
                name: format!("{}-{name}", scene.get().key()),
                rect: found,
            });
            return;
        }
        let mut regions: Vec<&str> = state
            .scene_regions
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        regions.extend(["view", "data", "loss-chart", "checkpoint"]);
        let message = format!(
            "--export {name}: the {} scene has no region of that name; give one of {}",
            scene.get().key(),
            regions.join(", ")
        );
        *state.capture_error.lock().unwrap() = Some(message.clone());
        state.export_refused = Some(message);
    }
    if state.export_asked && (exports.pending > 0 || run.as_ref().is_some_and(|r| r.saving())) {
        return;
    }
    let capture = state.capture.load(Ordering::Acquire);
    if let Some(path) = &config.screenshot
        && capture == 0
    {
        state.capture.store(1, Ordering::Release);
        let (flag, error, path) = (
            state.capture.clone(),
            state.capture_error.clone(),
            path.clone(),
        );
        commands.spawn(Screenshot::image(target.0.clone())).observe(
            move |captured: On<ScreenshotCaptured>| {
                let result = captured
                    .image
                    .clone()
                    .try_into_dynamic()
                    .map_err(|e| e.to_string())
                    .and_then(|img| {
                        // Encoded here, then written through a temporary
                        // file (never into a special file).
                        let mut png = Vec::new();
                        img.to_rgba8()
                            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                            .map_err(|e| e.to_string())?;
                        crate::output::write_atomic(&path, &png).map_err(|e| e.to_string())
                    });
                match result {
                    Ok(()) => flag.store(2, Ordering::Release),
                    Err(e) => {
                        *error.lock().unwrap() = Some(format!(
                            "cannot save the screenshot to {}: {e}",
                            path.display()
                        ));
                        flag.store(3, Ordering::Release);
                    }
                }
            },
        );
        return;
    }
    if capture == 1 {
        return;
    }
    state.done = true;
    let mut records: Vec<&StepRecord> = records.iter().collect();
    records.sort_by_key(|r| r.step);
    // Where a world rectangle is in the picture: world_to_viewport counts
    // from the target's corner (it includes the viewport's offset), in
    // logical pixels.
    let to_px = |name: &str, rect: Rect| -> Option<serde_json::Value> {
        let (camera, transform) = cameras.single().ok()?;
        let rect = world_rect_to_px(camera, transform, rect)?;
        Some(serde_json::json!({ "name": name, "rect": rect }))
    };
    let mut regions: Vec<&SceneRegion> = regions.iter().collect();
    regions.sort_by(|a, b| a.name.cmp(&b.name));
    let mut regions_px: Vec<serde_json::Value> = regions
        .iter()
        .filter_map(|r| to_px(&r.name, r.rect))
        .collect();
    // Regions the scenes drew with egui, already in pixels.
    regions_px.extend(state.scene_regions.iter().map(|(name, r)| {
        serde_json::json!({ "name": name, "rect": [r.min.x.round(), r.min.y.round(), r.max.x.round(), r.max.y.round()] })
    }));
    if let Some(r) = lesson.narration_rect {
        regions_px.push(serde_json::json!({ "name": "narration", "rect": [r.min.x.round(), r.min.y.round(), r.max.x.round(), r.max.y.round()] }));
    }
    let lesson_line = lesson.lesson.as_ref().map(|(name, l)| {
        serde_json::json!({
            "name": name,
            "title": l.title,
            "step": lesson.step + 1,
            "steps": l.steps.len(),
            "step_title": l.steps[lesson.step].title,
            "scene": l.steps[lesson.step].scene,
        })
    });
    let attention = probes.latest.as_ref().map(|(step, r)| {
        serde_json::json!({
            "step": step,
            "n": r.n(),
            "layers": r.blocks,
            "heads": r.n_head,
            "tokens": r.tokens,
        })
    });
    let bg = BACKGROUND.to_srgba();
    let (steps, ms_per_step) = run.as_ref().map_or((0, None), |r| {
        let e = &r.engine;
        let ms = e.started.zip(e.last_step_at).map(|(t0, t1)| {
            t1.duration_since(t0).as_secs_f64() * 1e3 / e.steps_since_start.max(1) as f64
        });
        (r.step(), ms)
    });
    let mut errors = status.errors.clone();
    if let Some(path) = &status.confirm_replace {
        let message = format!(
            "checkpoint not saved: {} exists and this app did not write it; add --force to replace it",
            path.display()
        );
        eprintln!("error: {message}");
        errors.push(message);
    }
    let mut line = serde_json::json!({
        "frames": state.frames,
        "mean_frame_ms": state.frame_ms / state.timed.max(1) as f64,
        "max_frame_ms": state.max_frame_ms,
        "fps_cap": config.fps,
        "steps": steps,
        "train_ms_per_step": ms_per_step,
        "last_loss": records.last().map(|r| r.loss),
        "losses": records.iter().map(|r| r.loss).collect::<Vec<_>>(),
        "val_losses": records.iter().filter_map(|r| r.val_loss.map(|v| [r.step as f32, v])).collect::<Vec<_>>(),
        "backend": run.as_ref().map(|r| r.backend_label.clone()),
        "lab": run.as_ref().map(|r| r.config().lab.describe()),
        "lr": run.as_ref().map(|r| r.config().lr),
        "notice": run.as_ref().and_then(|r| r.notice.clone()),
        "scene": scene.get().key(),
        "regions": regions_px,
        "attention": attention,
        "lesson": lesson_line,
        "ui": shown.to_json(*workshop),
        "class": super::class::report(&class),
        "language": language.current.code(),
        "errors": errors,
        "presenter": ui_state.presenter,
        "background": [(bg.red * 255.0).round(), (bg.green * 255.0).round(), (bg.blue * 255.0).round()],
        "width": config.width,
        "height": config.height,
        "screenshot": config.screenshot.as_ref().map(|p| p.display().to_string()),
        "screenshot_error": state.capture_error.lock().unwrap().clone(),
        "exports": exports.done.iter().map(|r| match r {
            Ok(path) => serde_json::json!({ "path": path }),
            Err(e) => serde_json::json!({ "error": e }),
        }).collect::<Vec<_>>(),
    });
    // What the scenes add: the Model scene's blocks and heatmap updates,
    // the Step, Flash, CPU-vs-GPU and Speedup scenes' state.
    for (key, value) in std::mem::take(&mut state.scene_fields) {
        line[key] = value;
    }
    println!("{line}");
    // A save that waited for a confirmation headless cannot give.
    // An export that was not written fails the command, saying why.
    let export_errors: Vec<String> = state
        .export_refused
        .iter()
        .cloned()
        .chain(
            exports
                .done
                .iter()
                .filter_map(|r| r.as_ref().err().cloned()),
        )
        .chain(status.save_failures.iter().cloned())
        .collect();
    for e in &export_errors {
        eprintln!("error: {e}");
    }
    let failed = capture == 3 || status.confirm_replace.is_some() || !export_errors.is_empty();
    exit.write(if failed {
        AppExit::error()
    } else {
        AppExit::Success
    });
}
