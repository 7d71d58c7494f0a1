//! The keyboard's focus in the picture. With no panel focused, Enter (or
//! F6) goes into the picture at its first part; ← and → step through the
//! parts, ↑ and ↓ jump between their groups (a block, the embedding);
//! Enter goes into the part's cells, where the arrows move by one cell
//! (Home and End to the row's ends) and Enter does what a click on the
//! cell does; Escape backs out, a cell to its part, a part out of the
//! picture. On a cell the focus stands in for the pointer
//! ([`VirtualPointer`]), so the scene names the cell exactly as it does
//! under the mouse. Moving the mouse hands the pointer back. A ring shows
//! where the focus is, over the picture and around the focused panel
//! control (egui's own focus is hard to see).

use crate::app::canvas::parts::{
    DrawnParts, FocusablePart, KeyActivate, Part, PictureFocus, PictureParts, RegionGrid, RegionGroup, VirtualPointer,
    spoken, spoken_region,
};
use crate::app::canvas::{Hover, SceneCamera, SceneRegion};
use crate::app::scenes::Scene;
use bevy::input::mouse::AccumulatedMouseMotion;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};

/// The focus ring's colour: amber, 3:1 and more against the dark canvas,
/// the panels and every colour scale's cells' edges (its black halo
/// separates it from light cells).
pub const RING: egui::Color32 = egui::Color32::from_rgb(255, 196, 0);

/// What the tree says for the picture this frame.
#[derive(Resource, Default, Debug, Clone, PartialEq)]
pub struct PictureAccess {
    /// Each part's name and where it is on screen (window logical
    /// pixels), when the camera shows it.
    pub parts: Vec<(String, Option<Rect>)>,
    /// The focused part or cell: what is said for it, and where it is.
    pub focused: Option<Focused>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Focused {
    /// Which node: the part, or the part and its cell.
    pub part: usize,
    pub cell: Option<(usize, usize)>,
    pub label: String,
    pub rect: Option<Rect>,
}

pub struct PicturePlugin;

impl Plugin for PicturePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<PictureAccess>()
            .add_systems(
                Update,
                (clear_on_scene_change, keys, place_pointer)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Input),
            )
            .add_systems(
                Update,
                parts_from_regions.in_set(crate::app::schedule::AppSystems::Scene),
            )
            .add_systems(PostUpdate, describe)
            .add_systems(EguiPrimaryContextPass, draw_rings);
    }
}

/// A new scene starts with no parts and the focus out of the picture.
fn clear_on_scene_change(
    scene: Res<State<Scene>>,
    mut parts: ResMut<PictureParts>,
    mut drawn: ResMut<DrawnParts>,
    mut focus: ResMut<PictureFocus>,
) {
    if scene.is_changed() && !scene.is_added() {
        parts.0.clear();
        drawn.0.clear();
        *focus = PictureFocus::default();
    }
}

/// The parts of a scene that draws named regions: each region (its cells
/// from its [`RegionGrid`], its group from its [`RegionGroup`]) and each
/// [`FocusablePart`], in reading order (top to bottom, then left to right);
/// or of a scene that draws with egui, the [`DrawnParts`] it listed.
fn parts_from_regions(
    regions: Query<(&SceneRegion, Option<&RegionGrid>, Option<&RegionGroup>)>,
    focusable: Query<&FocusablePart>,
    drawn: Res<DrawnParts>,
    mut parts: ResMut<PictureParts>,
) {
    if regions.is_empty() && focusable.is_empty() {
        // (A scene that lists its own world parts, the 3D walk, keeps them.)
        let ours = !drawn.0.is_empty() || parts.0.iter().any(|p| p.drawn.is_some());
        if ours && parts.0 != drawn.0 {
            parts.0 = drawn.0.clone();
        }
        return;
    }
    let mut listed: Vec<Part> = regions
        .iter()
        .map(|(r, grid, group)| Part {
            name: spoken_region(&r.name),
            group: group.map(|g| g.0.clone()),
            rows: grid.map_or(1, |g| g.rows.max(1)),
            cols: grid.map_or(1, |g| g.cols.max(1)),
            rect: r.rect,
            z: 0.0,
            drawn: None,
        })
        .chain(focusable.iter().map(|p| p.0.clone()))
        .collect();
    listed.sort_by(|a, b| {
        b.rect
            .max
            .y
            .total_cmp(&a.rect.max.y)
            .then(a.rect.min.x.total_cmp(&b.rect.min.x))
    });
    if parts.0 != listed {
        parts.0 = listed;
    }
}

/// The focus's keys (see the module's doc).
#[allow(clippy::too_many_arguments)]
fn keys(
    keys: Res<ButtonInput<KeyCode>>,
    buttons: Res<ButtonInput<MouseButton>>,
    motion: Res<AccumulatedMouseMotion>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    parts: Res<PictureParts>,
    mut focus: ResMut<PictureFocus>,
    mut activate: ResMut<KeyActivate>,
) {
    if activate.0 {
        activate.0 = false;
    }
    let mut next = *focus;
    // The mouse takes the pointer back; a panel that takes the keyboard
    // takes the focus.
    if next.active
        && (motion.delta != Vec2::ZERO
            || buttons.get_just_pressed().next().is_some()
            || egui.as_ref().is_some_and(|e| e.wants_keyboard_input()))
    {
        next.active = false;
    }
    if egui.as_ref().is_some_and(|e| e.wants_any_keyboard_input()) || parts.0.is_empty() {
        if next.active && parts.0.is_empty() {
            next.active = false;
        }
        if next != *focus {
            *focus = next;
        }
        return;
    }
    let enter = keys.just_pressed(KeyCode::Enter) || keys.just_pressed(KeyCode::NumpadEnter);
    next.part = next.part.min(parts.0.len() - 1);
    if !next.active {
        if enter || keys.just_pressed(KeyCode::F6) {
            next.active = true;
            next.cell = None;
        }
    } else {
        let part = &parts.0[next.part];
        match next.cell {
            None => {
                if keys.just_pressed(KeyCode::Escape) || keys.just_pressed(KeyCode::F6) {
                    next.active = false;
                } else if enter {
                    next.cell = Some((0, 0));
                } else if keys.just_pressed(KeyCode::ArrowRight) {
                    next.part = (next.part + 1).min(parts.0.len() - 1);
                } else if keys.just_pressed(KeyCode::ArrowLeft) {
                    next.part = next.part.saturating_sub(1);
                } else if keys.just_pressed(KeyCode::ArrowDown) {
                    next.part = next_group(&parts.0, next.part, true);
                } else if keys.just_pressed(KeyCode::ArrowUp) {
                    next.part = next_group(&parts.0, next.part, false);
                } else if keys.just_pressed(KeyCode::Home) {
                    next.part = 0;
                } else if keys.just_pressed(KeyCode::End) {
                    next.part = parts.0.len() - 1;
                }
            }
            Some((row, col)) => {
                let (rows, cols) = (part.rows.max(1), part.cols.max(1));
                let (mut r, mut c) = (row.min(rows - 1), col.min(cols - 1));
                if keys.just_pressed(KeyCode::Escape) {
                    next.cell = None;
                } else if enter {
                    activate.0 = true;
                } else {
                    if keys.just_pressed(KeyCode::ArrowRight) {
                        c = (c + 1).min(cols - 1);
                    }
                    if keys.just_pressed(KeyCode::ArrowLeft) {
                        c = c.saturating_sub(1);
                    }
                    if keys.just_pressed(KeyCode::ArrowDown) {
                        r = (r + 1).min(rows - 1);
                    }
                    if keys.just_pressed(KeyCode::ArrowUp) {
                        r = r.saturating_sub(1);
                    }
                    if keys.just_pressed(KeyCode::Home) {
                        c = 0;
                    }
                    if keys.just_pressed(KeyCode::End) {
                        c = cols - 1;
                    }
                }
                if next.cell.is_some() {
                    next.cell = Some((r, c));
                }
            }
        }
    }
    if next != *focus {
        *focus = next;
    }
}

/// The first part of the next (or previous) group after `at`'s.
fn next_group(parts: &[Part], at: usize, forward: bool) -> usize {
    let group = &parts[at].group;
    if forward {
        parts
            .iter()
            .enumerate()
            .skip(at + 1)
            .find(|(_, p)| &p.group != group)
            .map_or(at, |(i, _)| i)
    } else {
        // Back to the start of this group, or of the one before it.
        let start = (0..at).rev().take_while(|&i| &parts[i].group == group).last().unwrap_or(at);
        if start < at {
            return start;
        }
        if at == 0 {
            return 0;
        }
        let before = &parts[at - 1].group;
        (0..at).rev().take_while(|&i| &parts[i].group == before).last().unwrap_or(at - 1)
    }
}

/// Where a world point is in the window (logical pixels).
fn to_window(camera: &Camera, at: &GlobalTransform, p: Vec3) -> Option<Vec2> {
    camera.world_to_viewport(at, p).ok()
}

/// The screen rectangle (window logical pixels) around world corners.
fn screen_rect(camera: &Camera, at: &GlobalTransform, corners: [Vec3; 4]) -> Option<Rect> {
    let mut out: Option<Rect> = None;
    for p in corners {
        let q = to_window(camera, at, p)?;
        out = Some(out.map_or(Rect::from_corners(q, q), |r| r.union_point(q)));
    }
    let viewport = camera.logical_viewport_rect()?;
    let r = out?;
    (!r.intersect(viewport).is_empty()).then_some(r)
}

/// The pointer the focused cell stands for.
fn place_pointer(
    focus: Res<PictureFocus>,
    parts: Res<PictureParts>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    mut pointer: ResMut<VirtualPointer>,
) {
    let at = (|| {
        if !focus.active {
            return None;
        }
        let (row, col) = focus.cell?;
        let part = parts.0.get(focus.part)?;
        // A drawn part's cells say themselves: no pointer stands in.
        if part.drawn.is_some() {
            return None;
        }
        let (camera, transform) = cameras.single().ok()?;
        to_window(camera, transform, part.cell_centre(row, col))
    })();
    if pointer.0 != at {
        pointer.0 = at;
    }
}

/// What the tree says for the picture: each part and where it is, and the
/// focused part or cell (a cell in the scene's own words, [`Hover`]).
pub fn describe(
    focus: Res<PictureFocus>,
    parts: Res<PictureParts>,
    hover: Res<Hover>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    mut access: ResMut<PictureAccess>,
) {
    let camera = cameras.single().ok();
    let rect_of = |part: &Part, cell: Option<(usize, usize)>| {
        if part.drawn.is_some() {
            return match cell {
                None => Some(part.rect),
                Some((r, c)) => part.drawn_cell(r, c).map(|(rect, _)| *rect),
            };
        }
        camera.and_then(|(c, t)| screen_rect(c, t, part.corners(cell)))
    };
    let listed: Vec<(String, Option<Rect>)> = parts
        .0
        .iter()
        .map(|p| {
            let shape = if p.rows * p.cols > 1 {
                format!(", {} by {}", p.rows, p.cols)
            } else {
                String::new()
            };
            (format!("{}{shape}", p.name), rect_of(p, None))
        })
        .collect();
    let focused = (|| {
        if !focus.active {
            return None;
        }
        let part = parts.0.get(focus.part)?;
        let label = match focus.cell {
            None => listed[focus.part].0.clone(),
            Some((r, c)) => match (part.drawn_cell(r, c), &hover.0) {
                (Some((_, words)), _) => spoken(words),
                (None, Some(text)) if part.drawn.is_none() => spoken(text),
                _ => format!("{}, row {r}, column {c}", part.name),
            },
        };
        Some(Focused {
            part: focus.part,
            cell: focus.cell,
            label,
            rect: rect_of(part, focus.cell),
        })
    })();
    let next = PictureAccess { parts: listed, focused };
    if *access != next {
        *access = next;
    }
}

/// The focus rings: around the focused part or cell, and around the panel
/// control egui has focused. Drawn on top, taking no input.
fn draw_rings(mut contexts: EguiContexts, access: Res<PictureAccess>) -> Result {
    let ctx = contexts.ctx_mut()?;
    let zoom = ctx.zoom_factor();
    let painter = ctx.layer_painter(egui::LayerId::new(egui::Order::Tooltip, egui::Id::new("focus-rings")));
    let ring = |rect: egui::Rect| {
        // A cell far off may be a pixel wide: the ring stays big enough to see.
        let rect = egui::Rect::from_center_size(rect.center(), rect.size().max(egui::vec2(10.0, 10.0))).expand(3.0);
        painter.rect_stroke(rect, 3.0, egui::Stroke::new(5.0, egui::Color32::BLACK), egui::StrokeKind::Outside);
        painter.rect_stroke(rect, 3.0, egui::Stroke::new(3.0, RING), egui::StrokeKind::Outside);
    };
    if let Some(Focused { rect: Some(r), .. }) = &access.focused {
        ring(egui::Rect::from_min_max(
            egui::pos2(r.min.x / zoom, r.min.y / zoom),
            egui::pos2(r.max.x / zoom, r.max.y / zoom),
        ));
    }
    if let Some(id) = ctx.memory(|m| m.focused())
        && let Some(response) = ctx.read_response(id)
    {
        ring(response.rect);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(group: &str) -> Part {
        Part {
            name: String::new(),
            group: Some(group.into()),
            rows: 1,
            cols: 1,
            rect: Rect::new(0.0, 0.0, 1.0, 1.0),
            z: 0.0,
            drawn: None,
        }
    }

    #[test]
    fn up_and_down_jump_between_groups() {
        let parts: Vec<Part> = ["a", "a", "b", "b", "b", "c"].map(part).into();
        assert_eq!(next_group(&parts, 0, true), 2);
        assert_eq!(next_group(&parts, 3, true), 5);
        assert_eq!(next_group(&parts, 5, true), 5);
        assert_eq!(next_group(&parts, 4, false), 2);
        assert_eq!(next_group(&parts, 2, false), 0);
        assert_eq!(next_group(&parts, 5, false), 2);
        assert_eq!(next_group(&parts, 0, false), 0);
    }

    #[test]
    fn a_cell_centre_is_inside_its_cell_row_zero_at_the_top() {
        let p = Part {
            rows: 4,
            cols: 2,
            rect: Rect::new(0.0, 0.0, 2.0, 4.0),
            ..part("a")
        };
        let c = p.cell_centre(0, 1);
        assert_eq!((c.x, c.y), (1.5, 3.5));
        let [a, _, b, _] = p.corners(Some((3, 0)));
        assert_eq!((a.x, a.y, b.x, b.y), (0.0, 0.0, 1.0, 1.0));
        assert_eq!(crate::app::canvas::cell_at(p.rect, c.truncate(), 4, 2), (0, 1));
    }
}
