//! `tinygpt step`: one training step run entry by entry (the forward ops,
//! the loss, each op's backward in reverse, the gradient clip, AdamW) on the
//! chosen backend, printing what each entry computed: the data behind the
//! app's Step scene. The run itself is not changed or saved.

use super::backend::{BackendChoice, build, resolve};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use tinygpt::data::Corpus;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::config::{Config, DEFAULT_PRESET};
use tinygpt::train::{StepSource, Trainer};

#[derive(clap::Args)]
pub struct StepArgs {
    /// A checkpoint written by `tinygpt train` (or the app): its weights,
    /// optimizer state and next batch.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["preset", "seed"])]
    checkpoint: Option<PathBuf>,
    /// Without a checkpoint: the preset whose initial weights to use.
    #[arg(long)]
    preset: Option<String>,
    /// Without a checkpoint: the seed of the initial weights and batches.
    #[arg(long)]
    seed: Option<u64>,
    /// A text file to train on instead of TinyShakespeare.
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
    /// Step on this text (in every batch row) instead of the run's next batch.
    #[arg(long)]
    prompt: Option<String>,
    /// The parameter the clip and AdamW entries show (default: the token embedding).
    #[arg(long, value_name = "NAME")]
    param: Option<String>,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object per entry: index, phase, layer, op, output, shape,
    /// mean, std, min, max, l2, and for backward ops the gradients it writes.
    #[arg(long)]
    json: bool,
}

pub fn run(args: StepArgs) -> Result<()> {
    let checkpoint = args
        .checkpoint
        .as_deref()
        .map(Checkpoint::load)
        .transpose()?;
    let config = match &checkpoint {
        Some(ck) => ck.config.clone(),
        None => Config::load(args.preset.as_deref().unwrap_or(DEFAULT_PRESET))?,
    };
    let corpus = match &args.corpus {
        Some(p) => Corpus::from_file(p, config.ctx)?,
        None => Corpus::tiny_shakespeare(config.ctx)?,
    };
    let resolved = resolve(args.backend)?;
    let backend = build(&resolved, args.backend, &config)?;
    let mut trainer = match &checkpoint {
        Some(ck) => Trainer::resume(backend, corpus, ck)?,
        None => Trainer::new(backend, corpus, args.seed.unwrap_or(1337))?,
    };
    let source = match args.prompt {
        Some(p) => StepSource::Prompt(p.into_bytes()),
        None => StepSource::NextBatch,
    };
    let mut cursor = trainer.begin_step(source).map_err(anyhow::Error::msg)?;
    if let Some(name) = &args.param {
        let program = trainer.backend.program();
        cursor.focus = program
            .tensor_id(name)
            .filter(|&id| program.tensors[id].kind == tinygpt::program::TensorKind::Param)
            .with_context(|| {
                format!(
                    "no parameter named `{name}`; the parameters are: {}",
                    program
                        .params()
                        .map(|p| program.tensors[p].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
    }
    if !args.json {
        println!(
            "one training step of a {}-layer, {}-parameter model on {}, step {} of the run, {} entries:",
            config.n_layer,
            config.param_count(),
            trainer.backend.describe(),
            trainer.step + 1,
            cursor.entries.len()
        );
    }
    while let Some(view) = trainer.step_entry(&mut cursor)? {
        if args.json {
            println!("{}", view.to_json(trainer.backend.program()));
            continue;
        }
        let main = view.to_json(trainer.backend.program());
        let l2 = main.get("l2").and_then(|v| v.as_f64());
        let scalars: Vec<String> = view
            .scalars
            .iter()
            .map(|(k, v)| format!("{k} {v:.5}"))
            .collect();
        println!(
            "{:>4} {:<9} {:<32} {}{}",
            view.entry.index,
            view.entry.phase.key(),
            view.entry.label,
            main.get("output")
                .and_then(|o| o.as_str())
                .map(|o| format!("{o} ‖·‖ {:.4} ", l2.unwrap_or(f64::NAN)))
                .unwrap_or_default(),
            scalars.join(", ")
        );
    }
    let nonfinite = cursor
        .views
        .iter()
        .flat_map(|v| &v.tensors)
        .find(|t| !t.stats.is_finite())
        .map(|t| t.name.clone());
    trainer.abandon_step(cursor);
    if let Some(t) = nonfinite {
        bail!(
            "`{}` is not finite: the weights have diverged (lower the learning rate and retrain)",
            t
        );
    }
    Ok(())
}
