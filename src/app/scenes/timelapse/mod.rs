//! The "Time-lapse" scene (issue 52): the run's time-lapse
//! ([`crate::model::timelapse`]), recorded as it trains (or shipped with a
//! gallery model), scrubbed frame by frame or played as an animation:
//!
//! - every head's attention on the probe string (different random letters,
//!   written twice) at the frame's step, the head with the highest
//!   induction score outlined;
//! - the probe string with the model's greedy next byte under each
//!   position at that step: the copied half turns right when an induction
//!   head forms;
//! - every head's induction and previous-token score across the run, and
//!   the losses (training, validation, on the copies and on the fresh
//!   letters), with the scrubbed step and the step where a head's
//!   induction score passed 0.5 marked.
//!
//! The numbers are the frames' own: each was computed by the run's
//! backend from the weights of its step (`tinygpt timelapse --checkpoint
//! F --json` prints the same frames). A live run keeps recording while
//! the learner scrubs; the view follows the newest frame until the
//! learner picks another.

mod draw;
mod report;

use super::Scene;
use crate::app::lesson::LessonFocus;
use crate::app::training::{Run, ShownStep};
use crate::app::timeline::Timeline;
use crate::lesson::Focus;
use crate::model::timelapse::{Frame, TimeLapse};
use bevy::prelude::*;
use bevy_egui::EguiPrimaryContextPass;
use std::sync::Arc;

pub use crate::model::timelapse::FORMED;
/// Seconds per frame while playing.
const PLAY_SECONDS: f32 = 0.2;

/// How the scene plays the shared [`Timeline`] (the frame shown is the
/// timeline's: a step chosen here is where the Attention scene's "as it
/// was" stands, and the other way round); the toolbar and lessons edit it.
#[derive(Resource, Debug, Clone, Default)]
pub struct TimelapseView {
    /// Playing from the shown frame to the newest.
    pub playing: bool,
    /// Seconds since the last frame advanced while playing.
    since: f32,
    /// A lesson's step to show, and the run (its generation) it was last
    /// shown in: a run that comes after (the lesson's gallery model,
    /// opened after the step) is shown at it too, until the learner moves.
    wanted_step: Option<(u64, Option<u64>)>,
}

impl TimelapseView {
    /// Shows the frame at `step` (the last at or before it), stopped.
    pub fn show_step(&mut self, timeline: &mut Timeline, step: u64) {
        timeline.step = Some(step);
        self.playing = false;
    }

    /// The learner picked a frame (or played): a lesson's step no longer
    /// holds the view.
    pub fn moved(&mut self) {
        self.wanted_step = None;
    }
}

/// What the egui body last drew, for the reports.
#[derive(Resource, Default)]
struct TimelapseShown {
    regions: crate::app::registry::Regions,
}

/// The run's time-lapse, if it has one.
pub fn timelapse(run: &Run) -> Option<&Arc<TimeLapse>> {
    run.engine.timelapse().filter(|t| !t.frames.is_empty())
}

/// The frame whose attention maps stand for `index`: itself, or the last
/// before it that kept its maps ([`crate::model::timelapse::MAP_BUDGET`]).
pub fn maps_frame(t: &TimeLapse, index: usize) -> Option<&Frame> {
    t.frames[..=index]
        .iter()
        .rev()
        .find(|f| f.attention.is_some())
}

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.init_resource::<TimelapseView>()
            .init_resource::<Timeline>()
            .init_resource::<TimelapseShown>()
            .add_observer(lesson_focus)
            .add_systems(OnExit(Scene::Timelapse), |mut shown: ResMut<ShownStep>| {
                shown.0 = None;
            })
            .add_systems(
                Update,
                (apply_wanted, play, mark_on_the_loss_chart)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Timelapse)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                draw::draw
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Timelapse)),
            );
    }
}

/// A lesson's step, once the run has a time-lapse to show it in (and again
/// in a run that replaces it).
fn apply_wanted(run: Option<Res<Run>>, mut view: ResMut<TimelapseView>, mut timeline: ResMut<Timeline>) {
    let Some((step, shown_in)) = view.wanted_step else {
        return;
    };
    let Some(run) = run else { return };
    if shown_in == Some(run.generation) {
        return;
    }
    if timelapse(&run).is_none() {
        return;
    }
    view.show_step(&mut timeline, step);
    view.wanted_step = Some((step, Some(run.generation)));
}

/// Advances the shown frame while playing; stops at the newest.
fn play(time: Res<Time>, run: Option<Res<Run>>, mut view: ResMut<TimelapseView>, mut timeline: ResMut<Timeline>) {
    if !view.playing {
        return;
    }
    let Some(t) = run.as_deref().and_then(timelapse) else {
        return;
    };
    let last = t.frames.len() - 1;
    view.since += time.delta_secs();
    if view.since < PLAY_SECONDS {
        return;
    }
    view.since = 0.0;
    let next = timeline.index(t).map_or(0, |i| i + 1);
    if next >= last {
        timeline.show_frame(t, None);
        view.playing = false;
    } else {
        timeline.show_frame(t, Some(next));
    }
}

/// The loss chart marks the frame shown (none while it follows the newest).
fn mark_on_the_loss_chart(
    run: Option<Res<Run>>,
    timeline: Res<Timeline>,
    mut shown: ResMut<ShownStep>,
) {
    let step = run.as_deref().and_then(timelapse).and_then(|t| {
        timeline.step?;
        timeline.frame(t, |_| true).map(|(_, f)| f.step)
    });
    if shown.0 != step {
        shown.0 = step;
    }
}

/// A lesson step on this scene: the frame at a step.
fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<TimelapseView>) {
    if event.scene != Scene::Timelapse {
        return;
    }
    if let Focus::Step(step) = event.focus {
        view.wanted_step = Some((step, None));
        view.playing = false;
    }
}
