//! The "break it" labs change the function the model computes, on both
//! backends, the way each lesson says:
//! - without the causal mask, the output at position t depends on the byte at
//!   t + 1 (with the mask, not at all);
//! - without position embeddings, in one block, the output at t does not
//!   depend on the order of the bytes before it (with them, it does). (With
//!   more blocks, the mask itself leaks some order: position j's output
//!   depends on which bytes came before j.)
//! - a learning rate far too high blows the run up, and training stops with
//!   the reason instead of saving ruined weights.
//!
//! The kernels' parity with the CPU in the labs is in `tests/gpu.rs`, the
//! analytic gradient of unmasked attention in `tests/gradcheck.rs`.

mod common;

use common::{config, gpu_context};
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::rng::Rng;
use tinygpt::data::{Batch, Corpus};
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::{Config, Lab};
use tinygpt::probe::ProbeRequest;
use tinygpt::program::Program;
use tinygpt::train::{TrainError, Trainer};

/// A small model (T = 20: two attention tiles) with these switches.
fn lab_config(n_layer: usize, lab: Lab) -> Config {
    let mut cfg = config(n_layer, 2, 16, 20, 2, 0.0);
    cfg.lab = lab;
    cfg
}

/// Both backends of `cfg`'s program with the same random weights (std 0.3,
/// larger than GPT-2's init so that every path is visible in the logits).
fn backends(cfg: &Config) -> Vec<(&'static str, Box<dyn Backend>)> {
    let program = Program::new(cfg);
    let mut all: Vec<(&'static str, Box<dyn Backend>)> = vec![
        ("cpu", Box::new(CpuBackend::<f32>::new(program.clone()))),
        (
            "gpu",
            Box::new(GpuBackend::new(gpu_context(), program.clone()).unwrap()),
        ),
    ];
    let mut rng = Rng::new(11);
    for t in program.params() {
        let info = &program.tensors[t];
        let v: Vec<f32> = (0..info.numel())
            .map(|_| (rng.normal() * 0.3) as f32)
            .collect();
        for (_, b) in all.iter_mut() {
            b.write(&info.name, &v).unwrap();
        }
    }
    all
}

/// The logits (T, V) of `row` (the same bytes in every batch row).
fn logits(backend: &mut dyn Backend, cfg: &Config, row: &[u32]) -> Vec<f32> {
    let inputs = row.repeat(cfg.batch);
    let batch = Batch {
        batch: cfg.batch,
        ctx: cfg.ctx,
        targets: inputs.clone(),
        inputs,
    };
    let request = ProbeRequest::for_batch_row(cfg, batch, 0).unwrap();
    backend.probe(&request).unwrap().logits
}

/// max |a − b| over position `t`'s logits.
fn diff_at(a: &[f32], b: &[f32], t: usize) -> f32 {
    let v = tinygpt::model::config::VOCAB;
    a[t * v..(t + 1) * v]
        .iter()
        .zip(&b[t * v..(t + 1) * v])
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn bytes(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

#[test]
fn without_the_causal_mask_the_output_at_t_reads_the_byte_at_t_plus_1() {
    let row = bytes("To be, or not to be:");
    let t = 7; // predicts row[8] = 'n' from "To be, o"
    let mut changed = row.clone();
    changed[t + 1] = b'X' as u32;
    for causal_mask in [true, false] {
        let cfg = lab_config(
            2,
            Lab {
                causal_mask,
                position_embeddings: true,
            },
        );
        for (name, mut b) in backends(&cfg) {
            let (a, c) = (
                logits(b.as_mut(), &cfg, &row),
                logits(b.as_mut(), &cfg, &changed),
            );
            let d = diff_at(&a, &c, t);
            if causal_mask {
                // Masked keys contribute exactly nothing.
                assert_eq!(d, 0.0, "{name}, with the mask: position {t} moved by {d}");
                for earlier in 0..=t {
                    assert_eq!(diff_at(&a, &c, earlier), 0.0, "{name}: position {earlier}");
                }
            } else {
                assert!(
                    d > 1e-3,
                    "{name}, without the mask: position {t} should see byte {} (moved {d})",
                    t + 1
                );
            }
        }
    }
}

#[test]
fn without_position_embeddings_the_order_before_t_is_lost() {
    let row = bytes("abcdefghijklmnopqrst");
    let t = row.len() - 1;
    // The same bytes before t, in reverse order; t itself unchanged.
    let mut shuffled = row.clone();
    shuffled[..t].reverse();
    for position_embeddings in [true, false] {
        let cfg = lab_config(
            1,
            Lab {
                causal_mask: true,
                position_embeddings,
            },
        );
        for (name, mut b) in backends(&cfg) {
            let (a, s) = (
                logits(b.as_mut(), &cfg, &row),
                logits(b.as_mut(), &cfg, &shuffled),
            );
            let d = diff_at(&a, &s, t);
            let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            if position_embeddings {
                assert!(
                    d > 1e-3 * scale,
                    "{name}, with positions: reversing the bytes before {t} should matter (moved {d})"
                );
            } else {
                // The same set of keys and values in another order: equal up
                // to the order of a sum.
                assert!(
                    d <= 1e-5 * scale,
                    "{name}, without positions: position {t} moved by {d} (scale {scale})"
                );
            }
        }
    }
}

#[test]
fn the_labs_are_read_from_ron_and_named_in_words() {
    let cfg = Config::from_ron(
        &include_str!("../presets/tiny.ron")
            .replace("dropout: 0.0,", "dropout: 0.0, lab: (causal_mask: false),"),
        "lab.ron",
    )
    .unwrap();
    assert!(!cfg.lab.causal_mask && cfg.lab.position_embeddings);
    assert_eq!(cfg.lab.describe(), "no causal mask");
    // The intact model writes no `lab` field, so presets and checkpoints
    // from before the labs read and write the same.
    let intact = Config::load("tiny").unwrap();
    assert!(!ron::to_string(&intact).unwrap().contains("lab"));
    assert!(ron::to_string(&cfg).unwrap().contains("causal_mask:false"));
    let err = Config::from_ron(
        &include_str!("../presets/tiny.ron").replace("dropout: 0.0,", "lab: (mask: false),"),
        "bad.ron",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("bad.ron") && err.contains("mask"), "{err}");
}

#[test]
fn a_learning_rate_far_too_high_blows_up_and_stops_training() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.lr = 3.0; // 10,000× the preset's
    cfg.eval_interval = 0;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut run = Trainer::new(
        Box::new(CpuBackend::<f32>::new(Program::new(&cfg))),
        corpus,
        1,
    )
    .unwrap();
    let mut outcome = None;
    for _ in 0..50 {
        if let Err(e) = run.train_step() {
            outcome = Some(e);
            break;
        }
    }
    match outcome {
        Some(TrainError::Exploded { step, loss, .. }) => {
            assert!(loss > tinygpt::train::EXPLODED_LOSS && step <= 50);
            assert_eq!(run.history.last().map(|p| p.step), Some(step));
        }
        other => panic!("lr 3.0 should blow up within 50 steps, got {other:?}"),
    }
}

#[test]
fn the_cli_refuses_to_save_a_run_that_blew_up() {
    let dir = common::scratch_dir("labs");
    let out = dir.join("blown.safetensors");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "train",
            "--preset",
            "tiny",
            "--backend",
            "cpu",
            "--steps",
            "50",
        ])
        .args(["--lr", "3", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("blew up") && stderr.contains("--lr"),
        "the error names the cause and the fix: {stderr}"
    );
    assert!(!out.exists(), "ruined weights were saved");
}
