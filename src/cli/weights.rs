//! Where a command that looks inside a model gets its weights (`attention`,
//! `flow`, and the runs of `step`, `flash-trace` and `correctness`): a
//! checkpoint, or a preset's initial weights from a seed.

use anyhow::Result;
use std::path::PathBuf;
use tinygpt::backend::Backend;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::config::{Config, DEFAULT_PRESET};
use tinygpt::model::params::NamedTensor;

/// The seed of a preset's initial weights when none is given.
const DEFAULT_SEED: u64 = 1337;

#[derive(clap::Args)]
pub struct WeightsArgs {
    /// A checkpoint written by `tinygpt train` (or the app): its weights (and,
    /// for the commands that take a step, its optimizer state and next batch).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["preset", "seed"])]
    checkpoint: Option<PathBuf>,
    /// Without a checkpoint: the preset whose initial weights to use.
    #[arg(long)]
    preset: Option<String>,
    /// Without a checkpoint: the seed of the initial weights (and batches).
    #[arg(long, value_parser = super::seed, allow_hyphen_values = true)]
    seed: Option<u64>,
}

impl WeightsArgs {
    /// The checkpoint argument as given (a file or `gallery:ID`).
    pub fn checkpoint_arg(&self) -> Option<&std::path::Path> {
        self.checkpoint.as_deref()
    }

    /// The checkpoint, loaded, if one was given.
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>> {
        Ok(self
            .checkpoint
            .as_deref()
            .map(Checkpoint::load)
            .transpose()?)
    }

    /// The model: the checkpoint's config, else the preset's.
    pub fn config(&self, checkpoint: Option<&Checkpoint>) -> Result<Config> {
        Ok(match checkpoint {
            Some(ck) => ck.config.clone(),
            None => Config::load(self.preset.as_deref().unwrap_or(DEFAULT_PRESET))?,
        })
    }

    /// The seed of the initial weights (and batches).
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(DEFAULT_SEED)
    }

    /// Puts the weights on `backend`: the checkpoint's `params`, else the
    /// preset's initial weights from the seed (read back). Returns them.
    pub fn put_on(
        &self,
        backend: &mut dyn Backend,
        params: Option<Vec<NamedTensor>>,
    ) -> Result<Vec<NamedTensor>> {
        match params {
            Some(params) => {
                for p in &params {
                    backend.write(&p.name, &p.values)?;
                }
                Ok(params)
            }
            None => {
                backend.initialize(self.seed())?;
                Ok(tinygpt::train::read_params(backend)?)
            }
        }
    }
}
