//! The worked example inside the picture: in a forward beat, the output
//! cell [`crate::worked`] works out (the op's largest output at the
//! prompt's last byte) is outlined, and so is what it reads — for a
//! matmul the weight's row across and the input's column down, which meet
//! at that cell (the layout's one rule); for the other ops the same
//! feature of each input, and of γ, β or the bias (and a LayerNorm's μ
//! and 1/σ at the byte, in the rows under it). The narration gives the
//! formula with its largest terms filled in, beside the program's number.

use super::compute::Computed;
use super::layout::{OpKind, Slab, Source, TensorFamily, TourPass, WalkLayout};
use super::{Scene, Shown, WalkView};
use bevy::prelude::*;

/// A mark of the worked example (drawn and cleared here alone, not with
/// the picture's [`super::WalkItem`]s).
#[derive(Component)]
pub struct Mark;

/// The beat and the pass the marks were drawn for.
#[derive(Resource, Default, PartialEq)]
pub struct Marked(Option<(usize, u64)>);

/// The rectangles to outline for beat `beat`: (slab, row range, column
/// range) in cells.
pub fn marks_of(walk: &WalkLayout, computed: &Computed, beat: usize) -> Vec<(usize, (usize, usize), (usize, usize))> {
    let Some(b) = walk.beats.get(beat) else {
        return Vec::new();
    };
    if b.pass != TourPass::Forward {
        return Vec::new();
    }
    let Some(node) = &b.node else { return Vec::new() };
    let Some(i) = computed.flow.nodes.iter().position(|n| &n.name == node) else {
        return Vec::new();
    };
    let Some(Some(worked)) = computed.worked.get(i) else {
        return Vec::new();
    };
    let j = worked.index;
    let p = computed.flow.tokens.len() - 1;
    let byte = computed.flow.tokens[p] as usize;
    let out = &walk.slabs[b.slabs[0]];
    let mut marks = vec![(b.slabs[0], (j, j + 1), (p, p + 1))];
    // A matmul, or a LayerNorm (which reads the whole column for its mean
    // and variance), reads the input's whole column; the other ops the
    // same feature.
    let reads_column = matches!(b.kind, OpKind::LayerNorm | OpKind::FinalNorm)
        || b.slabs.iter().any(|&s| {
            let slab = &walk.slabs[s];
            matches!(slab.source, Source::Param { transposed: false, .. }) && slab.cols > 1
        });
    for &s in &b.slabs[1..] {
        let slab: &Slab = &walk.slabs[s];
        let whole_rows = (0, slab.rows);
        let mark = match (&slab.source, slab.family) {
            // The embedding tables, one column per byte and per position.
            (Source::Param { transposed: true, name }, _) => {
                let col = if name.contains("wte") { byte } else { p };
                ((j, j + 1), (col, col + 1))
            }
            // A matmul's weight: the output's row across.
            (Source::Param { .. }, TensorFamily::Weight) if slab.cols > 1 && slab.rows == out.rows => {
                ((j, j + 1), (0, slab.cols))
            }
            // A bias, γ or β: the output's feature.
            (Source::Param { .. }, _) if slab.cols == 1 && slab.rows == out.rows => ((j, j + 1), (0, 1)),
            // A matmul's or a LayerNorm's input: the byte's column down.
            (Source::Node(_), _) if reads_column => (whole_rows, (p, p + 1)),
            // An elementwise op's input: the same feature, same byte.
            (Source::Node(_), _) if slab.rows == out.rows => ((j, j + 1), (p, p + 1)),
            // A LayerNorm's μ and 1/σ at the byte (the formula's μ and σ),
            // or each head's log Σ e^s at the query.
            (Source::Stat(_), _) => ((0, 1), (p, p + 1)),
            _ => continue,
        };
        marks.push((s, mark.0, mark.1));
    }
    marks
}

/// Draws the marks of the beat (again when the beat or the numbers change).
pub fn draw(
    mut commands: Commands,
    shown: Res<Shown>,
    view: Res<WalkView>,
    compute: Res<super::compute::WalkCompute>,
    mut marked: ResMut<Marked>,
    old: Query<Entity, With<Mark>>,
) {
    let (Some(walk), Some(computed)) = (&shown.walk, compute.computed()) else {
        return;
    };
    let key = Some((view.beat(), compute.generation));
    if marked.0 == key {
        return;
    }
    marked.0 = key;
    for e in &old {
        commands.entity(e).despawn();
    }
    for (s, rows, cols) in marks_of(walk, computed, view.beat()) {
        let slab = &walk.slabs[s];
        let r = slab.rect();
        let (x0, x1) = (r.min.x + cols.0 as f32 * slab.cell.x, r.min.x + cols.1 as f32 * slab.cell.x);
        let (y1, y0) = (r.max.y - rows.0 as f32 * slab.cell.y, r.max.y - rows.1 as f32 * slab.cell.y);
        let size = Vec2::new(x1 - x0, y1 - y0);
        let centre = Vec2::new(x0 + x1, y0 + y1) * 0.5;
        // An outline: four thin bars round the cells.
        let t = (slab.cell.min_element() * 0.45).max(0.5);
        for (at, bar) in [
            (centre + Vec2::Y * (size.y + t) * 0.5, Vec2::new(size.x + 2.0 * t, t)),
            (centre - Vec2::Y * (size.y + t) * 0.5, Vec2::new(size.x + 2.0 * t, t)),
            (centre + Vec2::X * (size.x + t) * 0.5, Vec2::new(t, size.y)),
            (centre - Vec2::X * (size.x + t) * 0.5, Vec2::new(t, size.y)),
        ] {
            commands.spawn((
                Sprite::from_color(super::colour::mark(), bar),
                Transform::from_translation(at.extend(slab.corner.z + 0.1)),
                Mark,
                DespawnOnExit(Scene::Walk),
            ));
        }
    }
}
