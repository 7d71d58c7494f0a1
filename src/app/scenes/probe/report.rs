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
    .scene_description(Scene::Probe, |compute: Res<ProbeCompute>| description(&compute))
    .report_field(Report::Headless, "probe", headless)
    .report_field(Report::Page, "probe", page);
}

/// The picture in words: the tool, and its headline numbers.
fn description(compute: &ProbeCompute) -> Option<String> {
    use crate::app::access::describe::{guesses, lens_place};
    use crate::app::canvas::{chip_text, short};
    let (q, Ok(a)) = compute.last()? else { return None };
    let numbers = match a {
        Answer::Lens(g) => {
            let last = g.lens.len().checked_sub(1)?;
            let points: Vec<String> = g
                .lens
                .iter()
                .enumerate()
                .map(|(point, at)| {
                    format!("{}: {}", lens_place(point, last), at.last().map(|g| guesses(g, 1)).unwrap_or_default())
                })
                .collect();
            crate::t!("describe-probe-lens", points = points.join(" → "))
        }
        Answer::Knockout(k) => {
            let most = k.ablation.parts.iter().max_by(|a, b| a.delta.total_cmp(&b.delta))?;
            let part = match (most.head, most.mlp) {
                (Some(h), _) => crate::interventions::Part::Head { layer: most.layer, head: h }.label(),
                _ => crate::interventions::Part::Mlp { layer: most.layer }.label(),
            };
            let top = |g: &[crate::flow::Guess]| g.first().map(|g| chip_text(g.byte)).unwrap_or_default();
            crate::t!(
                "describe-probe-knockout",
                before = short(k.before.0),
                after = short(k.after.0),
                top_before = top(&k.before.1),
                top_after = top(&k.after.1),
                part = part,
                delta = short(most.delta),
            )
        }
        Answer::Patch(p, ..) => {
            let (layer, position, restored) = p
                .restored
                .iter()
                .enumerate()
                .flat_map(|(l, row)| row.iter().enumerate().map(move |(t, &r)| (l, t, r)))
                .max_by(|a, b| a.2.total_cmp(&b.2))?;
            crate::t!(
                "describe-probe-patch",
                restored = format!("{:.0}%", restored * 100.0),
                layer = layer as u64,
                position = position as u64,
            )
        }
        Answer::Why(w) => {
            let (part, contribution) = w.parts.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
            crate::t!(
                "describe-probe-why",
                a = chip_text(w.a),
                b = chip_text(w.b),
                total = short(w.total),
                part = part.as_str(),
                contribution = short(*contribution),
            )
        }
    };
    Some(crate::t!("describe-probe", tool = q.tool.title(), step = q.step, numbers = numbers))
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
