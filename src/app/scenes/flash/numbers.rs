//! The Flash scene's words and numbers: the title and provenance, the
//! visit's per-row numbers (the online softmax, or each row's share of P
//! and dS), and "Why tiles?" with this run's bytes and the check.

use super::{NUMBERS, PANEL, TEXT, WEAK};
use crate::flash::{FlashTrace, Pass, TraceSource, Visit, human_bytes};
use crate::gpu::kernels::ATTENTION_TILE;
use crate::probe::byte_label;
use bevy_egui::egui;

#[allow(clippy::too_many_arguments)]
pub(super) fn title(
    ui: &mut egui::Ui,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    position: usize,
    count: usize,
    step: u64,
    error: Option<&str>,
) {
    let tile = ATTENTION_TILE;
    let what = match (pass, current) {
        (_, None) => crate::t!("flash-no-visits"),
        (pass, Some(v)) => crate::t!(
            if pass == Pass::BackwardDkdv {
                "flash-visit-k"
            } else {
                "flash-visit-q"
            },
            tile = v.q_tile,
            from = v.q_tile * tile,
            to = ((v.q_tile + 1) * tile).min(trace.t) - 1,
            block = v.k_block,
            kfrom = v.k_block * tile,
            kto = ((v.k_block + 1) * tile).min(trace.t) - 1,
        ),
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new(pass_title(pass)).size(20.0).strong());
        ui.label(
            egui::RichText::new(crate::t!(
                "flash-visit-of",
                visit = (position + 1).min(count),
                count = count
            ))
            .size(15.0)
            .color(NUMBERS),
        );
    });
    ui.label(egui::RichText::new(what).size(16.0));
    let s = &trace.summary;
    let origin = match trace.source {
        TraceSource::Kernel => crate::t!("flash-origin-kernel", kernel = pass.kernel()),
        TraceSource::CpuModel => crate::t!("flash-origin-cpu"),
    };
    ui.label(
        egui::RichText::new(format!(
            "{}{}",
            crate::t!(
                "flash-summary",
                origin = origin,
                step = step,
                block = s.layer,
                head = s.head,
                row = s.row,
                t = s.t,
                d = s.d,
                tq = s.tile_q,
                tk = s.tile_k,
            ),
            error
                .map(|e| crate::t!("flash-last-trace-failed", error = e))
                .unwrap_or_default()
        ))
        .size(13.0)
        .color(WEAK),
    );
}

/// One line with the check of a pass (narrow views).
pub(super) fn check_line(trace: &FlashTrace, pass: Pass) -> String {
    let s = &trace.summary;
    let (what, diff) = match pass {
        Pass::Forward => ("O", s.max_abs_diff_vs_naive),
        _ => ("dQ, dK, dV", s.backward_max_abs_diff_vs_naive),
    };
    let same = match (trace.source, s.bit_identical_to_untraced) {
        (TraceSource::Kernel, true) => crate::t!("flash-bit-for-bit"),
        _ => String::new(),
    };
    crate::t!(
        "flash-check-line",
        what = what,
        diff = format!("{diff:.1e}"),
        same = same,
    )
}

/// The numbers of the current visit, a row of the tile per line: the
/// online softmax (forward), or each row's share of P and dS (backward).
pub(super) fn rows_table(
    ui: &mut egui::Ui,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    visits: &[&Visit],
    position: usize,
) {
    let Some(v) = current else { return };
    let tile = ATTENTION_TILE;
    let first = if pass.walks_queries() {
        v.k_block
    } else {
        v.q_tile
    } * tile;
    let n = v.valid_rows(trace.t);
    // The heading and the columns, as catalogue keys.
    let (heading, column_keys): (&str, &[&str]) = match pass {
        Pass::Forward => (
            "flash-rows-forward",
            &[
                "flash-col-row",
                "flash-col-byte",
                "flash-col-m-before",
                "flash-col-m-after",
                "flash-col-rescale",
                "flash-col-l-before",
                "flash-col-l-after",
            ],
        ),
        Pass::BackwardDkdv => (
            "flash-rows-dkdv",
            &[
                "flash-col-key",
                "flash-col-byte",
                "flash-col-p-tile",
                "flash-col-p-so-far",
                "flash-col-ds-tile",
            ],
        ),
        Pass::BackwardDq => (
            "flash-rows-dq",
            &[
                "flash-col-row",
                "flash-col-byte",
                "flash-col-p-block",
                "flash-col-p-so-far",
                "flash-col-ds-block",
            ],
        ),
    };
    let heading = crate::i18n::tr(heading, &[]);
    let columns: Vec<String> = column_keys
        .iter()
        .map(|k| crate::i18n::tr(k, &[]))
        .collect();
    // Σ P so far (backward): this workgroup's visits up to this one.
    let owner = |x: &Visit| {
        if pass.walks_queries() {
            x.k_block
        } else {
            x.q_tile
        }
    };
    let mut so_far = vec![0.0f32; tile];
    if pass != Pass::Forward {
        for x in visits[..=position.min(visits.len() - 1)]
            .iter()
            .filter(|x| owner(x) == owner(v))
        {
            for (a, r) in so_far.iter_mut().zip(&x.rows) {
                *a += r[0];
            }
        }
    }
    egui::Frame::new()
        .fill(PANEL)
        .corner_radius(6.0)
        .inner_margin(8.0)
        .show(ui, |ui| {
            ui.set_min_size(ui.available_size());
            ui.label(egui::RichText::new(heading).size(14.0).color(TEXT));
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    egui::Grid::new("flash-rows")
                        .striped(true)
                        .spacing(egui::vec2(18.0, 2.0))
                        .show(ui, |ui| {
                            for c in &columns {
                                ui.label(egui::RichText::new(c).size(13.0).color(WEAK));
                            }
                            ui.end_row();
                            let num = |ui: &mut egui::Ui, x: f32, hot: bool| {
                                let s = if x <= -3.0e38 {
                                    "−∞".to_string()
                                } else {
                                    format!("{x:.4}")
                                };
                                ui.label(
                                    egui::RichText::new(s).size(14.0).monospace().color(if hot {
                                        NUMBERS
                                    } else {
                                        TEXT
                                    }),
                                );
                            };
                            for r in 0..n {
                                let pos = first + r;
                                let row = &v.rows[r];
                                ui.label(
                                    egui::RichText::new(format!("{pos}")).size(14.0).monospace(),
                                );
                                ui.label(
                                    egui::RichText::new(byte_label(trace.tokens[pos]))
                                        .size(14.0)
                                        .monospace(),
                                );
                                match pass {
                                    Pass::Forward => {
                                        num(ui, row[0], false);
                                        num(ui, row[1], row[1] > row[0]);
                                        num(ui, row[4], row[4] < 1.0);
                                        num(ui, row[2], false);
                                        num(ui, row[3], false);
                                    }
                                    _ => {
                                        num(ui, row[0], false);
                                        num(
                                            ui,
                                            so_far[r],
                                            pass == Pass::BackwardDq
                                                && (so_far[r] - 1.0).abs() < 1e-4,
                                        );
                                        ui.label(
                                            egui::RichText::new(format!("{:+.2e}", row[1]))
                                                .size(14.0)
                                                .monospace(),
                                        );
                                    }
                                }
                                ui.end_row();
                            }
                        });
                });
        });
}

/// The side panel: why tiles, with this run's numbers, and the check.
pub(super) fn why(
    ui: &mut egui::Ui,
    trace: &FlashTrace,
    cfg: &crate::model::config::Config,
    pass: Pass,
    done: bool,
) {
    let s = &trace.summary;
    egui::Frame::new()
        .fill(PANEL)
        .corner_radius(6.0)
        .inner_margin(12.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.label(
                egui::RichText::new(crate::t!("flash-why"))
                    .size(18.0)
                    .strong(),
            );
            let t = s.t;
            let body = match pass {
                Pass::Forward => crate::t!("flash-why-forward", t = t, tile = s.tile_q),
                _ => crate::t!("flash-why-backward"),
            };
            ui.label(egui::RichText::new(body).size(14.0));
            ui.add_space(6.0);
            let (tiled, standard, what) = match pass {
                Pass::Forward => (
                    s.traffic.tiled_forward,
                    s.traffic.standard_forward,
                    crate::t!("flash-forward"),
                ),
                _ => (
                    s.traffic.tiled_backward,
                    s.traffic.standard_backward,
                    crate::t!("flash-backward"),
                ),
            };
            ui.label(
                egui::RichText::new(crate::t!(
                    "flash-memory-moved",
                    pass = what,
                    tiled = human_bytes(tiled),
                    standard = human_bytes(standard),
                    ratio = format!("{:.1}", standard as f64 / tiled.max(1) as f64),
                ))
                .size(14.0)
                .color(NUMBERS),
            );
            ui.label(
                egui::RichText::new(crate::t!(
                    "flash-never-allocated",
                    batch = cfg.batch,
                    heads = cfg.n_head,
                    per_layer = human_bytes(s.memory.never_allocated_per_layer),
                    model = human_bytes(s.memory.never_allocated_model),
                    layers = cfg.n_layer,
                    kept = human_bytes(s.memory.allocated_per_layer),
                ))
                .size(14.0)
                .color(NUMBERS),
            );
            ui.add_space(8.0);
            let heading = if done {
                crate::t!("flash-check-done")
            } else {
                crate::t!("flash-check-pending")
            };
            ui.label(egui::RichText::new(heading).size(16.0).strong());
            let check = match pass {
                Pass::Forward => crate::t!(
                    "flash-check-forward",
                    diff = format!("{:.2e}", s.max_abs_diff_vs_naive),
                    lse = format!("{:.2e}", s.lse_from_trace_max_abs_diff),
                ),
                _ => crate::t!(
                    "flash-check-backward",
                    diff = format!("{:.2e}", s.backward_max_abs_diff_vs_naive),
                ),
            };
            ui.label(egui::RichText::new(check).size(14.0));
            let same = match trace.source {
                TraceSource::Kernel if s.bit_identical_to_untraced => crate::t!("flash-same-bits"),
                TraceSource::Kernel => crate::t!(
                    "flash-differ",
                    diff = format!("{:.2e}", s.untraced_max_abs_diff),
                ),
                TraceSource::CpuModel => crate::t!(
                    "flash-cpu-model-check",
                    diff = format!("{:.2e}", s.untraced_max_abs_diff),
                ),
            };
            ui.label(egui::RichText::new(same).size(14.0).color(WEAK));
        });
}

/// A pass's heading, in the current language.
fn pass_title(pass: Pass) -> String {
    crate::t!(match pass {
        Pass::Forward => "flash-pass-forward",
        Pass::BackwardDkdv => "flash-pass-dkdv",
        Pass::BackwardDq => "flash-pass-dq",
    })
}
