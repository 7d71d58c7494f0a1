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
        (_, None) => "no visits".to_string(),
        (Pass::Forward | Pass::BackwardDq, Some(v)) => format!(
            "The workgroup of query tile {} (positions {}–{}) visits key block {} (keys {}–{})",
            v.q_tile,
            v.q_tile * tile,
            ((v.q_tile + 1) * tile).min(trace.t) - 1,
            v.k_block,
            v.k_block * tile,
            ((v.k_block + 1) * tile).min(trace.t) - 1
        ),
        (Pass::BackwardDkdv, Some(v)) => format!(
            "The workgroup of key block {} (keys {}–{}) visits query tile {} (positions {}–{})",
            v.k_block,
            v.k_block * tile,
            ((v.k_block + 1) * tile).min(trace.t) - 1,
            v.q_tile,
            v.q_tile * tile,
            ((v.q_tile + 1) * tile).min(trace.t) - 1
        ),
    };
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new(pass.title()).size(20.0).strong());
        ui.label(
            egui::RichText::new(format!("visit {} of {count}", (position + 1).min(count)))
                .size(15.0)
                .color(NUMBERS),
        );
    });
    ui.label(egui::RichText::new(what).size(16.0));
    let s = &trace.summary;
    let origin = match trace.source {
        TraceSource::Kernel => format!(
            "traced from {} (attention.wgsl, its TRACE pipeline) on the GPU",
            pass.kernel()
        ),
        TraceSource::CpuModel => {
            "the CPU model of attention.wgsl's tiling (the CPU backend has no kernels to trace)"
                .to_string()
        }
    };
    ui.label(
        egui::RichText::new(format!(
            "{origin} · weights after step {step} · block {}, head {}, batch row {} · T {}, D {}, tiles {}×{}{}",
            s.layer,
            s.head,
            s.row,
            s.t,
            s.d,
            s.tile_q,
            s.tile_k,
            error.map(|e| format!(" · last trace failed: {e}")).unwrap_or_default()
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
        (TraceSource::Kernel, true) => " · traced = untraced, bit for bit",
        _ => "",
    };
    format!("{what} vs naive f64 attention: max |diff| {diff:.1e}{same}")
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
    let (heading, columns): (&str, &[&str]) = match pass {
        Pass::Forward => (
            "Online softmax, per query row:  m ← max(m, max S) · O ← O·e^(m_old − m) · l ← l·e^(m_old − m) + Σ e^(S − m)",
            &[
                "row", "byte", "m before", "m after", "rescale", "l before", "l after",
            ],
        ),
        Pass::BackwardDkdv => (
            "Per key of the block: Σᵢ P over this query tile, Σ P so far (the attention this key receives), Σᵢ dS",
            &["key", "byte", "Σ P (tile)", "Σ P so far", "Σ dS (tile)"],
        ),
        Pass::BackwardDq => (
            "Per query row: Σⱼ P over this key block, Σ P so far (1 by the diagonal: P is recomputed exactly), Σⱼ dS",
            &["row", "byte", "Σ P (block)", "Σ P so far", "Σ dS (block)"],
        ),
    };
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
                            for c in columns {
                                ui.label(egui::RichText::new(*c).size(13.0).color(WEAK));
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
    egui::Frame::new().fill(PANEL).corner_radius(6.0).inner_margin(12.0).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.label(egui::RichText::new("Why tiles?").size(18.0).strong());
        let t = s.t;
        let body = match pass {
            Pass::Forward => format!(
                "Standard attention writes the scores S and the weights P of every head to GPU memory, {t}×{t} floats each, and reads them back. FlashAttention never makes them: a workgroup keeps one {tile}×{tile} block of S in its shared memory and folds it into O at once with the online softmax — a running max m and sum l per row; when m grows, what was summed so far is rescaled by exp(m_old − m_new).",
                tile = s.tile_q
            ),
            _ => "The backward pass recomputes each block of P from q, k and the saved log-sum-exp instead of reading a stored T×T P: more arithmetic, far less memory traffic. Two kernels, so that no two workgroups write one element: dK, dV walk the query tiles of a key block; dQ walks the key blocks of a query tile.".to_string(),
        };
        ui.label(egui::RichText::new(body).size(14.0));
        ui.add_space(6.0);
        let (tiled, standard, what) = match pass {
            Pass::Forward => (s.traffic.tiled_forward, s.traffic.standard_forward, "forward"),
            _ => (s.traffic.tiled_backward, s.traffic.standard_backward, "backward"),
        };
        ui.label(
            egui::RichText::new(format!(
                "Memory moved, this head's {what}: {} tiled vs {} standard ({:.1}× less).",
                human_bytes(tiled),
                human_bytes(standard),
                standard as f64 / tiled.max(1) as f64
            ))
            .size(14.0)
            .color(NUMBERS),
        );
        ui.label(
            egui::RichText::new(format!(
                "Never allocated: P of all {} × {} heads, {} per layer, {} for the {} layers. Kept instead: one log-sum-exp per row, {} per layer.",
                cfg.batch,
                cfg.n_head,
                human_bytes(s.memory.never_allocated_per_layer),
                human_bytes(s.memory.never_allocated_model),
                cfg.n_layer,
                human_bytes(s.memory.allocated_per_layer),
            ))
            .size(14.0)
            .color(NUMBERS),
        );
        ui.add_space(8.0);
        let heading = if done { "✔ Pass done: the check" } else { "The check (at the end of the pass)" };
        ui.label(egui::RichText::new(heading).size(16.0).strong());
        let check = match pass {
            Pass::Forward => format!(
                "O against naive softmax(QKᵀ/√D)·V in f64 from the same Q, K, V: max |diff| {:.2e}. Final m + ln l against the saved log-sum-exp: {:.2e}.",
                s.max_abs_diff_vs_naive, s.lse_from_trace_max_abs_diff
            ),
            _ => format!(
                "dQ, dK, dV against the naive backward in f64 from the same Q, K, V, dO: max |diff| {:.2e}.",
                s.backward_max_abs_diff_vs_naive
            ),
        };
        ui.label(egui::RichText::new(check).size(14.0));
        let same = match trace.source {
            TraceSource::Kernel if s.bit_identical_to_untraced => {
                "The traced 16×16-tile kernels' O, lse and dQKV equal the same kernels run untraced, bit for bit (training's forward and dQ run the row kernels: the same function, one query row per thread).".to_string()
            }
            TraceSource::Kernel => format!(
                "The traced kernels differ from the untraced ones by {:.2e}: tracing changed the arithmetic.",
                s.untraced_max_abs_diff
            ),
            TraceSource::CpuModel => format!(
                "The CPU model against the CPU backend's own (untiled) attention: max |diff| {:.2e}.",
                s.untraced_max_abs_diff
            ),
        };
        ui.label(egui::RichText::new(same).size(14.0).color(WEAK));
    });
}
