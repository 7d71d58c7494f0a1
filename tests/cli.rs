//! The command line, run as a user runs it: bad arguments exit non-zero with
//! one clear line (no panic, no backtrace); good ones train, resume, generate
//! and benchmark.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn tinygpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn tmpdir(tag: &str) -> PathBuf {
    common::scratch_dir(&format!("cli-{tag}"))
}

/// Runs, expects failure with a one-line message containing `needle`.
fn fails(args: &[&str], needle: &str) {
    let out = tinygpt(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{args:?} panicked: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: expected one line, got:\n{stderr}"
    );
    assert!(
        lines[0].contains(needle),
        "{args:?}: expected `{needle}` in `{}`",
        lines[0]
    );
}

#[test]
fn bad_arguments_exit_nonzero_with_one_line() {
    let dir = tmpdir("bad");
    let out = dir.join("o.safetensors");
    let out = out.to_str().unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "too short for any context").unwrap();
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let corrupt = dir.join("corrupt.safetensors");
    std::fs::write(
        &corrupt,
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all",
    )
    .unwrap();
    let bad_preset = dir.join("bad.ron");
    std::fs::write(
        &bad_preset,
        "(n_layer: 2, n_head: 5, d_model: 48, ctx: 8, batch: 2, steps: 3, lr: 1e-3)",
    )
    .unwrap();

    fails(
        &["train", "--preset", "gigantic", "--out", out],
        "unknown preset `gigantic`",
    );
    fails(
        &[
            "train",
            "--preset",
            bad_preset.to_str().unwrap(),
            "--out",
            out,
        ],
        "`n_head`",
    );
    fails(
        &[
            "train",
            "--preset",
            "tiny",
            "--corpus",
            "/nonexistent/corpus.txt",
            "--out",
            out,
        ],
        "/nonexistent/corpus.txt",
    );
    fails(
        &[
            "train",
            "--preset",
            "tiny",
            "--corpus",
            short.to_str().unwrap(),
            "--out",
            out,
        ],
        "too short",
    );
    fails(
        &[
            "train",
            "--preset",
            "tiny",
            "--corpus",
            empty.to_str().unwrap(),
            "--out",
            out,
        ],
        "too short",
    );
    fails(&["train", "--steps", "0"], "--steps");
    fails(&["train", "--lr", "0"], "must be a finite number > 0");
    fails(&["train", "--lr", "-1e-3"], "--lr");
    fails(&["train", "--lr", "NaN"], "must be a finite number > 0");
    fails(&["train", "--lr", "inf"], "must be a finite number > 0");
    fails(
        &[
            "train",
            "--preset",
            "tiny",
            "--out",
            "/nonexistent/dir/x.safetensors",
        ],
        "cannot write checkpoint",
    );
    fails(
        &["train", "--resume", corrupt.to_str().unwrap()],
        "not a valid safetensors file",
    );
    fails(&["train", "--frobnicate"], "--frobnicate");
    fails(
        &["generate", "--checkpoint", corrupt.to_str().unwrap()],
        "not a valid safetensors file",
    );
    fails(
        &["generate", "--checkpoint", "/nonexistent.safetensors"],
        "cannot read checkpoint",
    );
    fails(
        &["generate", "--checkpoint", out, "--temperature", "-1"],
        "must be a finite number >= 0",
    );
    fails(
        &["generate", "--checkpoint", out, "--top-k", "0"],
        "--top-k",
    );
    fails(
        &["generate", "--checkpoint", out, "--top-k", "257"],
        "--top-k",
    );
    fails(&["generate"], "--checkpoint");
    fails(
        &["bench", "--presets", "tiny,nope"],
        "unknown preset `nope`",
    );
    fails(&["bench", "--backend", "quantum"], "quantum");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn train_resume_generate_export_and_bench() {
    let dir = tmpdir("good");
    let ck = dir.join("tiny.safetensors");
    let ck_s = ck.to_str().unwrap();

    let out = tinygpt(&[
        "train", "--preset", "tiny", "--steps", "4", "--json", "--out", ck_s,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["step"], i as u64 + 1);
        for key in ["loss", "grad_norm", "lr", "ms", "tokens_per_s"] {
            assert!(l[key].as_f64().unwrap().is_finite(), "{key}");
        }
    }
    assert!(
        lines[3]["val_loss"].as_f64().unwrap().is_finite(),
        "the last step evaluates"
    );

    let out = tinygpt(&["train", "--resume", ck_s, "--steps", "6", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [5, 6]);

    let out = tinygpt(&[
        "generate",
        "--checkpoint",
        ck_s,
        "--prompt",
        "ROMEO:",
        "--tokens",
        "40",
        "--seed",
        "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.starts_with(b"ROMEO:"));
    let again = tinygpt(&[
        "generate",
        "--checkpoint",
        ck_s,
        "--prompt",
        "ROMEO:",
        "--tokens",
        "40",
        "--seed",
        "3",
    ]);
    assert_eq!(out.stdout, again.stdout, "same seed, same text");
    let greedy = tinygpt(&[
        "generate",
        "--checkpoint",
        ck_s,
        "--temperature",
        "0",
        "--tokens",
        "10",
    ]);
    assert!(greedy.status.success());

    let half = dir.join("half.safetensors");
    let out = tinygpt(&[
        "export",
        "--checkpoint",
        ck_s,
        "--out",
        half.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Weights only, in half precision: no AdamW moments, every tensor f16
    // (the time-lapse's maps and kept weights too, the weights within an
    // export's budget), each parameter half its f32 bytes.
    let (half_bytes, ck_bytes) = (std::fs::read(&half).unwrap(), std::fs::read(&ck).unwrap());
    let exported = safetensors::SafeTensors::deserialize(&half_bytes).unwrap();
    let full = safetensors::SafeTensors::deserialize(&ck_bytes).unwrap();
    assert!(full.names().iter().any(|n| n.starts_with("adam.")), "the checkpoint resumes");
    assert!(exported.names().iter().all(|n| !n.starts_with("adam.")));
    for (name, view) in exported.tensors() {
        assert_eq!(view.dtype(), safetensors::Dtype::F16, "{name}");
        if let Ok(f32s) = full.tensor(&name)
            && !name.starts_with("timelapse.")
        {
            assert_eq!(2 * view.data().len(), f32s.data().len(), "{name}");
        }
    }
    let kept = exported.tensor(tinygpt::model::checkpoint::TIMELAPSE_WEIGHTS).map_or(0, |v| v.data().len());
    assert!(kept <= tinygpt::model::timelapse::EXPORT_WEIGHT_BUDGET, "{kept} bytes of kept weights");

    let out = tinygpt(&[
        "bench",
        "--presets",
        "tiny",
        "--seconds",
        "0.2",
        "--warmup",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(r["preset"], "tiny");
    assert_eq!(r["params"], 70464);
    for key in ["median_ms", "min_ms", "max_ms", "tokens_per_s", "first_step_ms"] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key}");
    }
    // `--warmup 1` is the first step alone: no further warm-up steps.
    assert_eq!(r["warmup_ms"].as_f64(), Some(0.0));
    assert!(r["machine"]["cores"].as_u64().unwrap() >= 1);

    let out = tinygpt(&["presets"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("473,244,160"));
    let out = tinygpt(&["--help"]);
    assert!(out.status.success());
    // `tinygpt` alone opens the explainer; without a display it says so in
    // one line and names the way to run without one.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("display") && err.contains("--headless"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Bad inputs found when tried as a new user would (issue 18): each is
/// refused up front with one line, before a run or an allocation is spent.
#[test]
fn folders_huge_counts_and_empty_shapes_are_refused_up_front() {
    let dir = tmpdir("upfront");
    let d = dir.to_str().unwrap();
    let slash = format!("{d}/");
    // An existing folder, `.`, and a name ending in a slash: no training.
    for out in [d, ".", slash.as_str()] {
        fails(
            &["train", "--preset", "tiny", "--steps", "1", "--out", out],
            "folder",
        );
    }
    fails(
        &[
            "generate",
            "--checkpoint",
            "x.safetensors",
            "--tokens",
            "18446744073709551615",
        ],
        "tokens",
    );
    fails(
        &[
            "generate",
            "--checkpoint",
            "x.safetensors",
            "--tokens",
            "1000000000000",
        ],
        "tokens",
    );
    fails(&["bench", "--matmul", "0x0x0"], "at least 1");
}
