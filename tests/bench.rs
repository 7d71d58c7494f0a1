//! `tinygpt bench` as a user runs it: both backends on the tiny preset (the
//! GPU on lavapipe in CI), its JSON lines with the documented fields, and the
//! report's Markdown and SVG. Speed itself is never asserted.

use std::process::Command;

#[test]
fn bench_json_has_the_documented_fields_and_the_report_is_well_formed() {
    let dir = std::env::temp_dir().join(format!("tinygpt-bench-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "bench",
            "--presets",
            "tiny",
            "--backend",
            "cpu,gpu",
            "--json",
            "--seconds",
            "0.1",
            "--warmup",
            "1",
            "--report",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 2, "one line per (preset, backend)");
    for (line, backend) in lines.iter().zip(["cpu", "gpu"]) {
        assert_eq!(line["preset"], "tiny");
        assert_eq!(line["backend"], backend);
        assert_eq!(line["params"], 70464);
        assert_eq!(
            (line["batch"].as_u64(), line["ctx"].as_u64()),
            (Some(16), Some(32))
        );
        for key in [
            "setup_ms",
            "first_step_ms",
            "warmup_ms",
            "median_ms",
            "min_ms",
            "max_ms",
            "tokens_per_s",
        ] {
            let v = line[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{backend}: `{key}` missing"));
            assert!(v.is_finite() && v >= 0.0, "{backend}: {key} = {v}");
        }
        assert!(line["min_ms"].as_f64() <= line["median_ms"].as_f64());
        assert!(line["median_ms"].as_f64() <= line["max_ms"].as_f64());
        assert!(line["steps"].as_u64().unwrap() >= 5);
        assert!(!line["device"].as_str().unwrap().is_empty());
        assert!(!line["machine"]["cpu"].as_str().unwrap().is_empty());
        assert!(line["machine"]["cores"].as_u64().unwrap() >= 1);
    }
    assert!(
        lines[1]["device"].as_str().unwrap().starts_with("gpu ("),
        "the GPU line names its adapter"
    );
    let ratio = lines[1]["gpu_over_cpu"].as_f64().unwrap();
    let expect = lines[0]["median_ms"].as_f64().unwrap() / lines[1]["median_ms"].as_f64().unwrap();
    assert!((ratio - expect).abs() <= 1e-9 * expect);

    let svg = std::fs::read_to_string(dir.join("speedup.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let polylines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert!(
        polylines >= 4,
        "CPU, GPU, ratio and the original's reference series: {polylines}"
    );
    assert!(svg.contains("original TinyGPT"));
    let md = std::fs::read_to_string(dir.join("bench.md")).unwrap();
    assert!(md.contains("| tiny | 70,464 |"), "{md}");
    assert_eq!(
        std::fs::read_to_string(dir.join("bench.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );

    // The saved lines re-render the same report without measuring again.
    let again = dir.join("again");
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["bench", "--replot"])
        .arg(dir.join("bench.jsonl"))
        .arg("--report")
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(again.join("speedup.svg")).unwrap(),
        svg
    );
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"not\": \"a bench line\"}\n").unwrap();
    let replot_bad = |force: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tinygpt"));
        c.args(["bench", "--replot"]).arg(&bad).arg("--report").arg(&again);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    // The report folder holds the report just written: not replaced unasked.
    let out = replot_bad(false);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let out = replot_bad(true);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1: not a tinygpt bench JSON line"));
    std::fs::remove_dir_all(dir).unwrap();
}
