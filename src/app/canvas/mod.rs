//! The canvas every scene draws on: the main view's camera and bounds
//! ([`camera`]), the pointer in the scene's world, the hover tooltip, named
//! regions for headless checks ([`SceneRegion`]), the
//! colour scale, the label font and the cell textures heatmaps draw into;
//! the picture's parts as the keyboard reaches them ([`parts`]).
//! Scenes build on it; it knows none of them.

pub mod camera;
pub mod parts;

use bevy::prelude::*;

/// The main view's background.
pub const BACKGROUND: Color = Color::srgb(0.05, 0.055, 0.07);
/// Labels in the scenes.
pub const LABEL_COLOUR: Color = Color::srgb(0.85, 0.87, 0.9);
/// The light canvas of *Inside the model* (`--theme light`): paper, and
/// its text.
pub const LIGHT_BACKGROUND: Color = Color::srgb(0.965, 0.965, 0.957);
pub const LIGHT_INK: Color = Color::srgb(0.10, 0.11, 0.13);

/// The canvas of *Inside the model*: dark, as every scene's (the default),
/// or light (paper: for white slides and handouts, or a projector that
/// turns dark greys to mud) (`--theme light`, `theme=light` in a link, the
/// scene toolbar's ☀ / ☾). docs/guide/scenes.md says why dark stays the
/// default, from the contrast measured on both.
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CanvasTheme {
    #[default]
    Dark,
    Light,
}

impl CanvasTheme {
    pub const ALL: [CanvasTheme; 2] = [CanvasTheme::Dark, CanvasTheme::Light];

    /// Its name on the command line and in a link.
    pub fn key(self) -> &'static str {
        match self {
            CanvasTheme::Dark => "dark",
            CanvasTheme::Light => "light",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.key() == key)
    }
}

/// DejaVu Sans: every glyph the labels use (× · ᵀ √ ␣ ↵), cut to Latin,
/// Greek and the signs by `scripts/make-ui-fonts.sh` (a third of the whole
/// font's size). Licence: assets/fonts/LICENSE-DejaVu.txt.
pub const LABEL_FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans-subset.ttf");

/// The offscreen image the cameras render into in a headless run.
#[derive(Resource, Clone, Debug)]
pub struct HeadlessTarget(pub Handle<Image>);

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

    pub fn label(self) -> String {
        match self {
            ColorScale::Percentile99 => crate::t!("scale-p99"),
            ColorScale::MaxAbs => crate::t!("scale-max"),
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

/// A text label in a scene, in the label font, in `colour`.
pub fn coloured_label(
    s: impl Into<String>,
    size: f32,
    anchor: bevy::sprite::Anchor,
    at: Vec2,
    z: f32,
    colour: Color,
) -> impl Bundle {
    (
        Text2d::new(s),
        TextFont::from_font_size(size),
        TextColor(colour),
        anchor,
        Transform::from_translation(at.extend(z)),
    )
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

/// Where a world-space rectangle lands on the scene camera's target, in
/// physical pixels (`[x0, y0, x1, y1]`, rounded), if the camera can say.
pub fn world_rect_to_px(
    camera: &Camera,
    transform: &GlobalTransform,
    rect: Rect,
) -> Option<[f32; 4]> {
    let scale = camera.target_scaling_factor().unwrap_or(1.0);
    let a = camera
        .world_to_viewport(transform, rect.min.extend(0.0))
        .ok()?;
    let c = camera
        .world_to_viewport(transform, rect.max.extend(0.0))
        .ok()?;
    let (lo, hi) = (a.min(c) * scale, a.max(c) * scale);
    Some([lo.x.round(), lo.y.round(), hi.x.round(), hi.y.round()])
}

/// The canvas's resources and the label font (the camera is
/// [`camera::CameraPlugin`]).
pub struct CanvasPlugin;

impl Plugin for CanvasPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<SceneBounds>()
            .init_resource::<SceneCursor>()
            .init_resource::<Hover>()
            .init_resource::<ColorScale>()
            .init_resource::<parts::PictureParts>()
            .init_resource::<parts::DrawnParts>()
            .init_resource::<parts::PictureFocus>()
            .init_resource::<parts::VirtualPointer>()
            .init_resource::<parts::PanelTouches>()
            .init_resource::<parts::KeyActivate>()
            .init_resource::<CanvasTheme>()
            .insert_resource(ClearColor(BACKGROUND))
            .add_systems(PreStartup, use_label_font);
    }
}

/// Makes the label font Bevy's default, before any text is laid out.
fn use_label_font(mut fonts: ResMut<Assets<Font>>) {
    let _ = fonts.insert(
        bevy::asset::AssetId::default(),
        Font::from_bytes(LABEL_FONT.to_vec()),
    );
}

/// A byte as a chip shows it: the space as ␣, escapes for the unprintable.
pub fn chip_text(byte: u8) -> String {
    match byte {
        b' ' => "␣".into(),
        _ => crate::probe::byte_label(byte),
    }
}

/// A number in four significant digits.
pub fn short(x: f32) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e4).contains(&a) {
        format!("{x:.2e}")
    } else {
        format!("{x:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}
