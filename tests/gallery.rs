//! The gallery (issue 36): `tinygpt gallery --json` lists the trained
//! models that ship, each card read from its checkpoint, and every command
//! that loads a checkpoint takes `gallery:ID` for the same bytes.

mod common;

use std::process::Command;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::gallery;

#[test]
fn the_gallery_lists_its_models_and_gallery_ids_load_them() {
    let (out, _) = common::tinygpt(&["gallery", "--json"]);
    let cards: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(cards.len() >= 2, "{out}");
    for card in &cards {
        let id = card["id"].as_str().unwrap();
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(card["file"].as_str().unwrap());
        let ck = Checkpoint::load(&file).unwrap();
        assert_eq!(card["bytes"].as_u64().unwrap(), std::fs::metadata(&file).unwrap().len());
        assert_eq!(card["steps"].as_u64().unwrap(), ck.step);
        let trained = ck.loss_history.iter().rev().find_map(|p| p.val_loss).unwrap();
        assert_eq!(card["trained_val_loss"].as_f64().unwrap() as f32, trained, "{id}");
        // Its training loss: the mean of the last 50 steps recorded.
        let last = &ck.loss_history[ck.loss_history.len().saturating_sub(50)..];
        let mean = last.iter().map(|p| p.loss).sum::<f32>() / last.len() as f32;
        assert_eq!(card["train_loss"].as_f64().unwrap() as f32, mean, "{id}");
        // Its sample continues its own prompt, and a second listing writes
        // the same one (a fixed seed).
        let sample = card["sample"].as_str().unwrap();
        let entry = gallery::find(id).unwrap();
        assert!(sample.starts_with(&entry.sample_prompt()) && sample.len() > entry.sample_prompt().len(), "{id}: {sample}");
        assert_eq!(tinygpt::cards::sample(&entry, &ck).unwrap(), sample, "{id}");
        let params: usize = ck.params.iter().map(|p| p.values.len()).sum();
        assert_eq!(card["params"].as_u64().unwrap() as usize, params, "{id}");
        for key in ["preset", "corpus", "source", "licence", "command"] {
            assert!(!card[key].as_str().unwrap().is_empty(), "{id}: {key}");
        }
        // The same model by its gallery id as by its file.
        assert_eq!(Checkpoint::load(std::path::Path::new(&format!("gallery:{id}"))).unwrap(), ck);
        let eval = |arg: &str| {
            let (out, _) = common::tinygpt(&["eval", "--validation", "--checkpoint", arg]);
            serde_json::from_str::<serde_json::Value>(&out).unwrap()
        };
        let by_id = eval(&format!("gallery:{id}"));
        // A file is read on TinyShakespeare unless told its text.
        let corpus = card["corpus"].as_str().unwrap();
        let (by_file, _) = common::tinygpt(&[
            "eval", "--validation", "--checkpoint", file.to_str().unwrap(), "--corpus", &format!("gallery:{id}"),
        ]);
        assert_eq!(by_id, serde_json::from_str::<serde_json::Value>(&by_file).unwrap(), "{id}");
        // `eval` measures the loss the card says, on the run's own
        // validation batches of the model's own text ...
        let val = by_id["val_loss"].as_f64().unwrap() as f32;
        let shown = card["val_loss"].as_f64().unwrap() as f32;
        assert!((val - shown).abs() <= 1e-5, "{id}: eval {val}, card {shown}");
        // ... which is the loss the run recorded, up to what its storage
        // costs (nothing for f32: within 1e-5).
        let precision = card["precision"].as_str().unwrap();
        let bound = gallery::loss_bound(precision).unwrap();
        assert!(
            (val - trained).abs() <= bound,
            "{id} ({precision}, {corpus}): {val} now against {trained} in training, more than {bound}"
        );
        assert_eq!(card["accuracy"].is_null(), !corpus.starts_with("task:"), "{id}");
    }
    // An id it does not have: one line naming the ones it has.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["generate", "--checkpoint", "gallery:nope"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("gallery:small") && err.lines().count() == 1, "{err}");
    // Resuming a gallery model needs somewhere to write; nothing is written.
    let dir = common::scratch_dir("gallery");
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .current_dir(&dir)
        .args(["train", "--resume", "gallery:tiny", "--steps", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--out"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// Each toy task's accuracy, as the card reports it, is what greedy
/// sampling (the path `tinygpt generate --temperature 0` takes) gives on the
/// held-out examples, answer and newline; and the models work.
#[test]
fn task_models_answer_the_held_out_examples() {
    use tinygpt::sample::{SampleOptions, generate};
    let greedy = SampleOptions {
        temperature: 0.0,
        ..Default::default()
    };
    for entry in gallery::entries() {
        let Some(task) = entry.task() else { continue };
        let ck = entry.checkpoint().unwrap();
        let mut generator = tinygpt::cpu::generate::Generator::new(&ck.config, &ck.params).unwrap();
        let (train, held_out) = task.examples();
        assert!(!held_out.iter().any(|e| train.contains(e)), "held out means unseen");
        let right = held_out
            .iter()
            .filter(|example| {
                let (prompt, answer) = task.split(example);
                generate(&mut generator, prompt, answer.len(), &greedy, |_| {}) == answer
            })
            .count();
        let card = tinygpt::cards::card(&entry).unwrap();
        let accuracy = right as f32 / held_out.len() as f32;
        assert_eq!(card.accuracy, Some(accuracy), "{}", entry.id);
        // The repeat model is there to show an induction head forming
        // (tests/timelapse.rs); greedy copies of whole strings are not its
        // card's claim.
        if task != tinygpt::data::tasks::Task::Repeat {
            assert!(accuracy >= 0.99, "{}: {right} of {} right", entry.id, held_out.len());
        }
    }
}

/// The reversal model's last layer reads the letter it writes: the answer
/// byte at position 8 + k is the prompt's letter 7 - k, and from the query
/// that predicts it (position 8 + k) most of one head's attention lands on
/// that key, the anti-diagonal of the map.
#[test]
fn the_reversal_model_attends_along_the_anti_diagonal() {
    use tinygpt::backend::Backend;
    use tinygpt::probe::ProbeRequest;
    let entry = gallery::find("reverse").unwrap();
    let ck = entry.checkpoint().unwrap();
    let mut backend = tinygpt::cpu::CpuBackend::<f32>::new(tinygpt::program::Program::new(&ck.config));
    for p in &ck.params {
        backend.write(&p.name, &p.values).unwrap();
    }
    let (_, held_out) = tinygpt::data::tasks::Task::Reverse.examples();
    let mut on_diagonal = Vec::new();
    for example in &held_out[..20] {
        let prompt = &example[..example.len() - 1];
        let r = backend.probe(&ProbeRequest::for_prompt(&ck.config, prompt).unwrap()).unwrap();
        let (n, last) = (r.n(), r.probs.len() - 1);
        assert_eq!(n, 17);
        // Queries 8..=15 predict the answer's letters; their key is 15 - q.
        for q in 8..16 {
            let best = (0..r.n_head)
                .map(|h| r.p(last, h)[q * n + (15 - q)])
                .fold(0.0f32, f32::max);
            on_diagonal.push(best);
        }
    }
    let mean = on_diagonal.iter().sum::<f32>() / on_diagonal.len() as f32;
    eprintln!("mean attention on the anti-diagonal: {mean:.3}");
    assert!(mean > 0.8, "the last layer's attention on the anti-diagonal: {mean:.3}");
}
