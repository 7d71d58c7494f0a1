//! Training: the [`Trainer`] runs whole steps of the program on any backend,
//! evaluates the validation loss, records metrics, and makes checkpoints;
//! [`schedule`] gives the learning rate; [`sample`] generates text.

pub mod sample;
pub mod schedule;

use crate::backend::{Backend, StepParams};
use crate::data::rng::dropout_seed;
use crate::data::{Batch, BatchSampler, Corpus, validation_batches};
use crate::model::checkpoint::{Checkpoint, LossPoint, OptimizerState};
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use serde::Serialize;
use web_time::Instant;

/// What one training step measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepMetrics {
    /// Steps completed, including this one (1-based).
    pub step: u64,
    pub loss: f32,
    /// Validation loss, when this step evaluated it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
    /// Gradient norm before clipping.
    pub grad_norm: f32,
    pub lr: f32,
    /// Wall time of the step (not of the evaluation).
    pub ms: f64,
    pub tokens_per_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(
        "training diverged at step {step}: the loss is {loss} and the gradient norm {grad_norm}; \
         the update was not applied and the last good weights are kept (lower the learning rate with --lr)"
    )]
    Diverged {
        step: u64,
        loss: f32,
        grad_norm: f32,
    },
    #[error("the checkpoint was trained with a different model shape than the one asked for: {0}")]
    Mismatch(String),
    #[error("{0}")]
    Backend(#[from] crate::backend::BackendError),
}

pub struct Trainer {
    pub backend: Box<dyn Backend>,
    pub config: Config,
    pub corpus: Corpus,
    pub seed: u64,
    /// Steps completed.
    pub step: u64,
    pub history: Vec<LossPoint>,
    sampler: BatchSampler,
    val_batches: Vec<Batch>,
}

impl Trainer {
    /// A fresh run: parameters initialised from `seed`.
    pub fn new(
        mut backend: Box<dyn Backend>,
        corpus: Corpus,
        seed: u64,
    ) -> Result<Self, TrainError> {
        let config = backend.program().config.clone();
        backend.initialize(seed)?;
        let val_batches =
            validation_batches(&corpus, config.batch, config.ctx, config.eval_batches, seed);
        Ok(Self {
            backend,
            config,
            corpus,
            seed,
            step: 0,
            history: vec![],
            sampler: BatchSampler::new(seed),
            val_batches,
        })
    }

    /// Continues a run from a checkpoint (its parameters, optimizer state,
    /// step, batch sequence and loss history). The backend's program must
    /// have the checkpoint's model shape.
    pub fn resume(
        mut backend: Box<dyn Backend>,
        corpus: Corpus,
        ckpt: &Checkpoint,
    ) -> Result<Self, TrainError> {
        let config = backend.program().config.clone();
        let shape = |c: &Config| (c.n_layer, c.n_head, c.d_model, c.ctx);
        if shape(&config) != shape(&ckpt.config) {
            return Err(TrainError::Mismatch(format!(
                "checkpoint has (layers, heads, d, ctx) = {:?}, the run {:?}",
                shape(&ckpt.config),
                shape(&config)
            )));
        }
        for t in &ckpt.params {
            backend.write(&t.name, &t.values)?;
        }
        if let Some(opt) = &ckpt.optimizer {
            for t in opt.m.iter().chain(&opt.v) {
                backend.write(&t.name, &t.values)?;
            }
        }
        let mut sampler = BatchSampler::new(ckpt.seed);
        if let Some(s) = ckpt.sampler_state {
            sampler.rng = crate::data::rng::Rng::new(s);
        }
        let val_batches = validation_batches(
            &corpus,
            config.batch,
            config.ctx,
            config.eval_batches,
            ckpt.seed,
        );
        Ok(Self {
            backend,
            config,
            corpus,
            seed: ckpt.seed,
            step: ckpt.step,
            history: ckpt.loss_history.clone(),
            sampler,
            val_batches,
        })
    }

    /// Takes the next batch from the run's sequence.
    pub fn next_batch(&mut self) -> Batch {
        self.sampler
            .next(&self.corpus, self.config.batch, self.config.ctx)
    }

    /// One optimizer step on the next batch; evaluates the validation loss
    /// when the step lands on the evaluation interval or is the run's last.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        let batch = self.next_batch();
        self.train_on(&batch)
    }

    /// One optimizer step on a given batch (the overfit gate uses a fixed one).
    pub fn train_on(&mut self, batch: &Batch) -> Result<StepMetrics, TrainError> {
        let lr = schedule::learning_rate(&self.config, self.step);
        let params = StepParams {
            lr,
            adam_t: self.step + 1,
            dropout_seed: dropout_seed(self.seed, self.step),
        };
        let start = Instant::now();
        let out = self.backend.train_step(batch, params);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if !out.applied {
            return Err(TrainError::Diverged {
                step: self.step + 1,
                loss: out.loss,
                grad_norm: out.grad_norm,
            });
        }
        self.step += 1;
        let interval = self.config.eval_interval;
        let val_loss = ((interval > 0 && self.step.is_multiple_of(interval))
            || self.step == self.config.steps)
            .then(|| self.evaluate());
        self.history.push(LossPoint {
            step: self.step,
            loss: out.loss,
            val_loss,
        });
        Ok(StepMetrics {
            step: self.step,
            loss: out.loss,
            val_loss,
            grad_norm: out.grad_norm,
            lr,
            ms,
            tokens_per_s: self.config.tokens_per_step() as f64 / (ms / 1e3),
        })
    }

    /// Mean loss over the run's fixed validation batches.
    pub fn evaluate(&mut self) -> f32 {
        let batches = std::mem::take(&mut self.val_batches);
        let sum: f64 = batches
            .iter()
            .map(|b| self.backend.eval_loss(b) as f64)
            .sum();
        self.val_batches = batches;
        (sum / self.val_batches.len() as f64) as f32
    }

    /// Parameters by name, in program order.
    pub fn params(&mut self) -> Result<Vec<NamedTensor>, TrainError> {
        let program = self.backend.program().clone();
        program
            .params()
            .map(|id| {
                let t = &program.tensors[id];
                Ok(NamedTensor {
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    values: self.backend.read(&t.name)?,
                })
            })
            .collect()
    }

    /// A checkpoint of the run so far, with or without AdamW's moments.
    pub fn checkpoint(&mut self, with_optimizer: bool) -> Result<Checkpoint, TrainError> {
        let params = self.params()?;
        let optimizer = if with_optimizer {
            let mut read = |prefix: &str| -> Result<Vec<NamedTensor>, TrainError> {
                params
                    .iter()
                    .map(|p| {
                        let name = format!("{prefix}{}", p.name);
                        Ok(NamedTensor {
                            values: self.backend.read(&name)?,
                            name,
                            shape: p.shape.clone(),
                        })
                    })
                    .collect()
            };
            Some(OptimizerState {
                m: read("adam.m.")?,
                v: read("adam.v.")?,
            })
        } else {
            None
        };
        Ok(Checkpoint {
            config: self.config.clone(),
            step: self.step,
            seed: self.seed,
            sampler_state: Some(self.sampler.rng.state()),
            loss_history: self.history.clone(),
            params,
            optimizer,
        })
    }
}
