//! Text generation on the GPU: the program's own forward pass over the
//! current window (batch 1), reading back the logits of its last position.
//! It follows the same window rule as the CPU's generator (the last ctx
//! bytes, sliding one byte at a time once full), so both compute the same
//! function; it recomputes the window for each byte instead of caching keys
//! and values. Like the CPU's, it runs with the causal mask on
//! even for a model from the lab without it: a new byte only has the bytes
//! before it (see `cpu::generate`).

use super::{GpuBackend, GpuContext, GpuError};
use crate::backend::Backend;
use crate::data::Batch;
use crate::model::config::{Config, VOCAB};
use crate::model::params::NamedTensor;
use crate::program::Program;
use crate::sample::NextToken;

pub struct GpuGenerator {
    backend: GpuBackend,
    window: Vec<u8>,
    /// Why the logits could not be read, once they could not.
    error: Option<String>,
    /// `TINYGPT_TEST_LOSE_GPU_AFTER=N`: destroy the device after N forward
    /// passes, as a driver reset would (the tests of a lost GPU).
    lose_after: Option<u64>,
    passes: u64,
}

impl GpuGenerator {
    pub fn new(ctx: GpuContext, config: &Config, params: &[NamedTensor]) -> Result<Self, GpuError> {
        let mut cfg = config.clone();
        cfg.batch = 1;
        cfg.lab.causal_mask = true;
        let mut backend = GpuBackend::new(ctx, Program::new(&cfg))?;
        for p in params {
            backend
                .write(&p.name, &p.values)
                .map_err(|e| GpuError::Other(e.to_string()))?;
        }
        Ok(Self {
            backend,
            window: Vec::new(),
            error: None,
            lose_after: GpuContext::test_lose_after(),
            passes: 0,
        })
    }

    /// The logits after the window's last byte; NaN once the device is
    /// lost ([`NextToken::lost`] says why).
    fn logits_of_last(&mut self) -> Vec<f32> {
        if self.lose_after == Some(self.passes) {
            self.backend.destroy_device();
        }
        self.passes += 1;
        if self.lost().is_some() {
            return vec![f32::NAN; VOCAB];
        }
        let ctx = self.ctx();
        let mut inputs: Vec<u32> = self.window.iter().map(|&b| b as u32).collect();
        inputs.resize(ctx, 0); // causal: padding after the window changes nothing before it
        let batch = Batch {
            batch: 1,
            ctx,
            targets: inputs.clone(),
            inputs,
        };
        self.backend.forward(&batch, None);
        let logits = match self.backend.read("logits") {
            Ok(logits) => logits,
            Err(e) => {
                self.error = Some(e.to_string());
                return vec![f32::NAN; VOCAB];
            }
        };
        if self.lost().is_some() {
            // The readback failed: what came back is not the logits.
            return vec![f32::NAN; VOCAB];
        }
        let last = self.window.len() - 1;
        logits[last * VOCAB..(last + 1) * VOCAB].to_vec()
    }
}

impl NextToken for GpuGenerator {
    fn ctx(&self) -> usize {
        self.backend.program().config.ctx
    }
    fn positions(&self) -> usize {
        self.window.len()
    }
    fn prime(&mut self, tokens: &[u8]) -> Vec<f32> {
        assert!(
            !tokens.is_empty() && tokens.len() <= self.ctx(),
            "prime needs 1..=ctx tokens"
        );
        self.window = tokens.to_vec();
        self.logits_of_last()
    }
    fn push(&mut self, token: u8) -> Vec<f32> {
        assert!(self.window.len() < self.ctx(), "window is full");
        self.window.push(token);
        self.logits_of_last()
    }
    fn lost(&self) -> Option<String> {
        self.backend.device_lost().or_else(|| self.error.clone())
    }
}
