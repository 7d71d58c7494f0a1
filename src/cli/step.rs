//! `tinygpt step`: one training step run entry by entry (the forward ops,
//! the loss, each op's backward in reverse, the gradient clip, AdamW) on the
//! chosen backend, printing what each entry computed: the data behind the
//! app's Step scene. The run itself is not changed or saved.

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Context, Result, bail};
use tinygpt::train::StepSource;

#[derive(clap::Args)]
pub struct StepArgs {
    #[command(flatten)]
    run: super::run::RunArgs,
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
    let mut trainer = args.run.trainer(|config| {
        let resolved = resolve(args.backend)?;
        build(&resolved, args.backend, config)
    })?;
    let config = trainer.config.clone();
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
