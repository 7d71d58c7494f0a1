//! The "Model" scene: the architecture drawn in the main view as a stack of
//! layer blocks (embeddings at the bottom, the LM head on top), each weight
//! tensor of the layer shown as a heatmap texture that follows training
//! (diverging colour map, symmetric scale, a colour bar for the selected
//! tensor). Clicking a heatmap selects it for the inspector; hovering one
//! names the element under the pointer. Its toolbar switches what the
//! heatmaps show (weights, gradients, Adam's moments) and the colour scale.

mod layout;
mod report;

use super::Scene;
use crate::app::canvas::camera::FitArea;
use crate::app::canvas::{ColorScale, Hover, SceneBounds, SceneCursor, label};
use crate::app::graph::{Layer, Tensor};
use crate::app::heatmap;
use crate::app::lesson::{LessonFocus, PendingFocus};
use crate::app::engine::Snapshot;
use crate::app::timeline::{AsItWas, PastWeights, Timeline};
use crate::app::training::{HeatmapView, Run, RunCreated, ShownStep, Snapshots, TensorWants};
use crate::app::ui::UiState;
use crate::lesson::Focus;
use crate::program::TensorKind;
use bevy::asset::RenderAssetUsages;
use bevy::prelude::*;
use bevy::render::render_resource::{Extent3d, TextureDimension, TextureFormat};
use bevy::sprite::Anchor;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use layout::{ColumnSpec, StackItem, LayerSpec, Metrics};

/// Elements of pooled values written to textures per frame, at most: the
/// rest waits for the next frame, so a big model never stalls one.
const ELEMENTS_PER_FRAME: usize = 1 << 19;


/// A heatmap of one parameter (in the current view: weights, gradients or a moment).
#[derive(Component, Debug)]
pub struct Heatmap {
    /// The parameter's name (the view decides which tensor of it is shown).
    pub param: String,
    /// The `Tensor` entity of the parameter.
    pub tensor: Entity,
    pub rows: usize,
    pub cols: usize,
    pub image: Handle<Image>,
    /// Where it is drawn (world units).
    pub rect: Rect,
    /// The snapshot version and view it shows (0: none yet).
    pub shown: (u64, HeatmapView, ColorScale),
    /// Statistics of what it shows.
    pub stats: Option<heatmap::Stats>,
    /// The colour scale's half-width it was drawn with.
    pub half_width: f32,
    /// A hash of its pixels (tests compare them between snapshots).
    pub pixel_hash: u64,
    /// Times its pixels changed.
    pub updates: u64,
    /// A LoRA adapter's update `(α/r)·B·A` (out, in), computed from its two
    /// matrices rather than read: `param` then names it `….lora_BA`.
    pub product: Option<LowRankProduct>,
}

impl Heatmap {
    /// A heatmap of `param` (rows × cols) drawn in `rect` into `image`,
    /// nothing shown yet.
    fn new(
        param: String,
        tensor: Entity,
        (rows, cols): (usize, usize),
        image: Handle<Image>,
        rect: Rect,
        product: Option<LowRankProduct>,
    ) -> Self {
        Self {
            param,
            tensor,
            rows,
            cols,
            image,
            rect,
            shown: (0, Default::default(), Default::default()),
            stats: None,
            half_width: 0.0,
            pixel_hash: 0,
            updates: 0,
            product,
        }
    }
}

/// What a LoRA update's heatmap multiplies: B (out, r) and A (r, in).
#[derive(Clone, Debug)]
pub struct LowRankProduct {
    pub a: String,
    pub b: String,
    pub rank: usize,
    pub scale: f32,
}

impl LowRankProduct {
    /// Element (row, col) of (α/r)·B·A from the snapshot, if both are there.
    fn at(&self, tensors: &TensorMap, row: usize, col: usize) -> Option<f32> {
        let (a, b) = (tensors.get(&self.a)?, tensors.get(&self.b)?);
        let n_in = a.len() / self.rank;
        let dot: f32 = (0..self.rank)
            .map(|k| b[row * self.rank + k] * a[k * n_in + col])
            .sum();
        Some(self.scale * dot)
    }

    /// All of (α/r)·B·A, (out, in) row-major.
    fn values(&self, tensors: &TensorMap) -> Option<Vec<f32>> {
        let (a, b) = (tensors.get(&self.a)?, tensors.get(&self.b)?);
        let n_in = a.len() / self.rank;
        let n_out = b.len() / self.rank;
        let mut out = vec![0.0f32; n_out * n_in];
        for (o, row) in out.chunks_mut(n_in).enumerate() {
            for k in 0..self.rank {
                let w = self.scale * b[o * self.rank + k];
                for (x, &ak) in row.iter_mut().zip(&a[k * n_in..(k + 1) * n_in]) {
                    *x += w * ak;
                }
            }
        }
        Some(out)
    }
}

/// A snapshot's tensors by name.
type TensorMap = std::collections::HashMap<String, std::sync::Arc<Vec<f32>>>;

/// A layer's block in the stack.
#[derive(Component, Debug)]
pub struct LayerBlock {
    pub name: String,
    pub rect: Rect,
}

/// Everything the scene spawned (despawned when a run replaces it, and
/// when the scene is left).
#[derive(Component)]
pub struct SceneItem;

/// Whether the scene must be (re)built: on entering it, and when a run is
/// created while it is shown.
#[derive(Resource, Default)]
struct Rebuild(bool);

/// The colour bar and its labels.
#[derive(Component)]
pub struct ColorBarLabel(pub i8);

/// The outline around the selected heatmap.
#[derive(Component)]
pub struct SelectionOutline;

/// The heatmap the colour bar describes, and whether the inspector is open
/// on it (a click opens it).
#[derive(Resource, Default, Debug)]
pub struct Selection(pub Option<Entity>, pub bool);

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.init_resource::<Selection>()
            .add_observer(lesson_focus)
            .init_resource::<Rebuild>()
            .init_resource::<LaidOutFor>()
            .add_systems(OnEnter(Scene::Model), |mut r: ResMut<Rebuild>| r.0 = true)
            .add_systems(OnExit(Scene::Model), leave)
            .add_systems(
                Update,
                (
                    rebuild_on_new_run,
                    relayout_on_resize,
                    want_tensors,
                    build_scene,
                    mark_step,
                    update_heatmaps,
                    update_color_bar,
                    select_on_click,
                    hover,
                )
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Model)),
            )
            .add_systems(
                EguiPrimaryContextPass,
                (toolbar, inspector)
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Model)),
            );
    }
}

fn layer_colour(name: &str) -> Color {
    match name {
        "embeddings" => Color::srgb(0.12, 0.24, 0.28),
        "ln_f" => Color::srgb(0.26, 0.22, 0.14),
        "head" => Color::srgb(0.28, 0.16, 0.20),
        _ => Color::srgb(0.15, 0.17, 0.26),
    }
}

/// One module's parameters, drawn as a column: the matrix on top, its
/// vectors as strips below (a LoRA adapter's B above its A).
struct Column<'a> {
    /// e.g. `transformer.h.0.attn.c_attn`
    module: String,
    /// The shape of its first parameter, e.g. `384×128`.
    shape: String,
    params: Vec<(Entity, &'a Tensor)>,
}

/// What a column of the picture draws.
enum Drawn<'a> {
    /// A module's parameters.
    Module(Column<'a>),
    /// A LoRA fine-tune's update (α/r)·B·A after its adapter: B's entity
    /// and tensor, and the product's shape (out, in).
    Update(Entity, &'a Tensor, (usize, usize)),
}

/// Groups a layer's parameters (in program order) by module.
fn columns<'a>(params: &[(Entity, &'a Tensor)]) -> Vec<Column<'a>> {
    let mut out: Vec<Column<'a>> = Vec::new();
    for &(e, t) in params {
        // A LoRA adapter's A and B form one column, `….c_attn.lora`.
        let module = lora_module(&t.name).unwrap_or_else(|| {
            t.name
                .rsplit_once('.')
                .map_or(t.name.as_str(), |(m, _)| m)
                .to_string()
        });
        if out.last().is_none_or(|c| c.module != module) {
            let shape = if lora_module(&t.name).is_some() {
                crate::t!("model-lora-shape", rank = t.shape[1])
            } else {
                t.shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join("×")
            };
            out.push(Column {
                module,
                shape,
                params: vec![],
            });
        }
        out.last_mut().expect("pushed above").params.push((e, t));
    }
    out
}

/// The input width of the adapter whose B heads `column`: its A's columns
/// (A sits in the layer beside B).
fn columns_in(column: &Column, layer: &[(Entity, &Tensor)]) -> Option<usize> {
    let (_, b) = column.params.first()?;
    let a_name = b.name.replace(".lora_B.", ".lora_A.");
    layer
        .iter()
        .find(|(_, t)| t.name == a_name)
        .map(|(_, a)| a.shape[1])
}

/// `….c_attn.lora` for a LoRA adapter's A or B of `….c_attn`.
fn lora_module(name: &str) -> Option<String> {
    let linear = name
        .strip_suffix(".lora_A.weight")
        .or_else(|| name.strip_suffix(".lora_B.weight"))?;
    Some(format!("{linear}.lora"))
}

/// α/r as a label: `2`, `0.5`.
fn trim_scale(scale: f32) -> String {
    let s = format!("{scale:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// How a parameter is drawn: matrices at their shape, vectors as strips,
/// an adapter's thin matrices at their true aspect.
fn item_of(t: &Tensor) -> StackItem {
    let (rows, cols) = heatmap::grid_of(&t.shape);
    if lora_module(&t.name).is_some() {
        StackItem::Adapter { rows, cols }
    } else if rows == 1 {
        StackItem::Strip
    } else {
        StackItem::Matrix { rows, cols }
    }
}

/// A column's two labels (its module, its shape).
fn column_labels(drawn: &Drawn, layer: &str, lora_scale: f32) -> [String; 2] {
    match drawn {
        Drawn::Module(c) => [
            c.module
                .trim_start_matches("transformer.")
                .trim_start_matches(&format!("{layer}."))
                .to_string(),
            c.shape.clone(),
        ],
        Drawn::Update(..) => [format!("+{}·B·A", trim_scale(lora_scale)), "= ΔW".to_string()],
    }
}

fn text(s: impl Into<String>, size: f32, anchor: Anchor, at: Vec2, z: f32) -> impl Bundle {
    (
        label(s, size, anchor, at, z),
        SceneItem,
        DespawnOnExit(Scene::Model),
    )
}

fn rebuild_on_new_run(mut created: MessageReader<RunCreated>, mut rebuild: ResMut<Rebuild>) {
    if created.read().last().is_some() {
        rebuild.0 = true;
    }
}

/// Leaving the scene: nothing is selected or hovered any more.
fn leave(mut selection: ResMut<Selection>, mut wants: ResMut<TensorWants>, mut marked: ResMut<ShownStep>) {
    *selection = Selection::default();
    wants.set("model", vec![]);
    marked.0 = None;
}

/// The weights the heatmaps show ([`PastWeights::shown`]: the latest
/// snapshot, or the model as it was at the timeline's step), and a version
/// that changes with them.
fn shown<'a>(snapshots: &'a Snapshots, as_it_was: AsItWas, past: &'a PastWeights) -> (Option<&'a Snapshot>, u64) {
    let version = if as_it_was.0 { u64::MAX - past.version } else { snapshots.version };
    (past.shown(as_it_was, snapshots.latest.as_ref()), version)
}

/// The loss chart marks the step of the model as it was.
fn mark_step(as_it_was: Res<AsItWas>, past: Res<PastWeights>, mut marked: ResMut<ShownStep>) {
    marked.set_if_neq(ShownStep(past.marked_step(*as_it_was)));
}

/// The tensors the heatmaps show: every parameter in the current view, and
/// the gradient of the one the inspector shows.
fn want_tensors(run: Option<Res<Run>>, snapshots: Res<Snapshots>, mut wants: ResMut<TensorWants>) {
    let Some(run) = run else { return };
    let view = snapshots.view;
    // (A LoRA fine-tune's frozen weights have no gradient or moments.)
    let exists = |name: &String| run.program.tensor_id(name).is_some();
    let mut names: Vec<String> = run
        .program
        .params()
        .map(|id| view.tensor_name(&run.program.tensors[id].name))
        .filter(exists)
        .collect();
    if let Some(p) = &snapshots.inspect
        && view != HeatmapView::Gradients
        && run.program.tensor_id(p).is_some()
    {
        names.extend([format!("grad.{p}"), p.clone()].into_iter().filter(exists));
    }
    wants.set("model", names);
}

/// What the picture was laid out for, and a new size waiting to settle
/// (a window being dragged relays it out once, when it stops).
#[derive(Resource, Default)]
struct LaidOutFor {
    built: (Vec2, bool),
    seen: (Vec2, bool),
    settled_frames: u32,
}

/// Lays the picture out again when the view's size (the window, the
/// panels) or presenter mode changed and then held for a few frames.
fn relayout_on_resize(
    area: Res<FitArea>,
    ui_state: Res<UiState>,
    mut laid: ResMut<LaidOutFor>,
    mut rebuild: ResMut<Rebuild>,
) {
    let now = (area.0, ui_state.presenter);
    let differs = |a: (Vec2, bool), b: (Vec2, bool)| {
        a.1 != b.1 || ((a.0 - b.0).abs() / b.0.max(Vec2::ONE)).max_element() > 0.02
    };
    if area.0.min_element() < 1.0 || !differs(now, laid.built) {
        laid.settled_frames = 0;
        return;
    }
    if differs(now, laid.seen) {
        laid.seen = now;
        laid.settled_frames = 0;
    } else {
        laid.settled_frames += 1;
    }
    if laid.settled_frames >= 3 {
        rebuild.0 = true;
    }
}

#[allow(clippy::too_many_arguments)]
fn build_scene(
    mut commands: Commands,
    mut rebuild: ResMut<Rebuild>,
    run: Option<Res<Run>>,
    layers: Query<(Entity, &Layer)>,
    tensors: Query<(Entity, &Tensor, &ChildOf)>,
    old: Query<Entity, With<SceneItem>>,
    shown: Query<&Heatmap>,
    mut images: ResMut<Assets<Image>>,
    mut selection: ResMut<Selection>,
    mut bounds: ResMut<SceneBounds>,
    (area, ui_state, mut laid): (Res<FitArea>, Res<UiState>, ResMut<LaidOutFor>),
) {
    if !rebuild.0 || run.is_none() || layers.is_empty() {
        return;
    }
    rebuild.0 = false;
    // The selected tensor stays selected when the picture is laid out again.
    let selected = selection
        .0
        .and_then(|e| shown.get(e).ok())
        .map(|h| (h.param.clone(), selection.1));
    for e in &old {
        commands.entity(e).despawn();
    }
    *selection = Selection::default();
    let metrics = Metrics::new(ui_state.presenter);
    let view = if area.0.min_element() >= 1.0 {
        area.0
    } else {
        // Before the first frame has a view: laid out again once it has.
        Vec2::new(1200.0, 620.0)
    };
    laid.built = (area.0, ui_state.presenter);
    let mut layer_list: Vec<(Entity, &Layer)> = layers.iter().collect();
    layer_list.sort_by_key(|(_, l)| l.index);

    // Each layer's parameters, in program order.
    let params_of: Vec<Vec<(Entity, &Tensor)>> = layer_list
        .iter()
        .map(|(le, _)| {
            let mut ps: Vec<(Entity, &Tensor)> = tensors
                .iter()
                .filter(|(_, t, parent)| parent.parent() == *le && t.kind == TensorKind::Param)
                .map(|(e, t, _)| (e, t))
                .collect();
            ps.sort_by_key(|(_, t)| t.id);
            // An adapter's B (out × r) above its A (r × in), as B·A reads.
            for i in 1..ps.len() {
                if ps[i].1.name.ends_with(".lora_B.weight")
                    && ps[i - 1].1.name.ends_with(".lora_A.weight")
                {
                    ps.swap(i - 1, i);
                }
            }
            ps
        })
        .collect();
    // Each layer's columns: its modules, and after a LoRA adapter's B the
    // update it adds to the frozen W.
    let lora = run.as_ref().and_then(|r| r.config().lora);
    let drawn_of: Vec<Vec<Drawn>> = params_of
        .iter()
        .map(|ps| {
            let mut out = Vec::new();
            for c in columns(ps) {
                let update = lora.and_then(|_| {
                    let (e, b) = *c.params.first()?;
                    if !b.name.ends_with(".lora_B.weight") {
                        return None;
                    }
                    Some(Drawn::Update(e, b, (b.shape[0], columns_in(&c, ps)?)))
                });
                out.push(Drawn::Module(c));
                out.extend(update);
            }
            out
        })
        .collect();
    let lora_scale = lora.map_or(1.0, |l| l.scale());
    // The blocks share one set of column labels when theirs are alike.
    let block_labels: Vec<Vec<[String; 2]>> = layer_list
        .iter()
        .zip(&drawn_of)
        .filter(|((_, l), _)| l.name.starts_with("h."))
        .map(|((_, l), d)| d.iter().map(|d| column_labels(d, &l.name, lora_scale)).collect())
        .collect();
    let blocks_alike = block_labels.windows(2).all(|w| w[0] == w[1]);
    // Every block's title column is as wide as the widest block's.
    let block_title = layer_list
        .iter()
        .filter(|(_, l)| l.name.starts_with("h."))
        .map(|(_, l)| (layer_title(&l.name, &l.title).chars().count(), l.name.len()))
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    let specs: Vec<LayerSpec> = layer_list
        .iter()
        .zip(&drawn_of)
        .map(|((_, layer), drawn)| LayerSpec {
            title_chars: if layer.name.starts_with("h.") {
                block_title.0
            } else {
                layer_title(&layer.name, &layer.title).chars().count()
            },
            title_word_chars: layer_title(&layer.name, &layer.title)
                .split_whitespace()
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0),
            name_chars: if layer.name.starts_with("h.") {
                block_title.1
            } else {
                layer.name.len()
            },
            inline_name: layer.name.starts_with("h."),
            labels: !layer.name.starts_with("h.") || !blocks_alike,
            shares_row: matches!(layer.name.as_str(), "ln_f" | "head"),
            note_chars: if layer.name == "head" {
                crate::t!("model-head-note").chars().count()
            } else {
                0
            },
            columns: drawn
                .iter()
                .map(|d| ColumnSpec {
                    items: match d {
                        Drawn::Module(c) => c.params.iter().map(|(_, t)| item_of(t)).collect(),
                        Drawn::Update(_, _, (rows, cols)) => vec![StackItem::Matrix {
                            rows: *rows,
                            cols: *cols,
                        }],
                    },
                    label_width: column_labels(d, &layer.name, lora_scale)
                        .iter()
                        .map(|s| Metrics::label_width(s, metrics.label))
                        .fold(0.0, f32::max),
                })
                .collect(),
            block: layer.name.starts_with("h."),
        })
        .collect();
    let placed = layout::layout(&specs, view, &metrics);

    let mut first_heatmap = None;
    let mut reselect = None;
    for (((_, layer), drawn), place) in layer_list.iter().zip(&drawn_of).zip(&placed.layers) {
        let rect = place.rect;
        commands.spawn((
            Sprite::from_color(layer_colour(&layer.name), rect.size()),
            Anchor::BOTTOM_LEFT,
            Transform::from_xyz(rect.min.x, rect.min.y, 0.0),
            LayerBlock {
                name: layer.name.clone(),
                rect,
            },
            crate::app::canvas::SceneRegion {
                name: layer.name.clone(),
                rect,
            },
            // The keyboard's ↑ and ↓ jump from layer to layer.
            crate::app::canvas::parts::RegionGroup(layer.name.clone()),
            SceneItem,
            DespawnOnExit(Scene::Model),
        ));
        // The title wraps inside the title column, so it never runs into
        // the heatmaps; the layer's program name is its last line (a
        // block's follows its title on the line), and the two stand centred
        // in the block however many lines they take.
        commands.spawn((
            text(
                layer_title(&layer.name, &layer.title),
                metrics.title,
                Anchor::CENTER_LEFT,
                Vec2::new(rect.min.x + 12.0, rect.center().y),
                1.0,
            ),
            bevy::text::TextBounds::new_horizontal(place.title_width - 20.0),
            children![(
                TextSpan::new(if layer.name.starts_with("h.") {
                    format!("  {}", layer.name)
                } else {
                    format!("\n{}", layer.name)
                }),
                TextFont::from_font_size(metrics.name),
                TextColor(crate::app::canvas::LABEL_COLOUR),
            )],
        ));
        if layer.name == "head" {
            commands.spawn((
                text(
                    crate::t!("model-head-note"),
                    metrics.note,
                    Anchor::CENTER_LEFT,
                    Vec2::new(rect.min.x + place.title_width, rect.center().y),
                    1.0,
                ),
                bevy::text::TextBounds::new_horizontal(
                    rect.width() - place.title_width - metrics.gap,
                ),
            ));
        }
        for (d, column) in drawn.iter().zip(&place.columns) {
            let mut spawn_heatmap = |param: String,
                                     tensor: Entity,
                                     (rows, cols): (usize, usize),
                                     rect: Rect,
                                     product: Option<LowRankProduct>| {
                let (tr, tc) = heatmap::texture_size(rows, cols);
                let handle =
                    crate::app::canvas::cell_texture(&mut images, tc, tr, [60, 60, 70, 255]);
                let is_selected = selected.as_ref().filter(|(p, _)| *p == param).map(|s| s.1);
                let e = commands
                    .spawn((
                        Sprite {
                            image: handle.clone(),
                            custom_size: Some(rect.size()),
                            ..default()
                        },
                        Transform::from_translation(rect.center().extend(1.0)),
                        focusable(&param, &layer.name, (rows, cols), rect),
                        Heatmap::new(param, tensor, (rows, cols), handle, rect, product),
                        SceneItem,
                        DespawnOnExit(Scene::Model),
                    ))
                    .id();
                first_heatmap.get_or_insert(e);
                if let Some(open) = is_selected {
                    reselect = Some(Selection(Some(e), open));
                }
            };
            match d {
                Drawn::Module(c) => {
                    for ((tensor, t), rect) in c.params.iter().zip(&column.items) {
                        let shape = heatmap::grid_of(&t.shape);
                        spawn_heatmap(t.name.clone(), *tensor, shape, *rect, None);
                    }
                }
                Drawn::Update(b_entity, b, shape) => {
                    let lora = lora.expect("an update is drawn only in a fine-tune");
                    let prefix = b.name.trim_end_matches(".lora_B.weight");
                    spawn_heatmap(
                        format!("{prefix}.lora_BA"),
                        *b_entity,
                        *shape,
                        column.items[0],
                        Some(LowRankProduct {
                            a: format!("{prefix}.lora_A.weight"),
                            b: b.name.clone(),
                            rank: lora.rank,
                            scale: lora.scale(),
                        }),
                    );
                }
            }
            if !place.labelled {
                continue;
            }
            for (k, line) in column_labels(d, &layer.name, lora_scale).into_iter().enumerate() {
                commands.spawn(text(
                    line,
                    metrics.label,
                    Anchor::TOP_LEFT,
                    column.label_at - Vec2::Y * k as f32 * metrics.label_line(),
                    1.0,
                ));
            }
        }
    }
    // Colour bar, right of the stack.
    let bar = placed.bar;
    let pixels: Vec<u8> = (0..256)
        .rev()
        .flat_map(|i| heatmap::diverging((i as f32 - 127.5) / 127.5, 1.0))
        .collect();
    let bar_image = images.add(Image::new(
        Extent3d {
            width: 1,
            height: 256,
            depth_or_array_layers: 1,
        },
        TextureDimension::D2,
        pixels,
        TextureFormat::Rgba8UnormSrgb,
        RenderAssetUsages::MAIN_WORLD | RenderAssetUsages::RENDER_WORLD,
    ));
    commands.spawn((
        Sprite {
            image: bar_image,
            custom_size: Some(bar.size()),
            ..default()
        },
        Transform::from_translation(bar.center().extend(1.0)),
        SceneItem,
        DespawnOnExit(Scene::Model),
    ));
    for (k, yy) in [(1i8, bar.max.y), (0, bar.center().y), (-1, bar.min.y)] {
        commands.spawn((
            text(
                "",
                metrics.note,
                Anchor::CENTER_LEFT,
                Vec2::new(bar.max.x + 6.0, yy),
                1.0,
            ),
            ColorBarLabel(k),
        ));
    }
    // What the bar describes, above it, wrapped inside the bar's room.
    let room = placed.bounds.max.x - bar.min.x;
    commands.spawn((
        text(
            "",
            metrics.note,
            Anchor::BOTTOM_LEFT,
            // Clear of the scale's top value, centred on the bar's top.
            Vec2::new(bar.min.x, bar.max.y + 0.75 * metrics.note + 4.0),
            1.0,
        ),
        bevy::text::TextBounds::new_horizontal(room),
        bevy::text::TextLayout::linebreak(bevy::text::LineBreak::WordOrCharacter),
        ColorBarLabel(2),
    ));
    commands.spawn((
        Sprite::from_color(Color::srgba(1.0, 0.85, 0.2, 0.9), Vec2::ONE),
        Transform::from_xyz(0.0, 0.0, 0.5),
        Visibility::Hidden,
        SelectionOutline,
        SceneItem,
        DespawnOnExit(Scene::Model),
    ));
    *selection = reselect.unwrap_or(Selection(first_heatmap, false));
    bounds.0 = placed.bounds;
}

/// Writes the weights shown (the latest snapshot, or the model as it was)
/// into heatmap textures, a frame's budget at a time.
fn update_heatmaps(
    (snapshots, as_it_was, past): (Res<Snapshots>, Res<AsItWas>, Res<PastWeights>),
    scale: Res<ColorScale>,
    mut heatmaps: Query<&mut Heatmap>,
    mut images: ResMut<Assets<Image>>,
) {
    let (Some(snapshot), version) = shown(&snapshots, *as_it_was, &past) else {
        return;
    };
    let want = (version, snapshots.view, *scale);
    let mut budget = ELEMENTS_PER_FRAME;
    for mut h in &mut heatmaps {
        if h.shown == want || budget == 0 {
            continue;
        }
        let values: std::borrow::Cow<[f32]> = match &h.product {
            // An update's heatmap shows weights only (B·A has no gradient
            // or moments of its own).
            Some(p) if snapshots.view == HeatmapView::Weights => {
                let Some(v) = p.values(&snapshot.tensors) else {
                    continue;
                };
                v.into()
            }
            Some(_) => continue,
            None => {
                let name = snapshots.view.tensor_name(&h.param);
                let Some(values) = snapshot.tensors.get(&name) else {
                    continue;
                };
                values.as_slice().into()
            }
        };
        let values = &values[..];
        if values.len() != h.rows * h.cols {
            continue;
        }
        budget = budget.saturating_sub(values.len());
        let stats = heatmap::stats(values);
        let (tr, tc) = heatmap::texture_size(h.rows, h.cols);
        let pooled = heatmap::pool(values, h.rows, h.cols, tr, tc);
        let half_width = scale.half_width(values, &stats);
        let pixels = heatmap::colorize(&pooled, half_width);
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut s = std::collections::hash_map::DefaultHasher::new();
            pixels.hash(&mut s);
            s.finish()
        };
        if let Some(mut image) = images.get_mut(&h.image) {
            image.data = Some(pixels);
        }
        if hash != h.pixel_hash {
            h.updates += 1;
        }
        h.pixel_hash = hash;
        h.stats = Some(stats);
        h.half_width = half_width;
        h.shown = want;
    }
}

/// Labels the colour bar with the selected heatmap's scale and outlines it.
fn update_color_bar(
    selection: Res<Selection>,
    snapshots: Res<Snapshots>,
    heatmaps: Query<&Heatmap>,
    mut labels: Query<(&ColorBarLabel, &mut Text2d)>,
    mut outline: Query<(&mut Transform, &mut Visibility, &mut Sprite), With<SelectionOutline>>,
) {
    let selected = selection.0.and_then(|e| heatmaps.get(e).ok());
    for (label, mut text) in &mut labels {
        let s = selected.filter(|h| h.stats.is_some()).map(|h| h.half_width);
        let value = match (label.0, s) {
            (2, _) => selected
                .map(|h| {
                    crate::t!(
                        "model-view-of",
                        view = snapshots.view.label(),
                        param = h.param.trim_start_matches("transformer."),
                    )
                })
                .unwrap_or_default(),
            (0, Some(_)) => "0".to_string(),
            (k, Some(s)) => format!("{:+.3e}", k as f32 * s),
            _ => String::new(),
        };
        if text.0 != value {
            text.0 = value;
        }
    }
    if let Ok((mut t, mut vis, mut sprite)) = outline.single_mut() {
        match selected {
            Some(h) => {
                t.translation = h.rect.center().extend(0.5);
                sprite.custom_size = Some(h.rect.size() + Vec2::splat(8.0));
                *vis = Visibility::Visible;
            }
            None => *vis = Visibility::Hidden,
        }
    }
}

/// A heatmap as the keyboard reaches it: a part of its layer's group, one
/// cell per element (the cell under the focus is named as under the mouse).
fn focusable(
    name: &str,
    layer: &str,
    (rows, cols): (usize, usize),
    rect: Rect,
) -> crate::app::canvas::parts::FocusablePart {
    use crate::app::canvas::parts::{FocusablePart, Part, spoken};
    FocusablePart(Part {
        name: spoken(&format!("{}, {rows} × {cols}", name.trim_start_matches("transformer."))),
        group: Some(layer.to_string()),
        rows,
        cols,
        rect,
        z: 0.0,
        drawn: None,
    })
}

/// The heatmap under a world position, if any.
pub fn heatmap_at(heatmaps: &Query<(Entity, &Heatmap)>, world: Vec2) -> Option<Entity> {
    heatmaps
        .iter()
        .find(|(_, h)| h.rect.contains(world))
        .map(|(e, _)| e)
}

/// Selects the heatmap under a left click (and opens the inspector on it).
fn select_on_click(
    pointer: crate::app::canvas::parts::PointerInput,
    cursor: Res<SceneCursor>,
    heatmaps: Query<(Entity, &Heatmap)>,
    mut selection: ResMut<Selection>,
) {
    if pointer.just_pressed()
        && let Some(world) = cursor.0
        && let Some(e) = heatmap_at(&heatmaps, world)
    {
        *selection = Selection(Some(e), true);
    }
}

/// Names the element under the pointer: tensor, index, value.
fn hover(
    cursor: Res<SceneCursor>,
    heatmaps: Query<(Entity, &Heatmap)>,
    (snapshots, as_it_was, past): (Res<Snapshots>, Res<AsItWas>, Res<PastWeights>),
    mut hover: ResMut<Hover>,
) {
    let text = cursor.0.and_then(|world| {
        let (_, h) = heatmaps.get(heatmap_at(&heatmaps, world)?).ok()?;
        let (r, c) = crate::app::canvas::cell_at(h.rect, world, h.rows, h.cols);
        let name = snapshots.view.tensor_name(&h.param);
        let value = shown(&snapshots, *as_it_was, &past).0.and_then(|s| match &h.product {
            Some(p) => p.at(&s.tensors, r, c),
            None => s
                .tensors
                .get(&name)
                .and_then(|values| values.get(r * h.cols + c).copied()),
        });
        let index = if h.rows == 1 {
            format!("[{c}]")
        } else {
            format!("[{r}, {c}]")
        };
        Some(match value {
            Some(x) => format!(
                "{}{index} = {x:+.5e}",
                name.trim_start_matches("transformer.")
            ),
            None => format!("{}{index}", name.trim_start_matches("transformer.")),
        })
    });
    if hover.0 != text {
        hover.0 = text;
    }
}

/// The scene's toolbar, over the top of the main view: what the heatmaps
/// show, and the colour scale.
fn toolbar(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    mut snapshots: ResMut<Snapshots>,
    mut scale: ResMut<ColorScale>,
    run: Option<Res<Run>>,
    (mut timeline, mut as_it_was): (ResMut<Timeline>, ResMut<AsItWas>),
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let Some(at) = ui_state.central_rect(ctx) else {
        return Ok(());
    };
    crate::app::ui::scene_toolbar(ctx, "model-toolbar", at, |ui| {
        // The model now, or as it was at a step of the timeline (whose
        // frames keep weights only: no gradients or moments then).
        let lapse = run.as_ref().and_then(|r| r.engine.timelapse()).map(|t| &**t);
        crate::app::timeline::as_it_was_bar(ui, lapse, &mut timeline, &mut as_it_was);
        ui.label(crate::t!("model-heatmaps-show"));
        let mut view = snapshots.view;
        for v in HeatmapView::ALL {
            let enabled = !as_it_was.0 || v == HeatmapView::Weights;
            if ui
                .add_enabled(enabled, egui::Button::selectable(view == v, v.label()))
                .on_disabled_hover_text(crate::t!("model-as-it-was-weights-only"))
                .clicked()
            {
                view = v;
            }
        }
        if as_it_was.0 {
            view = HeatmapView::Weights;
        }
        snapshots.set_view(view);
        ui.separator();
        ui.label(crate::t!("colour-scale"));
        for s in ColorScale::ALL {
            if ui.selectable_label(*scale == s, s.label()).clicked() && *scale != s {
                *scale = s;
            }
        }
        ui.separator();
        ui.weak(crate::t!("model-click-heatmap"));
    });
    Ok(())
}

/// The inspector of the selected heatmap: name, shape, statistics, norms.
fn inspector(
    mut contexts: EguiContexts,
    ui_state: Res<UiState>,
    mut selection: ResMut<Selection>,
    mut snapshots: ResMut<Snapshots>,
    heatmaps: Query<&Heatmap>,
    (as_it_was, past): (Res<AsItWas>, Res<PastWeights>),
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let ppp = ctx.pixels_per_point();
    let Some(h) = selection.0.and_then(|e| heatmaps.get(e).ok()) else {
        snapshots.inspect = None;
        return Ok(());
    };
    if !selection.1 {
        snapshots.inspect = None;
        return Ok(());
    }
    let anchor = ui_state.central.map_or(egui::pos2(320.0, 400.0), |c| {
        egui::pos2(c.0 as f32 / ppp + 8.0, (c.1 + c.3) as f32 / ppp - 8.0)
    });
    let mut open = true;
    egui::Window::new(crate::t!("inspector"))
        .id(egui::Id::new("inspector-window"))
        .open(&mut open)
        // Inside the main view: never over a lesson's narration or a panel.
        .constrain_to(ui_state.central_rect(ctx).unwrap_or(ctx.content_rect()))
        .pivot(egui::Align2::LEFT_BOTTOM)
        .current_pos(anchor)
        .resizable(false)
        .show(ctx, |ui| {
            ui.monospace(&h.param);
            ui.label(crate::t!(
                "inspector-shape",
                shape = format!("{:?}", [h.rows, h.cols]),
                values = h.rows * h.cols,
            ));
            let snap = shown(&snapshots, *as_it_was, &past).0;
            let stats_of = |name: &str| {
                snap.and_then(|s| s.tensors.get(name))
                    .map(|v| heatmap::stats(v))
            };
            egui::Grid::new("inspector")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    if let Some(s) = h.stats {
                        ui.label(crate::t!("inspector-mean", view = snapshots.view.label()));
                        ui.monospace(format!("{:+.4e}", s.mean));
                        ui.end_row();
                        ui.label(crate::t!("inspector-std"));
                        ui.monospace(format!("{:.4e}", s.std));
                        ui.end_row();
                        ui.label(crate::t!("inspector-min-max"));
                        ui.monospace(format!("{:+.4e} / {:+.4e}", s.min, s.max));
                        ui.end_row();
                        ui.label(crate::t!("colour-scale"));
                        ui.monospace(format!("±{:.4e}", h.half_width));
                        ui.end_row();
                    }
                    if let Some(g) = stats_of(&format!("grad.{}", h.param)) {
                        ui.label(crate::t!("metric-grad-norm"));
                        ui.monospace(format!("{:.4e}", g.norm));
                        ui.end_row();
                    }
                    if let Some(w) = stats_of(&h.param) {
                        ui.label(crate::t!("inspector-weight-norm"));
                        ui.monospace(format!("{:.4e}", w.norm));
                        ui.end_row();
                    }
                    if let Some(s) = snap {
                        ui.label(crate::t!("inspector-read-at"));
                        ui.monospace(s.step.to_string());
                        ui.end_row();
                    }
                });
        });
    selection.1 = open;
    if snapshots.inspect.as_ref() != Some(&h.param) {
        snapshots.inspect = Some(h.param.clone());
        snapshots.dirty_now();
    }
    Ok(())
}

/// A lesson step's tensor or layer: its heatmap selected (a frame later
/// when the scene's heatmaps are not spawned yet).
fn lesson_focus(
    event: On<LessonFocus>,
    heatmaps: Query<(Entity, &Heatmap)>,
    mut selection: ResMut<Selection>,
    mut pending: ResMut<PendingFocus>,
) {
    if event.scene != Scene::Model {
        return;
    }
    let (name, param) = match &event.focus {
        Focus::Tensor(name) => (name, Some(name.as_str())),
        Focus::Layer(name) => (name, None),
        _ => return,
    };
    let hit = heatmaps.iter().find(|(_, h)| match param {
        Some(p) => h.param == p,
        None => h.param.starts_with(&format!("transformer.{name}.")),
    });
    match hit {
        Some((entity, _)) => *selection = Selection(Some(entity), true),
        None => pending.retry(&event),
    }
}

/// A layer's title in the current language (the program names its layers
/// in English: `embeddings`, `h.N`, `ln_f`, `head`).
fn layer_title(name: &str, english: &str) -> String {
    match name {
        "embeddings" if english.contains("lab") => crate::t!("layer-embeddings-lab"),
        "embeddings" => crate::t!("layer-embeddings"),
        "ln_f" => crate::t!("layer-ln-f"),
        "head" => crate::t!("layer-head"),
        _ => match name
            .strip_prefix("h.")
            .and_then(|i| i.parse::<usize>().ok())
        {
            Some(block) => crate::t!("flow-block", block = block),
            None => english.to_string(),
        },
    }
}
