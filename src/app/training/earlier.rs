//! The runs before this one, kept (dashed) on the loss chart.

use super::records::StepRecord;
use super::run::Run;
use bevy::prelude::*;

/// The loss curves of the runs before this one (newest last), kept when a
/// new run replaces them so the loss chart can draw them behind it: an
/// intact run next to a "break it" lab, lr 3e-4 next to lr 3.
#[derive(Resource, Default)]
pub struct EarlierRuns(pub Vec<EarlierRun>);

pub struct EarlierRun {
    /// e.g. `tiny, lr 3.0e-4, no causal mask`
    pub label: String,
    /// (step, train loss), at most [`EarlierRuns::POINTS`] of them.
    pub loss: Vec<[f64; 2]>,
}

impl EarlierRuns {
    /// Runs kept.
    pub const KEEP: usize = 3;
    /// Points kept per run.
    pub const POINTS: usize = 2000;

    /// Keeps `run`'s curve, if it trained at all.
    pub(super) fn keep(&mut self, run: &Run, records: &[StepRecord]) {
        let mut loss: Vec<[f64; 2]> = records
            .iter()
            .filter(|r| r.step > 0)
            .map(|r| [r.step as f64, r.loss as f64])
            .collect();
        if loss.len() < 2 {
            return;
        }
        loss.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let stride = loss.len().div_ceil(Self::POINTS);
        let loss = loss.into_iter().step_by(stride).collect();
        self.0.push(EarlierRun {
            label: run.label(),
            loss,
        });
        if self.0.len() > Self::KEEP {
            self.0.remove(0);
        }
    }
}
