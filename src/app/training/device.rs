//! The GPU device training runs on ([`GpuDevice`]): Bevy's own, found at
//! start-up, or why there is none.

use crate::gpu::GpuContext;
use bevy::prelude::*;

/// The wgpu device the GPU backend trains on: Bevy's (from
/// `RenderDevice`/`RenderQueue`) when it can run compute shaders. Natively,
/// `TINYGPT_APP_OWN_DEVICE=1` opens one of its own on the default adapter
/// instead, so that a lost training device leaves the renderer's standing.
/// Not the default: on the H100 host two devices trained 12–15% slower in
/// the app than one (xl 9.5 against 8.24 ms a step, nanogpt-char 117.5
/// against 106.9, at 1920×1080), the GPU switching between their contexts
/// every frame.
#[derive(Resource, Default, Clone)]
pub struct GpuDevice {
    pub context: Option<GpuContext>,
    /// Why there is none, where the app knows (the notice of a CPU run).
    pub missing: Option<String>,
    /// Whether `context` is the renderer's device: losing it loses both.
    pub shared_with_renderer: bool,
}

impl GpuDevice {
    /// Whether the training device has the tensor cores a mixed-precision
    /// run needs; Err: why not, in a sentence.
    pub fn tensor_cores(&self) -> Result<(), String> {
        match (&self.context, &self.missing) {
            (Some(ctx), _) => ctx.tensor_cores.clone(),
            (None, Some(why)) => Err(why.clone()),
            (None, None) => Err("no GPU device is available to the app".into()),
        }
    }
}

/// Finds the training device ([`GpuDevice`]): Bevy's, or with
/// `TINYGPT_APP_OWN_DEVICE` one of its own (opened once, at start-up, as
/// Bevy opens its own).
pub(super) fn find_gpu_device(
    mut gpu: ResMut<GpuDevice>,
    device: Option<Res<bevy::render::renderer::RenderDevice>>,
    queue: Option<Res<bevy::render::renderer::RenderQueue>>,
    info: Option<Res<bevy::render::renderer::RenderAdapterInfo>>,
    adapter: Option<Res<bevy::render::renderer::RenderAdapter>>,
) {
    if gpu.context.is_some() {
        return;
    }
    if let (Some(device), Some(queue), Some(info)) = (device, queue, info) {
        let queue: &wgpu::Queue = &queue;
        let info: &wgpu::AdapterInfo = &info;
        if let Some(why) = leaky_lavapipe(info) {
            warn!("{why}");
        }
        #[cfg(target_arch = "wasm32")]
        if info.backend == wgpu::Backend::Gl {
            // WebGL2 draws the page but has no compute shaders.
            gpu.missing = Some(crate::app::browser::no_webgpu());
            return;
        }
        #[cfg(not(target_arch = "wasm32"))]
        if std::env::var_os("TINYGPT_APP_OWN_DEVICE").is_some() {
            match GpuContext::new_blocking() {
                Ok(own) => {
                    gpu.context = Some(own);
                    return;
                }
                Err(e) => {
                    warn!("no GPU device of its own for training ({e}); sharing the renderer's")
                }
            }
        }
        let mut ctx = GpuContext::from_device(device.wgpu_device().clone(), queue.clone(), info.clone());
        // Bevy opens its device with every feature the adapter has: where
        // those include the tensor cores, mixed-precision runs can use them.
        if let Some(adapter) = adapter {
            let adapter: &wgpu::Adapter = &adapter;
            ctx.tensor_cores = if device.wgpu_device().features().contains(crate::gpu::coop::FEATURES) {
                crate::gpu::coop::adapter_support(adapter)
            } else {
                crate::gpu::coop::adapter_support(adapter)
                    .and(Err("the app's renderer opened its device without the tensor cores".into()))
            };
        }
        gpu.context = Some(ctx);
        gpu.shared_with_renderer = true;
    }
}

/// A warning where the renderer runs on the lavapipe of Mesa 22 or older
/// (Debian 12's): under Bevy 0.20 it allocates without end while sprites are
/// drawn (110-160 MB a second in the headless app on a 2-core machine; Mesa
/// 25's holds flat; docs/performance.md, issue 49).
pub fn leaky_lavapipe(info: &wgpu::AdapterInfo) -> Option<String> {
    if info.driver != "llvmpipe" {
        return None;
    }
    let version = info.driver_info.split("Mesa ").nth(1)?;
    let major: u32 = version.split('.').next()?.trim().parse().ok()?;
    (major < 23).then(|| {
        format!(
            "this software Vulkan driver ({}) is known to grow the app's memory by 100 MB or more a second; \
             install Mesa 23 or newer (Debian 12: apt install -t bookworm-backports mesa-vulkan-drivers), \
             or point VK_DRIVER_FILES at a newer lavapipe's lvp_icd.json (scripts/lavapipe.sh fetches one for the tests)",
            info.driver_info
        )
    })
}

/// Compiles one kernel a frame that a backend on the training device will
/// run, so that the first step finds them ready: compiling them all at once
/// would hold the frame (in a page, the browser's GPU process draws nothing
/// while it compiles: over 10 s on a software GPU). See
/// [`crate::gpu::kernels::Kernels`].
pub(super) fn warm_kernels(gpu: Res<GpuDevice>) {
    if let Some(ctx) = &gpu.context {
        ctx.warm_kernels();
    }
}

#[cfg(test)]
mod tests {
    use super::leaky_lavapipe;

    fn adapter(driver: &str, driver_info: &str) -> wgpu::AdapterInfo {
        wgpu::AdapterInfo {
            driver: driver.into(),
            driver_info: driver_info.into(),
            ..wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan)
        }
    }

    #[test]
    fn only_the_old_lavapipe_is_named() {
        assert!(leaky_lavapipe(&adapter("llvmpipe", "Mesa 22.3.6 (LLVM 15.0.6)")).is_some());
        assert!(leaky_lavapipe(&adapter("llvmpipe", "Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)")).is_none());
        assert!(leaky_lavapipe(&adapter("NVIDIA", "580.159.04")).is_none());
        assert!(leaky_lavapipe(&adapter("llvmpipe", "")).is_none());
    }
}
