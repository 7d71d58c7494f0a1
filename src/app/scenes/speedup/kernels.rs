//! The per-kernel tab: one training step timed per op family, and each
//! family on the roofline of this adapter.

use super::*;

/// Colours of the op families in the stacked bar.
pub(super) const FAMILY_COLOURS: [egui::Color32; 10] = [
    egui::Color32::from_rgb(86, 156, 230),
    egui::Color32::from_rgb(236, 140, 64),
    egui::Color32::from_rgb(96, 200, 120),
    egui::Color32::from_rgb(186, 120, 230),
    egui::Color32::from_rgb(230, 90, 90),
    egui::Color32::from_rgb(230, 210, 90),
    egui::Color32::from_rgb(90, 210, 210),
    egui::Color32::from_rgb(200, 150, 110),
    egui::Color32::from_rgb(150, 160, 250),
    egui::Color32::from_rgb(160, 160, 160),
];

/// Where one training step's time goes: the preset and the button, a bar
/// stacked by op family, the families' table and the roofline. Returns the
/// rectangles it drew (`kernels`, `roofline`).
pub(super) fn kernels_view(
    ui: &mut egui::Ui,
    view: &mut SpeedupView,
    gpu: &GpuDevice,
    files: &mut MessageWriter<crate::app::export::ExportFile>,
) -> Vec<(String, egui::Rect)> {
    let top = ui.cursor().min;
    let mut regions = Vec::new();
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new(crate::t!("kernels-one-step-of")).size(16.0));
        egui::ComboBox::from_id_salt("kernels-preset")
            .selected_text(&view.kernels_preset)
            .show_ui(ui, |ui| {
                for (id, _) in BUILTIN_PRESETS {
                    ui.selectable_value(&mut view.kernels_preset, id.to_string(), *id);
                }
            });
        let busy = view.running();
        if ui
            .add_enabled(!busy, egui::Button::new(crate::t!("kernels-time")))
            .on_hover_text(crate::t!("kernels-time-hover"))
            .clicked()
        {
            view.start_kernels(gpu);
        }
        if view.kernels_job.is_some() {
            ui.spinner();
            ui.label(crate::t!("kernels-measuring"));
        }
        if view.kernels.as_ref().is_some_and(|k| k.is_ok())
            && ui
                .button(crate::t!("png-button"))
                .on_hover_text(crate::t!("kernels-png-hover"))
                .clicked()
        {
            view.export_kernels = true;
        }
        if let Some(Ok(k)) = &view.kernels
            && ui
                .button("SVG + JSON")
                .on_hover_text(crate::t!("kernels-svg-hover"))
                .clicked()
        {
            files.write(crate::app::export::ExportFile::new(
                "roofline",
                "svg",
                k.roofline_chart().to_svg(),
            ));
            files.write(crate::app::export::ExportFile::new(
                "kernels",
                "json",
                serde_json::to_vec_pretty(k).expect("plain data"),
            ));
        }
    });
    let k = match &view.kernels {
        None if view.kernels_job.is_some() => {
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        None => {
            ui.label(egui::RichText::new(crate::t!("kernels-press")).weak());
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        Some(Err(e)) => {
            ui.colored_label(egui::Color32::from_rgb(255, 110, 100), e);
            return vec![(
                "kernels".into(),
                egui::Rect::from_min_size(top, egui::vec2(ui.available_width(), 30.0)),
            )];
        }
        Some(Ok(k)) => k.clone(),
    };
    let total = k.total_ms();
    let what = match k.source.as_str() {
        "gpu_timestamps" => crate::t!(
            "kernels-total-gpu",
            preset = k.preset.as_str(),
            ms = format!("{total:.2}"),
            n = k.rows.len(),
            device = k.device.as_str(),
        ),
        _ => crate::t!(
            "kernels-total",
            preset = k.preset.as_str(),
            ms = format!("{total:.2}"),
            device = k.device.as_str(),
        ),
    };
    ui.label(egui::RichText::new(what).size(13.0));
    if let Some(note) = &k.note {
        ui.label(
            egui::RichText::new(note)
                .size(13.0)
                .color(egui::Color32::from_rgb(240, 190, 80)),
        );
    }
    let colour = |i: usize| FAMILY_COLOURS[i % FAMILY_COLOURS.len()];
    let (rect, _) =
        ui.allocate_exact_size(egui::vec2(ui.available_width(), 28.0), egui::Sense::hover());
    let mut x = rect.min.x;
    for (i, f) in k.families.iter().enumerate() {
        let w = rect.width() * (f.ms / total.max(1e-12)) as f32;
        let seg =
            egui::Rect::from_min_size(egui::pos2(x, rect.min.y), egui::vec2(w, rect.height()));
        ui.painter().rect_filled(seg, 0.0, colour(i));
        let name = ui.painter().layout_no_wrap(
            f.family.clone(),
            egui::FontId::proportional(13.0),
            egui::Color32::from_gray(15),
        );
        if name.size().x + 8.0 < w {
            ui.painter()
                .galley(seg.center() - name.size() / 2.0, name, egui::Color32::BLACK);
        }
        if let Some(p) = ui.ctx().pointer_hover_pos()
            && seg.contains(p)
        {
            egui::Tooltip::always_open(
                ui.ctx().clone(),
                ui.layer_id(),
                egui::Id::new("kernels-hover"),
                egui::PopupAnchor::Pointer,
            )
            .show(|ui| ui.label(format!("{}: {:.3} ms", f.family, f.ms)));
        }
        x += w;
    }
    ui.add_space(6.0);
    // Below the bar: the families and the roofline, side by side where
    // there is room, else the roofline above the (scrolling) table.
    let below = ui.available_rect_before_wrap();
    let (table_rect, roof_rect) = if below.width() >= 960.0 {
        let mid = below.min.x + below.width() * 0.5;
        (
            egui::Rect::from_min_max(below.min, egui::pos2(mid - 8.0, below.max.y)),
            egui::Rect::from_min_max(egui::pos2(mid + 8.0, below.min.y), below.max),
        )
    } else {
        let mid = below.min.y + below.height() * 0.6;
        (
            egui::Rect::from_min_max(egui::pos2(below.min.x, mid + 6.0), below.max),
            egui::Rect::from_min_max(below.min, egui::pos2(below.max.x, mid - 6.0)),
        )
    };
    let mut table_ui = ui.new_child(egui::UiBuilder::new().max_rect(table_rect));
    table_ui.set_clip_rect(table_rect.intersect(ui.clip_rect()));
    let gpu_rows = k.source == "gpu_timestamps";
    let table = egui::ScrollArea::vertical()
        .id_salt("kernels-legend")
        .auto_shrink([false, false])
        .show(&mut table_ui, |ui| {
            egui::Grid::new("kernels-legend-grid")
                .striped(true)
                .spacing(egui::vec2(12.0, 3.0))
                .show(ui, |ui| {
                    for h in [
                        String::new(),
                        crate::t!("kernels-col-family"),
                        "ms".to_string(),
                        crate::t!("kernels-col-share"),
                        "FLOP/byte".to_string(),
                        "GFLOP/s".to_string(),
                        if k.datasheet.is_some() {
                            crate::t!("kernels-col-bound-peak")
                        } else {
                            crate::t!("kernels-col-bound")
                        },
                    ] {
                        ui.label(egui::RichText::new(h).strong());
                    }
                    ui.end_row();
                    for (i, f) in k.families.iter().enumerate() {
                        let (sw, _) =
                            ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
                        ui.painter().rect_filled(sw, 2.0, colour(i));
                        ui.label(&f.family).on_hover_text(if gpu_rows {
                            crate::t!("kernels-dispatches", n = f.count)
                        } else {
                            String::new()
                        });
                        ui.label(format!("{:.3}", f.ms));
                        ui.label(format!("{:.1}%", 100.0 * f.ms / total.max(1e-12)));
                        ui.label(if f.flops > 0.0 {
                            format!("{:.2}", f.intensity)
                        } else {
                            "—".into()
                        });
                        ui.label(if f.flops > 0.0 {
                            format!("{:.1}", f.gflops)
                        } else {
                            format!("{:.0} GB/s", f.gbps)
                        });
                        ui.label(match (&f.bound, f.attainable_gflops, f.datasheet_gflops) {
                            (Some(b), Some(a), Some(d)) if f.flops > 0.0 => {
                                crate::t!(
                                    "kernels-of-roof-and-peak",
                                    bound = b.as_str(),
                                    percent = format!("{:.0}", 100.0 * f.gflops / a),
                                    peak = format!("{:.0}", 100.0 * f.gflops / d)
                                )
                            }
                            (Some(b), Some(a), None) if f.flops > 0.0 => {
                                crate::t!(
                                    "kernels-of-roof",
                                    bound = b.as_str(),
                                    percent = format!("{:.0}", 100.0 * f.gflops / a)
                                )
                            }
                            (Some(b), ..) => b.clone(),
                            _ => "—".into(),
                        });
                        ui.end_row();
                    }
                })
        });
    regions.push((
        "kernels".to_string(),
        rect.union(table.inner_rect)
            .union(egui::Rect::from_min_size(top, egui::vec2(1.0, 1.0))),
    ));
    let mut roof_ui = ui.new_child(egui::UiBuilder::new().max_rect(roof_rect));
    roof_ui.set_clip_rect(roof_rect.intersect(ui.clip_rect()));
    regions.push(("roofline".to_string(), roofline(&mut roof_ui, &k)));
    regions
}

/// The roofline: each op family at (FLOPs per byte, GFLOP/s reached), log
/// on both axes, under the adapter's roof min(matmul peak, intensity × copy
/// bandwidth). Returns the rectangle it drew in.
pub(super) fn roofline(ui: &mut egui::Ui, k: &KernelTimes) -> egui::Rect {
    match &k.ceilings {
        Some(c) => {
            ui.label(
                egui::RichText::new(crate::t!(
                    "kernels-roofline",
                    matmul = crate::bench::kernels::human_flops(c.matmul_tflops * 1e3),
                    copy = format!("{:.0}", c.copy_gbps),
                    ridge = format!("{:.1}", c.matmul_tflops * 1e3 / c.copy_gbps),
                ))
                .size(13.0),
            );
        }
        None => {
            ui.label(
                egui::RichText::new(if k.source == "gpu_timestamps" {
                    crate::t!("kernels-no-ceilings-page")
                } else {
                    crate::t!("kernels-no-ceilings")
                })
                .size(13.0)
                .weak(),
            );
        }
    }
    if let Some(d) = &k.datasheet {
        ui.label(
            egui::RichText::new(crate::t!(
                "kernels-datasheet",
                part = d.part.as_str(),
                f32 = crate::bench::kernels::human_flops(d.f32_tflops * 1e3),
                tensor = crate::bench::kernels::human_flops(d.f16_tensor_tflops * 1e3),
                memory = format!("{:.0}", d.memory_gbps),
            ))
            .size(13.0),
        );
    }
    ui.label(
        egui::RichText::new(crate::t!("kernels-roof-note"))
            .size(12.0)
            .weak(),
    );
    let points: Vec<(usize, &crate::bench::kernels::Family)> = k
        .families
        .iter()
        .enumerate()
        .filter(|(_, f)| f.flops > 0.0 && f.ms > 0.0)
        .collect();
    let xs: Vec<f64> = points.iter().map(|(_, f)| f.intensity.log10()).collect();
    let (mut x0, mut x1) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    if let Some(c) = &k.ceilings {
        let ridge = (c.matmul_tflops * 1e3 / c.copy_gbps).log10();
        x0 = x0.min(ridge);
        x1 = x1.max(ridge);
    }
    if let Some(d) = &k.datasheet {
        let ridge = (d.f32_tflops * 1e3 / d.memory_gbps).log10();
        x0 = x0.min(ridge);
        x1 = x1.max(ridge);
    }
    if !x0.is_finite() {
        (x0, x1) = (-1.0, 2.0);
    }
    let (x0, x1) = (x0.floor() - 0.3, x1.ceil() + 0.3);
    let total = k.total_ms().max(1e-12);
    // Lines at every decade (labelled) and at 2..9 times it (faint).
    let decades = |input: egui_plot::GridInput| -> Vec<egui_plot::GridMark> {
        let (lo, hi) = input.bounds;
        let mut marks = Vec::new();
        for d in (lo.floor() as i64)..=(hi.ceil() as i64) {
            for m in 1..10 {
                let value = d as f64 + (m as f64).log10();
                if value >= lo && value <= hi {
                    marks.push(egui_plot::GridMark {
                        value,
                        step_size: if m == 1 { 1.0 } else { 0.1 },
                    });
                }
            }
        }
        marks
    };
    let decade = |mark: egui_plot::GridMark, _: &std::ops::RangeInclusive<f64>| {
        if (mark.value - mark.value.round()).abs() > 1e-9 {
            return String::new();
        }
        let v = 10f64.powf(mark.value.round());
        if v >= 100.0 {
            format!("{v:.0}")
        } else if v >= 1.0 {
            format!("{v:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        } else {
            format!("{v:.2}")
        }
    };
    let names: Vec<(f64, f64, String)> = points
        .iter()
        .map(|(_, f)| {
            (
                f.intensity.log10(),
                f.gflops.log10(),
                format!(
                    "{}: {:.3} ms, {:.2} FLOP/byte, {:.1} GFLOP/s, {:.0} GB/s{}",
                    f.family,
                    f.ms,
                    f.intensity,
                    f.gflops,
                    f.gbps,
                    f.bound
                        .as_ref()
                        .map_or(String::new(), |b| format!(", {b}-bound"))
                ),
            )
        })
        .collect();
    let response = Plot::new("roofline")
        .x_axis_label(crate::t!("kernels-x-axis"))
        .y_axis_label(crate::t!("kernels-y-axis"))
        .x_axis_formatter(decade)
        .y_axis_formatter(decade)
        .x_grid_spacer(decades)
        .y_grid_spacer(decades)
        .include_x(x0)
        .include_x(x1)
        .include_y(
            k.ceilings
                .as_ref()
                .map_or(0.0, |c| (c.matmul_tflops * 1e3).log10() + 0.4),
        )
        .include_y(
            k.datasheet
                .as_ref()
                .map_or(0.0, |d| (d.f16_tensor_tflops * 1e3).log10() + 0.3),
        )
        .allow_scroll(false)
        .label_formatter(move |hover| {
            let egui_plot::HoverPosition::NearDataPoint { position: p, .. } = hover else {
                return None;
            };
            names
                .iter()
                .filter(|(x, y, _)| (x - p.x).abs() < 1e-9 && (y - p.y).abs() < 1e-9)
                .map(|(_, _, s)| s.clone())
                .next()
        })
        .show(ui, |plot| {
            if let Some(c) = &k.ceilings {
                let peak = c.matmul_tflops * 1e3;
                let roof: Vec<[f64; 2]> = (0..=200)
                    .map(|i| {
                        let x = x0 + (x1 - x0) * i as f64 / 200.0;
                        [x, (10f64.powf(x) * c.copy_gbps).min(peak).log10()]
                    })
                    .collect();
                plot.line(
                    Line::new(crate::t!("kernels-roof"), PlotPoints::from(roof))
                        .color(egui::Color32::from_gray(220))
                        .width(2.5),
                );
                // Under its line where the datasheet's roof is drawn above.
                let (y, anchor) = if k.datasheet.is_some() {
                    (peak.log10() - 0.08, egui::Align2::RIGHT_TOP)
                } else {
                    (peak.log10() + 0.12, egui::Align2::RIGHT_BOTTOM)
                };
                plot.text(
                    egui_plot::Text::new(
                        "peak",
                        egui_plot::PlotPoint::new(x1 - 0.05, y),
                        egui::RichText::new(format!(
                            "matmul {}",
                            crate::bench::kernels::human_flops(c.matmul_tflops * 1e3)
                        ))
                        .size(13.0),
                    )
                    .anchor(anchor)
                    .color(egui::Color32::from_gray(220)),
                );
                let bw_x = x0 + 0.3;
                plot.text(
                    egui_plot::Text::new(
                        "bandwidth",
                        egui_plot::PlotPoint::new(
                            bw_x,
                            (10f64.powf(bw_x) * c.copy_gbps).log10() + 0.1,
                        ),
                        egui::RichText::new(format!("copy {:.0} GB/s", c.copy_gbps)).size(13.0),
                    )
                    .anchor(egui::Align2::LEFT_BOTTOM)
                    .color(egui::Color32::from_gray(220)),
                );
            }
            if let Some(d) = &k.datasheet {
                // The datasheet's roofs, fainter and dashed: f32 on the CUDA
                // cores (min(peak, intensity × memory bandwidth)), and the
                // tensor cores' f16 peak, which the f32 kernels cannot use.
                let peak = d.f32_tflops * 1e3;
                let roof: Vec<[f64; 2]> = (0..=200)
                    .map(|i| {
                        let x = x0 + (x1 - x0) * i as f64 / 200.0;
                        [x, d.f32_roof_gflops(10f64.powf(x)).log10()]
                    })
                    .collect();
                let faint = egui::Color32::from_gray(150);
                plot.line(
                    Line::new(crate::t!("kernels-datasheet-roof"), PlotPoints::from(roof))
                        .color(faint)
                        .style(egui_plot::LineStyle::dashed_loose())
                        .width(2.0),
                );
                let tensor = (d.f16_tensor_tflops * 1e3).log10();
                plot.line(
                    Line::new(
                        crate::t!("kernels-tensor-peak"),
                        PlotPoints::from(vec![[x0, tensor], [x1, tensor]]),
                    )
                    .color(faint)
                    .style(egui_plot::LineStyle::dotted_dense())
                    .width(2.0),
                );
                // The f32 peak's name above its flat part, at the right; the
                // tensor cores' under their line (the plot's top is near).
                for (at, text, anchor) in [
                    (
                        egui_plot::PlotPoint::new(x1 - 0.05, peak.log10() + 0.08),
                        format!("{} f32 {}", d.part, crate::bench::kernels::human_flops(peak)),
                        egui::Align2::RIGHT_BOTTOM,
                    ),
                    (
                        egui_plot::PlotPoint::new(x0 + 0.05, tensor - 0.08),
                        crate::t!(
                            "kernels-tensor-peak-label",
                            tflops = crate::bench::kernels::human_flops(d.f16_tensor_tflops * 1e3)
                        ),
                        egui::Align2::LEFT_TOP,
                    ),
                ] {
                    plot.text(
                        egui_plot::Text::new("datasheet", at, egui::RichText::new(text).size(13.0))
                            .anchor(anchor)
                            .color(faint),
                    );
                }
            }
            // Labels for the families that take time; a label near one
            // already placed goes to the left of its point instead.
            let mut placed: Vec<[f64; 2]> = Vec::new();
            for (i, f) in &points {
                let share = f.ms / total;
                if share >= 0.05 {
                    let at = [f.intensity.log10(), f.gflops.log10()];
                    let crowded = placed
                        .iter()
                        .any(|p| (p[0] - at[0]).abs() < 0.8 && (p[1] - at[1]).abs() < 0.2);
                    placed.push(at);
                    let (text, anchor) = if crowded {
                        (format!("{}  ", f.family), egui::Align2::RIGHT_CENTER)
                    } else {
                        (format!("  {}", f.family), egui::Align2::LEFT_CENTER)
                    };
                    plot.text(
                        egui_plot::Text::new(
                            f.family.clone(),
                            egui_plot::PlotPoint::new(at[0], at[1]),
                            egui::RichText::new(text).size(13.0),
                        )
                        .anchor(anchor)
                        .color(FAMILY_COLOURS[i % FAMILY_COLOURS.len()]),
                    );
                }
                plot.points(
                    Points::new(
                        f.family.clone(),
                        PlotPoints::from(vec![[f.intensity.log10(), f.gflops.log10()]]),
                    )
                    .color(FAMILY_COLOURS[i % FAMILY_COLOURS.len()])
                    .radius(3.5 + 10.0 * share.sqrt() as f32),
                );
            }
        });
    response.response.rect
}
