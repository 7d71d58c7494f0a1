//! The walk-through's egui: the toolbar (the prompt, play, step, speed)
//! and the narration under the picture (where the tour is, what the op
//! computes, the scrubber). Text the narration names is at the body size,
//! 18 px and more in presenter mode.

use super::colour::CellLens;
use super::compute::WalkCompute;
use super::layout::{OpKind, Source, TensorFamily, TourPass};
use super::{Shown, WalkView};
use crate::app::lesson::{LessonFocus, PendingFocus};
use crate::app::scenes::Scene;
use crate::app::training::{Knockouts, Run};
use crate::app::ui::state::UiState;
use crate::lesson::Focus;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};

/// The narration's height as last drawn, in logical pixels (the camera
/// fits the picture above it).
#[derive(Resource, Clone, Copy, Debug, PartialEq)]
pub struct NarrationHeight(pub f32);

impl Default for NarrationHeight {
    fn default() -> Self {
        Self(140.0)
    }
}

/// The narration of beat `k`: where it is, and what the op computes.
pub fn narration(shown: &Shown, compute: &WalkCompute, run: &Run, k: usize) -> Option<(String, String)> {
    let walk = shown.walk.as_ref()?;
    let beat = walk.beats.get(k)?;
    let config = run.config();
    let flow = compute.computed().map(|c| &c.flow);
    let place = match beat.layer {
        Some(l) => crate::t!("walk-where-block", layer = l as i64),
        None => String::new(),
    };
    let pass = match beat.pass {
        TourPass::Forward => crate::t!("walk-pass-forward"),
        TourPass::Backward => crate::t!("walk-pass-backward"),
        TourPass::Update => crate::t!("walk-pass-update"),
    };
    let op = beat.node.clone().unwrap_or_else(|| match beat.kind {
        OpKind::Overview => crate::t!("walk-the-model"),
        OpKind::Optimizer => "AdamW".into(),
        _ => "loss".into(),
    });
    let title = if place.is_empty() {
        format!("{pass} · {op}")
    } else {
        format!("{pass} · {place} · {op}")
    };
    let loss = flow
        .and_then(|f| f.backward.as_ref())
        .map_or("–".to_string(), |b| format!("{:.3}", b.loss));
    // AdamW's beat waits for the run's moments (read once the tour is
    // past the forward pass).
    let updated = compute.computed().and_then(|c| c.lr.filter(|_| !c.updates.is_empty()));
    let message = match (beat.kind, updated) {
        (OpKind::Optimizer, None) => "walk-update-optimizer-waiting".to_string(),
        _ => beat.kind.message(beat.pass),
    };
    let body = crate::i18n::tr(
        &message,
        &[
            ("lr", crate::app::canvas::short(updated.unwrap_or(0.0)).into()),
            ("adam_step", (compute.computed().map_or(0, |c| c.step) as i64 + 1).into()),
            ("c", (config.d_model as i64).into()),
            ("heads", (config.n_head as i64).into()),
            ("head_size", ((config.d_model / config.n_head.max(1)) as i64).into()),
            ("layers", (config.n_layer as i64).into()),
            ("t", (flow.map_or(0, |f| f.tokens.len()) as i64).into()),
            ("loss", loss.into()),
        ],
    );
    // In a mixed-precision run: which of the training step's kernels ran
    // this op on the tensor cores, or that it stayed in f32.
    let kernels = super::kernels::of_beat(&run.program, &run.entry_kernels, beat);
    let mixed = run.precision == crate::backends::Precision::Mixed;
    let body = match super::kernels::sentence(mixed, beat.pass, &kernels) {
        Some(line) => format!("{body}\n\n{line}"),
        None => body,
    };
    Some((title, body))
}

/// The toolbar and the narration.
#[allow(clippy::too_many_arguments)]
pub fn panels(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    compute: Res<WalkCompute>,
    shown: Res<Shown>,
    mut view: ResMut<WalkView>,
    quads: Query<&super::draw::SlabQuad>,
    mut narration_height: ResMut<NarrationHeight>,
    mut knockouts: ResMut<Knockouts>,
    (mut next_scene, mut pending, sweep, lesson, mut details, mut theme): (
        ResMut<NextState<Scene>>,
        ResMut<PendingFocus>,
        Res<super::sweep::Sweep>,
        Res<crate::app::lesson::LessonPlayer>,
        Local<Option<bool>>,
        ResMut<crate::app::canvas::CanvasTheme>,
    ),
    (mut timeline, mut as_it_was): (
        ResMut<crate::app::timeline::Timeline>,
        ResMut<crate::app::timeline::AsItWas>,
    ),
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let (Some(at), Some(run)) = (ui_state.central_rect(ctx), run) else {
        return Ok(());
    };
    let beats = shown.walk.as_ref().map_or(0, |w| w.beats.len());
    crate::app::ui::scene_toolbar(ctx, "walk-toolbar", at, |ui| {
        let edit = crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 220.0, crate::t!("flow-prompt-hint"));
        if edit.changed() {
            view.prompt_set = true;
            view.prompt_corpus.clear();
        }
        // The model now, or as it was at a step of the timeline.
        let lapse = run.engine.timelapse().map(|t| &**t);
        crate::app::timeline::as_it_was_bar(ui, lapse, &mut timeline, &mut as_it_was);
        if beats == 0 {
            return;
        }
        let k = view.beat().min(beats - 1);
        if crate::app::canvas::parts::named(ui.button("⏮"), egui::WidgetType::Button, crate::t!("walk-previous"))
            .on_hover_text(crate::t!("walk-previous"))
            .clicked()
        {
            view.playing = false;
            view.go_to(k.saturating_sub(1));
        }
        let play = if view.playing { crate::t!("walk-pause") } else { crate::t!("walk-play") };
        if ui.button(play).clicked() {
            view.playing = !view.playing;
            if view.playing && k + 1 >= beats {
                view.t = 0.0;
                view.visited.clear();
            }
        }
        if crate::app::canvas::parts::named(ui.button("⏭"), egui::WidgetType::Button, crate::t!("walk-next"))
            .on_hover_text(crate::t!("walk-next"))
            .clicked()
        {
            view.playing = false;
            view.t = (k + 1).min(beats - 1) as f32;
        }
        let backward = shown
            .walk
            .as_ref()
            .and_then(|w| w.beats.iter().position(|b| b.pass == TourPass::Backward));
        if let Some(b) = backward
            && ui.button(crate::t!("walk-to-backward")).clicked()
        {
            view.t = b as f32;
        }
        ui.label(crate::t!("walk-speed"));
        crate::app::canvas::parts::named(
            ui.add(egui::Slider::new(&mut view.speed, 0.1..=3.0).show_value(false)),
            egui::WidgetType::Slider,
            crate::t!("walk-speed"),
        );
        // The canvas: dark (the default), or paper (CanvasTheme says when).
        use crate::app::canvas::CanvasTheme;
        let (icon, other, tip) = match *theme {
            CanvasTheme::Dark => ("☀", CanvasTheme::Light, crate::t!("walk-theme-light")),
            CanvasTheme::Light => ("☾", CanvasTheme::Dark, crate::t!("walk-theme-dark")),
        };
        if crate::app::canvas::parts::named(ui.button(icon), egui::WidgetType::Button, tip.clone())
            .on_hover_text(tip)
            .clicked()
        {
            *theme = other;
        }
        // In a block's beats, its heads and MLP can be knocked out: the
        // pass is computed again without them.
        if let Some(layer) = shown.walk.as_ref().and_then(|w| w.beats[k].layer) {
            ui.separator();
            crate::app::ui::knockout_toggles(ui, layer, run.config().n_head, &mut knockouts);
        }
    });
    let status = match (compute.computed(), compute.error_message()) {
        (_, Some(e)) => e.to_string(),
        (Some(c), None) => format!(
            "{}{}{}",
            crate::app::timeline::as_it_was_note(compute.latest.as_ref().is_some_and(|a| a.question.as_it_was), c.step),
            crate::t!(
                "walk-status",
                step = c.step as i64,
                device = compute.latest.as_ref().map_or("", |a| a.device),
            ),
            crate::app::ui::knocked_out_note(&knockouts)
        ),
        (None, None) => crate::t!("walk-computing"),
    };
    crate::app::ui::toolbar::scene_status(ctx, "walk-status", "walk-toolbar", at, status);
    if beats == 0 {
        return Ok(());
    }
    // The narration, across the bottom of the view.
    let k = view.beat().min(beats - 1);
    let mut link: Option<(Scene, Focus)> = None;
    let (title, body) = narration(&shown, &compute, &run, k).unwrap_or_default();
    // The card folds where it would crowd the picture out: under a
    // lesson's narration (which tells the step) it keeps the beat's title
    // and the scrubber; in a short view (1280×720 with the panels open) the
    // beat's text too. "more" unfolds the rest.
    let lesson_open = lesson.lesson.is_some();
    let short = at.height() * ctx.zoom_factor() < 760.0;
    let folds = lesson_open || short;
    let open = details.unwrap_or(!folds);
    let show_body = open || !lesson_open;
    let drawn = egui::Area::new(egui::Id::new("walk-narration"))
        .pivot(egui::Align2::LEFT_BOTTOM)
        .fixed_pos(egui::pos2(at.min.x + 8.0, at.max.y - 6.0))
        .order(egui::Order::Middle)
        .show(ctx, |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.set_width(at.width() - 36.0);
                ui.horizontal(|ui| {
                    ui.label(egui::RichText::new(format!("{} / {}", k + 1, beats)).weak());
                    ui.label(egui::RichText::new(title).strong().size(20.0));
                    if folds {
                        let label = if open { crate::t!("walk-less") } else { crate::t!("walk-more") };
                        if ui.small_button(label).clicked() {
                            *details = Some(!open);
                        }
                    }
                });
                if show_body {
                    ui.add(egui::Label::new(egui::RichText::new(body).size(16.0)).wrap_mode(egui::TextWrapMode::Wrap));
                }
                if open {
                    details_lines(ui, &shown, &compute, &sweep, &quads, run.config().n_head, k, &mut link);
                }
                let mut t = view.t;
                let slider = egui::Slider::new(&mut t, 0.0..=(beats as f32 - 0.01))
                    .show_value(false)
                    .trailing_fill(true);
                ui.spacing_mut().slider_width = at.width() - 60.0;
                if crate::app::canvas::parts::named(ui.add(slider), egui::WidgetType::Slider, crate::t!("access-beat")).changed() {
                    view.playing = false;
                    view.t = t;
                }
            });
        });
    // A link opens another scene at this beat's tensor, weight or head.
    if let Some((scene, focus)) = link {
        pending.set(LessonFocus {
            scene,
            focus,
            preset: run.preset.clone(),
        });
        next_scene.set(scene);
    }
    // Points to logical pixels (presenter mode zooms egui).
    let height = NarrationHeight((drawn.response.rect.height() + 10.0) * ctx.zoom_factor());
    if (height.0 - narration_height.0).abs() > 1.0 {
        *narration_height = height;
    }
    Ok(())
}

/// The card's details of beat `k`: the worked example, the dot product's
/// running sum, the logit lens and head view, the colour scale and the
/// links to other scenes.
#[allow(clippy::too_many_arguments)]
fn details_lines(
    ui: &mut egui::Ui,
    shown: &Shown,
    compute: &WalkCompute,
    sweep: &super::sweep::Sweep,
    quads: &Query<&super::draw::SlabQuad>,
    n_head: usize,
    k: usize,
    link: &mut Option<(Scene, Focus)>,
) {
    let gold = egui::Color32::from_rgb(255, 237, 89);
    if let Some((formula, filled)) = worked_lines(shown, compute, k) {
        ui.label(egui::RichText::new(formula).monospace().size(14.0).color(gold));
        ui.add(egui::Label::new(egui::RichText::new(filled).monospace().size(14.0)).wrap_mode(egui::TextWrapMode::Wrap));
    }
    // The dot product added term by term (the cursor in the
    // picture is on the term just added).
    if let Some(line) = super::sweep::line(sweep) {
        ui.label(egui::RichText::new(line).monospace().size(16.0));
    }
    // The flat view's reads at the last byte: the logit lens
    // and, in attention, where each head looks.
    for line in context_lines(shown, compute, k) {
        ui.add(egui::Label::new(egui::RichText::new(line).size(16.0).color(gold)).wrap_mode(egui::TextWrapMode::Wrap));
    }
    ui.horizontal_wrapped(|ui| {
        if let Some(line) = scale_line(shown, quads, k) {
            ui.label(egui::RichText::new(line).weak());
        }
        *link = links(ui, shown, n_head, k);
    });
}

/// The logit lens and head view lines of beat `k`.
fn context_lines(shown: &Shown, compute: &WalkCompute, k: usize) -> Vec<String> {
    let (Some(walk), Some(computed)) = (shown.walk.as_ref(), compute.computed()) else {
        return Vec::new();
    };
    let Some(beat) = walk.beats.get(k) else {
        return Vec::new();
    };
    let c = super::context::context(&computed.flow, beat);
    [super::context::lens_line(&computed.flow, &c), super::context::heads_line(&computed.flow, &c)]
        .into_iter()
        .flatten()
        .collect()
}

/// The beat's links into the scenes that show its part closer: its
/// tensor in the Step scene, its weight in the Model scene, its heads in
/// the Attention scene. Returns the one clicked.
fn links(ui: &mut egui::Ui, shown: &Shown, n_head: usize, k: usize) -> Option<(Scene, Focus)> {
    let walk = shown.walk.as_ref()?;
    let beat = walk.beats.get(k)?;
    let mut link = None;
    if let Some(node) = &beat.node
        && ui.small_button(crate::t!("flow-open-step")).clicked()
    {
        link = Some((Scene::Step, Focus::Tensor(node.clone())));
    }
    let weight = beat.slabs.iter().map(|&i| &walk.slabs[i]).find_map(|s| match &s.source {
        Source::Param { name, .. } if s.family == TensorFamily::Weight && name.ends_with("weight") => Some(name.clone()),
        _ => None,
    });
    if let Some(weight) = weight
        && ui
            .small_button(crate::t!("flow-weight-in-model", weight = weight.trim_start_matches("transformer.")))
            .clicked()
    {
        link = Some((Scene::Model, Focus::Tensor(weight)));
    }
    if beat.kind == OpKind::Attention
        && let Some(layer) = beat.layer
    {
        ui.label(crate::t!("walk-open-attention"));
        for head in 0..n_head {
            if ui.small_button(crate::t!("head-n", head = head as i64)).clicked() {
                link = Some((Scene::Attention, Focus::Head { layer, head }));
            }
        }
    }
    link
}

/// The colour scale of the beat's output: each tensor is coloured on its
/// own, the 99th percentile of |v| at full colour.
fn scale_line(shown: &Shown, quads: &Query<&super::draw::SlabQuad>, k: usize) -> Option<String> {
    let walk = shown.walk.as_ref()?;
    let (_, gradient) = super::state_at(walk, k);
    let out = *walk.beats.get(k)?.slabs.first()?;
    if k == 0 {
        return None;
    }
    let quad = quads.iter().find(|q| q.slab == out)?;
    let name = super::draw::title(&walk.slabs[out]);
    let short = crate::app::canvas::short;
    Some(match (gradient[out], quad.grad_scale, quad.update_scale) {
        (CellLens::Gradient, Some(s), _) => crate::t!("walk-scale-gradient", name = name, scale = short(s)),
        (CellLens::Update, _, Some(s)) => crate::t!("walk-scale-update", name = name, scale = short(s)),
        _ => crate::t!("walk-scale", name = name, scale = short(quad.value_scale)),
    })
}

/// The worked example of a forward beat (outlined in the picture): where
/// it is, its formula, and its values filled in beside the program's own.
fn worked_lines(shown: &Shown, compute: &WalkCompute, k: usize) -> Option<(String, String)> {
    let walk = shown.walk.as_ref()?;
    let beat = walk.beats.get(k)?;
    if beat.pass != TourPass::Forward {
        return None;
    }
    let computed = compute.computed()?;
    let node = beat.node.as_ref()?;
    let i = computed.flow.nodes.iter().position(|n| &n.name == node)?;
    let worked = computed.worked.get(i)?.as_ref()?;
    let last = computed.flow.tokens.len() - 1;
    let formula = crate::t!(
        "walk-worked",
        byte = crate::app::canvas::chip_text(computed.flow.tokens[last]),
        position = last as i64,
        formula = worked.formula.as_str(),
    );
    let filled = crate::t!(
        "walk-worked-filled",
        filled = worked.filled.as_str(),
        computed = crate::app::canvas::short(worked.computed),
    );
    Some((formula, filled))
}
