//! `tinygpt attention`: the attention weights P of every layer and head for a
//! prompt, from a checkpoint (or a preset's initial weights), computed by the
//! model's own forward pass on the chosen backend: the data behind the app's
//! Attention scene.

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Result, bail};
use tinygpt::probe::{ProbeRequest, byte_label};

#[derive(clap::Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    weights: super::weights::WeightsArgs,
    /// The text to look at (its last ctx bytes).
    #[arg(
        long,
        default_value = "First Citizen:\nBefore we proceed any further, hear me speak."
    )]
    prompt: String,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object per (layer, head): layer, head, tokens (byte values), p (rows).
    #[arg(long)]
    json: bool,
}

pub fn run(args: AttentionArgs) -> Result<()> {
    let checkpoint = args.weights.checkpoint()?;
    let config = args.weights.config(checkpoint.as_ref())?;
    let request =
        ProbeRequest::for_prompt(&config, args.prompt.as_bytes()).map_err(anyhow::Error::msg)?;
    let resolved = resolve(args.backend)?;
    let mut backend = build(&resolved, args.backend, &config)?;
    args.weights
        .put_on(&mut *backend, checkpoint.map(|ck| ck.params))?;
    let result = backend.probe(&request)?;
    if result.probs.iter().flatten().any(|p| !p.is_finite()) {
        bail!("the attention weights are not finite: the checkpoint's weights have diverged");
    }
    if args.json {
        for object in result.to_json_objects() {
            println!("{object}");
        }
        return Ok(());
    }
    // For people: what the last byte attends to most, per layer and head.
    let n = result.n();
    let labels: Vec<String> = result.tokens.iter().map(|&b| byte_label(b)).collect();
    println!(
        "{} positions; for the last byte `{}`, the three bytes each head attends to most:",
        n,
        labels[n - 1]
    );
    for (k, &layer) in result.blocks.iter().enumerate() {
        for head in 0..result.n_head {
            let row = &result.p(k, head)[(n - 1) * n..n * n];
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
            let top: Vec<String> = order
                .iter()
                .take(3)
                .map(|&j| format!("{}@{j} {:.2}", labels[j], row[j]))
                .collect();
            println!("layer {layer} head {head}: {}", top.join(", "));
        }
    }
    println!("(--json prints every matrix)");
    Ok(())
}
