//! The interface every backend (CPU reference, GPU kernels) implements: run
//! the program's training step, evaluate a loss, and read or write any tensor
//! by name.

use crate::data::Batch;
use crate::program::Program;

/// Inputs of one training step beyond the batch.
#[derive(Clone, Copy, Debug)]
pub struct StepParams {
    /// Learning rate for this step (from the schedule).
    pub lr: f32,
    /// 1-based AdamW step count (bias correction).
    pub adam_t: u64,
    /// Dropout seed of this step (see [`crate::data::rng::dropout_seed`]).
    pub dropout_seed: u32,
}

/// What a training step reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    /// Mean cross-entropy of the batch, before the update.
    pub loss: f32,
    /// Global L2 norm of the gradients, before clipping.
    pub grad_norm: f32,
    /// False when the loss or the gradients were not finite: the backend then
    /// leaves the parameters and optimizer state untouched.
    pub applied: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no tensor named `{0}` in the program")]
    UnknownTensor(String),
    #[error("tensor `{name}` holds {expected} values, got {got}")]
    WrongSize {
        name: String,
        expected: usize,
        got: usize,
    },
}

/// `Send` where threads exist: the app moves a CPU trainer onto a worker
/// task. In the browser (one thread; wgpu's handles are not `Send` there)
/// it asks nothing.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSend: Send {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send> MaybeSend for T {}
#[cfg(target_arch = "wasm32")]
pub trait MaybeSend {}
#[cfg(target_arch = "wasm32")]
impl<T> MaybeSend for T {}

pub trait Backend: MaybeSend {
    /// A one-line description, e.g. `cpu (rayon, 16 threads)`.
    fn describe(&self) -> String;
    fn program(&self) -> &Program;
    /// Forward, loss, backward, clipping and AdamW on one batch.
    fn train_step(&mut self, batch: &Batch, params: StepParams) -> StepOutcome;
    /// Mean loss of a batch in evaluation mode (no dropout, no update).
    fn eval_loss(&mut self, batch: &Batch) -> f32;
    /// A copy of any tensor, as f32.
    fn read(&mut self, name: &str) -> Result<Vec<f32>, BackendError>;
    /// Overwrites any tensor (parameters, optimizer state).
    fn write(&mut self, name: &str, values: &[f32]) -> Result<(), BackendError>;

    /// The GPU backend behind this one, for the asynchronous paths (several
    /// steps per submit, readbacks without waiting) that only it has.
    fn as_gpu(&mut self) -> Option<&mut crate::gpu::GpuBackend> {
        None
    }

    /// Sets every parameter to its GPT-2 initialisation from `seed`
    /// ([`crate::model::params::init_params`]).
    fn initialize(&mut self, seed: u64) -> Result<(), BackendError> {
        for t in crate::model::params::init_params(self.program(), seed) {
            self.write(&t.name, &t.values)?;
        }
        Ok(())
    }
}
