//! Where every tensor of the walk-through stands, and the tour's beats: a
//! pure function of the model's shape and the prompt's length, so the
//! picture, the camera, the clicks and the headless report all read one
//! geometry.
//!
//! One cell is one world unit, Y up. Activations are features × positions
//! (rows down, one column per byte of the prompt). Each column of the
//! picture is a stage: the embedding, each block, the head. In a stage the
//! ops go down the page in the program's order and every matmul keeps one
//! rule, so the eye learns it once: the input above, the weight to the left
//! (a row per output feature), the output where they meet (cell `(r, t)`
//! is `W[r, :] · X[:, t]`). Attention's heads are a deck in depth to the
//! right of Q, K, V, each P stored key-rows × query-columns (the causal
//! mask is the upper triangle).

use bevy::math::{Rect, Vec2, Vec3};

/// Gap between a tensor and what sits beside it (a bias, a weight).
const NEAR: f32 = 3.0;
/// Gap between one op's output and the next op's.
const OP_GAP: f32 = 16.0;
/// Gap between two stages' columns.
const STAGE_GAP: f32 = 48.0;
/// Gap between a LayerNorm's output and its statistics' rows under it
/// (in the gap to the next op, which is [`OP_GAP`]).
const STAT_GAP: f32 = 2.0;
/// Depth between two heads of the deck.
pub const DECK_GAP: f32 = 14.0;
/// The width of a position's column (and the height of a key's row in P):
/// wider than a feature's row, so a short prompt's bytes stay legible
/// beside a tall stack of features.
pub const POSITION: f32 = 3.0;

/// What colours a tensor: each family its own diverging scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorFamily {
    Activation,
    Weight,
    /// Attention weights and next-byte probabilities: 0 to 1.
    Probability,
    /// The loss per position: 0 and up.
    Loss,
}

/// Where a tensor's numbers come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A node of the flow (T × width), drawn width × T.
    Node(String),
    /// A parameter `[rows, cols]` as stored (`transposed`: drawn cols × rows).
    Param { name: String, transposed: bool },
    /// Head `head`'s attention weights P in block `layer`, keys × queries.
    Attention { layer: usize, head: usize },
    /// The next-byte probabilities, 256 × T.
    Probs,
    /// The loss at each position, 1 × T.
    Loss,
    /// A flow statistic, 1 × T: a LayerNorm's μ or 1/σ at each position,
    /// a head's softmax normaliser (log-sum-exp) at each query.
    Stat(String),
}

/// One tensor in the picture.
#[derive(Clone, Debug)]
pub struct Slab {
    /// Its name in the program (`h.0.attn.qkv`, `transformer.wte.weight`…).
    pub name: String,
    pub source: Source,
    pub family: TensorFamily,
    /// Rows and columns as drawn.
    pub rows: usize,
    pub cols: usize,
    /// A cell's width and height in world units.
    pub cell: Vec2,
    /// Its top-left corner; z is its depth (the heads' deck).
    pub corner: Vec3,
    /// The block it belongs to (None: the embedding or the head).
    pub layer: Option<usize>,
}

impl Slab {
    /// Its rectangle in its own plane (x, y).
    pub fn rect(&self) -> Rect {
        Rect::new(
            self.corner.x,
            self.corner.y - self.rows as f32 * self.cell.y,
            self.corner.x + self.cols as f32 * self.cell.x,
            self.corner.y,
        )
    }

    /// Its centre.
    pub fn centre(&self) -> Vec3 {
        self.rect().center().extend(self.corner.z)
    }
}

/// Which way a beat goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TourPass {
    Forward,
    Backward,
    /// AdamW's step on the gradient: the end of one training step.
    Update,
}

/// What kind of op a beat shows: its narration's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Overview,
    Embedding,
    LayerNorm,
    Qkv,
    Attention,
    Projection,
    Residual,
    Fc,
    Gelu,
    MlpProjection,
    FinalNorm,
    Logits,
    Loss,
    /// AdamW's update of every weight.
    Optimizer,
}

impl OpKind {
    /// The narration's message id for this op in `pass`.
    pub fn message(self, pass: TourPass) -> String {
        let kind = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
            .replace('_', "-");
        match pass {
            TourPass::Forward => format!("walk-forward-{kind}"),
            TourPass::Backward => format!("walk-backward-{kind}"),
            TourPass::Update => format!("walk-update-{kind}"),
        }
    }
}

/// One stop of the tour: an op, the tensors it reads and writes.
#[derive(Clone, Debug)]
pub struct Beat {
    pub kind: OpKind,
    pub pass: TourPass,
    /// The flow node it writes (forward) or whose gradient arrives
    /// (backward); the tour's order is the program's order of these.
    pub node: Option<String>,
    pub layer: Option<usize>,
    /// The slabs in view (indices into [`WalkLayout::slabs`]); the first is the
    /// output.
    pub slabs: Vec<usize>,
}

/// The whole picture.
#[derive(Clone, Debug)]
pub struct WalkLayout {
    pub slabs: Vec<Slab>,
    pub beats: Vec<Beat>,
    /// Each stage's column: its top-left corner (its leftmost tensor's),
    /// and what it is.
    pub stage_tops: Vec<(Vec2, StageColumn)>,
}

impl WalkLayout {
    /// The slab named `name`.
    pub fn slab(&self, name: &str) -> Option<usize> {
        self.slabs.iter().position(|s| s.name == name)
    }

    /// The box around some slabs (min, max corners).
    pub fn bounds_of(&self, slabs: &[usize]) -> (Vec3, Vec3) {
        let mut lo = Vec3::splat(f32::INFINITY);
        let mut hi = Vec3::splat(f32::NEG_INFINITY);
        for &i in slabs {
            let s = &self.slabs[i];
            let r = s.rect();
            lo = lo.min(r.min.extend(s.corner.z));
            hi = hi.max(r.max.extend(s.corner.z));
        }
        (lo, hi)
    }

    /// Every slab.
    pub fn all(&self) -> Vec<usize> {
        (0..self.slabs.len()).collect()
    }
}

/// A column of the picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageColumn {
    Embedding,
    Attention(usize),
    Mlp(usize),
    Head,
}

/// The model's shape, as the layout needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub n_layer: usize,
    pub n_head: usize,
    pub d_model: usize,
    pub ctx: usize,
    /// The prompt's length (after the context cut).
    pub tokens: usize,
}

/// Builds the picture column by column and the tour along it.
struct Builder {
    slabs: Vec<Slab>,
    beats: Vec<Beat>,
    t: usize,
}

impl Builder {
    fn push(&mut self, slab: Slab) -> usize {
        self.slabs.push(slab);
        self.slabs.len() - 1
    }

    /// An activation `rows` × T with its top-left at (x, y).
    fn act(&mut self, name: &str, rows: usize, x: f32, y: f32, layer: Option<usize>) -> usize {
        self.push(Slab {
            name: name.to_string(),
            source: Source::Node(name.to_string()),
            family: TensorFamily::Activation,
            rows,
            cols: self.t,
            cell: Vec2::new(POSITION, 1.0),
            corner: Vec3::new(x, y, 0.0),
            layer,
        })
    }

    /// A parameter drawn `rows` × `cols` whose right edge is at `right`.
    #[allow(clippy::too_many_arguments)]
    fn param(
        &mut self,
        name: String,
        rows: usize,
        cols: usize,
        transposed: bool,
        right: f32,
        y: f32,
        layer: Option<usize>,
    ) -> usize {
        self.push(Slab {
            name: name.clone(),
            source: Source::Param { name, transposed },
            family: TensorFamily::Weight,
            rows,
            cols,
            cell: Vec2::ONE,
            corner: Vec3::new(right - cols as f32, y, 0.0),
            layer,
        })
    }

    /// A linear op `out = W · in + b` at (x, y): its output, then its bias
    /// and weight to the left. Returns (output, bias, weight).
    #[allow(clippy::too_many_arguments)]
    fn linear(
        &mut self,
        out: &str,
        module: &str,
        rows: usize,
        inputs: usize,
        x: f32,
        y: f32,
        layer: Option<usize>,
    ) -> (usize, usize, usize) {
        let o = self.act(out, rows, x, y, layer);
        let b = self.param(format!("{module}.bias"), rows, 1, false, x - NEAR, y, layer);
        let w = self.param(
            format!("{module}.weight"),
            rows,
            inputs,
            false,
            x - NEAR - 1.0 - NEAR,
            y,
            layer,
        );
        (o, b, w)
    }

    /// A LayerNorm's output at (x, y) with γ and β to its left, and its
    /// statistics μ and 1/σ as thin rows under it, a cell a position (the
    /// normalised column p is (x_p − μ_p)·(1/σ)_p, then γ and β).
    /// Returns (output, γ, β, μ, 1/σ).
    fn layer_norm(
        &mut self,
        out: &str,
        module: &str,
        c: usize,
        x: f32,
        y: f32,
        layer: Option<usize>,
    ) -> (usize, usize, usize, usize, usize) {
        let prefix = out.trim_end_matches(".out");
        let stats = [("mean", STAT_GAP), ("rstd", STAT_GAP * 2.0 + POSITION)].map(|(stat, below)| {
            let name = format!("{prefix}.{stat}");
            self.push(Slab {
                name: name.clone(),
                source: Source::Stat(name),
                family: TensorFamily::Activation,
                rows: 1,
                cols: self.t,
                // Square cells, as the loss's: a row one unit high is a
                // hairline at the zoom that shows the whole op.
                cell: Vec2::splat(POSITION),
                corner: Vec3::new(x, y - c as f32 - below, 0.0),
                layer,
            })
        });
        let o = self.act(out, c, x, y, layer);
        let g = self.param(format!("{module}.weight"), c, 1, false, x - NEAR, y, layer);
        let b = self.param(
            format!("{module}.bias"),
            c,
            1,
            false,
            x - NEAR - 1.0 - 1.0,
            y,
            layer,
        );
        (o, g, b, stats[0], stats[1])
    }

    fn beat(&mut self, kind: OpKind, node: Option<&str>, layer: Option<usize>, slabs: Vec<usize>) {
        self.beats.push(Beat {
            kind,
            pass: TourPass::Forward,
            node: node.map(str::to_string),
            layer,
            slabs,
        });
    }
}

/// The picture of a model of `shape`.
pub fn layout(shape: Shape) -> WalkLayout {
    let c = shape.d_model;
    let t = shape.tokens.max(1);
    // The width of an activation (T columns).
    let tf = t as f32 * POSITION;
    let mut b = Builder {
        slabs: Vec::new(),
        beats: Vec::new(),
        t,
    };
    let mut stage_tops = Vec::new();
    // The embedding: emb[:, t] = wte[byte_t]ᵀ + wpe[t]ᵀ, the tables drawn
    // one column per byte and per position.
    let mut x = shape.ctx as f32 + NEAR + 256.0 + NEAR * 2.0;
    let emb = b.act("emb", c, x, 0.0, None);
    let wte_t = b.param(
        "transformer.wte.weight".into(),
        c,
        256,
        true,
        x - NEAR * 2.0,
        0.0,
        None,
    );
    let wpe_t = b.param(
        "transformer.wpe.weight".into(),
        c,
        shape.ctx,
        true,
        x - NEAR * 2.0 - 256.0 - NEAR,
        0.0,
        None,
    );
    stage_tops.push((Vec2::ZERO, StageColumn::Embedding));
    b.beat(OpKind::Embedding, Some("emb"), None, vec![emb, wte_t, wpe_t]);
    let mut stream_in = emb;
    x += tf;
    for layer in 0..shape.n_layer {
        let l = Some(layer);
        let h = format!("h.{layer}");
        let module = format!("transformer.h.{layer}");
        // The attention's weights (C columns) left of the stage's spine.
        x += STAGE_GAP + c as f32 + NEAR * 2.0 + 1.0;
        let mut y = 0.0;
        stage_tops.push((Vec2::new(x - c as f32 - NEAR * 2.0 - 1.0, y), StageColumn::Attention(layer)));
        let (ln1, g1, b1, m1, r1) = b.layer_norm(&format!("{h}.ln_1.out"), &format!("{module}.ln_1"), c, x, y, l);
        b.beat(OpKind::LayerNorm, Some(&format!("{h}.ln_1.out")), l, vec![ln1, g1, b1, m1, r1, stream_in]);
        y -= c as f32 + OP_GAP;
        let (qkv, qb, qw) = b.linear(&format!("{h}.attn.qkv"), &format!("{module}.attn.c_attn"), 3 * c, c, x, y, l);
        b.beat(OpKind::Qkv, Some(&format!("{h}.attn.qkv")), l, vec![qkv, qb, qw, ln1]);
        // The heads' deck: P (keys × queries) to the right of Q, K, V.
        let heads: Vec<usize> = (0..shape.n_head)
            .map(|head| {
                b.push(Slab {
                    name: format!("{h}.attn.p.{head}"),
                    source: Source::Attention { layer, head },
                    family: TensorFamily::Probability,
                    rows: t,
                    cols: t,
                    cell: Vec2::splat(POSITION),
                    // Beside V, level with the bottom of Q, K, V (the
                    // weighted sum's output is below).
                    corner: Vec3::new(
                        x + tf + OP_GAP,
                        (y - 3.0 * c as f32 + tf).min(y),
                        -(head as f32) * DECK_GAP,
                    ),
                    layer: l,
                })
            })
            .collect();
        // Over each head's P, its softmax's normaliser at each query
        // (the log-sum-exp of the query's scores, the one number a row
        // FlashAttention keeps), a cell a query, under P's columns.
        let normalisers: Vec<usize> = heads
            .iter()
            .enumerate()
            .map(|(head, &p)| {
                let corner = b.slabs[p].corner + Vec3::Y * (STAT_GAP + POSITION);
                let name = format!("{h}.attn.lse.{head}");
                b.push(Slab {
                    name: name.clone(),
                    source: Source::Stat(name),
                    family: TensorFamily::Activation,
                    rows: 1,
                    cols: t,
                    cell: Vec2::splat(POSITION),
                    corner,
                    layer: l,
                })
            })
            .collect();
        y -= 3.0 * c as f32 + OP_GAP;
        let att = b.act(&format!("{h}.attn.y"), c, x, y, l);
        let mut slabs = vec![att, qkv];
        slabs.extend(&heads);
        slabs.extend(&normalisers);
        b.beat(OpKind::Attention, Some(&format!("{h}.attn.y")), l, slabs);
        y -= c as f32 + OP_GAP;
        let (proj, pb, pw) = b.linear(&format!("{h}.attn.proj"), &format!("{module}.attn.c_proj"), c, c, x, y, l);
        b.beat(OpKind::Projection, Some(&format!("{h}.attn.proj")), l, vec![proj, pb, pw, att]);
        y -= c as f32 + OP_GAP;
        let res1 = b.act(&format!("{h}.res_1"), c, x, y, l);
        b.beat(OpKind::Residual, Some(&format!("{h}.res_1")), l, vec![res1, proj, stream_in]);
        // The MLP in a column of its own to the right (the stream goes
        // on at its top, like a newspaper's next column): the picture is
        // then as wide as a screen rather than a tall strip.
        x += tf + OP_GAP + tf + (shape.n_head.saturating_sub(1)) as f32 * 2.0;
        x += STAGE_GAP * 0.5 + 4.0 * c as f32 + NEAR * 2.0 + 1.0;
        y = 0.0;
        stage_tops.push((Vec2::new(x - 4.0 * c as f32 - NEAR * 2.0 - 1.0, y), StageColumn::Mlp(layer)));
        let (ln2, g2, b2, m2, r2) = b.layer_norm(&format!("{h}.ln_2.out"), &format!("{module}.ln_2"), c, x, y, l);
        b.beat(OpKind::LayerNorm, Some(&format!("{h}.ln_2.out")), l, vec![ln2, g2, b2, m2, r2, res1]);
        y -= c as f32 + OP_GAP;
        let (fc, fb, fw) = b.linear(&format!("{h}.mlp.fc"), &format!("{module}.mlp.c_fc"), 4 * c, c, x, y, l);
        b.beat(OpKind::Fc, Some(&format!("{h}.mlp.fc")), l, vec![fc, fb, fw, ln2]);
        y -= 4.0 * c as f32 + OP_GAP;
        let gelu = b.act(&format!("{h}.mlp.gelu"), 4 * c, x, y, l);
        b.beat(OpKind::Gelu, Some(&format!("{h}.mlp.gelu")), l, vec![gelu, fc]);
        y -= 4.0 * c as f32 + OP_GAP;
        let (mp, mb, mw) = b.linear(&format!("{h}.mlp.proj"), &format!("{module}.mlp.c_proj"), c, 4 * c, x, y, l);
        b.beat(OpKind::MlpProjection, Some(&format!("{h}.mlp.proj")), l, vec![mp, mb, mw, gelu]);
        y -= c as f32 + OP_GAP;
        let res2 = b.act(&format!("{h}.res_2"), c, x, y, l);
        b.beat(OpKind::Residual, Some(&format!("{h}.res_2")), l, vec![res2, mp, res1]);
        stream_in = res2;
        x += tf;
    }
    // The head: ln_f, the logits through the tied embedding, the
    // probabilities and the loss.
    x += STAGE_GAP + c as f32 + NEAR * 2.0 + 1.0;
    stage_tops.push((Vec2::new(x - c as f32 - NEAR * 2.0, 0.0), StageColumn::Head));
    let mut y = 0.0;
    let (lnf, gf, bf, mf, rf) = b.layer_norm("ln_f.out", "transformer.ln_f", c, x, y, None);
    b.beat(OpKind::FinalNorm, Some("ln_f.out"), None, vec![lnf, gf, bf, mf, rf, stream_in]);
    y -= c as f32 + OP_GAP;
    let logits = b.act("logits", 256, x, y, None);
    let lm = b.param("transformer.wte.weight".into(), 256, c, false, x - NEAR * 2.0, y, None);
    b.beat(OpKind::Logits, Some("logits"), None, vec![logits, lm, lnf]);
    y -= 256.0 + OP_GAP;
    let probs = b.push(Slab {
        name: "probs".into(),
        source: Source::Probs,
        family: TensorFamily::Probability,
        rows: 256,
        cols: t,
        cell: Vec2::new(POSITION, 1.0),
        corner: Vec3::new(x, y, 0.0),
        layer: None,
    });
    y -= 256.0 + OP_GAP;
    let loss = b.push(Slab {
        name: "loss".into(),
        source: Source::Loss,
        family: TensorFamily::Loss,
        rows: 1,
        cols: t,
        cell: Vec2::new(POSITION, POSITION),
        corner: Vec3::new(x, y, 0.0),
        layer: None,
    });
    b.beat(OpKind::Loss, None, None, vec![loss, probs, logits]);
    // The tour: the whole model, forward in the program's order, then the
    // same ops backward in reverse (the loss's gradient first), then
    // AdamW's update of every weight.
    let forward = std::mem::take(&mut b.beats);
    let all: Vec<usize> = (0..b.slabs.len()).collect();
    let mut beats = vec![Beat {
        kind: OpKind::Overview,
        pass: TourPass::Forward,
        node: None,
        layer: None,
        slabs: all,
    }];
    beats.extend(forward.iter().cloned());
    beats.extend(forward.iter().rev().map(|beat| Beat {
        pass: TourPass::Backward,
        ..beat.clone()
    }));
    let weights: Vec<usize> = (0..b.slabs.len())
        .filter(|&i| matches!(b.slabs[i].source, Source::Param { .. }))
        .collect();
    beats.push(Beat {
        kind: OpKind::Optimizer,
        pass: TourPass::Update,
        node: None,
        layer: None,
        slabs: weights,
    });
    WalkLayout {
        slabs: b.slabs,
        beats,
        stage_tops,
    }
}

/// Whether a slab has a gradient in the backward pass (P and the
/// probabilities are never stored by the program's backward, and the
/// loss is where it starts).
pub fn has_gradient(slab: &Slab) -> bool {
    matches!(slab.source, Source::Node(_) | Source::Param { .. })
}

/// The cell of `slab` at a point of its plane: (row, column).
pub fn cell_at(slab: &Slab, at: Vec2) -> Option<(usize, usize)> {
    let r = slab.rect();
    if !r.contains(at) {
        return None;
    }
    let col = (((at.x - r.min.x) / slab.cell.x).floor() as usize).min(slab.cols - 1);
    let row = (((r.max.y - at.y) / slab.cell.y).floor() as usize).min(slab.rows - 1);
    Some((row, col))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> WalkLayout {
        layout(Shape {
            n_layer: 3,
            n_head: 3,
            d_model: 96,
            ctx: 64,
            tokens: 20,
        })
    }

    /// Every matmul keeps the rule: its weight ends left of its output with
    /// the same rows, and its input is a slab of the beat above it.
    #[test]
    fn every_weight_sits_left_of_its_output_with_its_rows() {
        let walk = small();
        // (The overview and AdamW's beat show many ops at once.)
        for beat in walk.beats.iter().filter(|b| !matches!(b.kind, OpKind::Overview | OpKind::Optimizer)) {
            let out = &walk.slabs[beat.slabs[0]];
            for &i in &beat.slabs[1..] {
                let s = &walk.slabs[i];
                if s.family == TensorFamily::Weight && s.layer == out.layer && s.corner.y == out.corner.y {
                    assert_eq!(s.rows, out.rows, "{} beside {}", s.name, out.name);
                    assert!(s.rect().max.x < out.rect().min.x, "{} left of {}", s.name, out.name);
                }
            }
        }
    }

    /// No two slabs of one plane overlap.
    #[test]
    fn no_two_slabs_overlap() {
        let walk = small();
        for (i, a) in walk.slabs.iter().enumerate() {
            for b in &walk.slabs[i + 1..] {
                if a.corner.z != b.corner.z {
                    continue;
                }
                let (ra, rb) = (a.rect(), b.rect());
                let overlap = ra.min.x < rb.max.x
                    && rb.min.x < ra.max.x
                    && ra.min.y < rb.max.y
                    && rb.min.y < ra.max.y;
                // The LM head reuses wte, drawn once per use.
                assert!(!overlap, "{} overlaps {}", a.name, b.name);
            }
        }
    }

    /// The tour goes forward through the nodes in the program's order and
    /// back in reverse.
    #[test]
    fn the_tour_is_forward_then_the_reverse() {
        let walk = small();
        let forward: Vec<&Beat> = walk.beats.iter().filter(|b| b.pass == TourPass::Forward).collect();
        let backward: Vec<&Beat> = walk.beats.iter().filter(|b| b.pass == TourPass::Backward).collect();
        assert_eq!(forward.len(), backward.len() + 1, "the overview opens the tour");
        let f: Vec<_> = forward[1..].iter().map(|b| (&b.node, b.kind)).collect();
        let mut r: Vec<_> = backward.iter().map(|b| (&b.node, b.kind)).collect();
        r.reverse();
        assert_eq!(f, r);
        assert_eq!(forward[1].node.as_deref(), Some("emb"));
        assert_eq!(backward.last().unwrap().node.as_deref(), Some("emb"));
        // Then AdamW's step, on every weight and nothing else.
        let last = walk.beats.last().unwrap();
        assert_eq!((last.pass, last.kind), (TourPass::Update, OpKind::Optimizer));
        let weights: Vec<usize> = (0..walk.slabs.len())
            .filter(|&i| matches!(walk.slabs[i].source, Source::Param { .. }))
            .collect();
        assert!(!weights.is_empty());
        assert_eq!(last.slabs, weights);
    }

    #[test]
    fn a_point_names_its_cell() {
        let walk = small();
        let s = &walk.slabs[walk.slab("emb").unwrap()];
        let r = s.rect();
        assert_eq!(cell_at(s, Vec2::new(r.min.x + 0.5, r.max.y - 0.5)), Some((0, 0)));
        assert_eq!(cell_at(s, Vec2::new(r.max.x - 0.5, r.min.y + 0.5)), Some((95, 19)));
        assert_eq!(cell_at(s, Vec2::new(r.max.x + 0.5, r.min.y + 0.5)), None);
    }
}
