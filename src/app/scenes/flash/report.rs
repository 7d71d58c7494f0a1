//! What the Flash scene reports: the data behind its view (the trace's
//! summary and visits, as `tinygpt flash --json` prints them), its field of
//! the headless line (the visit shown) and its egui regions.

use super::FlashShown;
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use crate::app::training::FlashTraces;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data, field and regions.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Flash, data)
        .scene_description(Scene::Flash, |shown: Res<FlashShown>| {
            Some(crate::t!(
                "describe-flash",
                pass = shown.pass.as_str(),
                step = shown.step?,
                q_tile = shown.q_tile? as u64,
                k_block = shown.k_block? as u64,
                visits = shown.visits as u64,
                diff = format!("{:.1e}", shown.max_abs_diff_vs_naive?),
            ))
        })
        .report_field(Report::Headless, "flash", shown)
        .shown_regions(|shown: Res<FlashShown>| shown.regions.clone());
}

fn data(flash: Res<FlashTraces>) -> Value {
    match &flash.latest {
        Some((step, trace)) => json!({
            "step": step,
            "summary": trace.summary_json(),
            "visits": trace.visits.iter().map(|v| v.to_json(trace.t, false)).collect::<Vec<_>>(),
        }),
        None => json!({ "error": flash.error.clone().unwrap_or_else(|| "not traced yet".into()) }),
    }
}

fn shown(shown: Res<FlashShown>, scene: Res<State<Scene>>) -> Value {
    if *scene.get() != Scene::Flash {
        return Value::Null;
    }
    json!({
        "pass": shown.pass,
        "position": shown.position,
        "visits": shown.visits,
        "q_tile": shown.q_tile,
        "k_block": shown.k_block,
        "source": shown.source,
        "step": shown.step,
        "max_abs_diff_vs_naive": shown.max_abs_diff_vs_naive,
    })
}
