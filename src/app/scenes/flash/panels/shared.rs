//! One workgroup's shared memory: the tiles it holds and the blocks it
//! computes, moving in as the replay plays.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(in crate::app::scenes::flash) fn draw_shared(
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
        crate::t!("flash-shared-memory", bytes = human_bytes(bytes)),
        15.0,
        TEXT,
    );
    text(
        painter,
        rect.min + egui::vec2(10.0, 28.0),
        egui::Align2::LEFT_TOP,
        crate::t!("flash-one-workgroup"),
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
                        crate::t!("flash-masked")
                    } else {
                        format!("{x:.4}")
                    };
                    *hover = Some(crate::t!(
                        "flash-cell-hover",
                        name = name,
                        qi = qi,
                        q = trace.tokens.get(qi).map_or("".into(), |&b| byte_label(b)),
                        kj = kj,
                        k = trace.tokens.get(kj).map_or("".into(), |&b| byte_label(b)),
                        what = what,
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
        Pass::Forward => crate::t!("flash-note-forward", tile = tile),
        Pass::BackwardDkdv => crate::t!("flash-note-dkdv"),
        Pass::BackwardDq => crate::t!("flash-note-dq"),
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
