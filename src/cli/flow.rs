//! `tinygpt flow`: one prompt's forward pass read at one position (the
//! residual stream entering each block, every activation, the next-byte
//! probabilities and the logit lens), from a checkpoint or a preset's
//! initial weights, on the chosen backend: the data behind the picture of
//! the model computing (issue 32); `--all-positions` reads every position
//! (the 3D walk-through's data, issue 50).

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Result, bail};
use tinygpt::probe::byte_label;

#[derive(clap::Args)]
pub struct FlowArgs {
    #[command(flatten)]
    weights: super::weights::WeightsArgs,
    /// The text to run (its last ctx bytes).
    #[arg(
        long,
        default_value = "First Citizen:\nBefore we proceed any further, hear me speak"
    )]
    prompt: String,
    /// The position to read (0-based, after the context cut; default the last).
    #[arg(long, value_name = "I")]
    position: Option<usize>,
    /// Read every position of the prompt: `residual` becomes (L+1)×T×C,
    /// each node's `values` T×width, `probs` T×256, `lens` (L+1)×T×5,
    /// `attention` L×heads×T×(i+1), `stats` each LayerNorm's μ and 1/σ
    /// and each head's log-sum-exp (T each); with --backward the loss is the mean
    /// over the positions that have a next byte (the last one only with
    /// --target) and each node's `grad` is T×width.
    #[arg(long, conflicts_with = "position")]
    all_positions: bool,
    /// Also run the backward pass of the loss of predicting the byte after
    /// the position: each node's gradient there and each weight's gradient norm.
    #[arg(long)]
    backward: bool,
    /// With --backward at the prompt's last byte (or with --all-positions,
    /// after it): the byte to predict next
    /// (one character, `\n`, or its value in two or three digits: `032`).
    #[arg(long, value_name = "B", requires = "backward", value_parser = tinygpt::probe::parse_byte)]
    target: Option<u8>,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object: tokens, position, residual, probs, lens, attention,
    /// nodes (with --backward: each node's grad, and backward).
    #[arg(long)]
    json: bool,
}

pub fn run(args: FlowArgs) -> Result<()> {
    let checkpoint = args.weights.checkpoint()?;
    let config = args.weights.config(checkpoint.as_ref())?;
    let config = tinygpt::flow::config_for(&config);
    // Bad prompts and positions are refused before a backend is built.
    tinygpt::flow::batch_for(&config, args.prompt.as_bytes(), args.position)
        .map_err(anyhow::Error::msg)?;
    let resolved = resolve(args.backend)?;
    let mut backend = build(&resolved, args.backend, &config)?;
    let params = args
        .weights
        .put_on(&mut *backend, checkpoint.map(|ck| ck.params))?;
    if args.all_positions {
        return all_positions(&args, &mut *backend, &params);
    }
    let mut flow = tinygpt::flow::run(
        &mut *backend,
        &params,
        args.prompt.as_bytes(),
        args.position,
    )
    .map_err(anyhow::Error::msg)?;
    if args.backward {
        let target = tinygpt::flow::target_at(&flow.tokens, flow.position, args.target)
            .map_err(anyhow::Error::msg)?;
        tinygpt::flow::backward(&mut *backend, &mut flow, target).map_err(anyhow::Error::msg)?;
    }
    if flow.probs.iter().any(|p| !p.is_finite()) {
        bail!("the probabilities are not finite: the checkpoint's weights have diverged");
    }
    if args.json {
        println!("{}", flow.to_json());
        return Ok(());
    }
    // For people: the prediction forming layer by layer (the logit lens).
    let at = byte_label(flow.tokens[flow.position]);
    println!(
        "position {} (`{at}`) of {}; what the model would predict next if it stopped:",
        flow.position,
        flow.tokens.len()
    );
    let shown = |guesses: &[tinygpt::flow::Guess]| {
        guesses
            .iter()
            .map(|g| format!("{} {:.2}", byte_label(g.byte), g.p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let last = flow.lens.len() - 1;
    for (i, guesses) in flow.lens.iter().enumerate() {
        let place = if i == last {
            "after the last block".to_string()
        } else {
            format!("entering block {i}")
        };
        println!("{place:>22}: {}", shown(guesses));
    }
    if let Some(b) = &flow.backward {
        let mut norms: Vec<_> = b.param_grad_norms.iter().collect();
        norms.sort_by(|x, y| y.norm.total_cmp(&x.norm));
        println!(
            "the loss of predicting `{}` next is {:.4}; the weights with the largest gradients:",
            byte_label(b.target),
            b.loss
        );
        for g in norms.iter().take(5) {
            println!("{:>40}: {:.4}", g.name, g.norm);
        }
    }
    println!("({} nodes; --json prints every value)", flow.nodes.len());
    Ok(())
}

/// `--all-positions`: the pass at every position; for people, what the
/// model predicts after each byte (and, with --backward, each loss).
fn all_positions(
    args: &FlowArgs,
    backend: &mut dyn tinygpt::backend::Backend,
    params: &[tinygpt::model::params::NamedTensor],
) -> Result<()> {
    let mut flow = tinygpt::flow::run_all(backend, params, args.prompt.as_bytes())
        .map_err(anyhow::Error::msg)?;
    if args.backward {
        tinygpt::flow::backward_all(backend, &mut flow, args.target).map_err(anyhow::Error::msg)?;
    }
    if flow.probs.iter().flatten().any(|p| !p.is_finite()) {
        bail!("the probabilities are not finite: the checkpoint's weights have diverged");
    }
    if args.json {
        println!("{}", flow.to_json());
        return Ok(());
    }
    println!(
        "{} positions; after each byte the model predicts (most likely first):",
        flow.tokens.len()
    );
    for (i, probs) in flow.probs.iter().enumerate() {
        let guesses = tinygpt::flow::top5(probs)
            .iter()
            .map(|g| format!("{} {:.2}", byte_label(g.byte), g.p))
            .collect::<Vec<_>>()
            .join(", ");
        let loss = flow
            .backward
            .as_ref()
            .and_then(|b| Some((b.targets[i]?, b.losses[i]?)))
            .map(|(t, l)| format!("  (next `{}`: loss {l:.3})", byte_label(t)))
            .unwrap_or_default();
        println!("{i:>4} `{}`: {guesses}{loss}", byte_label(flow.tokens[i]));
    }
    if let Some(b) = &flow.backward {
        println!("mean loss {:.4}", b.loss);
    }
    println!(
        "({} nodes at {} positions; --json prints every value)",
        flow.nodes.len(),
        flow.tokens.len()
    );
    Ok(())
}
