//! The scene's view, drawn with egui over the main view (as the Speedup
//! scene's charts are): the toolbar (play, step back and forth, the
//! scrubber), the attention maps and predictions of the frame shown, and
//! the two charts across the run (head scores, losses), each marking the
//! frame shown and where an induction head formed. A click on a chart
//! shows the frame nearest that step. The keyboard visits the same things
//! as parts ([`DrawnParts`]): each map's cells, the probe's bytes and
//! predictions, and each chart's frames, every one named with its numbers.

use super::{FORMED, TimelapseShown, TimelapseView, maps_frame, timelapse};
use crate::app::canvas::parts::{DrawnParts, Part, spoken};
use crate::app::timeline::Timeline;
use crate::app::training::{Run, RunState};
use crate::app::ui::UiState;
use crate::model::timelapse::{Frame, TimeLapse};
use crate::probe::byte_label;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};
use egui_plot::{Line, LineStyle, Plot, PlotPoints, VLine};

/// One colour per head: Okabe and Ito's.
const HEAD_COLOURS: [egui::Color32; 7] = crate::app::heatmap::OKABE_ITO;
/// The outline of the head with the highest induction score, and the
/// formation mark on the charts.
const GOLD: egui::Color32 = egui::Color32::from_rgb(255, 196, 0);

/// The textures of one frame's maps, and the frame (step) they show.
#[derive(Default)]
pub(super) struct MapTextures {
    key: Option<(u64, u64)>,
    textures: Vec<egui::TextureHandle>,
}

/// The keyboard's parts as last listed, and what for: the run, the frame
/// shown, the frames recorded, the layout and egui's zoom (listed again
/// only when one changes, not every frame).
#[derive(Default)]
pub(super) struct PartsKept {
    key: Option<(u64, usize, usize, Vec<(String, egui::Rect)>, u32)>,
    parts: Vec<Part>,
}

/// x on the charts: log10 of the step (step 0, the initial weights, at
/// step 1's place), so early steps get their room.
fn x_of(step: u64) -> f64 {
    (step.max(1) as f64).log10()
}

fn step_of(x: f64) -> u64 {
    10f64.powf(x).round() as u64
}

/// The charts' step axis: a mark at each power of ten (1, 10, 100, …).
fn powers_of_ten(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let (lo, hi) = input.bounds;
    (lo.ceil() as i64..=hi.floor() as i64)
        .map(|k| egui_plot::GridMark {
            value: k as f64,
            step_size: 1.0,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    mut view: ResMut<TimelapseView>,
    mut timeline: ResMut<Timeline>,
    mut shown: ResMut<TimelapseShown>,
    mut textures: Local<MapTextures>,
    (mut drawn, focus, activate, mut kept): (
        ResMut<DrawnParts>,
        Res<crate::app::canvas::parts::PictureFocus>,
        Res<crate::app::canvas::parts::KeyActivate>,
        Local<PartsKept>,
    ),
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let (Some(area), Some(run)) = (ui_state.central_rect(&ctx), run) else {
        return Ok(());
    };
    let Some(t) = timelapse(&run).cloned() else {
        shown.regions.clear();
        drawn.0.clear();
        let why = match &run.engine.timelapse_error {
            Some(e) => crate::t!("timelapse-cannot", error = e.as_str()),
            None => crate::t!("timelapse-none"),
        };
        crate::app::ui::scene_status(&ctx, "timelapse-status", "timelapse-toolbar", area, why);
        return Ok(());
    };
    let index = timeline.index(&t).expect("frames are not empty");
    toolbar(&ctx, area, &t, index, (&mut view, &mut timeline), run.state == RunState::Training);
    let index = timeline.index(&t).expect("frames are not empty");
    let frame = &t.frames[index];
    let mut line = status(&t, index, &run);
    if let Some(e) = &run.engine.timelapse_error {
        line = format!("{line} · {}", crate::t!("timelapse-cannot", error = e.as_str()));
    }
    crate::app::ui::scene_status(&ctx, "timelapse-status", "timelapse-toolbar", area, line);
    let top = crate::app::ui::toolbar_bottom(&ctx, "timelapse-toolbar", area) + 30.0;
    let body = egui::Rect::from_min_max(
        egui::pos2(area.min.x + 12.0, top),
        egui::pos2(area.max.x - 12.0, area.max.y - 8.0),
    );
    if body.height() < 120.0 || body.width() < 200.0 {
        return Ok(());
    }
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "timelapse-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("timelapse-body-layer"),
            ))
            .max_rect(body),
    );
    ui.set_clip_rect(body);
    // Side by side where the view is wide (the charts stacked on the
    // right), else the maps above the two charts side by side.
    let wide = body.width() >= 1.25 * body.height() && body.width() >= 760.0;
    let (left, chart_a, chart_b) = if wide {
        let split = body.min.x + body.width() * 0.46;
        let right = egui::Rect::from_min_max(egui::pos2(split + 10.0, body.min.y), body.max);
        let (a, b) = right.split_top_bottom_at_fraction(0.5);
        (
            egui::Rect::from_min_max(body.min, egui::pos2(split - 10.0, body.max.y)),
            a.shrink2(egui::vec2(0.0, 4.0)),
            b.shrink2(egui::vec2(0.0, 4.0)),
        )
    } else {
        let split = body.min.y + body.height() * 0.6;
        let bottom = egui::Rect::from_min_max(egui::pos2(body.min.x, split + 6.0), body.max);
        let (a, b) = bottom.split_left_right_at_fraction(0.5);
        (
            egui::Rect::from_min_max(body.min, egui::pos2(body.max.x, split - 6.0)),
            a.shrink2(egui::vec2(6.0, 0.0)),
            b.shrink2(egui::vec2(6.0, 0.0)),
        )
    };
    let mut regions = Vec::new();
    let mut left_ui = ui.new_child(egui::UiBuilder::new().max_rect(left));
    left_ui.set_clip_rect(left.intersect(body));
    regions.extend(maps_and_predictions(
        &mut left_ui,
        &t,
        index,
        frame,
        &mut textures,
        run.generation,
    ));
    let mut clicked = None;
    let mut transforms = Vec::new();
    for (k, rect) in [chart_a, chart_b].into_iter().enumerate() {
        let mut chart_ui = ui.new_child(egui::UiBuilder::new().max_rect(rect));
        chart_ui.set_clip_rect(rect.intersect(body));
        let (chart, step, transform) = if k == 0 {
            scores_chart(&mut chart_ui, &t, frame, rect.height())
        } else {
            losses_chart(&mut chart_ui, &t, frame, rect.height())
        };
        regions.push((["scores", "losses"][k].to_string(), chart));
        transforms.push(transform);
        clicked = clicked.or(step);
    }
    // The keyboard's parts (issue 53), and Enter on a chart's frame shows
    // that frame as a click there does.
    let key = (run.generation, index, t.frames.len(), regions.clone(), ctx.zoom_factor().to_bits());
    if kept.key.as_ref() != Some(&key) {
        kept.parts = parts(&t, index, &regions, &transforms, ctx.zoom_factor());
        kept.key = Some(key);
    }
    let listed = &kept.parts;
    if activate.0
        && focus.active
        && let (Some((_, col)), Some(part)) = (focus.cell, listed.get(focus.part))
        && matches!(part.group.as_deref(), Some("scores" | "losses"))
        && let Some(f) = t.frames.get(col)
    {
        clicked = Some(f.step);
    }
    if drawn.0 != *listed {
        drawn.0 = listed.clone();
    }
    if let Some(step) = clicked {
        view.show_step(&mut timeline, step);
        view.moved();
    }
    shown.regions = regions;
    Ok(())
}

/// Play, step back and forth, the newest, and the scrubber over the frames.
fn toolbar(
    ctx: &egui::Context,
    area: egui::Rect,
    t: &TimeLapse,
    index: usize,
    (view, timeline): (&mut TimelapseView, &mut Timeline),
    live: bool,
) {
    let last = t.frames.len() - 1;
    crate::app::ui::scene_toolbar(ctx, "timelapse-toolbar", area, |ui| {
        let (label, hover) = if view.playing {
            (crate::t!("walk-pause"), crate::t!("timelapse-pause-hover"))
        } else {
            (crate::t!("walk-play"), crate::t!("timelapse-play-hover"))
        };
        if ui.button(label).on_hover_text(hover).clicked() {
            view.moved();
            if view.playing {
                view.playing = false;
                timeline.show_frame(t, Some(index));
            } else {
                // From the start when at the end.
                timeline.show_frame(t, Some(if index >= last { 0 } else { index }));
                view.playing = true;
            }
        }
        if ui
            .add_enabled(index > 0, egui::Button::new("<"))
            .on_hover_text(crate::t!("timelapse-back-hover"))
            .clicked()
        {
            view.moved();
            view.playing = false;
            timeline.show_frame(t, Some(index - 1));
        }
        if ui
            .add_enabled(index < last, egui::Button::new(">"))
            .on_hover_text(crate::t!("timelapse-forward-hover"))
            .clicked()
        {
            view.moved();
            view.playing = false;
            timeline.show_frame(t, Some(index + 1));
        }
        let mut i = index;
        let step = t.frames[index].step;
        let slider = ui
            .add(
                egui::Slider::new(&mut i, 0..=last)
                    .show_value(false)
                    .text(crate::t!("timelapse-at-step", step = step)),
            )
            .on_hover_text(crate::t!("timelapse-slider-hover"));
        if slider.changed() {
            view.moved();
            view.playing = false;
            timeline.show_frame(t, Some(i));
        }
        let newest = timeline.step.is_none();
        if ui
            .selectable_label(newest, crate::t!("timelapse-newest"))
            .on_hover_text(crate::t!("timelapse-newest-hover"))
            .clicked()
        {
            view.moved();
            view.playing = false;
            timeline.show_frame(t, None);
        }
        if live {
            ui.weak(crate::t!("timelapse-recording"));
        }
    });
}

/// The status line: the frame, its step and losses, and where the numbers
/// come from.
fn status(t: &TimeLapse, index: usize, run: &Run) -> String {
    let f = &t.frames[index];
    let onset = match t.induction_onset(FORMED) {
        Some((at, h)) => crate::t!(
            "timelapse-formed",
            layer = h.layer,
            head = h.head,
            step = at.step
        ),
        None => crate::t!("timelapse-not-formed"),
    };
    crate::t!(
        "timelapse-status",
        frame = index + 1,
        frames = t.frames.len(),
        step = f.step,
        loss = f.loss.map_or("-".into(), |l| format!("{l:.3}")),
        copy = format!("{:.3}", f.copy_loss),
        onset = onset,
        run = run.label(),
    )
}

/// The frame's attention maps (layers × heads) with each head's scores
/// under it, and the probe string with the greedy prediction at each
/// position. Returns the regions drawn.
fn maps_and_predictions(
    ui: &mut egui::Ui,
    t: &TimeLapse,
    index: usize,
    frame: &Frame,
    textures: &mut MapTextures,
    generation: u64,
) -> Vec<(String, egui::Rect)> {
    let mut regions = Vec::new();
    let n = 2 * t.letters();
    let maps = maps_frame(t, index);
    let title = match maps {
        Some(m) if m.step != frame.step => crate::t!("timelapse-maps-of", step = m.step),
        _ => crate::t!("timelapse-maps", step = frame.step),
    };
    ui.label(egui::RichText::new(title).size(17.0).strong());
    let area = ui.available_rect_before_wrap();
    // Room below the maps for the predictions: two rows of letters.
    let predictions_h = 84.0;
    let label_w = 70.0;
    let (rows, cols) = (t.n_layer, t.n_head);
    let score_h = 36.0;
    let gap = 12.0;
    let side = ((area.width() - label_w) / cols as f32 - gap)
        .min((area.height() - predictions_h - 22.0) / rows as f32 - gap - score_h)
        .clamp(24.0, 300.0);
    // Each column as wide as its map, or as its scores' words.
    let words = [("timelapse-induction-score", 0.99), ("timelapse-previous-score", 0.99)]
        .map(|(key, score): (&str, f32)| {
            ui.painter()
                .layout_no_wrap(
                    crate::t!(key, score = format!("{score:.2}")),
                    egui::FontId::proportional(13.0),
                    egui::Color32::WHITE,
                )
                .size()
                .x
        });
    let column = side.max(words[0].max(words[1]) + 4.0);
    if let Some(m) = maps {
        let key = (generation, m.step);
        if textures.key != Some(key) {
            textures.textures.clear();
            for layer in 0..rows {
                for head in 0..cols {
                    let p = t.map(m, layer, head).unwrap_or_default();
                    let pixels =
                        crate::app::heatmap::colour_attention(&p, n, false, true);
                    let image = egui::ColorImage::from_rgba_unmultiplied([n, n], &pixels);
                    textures.textures.push(ui.ctx().load_texture(
                        format!("timelapse-map-{layer}-{head}"),
                        image,
                        egui::TextureOptions::NEAREST,
                    ));
                }
            }
            textures.key = Some(key);
        }
    }
    let best = frame.best_induction().copied();
    let painter = ui.painter().clone();
    let text_colour = ui.visuals().text_color();
    let weak = ui.visuals().weak_text_color();
    let mut y = area.min.y + 20.0;
    for h in 0..cols {
        let x = area.min.x + label_w + h as f32 * (column + gap) + side / 2.0;
        painter.text(
            egui::pos2(x, area.min.y + 2.0),
            egui::Align2::CENTER_TOP,
            crate::t!("head-n", head = h),
            egui::FontId::proportional(14.0),
            text_colour,
        );
    }
    for layer in 0..rows {
        painter.text(
            egui::pos2(area.min.x + label_w - 10.0, y + side / 2.0),
            egui::Align2::RIGHT_CENTER,
            crate::t!("layer-n", layer = layer),
            egui::FontId::proportional(14.0),
            text_colour,
        );
        for head in 0..cols {
            let x = area.min.x + label_w + head as f32 * (column + gap);
            let rect = egui::Rect::from_min_size(egui::pos2(x, y), egui::vec2(side, side));
            if let Some(tex) = textures.textures.get(layer * cols + head) {
                painter.image(
                    tex.id(),
                    rect,
                    egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                    egui::Color32::WHITE,
                );
            }
            let is_best = best.is_some_and(|b| b.layer == layer && b.head == head);
            if is_best {
                painter.rect_stroke(
                    rect.expand(3.0),
                    2.0,
                    egui::Stroke::new(3.0, GOLD),
                    egui::StrokeKind::Outside,
                );
            }
            if let Some(s) = frame.head(layer, head) {
                let colour = if is_best { text_colour } else { weak };
                for (line, (key, score)) in [
                    ("timelapse-induction-score", s.induction),
                    ("timelapse-previous-score", s.previous_token),
                ]
                .into_iter()
                .enumerate()
                {
                    painter.text(
                        egui::pos2(rect.min.x, rect.max.y + 4.0 + 15.0 * line as f32),
                        egui::Align2::LEFT_TOP,
                        crate::t!(key, score = format!("{score:.2}")),
                        egui::FontId::proportional(13.0),
                        colour,
                    );
                }
            }
            regions.push((format!("h.{layer}.head{head}"), rect));
        }
        y += side + gap + score_h;
    }
    // The probe string and what the model predicts after each byte.
    let probe = &t.probe[0];
    let top = y + 6.0;
    let cell = ((area.width() - label_w) / n as f32).clamp(12.0, 30.0);
    let font = egui::FontId::monospace((cell * 0.72).clamp(12.0, 20.0));
    painter.text(
        egui::pos2(area.min.x + label_w - 10.0, top + cell / 2.0),
        egui::Align2::RIGHT_CENTER,
        crate::t!("timelapse-input"),
        egui::FontId::proportional(14.0),
        text_colour,
    );
    painter.text(
        egui::pos2(area.min.x + label_w - 10.0, top + cell * 1.6),
        egui::Align2::RIGHT_CENTER,
        crate::t!("timelapse-predicted"),
        egui::FontId::proportional(14.0),
        text_colour,
    );
    let m = n / 2;
    for i in 0..n {
        let x = area.min.x + label_w + i as f32 * cell;
        let input = egui::Rect::from_min_size(egui::pos2(x, top), egui::vec2(cell - 2.0, cell));
        // The copy: a band behind its letters.
        if i >= m {
            painter.rect_filled(input, 2.0, egui::Color32::from_rgb(40, 52, 78));
        }
        painter.text(
            input.center(),
            egui::Align2::CENTER_CENTER,
            byte_label(probe[i]),
            font.clone(),
            text_colour,
        );
        let Some(&guess) = frame.predictions.get(i) else {
            continue;
        };
        let below = input.translate(egui::vec2(0.0, cell * 1.1));
        // Right: the next byte of the string (blue fill); the last position
        // has none to check.
        let right = probe.get(i + 1) == Some(&guess);
        if right {
            painter.rect_filled(below, 2.0, egui::Color32::from_rgb(0, 114, 178));
        }
        let label = byte_label(guess);
        let size = if label.chars().count() > 1 {
            (font.size * 0.62).max(12.0)
        } else {
            font.size
        };
        painter.text(
            below.center(),
            egui::Align2::CENTER_CENTER,
            label,
            egui::FontId::monospace(size),
            if right { egui::Color32::WHITE } else { weak },
        );
    }
    let probe_rect = egui::Rect::from_min_size(
        egui::pos2(area.min.x + label_w, top),
        egui::vec2(cell * n as f32, cell * 2.1),
    );
    let right = (m..n - 1)
        .filter(|&i| frame.predictions.get(i) == probe.get(i + 1))
        .count();
    let sentence = painter.layout(
        crate::t!("timelapse-copied-right", right = right, of = m - 1),
        egui::FontId::proportional(14.0),
        text_colour,
        (area.max.x - probe_rect.min.x).max(120.0),
    );
    painter.galley(
        egui::pos2(probe_rect.min.x, probe_rect.max.y + 6.0),
        sentence,
        text_colour,
    );
    regions.push(("probe".to_string(), probe_rect));
    regions
}

/// The parts the keyboard visits, in reading order (window logical
/// pixels, `zoom`: egui's zoom factor): each head's map (its query × key
/// cells), the probe string with the predictions under it, each head's
/// scores across the run and the losses across the run (a cell a frame).
fn parts(
    t: &TimeLapse,
    index: usize,
    regions: &[(String, egui::Rect)],
    transforms: &[egui_plot::PlotTransform],
    zoom: f32,
) -> Vec<Part> {
    let window = |r: egui::Rect| Rect::new(r.min.x * zoom, r.min.y * zoom, r.max.x * zoom, r.max.y * zoom);
    let region = |name: &str| regions.iter().find(|(n, _)| n == name).map(|(_, r)| *r);
    let frame = &t.frames[index];
    let probe = &t.probe[0];
    let n = probe.len();
    let byte = |b: u8| spoken(&byte_label(b));
    let mut out = Vec::new();
    let maps = maps_frame(t, index);
    for layer in 0..t.n_layer {
        for head in 0..t.n_head {
            let Some(rect) = region(&format!("h.{layer}.head{head}")) else { continue };
            let cell = rect.width() / n.max(1) as f32;
            let p = maps.and_then(|m| t.map(m, layer, head));
            let cells = match &p {
                Some(p) => (0..n * n)
                    .map(|k| {
                        let (i, j) = (k / n, k % n);
                        let at = egui::Rect::from_min_size(
                            rect.min + egui::vec2(j as f32 * cell, i as f32 * cell),
                            egui::vec2(cell, cell),
                        );
                        let words = format!(
                            "query {} at {i}, key {} at {j}, weight {:.2}",
                            byte(probe[i]),
                            byte(probe[j]),
                            p[k]
                        );
                        (window(at), words)
                    })
                    .collect(),
                None => vec![],
            };
            let name = format!(
                "block {layer} head {head}, attention on the probe string after step {}",
                maps.map_or(frame.step, |m| m.step)
            );
            out.push(Part::drawn(name, Some("maps".into()), window(rect), n, n, cells));
        }
    }
    if let Some(rect) = region("probe") {
        let cell = rect.width() / n.max(1) as f32;
        let m = n / 2;
        let mut cells = Vec::with_capacity(2 * n);
        for row in 0..2 {
            for i in 0..n {
                let at = egui::Rect::from_min_size(
                    rect.min + egui::vec2(i as f32 * cell, row as f32 * rect.height() / 2.0),
                    egui::vec2(cell, rect.height() / 2.0),
                );
                let words = if row == 0 {
                    format!("position {i}: {}, {}", byte(probe[i]), if i < m { "fresh" } else { "the copy" })
                } else {
                    match frame.predictions.get(i) {
                        Some(&guess) => format!(
                            "after {} at {i} it predicts {}{}",
                            byte(probe[i]),
                            byte(guess),
                            match probe.get(i + 1) {
                                Some(&next) if next == guess => ", right",
                                Some(_) => ", wrong",
                                None => "",
                            }
                        ),
                        None => format!("after {} at {i}: no prediction", byte(probe[i])),
                    }
                };
                cells.push((window(at), words));
            }
        }
        let name = format!("the probe string and what the model predicts after each byte, after step {}", frame.step);
        out.push(Part::drawn(name, Some("probe".into()), window(rect), 2, n, cells));
    }
    let point = |transform: &egui_plot::PlotTransform, step: u64, y: f64| {
        let at = transform.position_from_point(&egui_plot::PlotPoint::new(x_of(step), y));
        window(egui::Rect::from_center_size(at, egui::vec2(12.0, 12.0)))
    };
    if let (Some(rect), Some(transform)) = (region("scores"), transforms.first()) {
        for layer in 0..t.n_layer {
            for head in 0..t.n_head {
                let cells: Vec<(Rect, String)> = t
                    .frames
                    .iter()
                    .map(|f| match f.head(layer, head) {
                        Some(h) => (
                            point(transform, f.step, h.induction as f64),
                            format!(
                                "after step {}: induction score {:.2}, previous-byte score {:.2}",
                                f.step, h.induction, h.previous_token
                            ),
                        ),
                        None => (point(transform, f.step, 0.0), format!("after step {}: no score", f.step)),
                    })
                    .collect();
                let cols = cells.len();
                let name = format!("head {layer}.{head}'s scores across the run");
                out.push(Part::drawn(name, Some("scores".into()), window(rect), 1, cols, cells));
            }
        }
    }
    if let (Some(rect), Some(transform)) = (region("losses"), transforms.get(1)) {
        let cells: Vec<(Rect, String)> = t
            .frames
            .iter()
            .map(|f| {
                let train = f.loss.map_or(String::new(), |l| format!(", training {l:.3}"));
                (
                    point(transform, f.step, f.copy_loss as f64),
                    format!(
                        "after step {}: loss on the copied letters {:.3}, on the fresh letters {:.3}{train}",
                        f.step, f.copy_loss, f.fresh_loss
                    ),
                )
            })
            .collect();
        let cols = cells.len();
        out.push(Part::drawn("the losses across the run".into(), Some("losses".into()), window(rect), 1, cols, cells));
    }
    out
}

/// Every head's induction (solid) and previous-token (dashed) score across
/// the run. Returns the chart's rectangle, the step clicked, if any, and
/// where its points are.
fn scores_chart(
    ui: &mut egui::Ui,
    t: &TimeLapse,
    frame: &Frame,
    height: f32,
) -> (egui::Rect, Option<u64>, egui_plot::PlotTransform) {
    ui.label(egui::RichText::new(crate::t!("timelapse-scores-title")).size(17.0).strong());
    // The key: a colour per head; solid induction, dashed previous byte.
    ui.horizontal_wrapped(|ui| {
        for layer in 0..t.n_layer {
            for head in 0..t.n_head {
                let colour = HEAD_COLOURS[(layer * t.n_head + head) % HEAD_COLOURS.len()];
                ui.label(
                    egui::RichText::new(format!("— {layer}.{head}"))
                        .color(colour)
                        .size(14.0),
                );
            }
        }
        ui.label(egui::RichText::new(crate::t!("timelapse-scores-key")).size(13.0).weak());
    });
    let onset = t.induction_onset(FORMED).map(|(f, _)| f.step);
    let used = ui.min_rect().height();
    let response = step_plot("timelapse-scores", "timelapse-score-axis", height - used)
        .show_grid(egui::Vec2b::new(true, false))
        .include_y(1.0)
        .show(ui, |plot| {
            for layer in 0..t.n_layer {
                for head in 0..t.n_head {
                    let colour = HEAD_COLOURS[(layer * t.n_head + head) % HEAD_COLOURS.len()];
                    let series = |score: fn(&crate::model::timelapse::HeadScore) -> f32| {
                        t.frames
                            .iter()
                            .filter_map(|f| {
                                f.head(layer, head).map(|h| [x_of(f.step), score(h) as f64])
                            })
                            .collect::<Vec<_>>()
                    };
                    plot.line(
                        Line::new(
                            crate::t!("timelapse-induction-line", layer = layer, head = head),
                            PlotPoints::from(series(|h| h.induction)),
                        )
                        .color(colour)
                        .width(2.5),
                    );
                    plot.line(
                        Line::new(
                            crate::t!("timelapse-previous-line", layer = layer, head = head),
                            PlotPoints::from(series(|h| h.previous_token)),
                        )
                        .color(colour)
                        .width(1.5)
                        .style(LineStyle::dashed_loose()),
                    );
                }
            }
            marks(plot, frame.step, onset);
        });
    let clicked = clicked_step(&response);
    (response.response.rect, clicked, response.transform)
}

/// The losses across the run: training, validation, on the copied letters
/// and on the fresh ones. Returns the chart's rectangle, the step clicked,
/// if any, and where its points are.
fn losses_chart(
    ui: &mut egui::Ui,
    t: &TimeLapse,
    frame: &Frame,
    height: f32,
) -> (egui::Rect, Option<u64>, egui_plot::PlotTransform) {
    ui.label(egui::RichText::new(crate::t!("timelapse-losses-title")).size(17.0).strong());
    let lines = [
        ("timelapse-train-loss", HEAD_COLOURS[4], false),
        ("timelapse-val-loss", HEAD_COLOURS[6], true),
        ("timelapse-copy-loss", HEAD_COLOURS[0], false),
        ("timelapse-fresh-loss", HEAD_COLOURS[2], true),
    ];
    ui.horizontal_wrapped(|ui| {
        for (key, colour, dashed) in lines {
            let mark = if dashed { "- -" } else { "—" };
            ui.label(
                egui::RichText::new(format!("{mark} {}", crate::t!(key)))
                    .color(colour)
                    .size(14.0),
            );
        }
    });
    let onset = t.induction_onset(FORMED).map(|(f, _)| f.step);
    let used = ui.min_rect().height();
    let series = |value: fn(&Frame) -> Option<f32>| {
        t.frames
            .iter()
            .filter_map(|f| value(f).map(|v| [x_of(f.step), v as f64]))
            .collect::<Vec<_>>()
    };
    let response = step_plot("timelapse-losses", "timelapse-loss-axis", height - used)
        .show(ui, |plot| {
            let values: [fn(&Frame) -> Option<f32>; 4] = [
                |f| f.loss,
                |f| f.val_loss,
                |f| Some(f.copy_loss),
                |f| Some(f.fresh_loss),
            ];
            for ((key, colour, dashed), value) in lines.into_iter().zip(values) {
                let line = Line::new(crate::t!(key), PlotPoints::from(series(value)))
                    .color(colour)
                    .width(2.0);
                plot.line(if dashed {
                    line.style(LineStyle::dashed_loose())
                } else {
                    line
                });
            }
            marks(plot, frame.step, onset);
        });
    let clicked = clicked_step(&response);
    (response.response.rect, clicked, response.transform)
}

/// A chart against the run's steps (log scale, a mark at each power of
/// ten) from 0 up, `height` tall, fixed in place (a click picks a step).
fn step_plot(id: &'static str, y_label: &str, height: f32) -> Plot<'static> {
    Plot::new(id)
        .height((height - 4.0).max(80.0))
        .x_axis_label(crate::t!("timelapse-x-axis"))
        .y_axis_label(crate::t!(y_label))
        .x_axis_formatter(|mark, _| step_of(mark.value).to_string())
        .x_grid_spacer(powers_of_ten)
        .include_y(0.0)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
}

/// The frame shown (a white line) and where an induction head formed (gold).
fn marks(plot: &mut egui_plot::PlotUi, step: u64, onset: Option<u64>) {
    plot.vline(
        VLine::new(crate::t!("timelapse-shown-line", step = step), x_of(step))
            .color(egui::Color32::WHITE)
            .width(2.0),
    );
    if let Some(at) = onset {
        plot.vline(
            VLine::new(crate::t!("timelapse-formed-line", step = at), x_of(at))
                .color(GOLD)
                .width(2.0)
                .style(LineStyle::dashed_loose()),
        );
    }
}

/// The step under a click on a chart.
fn clicked_step<R>(response: &egui_plot::PlotResponse<R>) -> Option<u64> {
    if !response.response.clicked() {
        return None;
    }
    let pos = response.response.interact_pointer_pos()?;
    Some(step_of(response.transform.value_from_position(pos).x))
}
