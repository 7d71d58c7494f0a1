//! The grid of (query tile, key block) pairs: done, now, skipped.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(in crate::app::scenes::flash) fn draw_grid(
    painter: &egui::Painter,
    rect: egui::Rect,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    visits: &[&Visit],
    position: usize,
    pointer: Option<egui::Pos2>,
    hover: &mut Option<String>,
    cells: &mut Vec<((usize, usize), egui::Rect, String)>,
) {
    painter.rect_filled(rect, 6.0, PANEL);
    text(
        painter,
        rect.min + egui::vec2(10.0, 8.0),
        egui::Align2::LEFT_TOP,
        crate::t!("flash-grid-title"),
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
        crate::t!("flash-key-blocks"),
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
        let words = crate::t!(
            "flash-grid-cell",
            tile = v.q_tile,
            block = v.k_block,
            what = if v.skipped {
                crate::t!("flash-grid-skipped")
            } else {
                crate::t!("flash-grid-visit", n = v.order + 1)
            },
        );
        if let Some(p) = pointer
            && c.contains(p)
        {
            *hover = Some(words.clone());
        }
        cells.push(((v.q_tile, v.k_block), c, words));
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
        crate::t!(
            "flash-grid-counts",
            visited = s.visited,
            skipped = s.skipped
        ),
        12.0,
        WEAK,
    );
}
