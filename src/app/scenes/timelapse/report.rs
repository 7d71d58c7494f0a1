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
    .report_field(Report::Headless, "timelapse", headless)
    .shown_regions(|shown: Res<TimelapseShown>| shown.regions.clone());
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
