//! Where everything of the flow picture goes, as plain geometry (world
//! units, y up): the prompt's chips at the bottom, the residual stream as a
//! highway running up the left, each block's branches (LayerNorm →
//! attention → add, LayerNorm → MLP → add) leaving it on a side lane and
//! rejoining it, and the next-byte bars at the top. A block is one box when
//! collapsed and one row per op when open (the semantic zoom). Computed from
//! the flow's node names alone, so it is tested without a window.

use bevy::math::{Rect, Vec2};

/// A node row's height, and its value strip's.
pub const ROW: f32 = 56.0;
pub const STRIP_H: f32 = 24.0;
/// The highway (the residual stream) and the branches' lane.
pub const HIGHWAY_X: f32 = 24.0;
pub const LANE_X: f32 = 64.0;
/// Where the labels and the value strips start, the strips' widest, and
/// where the lens chips start.
pub const TEXT_X: f32 = 90.0;
pub const STRIP_X: f32 = 440.0;
pub const STRIP_MAX: f32 = 500.0;
pub const EXTRA_X: f32 = 780.0;
/// The picture's width.
pub const WIDTH: f32 = 1200.0;
/// A collapsed block's height; the attention heads' panel's.
pub const BLOCK_H: f32 = 110.0;
pub const HEADS_H: f32 = 170.0;
/// The prompt's chips, and the most shown.
pub const CHIP: f32 = 34.0;
pub const MAX_CHIPS: usize = 20;
/// The next-byte panel's height (10 bars).
pub const PROBS_H: f32 = 10.0 * 25.0 + 50.0;

/// How far in the picture is zoomed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Zoom {
    /// One box per block.
    #[default]
    Model,
    /// Every op of this block (the others boxes).
    Block(usize),
    /// The numbers of one node (its index in the flow's nodes).
    Op(usize),
}

/// Where a node goes on the highway or its lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// On the residual stream (the embeddings, each add, ln_f).
    Stream,
    /// On a branch that leaves the stream and rejoins it.
    Branch,
}

/// One node's place.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpot {
    /// Index in the flow's nodes.
    pub node: usize,
    pub lane: Lane,
    /// Its row is drawn (false: inside a collapsed block).
    pub shown: bool,
    /// The value strip (shown rows only).
    pub strip: Rect,
    /// The row (label, strip and extras), for hovering and headless checks.
    pub row: Rect,
    /// Where the pulse passes it.
    pub anchor: Vec2,
}

/// A block's place.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSpot {
    pub layer: usize,
    pub open: bool,
    pub rect: Rect,
}

/// The whole picture.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub nodes: Vec<NodeSpot>,
    pub blocks: Vec<BlockSpot>,
    /// The open block's attention heads (their panel).
    pub heads: Option<(usize, Rect)>,
    /// The prompt's chips: (position, rect).
    pub chips: Vec<(usize, Rect)>,
    /// The next-byte bars.
    pub probs: Rect,
    /// What the camera fits.
    pub bounds: Rect,
}

/// Which lane a node of the program goes on, by its name.
pub fn lane_of(name: &str) -> Lane {
    let stream = name == "emb"
        || name.ends_with(".res_1")
        || name.ends_with(".res_2")
        || name == "ln_f.out"
        || name == "logits";
    if stream { Lane::Stream } else { Lane::Branch }
}

/// The block a node belongs to (`h.3.mlp.fc` → 3); the stream leaving a
/// block (`res_2`) is drawn between blocks, not in one.
pub fn block_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("h.")?;
    let (i, tail) = rest.split_once('.')?;
    (tail != "res_2").then(|| i.parse().ok()).flatten()
}

/// The chips shown: a window of at most [`MAX_CHIPS`] positions around
/// `position`.
pub fn chip_window(len: usize, position: usize) -> std::ops::Range<usize> {
    let end = (position + 1 + 4).min(len).max(position + 1);
    let start = end.saturating_sub(MAX_CHIPS);
    start..end
}

/// Lays out `names` (the flow's nodes, in the program's order) for a prompt
/// of `tokens` bytes read at `position`, zoomed to
/// `zoom` (an `Op` zoom lays out its node's block as `Block`).
pub fn layout(names: &[String], tokens: usize, position: usize, zoom: &Zoom) -> Picture {
    let open = match zoom {
        Zoom::Model => None,
        Zoom::Block(b) => Some(*b),
        Zoom::Op(i) => names.get(*i).and_then(|n| block_of(n)),
    };
    let mut y = 0.0;
    // The prompt's chips.
    let window = chip_window(tokens, position);
    let chips: Vec<(usize, Rect)> = window
        .clone()
        .enumerate()
        .map(|(k, p)| {
            let x = TEXT_X + k as f32 * (CHIP + 6.0);
            (p, Rect::new(x, y, x + CHIP, y + CHIP))
        })
        .collect();
    y += CHIP + 50.0;
    let mut nodes = Vec::with_capacity(names.len());
    let mut blocks: Vec<BlockSpot> = Vec::new();
    let mut heads = None;
    // A row's strip, C wide ([`strip_for`] widens it for wider vectors).
    let strip_of = |y: f32| -> Rect {
        let mid = y + ROW / 2.0;
        Rect::new(
            STRIP_X,
            mid - STRIP_H / 2.0,
            STRIP_X + STRIP_MAX / 2.0,
            mid + STRIP_H / 2.0,
        )
    };
    let mut i = 0;
    while i < names.len() {
        let name = &names[i];
        match block_of(name) {
            Some(b) if open != Some(b) => {
                // A collapsed block: every node of it inside one box.
                let first = i;
                while i < names.len() && block_of(&names[i]) == Some(b) {
                    i += 1;
                }
                let rect = Rect::new(LANE_X - 24.0, y + 10.0, WIDTH - 40.0, y + BLOCK_H - 10.0);
                let n = (i - first) as f32;
                for (k, node) in (first..i).enumerate() {
                    let t = (k as f32 + 1.0) / (n + 1.0);
                    let anchor = Vec2::new(
                        if lane_of(&names[node]) == Lane::Stream {
                            HIGHWAY_X
                        } else {
                            LANE_X
                        },
                        rect.min.y + t * rect.height(),
                    );
                    nodes.push(NodeSpot {
                        node,
                        lane: lane_of(&names[node]),
                        shown: false,
                        strip: Rect::from_center_size(anchor, Vec2::ZERO),
                        row: rect,
                        anchor,
                    });
                }
                blocks.push(BlockSpot {
                    layer: b,
                    open: false,
                    rect,
                });
                y += BLOCK_H;
                continue;
            }
            Some(b) => {
                if blocks.last().is_none_or(|s| s.layer != b) {
                    blocks.push(BlockSpot {
                        layer: b,
                        open: true,
                        rect: Rect::new(LANE_X - 24.0, y, WIDTH - 40.0, y),
                    });
                }
                // The heads' panel sits where attention computes: before y.
                if name.ends_with(".attn.y") {
                    let rect = Rect::new(TEXT_X, y + 10.0, WIDTH - 40.0, y + HEADS_H - 10.0);
                    heads = Some((b, rect));
                    y += HEADS_H;
                }
            }
            None => {}
        }
        let lane = lane_of(name);
        if name == "logits" {
            // The logits are the bars at the top, not a row.
            let probs = Rect::new(
                TEXT_X,
                y + 20.0,
                TEXT_X + STRIP_MAX + 300.0,
                y + 20.0 + PROBS_H,
            );
            nodes.push(NodeSpot {
                node: i,
                lane,
                shown: false,
                strip: Rect::from_center_size(probs.center(), Vec2::ZERO),
                row: probs,
                anchor: Vec2::new(HIGHWAY_X, probs.min.y + 20.0),
            });
            i += 1;
            continue;
        }
        let row = Rect::new(HIGHWAY_X - 16.0, y, WIDTH - 20.0, y + ROW);
        nodes.push(NodeSpot {
            node: i,
            lane,
            shown: true,
            strip: strip_of(y),
            row,
            anchor: Vec2::new(
                if lane == Lane::Stream {
                    HIGHWAY_X
                } else {
                    LANE_X
                },
                y + ROW / 2.0,
            ),
        });
        if let Some(block) = blocks.last_mut()
            && block.open
            && block_of(name) == Some(block.layer)
        {
            block.rect.max.y = y + ROW;
        }
        y += ROW;
        i += 1;
    }
    let probs = Rect::new(
        TEXT_X,
        y + 20.0,
        TEXT_X + STRIP_MAX + 300.0,
        y + 20.0 + PROBS_H,
    );
    y += PROBS_H + 40.0;
    let bounds = match (zoom, open) {
        // Room at the top for the toolbar's status line.
        (Zoom::Model, _) | (_, None) => Rect::new(-10.0, -40.0, WIDTH, y + 100.0),
        (_, Some(b)) => {
            // The open block, with the stream entering and leaving it.
            let r = blocks
                .iter()
                .find(|s| s.layer == b)
                .map_or(Rect::new(0.0, 0.0, WIDTH, y), |s| s.rect);
            Rect::new(0.0, r.min.y - ROW - 30.0, WIDTH, r.max.y + ROW + 60.0)
        }
    };
    Picture {
        nodes,
        blocks,
        heads,
        chips,
        probs,
        bounds,
    }
}

/// The strip of a node `width` values wide, in a row laid out for a model
/// of width `c`: C-wide vectors span half the strip column, wider ones
/// (q·k·v, the MLP's 4C) all of it.
pub fn strip_for(row_strip: Rect, width: usize, c: usize) -> Rect {
    let w = if width <= c {
        STRIP_MAX / 2.0
    } else {
        STRIP_MAX
    };
    Rect::new(
        row_strip.min.x,
        row_strip.min.y,
        row_strip.min.x + w,
        row_strip.max.y,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(layers: usize) -> Vec<String> {
        let mut n = vec!["emb".to_string()];
        for i in 0..layers {
            for part in [
                "ln_1.out",
                "attn.qkv",
                "attn.y",
                "attn.proj",
                "res_1",
                "ln_2.out",
                "mlp.fc",
                "mlp.gelu",
                "mlp.proj",
                "res_2",
            ] {
                n.push(format!("h.{i}.{part}"));
            }
        }
        n.push("ln_f.out".into());
        n.push("logits".into());
        n
    }

    #[test]
    fn every_node_has_one_spot_in_the_programs_order_going_up() {
        for zoom in [Zoom::Model, Zoom::Block(1), Zoom::Op(14)] {
            let names = names(3);
            let l = layout(&names, 20, 19, &zoom);
            assert_eq!(l.nodes.len(), names.len());
            for (k, spot) in l.nodes.iter().enumerate() {
                assert_eq!(spot.node, k);
            }
            // The pulse only ever goes up.
            for w in l.nodes.windows(2) {
                assert!(
                    w[1].anchor.y > w[0].anchor.y,
                    "{zoom:?}: {} then {}",
                    names[w[0].node],
                    names[w[1].node]
                );
            }
            assert!(
                l.bounds.contains(l.nodes.last().unwrap().anchor) || !matches!(zoom, Zoom::Model)
            );
        }
    }

    #[test]
    fn zoom_opens_one_block_and_shows_its_rows() {
        let names = names(3);
        let closed = layout(&names, 10, 9, &Zoom::Model);
        assert!(closed.blocks.iter().all(|b| !b.open));
        assert_eq!(closed.blocks.len(), 3);
        assert!(closed.heads.is_none());
        let open = layout(&names, 10, 9, &Zoom::Block(1));
        let shown: Vec<&str> = open
            .nodes
            .iter()
            .filter(|s| s.shown)
            .map(|s| names[s.node].as_str())
            .collect();
        assert!(shown.contains(&"h.1.mlp.gelu") && !shown.contains(&"h.0.mlp.gelu"));
        assert_eq!(open.heads.map(|h| h.0), Some(1));
        // The camera fits the open block, not the whole model.
        assert!(open.bounds.height() < closed.bounds.height() + 1000.0);
        let b = open.blocks.iter().find(|b| b.layer == 1).unwrap();
        assert!(b.open && open.bounds.contains(b.rect.center()));
        // Rows never overlap.
        let rows: Vec<Rect> = open
            .nodes
            .iter()
            .filter(|s| s.shown)
            .map(|s| s.row)
            .collect();
        for (a, r) in rows.iter().enumerate() {
            for q in &rows[a + 1..] {
                assert!(r.max.y <= q.min.y + 1e-3, "rows overlap");
            }
        }
    }

    #[test]
    fn the_chip_window_keeps_the_position_in_view() {
        for (len, p) in [(5, 4), (64, 63), (64, 10), (64, 0), (30, 29)] {
            let w = chip_window(len, p);
            assert!(w.contains(&p), "{len} {p} {w:?}");
            assert!(w.len() <= MAX_CHIPS && w.end <= len);
        }
    }
}
