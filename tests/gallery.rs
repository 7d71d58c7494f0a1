//! The gallery (issue 36): `tinygpt gallery --json` lists the trained
//! models that ship, each card read from its checkpoint, and every command
//! that loads a checkpoint takes `gallery:ID` for the same bytes.

mod common;

use std::process::Command;
use tinygpt::model::checkpoint::Checkpoint;

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
        let last_val = ck.loss_history.iter().rev().find_map(|p| p.val_loss).unwrap();
        assert_eq!(card["val_loss"].as_f64().unwrap() as f32, last_val, "{id}");
        let params: usize = ck.params.iter().map(|p| p.values.len()).sum();
        assert_eq!(card["params"].as_u64().unwrap() as usize, params, "{id}");
        for key in ["preset", "corpus", "source", "licence", "command"] {
            assert!(!card[key].as_str().unwrap().is_empty(), "{id}: {key}");
        }
        // The same model by its gallery id as by its file.
        assert_eq!(Checkpoint::load(std::path::Path::new(&format!("gallery:{id}"))).unwrap(), ck);
        let eval = |arg: &str| common::tinygpt(&["eval", "--checkpoint", arg]).0;
        assert_eq!(eval(&format!("gallery:{id}")), eval(file.to_str().unwrap()), "{id}");
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
