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
        crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 260.0, crate::t!("flow-prompt-hint"));
        if let Some(flow) = flow {
            let last = flow.tokens.len().saturating_sub(1);
            let mut p = view.position.unwrap_or(last).min(last);
            ui.label(crate::t!("position"));
            if crate::app::canvas::parts::named(
                ui.add(egui::DragValue::new(&mut p).range(0..=last)),
                egui::WidgetType::DragValue,
                crate::t!("position"),
            )
            .changed()
            {
                view.position = (p != last).then_some(p);
            }
        }
        ui.separator();
        if ui
            .button(crate::t!("flow-forward"))
            .on_hover_text(crate::t!("flow-forward-hover"))
            .clicked()
        {
            view.play(FlowPass::Forward);
        }
        if ui
            .button(crate::t!("flow-backward"))
            .on_hover_text(crate::t!("flow-backward-hover"))
            .clicked()
        {
            view.play(FlowPass::Backward);
        }
        let pause = if view.playing { "⏸" } else { "⏵" };
        if crate::app::canvas::parts::named(ui.button(pause), egui::WidgetType::Button, crate::t!("flow-pause-hover"))
            .on_hover_text(crate::t!("flow-pause-hover"))
            .clicked()
        {
            view.playing = !view.playing;
        }
        if crate::app::canvas::parts::named(ui.button("⏭"), egui::WidgetType::Button, crate::t!("flow-next-hover"))
            .on_hover_text(crate::t!("flow-next-hover"))
            .clicked()
        {
            view.playing = false;
            view.progress = view.progress.floor() + 1.0;
        }
        ui.add(
            egui::Slider::new(&mut view.speed, 0.5..=16.0)
                .logarithmic(true)
                .text(crate::t!("flow-speed")),
        );
        ui.separator();
        match view.zoom.clone() {
            Zoom::Model => {
                ui.weak(crate::t!("flow-click-block"));
            }
            Zoom::Block(b) => {
                if ui.button(crate::t!("flow-whole-model")).clicked() {
                    view.zoom = Zoom::Model;
                }
                // Knock a head or the MLP out (Take it apart's knockouts: the
                // flow, the sampler and that scene all see the model without it).
                crate::app::ui::knockout_toggles(ui, b, run.config().n_head, &mut knockouts);
                ui.weak(crate::t!("flow-block-hint", block = b));
            }
            Zoom::Op(i) => {
                if ui.button(crate::t!("flow-whole-model")).clicked() {
                    view.zoom = Zoom::Model;
                }
                if let Some(node) = flow.and_then(|f| f.nodes.get(i)) {
                    if let Some(b) = node.layer
                        && ui.button(crate::t!("flow-back-to-block", block = b)).clicked()
                    {
                        view.zoom = Zoom::Block(b);
                    }
                    if ui.button(crate::t!("flow-open-step")).clicked() {
                        link = Some((Scene::Step, Focus::Tensor(node.name.clone())));
                    }
                    if let Some(weight) = params_of(&run.program, &node.name)
                        .into_iter()
                        .find(|p| p.ends_with("weight"))
                        && ui
                            .button(crate::t!(
                                "flow-weight-in-model",
                                weight = weight.trim_start_matches("transformer."),
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
        (_, Some(e)) => crate::t!("flow-cannot", error = e.to_string()),
        (Some(a), None) => format!(
            "{}{}{}",
            crate::t!("flow-status", backend = a.backend.to_string(), step = a.value.step),
            crate::app::ui::knocked_out_note(&knockouts),
            if run.state == RunState::Training {
                crate::t!("following-training")
            } else {
                String::new()
            }
        ),
        (None, None) => crate::t!("flow-computing"),
    };
    crate::app::ui::scene_status(ctx, "flow-status", "flow-toolbar", at, status);
    Ok(())
}
