//! The interface every backend (CPU reference, GPU kernels) implements: run
//! the program's training step, evaluate a loss, and read or write any tensor
//! by name.

use crate::data::Batch;
use crate::probe::{ProbeRequest, ProbeResult};
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
    /// Not applied, and not a divergence: mixed precision's loss scaler
    /// found the scaled gradients overflowing f16, skipped the update and
    /// halved its scale (PyTorch's GradScaler does the same).
    pub skipped: bool,
}

impl StepOutcome {
    /// From a GPU step's [loss, norm, clip scale, Σ grad²] (adamw.wgsl):
    /// Σ grad² is −1 in a step discarded behind a diverged one, −2 in one
    /// the loss scaler skipped.
    pub fn from_stats([loss, grad_norm, _, sum_squares]: [f32; 4]) -> Self {
        Self {
            loss,
            grad_norm,
            applied: loss.is_finite() && grad_norm.is_finite() && sum_squares >= 0.0,
            skipped: sum_squares == -2.0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no tensor named `{0}` in the program")]
    UnknownTensor(String),
    #[error("cannot probe: {0}")]
    BadProbe(String),
    #[error("the GPU device was lost before the result came back")]
    DeviceLost,
    #[error("tensor `{name}` holds {expected} values, got {got}")]
    WrongSize {
        name: String,
        expected: usize,
        got: usize,
    },
}

/// A read started by [`Backend::start_reads`].
pub enum PendingRead {
    /// Values already there (the CPU).
    Ready(Vec<f32>),
    /// A GPU readback on its way.
    Gpu(crate::readback::ReadbackHandle),
}

/// The most floats one read of [`Backend::read_many`] moves (64 MB).
pub const READ_CHUNK_FLOATS: usize = 16 << 20;

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
    /// The kernels each entry of `program().steps` runs, by name, in the
    /// order they are dispatched (the GPU's plan); empty where a backend
    /// has no kernels (the CPU).
    fn entry_kernels(&self) -> Vec<Vec<&'static str>> {
        Vec::new()
    }
    /// Forward, loss, backward, clipping and AdamW on one batch.
    fn train_step(&mut self, batch: &Batch, params: StepParams) -> StepOutcome;
    /// Mean loss of a batch in evaluation mode (no dropout, no update).
    fn eval_loss(&mut self, batch: &Batch) -> f32;
    /// A copy of any tensor, as f32.
    fn read(&mut self, name: &str) -> Result<Vec<f32>, BackendError>;
    /// Overwrites any tensor (parameters, optimizer state).
    fn write(&mut self, name: &str, values: &[f32]) -> Result<(), BackendError>;

    /// Runs a probe ([`crate::probe`]): the forward ops on the request's
    /// batch in evaluation mode, then the attention probes of its blocks for
    /// its window. Leaves parameters, gradients and optimizer state as they
    /// were (a training step rewrites everything else it reads).
    fn probe(&mut self, request: &ProbeRequest) -> Result<ProbeResult, BackendError>;

    /// Sets the batch and the step's parameters (`None`: evaluation mode, no
    /// dropout and no update) for the entries [`Backend::run_entries`] runs.
    fn load_step(&mut self, batch: &Batch, params: Option<StepParams>);

    /// Runs entries `range` of [`Program::steps`] in order, on what
    /// [`Backend::load_step`] set: the same code [`Backend::train_step`]
    /// runs, an op at a time if the caller likes (the step-through). The GPU
    /// submits them without waiting; reads queue behind them.
    fn run_entries(&mut self, range: std::ops::Range<usize>);

    /// Puts the parameters and AdamW moments aside (before an update that
    /// should not stay, e.g. a step-through of a typed prompt).
    fn stash_weights(&mut self);

    /// Puts back what [`Backend::stash_weights`] put aside (nothing if it
    /// was not called), and forgets it.
    fn restore_weights(&mut self);

    /// Forgets what [`Backend::stash_weights`] put aside (the update stays).
    fn discard_stash(&mut self);

    /// Starts reading tensors back, one after another in one list, without
    /// waiting (the CPU has them at once; the GPU once the device has been
    /// polled). Inputs (token ids) are not read this way.
    fn start_reads(&mut self, names: &[&str]) -> Result<PendingRead, BackendError>;

    /// The values of a read if they have arrived, else the read back.
    #[allow(clippy::result_large_err)] // the read comes back whole, to try again
    fn try_take_reads(&mut self, read: PendingRead) -> Result<Vec<f32>, PendingRead>;

    /// Whether [`Step::ClipGradNorm`](crate::program::Step::ClipGradNorm)
    /// scales the gradient tensors in place (the CPU), or only measures the
    /// norm and leaves the factor for AdamW's kernel to apply as it reads
    /// each gradient (the GPU: one pass over the gradients fewer).
    fn clips_in_place(&self) -> bool {
        true
    }

    /// Starts a FlashAttention trace ([`crate::flash`]) where this backend
    /// runs the traced kernels: runs the program up to the block's attention
    /// backward on the request's batch in evaluation mode, then traces the
    /// chosen head without waiting, laid out as
    /// [`crate::flash::format::Parts`]. `None` (the default, the CPU): the
    /// trace is [`crate::flash::start`]'s model of the same tiling.
    fn start_flash_trace(
        &mut self,
        _request: &crate::flash::format::FlashRequest,
    ) -> Option<Result<PendingRead, BackendError>> {
        None
    }

    /// Lets the device make progress without waiting (nothing on the CPU).
    fn poll(&mut self) {}

    /// Waits for the device to make progress (the GPU; nothing on the CPU):
    /// what a blocking read does between its checks; `since` is when the
    /// wait began.
    fn wait(&mut self, _since: web_time::Instant) {}

    /// Reads tensors back, waiting once for all of them rather than once
    /// each (a batch-1 flow reads a hundred tensors: a hundred waits behind
    /// whatever else the device runs). In chunks of at most
    /// [`READ_CHUNK_FLOATS`] (one staging buffer each). Not for a browser,
    /// which cannot wait.
    fn read_many(&mut self, names: &[&str]) -> Result<Vec<Vec<f32>>, BackendError> {
        let program = self.program();
        let sizes = names
            .iter()
            .map(|n| {
                program
                    .tensor_id(n)
                    .map(|id| program.tensors[id].numel())
                    .ok_or_else(|| BackendError::UnknownTensor(n.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut chunks: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut start, mut floats) = (0, 0);
        for (i, &n) in sizes.iter().enumerate() {
            if floats + n > READ_CHUNK_FLOATS && i > start {
                chunks.push(start..i);
                (start, floats) = (i, 0);
            }
            floats += n;
        }
        chunks.push(start..names.len());
        let mut pending = chunks
            .iter()
            .map(|r| self.start_reads(&names[r.clone()]).map(Some))
            .collect::<Result<Vec<_>, _>>()?;
        let mut flat: Vec<Option<Vec<f32>>> = vec![None; chunks.len()];
        let since = web_time::Instant::now();
        while flat.iter().any(Option::is_none) {
            self.wait(since);
            for (k, slot) in pending.iter_mut().enumerate() {
                if let Some(read) = slot.take() {
                    match self.try_take_reads(read) {
                        Ok(values) => flat[k] = Some(values),
                        Err(read) => *slot = Some(read),
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for (range, values) in chunks.iter().zip(flat) {
            let values = values.expect("every chunk arrived");
            let mut at = 0;
            for &n in &sizes[range.clone()] {
                out.push(values[at..at + n].to_vec());
                at += n;
            }
        }
        Ok(out)
    }

    /// This backend as `Any`, so that the layers above can reach a GPU
    /// backend's asynchronous paths (several steps per submit, readbacks
    /// without waiting) through the `as_gpu` that `crate::gpu` defines on
    /// `dyn Backend`: this trait names neither backend.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;

    /// Sets every parameter to its GPT-2 initialisation from `seed`
    /// ([`crate::model::params::init_params`]).
    fn initialize(&mut self, seed: u64) -> Result<(), BackendError> {
        for t in crate::model::params::init_params(self.program(), seed) {
            self.write(&t.name, &t.values)?;
        }
        Ok(())
    }
}
