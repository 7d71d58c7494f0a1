//! The main view's camera, shared by every scene: it fits the scene's
//! [`SceneBounds`] into the viewport the panels leave, and the user pans and
//! zooms it (mouse wheel: zoom about the pointer; drag: pan; arrow keys pan,
//! `+`/`-` zoom, `0` fits again). It also puts the pointer into the scene's
//! world coordinates ([`SceneCursor`]) for clicks and hover tooltips.

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

/// The user's pan and zoom on top of the fit: zoom 1 and no offset is the
/// whole scene in view.
#[derive(Resource, Debug, Clone, Copy, PartialEq)]
pub struct ViewControl {
    pub zoom: f32,
    /// World units from the bounds' centre.
    pub offset: Vec2,
    /// The bounds this control applies to (new bounds fit again).
    fitted: Rect,
}

impl Default for ViewControl {
    fn default() -> Self {
        Self {
            zoom: 1.0,
            offset: Vec2::ZERO,
            fitted: Rect::default(),
        }
    }
}

impl ViewControl {
    /// Back to the whole scene.
    pub fn fit(&mut self) {
        self.zoom = 1.0;
        self.offset = Vec2::ZERO;
    }
}

pub struct CameraPlugin;

impl Plugin for CameraPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<ViewControl>().init_resource::<FitArea>().add_systems(
            Update,
            (track_cursor, pan_and_zoom, fit_camera)
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
    cameras: Query<&Projection, With<SceneCamera>>,
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
            ..default()
        };
    }
    let (pointer_busy, keys_busy) = egui_busy(&egui);
    let scale = cameras.single().ok().and_then(|p| match p {
        Projection::Orthographic(o) => Some(o.scale),
        _ => None,
    });
    let Some(scale) = scale else { return };
    let mut next = *control;
    // Wheel: zoom about the pointer (the world point under it stays put).
    if !pointer_busy && let Some(at) = cursor.0 {
        let lines = match scroll.unit {
            MouseScrollUnit::Line => scroll.delta.y,
            MouseScrollUnit::Pixel => scroll.delta.y / 40.0,
        };
        if lines != 0.0 {
            let factor = 1.15f32.powf(lines);
            let zoom = (next.zoom * factor).clamp(0.5, 40.0);
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
            next.zoom = (next.zoom / 1.25).max(0.5);
        }
        if keys.just_pressed(KeyCode::Digit0) || keys.just_pressed(KeyCode::Home) {
            next.fit();
        }
    }
    if next != *control {
        *control = next;
    }
}

/// Fits the bounds into the viewport, then applies the user's pan and zoom.
fn fit_camera(
    bounds: Res<SceneBounds>,
    control: Res<ViewControl>,
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
        let fit = (b.width() / viewport.x).max(b.height() / free) * FIT_MARGIN;
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
