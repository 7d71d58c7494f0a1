//! The run's history: the `TrainingRun` entity with one [`StepRecord`]
//! child per step.

use crate::train::StepMetrics;
use bevy::prelude::*;

/// The run as an entity: parent of its step records.
#[derive(Component, Debug)]
pub struct TrainingRun {
    pub preset: String,
    pub generation: u64,
}

/// One training step, a child of its [`TrainingRun`].
#[derive(Component, Clone, Copy, Debug)]
pub struct StepRecord {
    pub step: u64,
    pub loss: f32,
    pub val_loss: Option<f32>,
    pub lr: f32,
    pub grad_norm: f32,
    pub ms: f64,
    pub tokens_per_s: f64,
}

impl From<StepMetrics> for StepRecord {
    fn from(m: StepMetrics) -> Self {
        Self {
            step: m.step,
            loss: m.loss,
            val_loss: m.val_loss,
            lr: m.lr,
            grad_norm: m.grad_norm,
            ms: m.ms,
            tokens_per_s: m.tokens_per_s,
        }
    }
}

/// The step of the run's past a scene shows the model at (the Time-lapse
/// scene's frame), which the loss chart marks; None while no scene does.
#[derive(bevy::prelude::Resource, Default, Debug, Clone, Copy, PartialEq)]
pub struct ShownStep(pub Option<u64>);
