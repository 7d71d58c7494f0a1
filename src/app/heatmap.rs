//! Heatmap pixels from tensor values: area pooling down to a texture-sized
//! grid, a diverging colour map on a symmetric scale, and the statistics the
//! inspector shows. Pure functions, shared by the Model scene and its tests.

/// Largest texture side a heatmap uses; bigger matrices are area-pooled.
pub const MAX_SIDE: usize = 256;

/// Summary statistics of a tensor's values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub std: f64,
    pub min: f32,
    pub max: f32,
    /// L2 norm of the values.
    pub norm: f64,
    /// max |x|: the half-width of the symmetric colour scale.
    pub abs_max: f32,
}

pub fn stats(values: &[f32]) -> Stats {
    if values.is_empty() {
        return Stats::default();
    }
    let n = values.len() as f64;
    let (mut sum, mut sq, mut min, mut max) = (0.0f64, 0.0f64, f32::INFINITY, f32::NEG_INFINITY);
    for &v in values {
        sum += v as f64;
        sq += v as f64 * v as f64;
        min = min.min(v);
        max = max.max(v);
    }
    let mean = sum / n;
    Stats {
        mean,
        std: (sq / n - mean * mean).max(0.0).sqrt(),
        min,
        max,
        norm: sq.sqrt(),
        abs_max: min.abs().max(max.abs()),
    }
}

/// The `q` quantile (0..=1) of |x| over `values` (every value when there
/// are few, an even sample of 65,536 otherwise): a colour scale that a few
/// outliers do not set. Falls back to max |x| when that quantile is 0.
pub fn abs_percentile(values: &[f32], q: f64) -> f32 {
    if values.is_empty() {
        return 0.0;
    }
    let stride = values.len().div_ceil(1 << 16);
    let mut abs: Vec<f32> = values
        .iter()
        .step_by(stride)
        .map(|v| v.abs())
        .filter(|v| v.is_finite())
        .collect();
    if abs.is_empty() {
        return 0.0;
    }
    let k = ((abs.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    let (_, v, _) = abs.select_nth_unstable_by(k, f32::total_cmp);
    let v = *v;
    if v > 0.0 {
        v
    } else {
        abs.iter().copied().fold(0.0, f32::max)
    }
}

/// The (rows, cols) a tensor is drawn as: a matrix as itself, a vector as one row.
pub fn grid_of(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (1, *n),
        [rows, rest @ ..] => (*rows, rest.iter().product()),
    }
}

/// The texture size for a (rows, cols) grid: at most [`MAX_SIDE`] a side.
pub fn texture_size(rows: usize, cols: usize) -> (usize, usize) {
    (rows.clamp(1, MAX_SIDE), cols.clamp(1, MAX_SIDE))
}

/// Mean of each texel's block of the (rows, cols) row-major `values`, for an
/// (out_rows, out_cols) texture. Every value lands in exactly one texel.
pub fn pool(
    values: &[f32],
    rows: usize,
    cols: usize,
    out_rows: usize,
    out_cols: usize,
) -> Vec<f32> {
    assert_eq!(values.len(), rows * cols, "values do not fill the grid");
    let mut out = vec![0.0f32; out_rows * out_cols];
    for (tr, out_row) in out.chunks_exact_mut(out_cols).enumerate() {
        let (r0, r1) = (
            tr * rows / out_rows,
            ((tr + 1) * rows / out_rows).max(tr * rows / out_rows + 1),
        );
        for (tc, texel) in out_row.iter_mut().enumerate() {
            let (c0, c1) = (
                tc * cols / out_cols,
                ((tc + 1) * cols / out_cols).max(tc * cols / out_cols + 1),
            );
            let mut sum = 0.0f64;
            for r in r0..r1 {
                sum += values[r * cols + c0..r * cols + c1]
                    .iter()
                    .map(|&v| v as f64)
                    .sum::<f64>();
            }
            *texel = (sum / ((r1 - r0) * (c1 - c0)) as f64) as f32;
        }
    }
    out
}

/// Stops of the diverging colour map (ColorBrewer RdBu, reversed): blue for
/// negative, near-white for zero, red for positive. sRGB bytes.
const STOPS: [[f32; 3]; 5] = [
    [33.0, 102.0, 172.0],
    [146.0, 197.0, 222.0],
    [247.0, 247.0, 247.0],
    [244.0, 165.0, 130.0],
    [178.0, 24.0, 43.0],
];

/// ColorBrewer PuOr (orange for negative, purple for positive): the
/// colour-blind-safe choice of the view menu (no red against green, and
/// distinct in every common colour vision deficiency). sRGB bytes.
const STOPS_PUOR: [[f32; 3]; 5] = [
    [179.0, 88.0, 6.0],
    [253.0, 184.0, 99.0],
    [247.0, 247.0, 247.0],
    [178.0, 171.0, 210.0],
    [84.0, 39.0, 136.0],
];

/// The diverging palette every heatmap uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Palette {
    RedBlue,
    OrangePurple,
}

static PALETTE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// The palette in use (one for the whole app: the heatmaps and their bars).
pub fn palette() -> Palette {
    match PALETTE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => Palette::OrangePurple,
        _ => Palette::RedBlue,
    }
}

/// Switches the palette; heatmaps take it when they are next coloured.
pub fn set_palette(p: Palette) {
    PALETTE.store(
        match p {
            Palette::RedBlue => 0,
            Palette::OrangePurple => 1,
        },
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The colour of `v` on the scale [-half_width, +half_width] (sRGB, opaque).
/// Values beyond the scale take the end colours; NaN is drawn magenta.
pub fn diverging(v: f32, half_width: f32) -> [u8; 4] {
    if !v.is_finite() {
        return [255, 0, 255, 255];
    }
    let t = if half_width > 0.0 {
        (v / half_width).clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let stops = match palette() {
        Palette::RedBlue => &STOPS,
        Palette::OrangePurple => &STOPS_PUOR,
    };
    ramp(stops, (t + 1.0) * 0.5)
}

/// The colour at `u` in 0..=1 along evenly spaced `stops`, linearly
/// interpolated (sRGB, opaque).
fn ramp(stops: &[[f32; 3]], u: f32) -> [u8; 4] {
    let x = u * (stops.len() - 1) as f32;
    let i = (x.floor() as usize).min(stops.len() - 2);
    let f = x - i as f32;
    let c = |k: usize| (stops[i][k] + (stops[i + 1][k] - stops[i][k]) * f).round() as u8;
    [c(0), c(1), c(2), 255]
}

/// Stops of the sequential colour map for values in 0..1 (attention
/// weights): near-black through purple and orange to pale yellow, like
/// matplotlib's "inferno", readable on a projector. sRGB bytes.
const SEQUENTIAL: [[f32; 3]; 6] = [
    [8.0, 6.0, 24.0],
    [66.0, 10.0, 104.0],
    [147.0, 38.0, 103.0],
    [221.0, 81.0, 58.0],
    [252.0, 165.0, 10.0],
    [252.0, 255.0, 164.0],
];

/// The colour of `t` in 0..1 on the sequential map (clamped; NaN magenta).
pub fn sequential(t: f32) -> [u8; 4] {
    if !t.is_finite() {
        return [255, 0, 255, 255];
    }
    ramp(&SEQUENTIAL, t.clamp(0.0, 1.0))
}

/// Above an attention map's diagonal: the causal mask, a flat colour apart
/// from P = 0.
pub const MASKED: [u8; 4] = [30, 33, 44, 255];

/// RGBA pixels of P (n × n, row i at the top): a sequential colour map on
/// 0..1 (or on 0..row max), the masked upper triangle in its own flat colour
/// (a model from the lab without the mask has no masked triangle).
pub fn colour_attention(p: &[f32], n: usize, row_normalised: bool, causal: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * n * 4);
    for i in 0..n {
        let row = &p[i * n..(i + 1) * n];
        let seen = if causal { i + 1 } else { n };
        let scale = if row_normalised {
            row[..seen]
                .iter()
                .copied()
                .fold(0.0f32, f32::max)
                .max(1e-12)
        } else {
            1.0
        };
        for (j, &x) in row.iter().enumerate() {
            out.extend(if j >= seen {
                MASKED
            } else {
                sequential(x / scale)
            });
        }
    }
    out
}

/// RGBA8 pixels of a pooled grid on a symmetric scale.
pub fn colorize(pooled: &[f32], half_width: f32) -> Vec<u8> {
    pooled
        .iter()
        .flat_map(|&v| diverging(v, half_width))
        .collect()
}

/// Okabe and Ito's colour-blind-safe palette (black left out): the
/// time-lapse's heads, the class experiment's values.
pub const OKABE_ITO: [bevy_egui::egui::Color32; 7] = [
    bevy_egui::egui::Color32::from_rgb(230, 159, 0),
    bevy_egui::egui::Color32::from_rgb(86, 180, 233),
    bevy_egui::egui::Color32::from_rgb(0, 158, 115),
    bevy_egui::egui::Color32::from_rgb(240, 228, 66),
    bevy_egui::egui::Color32::from_rgb(0, 114, 178),
    bevy_egui::egui::Color32::from_rgb(213, 94, 0),
    bevy_egui::egui::Color32::from_rgb(204, 121, 167),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Machado, Oliveira and Fernandes (2009), severity 1: what a viewer
    /// with protanopia or deuteranopia sees of a linear-RGB colour.
    const PROTANOPIA: [[f64; 3]; 3] = [
        [0.152286, 1.052583, -0.204868],
        [0.114503, 0.786281, 0.099216],
        [-0.003882, -0.048116, 1.051998],
    ];
    const DEUTERANOPIA: [[f64; 3]; 3] = [
        [0.367322, 0.860646, -0.227968],
        [0.280085, 0.672501, 0.047413],
        [-0.011820, 0.042940, 0.968881],
    ];

    /// CIELAB (D65) of an sRGB colour as `vision` sees it.
    fn seen(vision: &[[f64; 3]; 3], c: [u8; 4]) -> [f64; 3] {
        let lin = |b: u8| {
            let c = b as f64 / 255.0;
            if c <= 0.04045 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
        };
        let rgb = [lin(c[0]), lin(c[1]), lin(c[2])];
        let l: Vec<f64> = vision.iter().map(|row| (0..3).map(|k| row[k] * rgb[k]).sum::<f64>().clamp(0.0, 1.0)).collect();
        let x = (0.4124 * l[0] + 0.3576 * l[1] + 0.1805 * l[2]) / 0.95047;
        let y = 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2];
        let z = (0.0193 * l[0] + 0.1192 * l[1] + 0.9505 * l[2]) / 1.08883;
        let f = |t: f64| if t > 0.008856 { t.cbrt() } else { 7.787 * t + 16.0 / 116.0 };
        [116.0 * f(y) - 16.0, 500.0 * (f(x) - f(y)), 200.0 * (f(y) - f(z))]
    }

    fn delta_e(a: [f64; 3], b: [f64; 3]) -> f64 {
        ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
    }

    #[test]
    fn the_colour_blind_palette_stays_readable_under_protanopia_and_deuteranopia() {
        // Simulated (Machado 2009), ΔE in CIELAB: the two ends of the
        // diverging scale far apart, each far from zero's white, every
        // eighth of the scale a visible step; the sequential map's
        // lightness rising all the way, so its order survives.
        let ends = |vision, stops: &[[f32; 3]]| {
            let at = |u: f32| seen(vision, ramp(stops, u));
            (delta_e(at(0.0), at(1.0)), delta_e(at(0.0), at(0.5)).min(delta_e(at(1.0), at(0.5))),
             (0..8).map(|k| delta_e(at(k as f32 / 8.0), at((k + 1) as f32 / 8.0))).fold(f64::MAX, f64::min))
        };
        for (name, vision) in [("protanopia", &PROTANOPIA), ("deuteranopia", &DEUTERANOPIA)] {
            let (apart, from_zero, step) = ends(vision, &STOPS_PUOR);
            assert!(apart > 80.0 && from_zero > 60.0 && step > 10.0, "PuOr under {name}: ends {apart:.1}, from zero {from_zero:.1}, step {step:.1}");
            let lightness: Vec<f64> = (0..=16).map(|k| seen(vision, ramp(&SEQUENTIAL, k as f32 / 16.0))[0]).collect();
            assert!(lightness.windows(2).all(|w| w[1] > w[0]), "the sequential map under {name}: {lightness:?}");
        }
        // Red/blue's ends come closer under protanopia: why PuOr is the
        // colour-blind choice.
        let (red_blue, _, _) = ends(&PROTANOPIA, &STOPS);
        let (puor, _, _) = ends(&PROTANOPIA, &STOPS_PUOR);
        assert!(red_blue < puor, "red/blue {red_blue:.1}, PuOr {puor:.1}");
    }

    #[test]
    fn pooling_keeps_the_mean_and_every_value() {
        let values: Vec<f32> = (0..7 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
        let same = pool(&values, 7, 5, 7, 5);
        assert_eq!(same, values);
        let pooled = pool(&values, 7, 5, 3, 2);
        assert_eq!(pooled.len(), 6);
        // Block (rows 0..2, cols 0..2)
        let want = (values[0] + values[1] + values[5] + values[6]) / 4.0;
        assert!((pooled[0] - want).abs() < 1e-6);
        let one = pool(&values, 7, 5, 1, 1)[0];
        let mean = values.iter().sum::<f32>() / values.len() as f32;
        assert!((one - mean).abs() < 1e-6);
    }

    #[test]
    fn the_colour_map_is_symmetric_and_saturates() {
        assert_eq!(diverging(0.0, 1.0), [247, 247, 247, 255]);
        assert_eq!(diverging(-1.0, 1.0), [33, 102, 172, 255]);
        assert_eq!(diverging(1.0, 1.0), [178, 24, 43, 255]);
        assert_eq!(diverging(5.0, 1.0), diverging(1.0, 1.0));
        assert_eq!(diverging(f32::NAN, 1.0), [255, 0, 255, 255]);
        let (neg, pos) = (diverging(-0.5, 1.0), diverging(0.5, 1.0));
        assert!(
            neg[2] > neg[0] && pos[0] > pos[2],
            "negative is blue, positive red"
        );
    }

    #[test]
    fn the_percentile_scale_ignores_a_few_outliers() {
        let mut values: Vec<f32> = (0..1000).map(|i| (i as f32 / 1000.0) - 0.5).collect();
        values[3] = 100.0;
        let p = abs_percentile(&values, 0.99);
        assert!(p > 0.45 && p < 0.5, "{p}");
        assert_eq!(abs_percentile(&[0.0, 0.0, 3.0], 0.5), 3.0);
        assert_eq!(abs_percentile(&[], 0.99), 0.0);
    }

    #[test]
    fn stats_of_known_values() {
        let s = stats(&[1.0, -3.0, 2.0, 0.0]);
        assert_eq!((s.min, s.max, s.abs_max), (-3.0, 2.0, 3.0));
        assert!((s.mean - 0.0).abs() < 1e-12);
        assert!((s.std - (14.0f64 / 4.0).sqrt()).abs() < 1e-12);
        assert!((s.norm - 14.0f64.sqrt()).abs() < 1e-12);
        assert_eq!(grid_of(&[3, 4]), (3, 4));
        assert_eq!(grid_of(&[9]), (1, 9));
        assert_eq!(texture_size(1000, 3), (256, 3));
    }
}
