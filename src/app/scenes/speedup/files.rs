//! A bench's results in and out: `bench.jsonl` loaded for a class with no
//! GPU, saved with the report's SVG beside it.

use super::*;

/// Measurements from a `bench.jsonl`.
pub(super) fn load(path: &str) -> Result<Vec<BenchResult>, String> {
    let text = crate::data::read_text(std::path::Path::new(path.trim())).map_err(|e| {
        format!(
            "cannot read {path}: {e} (save a run here first, or use `tinygpt bench --report DIR`)"
        )
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                format!("{path}, line {}: not a bench measurement ({e}); bench.jsonl from `tinygpt bench --report` loads", i + 1)
            })
        })
        .collect()
}

/// Why a save did not happen: a file there that this app did not write (a
/// second Save replaces it), or anything else.
pub(super) enum SaveRefused {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))] // a download replaces nothing
    Exists(String),
    Other(String),
}

/// Writes the measurements as JSON lines and the chart (`report::svg`) as
/// an SVG beside them; returns the SVG's path. Files that exist are only
/// replaced when `replace` (see `crate::output`).
pub(super) fn save(
    path: &str,
    results: &[BenchResult],
    replace: bool,
) -> Result<String, SaveRefused> {
    if results.is_empty() {
        return Err(SaveRefused::Other("nothing measured yet".into()));
    }
    #[cfg(target_arch = "wasm32")]
    {
        let lines: String = results
            .iter()
            .map(|r| serde_json::to_string(r).expect("plain data") + "\n")
            .collect();
        crate::app::browser::download("bench.jsonl", lines.as_bytes());
        crate::app::browser::download("speedup.svg", bench_report::svg(results).as_bytes());
        let _ = (path, replace);
        Ok("speedup.svg (downloads)".into())
    }
    #[cfg(not(target_arch = "wasm32"))]
    save_files(path, results, replace)
}

/// [`save`] natively: the two files.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn save_files(
    path: &str,
    results: &[BenchResult],
    replace: bool,
) -> Result<String, SaveRefused> {
    let path = std::path::Path::new(path.trim());
    let svg_path = path.with_extension("svg");
    for p in [path, svg_path.as_path()] {
        crate::output::check_save(p, "the save path", replace).map_err(|r| match r {
            crate::output::SaveRefusal::Ask => SaveRefused::Exists(format!(
                "{} exists and this app did not write it",
                p.display()
            )),
            crate::output::SaveRefusal::Refused(e) => SaveRefused::Other(e),
        })?;
    }
    let lines: String = results
        .iter()
        .map(|r| serde_json::to_string(r).expect("plain data") + "\n")
        .collect();
    let write = |p: &std::path::Path, bytes: &[u8]| {
        crate::output::write_atomic(p, bytes)
            .map_err(|e| SaveRefused::Other(format!("cannot write {}: {e}", p.display())))
    };
    write(path, lines.as_bytes())?;
    write(&svg_path, bench_report::svg(results).as_bytes())?;
    Ok(svg_path.display().to_string())
}
