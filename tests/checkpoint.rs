//! Checkpoints: bit-exact round trips, atomic saves, nanoGPT names, and every
//! kind of bad file refused with a message that says what is wrong.

use safetensors::tensor::{Dtype, TensorView};
use std::collections::HashMap;
use std::path::PathBuf;
use tinygpt::bench::cpu_backend;
use tinygpt::data::Corpus;
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::Config;
use tinygpt::train::Trainer;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tinygpt-ck-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn trained_checkpoint() -> Checkpoint {
    let cfg = Config::load("tiny").unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut t = Trainer::new(cpu_backend(&cfg), corpus, 42).unwrap();
    for _ in 0..3 {
        t.train_step().unwrap();
    }
    t.checkpoint(true).unwrap()
}

#[test]
fn round_trip_is_bit_exact_with_optimizer_state() {
    let ck = trained_checkpoint();
    let dir = tmpdir("rt");
    let path = dir.join("a.safetensors");
    ck.save(&path, Precision::F32).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert_eq!(back, ck); // f32 values compared exactly, optimizer included
    assert!(back.optimizer.is_some());
    // No temporary file is left behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn names_and_layout_follow_nanogpt() {
    let ck = trained_checkpoint();
    let c = ck.config.d_model;
    let find = |n: &str| {
        ck.params
            .iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n} missing"))
    };
    assert_eq!(find("transformer.wte.weight").shape, [256, c]);
    assert_eq!(find("transformer.wpe.weight").shape, [ck.config.ctx, c]);
    assert_eq!(find("transformer.h.0.attn.c_attn.weight").shape, [3 * c, c]);
    assert_eq!(find("transformer.h.1.attn.c_proj.weight").shape, [c, c]);
    assert_eq!(find("transformer.h.1.mlp.c_fc.weight").shape, [4 * c, c]);
    assert_eq!(find("transformer.h.1.mlp.c_proj.weight").shape, [c, 4 * c]);
    assert_eq!(find("transformer.ln_f.bias").shape, [c]);
    assert!(
        !ck.params.iter().any(|t| t.name.starts_with("lm_head")),
        "the head is tied"
    );
}

#[test]
fn f16_export_loads_as_weights_only() {
    let mut ck = trained_checkpoint();
    let dir = tmpdir("f16");
    let path = dir.join("h.safetensors");
    ck.save(&path, Precision::F16).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert!(back.optimizer.is_none());
    for (a, b) in back.params.iter().zip(&ck.params) {
        for (x, y) in a.values.iter().zip(&b.values) {
            assert!(
                (x - y).abs() <= 1e-3 * y.abs().max(1e-2),
                "{}: {x} vs {y}",
                a.name
            );
        }
    }
    // The frames' weights come back in f16, as the weights do.
    let (t, kept) = (ck.timelapse.as_ref().unwrap(), back.timelapse.as_ref().unwrap());
    assert!(kept.frames.iter().all(|f| f.weights.is_some()), "a tiny run's four frames fit an export's budget");
    for (a, b) in kept.frames.iter().zip(&t.frames) {
        let (a, b) = (a.weights.as_ref().unwrap(), b.weights.as_ref().unwrap());
        assert!(a.iter().zip(b.iter()).all(|(x, y)| (x - y).abs() <= 1e-3 * y.abs().max(1e-2)));
    }
    ck.optimizer = None;
    assert_eq!(back.params.len(), ck.params.len());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_refused_save_keeps_the_previous_checkpoint() {
    let ck = trained_checkpoint();
    let dir = tmpdir("atomic");
    let path = dir.join("c.safetensors");
    ck.save(&path, Precision::F32).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut bad = ck.clone();
    bad.params[3].values[0] = f32::NAN;
    let err = bad.save(&path, Precision::F32).unwrap_err().to_string();
    assert!(err.contains("non-finite"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // A save into a missing directory fails cleanly too.
    assert!(
        ck.save(&dir.join("missing/x.safetensors"), Precision::F32)
            .is_err()
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Serialises tensors and metadata by hand, to make bad files.
fn raw(tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)], meta: HashMap<String, String>) -> Vec<u8> {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::tensor::serialize(views, Some(meta)).unwrap()
}

fn parts(
    ck: &Checkpoint,
) -> (
    Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
    HashMap<String, String>,
) {
    let dir = tmpdir("parts");
    let path = dir.join("p.safetensors");
    let mut plain = ck.clone();
    plain.optimizer = None;
    plain.timelapse = None;
    plain.save(&path, Precision::F32).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    let tensors = plain
        .params
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                Dtype::F32,
                t.shape.clone(),
                bytemuck::cast_slice(&t.values).to_vec(),
            )
        })
        .collect();
    (tensors, meta)
}

fn refused(bytes: &[u8], expect: &str) {
    let err = Checkpoint::from_bytes(bytes, "bad.safetensors")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.safetensors"),
        "message does not name the file: {err}"
    );
    assert!(
        err.to_lowercase().contains(&expect.to_lowercase()),
        "expected `{expect}` in: {err}"
    );
}

#[test]
fn bad_checkpoints_are_refused() {
    let ck = trained_checkpoint();
    let (tensors, meta) = parts(&ck);
    let good = raw(&tensors, meta.clone());
    assert!(Checkpoint::from_bytes(&good, "good").is_ok());

    refused(&good[..good.len() / 2], "truncated or corrupt");
    refused(&good[..5], "truncated or corrupt");
    refused(
        b"this is not a checkpoint at all, just text",
        "truncated or corrupt",
    );
    let mut flipped = good.clone();
    flipped[10] = b'#';
    refused(&flipped, "truncated or corrupt");

    let mut no_meta = meta.clone();
    no_meta.remove("config");
    refused(&raw(&tensors, no_meta), "no `config`");

    let mut other_cfg = ck.config.clone();
    other_cfg.d_model = 96;
    let mut mismatched = meta.clone();
    mismatched.insert("config".into(), ron::to_string(&other_cfg).unwrap());
    refused(&raw(&tensors, mismatched), "has shape");

    let mut bad_cfg = meta.clone();
    bad_cfg.insert("config".into(), "(n_layer: 2)".into());
    refused(&raw(&tensors, bad_cfg), "config");

    let mut wrong_dtype = tensors.clone();
    let n = wrong_dtype[2].3.len() / 4;
    wrong_dtype[2] = (
        wrong_dtype[2].0.clone(),
        Dtype::I32,
        wrong_dtype[2].2.clone(),
        vec![0u8; n * 4],
    );
    refused(&raw(&wrong_dtype, meta.clone()), "dtype I32");

    let mut nan = tensors.clone();
    nan[1].3[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
    refused(&raw(&nan, meta.clone()), "non-finite");
    let mut inf = tensors.clone();
    inf[0].3[4..8].copy_from_slice(&f32::INFINITY.to_le_bytes());
    refused(&raw(&inf, meta.clone()), "non-finite");

    let missing: Vec<_> = tensors
        .iter()
        .filter(|t| t.0 != "transformer.ln_f.weight")
        .cloned()
        .collect();
    refused(
        &raw(&missing, meta.clone()),
        "`transformer.ln_f.weight` is missing",
    );

    let mut extra = tensors.clone();
    extra.push(("lm_head.weight".into(), Dtype::F32, vec![2], vec![0u8; 8]));
    refused(
        &raw(&extra, meta.clone()),
        "unexpected tensor `lm_head.weight`",
    );

    let mut bad_shape = tensors.clone();
    bad_shape[0].2 = vec![128, bad_shape[0].3.len() / 4 / 128];
    refused(&raw(&bad_shape, meta), "has shape");
}

#[test]
fn a_missing_file_is_named() {
    let err = Checkpoint::load(std::path::Path::new("/nonexistent/x.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/x.safetensors"), "{err}");
}

/// A checkpoint's time-lapse is checked as its weights are: a broken one
/// is refused with a line naming what is wrong, and one that is whole
/// comes back as it was saved.
#[test]
fn a_bad_time_lapse_is_refused() {
    let ck = trained_checkpoint();
    let t = ck.timelapse.clone().expect("a run records its time-lapse");
    assert_eq!(t.frames.iter().map(|f| f.step).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    let (mut tensors, meta) = parts(&ck);
    // The frames, and their maps as one tensor, as a save writes them.
    let maps: Vec<u8> = t
        .frames
        .iter()
        .flat_map(|f| f.attention.clone().unwrap())
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let n = 2 * t.letters();
    let shape = vec![t.frames.len(), t.n_layer, t.n_head, n, n];
    // The weights the frames keep, as one tensor (frames × trained values).
    let per = t.frames[0].weights.as_ref().expect("a small model's frames keep its weights").len();
    let weights: Vec<u8> = t
        .frames
        .iter()
        .flat_map(|f| f.weights.as_ref().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
        .collect();
    let stored_with = |t: &tinygpt::model::timelapse::TimeLapse, map_steps: &[u64], weight_steps: &[u64]| {
        let mut json = serde_json::to_value(t).unwrap();
        json["map_steps"] = serde_json::json!(map_steps);
        json["weight_steps"] = serde_json::json!(weight_steps);
        json.to_string()
    };
    let steps: Vec<u64> = t.frames.iter().map(|f| f.step).collect();
    let stored = |t: &tinygpt::model::timelapse::TimeLapse, map_steps: &[u64]| stored_with(t, map_steps, &steps);
    let mut good_meta = meta.clone();
    good_meta.insert("timelapse".into(), stored(&t, &steps));
    tensors.push((tinygpt::model::checkpoint::TIMELAPSE_WEIGHTS.into(), Dtype::F32, vec![t.frames.len(), per], weights.clone()));
    tensors.push((tinygpt::model::checkpoint::TIMELAPSE_MAPS.into(), Dtype::F16, shape.clone(), maps.clone()));
    let back = Checkpoint::from_bytes(&raw(&tensors, good_meta.clone()), "good").unwrap();
    assert_eq!(back.timelapse.as_ref(), Some(&t));

    let with_meta = |json: String| {
        let mut m = good_meta.clone();
        m.insert("timelapse".into(), json);
        raw(&tensors, m)
    };
    refused(&with_meta("{".into()), "metadata `timelapse` is not valid");
    let mut reversed = t.clone();
    reversed.frames.reverse();
    refused(&with_meta(stored(&reversed, &steps)), "not in step order");
    let mut other = t.clone();
    other.n_head += 1;
    refused(&with_meta(stored(&other, &steps)), "heads");
    let mut nan = t.clone();
    nan.frames[1].copy_loss = f32::NAN;
    // JSON has no NaN: serde writes null, which is not a number.
    refused(&with_meta(stored(&nan, &steps)), "metadata `timelapse` is not valid");
    refused(&with_meta(stored(&t, &[0, 1, 2, 9])), "step 9");
    // The maps: missing, of another shape, not finite.
    let without: Vec<_> = tensors[..tensors.len() - 1].to_vec();
    refused(&raw(&without, good_meta.clone()), "is missing");
    let mut short = tensors.clone();
    let last = short.len() - 1;
    short[last].2[0] -= 1;
    short[last].3.truncate(maps.len() / t.frames.len() * (t.frames.len() - 1));
    refused(&raw(&short, good_meta.clone()), "needs F16");
    let mut inf = tensors.clone();
    inf[last].3[0..2].copy_from_slice(&half::f16::INFINITY.to_bits().to_le_bytes());
    refused(&raw(&inf, good_meta.clone()), "not finite");
    // The weights: missing, of another shape, not finite, of a step with
    // no frame.
    let w = last - 1;
    let mut without = tensors.clone();
    without.remove(w);
    refused(&raw(&without, good_meta.clone()), "`timelapse.weights` is missing");
    let mut short = tensors.clone();
    short[w].2[1] -= 1;
    short[w].3.truncate(weights.len() - 4 * t.frames.len());
    refused(&raw(&short, good_meta.clone()), "needs F32 or F16");
    let mut nan = tensors.clone();
    nan[w].3[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
    refused(&raw(&nan, good_meta.clone()), "not finite");
    refused(&with_meta(stored_with(&t, &steps, &[0, 1, 2, 9])), "keeps weights of step 9");
}
