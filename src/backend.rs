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
    Gpu(crate::gpu::readback::ReadbackHandle),
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

    /// Starts a FlashAttention trace ([`crate::flash`]): runs the program
    /// up to the block's attention backward on the request's batch in
    /// evaluation mode, then traces the chosen head. The GPU runs the traced
    /// kernels without waiting; the CPU (the default) runs its model of the
    /// same tiling at once. The result is laid out as [`crate::flash::Parts`].
    fn start_flash_trace(
        &mut self,
        request: &crate::flash::FlashRequest,
    ) -> Result<PendingRead, BackendError> {
        crate::flash::cpu_model(self, request).map(PendingRead::Ready)
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

/// Which backend a run asks for: the CLI's `--backend`, the app's Backend
/// box, the link's `backend=`. One list ([`BackendChoice::ALL`]) for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The GPU when a hardware adapter can run the kernels, else the CPU.
    #[default]
    Auto,
    /// The GPU backend (WGSL compute shaders through wgpu).
    Gpu,
    /// The CPU backend (rayon, f32).
    Cpu,
}

impl BackendChoice {
    pub const ALL: [BackendChoice; 3] =
        [BackendChoice::Auto, BackendChoice::Gpu, BackendChoice::Cpu];

    /// The name on the command line and in links.
    pub fn key(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Gpu => "gpu",
            BackendChoice::Cpu => "cpu",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.key() == key)
    }
}

/// What happens when the GPU asked for (or found by `auto`) cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuFallback {
    /// Train on the CPU instead, with a notice that says why (the app; `auto`).
    ToCpu,
    /// Fail with the reason (the command line's `--backend gpu`).
    Refuse,
}

/// The backend a choice settled on, and why it is not the one asked for
/// when it is not.
pub struct Chosen {
    pub backend: Box<dyn Backend>,
    pub notice: Option<String>,
}

/// Why `auto` passes over this adapter, if it does: a software renderer
/// (lavapipe, SwiftShader) runs the kernels about a thousand times slower
/// than a GPU, and slower than the CPU backend.
pub fn software_adapter(ctx: &crate::gpu::GpuContext) -> Option<String> {
    (ctx.info.device_type == wgpu::DeviceType::Cpu)
        .then(|| crate::t!("backend-software-renderer", name = ctx.info.name.as_str()))
}

/// Why a run has no GPU, for [`choose_backend`].
#[derive(Clone, Copy, Debug)]
pub struct NoGpu<'a> {
    pub why: &'a str,
    /// The reason says already that the run trains on the CPU (a software
    /// adapter's, the browser's without WebGPU, a lost GPU's), so the
    /// notice does not say it twice.
    pub says_where: bool,
}

/// Bytes the CPU backend holds for `program`: every tensor in f32
/// (weights, gradients, both AdamW moments, activations, saved values).
pub fn cpu_bytes(program: &Program) -> u64 {
    program.tensors.iter().map(|t| t.numel() as u64 * 4).sum()
}

/// All the memory this machine has (Linux: MemTotal + SwapTotal from
/// /proc/meminfo), if it can tell. Not what is free now: caches give way,
/// and some hosts report a total that grows as it is used.
pub fn host_memory_total() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kb = |key: &str| -> Option<u64> {
            let line = info.lines().find(|l| l.starts_with(key))?;
            line.split_whitespace().nth(1)?.parse().ok()
        };
        Some((kb("MemTotal:")? + kb("SwapTotal:").unwrap_or(0)) * 1024)
    }
    // A web page's memory is wasm32's: at most 4 GB, however much the
    // machine has.
    #[cfg(target_arch = "wasm32")]
    {
        Some(WASM32_MEMORY)
    }
    #[cfg(not(any(target_os = "linux", target_arch = "wasm32")))]
    {
        None
    }
}

/// Bytes of a full snapshot of `program`'s run on the host: every trained
/// tensor, its gradient and both AdamW moments, in f32.
pub fn page_snapshot_bytes(program: &Program) -> u64 {
    program
        .trained()
        .map(|id| program.tensors[id].numel() as u64 * 16)
        .sum()
}

/// The most memory a wasm32 page can address (4 GiB).
pub const WASM32_MEMORY: u64 = 4 << 30;

/// Refuses, before anything is allocated, a program the CPU backend could
/// not hold in this machine's memory, with both numbers.
pub fn check_host_memory(program: &Program) -> Result<(), String> {
    memory_fits(cpu_bytes(program), host_memory_total(), cfg!(target_arch = "wasm32"))
}

/// [`check_host_memory`]'s rule: `need` bytes in `have` (a web page's
/// 4 GB when `in_a_page`).
fn memory_fits(need: u64, have: Option<u64>, in_a_page: bool) -> Result<(), String> {
    match have {
        Some(have) if need > have => Err(format!(
            "the CPU backend needs {} MB for this preset (weights, gradients, AdamW moments and \
             activations) and {} MB of memory; choose a smaller preset{}",
            need >> 20,
            if in_a_page {
                format!("a web page can address at most {}", have >> 20)
            } else {
                format!("this machine has {}", have >> 20)
            },
            if in_a_page {
                " (or run the native app: `cargo run --release`)"
            } else {
                ""
            }
        )),
        _ => Ok(()),
    }
}

/// The one place the backend of a run is chosen (the CLI and the app call
/// it). `gpu` is the adapter's context, or why there is none. A software
/// adapter (lavapipe, SwiftShader) runs the kernels about a thousand times
/// slower than a GPU, so `auto` prefers the CPU backend over it; `gpu` still
/// runs it there, with a notice.
pub fn choose_backend(
    choice: BackendChoice,
    gpu: Result<&crate::gpu::GpuContext, NoGpu<'_>>,
    program: Program,
    fallback: GpuFallback,
) -> Result<Chosen, String> {
    let cpu_fits = check_host_memory(&program);
    let cpu = |notice: Option<String>| -> Result<Chosen, String> {
        cpu_fits.clone()?;
        Ok(Chosen {
            backend: Box::new(crate::cpu::CpuBackend::<f32>::new(program.clone())),
            notice,
        })
    };
    // What to suggest when the GPU cannot run it.
    let instead = match &cpu_fits {
        Ok(()) => "use --backend cpu or a smaller preset".to_string(),
        Err(e) => format!("the CPU cannot hold it either ({e})"),
    };
    let fallback = if choice == BackendChoice::Auto {
        GpuFallback::ToCpu
    } else {
        fallback
    };
    match (choice, gpu) {
        (BackendChoice::Cpu, _) => cpu(None),
        (_, Err(NoGpu { why, says_where })) => match fallback {
            GpuFallback::ToCpu if says_where => cpu(Some(why.to_string())),
            GpuFallback::ToCpu => cpu(Some(crate::t!("backend-trains-on-cpu", why = why))),
            GpuFallback::Refuse => Err(match &cpu_fits {
                Ok(()) => format!("{why}; use --backend cpu"),
                Err(e) => format!("{why}; and the CPU cannot hold this preset either ({e})"),
            }),
        },
        (BackendChoice::Auto, Ok(ctx)) if software_adapter(ctx).is_some() => {
            cpu(software_adapter(ctx))
        }
        // In a page the run's host copies (a save reads every weight, its
        // gradient and both moments) live in wasm32's 4 GB too.
        (_, Ok(_)) if cfg!(target_arch = "wasm32") && page_snapshot_bytes(&program) > WASM32_MEMORY => {
            Err(format!(
                "saving or recovering this preset's run reads {} MB of weights, gradients and AdamW \
                 moments back from the GPU, and a web page can address at most {} MB; choose a \
                 smaller preset, or run the native app (`cargo run --release`)",
                page_snapshot_bytes(&program) >> 20,
                WASM32_MEMORY >> 20
            ))
        }
        (_, Ok(ctx)) => match crate::gpu::GpuBackend::new(ctx.clone(), program.clone()) {
            Ok(b) => Ok(Chosen {
                backend: Box::new(b),
                notice: (ctx.info.device_type == wgpu::DeviceType::Cpu)
                    .then(|| crate::t!("backend-software-adapter", name = ctx.info.name.as_str())),
            }),
            Err(e) => match fallback {
                GpuFallback::ToCpu => cpu(Some(if cfg!(target_arch = "wasm32") {
                    crate::t!("backend-gpu-cannot-page", error = e.to_string())
                } else {
                    crate::t!("backend-gpu-cannot", error = e.to_string())
                }))
                .map_err(|cpu_e| format!("{e}; and the CPU cannot hold it either ({cpu_e})")),
                GpuFallback::Refuse => Err(format!("{e}; {instead}")),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Config;

    #[test]
    fn a_page_refuses_what_wasm32_cannot_address() {
        let behemoth = Program::new(&Config::load("behemoth").unwrap());
        let small = Program::new(&Config::load("small").unwrap());
        // 473 M parameters at 16 bytes each: more than 4 GB.
        assert!(page_snapshot_bytes(&behemoth) > WASM32_MEMORY);
        assert!(page_snapshot_bytes(&small) < WASM32_MEMORY);
        let e = memory_fits(cpu_bytes(&behemoth), Some(WASM32_MEMORY), true).unwrap_err();
        assert!(e.contains("a web page can address at most 4096 MB"), "{e}");
        assert!(e.contains("choose a smaller preset"), "{e}");
        memory_fits(cpu_bytes(&small), Some(WASM32_MEMORY), true).unwrap();
        let e = memory_fits(10 << 30, Some(8 << 30), false).unwrap_err();
        assert!(e.contains("this machine has 8192 MB"), "{e}");
        assert!(!e.contains("web page"), "{e}");
        // Where the total is unknown, nothing is refused.
        memory_fits(u64::MAX, None, false).unwrap();
    }
}
