//! Choosing where to compute: `--backend auto|cpu|gpu`.

use anyhow::Result;
use tinygpt::backend::Backend;
use tinygpt::gpu::{GpuBackend, GpuContext};
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

/// A choice with `auto` settled.
#[derive(Clone, Debug)]
pub enum Resolved {
    Cpu,
    Gpu(Box<GpuContext>),
}

/// Settles `auto`: a hardware GPU adapter if there is one. A software
/// adapter (lavapipe, SwiftShader) runs the kernels about a thousand times
/// slower than a GPU, so `auto` prefers the CPU backend over it.
pub fn resolve(choice: BackendChoice) -> Result<Resolved> {
    match choice {
        BackendChoice::Cpu => Ok(Resolved::Cpu),
        BackendChoice::Gpu => Ok(Resolved::Gpu(Box::new(GpuContext::new_blocking()?))),
        BackendChoice::Auto => Ok(match GpuContext::new_blocking() {
            Ok(ctx) if ctx.info.device_type != wgpu::DeviceType::Cpu => {
                eprintln!("backend auto: the GPU, {}", ctx.describe());
                Resolved::Gpu(Box::new(ctx))
            }
            Ok(ctx) => {
                eprintln!(
                    "backend auto: the CPU (the only adapter, {}, is a software renderer and slower)",
                    ctx.info.name
                );
                Resolved::Cpu
            }
            Err(_) => {
                eprintln!("backend auto: the CPU (no GPU adapter found)");
                Resolved::Cpu
            }
        }),
    }
}

/// Builds the backend for a config. With `auto`, a GPU that cannot fit the
/// preset falls back to the CPU with a notice; with `gpu` that is an error.
pub fn build(
    resolved: &Resolved,
    choice: BackendChoice,
    config: &Config,
) -> Result<Box<dyn Backend>> {
    match resolved {
        Resolved::Cpu => Ok(tinygpt::bench::cpu_backend(config)),
        Resolved::Gpu(ctx) => match GpuBackend::new((**ctx).clone(), Program::new(config)) {
            Ok(b) => Ok(Box::new(b)),
            Err(e) if choice == BackendChoice::Auto => {
                eprintln!("backend auto: the CPU, because {e}");
                Ok(tinygpt::bench::cpu_backend(config))
            }
            Err(e) => Err(e.into()),
        },
    }
}
