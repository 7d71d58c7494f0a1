//! `tinygpt bench` as a user runs it: both backends on the tiny preset (the
//! GPU on lavapipe in CI), its JSON lines with the documented fields, and the
//! report's Markdown and SVG. Speed itself is never asserted.

mod common;

use std::cell::Cell;
use std::process::Command;
use tinygpt::bench::stepped::{self, bench_stepped, time_step_stepped};
use tinygpt::bench::{BenchOptions, cpu_backend};
use tinygpt::model::config::Config;
use tinygpt::program::Program;

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
        c.args(["bench", "--replot"])
            .arg(&bad)
            .arg("--report")
            .arg(&again);
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
    // Refused into a new folder, it leaves no folder behind.
    let fresh = dir.join("fresh");
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["bench", "--replot"])
        .arg(&bad)
        .arg("--report")
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        !fresh.exists(),
        "a refused --replot left {}",
        fresh.display()
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The page's bench (`bench::stepped`, what the Speedup scene runs in a
/// browser) driven here with a pause that counts: the CPU hands control back
/// between chunks of steps and ends with the fields `tinygpt bench` prints;
/// the GPU submits its steps and is timed by its timestamps where the
/// adapter has them; Cancel stops it at the pause it was pressed in.
#[test]
fn the_page_bench_pauses_between_chunks_and_measures_both_backends() {
    let config = Config::load("tiny").unwrap();
    let opts = BenchOptions {
        warmup_steps: 2,
        min_steps: 5,
        max_steps: 200,
        min_seconds: 0.2,
    };
    let pauses = Cell::new(0);
    let pause = || {
        pauses.set(pauses.get() + 1);
        std::future::ready(())
    };
    let cpu = pollster::block_on(bench_stepped(
        "tiny",
        "cpu",
        cpu_backend(&config),
        0.0,
        opts,
        &|| false,
        pause,
    ))
    .unwrap();
    assert_eq!((cpu.preset.as_str(), cpu.backend.as_str()), ("tiny", "cpu"));
    assert!(cpu.steps >= 5 && cpu.min_ms <= cpu.median_ms && cpu.median_ms <= cpu.max_ms);
    assert!(cpu.timing.is_none(), "each CPU step is timed alone");
    // 0.2 s of steps in chunks of a few milliseconds.
    assert!(pauses.get() >= 2, "{} pauses", pauses.get());

    let ctx = common::gpu_context();
    let has_timestamps = ctx
        .device
        .features()
        .contains(wgpu::Features::TIMESTAMP_QUERY);
    let gpu_backend = || {
        Box::new(tinygpt::gpu::GpuBackend::new(ctx.clone(), Program::new(&config)).unwrap())
            as Box<dyn tinygpt::backend::Backend>
    };
    let gpu = pollster::block_on(bench_stepped(
        "tiny",
        "gpu",
        gpu_backend(),
        0.0,
        opts,
        &|| false,
        pause,
    ))
    .unwrap();
    assert_eq!(gpu.backend, "gpu");
    assert!(gpu.steps >= 5 && gpu.median_ms > 0.0 && gpu.median_ms.is_finite());
    assert_eq!(
        gpu.timing.as_deref(),
        Some(if has_timestamps {
            stepped::TIMING_TIMESTAMPS
        } else {
            stepped::TIMING_SUBMIT_WALL
        })
    );

    // Cancel: asked during the first pause, it stops there.
    let asked = Cell::new(false);
    let cancelled = pollster::block_on(bench_stepped(
        "tiny",
        "cpu",
        cpu_backend(&config),
        0.0,
        BenchOptions {
            min_seconds: 60.0,
            max_steps: 100_000,
            ..opts
        },
        &|| asked.get(),
        || {
            asked.set(true);
            std::future::ready(())
        },
    ));
    assert_eq!(cancelled.unwrap_err(), "cancelled");
}

/// The page's kernel view (`time_step_stepped`): on a GPU with timestamp
/// queries, every dispatch of the step, the same kernels in the same order
/// as the blocking `tinygpt bench --kernels`; with no GPU, the CPU's op
/// times and the line saying why.
#[test]
fn the_page_kernel_view_reads_timestamps_without_waiting() {
    let config = Config::load("tiny").unwrap();
    let ctx = common::gpu_context();
    let pause = || std::future::ready(());
    let page = pollster::block_on(time_step_stepped(
        "tiny",
        &config,
        Some(ctx.clone()),
        |why| format!("instead: {why}"),
        pause,
    ))
    .unwrap();
    if ctx
        .device
        .features()
        .contains(wgpu::Features::TIMESTAMP_QUERY)
    {
        assert_eq!(page.source, "gpu_timestamps");
        let blocking =
            tinygpt::bench::kernels::time_step("tiny", &config, [ctx.clone()], false).unwrap();
        let kernels = |k: &tinygpt::bench::kernels::KernelTimes| {
            k.rows
                .iter()
                .map(|r| (r.family.clone(), r.entry.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(kernels(&page), kernels(&blocking));
        assert!(page.rows.iter().all(|r| r.ms.is_finite() && r.ms >= 0.0));
        assert!(page.total_ms() > 0.0);
    } else {
        assert_eq!(page.source, "cpu_ops");
        assert!(page.note.unwrap().contains("no timestamp queries"));
    }
    let no_gpu = pollster::block_on(time_step_stepped(
        "tiny",
        &config,
        None,
        |why| format!("instead: {why}"),
        pause,
    ))
    .unwrap();
    assert_eq!(no_gpu.source, "cpu_ops");
    assert_eq!(no_gpu.note.as_deref(), Some("instead: no WebGPU adapter"));
    assert!(
        no_gpu
            .families
            .iter()
            .any(|f| f.family.contains("linear") && f.ms > 0.0)
    );
}
