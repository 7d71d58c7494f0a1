//! Presets: exact parameter counts from TINYGPT.md, and refusal of every kind
//! of invalid preset with a message naming the file, the field and the rule.

use tinygpt::model::config::{BUILTIN_PRESETS, Config, Schedule};

#[test]
fn parameter_counts_match_the_table() {
    let expected = [
        ("tiny", 70_464),
        ("small", 366_432),
        ("medium", 838_400),
        ("large", 2_743_296),
        ("xl", 6_416_896),
        ("huge", 9_608_704),
        ("massive", 25_039_872),
        ("mega", 25_138_176),
        ("behemoth", 473_244_160),
        ("nanogpt-char", 10_844_160),
    ];
    assert_eq!(BUILTIN_PRESETS.len(), expected.len());
    for (id, count) in expected {
        assert_eq!(Config::load(id).unwrap().param_count(), count, "{id}");
    }
}

#[test]
fn nanogpt_char_is_the_reference_recipe() {
    let c = Config::load("nanogpt-char").unwrap();
    assert_eq!(
        (c.n_layer, c.n_head, c.d_model, c.ctx, c.batch),
        (6, 6, 384, 256, 64)
    );
    assert_eq!(c.dropout, 0.2);
    assert_eq!(c.lr, 1e-3);
    assert_eq!(c.beta2, 0.99);
    assert_eq!(
        c.schedule,
        Schedule::WarmupCosine {
            warmup_steps: 100,
            decay_steps: 5000,
            min_lr: 1e-4
        }
    );
}

#[test]
fn defaults_match_the_reference() {
    // The lesson of the original: defaults need parity checks too.
    let c = Config::load("small").unwrap();
    assert_eq!(
        (c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.grad_clip),
        (3e-4, 0.9, 0.95, 1e-8, 0.1, 1.0)
    );
    assert_eq!(c.schedule, Schedule::Constant);
}

fn small_with(field: &str, value: &str) -> String {
    let text = BUILTIN_PRESETS
        .iter()
        .find(|(id, _)| *id == "small")
        .unwrap()
        .1;
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with(&format!("{field}:")) {
                format!("    {field}: {value},")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn refused(text: &str, needles: &[&str]) {
    let err = Config::from_ron(text, "my.ron").unwrap_err().to_string();
    assert!(err.contains("my.ron"), "does not name the file: {err}");
    for n in needles {
        assert!(err.contains(n), "expected `{n}` in: {err}");
    }
}

#[test]
fn invalid_presets_are_refused() {
    refused(
        &small_with("n_head", "5"),
        &["`n_head`", "must divide d_model"],
    );
    refused(&small_with("n_layer", "0"), &["`n_layer`", "at least 1"]);
    refused(&small_with("d_model", "0"), &["`d_model`"]);
    refused(&small_with("ctx", "0"), &["`ctx`"]);
    refused(&small_with("batch", "0"), &["`batch`"]);
    refused(&small_with("steps", "0"), &["`steps`"]);
    refused(&small_with("lr", "-1.0"), &["`lr`", "> 0"]);
    refused(&small_with("dropout", "1.5"), &["`dropout`", "[0, 1)"]);
    refused(&small_with("beta2", "1.0"), &["`beta2`"]);
    refused(
        &small_with("n_head", "3,\n    d_model: 768").replace("    d_model: 96,\n", ""),
        &["`n_head`", "head_dim 256 > 128"],
    );
    refused(&small_with("lr", "3e-4,\n    colour: 3"), &["colour"]);
    refused("(n_layer: 3, n_head: 3", &["my.ron"]);
    refused("this is not RON", &["my.ron"]);
    refused(
        &small_with(
            "schedule",
            "WarmupCosine(warmup_steps: 10, decay_steps: 5, min_lr: 1e-5)",
        ),
        &["`schedule`", "decay_steps"],
    );
}

#[test]
fn unknown_preset_lists_the_known_ones() {
    let err = Config::load("gigantic").unwrap_err().to_string();
    assert!(
        err.contains("gigantic") && err.contains("small") && err.contains("nanogpt-char"),
        "{err}"
    );
    let err = Config::load("/nonexistent/preset.ron")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/preset.ron"), "{err}");
}
