//! The "Attention" scene: who attends to whom, live from the model that is
//! training. For a prompt (default: a line of the corpus) or a row of the
//! batch the next step trains on, every layer × head attention matrix P
//! (n × n, causal: query rows, key columns) as a grid; click one to enlarge
//! it with the bytes on both axes; click a row of the enlarged map for the
//! next-byte distribution at that position, reshaped live by the sampler's
//! own temperature. Hovering names the weight and its two bytes.
//!
//! P comes from the model's own forward pass on the run's backend, through a
//! probe ([`crate::probe`]): FlashAttention never stores P, so the probe
//! recomputes it from q, k and the saved log-sum-exp (a kernel of its own on
//! the GPU, the same function as the backward's on the CPU). While training
//! runs, the probe repeats a few times a second from the current weights.
//!
//! Or, on the shared timeline ([`crate::app::timeline`]), the model as it
//! was: the probe string's attention at a step of the run's time-lapse (the
//! maps its frames kept while it trained, or a gallery model shipped).

mod report;

use super::Scene;
use crate::app::canvas::{Hover, SceneBounds, SceneCursor, label};
use crate::app::lesson::{LessonAction, LessonFocus, ShownView};
use crate::app::training::{Probes, Run, RunSettings, RunState, ShownStep};
use crate::app::ui::UiState;
use crate::lesson::{Action, Focus};
use crate::probe::{ProbeResult, ProbeSource, byte_label};
use crate::sample::{SampleOptions, next_byte_distribution};
use bevy::prelude::*;
use bevy::sprite::Anchor;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use crate::app::timeline::Timeline;
use crate::model::timelapse::{Frame, TimeLapse};

/// World size of one map in the grid, and the gaps.
const CELL: f32 = 100.0;
const GAP: f32 = 12.0;
const ROW_LABEL_WIDTH: f32 = 78.0;
const HEADER: f32 = 26.0;
/// World units per byte of the enlarged map, at least.
const FOCUS_PER_TOKEN: f32 = 16.0;
const FOCUS_MIN: f32 = 560.0;
use crate::app::heatmap::{MASKED, colour_attention};

/// What the scene shows; the toolbar edits it.
#[derive(Resource, Debug, Clone)]
pub struct AttentionView {
    pub source: SourceKind,
    /// The prompt typed (bytes beyond the context keep the last ctx).
    pub prompt: String,
    /// The batch row, for [`SourceKind::BatchRow`].
    pub row: usize,
    /// The enlarged map (layer, head), or the grid.
    pub focus: Option<(usize, usize)>,
    /// The query position whose next-byte distribution is shown.
    pub position: Option<usize>,
    /// The temperature of the next-byte view (the sampler's own softmax).
    pub temperature: f32,
    /// Colour each row by P ÷ the row's largest weight (where each query
    /// looks) instead of P on 0 to 1.
    pub row_normalised: bool,
    /// Set once the prompt has its default (a line of the corpus).
    pub prompt_set: bool,
    /// The text the prompt was taken from: another run's text (a gallery
    /// model opened, a corpus loaded) starts from a prompt of its own.
    pub prompt_corpus: String,
}

impl Default for AttentionView {
    fn default() -> Self {
        Self {
            source: SourceKind::Prompt,
            prompt: String::new(),
            row: 0,
            focus: None,
            position: None,
            temperature: 1.0,
            row_normalised: false,
            prompt_set: false,
            prompt_corpus: String::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    Prompt,
    BatchRow,
    /// The time-lapse's probe string at the timeline's step.
    Timeline,
}

/// A time-lapse frame's maps as a probe's result, while the view's source
/// is the timeline: the run (its generation) and the frame's step, and a
/// version that changes with them.
#[derive(Resource, Default)]
pub struct FrameProbe {
    key: Option<(u64, u64)>,
    pub shown: Option<(u64, ProbeResult)>,
    version: u64,
}

/// The probe string's attention as a time-lapse frame kept it (no logits:
/// a frame keeps the greedy next bytes only).
pub fn frame_result(t: &TimeLapse, frame: &Frame) -> Option<ProbeResult> {
    let tokens = t.probe.first()?.clone();
    let n = tokens.len();
    let mut probs = Vec::with_capacity(t.n_layer);
    for layer in 0..t.n_layer {
        let mut block = Vec::with_capacity(t.n_head * n * n);
        for head in 0..t.n_head {
            block.extend(t.map(frame, layer, head)?);
        }
        probs.push(block);
    }
    Some(ProbeResult {
        window: crate::probe::ProbeWindow { row: 0, n },
        tokens,
        n_head: t.n_head,
        blocks: (0..t.n_layer).collect(),
        probs,
        logits: Vec::new(),
    })
}

/// One attention map on screen.
#[derive(Component, Debug)]
pub struct AttentionCell {
    /// Index into the result's blocks.
    pub k: usize,
    pub layer: usize,
    pub head: usize,
    /// Where it is drawn (world units).
    pub rect: Rect,
    pub image: Handle<Image>,
    /// The probe's and the timeline frame's versions it shows.
    pub shown: (u64, u64, bool),
}

/// Everything the scene spawned for the current layout.
#[derive(Component)]
struct AttentionItem;

/// The layout the entities were built for.
#[derive(Resource, Default, PartialEq, Clone, Debug)]
struct Layout(Option<(usize, Vec<usize>, usize, Option<(usize, usize)>)>);

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        let start = app.world().get_resource::<super::SceneStart>().and_then(|s| s.timeline_step);
        let mut view = AttentionView::default();
        if let Some(step) = start {
            view.source = SourceKind::Timeline;
            app.insert_resource(Timeline { step: Some(step) });
        }
        app.insert_resource(view)
            .init_resource::<Timeline>()
            .init_resource::<FrameProbe>()
            .init_resource::<Layout>()
            .add_observer(lesson_focus)
            .add_observer(lesson_action)
            .add_systems(OnExit(Scene::Attention), leave)
            .add_systems(
                Update,
                (request_probe, frame_probe, layout, paint, click, hover, publish_view)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Attention)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                (toolbar, next_byte_window)
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Attention)),
            );
    }
}

/// Leaving: stop asking for probes; the next visit lays out again; the
/// loss chart no longer marks a step of the timeline.
fn leave(mut probes: ResMut<Probes>, mut layout: ResMut<Layout>, mut marked: ResMut<ShownStep>) {
    probes.set_want(None);
    *layout = Layout::default();
    marked.0 = None;
}

/// Keeps the probe request in step with the view.
fn request_probe(
    run: Option<Res<Run>>,
    settings: Res<RunSettings>,
    mut view: ResMut<AttentionView>,
    mut probes: ResMut<Probes>,
) {
    let Some(run) = run else { return };
    if !view.prompt_set || (!view.prompt_corpus.is_empty() && view.prompt_corpus != run.corpus_name)
    {
        view.prompt_corpus = run.corpus_name.clone();
        view.prompt = settings
            .corpus
            .prompt_line(run.config().ctx)
            .unwrap_or_else(|| "To be, or not to be, that is the question:".into());
        view.prompt_set = true;
    }
    let source = match view.source {
        SourceKind::Prompt if !view.prompt.is_empty() => {
            Some(ProbeSource::Prompt(view.prompt.clone().into_bytes()))
        }
        SourceKind::Prompt => None,
        SourceKind::BatchRow => Some(ProbeSource::BatchRow(view.row.min(run.config().batch - 1))),
        SourceKind::Timeline => None,
    };
    probes.set_want(source);
}

/// On the timeline: the frame at its step (among those that kept their
/// maps) as the result shown.
fn frame_probe(
    run: Option<Res<Run>>,
    view: Res<AttentionView>,
    timeline: Res<Timeline>,
    mut shown: ResMut<FrameProbe>,
    mut marked: ResMut<ShownStep>,
) {
    // The loss chart marks the step shown.
    let step = shown.shown.as_ref().map(|(s, _)| *s);
    if marked.0 != step {
        marked.0 = step;
    }
    let picked = (view.source == SourceKind::Timeline)
        .then_some(run)
        .flatten()
        .and_then(|run| {
            let t = run.engine.timelapse()?.clone();
            let (_, frame) = timeline.frame(&t, |f| f.attention.is_some())?;
            Some((run.generation, frame.step, t))
        });
    let Some((generation, step, t)) = picked else {
        if shown.shown.is_some() {
            *shown = FrameProbe { version: shown.version + 1, ..Default::default() };
        }
        return;
    };
    if shown.key == Some((generation, step)) {
        return;
    }
    let result = t.at(step).and_then(|f| frame_result(&t, f));
    shown.key = Some((generation, step));
    shown.shown = result.map(|r| (step, r));
    shown.version += 1;
}

/// What the maps show: the timeline's frame, or the latest probe.
fn result<'a>(probes: &'a Probes, frame: &'a FrameProbe) -> Option<(u64, &'a ProbeResult)> {
    match &frame.shown {
        Some((step, r)) => Some((*step, r)),
        None => probes.latest.as_ref().map(|(s, r)| (*s, r)),
    }
}

/// Lays the maps out when the shape of what is shown changes: the grid of
/// layers × heads, or one enlarged map with the bytes on its axes.
#[allow(clippy::too_many_arguments)]
fn layout(
    mut commands: Commands,
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    view: Res<AttentionView>,
    mut current: ResMut<Layout>,
    old: Query<Entity, With<AttentionItem>>,
    mut images: ResMut<Assets<Image>>,
    mut bounds: ResMut<SceneBounds>,
) {
    let Some((_, r)) = result(&probes, &frame) else {
        if current.0.is_some() {
            for e in &old {
                commands.entity(e).despawn();
            }
            *current = Layout::default();
        }
        return;
    };
    let focus = view
        .focus
        .filter(|(l, h)| r.blocks.contains(l) && *h < r.n_head);
    let want = Layout(Some((r.n(), r.blocks.clone(), r.n_head, focus)));
    if *current == want {
        return;
    }
    for e in &old {
        commands.entity(e).despawn();
    }
    *current = want;
    let n = r.n();
    let mut spawn_map =
        |commands: &mut Commands, k: usize, layer: usize, head: usize, rect: Rect| {
            let handle = crate::app::canvas::cell_texture(&mut images, n, n, MASKED);
            commands.spawn((
                Sprite {
                    image: handle.clone(),
                    custom_size: Some(rect.size()),
                    ..default()
                },
                Transform::from_translation(rect.center().extend(1.0)),
                AttentionCell {
                    k,
                    layer,
                    head,
                    rect,
                    image: handle,
                    shown: (0, 0, false),
                },
                crate::app::canvas::SceneRegion {
                    name: format!("h.{layer}.head{head}"),
                    rect,
                },
                // Query rows by key columns: the keyboard steps through them.
                crate::app::canvas::parts::RegionGrid { rows: n, cols: n },
                AttentionItem,
                DespawnOnExit(Scene::Attention),
            ));
        };
    let text = |s: String, size: f32, anchor: Anchor, at: Vec2| {
        (
            label(s, size, anchor, at, 2.0),
            AttentionItem,
            DespawnOnExit(Scene::Attention),
        )
    };
    match focus {
        None => {
            // Rows: layers, top to bottom; columns: heads.
            let (rows, cols) = (r.blocks.len(), r.n_head);
            let width = ROW_LABEL_WIDTH + cols as f32 * (CELL + GAP);
            let height = HEADER + rows as f32 * (CELL + GAP);
            for h in 0..cols {
                let x = ROW_LABEL_WIDTH + h as f32 * (CELL + GAP) + CELL / 2.0;
                commands.spawn(text(
                    crate::t!("head-n", head = h),
                    15.0,
                    Anchor::BOTTOM_CENTER,
                    Vec2::new(x, 4.0),
                ));
            }
            for (k, &layer) in r.blocks.iter().enumerate() {
                let top = -(k as f32) * (CELL + GAP);
                commands.spawn(text(
                    crate::t!("layer-n", layer = layer),
                    15.0,
                    Anchor::CENTER_RIGHT,
                    Vec2::new(ROW_LABEL_WIDTH - 10.0, top - CELL / 2.0),
                ));
                for h in 0..cols {
                    let x = ROW_LABEL_WIDTH + h as f32 * (CELL + GAP);
                    spawn_map(
                        &mut commands,
                        k,
                        layer,
                        h,
                        Rect::new(x, top - CELL, x + CELL, top),
                    );
                }
            }
            bounds.0 = Rect::new(-4.0, -(height - HEADER) - 4.0, width + 4.0, HEADER + 8.0);
        }
        Some((layer, head)) => {
            let k = r
                .blocks
                .iter()
                .position(|&b| b == layer)
                .expect("filtered above");
            let side = (n as f32 * FOCUS_PER_TOKEN).max(FOCUS_MIN);
            let cell = side / n as f32;
            let left = 90.0;
            let rect = Rect::new(left, -side, left + side, 0.0);
            spawn_map(&mut commands, k, layer, head, rect);
            commands.spawn(text(
                crate::t!("attention-focus-title", layer = layer, head = head),
                16.0,
                Anchor::BOTTOM_LEFT,
                Vec2::new(left, 70.0),
            ));
            // Every byte on both axes where they fit; every k-th otherwise.
            let every = (11.0 / cell).ceil().max(1.0) as usize;
            // Up to 20 (a short prompt's cells are large: its bytes are
            // read from the back of a room).
            let size = (cell * 0.8).clamp(7.0, 20.0);
            for (i, &b) in r.tokens.iter().enumerate() {
                if i % every != 0 {
                    continue;
                }
                let y = -(i as f32 + 0.5) * cell;
                commands.spawn(text(
                    byte_label(b),
                    size,
                    Anchor::CENTER_RIGHT,
                    Vec2::new(left - 6.0, y),
                ));
                let x = left + (i as f32 + 0.5) * cell;
                // Key labels read upwards, one per column.
                commands
                    .spawn(text(
                        byte_label(b),
                        size,
                        Anchor::CENTER_LEFT,
                        Vec2::new(x, 6.0),
                    ))
                    .insert(
                        Transform::from_xyz(x, 6.0, 2.0)
                            .with_rotation(Quat::from_rotation_z(std::f32::consts::FRAC_PI_2)),
                    );
            }
            commands.spawn(text(
                crate::t!("attention-query-axis"),
                13.0,
                Anchor::BOTTOM_RIGHT,
                Vec2::new(left - 6.0, 6.0),
            ));
            commands.spawn(text(
                crate::t!("attention-key-axis"),
                13.0,
                Anchor::BOTTOM_LEFT,
                Vec2::new(left + side + 8.0, 6.0),
            ));
            // Room above the title, so that it stays clear of the status
            // line under the toolbar.
            bounds.0 = Rect::new(0.0, -side - 10.0, left + side + 70.0, 130.0);
        }
    }
}

/// Writes P into the maps' textures when a new probe result arrives.
fn paint(
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    view: Res<AttentionView>,
    run: Option<Res<Run>>,
    mut cells: Query<&mut AttentionCell>,
    mut images: ResMut<Assets<Image>>,
) {
    let Some((_, r)) = result(&probes, &frame) else {
        return;
    };
    let want = (probes.version, frame.version, view.row_normalised);
    let n = r.n();
    for mut cell in &mut cells {
        if cell.shown == want || cell.k >= r.probs.len() {
            continue;
        }
        let p = r.p(cell.k, cell.head);
        let causal = run.as_ref().is_none_or(|r| r.config().lab.causal_mask);
        let pixels = colour_attention(p, n, view.row_normalised, causal);
        if let Some(mut image) = images.get_mut(&cell.image) {
            image.data = Some(pixels);
        }
        cell.shown = want;
    }
}

/// Grid: a click enlarges a map. Enlarged: a click on a row picks the
/// position whose next-byte distribution is shown.
fn click(
    pointer: crate::app::canvas::parts::PointerInput,
    cursor: Res<SceneCursor>,
    cells: Query<&AttentionCell>,
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    mut view: ResMut<AttentionView>,
) {
    if !pointer.just_pressed() {
        return;
    }
    let Some(world) = cursor.0 else { return };
    let Some(cell) = cells.iter().find(|c| c.rect.contains(world)) else {
        return;
    };
    match view.focus {
        None => {
            view.focus = Some((cell.layer, cell.head));
        }
        Some(_) => {
            if let Some((_, r)) = result(&probes, &frame) {
                let n = r.n();
                view.position = Some(crate::app::canvas::cell_at(cell.rect, world, n, n).0);
            }
        }
    }
}

/// Names the weight under the pointer and its two bytes.
fn hover(
    cursor: Res<SceneCursor>,
    cells: Query<&AttentionCell>,
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    run: Option<Res<Run>>,
    mut hover: ResMut<Hover>,
) {
    let causal = run.as_ref().is_none_or(|r| r.config().lab.causal_mask);
    let text = (|| {
        let world = cursor.0?;
        let cell = cells.iter().find(|c| c.rect.contains(world))?;
        let (_, r) = result(&probes, &frame)?;
        let n = r.n();
        let (i, j) = crate::app::canvas::cell_at(cell.rect, world, n, n);
        let p = r.p(cell.k, cell.head)[i * n + j];
        let (qi, kj) = (byte_label(r.tokens[i]), byte_label(r.tokens[j]));
        // Above the diagonal of a causal run: masked, and P says nothing.
        let key = if j > i && causal {
            "attention-hover-masked"
        } else {
            "attention-hover"
        };
        Some(crate::t!(
            key,
            layer = cell.layer,
            head = cell.head,
            i = i,
            q = qi.as_str(),
            j = j,
            k = kj.as_str(),
            p = format!("{p:.4}"),
        ))
    })();
    if hover.0 != text {
        hover.0 = text;
    }
}

/// The scene's toolbar: what to look at, the colour mapping, and where P
/// comes from.
fn toolbar(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    mut timeline: ResMut<Timeline>,
    mut view: ResMut<AttentionView>,
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let (Some(at), Some(run)) = (ui_state.central_rect(ctx), run) else {
        return Ok(());
    };
    let batch = run.config().batch;
    crate::app::ui::scene_toolbar(ctx, "attention-toolbar", at, |ui| {
        ui.selectable_value(
            &mut view.source,
            SourceKind::Prompt,
            crate::t!("attention-source-prompt"),
        );
        if view.source == SourceKind::Prompt {
            crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 220.0, crate::t!("attention-prompt-hint"));
        }
        ui.selectable_value(
            &mut view.source,
            SourceKind::BatchRow,
            crate::t!("attention-batch-row"),
        )
        .on_hover_text(crate::t!("attention-batch-row-hover"));
        if view.source == SourceKind::BatchRow {
            ui.add(egui::DragValue::new(&mut view.row).range(0..=batch - 1));
        }
        // The shared timeline: the model as it was, where the run's
        // time-lapse kept the maps.
        let lapse = run.engine.timelapse().filter(|t| t.frames.iter().any(|f| f.attention.is_some()));
        if let Some(t) = lapse {
            ui.selectable_value(&mut view.source, SourceKind::Timeline, crate::t!("attention-timeline"))
                .on_hover_text(crate::t!("attention-timeline-hover"));
            if view.source == SourceKind::Timeline {
                crate::app::timeline::timeline_bar(ui, t, &mut timeline, |f| f.attention.is_some());
            }
        }
        ui.separator();
        ui.checkbox(&mut view.row_normalised, crate::t!("attention-row-max"))
            .on_hover_text(crate::t!("attention-row-max-hover"));
        if let Some((layer, head)) = view.focus {
            ui.separator();
            if ui.button(crate::t!("attention-all-heads")).clicked() {
                view.focus = None;
                view.position = None;
            }
            ui.weak(crate::t!(
                "attention-focus-hint",
                layer = layer,
                head = head
            ));
        } else {
            ui.separator();
            ui.weak(crate::t!("attention-click-map"));
        }
    });
    // Where the numbers come from, under the toolbar.
    let status = match (&probes.latest, &probes.error) {
        _ if view.source == SourceKind::Timeline => match &frame.shown {
            Some((step, r)) => crate::t!("attention-timeline-status", bytes = r.n(), step = *step),
            None => crate::t!("timeline-empty"),
        },
        (_, Some(e)) => crate::t!("attention-cannot", error = e.to_string()),
        (Some((step, r)), None) => format!(
            "{}{}{}",
            crate::t!(
                "attention-status",
                mask = if run.config().lab.causal_mask {
                    crate::t!("attention-mask")
                } else {
                    String::new()
                },
                bytes = r.n(),
                step = *step,
                backend = run.backend_label.split(' ').next().unwrap_or("?"),
            ),
            if run.config().lab.causal_mask {
                String::new()
            } else {
                crate::t!("attention-no-mask")
            },
            if run.state == RunState::Training {
                crate::t!("attention-refreshing")
            } else {
                String::new()
            }
        ),
        (None, None) => crate::t!("attention-computing"),
    };
    crate::app::ui::scene_status(ctx, "attention-status", "attention-toolbar", at, status);
    Ok(())
}

/// The next-byte distribution at the chosen position: the top 10 bytes and
/// their probabilities through the sampler's own softmax, with its temperature.
fn next_byte_window(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    probes: Res<Probes>,
    frame: Res<FrameProbe>,
    mut view: ResMut<AttentionView>,
) -> Result {
    let (Some(pos), Some(_)) = (view.position, view.focus) else {
        return Ok(());
    };
    let Some((step, r)) = result(&probes, &frame) else {
        return Ok(());
    };
    // A time-lapse frame keeps no logits (its status line says so).
    if pos >= r.n() || r.logits.is_empty() {
        return Ok(());
    }
    let ctx = contexts.ctx_mut()?;
    let ppp = ctx.pixels_per_point();
    let anchor = ui_state.central.map_or(egui::pos2(900.0, 600.0), |c| {
        egui::pos2(
            (c.0 + c.2) as f32 / ppp - 8.0,
            (c.1 + c.3) as f32 / ppp - 8.0,
        )
    });
    let mut open = true;
    let context: String = r.tokens[pos.saturating_sub(12)..=pos]
        .iter()
        .map(|&b| byte_label(b))
        .collect();
    egui::Window::new(crate::t!("next-byte-window"))
        .id(egui::Id::new("next-byte-window"))
        .open(&mut open)
        // Inside the main view: never over a lesson's narration or a panel.
        .constrain_to(ui_state.central_rect(ctx).unwrap_or(ctx.content_rect()))
        .pivot(egui::Align2::RIGHT_BOTTOM)
        .current_pos(anchor)
        .resizable(false)
        .show(ctx, |ui| {
            ui.label(crate::t!(
                "next-byte-after",
                context = context.as_str(),
                position = pos,
                step = step
            ));
            ui.add(
                egui::Slider::new(&mut view.temperature, 0.0..=2.0).text(crate::t!("temperature")),
            );
            let opts = SampleOptions {
                temperature: view.temperature,
                top_k: 256,
                seed: 0,
            };
            let dist = next_byte_distribution(r.logits_at(pos), &opts);
            egui::Grid::new("next-byte").num_columns(2).show(ui, |ui| {
                for &(byte, p) in dist.iter().take(10) {
                    ui.monospace(format!("{:>4}", byte_label(byte)));
                    ui.add(
                        egui::ProgressBar::new(p as f32)
                            .desired_width(180.0)
                            .text(format!("{:.1}%", p * 100.0)),
                    );
                    ui.end_row();
                }
            });
            if let Some(&actual) = r.tokens.get(pos + 1) {
                ui.weak(crate::t!("next-byte-continues", byte = byte_label(actual)));
            }
        });
    if !open {
        view.position = None;
    }
    Ok(())
}

/// A lesson step on this scene: a head enlarged, a position's next byte,
/// or the grid again.
fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<AttentionView>) {
    if event.scene != Scene::Attention {
        return;
    }
    match &event.focus {
        Focus::Nothing => view.focus = None,
        Focus::Head { layer, head } => view.focus = Some((*layer, *head)),
        Focus::Position(p) => view.position = Some(*p),
        _ => {}
    }
}

/// What the scene shows, for a class's "send my view": the prompt typed
/// (not a batch row's), the enlarged head, the position.
fn publish_view(view: Res<AttentionView>, mut shown: ResMut<ShownView>) {
    let prompt = (view.source == SourceKind::Prompt).then_some(view.prompt.as_str());
    ShownView::publish(&mut shown, Scene::Attention, prompt, view.focus, view.position);
}

/// A lesson step's prompt becomes this scene's.
fn lesson_action(event: On<LessonAction>, mut view: ResMut<AttentionView>) {
    if let Action::Prompt(text) = &event.0 {
        view.prompt = text.clone();
        view.prompt_set = true;
        // Chosen, not a default: it stays when the text changes.
        view.prompt_corpus.clear();
        view.source = SourceKind::Prompt;
    }
}
