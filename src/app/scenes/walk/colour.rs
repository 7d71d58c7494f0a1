//! The walk-through's colours: one diverging scale per family with zero
//! fixed at a neutral grey (activations purple ↔ green, weights orange ↔
//! blue, gradients magenta ↔ teal, AdamW's updates coral ↔ yellow: pairs
//! with no red against green, told
//! apart in the common colour-vision deficiencies and on a washed-out
//! projector), each tensor's scale its own 99th percentile of |v|; the
//! attention weights and probabilities on the app's sequential map; and
//! the signed-max aggregate that keeps a tensor larger than its texture
//! legible. Two canvases: dark (the app's) and light (paper, zero a light
//! grey and the families' darker ends, after ColorBrewer's PuOr, PuGn and
//! PiYG), chosen with [`set_light`].

use super::layout::TensorFamily;
use bevy::color::Color;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the canvas is light (read where textures are coloured, which
/// may be the scene's worker thread).
static LIGHT: AtomicBool = AtomicBool::new(false);

/// Colours the walk-through for a light canvas (or the dark one).
pub fn set_light(light: bool) {
    LIGHT.store(light, Ordering::Relaxed);
}

pub fn light() -> bool {
    LIGHT.load(Ordering::Relaxed)
}

/// The canvas behind the tensors.
pub fn background() -> Color {
    if light() {
        crate::app::canvas::LIGHT_BACKGROUND
    } else {
        crate::app::canvas::BACKGROUND
    }
}

/// Text on the canvas.
pub fn ink() -> Color {
    if light() {
        crate::app::canvas::LIGHT_INK
    } else {
        crate::app::canvas::LABEL_COLOUR
    }
}

/// The worked example's outlines and the sweep's cursor: gold and white
/// on the dark canvas, deep orange and near-black on the light one.
pub fn mark() -> Color {
    if light() { Color::srgba(0.80, 0.40, 0.0, 0.95) } else { Color::srgba(1.0, 0.93, 0.35, 0.9) }
}

pub fn cursor() -> Color {
    if light() { Color::srgba(0.05, 0.05, 0.07, 0.8) } else { Color::srgba(1.0, 1.0, 1.0, 0.8) }
}

/// Zero, on every diverging scale (a step off the background, so a
/// tensor of zeros still shows its shape).
pub fn zero() -> [f32; 3] {
    if light() { [0.84, 0.84, 0.83] } else { [0.20, 0.21, 0.24] }
}

/// A cell with nothing in it (the causal mask's upper triangle, a position
/// with no loss): nearer the background than zero.
pub fn masked() -> [u8; 4] {
    if light() { [236, 236, 233, 255] } else { [26, 28, 34, 255] }
}
/// The most texels a side of a tensor's texture has; larger tensors are
/// aggregated.
pub const MAX_SIDE: usize = 1024;

/// What a tensor's cells show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellLens {
    Value,
    Gradient,
    /// AdamW's update of a weight, w′ − w.
    Update,
}

/// The two ends of a family's diverging scale (negative, positive), linear
/// RGB-ish sRGB triples.
fn ends(family: TensorFamily, lens: CellLens) -> ([f32; 3], [f32; 3]) {
    if light() {
        // Dark enough to hold against white: #c51b7d/#01665e, #d6604d/
        // #8c6600, #b35806/#2166ac, #762a83/#1b7837.
        return match (lens, family) {
            (CellLens::Gradient, _) => ([0.77, 0.11, 0.49], [0.0, 0.40, 0.37]),
            (CellLens::Update, _) => ([0.84, 0.38, 0.30], [0.55, 0.40, 0.0]),
            (CellLens::Value, TensorFamily::Weight) => ([0.70, 0.35, 0.02], [0.13, 0.40, 0.67]),
            _ => ([0.46, 0.16, 0.51], [0.11, 0.47, 0.22]),
        };
    }
    match (lens, family) {
        (CellLens::Gradient, _) => ([0.93, 0.35, 0.72], [0.25, 0.82, 0.76]),
        (CellLens::Update, _) => ([0.96, 0.42, 0.36], [0.97, 0.87, 0.30]),
        (CellLens::Value, TensorFamily::Weight) => ([0.98, 0.60, 0.22], [0.35, 0.62, 1.0]),
        _ => ([0.72, 0.48, 0.92], [0.40, 0.85, 0.42]),
    }
}

/// The frame's colour of a family (the positive end).
pub fn frame(family: TensorFamily, lens: CellLens) -> [f32; 3] {
    match (family, light()) {
        (TensorFamily::Probability, false) => [0.98, 0.75, 0.25],
        (TensorFamily::Probability, true) => [0.62, 0.32, 0.0],
        (TensorFamily::Loss, false) => [0.95, 0.45, 0.35],
        (TensorFamily::Loss, true) => [0.75, 0.20, 0.15],
        _ => ends(family, lens).1,
    }
}

/// The colour of `v` on `family`'s scale of half-width `scale`.
pub fn colour(v: f32, scale: f32, family: TensorFamily, lens: CellLens) -> [u8; 4] {
    if v.is_nan() {
        return masked();
    }
    match (family, lens) {
        (TensorFamily::Probability, CellLens::Value) => {
            crate::app::heatmap::sequential((v / scale.max(1e-12)).sqrt())
        }
        (TensorFamily::Loss, CellLens::Value) => {
            let f = (v / scale.max(1e-12)).clamp(0.0, 1.0);
            mix(zero(), frame(TensorFamily::Loss, lens), f)
        }
        _ => {
            let (neg, pos) = ends(family, lens);
            let f = if scale > 0.0 {
                (v.abs() / scale).clamp(0.0, 1.0).powf(0.7)
            } else {
                0.0
            };
            mix(zero(), if v < 0.0 { neg } else { pos }, f)
        }
    }
}

fn mix(a: [f32; 3], b: [f32; 3], f: f32) -> [u8; 4] {
    let c = |k: usize| ((a[k] + (b[k] - a[k]) * f) * 255.0).round().clamp(0.0, 255.0) as u8;
    [c(0), c(1), c(2), 255]
}

/// The scale a tensor is coloured on: the 99th percentile of |v| over its
/// finite values (the probabilities: their largest).
pub fn scale_of(values: &[f32], family: TensorFamily) -> f32 {
    let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    match family {
        TensorFamily::Probability | TensorFamily::Loss => finite.iter().copied().fold(0.0, f32::max),
        _ => crate::app::heatmap::abs_percentile(&finite, 0.99),
    }
}

/// A (rows, cols) row-major grid cut to at most [`MAX_SIDE`] a side: each
/// texel keeps the value of largest |v| of its block with its sign (a mean
/// would wash a lone large weight out). Returns the grid and its size.
pub fn aggregate(values: &[f32], rows: usize, cols: usize) -> (Vec<f32>, usize, usize) {
    let (out_rows, out_cols) = (rows.clamp(1, MAX_SIDE), cols.clamp(1, MAX_SIDE));
    if (out_rows, out_cols) == (rows, cols) {
        return (values.to_vec(), rows, cols);
    }
    let mut out = vec![f32::NAN; out_rows * out_cols];
    for r in 0..rows {
        let tr = r * out_rows / rows;
        for c in 0..cols {
            let tc = c * out_cols / cols;
            let v = values[r * cols + c];
            let o = &mut out[tr * out_cols + tc];
            if o.is_nan() || v.abs() > o.abs() {
                *o = v;
            }
        }
    }
    (out, out_rows, out_cols)
}

/// RGBA8 pixels of a grid.
pub fn pixels(values: &[f32], scale: f32, family: TensorFamily, lens: CellLens) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| colour(v, scale, family, lens))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_the_same_grey_in_every_family_and_the_signs_differ() {
        for family in [TensorFamily::Activation, TensorFamily::Weight] {
            for lens in [CellLens::Value, CellLens::Gradient, CellLens::Update] {
                assert_eq!(colour(0.0, 1.0, family, lens), colour(0.0, 2.0, TensorFamily::Activation, CellLens::Value));
                assert_ne!(colour(1.0, 1.0, family, lens), colour(-1.0, 1.0, family, lens));
            }
        }
        assert_ne!(
            colour(1.0, 1.0, TensorFamily::Weight, CellLens::Value),
            colour(1.0, 1.0, TensorFamily::Activation, CellLens::Value)
        );
    }

    #[test]
    fn the_aggregate_keeps_the_largest_value_with_its_sign() {
        let rows = 2 * MAX_SIDE;
        let mut values = vec![0.1f32; rows * 3];
        values[5 * 3 + 1] = -7.0;
        let (out, r, c) = aggregate(&values, rows, 3);
        assert_eq!((r, c), (MAX_SIDE, 3));
        assert_eq!(out[2 * 3 + 1], -7.0);
        assert_eq!(out[0], 0.1);
        assert!(out.iter().all(|v| v.is_finite()));
    }
}
