//! Text generation: temperature, top-k and seeded sampling over the logits
//! of a [`Generator`] (KV cache), streaming each byte as it is drawn.
//!
//! As nanoGPT's `generate()` does, every byte is predicted from the last
//! `ctx` bytes before it (all of them while fewer): a prompt longer than the
//! context keeps its last `ctx` bytes, and once the window is full it slides
//! one byte at a time. The model has learned absolute positions, so a slid
//! window is computed again ([`NextToken::prime`]); until it is full, each
//! byte costs one position ([`NextToken::push`]).

use crate::data::rng::Rng;

/// A model that yields next-byte logits position by position: the CPU's KV
/// cache ([`crate::cpu::generate::Generator`]) or the GPU's windowed forward
/// ([`crate::gpu::generate::GpuGenerator`]).
pub trait NextToken {
    /// Context length: how many positions the window holds.
    fn ctx(&self) -> usize;
    /// Positions currently in the window.
    fn positions(&self) -> usize;
    /// Empties the window, feeds 1..=ctx tokens, returns the logits after the last.
    fn prime(&mut self, tokens: &[u8]) -> Vec<f32>;
    /// Appends one token (the window must not be full) and returns the logits after it.
    fn push(&mut self, token: u8) -> Vec<f32>;
    /// Why no more logits can come (a lost GPU), once that has happened.
    fn lost(&self) -> Option<String> {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleOptions {
    /// Softmax temperature; 0 picks the most likely byte (greedy).
    pub temperature: f32,
    /// Sample among the `top_k` most likely bytes (1..=256).
    pub top_k: usize,
    pub seed: u64,
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            seed: 42,
        }
    }
}

impl SampleOptions {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!(
                "temperature {} must be a finite number >= 0 (0 means greedy)",
                self.temperature
            ));
        }
        if !(1..=256).contains(&self.top_k) {
            return Err(format!("top-k {} must be between 1 and 256", self.top_k));
        }
        Ok(())
    }
}

/// The `top_k` most likely bytes of `logits` (V), most likely first (ties by
/// byte value), with their weights exp((logit − max) / temperature).
/// Temperature 0: the argmax alone, weight 1.
fn top_k_weights(logits: &[f32], opts: &SampleOptions) -> (Vec<usize>, Vec<f64>) {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if opts.temperature == 0.0 {
        order.truncate(1);
        return (order, vec![1.0]);
    }
    order.truncate(opts.top_k.min(logits.len()));
    let m = logits[order[0]];
    let weights = order
        .iter()
        .map(|&i| (((logits[i] - m) / opts.temperature) as f64).exp())
        .collect();
    (order, weights)
}

/// The sampler's distribution over the next byte: the `top_k` most likely
/// bytes, most likely first, with probabilities softmax(logits / temperature)
/// renormalised over them (temperature 0: the argmax, probability 1). The
/// app's next-byte view shows this, so it shows what sampling draws from.
pub fn next_byte_distribution(logits: &[f32], opts: &SampleOptions) -> Vec<(u8, f64)> {
    let (order, weights) = top_k_weights(logits, opts);
    let total: f64 = weights.iter().sum();
    order
        .into_iter()
        .zip(weights)
        .map(|(i, w)| (i as u8, w / total))
        .collect()
}

/// Draws the next byte from `logits` (V): from [`next_byte_distribution`].
pub fn sample_logits(logits: &[f32], opts: &SampleOptions, rng: &mut Rng) -> u8 {
    let (order, weights) = top_k_weights(logits, opts);
    if opts.temperature == 0.0 {
        return order[0] as u8;
    }
    let total: f64 = weights.iter().sum();
    let mut u = rng.uniform() * total;
    for (w, &i) in weights.iter().zip(&order) {
        if u < *w {
            return i as u8;
        }
        u -= w;
    }
    *order.last().unwrap() as u8
}

/// Generates `n_tokens` bytes after `prompt`, calling `emit` with each one as
/// soon as it is drawn. An empty prompt starts from a newline. Stops early
/// when the generator is lost ([`NextToken::lost`]): the bytes so far come
/// back, and the caller says why.
pub fn generate(
    generator: &mut dyn NextToken,
    prompt: &[u8],
    n_tokens: usize,
    opts: &SampleOptions,
    mut emit: impl FnMut(u8),
) -> Vec<u8> {
    let ctx = generator.ctx();
    let mut rng = Rng::for_stream(opts.seed, "sample");
    let mut history: Vec<u8> = if prompt.is_empty() {
        vec![b'\n']
    } else {
        prompt.to_vec()
    };
    let start = history.len().saturating_sub(ctx);
    let mut logits = generator.prime(&history[start..]);
    let mut out = Vec::with_capacity(n_tokens);
    for _ in 0..n_tokens {
        if generator.lost().is_some() {
            // The caller asks the generator why.
            break;
        }
        let tok = sample_logits(&logits, opts, &mut rng);
        emit(tok);
        out.push(tok);
        history.push(tok);
        logits = if generator.positions() == ctx {
            // Full: the window slides by this byte.
            generator.prime(&history[history.len() - ctx..])
        } else {
            generator.push(tok)
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_argmax_and_top1_agrees() {
        let mut logits = vec![0.0f32; 256];
        logits[65] = 3.0;
        logits[66] = 2.0;
        let mut rng = Rng::new(1);
        let greedy = SampleOptions {
            temperature: 0.0,
            top_k: 40,
            seed: 0,
        };
        assert_eq!(sample_logits(&logits, &greedy, &mut rng), 65);
        let top1 = SampleOptions {
            temperature: 1.0,
            top_k: 1,
            seed: 0,
        };
        for _ in 0..50 {
            assert_eq!(sample_logits(&logits, &top1, &mut rng), 65);
        }
    }

    #[test]
    fn top_k_never_leaves_the_top_k() {
        let logits: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut order: Vec<usize> = (0..256).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let opts = SampleOptions {
            temperature: 2.0,
            top_k: 5,
            seed: 0,
        };
        let mut rng = Rng::new(2);
        for _ in 0..500 {
            let t = sample_logits(&logits, &opts, &mut rng) as usize;
            assert!(order[..5].contains(&t));
        }
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(
            SampleOptions {
                temperature: -1.0,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            SampleOptions {
                top_k: 0,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            SampleOptions {
                top_k: 257,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(SampleOptions::default().validate().is_ok());
    }
}
