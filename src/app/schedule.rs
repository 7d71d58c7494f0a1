//! The app's system sets in `Update`, in the order they run.

use bevy::prelude::*;

/// The app's system sets in `Update`, in the order they run (chained once,
/// in [`super::add_explainer_plugins`]): input from files and the page, the
/// run's commands and training, the entity mirror of the program, the scene
/// camera, then the scenes.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppSystems {
    Input,
    Training,
    Graph,
    Camera,
    Scene,
}
