//! `tinygpt import`: the original TinyGPT's `.tinygpt` file as one of our
//! checkpoints (f32, with its AdamW moments when it holds them), so every
//! tool, the app and PyTorch can read it. (Every command that loads a
//! checkpoint also reads a `.tinygpt` directly: [`tinygpt::model::original`].)

use anyhow::Result;
use std::path::PathBuf;
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::group_thousands;
use tinygpt::output::{Input, claim};

#[derive(clap::Args)]
pub struct ImportArgs {
    /// The `.tinygpt` file the original TinyGPT's browser app saved.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The checkpoint to write (safetensors): a new file, never the one read.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Replace the --out file if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: ImportArgs) -> Result<()> {
    let _claim = claim(
        &args.out,
        "--out",
        &[Input::new("the imported file", &args.file)],
        args.force,
    )
    .map_err(|e| anyhow::anyhow!("cannot import: {e}"))?;
    let bytes = tinygpt::data::read_file(&args.file, 8 << 30)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}; check the path", args.file.display()))?;
    if !tinygpt::model::original::is_tinygpt(&bytes) {
        anyhow::bail!(
            "{} is not a .tinygpt file (it does not start with TGPT): import reads the original TinyGPT's saved models; this program's own checkpoints load as they are",
            args.file.display()
        );
    }
    let ck = Checkpoint::from_bytes(&bytes, &args.file.display().to_string())?;
    ck.save(&args.out, Precision::F32)?;
    let c = &ck.config;
    println!(
        "wrote {} ({} parameters: {} layers, {} heads, d_model {}, ctx {}; step {}{})",
        args.out.display(),
        group_thousands(c.param_count()),
        c.n_layer,
        c.n_head,
        c.d_model,
        c.ctx,
        ck.step,
        if ck.optimizer.is_some() {
            ", with AdamW's moments: `tinygpt train --resume` goes on from it"
        } else {
            ", weights only"
        }
    );
    Ok(())
}
