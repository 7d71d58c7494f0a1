//! What the Step scene reports: the data behind its view (every entry of
//! the step-through, as `tinygpt step --json` prints them), its field of
//! the headless line (the entry shown) and its egui regions.

use super::StepShown;
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use crate::app::training::Run;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data, field and regions.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Step, data)
        .scene_description(Scene::Step, description)
        .report_field(Report::Headless, "step", shown)
        .shown_regions(|shown: Res<StepShown>| shown.regions.clone());
}

fn data(run: Option<Res<Run>>) -> Value {
    match (&run, run.as_ref().and_then(|r| r.engine.stepping())) {
        (Some(run), Some(s)) => json!({
            "entries": s.cursor.views.iter().map(|v| v.to_json(&run.program)).collect::<Vec<_>>(),
        }),
        _ => json!({ "entries": [] }),
    }
}

/// The picture in words: the entry, its op and phase, and its tensors.
fn description(shown: Res<StepShown>) -> Option<String> {
    shown.index?;
    Some(crate::t!(
        "describe-step",
        entry = shown.number as u64,
        entries = shown.entries as u64,
        op = shown.op.as_str(),
        phase = shown.phase.as_str(),
        tensors = shown.tensors.join(", "),
    ))
}

fn shown(shown: Res<StepShown>) -> Value {
    json!(shown.index.map(|i| {
        json!({
            "index": i,
            "op": shown.op,
            "phase": shown.phase,
            "computed": shown.computed,
            "tensors": shown.tensors,
            "kernels": shown.kernels,
            "f16": shown.kernels.iter().any(|k| crate::gpu::coop::on_tensor_cores(k)),
        })
    }))
}
