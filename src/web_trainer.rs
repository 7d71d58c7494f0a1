//! The CPU trainer of the browser's Web Worker: this crate's core (no Bevy)
//! built a second time for wasm32 with threads (`+atomics`, std rebuilt on
//! a pinned nightly: web/build.sh), its rayon pool on Web Workers of their
//! own (wasm-bindgen-rayon's `initThreadPool`). The page's app, which
//! cannot block its thread on another, hands its run here as a checkpoint
//! with AdamW's moments and gets it back the same way; in between it asks
//! for steps and for reads (web/trainer-worker.js carries the messages;
//! [`crate::train::remote`] is what they say). The steps are the CPU
//! backend's, the one program every backend runs.

use crate::data::Corpus;
use crate::model::checkpoint::{Checkpoint, Precision};
use crate::train::Trainer;
use crate::train::remote::{StepsDone, train_steps};
use wasm_bindgen::prelude::*;

pub use wasm_bindgen_rayon::init_thread_pool;

/// A run in the worker.
#[wasm_bindgen]
pub struct WebTrainer {
    trainer: Trainer,
}

#[wasm_bindgen]
impl WebTrainer {
    /// Takes the run where `checkpoint` (safetensors bytes, with AdamW's
    /// moments) left it, on the corpus the app trains on (its two splits).
    #[wasm_bindgen(constructor)]
    pub fn new(
        checkpoint: &[u8],
        corpus_name: &str,
        train: Vec<u8>,
        val: Vec<u8>,
        align: usize,
    ) -> Result<WebTrainer, JsError> {
        let ckpt = Checkpoint::from_bytes(checkpoint, "the app's run")
            .map_err(|e| JsError::new(&e.to_string()))?;
        if ckpt.optimizer.is_none() {
            return Err(JsError::new("the run came without AdamW's moments"));
        }
        let corpus = Corpus {
            name: corpus_name.to_string(),
            train,
            val,
            align: align.max(1),
        };
        let backend = crate::bench::cpu_backend(&ckpt.config);
        let trainer =
            Trainer::resume(backend, corpus, &ckpt).map_err(|e| JsError::new(&e.to_string()))?;
        Ok(WebTrainer { trainer })
    }

    /// Steps completed.
    pub fn step(&self) -> f64 {
        self.trainer.step as f64
    }

    /// Up to `steps` steps for about `budget_ms`: what they measured, and
    /// the error that stopped them, as RON ([`StepsDone`]).
    pub fn steps(&mut self, steps: u32, budget_ms: f64) -> String {
        train_steps(&mut self.trainer, steps, budget_ms).to_ron()
    }

    /// The named tensors' values, one after another (the app knows their
    /// sizes from the program).
    pub fn read(&mut self, names: Vec<String>) -> Result<Vec<f32>, JsError> {
        let mut out = Vec::new();
        for name in &names {
            let values = self
                .trainer
                .backend
                .read(name)
                .map_err(|e| JsError::new(&e.to_string()))?;
            out.extend_from_slice(&values);
        }
        Ok(out)
    }

    /// The run as it is now, for the app to take back: a checkpoint with
    /// AdamW's moments, in f32 (bit for bit what the worker holds).
    pub fn checkpoint(&mut self) -> Result<Vec<u8>, JsError> {
        let ckpt = self
            .trainer
            .checkpoint(true)
            .map_err(|e| JsError::new(&e.to_string()))?;
        ckpt.to_bytes(Precision::F32, "the worker's run")
            .map_err(|e| JsError::new(&e.to_string()))
    }
}

/// `tinygpt bench --backend cpu` for one preset, in this worker on its
/// pool's threads: the same trainer, steps and timing as the command line
/// (the CPU backend built, then the first step, the warm-up and at least
/// `seconds` of timed steps), as the command's JSON. The browser test
/// measures the threaded step this way, with no page drawing beside it.
#[wasm_bindgen]
pub fn bench(preset: &str, seconds: f64) -> Result<String, JsError> {
    let config = crate::model::config::Config::load(preset).map_err(|e| JsError::new(&e.to_string()))?;
    let start = web_time::Instant::now();
    let backend = crate::bench::cpu_backend(&config);
    let setup_ms = start.elapsed().as_secs_f64() * 1e3;
    let opts = crate::bench::BenchOptions {
        min_seconds: seconds.clamp(0.0, 60.0),
        ..Default::default()
    };
    let result = crate::bench::bench(preset, "cpu", backend, setup_ms, opts).map_err(|e| JsError::new(&e))?;
    serde_json::to_string(&result).map_err(|e| JsError::new(&e.to_string()))
}
