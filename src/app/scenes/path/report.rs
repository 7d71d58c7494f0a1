//! What the flow scene reports: the data behind its view (the flow as
//! `tinygpt flow --backward --json` prints it, with the weights' step), and
//! its field of the headless line: the zoom, the pass, the order the pulses
//! took, and where each node, label and chip is on screen.

use super::compute::FlowCompute;
use super::{FlowItem, FlowPass, FlowView, Shown};
use crate::app::canvas::{SceneCamera, SceneRegion, world_rect_to_px};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data and field.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Path, data)
        .scene_description(Scene::Path, |compute: Res<FlowCompute>| {
            let c = compute.flow()?;
            Some(crate::t!(
                "describe-path",
                text = crate::app::access::describe::prompt_text(c.flow.tokens.get(..=c.flow.position).unwrap_or(&c.flow.tokens)),
                step = c.step,
                guesses = crate::app::access::describe::guesses(&crate::flow::top5(&c.flow.probs), 3),
            ))
        })
        .report_field(Report::Headless, "path", headless)
        .report_field(Report::Page, "path", page);
}

/// The page's field (the browser test reads it): what the flow shows and
/// where it was computed.
fn page(scene: Res<State<Scene>>, view: Res<FlowView>, compute: Res<FlowCompute>) -> Value {
    if *scene.get() != Scene::Path {
        return Value::Null;
    }
    json!({
        "zoom": format!("{:?}", view.zoom),
        "pass": if view.pass == FlowPass::Forward { "forward" } else { "backward" },
        "nodes": compute.flow().map(|c| c.flow.nodes.len()),
        "top": compute.flow().map(|c| crate::flow::top5(&c.flow.probs)[0].byte),
        "backend": compute.latest.as_ref().map(|a| &a.backend),
        "device": compute.latest.as_ref().map(|a| a.device),
        "error": compute.error_message(),
    })
}

fn data(compute: Res<FlowCompute>) -> Value {
    match (compute.flow(), compute.error_message()) {
        (_, Some(e)) => json!({ "error": e }),
        (Some(c), None) => {
            let mut v = c.flow.to_json();
            v["step"] = json!(c.step);
            v["target_in_prompt"] = json!(c.target_in_prompt);
            v["worked"] = json!(c.worked);
            v
        }
        (None, None) => json!({ "error": "not computed yet" }),
    }
}

#[allow(clippy::type_complexity)]
fn headless(
    scene: Res<State<Scene>>,
    view: Res<FlowView>,
    compute: Res<FlowCompute>,
    shown: Res<Shown>,
    regions: Query<&SceneRegion, With<FlowItem>>,
    labels: Query<
        (
            &Text2d,
            &GlobalTransform,
            &bevy::sprite::Anchor,
            &bevy::text::TextLayoutInfo,
            &InheritedVisibility,
        ),
        With<FlowItem>,
    >,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
) -> Value {
    if *scene.get() != Scene::Path {
        return Value::Null;
    }
    let Ok((camera, camera_at)) = cameras.single() else {
        return Value::Null;
    };
    // Each label's box (Text2d is laid out in world units here: the
    // headless target's scale factor is 1).
    let labels: Vec<Value> = labels
        .iter()
        .filter(|(.., visible)| visible.get())
        .filter_map(|(text, at, anchor, info, _)| {
            let centre = at.translation().truncate() - anchor.as_vec() * info.size;
            let rect = Rect::from_center_size(centre, info.size);
            Some(json!({ "text": text.0, "rect": world_rect_to_px(camera, camera_at, rect)? }))
        })
        .collect();
    let nodes: Vec<Value> = shown
        .layout
        .as_ref()
        .map(|l| {
            l.nodes
                .iter()
                .filter(|s| s.shown)
                .filter_map(|s| {
                    let name = &compute.flow()?.flow.nodes.get(s.node)?.name;
                    Some(json!({ "name": name, "rect": world_rect_to_px(camera, camera_at, s.row)? }))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut region_names: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
    region_names.sort_unstable();
    json!({
        "zoom": format!("{:?}", view.zoom),
        "pass": if view.pass == FlowPass::Forward { "forward" } else { "backward" },
        "playing": view.playing,
        "progress": view.progress,
        "visited": view.visited,
        "position": compute.flow().map(|c| c.flow.position),
        "step": compute.flow().map(|c| c.step),
        "backend": compute.latest.as_ref().map(|a| &a.backend),
        "device": compute.latest.as_ref().map(|a| a.device),
        "error": compute.error_message(),
        "nodes": nodes,
        "regions": region_names,
        "labels": labels,
    })
}
