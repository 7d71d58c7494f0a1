//! The run a command looks at without changing it (`step`, `flash-trace`,
//! `correctness`): a checkpoint (its weights, optimizer state and next
//! batch), or a preset's initial weights from a seed, on a corpus.

use anyhow::Result;
use std::path::PathBuf;
use tinygpt::backend::Backend;
use tinygpt::model::config::Config;
use tinygpt::train::Trainer;

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    weights: super::weights::WeightsArgs,
    /// A text file to draw the batches from instead of TinyShakespeare
    /// (`task:NAME`, `gallery:ID` too; a gallery model's own by default).
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
}

impl RunArgs {
    /// The run on the backend `backend` builds for its config.
    pub fn trainer(
        &self,
        backend: impl FnOnce(&Config) -> Result<Box<dyn Backend>>,
    ) -> Result<Trainer> {
        let checkpoint = self.weights.checkpoint()?;
        let config = self.weights.config(checkpoint.as_ref())?;
        let corpus = tinygpt::model::gallery::corpus_for(
            self.corpus.as_deref(),
            self.weights.checkpoint_arg(),
            config.ctx,
        )?;
        let backend = backend(&config)?;
        Ok(match &checkpoint {
            Some(ck) => Trainer::resume(backend, corpus, ck)?,
            None => Trainer::new(backend, corpus, self.weights.seed())?,
        })
    }
}
