//! What the Speedup scene reports: the data behind its view (the bench's
//! results and the per-kernel timing), its field of the headless line and
//! of the page's report (the bench's state), and its egui regions.

use super::{SpeedupShown, SpeedupView};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data, fields and regions.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Speedup, |view: Res<SpeedupView>| {
        json!({
            "results": view.results,
            "kernels": view.kernels_json(),
        })
    })
    .scene_description(Scene::Speedup, |view: Res<SpeedupView>| {
        // The last measurement with a CPU one to compare against.
        let shown = view.results.iter().rev().find(|r| r.gpu_over_cpu.is_some());
        Some(match shown {
            Some(r) => crate::t!(
                "describe-speedup",
                results = view.results.len() as u64,
                preset = r.preset.as_str(),
                ms = format!("{:.2}", r.median_ms),
                backend = r.backend.as_str(),
                ratio = format!("{:.1}", r.gpu_over_cpu.unwrap_or(1.0)),
            ),
            None => crate::t!("describe-speedup-none"),
        })
    })
    .report_field(Report::Headless, "speedup", headless)
    .report_field(Report::Page, "speedup", |view: Res<SpeedupView>| {
        json!({
            "running": view.running(),
            "message": view.message,
            "results": view.results.iter().map(|r| json!({
                "preset": r.preset, "backend": r.backend, "median_ms": r.median_ms,
                "steps": r.steps, "device": r.device, "timing": r.timing,
                "gpu_over_cpu": r.gpu_over_cpu,
            })).collect::<Vec<_>>(),
            "kernels": match &view.kernels {
                Some(Ok(k)) => json!({
                    "preset": k.preset, "source": k.source, "note": k.note,
                    "dispatches": k.rows.len(), "total_ms": k.total_ms(),
                }),
                Some(Err(e)) => json!({ "error": e }),
                None => Value::Null,
            },
        })
    })
    .shown_regions(|shown: Res<SpeedupShown>| shown.regions.clone());
}

fn headless(view: Res<SpeedupView>, scene: Res<State<Scene>>) -> Value {
    if *scene.get() != Scene::Speedup {
        return Value::Null;
    }
    json!({
        "running": view.running(),
        "frames_since_cancel": view.frames_since_cancel,
        "paused_run_at": view.paused_run_at,
        "message": view.message,
        "results": view.results,
        "kernels": view.kernels_json(),
    })
}
