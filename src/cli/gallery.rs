//! `tinygpt gallery`: the trained models that ship with the program, one
//! card each (`--json`: one object per line), for `gallery:ID` wherever a
//! checkpoint is taken.

use anyhow::Result;
use tinygpt::model::gallery;

#[derive(clap::Args)]
pub struct GalleryArgs {
    /// One JSON object per entry: id, preset, corpus, source, licence,
    /// command, params, steps, val_loss, accuracy (toy tasks), file, bytes.
    #[arg(long)]
    json: bool,
}

pub fn run(args: GalleryArgs) -> Result<()> {
    for entry in gallery::entries() {
        let card = entry.card()?;
        if args.json {
            println!("{}", serde_json::to_string(&card)?);
            continue;
        }
        println!(
            "gallery:{:<8} {} on {}: {} parameters, {} steps, validation loss {}, {} KB",
            card.id,
            card.preset,
            card.corpus,
            card.params,
            card.steps,
            card.val_loss.map_or("–".into(), |l| format!("{l:.4}")),
            card.bytes / 1024
        );
        println!("          text: {}; licence: {}", card.source, card.licence);
        println!("          trained with: {}", card.command);
    }
    Ok(())
}
