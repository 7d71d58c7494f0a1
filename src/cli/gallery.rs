//! `tinygpt gallery`: the trained models that ship with the program, one
//! card each (`--json`: one object per line), for `gallery:ID` wherever a
//! checkpoint is taken.

use anyhow::Result;
use tinygpt::model::gallery;

#[derive(clap::Args)]
pub struct GalleryArgs {
    /// One JSON object per entry: id, preset, corpus, source, licence,
    /// command, params, steps, val_loss (measured now), trained_val_loss
    /// (recorded in training), train_loss, sample, precision, accuracy (toy
    /// tasks), file, bytes.
    #[arg(long)]
    json: bool,
}

pub fn run(args: GalleryArgs) -> Result<()> {
    for entry in gallery::entries() {
        let card = tinygpt::cards::card(&entry)?;
        if args.json {
            println!("{}", serde_json::to_string(&card)?);
            continue;
        }
        println!(
            "gallery:{:<8} {} on {}: {} parameters, {} steps, validation loss {:.4}{}, {} KB ({}){}",
            card.id,
            card.preset,
            card.corpus,
            tinygpt::model::config::group_thousands(card.params),
            card.steps,
            card.val_loss,
            card.trained_val_loss
                .filter(|&t| t != card.val_loss)
                .map_or(String::new(), |t| format!(" ({t:.4} in training)")),
            card.bytes / 1024,
            card.precision,
            card.accuracy.map_or(String::new(), |a| format!(
                ", held-out accuracy {:.1}%",
                100.0 * a
            )),
        );
        if let Some(t) = card.train_loss {
            println!("          training loss at the end: {t:.4}");
        }
        println!("          sample: {}", card.sample.escape_debug());
        println!("          text: {}; licence: {}", card.source, card.licence);
        println!("          trained with: {}", card.command);
    }
    Ok(())
}
