//! Q, K, V and O in GPU memory, with the tiles the visit reads and writes.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(in crate::app::scenes::flash) fn draw_memory(
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
        crate::t!("flash-global-memory"),
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
        crate::t!("flash-rows-per-tile", t = trace.t, tile = ATTENTION_TILE),
        12.0,
        WEAK,
    );
    slots
}
