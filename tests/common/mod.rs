//! Helpers shared by the integration tests.

use tinygpt::model::config::{Config, Schedule};

/// A model of the given shape with the reference training recipe (lr 1e-3,
/// AdamW 0.9/0.95, weight decay 0.1, clip 1.0) and no evaluation.
pub fn config(
    n_layer: usize,
    n_head: usize,
    d_model: usize,
    ctx: usize,
    batch: usize,
    dropout: f32,
) -> Config {
    Config {
        n_layer,
        n_head,
        d_model,
        ctx,
        batch,
        steps: 100,
        lr: 1e-3,
        schedule: Schedule::Constant,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        dropout,
        eval_interval: 0,
        eval_batches: 1,
    }
}
