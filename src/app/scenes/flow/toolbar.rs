//! The flow scene's toolbar: the prompt, the position, playing each pass,
//! the zoom, and links into the other scenes; under it, where the numbers
//! come from.

use super::compute::FlowCompute;
use super::draw::params_of;
use super::{FlowPass, FlowView, Zoom};
use crate::app::lesson::{LessonFocus, PendingFocus};
use crate::app::scenes::Scene;
use crate::app::training::{Run, RunState};
use crate::app::ui::state::UiState;
use crate::lesson::Focus;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};

#[allow(clippy::too_many_arguments)]
pub fn toolbar(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    compute: Res<FlowCompute>,
    mut view: ResMut<FlowView>,
    mut next_scene: ResMut<NextState<Scene>>,
    mut pending: ResMut<PendingFocus>,
    mut knockouts: ResMut<crate::app::training::Knockouts>,
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let (Some(at), Some(run)) = (ui_state.central_rect(ctx), run) else {
        return Ok(());
    };
    let flow = compute.flow().map(|c| &c.flow);
    let mut link: Option<(Scene, Focus)> = None;
    crate::app::ui::scene_toolbar(ctx, "flow-toolbar", at, |ui| {
        ui.add(
            egui::TextEdit::singleline(&mut view.prompt)
                .desired_width(260.0)
                .hint_text("type a prompt"),
        );
        if let Some(flow) = flow {
            let last = flow.tokens.len().saturating_sub(1);
            let mut p = view.position.unwrap_or(last).min(last);
            ui.label("position");
            if ui
                .add(egui::DragValue::new(&mut p).range(0..=last))
                .changed()
            {
                view.position = (p != last).then_some(p);
            }
        }
        ui.separator();
        if ui
            .button("▶ forward")
            .on_hover_text("play the forward pass: the prompt up to the next byte")
            .clicked()
        {
            view.play(FlowPass::Forward);
        }
        if ui
            .button("◀ backward")
            .on_hover_text("play the backward pass: the loss's gradient down to every weight")
            .clicked()
        {
            view.play(FlowPass::Backward);
        }
        let pause = if view.playing { "⏸" } else { "⏵" };
        if ui.button(pause).on_hover_text("pause or go on").clicked() {
            view.playing = !view.playing;
        }
        if ui.button("⏭").on_hover_text("one node on").clicked() {
            view.playing = false;
            view.progress = view.progress.floor() + 1.0;
        }
        ui.add(
            egui::Slider::new(&mut view.speed, 0.5..=16.0)
                .logarithmic(true)
                .text("nodes/s"),
        );
        ui.separator();
        match view.zoom.clone() {
            Zoom::Model => {
                ui.weak("click a block to open it");
            }
            Zoom::Block(b) => {
                if ui.button("⤢ whole model").clicked() {
                    view.zoom = Zoom::Model;
                }
                // Knock a head or the MLP out (Take it apart's knockouts: the
                // flow, the sampler and that scene all see the model without it).
                ui.label("knock out:");
                let parts = (0..run.config().n_head)
                    .map(|head| crate::interventions::Part::Head { layer: b, head })
                    .chain(std::iter::once(crate::interventions::Part::Mlp {
                        layer: b,
                    }));
                for part in parts {
                    let on = knockouts.0.contains(&part);
                    let name = match part {
                        crate::interventions::Part::Head { head, .. } => format!("head {head}"),
                        crate::interventions::Part::Mlp { .. } => "MLP".into(),
                    };
                    if ui
                        .selectable_label(on, name)
                        .on_hover_text("zero its output before it is added to the stream")
                        .clicked()
                    {
                        if on {
                            knockouts.0.retain(|p| *p != part);
                        } else {
                            knockouts.0.push(part);
                        }
                    }
                }
                ui.weak(format!("block {b} · click a node for its numbers"));
            }
            Zoom::Op(i) => {
                if ui.button("⤢ whole model").clicked() {
                    view.zoom = Zoom::Model;
                }
                if let Some(node) = flow.and_then(|f| f.nodes.get(i)) {
                    if let Some(b) = node.layer
                        && ui.button(format!("← block {b}")).clicked()
                    {
                        view.zoom = Zoom::Block(b);
                    }
                    if ui.button("open in Step through").clicked() {
                        link = Some((Scene::Step, Focus::Tensor(node.name.clone())));
                    }
                    if let Some(weight) = params_of(&run.program, &node.name)
                        .into_iter()
                        .find(|p| p.ends_with("weight"))
                        && ui
                            .button(format!(
                                "its weight in Model: {}",
                                weight.trim_start_matches("transformer.")
                            ))
                            .clicked()
                    {
                        link = Some((Scene::Model, Focus::Tensor(weight)));
                    }
                }
            }
        }
    });
    if let Some((scene, focus)) = link {
        pending.set(LessonFocus {
            scene,
            focus,
            preset: run.preset.clone(),
        });
        next_scene.set(scene);
    }
    let status = match (&compute.latest, compute.error_message()) {
        (_, Some(e)) => format!("cannot compute the flow: {e}"),
        (Some(a), None) => format!(
            "the program's own forward and backward pass of this prompt, on {}, with the run's weights after step {}{}{}",
            a.backend,
            a.value.step,
            if knockouts.0.is_empty() {
                String::new()
            } else {
                format!(
                    " and {} knocked out",
                    knockouts
                        .0
                        .iter()
                        .map(|p| p.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            if run.state == RunState::Training {
                " · following the training run (at most once a second)"
            } else {
                ""
            }
        ),
        (None, None) => "computing the flow…".into(),
    };
    crate::app::ui::scene_status(ctx, "flow-status", "flow-toolbar", at, status);
    Ok(())
}
