//! Where the Model scene draws each layer and heatmap: a layout in logical
//! pixels fitted to the view the panels leave, so the stack fills the
//! screen at any window size and its labels are drawn at the size they are
//! set in (the camera's fit then scales by 1).
//!
//! Every matrix of a layout is drawn `h` pixels tall (its width follows its
//! shape, within limits); the largest `h` that fits is chosen, the
//! transformer blocks going side by side in a grid when a deep model would
//! otherwise leave them thin strips. Leftover width widens the matrices (up
//! to [`MAX_STRETCH`]) and then the gaps. Pure: the scene spawns what it
//! returns, and the tests below check it at every preset's depth.

use bevy::math::{Rect, Vec2};

/// How much wider than its shape says a matrix may be drawn to fill the width.
pub const MAX_STRETCH: f32 = 2.0;
/// The smallest matrix height a layout goes down to before the whole
/// picture is scaled down instead.
const H_MIN: f32 = 14.0;
const H_MAX: f32 = 260.0;
/// Blocks side by side, at most.
const MAX_GRID: usize = 4;

/// Type sizes and spacing, in logical pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metrics {
    /// A heatmap's module and shape (`attn.c_attn`, `288×96`): what the
    /// narration names.
    pub label: f32,
    /// A layer's title (`Block 1`).
    pub title: f32,
    /// A layer's program name under its title (`h.1`).
    pub name: f32,
    /// The head's note and the colour bar's labels.
    pub note: f32,
    /// A vector's strip.
    pub strip: f32,
    pub gap: f32,
    /// Space kept at the right for the colour bar and its labels.
    pub bar_room: f32,
}

impl Metrics {
    /// Presenter mode: the names the narration refers to at 18 px.
    pub fn new(presenter: bool) -> Self {
        let m = Self::sizes(presenter);
        // The bar (18 wide, 10 from the stack), 6 to its values, a value.
        Self {
            bar_room: 34.0 + Self::label_width("+8.888e-8", m.note) + 4.0,
            ..m
        }
    }

    fn sizes(presenter: bool) -> Self {
        if presenter {
            Self {
                label: 18.0,
                title: 20.0,
                name: 14.0,
                note: 18.0,
                strip: 12.0,
                gap: 18.0,
                bar_room: 0.0,
            }
        } else {
            Self {
                label: 13.0,
                title: 16.0,
                name: 12.0,
                note: 15.0,
                strip: 10.0,
                gap: 10.0,
                bar_room: 0.0,
            }
        }
    }

    /// The width a text of `chars` characters takes at `size` (an
    /// estimate of the UI font's mean advance).
    pub fn text_width(chars: usize, size: f32) -> f32 {
        chars as f32 * size * 0.52
    }

    /// The width `text` takes at `size`, by the advances of the label
    /// font's kinds of glyph (digits and `×` are wider than the mean,
    /// punctuation narrower), with a little to spare.
    pub fn label_width(text: &str, size: f32) -> f32 {
        let ems: f32 = text
            .chars()
            .map(|c| match c {
                '0'..='9' | '×' | '+' | '=' | 'm' | 'w' | 'M' | 'W' => 0.62,
                '.' | ',' | '_' | ' ' | 'i' | 'l' | 'j' | 't' | 'f' | '·' | '(' | ')' => 0.34,
                'A'..='Z' => 0.62,
                _ => 0.54,
            })
            .sum();
        ems * size + 2.0
    }

    /// The title column of a layer with matrices (the others take what
    /// their title needs, up to twice that).
    fn title_width(&self, area: Vec2) -> f32 {
        (area.x * 0.12).clamp(5.5 * self.title, 11.0 * self.title)
    }

    /// The distance between a column's two label lines.
    pub fn label_line(&self) -> f32 {
        1.25 * self.label
    }

    /// The two label lines under a column.
    fn label_block(&self) -> f32 {
        2.0 * self.label_line() + 4.0
    }

    /// A layer's padding above and below its columns.
    fn padding(&self) -> f32 {
        6.0
    }

    /// The space between two rows of the stack.
    fn row_gap(&self) -> f32 {
        0.45 * self.gap
    }
}

/// One drawn tensor of a column, top to bottom.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StackItem {
    /// A matrix, `rows`×`cols`: drawn `h` tall.
    Matrix { rows: usize, cols: usize },
    /// A vector: a thin strip as wide as the column's matrix.
    Strip,
    /// A LoRA adapter's matrix at its true aspect, the long side `h`.
    Adapter { rows: usize, cols: usize },
}

/// A column: one module's tensors, and its labels' width.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnSpec {
    pub items: Vec<StackItem>,
    /// The wider of its two labels, in pixels.
    pub label_width: f32,
}

/// A layer of the stack (bottom to top: embeddings, blocks, ln_f, head).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    pub columns: Vec<ColumnSpec>,
    /// A transformer block (these may go side by side).
    pub block: bool,
    /// Its title's length in characters (it wraps in the title column),
    /// and its longest word's (the column is at least that wide).
    pub title_chars: usize,
    pub title_word_chars: usize,
    /// Its program name's (`h.7`), drawn smaller under the title, or
    /// after it on the same line where `inline_name` (the blocks: a deep
    /// model's rows are thin).
    pub name_chars: usize,
    pub inline_name: bool,
    /// Whether its columns are labelled. Blocks whose columns are alike
    /// say false: they share one set of labels, under the first row of
    /// blocks, as a table's columns do (the layout labels that row).
    pub labels: bool,
    /// A note that stands in a layer with no tensors (the head's), in
    /// characters.
    pub note_chars: usize,
    /// Shares a row with the next layer that does (`ln_f` and the head:
    /// neither has a matrix, and a row each wastes the height).
    pub shares_row: bool,
}

impl LayerSpec {
    fn has_matrix(&self) -> bool {
        self.columns
            .iter()
            .flat_map(|c| &c.items)
            .any(|i| !matches!(i, StackItem::Strip))
    }

    /// Its title column's width: the common one, or for a layer without
    /// matrices what its title needs on one line (within limits).
    fn title_width(&self, area: Vec2, m: &Metrics) -> f32 {
        let common = m
            .title_width(area)
            .max(Metrics::text_width(self.title_word_chars, m.title) * 1.15 + 24.0);
        if self.inline_name {
            let line = Metrics::text_width(self.title_chars, m.title)
                + Metrics::text_width(self.name_chars + 2, m.name);
            return common.max(line + 24.0);
        }
        if self.has_matrix() {
            return common;
        }
        (Metrics::text_width(self.title_chars, m.title) + 24.0)
            .min(0.35 * area.x)
            .max(common)
    }

    /// The least height its title and name take.
    fn title_height(&self, area: Vec2, m: &Metrics) -> f32 {
        if self.inline_name {
            return 1.25 * m.title + 10.0;
        }
        let line = self.title_width(area, m) - 20.0;
        let lines = (Metrics::text_width(self.title_chars, m.title) / line.max(1.0))
            .ceil()
            .max(1.0);
        lines * 1.25 * m.title + 1.2 * m.name + 10.0
    }
}

/// Where a column and its tensors go.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedColumn {
    /// Its tensors' rectangles, in the order of its items.
    pub items: Vec<Rect>,
    /// Where its labels start (top left).
    pub label_at: Vec2,
    /// The width its labels may take.
    pub label_width: f32,
}

/// Where a layer goes.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedLayer {
    pub rect: Rect,
    /// Whether its columns' labels are drawn.
    pub labelled: bool,
    /// The title column's width (the title wraps inside it).
    pub title_width: f32,
    pub columns: Vec<PlacedColumn>,
}

/// The whole picture.
#[derive(Clone, Debug, PartialEq)]
pub struct StackLayout {
    pub layers: Vec<PlacedLayer>,
    /// The colour bar.
    pub bar: Rect,
    /// Everything drawn (the camera fits it).
    pub bounds: Rect,
    /// The matrices' height.
    pub h: f32,
    /// Blocks side by side.
    pub grid: usize,
}

/// An item's natural size at matrix height `h`; a strip's width is the
/// column's (decided later), here the least it takes.
fn item_size(item: StackItem, h: f32, m: &Metrics) -> Vec2 {
    match item {
        StackItem::Matrix { rows, cols } => {
            let w = (h * cols as f32 / rows.max(1) as f32).clamp(h / 3.0, h * 2.5);
            Vec2::new(w, h)
        }
        StackItem::Strip => Vec2::new((0.9 * h).clamp(32.0, 160.0), m.strip),
        StackItem::Adapter { rows, cols } => {
            let unit = h / rows.max(cols).max(1) as f32;
            Vec2::new((cols as f32 * unit).max(6.0), (rows as f32 * unit).max(6.0))
        }
    }
}

/// A column's tensors' width (stretch applied to its matrices) and the
/// width it takes with its labels.
fn column_width(c: &ColumnSpec, h: f32, stretch: f32, m: &Metrics) -> (f32, f32) {
    let widest_matrix = c
        .items
        .iter()
        .filter(|i| !matches!(i, StackItem::Strip))
        .map(|&i| {
            let w = item_size(i, h, m).x;
            if matches!(i, StackItem::Matrix { .. }) { w * stretch } else { w }
        })
        .fold(0.0f32, f32::max);
    let tensors = if widest_matrix > 0.0 {
        widest_matrix
    } else {
        c.items
            .iter()
            .map(|&i| item_size(i, h, m).x)
            .fold(0.0f32, f32::max)
    };
    (tensors, tensors.max(c.label_width))
}

fn column_height(c: &ColumnSpec, h: f32, labels: bool, m: &Metrics) -> f32 {
    let items: f32 = c.items.iter().map(|&i| item_size(i, h, m).y).sum();
    items
        + 4.0 * c.items.len().saturating_sub(1) as f32
        + if labels { m.label_block() } else { 0.0 }
}

/// The least width a layer's note takes (it wraps at a quarter of the
/// area's width, or wider where the row leaves room), and its lines then.
fn note_size(l: &LayerSpec, area: Vec2, m: &Metrics) -> (f32, f32) {
    let whole = Metrics::text_width(l.note_chars, m.note);
    let line = (0.25 * area.x).max(8.0 * m.note);
    (whole.min(line), (whole / line).ceil())
}

/// A layer's content width (its columns and the gaps between them).
fn content_width(l: &LayerSpec, h: f32, stretch: f32, m: &Metrics) -> f32 {
    let sum: f32 = l.columns.iter().map(|c| column_width(c, h, stretch, m).1).sum();
    sum + m.gap * l.columns.len().saturating_sub(1) as f32
}

/// A layer's whole width: title, columns, a gap.
fn layer_width(l: &LayerSpec, area: Vec2, h: f32, m: &Metrics) -> f32 {
    l.title_width(area, m) + content_width(l, h, 1.0, m).max(note_size(l, area, m).0) + m.gap
}

fn layer_height(l: &LayerSpec, area: Vec2, h: f32, m: &Metrics) -> f32 {
    let columns = l
        .columns
        .iter()
        .map(|c| column_height(c, h, l.labels, m))
        .fold(0.0f32, f32::max);
    let note = note_size(l, area, m).1 * 1.3 * m.note;
    (columns.max(note) + 2.0 * m.padding()).max(l.title_height(area, m))
}

/// How the stack's rows are made: blocks side by side, and whether the
/// layers that may share a row do.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Arrangement {
    grid: usize,
    share: bool,
}

/// The layers as drawn in arrangement `a`: the first row of blocks
/// labelled, the top layers sharing a row or not.
fn arranged(layers: &[LayerSpec], a: Arrangement) -> Vec<LayerSpec> {
    let mut block = 0;
    layers
        .iter()
        .map(|l| {
            let mut l = l.clone();
            if l.block {
                l.labels |= block < a.grid;
                block += 1;
            }
            l.shares_row &= a.share;
            l
        })
        .collect()
}

/// The stack's rows, bottom to top: each a list of layer indices (blocks
/// `grid` to a row; layers that share a row together).
fn rows(layers: &[LayerSpec], grid: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        match out.last_mut() {
            Some(row)
                if (l.block && layers[row[0]].block && row.len() < grid)
                    || (l.shares_row && layers[row[0]].shares_row) =>
            {
                row.push(i)
            }
            _ => out.push(vec![i]),
        }
    }
    out
}

/// The widths of a row's layers: equal cells for blocks, each its own
/// for layers that share a row (the last takes what is left).
fn row_widths(layers: &[LayerSpec], row: &[usize], area: Vec2, h: f32, width: f32, m: &Metrics) -> Vec<f32> {
    let n = row.len() as f32;
    let room = width - m.gap * (n - 1.0);
    if layers[row[0]].block || row.len() == 1 {
        return vec![room / n; row.len()];
    }
    let mut out: Vec<f32> = row.iter().map(|&i| layer_width(&layers[i], area, h, m)).collect();
    let used: f32 = out[..row.len() - 1].iter().sum();
    *out.last_mut().expect("a row has a layer") = room - used;
    out
}

fn row_height(layers: &[LayerSpec], row: &[usize], area: Vec2, h: f32, m: &Metrics) -> f32 {
    row.iter()
        .map(|&i| layer_height(&layers[i], area, h, m))
        .fold(0.0f32, f32::max)
}

/// The picture's size at matrix height `h` with `grid` blocks a row
/// (nothing stretched).
fn size_at(layers: &[LayerSpec], area: Vec2, h: f32, a: Arrangement, m: &Metrics) -> Vec2 {
    let layers = &arranged(layers, a);
    let mut width = 0.0f32;
    let mut height = 0.0f32;
    let rows = rows(layers, a.grid);
    for row in &rows {
        let n = row.len() as f32;
        let widths = row.iter().map(|&i| layer_width(&layers[i], area, h, m));
        let need = if layers[row[0]].block {
            widths.fold(0.0f32, f32::max) * n
        } else {
            widths.sum()
        };
        width = width.max(need + m.gap * (n - 1.0));
        height += row_height(layers, row, area, h, m);
    }
    height += m.row_gap() * rows.len().saturating_sub(1) as f32;
    Vec2::new(width + m.bar_room, height)
}

/// The largest matrix height at which `grid` fits `area` (None: not even
/// the least).
fn fitting_h(layers: &[LayerSpec], area: Vec2, a: Arrangement, m: &Metrics) -> Option<f32> {
    let fits = |h: f32| {
        let s = size_at(layers, area, h, a, m);
        s.x <= area.x && s.y <= area.y
    };
    if !fits(H_MIN) {
        return None;
    }
    let (mut lo, mut hi) = (H_MIN, H_MAX);
    if fits(hi) {
        return Some(hi);
    }
    for _ in 0..30 {
        let mid = 0.5 * (lo + hi);
        if fits(mid) { lo = mid } else { hi = mid }
    }
    Some(lo.floor())
}

/// Lays the stack out to fill `area` (logical pixels, the view under the
/// scene's toolbar).
pub fn layout(layers: &[LayerSpec], area: Vec2, m: &Metrics) -> StackLayout {
    let area = area.max(Vec2::new(320.0, 200.0));
    let blocks = layers.iter().filter(|l| l.block).count().max(1);
    // The arrangement that lets the matrices be tallest: a single column
    // of blocks unless another grid is clearly better (a fifth taller);
    // the top layers in one row where that fits.
    let arrangements: Vec<Arrangement> = (1..=blocks.min(MAX_GRID))
        .flat_map(|grid| [true, false].map(|share| Arrangement { grid, share }))
        .collect();
    let mut best: Option<(Arrangement, f32)> = None;
    for &a in &arrangements {
        if let Some(h) = fitting_h(layers, area, a, m)
            && best.is_none_or(|(b, bh)| {
                if a.grid == b.grid { h > bh } else { h > 1.2 * bh }
            })
        {
            best = Some((a, h));
        }
    }
    // Nothing fits at the least height: the arrangement that overflows
    // least (the camera then scales the picture down to the view).
    let (arrangement, h) = best.unwrap_or_else(|| {
        let overflow = |a: Arrangement| {
            let s = size_at(layers, area, H_MIN, a, m);
            (s.x / area.x).max(s.y / area.y)
        };
        let a = arrangements
            .iter()
            .copied()
            .min_by(|&a, &b| overflow(a).total_cmp(&overflow(b)))
            .expect("at least one arrangement");
        // Scaled down that much, the picture may still have height to
        // spare (its labels' width is what overflows): the matrices take it.
        let scaled = area * overflow(a) * 1.001;
        (a, fitting_h(layers, scaled, a, m).map_or(H_MIN, |h| h.min(H_MAX)))
    });
    let grid = arrangement.grid;
    let natural = size_at(layers, area, h, arrangement, m);
    let layers = &arranged(layers, arrangement);
    let width = natural.x.max(area.x) - m.bar_room;
    let height = natural.y.max(area.y);
    let rows = rows(layers, grid);
    let mut placed: Vec<Option<PlacedLayer>> = vec![None; layers.len()];
    // Bottom to top; the stack's leftover height goes between its rows
    // (at most twice the gap), the rest above and below.
    let used: f32 = natural.y;
    let spare_between = if rows.len() > 1 {
        ((height - used) / (rows.len() - 1) as f32).min(m.gap)
    } else {
        0.0
    };
    let total = used + spare_between * rows.len().saturating_sub(1) as f32;
    let mut y = (height - total) * 0.5;
    for row in &rows {
        let row_height = row_height(layers, row, area, h, m);
        let mut x0 = 0.0;
        for (&i, w) in row.iter().zip(row_widths(layers, row, area, h, width, m)) {
            let rect = Rect::new(x0, y, x0 + w, y + row_height);
            let title = layers[i].title_width(area, m);
            placed[i] = Some(place_layer(&layers[i], rect, title, h, m));
            x0 += w + m.gap;
        }
        y += row_height + m.row_gap() + spare_between;
    }
    let bar_height = (0.45 * height).clamp(120.0, 320.0);
    let bar_x = width + 10.0;
    let bar = Rect::new(
        bar_x,
        0.5 * (height - bar_height),
        bar_x + 18.0,
        0.5 * (height + bar_height),
    );
    StackLayout {
        layers: placed.into_iter().map(|p| p.expect("every layer is in a row")).collect(),
        bar,
        bounds: Rect::new(0.0, 0.0, width + m.bar_room, height),
        h,
        grid,
    }
}

/// One layer in `rect`: its columns left to right after the title column,
/// the matrices stretched (at most [`MAX_STRETCH`]) and then the gaps
/// widened to fill the width.
fn place_layer(l: &LayerSpec, rect: Rect, title: f32, h: f32, m: &Metrics) -> PlacedLayer {
    let avail = rect.width() - title - m.gap;
    // The stretch that fills the width, by halving (widths grow with it).
    let stretch = {
        let (mut lo, mut hi) = (1.0f32, MAX_STRETCH);
        if content_width(l, h, hi, m) <= avail {
            hi
        } else {
            for _ in 0..24 {
                let mid = 0.5 * (lo + hi);
                if content_width(l, h, mid, m) <= avail { lo = mid } else { hi = mid }
            }
            lo
        }
    };
    let used = content_width(l, h, stretch, m);
    let gaps = l.columns.len().saturating_sub(1) as f32;
    let extra_gap = if gaps > 0.0 {
        ((avail - used) / gaps).clamp(0.0, 3.0 * m.gap)
    } else {
        0.0
    };
    let top = rect.max.y - m.padding();
    let mut x = rect.min.x + title;
    let columns = l
        .columns
        .iter()
        .map(|c| {
            let (tensors, slot) = column_width(c, h, stretch, m);
            let mut cy = top;
            let items = c
                .items
                .iter()
                .map(|&i| {
                    let size = match i {
                        StackItem::Matrix { .. } => item_size(i, h, m) * Vec2::new(stretch, 1.0),
                        StackItem::Strip => Vec2::new(tensors, m.strip),
                        StackItem::Adapter { .. } => item_size(i, h, m),
                    };
                    let r = Rect::new(x, cy - size.y, x + size.x, cy);
                    cy -= size.y + 4.0;
                    r
                })
                .collect();
            let placed = PlacedColumn {
                items,
                label_at: Vec2::new(x, cy),
                label_width: slot,
            };
            x += slot + m.gap + extra_gap;
            placed
        })
        .collect();
    PlacedLayer {
        rect,
        labelled: l.labels,
        title_width: title,
        columns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPT's layers as the scene describes them: `n` blocks of `c` wide.
    /// The model's layers with labels sized for `m`.
    fn gpt(n: usize, c: usize, vocab: usize, ctx: usize, m: &Metrics) -> Vec<LayerSpec> {
        let col = |items: Vec<StackItem>, label: &str| ColumnSpec {
            items,
            label_width: Metrics::label_width(label, m.label),
        };
        let ln = || col(vec![StackItem::Strip, StackItem::Strip], "ln_1");
        let linear = |rows, cols, label| col(vec![StackItem::Matrix { rows, cols }, StackItem::Strip], label);
        let spec = |columns, block, title_chars, labels, shares_row| LayerSpec {
            columns,
            block,
            title_chars,
            title_word_chars: 10,
            name_chars: 10,
            inline_name: false,
            labels,
            shares_row,
            note_chars: 0,
        };
        let mut layers = vec![spec(
            vec![
                col(vec![StackItem::Matrix { rows: vocab, cols: c }], "wte"),
                col(vec![StackItem::Matrix { rows: ctx, cols: c }], "wpe"),
            ],
            false,
            "Token + position embeddings".len(),
            true,
            false,
        )];
        for _ in 0..n {
            layers.push(LayerSpec {
                title_chars: 8,
                title_word_chars: 5,
                name_chars: 4,
                inline_name: true,
                note_chars: 0,
                labels: false,
                shares_row: false,
                columns: vec![
                    ln(),
                    linear(3 * c, c, "attn.c_attn"),
                    linear(c, c, "attn.c_proj"),
                    ln(),
                    linear(4 * c, c, "mlp.c_fc"),
                    linear(c, 4 * c, "mlp.c_proj"),
                ],
                block: true,
            });
        }
        layers.push(spec(vec![ln()], false, "Final LayerNorm".len(), true, true));
        let mut head = spec(vec![], false, "LM head (tied to wte) + cross-entropy".len(), false, true);
        head.note_chars = "logits = ln_f(x) · wteᵀ: the head reuses the token embedding".chars().count();
        layers.push(head);
        layers
    }

    fn check(layers: &[LayerSpec], area: Vec2, m: &Metrics) -> StackLayout {
        let l = layout(layers, area, m);
        let b = l.bounds.inflate(0.5);
        for (i, layer) in l.layers.iter().enumerate() {
            assert!(b.contains(layer.rect.min) && b.contains(layer.rect.max), "layer {i} inside: {:?} in {b:?}, h {} grid {}", layer.rect, l.h, l.grid);
            for (j, other) in l.layers.iter().enumerate().skip(i + 1) {
                let o = layer.rect.intersect(other.rect);
                assert!(o.is_empty() || o.width() * o.height() < 1.0, "layers {i} and {j} apart");
            }
            for c in &layer.columns {
                for r in &c.items {
                    assert!(
                        r.min.x >= layer.rect.min.x + layer.title_width - 0.5
                            && r.max.x <= layer.rect.max.x + 0.5
                            && r.min.y >= layer.rect.min.y - 0.5
                            && r.max.y <= layer.rect.max.y + 0.5,
                        "a tensor of layer {i} inside its block: {r:?} in {:?}",
                        layer.rect
                    );
                }
                if layer.labelled {
                    assert!(c.label_at.y - 2.0 * m.label_line() >= layer.rect.min.y - 0.5, "labels inside");
                    assert!(c.label_at.x + c.label_width <= layer.rect.max.x + 0.5, "labels inside");
                }
            }
        }
        assert!(l.bar.max.x <= b.max.x && l.bar.min.x >= b.min.x + 0.5 * b.width());
        l
    }

    #[test]
    fn the_small_model_fills_a_presenters_720p_view() {
        let m = Metrics::new(true);
        let area = Vec2::new(1280.0, 560.0) / 1.04;
        let l = check(&gpt(3, 96, 256, 64, &m), area, &m);
        assert_eq!(l.grid, 1);
        // At scale 1 (the whole picture in the view) and the view's width used.
        assert!(l.bounds.width() <= area.x + 0.5 && l.bounds.height() <= area.y + 0.5, "{:?}", l.bounds);
        let right = l.layers.iter().flat_map(|x| &x.columns).flat_map(|c| &c.items).map(|r| r.max.x).fold(0.0f32, f32::max);
        assert!(right > 0.75 * (area.x - m.bar_room), "the blocks reach across: {right}");
        assert!(l.h >= 45.0, "matrices {} px tall", l.h);
    }

    #[test]
    fn a_deep_model_goes_side_by_side_rather_than_into_slivers() {
        for presenter in [false, true] {
            let m = Metrics::new(presenter);
            for (area, n) in [(Vec2::new(1240.0, 900.0), 24usize), (Vec2::new(1280.0, 560.0), 14), (Vec2::new(1280.0, 560.0), 8)] {
                let layers = gpt(n, 128, 256, 256, &m);
                let l = check(&layers, area, &m);
                let single = [true, false]
                    .into_iter()
                    .filter_map(|share| fitting_h(&layers, area, Arrangement { grid: 1, share }, &m))
                    .reduce(f32::max);
                assert!(single.is_none_or(|s| l.h >= s), "never worse than one column");
                if n >= 14 {
                    assert!(l.grid > 1, "{n} layers in {area:?}: grid {}", l.grid);
                }
            }
        }
    }

    #[test]
    fn a_tiny_window_scales_down_instead_of_overlapping() {
        let m = Metrics::new(true);
        let area = Vec2::new(400.0, 300.0);
        let l = check(&gpt(24, 128, 256, 256, &m), area, &m);
        let (sx, sy) = (l.bounds.width() / area.x, l.bounds.height() / area.y);
        assert!(sx > 1.0 || sy > 1.0, "it does not fit: {:?}", l.bounds);
        // The overflowing side sets the scale; the other takes what it
        // leaves (taller matrices), down to the least height.
        assert!(l.h == H_MIN || (sx - sy).abs() < 0.1 * sx.max(sy), "{sx} {sy} h {}", l.h);
    }
}
