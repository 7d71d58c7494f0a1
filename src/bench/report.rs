//! `tinygpt bench --report DIR`: the speedup curve as a Markdown table and an
//! SVG chart (ms/step of both backends and the GPU-over-CPU ratio against
//! parameter count, log scales), with the original TinyGPT's published curve
//! drawn as a labelled reference series.

use super::BenchResult;
use crate::chart::escape;
use std::fmt::Write;
use std::path::Path;

/// The original TinyGPT's published figures (Apple M-series laptop):
/// (preset, parameters, WASM SIMD ms/step, WebGPU speedup over it).
pub const ORIGINAL: &[(&str, usize, f64, f64)] = &[
    ("small", 366_432, 101.0, 2.6),
    ("medium", 838_400, 357.0, 6.8),
    ("large", 2_743_296, 1191.0, 9.3),
    ("xl", 6_416_896, 1851.0, 12.1),
];

/// One preset's row: CPU and GPU medians when measured.
struct Row<'a> {
    preset: &'a str,
    params: usize,
    cpu: Option<&'a BenchResult>,
    gpu: Option<&'a BenchResult>,
}

fn rows(results: &[BenchResult]) -> Vec<Row<'_>> {
    let mut out: Vec<Row> = Vec::new();
    // The speedup curve is f32's, CPU against GPU; the mixed rows
    // (`gpu-mixed`) are in bench.jsonl and the printed table.
    for r in results.iter().filter(|r| matches!(r.backend.as_str(), "cpu" | "gpu")) {
        let row = match out.iter_mut().position(|x| x.preset == r.preset) {
            Some(i) => &mut out[i],
            None => {
                out.push(Row {
                    preset: &r.preset,
                    params: r.params,
                    cpu: None,
                    gpu: None,
                });
                out.last_mut().unwrap()
            }
        };
        match r.backend.as_str() {
            "gpu" => row.gpu = Some(r),
            _ => row.cpu = Some(r),
        }
    }
    out.sort_by_key(|r| r.params);
    out
}

fn machine_line(results: &[BenchResult]) -> String {
    let m = &results[0].machine;
    let mut devices: Vec<&str> = Vec::new();
    for r in results {
        if !devices.contains(&r.device.as_str()) {
            devices.push(&r.device);
        }
    }
    format!(
        "{} ({} cores, {} {}); {}",
        m.cpu,
        m.cores,
        m.os,
        m.arch,
        devices.join("; ")
    )
}

pub fn markdown(results: &[BenchResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# tinygpt bench\n\nMachine: {}\n", machine_line(results));
    let _ = writeln!(
        s,
        "| preset | parameters | CPU ms/step | GPU ms/step | GPU over CPU | original TinyGPT (WebGPU over WASM) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let fmt = |r: Option<&BenchResult>| {
        r.map(|r| {
            format!(
                "{:.2} (min {:.2}, max {:.2})",
                r.median_ms, r.min_ms, r.max_ms
            )
        })
        .unwrap_or("–".into())
    };
    for row in rows(results) {
        let ratio = match (row.cpu, row.gpu) {
            (Some(c), Some(g)) => format!("{:.2}×", c.median_ms / g.median_ms),
            _ => "–".into(),
        };
        let original = ORIGINAL
            .iter()
            .find(|o| o.0 == row.preset)
            .map(|o| format!("{:.1}×", o.3))
            .unwrap_or("–".into());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            row.preset,
            group(row.params),
            fmt(row.cpu),
            fmt(row.gpu),
            ratio,
            original
        );
    }
    let _ = writeln!(
        s,
        "\nWarm-up (backend setup, including shader compilation, and the first steps) is excluded from the medians and listed here:\n"
    );
    let _ = writeln!(
        s,
        "| preset | backend | setup ms | first step ms | other warm-up steps ms | timed steps |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for r in results {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} |",
            r.preset, r.backend, r.setup_ms, r.first_step_ms, r.warmup_ms, r.steps
        );
    }
    s
}

/// A log-log panel: maps (x, y) data to pixels.
struct Panel {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Panel {
    fn px(&self, x: f64) -> f64 {
        self.left + (x.log10() - self.x.0) / (self.x.1 - self.x.0) * self.width
    }
    fn py(&self, y: f64) -> f64 {
        self.top + self.height - (y.log10() - self.y.0) / (self.y.1 - self.y.0) * self.height
    }

    fn axes(&self, s: &mut String, title: &str, ylabel: &str) {
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
            self.left, self.top, self.width, self.height
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="15" text-anchor="middle">{}</text>"##,
            self.left + self.width / 2.0,
            self.top - 10.0,
            title
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">parameters (log scale)</text>"##,
            self.left + self.width / 2.0,
            self.top + self.height + 34.0
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"##,
            self.left - 46.0,
            self.top + self.height / 2.0,
            self.left - 46.0,
            self.top + self.height / 2.0,
            ylabel
        );
        for e in (self.x.0.floor() as i32)..=(self.x.1.ceil() as i32) {
            let v = 10f64.powi(e);
            let x = self.px(v);
            if x >= self.left - 0.5 && x <= self.left + self.width + 0.5 {
                let _ = writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##,
                    self.top,
                    self.top + self.height
                );
                let _ = writeln!(
                    s,
                    r##"<text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
                    self.top + self.height + 16.0,
                    si(v)
                );
            }
        }
        // Decades, and 2× and 5× between them when the axis spans little.
        let steps: &[f64] = if self.y.1 - self.y.0 < 2.0 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        for e in (self.y.0.floor() as i32)..=(self.y.1.ceil() as i32) {
            for m in steps {
                let v = m * 10f64.powi(e);
                let y = self.py(v);
                if y >= self.top - 0.5 && y <= self.top + self.height + 0.5 {
                    let _ = writeln!(
                        s,
                        r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                        self.left,
                        self.left + self.width
                    );
                    let _ = writeln!(
                        s,
                        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
                        self.left - 6.0,
                        y + 4.0,
                        si(v)
                    );
                }
            }
        }
    }

    fn series(&self, s: &mut String, points: &[(f64, f64)], colour: &str, dashed: bool) {
        if points.is_empty() {
            return;
        }
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", self.px(x), self.py(y)))
            .collect();
        let dash = if dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for &(x, y) in points {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"/>"#,
                self.px(x),
                self.py(y)
            );
        }
    }
}

fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{}G", v / 1e9),
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v if v >= 1.0 => format!("{v}"),
        v => format!("{v}"),
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let (lo, hi) = (lo.log10() - 0.15, hi.log10() + 0.15);
    if hi - lo < 1.0 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo, hi)
    }
}

pub fn svg(results: &[BenchResult]) -> String {
    let rows = rows(results);
    let cpu: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| r.cpu.map(|c| (r.params as f64, c.median_ms)))
        .collect();
    let gpu: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| r.gpu.map(|g| (r.params as f64, g.median_ms)))
        .collect();
    let ratio: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.params as f64, r.cpu?.median_ms / r.gpu?.median_ms)))
        .collect();
    let orig_ms: Vec<(f64, f64)> = ORIGINAL.iter().map(|o| (o.1 as f64, o.2)).collect();
    let orig_ratio: Vec<(f64, f64)> = ORIGINAL.iter().map(|o| (o.1 as f64, o.3)).collect();
    let xs = bounds(
        rows.iter()
            .map(|r| r.params as f64)
            .chain(ORIGINAL.iter().map(|o| o.1 as f64)),
    );
    let left = Panel {
        left: 80.0,
        top: 70.0,
        width: 380.0,
        height: 280.0,
        x: xs,
        y: bounds(cpu.iter().chain(&gpu).chain(&orig_ms).map(|p| p.1)),
    };
    let right = Panel {
        left: 580.0,
        top: 70.0,
        width: 380.0,
        height: 280.0,
        x: xs,
        y: bounds(ratio.iter().chain(&orig_ratio).map(|p| p.1)),
    };
    let mut s = String::new();
    let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="470" viewBox="0 0 1000 470" font-family="sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="1000" height="470" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="500" y="24" font-size="16" text-anchor="middle">TinyGPT training step: the speedup is a curve</text>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="500" y="42" font-size="11" text-anchor="middle">{}</text>"#,
        escape(&machine_line(results))
    );
    left.axes(&mut s, "ms per training step", "ms / step (log scale)");
    right.axes(&mut s, "GPU over CPU", "speedup (log scale)");
    left.series(&mut s, &orig_ms, "#999999", true);
    left.series(&mut s, &cpu, "#1f77b4", false);
    left.series(&mut s, &gpu, "#ff7f0e", false);
    right.series(&mut s, &orig_ratio, "#999999", true);
    right.series(&mut s, &ratio, "#2ca02c", false);
    let legend = [
        ("#1f77b4", false, "tinygpt CPU backend (this machine)"),
        ("#ff7f0e", false, "tinygpt GPU backend (this machine)"),
        ("#2ca02c", false, "GPU over CPU (this machine)"),
        (
            "#999999",
            true,
            "original TinyGPT, M-series laptop: WASM SIMD ms (left), WebGPU over WASM (right)",
        ),
    ];
    for (i, (colour, dashed, label)) in legend.iter().enumerate() {
        let y = 400.0 + 16.0 * i as f64;
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<line x1="80" y1="{y}" x2="110" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="118" y="{}" font-size="12">{}</text>"#,
            y + 4.0,
            escape(label)
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// The files a report writes into its folder.
pub const FILES: [&str; 3] = ["bench.md", "speedup.svg", "bench.jsonl"];

/// Checks and locks the report's files in `dir` before anything is measured
/// (`crate::output`'s rule: none may be an input, a special file, or an
/// earlier report, unless `force`); creates the folder when it is new.
pub fn claim(
    dir: &Path,
    inputs: &[crate::output::Input],
    force: bool,
) -> Result<Vec<crate::output::Claim>, String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--report {} is not a folder; give --report a folder for the report's three files",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create the report folder {}: {e}", dir.display()))?;
    FILES
        .iter()
        .map(|f| crate::output::claim(&dir.join(f), "--report", inputs, force))
        .collect()
}

/// Writes `bench.md`, `speedup.svg` and `bench.jsonl` into `dir`, each
/// through a temporary file.
pub fn write(dir: &Path, results: &[BenchResult]) -> std::io::Result<()> {
    use crate::output::write_atomic;
    std::fs::create_dir_all(dir)?;
    write_atomic(&dir.join(FILES[0]), markdown(results).as_bytes())?;
    write_atomic(&dir.join(FILES[1]), svg(results).as_bytes())?;
    let lines: Vec<String> = results
        .iter()
        .map(|r| serde_json::to_string(r).expect("serialisable"))
        .collect();
    write_atomic(&dir.join(FILES[2]), (lines.join("\n") + "\n").as_bytes())
}

fn group(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}
