//! `tinygpt lens`, `ablate`, `patch` and `attribute`: taking the model
//! apart (issue 33), from a checkpoint or a preset's initial weights, on the
//! chosen backend, through [`tinygpt::interventions`]. Each prints a summary
//! for people, or with `--json` the numbers the scene draws.

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Result, bail};
use tinygpt::backend::Backend;
use tinygpt::interventions::{self, Part};
use tinygpt::model::params::NamedTensor;
use tinygpt::probe::byte_label;

/// What every tool takes: the weights, the backend, `--json`.
#[derive(clap::Args)]
pub struct Common {
    #[command(flatten)]
    weights: super::weights::WeightsArgs,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object with every number.
    #[arg(long)]
    json: bool,
}

/// What [`Common::open_run`] opens: the batch-1 backend with the weights on
/// it, the weights, and the run they come from (its config and seed).
struct Opened {
    backend: Box<dyn Backend>,
    params: Vec<NamedTensor>,
    trained: tinygpt::model::config::Config,
    seed: u64,
}

impl Common {
    /// The batch-1 backend with the weights on it, and the weights.
    fn open(&self) -> Result<(Box<dyn Backend>, Vec<NamedTensor>)> {
        self.open_run().map(|o| (o.backend, o.params))
    }

    /// [`Common::open`], with the config and seed of the run.
    fn open_run(&self) -> Result<Opened> {
        let checkpoint = self.weights.checkpoint()?;
        let trained = self.weights.config(checkpoint.as_ref())?;
        let config = tinygpt::flow::config_for(&trained);
        let resolved = resolve(self.backend)?;
        let mut backend = build(&resolved, self.backend, &config)?;
        let seed = checkpoint
            .as_ref()
            .map_or(self.weights.seed(), |ck| ck.seed);
        let params = self
            .weights
            .put_on(&mut *backend, checkpoint.map(|ck| ck.params))?;
        Ok(Opened {
            backend,
            params,
            trained,
            seed,
        })
    }
}

const PROMPT: &str = "First Citizen:\nBefore we proceed any further, hear me speak";

#[derive(clap::Args)]
pub struct LensArgs {
    #[command(flatten)]
    common: Common,
    /// The text to run (its last ctx bytes).
    #[arg(long, default_value = PROMPT)]
    prompt: String,
}

pub fn lens(args: LensArgs) -> Result<()> {
    let (mut backend, params) = args.common.open()?;
    let grid = interventions::lens(&mut *backend, &params, args.prompt.as_bytes())
        .map_err(anyhow::Error::msg)?;
    if args.common.json {
        println!("{}", serde_json::to_string(&grid)?);
        return Ok(());
    }
    println!(
        "what the model would predict after each byte, if it stopped at each point (top guess):"
    );
    let header: String = grid
        .tokens
        .iter()
        .map(|&b| format!("{:>4}", byte_label(b)))
        .collect();
    println!("{:>22}{header}", "byte:");
    let last = grid.lens.len() - 1;
    for (i, row) in grid.lens.iter().enumerate() {
        let place = if i == last {
            "after the last block".to_string()
        } else {
            format!("entering block {i}")
        };
        let cells: String = row
            .iter()
            .map(|g| format!("{:>4}", byte_label(g[0].byte)))
            .collect();
        println!("{place:>22}{cells}");
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct AblateArgs {
    #[command(flatten)]
    common: Common,
    /// The text whose loss each knockout changes (its last ctx bytes).
    #[arg(long, default_value = PROMPT, conflicts_with = "validation")]
    prompt: String,
    /// Measure the loss on this many rows of the run's validation windows
    /// instead of the prompt (the windows `tinygpt train` evaluates on:
    /// its seed's, from the corpus's last 10%).
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = validation_rows)]
    validation: Option<u64>,
    /// With --validation: the text the model was trained on (default:
    /// TinyShakespeare).
    #[arg(long, value_name = "FILE", requires = "validation")]
    corpus: Option<std::path::PathBuf>,
}

/// `--validation`: 1 to 4096 rows (a negative number said so, not taken
/// for a flag).
fn validation_rows(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n as u64),
        Ok(_) => Err(format!("{s} is not a number of rows from 1 to 4096")),
        Err(_) => Err(format!(
            "`{s}` is not a number of rows: give a whole number from 1 to 4096"
        )),
    }
}

pub fn ablate(args: AblateArgs) -> Result<()> {
    let Opened {
        mut backend,
        params,
        trained,
        seed,
    } = args.common.open_run()?;
    let config = backend.program().config.clone();
    let parts = Part::all(config.n_layer, config.n_head);
    let rows = match args.validation {
        None => Vec::new(),
        Some(n) => {
            let corpus = tinygpt::model::gallery::corpus_for(
                args.corpus.as_deref(),
                args.common.weights.checkpoint_arg(),
                config.ctx,
            )?;
            // The run's own validation batches, row by row.
            let all = tinygpt::data::validation_batches(
                &corpus,
                trained.batch,
                trained.ctx,
                trained.eval_batches,
                seed,
            );
            let rows: Vec<_> = all.iter().flat_map(|b| b.rows()).collect();
            if rows.len() < n as usize {
                bail!(
                    "the run's validation batches hold {} rows; give --validation {} or fewer",
                    rows.len(),
                    rows.len()
                );
            }
            rows.into_iter().take(n as usize).collect()
        }
    };
    let on = match args.validation {
        None => interventions::LossOn::Prompt(args.prompt.as_bytes()),
        Some(_) => interventions::LossOn::Rows(&rows),
    };
    let a =
        interventions::ablate(&mut *backend, &params, on, &parts).map_err(anyhow::Error::msg)?;
    if args.common.json {
        println!("{}", serde_json::to_string(&a)?);
        return Ok(());
    }
    let what = match on {
        interventions::LossOn::Prompt(_) => "the prompt's loss".to_string(),
        interventions::LossOn::Rows(r) => format!("the loss on {} validation rows", r.len()),
    };
    println!(
        "{what} intact: {:.4}; with one part knocked out (zeroed before it is added to the stream):",
        a.intact_loss
    );
    for (part, k) in parts.iter().zip(&a.parts) {
        println!("{:>12}: {:.4} ({:+.4})", part.label(), k.loss, k.delta);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct PatchArgs {
    #[command(flatten)]
    common: Common,
    /// The clean prompt.
    #[arg(long)]
    clean: String,
    /// The corrupted prompt, the same length (e.g. one byte changed).
    #[arg(long)]
    corrupt: String,
    /// The two bytes whose logit difference is compared (A,B); default the
    /// clean and the corrupted run's answers.
    #[arg(long, value_name = "A,B", value_parser = tinygpt::probe::parse_byte_pair)]
    bytes: Option<(u8, u8)>,
}

pub fn patch(args: PatchArgs) -> Result<()> {
    let (mut backend, _) = args.common.open()?;
    let p = interventions::patch(
        &mut *backend,
        args.clean.as_bytes(),
        args.corrupt.as_bytes(),
        args.bytes,
    )
    .map_err(anyhow::Error::msg)?;
    if args.common.json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(());
    }
    println!(
        "clean answer `{}`, corrupted answer `{}`; logit difference {:.3} clean, {:.3} corrupted",
        byte_label(p.clean_answer),
        byte_label(p.corrupt_answer),
        p.clean_diff,
        p.corrupt_diff
    );
    println!(
        "share of the clean answer restored by the clean stream entering each block at each position:"
    );
    for (l, row) in p.restored.iter().enumerate() {
        let cells: String = row.iter().map(|x| format!("{:>6.2}", x)).collect();
        println!("block {l:>2}:{cells}");
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct AttributeArgs {
    #[command(flatten)]
    common: Common,
    /// The text to run (its last ctx bytes).
    #[arg(long, default_value = PROMPT)]
    prompt: String,
    /// The position (0-based, after the context cut; default the last).
    #[arg(long, value_name = "I")]
    position: Option<usize>,
    /// The two bytes: why A and not B (`e,a`; `\n` or a value like 032 for either).
    #[arg(long, value_name = "A,B", value_parser = tinygpt::probe::parse_byte_pair)]
    bytes: (u8, u8),
}

pub fn attribute(args: AttributeArgs) -> Result<()> {
    let (mut backend, params) = args.common.open()?;
    let a = interventions::attribute(
        &mut *backend,
        &params,
        args.prompt.as_bytes(),
        args.position,
        args.bytes,
    )
    .map_err(anyhow::Error::msg)?;
    if !a.total.is_finite() {
        bail!("the logits are not finite: the checkpoint's weights have diverged");
    }
    if args.common.json {
        println!("{}", serde_json::to_string(&a)?);
        return Ok(());
    }
    println!(
        "logit(`{}`) − logit(`{}`) at position {} = {:.4}; each part's share, largest first:",
        byte_label(a.a),
        byte_label(a.b),
        a.position,
        a.total
    );
    let mut parts = a.parts.clone();
    parts.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
    for (name, v) in parts {
        println!("{name:>16}: {v:+.4}");
    }
    Ok(())
}
