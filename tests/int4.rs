//! 4-bit exports (issue 36): `tinygpt export --int4` writes each weight
//! matrix in blocks of 64 with one f16 scale (GGUF Q4_0's shape), every
//! command that loads a checkpoint reads it back dequantised, and the model
//! it holds is the original within half a quantisation step per weight.

mod common;

use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::int4::BLOCK;

#[test]
fn an_int4_export_loads_anywhere_and_stays_within_half_a_step() {
    let dir = common::scratch_dir("int4");
    let original = dir.join("small.safetensors");
    std::fs::write(&original, tinygpt::model::shipped::shipped("small").unwrap()).unwrap();
    let q4 = dir.join("small-q4.safetensors");
    let (_, said) = common::tinygpt(&[
        "export",
        "--int4",
        "--checkpoint",
        original.to_str().unwrap(),
        "--out",
        q4.to_str().unwrap(),
    ]);
    assert!(said.contains("int4 weights"), "{said}");
    let f32_bytes: u64 = Checkpoint::load(&original)
        .unwrap()
        .params
        .iter()
        .map(|p| p.values.len() as u64 * 4)
        .sum();
    let bytes = std::fs::metadata(&q4).unwrap().len();
    assert!(bytes * 5 < f32_bytes, "{bytes} bytes against {f32_bytes} of f32 weights");

    let ck = Checkpoint::load(&original).unwrap();
    let back = Checkpoint::load(&q4).unwrap();
    assert!(back.optimizer.is_none());
    assert_eq!((back.step, back.seed), (ck.step, ck.seed));
    for (a, b) in ck.params.iter().zip(&back.params) {
        assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
        if a.shape.len() < 2 {
            // Vectors: f16.
            for (x, y) in a.values.iter().zip(&b.values) {
                assert_eq!(half::f16::from_f32(*x).to_f32(), *y, "{}", a.name);
            }
            continue;
        }
        for (block, (xs, ys)) in a.values.chunks(BLOCK).zip(b.values.chunks(BLOCK)).enumerate() {
            let amax = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
            let step = amax / 7.0;
            for (x, y) in xs.iter().zip(ys) {
                assert!(
                    (x - y).abs() <= step / 2.0 + amax * 2e-3,
                    "{} block {block}: {x} read back as {y} (step {step})",
                    a.name
                );
            }
        }
    }
    // The same file in memory, and through the commands that load one.
    assert_eq!(
        Checkpoint::from_bytes(&back.to_bytes(Precision::Int4, "again").unwrap(), "again")
            .unwrap()
            .params,
        back.params,
        "a 4-bit model exported again is itself"
    );
    let eval = |path: &std::path::Path| -> f64 {
        let (out, _) = common::tinygpt(&["eval", "--checkpoint", path.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
        v["loss"].as_f64().unwrap()
    };
    let (full, quarter) = (eval(&original), eval(&q4));
    assert!(
        (full - quarter).abs() < 0.1,
        "the 4-bit model's validation loss {quarter} against the original's {full}"
    );
    common::tinygpt(&[
        "generate",
        "--checkpoint",
        q4.to_str().unwrap(),
        "--tokens",
        "20",
        "--temperature",
        "0",
    ]);
}

#[test]
fn a_damaged_int4_file_is_refused_with_what_is_wrong() {
    // The scales of one matrix missing: a file written by hand.
    let ck = Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny")
        .unwrap();
    let bytes = ck.to_bytes(Precision::Int4, "tiny-q4").unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != "transformer.h.0.mlp.c_fc.weight.q4_scale")
        .collect();
    let damaged = safetensors::serialize(kept, header.metadata().clone()).unwrap();
    let err = Checkpoint::from_bytes(&damaged, "damaged.safetensors")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("damaged.safetensors") && err.contains("q4_scale") && err.contains("missing"),
        "{err}"
    );
}
