//! The "Step" scene: one real training step, entry by entry. The program's
//! step list is a U-shaped timeline: the forward ops left to right, the
//! gradients zeroed at the turn, each op's backward right to left under its
//! forward, then the gradient clip and AdamW. The current entry runs on the
//! run's backend when you step to it ([`crate::stepthrough`], through the
//! engine, never blocking a frame) and shows its inputs and outputs (or its
//! upstream gradient and what it adds to the gradients below it, or the
//! clip's norm and factor, or AdamW's w, g, m, v and Δw) as heatmaps with
//! their shapes, statistics and the op's maths. Stepping back shows the
//! views kept from the first pass. The run is paused while the scene is open
//! and leaving it undoes the step, unless "Keep this step" made it the run's.

mod report;

use super::Scene;
use crate::app::engine::Stepping;
use crate::app::heatmap;
use crate::app::lesson::{LessonAction, LessonFocus, ShownView};
use crate::app::training::{AppStatus, Run, RunState};
use crate::app::ui::UiState;
use crate::lesson::{Action, Focus};
use crate::probe::byte_label;
use crate::stepthrough::{Entry, EntryView, Phase, Role, Stats, TensorView};
use crate::train::StepSource;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use std::collections::HashMap;

/// What the scene shows; the toolbar and the keys edit it.
#[derive(Resource, Debug, Clone)]
pub struct StepView {
    pub source: SourceKind,
    pub prompt: String,
    /// The entry shown (index into the program's steps).
    pub position: usize,
    /// The step-through this view asked for: (run generation, source).
    begun: Option<(u64, StepSource)>,
    /// The parameter the clip and AdamW views show, by name.
    pub focus: Option<String>,
}

impl StepView {
    /// Opens at entry `position` (the command line's `--step-op`).
    pub fn at(position: usize) -> Self {
        Self {
            position,
            ..Self::default()
        }
    }
}

impl Default for StepView {
    fn default() -> Self {
        Self {
            source: SourceKind::NextBatch,
            prompt: "To be, or not to be, that is the question:".into(),
            position: 0,
            begun: None,
            focus: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    NextBatch,
    Prompt,
}

/// What the picture shows now (headless runs print it).
#[derive(Resource, Debug, Clone, Default)]
pub struct StepShown {
    pub index: Option<usize>,
    /// The shown entry's number and how many the timeline lists, as its
    /// header says them.
    pub number: usize,
    pub entries: usize,
    pub op: String,
    pub phase: String,
    /// Whether the entry's computed values are on screen (not "running…").
    pub computed: bool,
    pub tensors: Vec<String>,
    /// The kernels the entry runs on the run's backend (none on the CPU).
    pub kernels: Vec<String>,
    /// Picture rectangles (pixels) of the timeline and each heatmap.
    pub regions: Vec<(String, egui::Rect)>,
}

/// Heatmap pictures, made once per (step-through, entry, tensor).
#[derive(Resource, Default)]
struct Pictures {
    generation: u64,
    textures: HashMap<(usize, usize), egui::TextureHandle>,
}

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.add_systems(Update, publish_view.run_if(in_state(Scene::Step)));
        let start = app
            .world()
            .get_resource::<super::SceneStart>()
            .cloned()
            .unwrap_or_default();
        app.insert_resource(StepView::at(start.step_op))
            .init_resource::<StepShown>()
            .add_observer(lesson_focus)
            .add_observer(lesson_action)
            .init_resource::<Pictures>()
            .add_systems(OnEnter(Scene::Step), enter)
            .add_systems(OnExit(Scene::Step), leave)
            .add_systems(
                Update,
                drive
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Step)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                draw.after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Step)),
            );
    }
}

/// Entering pauses the run: its weights must hold still while you step.
fn enter(run: Option<ResMut<Run>>, mut status: ResMut<AppStatus>) {
    if let Some(mut run) = run
        && run.state == RunState::Training
    {
        run.state = RunState::Paused;
        status.info = Some(crate::t!("step-paused-info"));
    }
}

/// Leaving undoes the step (unless it was kept) and forgets the pictures.
fn leave(
    run: Option<ResMut<Run>>,
    mut view: ResMut<StepView>,
    mut pictures: ResMut<Pictures>,
    mut shown: ResMut<StepShown>,
) {
    if let Some(mut run) = run {
        run.engine.end_stepping();
    }
    view.begun = None;
    pictures.textures.clear();
    *shown = StepShown::default();
}

/// Asks the engine for the step-through of the chosen source, and for the
/// entries up to the one shown.
fn drive(run: Option<ResMut<Run>>, mut view: ResMut<StepView>) {
    let Some(mut run) = run else { return };
    if run.state == RunState::Training {
        run.state = RunState::Paused;
    }
    let source = match view.source {
        SourceKind::NextBatch => StepSource::NextBatch,
        SourceKind::Prompt => StepSource::Prompt(view.prompt.clone().into_bytes()),
    };
    let key = (run.generation, source.clone());
    if view.begun.as_ref() != Some(&key) {
        if view.source == SourceKind::Prompt && view.prompt.is_empty() {
            return;
        }
        run.engine.begin_stepping(source);
        view.begun = Some(key);
    }
    let program = run.program.clone();
    let entries = program.steps.len();
    view.position = view.position.min(entries - 1);
    if let Some(name) = &view.focus
        && let Some(id) = program.tensor_id(name)
    {
        let current = run.engine.stepping().map(|s| s.cursor.focus);
        if current.is_some_and(|c| c != id) && !run.engine.set_step_focus(id) {
            view.focus = None;
        }
    }
    run.engine.step_to(view.position + 1);
}

/// Where the keys and buttons move the position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Start,
    PrevLayer,
    Prev,
    Next,
    NextLayer,
    EndOfPass,
    EndOfStep,
}

impl Move {
    fn target(self, entries: &[Entry], at: usize) -> usize {
        let last = entries.len() - 1;
        let here = &entries[at];
        match self {
            Move::Start => 0,
            Move::Prev => at.saturating_sub(1),
            Move::Next => (at + 1).min(last),
            Move::NextLayer => (at + 1..entries.len())
                .find(|&i| entries[i].layer != here.layer || entries[i].phase != here.phase)
                .unwrap_or(last),
            Move::PrevLayer => {
                // The first entry of this group, or of the one before it.
                let first_of = |i: usize| {
                    let e = &entries[i];
                    (0..=i)
                        .rev()
                        .take_while(|&j| entries[j].layer == e.layer && entries[j].phase == e.phase)
                        .last()
                        .unwrap_or(i)
                };
                let start = first_of(at);
                if start < at {
                    start
                } else {
                    first_of(at.saturating_sub(1))
                }
            }
            Move::EndOfPass => (at..entries.len())
                .take_while(|&i| entries[i].phase == here.phase)
                .last()
                .map(|i| if i == at { (at + 1).min(last) } else { i })
                .unwrap_or(last),
            Move::EndOfStep => last,
        }
    }

    /// The buttons: the move, its label (a catalogue key where it has
    /// words), its tooltip's catalogue key.
    const BUTTONS: [(Move, &'static str, &'static str); 7] = [
        (Move::Start, "⏮", "step-to-start"),
        (Move::PrevLayer, "◀◀", "step-prev-layer"),
        (Move::Prev, "◀", "step-prev"),
        (Move::Next, "▶", "step-next"),
        (Move::NextLayer, "▶▶", "step-next-layer"),
        (Move::EndOfPass, "step-end-pass-button", "step-end-pass"),
        (Move::EndOfStep, "step-end-step-button", "step-end-step"),
    ];

    fn from_keys(ctx: &egui::Context) -> Option<Move> {
        if ctx.egui_wants_keyboard_input() {
            return None;
        }
        ctx.input(|i| {
            let shift = i.modifiers.shift;
            [
                (egui::Key::Home, Move::Start),
                (egui::Key::PageUp, Move::PrevLayer),
                (egui::Key::ArrowLeft, Move::Prev),
                (egui::Key::ArrowRight, Move::Next),
                (egui::Key::PageDown, Move::NextLayer),
                (
                    egui::Key::End,
                    if shift {
                        Move::EndOfStep
                    } else {
                        Move::EndOfPass
                    },
                ),
            ]
            .into_iter()
            .find(|(k, _)| i.key_pressed(*k))
            .map(|(_, m)| m)
        })
    }
}

/// Phase colours of the timeline (and the title's chip).
fn phase_colour(phase: Phase) -> egui::Color32 {
    match phase {
        Phase::Forward => egui::Color32::from_rgb(86, 156, 230),
        Phase::Backward => egui::Color32::from_rgb(236, 140, 64),
        Phase::Clip => egui::Color32::from_rgb(186, 120, 230),
        Phase::Optimizer => egui::Color32::from_rgb(96, 200, 120),
    }
}

#[allow(clippy::too_many_arguments)]
fn draw(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<ResMut<Run>>,
    mut view: ResMut<StepView>,
    mut pictures: ResMut<Pictures>,
    mut shown: ResMut<StepShown>,
) -> Result {
    let ctx = contexts.ctx_mut()?.clone();
    let (Some(area), Some(mut run)) = (ui_state.central_rect(&ctx), run) else {
        return Ok(());
    };
    let program = run.program.clone();
    let entries = crate::stepthrough::entries(&program);
    if pictures.generation != run.engine.stepping_generation {
        pictures.generation = run.engine.stepping_generation;
        pictures.textures.clear();
    }
    // ---- keys
    if let Some(m) = Move::from_keys(&ctx) {
        view.position = m.target(&entries, view.position.min(entries.len() - 1));
    }
    let stepping = run.engine.stepping();
    let done = stepping.map_or(0, |s| s.cursor.views.len());
    let can_keep = stepping.is_some_and(|s| s.cursor.source == StepSource::NextBatch);
    let focus_now = stepping.map(|s| program.tensors[s.cursor.focus].name.clone());
    let mut keep = false;

    // ---- toolbar
    crate::app::ui::scene_toolbar(&ctx, "step-toolbar", area, |ui| {
        ui.selectable_value(
            &mut view.source,
            SourceKind::NextBatch,
            crate::t!("step-next-batch"),
        )
        .on_hover_text(crate::t!("step-next-batch-hover"));
        ui.selectable_value(
            &mut view.source,
            SourceKind::Prompt,
            crate::t!("attention-source-prompt"),
        )
        .on_hover_text(crate::t!("step-prompt-hover"));
        if view.source == SourceKind::Prompt {
            crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 180.0, crate::t!("step-prompt-hint"));
        }
        ui.separator();
        for (m, label, tip) in Move::BUTTONS {
            // The arrows are no message's key: they are drawn as they are.
            if crate::app::canvas::parts::named(ui.button(crate::i18n::tr(label, &[])), egui::WidgetType::Button, crate::i18n::tr(tip, &[]))
                .on_hover_text(crate::i18n::tr(tip, &[]))
                .clicked()
            {
                view.position = m.target(&entries, view.position.min(entries.len() - 1));
            }
        }
        ui.separator();
        // A combo box lays itself out in a row of its own making, which the
        // toolbar's wrapping does not move down: it starts the next row
        // itself when short of room (at 1280×720 it ran under the right
        // panel).
        // (In a wrapping row, egui's available width is the whole row's.)
        if ui.max_rect().max.x - ui.cursor().min.x < 260.0 {
            ui.end_row();
        }
        ui.label(crate::t!("step-clip-adamw"));
        let current = view.focus.clone().or(focus_now.clone()).unwrap_or_default();
        let combo = egui::ComboBox::from_id_salt("step-focus")
            .selected_text(current.trim_start_matches("transformer."))
            .width(160.0)
            .show_ui(ui, |ui| {
                for id in program.trained() {
                    let name = &program.tensors[id].name;
                    if ui
                        .selectable_label(*name == current, name.trim_start_matches("transformer."))
                        .clicked()
                    {
                        view.focus = Some(name.clone());
                    }
                }
            });
        crate::app::canvas::parts::named(combo.response, egui::WidgetType::ComboBox, crate::t!("step-clip-adamw"));
    });
    // ---- the main view, under the toolbar
    let stepping = run.engine.stepping();
    // Below the toolbar: one row, or two where it wraps.
    let top = egui::pos2(area.min.x, crate::app::ui::toolbar_bottom(&ctx, "step-toolbar", area));
    let body = egui::Rect::from_min_max(top, area.max);
    let mut regions = Vec::new();
    let position = view.position.min(entries.len() - 1);
    // The kernels the entry runs on the run's backend (none on the CPU).
    let kernels: &[&str] = run.entry_kernels.get(entries[position].index).map_or(&[], Vec::as_slice);
    let jump;
    let mut ui = egui::Ui::new(
        ctx.clone(),
        "step-body".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::new(
                egui::Order::Background,
                egui::Id::new("step-body-layer"),
            ))
            .max_rect(body.shrink2(egui::vec2(14.0, 4.0))),
    );
    ui.set_clip_rect(body);
    {
        let ui = &mut ui;
        ui.horizontal_wrapped(|ui| {
            provenance(ui, &run, stepping, &view);
            if can_keep && done == entries.len() {
                keep = ui
                    .button(egui::RichText::new(crate::t!("step-keep")).size(15.0))
                    .on_hover_text(crate::t!("step-keep-hover"))
                    .clicked();
            }
        });
        let (timeline_rect, clicked) = timeline(ui, &program, &entries, position, done);
        regions.push(("timeline".to_string(), timeline_rect));
        jump = clicked;
        ui.add_space(6.0);
        let entry = &entries[position];
        let shown_view = stepping.and_then(|s| s.cursor.views.get(position));
        egui::ScrollArea::vertical()
            .auto_shrink([false, false])
            .show(ui, |ui| {
                entry_header(ui, entry, entries.len());
                kernels_line(ui, kernels);
                // A mixed-precision run's gradients are the loss-scaled
                // ones until the clip divides the scale out.
                if run.precision == crate::backends::Precision::Mixed && entry.phase == Phase::Backward {
                    ui.label(
                        egui::RichText::new(crate::t!(
                            "step-scaled-gradients",
                            scale = crate::gpu::LOSS_SCALE_INIT as u64,
                            clean = crate::gpu::LOSS_SCALE_GROWTH_INTERVAL as u64,
                        ))
                        .size(15.0)
                        .color(TENSOR_CORES),
                    );
                }
                match shown_view {
                    Some(v) => entry_body(ui, v, &mut pictures.textures, &mut regions),
                    None => {
                        ui.add_space(12.0);
                        let why = run
                            .engine
                            .stepping_error
                            .clone()
                            .map(|e| crate::t!("step-cannot", error = e))
                            .unwrap_or_else(|| {
                                crate::t!(
                                    "step-running",
                                    from = done,
                                    to = position,
                                    backend = backend_word(&run),
                                )
                            });
                        ui.label(egui::RichText::new(why).size(16.0));
                    }
                }
            });
    }
    if let Some(i) = jump {
        view.position = i;
    }

    let entry = &entries[position];
    *shown = StepShown {
        kernels: kernels.iter().map(|k| k.to_string()).collect(),
        index: Some(position),
        number: entry.index,
        entries: entries.len(),
        op: entry.label.clone(),
        phase: entry.phase.key().into(),
        computed: stepping.is_some_and(|s| s.cursor.views.len() > position),
        tensors: stepping
            .and_then(|s| s.cursor.views.get(position))
            .map(|v| v.tensors.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default(),
        regions: regions
            .into_iter()
            .map(|(n, r)| (n, r * ctx.pixels_per_point()))
            .collect(),
    };
    if keep {
        run.engine.keep_stepped();
        view.begun = None;
        view.position = 0;
    }
    Ok(())
}

fn backend_word(run: &Run) -> &str {
    run.backend_label.split(' ').next().unwrap_or("?")
}

/// One line on what the numbers are computed from.
fn provenance(ui: &mut egui::Ui, run: &Run, stepping: Option<&Stepping>, view: &StepView) {
    let text = match stepping {
        Some(s) => crate::t!(
            "step-provenance",
            backend = backend_word(run),
            step = s.cursor.run_step,
            batch = match view.source {
                SourceKind::NextBatch => crate::t!("step-batch-next"),
                SourceKind::Prompt => crate::t!("step-batch-prompt"),
            },
            rows = run.config().batch,
            unless = if s.cursor.source == StepSource::NextBatch {
                crate::t!("step-unless-kept")
            } else {
                String::new()
            },
        ),
        None => crate::t!("step-preparing"),
    };
    ui.label(egui::RichText::new(text).size(14.0).weak());
}

/// The U-shaped timeline; returns its rectangle and the entry clicked.
fn timeline(
    ui: &mut egui::Ui,
    program: &crate::program::Program,
    entries: &[Entry],
    position: usize,
    done: usize,
) -> (egui::Rect, Option<usize>) {
    let n_ops = program.ops.len();
    // Columns: [adamw][clip] then the ops, then the turn (zero_grad).
    let columns = n_ops + 3;
    let width = ui.available_width();
    let lane = 26.0;
    let header = 20.0;
    let height = header + 2.0 * lane + 10.0 + 18.0;
    let (rect, response) = ui.allocate_exact_size(egui::vec2(width, height), egui::Sense::click());
    let painter = ui.painter_at(rect);
    let col_w = width / columns as f32;
    let cell = |col: usize, row: usize, span_rows: usize| {
        egui::Rect::from_min_size(
            rect.min + egui::vec2(col as f32 * col_w, header + row as f32 * (lane + 4.0)),
            egui::vec2(
                col_w,
                lane * span_rows as f32 + 4.0 * (span_rows as f32 - 1.0),
            ),
        )
        .shrink2(egui::vec2((col_w * 0.08).min(2.0), 0.0))
    };
    let place = |e: &Entry| -> egui::Rect {
        match e.step {
            crate::program::Step::Forward(i) => cell(i + 2, 0, 1),
            crate::program::Step::Backward(i) => cell(i + 2, 1, 1),
            crate::program::Step::ZeroGrads => cell(n_ops + 2, 0, 2),
            crate::program::Step::ClipGradNorm => cell(1, 1, 1),
            crate::program::Step::AdamW => cell(0, 1, 1),
            crate::program::Step::AttentionProbs(_) => egui::Rect::NOTHING,
        }
    };
    // Layer brackets over the forward lane.
    let text = egui::Color32::from_rgb(215, 220, 228);
    let mut i = 0;
    while i < n_ops {
        let layer = program.ops[i].layer;
        let j = (i..n_ops)
            .take_while(|&k| program.ops[k].layer == layer)
            .count()
            + i;
        let (a, b) = (cell(i + 2, 0, 1), cell(j + 1, 0, 1));
        let y = rect.min.y + header - 4.0;
        painter.line_segment(
            [egui::pos2(a.min.x + 1.0, y), egui::pos2(b.max.x - 1.0, y)],
            egui::Stroke::new(1.5, egui::Color32::from_gray(120)),
        );
        let name = &program.layers[layer].name;
        let galley = painter.layout_no_wrap(name.clone(), egui::FontId::proportional(13.0), text);
        if galley.size().x < b.max.x - a.min.x {
            painter.galley(
                egui::pos2((a.min.x + b.max.x - galley.size().x) * 0.5, rect.min.y),
                galley,
                text,
            );
        }
        i = j;
    }
    let mut hovered = None;
    for e in entries {
        let r = place(e);
        let colour = phase_colour(e.phase);
        let ran = e.index < done;
        let fill = if ran {
            colour
        } else {
            colour.gamma_multiply(0.3)
        };
        painter.rect_filled(r, 3.0, fill);
        if e.index == position {
            painter.rect_stroke(
                r.expand(2.0),
                4.0,
                egui::Stroke::new(2.5, egui::Color32::WHITE),
                egui::StrokeKind::Outside,
            );
        }
        if let Some(p) = response.hover_pos()
            && r.contains(p)
        {
            hovered = Some(e.index);
        }
    }
    // The legend, under the lanes.
    let mut x = rect.min.x;
    for (phase, what) in [
        (Phase::Forward, crate::t!("step-legend-forward")),
        (Phase::Backward, crate::t!("step-legend-backward")),
        (Phase::Clip, crate::t!("step-legend-clip")),
        (Phase::Optimizer, "AdamW".to_string()),
    ] {
        let y = rect.max.y - 9.0;
        painter.rect_filled(
            egui::Rect::from_center_size(egui::pos2(x + 6.0, y), egui::vec2(11.0, 11.0)),
            2.0,
            phase_colour(phase),
        );
        let g = painter.layout_no_wrap(what, egui::FontId::proportional(13.0), text);
        let w = g.size().x;
        painter.galley(egui::pos2(x + 16.0, y - g.size().y * 0.5), g, text);
        x += 16.0 + w + 18.0;
    }
    let mut clicked = None;
    if let Some(i) = hovered {
        let e = &entries[i];
        response.clone().on_hover_text(format!(
            "{} ({}){}",
            e.label,
            e.phase.key(),
            if i < done {
                String::new()
            } else {
                crate::t!("step-not-run")
            }
        ));
        if response.clicked() {
            clicked = Some(i);
        }
    }
    (rect, clicked)
}

fn entry_header(ui: &mut egui::Ui, entry: &Entry, total: usize) {
    ui.horizontal_wrapped(|ui| {
        let colour = phase_colour(entry.phase);
        egui::Frame::new()
            .fill(colour)
            .corner_radius(4.0)
            .inner_margin(egui::Margin::symmetric(8, 2))
            .show(ui, |ui| {
                ui.label(
                    egui::RichText::new(crate::i18n::tr(
                        &format!("step-phase-{}", entry.phase.key()),
                        &[],
                    ))
                    .color(egui::Color32::BLACK)
                    .size(16.0),
                );
            });
        ui.label(egui::RichText::new(&entry.label).size(22.0).strong());
        ui.label(
            egui::RichText::new(crate::t!(
                "step-entry-of",
                kind = entry.kind.to_string(),
                entry = entry.index,
                total = total,
                layer = entry.layer_name.to_string(),
            ))
            .size(15.0)
            .weak(),
        );
    });
    ui.label(
        egui::RichText::new(&entry.math)
            .size(18.0)
            .monospace()
            .color(egui::Color32::from_rgb(250, 226, 150)),
    );
}

/// What ran on the tensor cores, and what it says: the focus ring's amber.
const TENSOR_CORES: egui::Color32 = crate::app::access::picture::RING;

/// The kernels the entry ran on the GPU, in order; one that ran on the
/// tensor cores (a mixed-precision run's large products) in amber, with
/// its arithmetic: f16 operands, f32 sums. Nothing on the CPU.
fn kernels_line(ui: &mut egui::Ui, kernels: &[&str]) {
    if kernels.is_empty() {
        return;
    }
    ui.horizontal_wrapped(|ui| {
        ui.label(egui::RichText::new(crate::t!("step-kernels")).size(15.0).weak());
        for (i, kernel) in kernels.iter().enumerate() {
            let sep = if i + 1 < kernels.len() { " ·" } else { "" };
            if crate::gpu::coop::on_tensor_cores(kernel) {
                ui.label(egui::RichText::new(*kernel).size(15.0).color(TENSOR_CORES));
                let f16 = crate::t!("step-kernels-f16");
                ui.label(egui::RichText::new(format!("({f16}){sep}")).size(15.0).color(TENSOR_CORES));
            } else {
                ui.label(egui::RichText::new(format!("{kernel}{sep}")).size(15.0).weak());
            }
        }
    });
}

fn fmt(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1e4 || x.abs() < 1e-3 {
        format!("{x:.3e}")
    } else {
        format!("{x:.4}")
    }
}

fn stats_line(s: &Stats) -> String {
    crate::t!(
        "step-stats",
        mean = fmt(s.mean),
        std = fmt(s.std),
        min = fmt(s.min),
        max = fmt(s.max),
        norm = fmt(s.l2),
    )
}

fn entry_body(
    ui: &mut egui::Ui,
    view: &EntryView,
    textures: &mut HashMap<(usize, usize), egui::TextureHandle>,
    regions: &mut Vec<(String, egui::Rect)>,
) {
    if !view.scalars.is_empty() {
        ui.add_space(4.0);
        // One wrapping line: a chip per number would widen the view.
        let chips: Vec<String> = view
            .scalars
            .iter()
            .map(|(k, v)| format!("{k}={}", fmt(*v)))
            .collect();
        ui.label(
            egui::RichText::new(chips.join("    "))
                .size(17.0)
                .strong()
                .color(egui::Color32::from_rgb(170, 220, 255)),
        );
        if view.entry.step == crate::program::Step::AdamW {
            ui.label(
                egui::RichText::new(crate::t!("step-adam-note"))
                    .size(14.0)
                    .weak(),
            );
        }
    }
    ui.add_space(6.0);
    let n = view.tensors.len().max(1);
    let avail = ui.available_width();
    let gap = 12.0;
    let per_row = (if avail > 1300.0 { 4 } else { 3 }).min(n);
    let card_w = (avail - gap * (per_row as f32 - 1.0)) / per_row as f32 - 1.0;
    let cards: Vec<(usize, &TensorView)> = view.tensors.iter().enumerate().collect();
    for row in cards.chunks(per_row) {
        ui.horizontal_top(|ui| {
            ui.spacing_mut().item_spacing = egui::vec2(gap, gap);
            for &(k, t) in row {
                let texture = textures
                    .entry((view.entry.index, k))
                    .or_insert_with(|| picture(ui.ctx(), view.entry.index, k, t));
                let rect = tensor_card(ui, t, texture, card_w);
                regions.push((format!("tensor:{}:{}", t.role.label(), t.name), rect));
            }
        });
        ui.add_space(gap);
    }
}

/// A heatmap texture of a tensor's preview: area-pooled to at most 256 a
/// side, symmetric colours to the 99th percentile of |x|.
fn picture(ctx: &egui::Context, entry: usize, k: usize, t: &TensorView) -> egui::TextureHandle {
    let p = &t.preview;
    let (tr, tc) = heatmap::texture_size(p.rows, p.cols);
    let pooled = heatmap::pool(&p.values, p.rows, p.cols, tr, tc);
    let half = heatmap::abs_percentile(&p.values, 0.99);
    let rgba = heatmap::colorize(&pooled, half);
    let image = egui::ColorImage::from_rgba_unmultiplied([tc, tr], &rgba);
    ctx.load_texture(
        format!("step-{entry}-{k}"),
        image,
        egui::TextureOptions::NEAREST,
    )
}

/// One tensor: role and name, shape, the heatmap (row bytes at its left
/// when they fit), the statistics. Returns the heatmap's rectangle.
fn tensor_card(
    ui: &mut egui::Ui,
    t: &TensorView,
    texture: &egui::TextureHandle,
    width: f32,
) -> egui::Rect {
    let mut image_rect = egui::Rect::NOTHING;
    let layout = egui::Layout::top_down(egui::Align::Min);
    ui.allocate_ui_with_layout(egui::vec2(width, 0.0), layout, |ui| {
        egui::Frame::new()
            .fill(egui::Color32::from_rgb(22, 25, 33))
            .corner_radius(6.0)
            .inner_margin(egui::Margin::same(8))
            .show(ui, |ui| {
                ui.set_width(width - 16.0);
                let role_colour = match t.role {
                    Role::Upstream | Role::Grad | Role::Clipped => {
                        egui::Color32::from_rgb(236, 160, 90)
                    }
                    Role::Update => egui::Color32::from_rgb(120, 220, 140),
                    _ => egui::Color32::from_rgb(140, 190, 240),
                };
                ui.horizontal_wrapped(|ui| {
                    ui.label(
                        egui::RichText::new(role_label(t.role))
                            .color(role_colour)
                            .size(14.0),
                    );
                    ui.label(
                        egui::RichText::new(t.name.replace("transformer.", ""))
                            .size(15.0)
                            .strong(),
                    )
                    .on_hover_text(&t.name);
                });
                ui.label(
                    egui::RichText::new(crate::t!(
                        "step-shape",
                        shape = t
                            .shape
                            .iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        caption = t.preview.caption.as_str(),
                    ))
                    .size(13.0)
                    .weak(),
                );
                let p = &t.preview;
                let labelled = p.row_bytes.is_some();
                let label_w = if labelled { 24.0 } else { 0.0 };
                let img_w = (ui.available_width() - label_w).max(40.0);
                let aspect = p.rows as f32 / p.cols.max(1) as f32;
                // Rows with bytes get room for their labels where that fits.
                let label_h = if p.row_bytes.is_some() {
                    (p.rows as f32 * 11.0).min(340.0)
                } else {
                    0.0
                };
                let img_h = (img_w * aspect).max(label_h).clamp(14.0, 340.0);
                let (rect, _) = ui
                    .allocate_exact_size(egui::vec2(img_w + label_w, img_h), egui::Sense::hover());
                image_rect = egui::Rect::from_min_size(
                    rect.min + egui::vec2(label_w, 0.0),
                    egui::vec2(img_w, img_h),
                );
                ui.painter().image(
                    texture.id(),
                    image_rect,
                    egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
                    egui::Color32::WHITE,
                );
                if let Some(bytes) = p.row_bytes.as_ref().filter(|_| labelled) {
                    // Every k-th row's byte, k so that labels are ≥ 10 px apart.
                    let row_h = img_h / p.rows as f32;
                    let every = (10.0 / row_h).ceil().max(1.0) as usize;
                    for (r, &b) in bytes.iter().enumerate().step_by(every) {
                        ui.painter().text(
                            egui::pos2(
                                rect.min.x + label_w - 3.0,
                                rect.min.y + (r as f32 + 0.5) * row_h,
                            ),
                            egui::Align2::RIGHT_CENTER,
                            byte_label(b),
                            egui::FontId::monospace((row_h * every as f32).min(12.0)),
                            egui::Color32::from_gray(200),
                        );
                    }
                }
                ui.label(
                    egui::RichText::new(stats_line(&t.stats))
                        .size(13.0)
                        .monospace(),
                );
                if let Some(a) = &t.added {
                    ui.label(
                        egui::RichText::new(crate::t!(
                            "step-op-added",
                            norm = fmt(a.l2),
                            mean = fmt(a.mean),
                        ))
                        .size(13.0)
                        .monospace()
                        .color(egui::Color32::from_rgb(236, 160, 90)),
                    );
                }
            });
    });
    image_rect
}

/// A lesson step's op or stage of the training step (found in this run's
/// program), or a tensor to point at.
fn lesson_focus(
    event: On<LessonFocus>,
    mut view: ResMut<StepView>,
    run: Option<Res<Run>>,
    mut status: ResMut<AppStatus>,
) {
    if event.scene != Scene::Step {
        return;
    }
    let label = match &event.focus {
        Focus::Tensor(name) => {
            view.focus = Some(name.clone());
            return;
        }
        Focus::Op { label, .. } | Focus::Stage(label) => label,
        _ => return,
    };
    let Some(run) = &run else { return };
    let program = &run.program;
    let found = program.steps.iter().position(|s| match (s, &event.focus) {
        (crate::program::Step::Forward(i), Focus::Op { label, backward }) => {
            !backward && &program.ops[*i].label == label
        }
        (crate::program::Step::Backward(i), Focus::Op { label, backward }) => {
            *backward && &program.ops[*i].label == label
        }
        (stage, Focus::Stage(name)) => program.family(*stage) == *name,
        _ => false,
    });
    match found {
        Some(i) => view.position = i,
        None => status.error(crate::t!(
            "step-lesson-op-missing",
            label = label.as_str(),
            preset = event.preset.as_str(),
        )),
    }
}

/// A lesson step's prompt becomes this scene's.
fn lesson_action(event: On<LessonAction>, mut view: ResMut<StepView>) {
    if let Action::Prompt(text) = &event.0 {
        view.prompt = text.clone();
    }
}

/// A tensor's role in an entry, in the current language.
fn role_label(role: crate::stepthrough::Role) -> String {
    use crate::stepthrough::Role;
    crate::t!(match role {
        Role::Input => "step-role-input",
        Role::Param => "step-role-parameter",
        Role::Output => "step-role-output",
        Role::Saved => "step-role-saved",
        Role::Upstream => "step-role-upstream",
        Role::Grad => "step-role-grad",
        Role::Clipped => "step-role-clipped",
        Role::WeightBefore => "step-role-w-before",
        Role::WeightAfter => "step-role-w-after",
        Role::Momentum => "step-role-m",
        Role::Variance => "step-role-v",
        Role::Update => "step-role-update",
    })
}

/// What the scene shows, for a class's "send my view": the prompt.
fn publish_view(view: Res<StepView>, mut shown: ResMut<ShownView>) {
    ShownView::publish(&mut shown, Scene::Step, Some(view.prompt.as_str()), None, None);
}
