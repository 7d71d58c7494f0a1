//! A save killed (SIGKILL) at every stage, and a save that fails (issue 18):
//! the checkpoint on disk is always the old one or the new one, complete and
//! loadable, never a torn file, and nothing the run trained is lost.
//!
//! The process is stopped at a known point by its own event, not by timing:
//! `TINYGPT_TEST_SAVE_PAUSE=N` makes the N-th stage of the save print a line
//! and wait, and the test kills it when it reads that line.

#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use tinygpt::model::checkpoint::{Checkpoint, Precision, SaveStage};

/// tiny's recipe with a wider model, so its checkpoint (5 MB with AdamW's
/// moments) is written in several 1 MiB pieces, each a stage to kill at.
fn preset(dir: &Path) -> String {
    let text = include_str!("../presets/tiny.ron")
        .replace("n_head: 3", "n_head: 4")
        .replace("d_model: 48", "d_model: 128")
        .replace("ctx: 32", "ctx: 8")
        .replace("batch: 16", "batch: 2")
        .replace("eval_interval: 200", "eval_interval: 0");
    let path = dir.join("wide.ron");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The wide preset in `dir` and a checkpoint of it trained 2 steps, with
/// its bytes: the old checkpoint a save goes over.
fn trained(dir: &Path) -> (String, std::path::PathBuf, Vec<u8>) {
    let preset = preset(dir);
    let target = dir.join("run.safetensors");
    let target_arg = target.display().to_string();
    common::tinygpt(&[
        "train",
        "--preset",
        &preset,
        "--steps",
        "2",
        "--backend",
        "cpu",
        "--out",
        &target_arg,
    ]);
    let old = std::fs::read(&target).unwrap();
    (preset, target, old)
}

/// Temporary files left in `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// Starts `command` with the save paused at stage `n`; returns the stage's
/// description once the process has reached it and been killed, or `None`
/// when the process finished without reaching stage `n` (there is none).
fn kill_at_stage(mut command: Command, n: usize) -> Option<String> {
    let mut child = command
        .env("TINYGPT_TEST_SAVE_PAUSE", n.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        if let Some(stage) = line.strip_prefix(&format!("tinygpt: save paused at stage {n} ")) {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            return Some(stage.to_string());
        }
        seen.push(line);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "stage {n}: {}", seen.join("\n"));
    None
}

/// Kills `command`'s save at every stage; after each kill the checkpoint at
/// `target` must be `old` (before the rename) or a complete new checkpoint
/// (from the rename on). Returns the number of stages.
fn kill_at_every_stage(make: impl Fn() -> Command, target: &Path, old: &[u8]) -> usize {
    let dir = target.parent().unwrap();
    let mut n = 0;
    while let Some(stage) = kill_at_stage(make(), n) {
        let now = std::fs::read(target).unwrap();
        if stage.contains("Renamed") {
            assert_ne!(now, old, "stage {n} {stage}: the rename happened");
            let new =
                Checkpoint::from_bytes(&now, "new").unwrap_or_else(|e| panic!("stage {n}: {e}"));
            assert!(new.optimizer.is_some());
        } else {
            assert_eq!(now, old, "stage {n} {stage}: the old checkpoint, untouched");
            // The killed save's temporary file is left, until the next save.
            assert_eq!(
                temp_files(dir).len(),
                1,
                "stage {n} {stage}: {:?}",
                temp_files(dir)
            );
        }
        n += 1;
    }
    n
}

#[test]
fn a_save_killed_at_any_stage_leaves_the_old_or_the_new_checkpoint() {
    let dir = common::scratch_dir("save-kill");
    let (preset, target, old) = trained(&dir);
    let target_arg = target.display().to_string();
    assert!(
        old.len() > 4 << 20,
        "{} bytes: the save has several pieces",
        old.len()
    );
    let train = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tinygpt"));
        c.args([
            "train",
            "--preset",
            &preset,
            "--steps",
            "3",
            "--backend",
            "cpu",
            "--force",
            "--out",
            &target_arg,
        ]);
        c
    };
    let stages = kill_at_every_stage(train, &target, &old);
    // Created, 5 or 6 pieces, Synced, Renamed.
    assert!(stages >= 7, "{stages} stages");
    // The next save removes what the killed ones left.
    common::tinygpt(&[
        "train",
        "--preset",
        &preset,
        "--steps",
        "3",
        "--backend",
        "cpu",
        "--force",
        "--out",
        &target_arg,
    ]);
    assert_eq!(temp_files(&dir), Vec::<String>::new());
    assert_eq!(Checkpoint::load(&target).unwrap().step, 3);

    // The app's Save checkpoint (headless, to its default file in the
    // working folder), over a checkpoint of the same run trained 2 steps.
    let app_target = dir.join("tinygpt-app.safetensors");
    std::fs::copy(&target, &app_target).unwrap();
    let old = std::fs::read(&app_target).unwrap();
    let app = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tinygpt"));
        c.current_dir(&dir).args([
            "app",
            "--headless",
            "--preset",
            &preset,
            "--backend",
            "cpu",
            "--frames",
            "3",
            "--width",
            "320",
            "--height",
            "240",
            "--export",
            "checkpoint",
            "--force",
        ]);
        c
    };
    let stages = kill_at_every_stage(app, &app_target, &old);
    assert!(stages >= 7, "{stages} stages");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_failed_save_keeps_the_previous_checkpoint_at_every_stage() {
    let dir = common::scratch_dir("save-fail");
    let path = dir.join("c.safetensors");
    let program = tinygpt::program::Program::new(&common::config(1, 2, 16, 8, 2, 0.0));
    let checkpoint = |seed| Checkpoint {
        config: program.config.clone(),
        step: seed,
        seed,
        sampler_state: None,
        loss_history: vec![],
        timelapse: None,
        params: tinygpt::model::params::init_params(&program, seed),
        optimizer: None,
    };
    checkpoint(1).save(&path, Precision::F32).unwrap();
    let before = std::fs::read(&path).unwrap();
    // Every stage up to the rename, the way a full disk or a lost folder fails it.
    let mut stages = Vec::new();
    checkpoint(2)
        .save_observed(&dir.join("probe.safetensors"), Precision::F32, &mut |s| {
            stages.push(s);
            Ok(())
        })
        .unwrap();
    assert_eq!(stages.first(), Some(&SaveStage::Created));
    assert_eq!(
        &stages[stages.len() - 2..],
        &[SaveStage::Synced, SaveStage::Renamed]
    );
    for fail in stages.iter().filter(|s| **s != SaveStage::Renamed) {
        let err = checkpoint(2)
            .save_observed(&path, Precision::F32, &mut |s| {
                if s == *fail {
                    Err(std::io::Error::other("no space left on device"))
                } else {
                    Ok(())
                }
            })
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no space left") && err.contains("c.safetensors"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), before, "failed at {fail:?}");
        assert_eq!(temp_files(&dir), Vec::<String>::new(), "failed at {fail:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_run_whose_save_fails_keeps_its_weights_in_a_rescue_file() {
    let dir = common::scratch_dir("save-rescue");
    let (preset, target, old) = trained(&dir);
    let target_arg = target.display().to_string();
    // The disk "fills" at the save's first piece of data.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "train",
            "--preset",
            &preset,
            "--steps",
            "3",
            "--backend",
            "cpu",
            "--force",
            "--out",
            &target_arg,
        ])
        .env("TINYGPT_TEST_SAVE_FAIL", "1")
        .env("TMPDIR", &dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the save to --out failed: {stderr}");
    assert!(
        stderr.contains("no space left on device") && stderr.contains("not lost"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&target).unwrap(),
        old,
        "the old checkpoint is untouched"
    );
    let rescued: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("rescued"))
        .collect();
    assert_eq!(rescued.len(), 1, "{stderr}");
    assert!(
        stderr.contains(&rescued[0].display().to_string()),
        "the message names it: {stderr}"
    );
    let ck = Checkpoint::load(&rescued[0]).unwrap();
    assert_eq!((ck.step, ck.optimizer.is_some()), (3, true));
    // And it resumes.
    let rescued_arg = rescued[0].display().to_string();
    common::tinygpt(&[
        "train",
        "--resume",
        &rescued_arg,
        "--steps",
        "4",
        "--backend",
        "cpu",
        "--force",
        "--out",
        &target_arg,
    ]);
    assert_eq!(Checkpoint::load(&target).unwrap().step, 4);
    std::fs::remove_dir_all(dir).unwrap();
}
