//! What the Attention scene reports: the data behind its view, the latest
//! probe's rows (what `tinygpt attention --json` prints).

use crate::app::registry::SceneApp;
use crate::app::scenes::Scene;
use crate::app::training::Probes;
use bevy::prelude::*;
use serde_json::{Value, json};

/// Registers the scene's data.
pub fn register(app: &mut App) {
    app.scene_data(Scene::Attention, data)
        .scene_description(Scene::Attention, description);
}

/// The picture in words: the strongest look from the probe's last byte
/// over every block and head, then the model's next byte there.
fn description(probes: Res<Probes>, frame: Res<super::FrameProbe>) -> Option<String> {
    use crate::app::access::describe::{guesses, prompt_text};
    let (step, r) = frame.shown.as_ref().or(probes.latest.as_ref())?;
    let n = r.n();
    let last = n.checked_sub(1)?;
    let mut best: Option<(usize, usize, usize, f32)> = None;
    for (k, &layer) in r.blocks.iter().enumerate() {
        for head in 0..r.n_head {
            let row = &r.p(k, head)[last * n..(last + 1) * n];
            for (key, &w) in row.iter().enumerate() {
                if best.is_none_or(|b| w > b.3) {
                    best = Some((layer, head, key, w));
                }
            }
        }
    }
    let (layer, head, key, weight) = best?;
    let mut line = crate::t!(
        "describe-attention",
        text = prompt_text(&r.tokens),
        step = *step,
        layer = layer as u64,
        head = head as u64,
        key = crate::app::canvas::chip_text(*r.tokens.get(key)?),
        position = key as u64,
        weight = format!("{weight:.2}"),
    );
    // (A time-lapse frame keeps no logits.)
    if r.logits.len() >= n * crate::model::config::VOCAB {
        // The model's own distribution (temperature 1), as the scene's
        // next-byte panel draws it.
        let opts = crate::sample::SampleOptions { temperature: 1.0, top_k: 256, seed: 0 };
        let top: Vec<crate::flow::Guess> = crate::sample::next_byte_distribution(r.logits_at(last), &opts)
            .into_iter()
            .map(|(byte, p)| crate::flow::Guess { byte, p: p as f32 })
            .collect();
        line.push(' ');
        line.push_str(&crate::t!("describe-next", guesses = guesses(&top, 3)));
    }
    Some(line)
}

fn data(probes: Res<Probes>, frame: Res<super::FrameProbe>) -> Value {
    // On the shared timeline: the time-lapse frame's maps, and its step.
    if let Some((step, r)) = &frame.shown {
        return json!({ "step": step, "timeline": true, "rows": r.to_json_objects() });
    }
    match &probes.latest {
        Some((step, r)) => json!({ "step": step, "rows": r.to_json_objects() }),
        None => {
            json!({ "error": probes.error.clone().unwrap_or_else(|| "not computed yet".into()) })
        }
    }
}
