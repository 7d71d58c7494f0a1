//! What the Time-lapse scene reports: the data behind its view (the
//! time-lapse as `tinygpt timelapse --json` prints it), its field of the
//! headless line (the frame shown, its best head, where one formed) and
//! its egui regions.

use super::{FORMED, TimelapseShown, TimelapseView, timelapse};
use crate::app::registry::{Report, SceneApp};
use crate::app::scenes::Scene;
use crate::app::timeline::Timeline;
use crate::app::training::Run;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data, field and regions.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Timelapse, |run: Option<Res<Run>>| {
        match run.as_deref().and_then(timelapse) {
            Some(t) => t.to_json(FORMED),
            None => json!({ "error": "this run has no time-lapse yet" }),
        }
    })
    .scene_description(Scene::Timelapse, description)
    .report_field(Report::Headless, "timelapse", headless)
    .shown_regions(|shown: Res<TimelapseShown>| shown.regions.clone());
}

/// The picture in words: the frame, its copy loss, its strongest induction
/// head, and when one formed (or, for a run without frames, the scene's
/// own words for that).
fn description(run: Option<Res<Run>>, timeline: Res<Timeline>) -> Option<String> {
    let Some(t) = run.as_deref().and_then(timelapse) else {
        return Some(crate::t!("timelapse-none"));
    };
    let index = timeline.index(t)?;
    let f = &t.frames[index];
    let best = f.best_induction()?;
    let onset = match t.induction_onset(FORMED) {
        Some((at, _)) => crate::t!("describe-onset", step = at.step),
        None => crate::t!("describe-no-onset"),
    };
    Some(crate::t!(
        "describe-timelapse",
        frame = (index + 1) as u64,
        frames = t.frames.len() as u64,
        step = f.step,
        copy = crate::app::canvas::short(f.copy_loss),
        layer = best.layer as u64,
        head = best.head as u64,
        score = format!("{:.2}", best.induction),
        onset = onset,
    ))
}

fn headless(
    run: Option<Res<Run>>,
    view: Res<TimelapseView>,
    timeline: Res<Timeline>,
    scene: Res<State<Scene>>,
) -> Value {
    if *scene.get() != Scene::Timelapse {
        return Value::Null;
    }
    let Some(t) = run.as_deref().and_then(timelapse) else {
        return json!({ "frames": 0 });
    };
    let index = timeline.index(t).expect("frames are not empty");
    let f = &t.frames[index];
    let probe = &t.probe[0];
    let m = probe.len() / 2;
    json!({
        "frames": t.frames.len(),
        "frame": index,
        "step": f.step,
        "playing": view.playing,
        "copy_loss": f.copy_loss,
        "best": f.best_induction(),
        "onset": t.induction_onset(FORMED).map(|(at, h)| json!({ "step": at.step, "layer": h.layer, "head": h.head })),
        "copied_right": (m..probe.len() - 1).filter(|&i| f.predictions.get(i) == probe.get(i + 1)).count(),
        "maps_step": super::maps_frame(t, index).map(|m| m.step),
    })
}
