//! A trainer that runs elsewhere: the messages between the browser app and
//! the trainer in its Web Worker (`web/trainer-worker.js`, the wasm module
//! built from [`crate::web_trainer`] with threads). The run moves there as
//! a checkpoint with AdamW's moments and comes back the same way
//! ([`super::Trainer::adopt`]), so both sides train the one program on the
//! CPU backend; in between, the worker answers for steps and for reads.
//! Messages are RON, which keeps a diverged step's NaN loss as it is.

use super::{StepMetrics, TrainError};
use crate::model::timelapse::Frame;
use serde::{Deserialize, Serialize};

/// Why a step in the worker was not taken, or ruined the run: the errors
/// [`super::Trainer::train_step`] returns, each as the app shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StepFailure {
    Diverged { step: u64, loss: f32, grad_norm: f32 },
    Exploded { step: u64, loss: f32, lr: f32, metrics: StepMetrics },
    /// Any other error, as its text.
    Other(String),
}

impl From<&TrainError> for StepFailure {
    fn from(e: &TrainError) -> Self {
        match e {
            TrainError::Diverged {
                step,
                loss,
                grad_norm,
            } => StepFailure::Diverged {
                step: *step,
                loss: *loss,
                grad_norm: *grad_norm,
            },
            TrainError::Exploded {
                step,
                loss,
                lr,
                metrics,
            } => StepFailure::Exploded {
                step: *step,
                loss: *loss,
                lr: *lr,
                metrics: *metrics,
            },
            other => StepFailure::Other(other.to_string()),
        }
    }
}

impl From<StepFailure> for TrainError {
    fn from(f: StepFailure) -> Self {
        match f {
            StepFailure::Diverged {
                step,
                loss,
                grad_norm,
            } => TrainError::Diverged {
                step,
                loss,
                grad_norm,
            },
            StepFailure::Exploded {
                step,
                loss,
                lr,
                metrics,
            } => TrainError::Exploded {
                step,
                loss,
                lr,
                metrics,
            },
            StepFailure::Other(why) => TrainError::Worker(why),
        }
    }
}

/// What a call for steps did: the steps taken, in order, the error that
/// stopped them, if one did (an exploded step is among `metrics`), and the
/// time-lapse frames they recorded (so the page's scenes show them while
/// the worker trains).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepsDone {
    pub metrics: Vec<StepMetrics>,
    pub failure: Option<StepFailure>,
    #[serde(default)]
    pub frames: Vec<NewFrame>,
}

/// A time-lapse frame with its attention maps (which its serialized form
/// leaves out: a checkpoint keeps them as a tensor). Not its weights: a
/// whole model's worth of numbers as text would hold the page's frame up
/// for each time-lapse frame (4 MB at small); the frames' weights come
/// with the run when it comes back ([`super::Trainer::adopt`]), and until
/// then the page's frames are those the time-lapse would have thinned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewFrame {
    pub frame: Frame,
    pub attention: Option<Vec<u16>>,
}

impl NewFrame {
    pub fn of(frame: &Frame) -> Self {
        NewFrame {
            frame: frame.clone(),
            attention: frame.attention.clone(),
        }
    }

    pub fn into_frame(self) -> Frame {
        Frame {
            attention: self.attention,
            weights: None,
            ..self.frame
        }
    }
}

impl StepsDone {
    pub fn to_ron(&self) -> String {
        ron::to_string(self).unwrap_or_else(|e| {
            // Only a non-UTF-8 string could fail; say so rather than lose the steps.
            ron::to_string(&StepsDone {
                metrics: self.metrics.clone(),
                failure: Some(StepFailure::Other(format!("the reply could not be written: {e}"))),
                frames: vec![],
            })
            .unwrap_or_default()
        })
    }

    pub fn from_ron(text: &str) -> Result<Self, String> {
        ron::from_str(text).map_err(|e| format!("the worker's reply is not one this app reads: {e}"))
    }
}

/// Up to `steps` training steps, stopping after the first that ends past
/// `budget_ms` of wall time, or at the first error: the worker's call.
pub fn train_steps(trainer: &mut super::Trainer, steps: u32, budget_ms: f64) -> StepsDone {
    let start = web_time::Instant::now();
    let mut done = StepsDone::default();
    let frames = |t: &super::Trainer| t.timelapse.as_ref().map_or(0, |l| l.frames.len());
    let before = frames(trainer);
    for _ in 0..steps {
        if trainer.step >= trainer.config.steps {
            break;
        }
        match trainer.train_step() {
            Ok(m) => done.metrics.push(m),
            Err(e) => {
                if let TrainError::Exploded { metrics, .. } = &e {
                    done.metrics.push(*metrics);
                }
                done.failure = Some(StepFailure::from(&e));
                break;
            }
        }
        if start.elapsed().as_secs_f64() * 1e3 >= budget_ms {
            break;
        }
    }
    if let Some(lapse) = trainer.timelapse.as_ref() {
        done.frames = lapse.frames[before.min(frames(trainer))..].iter().map(NewFrame::of).collect();
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diverged_step_crosses_with_its_nan_loss() {
        let m = StepMetrics {
            step: 3,
            loss: 2.5,
            val_loss: None,
            grad_norm: f32::INFINITY,
            lr: 1e-3,
            ms: 4.0,
            tokens_per_s: 1e4,
            skipped: false,
        };
        let done = StepsDone {
            metrics: vec![m],
            failure: Some(StepFailure::Diverged {
                step: 4,
                loss: f32::NAN,
                grad_norm: 1.0,
            }),
            frames: vec![],
        };
        let back = StepsDone::from_ron(&done.to_ron()).unwrap();
        assert_eq!(back.metrics, done.metrics);
        match back.failure {
            Some(StepFailure::Diverged { step: 4, loss, .. }) => assert!(loss.is_nan()),
            other => panic!("came back as {other:?}"),
        }
        assert!(matches!(
            TrainError::from(StepFailure::Other("x".into())),
            TrainError::Worker(w) if w == "x"
        ));
    }
}
