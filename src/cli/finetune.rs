//! `tinygpt finetune` (a LoRA adapter for a trained model, trained on a
//! text of the user's) and `tinygpt merge` (an adapter folded into its base).

use super::{BackendChoice, positive_f32};
use anyhow::{Result, bail};
use std::path::{Path, PathBuf};
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::LoraTargets;
use tinygpt::model::lora::{self, FinetuneOptions};
use tinygpt::output::{Input, claim, numbered, same_file};
use tinygpt::train::Trainer;

#[derive(clap::Args)]
pub struct FinetuneArgs {
    /// The trained model to fine-tune (a checkpoint, or `gallery:ID`); its
    /// weights stay frozen.
    #[arg(long, value_name = "CKPT")]
    base: PathBuf,
    /// The text to fine-tune on, read as bytes (its last tenth is the
    /// validation split), or `task:NAME` for a toy task.
    #[arg(long, value_name = "FILE")]
    corpus: PathBuf,
    /// The rank r of each adapter's A (r × in) and B (out × r).
    #[arg(long, value_name = "R", default_value_t = FinetuneOptions::default().rank as u16,
          value_parser = clap::value_parser!(u16).range(1..))]
    rank: u16,
    /// α: the update B·A is scaled by α/r (default: 2r, a scale of 2).
    #[arg(long, value_name = "A", value_parser = positive_f32, allow_hyphen_values = true)]
    alpha: Option<f32>,
    /// Which linears of each block get adapters: `attn` (c_attn and
    /// c_proj), `mlp` (c_fc and c_proj) or `attn,mlp`.
    #[arg(long, value_name = "LIST", default_value = "attn", value_parser = LoraTargets::parse)]
    targets: LoraTargets,
    /// Fine-tuning steps (with --resume: the total to reach).
    #[arg(long, value_name = "N", default_value_t = FinetuneOptions::default().steps,
          value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// The learning rate (constant).
    #[arg(long, value_name = "X", default_value_t = FinetuneOptions::default().lr,
          value_parser = positive_f32, allow_hyphen_values = true)]
    lr: f32,
    /// Random seed of the adapters' initialisation and the batches.
    #[arg(long, value_name = "S", default_value_t = 42, value_parser = super::seed, allow_hyphen_values = true)]
    seed: u64,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// `mixed`: the matmuls on the GPU's tensor cores, as `train
    /// --precision mixed` (f16 operands, f32 accumulation, the loss scaled).
    #[arg(long, value_enum)]
    precision: Option<super::backend::Precision>,
    /// The adapter to write (default: tinygpt-lora-<corpus>.safetensors,
    /// numbered when taken; with --resume, the adapter it continues).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace the --out file if it exists (never an input).
    #[arg(long)]
    force: bool,
    /// Continue a fine-tune from its adapter (its A, B, moments and step);
    /// --rank, --alpha and --targets are the adapter's own.
    #[arg(long, value_name = "ADAPTER")]
    resume: Option<PathBuf>,
    /// Print one JSON object per step instead of a progress bar.
    #[arg(long)]
    json: bool,
}

pub fn run(args: FinetuneArgs) -> Result<()> {
    let mut claim = claim_out(&args)?;
    let out = claim.path().to_path_buf();
    let base = Checkpoint::load(&args.base)?;
    let resumed = match &args.resume {
        Some(path) => Some(adapter_of(&base, path)?),
        None => None,
    };
    let mut config = match &resumed {
        Some(adapter) => {
            let mut config = adapter.config.clone();
            config.steps = args.steps;
            config.lr = args.lr;
            config
        }
        None => lora::finetune_config(
            &base,
            FinetuneOptions {
                rank: args.rank as usize,
                alpha: args.alpha.unwrap_or(2.0 * args.rank as f32),
                targets: args.targets,
                steps: args.steps,
                lr: args.lr,
            },
        )
        .map_err(anyhow::Error::msg)?,
    };
    let corpus = tinygpt::model::gallery::corpus_for(Some(&args.corpus), None, config.ctx)?;
    // --precision, else the preset's (or the resumed run's) `precision:`.
    if let Some(p) = args.precision {
        config.precision = p.into();
    }
    let resolved = super::backend::resolve_for(args.backend, config.precision)?;
    let backend = super::backend::build(&resolved, super::backend::backend_at(config.precision, args.backend), &config)?;
    let description = backend.describe();
    let mut trainer = match &resumed {
        Some(adapter) => {
            let mut trainer = Trainer::resume(backend, corpus, adapter)?;
            trainer.load_frozen(&base.params)?;
            trainer
        }
        None => Trainer::finetune(backend, corpus, args.seed, &base.params)?,
    };
    if trainer.step >= config.steps {
        bail!(
            "the adapter already has {} steps; ask for more with --steps",
            trainer.step
        );
    }
    let before = trainer.evaluate();
    let share = lora::trained_share(&config).unwrap_or_default();
    let lora = config.lora.expect("a fine-tune's config has LoRA");
    if !args.json {
        eprintln!(
            "fine-tuning {} on {} ({} train / {} val bytes) with {description}: LoRA rank {}, α {}, on {}; {share}",
            args.base.display(),
            trainer.corpus.name,
            trainer.corpus.train.len(),
            trainer.corpus.val.len(),
            lora.rank,
            if (1e-3..1e6).contains(&lora.alpha) {
                lora.alpha.to_string()
            } else {
                format!("{:e}", lora.alpha)
            },
            lora.targets.describe(),
        );
        eprintln!("validation loss on the new text before: {before:.4}");
    }
    let last_val = super::train::train_loop(
        &mut trainer,
        &out,
        &mut claim,
        args.json,
        args.resume.as_deref(),
    )?;
    let after = last_val.unwrap_or_else(|| trainer.evaluate());
    if args.json {
        return Ok(());
    }
    eprintln!(
        "done: {} steps; validation loss on {}: {before:.4} before, {after:.4} after; adapter {} ({share})",
        trainer.step,
        trainer.corpus.name,
        out.display(),
    );
    // The same seed and prompt through the base and the adapted model.
    let adapter = trainer.checkpoint(false)?;
    let merged = lora::merge(&base, &adapter).map_err(anyhow::Error::msg)?;
    for (title, params) in [("base", &base.params), ("fine-tuned", &merged.params)] {
        super::train::print_sample(title, &merged.config, params)?;
    }
    Ok(())
}

/// The adapter this fine-tune writes, claimed before any work: `--out`, else
/// the adapter it continues, else tinygpt-lora-<corpus>.safetensors,
/// numbered when taken. The base and the corpus are never written over.
fn claim_out(args: &FinetuneArgs) -> Result<tinygpt::output::Claim> {
    let inputs = [
        Input::new("--base", &args.base),
        Input::new("--corpus", &args.corpus),
    ];
    let claimed = match (&args.out, &args.resume) {
        (Some(out), Some(resume)) if same_file(out, resume) => claim(out, "--out", &inputs, true),
        (Some(out), resume) => {
            let mut all = inputs.to_vec();
            if let Some(r) = resume {
                all.push(Input::new("--resume", r));
            }
            claim(out, "--out", &all, args.force)
        }
        (None, Some(resume)) => claim(resume, "--out", &inputs, true),
        (None, None) => {
            let stem = args
                .corpus
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "corpus".into());
            numbered(
                Path::new(""),
                &format!("tinygpt-lora-{stem}"),
                "safetensors",
                "--out",
            )
        }
    };
    claimed.map_err(|e| anyhow::anyhow!("cannot write the adapter: {e}"))
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// The model the adapter was fine-tuned from (a checkpoint, or `gallery:ID`).
    #[arg(long, value_name = "CKPT")]
    base: PathBuf,
    /// The adapter written by `tinygpt finetune`.
    #[arg(long, value_name = "ADAPTER")]
    adapter: PathBuf,
    /// The merged checkpoint to write: the base's weights with W + (α/r)·B·A
    /// in each adapted linear (a new file, never an input).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Replace the --out file if it exists.
    #[arg(long)]
    force: bool,
}

pub fn merge(args: MergeArgs) -> Result<()> {
    let _claim = claim(
        &args.out,
        "--out",
        &[
            Input::new("--base", &args.base),
            Input::new("--adapter", &args.adapter),
        ],
        args.force,
    )
    .map_err(|e| anyhow::anyhow!("cannot merge: {e}"))?;
    let base = Checkpoint::load(&args.base)?;
    let adapter = Checkpoint::load_adapter(&args.adapter)?;
    let merged = lora::merge(&base, &adapter)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.adapter.display()))?;
    merged.save(&args.out, Precision::F32)?;
    let lora = adapter.config.lora.expect("load_adapter checked");
    eprintln!(
        "wrote {}: {} with {} ({} steps of rank-{} LoRA on {}) merged into its weights",
        args.out.display(),
        args.base.display(),
        args.adapter.display(),
        adapter.step,
        lora.rank,
        lora.targets.describe()
    );
    Ok(())
}

/// A model with an optional adapter: `--checkpoint` alone, or with
/// `--adapter` the adapted model (its config and every parameter:
/// [`lora::adapted_params`]).
pub fn model_with_adapter(
    checkpoint: &Path,
    adapter: Option<&Path>,
) -> Result<(Checkpoint, Option<Checkpoint>)> {
    let base = Checkpoint::load(checkpoint)?;
    let Some(path) = adapter else {
        return Ok((base, None));
    };
    let adapter = adapter_of(&base, path)?;
    Ok((base, Some(adapter)))
}

/// The adapter at `path`, refused (naming the file) unless it was trained
/// on `base`.
pub fn adapter_of(base: &Checkpoint, path: &Path) -> Result<Checkpoint> {
    let adapter = Checkpoint::load_adapter(path)?;
    lora::check_base(base, &adapter).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(adapter)
}
