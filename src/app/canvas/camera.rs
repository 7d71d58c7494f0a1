//! The main view's camera, shared by every scene: it fits the scene's
//! [`SceneBounds`] into the viewport the panels leave, and the user pans and
//! zooms it (mouse wheel: zoom about the pointer; drag: pan; arrow keys pan,
//! `+`/`-` zoom, `0` fits again; on a touch screen one finger pans and two
//! pinch). It also puts the pointer into the scene's world coordinates
//! ([`SceneCursor`]) for clicks and hover tooltips.
//!
//! On a phone ([`crate::app::ui::toolbar::is_phone`]) the fit stops at
//! [`PHONE_MAX_SCALE`], so the picture's labels stay readable: a picture
//! wider than the screen opens at its left edge, where its names are, and
//! the student pans to the rest, or pinches out to see it whole.

use super::{SceneBounds, SceneCamera, SceneCursor};
use bevy::input::mouse::{AccumulatedMouseMotion, AccumulatedMouseScroll, MouseScrollUnit};
use bevy::prelude::*;

/// Height of the scene toolbar that floats over the top of the main view
/// (logical pixels): the fit leaves it free.
pub const TOOLBAR_PX: f32 = 40.0;

/// The area the fit fills, in logical pixels: the viewport under the
/// toolbar, less the fit's margin. A scene laid out to it is drawn at
/// scale 1, its text at the size it is set in (the Model scene).
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq)]
pub struct FitArea(pub Vec2);

/// The fit's margin: the bounds take 1/FIT_MARGIN of the view.
const FIT_MARGIN: f32 = 1.04;

/// On a phone, the most world units a point shows: the scenes set their
/// labels at 15 units or more, so they stay at 12.5 points or more (the
/// whole picture, fitted to a 412-point screen, drew them at 6 to 8).
pub const PHONE_MAX_SCALE: f32 = 1.2;

/// How far the user may zoom out from the fit (where the fit is the
/// whole picture).
const LEAST_ZOOM: f32 = 0.5;

/// The user's pan and zoom on top of the fit: zoom 1 and no offset is the
/// whole scene in view.
#[derive(Resource, Debug, Clone, Copy, PartialEq)]
pub struct ViewControl {
    pub zoom: f32,
    /// World units from the bounds' centre.
    pub offset: Vec2,
    /// The bounds this control applies to (new bounds fit again).
    fitted: Rect,
    /// The least zoom: [`LEAST_ZOOM`] of the whole picture's fit (on a
    /// phone, whose fit shows part of it, less than that).
    least: f32,
    /// Whether the fit has placed these bounds (a phone's view of part of
    /// a picture opens at its left edge, where its names are).
    placed: bool,
}

impl Default for ViewControl {
    fn default() -> Self {
        Self {
            zoom: 1.0,
            offset: Vec2::ZERO,
            fitted: Rect::default(),
            least: LEAST_ZOOM,
            placed: false,
        }
    }
}

impl ViewControl {
    /// Back to the fit: the whole scene (on a phone, the readable part at
    /// its left edge).
    pub fn fit(&mut self) {
        self.zoom = 1.0;
        self.offset = Vec2::ZERO;
        self.placed = false;
    }
}

pub struct CameraPlugin;

impl Plugin for CameraPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<ViewControl>()
            .init_resource::<FitArea>()
            .init_resource::<FingerGesture>()
            .add_systems(
                Update,
                (read_fingers, track_cursor, pan_and_zoom, fit_camera)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Camera),
            );
    }
}

/// Whether egui has the pointer or the keyboard (then the scene ignores them).
fn egui_busy(egui: &Option<Res<bevy_egui::input::EguiWantsInput>>) -> (bool, bool) {
    egui.as_ref().map_or((false, false), |e| {
        (
            e.wants_pointer_input() || e.is_pointer_over_area(),
            e.wants_keyboard_input(),
        )
    })
}

/// This frame's fingers on the picture, for every scene's camera (the
/// flat scenes' pan and pinch here, the 3D walk's look): None when no
/// finger on it moved.
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq)]
pub struct FingerGesture(pub Option<TouchGesture>);

/// Reads the fingers once a frame: a finger that goes down where egui has
/// the pointer is the panel's until it lifts ([`super::parts::PanelTouches`]);
/// the others, down on the scene's view, make the [`FingerGesture`].
fn read_fingers(
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    touches: Res<Touches>,
    cameras: Query<&Camera, With<SceneCamera>>,
    mut panel_touches: ResMut<super::parts::PanelTouches>,
    mut gesture: ResMut<FingerGesture>,
    // Where each finger was last frame (Bevy's `previous_position` moves
    // only on frames with touch messages).
    mut fingers_were: Local<std::collections::HashMap<u64, Vec2>>,
) {
    let lifted = |id: u64| touches.get_pressed(id).is_none() && !touches.just_released(id);
    if panel_touches.0.iter().any(|&id| lifted(id)) {
        panel_touches.0.retain(|&id| !lifted(id));
    }
    if egui_busy(&egui).0 {
        for t in touches.iter_just_pressed() {
            panel_touches.0.insert(t.id());
        }
    }
    let view = cameras.single().ok().and_then(|c| c.logical_viewport_rect());
    let on_picture: Vec<&bevy::input::touch::Touch> = touches
        .iter()
        .filter(|t| !panel_touches.0.contains(&t.id()) && view.is_some_and(|v| v.contains(t.start_position())))
        .collect();
    let before: Vec<Vec2> = on_picture
        .iter()
        .map(|t| fingers_were.get(&t.id()).copied().unwrap_or(t.position()))
        .collect();
    let now: Vec<Vec2> = on_picture.iter().map(|t| t.position()).collect();
    fingers_were.clear();
    fingers_were.extend(touches.iter().map(|t| (t.id(), t.position())));
    let next = FingerGesture(touch_gesture(&before, &now));
    if *gesture != next {
        *gesture = next;
    }
}

fn track_cursor(
    pointer: super::parts::PointerInput,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    mut cursor: ResMut<SceneCursor>,
) {
    let world = (|| {
        if egui_busy(&egui).0 && !pointer.from_keyboard() {
            return None;
        }
        let (camera, transform) = cameras.single().ok()?;
        let pointer = pointer.position()?;
        let rect = camera.logical_viewport_rect()?;
        if !rect.contains(pointer) {
            return None;
        }
        // (Viewport positions are the window's: Bevy takes the viewport's
        // corner off itself.)
        camera.viewport_to_world_2d(transform, pointer).ok()
    })();
    if cursor.0 != world {
        cursor.0 = world;
    }
}

#[allow(clippy::too_many_arguments)]
fn pan_and_zoom(
    scroll: Res<AccumulatedMouseScroll>,
    motion: Res<AccumulatedMouseMotion>,
    buttons: Res<ButtonInput<MouseButton>>,
    keys: Res<ButtonInput<KeyCode>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    cursor: Res<SceneCursor>,
    bounds: Res<SceneBounds>,
    cameras: Query<(&Camera, &GlobalTransform, &Projection), With<SceneCamera>>,
    fingers: Res<FingerGesture>,
    mut control: ResMut<ViewControl>,
    (ui_state, lesson, focus): (
        Option<Res<crate::app::ui::state::UiState>>,
        Option<Res<crate::app::lesson::LessonPlayer>>,
        Res<super::parts::PictureFocus>,
    ),
) {
    let b = bounds.0;
    // In presenter mode the arrows step the lesson, not the camera.
    let arrows_taken = (ui_state.is_some_and(|u| u.presenter) && lesson.is_some_and(|l| l.lesson.is_some()))
        || focus.active;
    if control.fitted != b {
        *control = ViewControl {
            fitted: b,
            least: control.least,
            ..default()
        };
    }
    let (pointer_busy, keys_busy) = egui_busy(&egui);
    let Ok((camera, transform, projection)) = cameras.single() else { return };
    let Projection::Orthographic(o) = projection else { return };
    let scale = o.scale;
    let mut next = *control;
    let least = control.least;
    // Wheel: zoom about the pointer (the world point under it stays put).
    if !pointer_busy && let Some(at) = cursor.0 {
        let lines = match scroll.unit {
            MouseScrollUnit::Line => scroll.delta.y,
            MouseScrollUnit::Pixel => scroll.delta.y / 40.0,
        };
        if lines != 0.0 {
            let factor = 1.15f32.powf(lines);
            let zoom = (next.zoom * factor).clamp(least, 40.0);
            let centre = b.center() + next.offset;
            next.offset += (at - centre) * (1.0 - next.zoom / zoom);
            next.zoom = zoom;
        }
    }
    // Drag (any button) pans; the world moves with the pointer.
    if !pointer_busy
        && cursor.0.is_some()
        && buttons.any_pressed([MouseButton::Left, MouseButton::Right, MouseButton::Middle])
        && motion.delta != Vec2::ZERO
    {
        next.offset += Vec2::new(-motion.delta.x, motion.delta.y) * scale;
    }
    // Touch: the fingers on the picture pan it with their mean move and
    // zoom it by their spread, about their midpoint.
    if let Some(g) = fingers.0 {
        next.offset += Vec2::new(-g.pan.x, g.pan.y) * scale;
        if g.spread != 1.0
            && let Ok(at) = camera.viewport_to_world_2d(transform, g.about)
        {
            let zoom = (next.zoom * g.spread).clamp(least, 40.0);
            let centre = b.center() + next.offset;
            next.offset += (at - centre) * (1.0 - next.zoom / zoom);
            next.zoom = zoom;
        }
    }
    if !keys_busy {
        let step = 40.0 * scale;
        for (key, d) in [
            (KeyCode::ArrowLeft, Vec2::new(-step, 0.0)),
            (KeyCode::ArrowRight, Vec2::new(step, 0.0)),
            (KeyCode::ArrowUp, Vec2::new(0.0, step)),
            (KeyCode::ArrowDown, Vec2::new(0.0, -step)),
        ] {
            if keys.pressed(key) && !arrows_taken {
                next.offset += d * 0.25;
            }
        }
        if keys.just_pressed(KeyCode::Equal) || keys.just_pressed(KeyCode::NumpadAdd) {
            next.zoom = (next.zoom * 1.25).min(40.0);
        }
        if keys.just_pressed(KeyCode::Minus) || keys.just_pressed(KeyCode::NumpadSubtract) {
            next.zoom = (next.zoom / 1.25).max(least);
        }
        if keys.just_pressed(KeyCode::Digit0) || keys.just_pressed(KeyCode::Home) {
            next.fit();
        }
    }
    if next != *control {
        *control = next;
    }
}

/// One frame of fingers on the picture.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TouchGesture {
    /// The fingers' mean move, in points (y down, as the window's).
    pub pan: Vec2,
    /// Their spread now over their spread before (1 for one finger): the
    /// zoom's factor.
    pub spread: f32,
    /// Their midpoint now, in window points: what the zoom holds still.
    pub about: Vec2,
}

/// The gesture of the fingers' positions the frame before and now (the
/// same fingers in the same order): None for no finger, or no move.
pub fn touch_gesture(before: &[Vec2], now: &[Vec2]) -> Option<TouchGesture> {
    if now.is_empty() || before.len() != now.len() {
        return None;
    }
    let mean = |p: &[Vec2]| p.iter().copied().sum::<Vec2>() / p.len() as f32;
    let (was, is) = (mean(before), mean(now));
    // Two fingers or more: the first two's distance.
    let spread = match (before, now) {
        ([a, b, ..], [c, d, ..]) if a.distance(*b) > 1.0 => (c.distance(*d) / a.distance(*b)).clamp(0.5, 2.0),
        _ => 1.0,
    };
    let pan = is - was;
    (pan != Vec2::ZERO || spread != 1.0).then_some(TouchGesture { pan, spread, about: is })
}

/// Fits the bounds into the viewport, then applies the user's pan and zoom.
fn fit_camera(
    bounds: Res<SceneBounds>,
    mut control: ResMut<ViewControl>,
    mut cameras: Query<(&Camera, &mut Transform, &mut Projection), With<SceneCamera>>,
    mut contexts: bevy_egui::EguiContexts,
    mut area: ResMut<FitArea>,
) {
    let b = bounds.0;
    // A toolbar wrapped to two rows (a language's longer words) pushes the
    // fit down with it.
    let toolbar = contexts
        .ctx_mut()
        .ok()
        .and_then(|ctx| crate::app::ui::toolbar::toolbar_inset(ctx))
        .map_or(TOOLBAR_PX, |inset| inset.max(TOOLBAR_PX));
    // One row of the toolbar's controls (36 points, as presenter mode's
    // zoom makes them).
    let one_row = contexts
        .ctx_mut()
        .map_or(TOOLBAR_PX, |ctx| (36.0 * ctx.zoom_factor()).max(TOOLBAR_PX));
    let phone = contexts.ctx_mut().is_ok_and(|ctx| crate::app::ui::toolbar::is_phone(ctx));
    for (camera, mut transform, mut projection) in &mut cameras {
        let Some(viewport) = camera.logical_viewport_size() else {
            continue;
        };
        if viewport.x < 1.0 || viewport.y < 1.0 {
            continue;
        }
        // The scene's toolbar floats over the top of the view: fit below it.
        let free = (viewport.y - toolbar).max(viewport.y * 0.5);
        // A scene laid out to the view takes the toolbar at its one-row
        // height: where it wraps (a small window, a status that comes and
        // goes with the run) the fit's scale follows it, not the layout (a
        // relayout makes every texture anew; one at the moment a GPU was
        // lost left lavapipe's rasterizer spinning in the lost-GPU tests).
        let laid_out = (viewport.y - one_row).max(viewport.y * 0.5);
        let fits = Vec2::new(viewport.x, laid_out) / FIT_MARGIN;
        if area.0 != fits {
            area.0 = fits;
        }
        // A scene that looks in perspective places the camera itself.
        if b.is_empty() || !matches!(*projection, Projection::Orthographic(_)) {
            continue;
        }
        let whole = (b.width() / viewport.x).max(b.height() / free) * FIT_MARGIN;
        let fit = if phone { whole.min(PHONE_MAX_SCALE) } else { whole };
        let least = LEAST_ZOOM * fit / whole;
        if control.least != least {
            control.least = least;
        }
        if !control.placed {
            control.placed = true;
            // A phone's view of part of the picture: its left edge.
            let across = viewport.x * fit;
            if across < b.width() {
                control.offset.x = (across - b.width()) / 2.0;
            }
        }
        let scale = fit / control.zoom;
        if let Projection::Orthographic(o) = &mut *projection
            && (o.scale - scale).abs() > 1e-6
        {
            o.scale = scale;
        }
        let c = (b.center() + control.offset + Vec2::Y * (viewport.y - free) * 0.5 * scale)
            .extend(transform.translation.z);
        if transform.translation != c {
            transform.translation = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_finger_pans_by_its_move_and_two_zoom_by_their_spread() {
        let g = touch_gesture(&[Vec2::new(10.0, 20.0)], &[Vec2::new(40.0, 10.0)]).unwrap();
        assert_eq!((g.pan, g.spread, g.about), (Vec2::new(30.0, -10.0), 1.0, Vec2::new(40.0, 10.0)));
        // Apart from 100 to 150 points about (200, 300): ×1.5, no pan.
        let before = [Vec2::new(150.0, 300.0), Vec2::new(250.0, 300.0)];
        let now = [Vec2::new(125.0, 300.0), Vec2::new(275.0, 300.0)];
        let g = touch_gesture(&before, &now).unwrap();
        assert_eq!((g.pan, g.about), (Vec2::ZERO, Vec2::new(200.0, 300.0)));
        assert!((g.spread - 1.5).abs() < 1e-6, "{g:?}");
        // Still fingers, no fingers, or a finger more than before: nothing.
        assert_eq!(touch_gesture(&before, &before), None);
        assert_eq!(touch_gesture(&[], &[]), None);
        assert_eq!(touch_gesture(&before[..1], &now), None);
        // A jump in spread is bounded (a finger landing beside another).
        let g = touch_gesture(&before, &[Vec2::new(0.0, 300.0), Vec2::new(1000.0, 300.0)]).unwrap();
        assert_eq!(g.spread, 2.0);
    }
}
