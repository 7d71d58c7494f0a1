//! The command queue the UI, files and lessons send ([`RunCommand`]) and
//! the system that carries them out.

use super::device::GpuDevice;
use super::earlier::EarlierRuns;
use super::gallery_fetch::GalleryFetch;
use super::records::{StepRecord, TrainingRun};
use super::run::RunCreated;
use super::run::{PendingFinetune, Run, RunState, build_run, install_run_with_history};
use super::settings::{CorpusSource, RunSettings};
use super::status::AppStatus;
use crate::backends::BackendChoice;
use crate::model::checkpoint::Checkpoint;
use crate::model::config::{Config, Lab};
use crate::model::lora::FinetuneOptions;
use bevy::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

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
    /// A gallery model by its id: its weights, and the text it learned as
    /// the corpus (in the browser, fetched first unless compiled in).
    OpenGallery {
        id: String,
    },
    /// A gallery model's files as the page fetched them: its checkpoint,
    /// and its text unless the program makes it.
    OpenGalleryFetched {
        id: String,
        checkpoint: Vec<u8>,
        text: Option<Vec<u8>>,
    },
    /// A checkpoint file's contents.
    LoadCheckpoint {
        name: String,
        bytes: Vec<u8>,
    },
    /// A fresh run of a built-in preset with the preset's learning rate
    /// times `lr_scale`: a lesson's lab step (its "break it" switches,
    /// announced in the status line) or a class experiment's run (the
    /// intact model with the teacher's seed and step count, training at
    /// once).
    NewPresetRun {
        preset: String,
        lr_scale: f32,
        /// The lab step's switches, announced (None: the preset's own, the
        /// intact model in every built-in, not announced).
        lab: Option<Lab>,
        /// The run's seed (None: the settings' own).
        seed: Option<u64>,
        /// How many steps it trains (None: the preset's).
        steps: Option<u64>,
        /// Whether it starts training at once.
        train: bool,
    },
    /// The GPU was lost (the reason): the run goes on on the CPU from its
    /// last host copy ([`Run::recovery`]), training if it was.
    FallBackToCpu(String),
    /// A LoRA adapter's contents and those of the model it fine-tunes: the
    /// fine-tune goes on from the adapter, on the loaded corpus.
    LoadAdapter {
        base_name: String,
        base: Vec<u8>,
        name: String,
        bytes: Vec<u8>,
    },
    /// Fine-tune the run's model with LoRA on the loaded corpus: its
    /// weights are read back, then [`RunCommand::StartFinetune`] follows.
    Finetune(FinetuneOptions),
    /// A fine-tune run of `base` (the weights read back): its weights
    /// frozen, adapters trained on the loaded corpus.
    StartFinetune {
        base: Arc<Checkpoint>,
        base_name: String,
        options: FinetuneOptions,
        /// An adapter to go on from, instead of fresh adapters.
        resume: Option<Arc<Checkpoint>>,
    },
}

#[allow(clippy::too_many_arguments)]
pub(super) fn handle_commands(
    mut commands: Commands,
    mut reader: MessageReader<RunCommand>,
    mut settings: ResMut<RunSettings>,
    run: Option<ResMut<Run>>,
    gpu: Res<GpuDevice>,
    mut status: ResMut<AppStatus>,
    mut created: MessageWriter<RunCreated>,
    runs: Query<Entity, With<TrainingRun>>,
    (records, mut earlier, mut gallery_fetch, start): (
        Query<&StepRecord>,
        ResMut<EarlierRuns>,
        ResMut<GalleryFetch>,
        Res<super::run::TrainOnStart>,
    ),
) {
    let Some(mut run) = run else { return };
    for command in reader.read() {
        let fresh = run.step() == 0 && !run.engine.busy();
        let mut rebuild: Option<Option<Checkpoint>> = None;
        // Where a resumed run's weights came from, for the status line.
        let mut resumed_from = "the checkpoint";
        // A model the start names (a link's `model=ID&train=1`,
        // `--checkpoint X --train`) trains once it is open: it replaces the
        // first run, which `train` set going. (In the browser a gallery
        // model opens frames later, when its fetch is done.)
        let mut train_on = start.0
            && run.generation == 1
            && matches!(
                command,
                RunCommand::OpenGallery { .. }
                    | RunCommand::OpenGalleryFetched { .. }
                    | RunCommand::LoadCheckpoint { .. }
            );
        // A fine-tune that cannot start leaves the settings as they were.
        let mut finetune_before = None;
        // So does a gallery model that cannot open.
        let mut settings_before = None;
        let mut gallery_id = None;
        match command.clone() {
            RunCommand::Train => {
                if matches!(run.state, RunState::Finished) {
                    status.error(crate::t!("run-done-steps", steps = run.config().steps));
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
                    Err(e) => status.error(crate::t!("corpus-not-loaded", error = e.to_string())),
                    Ok(c) => {
                        settings.corpus = source;
                        if fresh {
                            rebuild = Some(None);
                            status.info = Some(crate::t!(
                                "training-on",
                                name = name.as_str(),
                                bytes = c.train.len() + c.val.len(),
                            ));
                        } else {
                            status.info =
                                Some(crate::t!("corpus-loaded-later", name = name.as_str()));
                        }
                    }
                }
            }
            RunCommand::NewPresetRun {
                preset,
                lr_scale,
                lab,
                seed,
                steps,
                train,
            } => match Config::load(&preset) {
                Err(e) => status.error(crate::t!("lab-could-not-start", error = e.to_string())),
                Ok(config) => {
                    let from_preset = RunSettings::from_preset(&preset, config);
                    *settings = RunSettings {
                        corpus: settings.corpus.clone(),
                        seed: seed.unwrap_or(settings.seed),
                        backend: settings.backend,
                        lr: from_preset.lr * lr_scale,
                        lab: lab.unwrap_or(from_preset.lab),
                        steps: steps.unwrap_or(from_preset.steps),
                        ..from_preset
                    };
                    if let Some(lab) = lab {
                        status.info = Some(crate::t!(
                            "lab-started",
                            preset = preset.as_str(),
                            lab = lab.describe(),
                            lr = format!("{:.1e}", settings.lr),
                        ));
                    }
                    train_on |= train;
                    rebuild = Some(None);
                }
            },
            RunCommand::LoadPreset { name, text } => match Config::from_ron(&text, &name) {
                Err(e) => status.error(crate::t!("preset-not-loaded", error = e.to_string())),
                Ok(config) => {
                    *settings = RunSettings {
                        corpus: settings.corpus.clone(),
                        seed: settings.seed,
                        backend: settings.backend,
                        ..RunSettings::from_preset(&name, config)
                    };
                    status.info = Some(crate::t!("preset-loaded", name = name.as_str()));
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
                    status.save_failed(crate::t!("checkpoint-still-writing"));
                } else if let Err(refusal) = writable {
                    match refusal {
                        // An earlier file, not written here: ask before replacing it.
                        crate::output::SaveRefusal::Ask => status.confirm_replace = Some(path),
                        crate::output::SaveRefusal::Refused(e) => {
                            status.save_failed(crate::t!("checkpoint-not-saved", error = e.to_string()))
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
            RunCommand::OpenGallery { .. } | RunCommand::OpenGalleryFetched { .. } => {
                let opened = open_gallery(command, &mut gallery_fetch);
                match opened {
                    Err(e) => status.error(crate::t!("gallery-not-opened", error = e.to_string())),
                    // Fetching: the page sends the files when they are here.
                    Ok(None) => {}
                    Ok(Some((entry, ckpt, corpus))) => {
                        // The Run panel's settings become the model's: its
                        // preset (a new run trains it afresh) and its text.
                        settings_before = Some(settings.clone());
                        let (seed, backend) = (settings.seed, settings.backend);
                        *settings = RunSettings::from_preset(entry.preset, ckpt.config.clone());
                        settings.lab = ckpt.config.lab;
                        settings.seed = seed;
                        settings.backend = backend;
                        settings.corpus = corpus;
                        resumed_from = entry.id;
                        gallery_id = Some(entry.id.to_string());
                        rebuild = Some(Some(ckpt));
                    }
                }
            }
            RunCommand::LoadCheckpoint { name, bytes } => {
                match Checkpoint::from_bytes(&bytes, &name) {
                    Ok(ckpt) => {
                        settings.finetune = None;
                        rebuild = Some(Some(ckpt));
                    }
                    // A LoRA adapter goes on the run's model, if it was
                    // trained on it (checked when its weights are read back).
                    Err(e) => match Checkpoint::adapter_from_bytes(&bytes, &name) {
                        Err(_) => {
                            status.error(crate::t!("checkpoint-not-loaded", error = e.to_string()))
                        }
                        Ok(adapter) => {
                            let base = settings.finetune.as_ref().map(|f| f.base.clone());
                            match (run.config().lora, base) {
                                // A fine-tune: onto the same base.
                                (Some(_), Some(base)) => {
                                    match crate::model::lora::check_base(&base, &adapter)
                                        .and_then(|_| FinetuneOptions::of(&adapter.config))
                                    {
                                        Err(e) => {
                                            status.error(format!("adapter not loaded: {name}: {e}"))
                                        }
                                        Ok(options) => {
                                            finetune_before = Some(settings.finetune.clone());
                                            if let Some(f) = settings.finetune.as_mut() {
                                                f.options = options;
                                            }
                                            resumed_from = "the adapter";
                                            rebuild = Some(Some(adapter));
                                        }
                                    }
                                }
                                _ if run.saving() || run.finetune_pending() => {
                                    status.error(crate::t!("weights-being-read"))
                                }
                                _ => {
                                    if run.state == RunState::Training {
                                        run.state = RunState::Paused;
                                    }
                                    run.pending_finetune =
                                        Some(PendingFinetune::Adapter(Arc::new(adapter)));
                                    run.finetune_requested = false;
                                    status.info =
                                        Some(crate::t!("adapter-reading", name = name.as_str()));
                                }
                            }
                        }
                    },
                }
            }
            RunCommand::LoadAdapter {
                base_name,
                base,
                name,
                bytes,
            } => {
                let opened = Checkpoint::from_bytes(&base, &base_name)
                    .map_err(|e| e.to_string())
                    .and_then(|base| {
                        let adapter = Checkpoint::adapter_from_bytes(&bytes, &name)
                            .map_err(|e| e.to_string())?;
                        crate::model::lora::check_base(&base, &adapter)
                            .and_then(|_| FinetuneOptions::of(&adapter.config))
                            .map(|options| (base, adapter, options))
                            .map_err(|e| format!("{name}: {e}"))
                    });
                match opened {
                    Err(e) => status.error(format!("adapter not loaded: {e}")),
                    Ok((base, adapter, options)) => {
                        finetune_before = Some(settings.finetune.clone());
                        settings.finetune = Some(super::settings::Finetune {
                            base: Arc::new(base),
                            base_name,
                            options,
                        });
                        resumed_from = "the adapter";
                        rebuild = Some(Some(adapter));
                    }
                }
            }
            RunCommand::Finetune(options) => {
                if run.config().lora.is_some() {
                    status.error(crate::t!("already-finetune"));
                } else if run.saving() || run.finetune_pending() {
                    status.error(crate::t!("finetune-later"));
                } else {
                    if run.state == RunState::Training {
                        run.state = RunState::Paused;
                    }
                    run.pending_finetune = Some(PendingFinetune::New(options));
                    run.finetune_requested = false;
                    status.info = Some(crate::t!("finetune-reading"));
                }
            }
            RunCommand::StartFinetune {
                base,
                base_name,
                options,
                resume,
            } => {
                let step = base.step;
                finetune_before = Some(settings.finetune.clone());
                settings.finetune = Some(super::settings::Finetune {
                    base,
                    base_name: base_name.clone(),
                    options,
                });
                status.info = Some(crate::t!(
                    "finetune-started",
                    base = base_name.as_str(),
                    step = step,
                    corpus = settings.corpus.name(),
                ));
                if resume.is_some() {
                    resumed_from = "the adapter";
                }
                rebuild = Some(resume.map(|adapter| (*adapter).clone()));
            }
            RunCommand::FallBackToCpu(reason) => {
                settings.backend = BackendChoice::Cpu;
                // The CPU computes in f32.
                settings.precision = crate::backends::Precision::F32;
                train_on = run.state == RunState::Training;
                let lost_steps = run.step() - run.recovery.as_ref().map_or(0, |c| c.step);
                status.error(match &run.recovery {
                    Some(c) => crate::t!(
                        "gpu-lost-resume",
                        reason = reason.as_str(),
                        step = c.step,
                        lost = lost_steps,
                    ),
                    None => crate::t!("gpu-lost-fresh", reason = reason.as_str()),
                });
                rebuild = Some(run.recovery.clone());
                resumed_from = "the last copy read back from the GPU";
            }
        }
        if let Some(resume) = rebuild {
            match build_run(&settings, &gpu, resume.as_ref(), run.generation + 1) {
                Err(e) => {
                    if let Some(before) = finetune_before {
                        settings.finetune = before;
                    }
                    if let Some(before) = settings_before {
                        *settings = before;
                    }
                    status.error(crate::t!("new-run-failed", error = e.to_string()))
                }
                Ok(mut new_run) => {
                    new_run.gallery = gallery_id;
                    if let Some(ckpt) = &resume {
                        let from = match resumed_from {
                            "the checkpoint" => crate::t!("from-the-checkpoint"),
                            "the adapter" => crate::t!("from-the-adapter"),
                            "the last copy read back from the GPU" => {
                                crate::t!("from-the-gpu-copy")
                            }
                            gallery_id => gallery_id.to_string(),
                        };
                        status.info = Some(crate::t!("resumed-at", step = ckpt.step, from = from));
                    }
                    if train_on {
                        new_run.state = RunState::Training;
                    }
                    let kept: Vec<StepRecord> = records.iter().copied().collect();
                    earlier.keep(&run, &kept);
                    for e in &runs {
                        commands.entity(e).despawn();
                    }
                    install_run_with_history(&mut commands, new_run, resume.as_ref(), &mut created);
                    // Later commands of this frame wait for the new run.
                    return;
                }
            }
        }
    }
}

/// A checkpoint to open as soon as the first run exists (`--checkpoint`),
/// and a LoRA adapter of it (`--adapter`), names and bytes; or a gallery
/// model by id (`gallery:ID` alone, a link's `model=`).
#[derive(Resource, Clone, Debug, Default)]
pub struct OpenOnStart(
    pub Option<(String, Vec<u8>)>,
    pub Option<(String, Vec<u8>)>,
    /// A gallery model by id.
    pub Option<String>,
);

/// Sends the start-up checkpoint as a load command (carried out with the
/// others, in the first frame).
pub(super) fn open_on_start(mut open: ResMut<OpenOnStart>, mut out: MessageWriter<RunCommand>) {
    if let Some((name, bytes)) = open.0.take() {
        out.write(match open.1.take() {
            Some((adapter_name, adapter)) => RunCommand::LoadAdapter {
                base_name: name,
                base: bytes,
                name: adapter_name,
                bytes: adapter,
            },
            None => RunCommand::LoadCheckpoint { name, bytes },
        });
    }
    if let Some(id) = open.2.take() {
        out.write(RunCommand::OpenGallery { id });
    }
}

/// A gallery model to open: its entry, weights and text, or None while the
/// page fetches its files (an entry not compiled in, in the browser).
fn open_gallery(
    command: &RunCommand,
    fetch: &mut GalleryFetch,
) -> Result<Option<(crate::model::gallery::Entry, Checkpoint, CorpusSource)>, String> {
    use crate::model::gallery::{self, PREFIX, Text};
    match command {
        RunCommand::OpenGallery { id } => {
            let entry = gallery::find(id)?;
            if !entry.compiled_in() {
                fetch.request(&entry)?;
                return Ok(None);
            }
            let ckpt = entry.checkpoint().map_err(|e| e.to_string())?;
            Ok(Some((entry, ckpt, CorpusSource::of_gallery(entry.text))))
        }
        RunCommand::OpenGalleryFetched {
            id,
            checkpoint,
            text,
        } => {
            let entry = gallery::find(id)?;
            let ckpt = Checkpoint::from_bytes(checkpoint, &format!("{PREFIX}{id}"))
                .map_err(|e| e.to_string())?;
            let corpus = match (entry.text, text) {
                (Text::File { path, .. }, Some(bytes)) => CorpusSource::Bytes {
                    name: path.into(),
                    bytes: Arc::new(bytes.clone()),
                },
                (Text::File { path, .. }, None) => {
                    return Err(format!("the page sent no text for {path}"));
                }
                (other, _) => CorpusSource::of_gallery(other),
            };
            Ok(Some((entry, ckpt, corpus)))
        }
        _ => Ok(None),
    }
}
