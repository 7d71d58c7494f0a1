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
        let before = view.prompt.clone();
        ui.add(
            egui::TextEdit::singleline(&mut view.prompt)
                .desired_width(240.0)
                .hint_text("a prompt"),
        );
        if view.prompt != before {
            view.corrupt = corrupt_of(&view.prompt);
        }
        match view.tool {
            Tool::Patch => {
                ui.label("corrupted:");
                ui.add(egui::TextEdit::singleline(&mut view.corrupt).desired_width(240.0))
                    .on_hover_text("the same length as the prompt, a byte or two changed");
            }
            Tool::Why => {
                ui.label("A,B:");
                ui.add(
                    egui::TextEdit::singleline(&mut view.pair)
                        .desired_width(50.0)
                        .hint_text("e,a"),
                )
                .on_hover_text("why byte A and not byte B (empty: the model's top two)");
            }
            Tool::Knockout => {
                ui.checkbox(&mut view.validation, "on validation text")
                    .on_hover_text(format!(
                        "measure each part's importance on {VALIDATION_ROWS} rows of the run's validation windows (the text its validation loss is measured on) instead of the prompt"
                    ));
                ui.weak(draw::describe(&knockouts.0));
                if !knockouts.0.is_empty() && ui.button("bring all back").clicked() {
                    knockouts.0.clear();
                }
            }
            Tool::Lens => {}
        }
    });
    let backend = compute.latest.as_ref().map_or("", |a| a.backend.as_str());
    let status = match compute.last() {
        Some((q, Err(e))) if q.tool == view.tool => {
            format!("cannot compute the {}: {e}", view.tool.title())
        }
        Some((q, Ok(_))) if q.tool == view.tool => {
            format!(
                "the program's own forward pass on {}{}, with the run's weights after step {}{}{}",
                backend,
                if q.tool == Tool::Knockout {
                    if q.validation {
                        format!(
                            "; importance: the loss on {VALIDATION_ROWS} rows of the run's validation windows"
                        )
                    } else {
                        "; importance: the loss on the prompt".to_string()
                    }
                } else {
                    String::new()
                },
                q.step,
                if q.knockouts.is_empty() {
                    String::new()
                } else {
                    format!(" and {} knocked out", draw::describe(&q.knockouts))
                },
                if run.state == RunState::Training {
                    " · following the training run"
                } else {
                    ""
                }
            )
        }
        _ => format!("computing the {}…", view.tool.title()),
    };
    crate::app::ui::scene_status(ctx, "probe-status", "probe-toolbar", at, status);
    Ok(())
}
