//! The picture as entities: spawned from the [`super::layout::Picture`] and
//! the computed flow whenever either changes (sprites for the highway, the
//! branches, the value strips, the heads' lines and the bars; `Text2d` for
//! every label), and animated by [`super::animate`].

use super::compute::Computed;
use super::layout::{self, Lane, Picture};
use super::{FlowItem, FlowPass, FlowView};
use crate::app::canvas::{SceneRegion, cell_texture};
use crate::app::heatmap;
use crate::app::scenes::Scene;
use crate::flow::Flow;
use crate::app::canvas::{chip_text, short};
use crate::program::{Program, TensorKind};
use crate::worked::Worked;
use bevy::prelude::*;
use bevy::sprite::Anchor;

/// The stream's colour, the branches', the forward pulse's and the
/// backward pulse's (the gradient), and the text's.
pub const STREAM: Color = Color::srgb(0.30, 0.55, 0.95);
pub const BRANCH: Color = Color::srgb(0.55, 0.60, 0.70);
pub const FORWARD: Color = Color::srgb(0.35, 0.85, 1.0);
pub const BACKWARD: Color = Color::srgb(1.0, 0.45, 0.35);
pub const TEXT: Color = Color::srgb(0.90, 0.92, 0.95);
pub const WEAK: Color = Color::srgb(0.62, 0.66, 0.74);
pub const ACCENT: Color = Color::srgb(1.0, 0.82, 0.30);
pub const PANEL: Color = Color::srgba(0.12, 0.14, 0.19, 0.95);

/// A node's value strip (its alpha follows the pulse).
#[derive(Component)]
pub struct NodeStrip {
    pub node: usize,
}

/// What a click on a region does.
#[derive(Component, Clone, Debug)]
pub enum FlowTarget {
    Chip(usize),
    Block(usize),
    Node(usize),
    Head { layer: usize, head: usize },
}

/// A label shown while the backward pass plays (`at_end: false`) or once
/// it has ended (`at_end: true`: AdamW's update).
#[derive(Component)]
pub struct Reveal {
    pub at_end: bool,
}

/// The moving dot of a pass.
#[derive(Component)]
pub struct Pulse;

/// A node's text: the op that writes it, its name and shape, one line of
/// its maths.
pub fn describe(program: &Program, name: &str, shape: &[usize]) -> (String, String) {
    let Some(id) = program.tensor_id(name) else {
        return (name.to_string(), String::new());
    };
    let writer = program.writer(id).map(|op| &program.ops[op]);
    let kind = writer.map_or("", |o| o.op.kind_name());
    let maths: String = match (kind, name) {
        ("embedding", _) => "wte[byte] + wpe[pos]".into(),
        ("layernorm", _) => "(x − mean) / std · γ + β".into(),
        // A LoRA fine-tune: the frozen linear, the adapter's two steps.
        ("linear", n) if n.ends_with(".base") => crate::t!("flow-maths-frozen"),
        ("lora", n) if n.ends_with(".lora.down") => crate::t!("flow-maths-lora-down"),
        ("lora", _) => crate::t!("flow-maths-lora-up"),
        ("linear", n) if n.ends_with("qkv") => "[q | k | v] = x · W + b".into(),
        ("linear", n) if n.ends_with("mlp.fc") => "x · W + b  (C → 4C)".into(),
        ("linear", n) if n.ends_with("mlp.proj") => "x · W + b  (4C → C)".into(),
        ("linear", _) => "x · W + b".into(),
        ("attention", _) => crate::t!("flow-maths-attention"),
        ("gelu", _) => "GELU(x) = x · Φ(x)".into(),
        ("residual", _) => crate::t!("flow-maths-residual"),
        ("tied_head", _) => "logits = x · wteᵀ".into(),
        ("dropout", _) => crate::t!("flow-maths-dropout"),
        _ => String::new(),
    };
    let title = match (kind, name) {
        (_, "emb") => crate::t!("flow-node-embedding"),
        ("layernorm", _) => "LayerNorm".into(),
        ("linear", n) if n.ends_with(".base") => crate::t!("flow-node-frozen-linear"),
        ("lora", n) if n.ends_with(".lora.down") => crate::t!("flow-node-lora-down"),
        ("lora", _) => crate::t!("flow-node-lora-update"),
        ("linear", n) if n.ends_with("qkv") => "q, k, v".into(),
        ("linear", n) if n.ends_with("attn.proj") => crate::t!("flow-node-attention-output"),
        ("linear", n) if n.ends_with("mlp.fc") => crate::t!("flow-node-mlp-up"),
        ("linear", n) if n.ends_with("mlp.proj") => crate::t!("flow-node-mlp-down"),
        ("attention", _) => crate::t!("flow-node-heads-joined"),
        ("gelu", _) => "GELU".into(),
        ("residual", _) => crate::t!("flow-node-add"),
        ("tied_head", _) => "logits".into(),
        _ => kind.to_string(),
    };
    (
        format!("{title} · {name}"),
        format!(
            "({}) · {maths}",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// The parameters the op writing `name` reads (for the gradient chips).
pub fn params_of(program: &Program, name: &str) -> Vec<String> {
    let Some(id) = program.tensor_id(name) else {
        return Vec::new();
    };
    program
        .writer(id)
        .into_iter()
        .flat_map(|op| program.ops[op].op.io().0)
        .filter(|&t| program.tensors[t].kind == TensorKind::Param)
        .map(|t| program.tensors[t].name.clone())
        .collect()
}

/// The values a node shows in this pass: its activation going forward, its
/// gradient going backward (absent: zeros).
pub fn shown_values(flow: &Flow, node: usize, pass: FlowPass) -> Vec<f32> {
    let n = &flow.nodes[node];
    match pass {
        FlowPass::Forward => n.values.clone(),
        FlowPass::Backward => n.grad.clone().unwrap_or_else(|| vec![0.0; n.values.len()]),
    }
}

/// A label in the label font, in `colour`.
fn text(s: String, size: f32, anchor: Anchor, at: Vec2, colour: Color) -> impl Bundle {
    crate::app::canvas::coloured_label(s, size, anchor, at, 3.0, colour)
}

/// A straight line from `a` to `b`.
fn line(a: Vec2, b: Vec2, width: f32, color: Color, z: f32) -> (Sprite, Transform) {
    let d = b - a;
    (
        Sprite::from_color(color, Vec2::new(d.length(), width)),
        Transform::from_translation(((a + b) / 2.0).extend(z))
            .with_rotation(Quat::from_rotation_z(d.y.atan2(d.x))),
    )
}

/// Spawns the whole picture.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    commands: &mut Commands,
    images: &mut Assets<Image>,
    program: &Program,
    computed: &Computed,
    layout: &Picture,
    view: &FlowView,
    text_scale: f32,
) {
    let flow = &computed.flow;
    let c = program.config.d_model;
    let item = || (FlowItem, DespawnOnExit(Scene::Path));
    let t = |s: String, size: f32, anchor: Anchor, at: Vec2, colour: Color| {
        (text(s, size * text_scale, anchor, at, colour), item())
    };
    let pass = view.pass;
    // The highway: from the embeddings to ln_f.
    let stream: Vec<Vec2> = layout
        .nodes
        .iter()
        .filter(|s| s.lane == Lane::Stream)
        .map(|s| s.anchor)
        .collect();
    if let (Some(first), Some(last)) = (stream.first(), stream.last()) {
        commands.spawn((
            line(
                *first - Vec2::Y * 30.0,
                *last,
                26.0,
                STREAM.with_alpha(0.45),
                0.0,
            ),
            item(),
        ));
        commands.spawn(t(
            crate::t!("flow-residual-stream"),
            20.0,
            Anchor::BOTTOM_LEFT,
            Vec2::new(0.0, first.y - 70.0),
            STREAM,
        ));
    }
    // Branches: a lane from the stream row before each run of branch rows
    // to the stream row after it.
    let mut k = 0;
    while k < layout.nodes.len() {
        if layout.nodes[k].lane == Lane::Branch {
            let start = k;
            while k < layout.nodes.len() && layout.nodes[k].lane == Lane::Branch {
                k += 1;
            }
            let from = if start > 0 {
                layout.nodes[start - 1].anchor
            } else {
                layout.nodes[start].anchor
            };
            let to = layout
                .nodes
                .get(k)
                .map_or(layout.nodes[k - 1].anchor, |s| s.anchor);
            let (x0, x1) = (layout::HIGHWAY_X, layout::LANE_X);
            let y0 = from.y + 12.0;
            let y1 = to.y - 12.0;
            for (a, b) in [
                (Vec2::new(x0, y0), Vec2::new(x1, y0)),
                (Vec2::new(x1, y0), Vec2::new(x1, y1)),
                (Vec2::new(x1, y1), Vec2::new(x0, y1)),
            ] {
                commands.spawn((line(a, b, 6.0, BRANCH.with_alpha(0.7), 0.5), item()));
            }
            // The add where the branch rejoins.
            commands.spawn(t(
                "⊕".into(),
                34.0,
                Anchor::CENTER,
                Vec2::new(x0, y1 + 2.0),
                TEXT,
            ));
        } else {
            k += 1;
        }
    }
    // Collapsed blocks: one box each.
    for b in layout.blocks.iter().filter(|b| !b.open) {
        let r = b.rect;
        commands.spawn((
            Sprite::from_color(PANEL, r.size()),
            Transform::from_translation(r.center().extend(0.2)),
            SceneRegion {
                name: format!("block{}", b.layer),
                rect: r,
            },
            FlowTarget::Block(b.layer),
            item(),
        ));
        commands.spawn(t(
            crate::t!("flow-block", block = b.layer),
            26.0,
            Anchor::CENTER_LEFT,
            Vec2::new(layout::TEXT_X + 10.0, r.center().y + 18.0),
            TEXT,
        ));
        commands.spawn(t(
            crate::t!(
                "flow-block-about",
                heads = program.config.n_head,
                c = c,
                wide = 4 * c,
            ),
            19.0,
            Anchor::CENTER_LEFT,
            Vec2::new(layout::TEXT_X + 10.0, r.center().y - 18.0),
            WEAK,
        ));
    }
    // The open block's frame.
    for b in layout.blocks.iter().filter(|b| b.open) {
        let r = Rect::new(b.rect.min.x, b.rect.min.y, b.rect.max.x, b.rect.max.y);
        commands.spawn((
            Sprite::from_color(Color::srgba(0.16, 0.2, 0.3, 0.35), r.size()),
            Transform::from_translation(r.center().extend(0.1)),
            item(),
        ));
        commands.spawn(t(
            crate::t!("flow-block", block = b.layer),
            24.0,
            Anchor::TOP_RIGHT,
            Vec2::new(r.max.x - 10.0, r.max.y - 6.0),
            WEAK,
        ));
    }
    // Every shown node: its label, its maths, its strip.
    for spot in layout.nodes.iter().filter(|s| s.shown) {
        let node = &flow.nodes[spot.node];
        if node.name == "logits" {
            continue;
        }
        let (title, maths) = describe(program, &node.name, &node.shape);
        let mid = spot.row.center().y;
        commands.spawn(t(
            title,
            22.0,
            Anchor::CENTER_LEFT,
            Vec2::new(layout::TEXT_X, mid + 12.0),
            TEXT,
        ));
        commands.spawn(t(
            maths,
            17.0,
            Anchor::CENTER_LEFT,
            Vec2::new(layout::TEXT_X, mid - 14.0),
            WEAK,
        ));
        let values = shown_values(flow, spot.node, pass);
        let strip = layout::strip_for(spot.strip, values.len(), c);
        let half = heatmap::abs_percentile(&values, 0.99).max(1e-12);
        let image = cell_texture(images, values.len().max(1), 1, [0, 0, 0, 255]);
        if let Some(mut img) = images.get_mut(&image) {
            img.data = Some(heatmap::colorize(&values, half));
        }
        commands.spawn((
            Sprite {
                image,
                custom_size: Some(strip.size()),
                ..default()
            },
            Transform::from_translation(strip.center().extend(1.0)),
            NodeStrip { node: spot.node },
            SceneRegion {
                name: node.name.clone(),
                rect: spot.row,
            },
            FlowTarget::Node(spot.node),
            item(),
        ));
        // Its scale, and in the backward pass the gradients of its weights.
        let scale = format!("±{}", short(half));
        commands.spawn(t(
            scale,
            15.0,
            Anchor::CENTER_LEFT,
            Vec2::new(strip.max.x + 8.0, mid),
            WEAK,
        ));
        if pass == FlowPass::Backward
            && let Some(b) = &flow.backward
        {
            let norms: Vec<String> = params_of(program, &node.name)
                .iter()
                .filter(|p| p.ends_with("weight"))
                .filter_map(|p| {
                    let g = b.param_grad_norms.iter().find(|g| &g.name == p)?;
                    // `transformer.h.0.attn.c_attn.weight` → c_attn.
                    let module = p.rsplit('.').nth(1).unwrap_or("W");
                    Some(format!("‖∇{module}‖ = {}", short(g.norm)))
                })
                .collect();
            if !norms.is_empty() {
                let at = Vec2::new((strip.max.x + 70.0).max(layout::EXTRA_X), mid - 11.0);
                commands.spawn((
                    t(norms.join("  "), 17.0, Anchor::CENTER_LEFT, at, BACKWARD),
                    Reveal { at_end: false },
                ));
                // When the pass has ended: AdamW's step on that gradient.
                if let Some(updates) = &b.adamw {
                    let steps: Vec<String> = params_of(program, &node.name)
                        .iter()
                        .filter(|p| p.ends_with("weight"))
                        .filter_map(|p| {
                            let u = updates.iter().find(|g| &g.name == p)?;
                            let module = p.rsplit('.').nth(1).unwrap_or("W");
                            Some(crate::t!("flow-adamw-moves", module = module, norm = short(u.norm)))
                        })
                        .collect();
                    commands.spawn((
                        t(steps.join("  "), 17.0, Anchor::CENTER_LEFT, at, ACCENT),
                        Reveal { at_end: true },
                        Visibility::Hidden,
                    ));
                }
            }
        }
    }
    // The logit lens at each point of the stream that is drawn.
    let stream_points: Vec<usize> = flow
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.name == "emb" || n.name.ends_with(".res_2"))
        .map(|(i, _)| i)
        .collect();
    for (k, &node) in stream_points.iter().enumerate() {
        let (Some(spot), Some(lens)) = (
            layout.nodes.iter().find(|s| s.node == node && s.shown),
            flow.lens.get(k),
        ) else {
            continue;
        };
        let mid = spot.row.center().y;
        let guesses: Vec<String> = lens
            .iter()
            .take(3)
            .map(|g| format!("{} {:.0}%", chip_text(g.byte), g.p * 100.0))
            .collect();
        commands.spawn(t(
            crate::t!("flow-would-say", guesses = guesses.join("  ")),
            18.0,
            Anchor::CENTER_LEFT,
            Vec2::new(layout::EXTRA_X, mid + 9.0),
            ACCENT,
        ));
    }
    // The attention heads of the open block: lines from the position to
    // each byte it may look at, their width and opacity the real P.
    if let Some((layer, rect)) = layout.heads
        && let Some(heads) = flow.attention.get(layer)
    {
        commands.spawn(t(
            crate::t!(
                "flow-attention-at",
                position = flow.position,
                byte = chip_text(flow.tokens[flow.position]),
            ),
            20.0,
            Anchor::TOP_LEFT,
            Vec2::new(rect.min.x, rect.max.y),
            TEXT,
        ));
        let n_head = heads.len().max(1);
        let gap = 24.0;
        let w = (rect.width() - gap * (n_head as f32 - 1.0)) / n_head as f32;
        for (h, p) in heads.iter().enumerate() {
            let panel = Rect::new(
                rect.min.x + h as f32 * (w + gap),
                rect.min.y,
                rect.min.x + h as f32 * (w + gap) + w,
                rect.max.y - 34.0,
            );
            commands.spawn((
                Sprite::from_color(PANEL, panel.size()),
                Transform::from_translation(panel.center().extend(0.3)),
                SceneRegion {
                    name: format!("h.{layer}.head{h}"),
                    rect: panel,
                },
                FlowTarget::Head { layer, head: h },
                item(),
            ));
            commands.spawn(t(
                crate::t!("head-n", head = h),
                17.0,
                Anchor::TOP_LEFT,
                Vec2::new(panel.min.x + 6.0, panel.max.y - 4.0),
                WEAK,
            ));
            // The keys: the last bytes up to the position that fit.
            let fit = ((w - 20.0) / 26.0).floor().max(1.0) as usize;
            let first = (flow.position + 1).saturating_sub(fit);
            let keys: Vec<usize> = (first..=flow.position).collect();
            let step = (w - 20.0) / keys.len().max(1) as f32;
            let query = Vec2::new(panel.center().x, panel.max.y - 40.0);
            let pmax = p.iter().copied().fold(0.0f32, f32::max).max(1e-6);
            for (slot, &key) in keys.iter().enumerate() {
                let at = Vec2::new(
                    panel.min.x + 10.0 + (slot as f32 + 0.5) * step,
                    panel.min.y + 22.0,
                );
                let weight = p.get(key).copied().unwrap_or(0.0);
                let alpha = 0.08 + 0.92 * (weight / pmax);
                commands.spawn((
                    line(
                        query,
                        at + Vec2::Y * 14.0,
                        1.0 + 9.0 * weight,
                        FORWARD.with_alpha(alpha),
                        0.6,
                    ),
                    item(),
                ));
                let colour = if key == flow.position { ACCENT } else { TEXT };
                commands.spawn(t(
                    chip_text(flow.tokens[key]),
                    17.0,
                    Anchor::CENTER,
                    at,
                    colour,
                ));
            }
            commands.spawn(t(
                chip_text(flow.tokens[flow.position]),
                20.0,
                Anchor::BOTTOM_CENTER,
                query + Vec2::Y * 4.0,
                ACCENT,
            ));
        }
    }
    // The prompt's chips.
    for &(p, r) in &layout.chips {
        let chosen = p == flow.position;
        let colour = if chosen {
            ACCENT.with_alpha(0.9)
        } else {
            Color::srgb(0.22, 0.25, 0.32)
        };
        commands.spawn((
            Sprite::from_color(colour, r.size()),
            Transform::from_translation(r.center().extend(0.5)),
            SceneRegion {
                name: format!("token{p}"),
                rect: r,
            },
            FlowTarget::Chip(p),
            item(),
        ));
        let ink = if chosen {
            Color::srgb(0.08, 0.08, 0.1)
        } else {
            TEXT
        };
        commands.spawn(t(
            chip_text(flow.tokens[p]),
            22.0,
            Anchor::CENTER,
            r.center(),
            ink,
        ));
    }
    if let Some(&(_, first)) = layout.chips.first() {
        commands.spawn(t(
            crate::t!("flow-prompt-chips"),
            18.0,
            Anchor::CENTER_LEFT,
            Vec2::new(first.min.x, first.min.y - 22.0),
            WEAK,
        ));
    }
    // The next-byte bars.
    spawn_probs(commands, computed, layout.probs, view, &t);
}

/// The top 10 next bytes as bars, the byte that follows marked, its loss.
fn spawn_probs<B: Bundle>(
    commands: &mut Commands,
    computed: &Computed,
    rect: Rect,
    view: &FlowView,
    t: &impl Fn(String, f32, Anchor, Vec2, Color) -> B,
) {
    let flow = &computed.flow;
    let item = || (FlowItem, DespawnOnExit(Scene::Path));
    let mut order: Vec<usize> = (0..flow.probs.len()).collect();
    order.sort_by(|&a, &b| flow.probs[b].total_cmp(&flow.probs[a]).then(a.cmp(&b)));
    let target = flow.backward.as_ref().map(|b| b.target);
    let title = match (&flow.backward, computed.target_in_prompt) {
        (Some(b), true) => crate::t!(
            "flow-next-byte-in-prompt",
            position = flow.position,
            byte = chip_text(b.target),
            percent = format!("{:.1}", flow.probs[b.target as usize] * 100.0),
            loss = format!("{:.2}", b.loss),
        ),
        (Some(b), false) => crate::t!(
            "flow-next-byte-pick",
            byte = chip_text(b.target),
            percent = format!("{:.1}", flow.probs[b.target as usize] * 100.0),
            loss = format!("{:.2}", b.loss),
        ),
        (None, _) => crate::t!("flow-next-byte"),
    };
    commands.spawn(t(
        title,
        20.0,
        Anchor::TOP_LEFT,
        Vec2::new(rect.min.x, rect.max.y),
        TEXT,
    ));
    let bar_h = 19.0;
    let top = rect.max.y - 40.0;
    let pmax = flow.probs[order[0]].max(1e-6);
    for (k, &byte) in order.iter().take(10).enumerate() {
        let y = top - k as f32 * (bar_h + 6.0) - bar_h / 2.0;
        let p = flow.probs[byte];
        let len = (rect.width() - 360.0) * p / pmax;
        let is_target = target == Some(byte as u8);
        let colour = if is_target {
            ACCENT
        } else if view.pass == FlowPass::Backward {
            BACKWARD.with_alpha(0.6)
        } else {
            FORWARD.with_alpha(0.75)
        };
        commands.spawn((
            Sprite::from_color(colour, Vec2::new(len.max(2.0), bar_h)),
            Transform::from_translation(Vec3::new(rect.min.x + 90.0 + len / 2.0, y, 1.0)),
            item(),
        ));
        commands.spawn(t(
            chip_text(byte as u8),
            19.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(rect.min.x + 76.0, y),
            if is_target { ACCENT } else { TEXT },
        ));
        commands.spawn(t(
            format!("{:.1}%", p * 100.0),
            16.0,
            Anchor::CENTER_LEFT,
            Vec2::new(rect.min.x + 100.0 + len, y),
            WEAK,
        ));
    }
    // The card behind the bars.
    let card = Rect::new(
        rect.min.x - 16.0,
        rect.min.y - 8.0,
        rect.max.x + 16.0,
        rect.max.y + 12.0,
    );
    commands.spawn((
        Sprite::from_color(PANEL, card.size()),
        Transform::from_translation(card.center().extend(0.2)),
        SceneRegion {
            name: "next-byte".into(),
            rect,
        },
        item(),
    ));
}

/// The numbers of one node (the op zoom): its name and maths, and a window
/// of its values (and gradients after the backward pass), each a cell with
/// its number, beside the node's input where the op has one.
/// The op zoom's type, larger than the picture's (it shows few numbers,
/// each to be read), and the values it shows of a vector.
const ZOOM_TYPE: f32 = 1.25;
const CELLS: usize = 10;

pub fn spawn_numbers(
    commands: &mut Commands,
    program: &Program,
    flow: &Flow,
    node: usize,
    worked: Option<&Worked>,
    text_scale: f32,
    bounds: &mut Rect,
) {
    let item = || (FlowItem, DespawnOnExit(Scene::Path));
    let t = |s: String, size: f32, anchor: Anchor, at: Vec2, colour: Color| {
        (
            text(s, size * ZOOM_TYPE * text_scale, anchor, at, colour),
            item(),
        )
    };
    let n = &flow.nodes[node];
    let (title, maths) = describe(program, &n.name, &n.shape);
    commands.spawn(t(title, 30.0, Anchor::TOP_LEFT, Vec2::new(0.0, 0.0), TEXT));
    commands.spawn(t(
        maths,
        24.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, -50.0),
        WEAK,
    ));
    // The op that wrote the node, and its input: what the op read from the
    // node before it in the program.
    let writer = program
        .tensor_id(&n.name)
        .and_then(|id| program.writer(id))
        .map(|op| &program.ops[op]);
    let input = writer.and_then(|o| {
        let (ins, _) = o.op.io();
        ins.into_iter()
            .filter(|&t| program.tensors[t].kind == TensorKind::Activation)
            .find_map(|t| {
                flow.nodes
                    .iter()
                    .position(|m| m.name == program.tensors[t].name)
            })
    });
    let rows: Vec<(String, &Vec<f32>, Color)> = {
        let mut r = Vec::new();
        if let Some(i) = input {
            r.push((
                crate::t!("flow-in", name = flow.nodes[i].name.as_str()),
                &flow.nodes[i].values,
                WEAK,
            ));
        }
        r.push((crate::t!("flow-out", name = n.name.as_str()), &n.values, TEXT));
        if let Some(g) = &n.grad {
            r.push((format!("dL/d {}", n.name), g, BACKWARD));
        }
        r
    };
    let shown = n.values.len().min(CELLS);
    let cell = Vec2::new(130.0, 56.0);
    let x0 = 320.0;
    for (k, (name, values, colour)) in rows.iter().enumerate() {
        let y = -140.0 - k as f32 * (cell.y + 24.0);
        commands.spawn(t(
            name.clone(),
            20.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(x0 - 16.0, y),
            *colour,
        ));
        let half = heatmap::abs_percentile(values, 0.99).max(1e-12);
        let colours = heatmap::colorize(values, half);
        for j in 0..shown.min(values.len()) {
            let at = Vec2::new(x0 + j as f32 * (cell.x + 6.0) + cell.x / 2.0, y);
            let c = &colours[j * 4..j * 4 + 4];
            number_cell(
                commands,
                at,
                cell,
                c,
                values[j],
                20.0 * ZOOM_TYPE * text_scale,
            );
        }
    }
    let y_end = -140.0 - rows.len() as f32 * (cell.y + 24.0);
    commands.spawn(t(
        crate::t!(
            "flow-first-values",
            shown = shown,
            total = n.values.len(),
            position = flow.position,
            op = writer.map_or("—".into(), |o| o.label.clone()),
        ),
        20.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, y_end),
        WEAK,
    ));
    let right = x0 + CELLS as f32 * (cell.x + 6.0) + 40.0;
    let bottom = match worked {
        Some(w) => spawn_worked(commands, w, y_end - 70.0, text_scale),
        None => y_end - 30.0,
    };
    // Room above for the toolbar's second row and the status line.
    *bounds = Rect::new(-40.0, bottom - 40.0, right, 110.0);
}

/// One number on its colour: a cell of `size` at `at` coloured `rgba`, the
/// value printed on it in `type_size`.
fn number_cell(
    commands: &mut Commands,
    at: Vec2,
    size: Vec2,
    rgba: &[u8],
    value: f32,
    type_size: f32,
) {
    let item = || (FlowItem, DespawnOnExit(Scene::Path));
    commands.spawn((
        Sprite::from_color(Color::srgba_u8(rgba[0], rgba[1], rgba[2], 255), size),
        Transform::from_translation(at.extend(1.0)),
        item(),
    ));
    commands.spawn((
        text(
            short(value),
            type_size,
            Anchor::CENTER,
            at,
            Color::srgb(0.05, 0.05, 0.07),
        ),
        item(),
    ));
}

/// One output worked out (below the node's numbers, from `top` down): the
/// formula, the values filled in, the program's own value beside the sum
/// redone in f64, and for a matrix product a window of it (the weight rows
/// around the output, over the input columns that add most to it). Returns
/// where it ends.
fn spawn_worked(commands: &mut Commands, w: &Worked, top: f32, text_scale: f32) -> f32 {
    let item = || (FlowItem, DespawnOnExit(Scene::Path));
    let t = |s: String, size: f32, anchor: Anchor, at: Vec2, colour: Color| {
        (
            text(s, size * ZOOM_TYPE * text_scale, anchor, at, colour),
            item(),
        )
    };
    commands.spawn(t(
        crate::t!("flow-worked", formula = w.formula.as_str()),
        24.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, top),
        TEXT,
    ));
    commands.spawn(t(
        w.filled.clone(),
        22.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, top - 44.0),
        ACCENT,
    ));
    let lines = w.filled.lines().count().max(1) as f32;
    let below = top - 44.0 - lines * 22.0 * 1.3 * ZOOM_TYPE * text_scale - 12.0;
    commands.spawn(t(
        crate::t!(
            "flow-program-computed",
            computed = crate::worked::num(w.computed as f64),
            result = crate::worked::num(w.result),
        ),
        20.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, below),
        WEAK,
    ));
    let Some(win) = &w.window else {
        return below - 40.0;
    };
    // The window: x over the columns, W's rows, y at the right.
    let cell = Vec2::new(120.0, 46.0);
    let x0 = 320.0;
    let col_x = |k: usize| x0 + k as f32 * (cell.x + 6.0) + cell.x / 2.0;
    let mut y = below - 90.0;
    let all: Vec<f32> = win
        .x
        .iter()
        .chain(win.w.iter().flatten())
        .copied()
        .collect();
    let half = heatmap::abs_percentile(&all, 1.0).max(1e-12);
    let cells = |commands: &mut Commands,
                 values: &[f32],
                 y: f32,
                 x_of: &dyn Fn(usize) -> f32,
                 half: f32| {
        let colours = heatmap::colorize(values, half);
        for (k, v) in values.iter().enumerate() {
            let at = Vec2::new(x_of(k), y);
            let c = &colours[k * 4..k * 4 + 4];
            number_cell(commands, at, cell, c, *v, 19.0 * ZOOM_TYPE * text_scale);
        }
    };
    for (k, &i) in win.cols.iter().enumerate() {
        commands.spawn(t(
            format!("i={i}"),
            18.0,
            Anchor::BOTTOM_CENTER,
            Vec2::new(col_x(k), y + cell.y / 2.0 + 6.0),
            WEAK,
        ));
    }
    commands.spawn(t(
        crate::t!("flow-x-in"),
        20.0,
        Anchor::CENTER_RIGHT,
        Vec2::new(x0 - 16.0, y),
        WEAK,
    ));
    cells(commands, &win.x, y, &col_x, half);
    y -= cell.y + 44.0;
    let y_col = col_x(win.cols.len()) + 30.0;
    commands.spawn(t(
        crate::t!("flow-weight-rows", weight = win.weight.as_str()),
        18.0,
        Anchor::BOTTOM_LEFT,
        Vec2::new(x0 - cell.x / 2.0 + 60.0, y + cell.y / 2.0 + 4.0),
        WEAK,
    ));
    let y_half = heatmap::abs_percentile(&win.y, 1.0).max(1e-12);
    for (r, (&row, values)) in win.rows.iter().zip(&win.w).enumerate() {
        let at_y = y - r as f32 * (cell.y + 6.0);
        let colour = if row == w.index { ACCENT } else { WEAK };
        commands.spawn(t(
            crate::t!("flow-row", row = row),
            20.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(x0 - 16.0, at_y),
            colour,
        ));
        cells(commands, values, at_y, &col_x, half);
        cells(commands, &win.y[r..r + 1], at_y, &|_| y_col, y_half);
        if row == w.index {
            // The worked row, outlined.
            let left = col_x(0) - cell.x / 2.0 - 5.0;
            let right = y_col + cell.x / 2.0 + 5.0;
            let (top_y, bottom_y) = (at_y + cell.y / 2.0 + 4.0, at_y - cell.y / 2.0 - 4.0);
            for (a, b) in [
                (Vec2::new(left, top_y), Vec2::new(right, top_y)),
                (Vec2::new(left, bottom_y), Vec2::new(right, bottom_y)),
                (Vec2::new(left, top_y), Vec2::new(left, bottom_y)),
                (Vec2::new(right, top_y), Vec2::new(right, bottom_y)),
            ] {
                commands.spawn((line(a, b, 3.0, ACCENT, 2.0), item()));
            }
        }
    }
    commands.spawn(t(
        crate::t!("flow-y-out"),
        20.0,
        Anchor::BOTTOM_CENTER,
        Vec2::new(y_col, y + cell.y / 2.0 + 6.0),
        WEAK,
    ));
    y - win.rows.len() as f32 * (cell.y + 6.0) - 10.0
}
