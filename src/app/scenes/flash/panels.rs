//! The Flash scene's pictures: Q, K, V and O in GPU memory, one
//! workgroup's shared memory with the tiles it holds and the blocks it
//! computes, and the grid of (query tile, key block) pairs.

use super::{DONE, KEY, NUMBERS, PANEL, QUERY, SKIPPED, TEXT, WEAK};
use crate::app::heatmap;
use crate::flash::{FlashTrace, Pass, Visit, human_bytes};
use crate::gpu::kernels::ATTENTION_TILE;
use crate::probe::byte_label;
use bevy_egui::egui;
use std::collections::HashMap;

/// The head's T×D tensors as heatmap textures (D wide, T tall), each on its
/// own symmetric scale (99th percentile of |x|).
pub(super) fn make_pictures(
    ctx: &egui::Context,
    trace: &FlashTrace,
) -> HashMap<&'static str, egui::TextureHandle> {
    let (t, d) = (trace.t, trace.d);
    let tensors: [(&'static str, &[f32]); 8] = [
        ("Q", &trace.q),
        ("K", &trace.k),
        ("V", &trace.v),
        ("O", &trace.o),
        ("dO", &trace.dout),
        ("dQ", &trace.dq),
        ("dK", &trace.dk),
        ("dV", &trace.dv),
    ];
    let mut out: HashMap<&'static str, egui::TextureHandle> = tensors
        .into_iter()
        .map(|(name, values)| {
            let half = heatmap::abs_percentile(values, 0.99);
            let rgba = heatmap::colorize(values, half);
            let image = egui::ColorImage::from_rgba_unmultiplied([d, t], &rgba);
            (
                name,
                ctx.load_texture(
                    format!("flash-{name}"),
                    image,
                    egui::TextureOptions::NEAREST,
                ),
            )
        })
        .collect();
    // The log-sum-exp: one column, on its own range.
    let (lo, hi) = trace
        .lse
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let rgba: Vec<u8> = trace
        .lse
        .iter()
        .flat_map(|&x| heatmap::sequential(if hi > lo { (x - lo) / (hi - lo) } else { 0.5 }))
        .collect();
    let image = egui::ColorImage::from_rgba_unmultiplied([1, t], &rgba);
    out.insert(
        "lse",
        ctx.load_texture("flash-lse", image, egui::TextureOptions::NEAREST),
    );
    out
}

pub(super) fn text(
    painter: &egui::Painter,
    pos: egui::Pos2,
    anchor: egui::Align2,
    s: impl ToString,
    size: f32,
    colour: egui::Color32,
) -> egui::Rect {
    painter.text(
        pos,
        anchor,
        s.to_string(),
        egui::FontId::proportional(size),
        colour,
    )
}

/// Where the memory columns put each tile (for the flying tiles).
pub(super) struct Slots {
    /// Tensor name → its column rectangle.
    columns: HashMap<&'static str, egui::Rect>,
    t: usize,
}

impl Slots {
    /// Rows `tile·TILE..` of a column.
    fn tile(&self, name: &str, tile: usize) -> egui::Rect {
        rows_of(self.columns[name], tile_span(self.t, tile))
    }
}

/// Rows `tile·TILE..` of T as fractions (top, bottom) of 0..1: where a tile
/// sits in a column, and in a T-tall texture.
fn tile_span(t: usize, tile: usize) -> (f32, f32) {
    (
        (tile * ATTENTION_TILE) as f32 / t as f32,
        (((tile + 1) * ATTENTION_TILE).min(t)) as f32 / t as f32,
    )
}

/// The horizontal band (top, bottom) of `rect`, as fractions of its height.
fn rows_of(rect: egui::Rect, (top, bottom): (f32, f32)) -> egui::Rect {
    egui::Rect::from_min_max(
        egui::pos2(rect.min.x, rect.min.y + top * rect.height()),
        egui::pos2(rect.max.x, rect.min.y + bottom * rect.height()),
    )
}

/// Draws tile `tile` of a T-tall tensor texture into `rect`.
fn draw_tile(
    painter: &egui::Painter,
    texture: &egui::TextureHandle,
    rect: egui::Rect,
    t: usize,
    tile: usize,
) {
    let uv = rows_of(
        egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
        tile_span(t, tile),
    );
    painter.image(texture.id(), rect, uv, egui::Color32::WHITE);
}

/// The columns a pass shows: inputs, then what it writes.
fn columns_of(pass: Pass) -> (&'static [&'static str], &'static [&'static str]) {
    match pass {
        Pass::Forward => (&["Q", "K", "V"], &["O", "lse"]),
        Pass::BackwardDkdv => (&["Q", "K", "V", "dO"], &["dK", "dV"]),
        Pass::BackwardDq => (&["Q", "K", "V", "dO"], &["dQ"]),
    }
}

/// Tiles the workgroup of the current visit owns and loads, per pass.
fn tiles_of(pass: Pass, v: &Visit) -> (Vec<(&'static str, usize)>, Vec<(&'static str, usize)>) {
    match pass {
        // (owned, loaded this visit)
        Pass::Forward => (
            vec![("Q", v.q_tile)],
            vec![("K", v.k_block), ("V", v.k_block)],
        ),
        Pass::BackwardDkdv => (
            vec![("K", v.k_block), ("V", v.k_block)],
            vec![("Q", v.q_tile), ("dO", v.q_tile)],
        ),
        Pass::BackwardDq => (
            vec![("Q", v.q_tile), ("dO", v.q_tile)],
            vec![("K", v.k_block), ("V", v.k_block)],
        ),
    }
}

/// Whether the workgroup that writes tile `tile` of an output has finished
/// by the visit at `position` (it writes once, after its last visit).
fn written(visits: &[&Visit], position: usize, done: bool, pass: Pass, tile: usize) -> bool {
    let owner = |v: &Visit| {
        if pass.walks_queries() {
            v.k_block
        } else {
            v.q_tile
        }
    };
    match visits.iter().rposition(|v| owner(v) == tile) {
        Some(last) => last < position || (done && last == position),
        None => false,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn draw_memory(
    painter: &egui::Painter,
    rect: egui::Rect,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    visits: &[&Visit],
    position: usize,
    done: bool,
    textures: &HashMap<&'static str, egui::TextureHandle>,
) -> Slots {
    painter.rect_filled(rect, 6.0, PANEL);
    text(
        painter,
        rect.min + egui::vec2(10.0, 8.0),
        egui::Align2::LEFT_TOP,
        "GPU memory (global)",
        15.0,
        TEXT,
    );
    let (inputs, outputs) = columns_of(pass);
    let n = inputs.len() + outputs.len();
    let inner = rect.shrink2(egui::vec2(12.0, 0.0));
    let top = rect.min.y + 50.0;
    let bottom = rect.max.y - 26.0;
    let gap = 10.0;
    let lse_w = 12.0;
    let wide = n - outputs.iter().filter(|&&o| o == "lse").count();
    let col_w = ((inner.width()
        - gap * (n as f32 - 1.0)
        - if outputs.contains(&"lse") { lse_w } else { 0.0 })
        / wide as f32)
        .min(70.0);
    let mut x = inner.min.x;
    let mut columns = HashMap::new();
    let uv = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
    for (k, &name) in inputs.iter().chain(outputs).enumerate() {
        let w = if name == "lse" { lse_w } else { col_w };
        let col = egui::Rect::from_min_max(egui::pos2(x, top), egui::pos2(x + w, bottom));
        columns.insert(name, col);
        let is_output = k >= inputs.len();
        let label_colour = if is_output { NUMBERS } else { TEXT };
        text(
            painter,
            egui::pos2(col.center().x, top - 4.0),
            egui::Align2::CENTER_BOTTOM,
            name,
            14.0,
            label_colour,
        );
        painter.rect_filled(col, 0.0, egui::Color32::from_gray(12));
        if let Some(tex) = textures.get(name) {
            if is_output {
                // An output tile appears once its workgroup has written it.
                for tile in 0..trace.tiles {
                    if written(visits, position, done, pass, tile) {
                        let r = rows_of(col, tile_span(trace.t, tile));
                        draw_tile(painter, tex, r, trace.t, tile);
                    }
                }
            } else {
                painter.image(tex.id(), col, uv, egui::Color32::WHITE);
            }
        }
        // Tile boundaries.
        for tile in 1..trace.tiles {
            let y = rows_of(col, tile_span(trace.t, tile)).min.y;
            painter.line_segment(
                [egui::pos2(col.min.x, y), egui::pos2(col.max.x, y)],
                egui::Stroke::new(1.0, egui::Color32::from_gray(70)),
            );
        }
        painter.rect_stroke(
            col,
            0.0,
            egui::Stroke::new(1.0, egui::Color32::from_gray(90)),
            egui::StrokeKind::Outside,
        );
        x += w + gap;
    }
    let slots = Slots {
        columns,
        t: trace.t,
    };
    // The current visit's tiles: owned (blue), loaded (orange).
    if let Some(v) = current {
        let (owned, loaded) = tiles_of(pass, v);
        for (name, tile) in owned {
            painter.rect_stroke(
                slots.tile(name, tile),
                0.0,
                egui::Stroke::new(2.5, QUERY),
                egui::StrokeKind::Outside,
            );
        }
        for (name, tile) in loaded {
            painter.rect_stroke(
                slots.tile(name, tile),
                0.0,
                egui::Stroke::new(2.5, KEY),
                egui::StrokeKind::Outside,
            );
        }
        for &name in outputs {
            let tile = if pass.walks_queries() {
                v.k_block
            } else {
                v.q_tile
            };
            painter.rect_stroke(
                slots.tile(name, tile),
                0.0,
                egui::Stroke::new(1.5, QUERY.gamma_multiply(0.6)),
                egui::StrokeKind::Outside,
            );
        }
    }
    text(
        painter,
        egui::pos2(rect.min.x + 10.0, rect.max.y - 6.0),
        egui::Align2::LEFT_BOTTOM,
        format!("T = {} rows, {} per tile", trace.t, ATTENTION_TILE),
        12.0,
        WEAK,
    );
    slots
}

/// Lerp of rectangles.
fn lerp_rect(a: egui::Rect, b: egui::Rect, t: f32) -> egui::Rect {
    egui::Rect::from_min_max(a.min.lerp(b.min, t), a.max.lerp(b.max, t))
}

fn smooth(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn draw_shared(
    painter: &egui::Painter,
    rect: egui::Rect,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    phase: f32,
    slots: &Slots,
    textures: &HashMap<&'static str, egui::TextureHandle>,
    pointer: Option<egui::Pos2>,
    hover: &mut Option<String>,
) {
    painter.rect_filled(rect, 6.0, egui::Color32::from_rgb(28, 34, 46));
    painter.rect_stroke(
        rect,
        6.0,
        egui::Stroke::new(1.5, egui::Color32::from_rgb(80, 110, 150)),
        egui::StrokeKind::Inside,
    );
    let bytes = crate::gpu::kernels::attention_workgroup_bytes(trace.d);
    text(
        painter,
        rect.min + egui::vec2(10.0, 8.0),
        egui::Align2::LEFT_TOP,
        format!("shared memory · {}", human_bytes(bytes)),
        15.0,
        TEXT,
    );
    text(
        painter,
        rect.min + egui::vec2(10.0, 28.0),
        egui::Align2::LEFT_TOP,
        "one workgroup: blue kept, orange loaded now",
        12.0,
        WEAK,
    );
    let Some(v) = current else { return };
    let tile = ATTENTION_TILE;
    let (owned, loaded) = tiles_of(pass, v);
    // The loaded tiles, side by side at the top; the owned tile(s) at the left.
    let inner = rect.shrink(12.0);
    let top = inner.min.y + 40.0;
    let tile_h = ((inner.height() - 60.0) * 0.3).clamp(24.0, 90.0);
    let tile_w = (tile_h * trace.d as f32 / tile as f32)
        .min((inner.width() - 40.0) / 4.0)
        .max(12.0);
    let mut slot_x = inner.min.x;
    let load = smooth(phase / 0.35);
    let place_tile =
        |name: &'static str, t: usize, moving: bool, colour: egui::Color32, label: &str, x: f32| {
            let dest =
                egui::Rect::from_min_size(egui::pos2(x, top + 16.0), egui::vec2(tile_w, tile_h));
            let from = slots.tile(name, t);
            let r = if moving {
                lerp_rect(from, dest, load)
            } else {
                dest
            };
            if let Some(tex) = textures.get(name) {
                draw_tile(painter, tex, r, trace.t, t);
            }
            painter.rect_stroke(
                r,
                0.0,
                egui::Stroke::new(2.0, colour),
                egui::StrokeKind::Outside,
            );
            text(
                painter,
                egui::pos2(dest.center().x, top + 12.0),
                egui::Align2::CENTER_BOTTOM,
                label,
                13.0,
                colour,
            );
            dest
        };
    for (name, t) in &owned {
        place_tile(name, *t, false, QUERY, &format!("{name}{t}"), slot_x);
        slot_x += tile_w + 14.0;
    }
    slot_x += 10.0;
    for (name, t) in &loaded {
        place_tile(name, *t, true, KEY, &format!("{name}{t}"), slot_x);
        slot_x += tile_w + 14.0;
    }
    // The blocks computed from them.
    let shown = smooth((phase - 0.35) / 0.25);
    let block_top = top + 16.0 + tile_h + 30.0;
    let side = (inner.max.y - block_top - 8.0)
        .min((inner.width() - 24.0) / 2.0)
        .max(40.0);
    let (a_name, b_name) = match pass {
        Pass::Forward => ("S = q·k/√D", "P̃ = exp(S − m)"),
        _ => ("P = exp(S − lse)", "dS = P∘(dP − δ)"),
    };
    let a_rect =
        egui::Rect::from_min_size(egui::pos2(inner.min.x, block_top), egui::vec2(side, side));
    let b_rect = egui::Rect::from_min_size(
        egui::pos2(inner.min.x + side + 24.0, block_top),
        egui::vec2(side, side),
    );
    let half_a = v
        .block_a
        .iter()
        .filter(|x| x.is_finite() && x.abs() < 1e30)
        .fold(0.0f32, |m, x| m.max(x.abs()));
    let half_b = v.block_b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let first_row = v.q_tile * tile;
    let first_col = v.k_block * tile;
    for (r, name, values, half, sequential) in [
        (a_rect, a_name, &v.block_a, half_a, pass != Pass::Forward),
        (b_rect, b_name, &v.block_b, half_b, pass == Pass::Forward),
    ] {
        text(
            painter,
            egui::pos2(r.min.x, r.min.y - 4.0),
            egui::Align2::LEFT_BOTTOM,
            name,
            14.0,
            NUMBERS,
        );
        let cell = r.width() / tile as f32;
        for i in 0..tile {
            for j in 0..tile {
                let c = egui::Rect::from_min_size(
                    r.min + egui::vec2(j as f32 * cell, i as f32 * cell),
                    egui::vec2(cell, cell),
                );
                let (qi, kj) = (first_row + i, first_col + j);
                let masked = qi >= trace.t || kj >= trace.t || kj > qi;
                let x = values[i * tile + j];
                let colour = if masked {
                    SKIPPED
                } else if sequential {
                    let [r, g, b, _] = heatmap::sequential(if half > 0.0 { x / half } else { 0.0 });
                    egui::Color32::from_rgb(r, g, b)
                } else {
                    let [r, g, b, _] = heatmap::diverging(x, half);
                    egui::Color32::from_rgb(r, g, b)
                };
                painter.rect_filled(
                    c.shrink(0.5),
                    0.0,
                    colour.gamma_multiply(if masked { 1.0 } else { shown }),
                );
                if let Some(p) = pointer
                    && c.contains(p)
                {
                    let what = if masked {
                        "masked: key after the query (causal)".to_string()
                    } else {
                        format!("{x:.4}")
                    };
                    *hover = Some(format!(
                        "{name}\nquery {qi} `{}` · key {kj} `{}`\n{what}",
                        trace.tokens.get(qi).map_or("".into(), |&b| byte_label(b)),
                        trace.tokens.get(kj).map_or("".into(), |&b| byte_label(b)),
                    ));
                }
            }
        }
        painter.rect_stroke(
            r,
            0.0,
            egui::Stroke::new(1.0, egui::Color32::from_gray(110)),
            egui::StrokeKind::Outside,
        );
    }
    let note = match pass {
        Pass::Forward => format!(
            "{tile}×{tile} scores live only here; the row max m and sum l update, O is rescaled"
        ),
        Pass::BackwardDkdv => {
            "P recomputed from q, k and the saved lse; dK += dSᵀ·Q, dV += Pᵀ·dO".into()
        }
        Pass::BackwardDq => "P recomputed again; dQ += dS·K".into(),
    };
    text(
        painter,
        egui::pos2(inner.min.x, inner.max.y + 4.0),
        egui::Align2::LEFT_BOTTOM,
        note,
        12.0,
        WEAK,
    );
}

#[allow(clippy::too_many_arguments)]
pub(super) fn draw_grid(
    painter: &egui::Painter,
    rect: egui::Rect,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    visits: &[&Visit],
    position: usize,
    pointer: Option<egui::Pos2>,
    hover: &mut Option<String>,
) {
    painter.rect_filled(rect, 6.0, PANEL);
    text(
        painter,
        rect.min + egui::vec2(10.0, 8.0),
        egui::Align2::LEFT_TOP,
        "tiles × blocks",
        15.0,
        TEXT,
    );
    let nt = trace.tiles;
    let inner = egui::Rect::from_min_max(
        rect.min + egui::vec2(26.0, 52.0),
        rect.max - egui::vec2(10.0, 34.0),
    );
    let cell = (inner.width().min(inner.height()) / nt as f32).max(2.0);
    let origin = inner.min;
    text(
        painter,
        egui::pos2(origin.x, origin.y - 4.0),
        egui::Align2::LEFT_BOTTOM,
        "key blocks →",
        12.0,
        KEY,
    );
    text(
        painter,
        egui::pos2(origin.x - 6.0, origin.y),
        egui::Align2::RIGHT_TOP,
        "q",
        12.0,
        QUERY,
    );
    let done: std::collections::HashSet<(usize, usize)> = visits[..position.min(visits.len())]
        .iter()
        .map(|v| (v.q_tile, v.k_block))
        .collect();
    for v in trace.pass(pass) {
        let c = egui::Rect::from_min_size(
            origin + egui::vec2(v.k_block as f32 * cell, v.q_tile as f32 * cell),
            egui::vec2(cell, cell),
        )
        .shrink((cell * 0.06).min(1.5));
        let is_current = current.is_some_and(|cv| cv.q_tile == v.q_tile && cv.k_block == v.k_block);
        if v.skipped {
            painter.rect_filled(c, 1.0, SKIPPED);
            painter.line_segment(
                [c.left_bottom(), c.right_top()],
                egui::Stroke::new(1.0, egui::Color32::from_gray(80)),
            );
        } else if is_current {
            painter.rect_filled(c, 1.0, KEY);
        } else if done.contains(&(v.q_tile, v.k_block)) {
            painter.rect_filled(c, 1.0, DONE);
        } else {
            painter.rect_stroke(
                c,
                1.0,
                egui::Stroke::new(1.0, egui::Color32::from_gray(90)),
                egui::StrokeKind::Inside,
            );
        }
        if let Some(p) = pointer
            && c.contains(p)
        {
            *hover = Some(format!(
                "query tile {} × key block {}: {}",
                v.q_tile,
                v.k_block,
                if v.skipped {
                    "skipped: every key comes after every query (causal)".to_string()
                } else {
                    format!("visit {} of its workgroup", v.order + 1)
                }
            ));
        }
    }
    if let Some(v) = current {
        let c = egui::Rect::from_min_size(
            origin + egui::vec2(v.k_block as f32 * cell, v.q_tile as f32 * cell),
            egui::vec2(cell, cell),
        );
        painter.rect_stroke(
            c,
            1.0,
            egui::Stroke::new(2.0, egui::Color32::WHITE),
            egui::StrokeKind::Outside,
        );
    }
    let s = &trace.summary.passes[pass.key()];
    let legend_y = rect.max.y - 8.0;
    text(
        painter,
        egui::pos2(rect.min.x + 10.0, legend_y),
        egui::Align2::LEFT_BOTTOM,
        format!("{} visited · {} skipped", s.visited, s.skipped),
        12.0,
        WEAK,
    );
}
