//! Checkpoints written by PyTorch come back into tinygpt (issue 19):
//! - `tiny-torch.safetensors`: the shipped tiny, continued 200 steps by
//!   `tests/reference/tinygpt_torch.py continue` on an H200 (made by
//!   `tests/reference/roundtrip.sh`);
//! - `from-nanogpt.safetensors`: a nanoGPT checkpoint (its `model`,
//!   `model_args`, `optimizer` and `config`) converted by `tinygpt_torch.py
//!   from-nanogpt` (its selftest).
//!
//! Each loads with its AdamW moments, resumes where PyTorch left it, and
//! writes text. The Python side is tested where PyTorch is (.ci/run runs
//! the selftest if it can; `roundtrip.sh` and `nanogpt_check.py` on a GPU host).

mod common;

use common::tinygpt;

use std::path::PathBuf;
use tinygpt::model::checkpoint::Checkpoint;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn a_run_continued_by_pytorch_resumes_where_it_left_off() {
    let path = fixture("tiny-torch.safetensors");
    let ckpt = Checkpoint::load(&path).unwrap();
    let shipped = Checkpoint::load(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/checkpoints/tiny.safetensors"),
    )
    .unwrap();
    assert_eq!(ckpt.config.n_layer, shipped.config.n_layer);
    assert_eq!(ckpt.step, shipped.step + 200, "200 steps in PyTorch");
    assert!(
        ckpt.config.steps >= ckpt.step,
        "its config lets it train on"
    );
    assert!(ckpt.optimizer.is_some(), "AdamW's moments came back");
    assert!(ckpt.sampler_state.is_some(), "and the batch stream's state");
    // The weights moved, and the history runs on from the shipped one.
    assert_ne!(ckpt.params, shipped.params);
    let last = *ckpt.loss_history.last().unwrap();
    assert_eq!(last.step, ckpt.step);
    assert!(last.val_loss.is_some());
    assert!(ckpt.loss_history.len() > shipped.loss_history.len());

    let dir = common::scratch_dir("torch-roundtrip");
    let out = dir.join("resumed.safetensors");
    let until = (ckpt.step + 20).to_string();
    let (stdout, _) = tinygpt(&[
        "train",
        "--resume",
        path.to_str().unwrap(),
        "--steps",
        &until,
        "--backend",
        "cpu",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let steps: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 20);
    assert_eq!(steps[0]["step"], ckpt.step + 1);
    // It carries on from PyTorch's loss (a fresh model would be at 5.5).
    let mean: f64 = steps
        .iter()
        .map(|s| s["loss"].as_f64().unwrap())
        .sum::<f64>()
        / 20.0;
    assert!(
        (mean - last.loss as f64).abs() < 0.3,
        "resumed at {mean}, PyTorch left it at {}",
        last.loss
    );
    let (text, _) = tinygpt(&[
        "generate",
        "--checkpoint",
        out.to_str().unwrap(),
        "--prompt",
        "ROMEO:",
        "--tokens",
        "80",
        "--backend",
        "cpu",
    ]);
    assert!(text.starts_with("ROMEO:") && text.len() >= 80, "{text}");
}

#[test]
fn a_converted_nanogpt_checkpoint_loads_resumes_and_writes() {
    let path = fixture("from-nanogpt.safetensors");
    let ckpt = Checkpoint::load(&path).unwrap();
    let c = &ckpt.config;
    assert_eq!(
        (c.n_layer, c.n_head, c.d_model, c.ctx, c.batch),
        (1, 2, 32, 16, 4)
    );
    assert_eq!(ckpt.step, 3, "nanoGPT's iter_num");
    assert!(ckpt.optimizer.is_some(), "nanoGPT's AdamW moments, by name");
    assert!(matches!(
        c.schedule,
        tinygpt::model::config::Schedule::WarmupCosine {
            warmup_steps: 1,
            decay_steps: 10,
            ..
        }
    ));
    let dir = common::scratch_dir("from-nanogpt");
    let out = dir.join("resumed.safetensors");
    let (stdout, _) = tinygpt(&[
        "train",
        "--resume",
        path.to_str().unwrap(),
        "--steps",
        "8",
        "--backend",
        "cpu",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(stdout.lines().count(), 5);
    let (text, _) = tinygpt(&[
        "generate",
        "--checkpoint",
        out.to_str().unwrap(),
        "--tokens",
        "40",
        "--backend",
        "cpu",
    ]);
    assert!(!text.is_empty());
}
