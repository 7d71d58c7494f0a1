//! The walk-through's entities: one textured quad per tensor (a texture of
//! its values and one of its gradient, coloured by [`super::colour`]), a
//! frame in its family's colour, its label, and the prompt's bytes over
//! the columns. Entities, not cells: a tensor of any size is one sprite.

use super::colour::{self, CellLens};
use super::compute::Computed;
use super::layout::{TensorFamily, Slab, Source, StageColumn, WalkLayout};
use super::{Scene, WalkItem};
use bevy::asset::RenderAssetUsages;
use bevy::image::ImageSampler;
use bevy::prelude::*;
use bevy::render::render_resource::{Extent3d, TextureDimension, TextureFormat};
use bevy::sprite::Anchor;

/// A tensor's quad: which slab, its two textures and their scales.
#[derive(Component, Clone, Debug)]
pub struct SlabQuad {
    pub slab: usize,
    pub values: Handle<Image>,
    pub grads: Option<Handle<Image>>,
    /// AdamW's update (a weight's, once the moments were read).
    pub updates: Option<Handle<Image>>,
    pub value_scale: f32,
    pub grad_scale: Option<f32>,
    pub update_scale: Option<f32>,
}

/// A tensor's frame (behind its quad).
#[derive(Component, Clone, Copy, Debug)]
pub struct SlabFrame {
    pub slab: usize,
}

/// Where a label stands: a point of the world, the label's anchor there,
/// and an offset in pixels.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub at: Vec3,
    pub anchor: Anchor,
    pub offset_px: Vec2,
}

/// A label kept at a fixed size on screen: its places, its size in
/// pixels, and the slab it names (shown
/// when that slab is in view; None: a stage's title, shown in the
/// overview where it does not run into the title before it).
#[derive(Component, Clone, Debug)]
pub struct ScreenLabel {
    /// Where it may stand, in order of preference: the first where it is
    /// whole on screen is taken.
    pub places: Vec<Place>,
    pub px: f32,
    pub slab: Option<usize>,
    /// Shown only when the slab's cells are at least this many pixels wide
    /// (the bytes over the columns).
    pub min_cell_px: f32,
}

/// A stage's title (shown in the overview; a block's over its attention
/// column, the first of its two).
pub fn stage_title(stage: StageColumn) -> Option<String> {
    Some(match stage {
        StageColumn::Embedding => crate::t!("walk-stage-embedding"),
        StageColumn::Attention(l) => crate::t!("walk-stage-block", layer = l as i64),
        StageColumn::Mlp(_) => return None,
        StageColumn::Head => crate::t!("walk-stage-head"),
    })
}

/// The font size labels are laid out at; [`ScreenLabel::px`] scales them.
pub const LABEL_FONT_PX: f32 = 32.0;

/// A tensor's numbers as drawn, rows × cols row-major (NaN: nothing
/// there), for its values or its gradient.
pub fn grid(computed: &Computed, slab: &Slab, lens: CellLens) -> Option<Vec<f32>> {
    let flow = &computed.flow;
    let t = flow.tokens.len();
    let (rows, cols) = (slab.rows, slab.cols);
    match (&slab.source, lens) {
        (Source::Node(name), _) => {
            let node = flow.nodes.iter().find(|n| &n.name == name)?;
            let by_position = match lens {
                CellLens::Value => &node.values,
                CellLens::Gradient => node.grad.as_ref()?,
                CellLens::Update => return None,
            };
            let mut out = vec![0.0; rows * cols];
            for (p, row) in by_position.iter().enumerate().take(cols) {
                for (r, v) in row.iter().enumerate().take(rows) {
                    out[r * cols + p] = *v;
                }
            }
            Some(out)
        }
        (Source::Param { name, transposed }, _) => {
            let values = match lens {
                CellLens::Value => computed.param(name)?.values.as_slice(),
                CellLens::Gradient => computed.param_grad(name)?,
                CellLens::Update => computed.param_update(name)?,
            };
            if values.len() != rows * cols {
                return None;
            }
            Some(if *transposed {
                let mut out = vec![0.0; rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        out[r * cols + c] = values[c * rows + r];
                    }
                }
                out
            } else {
                values.to_vec()
            })
        }
        (Source::Attention { layer, head }, CellLens::Value) => {
            let p = flow.attention.get(*layer)?.get(*head)?;
            let mut out = vec![f32::NAN; t * t];
            for (query, weights) in p.iter().enumerate() {
                for (key, w) in weights.iter().enumerate() {
                    out[key * t + query] = *w;
                }
            }
            Some(out)
        }
        (Source::Probs, CellLens::Value) => {
            let mut out = vec![0.0; 256 * t];
            for (p, probs) in flow.probs.iter().enumerate() {
                for (v, x) in probs.iter().enumerate() {
                    out[v * t + p] = *x;
                }
            }
            Some(out)
        }
        (Source::Stat(name), CellLens::Value) => {
            let stat = flow.stats.iter().find(|s| &s.name == name)?;
            Some(stat.values.iter().take(cols).copied().collect())
        }
        (Source::Loss, CellLens::Value) => Some(
            flow.backward
                .as_ref()?
                .losses
                .iter()
                .map(|l| l.unwrap_or(f32::NAN))
                .collect(),
        ),
        _ => None,
    }
}

/// Slabs' numbers as drawn ([`grid`]) with the scale they are coloured on,
/// laid out once per pass and kept for the hover's names and the numbers
/// on the cells, which read them every frame.
#[derive(Resource, Default)]
pub struct SlabGrids {
    /// The pass (`WalkCompute`'s generation) they were laid out from.
    generation: Option<u64>,
    by: std::collections::HashMap<(usize, CellLens), Option<(Vec<f32>, f32)>>,
}

impl SlabGrids {
    /// At most this many grids are kept (a pointer swept over the whole
    /// model would otherwise copy the pass).
    const KEPT: usize = 32;

    /// Slab `i`'s grid and scale for `lens` in the pass `generation`.
    pub fn get(
        &mut self,
        generation: u64,
        computed: &Computed,
        i: usize,
        slab: &Slab,
        lens: CellLens,
    ) -> Option<&(Vec<f32>, f32)> {
        if self.generation != Some(generation) || (self.by.len() >= Self::KEPT && !self.by.contains_key(&(i, lens))) {
            self.generation = Some(generation);
            self.by.clear();
        }
        self.by
            .entry((i, lens))
            .or_insert_with(|| {
                let g = grid(computed, slab, lens)?;
                let scale = colour::scale_of(&g, slab.family);
                Some((g, scale))
            })
            .as_ref()
    }
}

/// A tensor's texture, coloured off the frame (on the scenes' worker):
/// RGBA8 pixels, their size, and the scale they were coloured on.
#[derive(Clone, Debug)]
pub struct Pixels {
    pub rgba: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub scale: f32,
}

impl Pixels {
    /// The colours of `values` (a grid of `slab`) on its family's scale.
    pub fn of(values: &[f32], slab: &Slab, lens: CellLens) -> Pixels {
        let scale = colour::scale_of(values, slab.family);
        let (grid, rows, cols) = colour::aggregate(values, slab.rows, slab.cols);
        Pixels {
            rgba: colour::pixels(&grid, scale, slab.family, lens),
            width: cols as u32,
            height: rows as u32,
            scale,
        }
    }

    /// As a texture (nearest-neighbour: a cell is a cell).
    pub fn image(self) -> Image {
        let mut image = Image::new(
            Extent3d {
                width: self.width,
                height: self.height,
                depth_or_array_layers: 1,
            },
            TextureDimension::D2,
            self.rgba,
            TextureFormat::Rgba8UnormSrgb,
            RenderAssetUsages::RENDER_WORLD,
        );
        image.sampler = ImageSampler::nearest();
        image
    }
}

/// A slab's textures: its values, its gradient and AdamW's update (where
/// it has them).
#[derive(Clone, Debug)]
pub struct SlabPixels {
    pub values: Pixels,
    pub grads: Option<Pixels>,
    pub updates: Option<Pixels>,
}

/// Every slab's textures (None: nothing to draw).
pub type Textures = Vec<Option<SlabPixels>>;

/// Colours every slab of `walk` from `computed` (off the frame).
pub fn textures(walk: &WalkLayout, computed: &Computed) -> Textures {
    walk.slabs
        .iter()
        .map(|slab| {
            let values = grid(computed, slab, CellLens::Value)?;
            let of = |lens| grid(computed, slab, lens).map(|g| Pixels::of(&g, slab, lens));
            Some(SlabPixels {
                values: Pixels::of(&values, slab, CellLens::Value),
                grads: of(CellLens::Gradient),
                updates: of(CellLens::Update),
            })
        })
        .collect()
}

/// Puts new textures into the quads already drawn (the same layout: a
/// run that trains, AdamW's moments read), without spawning anything.
pub fn refresh(images: &mut Assets<Image>, quads: &mut Query<&mut SlabQuad>, textures: &Textures) {
    for mut quad in quads.iter_mut() {
        let Some(Some(pixels)) = textures.get(quad.slab) else {
            continue;
        };
        quad.value_scale = pixels.values.scale;
        let _ = images.insert(&quad.values, pixels.values.clone().image());
        if let (Some(handle), Some(g)) = (quad.grads.clone(), &pixels.grads) {
            quad.grad_scale = Some(g.scale);
            let _ = images.insert(&handle, g.clone().image());
        }
        // The updates come and go with the moments read.
        match (quad.updates.clone(), &pixels.updates) {
            (Some(handle), Some(u)) => {
                let _ = images.insert(&handle, u.clone().image());
            }
            (None, Some(u)) => quad.updates = Some(images.add(u.clone().image())),
            (_, None) => quad.updates = None,
        }
        quad.update_scale = pixels.updates.as_ref().map(|u| u.scale);
    }
}

/// A short name for a slab's label.
pub fn title(slab: &Slab) -> String {
    let short = slab
        .name
        .trim_start_matches("transformer.")
        .replace(".weight", " W")
        .replace(".bias", " b");
    match &slab.source {
        Source::Param { transposed: true, .. } => format!("{short}ᵀ"),
        Source::Attention { head, .. } => format!("P head {head}"),
        Source::Stat(name) => match name.rsplit_once('.') {
            Some((norm, "mean")) => format!("{norm} μ"),
            Some((norm, "rstd")) => format!("{norm} 1/σ"),
            Some((_, head)) => format!("P head {head} log Σ e^s"),
            None => short,
        },
        _ => short,
    }
}

/// Spawns the picture: every slab's quad, frame and label, and the bytes
/// over each stage's columns.
pub fn spawn(
    commands: &mut Commands,
    images: &mut Assets<Image>,
    walk: &WalkLayout,
    computed: &Computed,
    textures: &Textures,
) {
    // The stages' titles, over their columns (the overview's labels).
    for &(top, stage) in &walk.stage_tops {
        let Some(title) = stage_title(stage) else {
            continue;
        };
        let at = top.extend(0.0);
        commands.spawn((
            Text2d::new(title),
            TextFont::from_font_size(LABEL_FONT_PX),
            TextColor(colour::ink()),
            Anchor::BOTTOM_LEFT,
            Transform::from_translation(at),
            Visibility::Hidden,
            ScreenLabel {
                // Two rows, for titles that would run into each other.
                places: [10.0, 36.0]
                    .map(|y| Place {
                        at,
                        anchor: Anchor::BOTTOM_LEFT,
                        offset_px: Vec2::new(0.0, y),
                    })
                    .to_vec(),
                px: 18.0,
                slab: None,
                min_cell_px: 0.0,
            },
            WalkItem,
            DespawnOnExit(Scene::Walk),
        ));
    }
    for (i, slab) in walk.slabs.iter().enumerate() {
        let Some(Some(pixels)) = textures.get(i) else {
            continue;
        };
        let value_scale = pixels.values.scale;
        let values = images.add(pixels.values.clone().image());
        let grad_scale = pixels.grads.as_ref().map(|g| g.scale);
        let grads = pixels.grads.as_ref().map(|g| images.add(g.clone().image()));
        let update_scale = pixels.updates.as_ref().map(|u| u.scale);
        let updates = pixels.updates.as_ref().map(|u| images.add(u.clone().image()));
        let size = slab.rect().size();
        let centre = slab.centre();
        commands.spawn((
            Sprite {
                image: values.clone(),
                custom_size: Some(size),
                ..default()
            },
            Transform::from_translation(centre),
            SlabQuad {
                slab: i,
                values,
                grads,
                updates,
                value_scale,
                grad_scale,
                update_scale,
            },
            WalkItem,
            DespawnOnExit(Scene::Walk),
        ));
        let [r, g, b] = colour::frame(slab.family, CellLens::Value);
        let border = (size.min_element() * 0.04).clamp(0.35, 1.5);
        commands.spawn((
            Sprite::from_color(Color::srgb(r, g, b), size + Vec2::splat(2.0 * border)),
            Transform::from_translation(centre - Vec3::Z * 0.05),
            SlabFrame { slab: i },
            WalkItem,
            DespawnOnExit(Scene::Walk),
        ));
        // Thin slabs (biases, γ, β) are named by their weight's label.
        if slab.cols > 1 || slab.family == TensorFamily::Loss || matches!(slab.source, Source::Stat(_)) {
            let shape = format!("{} × {}", slab.rows, slab.cols);
            // Beside the tensor, on the side away from the spine: a weight's
            // to its left, everything else's to its right, so no label runs
            // over another tensor of the op; where the view is too narrow
            // for that, over it (a weight's ending at its right edge, so it
            // never meets its output's).
            let top_right = slab.corner + Vec3::X * size.x;
            let places = if matches!(slab.source, Source::Stat(_)) {
                // A LayerNorm's statistics sit right under its output:
                // beside them, right or left, never over them (that is
                // over the output).
                vec![
                    Place { at: top_right, anchor: Anchor::TOP_LEFT, offset_px: Vec2::new(8.0, 0.0) },
                    Place { at: slab.corner, anchor: Anchor::TOP_RIGHT, offset_px: Vec2::new(-8.0, 0.0) },
                ]
            } else if slab.family == TensorFamily::Weight {
                vec![
                    Place { at: slab.corner, anchor: Anchor::TOP_RIGHT, offset_px: Vec2::new(-8.0, 0.0) },
                    Place { at: top_right, anchor: Anchor::BOTTOM_RIGHT, offset_px: Vec2::new(0.0, 4.0) },
                ]
            } else {
                vec![
                    Place { at: top_right, anchor: Anchor::TOP_LEFT, offset_px: Vec2::new(8.0, 0.0) },
                    Place { at: slab.corner, anchor: Anchor::BOTTOM_LEFT, offset_px: Vec2::new(0.0, 4.0) },
                ]
            };
            let (anchor, at) = (places[0].anchor, places[0].at);
            let text = match &slab.source {
                // The heads' normalisers, a row over each P, are named
                // with P (a label of their own would sit on P's).
                Source::Attention { .. } => format!("P  {shape}, log Σ e^s over it"),
                // One label for a LayerNorm's two rows (the μ row's).
                Source::Stat(name) => format!("{} μ, 1/σ  2 × {}", name.trim_end_matches(".mean"), slab.cols),
                _ => format!("{}  {shape}", title(slab)),
            };
            // One label for the deck of heads (the front one's), one for
            // a LayerNorm's statistics.
            let named = !matches!(slab.source, Source::Attention { head, .. } if head > 0)
                && !matches!(&slab.source, Source::Stat(name) if name.ends_with(".rstd") || name.contains(".attn.lse."));
            if named {
                commands.spawn((
                    Text2d::new(text),
                    TextFont::from_font_size(LABEL_FONT_PX),
                    TextColor(Color::srgb(r, g, b)),
                    bevy::text::TextBackgroundColor(colour::background().with_alpha(0.85)),
                    anchor,
                    Transform::from_translation(at),
                    Visibility::Hidden,
                    ScreenLabel {
                        places,
                        px: 18.0,
                        slab: Some(i),
                        min_cell_px: 0.0,
                    },
                    WalkItem,
                    DespawnOnExit(Scene::Walk),
                ));
            }
        }
        // The bytes over an activation's columns, once a column is wide
        // enough on screen to read one.
        if matches!(slab.source, Source::Node(_) | Source::Probs | Source::Loss) {
            for (p, &byte) in computed.flow.tokens.iter().enumerate().take(slab.cols) {
                let at = slab.corner + Vec3::new((p as f32 + 0.5) * slab.cell.x, 0.0, 0.0);
                commands.spawn((
                    Text2d::new(crate::app::canvas::chip_text(byte)),
                    TextFont::from_font_size(LABEL_FONT_PX),
                    TextColor(colour::ink()),
                    Anchor::BOTTOM_CENTER,
                    Transform::from_translation(at),
                    Visibility::Hidden,
                    ScreenLabel {
                        places: vec![Place {
                            at,
                            anchor: Anchor::BOTTOM_CENTER,
                            offset_px: Vec2::new(0.0, 3.0),
                        }],
                        px: 16.0,
                        slab: Some(i),
                        min_cell_px: 14.0,
                    },
                    WalkItem,
                    DespawnOnExit(Scene::Walk),
                ));
            }
        }
    }
}
