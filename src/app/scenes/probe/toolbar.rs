//! The Take-it-apart scene's toolbar: the tool, the prompt and each tool's
//! inputs; under it, what the picture shows and where it comes from.

use super::compute::{ProbeCompute, Tool};
use super::{ProbeView, corrupt_of, draw};
use crate::app::training::{Knockouts, Run, RunState, VALIDATION_ROWS};
use crate::app::ui::state::UiState;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};

pub fn toolbar(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    run: Option<Res<Run>>,
    compute: Res<ProbeCompute>,
    mut view: ResMut<ProbeView>,
    mut knockouts: ResMut<Knockouts>,
    (mut timeline, mut as_it_was): (
        ResMut<crate::app::timeline::Timeline>,
        ResMut<crate::app::timeline::AsItWas>,
    ),
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let (Some(at), Some(run)) = (ui_state.central_rect(ctx), run) else {
        return Ok(());
    };
    crate::app::ui::scene_toolbar(ctx, "probe-toolbar", at, |ui| {
        for tool in Tool::ALL {
            ui.selectable_value(&mut view.tool, tool, tool.title());
        }
        ui.separator();
        // The model now, or as it was at a step of the timeline.
        let lapse = run.engine.timelapse().map(|t| &**t);
        crate::app::timeline::as_it_was_bar(ui, lapse, &mut timeline, &mut as_it_was);
        let before = view.prompt.clone();
        crate::app::canvas::parts::prompt_field(ui, &mut view.prompt, 240.0, crate::t!("probe-prompt-hint"));
        if view.prompt != before {
            view.corrupt = corrupt_of(&view.prompt);
        }
        match view.tool {
            Tool::Patch => {
                ui.label(crate::t!("probe-corrupted"));
                ui.add(egui::TextEdit::singleline(&mut view.corrupt).desired_width(240.0))
                    .on_hover_text(crate::t!("probe-corrupt-hover"));
            }
            Tool::Why => {
                ui.label("A,B:");
                ui.add(
                    egui::TextEdit::singleline(&mut view.pair)
                        .desired_width(50.0)
                        .hint_text("e,a"),
                )
                .on_hover_text(crate::t!("probe-pair-hover"));
            }
            Tool::Knockout => {
                ui.checkbox(&mut view.validation, crate::t!("probe-on-validation"))
                    .on_hover_text(crate::t!(
                        "probe-on-validation-hover",
                        rows = VALIDATION_ROWS
                    ));
                ui.weak(draw::describe(&knockouts.0));
                if !knockouts.0.is_empty() && ui.button(crate::t!("probe-bring-back")).clicked() {
                    knockouts.0.clear();
                }
            }
            Tool::Lens => {}
        }
    });
    let backend = compute.latest.as_ref().map_or("", |a| a.backend.as_str());
    let status = match compute.last() {
        Some((q, Err(e))) if q.tool == view.tool => {
            crate::t!(
                "probe-cannot",
                tool = view.tool.title(),
                error = e.to_string()
            )
        }
        Some((q, Ok(_))) if q.tool == view.tool => {
            format!(
                "{}{}{}{}{}",
                crate::app::timeline::as_it_was_note(q.as_it_was, q.step),
                crate::t!("probe-status", backend = backend, step = q.step),
                if q.tool == Tool::Knockout {
                    if q.validation {
                        crate::t!("probe-status-importance-validation", rows = VALIDATION_ROWS)
                    } else {
                        crate::t!("probe-status-importance-prompt")
                    }
                } else {
                    String::new()
                },
                if q.knockouts.is_empty() {
                    String::new()
                } else {
                    crate::t!(
                        "flow-status-knocked-out",
                        parts = draw::describe(&q.knockouts)
                    )
                },
                if run.state == RunState::Training {
                    crate::t!("following-training-short")
                } else {
                    String::new()
                }
            )
        }
        _ => crate::t!("probe-computing", tool = view.tool.title()),
    };
    crate::app::ui::scene_status(ctx, "probe-status", "probe-toolbar", at, status);
    Ok(())
}
