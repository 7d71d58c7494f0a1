//! What the CPU-vs-GPU scene reports: the data behind its view (every
//! tensor compared), its field of the headless line and of the page's
//! report (the comparison's state), and its egui regions.

use super::{CorrectnessShown, CorrectnessView};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data, fields and regions.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Correctness, |view: Res<CorrectnessView>| {
        view.data_json()
    })
    .scene_description(Scene::Correctness, |shown: Res<CorrectnessShown>| {
        Some(match (shown.max_rel, &shown.worst_tensor) {
            (Some(max_rel), Some(worst)) => crate::t!(
                "describe-correctness",
                tensors = shown.tensors as u64,
                max_rel = format!("{max_rel:.2e}"),
                worst = worst.as_str(),
            ),
            _ => crate::t!("describe-correctness-state", state = shown.state.as_str()),
        })
    })
    .report_field(Report::Headless, "correctness", headless)
    .report_field(
        Report::Page,
        "correctness",
        |shown: Res<CorrectnessShown>| {
            json!({
                "state": shown.state,
                "tensors": shown.tensors,
                "max_rel": shown.max_rel,
            })
        },
    )
    .shown_regions(|shown: Res<CorrectnessShown>| shown.regions.clone());
}

fn headless(shown: Res<CorrectnessShown>, scene: Res<State<Scene>>) -> Value {
    if *scene.get() != Scene::Correctness {
        return Value::Null;
    }
    json!({
        "state": shown.state,
        "tensors": shown.tensors,
        "selected": shown.selected,
        "max_rel": shown.max_rel,
        "worst_tensor": shown.worst_tensor,
    })
}
