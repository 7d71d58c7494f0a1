//! What the Attention scene reports: the data behind its view, the latest
//! probe's rows (what `tinygpt attention --json` prints).

use crate::app::registry::SceneApp;
use crate::app::scenes::Scene;
use crate::app::training::Probes;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Attention, data);
}

fn data(probes: Res<Probes>, frame: Res<super::FrameProbe>) -> Value {
    // On the shared timeline: the time-lapse frame's maps, and its step.
    if let Some((step, r)) = &frame.shown {
        return json!({ "step": step, "timeline": true, "rows": r.to_json_objects() });
    }
    match &probes.latest {
        Some((step, r)) => json!({ "step": step, "rows": r.to_json_objects() }),
        None => {
            json!({ "error": probes.error.clone().unwrap_or_else(|| "not computed yet".into()) })
        }
    }
}
