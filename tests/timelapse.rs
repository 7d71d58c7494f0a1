//! The time-lapse and the head scores (issue 52): a frame recorded at step
//! s is what `tinygpt heads` computes from the checkpoint saved at step s,
//! bit for bit on the CPU (and a resumed run keeps its frames); the scores
//! are the hand formulas applied to `tinygpt attention`'s maps; the shipped
//! induction model's time-lapse shows the head forming and the loss on the
//! copies falling with it.

mod common;

use serde_json::Value;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::timelapse::{FORMED, frame_steps, induction_score, previous_token_score};

fn heads(checkpoint: &str) -> Value {
    common::json_lines(&["heads", "--checkpoint", checkpoint, "--json"]).remove(0)
}

/// The frame of `step` in the time-lapse of `checkpoint`, as `tinygpt
/// timelapse --json` prints it.
fn frame(checkpoint: &str, step: u64) -> Value {
    let t = common::json_lines(&["timelapse", "--checkpoint", checkpoint, "--json"]).remove(0);
    t["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["step"] == step)
        .unwrap_or_else(|| panic!("no frame of step {step}: {t}"))
        .clone()
}

#[test]
fn a_frame_is_a_fresh_probe_of_the_checkpoint_of_its_step() {
    let dir = common::scratch_dir("timelapse");
    let run = dir.join("run.safetensors");
    let run = run.to_str().unwrap();
    let train = |steps: &str, extra: &[&str]| {
        let mut args = vec!["train", "--corpus", "task:repeat", "--backend", "cpu", "--steps", steps, "--json"];
        args.extend_from_slice(extra);
        common::tinygpt(&args);
    };
    train("12", &["--preset", "repeat", "--seed", "3", "--out", run]);
    let first = Checkpoint::load(std::path::Path::new(run)).unwrap();
    let t = first.timelapse.as_ref().expect("a run records its time-lapse");
    // Every step of a run this short, the initial weights first.
    let steps: Vec<u64> = t.frames.iter().map(|f| f.step).collect();
    assert_eq!(steps, frame_steps(12));
    assert!(t.frames[0].loss.is_none() && t.frames[0].tensors.iter().all(|n| n.grad.is_none()));
    assert!(t.frames[1..].iter().all(|f| f.loss.is_some()
        && f.tensors.iter().all(|n| n.grad.is_some_and(|g| g > 0.0) && n.update.is_some_and(|u| u > 0.0))));
    let compare = |step: u64| {
        let fresh = heads(run);
        let recorded = frame(run, step);
        assert_eq!(fresh["step"], step);
        // Bit for bit: the same f32s, printed the same way.
        assert_eq!(fresh["heads"], recorded["heads"], "step {step}");
        assert_eq!(fresh["copy_loss"], recorded["copy_loss"], "step {step}");
        assert_eq!(fresh["fresh_loss"], recorded["fresh_loss"], "step {step}");
    };
    compare(12);
    // Resumed to 30 steps: the first frames stay as they were, the last
    // is the checkpoint's again.
    train("30", &["--resume", run]);
    let resumed = Checkpoint::load(std::path::Path::new(run)).unwrap();
    let t2 = resumed.timelapse.as_ref().unwrap();
    assert_eq!(t2.frames[..t.frames.len()], t.frames[..]);
    assert_eq!(t2.frames.last().unwrap().step, 30);
    assert!(t2.frames.windows(2).all(|w| w[0].step < w[1].step));
    compare(30);
    // The maps came back from the file as they were recorded.
    assert!(t2.frames.iter().all(|f| f.attention.as_ref().is_some_and(|m| m.len() == t2.map_len())));
    // Every frame of a model this small keeps its weights (what the scenes
    // recompute the model as it was from), and the last frame's are the
    // checkpoint's of its step, bit for bit, before and after the resume.
    assert!(t2.frames.iter().all(|f| f.weights.is_some()));
    let flat = |ck: &Checkpoint| -> Vec<f32> { ck.params.iter().flat_map(|p| p.values.iter().copied()).collect() };
    assert_eq!(**t.frames.last().unwrap().weights.as_ref().unwrap(), flat(&first));
    assert_eq!(**t2.frames.last().unwrap().weights.as_ref().unwrap(), flat(&resumed));
    assert_ne!(t2.frames[0].weights, t2.frames.last().unwrap().weights, "the weights moved");
    let json = common::json_lines(&["timelapse", "--checkpoint", run, "--json"]).remove(0);
    assert_eq!(json["weights"]["frames"].as_array().unwrap().len(), t2.frames.len());
    assert_eq!(json["weights"]["bytes"], 4 * flat(&resumed).len() * t2.frames.len());
}

#[test]
fn scores_are_the_formulas_on_the_attention_maps() {
    let h = heads("gallery:repeat");
    let sequences: Vec<String> = h["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let m = h["letters"].as_u64().unwrap() as usize;
    let mut induction = std::collections::HashMap::new();
    let mut previous = std::collections::HashMap::new();
    for seq in &sequences {
        assert_eq!(seq.len(), 2 * m);
        assert_eq!(seq[..m], seq[m..], "a string written twice");
        for row in common::json_lines(&["attention", "--checkpoint", "gallery:repeat", "--prompt", seq, "--json"]) {
            let p: Vec<f32> = row["p"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
                .collect();
            let key = (row["layer"].as_u64().unwrap(), row["head"].as_u64().unwrap());
            *induction.entry(key).or_insert(0.0f64) += induction_score(&p, m) as f64;
            *previous.entry(key).or_insert(0.0f64) += previous_token_score(&p, 2 * m) as f64;
        }
    }
    let count = sequences.len() as f64;
    let scores = h["heads"].as_array().unwrap();
    assert_eq!(scores.len(), induction.len());
    for s in scores {
        let key = (s["layer"].as_u64().unwrap(), s["head"].as_u64().unwrap());
        for (field, sums) in [("induction", &induction), ("previous_token", &previous)] {
            let by_hand = sums[&key] / count;
            let given = s[field].as_f64().unwrap();
            assert!((given - by_hand).abs() < 1e-6, "{key:?} {field}: {given} against {by_hand}");
        }
    }
}

/// The gallery's repeat model ships with the time-lapse of its run: one
/// head's induction score stays under 0.1, then passes 0.5 within 2,000
/// steps, and the loss on the copied letters falls with it while the loss
/// on the fresh letters (nothing to copy) does not.
#[test]
fn the_shipped_induction_model_shows_the_head_forming() {
    let ck = Checkpoint::load(std::path::Path::new("gallery:repeat")).unwrap();
    let t = ck.timelapse.expect("the gallery's repeat model ships with its time-lapse");
    let (formed, head) = t.induction_onset(FORMED).expect("an induction head formed");
    let score = |f: &tinygpt::model::timelapse::Frame| f.head(head.layer, head.head).unwrap().induction;
    let before = t
        .frames
        .iter()
        .rev()
        .find(|f| f.step < formed.step && score(f) < 0.1)
        .expect("the head's score was under 0.1 before it formed");
    assert!(
        formed.step - before.step <= 2000,
        "head {}.{} took from step {} to {} to pass {FORMED}",
        head.layer,
        head.head,
        before.step,
        formed.step
    );
    let last = t.frames.last().unwrap();
    assert!(score(last) > 0.8, "{}", score(last));
    // Copying learned: the copies' loss falls by more than a nat from
    // before the head to the end, the fresh letters' does not move as much.
    assert!(before.copy_loss - last.copy_loss > 1.0, "{} → {}", before.copy_loss, last.copy_loss);
    assert!(before.fresh_loss - last.fresh_loss < 0.5, "{} → {}", before.fresh_loss, last.fresh_loss);
    // It is block 1's: a head that reads what block 0 wrote.
    assert_eq!(head.layer, 1);
    // And the run is the card's: its steps and the frames' last.
    assert_eq!(last.step, ck.step);
    assert_eq!(t.frames.iter().map(|f| f.step).collect::<Vec<_>>(), frame_steps(ck.config.steps));
}

#[test]
fn a_checkpoint_without_a_time_lapse_says_so() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["timelapse", "--checkpoint", "gallery:tiny"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no time-lapse") && err.lines().count() == 1, "{err}");
}
