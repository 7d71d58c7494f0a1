//! The timeline shared by the scenes that show the model's state (issue
//! 52): which step of the run's time-lapse ([`crate::model::timelapse`]) a
//! scene shows instead of the model as it is now, and the control that
//! drags through it. A scene that can show a past step puts
//! [`timeline_bar`] in its toolbar; the step chosen stays when the learner
//! moves to another such scene. The Time-lapse scene plays it (its own
//! toolbar moves the same [`Timeline`]), and the Attention scene shows its
//! maps "as it was" there. The scenes that recompute the model from its
//! weights (*Inside the model*, Take it apart, Model) show it as it was
//! from the weights the frames kept ([`AsItWas`], [`model_weights`]).

use crate::app::engine::Snapshot;
use crate::model::timelapse::{Frame, TimeLapse};
use crate::program::Program;
use bevy::prelude::*;
use bevy_egui::egui;
use std::sync::Arc;

/// The step chosen on the timeline (the frame at or before it is shown).
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeline {
    /// None: the newest frame, following the run as it records.
    pub step: Option<u64>,
}

impl Timeline {
    /// The frame shown: the last at or before the chosen step among those
    /// `keep` accepts (the first such frame if none is that early; the
    /// newest with no step chosen).
    pub fn frame<'a>(&self, t: &'a TimeLapse, keep: impl Fn(&Frame) -> bool) -> Option<(usize, &'a Frame)> {
        let kept: Vec<(usize, &Frame)> = t.frames.iter().enumerate().filter(|(_, f)| keep(f)).collect();
        match self.step {
            None => kept.last().copied(),
            Some(step) => kept.iter().rev().find(|(_, f)| f.step <= step).or(kept.first()).copied(),
        }
    }

    /// The index of the frame shown among all of `t`'s.
    pub fn index(&self, t: &TimeLapse) -> Option<usize> {
        self.frame(t, |_| true).map(|(i, _)| i)
    }

    /// Shows frame `index` of `t` (None: the newest, following the run).
    pub fn show_frame(&mut self, t: &TimeLapse, index: Option<usize>) {
        self.step = index.and_then(|i| t.frames.get(i)).map(|f| f.step);
    }
}

/// Whether the scenes that recompute the model from its weights (*Inside
/// the model*, Take it apart, Model) show it as it was at the timeline's
/// step, from the weights a frame kept, rather than as it is now. One
/// switch for the three, as the step is one for every scene.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsItWas(pub bool);

/// Whether a frame kept its weights (the frames those scenes can show).
pub fn keeps_weights(f: &Frame) -> bool {
    f.weights.is_some()
}

/// The model at the frame the timeline picks among those that kept
/// weights: `latest`'s tensors with the trained parameters replaced by the
/// frame's, at the frame's step, and nothing else (the gradients and
/// AdamW's moments `latest` may hold are of now; a LoRA run's frozen base
/// is the same at every step). None without such a frame, or when the
/// frame's weights do not fit `program`.
pub fn model_as_it_was(
    timeline: &Timeline,
    timelapse: &TimeLapse,
    latest: &Snapshot,
    program: &Program,
) -> Option<Snapshot> {
    let (_, frame) = timeline.frame(timelapse, keeps_weights)?;
    let weights = frame.weights.as_ref()?;
    let mut tensors = std::collections::HashMap::new();
    let mut at = 0;
    for id in program.params() {
        let t = &program.tensors[id];
        let values = if t.is_frozen() {
            latest.tensors.get(&t.name)?.clone()
        } else {
            let end = at + t.numel();
            let kept = Arc::new(weights.get(at..end)?.to_vec());
            at = end;
            kept
        };
        tensors.insert(t.name.clone(), values);
    }
    (at == weights.len()).then_some(Snapshot { step: frame.step, tensors })
}

/// The model as it was, built once for the step shown
/// ([`model_as_it_was`]) and kept while the run and the step stay.
#[derive(Resource, Default)]
pub struct PastWeights {
    /// The run's generation and the frame's step it was built for.
    key: Option<(u64, u64)>,
    snapshot: Option<Arc<Snapshot>>,
    /// Counts the models built (a scene draws again when it changes).
    pub version: u64,
}

impl PastWeights {
    /// The weights the scenes that recompute the model use: `latest`, or
    /// with [`AsItWas`] the model as it was (None until a frame kept
    /// weights).
    pub fn shown<'a>(&'a self, as_it_was: AsItWas, latest: Option<&'a Snapshot>) -> Option<&'a Snapshot> {
        if as_it_was.0 { self.snapshot.as_deref() } else { latest }
    }

    /// The step the loss chart marks while a scene shows the model as it
    /// was ([`crate::app::training::ShownStep`]); None for now.
    pub fn marked_step(&self, as_it_was: AsItWas) -> Option<u64> {
        as_it_was.0.then(|| self.snapshot.as_ref().map(|s| s.step)).flatten()
    }
}

/// Builds the model as it was when the step shown, or the run, changed.
fn keep_past_weights(
    run: Option<Res<crate::app::training::Run>>,
    snapshots: Res<crate::app::training::Snapshots>,
    as_it_was: Res<AsItWas>,
    timeline: Res<Timeline>,
    mut past: ResMut<PastWeights>,
) {
    if !as_it_was.0 {
        return;
    }
    let Some(run) = run else {
        return;
    };
    let Some(t) = run.engine.timelapse() else {
        if past.snapshot.is_some() {
            *past = PastWeights { version: past.version + 1, ..default() };
        }
        return;
    };
    let step = timeline.frame(t, keeps_weights).map(|(_, f)| f.step);
    let key = step.map(|s| (run.generation, s));
    if key == past.key {
        return;
    }
    // A LoRA run's frozen base comes from the latest snapshot: wait for it.
    let built = snapshots
        .latest
        .as_ref()
        .and_then(|latest| model_as_it_was(&timeline, t, latest, &run.program));
    if built.is_none() && key.is_some() && snapshots.latest.is_none() {
        return;
    }
    past.key = key;
    past.snapshot = built.map(Arc::new);
    past.version += 1;
}

/// The shared timeline's resources, and the model as it was kept up to date.
pub struct TimelinePlugin;

impl Plugin for TimelinePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Timeline>()
            .init_resource::<AsItWas>()
            .init_resource::<PastWeights>()
            .add_systems(
                Update,
                keep_past_weights
                    .after(crate::app::schedule::AppSystems::Training)
                    .before(crate::app::schedule::AppSystems::Scene),
            );
    }
}

/// The switch between now and as it was, and on the past the timeline
/// over the frames that kept weights, for the three scenes' toolbars:
/// shown only where the run's time-lapse kept weights (a run whose frames
/// keep none, a model too big or a file saved before they were kept, has
/// only now, and the toolbar no control that could not work).
pub fn as_it_was_bar(
    ui: &mut egui::Ui,
    timelapse: Option<&TimeLapse>,
    timeline: &mut Timeline,
    as_it_was: &mut AsItWas,
) {
    let recorded = timelapse.filter(|t| !t.frames.is_empty());
    let kept = recorded.filter(|t| t.frames.iter().any(keeps_weights));
    if recorded.is_some() && kept.is_none() && as_it_was.0 {
        as_it_was.0 = false;
    }
    if kept.is_none() && !as_it_was.0 {
        return;
    }
    for (value, key, hover) in [
        (false, "timeline-now", "timeline-now-hover"),
        (true, "timeline-as-it-was", "timeline-as-it-was-hover"),
    ] {
        if ui
            .add(egui::Button::selectable(as_it_was.0 == value, crate::t!(key)))
            .on_hover_text(crate::t!(hover))
            .clicked()
        {
            as_it_was.0 = value;
        }
    }
    if as_it_was.0 {
        match kept {
            Some(t) => {
                timeline_bar(ui, t, timeline, keeps_weights);
            }
            // No time-lapse yet (a run starting, or one too short to probe).
            None => {
                ui.weak(crate::t!("timeline-no-weights"));
            }
        }
    }
    ui.separator();
}

/// What a status line starts with when its numbers are of the model as it
/// was (`as_it_was`) at `step`; nothing for the model as it is now.
pub fn as_it_was_note(as_it_was: bool, step: u64) -> String {
    if as_it_was {
        format!("{} · ", crate::t!("timeline-weights-status", step = step as i64))
    } else {
        String::new()
    }
}

/// The timeline's control: a slider over the frames `keep` accepts (by
/// index, so early steps, where frames are dense, get their share), the
/// step shown, and one frame back and forth. Returns whether it changed.
pub fn timeline_bar(ui: &mut egui::Ui, t: &TimeLapse, timeline: &mut Timeline, keep: impl Fn(&Frame) -> bool) -> bool {
    let steps: Vec<u64> = t.frames.iter().filter(|f| keep(f)).map(|f| f.step).collect();
    let Some(last) = steps.len().checked_sub(1) else {
        ui.weak(crate::t!("timeline-empty"));
        return false;
    };
    let mut index = match timeline.step {
        None => last,
        Some(step) => steps.iter().rposition(|&s| s <= step).unwrap_or(0),
    };
    let before = index;
    if ui.small_button("◀").on_hover_text(crate::t!("timeline-back")).clicked() {
        index = index.saturating_sub(1);
    }
    ui.add(
        egui::Slider::new(&mut index, 0..=last)
            .show_value(false)
            .clamping(egui::SliderClamping::Always),
    )
    .on_hover_text(crate::t!("timeline-hover"));
    if ui.small_button("▶").on_hover_text(crate::t!("timeline-forward")).clicked() {
        index = (index + 1).min(last);
    }
    // One piece: a wrapped toolbar never splits "step" from its number.
    ui.add(egui::Label::new(crate::t!("timeline-step", step = steps[index])).wrap_mode(egui::TextWrapMode::Extend));
    if index != before {
        timeline.step = Some(steps[index]);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lapse(steps: &[u64]) -> TimeLapse {
        let mut t = TimeLapse::new(2, 2, 64).unwrap();
        for &step in steps {
            t.frames.push(Frame {
                step,
                loss: None,
                val_loss: None,
                copy_loss: 0.0,
                fresh_loss: 0.0,
                heads: Vec::new(),
                tensors: Vec::new(),
                predictions: Vec::new(),
                attention: (step % 20 == 0).then(Vec::new),
                weights: None,
            });
        }
        t
    }

    #[test]
    fn the_frame_shown_is_the_last_at_or_before_the_step_among_those_kept() {
        let t = lapse(&[0, 10, 20, 30, 40]);
        let all = |_: &Frame| true;
        let maps = |f: &Frame| f.attention.is_some();
        let at = |step| Timeline { step: Some(step) };
        assert_eq!(at(25).frame(&t, all).map(|(i, f)| (i, f.step)), Some((2, 20)));
        assert_eq!(at(39).frame(&t, maps).map(|(_, f)| f.step), Some(20));
        assert_eq!(at(1000).frame(&t, maps).map(|(_, f)| f.step), Some(40));
        assert_eq!(at(0).frame(&t, |f| f.step > 5).map(|(_, f)| f.step), Some(10));
        assert!(at(0).frame(&lapse(&[]), all).is_none());
        // No step chosen: the newest (of those kept).
        let newest = Timeline::default();
        assert_eq!(newest.frame(&t, |f| f.step < 35).map(|(_, f)| f.step), Some(30));
        assert_eq!(newest.index(&t), Some(4));
        // A frame shown by its index is its step, and stays when frames come.
        let mut shown = Timeline::default();
        shown.show_frame(&t, Some(1));
        assert_eq!(shown.step, Some(10));
        assert_eq!(shown.index(&lapse(&[0, 10, 20, 30, 40, 50])), Some(1));
        shown.show_frame(&t, None);
        assert_eq!(shown, newest);
    }
}
