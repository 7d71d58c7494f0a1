//! The dot product, term by term: in a matmul's forward beat, a cursor
//! walks the worked example's weight row and input column together (the
//! row's i-th cell and the column's i-th cell light at once) while the
//! narration adds each product W[j, i]·x[i] to a running sum, which ends,
//! with the bias, at the program's own output cell. The terms are the
//! picture's own numbers (the drawn grids of [`super::draw::grid`]). The
//! sweep runs on its own clock while the beat is shown, playing or paused
//! (about [`SWEEP_S`] seconds, then the whole sum stays); with reduced
//! motion it is shown whole at once.

use super::colour::CellLens;
use super::compute::{Computed, WalkCompute};
use super::layout::{Slab, Source, TensorFamily, WalkLayout};
use super::marks::marks_of;
use super::{Scene, Shown, WalkView};
use crate::app::ui::state::UiState;
use bevy::prelude::*;

/// How long one sweep of the row takes.
pub const SWEEP_S: f64 = 4.0;

/// A matmul's worked output as a sum of terms: slab `weight`'s row `row`
/// times slab `input`'s column `column`, plus the bias.
#[derive(Clone, Debug, PartialEq)]
pub struct DotProduct {
    pub weight: usize,
    pub input: usize,
    pub row: usize,
    pub column: usize,
    /// W[row, i]·x[i] for each i, as drawn (f64 sums of f32 products).
    pub terms: Vec<f64>,
    pub bias: Option<f64>,
}

impl DotProduct {
    /// The sum of the first `k` terms.
    pub fn partial(&self, k: usize) -> f64 {
        self.terms[..k.min(self.terms.len())].iter().sum()
    }
}

/// The dot product of beat `beat`, if it is a matmul's forward beat with a
/// worked example: its outlined weight row and input column.
pub fn dot_of(walk: &WalkLayout, computed: &Computed, beat: usize) -> Option<DotProduct> {
    let marks = marks_of(walk, computed, beat);
    let (&(out, (row, _), (column, _)), reads) = marks.split_first()?;
    let is_row = |s: &Slab, cols: (usize, usize)| {
        matches!(s.source, Source::Param { transposed: false, .. })
            && s.family == TensorFamily::Weight
            && s.cols > 1
            && cols == (0, s.cols)
    };
    let &(weight, _, _) = reads.iter().find(|(s, _, cols)| is_row(&walk.slabs[*s], *cols))?;
    let k = walk.slabs[weight].cols;
    let &(input, _, _) = reads.iter().find(|(s, rows, _)| {
        let slab = &walk.slabs[*s];
        matches!(slab.source, Source::Node(_)) && slab.rows == k && *rows == (0, k)
    })?;
    let grid = |s: usize| super::draw::grid(computed, &walk.slabs[s], CellLens::Value);
    let (w, x) = (grid(weight)?, grid(input)?);
    let t = walk.slabs[input].cols;
    let terms = (0..k)
        .map(|i| w[row * k + i] as f64 * x[i * t + column] as f64)
        .collect();
    let out_rows = walk.slabs[out].rows;
    let bias = reads
        .iter()
        .map(|&(s, _, _)| s)
        .find(|&s| {
            let slab = &walk.slabs[s];
            slab.cols == 1 && slab.rows == out_rows && slab.name.ends_with("bias")
        })
        .and_then(|s| grid(s).map(|b| b[row] as f64));
    Some(DotProduct {
        weight,
        input,
        row,
        column,
        terms,
        bias,
    })
}

/// The sweep under way: its beat and pass, when it started, and how many
/// terms it has added.
#[derive(Resource, Default)]
pub struct Sweep {
    key: Option<(usize, u64)>,
    started: f64,
    pub dot: Option<DotProduct>,
    /// Terms added so far (all of them once it is done).
    pub added: usize,
}

/// The cursor's two cells.
#[derive(Component)]
pub struct SweepCursor;

/// The cursor's colour: white, over the gold outlines.
const CURSOR: Color = Color::srgba(1.0, 1.0, 1.0, 0.8);

/// Moves the sweep on and its cursor with it.
#[allow(clippy::too_many_arguments)]
pub fn sweep(
    mut commands: Commands,
    time: Res<Time<Real>>,
    shown: Res<Shown>,
    view: Res<WalkView>,
    compute: Res<WalkCompute>,
    ui_state: Res<UiState>,
    mut state: ResMut<Sweep>,
    mut cursors: Query<(Entity, &mut Transform, &mut Sprite), With<SweepCursor>>,
) {
    let now = time.elapsed_secs_f64();
    let (Some(walk), Some(computed)) = (&shown.walk, compute.computed()) else {
        return;
    };
    let key = Some((view.beat(), compute.generation));
    if state.key != key {
        // A new pass while the beat stays (a run that trains) keeps the
        // sweep where it was.
        let same_beat = state.key.is_some_and(|(b, _)| b == view.beat());
        state.key = key;
        state.dot = dot_of(walk, computed, view.beat());
        if !same_beat {
            state.started = now;
        }
    }
    let state = &mut *state;
    let Some(dot) = &state.dot else {
        state.added = 0;
        for (e, ..) in &cursors {
            commands.entity(e).despawn();
        }
        return;
    };
    let k = dot.terms.len();
    let added = if ui_state.reduced_motion {
        k
    } else {
        (((now - state.started) / SWEEP_S * k as f64).floor() as usize + 1).min(k)
    };
    state.added = added;
    // The cursor is on the term just added; gone once the sum is whole.
    let cells = (added < k).then(|| {
        let i = added - 1;
        [(dot.weight, dot.row, i), (dot.input, i, dot.column)]
    });
    let Some(cells) = cells else {
        for (e, ..) in &cursors {
            commands.entity(e).despawn();
        }
        return;
    };
    let mut existing: Vec<_> = cursors.iter_mut().collect();
    for (n, (s, r, c)) in cells.into_iter().enumerate() {
        let slab = &walk.slabs[s];
        let rect = slab.rect();
        let centre = Vec2::new(
            rect.min.x + (c as f32 + 0.5) * slab.cell.x,
            rect.max.y - (r as f32 + 0.5) * slab.cell.y,
        );
        let at = Transform::from_translation(centre.extend(slab.corner.z + 0.2));
        // A cell and a bit, but never smaller than a 25th of the tensor's
        // longer side: seen from the beat's framing, not only zoomed in.
        let least = 0.04 * (slab.cols as f32 * slab.cell.x).max(slab.rows as f32 * slab.cell.y);
        let size = (slab.cell * 1.3).max(Vec2::splat(least));
        match existing.get_mut(n) {
            Some((_, transform, sprite)) => {
                if **transform != at {
                    **transform = at;
                }
                if sprite.custom_size != Some(size) {
                    sprite.custom_size = Some(size);
                }
            }
            None => {
                commands.spawn((
                    Sprite::from_color(CURSOR, size),
                    at,
                    SweepCursor,
                    DespawnOnExit(Scene::Walk),
                ));
            }
        }
    }
}

/// The narration's line of the sweep: the term just added and the running
/// sum, or the whole sum with the bias once it is done.
pub fn line(state: &Sweep) -> Option<String> {
    let dot = state.dot.as_ref()?;
    let k = dot.terms.len();
    let num = crate::worked::num;
    if state.added < k {
        let i = state.added.saturating_sub(1);
        Some(crate::t!(
            "walk-sweep",
            j = dot.row as i64,
            i = i as i64,
            term = num(dot.terms[i]).as_str(),
            added = state.added as i64,
            k = k as i64,
            sum = num(dot.partial(state.added)).as_str(),
        ))
    } else {
        let sum = dot.partial(k);
        Some(match dot.bias {
            Some(b) => crate::t!(
                "walk-sweep-done-bias",
                k = k as i64,
                sum = num(sum).as_str(),
                bias = num(b).as_str(),
                total = num(sum + b).as_str(),
            ),
            None => crate::t!("walk-sweep-done", k = k as i64, sum = num(sum).as_str()),
        })
    }
}
