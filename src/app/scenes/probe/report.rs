//! What the Take-it-apart scene reports: the data behind its view (the
//! tool's numbers, as its CLI prints them) and its field of the headless
//! line (the tool, its numbers, the knockouts).

use super::ProbeView;
use super::compute::{Answer, ProbeCompute};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use crate::app::training::Knockouts;
use bevy::prelude::*;
use serde_json::{Value, json};

pub fn register(app: &mut App) {
    app.scene_data(Scene::Probe, |compute: Res<ProbeCompute>| {
        answer_json(&compute)
    })
    .report_field(Report::Headless, "probe", headless)
    .report_field(Report::Page, "probe", page);
}

/// The page's field (the browser test reads it): the tool, and whether its
/// numbers arrived.
fn page(scene: Res<State<Scene>>, compute: Res<ProbeCompute>, view: Res<ProbeView>) -> Value {
    if *scene.get() != Scene::Probe {
        return Value::Null;
    }
    json!({
        "showing": view.tool.key(),
        "tool": compute.latest.as_ref().map(|a| a.question.tool.key()),
        "backend": compute.latest.as_ref().map(|a| &a.backend),
        "device": compute.latest.as_ref().map(|a| a.device),
        "error": compute.error_message(),
    })
}

fn answer_json(compute: &ProbeCompute) -> Value {
    match compute.last() {
        None => json!({ "error": "not computed yet" }),
        Some((q, Err(e))) => json!({ "tool": q.tool.key(), "error": e }),
        Some((q, Ok(a))) => {
            let numbers = match a {
                Answer::Lens(g) => json!(g),
                Answer::Knockout(k) => json!({
                    "ablation": k.ablation,
                    "before": { "loss": k.before.0, "top5": k.before.1 },
                    "after": { "loss": k.after.0, "top5": k.after.1 },
                }),
                Answer::Patch(p, clean, corrupt) => {
                    let mut v = json!(p);
                    v["clean"] = json!(String::from_utf8_lossy(clean));
                    v["corrupt"] = json!(String::from_utf8_lossy(corrupt));
                    v
                }
                Answer::Why(w) => json!(w),
            };
            json!({
                "tool": q.tool.key(),
                "step": q.step,
                "as_it_was": q.as_it_was,
                "knockouts": q.knockouts,
                "backend": compute.latest.as_ref().map(|l| &l.backend),
                "device": compute.latest.as_ref().map(|l| l.device),
                "numbers": numbers,
            })
        }
    }
}

fn headless(
    scene: Res<State<Scene>>,
    compute: Res<ProbeCompute>,
    view: Res<ProbeView>,
    knockouts: Res<Knockouts>,
) -> Value {
    if *scene.get() != Scene::Probe {
        return Value::Null;
    }
    let mut v = answer_json(&compute);
    v["showing"] = json!(view.tool.key());
    v["knocked_out"] = json!(knockouts.0.iter().map(|p| p.label()).collect::<Vec<_>>());
    v
}
