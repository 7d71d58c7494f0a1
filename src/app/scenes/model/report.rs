//! What the Model scene reports: the data behind its view (each tensor of
//! the heatmaps' snapshot with its statistics, and the values of the one
//! the inspector shows), and its fields of the headless line (where each
//! layer block is on screen; how often the embedding heatmap changed).

use super::{Heatmap, LayerBlock};
use crate::app::canvas::{SceneCamera, world_rect_to_px};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use crate::app::training::{Run, Snapshots};
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data and fields.
pub fn register(app: &mut App) {
    app.init_resource::<HeatmapUpdates>()
        .add_systems(Last, count_heatmap_updates)
        .scene_data(Scene::Model, data)
        .scene_description(Scene::Model, description)
        .report_field(Report::Headless, "blocks", blocks)
        .report_field(Report::Headless, "lora_updates", lora_updates)
        .report_field(Report::Headless, "model", labels)
        .report_field(
            Report::Headless,
            "heatmap_snapshots",
            |u: Res<HeatmapUpdates>| json!(u.0.len()),
        )
        .report_field(
            Report::Headless,
            "heatmap_distinct",
            |u: Res<HeatmapUpdates>| {
                let mut h = u.0.clone();
                h.sort_unstable();
                h.dedup();
                json!(h.len())
            },
        );
}

/// The pixel hash of the embedding heatmap each time it changed: the check
/// that the heatmaps follow training.
#[derive(Resource, Default)]
struct HeatmapUpdates(Vec<u64>);

fn count_heatmap_updates(heatmaps: Query<&Heatmap>, mut updates: ResMut<HeatmapUpdates>) {
    if let Some(h) = heatmaps
        .iter()
        .find(|h| h.param == "transformer.wte.weight")
        && h.updates > 0
        && updates.0.last() != Some(&h.pixel_hash)
    {
        updates.0.push(h.pixel_hash);
    }
}

/// Where each layer block is in the picture (physical pixels).
fn blocks(
    blocks: Query<&LayerBlock>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
) -> Value {
    let Ok((camera, transform)) = cameras.single() else {
        return json!([]);
    };
    Value::Array(
        blocks
            .iter()
            .filter_map(|b| {
                let rect = world_rect_to_px(camera, transform, b.rect)?;
                Some(json!({ "name": b.name, "rect": rect }))
            })
            .collect(),
    )
}

/// The view the picture is fitted to (physical pixels), and every label of
/// the picture: its text, where it is drawn and the size its type lands at
/// on screen (the tests check that none is cut off, overlaps another or is
/// too small to read).
fn labels(
    scene: Res<State<Scene>>,
    ui_state: Res<crate::app::ui::UiState>,
    texts: Query<
        (
            &Text2d,
            &TextFont,
            &GlobalTransform,
            &bevy::sprite::Anchor,
            &bevy::text::TextLayoutInfo,
            &InheritedVisibility,
        ),
        With<super::SceneItem>,
    >,
    cameras: Query<(&Camera, &GlobalTransform, &Projection), With<SceneCamera>>,
) -> Value {
    if *scene.get() != Scene::Model {
        return Value::Null;
    }
    let Ok((camera, camera_at, projection)) = cameras.single() else {
        return Value::Null;
    };
    let Projection::Orthographic(ortho) = projection else {
        return Value::Null;
    };
    let px_per_unit = camera.target_scaling_factor().unwrap_or(1.0) / ortho.scale;
    let labels: Vec<Value> = texts
            .iter()
            .filter(|(text, .., info, visible)| visible.get() && !text.0.is_empty() && info.size.x > 0.0)
            .filter_map(|(text, font, at, anchor, info, _)| {
                let centre = at.translation().truncate() - anchor.as_vec() * info.size;
                let rect = Rect::from_center_size(centre, info.size);
                let bevy::text::FontSize::Px(size) = font.font_size else {
                    return None;
                };
                Some(json!({
                    "text": text.0,
                    "rect": world_rect_to_px(camera, camera_at, rect)?,
                    "px": size * px_per_unit,
                }))
            })
            .collect();
    json!({
        "view": ui_state.central.map(|(x, y, w, h)| [x, y, x + w, y + h]),
        "labels": labels,
    })
}

/// A fine-tune's update heatmaps, (α/r)·B·A: where each is on screen and
/// the range of what it shows (null until drawn).
fn lora_updates(
    heatmaps: Query<&Heatmap>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
) -> Value {
    let camera = cameras.single().ok();
    let mut out: Vec<Value> = heatmaps
        .iter()
        .filter(|h| h.product.is_some())
        .map(|h| {
            let rect = camera.and_then(|(c, t)| world_rect_to_px(c, t, h.rect));
            json!({
                "name": h.param,
                "shape": [h.rows, h.cols],
                "rect": rect,
                "min": h.stats.map(|s| s.min),
                "max": h.stats.map(|s| s.max),
            })
        })
        .collect();
    out.sort_by_key(|v| v["name"].as_str().unwrap_or_default().to_string());
    Value::Array(out)
}

/// The picture in words: how many heatmaps, of which step, and the one
/// with the widest range of what it shows (the statistics the heatmaps
/// computed when drawn: nothing is read again here, whatever the model's
/// size).
fn description(
    heatmaps: Query<&Heatmap>,
    snapshots: Res<Snapshots>,
    as_it_was: Res<crate::app::timeline::AsItWas>,
    past: Res<crate::app::timeline::PastWeights>,
) -> Option<String> {
    let snap = past.shown(*as_it_was, snapshots.latest.as_ref())?;
    let (name, stats) = heatmaps
        .iter()
        .filter_map(|h| Some((&h.param, h.stats?)))
        .filter(|(_, s)| s.min.is_finite() && s.max.is_finite())
        .max_by(|a, b| (a.1.max - a.1.min).total_cmp(&(b.1.max - b.1.min)).then(b.0.cmp(a.0)))?;
    Some(crate::t!(
        "describe-model",
        tensors = heatmaps.iter().count() as u64,
        step = snap.step,
        name = name.as_str(),
        min = crate::app::canvas::short(stats.min),
        max = crate::app::canvas::short(stats.max),
    ))
}

fn data(
    run: Option<Res<Run>>,
    snapshots: Res<Snapshots>,
    as_it_was: Res<crate::app::timeline::AsItWas>,
    past: Res<crate::app::timeline::PastWeights>,
) -> Value {
    let Some(snap) = past.shown(*as_it_was, snapshots.latest.as_ref()) else {
        return json!({ "error": "no snapshot of the weights yet" });
    };
    let mut names: Vec<&String> = snap.tensors.keys().collect();
    names.sort();
    let tensors: Vec<Value> = names
        .iter()
        .map(|name| {
            let v = &snap.tensors[*name];
            let n = v.len().max(1) as f64;
            let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
            let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
            let (lo, hi) = v
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let shape = run.as_ref().and_then(|r| {
                r.program
                    .tensor_id(name)
                    .map(|id| r.program.tensors[id].shape.clone())
            });
            json!({ "name": name, "shape": shape, "min": lo, "max": hi, "mean": mean, "std": var.sqrt() })
        })
        .collect();
    let inspected = snapshots.inspect.as_ref().and_then(|name| {
        let values = snap.tensors.get(name)?;
        Some(json!({ "name": name, "values": values.as_slice() }))
    });
    json!({
        "step": snap.step,
        // Of the model as it was at a step of the timeline (a frame's kept
        // weights), or as it is now.
        "as_it_was": as_it_was.0,
        "showing": format!("{:?}", snapshots.view),
        "tensors": tensors,
        "inspected": inspected,
    })
}
