//! What a new run is made from: its preset, seed, backend and corpus
//! ([`RunSettings`], the Run panel's fields).

use crate::backends::{BackendChoice, Precision};
use crate::data::Corpus;
use crate::data::tasks::Task;
use crate::model::checkpoint::Checkpoint;
use crate::model::config::{Config, Lab};
use crate::model::lora::FinetuneOptions;
use bevy::prelude::*;
use std::sync::Arc;

/// The text a run trains on.
#[derive(Clone, Debug)]
pub enum CorpusSource {
    /// TinyShakespeare, compiled in.
    Builtin,
    /// A file the user loaded (by path or drop).
    Bytes { name: String, bytes: Arc<Vec<u8>> },
    /// A toy task's examples, made by the program (`task:reverse`).
    Task(Task),
}

impl CorpusSource {
    pub fn name(&self) -> String {
        match self {
            CorpusSource::Builtin => "tinyshakespeare.txt (built in)".into(),
            CorpusSource::Bytes { name, .. } => name.clone(),
            CorpusSource::Task(task) => format!("{}{}", crate::data::tasks::PREFIX, task.name()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            CorpusSource::Builtin => crate::data::TINY_SHAKESPEARE.len(),
            CorpusSource::Bytes { bytes, .. } => bytes.len(),
            CorpusSource::Task(task) => {
                let (train, held_out) = task.examples();
                train.iter().chain(&held_out).map(Vec::len).sum()
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A prompt from this text for the scenes that show one, at most
    /// `ctx` (and 64) characters: for TinyShakespeare none (each scene has
    /// its own line), for a toy task its first held-out example up to its
    /// newline (the prompt and the answer, so both show), else the text's
    /// first line of a readable length.
    pub fn prompt_line(&self, ctx: usize) -> Option<String> {
        let bytes: &[u8] = match self {
            CorpusSource::Builtin => return None,
            CorpusSource::Bytes { bytes, .. } => bytes,
            CorpusSource::Task(task) => {
                let (_, held_out) = task.examples();
                let example = &held_out[0][..held_out[0].len() - 1];
                return Some(
                    String::from_utf8_lossy(&example[..example.len().min(ctx)]).into_owned(),
                );
            }
        };
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(8192)]).into_owned();
        let line = text.lines().map(str::trim).find(|l| l.len() >= 24)?;
        // Never empty: the line has ≥ 24 bytes and a preset's ctx is ≥ 1.
        Some(line.chars().take(ctx.min(64)).collect())
    }

    /// [`CorpusSource::prompt_line`] of at most `len` characters, else the
    /// first `len` (at most 48) of TinyShakespeare's line that the scenes
    /// showing a prompt open with.
    pub fn prompt_or_romeo(&self, len: usize) -> String {
        self.prompt_line(len).unwrap_or_else(|| {
            "ROMEO: But soft, what light through yonder window breaks"
                .chars()
                .take(len.min(48))
                .collect()
        })
    }

    /// The text a gallery model learned.
    pub fn of_gallery(text: crate::model::gallery::Text) -> Self {
        match text {
            crate::model::gallery::Text::Shakespeare => CorpusSource::Builtin,
            crate::model::gallery::Text::File { path, bytes } => CorpusSource::Bytes {
                name: path.into(),
                bytes: Arc::new(bytes.to_vec()),
            },
            crate::model::gallery::Text::Task(task) => CorpusSource::Task(task),
        }
    }

    /// The corpus split for a context length, or why it cannot be.
    pub fn corpus(&self, ctx: usize) -> Result<Corpus, String> {
        match self {
            CorpusSource::Builtin => Corpus::tiny_shakespeare(ctx),
            CorpusSource::Bytes { name, bytes } => Corpus::from_bytes(name, bytes, ctx),
            CorpusSource::Task(task) => task.corpus(ctx),
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
    /// The matmuls' arithmetic: f32, or mixed on the GPU's tensor cores.
    pub precision: Precision,
    /// The "break it" switches a new run gets (the preset's by default).
    pub lab: Lab,
    /// A LoRA fine-tune of a trained model: new runs fine-tune its frozen
    /// weights on the corpus instead of training the preset from scratch.
    pub finetune: Option<Finetune>,
}

/// A fine-tune's base and choices ([`RunSettings::finetune`]).
#[derive(Clone, Debug)]
pub struct Finetune {
    /// The trained model whose weights stay frozen.
    pub base: Arc<Checkpoint>,
    /// What it is called (the run it came from).
    pub base_name: String,
    pub options: FinetuneOptions,
}

impl RunSettings {
    pub fn from_preset(preset: &str, config: Config) -> Self {
        let precision = config.precision;
        Self {
            preset: preset.to_string(),
            lr: config.lr,
            steps: config.steps,
            lab: config.lab,
            config,
            corpus: CorpusSource::Builtin,
            seed: 1337,
            backend: BackendChoice::Auto,
            precision,
            finetune: None,
        }
    }

    /// The configuration a new run uses: the preset with this run's overrides.
    pub fn run_config(&self) -> Result<Config, String> {
        if let Some(f) = &self.finetune {
            return crate::model::lora::finetune_config(&f.base, f.options);
        }
        let mut config = self.config.clone();
        config.lr = self.lr;
        config.steps = self.steps;
        config.lab = self.lab;
        config.precision = self.precision;
        config.validate(&self.preset).map_err(|e| e.to_string())?;
        Ok(config)
    }
}
