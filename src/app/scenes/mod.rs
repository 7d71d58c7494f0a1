//! The scene system: each scene is a Bevy state ([`Scene`]) with its own
//! plugin, active only in its state; its entities carry
//! [`DespawnOnExit`] so they go when it is left. What every scene shares
//! lives here: the one list of scenes (that the link, the page, the UI and
//! the lessons read), the main view's camera and bounds, the cursor in the
//! scene's world, the hover tooltip, the colour scale and the label font.
//!
//! Scenes read what the training plugin provides ([`super::training::Snapshots`],
//! [`super::training::Probes`], [`super::training::FlashTraces`]) and ask for
//! what they need through [`super::training::TensorWants`],
//! [`super::training::Probes::set_want`] and
//! [`super::training::FlashTraces::set_want`]: requests that never block a
//! frame and work the same on both backends. Work of their own (the CPU vs
//! GPU step, the bench) runs on Bevy's async-compute pool.

pub mod attention;
pub mod camera;
pub mod correctness;
pub mod flash;
pub mod model;
pub mod speedup;
pub mod step;

use bevy::prelude::*;

/// The scenes of the main view. [`Scene::ALL`] is the one list of them.
#[derive(States, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Scene {
    /// The layer stack with every parameter as a live heatmap.
    #[default]
    Model,
    /// Every layer × head attention matrix P of a prompt, from the training model.
    Attention,
    /// One real training step, op by op: forward, backward, clip, AdamW.
    Step,
    /// FlashAttention-2 tiling one head's attention, replayed from a trace of the kernels.
    Flash,
    /// One training step on the CPU and the GPU, every tensor compared.
    Correctness,
    /// The training-speed bench measured in the app: the GPU-over-CPU curve.
    Speedup,
}

impl Scene {
    pub const ALL: [Scene; 6] = [
        Scene::Model,
        Scene::Attention,
        Scene::Step,
        Scene::Flash,
        Scene::Correctness,
        Scene::Speedup,
    ];

    /// The name in links (`scene=`), on the command line (`--scene`) and in lessons.
    pub fn key(self) -> &'static str {
        match self {
            Scene::Model => "model",
            Scene::Attention => "attention",
            Scene::Step => "step",
            Scene::Flash => "flash",
            Scene::Correctness => "correctness",
            Scene::Speedup => "speedup",
        }
    }

    pub fn from_key(key: &str) -> Option<Scene> {
        Scene::ALL.into_iter().find(|s| s.key() == key)
    }

    /// The switcher's label.
    pub fn title(self) -> &'static str {
        match self {
            Scene::Model => "Model",
            Scene::Attention => "Attention",
            Scene::Step => "Step through",
            Scene::Flash => "FlashAttention",
            Scene::Correctness => "CPU vs GPU",
            Scene::Speedup => "Speedup",
        }
    }

    /// One line on what the scene shows (the switcher's tooltip).
    pub fn about(self) -> &'static str {
        match self {
            Scene::Model => "the layer stack; every weight tensor a live heatmap",
            Scene::Attention => {
                "who attends to whom: every layer × head attention matrix, live from the training model"
            }
            Scene::Step => {
                "one real training step, op by op: each op's inputs, outputs and gradients, the clip and AdamW"
            }
            Scene::Flash => "FlashAttention-2's tiling of one head, replayed from the real kernels",
            Scene::Correctness => "one step on the CPU and the GPU: every tensor compared",
            Scene::Speedup => "why GPUs win: the training-speed curve, measured here",
        }
    }

    /// Every key, for messages that list them.
    pub fn keys() -> String {
        Scene::ALL.map(Scene::key).join(", ")
    }
}

/// The main view's background.
pub const BACKGROUND: Color = Color::srgb(0.05, 0.055, 0.07);
/// Labels in the scenes.
pub const LABEL_COLOUR: Color = Color::srgb(0.85, 0.87, 0.9);

/// DejaVu Sans: every glyph the labels use (× · ᵀ √ ␣ ↵), which Bevy's
/// built-in subset font lacks. Licence: assets/fonts/LICENSE-DejaVu.txt.
pub const LABEL_FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// Marks the camera that draws the scene.
#[derive(Component)]
pub struct SceneCamera;

/// The world-space box the current scene occupies (the camera fits it).
#[derive(Resource, Default, Debug, Clone, Copy)]
pub struct SceneBounds(pub Rect);

/// The pointer in the scene's world coordinates, when it is over the main
/// view and not over a panel.
#[derive(Resource, Default, Debug, Clone, Copy)]
pub struct SceneCursor(pub Option<Vec2>);

/// A named region of the scene's picture (a layer block, an attention map):
/// headless runs report where each is on screen, so tests check that the
/// picture shows what the data says.
#[derive(Component, Debug, Clone)]
pub struct SceneRegion {
    pub name: String,
    /// World units.
    pub rect: Rect,
}

/// What the cell under the pointer is (tensor, index, value, …), set by the
/// scene each frame; the UI shows it as a tooltip.
#[derive(Resource, Default, Debug, Clone)]
pub struct Hover(pub Option<String>);

/// How values map to colours: symmetric around zero, up to the largest
/// |value| or to the 99th percentile of |value| (a few large values then no
/// longer wash the rest out to white; values beyond saturate).
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColorScale {
    #[default]
    Percentile99,
    MaxAbs,
}

impl ColorScale {
    pub const ALL: [ColorScale; 2] = [ColorScale::Percentile99, ColorScale::MaxAbs];

    pub fn label(self) -> &'static str {
        match self {
            ColorScale::Percentile99 => "±99th pct |x|",
            ColorScale::MaxAbs => "±max |x|",
        }
    }

    /// The half-width of the scale for these values.
    pub fn half_width(self, values: &[f32], stats: &super::heatmap::Stats) -> f32 {
        match self {
            ColorScale::MaxAbs => stats.abs_max,
            ColorScale::Percentile99 => super::heatmap::abs_percentile(values, 0.99),
        }
    }
}

/// A `width`×`height` RGBA texture filled with `fill`, sampled nearest (each
/// value one crisp cell), that the main world rewrites: what a heatmap or an
/// attention map draws into.
pub fn cell_texture(
    images: &mut Assets<Image>,
    width: usize,
    height: usize,
    fill: [u8; 4],
) -> Handle<Image> {
    use bevy::asset::RenderAssetUsages;
    use bevy::render::render_resource::{Extent3d, TextureDimension, TextureFormat};
    let mut image = Image::new_fill(
        Extent3d {
            width: width as u32,
            height: height as u32,
            depth_or_array_layers: 1,
        },
        TextureDimension::D2,
        &fill,
        TextureFormat::Rgba8UnormSrgb,
        RenderAssetUsages::MAIN_WORLD | RenderAssetUsages::RENDER_WORLD,
    );
    image.sampler = bevy::image::ImageSampler::nearest();
    images.add(image)
}

/// The (row, column) of a `rows`×`cols` grid drawn in `rect` (row 0 at the
/// top) under the world point `world`, clamped into the grid.
pub fn cell_at(rect: Rect, world: Vec2, rows: usize, cols: usize) -> (usize, usize) {
    let u = ((world.x - rect.min.x) / rect.width()).clamp(0.0, 0.9999);
    let v = ((rect.max.y - world.y) / rect.height()).clamp(0.0, 0.9999);
    ((v * rows as f32) as usize, (u * cols as f32) as usize)
}

/// A text label in a scene, in the label font.
pub fn label(
    s: impl Into<String>,
    size: f32,
    anchor: bevy::sprite::Anchor,
    at: Vec2,
    z: f32,
) -> impl Bundle {
    (
        Text2d::new(s),
        TextFont::from_font_size(size),
        TextColor(LABEL_COLOUR),
        anchor,
        Transform::from_translation(at.extend(z)),
    )
}

pub struct ScenesPlugin {
    /// The scene the app opens in.
    pub initial: Scene,
    /// The entry the Step scene opens at.
    pub step_op: usize,
    /// The pass the Flash scene opens at, and the visit its replay opens
    /// at, paused.
    pub flash_pass: crate::flash::Pass,
    pub flash_visit: Option<usize>,
    /// Presets the Speedup scene measures at once (`--bench`), and the
    /// preset whose step it times per kernel at once (`--kernels`).
    pub bench: Option<Vec<String>>,
    pub kernels: Option<String>,
}

impl Plugin for ScenesPlugin {
    fn build(&self, app: &mut App) {
        app.insert_state(self.initial)
            .init_resource::<SceneBounds>()
            .init_resource::<SceneCursor>()
            .init_resource::<Hover>()
            .init_resource::<ColorScale>()
            .insert_resource(ClearColor(BACKGROUND))
            .add_systems(PreStartup, use_label_font)
            .add_plugins((
                camera::CameraPlugin,
                model::ModelScenePlugin,
                attention::AttentionScenePlugin,
                step::StepScenePlugin {
                    initial: step::StepView::at(self.step_op),
                },
                correctness::CorrectnessScenePlugin,
                speedup::SpeedupScenePlugin {
                    initial: self.bench.clone(),
                    kernels: self.kernels.clone(),
                },
                flash::FlashScenePlugin {
                    initial: flash::FlashView::at(self.flash_pass, self.flash_visit),
                },
            ));
    }
}

/// Makes the label font Bevy's default, before any text is laid out.
fn use_label_font(mut fonts: ResMut<Assets<Font>>) {
    let _ = fonts.insert(
        bevy::asset::AssetId::default(),
        Font::from_bytes(LABEL_FONT.to_vec()),
    );
}
