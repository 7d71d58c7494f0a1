//! The dot product, term by term: in a matmul's forward beat, a cursor
//! walks the worked example's weight row and input column together (the
//! row's i-th cell and the column's i-th cell light at once) while the
//! narration adds each product W[j, i]·x[i] to a running sum, which ends,
//! with the bias, at the program's own output cell. Backward, the same
//! grammar twice: the input's gradient dx[i, p] at the last position with
//! a gradient pairs W's column i with dy's column p (Σ_j W[j, i]·dy[j, p]),
//! then the weight's gradient dW[j, i] pairs dy's row j with x's row i over
//! the prompt's positions (Σ_t dy[j, t]·x[i, t]). The terms are the picture's
//! own numbers (the drawn grids of [`super::draw::grid`]). The sweeps run on
//! their own clock while the beat is shown, playing or paused (about
//! [`SWEEP_S`] seconds each, then the whole sum stays); with reduced motion
//! they are shown whole at once.

use super::colour::CellLens;
use super::compute::{Computed, WalkCompute};
use super::layout::{Slab, Source, TensorFamily, TourPass, WalkLayout};
use super::marks::marks_of;
use super::{Scene, Shown, WalkView};
use crate::app::ui::state::UiState;
use bevy::prelude::*;

/// How long one sweep of the row takes.
pub const SWEEP_S: f64 = 4.0;

/// Which sum a sweep adds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepKind {
    /// y[j] = Σ_i W[j, i]·x[i] (+ b[j]), forward.
    Output,
    /// dx[i, p] = Σ_j W[j, i]·dy[j, p], backward.
    InputGradient,
    /// dW[j, i] = Σ_t dy[j, t]·x[i, t], backward.
    WeightGradient,
}

impl SweepKind {
    /// Its name in the headless report.
    pub fn key(self) -> &'static str {
        match self {
            SweepKind::Output => "output",
            SweepKind::InputGradient => "input_gradient",
            SweepKind::WeightGradient => "weight_gradient",
        }
    }
}

/// A cell of the picture: (slab, row, column).
pub type Cell = (usize, usize, usize);

/// A matmul's worked cell as a sum of terms, each the product of two drawn
/// cells, plus the bias (forward).
#[derive(Clone, Debug, PartialEq)]
pub struct DotProduct {
    pub kind: SweepKind,
    /// The cell the sum ends at.
    pub out: Cell,
    /// Each term's two cells (forward: W[j, i] and x[i]; the input's
    /// gradient: W[j, i] and dy[j, p]; the weight's: dy[j, t] and x[i, t]).
    pub pairs: Vec<[Cell; 2]>,
    /// Each term's product, as drawn (f64 sums of f32 products).
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
    let pairs = (0..k).map(|i| [(weight, row, i), (input, i, column)]).collect();
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
        kind: SweepKind::Output,
        out: (out, row, column),
        pairs,
        terms,
        bias,
    })
}

/// The sweeps of beat `beat`: a matmul's output forward; backward, its
/// input's gradient at the last position with one (the largest feature;
/// the prompt's last byte has no next byte to be scored on), then
/// its weight's gradient (the largest cell; not for a weight the picture
/// uses twice, as the tied embedding, whose gradient sums both uses).
pub fn dots_of(walk: &WalkLayout, computed: &Computed, beat: usize) -> Vec<DotProduct> {
    match walk.beats.get(beat).map(|b| b.pass) {
        Some(TourPass::Forward) => dot_of(walk, computed, beat).into_iter().collect(),
        Some(TourPass::Backward) => backward_dots(walk, computed, beat),
        _ => Vec::new(),
    }
}

/// A matmul's backward beat's two sums (see [`dots_of`]).
fn backward_dots(walk: &WalkLayout, computed: &Computed, beat: usize) -> Vec<DotProduct> {
    let b = &walk.beats[beat];
    let Some((&out, rest)) = b.slabs.split_first() else {
        return Vec::new();
    };
    let out_slab = &walk.slabs[out];
    let (rows, t) = (out_slab.rows, out_slab.cols);
    let Some(weight) = rest.iter().copied().find(|&s| {
        let slab = &walk.slabs[s];
        matches!(slab.source, Source::Param { transposed: false, .. })
            && slab.family == TensorFamily::Weight
            && slab.cols > 1
            && slab.rows == rows
    }) else {
        return Vec::new();
    };
    let k = walk.slabs[weight].cols;
    let Some(input) = rest.iter().copied().find(|&s| {
        let slab = &walk.slabs[s];
        matches!(slab.source, Source::Node(_)) && slab.rows == k && slab.cols == t
    }) else {
        return Vec::new();
    };
    let grid = |s: usize, lens| super::draw::grid(computed, &walk.slabs[s], lens);
    let (Some(w), Some(x), Some(dy)) = (
        grid(weight, CellLens::Value),
        grid(input, CellLens::Value),
        grid(out, CellLens::Gradient),
    ) else {
        return Vec::new();
    };
    if t == 0 || rows == 0 || k == 0 {
        return Vec::new();
    }
    // The last position with a gradient (the prompt's last byte has no
    // next byte to be scored on, so its dy is zero).
    let p = (0..t)
        .rev()
        .find(|&q| (0..rows).any(|j| dy[j * t + q] != 0.0))
        .unwrap_or(t - 1);
    let largest = |values: &mut dyn Iterator<Item = f64>| {
        values
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |best, (i, v)| if v.abs() > best.1 { (i, v.abs()) } else { best })
            .0
    };
    let mut dots = Vec::new();
    // dx[i, p]: W's column i against dy's column p.
    let dx_term = |i: usize, j: usize| w[j * k + i] as f64 * dy[j * t + p] as f64;
    let i = largest(&mut (0..k).map(|i| (0..rows).map(|j| dx_term(i, j)).sum::<f64>()));
    dots.push(DotProduct {
        kind: SweepKind::InputGradient,
        out: (input, i, p),
        pairs: (0..rows).map(|j| [(weight, j, i), (out, j, p)]).collect(),
        terms: (0..rows).map(|j| dx_term(i, j)).collect(),
        bias: None,
    });
    // dW[j, i]: dy's row j against x's row i, over the positions.
    let Source::Param { name, .. } = &walk.slabs[weight].source else {
        return dots;
    };
    let uses = walk
        .slabs
        .iter()
        .filter(|s| matches!(&s.source, Source::Param { name: n, .. } if n == name))
        .count();
    if let (1, Some(dw)) = (uses, grid(weight, CellLens::Gradient)) {
        let cell = largest(&mut dw.iter().map(|&v| v as f64));
        let (j, i) = (cell / k, cell % k);
        dots.push(DotProduct {
            kind: SweepKind::WeightGradient,
            out: (weight, j, i),
            pairs: (0..t).map(|q| [(out, j, q), (input, i, q)]).collect(),
            terms: (0..t).map(|q| dy[j * t + q] as f64 * x[i * t + q] as f64).collect(),
            bias: None,
        });
    }
    dots
}

/// The sweeps under way: their beat and pass, when they started, which is
/// running and how many of its terms it has added.
#[derive(Resource, Default)]
pub struct Sweep {
    key: Option<(usize, u64)>,
    started: f64,
    pub dots: Vec<DotProduct>,
    /// The sweep running (the last stays once all are done).
    pub current: usize,
    /// Its terms added so far (all of them once it is done).
    pub added: usize,
}

impl Sweep {
    /// The sweep running, if the beat has any.
    pub fn dot(&self) -> Option<&DotProduct> {
        self.dots.get(self.current)
    }
}

/// The cursor's two cells.
#[derive(Component)]
pub struct SweepCursor;

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
        state.dots = dots_of(walk, computed, view.beat());
        if !same_beat {
            state.started = now;
        }
    }
    let state = &mut *state;
    if state.dots.is_empty() {
        state.current = 0;
        state.added = 0;
        for (e, ..) in &cursors {
            commands.entity(e).despawn();
        }
        return;
    }
    // Each sweep its SWEEP_S in turn; the last stays whole.
    let last = state.dots.len() - 1;
    let elapsed = (now - state.started).max(0.0);
    let current = if ui_state.reduced_motion {
        last
    } else {
        ((elapsed / SWEEP_S).floor() as usize).min(last)
    };
    let dot = &state.dots[current];
    let k = dot.terms.len();
    let added = if ui_state.reduced_motion || k == 0 {
        k
    } else {
        let local = elapsed - current as f64 * SWEEP_S;
        ((local / SWEEP_S * k as f64).floor() as usize + 1).min(k)
    };
    state.current = current;
    state.added = added;
    // The cursor is on the term just added; gone once the sum is whole.
    let cells = (added < k).then(|| dot.pairs[added - 1]);
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
                    Sprite::from_color(super::colour::cursor(), size),
                    at,
                    SweepCursor,
                    DespawnOnExit(Scene::Walk),
                ));
            }
        }
    }
}

/// The narration's line of the sweeps: each one done, whole (with the
/// bias forward), and the one running: the term just added and the running
/// sum.
pub fn line(state: &Sweep) -> Option<String> {
    let lines: Vec<String> = state
        .dots
        .iter()
        .enumerate()
        .take(state.current + 1)
        .map(|(n, dot)| {
            let added = if n < state.current { dot.terms.len() } else { state.added };
            dot_line(dot, added)
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// One sweep's line after `added` of its terms.
fn dot_line(dot: &DotProduct, added: usize) -> String {
    let k = dot.terms.len();
    let num = crate::worked::num;
    let (_, row, column) = dot.out;
    if added < k {
        let n = added.saturating_sub(1);
        let term = num(dot.terms[n]);
        let sum = num(dot.partial(added));
        let (added, k) = (added as i64, k as i64);
        match dot.kind {
            SweepKind::Output => crate::t!("walk-sweep", j = row as i64, i = n as i64, term = term.as_str(), added = added, k = k, sum = sum.as_str()),
            SweepKind::InputGradient => crate::t!("walk-sweep-dx", j = n as i64, i = row as i64, p = column as i64, term = term.as_str(), added = added, k = k, sum = sum.as_str()),
            SweepKind::WeightGradient => crate::t!("walk-sweep-dw", j = row as i64, i = column as i64, t = n as i64, term = term.as_str(), added = added, k = k, sum = sum.as_str()),
        }
    } else {
        let sum = dot.partial(k);
        match (dot.kind, dot.bias) {
            (SweepKind::Output, Some(b)) => crate::t!(
                "walk-sweep-done-bias",
                k = k as i64,
                sum = num(sum).as_str(),
                bias = num(b).as_str(),
                total = num(sum + b).as_str(),
            ),
            (SweepKind::Output, None) => crate::t!("walk-sweep-done", k = k as i64, sum = num(sum).as_str()),
            (SweepKind::InputGradient, _) => {
                crate::t!("walk-sweep-dx-done", k = k as i64, sum = num(sum).as_str(), i = row as i64, p = column as i64)
            }
            (SweepKind::WeightGradient, _) => crate::t!("walk-sweep-dw-done", k = k as i64, sum = num(sum).as_str(), j = row as i64, i = column as i64),
        }
    }
}
