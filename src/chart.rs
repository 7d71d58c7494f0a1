//! Charts as files: the data of a chart the app draws (the loss curves, the
//! roofline), written as an SVG picture and as CSV, so a teacher can put it
//! in slides or a spreadsheet. No Bevy here: the app builds a [`Chart`] from
//! what it shows and exports it; the tests read it back.

use std::fmt::Write;

/// One line or point set.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// `#rrggbb`
    pub colour: String,
    pub dashed: bool,
    /// Draw the points as dots without a line (a scatter).
    pub scatter: bool,
}

impl Series {
    pub fn line(label: impl Into<String>, points: Vec<(f64, f64)>, colour: &str) -> Self {
        Self {
            label: label.into(),
            points,
            colour: colour.into(),
            dashed: false,
            scatter: false,
        }
    }

    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }

    pub fn scatter(mut self) -> Self {
        self.scatter = true;
        self
    }
}

/// A horizontal reference line (e.g. the loss of guessing at random).
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub label: String,
    pub y: f64,
}

/// A chart with one pair of axes, linear or log10 on each.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    /// A second line under the title: where and when it was measured.
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    pub series: Vec<Series>,
    pub references: Vec<Reference>,
}

const WIDTH: f64 = 900.0;
const PLOT: (f64, f64, f64, f64) = (80.0, 70.0, 560.0, 340.0); // left, top, width, height

impl Chart {
    /// The data as CSV, one row per point: `series,x,y` (reference lines as
    /// a series with one point at x = 0).
    pub fn to_csv(&self) -> String {
        let mut s = format!(
            "series,{},{}\n",
            csv_field(&self.x_label),
            csv_field(&self.y_label)
        );
        for series in &self.series {
            for (x, y) in &series.points {
                let _ = writeln!(s, "{},{x},{y}", csv_field(&series.label));
            }
        }
        for r in &self.references {
            let _ = writeln!(s, "{},0,{}", csv_field(&r.label), r.y);
        }
        s
    }

    /// Data bounds on each axis (in axis units: log10 where the axis is log),
    /// padded a little, over the points that can be drawn.
    fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let fx = |v: f64| if self.x_log { v.log10() } else { v };
        let fy = |v: f64| if self.y_log { v.log10() } else { v };
        let pts = self
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .map(|&(x, y)| (fx(x), fy(y)))
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in pts {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        for r in &self.references {
            let y = fy(r.y);
            if y.is_finite() {
                (y0, y1) = (y0.min(y), y1.max(y));
            }
        }
        if x0 > x1 {
            (x0, x1) = (0.0, 1.0);
        }
        if y0 > y1 {
            (y0, y1) = (0.0, 1.0);
        }
        if !self.y_log && y0 > 0.0 && y0 < 0.5 * y1 {
            y0 = 0.0; // a linear axis from zero where the data is near it
        }
        let pad = |lo: f64, hi: f64, log: bool| {
            let span = (hi - lo).max(if log { 0.5 } else { 1e-9 });
            (lo - 0.04 * span, hi + 0.04 * span)
        };
        (pad(x0, x1, self.x_log), pad(y0, y1, self.y_log))
    }

    /// The chart as a standalone SVG document (white background, 900×470).
    pub fn to_svg(&self) -> String {
        let ((x0, x1), (y0, y1)) = self.bounds();
        let (left, top, w, h) = PLOT;
        let fx = |v: f64| if self.x_log { v.log10() } else { v };
        let fy = |v: f64| if self.y_log { v.log10() } else { v };
        let px = |x: f64| left + (fx(x) - x0) / (x1 - x0) * w;
        let py = |y: f64| top + h - (fy(y) - y0) / (y1 - y0) * h;
        let mut s = String::new();
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="470" viewBox="0 0 {WIDTH} 470" font-family="sans-serif">"#
        );
        let _ = writeln!(s, r#"<rect width="{WIDTH}" height="470" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="26" font-size="17" text-anchor="middle">{}</text>"#,
            left + w / 2.0,
            escape(&self.title)
        );
        let _ = writeln!(
            s,
            r##"<text x="{}" y="46" font-size="11" text-anchor="middle" fill="#555">{}</text>"##,
            left + w / 2.0,
            escape(&self.subtitle)
        );
        // Grid and tick labels.
        for (v, label) in ticks(x0, x1, self.x_log) {
            let x = left + (v - x0) / (x1 - x0) * w;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{}" stroke="#e4e4e4"/>"##,
                top + h
            );
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{label}</text>"#,
                top + h + 16.0
            );
        }
        for (v, label) in ticks(y0, y1, self.y_log) {
            let y = top + h - (v - y0) / (y1 - y0) * h;
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#e4e4e4"/>"##,
                left + w
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{label}</text>"#,
                left - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
            left + w / 2.0,
            top + h + 38.0,
            escape(&self.x_label)
        );
        let (lx, ly) = (left - 52.0, top + h / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{lx}" y="{ly}" font-size="13" text-anchor="middle" transform="rotate(-90 {lx} {ly})">{}</text>"#,
            escape(&self.y_label)
        );
        // Clip the data to the plot.
        let _ = writeln!(
            s,
            r#"<clipPath id="plot"><rect x="{left}" y="{top}" width="{w}" height="{h}"/></clipPath><g clip-path="url(#plot)">"#
        );
        for r in &self.references {
            let y = py(r.y);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#888" stroke-dasharray="2 3"/>"##,
                left + w
            );
        }
        for series in &self.series {
            let pts: Vec<(f64, f64)> = series
                .points
                .iter()
                .map(|&(x, y)| (px(x), py(y)))
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            if series.scatter {
                for (x, y) in &pts {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{}"/>"#,
                        series.colour
                    );
                }
            } else if !pts.is_empty() {
                let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                let dash = if series.dashed {
                    r#" stroke-dasharray="6 4""#
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                    path.join(" "),
                    series.colour
                );
            }
        }
        let _ = writeln!(s, "</g>");
        // Legend, right of the plot.
        let lx = left + w + 20.0;
        let entries = self
            .series
            .iter()
            .map(|s| {
                let dash = if s.dashed { "6 4" } else { "" };
                (s.label.as_str(), s.colour.as_str(), dash, s.scatter)
            })
            .chain(
                self.references
                    .iter()
                    .map(|r| (r.label.as_str(), "#888888", "2 3", false)),
            );
        for (i, (label, colour, dash, scatter)) in entries.enumerate() {
            let y = top + 8.0 + 34.0 * i as f64;
            if scatter {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{}" cy="{y}" r="4" fill="{colour}"/>"#,
                    lx + 12.0
                );
            } else {
                let dash = if dash.is_empty() {
                    String::new()
                } else {
                    format!(r#" stroke-dasharray="{dash}""#)
                };
                let _ = writeln!(
                    s,
                    r#"<line x1="{lx}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>"#,
                    lx + 24.0
                );
            }
            for (k, part) in wrap(label, 30).iter().enumerate() {
                let _ = writeln!(
                    s,
                    r#"<text x="{}" y="{}" font-size="11">{}</text>"#,
                    lx + 30.0,
                    y + 4.0 + 13.0 * k as f64,
                    escape(part)
                );
            }
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

/// Tick positions (in axis units) and labels: decades on a log axis, a
/// 1-2-5 step giving 4 to 10 ticks on a linear one.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<(f64, String)> {
    if log {
        return ((lo.ceil() as i32)..=(hi.floor() as i32))
            .map(|e| (e as f64, si(10f64.powi(e))))
            .collect();
    }
    let span = hi - lo;
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 8.0)
        .unwrap_or(10.0 * mag);
    let mut out = vec![];
    let mut v = (lo / step).ceil() * step;
    while v <= hi + step * 1e-9 {
        if v.abs() < step * 1e-9 {
            v = 0.0; // not -0
        }
        let label = if step >= 1.0 {
            si(v)
        } else {
            let digits = (-step.log10().floor()) as usize;
            format!("{v:.digits$}")
        };
        out.push((v, label));
        v += step;
    }
    out
}

/// 1500 as 1.5k, 2e6 as 2M.
fn si(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e12 {
        (v / 1e12, "T")
    } else if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = format!("{x:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// Text for HTML or SVG: the four characters that would be markup, escaped.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "Loss".into(),
            subtitle: "tiny, lr 3e-4".into(),
            x_label: "step".into(),
            y_label: "loss".into(),
            x_log: false,
            y_log: false,
            series: vec![
                Series::line(
                    "train, lr 3e-4",
                    vec![(1.0, 5.5), (2.0, 4.0), (3.0, 3.1)],
                    "#1f77b4",
                ),
                Series::line(
                    "before: no causal mask",
                    vec![(1.0, 5.5), (3.0, 0.4)],
                    "#999999",
                )
                .dashed(),
            ],
            references: vec![Reference {
                label: "random guessing, ln 256".into(),
                y: 256f64.ln(),
            }],
        }
    }

    #[test]
    fn the_csv_holds_every_point_of_every_series() {
        let csv = chart().to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "series,step,loss");
        assert_eq!(lines.len(), 1 + 3 + 2 + 1);
        assert_eq!(lines[3], "\"train, lr 3e-4\",3,3.1");
        assert!(lines[6].starts_with("\"random guessing, ln 256\",0,5.54"));
    }

    #[test]
    fn the_svg_draws_each_series_inside_the_plot_with_its_legend() {
        let svg = chart().to_svg();
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("stroke-dasharray=\"6 4\"").count(), 2); // line + legend
        assert!(svg.contains("before: no causal mask") && svg.contains("random guessing"));
        // Every polyline point lies inside the plot rectangle.
        let (left, top, w, h) = PLOT;
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let pts = line.split('"').nth(1).unwrap();
            for p in pts.split(' ') {
                let (x, y) = p.split_once(',').unwrap();
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!(
                    x >= left && x <= left + w && y >= top && y <= top + h,
                    "{p}"
                );
            }
        }
    }

    #[test]
    fn ticks_are_round_numbers_across_the_range() {
        let t = ticks(0.0, 5.6, false);
        assert_eq!(
            t.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(),
            ["0", "1", "2", "3", "4", "5"]
        );
        let t = ticks(-1.2, 3.3, true);
        assert_eq!(
            t.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(),
            ["0.1", "1", "10", "100", "1000"]
        );
        assert_eq!(si(1_500_000.0), "1.5M");
        assert_eq!(ticks(0.0, 0.5, false)[1].1, "0.1");
        assert_eq!(ticks(-0.3, 6.0, false)[0].1, "0");
    }
}
