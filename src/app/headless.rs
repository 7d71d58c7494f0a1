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
    /// `--press`: keys pressed after `frames`, one every other frame (a
    /// keyboard-only check): names as [`key_named`] reads them.
    pub press: Vec<String>,
    /// `--touch`: gestures of fingers on the screen after the keys, one
    /// after another, [`TOUCH_FRAMES`] frames each.
    pub touch: Vec<Gesture>,
}

/// A gesture `--touch` makes, in window points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gesture {
    /// `tap:X,Y`: one finger down and up.
    Tap(Vec2),
    /// `drag:X0,Y0,X1,Y1`: one finger from one point to the other.
    Drag(Vec2, Vec2),
    /// `pinch:X,Y,FROM,TO`: two fingers either side of (X, Y), level,
    /// from FROM points apart to TO.
    Pinch(Vec2, f32, f32),
}

/// Frames a `--touch` gesture takes: down, moves, up.
pub const TOUCH_FRAMES: u32 = 10;

impl Gesture {
    /// Reads `tap:X,Y`, `drag:X0,Y0,X1,Y1` or `pinch:X,Y,FROM,TO`.
    pub fn parse(text: &str) -> Result<Gesture, String> {
        let usage = || {
            format!("{text:?} is not a gesture --touch knows; give tap:X,Y, drag:X0,Y0,X1,Y1 or pinch:X,Y,FROM,TO (window points)")
        };
        let (kind, numbers) = text.split_once(':').ok_or_else(usage)?;
        let n: Vec<f32> = numbers
            .split(',')
            .map(|v| v.trim().parse::<f32>().ok().filter(|v| v.is_finite() && *v >= 0.0))
            .collect::<Option<_>>()
            .ok_or_else(usage)?;
        match (kind, n.as_slice()) {
            ("tap", [x, y]) => Ok(Gesture::Tap(Vec2::new(*x, *y))),
            ("drag", [x0, y0, x1, y1]) => Ok(Gesture::Drag(Vec2::new(*x0, *y0), Vec2::new(*x1, *y1))),
            ("pinch", [x, y, from, to]) if *from > 0.0 && *to > 0.0 => Ok(Gesture::Pinch(Vec2::new(*x, *y), *from, *to)),
            _ => Err(usage()),
        }
    }

    /// The fingers (id, position) at frame `f` of the gesture, from
    /// 0 (down) to [`TOUCH_FRAMES`] - 1 (up).
    pub fn fingers(&self, f: u32) -> Vec<(u64, Vec2)> {
        let t = f.min(TOUCH_FRAMES - 2) as f32 / (TOUCH_FRAMES - 2) as f32;
        match *self {
            Gesture::Tap(at) => vec![(1, at)],
            Gesture::Drag(from, to) => vec![(1, from.lerp(to, t))],
            Gesture::Pinch(at, from, to) => {
                let half = (from + (to - from) * t) / 2.0;
                vec![(1, at - Vec2::X * half), (2, at + Vec2::X * half)]
            }
        }
    }
}

impl HeadlessConfig {
    /// The frame the run ends after: `frames`, then the keys, then a few
    /// frames for what they did to settle.
    pub fn end_frame(&self) -> u32 {
        let settle = |n: u32| if n == 0 { 0 } else { n + 4 };
        self.touch_frame() + settle(TOUCH_FRAMES * self.touch.len() as u32)
    }

    /// The frame the first `--touch` gesture starts on: after the keys.
    fn touch_frame(&self) -> u32 {
        if self.press.is_empty() {
            self.frames
        } else {
            self.frames + 2 * self.press.len() as u32 + 4
        }
    }
}

/// A key by the name `--press` takes: a `KeyCode` name (`Enter`, `Tab`,
/// `ArrowLeft`, `F6`, `Digit1`, `KeyR`…), with `Shift+` before it for
/// Shift held.
pub fn key_named(name: &str) -> Option<(bool, KeyCode, bevy::input::keyboard::Key)> {
    use bevy::input::keyboard::Key;
    let (shift, name) = match name.strip_prefix("Shift+") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    let (code, key) = match name {
        "Enter" => (KeyCode::Enter, Key::Enter),
        "Escape" => (KeyCode::Escape, Key::Escape),
        "Tab" => (KeyCode::Tab, Key::Tab),
        "Space" => (KeyCode::Space, Key::Space),
        "ArrowLeft" => (KeyCode::ArrowLeft, Key::ArrowLeft),
        "ArrowRight" => (KeyCode::ArrowRight, Key::ArrowRight),
        "ArrowUp" => (KeyCode::ArrowUp, Key::ArrowUp),
        "ArrowDown" => (KeyCode::ArrowDown, Key::ArrowDown),
        "Home" => (KeyCode::Home, Key::Home),
        "End" => (KeyCode::End, Key::End),
        "PageUp" => (KeyCode::PageUp, Key::PageUp),
        "PageDown" => (KeyCode::PageDown, Key::PageDown),
        "F5" => (KeyCode::F5, Key::F5),
        "F6" => (KeyCode::F6, Key::F6),
        "F9" => (KeyCode::F9, Key::F9),
        "F10" => (KeyCode::F10, Key::F10),
        "F11" => (KeyCode::F11, Key::F11),
        // `Shift+Slash` on a US keyboard; what the app reads is the `?`.
        "Slash" if shift => (KeyCode::Slash, Key::Character("?".into())),
        _ => {
            let c = name
                .strip_prefix("Digit")
                .filter(|d| d.len() == 1 && d.as_bytes()[0].is_ascii_digit())
                .or_else(|| name.strip_prefix("Key").filter(|k| k.len() == 1 && k.as_bytes()[0].is_ascii_uppercase()))?;
            let code = match c.as_bytes()[0] {
                b'0' => KeyCode::Digit0,
                b'1' => KeyCode::Digit1,
                b'2' => KeyCode::Digit2,
                b'3' => KeyCode::Digit3,
                b'4' => KeyCode::Digit4,
                b'5' => KeyCode::Digit5,
                b'6' => KeyCode::Digit6,
                b'7' => KeyCode::Digit7,
                b'8' => KeyCode::Digit8,
                b'9' => KeyCode::Digit9,
                b'R' => KeyCode::KeyR,
                _ => return None,
            };
            (code, Key::Character(c.to_lowercase().into()))
        }
    };
    Some((shift, code, key))
}

/// How many blank captures are taken again before one is saved as it is.
const MAX_BLANK_CAPTURES: u8 = 3;

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
    /// Captures that came back one colour from edge to edge and were taken
    /// again (every scene draws its panels, so such a frame was never
    /// drawn: seen on a software GPU when a scene's own GPU work ran on a
    /// worker through the capture's frame).
    blank_captures: Arc<AtomicU8>,
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
            .add_systems(First, (press_keys, touch_screen))
            .add_systems(Last, (gather_scene_parts, count_frames).chain());
    }
}

/// `--press`: key j goes down on frame `frames + 2j` and up on the next,
/// as the window's keyboard messages (egui and the app both see them).
fn press_keys(
    config: Res<HeadlessConfig>,
    state: Res<HeadlessState>,
    windows: Query<Entity, With<bevy::window::PrimaryWindow>>,
    contexts: Query<Entity, With<bevy_egui::PrimaryEguiContext>>,
    mut commands: Commands,
    mut keyboard: MessageWriter<bevy::input::keyboard::KeyboardInput>,
) {
    use bevy::input::ButtonState;
    use bevy::input::keyboard::{Key, KeyboardInput};
    let Some(k) = state.frames.checked_sub(config.frames) else { return };
    let Some(name) = config.press.get((k / 2) as usize) else { return };
    let Some((shift, code, key)) = key_named(name) else { return };
    // No window headless: egui's context (drawn into the offscreen image)
    // takes the keys as the focused one.
    let window = windows.single().unwrap_or(Entity::PLACEHOLDER);
    if let Ok(context) = contexts.single() {
        commands.insert_resource(bevy_egui::input::FocusedNonWindowEguiContext(context));
    }
    let state = if k % 2 == 0 { ButtonState::Pressed } else { ButtonState::Released };
    let event = |key_code, logical_key| KeyboardInput {
        key_code,
        logical_key,
        state,
        text: None,
        repeat: false,
        window,
    };
    if shift && state == ButtonState::Pressed {
        keyboard.write(event(KeyCode::ShiftLeft, Key::Shift));
    }
    keyboard.write(event(code, key));
    if shift && state == ButtonState::Released {
        keyboard.write(event(KeyCode::ShiftLeft, Key::Shift));
    }
}

/// `--touch`: each gesture's fingers go down, move and lift over
/// [`TOUCH_FRAMES`] frames, as the window's touch messages.
fn touch_screen(
    config: Res<HeadlessConfig>,
    state: Res<HeadlessState>,
    windows: Query<Entity, With<bevy::window::PrimaryWindow>>,
    mut touches: MessageWriter<bevy::input::touch::TouchInput>,
) {
    use bevy::input::touch::{TouchInput, TouchPhase};
    let Some(k) = state.frames.checked_sub(config.touch_frame()) else { return };
    let Some(gesture) = config.touch.get((k / TOUCH_FRAMES) as usize) else { return };
    let f = k % TOUCH_FRAMES;
    let phase = match f {
        0 => TouchPhase::Started,
        f if f == TOUCH_FRAMES - 1 => TouchPhase::Ended,
        _ if matches!(gesture, Gesture::Tap(_)) => return,
        _ => TouchPhase::Moved,
    };
    let window = windows.single().unwrap_or(Entity::PLACEHOLDER);
    for (id, position) in gesture.fingers(f) {
        touches.write(TouchInput { phase, position, window, force: None, id });
    }
}

/// Asks the registry for the scenes' regions and fields once the run is
/// due to end (a region to export is looked up then, the line written after).
fn gather_scene_parts(world: &mut World) {
    let due = {
        let state = world.resource::<HeadlessState>();
        !state.done && state.frames + 1 >= world.resource::<HeadlessConfig>().end_frame()
    };
    if !due {
        return;
    }
    let regions = SceneRegistry::regions(world);
    let mut fields = SceneRegistry::fields(world, Report::Headless);
    // What a screen reader has: the tree, the picture's focus, and what
    // the scene says is under the pointer (or the keyboard's focus).
    fields.push(("access", world.resource::<super::access::tree::AccessTree>().to_json()));
    // Where the picture is drawn in the window (logical points): what the
    // panels leave it.
    let viewport = world
        .query_filtered::<&Camera, With<SceneCamera>>()
        .iter(world)
        .find_map(|c| c.logical_viewport_rect())
        .map(|r| [r.min.x, r.min.y, r.max.x, r.max.y]);
    fields.push(("viewport", serde_json::json!(viewport)));
    let focus = *world.resource::<super::canvas::parts::PictureFocus>();
    fields.push((
        "picture_focus",
        serde_json::json!({
            "active": focus.active,
            "part": focus.part,
            "cell": focus.cell.map(|(r, c)| [r, c]),
            "parts": world.resource::<super::canvas::parts::PictureParts>().0.iter().map(|p| serde_json::json!({
                "name": p.name, "group": p.group, "rows": p.rows, "cols": p.cols,
            })).collect::<Vec<_>>(),
        }),
    ));
    fields.push(("hover", serde_json::json!(world.resource::<super::canvas::Hover>().0)));
    fields.push(("announced", serde_json::json!(world.resource::<super::access::announce::Announcer>().current)));
    fields.push(("describe", serde_json::json!(world.resource::<super::access::describe::PictureDescription>().text)));
    fields.push(("reduced_motion", serde_json::json!(world.resource::<super::ui::UiState>().reduced_motion)));
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
        || state.frames > config.end_frame() + 600;
    if state.frames < config.end_frame() || !language_ready {
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
        let (flag, error, path, blanks) = (
            state.capture.clone(),
            state.capture_error.clone(),
            path.clone(),
            state.blank_captures.clone(),
        );
        commands.spawn(Screenshot::image(target.0.clone())).observe(
            move |captured: On<ScreenshotCaptured>| {
                let result = captured
                    .image
                    .clone()
                    .try_into_dynamic()
                    .map_err(|e| e.to_string())
                    .and_then(|img| {
                        let rgba = img.to_rgba8();
                        let first = rgba.pixels().next().copied();
                        if rgba.pixels().all(|p| Some(*p) == first)
                            && blanks.fetch_add(1, Ordering::AcqRel) < MAX_BLANK_CAPTURES
                        {
                            return Ok(false);
                        }
                        // Encoded here, then written through a temporary
                        // file (never into a special file).
                        let mut png = Vec::new();
                        rgba
                            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                            .map_err(|e| e.to_string())?;
                        crate::output::write_atomic(&path, &png).map_err(|e| e.to_string())?;
                        Ok(true)
                    });
                match result {
                    // Blank: asked again on the next frame.
                    Ok(false) => flag.store(0, Ordering::Release),
                    Ok(true) => flag.store(2, Ordering::Release),
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
    // The scene camera's clear colour (the walk-through's light canvas has
    // its own), else the app's background.
    let bg = match cameras.single().map(|(c, _)| c.clear_color) {
        Ok(bevy::camera::ClearColorConfig::Custom(c)) => c.to_srgba(),
        _ => BACKGROUND.to_srgba(),
    };
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
        "blank_captures_retaken": state.blank_captures.load(Ordering::Acquire).min(MAX_BLANK_CAPTURES),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_gestures_are_read_and_played_over_their_frames() {
        assert_eq!(Gesture::parse("tap:10,20"), Ok(Gesture::Tap(Vec2::new(10.0, 20.0))));
        let drag = Gesture::parse("drag:300,400,100,400").unwrap();
        assert_eq!(drag.fingers(0), vec![(1, Vec2::new(300.0, 400.0))]);
        assert_eq!(drag.fingers(TOUCH_FRAMES - 2), vec![(1, Vec2::new(100.0, 400.0))]);
        assert_eq!(drag.fingers(TOUCH_FRAMES - 1), drag.fingers(TOUCH_FRAMES - 2), "it lifts where it stopped");
        let pinch = Gesture::parse("pinch:200,300,100,200").unwrap();
        assert_eq!(pinch.fingers(0), vec![(1, Vec2::new(150.0, 300.0)), (2, Vec2::new(250.0, 300.0))]);
        assert_eq!(pinch.fingers(TOUCH_FRAMES - 1), vec![(1, Vec2::new(100.0, 300.0)), (2, Vec2::new(300.0, 300.0))]);
        for bad in ["tap:1", "swipe:1,2", "drag:1,2,3", "pinch:1,2,0,5", "tap:-1,2", "tap:1,NaN", "tap"] {
            let e = Gesture::parse(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("tap:X,Y"), "{e}");
        }
    }
}
