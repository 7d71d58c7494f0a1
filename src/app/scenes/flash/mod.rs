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

mod numbers;
mod panels;
mod report;

use super::Scene;
use crate::app::lesson::{LessonAction, LessonFocus, ShownView};
use crate::app::training::{FlashTraces, Run};
use crate::app::ui::UiState;
use crate::flash::{FlashTrace, FlashWant, Pass, TraceSource, Visit};
use crate::lesson::{Action, Focus};
use crate::probe::ProbeSource;
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

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.add_systems(Update, publish_view.run_if(in_state(Scene::Flash)));
        let start = app
            .world()
            .get_resource::<super::SceneStart>()
            .cloned()
            .unwrap_or_default();
        app.insert_resource(FlashView::at(start.flash_pass, start.flash_visit))
            .init_resource::<FlashShown>()
            .add_observer(lesson_focus)
            .add_observer(lesson_action)
            .init_resource::<Pictures>()
            .add_systems(OnExit(Scene::Flash), leave)
            .add_systems(
                Update,
                drive
                    .in_set(crate::app::schedule::AppSystems::Scene)
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
    (mut drawn, focus): (ResMut<crate::app::canvas::parts::DrawnParts>, Res<crate::app::canvas::parts::PictureFocus>),
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
        pictures.textures = panels::make_pictures(&ctx, trace);
    }
    let visits: Vec<&Visit> = latest
        .as_ref()
        .map(|(_, t)| replay(t, view.pass))
        .unwrap_or_default();
    let count = visits.len();
    // ---- time and keys
    let dt = ctx.input(|i| i.stable_dt).min(0.1);
    // (While the keyboard's focus is in the picture the arrows are its.)
    if !ctx.egui_wants_keyboard_input() && !focus.active {
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
    if toolbar(&ctx, area, &mut view, &cfg, count) {
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
            (Some(e), _) => crate::t!("flash-cannot-trace", error = e.as_str()),
            _ => crate::t!(
                "flash-tracing",
                block = view.layer,
                head = view.head,
                backend = run.backend_label.split(' ').next().unwrap_or("?"),
            ),
        };
        ui.label(egui::RichText::new(text).size(18.0));
        *shown = FlashShown {
            pass: view.pass.key().into(),
            ..FlashShown::default()
        };
        drawn.0.clear();
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
        egui::pos2(
            body.max.x - side_w - if side_column { 14.0 } else { 0.0 },
            body.max.y,
        ),
    );

    // Title and provenance.
    let mut top_ui = ui.new_child(egui::UiBuilder::new().max_rect(main));
    numbers::title(
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
            let label = if view.show_why {
                crate::t!("flash-why-close")
            } else {
                crate::t!("flash-why-open")
            };
            if ui.button(egui::RichText::new(label).size(14.0)).clicked() {
                view.show_why = !view.show_why;
            }
            ui.label(
                egui::RichText::new(numbers::check_line(&trace, view.pass))
                    .size(13.0)
                    .color(NUMBERS),
            );
        });
    }
    let used = top_ui.min_rect().height() + 8.0;
    let work = egui::Rect::from_min_max(main.min + egui::vec2(0.0, used), main.max);
    let upper_h = (work.height() * 0.56).max(180.0);
    let upper = egui::Rect::from_min_max(work.min, egui::pos2(work.max.x, work.min.y + upper_h));
    let lower = egui::Rect::from_min_max(egui::pos2(work.min.x, upper.max.y + 10.0), work.max);
    let grid_w = (upper.width() * 0.26).min(upper.height());
    let memory =
        egui::Rect::from_min_size(upper.min, egui::vec2(upper.width() * 0.35, upper.height()));
    let grid_rect =
        egui::Rect::from_min_max(egui::pos2(upper.max.x - grid_w, upper.min.y), upper.max);
    let shared = egui::Rect::from_min_max(
        egui::pos2(memory.max.x + 12.0, upper.min.y),
        egui::pos2(grid_rect.min.x - 12.0, upper.max.y),
    );
    let rows_rect = lower;

    let painter = ui.painter().clone();
    let pointer = ctx.pointer_hover_pos();
    let mut hover: Option<String> = None;
    let slots = panels::draw_memory(
        &painter,
        memory,
        &trace,
        view.pass,
        current,
        &visits,
        view.position,
        done,
        &pictures.textures,
    );
    regions.push(("memory".to_string(), memory));
    panels::draw_shared(
        &painter,
        shared,
        &trace,
        view.pass,
        current,
        // Reduced motion: each visit drawn where it lands, no flight.
        if ui_state.reduced_motion {
            1.0
        } else {
            view.phase
        },
        &slots,
        &pictures.textures,
        pointer,
        &mut hover,
    );
    regions.push(("shared".to_string(), shared));
    let mut cells = Vec::new();
    panels::draw_grid(
        &painter,
        grid_rect,
        &trace,
        view.pass,
        current,
        &visits,
        view.position,
        pointer,
        &mut hover,
        &mut cells,
    );
    regions.push(("grid".to_string(), grid_rect));
    // The grid for the keyboard (issue 53): query tiles down, key blocks
    // across, each cell named as the pointer names it.
    let listed = vec![grid_part(&trace, grid_rect, cells, ctx.zoom_factor())];
    if drawn.0 != listed {
        drawn.0 = listed;
    }
    let mut rows_ui = ui.new_child(egui::UiBuilder::new().max_rect(rows_rect));
    rows_ui.set_clip_rect(rows_rect);
    numbers::rows_table(
        &mut rows_ui,
        &trace,
        view.pass,
        current,
        &visits,
        view.position,
    );
    regions.push(("rows".to_string(), rows_rect));
    if side_column {
        let side = egui::Rect::from_min_max(egui::pos2(body.max.x - side_w, body.min.y), body.max);
        let mut side_ui = ui.new_child(egui::UiBuilder::new().max_rect(side));
        numbers::why(&mut side_ui, &trace, &cfg, view.pass, done);
        regions.push(("why".to_string(), side_ui.min_rect()));
    } else if view.show_why {
        let mut open = true;
        let shown_window = egui::Window::new(crate::t!("flash-why"))
            .id(egui::Id::new("why-tiles-window"))
            .open(&mut open)
            .default_pos(body.center_top() + egui::vec2(-200.0, 40.0))
            .default_width(420.0)
            .collapsible(false)
            .show(&ctx, |ui| numbers::why(ui, &trace, &cfg, view.pass, done));
        if let Some(r) = shown_window {
            regions.push(("why".to_string(), r.response.rect));
        }
        view.show_why = open;
    }
    if let Some(h) = hover {
        egui::Tooltip::always_open(
            ctx.clone(),
            ui.layer_id(),
            egui::Id::new("flash-hover"),
            egui::PopupAnchor::Pointer,
        )
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

/// The scene's toolbar: source, block, head, pass, the replay's controls and
/// speed, and *trace again* (returned: whether it was pressed).
/// The grid of (query tile, key block) pairs as one part (window logical
/// pixels, `zoom`: egui's zoom factor), its cells row by row.
fn grid_part(
    trace: &FlashTrace,
    rect: egui::Rect,
    mut cells: Vec<((usize, usize), egui::Rect, String)>,
    zoom: f32,
) -> crate::app::canvas::parts::Part {
    let window = |r: egui::Rect| Rect::new(r.min.x * zoom, r.min.y * zoom, r.max.x * zoom, r.max.y * zoom);
    let nt = trace.tiles;
    cells.sort_by_key(|(at, ..)| *at);
    cells.dedup_by_key(|(at, ..)| *at);
    let whole = cells.len() == nt * nt && cells.iter().enumerate().all(|(i, (at, ..))| *at == (i / nt, i % nt));
    let cells = if whole {
        cells.into_iter().map(|(_, r, words)| (window(r), words)).collect()
    } else {
        vec![]
    };
    crate::app::canvas::parts::Part::drawn(
        crate::t!("flash-grid-title"),
        Some("grid".into()),
        window(rect),
        nt,
        nt,
        cells,
    )
}

fn toolbar(
    ctx: &egui::Context,
    area: egui::Rect,
    view: &mut FlashView,
    cfg: &crate::model::config::Config,
    count: usize,
) -> bool {
    let mut retrace = false;
    crate::app::ui::scene_toolbar(ctx, "flash-toolbar", area, |ui| {
        ui.selectable_value(
            &mut view.source,
            SourceKind::BatchRow,
            crate::t!("flash-batch-row"),
        )
        .on_hover_text(crate::t!("flash-batch-row-hover"));
        ui.selectable_value(
            &mut view.source,
            SourceKind::Prompt,
            crate::t!("attention-source-prompt"),
        )
        .on_hover_text(crate::t!("flash-prompt-hover"));
        if view.source == SourceKind::Prompt {
            crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 160.0, crate::t!("flash-prompt-hint"));
        }
        ui.separator();
        let mut layer = view.layer;
        let combo = egui::ComboBox::from_id_salt("flash-layer")
            .selected_text(crate::t!("block-n", block = layer))
            .width(80.0)
            .show_ui(ui, |ui| {
                for l in 0..cfg.n_layer {
                    ui.selectable_value(&mut layer, l, crate::t!("block-n", block = l));
                }
            });
        crate::app::canvas::parts::named(combo.response, egui::WidgetType::ComboBox, crate::t!("access-block"));
        view.layer = layer;
        let mut head = view.head;
        let combo = egui::ComboBox::from_id_salt("flash-head")
            .selected_text(crate::t!("head-n", head = head))
            .width(70.0)
            .show_ui(ui, |ui| {
                for h in 0..cfg.n_head {
                    ui.selectable_value(&mut head, h, crate::t!("head-n", head = h));
                }
            });
        crate::app::canvas::parts::named(combo.response, egui::WidgetType::ComboBox, crate::t!("access-head"));
        view.head = head;
        ui.separator();
        for (pass, label) in [
            (Pass::Forward, crate::t!("flash-forward")),
            (Pass::BackwardDkdv, crate::t!("flash-backward-dkdv")),
            (Pass::BackwardDq, crate::t!("flash-backward-dq")),
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
        if crate::app::canvas::parts::named(ui.button("⏮"), egui::WidgetType::Button, crate::t!("flash-first-visit"))
            .on_hover_text(crate::t!("flash-first-visit"))
            .clicked()
        {
            view.position = 0;
            view.phase = 0.0;
        }
        if crate::app::canvas::parts::named(ui.button("◀"), egui::WidgetType::Button, crate::t!("flash-prev-visit"))
            .on_hover_text(crate::t!("flash-prev-visit"))
            .clicked()
        {
            step(view, count, -1);
        }
        let play = if view.playing { "⏸" } else { "▶" };
        if crate::app::canvas::parts::named(ui.button(play), egui::WidgetType::Button, crate::t!("flash-play-pause"))
            .on_hover_text(crate::t!("flash-play-pause"))
            .clicked()
        {
            if !view.playing && view.position + 1 >= count && view.phase >= 1.0 {
                view.position = 0;
                view.phase = 0.0;
            }
            view.playing = !view.playing;
        }
        if crate::app::canvas::parts::named(ui.button("▶|"), egui::WidgetType::Button, crate::t!("flash-next-visit"))
            .on_hover_text(crate::t!("flash-next-visit"))
            .clicked()
        {
            step(view, count, 1);
        }
        if crate::app::canvas::parts::named(ui.button("⏭"), egui::WidgetType::Button, crate::t!("flash-end-pass"))
            .on_hover_text(crate::t!("flash-end-pass"))
            .clicked()
        {
            view.position = count.saturating_sub(1);
            view.phase = 1.0;
            view.playing = false;
        }
        ui.add(
            egui::Slider::new(&mut view.speed, 0.25..=30.0)
                .logarithmic(true)
                .text(crate::t!("flash-speed")),
        );
        if crate::app::canvas::parts::named(ui.button(crate::t!("flash-trace-again")), egui::WidgetType::Button, crate::t!("flash-trace-again-hover"))
            .on_hover_text(crate::t!("flash-trace-again-hover"))
            .clicked()
        {
            retrace = true;
        }
    });
    retrace
}

fn step(view: &mut FlashView, count: usize, by: i64) {
    view.playing = false;
    view.phase = 1.0;
    view.position = (view.position as i64 + by).clamp(0, count.saturating_sub(1) as i64) as usize;
}

/// A lesson step's head becomes the one the replay tiles.
fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<FlashView>) {
    if event.scene == Scene::Flash
        && let Focus::Head { layer, head } = event.focus
    {
        view.layer = layer;
        view.head = head;
    }
}

/// A lesson step's prompt, or its "play the replay from the start".
fn lesson_action(event: On<LessonAction>, mut view: ResMut<FlashView>) {
    match &event.0 {
        Action::Prompt(text) => view.prompt = text.clone(),
        Action::PlayFlash => {
            view.position = 0;
            view.phase = 0.0;
            view.playing = true;
        }
        _ => {}
    }
}

/// What the scene shows, for a class's "send my view": the prompt and the head replayed.
fn publish_view(view: Res<FlashView>, mut shown: ResMut<ShownView>) {
    ShownView::publish(&mut shown, Scene::Flash, Some(view.prompt.as_str()), Some((view.layer, view.head)), None);
}
