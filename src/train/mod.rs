//! Training: the [`Trainer`] runs whole steps of the program on any backend,
//! evaluates the validation loss, records metrics, and makes checkpoints;
//! [`schedule`] gives the learning rate; [`crate::sample`] generates text.


pub mod remote;
pub mod schedule;
pub mod timelapse;

use crate::backend::{Backend, StepParams};
use crate::data::rng::dropout_seed;
use crate::data::{Batch, BatchSampler, Corpus, validation_batches};
use crate::model::checkpoint::{Checkpoint, LossPoint, OptimizerState};
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use crate::model::timelapse::TimeLapse;
use crate::program::Program;
use serde::{Deserialize, Serialize};
use web_time::Instant;

/// What one training step measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
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
    /// The loss scaler skipped this step's update (`--precision mixed`: the
    /// scaled gradients overflowed f16; the scale was halved).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

/// Why a training step was not taken, or ruined the run. Its text comes
/// from the catalogue ([`crate::i18n`]): English on the command line, the
/// app's language in the app.
#[derive(Debug)]
pub enum TrainError {
    Diverged {
        step: u64,
        loss: f32,
        grad_norm: f32,
    },
    Exploded {
        step: u64,
        loss: f32,
        lr: f32,
        /// The step's metrics (it was taken and is in the history).
        metrics: StepMetrics,
    },
    /// The checkpoint was trained with a different model shape.
    Mismatch(String),
    /// The GPU was lost (why).
    DeviceLost(String),
    Backend(crate::backend::BackendError),
    /// The trainer running in the browser's Web Worker stopped (why).
    Worker(String),
}

impl std::fmt::Display for TrainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            TrainError::Diverged {
                step,
                loss,
                grad_norm,
            } => crate::t!(
                "train-diverged",
                step = step.to_string(),
                loss = loss.to_string(),
                grad_norm = grad_norm.to_string()
            ),
            TrainError::Exploded { step, loss, lr, .. } => crate::t!(
                "train-exploded",
                step = step.to_string(),
                loss = format!("{loss:.1}"),
                guessing = format!("{EXPLODED_LOSS:.2}"),
                lr = format!("{lr:.1e}")
            ),
            TrainError::Mismatch(why) => crate::t!("train-mismatch", why = why.as_str()),
            TrainError::DeviceLost(why) => crate::t!("train-device-lost", why = why.as_str()),
            TrainError::Backend(e) => e.to_string(),
            TrainError::Worker(why) => crate::t!("train-worker", why = why.as_str()),
        };
        f.write_str(&text)
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrainError::Backend(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::backend::BackendError> for TrainError {
    fn from(e: crate::backend::BackendError) -> Self {
        TrainError::Backend(e)
    }
}

/// A training loss above this means the run has blown up: twice the loss of
/// guessing every byte uniformly (ln 256 = 5.55), where a fresh model starts.
/// No run that is learning comes near it; a learning rate far too high
/// crosses it in a few steps while every number is still finite.
pub const EXPLODED_LOSS: f32 = 2.0 * 5.545_177; // 2 · ln 256

/// The error for a step whose loss says the run blew up, if it did.
fn exploded(m: StepMetrics) -> Option<TrainError> {
    (m.loss > EXPLODED_LOSS).then_some(TrainError::Exploded {
        step: m.step,
        loss: m.loss,
        lr: m.lr,
        metrics: m,
    })
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
    /// Steps handed to the GPU (≥ `step`; more while some are in flight).
    submitted: u64,
    /// When the GPU last finished steps (for ms/step while pipelined).
    last_finish: Option<Instant>,
    /// Steps of this run whose update the loss scaler skipped (`--precision
    /// mixed`; [`StepMetrics::skipped`]).
    pub skipped_steps: u64,
    /// Counts the returns to a last good step: steps submitted before one
    /// are discarded when they are collected.
    epoch: u64,
    /// The run's time-lapse, recorded by [`Trainer::train_step`] (None for
    /// a context too short to probe).
    pub timelapse: Option<TimeLapse>,
}

/// Training steps submitted to the GPU and not yet collected (see
/// [`Trainer::submit_gpu_steps`]), with the evaluation that follows them
/// when the last one lands on the evaluation interval.
#[must_use = "collect the steps with Trainer::finish_gpu_steps"]
pub struct StepsInFlight {
    handle: Option<crate::readback::ReadbackHandle>,
    eval: Option<crate::readback::ReadbackHandle>,
    eval_loss: Option<f32>,
    outcomes: Option<Vec<crate::backend::StepOutcome>>,
    /// The GPU time of each step (ms), when the backend timed them.
    gpu_ms: Vec<f64>,
    lrs: Vec<f32>,
    /// The batch sampler's state before each step's batch was drawn (to go
    /// back to, if that step diverges).
    sampler_before: Vec<u64>,
    /// [`Trainer::epoch`] when submitted.
    epoch: u64,
    submitted_at: Instant,
}

/// Where a stepped-through step's batch comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepSource {
    /// The batch the run's next step trains on: the stepped step can stay
    /// part of the run ([`Trainer::finish_step`]).
    NextBatch,
    /// A typed prompt in every row of the batch (padded with spaces), the
    /// targets its next bytes: a step the run never keeps.
    Prompt(Vec<u8>),
}

/// A training step in progress, entry by entry ([`Trainer::begin_step`]):
/// the batch and step parameters it runs on, the timeline, and the views of
/// the entries run so far (stepping back shows these; nothing is run twice).
pub struct StepCursor {
    pub source: StepSource,
    pub batch: Batch,
    pub params: StepParams,
    /// Completed steps of the run when the cursor began.
    pub run_step: u64,
    pub entries: Vec<crate::stepthrough::Entry>,
    pub views: Vec<crate::stepthrough::EntryView>,
    /// The parameter the clip and AdamW views show.
    pub focus: crate::program::TensorId,
    /// Whether the weights were stashed before AdamW (so leaving undoes it).
    stashed: bool,
    /// Entries started (≥ views: some may be on their way back).
    started: usize,
    /// Wall time spent running entries (ms).
    pub exec_ms: f64,
}

impl StepCursor {
    /// The entry that starts next, if any is left.
    pub fn next(&self) -> Option<&crate::stepthrough::Entry> {
        self.entries.get(self.started)
    }

    /// Whether the clip (the first entry that reads `focus`) has started.
    pub fn clip_started(&self) -> bool {
        self.entries[..self.started]
            .iter()
            .any(|e| e.step == crate::program::Step::ClipGradNorm)
    }

    /// Whether every entry has run.
    pub fn done(&self) -> bool {
        self.views.len() == self.entries.len()
    }

    /// The loss the forward pass computed, once it has.
    pub fn loss(&self) -> Option<f64> {
        self.scalar("loss")
    }

    /// The gradient norm the clip measured, once it has.
    pub fn grad_norm(&self) -> Option<f64> {
        self.scalar("grad_norm")
    }

    fn scalar(&self, name: &str) -> Option<f64> {
        self.views
            .iter()
            .flat_map(|v| &v.scalars)
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }
}

/// What collecting a GPU submit gave: the steps' metrics, and the first
/// step that diverged, if one did.
#[derive(Debug, Default)]
pub struct GpuStepsDone {
    pub metrics: Vec<StepMetrics>,
    pub diverged: Option<TrainError>,
    /// Steps that ran queued behind a diverged one, whose updates the GPU
    /// skipped (the run went back to the step before the divergence).
    pub discarded: usize,
    /// Each step's GPU time (ms) from timestamps, when the backend times
    /// its steps ([`crate::gpu::GpuBackend::time_steps`]); else empty.
    pub gpu_ms: Vec<f64>,
}

impl StepsInFlight {
    /// How many steps this submit holds.
    pub fn len(&self) -> usize {
        self.lrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lrs.is_empty()
    }
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
        let timelapse = TimeLapse::new(config.n_layer, config.n_head, config.ctx);
        Ok(Self {
            timelapse,
            backend,
            config,
            corpus,
            seed,
            step: 0,
            history: vec![],
            sampler: BatchSampler::new(seed),
            val_batches,
            submitted: 0,
            last_finish: None,
            skipped_steps: 0,
            epoch: 0,
        })
    }

    /// A LoRA fine-tune: the backend's program must be a LoRA program
    /// ([`crate::model::lora::finetune_config`]); the adapters start as
    /// PEFT starts them (from `seed`), and the frozen weights are `base`'s.
    pub fn finetune(
        backend: Box<dyn Backend>,
        corpus: Corpus,
        seed: u64,
        base: &[NamedTensor],
    ) -> Result<Self, TrainError> {
        if backend.program().config.lora.is_none() {
            return Err(TrainError::Mismatch(
                "a fine-tune needs a LoRA program (its config has no `lora`)".into(),
            ));
        }
        let mut trainer = Self::new(backend, corpus, seed)?;
        trainer.load_frozen(base)?;
        Ok(trainer)
    }

    /// Writes a LoRA fine-tune's frozen base weights (every frozen
    /// parameter of the program, by name, from `base`).
    pub fn load_frozen(&mut self, base: &[NamedTensor]) -> Result<(), TrainError> {
        let program = self.backend.program().clone();
        for id in program.frozen() {
            let name = &program.tensors[id].name;
            let t = base
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| TrainError::Mismatch(format!("the base has no tensor `{name}`")))?;
            self.backend.write(name, &t.values)?;
        }
        Ok(())
    }

    /// Continues a run from a checkpoint (its parameters, optimizer state,
    /// step, batch sequence and loss history). The backend's program must
    /// have the checkpoint's model shape.
    pub fn resume(
        backend: Box<dyn Backend>,
        corpus: Corpus,
        ckpt: &Checkpoint,
    ) -> Result<Self, TrainError> {
        let config = backend.program().config.clone();
        let val_batches = validation_batches(
            &corpus,
            config.batch,
            config.ctx,
            config.eval_batches,
            ckpt.seed,
        );
        let mut trainer = Self {
            timelapse: None,
            backend,
            config,
            corpus,
            seed: ckpt.seed,
            step: 0,
            history: vec![],
            sampler: BatchSampler::new(ckpt.seed),
            val_batches,
            submitted: 0,
            last_finish: None,
            skipped_steps: 0,
            epoch: 0,
        };
        trainer.adopt(ckpt)?;
        Ok(trainer)
    }

    /// Takes a checkpoint of this run's own seed as where the run is: its
    /// parameters, optimizer state, step, batch sequence, loss history and
    /// time-lapse (what [`Trainer::resume`] starts from; the browser's
    /// trainer in a Web Worker hands its run back this way).
    pub fn adopt(&mut self, ckpt: &Checkpoint) -> Result<(), TrainError> {
        let shape = |c: &Config| (c.n_layer, c.n_head, c.d_model, c.ctx);
        if shape(&self.config) != shape(&ckpt.config) {
            return Err(TrainError::Mismatch(format!(
                "checkpoint has (layers, heads, d, ctx) = {:?}, the run {:?}",
                shape(&ckpt.config),
                shape(&self.config)
            )));
        }
        if ckpt.seed != self.seed {
            return Err(TrainError::Mismatch(format!(
                "checkpoint has seed {}, the run {} (its validation batches come from the seed)",
                ckpt.seed, self.seed
            )));
        }
        for t in &ckpt.params {
            self.backend.write(&t.name, &t.values)?;
        }
        if let Some(opt) = &ckpt.optimizer {
            for t in opt.m.iter().chain(&opt.v) {
                self.backend.write(&t.name, &t.values)?;
            }
        }
        let mut sampler = BatchSampler::new(ckpt.seed);
        if let Some(s) = ckpt.sampler_state {
            sampler.rng = crate::data::rng::Rng::new(s);
        }
        self.sampler = sampler;
        self.timelapse = ckpt.timelapse.clone().or_else(|| {
            TimeLapse::new(self.config.n_layer, self.config.n_head, self.config.ctx)
        });
        self.step = ckpt.step;
        self.submitted = ckpt.step;
        self.history = ckpt.loss_history.clone();
        self.last_finish = None;
        Ok(())
    }

    /// Takes the next batch from the run's sequence.
    /// The batch the next training step will train on, without drawing it
    /// (the sampler is copied): what a probe of "the current batch" shows.
    pub fn peek_next_batch(&self) -> Batch {
        self.sampler
            .clone()
            .next(&self.corpus, self.config.batch, self.config.ctx)
    }

    /// A probe request for `source` on this run's model: a prompt, or a row
    /// of the batch the next step trains on.
    pub fn probe_request(
        &self,
        source: &crate::probe::ProbeSource,
    ) -> Result<crate::probe::ProbeRequest, String> {
        use crate::probe::{ProbeRequest, ProbeSource};
        match source {
            ProbeSource::Prompt(bytes) => ProbeRequest::for_prompt(&self.config, bytes),
            ProbeSource::BatchRow(row) => {
                ProbeRequest::for_batch_row(&self.config, self.peek_next_batch(), *row)
            }
        }
    }

    pub fn next_batch(&mut self) -> Batch {
        self.sampler
            .next(&self.corpus, self.config.batch, self.config.ctx)
    }

    /// One optimizer step on the next batch; evaluates the validation loss
    /// when the step lands on the evaluation interval or is the run's last.
    ///
    /// A step whose loss or gradients are not finite is not applied: the run
    /// stays at its last good step ([`TrainError::Diverged`]), with the batch
    /// sampler back where it was, so [`Trainer::find_first_non_finite`] can
    /// run that step again op by op.
    ///
    /// The time-lapse records its frames here: the initial weights' before
    /// the first step, and each step's on its schedule.
    pub fn train_step(&mut self) -> Result<StepMetrics, TrainError> {
        if self.step == 0 && self.frame_due(0) {
            self.record_frame(None)?;
        }
        let weights_before = match self.frame_due(self.step + 1) {
            true => {
                let names = timelapse::norm_names(self.backend.program(), false);
                Some(timelapse::read_all(self.backend.as_mut(), &names)?)
            }
            false => None,
        };
        let before = self.sampler_state();
        let batch = self.next_batch();
        let result = self.train_on(&batch);
        if let Err(TrainError::Diverged { .. }) = &result {
            self.go_back_to_last_good(before);
        }
        if result.is_ok() && weights_before.is_some() {
            self.record_frame(weights_before.as_deref())?;
        }
        result
    }

    /// Whether the time-lapse records a frame after step `step`.
    pub fn frame_due(&self, step: u64) -> bool {
        self.timelapse
            .as_ref()
            .is_some_and(|t| t.due(step, self.config.steps))
    }

    /// Records the time-lapse's frame of the weights the backend holds now
    /// (after step `self.step`); `before`: the weights before that step
    /// ([`timelapse::norm_names`] without gradients).
    fn record_frame(&mut self, before: Option<&[f32]>) -> Result<(), TrainError> {
        let Some(probe) = self.timelapse.as_ref().map(|t| t.probe.clone()) else {
            return Ok(());
        };
        let (loss, val_loss) = self.losses_at(self.step);
        let frame = timelapse::record_frame(
            self.backend.as_mut(),
            &probe,
            self.step,
            loss,
            val_loss,
            before,
        )?;
        self.push_frame(frame);
        Ok(())
    }

    /// The training loss of step `step` (if the history has it) and the
    /// latest validation loss measured by then: a frame's losses.
    pub fn losses_at(&self, step: u64) -> (Option<f32>, Option<f32>) {
        let loss = self
            .history
            .iter()
            .rev()
            .find(|p| p.step == step)
            .map(|p| p.loss);
        let val_loss = self
            .history
            .iter()
            .rev()
            .filter(|p| p.step <= step)
            .find_map(|p| p.val_loss);
        (loss, val_loss)
    }

    /// Adds a frame recorded elsewhere (the app's GPU engine reads one
    /// without waiting) to the time-lapse; one out of order is dropped.
    pub fn push_frame(&mut self, frame: crate::model::timelapse::Frame) {
        if let Some(t) = &mut self.timelapse
            && t.last_step().is_none_or(|last| frame.step > last)
        {
            t.push(frame);
        }
    }

    /// Counts the run's returns to a last good step (a frame read before
    /// one is of weights the run no longer has).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// After a diverged step: the run stays at its last good step (the
    /// backend did not apply the update), the batch sampler goes back to
    /// `sampler_state`, the steps still in flight are discarded, and the
    /// GPU lets updates run again.
    fn go_back_to_last_good(&mut self, sampler_state: u64) {
        self.sampler.rng = crate::data::rng::Rng::new(sampler_state);
        self.submitted = self.step;
        self.epoch += 1;
        if let Some(gpu) = self.backend.as_gpu() {
            gpu.clear_halt();
        }
    }

    /// Runs the run's next step again entry by entry (the step-through's
    /// program, on this backend) and names the first entry whose output is
    /// not finite: after [`TrainError::Diverged`], where the divergence
    /// began. None if every entry's output was finite. The run is left as
    /// it was.
    pub fn find_first_non_finite(
        &mut self,
    ) -> Result<Option<crate::stepthrough::NonFinite>, crate::backend::BackendError> {
        let mut cursor = self
            .begin_step(StepSource::NextBatch)
            .map_err(crate::backend::BackendError::BadProbe)?;
        let mut found = None;
        while let Some(view) = self.step_entry(&mut cursor)? {
            if let Some(bad) = view.first_non_finite() {
                found = Some(bad);
                break;
            }
        }
        self.abandon_step(cursor);
        Ok(found)
    }

    /// One optimizer step on a given batch (the overfit gate uses a fixed one).
    pub fn train_on(&mut self, batch: &Batch) -> Result<StepMetrics, TrainError> {
        assert_eq!(
            self.submitted, self.step,
            "steps are in flight on the GPU; collect them first"
        );
        let params = self.step_params(self.step);
        let lr = params.lr;
        let start = Instant::now();
        let out = self.backend.train_step(batch, params);
        if let Some(why) = self.backend.as_gpu().and_then(|g| g.device_lost()) {
            return Err(TrainError::DeviceLost(why));
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        self.complete_step(out, lr, ms, true)
    }

    /// Counts a step the backend has run: a diverged one is an error (its
    /// update was not applied); otherwise the step joins the history, with
    /// the validation loss when `evaluate` and the step lands on the interval.
    fn complete_step(
        &mut self,
        out: crate::backend::StepOutcome,
        lr: f32,
        ms: f64,
        evaluate: bool,
    ) -> Result<StepMetrics, TrainError> {
        if !out.applied && !out.skipped {
            return Err(TrainError::Diverged {
                step: self.step + 1,
                loss: out.loss,
                grad_norm: out.grad_norm,
            });
        }
        self.step += 1;
        self.submitted = self.step;
        let val_loss = (evaluate && self.evaluates_after(self.step)).then(|| self.evaluate());
        let metrics = self.record_step(out, lr, ms, val_loss);
        match exploded(metrics) {
            Some(e) => Err(e),
            None => Ok(metrics),
        }
    }

    /// Adds the step just completed (`self.step`) to the history and returns its metrics.
    fn record_step(
        &mut self,
        out: crate::backend::StepOutcome,
        lr: f32,
        ms: f64,
        val_loss: Option<f32>,
    ) -> StepMetrics {
        self.skipped_steps += u64::from(out.skipped);
        self.history.push(LossPoint {
            step: self.step,
            loss: out.loss,
            val_loss,
        });
        StepMetrics {
            step: self.step,
            loss: out.loss,
            val_loss,
            grad_norm: out.grad_norm,
            lr,
            ms,
            tokens_per_s: self.config.tokens_per_step() as f64 / (ms / 1e3),
            skipped: out.skipped,
        }
    }

    /// Learning rate, AdamW step and dropout seed of the step after `done`
    /// completed steps.
    pub fn step_params(&self, done: u64) -> StepParams {
        StepParams {
            lr: schedule::learning_rate(&self.config, done),
            adam_t: done + 1,
            dropout_seed: dropout_seed(self.seed, done),
        }
    }

    /// Whether the run evaluates the validation loss after step `step`
    /// (1-based): on the interval, and at the run's last step.
    pub fn evaluates_after(&self, step: u64) -> bool {
        let interval = self.config.eval_interval;
        (interval > 0 && step.is_multiple_of(interval)) || step == self.config.steps
    }

    /// Steps submitted to the GPU, including those not yet collected.
    pub fn submitted(&self) -> u64 {
        self.submitted
    }

    /// Submits up to `n` training steps to the GPU without waiting (the
    /// app's frame loop): the next batches of the run's sequence, with the
    /// same learning rates and dropout seeds [`Trainer::train_step`] would
    /// use, so the result is the same run. A submit stops at an evaluation
    /// step and queues the validation forward passes right behind it, so the
    /// validation loss is that of exactly those weights. Returns None when
    /// the backend is not the GPU or the run has reached its step count.
    /// Several submits may be in flight; collect them in order.
    pub fn submit_gpu_steps(&mut self, n: usize) -> Option<StepsInFlight> {
        let remaining = self.config.steps.saturating_sub(self.submitted);
        let mut n = (n as u64).min(remaining);
        if n == 0
            || self
                .backend
                .as_gpu()
                .is_none_or(|g| g.device_lost().is_some())
        {
            return None;
        }
        // A submit ends at an evaluation, and natively at a time-lapse frame
        // and the step before it (the app reads the weights there; in the
        // browser a GPU run records no frames yet: see src/app/frames.rs).
        let frames = cfg!(not(target_arch = "wasm32"));
        if let Some(k) = (1..=n).find(|k| {
            self.evaluates_after(self.submitted + k)
                || (frames
                    && (self.frame_due(self.submitted + k)
                        || self.frame_due(self.submitted + k + 1)))
        }) {
            n = k;
        }
        let first = self.submitted;
        let params: Vec<StepParams> = (first..first + n)
            .map(|done| self.step_params(done))
            .collect();
        let mut sampler_before = Vec::with_capacity(n as usize);
        let batches: Vec<Batch> = (0..n)
            .map(|_| {
                sampler_before.push(self.sampler_state());
                self.next_batch()
            })
            .collect();
        let evaluate = self.evaluates_after(first + n);
        let val_batches = std::mem::take(&mut self.val_batches);
        let gpu = self.backend.as_gpu().expect("checked above");
        let handle = gpu.submit_steps(&batches, &params);
        let eval = evaluate.then(|| gpu.submit_evals(&val_batches));
        self.val_batches = val_batches;
        self.submitted += n;
        Some(StepsInFlight {
            handle: Some(handle),
            eval,
            eval_loss: None,
            outcomes: None,
            gpu_ms: Vec::new(),
            lrs: params.iter().map(|p| p.lr).collect(),
            sampler_before,
            epoch: self.epoch,
            submitted_at: Instant::now(),
        })
    }

    /// Collects submitted steps if the GPU has finished them (never waits):
    /// `Err` gives the submit back when it is still running. The steps join
    /// the history; ms/step is the wall time since the later of the submit
    /// and the previous collection, shared out evenly.
    ///
    /// A step whose loss or gradients were not finite was not applied (the
    /// GPU skips its update) and comes back as [`TrainError::Diverged`] so
    /// the caller can pause: the run goes back to its last good step, the
    /// step before (as [`Trainer::train_step`] does). The steps queued behind
    /// it, in this submit and in any other still in flight, ran with their
    /// updates skipped (the GPU's halt flag) and are discarded when
    /// collected. A step whose loss passed
    /// [`EXPLODED_LOSS`] joins the history and comes back as
    /// [`TrainError::Exploded`] the same way.
    #[allow(clippy::result_large_err)] // the submit comes back whole, to try again next frame
    pub fn finish_gpu_steps(
        &mut self,
        mut flight: StepsInFlight,
    ) -> Result<GpuStepsDone, StepsInFlight> {
        let Some(gpu) = self.backend.as_gpu() else {
            return Ok(GpuStepsDone::default());
        };
        gpu.poll();
        if flight.outcomes.is_none() {
            let handle = flight
                .handle
                .take()
                .expect("a submit holds its handle until its outcomes arrive");
            match gpu.try_finish_steps(handle) {
                Ok(outcomes) => {
                    flight.outcomes = Some(outcomes);
                    flight.gpu_ms = gpu.take_step_ms();
                }
                Err(h) => {
                    flight.handle = Some(h);
                    return Err(flight);
                }
            }
        }
        if let Some(eval) = flight.eval.take() {
            match gpu.try_finish_evals(eval) {
                Ok(loss) => flight.eval_loss = Some(loss),
                Err(h) => {
                    flight.eval = Some(h);
                    return Err(flight);
                }
            }
        }
        let now = Instant::now();
        let since = self
            .last_finish
            .map_or(flight.submitted_at, |t| t.max(flight.submitted_at));
        self.last_finish = Some(now);
        let outcomes = flight.outcomes.take().unwrap_or_default();
        let n = outcomes.len();
        let ms = now.duration_since(since).as_secs_f64() * 1e3 / n.max(1) as f64;
        let mut done = GpuStepsDone {
            gpu_ms: std::mem::take(&mut flight.gpu_ms),
            ..Default::default()
        };
        if flight.epoch != self.epoch {
            // Submitted before the run went back to a last good step.
            done.discarded = n;
            return Ok(done);
        }
        for (i, (out, lr)) in outcomes.into_iter().zip(flight.lrs).enumerate() {
            if !out.applied && !out.skipped {
                done.diverged = Some(TrainError::Diverged {
                    step: self.step + 1,
                    loss: out.loss,
                    grad_norm: out.grad_norm,
                });
                done.discarded = n - i - 1;
                self.go_back_to_last_good(flight.sampler_before[i]);
                break;
            }
            self.step += 1;
            let val_loss = if i + 1 == n { flight.eval_loss } else { None };
            let metrics = self.record_step(out, lr, ms, val_loss);
            done.metrics.push(metrics);
            if let Some(e) = exploded(metrics) {
                done.diverged.get_or_insert(e);
            }
        }
        Ok(done)
    }

    /// Begins a training step to run entry by entry: on the run's next batch
    /// (without drawing it yet) or on a prompt, with the learning rate and
    /// dropout seed the run's next step uses. Nothing of the run changes
    /// until an entry runs, and only [`Trainer::finish_step`] keeps it.
    pub fn begin_step(&mut self, source: StepSource) -> Result<StepCursor, String> {
        if self.submitted != self.step {
            return Err("steps are in flight on the GPU; collect them first".into());
        }
        let batch = match &source {
            StepSource::NextBatch => self.peek_next_batch(),
            StepSource::Prompt(bytes) => {
                crate::probe::ProbeRequest::for_prompt(&self.config, bytes)?.batch
            }
        };
        let params = self.step_params(self.step);
        self.backend.load_step(&batch, Some(params));
        let program = self.backend.program();
        Ok(StepCursor {
            source,
            batch,
            params,
            run_step: self.step,
            entries: crate::stepthrough::entries(program),
            views: Vec::new(),
            focus: crate::stepthrough::default_focus(program),
            stashed: false,
            started: 0,
            exec_ms: 0.0,
        })
    }

    /// Starts the cursor's next entry (None when all have run): the view's
    /// reads queue around it. Before AdamW the weights are stashed, so
    /// [`Trainer::abandon_step`] can undo the update.
    pub fn start_entry(
        &mut self,
        cursor: &mut StepCursor,
    ) -> Result<Option<crate::stepthrough::EntryRun>, crate::backend::BackendError> {
        let Some(entry) = cursor.next().cloned() else {
            return Ok(None);
        };
        if entry.step == crate::program::Step::AdamW && !cursor.stashed {
            self.backend.stash_weights();
            cursor.stashed = true;
        }
        let run = crate::stepthrough::EntryRun::start(
            self.backend.as_mut(),
            entry,
            cursor.focus,
            cursor.params.lr,
        )?;
        cursor.started += 1;
        Ok(Some(run))
    }

    /// Runs the cursor's next entry and waits for its view (the CLI and
    /// tests; the app collects [`Trainer::start_entry`]'s run without
    /// waiting). None when every entry has run.
    pub fn step_entry<'c>(
        &mut self,
        cursor: &'c mut StepCursor,
    ) -> Result<Option<&'c crate::stepthrough::EntryView>, crate::backend::BackendError> {
        let start = Instant::now();
        let Some(run) = self.start_entry(cursor)? else {
            return Ok(None);
        };
        let view = run.finish_blocking(self.backend.as_mut(), &cursor.batch);
        cursor.exec_ms += start.elapsed().as_secs_f64() * 1e3;
        cursor.views.push(view);
        Ok(cursor.views.last())
    }

    /// Keeps a completed step of the run's next batch as the run's next
    /// step: draws that batch, counts the step, records its loss (and the
    /// validation loss when `evaluate` and the step lands on the interval).
    /// The same run as [`Trainer::train_step`] would have made.
    pub fn finish_step(
        &mut self,
        mut cursor: StepCursor,
        evaluate: bool,
    ) -> Result<StepMetrics, TrainError> {
        assert!(
            cursor.done() && cursor.source == StepSource::NextBatch && cursor.run_step == self.step,
            "only a whole step of the run's next batch, begun at this step, can be kept"
        );
        let before = self.sampler_state();
        let batch = self.next_batch();
        debug_assert_eq!(batch, cursor.batch);
        self.backend.discard_stash();
        cursor.stashed = false;
        let out = crate::backend::StepOutcome {
            loss: cursor.loss().unwrap_or(f64::NAN) as f32,
            grad_norm: cursor.grad_norm().unwrap_or(f64::NAN) as f32,
            applied: cursor.loss().is_some_and(f64::is_finite)
                && cursor.grad_norm().is_some_and(f64::is_finite),
            skipped: false,
        };
        let result = self.complete_step(out, cursor.params.lr, cursor.exec_ms, evaluate);
        if let Err(TrainError::Diverged { .. }) = &result {
            self.go_back_to_last_good(before);
        }
        result
    }

    /// Leaves a stepped-through step without keeping it: the weights and
    /// moments go back to what they were if AdamW ran (activations and
    /// gradients are scratch that the next step rewrites).
    pub fn abandon_step(&mut self, cursor: StepCursor) {
        if cursor.stashed {
            self.backend.restore_weights();
        }
    }

    /// The state of the batch sampler (saved in checkpoints).
    pub fn sampler_state(&self) -> u64 {
        self.sampler.rng.state()
    }

    /// The first `n` rows of the run's fixed validation batches, each a
    /// batch of one row (what the batch-1 programs of the flow and the
    /// interventions run).
    pub fn validation_rows(&self, n: usize) -> Vec<Batch> {
        self.val_batches
            .iter()
            .flat_map(Batch::rows)
            .take(n)
            .collect()
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
        Ok(read_params(self.backend.as_mut())?)
    }

    /// A checkpoint of the run so far, with or without AdamW's moments (a
    /// LoRA fine-tune's: its adapter, without the frozen base).
    pub fn checkpoint(&mut self, with_optimizer: bool) -> Result<Checkpoint, TrainError> {
        let params = self.params()?;
        let params = saved_params(self.backend.program(), params);
        let optimizer = if with_optimizer {
            Some(read_moments(self.backend.as_mut(), &params)?)
        } else {
            None
        };
        Ok(self.checkpoint_from(params, optimizer))
    }

    /// A checkpoint of the run with parameters (and moments) the caller read
    /// itself, e.g. asynchronously from the GPU.
    pub fn checkpoint_from(
        &self,
        params: Vec<NamedTensor>,
        optimizer: Option<OptimizerState>,
    ) -> Checkpoint {
        Checkpoint {
            config: self.config.clone(),
            step: self.step,
            seed: self.seed,
            sampler_state: Some(self.sampler.rng.state()),
            loss_history: self.history.clone(),
            timelapse: self.timelapse.clone(),
            params: saved_params(self.backend.program(), params),
            optimizer,
        }
    }
}

/// What a checkpoint of `program` holds of `params`: all of them, or a
/// LoRA fine-tune's trained adapters (its base is a checkpoint of its own).
pub fn saved_params(program: &Program, params: Vec<NamedTensor>) -> Vec<NamedTensor> {
    params
        .into_iter()
        .filter(|t| {
            program
                .tensor_id(&t.name)
                .is_none_or(|id| !program.tensors[id].is_frozen())
        })
        .collect()
}

/// A backend's parameters by name, in program order (the checkpoint's).
pub fn read_params(
    backend: &mut dyn Backend,
) -> Result<Vec<NamedTensor>, crate::backend::BackendError> {
    let program = backend.program().clone();
    program
        .params()
        .map(|id| {
            let t = &program.tensors[id];
            Ok(NamedTensor {
                name: t.name.clone(),
                shape: t.shape.clone(),
                values: backend.read(&t.name)?,
            })
        })
        .collect()
}

/// AdamW's moments (`adam.m.NAME`, `adam.v.NAME`) of `params`, from a backend.
pub fn read_moments(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
) -> Result<OptimizerState, crate::backend::BackendError> {
    let mut read = |prefix: &str| -> Result<Vec<NamedTensor>, crate::backend::BackendError> {
        params
            .iter()
            .map(|p| {
                let name = format!("{prefix}{}", p.name);
                Ok(NamedTensor {
                    values: backend.read(&name)?,
                    name,
                    shape: p.shape.clone(),
                })
            })
            .collect()
    };
    Ok(OptimizerState {
        m: read("adam.m.")?,
        v: read("adam.v.")?,
    })
}

/// The validation loss a run records: the mean over its validation batches
/// (its `seed`, its config's `eval_batches` windows of `corpus`), with the
/// weights `backend` holds. What `tinygpt eval --validation` and a gallery
/// card measure on a checkpoint.
pub fn validation_loss(
    backend: &mut dyn Backend,
    corpus: &Corpus,
    config: &Config,
    seed: u64,
) -> f32 {
    let batches = validation_batches(corpus, config.batch, config.ctx, config.eval_batches, seed);
    let sum: f64 = batches.iter().map(|b| backend.eval_loss(b) as f64).sum();
    (sum / batches.len() as f64) as f32
}
