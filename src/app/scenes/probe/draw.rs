//! The tools' pictures as entities: the lens grid (points × positions),
//! the importance map (layers × heads and MLP, a click knocks a part out),
//! the patching map (blocks × positions) and the attribution bars, each
//! spawned from its answer whenever it changes.

use super::ProbeItem;
use super::compute::{Answer, KnockoutView};
use crate::app::canvas::{SceneRegion, coloured_label};
use crate::app::heatmap;
use crate::app::scenes::Scene;
use crate::flow::Guess;
use crate::interventions::{Attribution, LensGrid, Part, Patching};
use crate::probe::byte_label;
use bevy::prelude::*;
use bevy::sprite::Anchor;

const TEXT: Color = Color::srgb(0.90, 0.92, 0.95);
const WEAK: Color = Color::srgb(0.62, 0.66, 0.74);
const ACCENT: Color = Color::srgb(1.0, 0.82, 0.30);
const BLUE: Color = Color::srgb(0.35, 0.70, 1.0);
const RED: Color = Color::srgb(1.0, 0.42, 0.35);
const GREEN: Color = Color::srgb(0.40, 0.85, 0.55);
/// The most positions a grid shows (the last ones).
const MAX_COLUMNS: usize = 24;

/// A cell of the importance map: a click knocks its part out or back in.
#[derive(Component, Clone, Copy, Debug)]
pub struct KnockCell(pub Part);

/// A cell's hover text.
#[derive(Component, Clone, Debug)]
pub struct CellText(pub String);

/// A byte as a cell shows it (the space as ␣).
fn shown(byte: u8) -> String {
    if byte == b' ' {
        "␣".into()
    } else {
        byte_label(byte)
    }
}

fn top5_text(g: &[Guess]) -> String {
    g.iter()
        .map(|g| format!("{} {:.0}%", shown(g.byte), g.p * 100.0))
        .collect::<Vec<_>>()
        .join("  ")
}

/// Spawns the picture of `answer`; returns the bounds it covers.
pub fn spawn(commands: &mut Commands, answer: &Answer, knocked: &[Part], text_scale: f32) -> Rect {
    let mut c = Spawner {
        commands,
        scale: text_scale,
    };
    match answer {
        Answer::Lens(grid) => c.lens(grid),
        Answer::Knockout(view) => c.knockout(view, knocked),
        Answer::Patch(p, clean, corrupt) => c.patch(p, clean, corrupt),
        Answer::Why(a) => c.why(a),
    }
}

/// Says why there is no picture (the tool's error).
pub fn spawn_message(commands: &mut Commands, message: &str, text_scale: f32) -> Rect {
    let mut c = Spawner {
        commands,
        scale: text_scale,
    };
    c.text(
        message.to_string(),
        22.0,
        Anchor::TOP_LEFT,
        Vec2::new(0.0, 0.0),
        ACCENT,
    );
    Rect::new(-20.0, -200.0, 1200.0, 40.0)
}

struct Spawner<'a, 'w, 's> {
    commands: &'a mut Commands<'w, 's>,
    scale: f32,
}

impl Spawner<'_, '_, '_> {
    fn text(&mut self, s: String, size: f32, anchor: Anchor, at: Vec2, colour: Color) {
        self.commands.spawn((
            coloured_label(s, size * self.scale, anchor, at, 3.0, colour),
            ProbeItem,
            DespawnOnExit(Scene::Probe),
        ));
    }

    fn rect(&mut self, r: Rect, colour: Color, z: f32) -> EntityCommands<'_> {
        self.commands.spawn((
            Sprite::from_color(colour, r.size()),
            Transform::from_translation(r.center().extend(z)),
            ProbeItem,
            DespawnOnExit(Scene::Probe),
        ))
    }

    /// Rows of cells, bottom row first, with a label on the left of each
    /// row and the prompt's bytes under the columns.
    fn lens(&mut self, grid: &LensGrid) -> Rect {
        let n = grid.tokens.len();
        let first = n.saturating_sub(MAX_COLUMNS);
        let (w, h, x0) = (46.0, 42.0, 250.0);
        let points = grid.lens.len();
        self.text(
            crate::t!("probe-lens-title"),
            20.0,
            Anchor::BOTTOM_LEFT,
            Vec2::new(0.0, points as f32 * h + 20.0),
            TEXT,
        );
        for (k, row) in grid.lens.iter().enumerate() {
            let y = k as f32 * h;
            let place = if k + 1 == points {
                crate::t!("probe-after-last-block")
            } else {
                crate::t!("probe-entering-block", block = k)
            };
            self.text(
                place.clone(),
                18.0,
                Anchor::CENTER_RIGHT,
                Vec2::new(x0 - 12.0, y + h / 2.0),
                WEAK,
            );
            for (col, t) in (first..n).enumerate() {
                let r = Rect::new(
                    x0 + col as f32 * w,
                    y,
                    x0 + col as f32 * w + w - 4.0,
                    y + h - 4.0,
                );
                let top = &row[t];
                let right = grid.tokens.get(t + 1) == Some(&top[0].byte);
                if right {
                    self.rect(r.inflate(3.0), ACCENT, 0.3);
                }
                self.rect(r, Color::srgb(0.12, 0.14, 0.19), 0.4);
                self.rect(r, BLUE.with_alpha(0.12 + 0.88 * top[0].p), 0.5)
                    .insert((
                        SceneRegion {
                            name: format!("lens{k}.{t}"),
                            rect: r,
                        },
                        CellText(crate::t!(
                            "probe-lens-cell",
                            position = t,
                            place = place.as_str(),
                            guesses = top5_text(top),
                        )),
                    ));
                self.text(shown(top[0].byte), 20.0, Anchor::CENTER, r.center(), TEXT);
            }
        }
        for (col, t) in (first..n).enumerate() {
            let at = Vec2::new(x0 + col as f32 * w + (w - 4.0) / 2.0, -22.0);
            self.text(shown(grid.tokens[t]), 20.0, Anchor::CENTER, at, ACCENT);
        }
        self.text(
            crate::t!("probe-the-prompt"),
            18.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(x0 - 12.0, -22.0),
            WEAK,
        );
        let width = x0 + (n - first) as f32 * w;
        let rect = Rect::new(x0, 0.0, width, points as f32 * h);
        self.commands.spawn((
            SceneRegion {
                name: "lens".into(),
                rect,
            },
            ProbeItem,
            DespawnOnExit(Scene::Probe),
        ));
        Rect::new(
            -20.0,
            -60.0,
            width.max(1100.0) + 20.0,
            points as f32 * h + 60.0,
        )
    }

    fn knockout(&mut self, view: &KnockoutView, knocked: &[Part]) -> Rect {
        let a = &view.ablation;
        let layers = a.parts.iter().map(|k| k.layer).max().map_or(0, |l| l + 1);
        let heads = a.parts.iter().filter(|k| k.head.is_some()).count() / layers.max(1);
        let (w, h, x0) = (104.0, 56.0, 150.0);
        let half = a
            .parts
            .iter()
            .map(|k| k.delta.abs())
            .fold(1e-6f32, f32::max);
        self.text(
            crate::t!(
                "probe-knockout-title",
                what = if a.on == "validation" {
                    crate::t!(
                        "probe-validation-loss",
                        rows = a.rows,
                        loss = format!("{:.3}", a.intact_loss),
                    )
                } else {
                    crate::t!("probe-prompt-loss", loss = format!("{:.3}", a.intact_loss))
                },
            ),
            20.0,
            Anchor::BOTTOM_LEFT,
            Vec2::new(0.0, layers as f32 * h + 44.0),
            TEXT,
        );
        for head in 0..=heads {
            let label = if head == heads {
                crate::t!("mlp")
            } else {
                crate::t!("head-n", head = head)
            };
            self.text(
                label,
                18.0,
                Anchor::BOTTOM_CENTER,
                Vec2::new(
                    x0 + head as f32 * w + (w - 6.0) / 2.0,
                    layers as f32 * h + 6.0,
                ),
                WEAK,
            );
        }
        for k in &a.parts {
            let col = k.head.unwrap_or(heads);
            let (x, y) = (x0 + col as f32 * w, k.layer as f32 * h);
            let r = Rect::new(x, y, x + w - 6.0, y + h - 6.0);
            let rgba = heatmap::colorize(&[k.delta], half);
            let part = match k.head {
                Some(head) => Part::Head {
                    layer: k.layer,
                    head,
                },
                None => Part::Mlp { layer: k.layer },
            };
            self.rect(r, Color::srgba_u8(rgba[0], rgba[1], rgba[2], 255), 0.5)
                .insert((
                    SceneRegion {
                        name: part.label(),
                        rect: r,
                    },
                    KnockCell(part),
                    CellText(crate::t!(
                        "probe-knock-cell",
                        part = part.label(),
                        loss = format!("{:.4}", k.loss),
                        delta = format!("{:+.4}", k.delta),
                    )),
                ));
            self.text(
                format!("{:+.3}", k.delta),
                19.0,
                Anchor::CENTER,
                r.center(),
                Color::srgb(0.05, 0.05, 0.07),
            );
            if knocked.contains(&part) {
                self.text(
                    "✕".into(),
                    40.0,
                    Anchor::CENTER,
                    r.center(),
                    Color::srgba(0.0, 0.0, 0.0, 0.75),
                );
            }
        }
        for l in 0..layers {
            self.text(
                crate::t!("block-n", block = l),
                18.0,
                Anchor::CENTER_RIGHT,
                Vec2::new(x0 - 12.0, l as f32 * h + (h - 6.0) / 2.0),
                WEAK,
            );
        }
        let grid = Rect::new(x0, 0.0, x0 + (heads + 1) as f32 * w, layers as f32 * h);
        self.commands.spawn((
            SceneRegion {
                name: "importance".into(),
                rect: grid,
            },
            ProbeItem,
            DespawnOnExit(Scene::Probe),
        ));
        // The next byte before and after the learner's knockouts.
        let bx = grid.max.x + 80.0;
        for (k, (title, (loss, guesses))) in [
            (crate::t!("probe-intact"), &view.before),
            (crate::t!("probe-with-knockouts"), &view.after),
        ]
        .into_iter()
        .enumerate()
        {
            let x = bx + k as f32 * 300.0;
            let top = grid.max.y;
            self.text(
                crate::t!(
                    "probe-title-loss",
                    title = title.as_str(),
                    loss = format!("{loss:.3}")
                ),
                19.0,
                Anchor::TOP_LEFT,
                Vec2::new(x, top),
                TEXT,
            );
            for (i, g) in guesses.iter().enumerate() {
                let y = top - 40.0 - i as f32 * 30.0;
                self.text(
                    shown(g.byte),
                    19.0,
                    Anchor::CENTER_RIGHT,
                    Vec2::new(x + 24.0, y),
                    TEXT,
                );
                let len = 200.0 * g.p;
                self.rect(
                    Rect::new(x + 34.0, y - 10.0, x + 34.0 + len.max(2.0), y + 10.0),
                    if k == 0 { BLUE } else { RED },
                    0.5,
                );
                self.text(
                    format!("{:.1}%", g.p * 100.0),
                    16.0,
                    Anchor::CENTER_LEFT,
                    Vec2::new(x + 40.0 + len, y),
                    WEAK,
                );
            }
        }
        let width = bx + 600.0;
        Rect::new(-20.0, -40.0, width, grid.max.y + 90.0)
    }

    fn patch(&mut self, p: &Patching, clean: &[u8], corrupt: &[u8]) -> Rect {
        let layers = p.restored.len();
        let n = p.restored.first().map_or(0, Vec::len);
        let first = n.saturating_sub(MAX_COLUMNS);
        let (w, h, x0) = (46.0, 46.0, 170.0);
        self.text(
            crate::t!(
                "probe-patch-title",
                clean = shown(p.clean_answer),
                corrupt = shown(p.corrupt_answer),
            ),
            20.0,
            Anchor::BOTTOM_LEFT,
            Vec2::new(0.0, layers as f32 * h + 20.0),
            TEXT,
        );
        for (l, row) in p.restored.iter().enumerate() {
            let y = l as f32 * h;
            self.text(
                crate::t!("block-n", block = l),
                18.0,
                Anchor::CENTER_RIGHT,
                Vec2::new(x0 - 12.0, y + h / 2.0),
                WEAK,
            );
            for (col, t) in (first..n).enumerate() {
                let v = row[t];
                let r = Rect::new(
                    x0 + col as f32 * w,
                    y,
                    x0 + col as f32 * w + w - 4.0,
                    y + h - 4.0,
                );
                let rgba = heatmap::colorize(&[v], 1.0);
                self.rect(r, Color::srgba_u8(rgba[0], rgba[1], rgba[2], 255), 0.5)
                    .insert((
                        SceneRegion {
                            name: format!("patch{l}.{t}"),
                            rect: r,
                        },
                        CellText(crate::t!(
                            "probe-patch-cell",
                            block = l,
                            position = t,
                            percent = format!("{:.0}", v * 100.0)
                        )),
                    ));
                if v.abs() >= 0.05 {
                    self.text(
                        format!("{:.0}", v * 100.0),
                        16.0,
                        Anchor::CENTER,
                        r.center(),
                        Color::srgb(0.05, 0.05, 0.07),
                    );
                }
            }
        }
        let rect = Rect::new(x0, 0.0, x0 + (n - first) as f32 * w, layers as f32 * h);
        self.commands.spawn((
            SceneRegion {
                name: "patch".into(),
                rect,
            },
            ProbeItem,
            DespawnOnExit(Scene::Probe),
        ));
        // The corrupted prompt under its columns, changed bytes in gold.
        self.text(
            crate::t!("probe-corrupted"),
            17.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(x0 - 12.0, -22.0),
            WEAK,
        );
        for (col, t) in (first..n).enumerate() {
            let changed = clean.get(t) != corrupt.get(t);
            let at = Vec2::new(x0 + col as f32 * w + (w - 4.0) / 2.0, -22.0);
            if let Some(&b) = corrupt.get(t) {
                self.text(
                    shown(b),
                    20.0,
                    Anchor::CENTER,
                    at,
                    if changed { ACCENT } else { TEXT },
                );
            }
        }
        Rect::new(
            -20.0,
            -60.0,
            rect.max.x.max(1100.0) + 20.0,
            rect.max.y + 60.0,
        )
    }

    fn why(&mut self, a: &Attribution) -> Rect {
        let mut parts = a.parts.clone();
        parts.sort_by(|x, y| y.1.abs().total_cmp(&x.1.abs()));
        let shown_n = parts.len().min(16);
        let rest: f32 = parts[shown_n..].iter().map(|(_, v)| v).sum();
        let (h, x0, span) = (34.0, 520.0, 380.0);
        let max = parts
            .iter()
            .map(|(_, v)| v.abs())
            .fold(rest.abs(), f32::max)
            .max(1e-6);
        let top = (shown_n + 1) as f32 * h;
        self.text(
            crate::t!(
                "probe-why-title",
                a = shown(a.a),
                b = shown(a.b),
                position = a.position,
                total = format!("{:+.3}", a.total),
            ),
            20.0,
            Anchor::BOTTOM_LEFT,
            Vec2::new(0.0, top + 20.0),
            TEXT,
        );
        let rows: Vec<(String, f32)> = parts[..shown_n]
            .iter()
            .cloned()
            .chain((parts.len() > shown_n).then(|| {
                (
                    crate::t!("probe-smaller-parts", n = parts.len() - shown_n),
                    rest,
                )
            }))
            .collect();
        for (i, (name, v)) in rows.iter().enumerate() {
            let y = top - (i as f32 + 0.5) * h;
            self.text(
                name.clone(),
                19.0,
                Anchor::CENTER_RIGHT,
                Vec2::new(x0 - span - 80.0, y),
                TEXT,
            );
            let len = span * v / max;
            let r = if len >= 0.0 {
                Rect::new(x0, y - 11.0, x0 + len.max(1.0), y + 11.0)
            } else {
                Rect::new(x0 + len, y - 11.0, x0, y + 11.0)
            };
            self.rect(r, if *v >= 0.0 { GREEN } else { RED }, 0.5)
                .insert(CellText(format!("{name}: {v:+.4}")));
            let (at, anchor) = if len >= 0.0 {
                (Vec2::new(x0 + len + 8.0, y), Anchor::CENTER_LEFT)
            } else {
                (Vec2::new(x0 + len - 8.0, y), Anchor::CENTER_RIGHT)
            };
            self.text(format!("{v:+.3}"), 16.0, anchor, at, WEAK);
        }
        self.rect(Rect::new(x0 - 1.0, 0.0, x0 + 1.0, top), WEAK, 0.6);
        // The card behind the bars, the region headless runs report.
        let rect = Rect::new(x0 - span - 20.0, -4.0, x0 + span + 90.0, top + 4.0);
        self.rect(rect, Color::srgba(0.12, 0.14, 0.19, 0.95), 0.1)
            .insert(SceneRegion {
                name: "attribution".into(),
                rect,
            });
        self.text(
            crate::t!("probe-for-a", byte = shown(a.a)),
            17.0,
            Anchor::CENTER_LEFT,
            Vec2::new(x0 + 10.0, -16.0),
            GREEN,
        );
        self.text(
            crate::t!("probe-for-b", byte = shown(a.b)),
            17.0,
            Anchor::CENTER_RIGHT,
            Vec2::new(x0 - 10.0, -16.0),
            RED,
        );
        Rect::new(x0 - span - 260.0, -50.0, x0 + span + 160.0, top + 60.0)
    }
}

/// The knocked-out parts, for the toolbar.
pub fn describe(parts: &[Part]) -> String {
    if parts.is_empty() {
        crate::t!("probe-nothing-knocked-out")
    } else {
        parts
            .iter()
            .map(|p| p.label())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
