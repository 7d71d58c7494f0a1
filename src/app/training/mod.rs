//! The training plugin: the run (its settings, engine and state), the
//! commands the UI and dropped files send, snapshots for the views, and the
//! `TrainingRun` entity with one `StepRecord` child per step. One file per
//! part; the types are re-exported here.

mod commands;
mod device;
mod earlier;
mod gallery_fetch;
mod pump;
mod records;
mod requests;
mod run;
mod save;
mod settings;
mod status;

pub use commands::{OpenOnStart, RunCommand};
pub use device::GpuDevice;
pub use earlier::{EarlierRun, EarlierRuns};
pub use gallery_fetch::GalleryFetch;
pub use records::{ShownStep, StepRecord, TrainingRun};
pub use crate::app::engine::{moment_names, next_step};
pub use requests::{
    FlashTraces, HeatmapView, Knockouts, Probes, Snapshots, TensorWants, param_names, question_weights,
};
pub use run::{
    RECOVERY_INTERVAL_S, Run, RunCreated, RunState, TrainOnStart, VALIDATION_ROWS, build_run,
};
pub use settings::{CorpusSource, RunSettings};
pub use status::AppStatus;

use bevy::prelude::*;

/// Which backend a new run asks for: the library's one list.
pub use crate::backends::BackendChoice;

pub struct TrainingPlugin;

impl Plugin for TrainingPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<RunCommand>()
            .add_message::<RunCreated>()
            .init_resource::<AppStatus>()
            .init_resource::<Snapshots>()
            .init_resource::<EarlierRuns>()
            .init_resource::<GalleryFetch>()
            .init_resource::<TensorWants>()
            .init_resource::<Probes>()
            .init_resource::<ShownStep>()
            .init_resource::<Knockouts>()
            .init_resource::<FlashTraces>()
            .init_resource::<GpuDevice>()
            .init_resource::<TrainOnStart>()
            .init_resource::<OpenOnStart>()
            .add_systems(
                Startup,
                (
                    device::find_gpu_device,
                    run::create_first_run,
                    commands::open_on_start,
                )
                    .chain(),
            )
            .add_systems(
                Update,
                (
                    commands::handle_commands,
                    device::warm_kernels,
                    pump::pump_training,
                )
                    .chain()
                    .in_set(super::schedule::AppSystems::Training),
            );
    }
}
