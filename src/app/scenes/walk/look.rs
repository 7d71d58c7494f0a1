//! The learner's own look on top of the tour's framing: the mouse wheel
//! zooms about the pointer, dragging pans, the arrow keys pan, `+`/`-`
//! zoom, `0` goes back to the tour's framing (as every scene's camera
//! does). The look belongs to the beat it was taken at: the tour moving on
//! (playing, a step, a click) drops it.

use super::tour::{self, Pose, world_per_px};
use super::{Shown, WalkView};
use crate::app::canvas::SceneCamera;
use crate::app::ui::state::UiState;
use bevy::input::mouse::{AccumulatedMouseMotion, AccumulatedMouseScroll, MouseScrollUnit};
use bevy::prelude::*;

/// Zoom and pan relative to a beat's pose: zoom 1 and no pan is the pose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    /// How much nearer than the pose the camera is (its distance ÷ zoom).
    pub zoom: f32,
    /// World units the target moved, along the camera's right and up.
    pub pan: Vec2,
    /// The beat it was taken at.
    pub beat: usize,
}

impl Default for Look {
    fn default() -> Self {
        Self::at(0)
    }
}

impl Look {
    pub const MIN_ZOOM: f32 = 0.5;
    pub const MAX_ZOOM: f32 = 80.0;

    /// The tour's own framing of `beat`.
    pub fn at(beat: usize) -> Self {
        Self {
            zoom: 1.0,
            pan: Vec2::ZERO,
            beat,
        }
    }

    /// `pose` zoomed `zoom`× on the point `at` (then at the viewport's
    /// centre), at `beat`.
    pub fn on(pose: &Pose, at: Vec3, zoom: f32, beat: usize) -> Self {
        let offset = pose.rotation.inverse() * (at - pose.target);
        Self {
            zoom: zoom.clamp(Self::MIN_ZOOM, Self::MAX_ZOOM),
            pan: offset.truncate(),
            beat,
        }
    }

    /// Whether this is the tour's framing, untouched.
    pub fn is_tour(&self) -> bool {
        self.zoom == 1.0 && self.pan == Vec2::ZERO
    }

    /// `pose` as this look sees it.
    pub fn apply(&self, pose: &Pose) -> Pose {
        Pose {
            target: pose.target + pose.rotation * self.pan.extend(0.0),
            distance: pose.distance / self.zoom,
            rotation: pose.rotation,
        }
    }

    /// Zooms by `factor` about the point under the pointer, `pointer_px`
    /// from the viewport's centre (x right, y down): that point of the
    /// target's plane stays under the pointer.
    pub fn zoom_about(&mut self, pose: &Pose, pointer_px: Vec2, viewport_height: f32, factor: f32) {
        let zoom = (self.zoom * factor).clamp(Self::MIN_ZOOM, Self::MAX_ZOOM);
        let before = world_per_px(pose.distance / self.zoom, viewport_height);
        let after = world_per_px(pose.distance / zoom, viewport_height);
        // The point under the pointer is target + offset·before; after the
        // zoom it must be target' + offset·after.
        self.pan += Vec2::new(pointer_px.x, -pointer_px.y) * (before - after);
        self.zoom = zoom;
    }

    /// Pans so the picture follows a pointer that moved `delta_px` (x
    /// right, y down).
    pub fn drag(&mut self, pose: &Pose, delta_px: Vec2, viewport_height: f32) {
        let w = world_per_px(pose.distance / self.zoom, viewport_height);
        self.pan += Vec2::new(-delta_px.x, delta_px.y) * w;
    }
}

/// Pixels the pointer travelled since a button went down: a release after
/// more than [`CLICK_TRAVEL_PX`] ends a drag, not a click.
#[derive(Resource, Default, Debug)]
pub struct PointerTravel(pub f32);

pub const CLICK_TRAVEL_PX: f32 = 5.0;

/// The wheel, drags and keys, on the look of the beat shown (any of them
/// pauses the tour, which would otherwise drop the look).
#[allow(clippy::too_many_arguments)]
pub(super) fn steer(
    scroll: Res<AccumulatedMouseScroll>,
    motion: Res<AccumulatedMouseMotion>,
    buttons: Res<ButtonInput<MouseButton>>,
    keys: Res<ButtonInput<KeyCode>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    windows: Query<&Window, With<bevy::window::PrimaryWindow>>,
    cameras: Query<&Camera, With<SceneCamera>>,
    shown: Res<Shown>,
    (ui_state, lesson, focus): (
        Res<UiState>,
        Option<Res<crate::app::lesson::LessonPlayer>>,
        Res<crate::app::canvas::parts::PictureFocus>,
    ),
    mut travel: ResMut<PointerTravel>,
    mut view: ResMut<WalkView>,
    fingers: Res<crate::app::canvas::camera::FingerGesture>,
) {
    const BUTTONS: [MouseButton; 3] = [MouseButton::Left, MouseButton::Right, MouseButton::Middle];
    if buttons.any_just_pressed(BUTTONS) {
        travel.0 = 0.0;
    } else if buttons.any_pressed(BUTTONS) {
        travel.0 += motion.delta.length();
    }
    let Some(pose) = tour::pose_at(&shown.poses, view.t, ui_state.reduced_motion) else {
        return;
    };
    let Some(rect) = cameras.single().ok().and_then(|c| c.logical_viewport_rect()) else {
        return;
    };
    let (pointer_busy, keys_busy) = egui.as_ref().map_or((false, false), |e| {
        (e.wants_pointer_input() || e.is_pointer_over_area(), e.wants_keyboard_input())
    });
    let pointer = windows
        .single()
        .ok()
        .and_then(|w| w.cursor_position())
        .filter(|p| rect.contains(*p) && !pointer_busy);
    let h = rect.height();
    let beat = view.beat();
    let mut look = if view.look.beat == beat { view.look } else { Look::at(beat) };
    if let Some(p) = pointer {
        let lines = match scroll.unit {
            MouseScrollUnit::Line => scroll.delta.y,
            MouseScrollUnit::Pixel => scroll.delta.y / 40.0,
        };
        if lines != 0.0 {
            look.zoom_about(&pose, p - rect.center(), h, 1.15f32.powf(lines));
        }
        if buttons.any_pressed(BUTTONS) && travel.0 > CLICK_TRAVEL_PX && motion.delta != Vec2::ZERO {
            look.drag(&pose, motion.delta, h);
        }
    }
    // Fingers: one pans the look as a drag does, two pinch it.
    if let Some(g) = fingers.0 {
        if g.pan != Vec2::ZERO {
            look.drag(&pose, g.pan, h);
        }
        if g.spread != 1.0 {
            look.zoom_about(&pose, g.about - rect.center(), h, g.spread);
        }
    }
    if !keys_busy {
        // In presenter mode the arrows step the lesson.
        // (And while the keyboard's focus is in the picture, its.)
        let arrows = !(ui_state.presenter && lesson.is_some_and(|l| l.lesson.is_some())) && !focus.active;
        for (key, d) in [
            (KeyCode::ArrowLeft, Vec2::new(10.0, 0.0)),
            (KeyCode::ArrowRight, Vec2::new(-10.0, 0.0)),
            (KeyCode::ArrowUp, Vec2::new(0.0, 10.0)),
            (KeyCode::ArrowDown, Vec2::new(0.0, -10.0)),
        ] {
            if arrows && keys.pressed(key) {
                look.drag(&pose, d, h);
            }
        }
        if keys.just_pressed(KeyCode::Equal) || keys.just_pressed(KeyCode::NumpadAdd) {
            look.zoom_about(&pose, Vec2::ZERO, h, 1.25);
        }
        if keys.just_pressed(KeyCode::Minus) || keys.just_pressed(KeyCode::NumpadSubtract) {
            look.zoom_about(&pose, Vec2::ZERO, h, 0.8);
        }
        if keys.just_pressed(KeyCode::Digit0) || keys.just_pressed(KeyCode::Home) {
            look = Look::at(beat);
        }
    }
    if look != view.look {
        if !look.is_tour() {
            view.playing = false;
        }
        view.look = look;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a point of the target's plane is on screen, in pixels from
    /// the centre (x right, y down), seen from `pose` (no rotation).
    fn on_screen(pose: &Pose, point: Vec2, viewport_height: f32) -> Vec2 {
        let w = world_per_px(pose.distance, viewport_height);
        let d = (point - pose.target.truncate()) / w;
        Vec2::new(d.x, -d.y)
    }

    fn pose() -> Pose {
        Pose {
            target: Vec3::new(10.0, -4.0, 0.0),
            distance: 50.0,
            rotation: Quat::IDENTITY,
        }
    }

    #[test]
    fn the_point_under_the_pointer_stays_there_through_a_zoom() {
        let (pose, h) = (pose(), 720.0);
        let pointer = Vec2::new(-230.0, 140.0);
        let mut look = Look::at(3);
        // The point of the plane under the pointer before.
        let w = world_per_px(pose.distance, h);
        let point = pose.target.truncate() + Vec2::new(pointer.x, -pointer.y) * w;
        for factor in [1.15, 1.15, 3.0, 0.4] {
            look.zoom_about(&pose, pointer, h, factor);
            let seen = on_screen(&look.apply(&pose), point, h);
            assert!((seen - pointer).length() < 1e-2, "{seen} vs {pointer}");
        }
        assert!(look.zoom > 1.0 && !look.is_tour());
    }

    #[test]
    fn zoom_is_bounded_and_a_drag_moves_the_picture_with_the_pointer() {
        let (pose, h) = (pose(), 720.0);
        let mut look = Look::at(0);
        look.zoom_about(&pose, Vec2::ZERO, h, 1e9);
        assert_eq!(look.zoom, Look::MAX_ZOOM);
        look.zoom_about(&pose, Vec2::ZERO, h, 1e-9);
        assert_eq!(look.zoom, Look::MIN_ZOOM);
        // A point at the centre follows a drag right and down.
        let mut look = Look::at(0);
        look.zoom = 4.0;
        let point = pose.target.truncate();
        look.drag(&pose, Vec2::new(30.0, 20.0), h);
        let seen = on_screen(&look.apply(&pose), point, h);
        assert!((seen - Vec2::new(30.0, 20.0)).length() < 1e-2, "{seen}");
        assert_eq!(Look::at(2).apply(&pose).distance, pose.distance);
        // Zoomed on a point: it is at the centre, the camera nearer.
        let at = Vec3::new(14.0, -9.0, 0.0);
        let look = Look::on(&pose, at, 8.0, 5);
        let seen = look.apply(&pose);
        assert!((seen.target - at).length() < 1e-4 && (seen.distance - pose.distance / 8.0).abs() < 1e-4);
        assert_eq!(look.beat, 5);
    }
}
