//! The "Flash" scene: FlashAttention-2 tiling one head's attention, replayed
//! from a trace of the real kernels ([`crate::flash`]): attention.wgsl's
//! traced pipelines on the GPU, or the CPU model of the same tiling on the
//! CPU backend (the picture says which).
//!
//! Left, Q, K, V and O in GPU memory, cut into tiles of
//! [`ATTENTION_TILE`] rows; in the middle, one workgroup's shared memory
//! with the tiles it loaded and the block of scores S = QKᵀ/√D it computed;
//! right, the grid of (query tile, key block) pairs: visited, current, or
//! skipped by causality. Below, the online softmax's numbers for each row
//! of the tile (m, l and the rescale of O), or for the backward passes each
//! row's share of P and dS. A side panel says why this order of work is
//! faster, with this run's bytes, and checks the result against naive
//! attention. Play, pause, step and speed drive the replay; the trace is
//! asked for through [`FlashTraces`] and never blocks a frame.

use super::Scene;
use crate::app::heatmap;
use crate::app::training::{FlashTraces, Run};
use crate::app::ui::UiState;
use crate::flash::{FlashTrace, FlashWant, Pass, TraceSource, Visit, human_bytes};
use crate::gpu::kernels::ATTENTION_TILE;
use crate::probe::{ProbeSource, byte_label};
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use std::collections::HashMap;

/// What the scene shows and how the replay stands; the toolbar edits it.
#[derive(Resource, Debug, Clone)]
pub struct FlashView {
    pub source: SourceKind,
    pub prompt: String,
    pub layer: usize,
    pub head: usize,
    pub pass: Pass,
    /// The visit shown: index into the pass's visited blocks, in replay order.
    pub position: usize,
    /// How far into the visit the animation is, 0..1.
    pub phase: f32,
    pub playing: bool,
    /// Visits per second.
    pub speed: f32,
    /// The explanation's window is open (narrow views; wide ones show it in a column).
    pub show_why: bool,
    /// Where the next trace's replay starts (paused there), instead of at
    /// its first visit playing: the command line's `--flash-visit`.
    pub start_at: Option<usize>,
    /// The trace version the replay started on.
    seen_version: u64,
    seen_generation: u64,
}

impl Default for FlashView {
    fn default() -> Self {
        Self {
            source: SourceKind::BatchRow,
            prompt: "To be, or not to be, that is the question:".into(),
            layer: 0,
            head: 0,
            pass: Pass::Forward,
            position: 0,
            phase: 0.0,
            playing: true,
            speed: 1.5,
            show_why: false,
            start_at: None,
            seen_version: 0,
            seen_generation: u64::MAX,
        }
    }
}

impl FlashView {
    /// Opens paused at visit `visit` of the forward pass, in the middle of
    /// its animation (the command line's `--flash-visit`).
    pub fn at(pass: Pass, visit: Option<usize>) -> Self {
        Self {
            pass,
            start_at: visit,
            ..Self::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    BatchRow,
    Prompt,
}

/// What the picture shows now (headless runs print it).
#[derive(Resource, Debug, Clone, Default)]
pub struct FlashShown {
    pub pass: String,
    pub position: Option<usize>,
    /// Visited blocks in the pass.
    pub visits: usize,
    pub q_tile: Option<usize>,
    pub k_block: Option<usize>,
    /// `kernel` or `cpu_model`, once a trace is on screen.
    pub source: Option<String>,
    /// The step whose weights the trace saw.
    pub step: Option<u64>,
    pub max_abs_diff_vs_naive: Option<f64>,
    /// Picture rectangles (pixels): memory, shared, grid, rows, why.
    pub regions: Vec<(String, egui::Rect)>,
}

/// The head's tensors as textures, made once per trace.
#[derive(Resource, Default)]
struct Pictures {
    version: u64,
    textures: HashMap<&'static str, egui::TextureHandle>,
}

pub struct FlashScenePlugin {
    pub initial: FlashView,
}

impl Plugin for FlashScenePlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.initial.clone())
            .init_resource::<FlashShown>()
            .init_resource::<Pictures>()
            .add_systems(OnExit(Scene::Flash), leave)
            .add_systems(
                Update,
                drive
                    .in_set(crate::app::AppSystems::Scene)
                    .run_if(in_state(Scene::Flash)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                draw.after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Flash)),
            );
    }
}

fn leave(
    mut traces: ResMut<FlashTraces>,
    mut pictures: ResMut<Pictures>,
    mut shown: ResMut<FlashShown>,
) {
    traces.set_want(None);
    pictures.textures.clear();
    pictures.version = 0;
    *shown = FlashShown::default();
}

/// Asks for the trace the view names (a new run traces again).
fn drive(run: Option<Res<Run>>, mut view: ResMut<FlashView>, mut traces: ResMut<FlashTraces>) {
    let Some(run) = run else { return };
    let cfg = run.config();
    view.layer = view.layer.min(cfg.n_layer - 1);
    view.head = view.head.min(cfg.n_head - 1);
    let source = match view.source {
        SourceKind::BatchRow => ProbeSource::BatchRow(0),
        SourceKind::Prompt if view.prompt.is_empty() => return,
        SourceKind::Prompt => ProbeSource::Prompt(view.prompt.clone().into_bytes()),
    };
    traces.set_want(Some(FlashWant {
        source,
        layer: view.layer,
        head: view.head,
    }));
    if view.seen_generation != run.generation {
        view.seen_generation = run.generation;
        traces.refresh();
    }
}

// Colours.
const PANEL: egui::Color32 = egui::Color32::from_rgb(22, 25, 33);
const TEXT: egui::Color32 = egui::Color32::from_rgb(215, 220, 228);
const WEAK: egui::Color32 = egui::Color32::from_rgb(150, 156, 168);
const QUERY: egui::Color32 = egui::Color32::from_rgb(96, 170, 255);
const KEY: egui::Color32 = egui::Color32::from_rgb(255, 160, 70);
const DONE: egui::Color32 = egui::Color32::from_rgb(70, 130, 110);
const SKIPPED: egui::Color32 = egui::Color32::from_rgb(48, 50, 56);
const NUMBERS: egui::Color32 = egui::Color32::from_rgb(250, 226, 150);

/// The visits of a pass that did work, in replay order.
fn replay(trace: &FlashTrace, pass: Pass) -> Vec<&Visit> {
    trace.pass(pass).filter(|v| !v.skipped).collect()
}

#[allow(clippy::too_many_arguments)]
fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    mut view: ResMut<FlashView>,
    mut traces: ResMut<FlashTraces>,
    mut pictures: ResMut<Pictures>,
    mut shown: ResMut<FlashShown>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let (Some(area), Some(run)) = (ui_state.central_rect(&ctx), run) else {
        return Ok(());
    };
    let cfg = run.config().clone();
    let latest = traces.latest.clone();
    // A new trace restarts the replay.
    if traces.version != view.seen_version {
        view.seen_version = traces.version;
        match view.start_at.take() {
            Some(at) => {
                view.position = at;
                view.phase = 0.6;
                view.playing = false;
            }
            None => {
                view.position = 0;
                view.phase = 0.0;
            }
        }
    }
    if let Some((_, trace)) = &latest
        && pictures.version != traces.version
    {
        pictures.version = traces.version;
        pictures.textures = make_pictures(&ctx, trace);
    }
    let visits: Vec<&Visit> = latest
        .as_ref()
        .map(|(_, t)| replay(t, view.pass))
        .unwrap_or_default();
    let count = visits.len();
    // ---- time and keys
    let dt = ctx.input(|i| i.stable_dt).min(0.1);
    let mut retrace = false;
    if !ctx.egui_wants_keyboard_input() {
        ctx.input(|i| {
            if i.key_pressed(egui::Key::Space) {
                view.playing = !view.playing;
            }
            if i.key_pressed(egui::Key::ArrowRight) {
                step(&mut view, count, 1);
            }
            if i.key_pressed(egui::Key::ArrowLeft) {
                step(&mut view, count, -1);
            }
            if i.key_pressed(egui::Key::Home) {
                view.position = 0;
                view.phase = 0.0;
            }
            if i.key_pressed(egui::Key::End) {
                view.position = count.saturating_sub(1);
                view.phase = 1.0;
            }
        });
    }
    if view.playing && count > 0 {
        view.phase += dt * view.speed;
        while view.phase >= 1.0 {
            if view.position + 1 < count {
                view.position += 1;
                view.phase -= 1.0;
            } else {
                view.phase = 1.0;
                view.playing = false;
                break;
            }
        }
    }
    view.position = view.position.min(count.saturating_sub(1));

    // ---- toolbar
    crate::app::ui::scene_toolbar(&ctx, "flash-toolbar", area, |ui| {
        ui.selectable_value(&mut view.source, SourceKind::BatchRow, "batch row 0")
            .on_hover_text("row 0 of the batch the run's next step trains on: T bytes of text");
        ui.selectable_value(&mut view.source, SourceKind::Prompt, "prompt")
            .on_hover_text("your text, padded with spaces to the context");
        if view.source == SourceKind::Prompt {
            ui.add(
                egui::TextEdit::singleline(&mut view.prompt)
                    .desired_width(160.0)
                    .hint_text("type a text"),
            );
        }
        ui.separator();
        let mut layer = view.layer;
        egui::ComboBox::from_id_salt("flash-layer")
            .selected_text(format!("block {layer}"))
            .width(80.0)
            .show_ui(ui, |ui| {
                for l in 0..cfg.n_layer {
                    ui.selectable_value(&mut layer, l, format!("block {l}"));
                }
            });
        view.layer = layer;
        let mut head = view.head;
        egui::ComboBox::from_id_salt("flash-head")
            .selected_text(format!("head {head}"))
            .width(70.0)
            .show_ui(ui, |ui| {
                for h in 0..cfg.n_head {
                    ui.selectable_value(&mut head, h, format!("head {h}"));
                }
            });
        view.head = head;
        ui.separator();
        for (pass, label) in [
            (Pass::Forward, "forward"),
            (Pass::BackwardDkdv, "backward dK, dV"),
            (Pass::BackwardDq, "backward dQ"),
        ] {
            if ui
                .selectable_label(view.pass == pass, label)
                .on_hover_text(pass.kernel())
                .clicked()
                && view.pass != pass
            {
                view.pass = pass;
                view.position = 0;
                view.phase = 0.0;
                view.playing = true;
            }
        }
        ui.separator();
        if ui.button("⏮").on_hover_text("to the first visit (Home)").clicked() {
            view.position = 0;
            view.phase = 0.0;
        }
        if ui.button("◀").on_hover_text("previous visit (←)").clicked() {
            step(&mut view, count, -1);
        }
        let play = if view.playing { "⏸" } else { "▶" };
        if ui.button(play).on_hover_text("play / pause (Space)").clicked() {
            if !view.playing && view.position + 1 >= count && view.phase >= 1.0 {
                view.position = 0;
                view.phase = 0.0;
            }
            view.playing = !view.playing;
        }
        if ui.button("▶|").on_hover_text("next visit (→)").clicked() {
            step(&mut view, count, 1);
        }
        if ui.button("⏭").on_hover_text("to the end of the pass (End)").clicked() {
            view.position = count.saturating_sub(1);
            view.phase = 1.0;
            view.playing = false;
        }
        ui.add(
            egui::Slider::new(&mut view.speed, 0.25..=30.0)
                .logarithmic(true)
                .text("visits/s"),
        );
        if ui
            .button("↻ trace again")
            .on_hover_text("trace the run's newest weights")
            .clicked()
        {
            retrace = true;
        }
    });
    if retrace {
        traces.refresh();
    }

    // ---- the body, under the toolbar
    let top = crate::app::ui::toolbar_bottom(&ctx, "flash-toolbar", area);
    let body = egui::Rect::from_min_max(egui::pos2(area.min.x, top), area.max)
        .shrink2(egui::vec2(14.0, 6.0));
    let mut regions = Vec::new();
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "flash-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("flash-body-layer"),
            ))
            .max_rect(body),
    );
    ui.set_clip_rect(body);
    let Some((step_seen, trace)) = latest.as_ref().map(|(s, t)| (*s, t.clone())) else {
        let text = match (&traces.error, traces.want.is_some()) {
            (Some(e), _) => format!("cannot trace: {e}"),
            _ => format!(
                "tracing block {} head {} on the {} backend…",
                view.layer,
                view.head,
                run.backend_label.split(' ').next().unwrap_or("?")
            ),
        };
        ui.label(egui::RichText::new(text).size(18.0));
        *shown = FlashShown {
            pass: view.pass.key().into(),
            ..FlashShown::default()
        };
        return Ok(());
    };
    let current = visits.get(view.position).copied();
    let done = view.position + 1 >= count && view.phase >= 1.0;
    // Wide enough: the explanation in a column at the right; else in a
    // window the title's button opens.
    let side_column = body.width() >= 1150.0;
    let side_w = if side_column {
        (body.width() * 0.25).clamp(300.0, 440.0)
    } else {
        0.0
    };
    let main = egui::Rect::from_min_max(
        body.min,
        egui::pos2(body.max.x - side_w - if side_column { 14.0 } else { 0.0 }, body.max.y),
    );

    // Title and provenance.
    let mut top_ui = ui.new_child(egui::UiBuilder::new().max_rect(main));
    title(
        &mut top_ui,
        &trace,
        view.pass,
        current,
        view.position,
        count,
        step_seen,
        traces.error.as_deref(),
    );
    if !side_column {
        top_ui.horizontal_wrapped(|ui| {
            let label = if view.show_why { "✖ Why tiles?" } else { "ℹ Why tiles?" };
            if ui.button(egui::RichText::new(label).size(14.0)).clicked() {
                view.show_why = !view.show_why;
            }
            ui.label(egui::RichText::new(check_line(&trace, view.pass)).size(13.0).color(NUMBERS));
        });
    }
    let used = top_ui.min_rect().height() + 8.0;
    let work = egui::Rect::from_min_max(main.min + egui::vec2(0.0, used), main.max);
    let upper_h = (work.height() * 0.56).max(180.0);
    let upper = egui::Rect::from_min_max(work.min, egui::pos2(work.max.x, work.min.y + upper_h));
    let lower = egui::Rect::from_min_max(egui::pos2(work.min.x, upper.max.y + 10.0), work.max);
    let grid_w = (upper.width() * 0.26).min(upper.height());
    let memory = egui::Rect::from_min_size(upper.min, egui::vec2(upper.width() * 0.35, upper.height()));
    let grid_rect = egui::Rect::from_min_max(egui::pos2(upper.max.x - grid_w, upper.min.y), upper.max);
    let shared = egui::Rect::from_min_max(
        egui::pos2(memory.max.x + 12.0, upper.min.y),
        egui::pos2(grid_rect.min.x - 12.0, upper.max.y),
    );
    let rows_rect = lower;

    let painter = ui.painter().clone();
    let pointer = ctx.pointer_hover_pos();
    let mut hover: Option<String> = None;
    let slots = draw_memory(&painter, memory, &trace, view.pass, current, &visits, view.position, done, &pictures.textures);
    regions.push(("memory".to_string(), memory));
    draw_shared(&painter, shared, &trace, view.pass, current, view.phase, &slots, &pictures.textures, pointer, &mut hover);
    regions.push(("shared".to_string(), shared));
    draw_grid(&painter, grid_rect, &trace, view.pass, current, &visits, view.position, pointer, &mut hover);
    regions.push(("grid".to_string(), grid_rect));
    let mut rows_ui = ui.new_child(egui::UiBuilder::new().max_rect(rows_rect));
    rows_ui.set_clip_rect(rows_rect);
    rows_table(&mut rows_ui, &trace, view.pass, current, &visits, view.position);
    regions.push(("rows".to_string(), rows_rect));
    if side_column {
        let side = egui::Rect::from_min_max(egui::pos2(body.max.x - side_w, body.min.y), body.max);
        let mut side_ui = ui.new_child(egui::UiBuilder::new().max_rect(side));
        why(&mut side_ui, &trace, &cfg, view.pass, done);
        regions.push(("why".to_string(), side_ui.min_rect()));
    } else if view.show_why {
        let mut open = true;
        let shown_window = egui::Window::new("Why tiles?")
            .open(&mut open)
            .default_pos(body.center_top() + egui::vec2(-200.0, 40.0))
            .default_width(420.0)
            .collapsible(false)
            .show(&ctx, |ui| why(ui, &trace, &cfg, view.pass, done));
        if let Some(r) = shown_window {
            regions.push(("why".to_string(), r.response.rect));
        }
        view.show_why = open;
    }
    if let Some(h) = hover {
        egui::Tooltip::always_open(ctx.clone(), ui.layer_id(), egui::Id::new("flash-hover"), egui::PopupAnchor::Pointer)
            .show(|ui| {
                ui.label(h);
            });
    }

    *shown = FlashShown {
        pass: view.pass.key().into(),
        position: current.map(|_| view.position),
        visits: count,
        q_tile: current.map(|v| v.q_tile),
        k_block: current.map(|v| v.k_block),
        source: Some(
            match trace.source {
                TraceSource::Kernel => "kernel",
                TraceSource::CpuModel => "cpu_model",
            }
            .into(),
        ),
        step: Some(step_seen),
        max_abs_diff_vs_naive: Some(trace.summary.max_abs_diff_vs_naive),
        regions: regions
            .into_iter()
            .map(|(n, r)| (n, r * ctx.pixels_per_point()))
            .collect(),
    };
    Ok(())
}

fn step(view: &mut FlashView, count: usize, by: i64) {
    view.playing = false;
    view.phase = 1.0;
    view.position = (view.position as i64 + by).clamp(0, count.saturating_sub(1) as i64) as usize;
}

/// The head's T×D tensors as heatmap textures (D wide, T tall), each on its
/// own symmetric scale (99th percentile of |x|).
fn make_pictures(ctx: &egui::Context, trace: &FlashTrace) -> HashMap<&'static str, egui::TextureHandle> {
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
                ctx.load_texture(format!("flash-{name}"), image, egui::TextureOptions::NEAREST),
            )
        })
        .collect();
    // The log-sum-exp: one column, on its own range.
    let (lo, hi) = trace
        .lse
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
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

fn text(painter: &egui::Painter, pos: egui::Pos2, anchor: egui::Align2, s: impl ToString, size: f32, colour: egui::Color32) -> egui::Rect {
    painter.text(pos, anchor, s.to_string(), egui::FontId::proportional(size), colour)
}

#[allow(clippy::too_many_arguments)]
fn title(
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
        TraceSource::Kernel => format!("traced from {} (attention.wgsl, its TRACE pipeline) on the GPU", pass.kernel()),
        TraceSource::CpuModel => "the CPU model of attention.wgsl's tiling (the CPU backend has no kernels to trace)".to_string(),
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
fn check_line(trace: &FlashTrace, pass: Pass) -> String {
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

/// Where the memory columns put each tile (for the flying tiles).
struct Slots {
    /// Tensor name → its column rectangle.
    columns: HashMap<&'static str, egui::Rect>,
    t: usize,
}

impl Slots {
    /// Rows `tile·TILE..` of a column.
    fn tile(&self, name: &str, tile: usize) -> egui::Rect {
        let c = self.columns[name];
        let h = c.height() / self.t as f32;
        let y0 = c.min.y + (tile * ATTENTION_TILE) as f32 * h;
        let y1 = c.min.y + (((tile + 1) * ATTENTION_TILE).min(self.t)) as f32 * h;
        egui::Rect::from_min_max(egui::pos2(c.min.x, y0), egui::pos2(c.max.x, y1))
    }
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
        Pass::Forward => (vec![("Q", v.q_tile)], vec![("K", v.k_block), ("V", v.k_block)]),
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
    let owner = |v: &Visit| if pass.walks_queries() { v.k_block } else { v.q_tile };
    match visits.iter().rposition(|v| owner(v) == tile) {
        Some(last) => last < position || (done && last == position),
        None => false,
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_memory(
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
    text(painter, rect.min + egui::vec2(10.0, 8.0), egui::Align2::LEFT_TOP, "GPU memory (global)", 15.0, TEXT);
    let (inputs, outputs) = columns_of(pass);
    let n = inputs.len() + outputs.len();
    let inner = rect.shrink2(egui::vec2(12.0, 0.0));
    let top = rect.min.y + 50.0;
    let bottom = rect.max.y - 26.0;
    let gap = 10.0;
    let lse_w = 12.0;
    let wide = n - outputs.iter().filter(|&&o| o == "lse").count();
    let col_w = ((inner.width() - gap * (n as f32 - 1.0) - if outputs.contains(&"lse") { lse_w } else { 0.0 }) / wide as f32).min(70.0);
    let mut x = inner.min.x;
    let mut columns = HashMap::new();
    let uv = egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0));
    for (k, &name) in inputs.iter().chain(outputs).enumerate() {
        let w = if name == "lse" { lse_w } else { col_w };
        let col = egui::Rect::from_min_max(egui::pos2(x, top), egui::pos2(x + w, bottom));
        columns.insert(name, col);
        let is_output = k >= inputs.len();
        let label_colour = if is_output { NUMBERS } else { TEXT };
        text(painter, egui::pos2(col.center().x, top - 4.0), egui::Align2::CENTER_BOTTOM, name, 14.0, label_colour);
        painter.rect_filled(col, 0.0, egui::Color32::from_gray(12));
        if let Some(tex) = textures.get(name) {
            if is_output {
                // An output tile appears once its workgroup has written it.
                for tile in 0..trace.tiles {
                    if written(visits, position, done, pass, tile) {
                        let r = Slots { columns: HashMap::from([(name, col)]), t: trace.t }.tile(name, tile);
                        let (y0, y1) = (
                            (tile * ATTENTION_TILE) as f32 / trace.t as f32,
                            (((tile + 1) * ATTENTION_TILE).min(trace.t)) as f32 / trace.t as f32,
                        );
                        painter.image(tex.id(), r, egui::Rect::from_min_max(egui::pos2(0.0, y0), egui::pos2(1.0, y1)), egui::Color32::WHITE);
                    }
                }
            } else {
                painter.image(tex.id(), col, uv, egui::Color32::WHITE);
            }
        }
        // Tile boundaries.
        for tile in 1..trace.tiles {
            let y = col.min.y + col.height() * (tile * ATTENTION_TILE) as f32 / trace.t as f32;
            painter.line_segment([egui::pos2(col.min.x, y), egui::pos2(col.max.x, y)], egui::Stroke::new(1.0, egui::Color32::from_gray(70)));
        }
        painter.rect_stroke(col, 0.0, egui::Stroke::new(1.0, egui::Color32::from_gray(90)), egui::StrokeKind::Outside);
        x += w + gap;
    }
    let slots = Slots { columns, t: trace.t };
    // The current visit's tiles: owned (blue), loaded (orange).
    if let Some(v) = current {
        let (owned, loaded) = tiles_of(pass, v);
        for (name, tile) in owned {
            painter.rect_stroke(slots.tile(name, tile), 0.0, egui::Stroke::new(2.5, QUERY), egui::StrokeKind::Outside);
        }
        for (name, tile) in loaded {
            painter.rect_stroke(slots.tile(name, tile), 0.0, egui::Stroke::new(2.5, KEY), egui::StrokeKind::Outside);
        }
        for &name in outputs {
            let tile = if pass.walks_queries() { v.k_block } else { v.q_tile };
            painter.rect_stroke(slots.tile(name, tile), 0.0, egui::Stroke::new(1.5, QUERY.gamma_multiply(0.6)), egui::StrokeKind::Outside);
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
fn draw_shared(
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
    painter.rect_stroke(rect, 6.0, egui::Stroke::new(1.5, egui::Color32::from_rgb(80, 110, 150)), egui::StrokeKind::Inside);
    let bytes = crate::gpu::kernels::attention_workgroup_bytes(trace.d);
    text(painter, rect.min + egui::vec2(10.0, 8.0), egui::Align2::LEFT_TOP, format!("shared memory · {}", human_bytes(bytes)), 15.0, TEXT);
    text(painter, rect.min + egui::vec2(10.0, 28.0), egui::Align2::LEFT_TOP, "one workgroup: blue kept, orange loaded now", 12.0, WEAK);
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
    let place_tile = |name: &'static str, t: usize, moving: bool, colour: egui::Color32, label: &str, x: f32| {
        let dest = egui::Rect::from_min_size(egui::pos2(x, top + 16.0), egui::vec2(tile_w, tile_h));
        let from = slots.tile(name, t);
        let r = if moving { lerp_rect(from, dest, load) } else { dest };
        if let Some(tex) = textures.get(name) {
            let (y0, y1) = (
                (t * tile) as f32 / trace.t as f32,
                (((t + 1) * tile).min(trace.t)) as f32 / trace.t as f32,
            );
            painter.image(tex.id(), r, egui::Rect::from_min_max(egui::pos2(0.0, y0), egui::pos2(1.0, y1)), egui::Color32::WHITE);
        }
        painter.rect_stroke(r, 0.0, egui::Stroke::new(2.0, colour), egui::StrokeKind::Outside);
        text(painter, egui::pos2(dest.center().x, top + 12.0), egui::Align2::CENTER_BOTTOM, label, 13.0, colour);
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
    let side = (inner.max.y - block_top - 8.0).min((inner.width() - 24.0) / 2.0).max(40.0);
    let (a_name, b_name) = match pass {
        Pass::Forward => ("S = q·k/√D", "P̃ = exp(S − m)"),
        _ => ("P = exp(S − lse)", "dS = P∘(dP − δ)"),
    };
    let a_rect = egui::Rect::from_min_size(egui::pos2(inner.min.x, block_top), egui::vec2(side, side));
    let b_rect = egui::Rect::from_min_size(egui::pos2(inner.min.x + side + 24.0, block_top), egui::vec2(side, side));
    let half_a = v.block_a.iter().filter(|x| x.is_finite() && x.abs() < 1e30).fold(0.0f32, |m, x| m.max(x.abs()));
    let half_b = v.block_b.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let first_row = v.q_tile * tile;
    let first_col = v.k_block * tile;
    for (r, name, values, half, sequential) in [
        (a_rect, a_name, &v.block_a, half_a, pass != Pass::Forward),
        (b_rect, b_name, &v.block_b, half_b, pass == Pass::Forward),
    ] {
        text(painter, egui::pos2(r.min.x, r.min.y - 4.0), egui::Align2::LEFT_BOTTOM, name, 14.0, NUMBERS);
        let cell = r.width() / tile as f32;
        for i in 0..tile {
            for j in 0..tile {
                let c = egui::Rect::from_min_size(r.min + egui::vec2(j as f32 * cell, i as f32 * cell), egui::vec2(cell, cell));
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
                painter.rect_filled(c.shrink(0.5), 0.0, colour.gamma_multiply(if masked { 1.0 } else { shown }));
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
        painter.rect_stroke(r, 0.0, egui::Stroke::new(1.0, egui::Color32::from_gray(110)), egui::StrokeKind::Outside);
    }
    let note = match pass {
        Pass::Forward => format!("{tile}×{tile} scores live only here; the row max m and sum l update, O is rescaled"),
        Pass::BackwardDkdv => "P recomputed from q, k and the saved lse; dK += dSᵀ·Q, dV += Pᵀ·dO".into(),
        Pass::BackwardDq => "P recomputed again; dQ += dS·K".into(),
    };
    text(painter, egui::pos2(inner.min.x, inner.max.y + 4.0), egui::Align2::LEFT_BOTTOM, note, 12.0, WEAK);
}

#[allow(clippy::too_many_arguments)]
fn draw_grid(
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
    text(painter, rect.min + egui::vec2(10.0, 8.0), egui::Align2::LEFT_TOP, "tiles × blocks", 15.0, TEXT);
    let nt = trace.tiles;
    let inner = egui::Rect::from_min_max(rect.min + egui::vec2(26.0, 52.0), rect.max - egui::vec2(10.0, 34.0));
    let cell = (inner.width().min(inner.height()) / nt as f32).max(2.0);
    let origin = inner.min;
    text(painter, egui::pos2(origin.x, origin.y - 4.0), egui::Align2::LEFT_BOTTOM, "key blocks →", 12.0, KEY);
    text(painter, egui::pos2(origin.x - 6.0, origin.y), egui::Align2::RIGHT_TOP, "q", 12.0, QUERY);
    let done: std::collections::HashSet<(usize, usize)> = visits[..position.min(visits.len())].iter().map(|v| (v.q_tile, v.k_block)).collect();
    for v in trace.pass(pass) {
        let c = egui::Rect::from_min_size(
            origin + egui::vec2(v.k_block as f32 * cell, v.q_tile as f32 * cell),
            egui::vec2(cell, cell),
        )
        .shrink((cell * 0.06).min(1.5));
        let is_current = current.is_some_and(|cv| cv.q_tile == v.q_tile && cv.k_block == v.k_block);
        if v.skipped {
            painter.rect_filled(c, 1.0, SKIPPED);
            painter.line_segment([c.left_bottom(), c.right_top()], egui::Stroke::new(1.0, egui::Color32::from_gray(80)));
        } else if is_current {
            painter.rect_filled(c, 1.0, KEY);
        } else if done.contains(&(v.q_tile, v.k_block)) {
            painter.rect_filled(c, 1.0, DONE);
        } else {
            painter.rect_stroke(c, 1.0, egui::Stroke::new(1.0, egui::Color32::from_gray(90)), egui::StrokeKind::Inside);
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
        painter.rect_stroke(c, 1.0, egui::Stroke::new(2.0, egui::Color32::WHITE), egui::StrokeKind::Outside);
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

/// The numbers of the current visit, a row of the tile per line: the
/// online softmax (forward), or each row's share of P and dS (backward).
fn rows_table(
    ui: &mut egui::Ui,
    trace: &FlashTrace,
    pass: Pass,
    current: Option<&Visit>,
    visits: &[&Visit],
    position: usize,
) {
    let Some(v) = current else { return };
    let tile = ATTENTION_TILE;
    let first = if pass.walks_queries() { v.k_block } else { v.q_tile } * tile;
    let n = v.valid_rows(trace.t);
    let (heading, columns): (&str, &[&str]) = match pass {
        Pass::Forward => (
            "Online softmax, per query row:  m ← max(m, max S) · O ← O·e^(m_old − m) · l ← l·e^(m_old − m) + Σ e^(S − m)",
            &["row", "byte", "m before", "m after", "rescale", "l before", "l after"],
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
    let owner = |x: &Visit| if pass.walks_queries() { x.k_block } else { x.q_tile };
    let mut so_far = vec![0.0f32; tile];
    if pass != Pass::Forward {
        for x in visits[..=position.min(visits.len() - 1)].iter().filter(|x| owner(x) == owner(v)) {
            for (a, r) in so_far.iter_mut().zip(&x.rows) {
                *a += r[0];
            }
        }
    }
    egui::Frame::new().fill(PANEL).corner_radius(6.0).inner_margin(8.0).show(ui, |ui| {
        ui.set_min_size(ui.available_size());
        ui.label(egui::RichText::new(heading).size(14.0).color(TEXT));
        egui::ScrollArea::vertical().auto_shrink([false, false]).show(ui, |ui| {
            egui::Grid::new("flash-rows").striped(true).spacing(egui::vec2(18.0, 2.0)).show(ui, |ui| {
                for c in columns {
                    ui.label(egui::RichText::new(*c).size(13.0).color(WEAK));
                }
                ui.end_row();
                let num = |ui: &mut egui::Ui, x: f32, hot: bool| {
                    let s = if x <= -3.0e38 { "−∞".to_string() } else { format!("{x:.4}") };
                    ui.label(egui::RichText::new(s).size(14.0).monospace().color(if hot { NUMBERS } else { TEXT }));
                };
                for r in 0..n {
                    let pos = first + r;
                    let row = &v.rows[r];
                    ui.label(egui::RichText::new(format!("{pos}")).size(14.0).monospace());
                    ui.label(egui::RichText::new(byte_label(trace.tokens[pos])).size(14.0).monospace());
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
                            num(ui, so_far[r], pass == Pass::BackwardDq && (so_far[r] - 1.0).abs() < 1e-4);
                            ui.label(egui::RichText::new(format!("{:+.2e}", row[1])).size(14.0).monospace());
                        }
                    }
                    ui.end_row();
                }
            });
        });
    });
}

/// The side panel: why tiles, with this run's numbers, and the check.
fn why(ui: &mut egui::Ui, trace: &FlashTrace, cfg: &crate::model::config::Config, pass: Pass, done: bool) {
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
                "The traced kernels' O, lse and dQKV equal the untraced ones training ran, bit for bit.".to_string()
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
