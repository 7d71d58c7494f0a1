//! Which backend runs a program: the CLI's `--backend`, the app's Backend
//! box and the link's `backend=` ([`BackendChoice`]), the GPU where a
//! hardware adapter can run the kernels and the model fits, else the CPU
//! ([`choose_backend`]), and the memory checks on the way. It names both
//! backends, so it sits above them; the trait they share is
//! [`crate::backend`].

use crate::backend::Backend;
use crate::program::Program;

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

pub use crate::model::config::Precision;

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
