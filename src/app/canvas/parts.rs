//! The picture's parts as the keyboard and a screen reader reach them (issue
//! 53): each scene lists what can be focused (a tensor, an attention map, a
//! block) with its grid of cells, and reads the pointer through
//! [`PointerInput`], which the keyboard's focus can stand in for. The focus
//! itself (keys, ring, accessibility tree) is `app::access`; scenes know
//! only this.

use bevy::ecs::system::SystemParam;
use bevy::prelude::*;

/// One part of the picture the keyboard can focus.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// What a screen reader says for it ("h.0.attn.qkv W, 64 × 192").
    pub name: String,
    /// The group it belongs to ("block 1"): ↑ and ↓ jump between groups.
    pub group: Option<String>,
    /// Its cells: row 0 at the top (1 × 1 for a part without cells).
    pub rows: usize,
    pub cols: usize,
    /// Its rectangle in the world, in the plane z = `z` (the scene camera
    /// projects it, flat or in 3D); in the window for a [`DrawnParts`] part.
    pub rect: Rect,
    pub z: f32,
    /// A part egui draws ([`DrawnParts`]): its cells, row by row, each with
    /// its rectangle in the window (logical pixels) and what is said for
    /// it (no pointer names them). None for a part of the world.
    pub drawn: Option<std::sync::Arc<[(Rect, String)]>>,
}

impl Part {
    /// The world point at the centre of cell (`row`, `col`).
    pub fn cell_centre(&self, row: usize, col: usize) -> Vec3 {
        let (w, h) = (self.rect.width(), self.rect.height());
        Vec3::new(
            self.rect.min.x + (col as f32 + 0.5) / self.cols.max(1) as f32 * w,
            self.rect.max.y - (row as f32 + 0.5) / self.rows.max(1) as f32 * h,
            self.z,
        )
    }

    /// The world corners of cell (`row`, `col`), or of the whole part.
    pub fn corners(&self, cell: Option<(usize, usize)>) -> [Vec3; 4] {
        let r = match cell {
            None => self.rect,
            Some((row, col)) => {
                let (cw, ch) = (
                    self.rect.width() / self.cols.max(1) as f32,
                    self.rect.height() / self.rows.max(1) as f32,
                );
                let x0 = self.rect.min.x + col as f32 * cw;
                let y1 = self.rect.max.y - row as f32 * ch;
                Rect::new(x0, y1 - ch, x0 + cw, y1)
            }
        };
        [
            r.min.extend(self.z),
            Vec2::new(r.max.x, r.min.y).extend(self.z),
            r.max.extend(self.z),
            Vec2::new(r.min.x, r.max.y).extend(self.z),
        ]
    }
}

/// The parts of a picture drawn with egui (the Time-lapse scene's maps and
/// charts), listed by its drawing code each frame in reading order, their
/// rectangles in the window: the keyboard visits them as it visits a
/// world picture's parts, and each cell says what it holds.
#[derive(Resource, Default, Debug, Clone, PartialEq)]
pub struct DrawnParts(pub Vec<Part>);

impl Part {
    /// A part egui draws at `rect` (window logical pixels) with `cells`,
    /// `rows` × `cols` of them row by row (none: a part without cells).
    pub fn drawn(name: String, group: Option<String>, rect: Rect, rows: usize, cols: usize, cells: Vec<(Rect, String)>) -> Part {
        let (rows, cols) = if cells.len() == rows * cols && !cells.is_empty() { (rows, cols) } else { (1, 1) };
        Part {
            name,
            group,
            rows,
            cols,
            rect,
            z: 0.0,
            drawn: Some(cells.into()),
        }
    }

    /// A drawn part's cell (`row`, `col`): its rectangle and words.
    pub fn drawn_cell(&self, row: usize, col: usize) -> Option<&(Rect, String)> {
        self.drawn.as_ref()?.get(row * self.cols + col)
    }
}

/// The parts of the picture on screen, in the order the keyboard visits
/// them. Scenes that draw named regions get them from
/// [`super::SceneRegion`] (and [`RegionGrid`]); a scene that draws
/// otherwise (the 3D walk-through) lists its own.
#[derive(Resource, Default, Debug, Clone, PartialEq)]
pub struct PictureParts(pub Vec<Part>);

/// The cells of a [`super::SceneRegion`] that is a grid (a heatmap, an
/// attention map): the keyboard steps through them.
#[derive(Component, Debug, Clone, Copy)]
pub struct RegionGrid {
    pub rows: usize,
    pub cols: usize,
}

/// The group (↑ and ↓ jump between groups) of a [`super::SceneRegion`] or
/// of a [`FocusablePart`] (the Model scene's layer).
#[derive(Component, Debug, Clone, PartialEq, Eq)]
pub struct RegionGroup(pub String);

/// Something drawn that the keyboard can focus but that is not one of the
/// scene's named regions (the Model scene's heatmaps): its name, group and
/// cells, listed with the regions in reading order.
#[derive(Component, Debug, Clone)]
pub struct FocusablePart(pub Part);

/// Where the keyboard's focus stands in for the pointer (window logical
/// pixels), while it is on a cell; `None` leaves the mouse's pointer.
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq)]
pub struct VirtualPointer(pub Option<Vec2>);

/// Enter on a focused cell this frame: the scene does what a click there does.
#[derive(Resource, Default, Debug, Clone, Copy)]
pub struct KeyActivate(pub bool);

/// Fingers that went down on a panel (egui had the pointer): they are the
/// panel's, not the picture's (the camera's `read_fingers` keeps it).
#[derive(Resource, Default, Debug, Clone)]
pub struct PanelTouches(pub std::collections::HashSet<u64>);

/// A finger that lifted within this many points of where it went down
/// tapped; one that moved further panned.
pub const TAP_SLOP: f32 = 10.0;

/// The pointer as a scene reads it: the mouse's, or the keyboard focus's
/// when it is on a cell, or a finger's on the picture; a click, Enter on
/// the focused cell, or a tap.
#[derive(SystemParam)]
pub struct PointerInput<'w, 's> {
    windows: Query<'w, 's, &'static Window, With<bevy::window::PrimaryWindow>>,
    buttons: Res<'w, ButtonInput<MouseButton>>,
    virtual_pointer: Res<'w, VirtualPointer>,
    activate: Res<'w, KeyActivate>,
    touches: Res<'w, Touches>,
    panel_touches: Res<'w, PanelTouches>,
}

impl PointerInput<'_, '_> {
    /// The pointer in window logical pixels.
    pub fn position(&self) -> Option<Vec2> {
        self.virtual_pointer
            .0
            .or_else(|| self.windows.single().ok()?.cursor_position())
            .or_else(|| self.finger())
    }

    /// A finger on the picture (down, or lifting this frame): where it is.
    fn finger(&self) -> Option<Vec2> {
        let mine = |t: &&bevy::input::touch::Touch| !self.panel_touches.0.contains(&t.id());
        self.touches
            .iter()
            .find(mine)
            .or_else(|| self.touches.iter_just_released().find(mine))
            .map(|t| t.position())
    }

    /// A finger on the picture lifted this frame near where it went down.
    fn tapped(&self) -> bool {
        self.touches
            .iter_just_released()
            .any(|t| !self.panel_touches.0.contains(&t.id()) && t.distance().length() < TAP_SLOP)
    }

    /// Whether the keyboard's focus is the pointer now (egui's wish for
    /// the mouse does not apply then).
    pub fn from_keyboard(&self) -> bool {
        self.virtual_pointer.0.is_some()
    }

    /// The primary button went down this frame, Enter on a cell, or a tap
    /// (at its end: until then it may be a pan).
    pub fn just_pressed(&self) -> bool {
        self.buttons.just_pressed(MouseButton::Left) || self.activate.0 || self.tapped()
    }

    /// The primary button came up this frame, Enter on a cell, or a tap.
    pub fn just_released(&self) -> bool {
        self.buttons.just_released(MouseButton::Left) || self.activate.0 || self.tapped()
    }
}

/// Where the keyboard's focus is in the picture: off, on a part, or on one
/// of its cells. While it is on, the arrows are the focus's (the camera's
/// arrow keys and the presenter's step keys wait).
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PictureFocus {
    pub active: bool,
    /// Index into [`PictureParts`].
    pub part: usize,
    /// (row, column) when the focus is on a cell.
    pub cell: Option<(usize, usize)>,
}

/// A region's name as a listener hears it: `h.1.head2` → "block 1, head 2".
pub fn spoken_region(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("h.")
        && let Some((layer, head)) = rest.split_once(".head")
    {
        return format!("block {layer}, head {head}");
    }
    if let Some(n) = name.strip_prefix("block") {
        return format!("block {n}");
    }
    if let Some(n) = name.strip_prefix("token") {
        return format!("byte {n}");
    }
    spoken(name)
}

/// Signs a screen reader reads poorly, in words.
pub fn spoken(text: &str) -> String {
    text.replace('ᵀ', " transposed")
        .replace('μ', "mean")
        .replace('σ', "sigma")
        .replace('Δ', "delta ")
        .replace('␣', "space")
        .replace('↵', "newline")
        .replace('×', " by ")
        .replace("  ", " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_are_said_in_words() {
        assert_eq!(spoken_region("h.1.head2"), "block 1, head 2");
        assert_eq!(spoken("h.0.attn.qkv Wᵀ"), "h.0.attn.qkv W transposed");
    }
}

/// Names a panel control for a screen reader where egui leaves it unnamed:
/// a button that shows only a sign (⏮), a field whose label egui does not
/// tie to it (a combo box's label, a text field's hint). Returns the
/// response, for chaining.
pub fn named(
    response: bevy_egui::egui::Response,
    kind: bevy_egui::egui::WidgetType,
    name: impl Into<String>,
) -> bevy_egui::egui::Response {
    let name = name.into();
    let enabled = response.enabled();
    response.widget_info(|| bevy_egui::egui::WidgetInfo::labeled(kind, enabled, name.clone()));
    response
}

/// A scene toolbar's prompt field: one line of text, `width` wide, with its
/// hint, named "prompt" for a screen reader (the hint is not a name).
pub fn prompt_field(
    ui: &mut bevy_egui::egui::Ui,
    prompt: &mut String,
    width: f32,
    hint: String,
) -> bevy_egui::egui::Response {
    use bevy_egui::egui;
    named(
        ui.add(egui::TextEdit::singleline(prompt).desired_width(width).hint_text(hint)),
        egui::WidgetType::TextEdit,
        crate::t!("access-prompt"),
    )
}
