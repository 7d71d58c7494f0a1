//! The run a command looks at without changing it (`step`, `flash-trace`,
//! `correctness`): a checkpoint (its weights, optimizer state and next
//! batch), or a preset's initial weights from a seed, on a corpus.

use anyhow::Result;
use std::path::PathBuf;
use tinygpt::backend::Backend;
use tinygpt::data::Corpus;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::config::{Config, DEFAULT_PRESET};
use tinygpt::train::Trainer;

#[derive(clap::Args)]
pub struct RunArgs {
    /// A checkpoint written by `tinygpt train` (or the app): its weights,
    /// optimizer state and next batch.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["preset", "seed"])]
    checkpoint: Option<PathBuf>,
    /// Without a checkpoint: the preset whose initial weights to use.
    #[arg(long)]
    preset: Option<String>,
    /// Without a checkpoint: the seed of the initial weights and batches.
    #[arg(long, value_parser = super::seed, allow_hyphen_values = true)]
    seed: Option<u64>,
    /// A text file to draw the batches from instead of TinyShakespeare.
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
}

impl RunArgs {
    /// The run on the backend `backend` builds for its config.
    pub fn trainer(
        &self,
        backend: impl FnOnce(&Config) -> Result<Box<dyn Backend>>,
    ) -> Result<Trainer> {
        let checkpoint = self
            .checkpoint
            .as_deref()
            .map(Checkpoint::load)
            .transpose()?;
        let config = match &checkpoint {
            Some(ck) => ck.config.clone(),
            None => Config::load(self.preset.as_deref().unwrap_or(DEFAULT_PRESET))?,
        };
        let corpus = match &self.corpus {
            Some(p) => Corpus::from_file(p, config.ctx)?,
            None => Corpus::tiny_shakespeare(config.ctx)?,
        };
        let backend = backend(&config)?;
        Ok(match &checkpoint {
            Some(ck) => Trainer::resume(backend, corpus, ck)?,
            None => Trainer::new(backend, corpus, self.seed.unwrap_or(1337))?,
        })
    }
}
