//! A workshop link (issue 38): `#lesson=NAME&locked=1` in the browser,
//! `tinygpt app --lesson NAME --locked` natively, opens one lesson with no
//! way to wander off, for a teacher who sends one link to a class. Locked,
//! the app shows the lesson's scene and narration and its own controls
//! (Back, Next, the questions) and nothing else: no scene switcher, no run
//! or chart panels, no files taken in, no way to end the lesson.

use bevy::prelude::*;

/// Whether this app is locked to its lesson.
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workshop {
    pub locked: bool,
}

/// What a locked app says to a file dropped on it, in the current language.
pub fn no_files() -> String {
    crate::t!("workshop-no-files")
}

/// What the panels drew this frame, for the headless line and the page's
/// report (the tests check that a locked app hides what it should).
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PanelsShown {
    /// The top bar's scene switcher.
    pub scene_tabs: bool,
    /// The left panel: the run, its files and settings.
    pub run_panel: bool,
    /// The right panel: the loss chart and samples.
    pub charts: bool,
    /// The lesson's "end lesson" button.
    pub end_lesson: bool,
}

impl PanelsShown {
    pub fn to_json(self, workshop: Workshop) -> serde_json::Value {
        serde_json::json!({
            "locked": workshop.locked,
            "scene_tabs": self.scene_tabs,
            "run_panel": self.run_panel,
            "charts": self.charts,
            "end_lesson": self.end_lesson,
        })
    }
}
