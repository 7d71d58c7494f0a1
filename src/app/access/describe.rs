//! The picture in one line of words (issue 53's *describe*): each scene
//! registers a line that says what its picture shows now, with its numbers
//! ([`crate::app::registry::SceneApp::scene_description`]), read again
//! every [`REFRESH_S`] seconds while the scene is on screen. The tree gives
//! it as the picture's description (a screen reader says it on reaching
//! the picture, and the page mirrors it as the figure's
//! `aria-description`), the numbers table opens with it, headless runs
//! print it (`describe`), and F9 says it through the live region.

use super::announce::Announcer;
use crate::app::registry::SceneRegistry;
use crate::app::scenes::Scene;
use bevy::prelude::*;

/// How often the line is read again (seconds).
pub const REFRESH_S: f64 = 0.5;

/// The line for the scene on screen (None: its numbers are not there yet).
#[derive(Resource, Default, Debug, Clone, PartialEq)]
pub struct PictureDescription {
    pub text: Option<String>,
    scene: Option<Scene>,
    read_at: Option<f64>,
}

impl PictureDescription {
    /// The line, or what a scene without one says.
    pub fn words(&self) -> String {
        self.text.clone().unwrap_or_else(|| crate::t!("describe-waiting"))
    }
}

pub struct DescribePlugin;

impl Plugin for DescribePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<PictureDescription>()
            .add_systems(Update, (read_description, say_it).chain().after(crate::app::schedule::AppSystems::Scene));
    }
}

/// Reads the scene's line: when the scene changes, then every
/// [`REFRESH_S`] seconds, and when F9 asks for it.
fn read_description(world: &mut World) {
    let now = world.resource::<Time<Real>>().elapsed_secs_f64();
    let scene = *world.resource::<State<Scene>>().get();
    let asked = world.resource::<ButtonInput<KeyCode>>().just_pressed(KeyCode::F9);
    let shown = world.resource::<PictureDescription>();
    if !asked && shown.scene == Some(scene) && shown.read_at.is_some_and(|t| now - t < REFRESH_S) {
        return;
    }
    let text = SceneRegistry::description(world, scene);
    let mut shown = world.resource_mut::<PictureDescription>();
    shown.scene = Some(scene);
    shown.read_at = Some(now);
    shown.text = text;
}

/// F9 says the line through the live region (not while a field takes the
/// keys).
fn say_it(
    keys: Res<ButtonInput<KeyCode>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    shown: Res<PictureDescription>,
    mut announcer: ResMut<Announcer>,
) {
    if keys.just_pressed(KeyCode::F9) && !egui.is_some_and(|e| e.wants_keyboard_input()) {
        announcer.say(shown.words());
    }
}

/// A prompt's bytes as text to read: printable ASCII and spaces as they
/// are, the rest as the labels write them (`\n`, `\x0c`).
pub fn prompt_text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b' ' | 0x21..=0x7e => (b as char).to_string(),
            _ => crate::probe::byte_label(b),
        })
        .collect()
}

/// Where a logit-lens point is, as the narration names it: `block 2`, or
/// `out` for the last (the stream leaving the last block).
pub fn lens_place(point: usize, last: usize) -> String {
    if point == last {
        crate::t!("walk-lens-out")
    } else {
        crate::t!("walk-where-block", layer = point as i64)
    }
}

/// The first `n` guesses as the narration writes them: `“e” 42% · “a” 13%`.
pub fn guesses(guesses: &[crate::flow::Guess], n: usize) -> String {
    guesses
        .iter()
        .take(n)
        .map(|g| format!("“{}” {:.0}%", crate::app::canvas::chip_text(g.byte), g.p * 100.0))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Guess;

    #[test]
    fn prompts_and_guesses_read_as_the_labels_write_them() {
        assert_eq!(prompt_text(b"to be\n"), "to be\\n");
        let g = [Guess { byte: b' ', p: 0.5 }, Guess { byte: b'e', p: 0.25 }, Guess { byte: b'a', p: 0.1 }];
        assert_eq!(guesses(&g, 2), "“␣” 50% · “e” 25%");
    }
}
