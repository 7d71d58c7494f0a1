//! What the walk-through reports: the data behind it (the pass as
//! `tinygpt flow --all-positions --backward --json` prints it, with the
//! weights' step), and its field of the headless line: the tour's beats,
//! the beat shown, the beats played, and where each tensor and each shown
//! label is on screen.

use super::compute::WalkCompute;
use super::draw::{ScreenLabel, SlabQuad};

use super::colour::CellLens;
use super::{Shown, WalkView, state_at};
use crate::app::canvas::SceneCamera;
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data and fields.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Walk, data)
        .scene_description(Scene::Walk, description)
        .report_field(Report::Headless, "walk", headless)
        .report_field(Report::Page, "walk", page);
}

fn data(compute: Res<WalkCompute>) -> Value {
    match (compute.computed(), compute.error_message()) {
        (_, Some(e)) => json!({ "error": e }),
        (Some(c), None) => {
            let mut v = c.flow.to_json();
            v["step"] = json!(c.step);
            v["as_it_was"] = json!(compute.latest.as_ref().is_some_and(|a| a.question.as_it_was));
            v
        }
        (None, None) => json!({ "error": "not computed yet" }),
    }
}

/// The picture in words: the beat (its narration's title), then what the
/// narration reads there (the logit lens, the heads' looks).
fn description(
    shown: Res<Shown>,
    view: Res<WalkView>,
    compute: Res<WalkCompute>,
    run: Option<Res<crate::app::training::Run>>,
) -> Option<String> {
    let walk = shown.walk.as_ref()?;
    let k = view.beat().min(walk.beats.len().checked_sub(1)?);
    let (title, _) = super::panel::narration(&shown, &compute, run.as_deref()?, k)?;
    let reads = compute
        .computed()
        .map(|c| {
            let r = super::context::context(&c.flow, &walk.beats[k]);
            [super::context::lens_line(&c.flow, &r), super::context::heads_line(&c.flow, &r)]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let line = crate::t!(
        "describe-walk",
        beat = (k + 1) as u64,
        beats = walk.beats.len() as u64,
        title = title,
        reads = reads,
    );
    Some(line.trim_end().to_string())
}

/// The page's field (the browser test reads it).
fn page(scene: Res<State<Scene>>, view: Res<WalkView>, shown: Res<Shown>, compute: Res<WalkCompute>) -> Value {
    if *scene.get() != Scene::Walk {
        return Value::Null;
    }
    json!({
        "beat": view.beat(),
        "beats": shown.walk.as_ref().map(|w| w.beats.len()),
        "playing": view.playing,
        "device": compute.latest.as_ref().map(|a| a.device),
        "error": compute.error_message(),
    })
}

/// Where a world box lands on the target, in physical pixels.
fn px_box(camera: &Camera, at: &GlobalTransform, corners: &[Vec3]) -> Option<[f32; 4]> {
    let scale = camera.target_scaling_factor().unwrap_or(1.0);
    let mut lo = Vec2::splat(f32::INFINITY);
    let mut hi = Vec2::splat(f32::NEG_INFINITY);
    for &c in corners {
        let p = camera.world_to_viewport(at, c).ok()? * scale;
        lo = lo.min(p);
        hi = hi.max(p);
    }
    Some([lo.x.round(), lo.y.round(), hi.x.round(), hi.y.round()])
}

#[allow(clippy::type_complexity)]
fn headless(
    scene: Res<State<Scene>>,
    view: Res<WalkView>,
    shown: Res<Shown>,
    compute: Res<WalkCompute>,
    quads: Query<&SlabQuad>,
    labels: Query<(
        &Text2d,
        &bevy::sprite::Anchor,
        &GlobalTransform,
        &bevy::text::TextLayoutInfo,
        &InheritedVisibility,
    ), With<ScreenLabel>>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    (numbers, sweep): (Res<super::numbers::NumbersShown>, Res<super::sweep::Sweep>),
    run: Option<Res<crate::app::training::Run>>,
) -> Value {
    if *scene.get() != Scene::Walk {
        return Value::Null;
    }
    let (Some(walk), Ok((camera, camera_at))) = (&shown.walk, cameras.single()) else {
        return json!({ "error": compute.error_message().unwrap_or("not drawn yet") });
    };
    let k = view.beat().min(walk.beats.len() - 1);
    let (focused, gradient) = state_at(walk, k);
    let drawn: Vec<usize> = quads.iter().map(|q| q.slab).collect();
    let slabs: Vec<Value> = walk
        .slabs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let r = s.rect();
            let z = s.corner.z;
            let corners = [
                Vec3::new(r.min.x, r.min.y, z),
                Vec3::new(r.max.x, r.min.y, z),
                Vec3::new(r.min.x, r.max.y, z),
                Vec3::new(r.max.x, r.max.y, z),
            ];
            json!({
                "name": s.name,
                "rows": s.rows,
                "cols": s.cols,
                "family": s.family,
                // A weight drawn as its transpose (stored in × out).
                "transposed": matches!(s.source, super::layout::Source::Param { transposed: true, .. }),
                "px": px_box(camera, camera_at, &corners),
                "focused": focused[i],
                "gradient": gradient[i] == CellLens::Gradient,
                "update": gradient[i] == CellLens::Update,
                "drawn": drawn.contains(&i),
            })
        })
        .collect();
    let labels: Vec<Value> = labels
        .iter()
        .filter(|(.., v)| v.get())
        .map(|(text, anchor, at, layout, _)| {
            // The box of the laid-out text, scaled as drawn, from its
            // anchor (bottom-left, bottom-centre or bottom-right).
            let size = layout.size * at.scale().x;
            let right = at.right() * size.x;
            let up = at.up() * size.y;
            let origin = at.translation() - right * (anchor.as_vec().x + 0.5) - up * (anchor.as_vec().y + 0.5);
            let corners = [origin, origin + right, origin + up, origin + right + up];
            json!({ "text": text.0, "px": px_box(camera, camera_at, &corners) })
        })
        .collect();
    // The kernels the run's training step ran for each beat's op (the
    // GPU's plan; none on the CPU), and the narration's line about them.
    let kernels: Vec<Vec<&str>> = walk
        .beats
        .iter()
        .map(|b| run.as_deref().map(|r| super::kernels::of_beat(&r.program, &r.entry_kernels, b)).unwrap_or_default())
        .collect();
    let mixed = run.as_deref().is_some_and(|r| r.precision == crate::backends::Precision::Mixed);
    let beats: Vec<Value> = walk
        .beats
        .iter()
        .zip(&kernels)
        .map(|(b, kernels)| {
            json!({
                "kind": b.kind,
                "pass": b.pass,
                "node": b.node,
                "layer": b.layer,
                "output": b.slabs.first(),
                "training_kernels": kernels,
            })
        })
        .collect();
    let precision_line = super::kernels::sentence(mixed, walk.beats[k].pass, &kernels[k]);
    json!({
        "beat": k,
        "t": view.t,
        "playing": view.playing,
        "beats": beats,
        "visited": view.visited,
        "slabs": slabs,
        "labels": labels,
        "zoom": view.look.zoom,
        "theme": if super::colour::light() { "light" } else { "dark" },
        "numbers": numbers.count,
        "numbered": numbers.first.iter().map(|(slab, row, col, gradient, text)| {
            json!({ "slab": slab, "row": row, "col": col, "gradient": gradient, "text": text })
        }).collect::<Vec<_>>(),
        "device": compute.latest.as_ref().map(|a| a.device),
        "step": compute.computed().map(|c| c.step),
        "as_it_was": compute.latest.as_ref().map(|a| a.question.as_it_was),
        // The weights AdamW's beat has an update for (0 until the moments
        // are read).
        "updates": compute.computed().map_or(0, |c| c.updates.len()),
        // The dot product's sweep running: the terms added so far and their
        // sum (forward also its weight row and input column).
        "sweep": sweep.dot().map(|d| {
            let forward = d.kind == super::sweep::SweepKind::Output;
            let first = d.pairs.first().copied();
            json!({
                "kind": d.kind.key(),
                "index": sweep.current,
                "sweeps": sweep.dots.len(),
                "out": [d.out.0, d.out.1, d.out.2],
                "factors": first.map(|[a, b]| [a.0, b.0]),
                "weight": forward.then(|| first.map(|[a, _]| a.0)).flatten(),
                "input": forward.then(|| first.map(|[_, b]| b.0)).flatten(),
                "row": forward.then_some(d.out.1),
                "column": forward.then_some(d.out.2),
                "terms": d.terms.len(),
                "added": sweep.added,
                "partial": d.partial(sweep.added),
                "bias": d.bias,
            })
        }),
        // The narration's logit lens and head view at the last byte.
        "context": compute.computed().map(|c| super::context::context(&c.flow, &walk.beats[k])),
        // In a mixed-precision run, what the narration says the training
        // step ran this beat's op on.
        "precision_line": precision_line,
    })
}
