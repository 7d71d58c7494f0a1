//! The run ([`Run`]): its engine, state and recovery copy, and how one is
//! built from settings, a preset or a checkpoint and put in the world.

use super::device::GpuDevice;
use super::records::{StepRecord, TrainingRun};
use super::settings::RunSettings;
use super::status::AppStatus;
use crate::app::engine::Engine;
use crate::backends::{BackendChoice, Chosen, GpuFallback, Precision, choose_backend};
use crate::gpu::GpuContext;
use crate::model::checkpoint::Checkpoint;
use crate::model::config::Config;
use crate::program::Program;
use crate::train::{StepMetrics, Trainer};
use bevy::prelude::*;
use std::path::PathBuf;

use web_time::Instant;

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
    /// The gallery model it was opened from, if it was (a link keeps it).
    pub gallery: Option<String>,
    pub engine: Engine,
    pub state: RunState,
    /// e.g. `gpu (NVIDIA H100 80GB HBM3 (Vulkan, DiscreteGpu))`
    pub backend_label: String,
    /// Why the run is not on the backend asked for, if it is not.
    pub notice: Option<String>,
    /// The matmuls' arithmetic it trains with.
    pub precision: Precision,
    /// The kernels each entry of the step list runs on its backend (the
    /// GPU's plan; empty on the CPU): the Step scene names them, and which
    /// ran in f16 on the tensor cores.
    pub entry_kernels: Vec<Vec<&'static str>>,
    /// Steps the Step button allows to start.
    pub single_steps: u64,
    pub last: Option<StepMetrics>,
    /// Numbered from 1, one per run created (for views that rebuild).
    pub generation: u64,
    pub(super) pending_save: Option<(PathBuf, bool)>,
    pub(super) save_requested: bool,
    /// A checkpoint being written on its own thread: where its outcome
    /// arrives (where it went, or why it failed).
    pub(super) saving: Option<SaveInFlight>,
    /// On the GPU: the run as last read back to the host (every
    /// [`RECOVERY_INTERVAL_S`]), what training goes on from on the CPU if
    /// the device is lost.
    pub recovery: Option<Checkpoint>,
    /// When the last recovery read was asked for, and whether it is out.
    pub(super) recovery_asked: Option<Instant>,
    pub(super) recovery_out: bool,
    /// The first [`VALIDATION_ROWS`] rows of the run's validation batches,
    /// each a batch of one row (what Take it apart's importance map
    /// measures on, on request).
    pub validation_rows: Vec<crate::data::Batch>,
    /// Fine-tune this run's model when its weights are read back
    /// ([`super::RunCommand::Finetune`]), and whether they are asked for.
    pub(super) pending_finetune: Option<PendingFinetune>,
    pub(super) finetune_requested: bool,
}

/// A fine-tune of the run's model, waiting for its weights to be read back.
#[derive(Clone, Debug)]
pub(super) enum PendingFinetune {
    /// New adapters with these choices.
    New(crate::model::lora::FinetuneOptions),
    /// An adapter loaded (dropped, or Load): it goes on if it was trained
    /// on these weights.
    Adapter(std::sync::Arc<Checkpoint>),
}

/// Rows of the run's validation windows kept for the scenes' batch-1
/// programs ([`Run::validation_rows`]).
pub const VALIDATION_ROWS: usize = 16;

/// Seconds between the host copies of a GPU run ([`Run::recovery`]).
pub const RECOVERY_INTERVAL_S: f64 = 30.0;

/// The outcome of a checkpoint save that runs off the frame thread (a save
/// of xl writes 77 MB and waits for the disk).
pub(super) type SaveInFlight = std::sync::Arc<std::sync::Mutex<Option<Result<String, String>>>>;

impl Run {
    /// A checkpoint save is waiting for its snapshot or being written.
    pub fn saving(&self) -> bool {
        self.pending_save.is_some() || self.saving.is_some()
    }

    pub fn config(&self) -> &Config {
        &self.program.config
    }

    /// The run as the loss chart names it: `tiny, lr 3.0e-4, no causal mask`
    /// (a fine-tune: `small + LoRA r8 on attn, lr 2.0e-3`).
    pub fn label(&self) -> String {
        let c = self.config();
        let label = match c.lora {
            Some(l) => format!(
                "{} + LoRA r{} on {}, lr {:.1e}",
                self.preset,
                l.rank,
                l.targets.describe(),
                c.lr
            ),
            None => format!("{}, lr {:.1e}, {}", self.preset, c.lr, c.lab.describe()),
        };
        // Two runs of one seed, f32 and mixed, side by side on the loss chart.
        match self.precision {
            Precision::F32 => label,
            Precision::Mixed => format!("{label}, {}", crate::t!("precision-mixed-short")),
        }
    }

    /// A fine-tune in progress or asked for.
    pub fn finetune_pending(&self) -> bool {
        self.pending_finetune.is_some()
    }

    pub fn step(&self) -> u64 {
        self.last.map_or(0, |m| m.step).max(self.engine.step())
    }
}

pub(super) fn create_first_run(
    mut commands: Commands,
    mut settings: ResMut<RunSettings>,
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
        Err(e) if settings.precision == Precision::Mixed => {
            // No tensor cores here: the same run in f32, and the reason said
            // (the Precision box shows f32 again).
            status.error(format!("could not create the run: {e}"));
            settings.precision = Precision::F32;
            if let Ok(mut run) = build_run(&settings, &gpu, None, 1) {
                if start.0 {
                    run.state = RunState::Training;
                }
                install_run(&mut commands, run, &mut created);
            }
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

pub(super) fn install_run(
    commands: &mut Commands,
    run: Run,
    created: &mut MessageWriter<RunCreated>,
) {
    install_run_with_history(commands, run, None, created);
}

/// [`install_run`] for a run resumed from `resumed`: the checkpoint's loss
/// history becomes the run's first step records, so the loss chart, 💾 Data
/// and the scenes show the training the weights came from (its time per
/// step and gradient norm were not kept: 0 and NaN, which the charts skip).
pub(super) fn install_run_with_history(
    commands: &mut Commands,
    run: Run,
    resumed: Option<&Checkpoint>,
    created: &mut MessageWriter<RunCreated>,
) {
    let generation = run.generation;
    let run_entity = commands
        .spawn(TrainingRun {
            preset: run.preset.clone(),
            generation,
        })
        .id();
    if let Some(ckpt) = resumed {
        for p in ckpt.loss_history.iter().filter(|p| p.step <= ckpt.step) {
            commands.spawn((
                StepRecord {
                    step: p.step,
                    loss: p.loss,
                    val_loss: p.val_loss,
                    lr: crate::train::schedule::learning_rate(&ckpt.config, p.step.saturating_sub(1)),
                    grad_norm: f32::NAN,
                    ms: 0.0,
                    tokens_per_s: 0.0,
                },
                ChildOf(run_entity),
            ));
        }
    }
    commands.insert_resource(run);
    created.write(RunCreated { generation });
}

/// The training device with its matmuls on the tensor cores (a copy of
/// the context sharing its kernels), or why a mixed-precision run cannot
/// start here, with what works instead.
fn mixed_precision_device(
    choice: BackendChoice,
    device: Result<&GpuContext, crate::backends::NoGpu>,
) -> Result<GpuContext, String> {
    if choice == BackendChoice::Cpu {
        return Err(crate::t!("precision-mixed-cpu"));
    }
    let mut ctx = device.map_err(|e| crate::t!("precision-mixed-cannot", why = e.why))?.clone();
    ctx.use_tensor_cores()
        .map_err(|why| crate::t!("precision-mixed-cannot", why = why.as_str()))?;
    Ok(ctx)
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
    // The app's reasons (no WebGPU in the page, a lost GPU) say already
    // that runs train on the CPU.
    let device = match (&gpu.context, &gpu.missing) {
        (Some(ctx), _) => Ok(ctx),
        (None, Some(why)) => Err(crate::backends::NoGpu {
            why: why.as_str(),
            says_where: true,
        }),
        (None, None) => Err(crate::backends::NoGpu {
            why: "no GPU device is available to the app",
            says_where: false,
        }),
    };
    let mixed;
    let Chosen { backend, notice } = match settings.precision {
        Precision::F32 => choose_backend(settings.backend, device, program.clone(), GpuFallback::ToCpu)?,
        // Mixed precision is the GPU's or nothing: never a silent f32 run.
        Precision::Mixed => {
            mixed = mixed_precision_device(settings.backend, device)?;
            choose_backend(BackendChoice::Gpu, Ok(&mixed), program.clone(), GpuFallback::Refuse)?
        }
    };
    let backend_label = backend.describe();
    let entry_kernels = backend.entry_kernels();
    let trainer = match (&settings.finetune, config.lora) {
        // A fine-tune: its frozen base, and fresh or resumed adapters.
        (Some(finetune), Some(_)) => match resume {
            Some(ckpt) => Trainer::resume(backend, corpus.clone(), ckpt).and_then(|mut t| {
                t.load_frozen(&finetune.base.params)?;
                Ok(t)
            }),
            None => Trainer::finetune(backend, corpus.clone(), settings.seed, &finetune.base.params),
        },
        (None, Some(_)) => {
            return Err("a LoRA adapter needs the model it was fine-tuned from: load that model, then fine-tune it".into());
        }
        (_, None) => match resume {
            Some(ckpt) => Trainer::resume(backend, corpus.clone(), ckpt),
            None => Trainer::new(backend, corpus.clone(), settings.seed),
        },
    }
    .map_err(|e| e.to_string())?;
    // The run says the arithmetic it trains with (a resumed checkpoint's
    // own may differ), so its checkpoints do.
    let mut trainer = trainer;
    trainer.config.precision = settings.precision;
    let step = trainer.step;
    let validation_rows = trainer.validation_rows(VALIDATION_ROWS);
    let last = trainer.history.last().map(|p| StepMetrics {
        step: p.step,
        loss: p.loss,
        val_loss: p.val_loss,
        grad_norm: 0.0,
        lr: 0.0,
        ms: 0.0,
        tokens_per_s: 0.0,
        skipped: false,
    });
    Ok(Run {
        gallery: None,
        program,
        preset: match &settings.finetune {
            Some(f) if config.lora.is_some() => f.base_name.clone(),
            _ => settings.preset.clone(),
        },
        corpus_name: corpus.name.clone(),
        engine: Engine::new(trainer),
        state: if step >= config.steps {
            RunState::Finished
        } else {
            RunState::Ready
        },
        backend_label,
        notice,
        precision: settings.precision,
        entry_kernels,
        single_steps: 0,
        last,
        generation,
        pending_save: None,
        save_requested: false,
        saving: None,
        recovery: None,
        recovery_asked: None,
        recovery_out: false,
        validation_rows,
        pending_finetune: None,
        finetune_requested: false,
    })
}

/// Starts training as soon as the run exists (headless `--train`).
#[derive(Resource, Clone, Copy, Debug, Default)]
pub struct TrainOnStart(pub bool);

/// Sent when a run is created: views rebuild from its program.
#[derive(Message, Clone, Copy, Debug)]
pub struct RunCreated {
    pub generation: u64,
}
