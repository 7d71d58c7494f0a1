//! `tinygpt heads` and `tinygpt timelapse` (issue 52): every head's
//! induction and previous-token scores on the probe strings (different
//! random letters, each written twice), from a checkpoint or a preset's
//! initial weights; and the time-lapse a checkpoint carries, frame by frame.

use super::backend::{BackendChoice, build, resolve};
use anyhow::{Result, bail};
use tinygpt::model::timelapse::probe_sequences;

#[derive(clap::Args)]
pub struct HeadsArgs {
    #[command(flatten)]
    weights: super::weights::WeightsArgs,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object: the probe strings, the losses and every head's scores.
    #[arg(long)]
    json: bool,
}

pub fn heads(args: HeadsArgs) -> Result<()> {
    let checkpoint = args.weights.checkpoint()?;
    let config = args.weights.config(checkpoint.as_ref())?;
    let sequences = probe_sequences(config.ctx);
    if sequences.is_empty() {
        bail!(
            "the model's context ({} bytes) is too short for the probe: it needs at least 4 (two letters written twice)",
            config.ctx
        );
    }
    let resolved = resolve(args.backend)?;
    let mut backend = build(&resolved, args.backend, &config)?;
    args.weights
        .put_on(&mut *backend, checkpoint.as_ref().map(|ck| ck.params.clone()))?;
    let probe = tinygpt::train::timelapse::probe_heads(backend.as_mut(), &sequences)?;
    let scores = probe
        .heads
        .iter()
        .flat_map(|h| [h.induction, h.previous_token]);
    if scores.chain([probe.copy_loss, probe.fresh_loss]).any(|x| !x.is_finite()) {
        bail!("the scores are not finite: the checkpoint's weights have diverged");
    }
    let text = |s: &Vec<u8>| String::from_utf8_lossy(s).into_owned();
    if args.json {
        let json = serde_json::json!({
            "step": checkpoint.as_ref().map_or(0, |ck| ck.step),
            "sequences": sequences.iter().map(text).collect::<Vec<_>>(),
            "letters": sequences[0].len() / 2,
            "copy_loss": probe.copy_loss,
            "fresh_loss": probe.fresh_loss,
            "heads": probe.heads,
        });
        println!("{json}");
        return Ok(());
    }
    println!(
        "on {} strings of {} different random letters, each written twice ({}, …):",
        sequences.len(),
        sequences[0].len() / 2,
        text(&sequences[0])
    );
    println!("layer head  induction  previous-token");
    for h in &probe.heads {
        println!(
            "{:>5} {:>4}  {:>9.3}  {:>14.3}",
            h.layer, h.head, h.induction, h.previous_token
        );
    }
    println!(
        "loss on the copied letters {:.3}, on the fresh ones {:.3} (ln {} = {:.3}: a guess among the letters)",
        probe.copy_loss,
        probe.fresh_loss,
        tinygpt::data::tasks::REPEAT_LETTERS.len(),
        (tinygpt::data::tasks::REPEAT_LETTERS.len() as f32).ln()
    );
    println!(
        "(an induction head attends from each copied letter to the one after its first occurrence: near 1; \
         a previous-token head to the byte before: near 1)"
    );
    Ok(())
}

#[derive(clap::Args)]
pub struct TimelapseArgs {
    /// A checkpoint written by `tinygpt train` (or the app), or `gallery:ID`.
    #[arg(long, value_name = "FILE")]
    checkpoint: std::path::PathBuf,
    /// One JSON object: the probe, and every frame's step, losses, head
    /// scores and tensor norms (the attention maps are not printed).
    #[arg(long)]
    json: bool,
}

pub fn timelapse(args: TimelapseArgs) -> Result<()> {
    let ck = tinygpt::model::checkpoint::Checkpoint::load(&args.checkpoint)?;
    let Some(t) = ck.timelapse else {
        bail!(
            "{} holds no time-lapse (a run records one as it trains since this version; \
             `tinygpt train --resume {}` records from here on)",
            args.checkpoint.display(),
            args.checkpoint.display()
        );
    };
    if args.json {
        println!("{}", t.to_json(tinygpt::model::timelapse::FORMED));
        return Ok(());
    }
    println!(
        "{} frames, steps {} to {}; attention maps kept in {} of them ({:.1} KiB); in memory about {:.1} KiB",
        t.frames.len(),
        t.frames.first().map_or(0, |f| f.step),
        t.last_step().unwrap_or(0),
        t.frames.iter().filter(|f| f.attention.is_some()).count(),
        t.map_bytes() as f64 / 1024.0,
        t.memory_bytes() as f64 / 1024.0
    );
    println!("  step    loss  copy loss  best induction head  best previous-token head");
    for f in &t.frames {
        let best = f.best_induction();
        let prev = f
            .heads
            .iter()
            .max_by(|a, b| a.previous_token.total_cmp(&b.previous_token));
        let head = |h: Option<&tinygpt::model::timelapse::HeadScore>, score: fn(&tinygpt::model::timelapse::HeadScore) -> f32| {
            h.map(|h| format!("{}.{} {:.2}", h.layer, h.head, score(h)))
                .unwrap_or_default()
        };
        println!(
            "{:>6}  {:>6}  {:>9.3}  {:>19}  {:>24}",
            f.step,
            f.loss.map(|l| format!("{l:.3}")).unwrap_or("-".into()),
            f.copy_loss,
            head(best, |h| h.induction),
            head(prev, |h| h.previous_token)
        );
    }
    if let Some((f, h)) = t.induction_onset(tinygpt::model::timelapse::FORMED) {
        println!(
            "an induction head formed: head {}.{} passed 0.5 at step {}",
            h.layer, h.head, f.step
        );
    }
    Ok(())
}
