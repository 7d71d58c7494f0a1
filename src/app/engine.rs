//! The training engine behind the app: the [`Trainer`] driven from the frame
//! loop without ever waiting. On the GPU, steps go out in submits of a few
//! steps each (two in flight, sized to a frame's time budget) and come back
//! by asynchronous readback; on the CPU, chunks of steps run on Bevy's
//! async-compute pool (a worker thread natively; the page's one thread in a
//! browser, yielding between steps). Tensor snapshots for the heatmaps and
//! for sampling, and probes of a forward pass (attention weights, logits)
//! for the scenes, arrive the same way: asked for, and collected by a later
//! pump, on either backend. So does a stepped-through training step (the
//! Step scene): its entries run on the worker (CPU) or go out as submits
//! with their reads (GPU), and their views come back to the cursor; and so
//! does a FlashAttention trace (the Flash scene): the traced kernels' submit
//! read back by `map_async` (GPU), or the CPU model in the worker's chunk.

use crate::backend::Backend;
use crate::flash::{FlashRequest, FlashTrace, FlashWant, TraceSource};
use crate::gpu::ProbeHandle;
use crate::readback::ReadbackHandle;
use crate::model::params::NamedTensor;
use crate::probe::{ProbeResult, ProbeSource};
use crate::stepthrough::EntryRun;
use crate::app::remote::Reply;
use crate::train::{StepCursor, StepMetrics, StepSource, StepsInFlight, TrainError, Trainer};
use bevy::platform::cell::SyncCell;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use web_time::Instant;

/// Submits in flight at most: enough that the GPU never waits for the frame
/// loop, few enough that a frame never queues behind much compute.
const MAX_IN_FLIGHT: usize = 3;
/// GPU time one submit may hold, at most (ms), at 60 Hz and faster: bounds
/// how long a frame's drawing can queue behind training. Slower frames get
/// a budget of their interval (up to [`MAX_SUBMIT_BUDGET_MS`]): the engine
/// is pumped once a frame, so three flights of 16 ms would leave the GPU
/// idle for most of a 100 ms frame.
const SUBMIT_BUDGET_MS: f64 = 16.0;
const MAX_SUBMIT_BUDGET_MS: f64 = 100.0;
/// Wall time a CPU chunk runs before it reports back: off the frame thread
/// natively; in the browser the chunk shares the page's one thread with the
/// frames, so it stops after the first step past a few milliseconds.
pub const CPU_CHUNK_MS: f64 = if cfg!(target_arch = "wasm32") {
    4.0
} else {
    50.0
};
/// Steps in one GPU submit, at most.
const MAX_STEPS_PER_SUBMIT: usize = 64;
/// Stepped entries out on the GPU at once, at most.
const MAX_ENTRIES_IN_FLIGHT: usize = 16;

/// A training step being stepped through: its cursor, how far to run it,
/// and what to do with it once it is idle.
pub struct Stepping {
    pub cursor: StepCursor,
    /// Run entries until this many have views.
    pub target: usize,
    /// Keep the step in the run once every entry has run.
    pub keep: bool,
    /// Run again after a diverged step, to find the first op whose output
    /// is not finite ([`Pumped::diagnosis`]); left as soon as it is found.
    pub diagnose: bool,
}

/// Tensors read back at one step: name → values.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Steps completed when the values were read.
    pub step: u64,
    pub tensors: HashMap<String, Arc<Vec<f32>>>,
}

impl Snapshot {
    /// The parameters, in program order, if the snapshot holds them all.
    pub fn params(&self, program: &crate::program::Program) -> Option<Vec<NamedTensor>> {
        program
            .params()
            .map(|id| {
                let t = &program.tensors[id];
                let values = self.tensors.get(&t.name)?;
                Some(NamedTensor {
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    values: values.to_vec(),
                })
            })
            .collect()
    }

    /// Whether AdamW's moments of `program`'s trained parameters were all
    /// read back (without copying them).
    pub fn has_moments(&self, program: &crate::program::Program) -> bool {
        let names = moment_names(program);
        !names.is_empty() && names.iter().all(|n| self.tensors.contains_key(n))
    }

    /// AdamW's moments of `program`'s trained parameters as read back
    /// ([`moment_names`], shaped as their parameters); None until it holds
    /// them all.
    pub fn moments(&self, program: &crate::program::Program) -> Option<Vec<NamedTensor>> {
        moment_names(program)
            .into_iter()
            .map(|name| {
                let values = self.tensors.get(&name)?;
                let param = name.trim_start_matches("adam.m.").trim_start_matches("adam.v.");
                let id = program.tensor_id(param)?;
                Some(NamedTensor {
                    shape: program.tensors[id].shape.clone(),
                    values: values.to_vec(),
                    name,
                })
            })
            .collect::<Option<Vec<_>>>()
            .filter(|m| !m.is_empty())
    }
}

/// The names of AdamW's moments (`adam.m.*`, `adam.v.*`) of `program`'s
/// trained parameters: what a scene that shows AdamW's step asks
/// [`crate::app::training::TensorWants`] for.
pub fn moment_names(program: &crate::program::Program) -> Vec<String> {
    program
        .trained()
        .map(|id| &program.tensors[id].name)
        .flat_map(|p| [format!("adam.m.{p}"), format!("adam.v.{p}")])
        .collect()
}

/// The step parameters of the run's next step after `step` (its learning
/// rate and AdamW's count), as a scene replaying AdamW's step uses them.
pub fn next_step(config: &crate::model::config::Config, step: u64) -> crate::backend::StepParams {
    crate::backend::StepParams {
        lr: crate::train::schedule::learning_rate(config, step),
        adam_t: step + 1,
        dropout_seed: 0,
    }
}

/// What one pump of the engine brought back.
#[derive(Debug, Default)]
pub struct Pumped {
    /// Steps started by this pump.
    pub started: u64,
    pub metrics: Vec<StepMetrics>,
    pub error: Option<TrainError>,
    pub snapshot: Option<Snapshot>,
    /// A probe that came back: the step whose weights it saw, and what it
    /// computed or why it could not.
    pub probe: Option<(u64, Result<ProbeResult, String>)>,
    /// A FlashAttention trace that came back, likewise.
    pub flash: Option<(u64, Result<FlashTrace, String>)>,
    /// After a diverged step, that step run again op by op: the first op
    /// whose output was not finite (None: every output was finite).
    pub diagnosis: Option<Option<crate::stepthrough::NonFinite>>,
}

/// A CPU chunk's result: the trainer comes back with it.
struct CpuChunk {
    trainer: Trainer,
    metrics: Vec<StepMetrics>,
    error: Option<TrainError>,
    snapshot: Option<Snapshot>,
    probe: Option<(u64, Result<ProbeResult, String>)>,
    flash: Option<(u64, Result<FlashTrace, String>)>,
    stepping: Option<Stepping>,
    stepping_error: Option<String>,
}

/// A snapshot in flight: its readback, the tensors' names and sizes, the step.
type SnapshotRead = (ReadbackHandle, Vec<(String, usize)>, u64);

enum Kind {
    Gpu {
        in_flight: VecDeque<StepsInFlight>,
        /// A snapshot read in flight: its handle, the names and sizes, the step.
        reading: Option<SnapshotRead>,
        /// A probe in flight, and the step whose weights it sees.
        probing: Option<(ProbeHandle, u64)>,
        /// A FlashAttention trace in flight, its request and step.
        flashing: Option<(ReadbackHandle, FlashRequest, u64)>,
        /// Stepped entries on their way, in order.
        entries: VecDeque<EntryRun>,
        /// The time-lapse's reads on their way.
        frames: crate::app::frames::GpuFrames,
    },
    Cpu {
        task: Option<Task<CpuChunk>>,
        /// In the browser, the trainer worker the run trains in when it
        /// can (src/app/remote.rs).
        remote: Option<Remote>,
    },
}

/// Wall time one call for steps keeps the browser's trainer worker busy
/// before it reports (ms): at least this, and at least a frame's interval
/// (up to [`MAX_REMOTE_STEPS_MS`]); two calls are out at once, so the
/// worker never waits for the page's next frame, slow frames included.
const REMOTE_STEPS_MS: f64 = 50.0;
const MAX_REMOTE_STEPS_MS: f64 = 1000.0;
/// Calls for steps out at the worker at once, at most, while training.
const REMOTE_STEPS_OUT: usize = 2;
/// How long the run stays home after a view asked for the idle trainer
/// (s), so that the view gets it before the run goes back to the worker.
const REMOTE_HOME_S: f64 = 2.0;

/// A CPU run's trainer worker, and the run while the worker holds it.
struct Remote {
    link: crate::app::remote::TrainerLink,
    away: Option<Away>,
    /// A view asked for the idle trainer then (it stays home a while).
    home_wanted: Option<Instant>,
    /// Why the worker failed: the run trains on the page's thread from
    /// then on.
    broken: Option<String>,
}

/// The run in the worker.
struct Away {
    /// The trainer as it was handed over: it takes the run back when the
    /// worker returns it ([`Trainer::adopt`]).
    parked: SyncCell<Trainer>,
    /// Steps completed, as the worker last reported.
    step: u64,
    /// Calls for steps not yet answered.
    steps_out: usize,
    /// A read not yet answered: the tensors' names and sizes.
    read_out: Option<Vec<(String, usize)>>,
    /// The run has been asked back.
    recalled: bool,
    /// The worker said it holds the run.
    started: bool,
}

pub struct Engine {
    /// None while a CPU chunk holds it. (A cell: the app's resources must be
    /// `Sync`, a backend is only `Send`; the engine hands out `&mut` only.)
    trainer: Option<SyncCell<Trainer>>,
    /// Steps completed when the engine last looked.
    step: u64,
    kind: Kind,
    /// Steps per GPU submit, adapted every frame: it grows while the GPU
    /// finishes everything between two frames (it would idle) and shrinks
    /// while it falls behind (a frame would wait on it).
    steps_per_submit: f64,
    /// Smoothed ms per step as collected (the GPU's pace while it is busy).
    ms_per_step: f64,
    /// A snapshot asked for and not yet started (names).
    wanted: Option<Vec<String>>,
    /// A probe asked for and not yet started.
    probe_wanted: Option<ProbeSource>,
    /// A FlashAttention trace asked for and not yet started.
    flash_wanted: Option<FlashWant>,
    /// The step being stepped through, when its cursor is not out with a
    /// CPU chunk (then [`Engine::stepping_out`] is set).
    stepping: Option<Stepping>,
    stepping_out: bool,
    /// Leaving the step-through is asked for.
    stepping_end: bool,
    /// A step-through asked for and not yet begun (the trainer was busy).
    stepping_wanted: Option<StepSource>,
    /// Why the last step-through could not begin or go on.
    pub stepping_error: Option<String>,
    /// Counts step-throughs begun (views cache their pictures per one).
    pub stepping_generation: u64,
    /// The step-through wanted is the diagnosis of a diverged step.
    diagnose_next: bool,
    /// When training in this engine started, how many steps it did since,
    /// and when the last of them came back (a run that has finished stops
    /// the clock there).
    pub started: Option<Instant>,
    pub steps_since_start: u64,
    pub last_step_at: Option<Instant>,
    /// The frame interval (ms, smoothed), which sizes the GPU's submits.
    frame_ms: f64,
    /// A copy of the run's time-lapse as of the trainer's last return
    /// (the scenes read it while a CPU chunk holds the trainer).
    timelapse: Option<std::sync::Arc<crate::model::timelapse::TimeLapse>>,
    /// Why the last time-lapse frame could not be recorded, if one could not.
    pub timelapse_error: Option<String>,
}

// SAFETY: in the browser (wasm32 without atomics) the app has one thread,
// so nothing is ever sent or shared between threads; wgpu just does not mark
// its handles `Send` there, and Bevy's resources must be. Natively the
// engine is `Send + Sync` on its own (backends are `Send`, the trainer sits
// in a `SyncCell`) and this does not apply.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Send for Engine {}
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Sync for Engine {}

impl Engine {
    pub fn new(mut trainer: Trainer) -> Self {
        let kind = if trainer.backend.as_gpu().is_some() {
            Kind::Gpu {
                in_flight: VecDeque::new(),
                reading: None,
                probing: None,
                flashing: None,
                entries: VecDeque::new(),
                frames: Default::default(),
            }
        } else {
            // A LoRA fine-tune's frozen base is not in its checkpoint: it
            // stays on the page's thread.
            let remote = crate::app::remote::TrainerLink::open()
                .filter(|_| trainer.config.lora.is_none())
                .map(|link| Remote {
                    link,
                    away: None,
                    home_wanted: None,
                    broken: None,
                });
            Kind::Cpu { task: None, remote }
        };
        Self {
            step: trainer.step,
            timelapse: trainer.timelapse.clone().map(std::sync::Arc::new),
            timelapse_error: None,
            trainer: Some(SyncCell::new(trainer)),
            kind,
            steps_per_submit: 1.0,
            ms_per_step: 0.0,
            wanted: None,
            probe_wanted: None,
            flash_wanted: None,
            stepping: None,
            stepping_out: false,
            stepping_end: false,
            stepping_wanted: None,
            stepping_error: None,
            stepping_generation: 0,
            diagnose_next: false,
            started: None,
            steps_since_start: 0,
            last_step_at: None,
            frame_ms: 0.0,
        }
    }

    pub fn is_gpu(&self) -> bool {
        matches!(self.kind, Kind::Gpu { .. })
    }

    /// The run's time-lapse as far as it has been recorded (a copy, kept
    /// while a CPU chunk holds the trainer).
    pub fn timelapse(&self) -> Option<&std::sync::Arc<crate::model::timelapse::TimeLapse>> {
        self.timelapse.as_ref()
    }


    /// The trainer, when no work holds it (nothing in flight, no CPU chunk
    /// running, no snapshot being read).
    /// The trainer, even with steps in flight (the GPU engine always holds
    /// it); None while a CPU chunk has it.
    pub fn trainer(&mut self) -> Option<&mut Trainer> {
        self.trainer.as_mut().map(SyncCell::get)
    }

    /// Whether the run trains on the GPU.
    pub fn on_gpu(&self) -> bool {
        matches!(self.kind, Kind::Gpu { .. })
    }

    pub fn idle_trainer(&mut self) -> Option<&mut Trainer> {
        if let Kind::Cpu {
            remote: Some(r), ..
        } = &mut self.kind
        {
            if r.away.is_some() || self.trainer.is_none() {
                r.home_wanted = Some(Instant::now());
            } else {
                r.home_wanted = None;
            }
        }
        if self.busy() {
            return None;
        }
        self.trainer.as_mut().map(SyncCell::get)
    }

    /// Whether steps or reads are still out.
    pub fn busy(&self) -> bool {
        match &self.kind {
            Kind::Gpu {
                in_flight,
                reading,
                probing,
                flashing,
                entries,
                frames: _,
            } => {
                !in_flight.is_empty()
                    || reading.is_some()
                    || probing.is_some()
                    || flashing.is_some()
                    || !entries.is_empty()
            }
            Kind::Cpu { task, remote } => {
                task.is_some() || remote.as_ref().is_some_and(|r| r.away.is_some())
            }
        }
    }

    /// Threads of the browser's trainer worker while it holds the run.
    pub fn worker_threads(&self) -> Option<u32> {
        match &self.kind {
            Kind::Cpu {
                remote: Some(r), ..
            } if r.away.is_some() => Some(r.link.threads),
            _ => None,
        }
    }

    /// Steps completed (collected) so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Asks for a snapshot of these tensors; it comes back from a later pump.
    pub fn request_snapshot(&mut self, names: Vec<String>) {
        self.wanted = Some(names);
    }

    /// Asks for a probe of the weights after the steps already started; it
    /// comes back from a later pump ([`Pumped::probe`]).
    pub fn request_probe(&mut self, source: ProbeSource) {
        self.probe_wanted = Some(source);
    }

    /// Whether a probe is asked for or on its way.
    pub fn probe_pending(&self) -> bool {
        self.probe_wanted.is_some()
            || matches!(
                &self.kind,
                Kind::Gpu {
                    probing: Some(_),
                    ..
                }
            )
    }

    /// Asks for a FlashAttention trace of the weights after the steps
    /// already started; it comes back from a later pump ([`Pumped::flash`]).
    pub fn request_flash(&mut self, want: FlashWant) {
        self.flash_wanted = Some(want);
    }

    /// Whether a trace is asked for or on its way.
    pub fn flash_pending(&self) -> bool {
        self.flash_wanted.is_some()
            || matches!(
                &self.kind,
                Kind::Gpu {
                    flashing: Some(_),
                    ..
                }
            )
    }

    pub fn snapshot_pending(&self) -> bool {
        self.wanted.is_some()
            || matches!(
                &self.kind,
                Kind::Gpu {
                    reading: Some(_),
                    ..
                }
            )
    }

    /// Begins stepping through the run's next training step (or one on a
    /// prompt) as soon as the trainer is idle; a step already being
    /// stepped through is left first (undone).
    pub fn begin_stepping(&mut self, source: StepSource) {
        self.end_stepping();
        self.stepping_wanted = Some(source);
        self.stepping_error = None;
    }

    /// The step being stepped through (its cursor holds the views so far).
    pub fn stepping(&self) -> Option<&Stepping> {
        self.stepping.as_ref()
    }

    /// Whether a step-through is asked for or going on.
    pub fn is_stepping(&self) -> bool {
        self.stepping.is_some() || self.stepping_out || self.stepping_wanted.is_some()
    }

    /// Whether the step-through's entries are running (views on their way).
    pub fn stepping_busy(&self) -> bool {
        self.stepping_wanted.is_some()
            || self.stepping_out
            || self
                .stepping
                .as_ref()
                .is_some_and(|s| s.cursor.views.len() < s.target.min(s.cursor.entries.len()))
    }

    /// Chooses the parameter the clip and AdamW views show; false when
    /// those entries have already started (their views keep the old one).
    pub fn set_step_focus(&mut self, focus: crate::program::TensorId) -> bool {
        match self.stepping.as_mut() {
            Some(s) if !s.cursor.clip_started() => {
                s.cursor.focus = focus;
                true
            }
            _ => false,
        }
    }

    /// Runs the step-through until `count` entries have views.
    pub fn step_to(&mut self, count: usize) {
        if let Some(s) = self.stepping.as_mut() {
            s.target = s.target.max(count.min(s.cursor.entries.len()));
        }
    }

    /// Keeps the stepped step in the run once all its entries have run.
    pub fn keep_stepped(&mut self) {
        if let Some(s) = self.stepping.as_mut() {
            s.keep = true;
            s.target = s.cursor.entries.len();
        }
    }

    /// Leaves the step-through: the run's weights go back to what they were
    /// (if AdamW ran), and training may go on. Entries still out are waited
    /// for by the next pumps (nothing new starts), then undone.
    pub fn end_stepping(&mut self) {
        self.stepping_wanted = None;
        if let Some(s) = self.stepping.as_mut() {
            s.target = s.cursor.views.len();
            s.keep = false;
        }
        self.stepping_end = true;
    }

    /// After a pump: a diverged step is run again op by op (the
    /// step-through, on this backend, without blocking a frame); once an
    /// entry's output is not finite, or every entry has run, the diagnosis
    /// is reported and the step-through left (the run is untouched).
    fn diagnose(&mut self, out: &mut Pumped) {
        if matches!(out.error, Some(TrainError::Diverged { .. })) {
            self.end_stepping();
            self.stepping_wanted = Some(StepSource::NextBatch);
            self.diagnose_next = true;
        }
        let Some(s) = self.stepping.as_mut().filter(|s| s.diagnose) else {
            return;
        };
        let found = s.cursor.views.iter().find_map(|v| v.first_non_finite());
        if found.is_some() || s.cursor.done() {
            out.diagnosis = Some(found);
            s.diagnose = false;
            self.end_stepping();
        }
    }

    /// Notes the last frame's interval (ms).
    pub fn frame_interval(&mut self, ms: f64) {
        if ms.is_finite() && ms > 0.0 {
            self.frame_ms = if self.frame_ms == 0.0 {
                ms
            } else {
                0.9 * self.frame_ms + 0.1 * ms
            };
        }
    }

    /// Moves the work along without waiting: collects what has finished and,
    /// while `allowed` more steps may start, starts some.
    pub fn pump(&mut self, allowed: u64) -> Pumped {
        let mut out = Pumped::default();
        match &mut self.kind {
            Kind::Gpu {
                in_flight,
                reading,
                probing,
                flashing,
                entries,
                frames,
            } => {
                let trainer = self
                    .trainer
                    .as_mut()
                    .expect("the GPU engine keeps its trainer")
                    .get();
                // The step-through: collect views in order, leave, begin,
                // start entries, keep.
                if !entries.is_empty() {
                    trainer.backend.poll();
                }
                while let Some(run) = entries.front_mut() {
                    let Some(s) = self.stepping.as_mut() else {
                        entries.clear();
                        break;
                    };
                    match run.try_finish(trainer.backend.as_mut(), &s.cursor.batch) {
                        Some(view) => {
                            s.cursor.views.push(view);
                            entries.pop_front();
                        }
                        None => break,
                    }
                }
                if self.stepping_end && entries.is_empty() {
                    if let Some(s) = self.stepping.take() {
                        trainer.abandon_step(s.cursor);
                    }
                    self.stepping_end = false;
                }
                if self.stepping.is_none()
                    && in_flight.is_empty()
                    && reading.is_none()
                    && probing.is_none()
                    && flashing.is_none()
                    && let Some(source) = self.stepping_wanted.take()
                {
                    match trainer.begin_step(source) {
                        Ok(cursor) => {
                            self.stepping_generation += 1;
                            let diagnose = std::mem::take(&mut self.diagnose_next);
                            self.stepping = Some(Stepping {
                                target: if diagnose { cursor.entries.len() } else { 0 },
                                cursor,
                                keep: false,
                                diagnose,
                            })
                        }
                        Err(e) => self.stepping_error = Some(e),
                    }
                }
                if !self.stepping_end
                    && let Some(s) = self.stepping.as_mut()
                {
                    while entries.len() < MAX_ENTRIES_IN_FLIGHT
                        && s.cursor.views.len() + entries.len() < s.target
                    {
                        match trainer.start_entry(&mut s.cursor) {
                            Ok(Some(run)) => entries.push_back(run),
                            Ok(None) => break,
                            Err(e) => {
                                self.stepping_error = Some(e.to_string());
                                s.target = s.cursor.views.len();
                                break;
                            }
                        }
                    }
                    if s.keep && s.cursor.done() && entries.is_empty() {
                        let s = self.stepping.take().expect("checked");
                        match trainer.finish_step(s.cursor, true) {
                            Ok(m) => out.metrics.push(m),
                            Err(e) => out.error = Some(e),
                        }
                    }
                }
                let allowed = if self.stepping.is_some() || self.stepping_wanted.is_some() {
                    0
                } else {
                    allowed
                };
                // Collect, in order.
                let was_in_flight = in_flight.len();
                while let Some(flight) = in_flight.pop_front() {
                    match trainer.finish_gpu_steps(flight) {
                        Ok(done) => {
                            out.metrics.extend(done.metrics);
                            if out.error.is_none() {
                                out.error = done.diverged;
                            }
                        }
                        Err(flight) => {
                            in_flight.push_front(flight);
                            break;
                        }
                    }
                }
                if frames.collect(trainer) {
                    refresh_timelapse(&mut self.timelapse, trainer);
                }
                if let Some((handle, names, step)) = reading.take() {
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    match gpu.try_take(handle) {
                        Ok(values) => out.snapshot = Some(split_snapshot(&values, &names, step)),
                        Err(h) => *reading = Some((h, names, step)),
                    }
                }
                if let Some((handle, step)) = probing.take() {
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    match gpu.try_finish_probe(handle) {
                        Ok(result) => out.probe = Some((step, result.map_err(|e| e.to_string()))),
                        Err(h) => *probing = Some((h, step)),
                    }
                }
                if let Some((handle, request, step)) = flashing.take() {
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    match gpu.try_take(handle) {
                        Ok(flat) => {
                            let trace = FlashTrace::decode(
                                &trainer.config,
                                &request,
                                TraceSource::Kernel,
                                &flat,
                            )
                            .ok_or_else(|| "the GPU device was lost".to_string());
                            out.flash = Some((step, trace));
                        }
                        Err(h) => *flashing = Some((h, request, step)),
                    }
                }
                // Size the next submits: all done since the last frame means
                // the GPU ran dry; none done with the queue full means it is
                // behind the frame loop.
                let mut allowed = if out.error.is_some() { 0 } else { allowed };
                if allowed > 0 && was_in_flight > 0 {
                    if in_flight.is_empty() {
                        self.steps_per_submit =
                            (self.steps_per_submit * 1.5).min(MAX_STEPS_PER_SUBMIT as f64);
                    } else if in_flight.len() == was_in_flight && was_in_flight == MAX_IN_FLIGHT {
                        self.steps_per_submit = (self.steps_per_submit * 0.8).max(1.0);
                    }
                }
                // The time-lapse's reads go behind the steps they measure.
                if !crate::app::frames::GpuFrames::ready(trainer) {
                    allowed = 0;
                }
                let mut queue_frames = |frames: &mut crate::app::frames::GpuFrames, trainer: &mut Trainer| {
                    if let Err(e) = frames.after_submit(trainer) {
                        self.timelapse_error = Some(e);
                    }
                };
                if allowed > 0 {
                    queue_frames(frames, trainer);
                }
                while in_flight.len() < MAX_IN_FLIGHT && allowed > 0 {
                    let budget = self.frame_ms.clamp(SUBMIT_BUDGET_MS, MAX_SUBMIT_BUDGET_MS);
                    let cap = if self.ms_per_step > 0.0 {
                        (budget / self.ms_per_step).floor() as usize
                    } else {
                        1
                    };
                    let n = (self.steps_per_submit.round() as usize)
                        .min(cap)
                        .clamp(1, MAX_STEPS_PER_SUBMIT)
                        .min(allowed as usize);
                    match trainer.submit_gpu_steps(n) {
                        Some(flight) => {
                            allowed -= flight.len() as u64;
                            out.started += flight.len() as u64;
                            in_flight.push_back(flight);
                            self.started.get_or_insert_with(Instant::now);
                            queue_frames(frames, trainer);
                        }
                        None => break,
                    }
                }
                // A snapshot goes out behind the steps already submitted.
                if reading.is_none()
                    && let Some(names) = self.wanted.take()
                {
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    match gpu.request_reads(&refs) {
                        Ok(handle) => {
                            let program = gpu.program();
                            let sized = names
                                .iter()
                                .map(|n| {
                                    let id = program
                                        .tensor_id(n)
                                        .expect("request_reads checked the names");
                                    (n.clone(), program.tensors[id].numel())
                                })
                                .collect();
                            *reading = Some((handle, sized, trainer.submitted()));
                        }
                        Err(e) => out.error = Some(TrainError::Backend(e)),
                    }
                }
                // A probe, likewise behind the steps submitted, once its
                // kernels are compiled (warmed one a frame: compiling them
                // in its submit would hold a page's frames).
                if probing.is_none()
                    && self.stepping.is_none()
                    && trainer.backend.as_gpu().is_some_and(|g| g.kernels_warm())
                    && let Some(source) = self.probe_wanted.take()
                {
                    let step = trainer.submitted();
                    let request = trainer.probe_request(&source);
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    match request.and_then(|r| gpu.submit_probe(&r).map_err(|e| e.to_string())) {
                        Ok(handle) => *probing = Some((handle, step)),
                        Err(e) => out.probe = Some((step, Err(e))),
                    }
                }
                // A trace, likewise, once its kernels and traced pipelines
                // are compiled.
                if flashing.is_none()
                    && self.stepping.is_none()
                    && trainer.backend.as_gpu().is_some_and(|g| g.ready_to_trace())
                    && let Some(want) = self.flash_wanted.take()
                {
                    let step = trainer.submitted();
                    let request = want.request(trainer);
                    let gpu = trainer.backend.as_gpu().expect("GPU engine");
                    match request.and_then(|r| {
                        gpu.submit_flash_trace(&r)
                            .map(|h| (h, r))
                            .map_err(|e| e.to_string())
                    }) {
                        Ok((handle, request)) => *flashing = Some((handle, request, step)),
                        Err(e) => out.flash = Some((step, Err(e))),
                    }
                }
            }
            Kind::Cpu { task, remote } => {
                if task.is_none()
                    && let Some(r) = remote.as_mut()
                {
                    let home_wanted = self.stepping.is_some()
                        || self.stepping_wanted.is_some()
                        || self.stepping_end
                        || self.probe_wanted.is_some()
                        || self.flash_wanted.is_some()
                        || r
                            .home_wanted
                            .is_some_and(|t| t.elapsed().as_secs_f64() < REMOTE_HOME_S);
                    pump_remote(
                        r,
                        &mut self.trainer,
                        &mut self.wanted,
                        &mut self.timelapse,
                        home_wanted,
                        allowed,
                        self.frame_ms.clamp(REMOTE_STEPS_MS, MAX_REMOTE_STEPS_MS),
                        &mut out,
                    );
                    if let Some(trainer) = self.trainer.as_mut() {
                        refresh_timelapse(&mut self.timelapse, trainer.get());
                        if remote.as_ref().is_some_and(|r| r.away.is_none()) {
                            self.step = trainer.get().step;
                        }
                    }
                    if !out.metrics.is_empty() {
                        self.started.get_or_insert_with(Instant::now);
                    }
                }
                if let Some(t) = task.as_mut()
                    && let Some(chunk) = check_ready(t)
                {
                    *task = None;
                    refresh_timelapse(&mut self.timelapse, &chunk.trainer);
                    self.trainer = Some(SyncCell::new(chunk.trainer));
                    out.metrics = chunk.metrics;
                    out.error = chunk.error;
                    out.snapshot = chunk.snapshot;
                    out.probe = chunk.probe;
                    out.flash = chunk.flash;
                    self.stepping = chunk.stepping;
                    self.stepping_out = false;
                    if let Some(e) = chunk.stepping_error {
                        self.stepping_error = Some(e);
                    }
                }
                if task.is_none()
                    && let Some(trainer) = self.trainer.take()
                {
                    let mut trainer = SyncCell::to_inner(trainer);
                    // The step-through: leave (a copy back), begin (a
                    // batch copy): both cheap enough for the frame.
                    if self.stepping_end {
                        if let Some(s) = self.stepping.take() {
                            trainer.abandon_step(s.cursor);
                        }
                        self.stepping_end = false;
                    }
                    if self.stepping.is_none()
                        && let Some(source) = self.stepping_wanted.take()
                    {
                        match trainer.begin_step(source) {
                            Ok(cursor) => {
                                self.stepping_generation += 1;
                                let diagnose = std::mem::take(&mut self.diagnose_next);
                                self.stepping = Some(Stepping {
                                    target: if diagnose { cursor.entries.len() } else { 0 },
                                    cursor,
                                    keep: false,
                                    diagnose,
                                })
                            }
                            Err(e) => self.stepping_error = Some(e),
                        }
                    }
                    let stepping = self.stepping.take_if(|s| {
                        s.cursor.views.len() < s.target || (s.keep && s.cursor.done())
                    });
                    let remaining = trainer.config.steps.saturating_sub(trainer.step);
                    // No more steps after one that failed: the caller
                    // pauses when it reads the error (as on the GPU).
                    let steps =
                        if self.stepping.is_some() || stepping.is_some() || out.error.is_some() {
                            0
                        } else {
                            allowed.min(remaining)
                        };
                    let wanted = self.wanted.take();
                    let (probe, flash) = if self.stepping.is_some() || stepping.is_some() {
                        (None, None)
                    } else {
                        (self.probe_wanted.take(), self.flash_wanted.take())
                    };
                    if steps == 0
                        && wanted.is_none()
                        && probe.is_none()
                        && flash.is_none()
                        && stepping.is_none()
                    {
                        self.trainer = Some(SyncCell::new(trainer));
                    } else if steps == 0 && probe.is_none() && flash.is_none() && stepping.is_none()
                    {
                        // Only a snapshot: copying CPU tensors is cheap.
                        out.snapshot =
                            Some(read_snapshot(&mut trainer, &wanted.unwrap_or_default()));
                        self.trainer = Some(SyncCell::new(trainer));
                    } else {
                        // Steps (or stepped entries), then the probe and the
                        // snapshot, off the frame (a CPU forward pass of a
                        // big preset takes longer than a frame).
                        if steps > 0 {
                            self.started.get_or_insert_with(Instant::now);
                        }
                        self.stepping_out = stepping.is_some();
                        out.started = steps;
                        *task = Some(AsyncComputeTaskPool::get().spawn(async move {
                            cpu_chunk(trainer, steps, wanted, probe, flash, stepping).await
                        }));
                    }
                }
            }
        }
        let collected: f64 = out.metrics.iter().map(|m| m.ms).sum();
        if !out.metrics.is_empty() && collected > 0.0 {
            let ms = collected / out.metrics.len() as f64;
            self.ms_per_step = if self.ms_per_step == 0.0 {
                ms
            } else {
                0.9 * self.ms_per_step + 0.1 * ms
            };
        }
        self.steps_since_start += out.metrics.len() as u64;
        if !out.metrics.is_empty() {
            self.last_step_at = Some(Instant::now());
        }
        if let Some(m) = out.metrics.last() {
            self.step = self.step.max(m.step);
        }
        self.diagnose(&mut out);
        out
    }
}

/// The browser's trainer worker, once a pump: takes its replies (steps,
/// reads, the run handed back); hands it the run when the run trains and
/// nothing wants it home; asks for steps (two calls out while training),
/// serves the views' snapshots from it (a save pauses the run first, so its
/// snapshot is read at home), and asks the run back when a view wants it
/// home (a probe, a trace, a step-through, the idle trainer) or when it
/// should stop (paused, finished, an error). The trainer is in `slot` only
/// while the run is home.
#[allow(clippy::too_many_arguments)]
fn pump_remote(
    r: &mut Remote,
    slot: &mut Option<SyncCell<Trainer>>,
    wanted: &mut Option<Vec<String>>,
    timelapse: &mut Option<Arc<crate::model::timelapse::TimeLapse>>,
    home_wanted: bool,
    allowed: u64,
    budget_ms: f64,
    out: &mut Pumped,
) {
    while r.away.is_some()
        && let Some(reply) = r.link.take()
    {
        let away = r.away.as_mut().expect("checked");
        match reply {
            Reply::Ready => {}
            Reply::Started(_) => away.started = true,
            Reply::Steps(done) => {
                away.steps_out = away.steps_out.saturating_sub(1);
                if let Some(m) = done.metrics.last() {
                    away.step = m.step;
                }
                let parked = away.parked.get();
                for f in done.frames {
                    parked.push_frame(f.into_frame());
                }
                refresh_timelapse(timelapse, parked);
                out.metrics.extend(done.metrics);
                if let Some(failure) = done.failure {
                    out.error = Some(failure.into());
                    if !away.recalled {
                        r.link.recall();
                        away.recalled = true;
                    }
                }
            }
            Reply::Read(values) => {
                if let Some(names) = away.read_out.take() {
                    out.snapshot = Some(split_snapshot(&values, &names, away.step));
                }
            }
            Reply::Checkpoint(bytes) => {
                let mut away = r.away.take().expect("checked");
                let adopted = crate::model::checkpoint::Checkpoint::from_bytes(&bytes, "the worker's run")
                    .map_err(|e| e.to_string())
                    .and_then(|ckpt| away.parked.get().adopt(&ckpt).map_err(|e| e.to_string()));
                if let Err(e) = adopted {
                    // Not the run's (its shape and seed are checked before
                    // anything is written): say so, and train at home.
                    bevy::log::warn!("the trainer worker's run could not be taken back: {e}");
                    r.broken = Some(e.clone());
                    out.error = Some(TrainError::Worker(e));
                }
                *slot = Some(away.parked);
            }
            Reply::Failed(why) => {
                // The run goes on at home from where it was handed over:
                // quietly when the worker never took it (a page offline
                // before it ever fetched the worker's files, a browser
                // without module workers); with the error once it trained.
                let away = r.away.take().expect("checked");
                bevy::log::warn!("the trainer worker failed: {why}");
                if away.started {
                    out.metrics.clear();
                    out.error = Some(TrainError::Worker(why.clone()));
                }
                r.broken = Some(why);
                *slot = Some(away.parked);
            }
        }
    }
    if r.broken.is_some() {
        return;
    }
    let remaining = |t: &Trainer, step: u64| t.config.steps.saturating_sub(step);
    // Where the run belongs at `step` of it: at home, unless it trains on.
    let home = |t: &Trainer, step: u64, error: bool| {
        home_wanted || allowed == 0 || remaining(t, step) == 0 || error
    };
    if r.away.is_none() {
        let Some(cell) = slot.as_mut() else { return };
        let trainer = cell.get();
        if home(trainer, trainer.step, out.error.is_some()) {
            return;
        }
        let bytes = trainer
            .checkpoint(true)
            .map_err(|e| e.to_string())
            .and_then(|c| c.to_bytes(crate::model::checkpoint::Precision::F32, "the run").map_err(|e| e.to_string()));
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                bevy::log::warn!("the run could not be handed to the trainer worker: {e}");
                r.broken = Some(e);
                return;
            }
        };
        r.link.start(&bytes, &trainer.corpus);
        let step = trainer.step;
        r.away = Some(Away {
            step,
            parked: slot.take().expect("checked"),
            steps_out: 0,
            read_out: None,
            recalled: false,
            started: false,
        });
    }
    let away = r.away.as_mut().expect("the run is away");
    if away.recalled {
        return;
    }
    let parked = away.parked.get();
    if home(parked, away.step, out.error.is_some()) {
        r.link.recall();
        away.recalled = true;
        return;
    }
    if away.read_out.is_none()
        && let Some(names) = wanted.take()
    {
        let program = parked.backend.program();
        let sized: Vec<(String, usize)> = names
            .iter()
            .filter_map(|n| Some((n.clone(), program.tensors[program.tensor_id(n)?].numel())))
            .collect();
        let names: Vec<String> = sized.iter().map(|(n, _)| n.clone()).collect();
        r.link.read(&names);
        away.read_out = Some(sized);
    }
    let most = if allowed == u64::MAX { REMOTE_STEPS_OUT } else { 1 };
    if away.steps_out < most {
        let steps = allowed.min(remaining(parked, away.step));
        r.link.steps(steps, budget_ms);
        away.steps_out += 1;
        out.started = steps;
    }
}

/// Takes a new copy of the trainer's time-lapse into `copy` when it has
/// frames the copy lacks.
fn refresh_timelapse(
    copy: &mut Option<std::sync::Arc<crate::model::timelapse::TimeLapse>>,
    trainer: &Trainer,
) {
    let frames =
        |t: Option<&crate::model::timelapse::TimeLapse>| t.map(|t| (t.frames.len(), t.last_step()));
    if frames(trainer.timelapse.as_ref()) != frames(copy.as_deref()) {
        *copy = trainer.timelapse.clone().map(std::sync::Arc::new);
    }
}

fn split_snapshot(values: &[f32], names: &[(String, usize)], step: u64) -> Snapshot {
    let mut tensors = HashMap::new();
    let mut at = 0;
    for (name, n) in names {
        let end = (at + n).min(values.len());
        tensors.insert(name.clone(), Arc::new(values[at..end].to_vec()));
        at = end;
    }
    Snapshot { step, tensors }
}

fn read_snapshot(trainer: &mut Trainer, names: &[String]) -> Snapshot {
    let tensors = names
        .iter()
        .filter_map(|n| Some((n.clone(), Arc::new(trainer.backend.read(n).ok()?))))
        .collect();
    Snapshot {
        step: trainer.step,
        tensors,
    }
}

/// Up to `steps` steps, for about [`CPU_CHUNK_MS`], yielding between steps
/// (so a browser's single thread keeps drawing); or a step-through's
/// entries up to its target, likewise; then the probe, the trace and the
/// snapshot.
async fn cpu_chunk(
    mut trainer: Trainer,
    steps: u64,
    wanted: Option<Vec<String>>,
    probe: Option<ProbeSource>,
    flash: Option<FlashWant>,
    mut stepping: Option<Stepping>,
) -> CpuChunk {
    let start = Instant::now();
    let mut metrics = Vec::new();
    let mut error = None;
    let mut stepping_error = None;
    for _ in 0..steps {
        match trainer.train_step() {
            Ok(m) => metrics.push(m),
            Err(e) => {
                // A step that blew up was taken: its loss goes on the chart.
                if let TrainError::Exploded { metrics: m, .. } = &e {
                    metrics.push(*m);
                }
                error = Some(e);
                break;
            }
        }
        if start.elapsed().as_secs_f64() * 1e3 >= CPU_CHUNK_MS {
            break;
        }
        bevy::tasks::futures_lite::future::yield_now().await;
    }
    if let Some(s) = stepping.as_mut() {
        while s.cursor.views.len() < s.target {
            if let Err(e) = trainer.step_entry(&mut s.cursor) {
                stepping_error = Some(e.to_string());
                s.target = s.cursor.views.len();
                break;
            }
            if start.elapsed().as_secs_f64() * 1e3 >= CPU_CHUNK_MS {
                break;
            }
            bevy::tasks::futures_lite::future::yield_now().await;
        }
    }
    if stepping.as_ref().is_some_and(|s| s.keep && s.cursor.done()) {
        let s = stepping.take().expect("checked");
        match trainer.finish_step(s.cursor, true) {
            Ok(m) => metrics.push(m),
            Err(e) => error = Some(e),
        }
    }
    let probe = probe.map(|source| {
        let result = trainer
            .probe_request(&source)
            .and_then(|r| trainer.backend.probe(&r).map_err(|e| e.to_string()));
        (trainer.step, result)
    });
    let flash = flash.map(|want| {
        let result = want.request(&trainer).and_then(|r| {
            crate::flash::trace_blocking(trainer.backend.as_mut(), &r).map_err(|e| e.to_string())
        });
        (trainer.step, result)
    });
    let snapshot = wanted.map(|names| read_snapshot(&mut trainer, &names));
    CpuChunk {
        trainer,
        metrics,
        error,
        snapshot,
        probe,
        flash,
        stepping,
        stepping_error,
    }
}
