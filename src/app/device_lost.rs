//! A lost GPU in the app: a driver reset, or in the browser a tab put to
//! sleep or `GPUDevice.destroy()`. Bevy reports the renderer's device (by
//! default also the training device) to its `RenderErrorHandler`, and this
//! one has the renderer start again on a new device; a training device of
//! its own (see [`GpuDevice`]) reports its loss through its context's flag.
//! Either way the run goes on on the CPU from its last host copy
//! ([`Run::recovery`], read back every half minute of GPU training), its
//! loss history kept, the reason in the status line.

use super::training::{GpuDevice, Run, RunCommand};
use bevy::prelude::*;
use bevy::render::error_handler::{ErrorType, RenderError, RenderErrorHandler, RenderErrorPolicy};

/// What the app knows of a lost GPU.
#[derive(Resource, Default)]
pub struct GpuLost {
    /// Why the GPU was lost, until the run has moved to the CPU.
    reason: Option<String>,
    /// Whether a render error is being let pass for a frame (see
    /// [`on_render_error`]).
    state: LossState,
    /// Why the renderer's device was lost, when the training backend (on
    /// that device) was first to hear of it: the render errors that follow
    /// are that loss.
    renderer_lost: Option<String>,
}

/// Where the app is with render errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LossState {
    #[default]
    None,
    /// An error came: is it a device loss? One frame to tell.
    Waiting,
    /// The device was lost and the renderer started again.
    Recovered,
}

pub struct DeviceLostPlugin;

impl Plugin for DeviceLostPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<GpuLost>()
            .insert_resource(RenderErrorHandler(on_render_error))
            .add_systems(
                Update,
                (
                    lose_the_gpu_for_tests,
                    notice_training_device_lost,
                    fall_back_to_cpu,
                )
                    .chain(),
            );
        if let Some(render_app) = app.get_sub_app_mut(bevy::render::RenderApp) {
            render_app.add_systems(
                bevy::render::RenderStartup,
                forget_the_lost_device.ambiguous_with_all(),
            );
        }
    }
}

/// After a loss Bevy (0.19 and 0.20) starts its renderer again on a new device and
/// makes anew what it marks as GPU resources (`init_gpu_resource`), but
/// bevy_egui (0.42, 0.43) and bevy_sprite_render keep the old device's buffers,
/// bind groups and pipeline ids in plain resources: used with the new
/// device they panic on an unknown wgpu id. `RenderStartup` runs again on
/// the new device; this empties them there (at the first start they are
/// empty already).
fn forget_the_lost_device(world: &mut World) {
    use bevy::render::render_resource::SpecializedRenderPipelines;
    use bevy::sprite_render::{ImageBindGroups, Mesh2dBindGroup, SpriteMeta, ViewKeyCache};
    use bevy_egui::render::{
        EguiPipeline,
        systems::{EguiPipelines, EguiRenderData, EguiTextureBindGroups, EguiTransforms},
    };
    fn reset<R: Resource + Default>(world: &mut World) {
        if world.contains_resource::<R>() {
            world.insert_resource(R::default());
        }
    }
    reset::<SpriteMeta>(world);
    reset::<ImageBindGroups>(world);
    // Bevy 0.20 draws sprites as 2D meshes: their bind groups are kept per
    // slab, and the views' pipeline keys decide what is specialized again
    // (emptied, every view is specialized anew on the new device).
    reset::<Mesh2dBindGroup>(world);
    reset::<ViewKeyCache>(world);
    reset::<EguiTransforms>(world);
    reset::<EguiRenderData>(world);
    reset::<EguiTextureBindGroups>(world);
    // Made anew every frame, from the (emptied) specialized pipelines.
    world.remove_resource::<EguiPipelines>();
    reset::<SpecializedRenderPipelines<EguiPipeline>>(world);
}

/// A lost device: note it for [`fall_back_to_cpu`] and start the renderer
/// again. A destroyed device reports itself lost only once its queue has
/// drained, so the errors of the commands that hit it come first: the
/// first other error is let pass for a frame, to see whether the loss
/// follows. Any other error after that quits, as Bevy's own handler does
/// (it would repeat every frame).
fn on_render_error(
    error: &RenderError,
    main: &mut World,
    _render: &mut World,
) -> RenderErrorPolicy {
    // The training backend's own evidence: a readback failed, or the
    // device was destroyed on purpose (perhaps already acted on, the run
    // moved to the CPU).
    let known = main
        .get_resource::<GpuDevice>()
        .and_then(|g| g.context.as_ref())
        .and_then(|ctx| ctx.lost())
        .or_else(|| main.get_resource::<GpuLost>()?.renderer_lost.clone());
    let mut lost = main.get_resource_or_insert_with(GpuLost::default);
    if error.ty == ErrorType::DeviceLost || known.is_some() {
        lost.reason = Some(
            if !error.description.is_empty() && error.ty == ErrorType::DeviceLost {
                error.description.clone()
            } else {
                known.unwrap_or_else(|| "the device was lost".to_string())
            },
        );
        lost.state = LossState::Recovered;
        lost.renderer_lost = None;
        let reason = lost.reason.clone();
        // The GPU run's backend shares this flag: it stops submitting.
        if let Some(ctx) = &main.resource::<GpuDevice>().context
            && let Ok(mut flag) = ctx.lost.lock()
        {
            flag.get_or_insert(reason.unwrap_or_default());
        }
        #[cfg(target_arch = "wasm32")]
        let creation = super::browser::render_creation();
        #[cfg(not(target_arch = "wasm32"))]
        let creation = bevy::render::settings::RenderCreation::default();
        return RenderErrorPolicy::Recover(creation);
    }
    match lost.state {
        LossState::None => {
            lost.state = LossState::Waiting;
            warn!(
                "a render error ({:?}); waiting a frame for a device loss: {}",
                error.ty, error.description
            );
            RenderErrorPolicy::Ignore
        }
        // Resources made on the lost device still report errors.
        LossState::Recovered => RenderErrorPolicy::Ignore,
        LossState::Waiting => {
            error!(
                "quitting: a render error ({:?}): {}",
                error.ty, error.description
            );
            main.write_message(AppExit::error());
            RenderErrorPolicy::StopRendering
        }
    }
}

/// A training device lost on its own (when it is not the renderer's, Bevy's
/// handler does not hear of it): its device-lost callback, a failed
/// readback or the test hook set its flag.
fn notice_training_device_lost(mut lost: ResMut<GpuLost>, gpu: Res<GpuDevice>) {
    if lost.reason.is_none()
        && let Some(reason) = gpu.context.as_ref().and_then(|ctx| ctx.lost())
    {
        lost.reason = Some(reason);
    }
}

/// Moves a GPU run to the CPU once the device is lost; later runs in this
/// session train on the CPU, saying why.
fn fall_back_to_cpu(
    mut lost: ResMut<GpuLost>,
    mut gpu: ResMut<GpuDevice>,
    run: Option<Res<Run>>,
    mut commands: MessageWriter<RunCommand>,
) {
    let Some(reason) = lost.reason.take() else {
        return;
    };
    if gpu.shared_with_renderer && lost.state != LossState::Recovered {
        // Heard of first through training: the renderer's errors follow.
        lost.renderer_lost = Some(reason.clone());
    }
    gpu.context = None;
    gpu.shared_with_renderer = false;
    gpu.missing = Some(crate::t!("gpu-lost-missing", reason = reason.as_str()));
    if run.is_some_and(|r| r.engine.on_gpu()) {
        commands.write(RunCommand::FallBackToCpu(reason));
    }
}

/// `TINYGPT_TEST_LOSE_GPU_AFTER=N` destroys the GPU device once a GPU run
/// has done N steps and has a host copy: the tests' way to lose it, as a
/// driver reset would.
fn lose_the_gpu_for_tests(
    gpu: Res<GpuDevice>,
    run: Option<Res<Run>>,
    mut after: Local<Option<Option<u64>>>,
) {
    let wanted = *after.get_or_insert_with(crate::gpu::GpuContext::test_lose_after);
    if let (Some(n), Some(run), Some(ctx)) = (wanted, run, &gpu.context)
        && run.engine.on_gpu()
        && run.step() >= n
        && run.recovery.is_some()
    {
        // As a driver's reset would, the loss is known at once.
        if let Ok(mut flag) = ctx.lost.lock() {
            flag.get_or_insert("destroyed by TINYGPT_TEST_LOSE_GPU_AFTER".into());
        }
        ctx.device.destroy();
        *after = Some(None);
    }
}
