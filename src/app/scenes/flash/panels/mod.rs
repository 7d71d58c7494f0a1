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

mod grid;
mod memory;
mod shared;

pub(super) use grid::draw_grid;
pub(super) use memory::draw_memory;
pub(super) use shared::draw_shared;

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

/// Lerp of rectangles.
fn lerp_rect(a: egui::Rect, b: egui::Rect, t: f32) -> egui::Rect {
    egui::Rect::from_min_max(a.min.lerp(b.min, t), a.max.lerp(b.max, t))
}

fn smooth(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}
