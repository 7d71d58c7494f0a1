//! The one list of scenes. Each scene is a folder here with a Bevy state
//! ([`Scene`]) and a `ScenePlugin` that registers everything it adds: its
//! systems (active only in its state; its entities carry `DespawnOnExit`),
//! its part of a lesson step (observers of [`crate::app::lesson::LessonFocus`]
//! and [`crate::app::lesson::LessonAction`]), the data behind its view
//! ([`crate::app::registry::SceneApp::scene_data`]), its fields of the
//! headless and page reports, and its egui regions
//! ([`crate::app::registry::SceneApp`]). The shared parts ask the
//! registries and never name a scene's types.
//!
//! A new scene is a folder with a `ScenePlugin` and one line in
//! [`scene_list!`]: the line gives its variant, folder and key (`--scene`,
//! links, lessons); its title and tooltip are two messages of the
//! catalogue (`locales/*/tinygpt.ftl`). See
//! `docs/architecture.md` for a template.
//!
//! Scenes draw on [`crate::app::canvas`], read what the training plugin
//! provides ([`crate::app::training::Snapshots`],
//! [`crate::app::training::Probes`], [`crate::app::training::FlashTraces`]) and
//! ask for what they need through requests that never block a frame.

use bevy::prelude::*;

/// The scenes, one line each: `Variant, folder, "key";`. The switcher's
/// title and tooltip are the catalogue's `scene-KEY-title` and
/// `scene-KEY-about` (`locales/`).
/// Macros that take the list ([`define_scenes!`] here, the app's plugin
/// list in [`crate::app::build`]) are handed it by `scene_list!(that_macro)`.
macro_rules! scene_list {
    ($then:ident) => {
        $then! {
            /// Inside the model: every tensor of one real forward and backward
            /// pass in 3D, toured op by op (key `flow`, which links and
            /// lessons name; `walk`, its key before, still opens it).
            Walk, walk, "flow";
            /// One byte's path: a prompt travelling up through the model to
            /// the next byte at one position, and the gradient back down.
            Path, path, "path";
            /// Four tools that take the model apart: the lens, knockouts, patching, attribution.
            Probe, probe, "probe";
            /// The layer stack with every parameter as a live heatmap.
            #[default]
            Model, model, "model";
            /// Every layer × head attention matrix P of a prompt, from the training model.
            Attention, attention, "attention";
            /// The run's time-lapse: attention and head scores as they formed, scrubbed step by step.
            Timelapse, timelapse, "timelapse";
            /// One real training step, op by op: forward, backward, clip, AdamW.
            Step, step, "step";
            /// FlashAttention-2 tiling one head's attention, replayed from a trace of the kernels.
            Flash, flash, "flash";
            /// One training step on the CPU and the GPU, every tensor compared.
            Correctness, correctness, "correctness";
            /// The training-speed bench measured in the app: the GPU-over-CPU curve.
            Speedup, speedup, "speedup";
        }
    };
}
pub(crate) use scene_list;

/// The scene modules and the [`Scene`] state, from the list.
macro_rules! define_scenes {
    ($( $(#[$meta:meta])* $variant:ident, $module:ident, $key:literal; )*) => {
        $( pub mod $module; )*

        /// The scenes of the main view. [`Scene::ALL`] is the one list of them.
        #[derive(States, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Scene {
            $( $(#[$meta])* $variant, )*
        }

        impl Scene {
            pub const ALL: [Scene; [$($key),*].len()] = [$(Scene::$variant),*];

            /// The name in links (`scene=`), on the command line (`--scene`) and in lessons.
            pub fn key(self) -> &'static str {
                match self { $( Scene::$variant => $key, )* }
            }

            /// The switcher's label, in the current language.
            pub fn title(self) -> String {
                crate::i18n::tr(&format!("scene-{}-title", self.key()), &[])
            }

            /// One line on what the scene shows (the switcher's tooltip), in
            /// the current language.
            pub fn about(self) -> String {
                self.about_in(crate::i18n::language())
            }

            /// [`Scene::about`] in `language` (the command line's help is English).
            pub fn about_in(self, language: crate::i18n::Language) -> String {
                crate::i18n::tr_in(language, &format!("scene-{}-about", self.key()), &[])
            }
        }
    };
}
scene_list!(define_scenes);

impl Scene {
    pub fn from_key(key: &str) -> Option<Scene> {
        // The 3D walk-through's key before it became Inside the model.
        if key == "walk" {
            return Some(Scene::Walk);
        }
        Scene::ALL.into_iter().find(|s| s.key() == key)
    }

    /// Every key, for messages that list them.
    pub fn keys() -> String {
        Scene::ALL.map(Scene::key).join(", ")
    }
}

/// Where the scenes open, from the command line or a link: each scene's
/// plugin reads its part when it is built.
#[derive(Resource, Clone, Debug)]
pub struct SceneStart {
    /// The entry of the training step the Step scene opens at.
    pub step_op: usize,
    /// The pass the Flash scene shows first, and the visit its replay opens
    /// at, paused (else it plays from the first).
    pub flash_pass: crate::flash::Pass,
    pub flash_visit: Option<usize>,
    /// Presets the Speedup scene measures as soon as it opens.
    pub bench: Option<Vec<String>>,
    /// The preset whose step the Speedup scene times per kernel at once.
    pub kernels: Option<String>,
    /// The beat of its tour the 3D walk-through opens at, paused.
    pub walk_beat: Option<usize>,
    /// Its zoom on that beat's framing.
    pub walk_zoom: Option<f32>,
    /// The shared timeline's step: the Attention scene opens on the run's
    /// time-lapse at it.
    pub timeline_step: Option<u64>,
}

impl Default for SceneStart {
    fn default() -> Self {
        Self {
            step_op: 0,
            flash_pass: crate::flash::Pass::Forward,
            flash_visit: None,
            bench: None,
            kernels: None,
            walk_beat: None,
            walk_zoom: None,
            timeline_step: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Scene;
    use crate::i18n::{Language, tr_in};

    /// Every scene's switcher title and tooltip are in every language's
    /// catalogue (a new scene's line in `scene_list!` fails here until
    /// they are).
    #[test]
    fn every_scene_has_its_title_and_tooltip_in_every_language() {
        for scene in Scene::ALL {
            for language in Language::ALL {
                for part in ["title", "about"] {
                    let key = format!("scene-{}-{part}", scene.key());
                    assert_ne!(
                        tr_in(language, &key, &[]),
                        key,
                        "{language:?} lacks `{key}`"
                    );
                }
            }
        }
    }
}
