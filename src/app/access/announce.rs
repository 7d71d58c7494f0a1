//! Status changes said to a screen reader through a polite live region
//! (the tree's `Status` node; in the browser, an `aria-live="polite"`
//! element): a lesson's step, training started, paused or finished, a
//! status message (a checkpoint saved, a preset loaded) and errors. One
//! announcement holds for [`HOLD_S`] seconds, so a burst of changes is
//! not read over itself; newer ones wait and are joined.

use crate::app::lesson::LessonPlayer;
use crate::app::training::{AppStatus, Run, RunState};
use bevy::prelude::*;

/// How long an announcement holds before the next replaces it.
pub const HOLD_S: f64 = 1.5;

/// What the live region says now, and what waits.
#[derive(Resource, Default, Debug, Clone)]
pub struct Announcer {
    /// The text said now (empty at first).
    pub current: String,
    /// Counts announcements made (the page's mirror re-says on change).
    pub said: u64,
    waiting: Vec<String>,
    since: f64,
}

impl Announcer {
    /// Queues `text` to be said.
    pub fn say(&mut self, text: impl Into<String>) {
        let text = text.into();
        if !text.is_empty() && self.waiting.last() != Some(&text) {
            self.waiting.push(text);
        }
    }

    /// Says what waits, once the current announcement has held.
    fn tick(&mut self, now: f64) {
        if self.waiting.is_empty() || (self.said > 0 && now - self.since < HOLD_S) {
            return;
        }
        self.current = std::mem::take(&mut self.waiting).join(". ");
        self.said += 1;
        self.since = now;
    }
}

pub struct AnnouncePlugin;

impl Plugin for AnnouncePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<Announcer>()
            .add_systems(PostUpdate, (watch, tick).chain());
    }
}

/// What was last seen of the things announced.
#[derive(Default)]
struct Seen {
    lesson: Option<(String, usize)>,
    run: Option<(u64, RunState)>,
    info: Option<String>,
    errors: usize,
}

fn watch(
    lesson: Res<LessonPlayer>,
    run: Option<Res<Run>>,
    status: Res<AppStatus>,
    mut announcer: ResMut<Announcer>,
    mut seen: Local<Seen>,
) {
    let step = lesson.lesson.as_ref().map(|(name, l)| (name.clone(), lesson.step, l));
    let key = step.as_ref().map(|(n, s, _)| (n.clone(), *s));
    if key != seen.lesson {
        if let Some((_, s, l)) = &step
            && let Some(this) = l.steps.get(*s)
        {
            announcer.say(crate::t!(
                "access-lesson-step",
                step = (*s + 1) as u64,
                steps = l.steps.len() as u64,
                title = this.title.as_str()
            ));
        }
        seen.lesson = key;
    }
    let state = run.as_ref().map(|r| (r.generation, r.state));
    if state != seen.run {
        if let (Some((generation, now)), before) = (state, seen.run)
            && before.is_none_or(|(g, _)| g == generation)
        {
            let key = match now {
                RunState::Training => Some("access-training"),
                RunState::Paused => Some("access-paused"),
                RunState::Diverged => Some("access-diverged"),
                // The finished message comes as the status line's info.
                RunState::Finished | RunState::Ready => None,
            };
            if let Some(key) = key
                && before.is_some()
            {
                announcer.say(crate::i18n::tr(key, &[]));
            }
        }
        seen.run = state;
    }
    if status.info != seen.info {
        if let Some(info) = &status.info {
            announcer.say(info.clone());
        }
        seen.info = status.info.clone();
    }
    if status.errors.len() != seen.errors {
        for e in status.errors.iter().skip(seen.errors) {
            announcer.say(crate::t!("access-error", message = e.as_str()));
        }
        seen.errors = status.errors.len();
    }
}

pub fn tick(time: Res<Time<Real>>, mut announcer: ResMut<Announcer>) {
    let now = time.elapsed_secs_f64();
    if !announcer.waiting.is_empty() {
        announcer.tick(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_joined_and_waits_for_the_last_to_hold() {
        let mut a = Announcer::default();
        a.say("one");
        a.tick(0.0);
        assert_eq!((a.current.as_str(), a.said), ("one", 1));
        a.say("two");
        a.say("three");
        a.tick(1.0);
        assert_eq!(a.current, "one");
        a.tick(1.6);
        assert_eq!((a.current.as_str(), a.said), ("two. three", 2));
        a.say("three");
        a.say("three");
        a.tick(4.0);
        assert_eq!(a.current, "three");
    }
}
