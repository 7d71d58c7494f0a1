//! The original TinyGPT's `.tinygpt` files (issue 36): one written by its own
//! model code (tests/reference/original-tinygpt: its C++, compiled with g++,
//! and its own fp16 converter run by node) loads and gives that code's
//! logits, trains on from its AdamW moments as that code does, imports
//! into a checkpoint, and bad files are refused by name.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::{Batch, Corpus};
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::config::VOCAB;
use tinygpt::program::Program;
use tinygpt::train::Trainer;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/original")
        .join(name)
}

/// What the original's code computed for its file (make_fixture.cpp).
fn reference() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixture("original.json")).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn bytes(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// A batch of the checkpoint's size with `window` in every row (the
/// original's forward ran it alone: B 1).
fn window_batch(ck: &Checkpoint, window: &[u32]) -> Batch {
    let (b, t) = (ck.config.batch, ck.config.ctx);
    assert_eq!(window.len(), t);
    Batch {
        batch: b,
        ctx: t,
        inputs: window.repeat(b),
        targets: window.repeat(b),
    }
}

/// Row 0's logits (T, V) of a CPU forward pass in f32.
fn logits(ck: &Checkpoint, batch: &Batch) -> Vec<f32> {
    let mut be = CpuBackend::<f32>::new(Program::new(&ck.config));
    for p in &ck.params {
        be.write(&p.name, &p.values).unwrap();
    }
    be.eval_loss(batch);
    be.read("logits").unwrap()[..ck.config.ctx * VOCAB].to_vec()
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn a_file_of_the_original_gives_its_own_logits() {
    let ck = Checkpoint::load(&fixture("original.tinygpt")).unwrap();
    let c = &ck.config;
    assert_eq!((c.n_layer, c.n_head, c.d_model, c.ctx), (2, 2, 32, 16));
    assert_eq!(ck.step, 40, "the step its file records");
    assert!(ck.optimizer.is_some(), "its file holds AdamW's moments");
    assert_eq!(ck.loss_history.len(), 40);
    let want = reference();
    let got = logits(&ck, &window_batch(&ck, &bytes(&want["prompt"])));
    let d = largest_difference(&got, &floats(&want["logits"]));
    eprintln!("largest difference from the original's logits: {d:e}");
    assert!(d <= 1e-5, "logits differ from the original's by {d:e}");
}

/// The moments come across with the weights (transposed and stacked like
/// them): one AdamW step from the imported file on the original's batch
/// lands where the original's own step did.
#[test]
fn training_goes_on_from_its_adamw_moments_as_the_original_does() {
    let ck = Checkpoint::load(&fixture("original.tinygpt")).unwrap();
    let want = reference();
    let windows = bytes(&want["step_batch"]);
    let (t, b) = (ck.config.ctx, ck.config.batch);
    assert_eq!(windows.len(), b * (t + 1));
    let rows: Vec<&[u32]> = windows.chunks(t + 1).collect();
    let batch = Batch {
        batch: b,
        ctx: t,
        inputs: rows.iter().flat_map(|r| r[..t].to_vec()).collect(),
        targets: rows.iter().flat_map(|r| r[1..].to_vec()).collect(),
    };
    assert_eq!(ck.config.lr, want["step_lr"].as_f64().unwrap() as f32);
    let backend = Box::new(CpuBackend::<f32>::new(Program::new(&ck.config)));
    let corpus = Corpus::from_bytes("original", &b"First Citizen:\n".repeat(20), 16).unwrap();
    let mut trainer = Trainer::resume(backend, corpus, &ck).unwrap();
    let metrics = trainer.train_on(&batch).unwrap();
    let step_loss = want["step_loss"].as_f64().unwrap() as f32;
    assert!(
        (metrics.loss - step_loss).abs() <= 1e-5,
        "the step's loss {} is not the original's {step_loss}",
        metrics.loss
    );
    let after = trainer.checkpoint(false).unwrap();
    let got = logits(&after, &window_batch(&after, &bytes(&want["prompt"])));
    let d = largest_difference(&got, &floats(&want["logits_after_step"]));
    eprintln!("largest difference after one AdamW step: {d:e}");
    // Without the moments (a fresh AdamW) the step moves the weights by the
    // full learning rate, and the logits by far more than this.
    assert!(d <= 1e-4, "after one step the logits differ by {d:e}");
    let mut fresh = ck.clone();
    fresh.optimizer = None;
    let backend = Box::new(CpuBackend::<f32>::new(Program::new(&ck.config)));
    let corpus = Corpus::from_bytes("original", &b"First Citizen:\n".repeat(20), 16).unwrap();
    let mut trainer = Trainer::resume(backend, corpus, &fresh).unwrap();
    trainer.train_on(&batch).unwrap();
    let without = trainer.checkpoint(false).unwrap();
    let far = largest_difference(
        &logits(&without, &window_batch(&without, &bytes(&want["prompt"]))),
        &floats(&want["logits_after_step"]),
    );
    assert!(far > 100.0 * d, "the moments made no difference ({far:e} vs {d:e})");
}

/// Its gallery's compact form (weights only, f16, written by its own
/// convert_to_fp16) loads too, within f16's rounding of the f32 logits.
#[test]
fn its_fp16_file_loads() {
    let ck = Checkpoint::load(&fixture("original-fp16.tinygpt")).unwrap();
    assert!(ck.optimizer.is_none());
    let want = reference();
    let got = logits(&ck, &window_batch(&ck, &bytes(&want["prompt"])));
    let reference = floats(&want["logits"]);
    let d = largest_difference(&got, &reference);
    let largest = reference.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    eprintln!("fp16 file: largest logit difference {d:e} (largest logit {largest})");
    assert!(d > 0.0 && d <= 2e-3 * largest, "fp16 logits differ by {d:e}");
}

#[test]
fn import_writes_a_checkpoint_every_tool_reads_and_never_overwrites() {
    let dir = common::scratch_dir("original-import");
    let out = dir.join("imported.safetensors");
    let _ = std::fs::remove_file(&out);
    let src = fixture("original.tinygpt").display().to_string();
    let (said, _) = common::tinygpt(&["import", &src, "--out", out.to_str().unwrap()]);
    assert!(said.contains("with AdamW's moments"), "{said}");
    let (a, b) = (
        Checkpoint::load(&fixture("original.tinygpt")).unwrap(),
        Checkpoint::load(&out).unwrap(),
    );
    assert_eq!(a.params, b.params);
    assert_eq!(a.optimizer, b.optimizer);
    // A second import onto the same file is refused, the file kept.
    let before = std::fs::read(&out).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["import", &src, "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // The app and the rest of the CLI read the file as it is.
    let (text, _) = common::tinygpt(&["generate", "--checkpoint", &src, "--prompt", "First", "--tokens", "20", "--seed", "1", "--backend", "cpu"]);
    assert!(text.starts_with("First"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Refused by name: truncated, not JSON, another version, another MLP,
/// another vocabulary; and a file that is not a .tinygpt given to import.
#[test]
fn bad_tinygpt_files_are_refused_by_name() {
    let good = std::fs::read(fixture("original.tinygpt")).unwrap();
    let header_len = u32::from_le_bytes(good[8..12].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&good[12..12 + header_len]).unwrap();
    let state = &good[12 + header_len..];
    let file = tinygpt::model::original::encode;
    let mut wide = header.clone();
    wide["config"]["dMlp"] = 96.into();
    wide.as_object_mut().unwrap().remove("manifest");
    // 300 tokens: 44 more rows of 32 in w, m and v.
    let mut vocab = state.to_vec();
    vocab.extend(vec![0u8; 44 * 32 * 12]);
    let mut version = good.clone();
    version[4] = 9;
    let mut json = good.clone();
    json[12] = b'!';
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 100].to_vec(), "truncated"),
        ("header", good[..40].to_vec(), "header says it is"),
        ("json", json, "not valid JSON"),
        ("version", version, "version 9"),
        ("mlp", file(&wide, state), "its MLP is 96 wide"),
        ("vocab", file(&header, &vocab), "another vocabulary: its token embedding has 300 rows"),
    ];
    let dir = common::scratch_dir("original-bad");
    for (tag, bytes, says) in cases {
        let path = dir.join(format!("{tag}.tinygpt"));
        std::fs::write(&path, bytes).unwrap();
        let err = Checkpoint::load(&path).unwrap_err().to_string();
        assert!(err.contains(says), "{tag}: {err}");
        assert!(err.contains(&path.display().to_string()), "{tag}: {err}");
        // The command line: one line, no panic.
        let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args(["import", path.to_str().unwrap(), "--out"])
            .arg(dir.join(format!("{tag}.safetensors")))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && stderr.contains(says), "{tag}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{tag}: {stderr}");
        assert!(!dir.join(format!("{tag}.safetensors")).exists());
    }
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["import", "assets/checkpoints/tiny.safetensors", "--out"])
        .arg(dir.join("tiny.safetensors"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&run.stderr).contains("is not a .tinygpt file"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The fixtures are what the original's code writes: where g++ and node
/// are installed, make-fixtures.sh writes them again, byte for byte (its
/// fp16 converter stamps the time: there, the model's bytes).
#[test]
fn the_fixtures_are_what_the_original_code_writes() {
    let has = |tool: &str| Command::new(tool).arg("--version").output().is_ok();
    if !has("g++") || !has("node") {
        eprintln!("skipped: make-fixtures.sh needs g++ and node");
        return;
    }
    let dir = common::scratch_dir("original-remake");
    let run = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/original-tinygpt/make-fixtures.sh"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    for name in ["original.tinygpt", "original.json"] {
        assert!(
            std::fs::read(dir.join(name)).unwrap() == std::fs::read(fixture(name)).unwrap(),
            "{name} differs from what the original's code writes"
        );
    }
    let tail = |p: &Path| {
        let b = std::fs::read(p).unwrap();
        let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        b[12 + n..].to_vec()
    };
    assert!(tail(&dir.join("original-fp16.tinygpt")) == tail(&fixture("original-fp16.tinygpt")));
    let _ = std::fs::remove_dir_all(dir);
}
