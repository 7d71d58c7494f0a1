//! Learning-rate schedules.

use crate::model::config::{Config, Schedule};

/// Learning rate for the step with 0-based index `it` (nanoGPT's formula:
/// linear warm-up, cosine decay to `min_lr`, then flat).
pub fn learning_rate(config: &Config, it: u64) -> f32 {
    match &config.schedule {
        Schedule::Constant => config.lr,
        Schedule::WarmupCosine {
            warmup_steps,
            decay_steps,
            min_lr,
        } => {
            let (w, d) = (*warmup_steps, *decay_steps);
            if it < w {
                return config.lr * (it + 1) as f32 / (w + 1) as f32;
            }
            if it > d || d == w {
                return *min_lr;
            }
            let ratio = (it - w) as f64 / (d - w) as f64;
            let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
            (*min_lr as f64 + coeff * (config.lr - *min_lr) as f64) as f32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_cosine_shape() {
        let cfg = Config::load("nanogpt-char").unwrap();
        assert!((learning_rate(&cfg, 0) - 1e-3 / 101.0).abs() < 1e-9);
        assert!((learning_rate(&cfg, 100) - 1e-3).abs() < 1e-9);
        let mid = learning_rate(&cfg, 2550);
        assert!((mid - 5.5e-4).abs() < 1e-6, "{mid}");
        assert!((learning_rate(&cfg, 5000) - 1e-4).abs() < 1e-9);
        assert_eq!(learning_rate(&cfg, 9000), 1e-4);
        let mut prev = f32::INFINITY;
        for it in 100..5000 {
            let lr = learning_rate(&cfg, it);
            assert!(lr <= prev);
            prev = lr;
        }
    }

    #[test]
    fn constant_is_constant() {
        let cfg = Config::load("small").unwrap();
        assert_eq!(learning_rate(&cfg, 0), 3e-4);
        assert_eq!(learning_rate(&cfg, 1499), 3e-4);
    }
}
