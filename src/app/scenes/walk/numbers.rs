//! Numbers on the cells: once a tensor's cells are wide enough on screen
//! to hold one (a small model, or the learner zoomed in), each visible cell
//! of the beat's tensors shows its value, or its gradient in the backward
//! pass, in black or white against its colour; flat cells below that. The
//! numbers are the program's, the same the texture was coloured from.

use super::colour::{self, CellLens};
use super::compute::WalkCompute;
use super::draw::{self, LABEL_FONT_PX};
use super::layout::Slab;
use super::tour::world_per_px;
use super::{Scene, Shown, WalkItem, WalkView, state_at};
use crate::app::canvas::SceneCamera;
use bevy::prelude::*;

/// A cell's number: pooled text, hidden while unused.
#[derive(Component)]
pub struct CellNumber;

/// At most this many numbers at once; a tensor whose visible cells would
/// pass it shows none (never half a tensor numbered).
pub const MAX_NUMBERS: usize = 1500;

/// The narrowest and the lowest cell, in pixels on screen, that shows its
/// number (its text is then at least 12 px, [`number_px`]).
pub const NUMBER_CELL_PX: f32 = 44.0;
pub const NUMBER_ROW_PX: f32 = 15.0;

/// What the last frame showed: how many numbers, and the first few
/// (slab, row, column, whether a gradient, text) for the headless line.
#[derive(Resource, Default, Debug, PartialEq)]
pub struct NumbersShown {
    pub count: usize,
    pub first: Vec<(usize, usize, usize, bool, String)>,
}

/// The text size for a cell `width` × `height` pixels: six characters
/// with a margin, one line with a margin, at most 20 px.
pub fn number_px(width: f32, height: f32) -> f32 {
    (width / 3.6).min(height * 0.8).min(20.0)
}

/// A number in at most six characters: two decimals (three digits at
/// most) where they fit, a power of ten from 1000 and under 0.01.
pub fn cell_text(v: f32) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-2..1e3).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Cells `lo..hi` of `n` (each `cell` wide from `start`, growing with
/// `sign`) that meet the world interval `from..to`.
fn visible(start: f32, cell: f32, sign: f32, n: usize, from: f32, to: f32) -> std::ops::Range<usize> {
    let (a, b) = ((from - start) * sign / cell, (to - start) * sign / cell);
    let (a, b) = (a.min(b), a.max(b));
    let lo = a.floor().clamp(0.0, n as f32) as usize;
    let hi = b.ceil().clamp(0.0, n as f32) as usize;
    lo..hi
}

/// One number to show: its cell, text, colour, and where (world) at what
/// scale.
struct Wanted {
    cell: (usize, usize, usize, bool),
    text: String,
    colour: Color,
    at: Vec3,
    scale: f32,
}

#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn draw_numbers(
    mut commands: Commands,
    shown: Res<Shown>,
    view: Res<WalkView>,
    compute: Res<WalkCompute>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    mut pool: Query<
        (&mut Text2d, &mut TextColor, &mut Transform, &mut Visibility),
        With<CellNumber>,
    >,
    mut grids: ResMut<draw::SlabGrids>,
    mut count: ResMut<NumbersShown>,
    narration: Res<super::panel::NarrationHeight>,
) {
    let mut wanted: Vec<Wanted> = Vec::new();
    (|| {
        let walk = shown.walk.as_ref()?;
        let computed = compute.computed()?;
        let (camera, at) = cameras.single().ok()?;
        let rect = camera.logical_viewport_rect()?;
        let beat = view.beat().min(walk.beats.len() - 1);
        if beat == 0 {
            return Some(());
        }
        // Only whole cells between the toolbar's status line and the
        // narration carry a number: none is cut off or under a panel.
        // (World-to-viewport points are on the render target, the
        // viewport's offset included.)
        let free = Rect::new(
            rect.min.x,
            rect.min.y + crate::app::canvas::camera::TOOLBAR_PX + 30.0,
            rect.max.x,
            rect.max.y - narration.0,
        );
        let (focused, gradient) = state_at(walk, beat);
        let eye = at.translation();
        let forward = *at.forward();
        let corners = [
            free.min,
            Vec2::new(free.max.x, free.min.y),
            Vec2::new(free.min.x, free.max.y),
            free.max,
        ];
        for (i, slab) in walk.slabs.iter().enumerate() {
            if !focused[i] || wanted.len() >= MAX_NUMBERS {
                continue;
            }
            let depth = (slab.centre() - eye).dot(forward);
            if depth <= 0.0 {
                continue;
            }
            let wpp = world_per_px(depth, rect.height());
            let cell_px = slab.cell / wpp;
            if cell_px.x < NUMBER_CELL_PX || cell_px.y < NUMBER_ROW_PX {
                continue;
            }
            // The part of the slab's plane seen in the free part.
            let (mut lo, mut hi) = (Vec2::splat(f32::INFINITY), Vec2::splat(f32::NEG_INFINITY));
            for c in corners {
                let ray = camera.viewport_to_world(at, c).ok()?;
                let dz = ray.direction.z;
                if dz.abs() < 1e-6 {
                    return Some(());
                }
                let p = ray.origin + *ray.direction * ((slab.corner.z - ray.origin.z) / dz);
                lo = lo.min(p.truncate());
                hi = hi.max(p.truncate());
            }
            let cols = visible(slab.corner.x, slab.cell.x, 1.0, slab.cols, lo.x, hi.x);
            let rows = visible(slab.corner.y, slab.cell.y, -1.0, slab.rows, lo.y, hi.y);
            if wanted.len() + rows.len() * cols.len() > MAX_NUMBERS {
                continue;
            }
            let lens = gradient[i];
            let Some((values, scale)) = grids.get(compute.generation, computed, i, slab, lens)
            else {
                continue;
            };
            let px = number_px(cell_px.x, cell_px.y);
            for r in rows {
                for c in cols.clone() {
                    let v = values[r * slab.cols + c];
                    if !v.is_finite() {
                        continue;
                    }
                    let centre = cell_centre(slab, r, c);
                    let whole = camera.world_to_viewport(at, centre).ok().is_some_and(|p| {
                        let half = cell_px * 0.5;
                        free.contains(p - half) && free.contains(p + half)
                    });
                    if !whole {
                        continue;
                    }
                    wanted.push(Wanted {
                        cell: (i, r, c, lens == CellLens::Gradient),
                        text: cell_text(v),
                        colour: ink_on(colour::colour(v, *scale, slab.family, lens)),
                        at: centre,
                        scale: px * wpp / LABEL_FONT_PX,
                    });
                }
            }
        }
        Some(())
    })();
    let mut spare = pool.iter_mut();
    for w in &wanted {
        let transform = Transform::from_translation(w.at).with_scale(Vec3::splat(w.scale));
        match spare.next() {
            Some((mut text, mut colour, mut t, mut visibility)) => {
                if text.0 != w.text {
                    text.0.clone_from(&w.text);
                }
                if colour.0 != w.colour {
                    colour.0 = w.colour;
                }
                if *t != transform {
                    *t = transform;
                }
                if *visibility != Visibility::Inherited {
                    *visibility = Visibility::Inherited;
                }
            }
            None => {
                commands.spawn((
                    Text2d::new(w.text.clone()),
                    TextFont::from_font_size(LABEL_FONT_PX),
                    TextColor(w.colour),
                    transform,
                    CellNumber,
                    WalkItem,
                    DespawnOnExit(Scene::Walk),
                ));
            }
        }
    }
    for (.., mut visibility) in spare {
        if *visibility != Visibility::Hidden {
            *visibility = Visibility::Hidden;
        }
    }
    let now = NumbersShown {
        count: wanted.len(),
        first: wanted
            .iter()
            .take(24)
            .map(|w| (w.cell.0, w.cell.1, w.cell.2, w.cell.3, w.text.clone()))
            .collect(),
    };
    if *count != now {
        *count = now;
    }
}

/// A cell's centre, just in front of its slab (the 2D pipeline sorts by z).
pub fn cell_centre(slab: &Slab, row: usize, col: usize) -> Vec3 {
    slab.corner + Vec3::new((col as f32 + 0.5) * slab.cell.x, -(row as f32 + 0.5) * slab.cell.y, 0.02)
}

/// Black on light cells, white on dark ones.
fn ink_on([r, g, b, _]: [u8; 4]) -> Color {
    let l = 0.2126 * r as f32 + 0.7152 * g as f32 + 0.0722 * b as f32;
    if l > 140.0 {
        Color::srgb(0.05, 0.05, 0.07)
    } else {
        Color::srgb(0.96, 0.96, 0.97)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_number_takes_at_most_six_characters() {
        for v in [0.0, 1.0, -1.0, 0.123456, -0.00123, -0.004, 12.345, -99.99, 123.4, -999.4, 1234.5, -1e-4, 3.4e38, -1e-30] {
            let t = cell_text(v);
            assert!(t.chars().count() <= 6, "{v}: {t}");
            // It reads back as the number, to its precision.
            let back: f32 = t.parse().unwrap();
            assert!((back - v).abs() <= v.abs() * 0.5 + 0.005, "{v}: {t}");
        }
        assert_eq!(cell_text(-0.125), "-0.12");
        // Nothing rounds to a signed zero.
        assert_eq!(cell_text(-0.004), "-4e-3");
        assert_eq!(cell_text(0.0), "0");
        assert!(number_px(NUMBER_CELL_PX, NUMBER_ROW_PX) >= 12.0);
        assert_eq!(number_px(1000.0, 1000.0), 20.0);
        assert_eq!(number_px(1000.0, 20.0), 16.0);
    }

    #[test]
    fn only_the_cells_in_view_are_numbered() {
        // Columns from x = 10, 2 wide, 8 of them: x 13..15 meets 1 and 2.
        assert_eq!(visible(10.0, 2.0, 1.0, 8, 13.0, 15.0), 1..3);
        // Rows downward from y = 0: y -3..-1 meets rows 0 and 1.
        assert_eq!(visible(0.0, 2.0, -1.0, 8, -3.0, -1.0), 0..2);
        // Wholly outside: none.
        assert!(visible(10.0, 2.0, 1.0, 8, -50.0, -40.0).is_empty());
        assert!(visible(10.0, 2.0, 1.0, 8, 100.0, 140.0).is_empty());
        assert_eq!(visible(10.0, 2.0, 1.0, 8, -1e9, 1e9), 0..8);
    }
}
