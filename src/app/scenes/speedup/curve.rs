//! The scene's panel: the toolbar, the GPU-over-CPU curve against
//! parameter count with the original TinyGPT's, and the table of results.

use super::*;

#[allow(clippy::too_many_arguments)]
pub(super) fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    mut view: ResMut<SpeedupView>,
    gpu: Res<GpuDevice>,
    mut shown: ResMut<SpeedupShown>,
    mut export: MessageWriter<crate::app::export::ExportPng>,
    mut files: MessageWriter<crate::app::export::ExportFile>,
    mut drawn: ResMut<crate::app::canvas::parts::DrawnParts>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let Some(area) = ui_state.central_rect(&ctx) else {
        return Ok(());
    };
    let body = area.shrink2(egui::vec2(14.0, 10.0));
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "speedup-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("speedup-body-layer"),
            ))
            .max_rect(body),
    );
    ui.set_clip_rect(body);
    let mut regions = Vec::new();
    let view = &mut *view;
    ui.label(
        egui::RichText::new(crate::t!("speedup-title"))
            .size(20.0)
            .strong(),
    );
    ui.horizontal_wrapped(|ui| {
        for (tab, name) in [
            (SpeedupTab::Curve, crate::t!("speedup-tab-curve")),
            (SpeedupTab::Kernels, crate::t!("speedup-tab-kernels")),
        ] {
            ui.selectable_value(&mut view.tab, tab, egui::RichText::new(name).size(16.0));
        }
    });
    ui.add_space(4.0);
    if view.tab == SpeedupTab::Kernels {
        let area = ui.available_rect_before_wrap();
        let mut kernels_ui = ui.new_child(egui::UiBuilder::new().max_rect(area));
        kernels_ui.set_clip_rect(area.intersect(body));
        regions.extend(kernels_view(&mut kernels_ui, view, &gpu, &mut files));
        if std::mem::take(&mut view.export_kernels) {
            let r = area * ctx.pixels_per_point();
            export.write(crate::app::export::ExportPng {
                name: "speedup-kernels".into(),
                rect: Some([r.min.x, r.min.y, r.max.x, r.max.y]),
            });
        }
        shown.regions = regions
            .into_iter()
            .map(|(n, r)| (n, r * ctx.pixels_per_point()))
            .collect();
        drawn.0.clear();
        return Ok(());
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(crate::t!("speedup-presets"));
        for (id, on) in &mut view.presets {
            ui.checkbox(on, id.as_str());
        }
    });
    let mut cancel_pressed = false;
    ui.horizontal_wrapped(|ui| {
        ui.checkbox(&mut view.cpu, "CPU");
        ui.checkbox(&mut view.gpu, "GPU");
        // Mixed precision: greyed, its hover saying why, without tensor cores.
        let tensor_cores = gpu.tensor_cores();
        if tensor_cores.is_err() {
            view.mixed = false;
        }
        let mixed = ui
            .add_enabled(tensor_cores.is_ok(), egui::Checkbox::new(&mut view.mixed, crate::t!("speedup-gpu-mixed")))
            .on_hover_text(crate::t!("precision-hover"));
        if let Err(why) = &tensor_cores {
            mixed.on_disabled_hover_text(crate::t!("precision-mixed-unavailable", why = why.as_str()));
        }
        ui.add(egui::Slider::new(&mut view.seconds, 0.5..=10.0).text(crate::t!("speedup-seconds")));
        if let Some(job) = &view.job {
            ui.add(
                egui::ProgressBar::new(job.done as f32 / job.total.max(1) as f32)
                    .desired_width(220.0)
                    .text(format!("{}/{} · {}", job.done, job.total, job.current)),
            );
            if ui.button(crate::t!("speedup-cancel")).clicked() {
                job.cancel.store(true, Ordering::Relaxed);
                cancel_pressed = true;
            }
        } else if ui.button(crate::t!("speedup-measure")).clicked()
            && let Err(e) = start(view, &gpu)
        {
            view.message = Some(e);
        }
        ui.separator();
        crate::app::canvas::parts::named(
            ui.add(egui::TextEdit::singleline(&mut view.path).desired_width(160.0)),
            egui::WidgetType::TextEdit,
            crate::t!("access-bench-file"),
        );
        if ui
            .button(crate::t!("load"))
            .on_hover_text(crate::t!("speedup-load-hover"))
            .clicked()
        {
            match load(&view.path) {
                Ok(results) => {
                    view.message = Some(crate::t!(
                        "speedup-loaded",
                        n = results.len(),
                        path = view.path.as_str(),
                    ));
                    view.results.clear();
                    for r in results {
                        add_result(&mut view.results, r);
                    }
                }
                Err(e) => view.message = Some(e),
            }
        }
        if ui
            .button(crate::t!("save"))
            .on_hover_text(crate::t!("speedup-save-hover"))
            .clicked()
        {
            let path = view.path.trim().to_string();
            let replace = view.saved.contains(&path) || view.confirm.as_ref() == Some(&path);
            view.confirm = None;
            view.message = Some(match save(&path, &view.results, replace) {
                Ok(svg) => {
                    view.saved.insert(path.clone());
                    crate::t!("speedup-saved", path = path.as_str(), svg = svg.to_string())
                }
                Err(SaveRefused::Exists(e)) => {
                    view.confirm = Some(path);
                    crate::t!("speedup-save-again", error = e.to_string())
                }
                Err(SaveRefused::Other(e)) => e,
            });
        }
        if ui
            .button(crate::t!("png-button"))
            .on_hover_text(crate::t!("speedup-png-hover"))
            .clicked()
        {
            export.write(crate::app::export::ExportPng {
                name: "speedup-curve".into(),
                rect: view.curve_px,
            });
        }
    });
    if let Some(note) = view.gpu_note.as_ref().filter(|_| !view.gpu) {
        ui.label(egui::RichText::new(note).size(12.0).weak());
    }
    if cancel_pressed {
        view.frames_since_cancel = Some(0);
    }
    if let Some(m) = &view.message {
        ui.label(egui::RichText::new(m).color(egui::Color32::from_rgb(240, 190, 80)));
    }
    if cfg!(target_arch = "wasm32") {
        ui.label(egui::RichText::new(crate::t!("speedup-web-note")).weak());
    }
    let mut devices: Vec<&str> = Vec::new();
    for r in &view.results {
        if !devices.contains(&r.device.as_str()) {
            devices.push(&r.device);
        }
    }
    if !devices.is_empty() {
        ui.label(
            egui::RichText::new(crate::t!(
                "speedup-measured-on",
                devices = devices.join("; ")
            ))
            .size(12.0)
            .weak(),
        );
    }
    // How the page's GPU steps were timed (a desktop waits for each step).
    if let Some(timing) = view.results.iter().find_map(|r| r.timing.as_deref()) {
        let how = if timing == crate::bench::stepped::TIMING_TIMESTAMPS {
            crate::t!("speedup-timed-timestamps")
        } else {
            crate::t!("speedup-timed-wall")
        };
        ui.label(egui::RichText::new(how).size(12.0).weak());
    }
    // The curves: GPU-over-CPU against parameters (log10 on x), in f32 and
    // in mixed precision.
    let series = |kind: &str| -> Vec<[f64; 2]> {
        let mut v: Vec<_> = view
            .results
            .iter()
            .filter(|r| r.backend == kind)
            .filter_map(|r| Some([(r.params as f64).log10(), r.gpu_over_cpu?]))
            .collect();
        v.sort_by(|a, b| a[0].total_cmp(&b[0]));
        v
    };
    let (ours, ours_mixed) = (series("gpu"), series("gpu-mixed"));
    let original: Vec<[f64; 2]> = bench_report::ORIGINAL
        .iter()
        .map(|&(_, params, _, speedup)| [(params as f64).log10(), speedup])
        .collect();
    let results = view.results.clone();
    let plot_h = (ui.available_height() * 0.62).max(160.0);
    let response = Plot::new("speedup")
        .height(plot_h)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .x_axis_label(crate::t!("speedup-x-axis"))
        .y_axis_label(crate::t!("speedup-y-axis"))
        .x_axis_formatter(|mark, _| {
            let n = 10f64.powf(mark.value);
            if n >= 1e6 {
                format!("{:.1} M", n / 1e6)
            } else {
                format!("{:.0} K", n / 1e3)
            }
        })
        .include_y(0.0)
        .label_formatter(move |hover| {
            let egui_plot::HoverPosition::NearDataPoint {
                plot_name,
                position: p,
                ..
            } = hover
            else {
                return None;
            };
            let near = results
                .iter()
                .filter(|r| ((r.params as f64).log10() - p.x).abs() < 0.05)
                .map(|r| format!("{} {}: {:.2} ms/step", r.preset, r.backend, r.median_ms))
                .collect::<Vec<_>>();
            Some(format!(
                "{}{}",
                crate::t!(
                    "speedup-hover",
                    name = plot_name.to_string(),
                    params = format!("{:.0}", 10f64.powf(p.x)),
                    ratio = format!("{:.1}", p.y),
                ),
                if near.is_empty() {
                    String::new()
                } else {
                    format!("\n{}", near.join("\n"))
                }
            ))
        })
        .show(&mut ui, |plot| {
            plot.line(Line::new(
                crate::t!("speedup-original"),
                PlotPoints::from(original.clone()),
            ));
            plot.points(
                Points::new(crate::t!("speedup-original"), PlotPoints::from(original)).radius(4.0),
            );
            // Okabe–Ito orange and sky blue: apart under colour blindness.
            let (f32_colour, mixed_colour) =
                (egui::Color32::from_rgb(230, 159, 0), egui::Color32::from_rgb(86, 180, 233));
            if !ours.is_empty() {
                plot.line(
                    Line::new(crate::t!("speedup-ours"), PlotPoints::from(ours.clone()))
                        .width(2.5)
                        .color(f32_colour),
                );
                plot.points(
                    Points::new(crate::t!("speedup-ours"), PlotPoints::from(ours))
                        .radius(6.0)
                        .color(f32_colour),
                );
            }
            if !ours_mixed.is_empty() {
                let name = crate::t!("speedup-ours-mixed");
                plot.line(
                    Line::new(name.clone(), PlotPoints::from(ours_mixed.clone()))
                        .width(2.5)
                        .color(mixed_colour)
                        .style(egui_plot::LineStyle::dashed_loose()),
                );
                plot.points(
                    Points::new(name, PlotPoints::from(ours_mixed))
                        .radius(6.0)
                        .color(mixed_colour)
                        .shape(egui_plot::MarkerShape::Diamond),
                );
            }
        });
    regions.push(("curve".to_string(), response.response.rect));
    let listed = curve_parts(&view.results, response.response.rect, &response.transform, ctx.zoom_factor());
    if drawn.0 != listed {
        drawn.0 = listed;
    }
    let r = response.response.rect * ctx.pixels_per_point();
    view.curve_px = Some([r.min.x, r.min.y, r.max.x, r.max.y]);
    // Below: the table.
    let mut table_ui =
        ui.new_child(egui::UiBuilder::new().max_rect(ui.available_rect_before_wrap()));
    table_ui.set_clip_rect(ui.available_rect_before_wrap().intersect(body));
    let table = egui::ScrollArea::vertical()
        .id_salt("speedup-table-scroll")
        .auto_shrink([false, false])
        .show(&mut table_ui, |ui| {
            egui::Grid::new("speedup-table")
                .striped(true)
                .spacing(egui::vec2(16.0, 4.0))
                .show(ui, |ui| {
                    let has_mixed = view.results.iter().any(|r| r.backend == "gpu-mixed");
                    let mut heads = vec![
                        crate::t!("speedup-col-preset"),
                        crate::t!("speedup-col-params"),
                        crate::t!("speedup-col-cpu"),
                        crate::t!("speedup-col-gpu"),
                        "GPU/CPU".to_string(),
                    ];
                    if has_mixed {
                        heads.extend([crate::t!("speedup-col-gpu-mixed"), crate::t!("speedup-col-mixed-ratio")]);
                    }
                    for h in heads {
                        ui.label(egui::RichText::new(h).strong());
                    }
                    ui.end_row();
                    let ratio = |x: f64| if x < 1.0 { format!("{x:.3}×") } else { format!("{x:.1}×") };
                    let mut presets: Vec<(&str, usize)> = view
                        .results
                        .iter()
                        .map(|r| (r.preset.as_str(), r.params))
                        .collect();
                    presets.sort_by_key(|p| p.1);
                    presets.dedup();
                    for (preset, params) in presets {
                        let of = |kind: &str| {
                            view.results
                                .iter()
                                .find(|r| r.preset == preset && r.backend == kind)
                        };
                        ui.label(preset);
                        ui.label(crate::model::config::group_thousands(params));
                        ui.label(of("cpu").map_or("—".into(), |r| format!("{:.2}", r.median_ms)));
                        ui.label(of("gpu").map_or("—".into(), |r| format!("{:.2}", r.median_ms)));
                        ui.label(of("gpu").and_then(|r| r.gpu_over_cpu).map_or("—".into(), ratio));
                        if has_mixed {
                            ui.label(of("gpu-mixed").map_or("—".into(), |r| format!("{:.2}", r.median_ms)));
                            ui.label(of("gpu-mixed").and_then(|r| r.gpu_over_cpu).map_or("—".into(), ratio));
                        }
                        ui.end_row();
                    }
                })
        });
    regions.push(("table".to_string(), table.inner.response.rect));
    shown.regions = regions
        .into_iter()
        .map(|(n, r)| (n, r * ctx.pixels_per_point()))
        .collect();
    Ok(())
}

/// The curve's parts for the keyboard (issue 53; window logical pixels,
/// `zoom`: egui's zoom factor): the original TinyGPT's points, ours in f32
/// and in mixed precision, each point a cell named with its numbers.
fn curve_parts(
    results: &[crate::bench::BenchResult],
    rect: egui::Rect,
    transform: &egui_plot::PlotTransform,
    zoom: f32,
) -> Vec<crate::app::canvas::parts::Part> {
    use crate::app::canvas::parts::Part;
    let window = |r: egui::Rect| Rect::new(r.min.x * zoom, r.min.y * zoom, r.max.x * zoom, r.max.y * zoom);
    let at = |params: usize, ratio: f64| {
        let p = transform.position_from_point(&egui_plot::PlotPoint::new((params as f64).log10(), ratio));
        window(egui::Rect::from_center_size(p, egui::vec2(14.0, 14.0)))
    };
    let mut out = Vec::new();
    let original: Vec<(Rect, String)> = bench_report::ORIGINAL
        .iter()
        .map(|&(name, params, _, speedup)| {
            (
                at(params, speedup),
                format!("{name}, {params} parameters: the GPU {speedup:.1} times the CPU (the original TinyGPT, on its machine)"),
            )
        })
        .collect();
    let n = original.len();
    out.push(Part::drawn("the original TinyGPT's speedups".into(), Some("curve".into()), window(rect), 1, n, original));
    for (kind, name) in [("gpu", "our speedups in f32"), ("gpu-mixed", "our speedups in mixed precision")] {
        let mut points: Vec<&crate::bench::BenchResult> =
            results.iter().filter(|r| r.backend == kind && r.gpu_over_cpu.is_some()).collect();
        points.sort_by_key(|r| r.params);
        let cells: Vec<(Rect, String)> = points
            .iter()
            .map(|r| {
                let ratio = r.gpu_over_cpu.unwrap_or_default();
                (
                    at(r.params, ratio),
                    format!(
                        "{}, {} parameters: the GPU {ratio:.2} times the CPU, {:.2} ms a step",
                        r.preset, r.params, r.median_ms
                    ),
                )
            })
            .collect();
        if !cells.is_empty() {
            let n = cells.len();
            out.push(Part::drawn(name.into(), Some("curve".into()), window(rect), 1, n, cells));
        }
    }
    out
}
