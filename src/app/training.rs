//! The training plugin: the run (its settings, engine and state), the
//! commands the UI and dropped files send, snapshots for the views, and the
//! `TrainingRun` entity with one `StepRecord` child per step.

use super::engine::{Engine, Snapshot};
use crate::backend::{Chosen, GpuFallback, choose_backend};
use crate::data::Corpus;
use crate::gpu::GpuContext;
use crate::model::checkpoint::{Checkpoint, OptimizerState, Precision};
use crate::model::config::{Config, Lab};
use crate::model::params::NamedTensor;
use crate::probe::{ProbeResult, ProbeSource};
use crate::program::Program;
use crate::train::{StepMetrics, TrainError, Trainer};
use bevy::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;
use web_time::Instant;

/// Which backend a new run asks for: the library's one list.
pub use crate::backend::BackendChoice;

/// The text a run trains on.
#[derive(Clone, Debug)]
pub enum CorpusSource {
    /// TinyShakespeare, compiled in.
    Builtin,
    /// A file the user loaded (by path or drop).
    Bytes { name: String, bytes: Arc<Vec<u8>> },
}

impl CorpusSource {
    pub fn name(&self) -> String {
        match self {
            CorpusSource::Builtin => "tinyshakespeare.txt (built in)".into(),
            CorpusSource::Bytes { name, .. } => name.clone(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            CorpusSource::Builtin => crate::data::TINY_SHAKESPEARE.len(),
            CorpusSource::Bytes { bytes, .. } => bytes.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The corpus split for a context length, or why it cannot be.
    pub fn corpus(&self, ctx: usize) -> Result<Corpus, String> {
        match self {
            CorpusSource::Builtin => Corpus::tiny_shakespeare(ctx),
            CorpusSource::Bytes { name, bytes } => Corpus::from_bytes(name, bytes, ctx),
        }
        .map_err(|e| {
            format!("{e}; load a longer text file or choose a preset with a shorter context")
        })
    }
}

/// What the next run will be (edited in the Run panel; applied by New run).
#[derive(Resource, Clone, Debug)]
pub struct RunSettings {
    /// The preset's id, or the file it came from.
    pub preset: String,
    /// The preset's configuration (steps and lr below override it).
    pub config: Config,
    pub corpus: CorpusSource,
    pub lr: f32,
    pub steps: u64,
    pub seed: u64,
    pub backend: BackendChoice,
    /// The "break it" switches a new run gets (the preset's by default).
    pub lab: Lab,
}

impl RunSettings {
    pub fn from_preset(preset: &str, config: Config) -> Self {
        Self {
            preset: preset.to_string(),
            lr: config.lr,
            steps: config.steps,
            lab: config.lab,
            config,
            corpus: CorpusSource::Builtin,
            seed: 1337,
            backend: BackendChoice::Auto,
        }
    }

    /// The configuration a new run uses: the preset with this run's overrides.
    pub fn run_config(&self) -> Result<Config, String> {
        let mut config = self.config.clone();
        config.lr = self.lr;
        config.steps = self.steps;
        config.lab = self.lab;
        config.validate(&self.preset).map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// The wgpu device the GPU backend trains on: Bevy's (from
/// `RenderDevice`/`RenderQueue`) when it can run compute shaders. Natively,
/// `TINYGPT_APP_OWN_DEVICE=1` opens one of its own on the default adapter
/// instead, so that a lost training device leaves the renderer's standing.
/// Not the default: on the H100 host two devices trained 12–15% slower in
/// the app than one (xl 9.5 against 8.24 ms a step, nanogpt-char 117.5
/// against 106.9, at 1920×1080), the GPU switching between their contexts
/// every frame.
#[derive(Resource, Default, Clone)]
pub struct GpuDevice {
    pub context: Option<GpuContext>,
    /// Why there is none, where the app knows (the notice of a CPU run).
    pub missing: Option<String>,
    /// Whether `context` is the renderer's device: losing it loses both.
    pub shared_with_renderer: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Created, waiting for Train.
    Ready,
    Training,
    Paused,
    /// Reached its step count.
    Finished,
    /// A step was not finite; paused with the reason in the status.
    Diverged,
}

/// The run the app shows.
#[derive(Resource)]
pub struct Run {
    pub program: Program,
    pub preset: String,
    pub corpus_name: String,
    pub engine: Engine,
    pub state: RunState,
    /// e.g. `gpu (NVIDIA H100 80GB HBM3 (Vulkan, DiscreteGpu))`
    pub backend_label: String,
    /// Why the run is not on the backend asked for, if it is not.
    pub notice: Option<String>,
    /// Steps the Step button allows to start.
    pub single_steps: u64,
    pub last: Option<StepMetrics>,
    /// Numbered from 1, one per run created (for views that rebuild).
    pub generation: u64,
    pending_save: Option<(PathBuf, bool)>,
    save_requested: bool,
    /// A checkpoint being written on its own thread: where its outcome
    /// arrives (where it went, or why it failed).
    saving: Option<SaveInFlight>,
    /// On the GPU: the run as last read back to the host (every
    /// [`RECOVERY_INTERVAL_S`]), what training goes on from on the CPU if
    /// the device is lost.
    pub recovery: Option<Checkpoint>,
    /// When the last recovery read was asked for, and whether it is out.
    recovery_asked: Option<Instant>,
    recovery_out: bool,
}

/// Seconds between the host copies of a GPU run ([`Run::recovery`]).
pub const RECOVERY_INTERVAL_S: f64 = 30.0;

/// The outcome of a checkpoint save that runs off the frame thread (a save
/// of xl writes 77 MB and waits for the disk).
type SaveInFlight = std::sync::Arc<std::sync::Mutex<Option<Result<String, String>>>>;

impl Run {
    /// A checkpoint save is waiting for its snapshot or being written.
    pub fn saving(&self) -> bool {
        self.pending_save.is_some() || self.saving.is_some()
    }

    pub fn config(&self) -> &Config {
        &self.program.config
    }

    /// The run as the loss chart names it: `tiny, lr 3.0e-4, no causal mask`.
    pub fn label(&self) -> String {
        let c = self.config();
        format!("{}, lr {:.1e}, {}", self.preset, c.lr, c.lab.describe())
    }

    pub fn step(&self) -> u64 {
        self.last.map_or(0, |m| m.step).max(self.engine.step())
    }
}

/// Errors and messages for the status area. Errors stay until dismissed.
#[derive(Resource, Default, Debug)]
pub struct AppStatus {
    pub errors: Vec<String>,
    pub info: Option<String>,
    /// A save waiting for the user's word: its path exists and this app did
    /// not write it (the status line asks "Replace it?").
    pub confirm_replace: Option<PathBuf>,
    /// The files this app has saved, which later saves may replace unasked.
    pub written: std::collections::HashSet<PathBuf>,
}

impl AppStatus {
    pub fn error(&mut self, message: impl Into<String>) {
        let message = message.into();
        warn!("{message}");
        self.errors.push(message);
    }
}

/// What the heatmaps show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeatmapView {
    #[default]
    Weights,
    Gradients,
    AdamM,
    AdamV,
}

impl HeatmapView {
    pub const ALL: [HeatmapView; 4] = [
        HeatmapView::Weights,
        HeatmapView::Gradients,
        HeatmapView::AdamM,
        HeatmapView::AdamV,
    ];

    pub fn label(self) -> &'static str {
        match self {
            HeatmapView::Weights => "weights",
            HeatmapView::Gradients => "gradients",
            HeatmapView::AdamM => "Adam m (1st moment)",
            HeatmapView::AdamV => "Adam v (2nd moment)",
        }
    }

    /// The tensor this view shows for a parameter.
    pub fn tensor_name(self, param: &str) -> String {
        match self {
            HeatmapView::Weights => param.to_string(),
            HeatmapView::Gradients => format!("grad.{param}"),
            HeatmapView::AdamM => format!("adam.m.{param}"),
            HeatmapView::AdamV => format!("adam.v.{param}"),
        }
    }
}

/// The tensors each part of the app wants read back, by who wants them (a
/// scene, the sampler): the training plugin reads the union, so a snapshot
/// holds what every current view needs and nothing else.
#[derive(Resource, Debug, Default)]
pub struct TensorWants {
    by: std::collections::BTreeMap<&'static str, Vec<String>>,
    /// Counts changes (a change asks for a snapshot at once).
    changes: u64,
}

impl TensorWants {
    /// Replaces what `who` wants (an empty list withdraws it).
    pub fn set(&mut self, who: &'static str, names: Vec<String>) {
        if names.is_empty() {
            if self.by.remove(who).is_some() {
                self.changes += 1;
            }
        } else if self.by.get(who) != Some(&names) {
            self.by.insert(who, names);
            self.changes += 1;
        }
    }

    /// Every tensor wanted, each once, in a stable order.
    pub fn union(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.by
            .values()
            .flatten()
            .filter(|n| seen.insert(n.as_str()))
            .cloned()
            .collect()
    }
}

/// A scene's request for a probe of the forward pass (attention weights,
/// logits), and what came back. The training plugin sends it to the engine
/// (after the steps already started, so it sees the newest weights) at most
/// every `interval_s` while training, once per step otherwise, and at once
/// when the request changes.
#[derive(Resource, Debug)]
pub struct Probes {
    /// What to probe; None asks for nothing.
    pub want: Option<ProbeSource>,
    pub interval_s: f64,
    /// The latest result and the step whose weights it saw.
    pub latest: Option<(u64, ProbeResult)>,
    /// Counts results received.
    pub version: u64,
    pub error: Option<String>,
    last_request: Option<Instant>,
    /// The step the last request was sent at.
    requested_step: Option<u64>,
    dirty: bool,
}

impl Default for Probes {
    fn default() -> Self {
        Self {
            want: None,
            interval_s: 0.3,
            latest: None,
            version: 0,
            error: None,
            last_request: None,
            requested_step: None,
            dirty: true,
        }
    }
}

impl Probes {
    /// Asks for `source` (again at once if it changed).
    pub fn set_want(&mut self, source: Option<ProbeSource>) {
        if self.want != source {
            self.want = source;
            self.dirty = true;
        }
    }
}

/// A scene's request for a FlashAttention trace ([`crate::flash`]) and what
/// came back. Sent when the request changes or a refresh is asked for (a
/// replay should not jump under the viewer while the run trains).
#[derive(Resource, Debug, Default)]
pub struct FlashTraces {
    /// What to trace; None asks for nothing.
    pub want: Option<crate::flash::FlashWant>,
    /// The latest trace and the step whose weights it saw.
    pub latest: Option<(u64, std::sync::Arc<crate::flash::FlashTrace>)>,
    /// Counts traces received.
    pub version: u64,
    pub error: Option<String>,
    /// What was last sent.
    sent: Option<crate::flash::FlashWant>,
    refresh: bool,
}

impl FlashTraces {
    /// Asks for a trace of `want` (at once if it changed).
    pub fn set_want(&mut self, want: Option<crate::flash::FlashWant>) {
        self.want = want;
    }

    /// Traces the same again, on the newest weights.
    pub fn refresh(&mut self) {
        self.refresh = true;
    }
}

/// The latest tensors read back, and how often to read.
#[derive(Resource, Debug)]
pub struct Snapshots {
    pub latest: Option<Snapshot>,
    /// Counts snapshots received.
    pub version: u64,
    pub view: HeatmapView,
    /// Seconds between snapshots while training.
    pub interval_s: f64,
    /// The parameter the inspector shows (its gradient is read too).
    pub inspect: Option<String>,
    last_request: Option<Instant>,
    /// Whether the view changed since the last request (asks again at once).
    dirty: bool,
    /// The [`TensorWants`] change count the last request saw.
    wants_seen: u64,
}

impl Default for Snapshots {
    fn default() -> Self {
        Self {
            latest: None,
            version: 0,
            view: HeatmapView::Weights,
            interval_s: 0.25,
            inspect: None,
            last_request: None,
            dirty: true,
            wants_seen: 0,
        }
    }
}

impl Snapshots {
    /// Asks for a snapshot at the next frame (the inspector opened).
    pub fn dirty_now(&mut self) {
        self.dirty = true;
    }

    pub fn set_view(&mut self, view: HeatmapView) {
        if self.view != view {
            self.view = view;
            self.dirty = true;
        }
    }
}

/// Requests from the UI and from dropped files.
#[derive(Message, Clone, Debug)]
pub enum RunCommand {
    Train,
    Pause,
    /// One training step, then pause.
    Step,
    /// A fresh run from the current settings (same seed: step 0 again).
    NewRun,
    /// A corpus file's contents.
    LoadCorpus {
        name: String,
        bytes: Vec<u8>,
    },
    /// A preset file's contents (RON).
    LoadPreset {
        name: String,
        text: String,
    },
    /// Save the run's checkpoint to `path`; `replace`: the user said to
    /// replace a file there that this app did not write (see `crate::output`).
    SaveCheckpoint {
        path: PathBuf,
        replace: bool,
    },
    /// A checkpoint file's contents.
    LoadCheckpoint {
        name: String,
        bytes: Vec<u8>,
    },
    /// A fresh run of a built-in preset with these "break it" switches and
    /// the preset's learning rate times `lr_scale` (a lesson's lab step).
    NewLabRun {
        preset: String,
        lab: Lab,
        lr_scale: f32,
    },
    /// The GPU was lost (the reason): the run goes on on the CPU from its
    /// last host copy ([`Run::recovery`]), training if it was.
    FallBackToCpu(String),
}

/// Sent when a run is created: views rebuild from its program.
#[derive(Message, Clone, Copy, Debug)]
pub struct RunCreated {
    pub generation: u64,
}

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

/// Starts training as soon as the run exists (headless `--train`).
#[derive(Resource, Clone, Copy, Debug, Default)]
pub struct TrainOnStart(pub bool);

pub struct TrainingPlugin;

impl Plugin for TrainingPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<RunCommand>()
            .add_message::<RunCreated>()
            .init_resource::<AppStatus>()
            .init_resource::<Snapshots>()
            .init_resource::<EarlierRuns>()
            .init_resource::<TensorWants>()
            .init_resource::<Probes>()
            .init_resource::<FlashTraces>()
            .init_resource::<GpuDevice>()
            .init_resource::<TrainOnStart>()
            .add_systems(Startup, (find_gpu_device, create_first_run).chain())
            .add_systems(
                Update,
                (handle_commands, pump_training)
                    .chain()
                    .in_set(super::AppSystems::Training),
            );
    }
}

/// Finds the training device ([`GpuDevice`]): Bevy's, or with
/// `TINYGPT_APP_OWN_DEVICE` one of its own (opened once, at start-up, as
/// Bevy opens its own).
fn find_gpu_device(
    mut gpu: ResMut<GpuDevice>,
    device: Option<Res<bevy::render::renderer::RenderDevice>>,
    queue: Option<Res<bevy::render::renderer::RenderQueue>>,
    info: Option<Res<bevy::render::renderer::RenderAdapterInfo>>,
) {
    if gpu.context.is_some() {
        return;
    }
    if let (Some(device), Some(queue), Some(info)) = (device, queue, info) {
        let queue: &wgpu::Queue = &queue.0;
        let info: &wgpu::AdapterInfo = &info.0;
        #[cfg(target_arch = "wasm32")]
        if info.backend == wgpu::Backend::Gl {
            // WebGL2 draws the page but has no compute shaders.
            gpu.missing = Some(super::web::NO_WEBGPU.to_string());
            return;
        }
        #[cfg(not(target_arch = "wasm32"))]
        if std::env::var_os("TINYGPT_APP_OWN_DEVICE").is_some() {
            match GpuContext::new_blocking() {
                Ok(own) => {
                    gpu.context = Some(own);
                    return;
                }
                Err(e) => {
                    warn!("no GPU device of its own for training ({e}); sharing the renderer's")
                }
            }
        }
        gpu.context = Some(GpuContext::from_device(
            device.wgpu_device().clone(),
            queue.clone(),
            info.clone(),
        ));
        gpu.shared_with_renderer = true;
    }
}

fn create_first_run(
    mut commands: Commands,
    settings: Res<RunSettings>,
    gpu: Res<GpuDevice>,
    start: Res<TrainOnStart>,
    mut status: ResMut<AppStatus>,
    mut created: MessageWriter<RunCreated>,
) {
    match build_run(&settings, &gpu, None, 1) {
        Ok(mut run) => {
            if start.0 {
                run.state = RunState::Training;
            }
            install_run(&mut commands, run, &mut created);
        }
        Err(e) => {
            // The settings came from the command line, which checked them;
            // say so anyway and fall back to the default preset.
            status.error(format!("could not create the run: {e}"));
            let fallback = RunSettings::from_preset(
                crate::model::config::DEFAULT_PRESET,
                Config::load(crate::model::config::DEFAULT_PRESET).expect("built-in preset"),
            );
            if let Ok(run) = build_run(&fallback, &gpu, None, 1) {
                install_run(&mut commands, run, &mut created);
            }
        }
    }
}

fn install_run(commands: &mut Commands, run: Run, created: &mut MessageWriter<RunCreated>) {
    let generation = run.generation;
    commands.spawn(TrainingRun {
        preset: run.preset.clone(),
        generation,
    });
    commands.insert_resource(run);
    created.write(RunCreated { generation });
}

/// A run from settings (and a checkpoint to resume), on the backend asked
/// for, falling back to the CPU with a notice when the GPU cannot run it.
pub fn build_run(
    settings: &RunSettings,
    gpu: &GpuDevice,
    resume: Option<&Checkpoint>,
    generation: u64,
) -> Result<Run, String> {
    let config = match resume {
        Some(ckpt) => ckpt.config.clone(),
        None => settings.run_config()?,
    };
    let corpus = settings.corpus.corpus(config.ctx)?;
    let program = Program::new(&config);
    let device = match (&gpu.context, &gpu.missing) {
        (Some(ctx), _) => Ok(ctx),
        (None, Some(why)) => Err(why.as_str()),
        (None, None) => Err("no GPU device is available to the app"),
    };
    let Chosen { backend, notice } = choose_backend(
        settings.backend,
        device,
        program.clone(),
        GpuFallback::ToCpu,
    )?;
    let backend_label = backend.describe();
    let trainer = match resume {
        Some(ckpt) => Trainer::resume(backend, corpus.clone(), ckpt),
        None => Trainer::new(backend, corpus.clone(), settings.seed),
    }
    .map_err(|e| e.to_string())?;
    let step = trainer.step;
    let last = trainer.history.last().map(|p| StepMetrics {
        step: p.step,
        loss: p.loss,
        val_loss: p.val_loss,
        grad_norm: 0.0,
        lr: 0.0,
        ms: 0.0,
        tokens_per_s: 0.0,
    });
    Ok(Run {
        program,
        preset: settings.preset.clone(),
        corpus_name: corpus.name.clone(),
        engine: Engine::new(trainer),
        state: if step >= config.steps {
            RunState::Finished
        } else {
            RunState::Ready
        },
        backend_label,
        notice,
        single_steps: 0,
        last,
        generation,
        pending_save: None,
        save_requested: false,
        saving: None,
        recovery: None,
        recovery_asked: None,
        recovery_out: false,
    })
}

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
    fn keep(&mut self, run: &Run, records: &[StepRecord]) {
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

#[allow(clippy::too_many_arguments)]
fn handle_commands(
    mut commands: Commands,
    mut reader: MessageReader<RunCommand>,
    mut settings: ResMut<RunSettings>,
    run: Option<ResMut<Run>>,
    gpu: Res<GpuDevice>,
    mut status: ResMut<AppStatus>,
    mut created: MessageWriter<RunCreated>,
    runs: Query<Entity, With<TrainingRun>>,
    (records, mut earlier): (Query<&StepRecord>, ResMut<EarlierRuns>),
) {
    let Some(mut run) = run else { return };
    for command in reader.read() {
        let fresh = run.step() == 0 && !run.engine.busy();
        let mut rebuild: Option<Option<Checkpoint>> = None;
        // Where a resumed run's weights came from, for the status line.
        let mut resumed_from = "the checkpoint";
        let mut train_on = false;
        match command.clone() {
            RunCommand::Train => {
                if matches!(run.state, RunState::Finished) {
                    status.error(format!("the run has done its {} steps; raise Steps and press New run, or load a checkpoint", run.config().steps));
                } else if run.pending_save.is_none() {
                    run.state = RunState::Training;
                }
            }
            RunCommand::Pause => {
                if run.state == RunState::Training {
                    run.state = RunState::Paused;
                }
            }
            RunCommand::Step => {
                if matches!(
                    run.state,
                    RunState::Ready | RunState::Paused | RunState::Diverged
                ) {
                    run.state = RunState::Paused;
                    run.single_steps += 1;
                }
            }
            RunCommand::NewRun => rebuild = Some(None),
            RunCommand::LoadCorpus { name, bytes } => {
                let source = CorpusSource::Bytes {
                    name: name.clone(),
                    bytes: Arc::new(bytes),
                };
                match source.corpus(run.config().ctx) {
                    Err(e) => status.error(format!("corpus not loaded: {e}")),
                    Ok(c) => {
                        settings.corpus = source;
                        if fresh {
                            rebuild = Some(None);
                            status.info = Some(format!(
                                "training on {name} ({} bytes)",
                                c.train.len() + c.val.len()
                            ));
                        } else {
                            status.info = Some(format!(
                                "{name} is loaded; press New run to train on it (the current run keeps its corpus)"
                            ));
                        }
                    }
                }
            }
            RunCommand::NewLabRun {
                preset,
                lab,
                lr_scale,
            } => match Config::load(&preset) {
                Err(e) => status.error(format!("the lab could not start: {e}")),
                Ok(config) => {
                    *settings = RunSettings {
                        corpus: settings.corpus.clone(),
                        seed: settings.seed,
                        backend: settings.backend,
                        lr: config.lr * lr_scale,
                        lab,
                        ..RunSettings::from_preset(&preset, config)
                    };
                    status.info = Some(format!(
                        "lab: a fresh {preset} with {}, learning rate {:.1e}",
                        lab.describe(),
                        settings.lr
                    ));
                    rebuild = Some(None);
                }
            },
            RunCommand::LoadPreset { name, text } => match Config::from_ron(&text, &name) {
                Err(e) => status.error(format!("preset not loaded: {e}")),
                Ok(config) => {
                    *settings = RunSettings {
                        corpus: settings.corpus.clone(),
                        seed: settings.seed,
                        backend: settings.backend,
                        ..RunSettings::from_preset(&name, config)
                    };
                    status.info = Some(format!("preset {name} loaded; press New run to start it"));
                }
            },
            RunCommand::SaveCheckpoint { path, replace } => {
                // In the browser the checkpoint becomes a download.
                let replace = replace || status.written.contains(&path);
                let writable = if cfg!(target_arch = "wasm32") {
                    Ok(())
                } else {
                    crate::output::check_save(&path, "the save path", replace)
                };
                if run.saving.is_some() {
                    status.error("a checkpoint is still being written; save again when it is done");
                } else if let Err(refusal) = writable {
                    match refusal {
                        // An earlier file, not written here: ask before replacing it.
                        crate::output::SaveRefusal::Ask => status.confirm_replace = Some(path),
                        crate::output::SaveRefusal::Refused(e) => {
                            status.error(format!("checkpoint not saved: {e}"))
                        }
                    }
                } else {
                    status.confirm_replace = None;
                    status.written.insert(path.clone());
                    let resume = run.state == RunState::Training;
                    if resume {
                        run.state = RunState::Paused;
                    }
                    run.pending_save = Some((path, resume));
                    run.save_requested = false;
                }
            }
            RunCommand::LoadCheckpoint { name, bytes } => {
                match Checkpoint::from_bytes(&bytes, &name) {
                    Err(e) => status.error(format!("checkpoint not loaded: {e}")),
                    Ok(ckpt) => rebuild = Some(Some(ckpt)),
                }
            }
            RunCommand::FallBackToCpu(reason) => {
                settings.backend = BackendChoice::Cpu;
                train_on = run.state == RunState::Training;
                let lost_steps = run.step() - run.recovery.as_ref().map_or(0, |c| c.step);
                status.error(match &run.recovery {
                    Some(c) => format!(
                        "the GPU was lost ({reason}); the run goes on on the CPU from step {}, \
                         its last copy read back from the GPU ({lost_steps} steps since are lost)",
                        c.step
                    ),
                    None => format!(
                        "the GPU was lost ({reason}) before a copy of the run was read back; \
                         a fresh run starts on the CPU"
                    ),
                });
                rebuild = Some(run.recovery.clone());
                resumed_from = "the last copy read back from the GPU";
            }
        }
        if let Some(resume) = rebuild {
            match build_run(&settings, &gpu, resume.as_ref(), run.generation + 1) {
                Err(e) => status.error(format!(
                    "the new run could not start, the current one is kept: {e}"
                )),
                Ok(mut new_run) => {
                    if let Some(ckpt) = &resume {
                        status.info =
                            Some(format!("resumed at step {} from {resumed_from}", ckpt.step));
                    }
                    if train_on {
                        new_run.state = RunState::Training;
                    }
                    let kept: Vec<StepRecord> = records.iter().copied().collect();
                    earlier.keep(&run, &kept);
                    for e in &runs {
                        commands.entity(e).despawn();
                    }
                    install_run(&mut commands, new_run, &mut created);
                    // Later commands of this frame wait for the new run.
                    return;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn pump_training(
    mut commands: Commands,
    run: Option<ResMut<Run>>,
    mut snapshots: ResMut<Snapshots>,
    wants: Res<TensorWants>,
    mut probes: ResMut<Probes>,
    mut flash: ResMut<FlashTraces>,
    mut status: ResMut<AppStatus>,
    runs: Query<(Entity, &TrainingRun)>,
    time: Res<Time<Real>>,
) {
    let Some(mut run) = run else { return };
    let run = &mut *run;
    run.engine.frame_interval(time.delta_secs_f64() * 1e3);
    let Some((run_entity, _)) = runs.iter().find(|(_, r)| r.generation == run.generation) else {
        return;
    };
    let allowed = match run.state {
        RunState::Training => u64::MAX,
        _ => run.single_steps,
    };
    let pumped = run.engine.pump(allowed);
    run.single_steps = run.single_steps.saturating_sub(pumped.started);
    for m in &pumped.metrics {
        commands.spawn((StepRecord::from(*m), ChildOf(run_entity)));
        run.last = Some(*m);
    }
    if let Some(e) = pumped.error {
        run.state = RunState::Diverged;
        let back = if matches!(e, TrainError::Diverged { .. }) {
            format!(
                ". The run is back at step {}, its last good step (the steps queued behind were discarded); \
                 lower the learning rate (New run) or press Train to try again. Finding the op where it began…",
                run.engine.step()
            )
        } else {
            String::new()
        };
        status.error(format!("training paused: {e}{back}"));
    }
    if let Some(found) = pumped.diagnosis {
        status.error(match found {
            Some(at) => format!("the diverged step, run again op by op: the first value that is not finite came out of {at}"),
            None => "the diverged step, run again op by op: every output was finite this time".to_string(),
        });
    }
    if run.engine.step() >= run.config().steps
        && run.state == RunState::Training
        && !run.engine.busy()
    {
        run.state = RunState::Finished;
        status.info = Some(format!("the run finished its {} steps", run.config().steps));
    }
    match pumped.probe {
        Some((step, Ok(result))) => {
            probes.latest = Some((step, result));
            probes.version += 1;
            probes.error = None;
        }
        Some((_, Err(e))) => probes.error = Some(e),
        None => {}
    }
    if let Some(source) = probes.want.clone() {
        let step = run.step();
        let due = probes.dirty
            || if run.state == RunState::Training {
                probes
                    .last_request
                    .is_none_or(|t| t.elapsed().as_secs_f64() >= probes.interval_s)
            } else {
                probes.requested_step != Some(step) && !run.engine.busy()
            };
        if due && !run.engine.probe_pending() && run.pending_save.is_none() {
            run.engine.request_probe(source);
            probes.last_request = Some(Instant::now());
            probes.requested_step = Some(step);
            probes.dirty = false;
        }
    }
    match pumped.flash {
        Some((step, Ok(trace))) => {
            flash.latest = Some((step, std::sync::Arc::new(trace)));
            flash.version += 1;
            flash.error = None;
        }
        Some((_, Err(e))) => flash.error = Some(e),
        None => {}
    }
    if let Some(want) = flash.want.clone()
        && (flash.sent.as_ref() != Some(&want) || flash.refresh)
        && !run.engine.flash_pending()
        && run.pending_save.is_none()
    {
        run.engine.request_flash(want.clone());
        flash.sent = Some(want);
        flash.refresh = false;
    }
    if let Some(snapshot) = pumped.snapshot {
        if let Some((path, resume)) = run.pending_save.clone()
            && run.save_requested
        {
            run.pending_save = None;
            run.save_requested = false;
            match save_checkpoint(run, &snapshot, &path) {
                Ok(saving) => {
                    status.info = Some(format!("saving the checkpoint of step {}…", snapshot.step));
                    run.saving = Some(saving);
                }
                Err(e) => status.error(format!("checkpoint not saved: {e}")),
            }
            if resume {
                run.state = RunState::Training;
            }
        }
        if run.recovery_out {
            run.recovery_out = false;
            match checkpoint_of(run, &snapshot) {
                Ok(checkpoint) => run.recovery = Some(checkpoint),
                Err(e) => warn!("no host copy of the run: {e}"),
            }
        }
        snapshots.latest = Some(snapshot);
        snapshots.version += 1;
    }
    // The save's thread reports where the checkpoint went (the run trains on
    // meanwhile: the checkpoint holds its own copy of the snapshot).
    let finished = run
        .saving
        .as_ref()
        .and_then(|slot| slot.lock().ok().and_then(|mut s| s.take()));
    if let Some(outcome) = finished {
        run.saving = None;
        match outcome {
            Ok(message) => status.info = Some(message),
            Err(e) => status.error(format!("checkpoint not saved: {e}")),
        }
    }
    // A pending save waits until nothing is in flight, then reads everything.
    if run.pending_save.is_some() && !run.save_requested && !run.engine.busy() {
        let names = run
            .program
            .params()
            .flat_map(|id| {
                let n = &run.program.tensors[id].name;
                [
                    n.clone(),
                    format!("grad.{n}"),
                    format!("adam.m.{n}"),
                    format!("adam.v.{n}"),
                ]
            })
            .collect();
        run.engine.request_snapshot(names);
        run.save_requested = true;
        return;
    }
    // What every view wants, each tensor once; big ones are read less
    // often: about 25 MB/s of readback at most (each snapshot is copied on
    // the frame thread).
    let mut names: Vec<String> = wants
        .union()
        .into_iter()
        .filter(|n| run.program.tensor_id(n).is_some())
        .collect();
    // On the GPU, every half minute of training the snapshot also reads the
    // whole run (weights and moments): the copy a lost device leaves.
    let recovery_due = run.engine.on_gpu()
        && run.state == RunState::Training
        && run.step() > 0
        && run
            .recovery_asked
            .is_none_or(|t| t.elapsed().as_secs_f64() >= RECOVERY_INTERVAL_S);
    if recovery_due && run.engine.snapshot_pending() {
        // The heatmaps wait until the copy has been asked for.
        return;
    }
    if recovery_due {
        for id in run.program.params() {
            let n = &run.program.tensors[id].name;
            for name in [n.clone(), format!("adam.m.{n}"), format!("adam.v.{n}")] {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        run.engine.request_snapshot(names);
        run.recovery_asked = Some(Instant::now());
        run.recovery_out = true;
        snapshots.last_request = Some(Instant::now());
        return;
    }
    if names.is_empty() {
        return;
    }
    let bytes: f64 = names
        .iter()
        .filter_map(|n| run.program.tensor_id(n))
        .map(|id| 4.0 * run.program.tensors[id].numel() as f64)
        .sum();
    let interval = snapshots.interval_s.max(bytes / 2.5e7);
    let changed = wants.changes != snapshots.wants_seen;
    let due = snapshots.dirty
        || changed
        || snapshots
            .last_request
            .is_none_or(|t| t.elapsed().as_secs_f64() >= interval)
            && (run.state == RunState::Training
                || snapshots
                    .latest
                    .as_ref()
                    .is_none_or(|s| s.step != run.step()));
    if due && !run.engine.snapshot_pending() && run.pending_save.is_none() {
        run.engine.request_snapshot(names);
        snapshots.last_request = Some(Instant::now());
        snapshots.dirty = false;
        snapshots.wants_seen = wants.changes;
    }
}

/// The run as a checkpoint (with AdamW's moments) from a full snapshot, at
/// the snapshot's step.
fn checkpoint_of(run: &mut Run, snapshot: &Snapshot) -> Result<Checkpoint, String> {
    let program = &run.program;
    let take = |prefix: &str| -> Result<Vec<NamedTensor>, String> {
        program
            .params()
            .map(|id| {
                let t = &program.tensors[id];
                let name = format!("{prefix}{}", t.name);
                let values = snapshot
                    .tensors
                    .get(&name)
                    .filter(|v| v.len() == t.numel())
                    .ok_or(format!("`{name}` was not read back"))?;
                Ok(NamedTensor {
                    name,
                    shape: t.shape.clone(),
                    values: values.to_vec(),
                })
            })
            .collect()
    };
    let params = take("")?;
    let optimizer = OptimizerState {
        m: take("adam.m.")?,
        v: take("adam.v.")?,
    };
    let trainer = run.engine.trainer().ok_or("the run was busy")?;
    let mut checkpoint = trainer.checkpoint_from(params, Some(optimizer));
    // Steps may have been trained since the read (on the GPU, in flight).
    checkpoint.step = snapshot.step;
    checkpoint.loss_history.retain(|p| p.step <= snapshot.step);
    Ok(checkpoint)
}

/// Writes the run's checkpoint (with AdamW's moments) from a full snapshot
/// on a thread of its own; in the browser, offers it as a download named
/// after the preset and the snapshot's step (`path` is unused there).
/// Returns where the outcome will arrive.
fn save_checkpoint(
    run: &mut Run,
    snapshot: &Snapshot,
    path: &std::path::Path,
) -> Result<SaveInFlight, String> {
    let checkpoint = checkpoint_of(run, snapshot)?;
    let slot = SaveInFlight::default();
    let step = snapshot.step;
    #[cfg(not(target_arch = "wasm32"))]
    {
        let (path, done) = (path.to_path_buf(), slot.clone());
        std::thread::Builder::new()
            .name("tinygpt-save".into())
            .spawn(move || {
                let outcome = checkpoint
                    .save(&path, Precision::F32)
                    .map(|()| format!("checkpoint saved to {} at step {step}", path.display()))
                    .map_err(|e| e.to_string());
                if let Ok(mut s) = done.lock() {
                    *s = Some(outcome);
                }
            })
            .map_err(|e| format!("cannot start the save: {e}"))?;
    }
    #[cfg(target_arch = "wasm32")]
    {
        // A download: the browser writes the file, off this thread.
        let _ = path;
        let name = format!(
            "tinygpt-{}-step{}.safetensors",
            run.preset.replace(['/', '\\', '.'], "_"),
            step
        );
        let bytes = checkpoint
            .to_bytes(Precision::F32, &name)
            .map_err(|e| e.to_string())?;
        super::web::download(&name, &bytes);
        *slot.lock().unwrap() = Some(Ok(format!(
            "checkpoint downloaded as {name} at step {step}"
        )));
    }
    Ok(slot)
}
