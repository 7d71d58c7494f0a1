//! Choosing where to compute: `--backend auto|cpu|gpu`. The choice itself is
//! the library's [`choose_backend`] (the app makes it the same way); this
//! module finds the GPU adapter for it and prints its notice.

use anyhow::Result;
use tinygpt::backend::Backend;
use tinygpt::backends::{BackendChoice as Choice, GpuFallback, NoGpu, choose_backend, software_adapter};
use tinygpt::gpu::GpuContext;
use tinygpt::model::config::Config;
use tinygpt::program::Program;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The GPU when a hardware adapter can run the kernels, else the CPU.
    Auto,
    /// The CPU backend (rayon, f32).
    Cpu,
    /// The GPU backend (WGSL compute shaders through wgpu); fails without an adapter.
    Gpu,
}

impl From<BackendChoice> for Choice {
    fn from(c: BackendChoice) -> Self {
        match c {
            BackendChoice::Auto => Choice::Auto,
            BackendChoice::Cpu => Choice::Cpu,
            BackendChoice::Gpu => Choice::Gpu,
        }
    }
}

/// The arithmetic of the matmuls: `--precision`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Precision {
    /// f32 everywhere: the reference, on every backend.
    #[default]
    F32,
    /// The matmuls on the GPU's tensor cores: f16 operands, f32
    /// accumulation, the loss scaled; weights, optimizer and every other op f32.
    Mixed,
}

impl From<Precision> for tinygpt::backends::Precision {
    fn from(p: Precision) -> Self {
        match p {
            Precision::F32 => Self::F32,
            Precision::Mixed => Self::Mixed,
        }
    }
}

/// The backend a run at `precision` is built on: mixed runs on the GPU
/// only (never a silent fall back to the CPU's f32).
pub fn backend_at(precision: tinygpt::backends::Precision, choice: BackendChoice) -> BackendChoice {
    match precision {
        tinygpt::backends::Precision::F32 => choice,
        tinygpt::backends::Precision::Mixed => BackendChoice::Gpu,
    }
}

/// The refusal of `--precision mixed` with `--backend cpu`.
pub const MIXED_ON_CPU: &str = "--precision mixed runs the matmuls on a GPU's tensor cores, and the CPU backend \
     computes in f32: leave out --backend cpu, or give --precision f32";

/// [`resolve`] at a precision: `mixed` opens the GPU with the tensor cores
/// and refuses, naming why and what works, where there are none (the CPU
/// backend, a software adapter, any GPU without cooperative matrices).
pub fn resolve_for(choice: BackendChoice, precision: impl Into<tinygpt::backends::Precision>) -> Result<Resolved> {
    if precision.into() == tinygpt::backends::Precision::F32 {
        return resolve(choice);
    }
    if choice == BackendChoice::Cpu {
        anyhow::bail!(MIXED_ON_CPU);
    }
    let mut ctx = GpuContext::with_tensor_cores_blocking()?;
    ctx.use_tensor_cores().map_err(|why| {
        anyhow::anyhow!("--precision mixed cannot run here: {why}; give --precision f32 to train in f32")
    })?;
    Ok(Resolved::Gpu(Box::new(ctx)))
}

/// A choice with the adapter found: the context, or why there is none.
#[derive(Clone, Debug)]
pub enum Resolved {
    Cpu,
    Gpu(Box<GpuContext>),
    /// Asked for (auto or gpu) and not found: why, and whether the adapter
    /// found was a software renderer (its reason says the run goes to the
    /// CPU).
    NoGpu {
        why: String,
        software: bool,
    },
}

/// Finds the GPU adapter a choice needs (none for `cpu`). `gpu` without an
/// adapter is an error here; `auto` keeps the reason for its notice.
pub fn resolve(choice: BackendChoice) -> Result<Resolved> {
    match choice {
        BackendChoice::Cpu => Ok(Resolved::Cpu),
        BackendChoice::Gpu => Ok(Resolved::Gpu(Box::new(GpuContext::new_blocking()?))),
        BackendChoice::Auto => Ok(match GpuContext::new_blocking() {
            Ok(ctx) => match software_adapter(&ctx) {
                Some(why) => Resolved::NoGpu {
                    why,
                    software: true,
                },
                None => Resolved::Gpu(Box::new(ctx)),
            },
            Err(e) => Resolved::NoGpu {
                why: format!("no GPU adapter found ({e})"),
                software: false,
            },
        }),
    }
}

/// Builds the backend for a config through [`choose_backend`]: with `auto`,
/// a GPU that is a software renderer or cannot fit the preset gives way to
/// the CPU, with a notice on stderr; with `gpu` that is an error.
pub fn build(
    resolved: &Resolved,
    choice: BackendChoice,
    config: &Config,
) -> Result<Box<dyn Backend>> {
    let gpu = match resolved {
        Resolved::Gpu(ctx) => Ok(&**ctx),
        Resolved::Cpu => Err(NoGpu {
            why: "the CPU backend was asked for",
            says_where: true,
        }),
        Resolved::NoGpu { why, software } => Err(NoGpu {
            why: why.as_str(),
            says_where: *software,
        }),
    };
    let chosen = choose_backend(
        choice.into(),
        gpu,
        Program::new(config),
        GpuFallback::Refuse,
    )
    .map_err(anyhow::Error::msg)?;
    if let Some(notice) = &chosen.notice {
        eprintln!("backend {}: {notice}", Choice::from(choice).key());
    } else if choice == BackendChoice::Auto {
        eprintln!("backend auto: {}", chosen.backend.describe());
    }
    Ok(chosen.backend)
}
