//! The explainer app: its entity tree against the program, bad input while a
//! run is live, checkpoints through the UI's commands, and the real app run
//! headless on whatever adapter there is (lavapipe in CI), training, with
//! its screenshot checked as a picture.

mod common;

use bevy::prelude::*;
use std::process::Command;
use tinygpt::app::graph::{Layer, Model, OpEntity, Tensor};
use tinygpt::app::training::{
    AppStatus, BackendChoice, Run, RunCommand, RunSettings, RunState, StepRecord, TrainingRun,
};
use tinygpt::model::config::Config;
use tinygpt::program::Program;

/// The app's own plugins on `MinimalPlugins` (no window, no renderer: the
/// CPU backend), with a run of `preset`.
fn app_with(preset: &str, tweak: impl FnOnce(&mut RunSettings)) -> App {
    let mut settings = RunSettings::from_preset(preset, Config::load(preset).unwrap());
    settings.backend = BackendChoice::Cpu;
    tweak(&mut settings);
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).insert_resource(settings);
    tinygpt::app::add_explainer_plugins(&mut app);
    app.update();
    app.update();
    app
}

fn send(app: &mut App, command: RunCommand) {
    app.world_mut().write_message(command);
    app.update();
}

/// Updates until `done` holds (training runs on a worker task).
fn update_until(app: &mut App, what: &str, mut done: impl FnMut(&mut App) -> bool) {
    let start = std::time::Instant::now();
    while !done(app) {
        assert!(
            start.elapsed().as_secs() < 120,
            "timed out waiting for {what}"
        );
        app.update();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The run's parameters (the run must be idle).
fn weights(app: &mut App) -> Vec<tinygpt::model::params::NamedTensor> {
    let mut run = app.world_mut().resource_mut::<Run>();
    run.engine
        .idle_trainer()
        .expect("the run is idle")
        .params()
        .unwrap()
}

fn run_step(app: &mut App) -> u64 {
    app.world().resource::<Run>().step()
}

#[test]
fn the_entity_tree_is_the_program() {
    for preset in ["tiny", "small"] {
        let mut app = app_with(preset, |_| {});
        let program = Program::new(&Config::load(preset).unwrap());
        let world = app.world_mut();
        let models: Vec<Entity> = world
            .query_filtered::<Entity, With<Model>>()
            .iter(world)
            .collect();
        assert_eq!(models.len(), 1, "{preset}: one Model entity");
        let mut layers: Vec<(Entity, Layer, Entity)> = world
            .query::<(Entity, &Layer, &ChildOf)>()
            .iter(world)
            .map(|(e, l, p)| (e, l.clone(), p.parent()))
            .collect();
        layers.sort_by_key(|(_, l, _)| l.index);
        assert_eq!(
            layers
                .iter()
                .map(|(_, l, _)| l.name.clone())
                .collect::<Vec<_>>(),
            program
                .layers
                .iter()
                .map(|l| l.name.clone())
                .collect::<Vec<_>>(),
            "{preset}"
        );
        assert!(
            layers.iter().all(|(_, _, parent)| *parent == models[0]),
            "{preset}: layers are children of the model"
        );
        let ops: Vec<(OpEntity, Entity)> = world
            .query::<(&OpEntity, &ChildOf)>()
            .iter(world)
            .map(|(o, p)| (o.clone(), p.parent()))
            .collect();
        let tensors: Vec<(Tensor, Entity)> = world
            .query::<(&Tensor, &ChildOf)>()
            .iter(world)
            .map(|(t, p)| (t.clone(), p.parent()))
            .collect();
        assert_eq!(ops.len(), program.ops.len(), "{preset}: op entities");
        assert_eq!(
            tensors.len(),
            program.tensors.len(),
            "{preset}: tensor entities"
        );
        for (i, (layer_entity, layer, _)) in layers.iter().enumerate() {
            let mut want_ops: Vec<String> = program
                .ops
                .iter()
                .filter(|o| o.layer == i)
                .map(|o| o.label.clone())
                .collect();
            let mut got_ops: Vec<String> = ops
                .iter()
                .filter(|(_, p)| p == layer_entity)
                .map(|(o, _)| o.label.clone())
                .collect();
            want_ops.sort();
            got_ops.sort();
            assert_eq!(got_ops, want_ops, "{preset}: ops of {}", layer.name);
            let mut want_t: Vec<(String, Vec<usize>)> = program
                .tensors
                .iter()
                .filter(|t| t.layer == i)
                .map(|t| (t.name.clone(), t.shape.clone()))
                .collect();
            let mut got_t: Vec<(String, Vec<usize>)> = tensors
                .iter()
                .filter(|(_, p)| p == layer_entity)
                .map(|(t, _)| (t.name.clone(), t.shape.clone()))
                .collect();
            want_t.sort();
            got_t.sort();
            assert_eq!(got_t, want_t, "{preset}: tensors of {}", layer.name);
        }
    }
}

/// Mixed precision is the GPU's tensor cores or nothing: asked for on the
/// CPU backend, or where there is no device with tensor cores, the new run
/// is refused with the reason and the current run stays (issue 51).
#[test]
fn a_mixed_precision_run_without_tensor_cores_is_refused_and_the_run_kept() {
    use tinygpt::backends::Precision;
    let mut app = app_with("tiny", |_| {});
    let generation = app.world().resource::<Run>().generation;
    for (backend, says) in [
        (BackendChoice::Cpu, "the CPU backend computes in f32"),
        (BackendChoice::Auto, "mixed precision cannot run here: no GPU device"),
    ] {
        {
            let mut settings = app.world_mut().resource_mut::<RunSettings>();
            settings.backend = backend;
            settings.precision = Precision::Mixed;
        }
        let before = app.world().resource::<AppStatus>().errors.len();
        send(&mut app, RunCommand::NewRun);
        let errors = &app.world().resource::<AppStatus>().errors;
        assert_eq!(errors.len(), before + 1, "{errors:?}");
        assert!(errors.last().unwrap().contains(says), "{backend:?}: {errors:?}");
        assert_eq!(app.world().resource::<Run>().generation, generation, "the run is kept");
    }
    // In f32 the same settings make a new run.
    app.world_mut().resource_mut::<RunSettings>().precision = Precision::F32;
    send(&mut app, RunCommand::NewRun);
    app.update();
    assert!(app.world().resource::<Run>().generation > generation);
}

#[test]
fn bad_input_shows_an_error_and_loses_nothing() {
    let mut app = app_with("tiny", |s| s.steps = 1000);
    send(&mut app, RunCommand::Train);
    update_until(&mut app, "a few steps", |app| run_step(app) >= 3);
    send(&mut app, RunCommand::Pause);
    update_until(&mut app, "the run to settle", |app| {
        !app.world().resource::<Run>().engine.busy()
    });
    let generation = app.world().resource::<Run>().generation;
    let step = run_step(&mut app);
    let before = weights(&mut app);

    let ctx = Config::load("tiny").unwrap().ctx;
    let bad = [
        (
            RunCommand::LoadCorpus {
                name: "empty.txt".into(),
                bytes: vec![],
            },
            "empty.txt",
        ),
        (
            RunCommand::LoadCorpus {
                name: "short.txt".into(),
                bytes: b"to be".repeat(ctx),
            },
            "short.txt",
        ),
        (
            RunCommand::LoadCheckpoint {
                name: "corrupt.safetensors".into(),
                bytes: b"\x10\x00\x00\x00\x00\x00\x00\x00{not json".to_vec(),
            },
            "corrupt.safetensors",
        ),
        (
            RunCommand::LoadPreset {
                name: "broken.ron".into(),
                text: "(n_layer: ".into(),
            },
            "broken.ron",
        ),
        (
            RunCommand::LoadPreset {
                name: "odd.ron".into(),
                text: Config::load("tiny")
                    .map(|c| ron::to_string(&Config { n_head: 5, ..c }).unwrap())
                    .unwrap(),
            },
            "odd.ron",
        ),
    ];
    for (i, (command, name)) in bad.into_iter().enumerate() {
        send(&mut app, command);
        let status = app.world().resource::<AppStatus>();
        assert_eq!(
            status.errors.len(),
            i + 1,
            "one error per bad input: {:?}",
            status.errors
        );
        let message = status.errors.last().unwrap();
        assert!(
            message.contains(name),
            "the error names the input: {message}"
        );
    }
    let errors = app.world().resource::<AppStatus>().errors.clone();
    assert!(
        errors[0].contains("0 bytes") || errors[0].contains("empty"),
        "{}",
        errors[0]
    );
    assert!(
        errors[4].contains("n_head") || errors[4].contains("head"),
        "{}",
        errors[4]
    );
    let run = app.world().resource::<Run>();
    assert_eq!(
        (run.generation, run.step()),
        (generation, step),
        "the run is the same run"
    );
    let after = weights(&mut app);
    assert_eq!(after, before, "nothing trained was lost");
    // And it still trains.
    send(&mut app, RunCommand::Train);
    update_until(&mut app, "more steps", |app| run_step(app) > step);
    let world = app.world_mut();
    let records: Vec<StepRecord> = world.query::<&StepRecord>().iter(world).copied().collect();
    assert!(records.len() as u64 > step && records.iter().all(|r| r.loss.is_finite()));
}

#[test]
fn checkpoints_save_and_load_through_the_app() {
    let dir = common::scratch_dir("app-ckpt");
    let path = dir.join("run.safetensors");
    let mut app = app_with("tiny", |s| s.steps = 1000);
    send(&mut app, RunCommand::Step);
    send(&mut app, RunCommand::Step);
    update_until(&mut app, "two steps", |app| {
        run_step(app) == 2 && !app.world().resource::<Run>().engine.busy()
    });
    // A file this app did not write: the save waits for the user's word
    // and the file is untouched (issue 29).
    let earlier = dir.join("earlier.safetensors");
    std::fs::write(&earlier, b"the user's file").unwrap();
    send(
        &mut app,
        RunCommand::SaveCheckpoint {
            path: earlier.clone(),
            replace: false,
        },
    );
    app.update();
    assert_eq!(
        app.world().resource::<AppStatus>().confirm_replace.as_ref(),
        Some(&earlier)
    );
    for _ in 0..5 {
        app.update();
    }
    assert_eq!(std::fs::read(&earlier).unwrap(), b"the user's file");
    send(
        &mut app,
        RunCommand::SaveCheckpoint {
            path: path.clone(),
            replace: false,
        },
    );
    update_until(&mut app, "the save", |_| path.exists());
    assert!(app.world().resource::<AppStatus>().confirm_replace.is_none());
    let ckpt = tinygpt::model::checkpoint::Checkpoint::load(&path).unwrap();
    assert_eq!(ckpt.step, 2);
    assert!(
        ckpt.optimizer.is_some(),
        "the app's checkpoints resume exactly"
    );
    let want = weights(&mut app);
    assert_eq!(ckpt.params, want);
    // Load it into a fresh app: the run resumes at step 2 with those weights.
    let mut other = app_with("tiny", |_| {});
    send(
        &mut other,
        RunCommand::LoadCheckpoint {
            name: "run.safetensors".into(),
            bytes: std::fs::read(&path).unwrap(),
        },
    );
    app.update();
    let run = other.world().resource::<Run>();
    assert_eq!(
        (run.generation, run.step(), run.state),
        (2, 2, RunState::Ready)
    );
    let world = other.world_mut();
    assert_eq!(
        world.query::<&TrainingRun>().iter(world).count(),
        1,
        "the old run's entity is gone"
    );
    let got = weights(&mut other);
    assert_eq!(got, want);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A `.tinygpt` file of the original TinyGPT dropped on the window (its
/// path read by `files::load_path`, as a drop is) opens as the run: its
/// model, its step, its weights (issue 36; tests/original.rs checks its
/// logits against the original's own).
#[test]
fn a_dropped_tinygpt_file_of_the_original_opens_as_the_run() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/original/original.tinygpt");
    let want = tinygpt::model::checkpoint::Checkpoint::load(&path).unwrap();
    let mut app = app_with("tiny", |_| {});
    let command = tinygpt::app::files::load_path(&path).unwrap();
    assert!(matches!(command, RunCommand::LoadCheckpoint { .. }));
    send(&mut app, command);
    update_until(&mut app, "the original's model", |app| {
        let run = app.world().resource::<Run>();
        run.generation > 1 && !run.engine.busy()
    });
    let run = app.world().resource::<Run>();
    assert_eq!((run.config().d_model, run.config().ctx, run.step()), (32, 16, 40));
    assert!(app.world().resource::<AppStatus>().errors.is_empty());
    assert_eq!(weights(&mut app), want.params);
}

#[test]
fn samples_stream_in_from_the_latest_weights() {
    use tinygpt::app::sample::SampleState;
    let mut app = app_with("tiny", |s| s.steps = 1000);
    send(&mut app, RunCommand::Step);
    update_until(&mut app, "a step", |app| {
        run_step(app) == 1 && !app.world().resource::<Run>().engine.busy()
    });
    {
        let mut sample = app.world_mut().resource_mut::<SampleState>();
        sample.prompt = "ROMEO:".into();
        sample.length = 40;
        sample.start();
    }
    update_until(&mut app, "the sample", |app| {
        let s = app.world().resource::<SampleState>();
        !s.running() && s.text.lock().unwrap().chars().count() > "ROMEO:".len()
    });
    let s = app.world().resource::<SampleState>();
    assert!(s.text.lock().unwrap().starts_with("ROMEO:"));
    assert_eq!(
        s.from_step,
        Some(1),
        "sampled from the weights after step 1"
    );
    assert!(s.error.is_none());
}

/// Fine-tuning in the app (issue 37): the run's weights become the frozen
/// base of a LoRA run on the loaded text; training moves the adapters only;
/// the sample box's switch samples the base or the fine-tuned model from
/// the same seed; Save writes an adapter that goes back on its base.
#[test]
fn a_model_fine_tunes_in_the_app_and_samples_both_ways() {
    use tinygpt::app::sample::SampleState;
    use tinygpt::model::lora::{self, FinetuneOptions};
    let mut app = app_with("tiny", |s| s.steps = 1000);
    send(&mut app, RunCommand::Step);
    update_until(&mut app, "a step", |app| {
        run_step(app) == 1 && !app.world().resource::<Run>().engine.busy()
    });
    let base = weights(&mut app);
    let text: Vec<u8> = include_str!("../src/program/mod.rs").bytes().collect();
    send(
        &mut app,
        RunCommand::LoadCorpus {
            name: "program.rs".into(),
            bytes: text,
        },
    );
    let options = FinetuneOptions {
        rank: 2,
        alpha: 4.0,
        steps: 6,
        lr: 5e-3,
        ..Default::default()
    };
    send(&mut app, RunCommand::Finetune(options));
    update_until(&mut app, "the fine-tune run", |app| {
        app.world().resource::<Run>().config().lora.is_some()
    });
    let run = app.world().resource::<Run>();
    assert_eq!((run.step(), run.corpus_name.as_str()), (0, "program.rs"));
    assert!(run.label().contains("LoRA r2"), "{}", run.label());
    assert_eq!(run.config().steps, 6);
    send(&mut app, RunCommand::Train);
    update_until(&mut app, "the fine-tune's steps", |app| {
        let run = app.world().resource::<Run>();
        run.state == RunState::Finished && !run.engine.busy()
    });
    let after = weights(&mut app);
    for b in &base {
        let now = after.iter().find(|p| p.name == b.name).unwrap();
        assert!(now.values == b.values, "`{}` moved", b.name);
    }
    assert!(after.iter().any(|p| p.name.ends_with(".lora_B.weight") && p.values.iter().any(|&x| x != 0.0)));
    // The A/B switch: the base's sample is the base model's, from the same seed.
    let mut texts = vec![];
    for from_base in [true, false] {
        {
            let mut sample = app.world_mut().resource_mut::<SampleState>();
            sample.prompt = "fn ".into();
            sample.length = 30;
            sample.options.temperature = 0.0;
            sample.from_base = from_base;
            sample.start();
        }
        update_until(&mut app, "the sample", |app| {
            let s = app.world().resource::<SampleState>();
            !s.running() && s.text.lock().unwrap().len() > 3
        });
        let s = app.world().resource::<SampleState>();
        assert!(s.error.is_none(), "{:?}", s.error);
        texts.push(s.text.lock().unwrap().clone());
    }
    let config = app.world().resource::<Run>().config().clone();
    let greedy = |config: &Config, params: &[tinygpt::model::params::NamedTensor]| {
        let mut g = tinygpt::cpu::generate::Generator::new(config, params).unwrap();
        let opts = tinygpt::sample::SampleOptions {
            temperature: 0.0,
            ..Default::default()
        };
        let out = tinygpt::sample::generate(&mut g, b"fn ", 30, &opts, |_| {});
        format!("fn {}", String::from_utf8_lossy(&out))
    };
    let base_config = Config {
        lora: None,
        ..config.clone()
    };
    assert_eq!(texts[0], greedy(&base_config, &base), "the base's sample");
    assert_eq!(texts[1], greedy(&config, &after), "the fine-tuned sample");
    // Save: an adapter, which goes back on its base.
    let dir = common::scratch_dir("app-lora");
    let path = dir.join("adapter.safetensors");
    send(
        &mut app,
        RunCommand::SaveCheckpoint {
            path: path.clone(),
            replace: false,
        },
    );
    update_until(&mut app, "the save", |_| path.exists());
    let adapter = tinygpt::model::checkpoint::Checkpoint::load_adapter(&path).unwrap();
    assert_eq!(adapter.step, 6);
    let base_ck = tinygpt::model::checkpoint::Checkpoint {
        config: base_config,
        step: 1,
        seed: adapter.seed,
        sampler_state: None,
        loss_history: vec![],
        timelapse: None,
        params: base,
        optimizer: None,
    };
    lora::check_base(&base_ck, &adapter).unwrap();
    // Load: the base as a model, then the adapter dropped on it: the
    // fine-tune goes on from its saved step with its saved adapters.
    let base_bytes = base_ck
        .to_bytes(tinygpt::model::checkpoint::Precision::F32, "base.safetensors")
        .unwrap();
    send(
        &mut app,
        RunCommand::LoadCheckpoint {
            name: "base.safetensors".into(),
            bytes: base_bytes,
        },
    );
    update_until(&mut app, "the base as a plain run", |app| {
        app.world().resource::<Run>().config().lora.is_none()
    });
    send(
        &mut app,
        RunCommand::LoadCheckpoint {
            name: "adapter.safetensors".into(),
            bytes: std::fs::read(&path).unwrap(),
        },
    );
    update_until(&mut app, "the adapter on its base", |app| {
        let run = app.world().resource::<Run>();
        run.config().lora.is_some() && !run.engine.busy()
    });
    assert_eq!(run_step(&mut app), 6);
    assert_eq!(weights(&mut app), after, "the fine-tune as it was saved");
    // An adapter on another model is refused, and the run stays.
    let generation = app.world().resource::<Run>().generation;
    let other = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new("gallery:tiny")).unwrap();
    send(
        &mut app,
        RunCommand::LoadCheckpoint {
            name: "tiny.safetensors".into(),
            bytes: other.to_bytes(tinygpt::model::checkpoint::Precision::F32, "tiny").unwrap(),
        },
    );
    update_until(&mut app, "the shipped tiny", |app| {
        app.world().resource::<Run>().generation > generation
    });
    let errors = app.world().resource::<AppStatus>().errors.len();
    send(
        &mut app,
        RunCommand::LoadCheckpoint {
            name: "adapter.safetensors".into(),
            bytes: std::fs::read(&path).unwrap(),
        },
    );
    update_until(&mut app, "the refusal", |app| {
        app.world().resource::<AppStatus>().errors.len() > errors
    });
    let status = app.world().resource::<AppStatus>();
    assert!(status.errors.last().unwrap().contains("fingerprint"), "{:?}", status.errors);
    assert!(app.world().resource::<Run>().config().lora.is_none());
}

/// `tinygpt app --checkpoint BASE --adapter A` opens the fine-tune; the
/// Model scene draws each adapter's update (α/r)·B·A beside its frozen W,
/// computed from A and B as the merge computes it, inside the picture.
/// `tinygpt app --headless --scene model --checkpoint small`, projected at
/// 1280×720 in presenter mode and at 1920×1080 with the panels open: the
/// stack reaches across the view, every label is inside it, apart from the
/// others and legible (18 px and more in presenter mode, 12 and more
/// otherwise), and each layer block is drawn where the line says.
#[test]
fn headless_model_scene_fills_the_view_with_legible_labels() {
    let dir = common::scratch_dir("app-model-layout");
    for (w, h, presenter) in [(1280, 720, true), (1920, 1080, false)] {
        let shot = dir.join(format!("model-{w}-{presenter}.png"));
        let (ws, hs) = (w.to_string(), h.to_string());
        let mut args = vec![
            "app", "--headless", "--scene", "model", "--checkpoint", "small", "--backend", "cpu",
            "--frames", "30", "--width", &ws, "--height", &hs,
        ];
        if presenter {
            args.push("--presenter");
        }
        let r = run_headless(&args, &shot);
        let line = r.to_string();
        let view: Vec<f64> = r["model"]["view"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let labels: Vec<(String, [f64; 4], f64)> = r["model"]["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let v: Vec<f64> = l["rect"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                (l["text"].as_str().unwrap().to_string(), [v[0], v[1], v[2], v[3]], l["px"].as_f64().unwrap())
            })
            .collect();
        // Titles, the columns' names and shapes, the head's note, the
        // colour bar's scale.
        assert!(labels.len() >= 20, "{line}");
        let least = if presenter { 18.0 } else { 12.0 };
        for (text, [x0, y0, x1, y1], px) in &labels {
            assert!(*px >= least - 0.05, "`{text}` at {px} px ({w}×{h}, presenter {presenter})");
            assert!(
                *x0 >= view[0] - 1.0 && *x1 <= view[2] + 1.0 && *y0 >= view[1] - 1.0 && *y1 <= view[3] + 1.0,
                "`{text}` {:?} inside the view {view:?}",
                [x0, y0, x1, y1]
            );
        }
        for (i, (a, ra, _)) in labels.iter().enumerate() {
            for (b, rb, _) in &labels[i + 1..] {
                let ix = ra[2].min(rb[2]) - ra[0].max(rb[0]);
                // (Line boxes of two lines of a column touch by a pixel or two.)
                let iy = ra[3].min(rb[3]) - ra[1].max(rb[1]) - 2.0;
                assert!(ix <= 0.0 || iy <= 0.0, "labels overlap: `{a}` {ra:?} and `{b}` {rb:?}");
            }
        }
        let blocks = r["blocks"].as_array().unwrap();
        let names: Vec<&str> = blocks.iter().map(|b| b["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["embeddings", "h.0", "h.1", "h.2", "ln_f", "head"]);
        let left = blocks.iter().map(|b| rect_of(b)[0]).min().unwrap() as f64;
        let right = blocks.iter().map(|b| rect_of(b)[2]).max().unwrap() as f64;
        assert!(
            right - left >= 0.75 * (view[2] - view[0]),
            "the stack spans {left}..{right} of the view {view:?}"
        );
        let (fw, fh, pixels) = decode(&shot);
        let differs = not_background(&r);
        for b in blocks {
            let rect = rect_of(b);
            let share = drawn_share(&pixels, fw, (rect[0] + 2, rect[1] + 2, (rect[2] - 2).min(fw), (rect[3] - 2).min(fh)), &differs);
            assert!(share > 0.9, "block {} drawn where the line says ({share:.2})", b["name"]);
        }
    }
}

#[test]
fn headless_model_scene_draws_each_lora_update() {
    let dir = common::scratch_dir("app-lora-model");
    let code = dir.join("code.txt");
    std::fs::write(&code, include_str!("../src/program/mod.rs").repeat(2)).unwrap();
    let adapter = dir.join("a.safetensors");
    common::tinygpt(&[
        "finetune", "--base", "gallery:tiny", "--corpus", code.to_str().unwrap(),
        "--targets", "attn,mlp", "--rank", "4", "--steps", "30", "--lr", "1e-2",
        "--backend", "cpu", "--out", adapter.to_str().unwrap(),
    ]);
    let shot = dir.join("model.png");
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", "gallery:tiny", "--adapter",
            adapter.to_str().unwrap(), "--corpus", code.to_str().unwrap(), "--backend", "cpu",
            "--scene", "model", "--frames", "30", "--width", "1280", "--height", "720",
        ],
        &shot,
    );
    let line = r.to_string();
    assert!(r["errors"].as_array().unwrap().is_empty(), "{line}");
    let updates = r["lora_updates"].as_array().unwrap();
    // Two blocks × (c_attn, attn.c_proj, c_fc, mlp.c_proj).
    assert_eq!(updates.len(), 2 * 4, "{line}");
    let base = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new("gallery:tiny")).unwrap();
    let ad = tinygpt::model::checkpoint::Checkpoint::load_adapter(&adapter).unwrap();
    let merged = tinygpt::model::lora::merge(&base, &ad).unwrap();
    let (w, h, pixels) = decode(&shot);
    for u in updates {
        let name = u["name"].as_str().unwrap();
        let w_name = name.replace(".lora_BA", ".weight");
        let (before, after) = (
            base.params.iter().find(|t| t.name == w_name).unwrap(),
            merged.params.iter().find(|t| t.name == w_name).unwrap(),
        );
        assert_eq!(u["shape"].as_array().unwrap().len(), 2);
        assert_eq!(
            u["shape"][0].as_u64().unwrap() as usize * u["shape"][1].as_u64().unwrap() as usize,
            before.values.len(),
            "{name}: the update has W's shape"
        );
        // The drawn update is the merge's W' − W.
        let delta: Vec<f32> = after.values.iter().zip(&before.values).map(|(a, b)| a - b).collect();
        let (lo, hi) = delta.iter().fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        let scale = lo.abs().max(hi.abs());
        for (key, want) in [("min", lo), ("max", hi)] {
            let got = u[key].as_f64().unwrap_or_else(|| panic!("{name} not drawn: {line}")) as f32;
            assert!((got - want).abs() <= 1e-4 * scale, "{name} {key}: {got} vs {want}");
        }
        assert!(scale > 0.0, "{name}: the adapter learned nothing");
        let rect = rect_of(u);
        assert!(rect[2] <= w && rect[3] <= h && rect[0] < rect[2] && rect[1] < rect[3], "{name} {rect:?}");
        let share = drawn_share(&pixels, w, (rect[0], rect[1], rect[2], rect[3]), &not_background(&r));
        assert!(share > 0.9, "{name}: {share} of its rectangle drawn");
    }
}

/// RGBA pixels of a PNG.
fn decode(path: &std::path::Path) -> (usize, usize, Vec<[u8; 4]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        (info.color_type, info.bit_depth),
        (png::ColorType::Rgba, png::BitDepth::Eight)
    );
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(4)
        .map(|p| [p[0], p[1], p[2], p[3]])
        .collect();
    (info.width as usize, info.height as usize, pixels)
}

/// Runs `tinygpt app` with `args` and the screenshot path `shot`; expects
/// success and returns its JSON line.
fn run_headless(args: &[&str], shot: &std::path::Path) -> serde_json::Value {
    run_headless_in(std::path::Path::new("."), args, shot)
}

/// [`run_headless`] with `dir` as the working directory (where exports go).
fn run_headless_in(
    dir: &std::path::Path,
    args: &[&str],
    shot: &std::path::Path,
) -> serde_json::Value {
    run_headless_with(dir, &[], args, shot)
}

/// [`run_headless_in`] with environment variables set for the app.
fn run_headless_with(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
    shot: &std::path::Path,
) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .current_dir(dir)
        .envs(env.iter().copied())
        .args(args)
        // The tests take some screenshots twice, to one file.
        .arg("--force")
        .arg("--screenshot")
        .arg(shot)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line: {stdout}\n{stderr}"));
    let shot = if shot.is_absolute() {
        shot.to_path_buf()
    } else {
        dir.join(shot)
    };
    assert_not_uniform(&shot, args);
    serde_json::from_str(line).unwrap()
}

/// Every headless picture is a picture: not one colour nearly everywhere
/// (a blank white or black frame passes a check that only compares
/// regions with the scene's background; issue 56 found white lesson frames).
fn assert_not_uniform(shot: &std::path::Path, args: &[&str]) {
    let (_, _, pixels) = decode(shot);
    let mut counts = std::collections::HashMap::new();
    for p in &pixels {
        *counts.entry([p[0], p[1], p[2]]).or_insert(0usize) += 1;
    }
    let most = counts.values().copied().max().unwrap_or(0);
    let share = most as f64 / pixels.len().max(1) as f64;
    assert!(
        counts.len() >= 16 && share < 0.99,
        "{}: a uniform frame ({} colours, the commonest on {:.1}% of it) for {args:?}",
        shot.display(),
        counts.len(),
        share * 100.0
    );
}

/// A region's `rect` from the JSON line: [x0, y0, x1, y1] in pixels.
fn rect_of(region: &serde_json::Value) -> Vec<usize> {
    region["rect"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as usize)
        .collect()
}

/// Whether a pixel is not the scene's background (named in the JSON line).
fn not_background(r: &serde_json::Value) -> impl Fn([u8; 4]) -> bool {
    let bg: Vec<i32> = r["background"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as i32)
        .collect();
    move |p: [u8; 4]| (0..3).map(|k| (p[k] as i32 - bg[k]).abs()).sum::<i32>() > 12
}

/// The share of the pixels in (x0, y0)..(x1, y1) for which `drawn` holds.
fn drawn_share(
    pixels: &[[u8; 4]],
    w: usize,
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    drawn: &impl Fn([u8; 4]) -> bool,
) -> f64 {
    let count = (y0..y1)
        .flat_map(|y| (x0..x1).map(move |x| (x, y)))
        .filter(|&(x, y)| drawn(pixels[y * w + x]))
        .count();
    count as f64 / ((x1 - x0) * (y1 - y0)) as f64
}

/// Asserts that each named region of a headless line is in the picture, at
/// least `min_size` (w, h) pixels inside its border, and that more than
/// `min_share` of its pixels differ from the background.
fn assert_regions_drawn(
    r: &serde_json::Value,
    shot: &std::path::Path,
    names: &[&str],
    min_size: (usize, usize),
    min_share: f64,
) {
    let line = r.to_string();
    let (w, h, pixels) = decode(shot);
    let differs = not_background(r);
    let regions = r["regions"].as_array().unwrap();
    for want in names {
        let region = regions
            .iter()
            .find(|g| g["name"] == *want)
            .unwrap_or_else(|| panic!("no {want} region: {line}"));
        let rect = rect_of(region);
        let (x0, y0, x1, y1) = (
            rect[0] + 1,
            rect[1] + 1,
            rect[2].min(w) - 1,
            rect[3].min(h) - 1,
        );
        assert!(
            x1 > x0 + min_size.0 && y1 > y0 + min_size.1,
            "{want}: {rect:?}"
        );
        let share = drawn_share(&pixels, w, (x0, y0, x1, y1), &differs);
        assert!(
            share > min_share,
            "{want} is drawn where the line says ({share:.2})"
        );
    }
}

#[test]
fn headless_app_trains_on_the_gpu_and_draws_the_layer_stack() {
    let dir = common::scratch_dir("app-headless");
    let shot = dir.join("frame.png");
    let r = run_headless(
        &[
            "app",
            "--headless",
            "--frames",
            "30",
            "--preset",
            "tiny",
            "--train",
            "--backend",
            "gpu",
            "--width",
            "960",
            "--height",
            "540",
        ],
        &shot,
    );
    let line = r.to_string();
    assert!(
        r["backend"].as_str().unwrap().starts_with("gpu"),
        "trains on Bevy's device: {}",
        r["backend"]
    );
    assert!(r["frames"].as_u64().unwrap() >= 30);
    let steps = r["steps"].as_u64().unwrap();
    assert!(steps >= 1, "training advanced: {line}");
    let losses: Vec<f64> = r["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN))
        .collect();
    assert_eq!(losses.len() as u64, steps, "one StepRecord per step");
    assert!(
        losses.iter().all(|l| l.is_finite() && *l > 0.0),
        "{losses:?}"
    );
    assert!(
        r["heatmap_distinct"].as_u64().unwrap() >= 2,
        "the wte heatmap changed between snapshots: {line}"
    );

    let (w, h, pixels) = decode(&shot);
    assert_eq!((w, h), (960, 540));
    let mut colours: Vec<[u8; 4]> = pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 100,
        "a real picture, not one colour: {} colours",
        colours.len()
    );
    let differs = not_background(&r);
    let blocks = r["blocks"].as_array().unwrap();
    let names: Vec<&str> = blocks.iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["embeddings", "h.0", "h.1", "ln_f", "head"]);
    for b in blocks {
        let rect = rect_of(b);
        let (x0, y0, x1, y1) = (rect[0] + 2, rect[1] + 2, rect[2] - 2, rect[3] - 2);
        assert!(
            x1 > x0 && y1 > y0 && x1 <= w && y1 <= h,
            "block {} inside the frame: {rect:?}",
            b["name"]
        );
        let share = drawn_share(&pixels, w, (x0, y0, x1, y1), &differs);
        assert!(
            share > 0.9,
            "block {} is drawn where the layout puts it ({share:.2} of its pixels)",
            b["name"]
        );
    }
    // Between two neighbouring blocks lies a strip of background: the
    // blocks are distinct regions, not one smear. (The final LayerNorm and
    // the head, which hold no matrix, share the top row: the head on the
    // right.)
    for pair in blocks.windows(2) {
        let (lower, upper) = (rect_of(&pair[0]), rect_of(&pair[1]));
        if pair[0]["name"] == "ln_f" && pair[1]["name"] == "head" && upper[1] == lower[1] {
            assert!(upper[0] > lower[2], "the head is right of ln_f: {line}");
            let x = (upper[0] + lower[2]) / 2;
            let column = (lower[1] + 2..lower[3] - 2).map(|y| differs(pixels[y * w + x]));
            assert!(column.filter(|d| !*d).count() as f64 > 0.9 * (lower[3] - lower[1] - 4) as f64);
            continue;
        }
        assert!(
            upper[3] <= lower[1],
            "{} is drawn above {}",
            pair[1]["name"],
            pair[0]["name"]
        );
        let y = (upper[3] + lower[1]) / 2;
        let row: Vec<bool> = (lower[0] + 2..lower[2] - 2)
            .map(|x| differs(pixels[y * w + x]))
            .collect();
        let share = row.iter().filter(|d| !**d).count() as f64 / row.len() as f64;
        assert!(
            share > 0.9,
            "background between {} and {} ({share:.2})",
            pair[0]["name"],
            pair[1]["name"]
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The Attention scene's request (a probe of a prompt, refreshed while the
/// run trains), switched on and off as a user switches scenes, leaves the
/// run bit-identical to one that never probed; the probes come back as
/// causal distributions over the prompt.
#[test]
fn switching_to_attention_while_training_keeps_the_run_bit_identical() {
    use tinygpt::app::training::Probes;
    use tinygpt::probe::ProbeSource;
    let steps = 24;
    let mut plain = app_with("tiny", |s| s.steps = steps);
    let mut probed = app_with("tiny", |s| s.steps = steps);
    send(&mut plain, RunCommand::Train);
    send(&mut probed, RunCommand::Train);
    let prompt = b"ROMEO:\nBut soft".to_vec();
    let mut frame = 0u64;
    let mut seen = 0;
    update_until(&mut probed, "the probed run", |app| {
        frame += 1;
        let mut probes = app.world_mut().resource_mut::<Probes>();
        // In the Attention scene for 10 frames, out of it for 5.
        let want = (frame % 15 < 10).then(|| ProbeSource::Prompt(prompt.clone()));
        probes.set_want(want);
        if let Some((_, r)) = &probes.latest {
            seen = probes.version;
            assert_eq!(r.tokens, prompt);
            for k in 0..r.blocks.len() {
                for h in 0..r.n_head {
                    let p = r.p(k, h);
                    let n = r.n();
                    for i in 0..n {
                        let sum: f32 = p[i * n..(i + 1) * n].iter().sum();
                        assert!((sum - 1.0).abs() < 1e-4, "row {i} sums to {sum}");
                        assert!(p[i * n + i + 1..(i + 1) * n].iter().all(|&x| x == 0.0));
                    }
                }
            }
        }
        let run = app.world().resource::<Run>();
        run.state == RunState::Finished && !run.engine.busy()
    });
    update_until(&mut plain, "the plain run", |app| {
        let run = app.world().resource::<Run>();
        run.state == RunState::Finished && !run.engine.busy()
    });
    assert!(seen >= 1, "no probe came back while training");
    let (a, b) = (weights(&mut plain), weights(&mut probed));
    assert_eq!(run_step(&mut plain), steps);
    assert_eq!(run_step(&mut probed), steps);
    for (x, y) in a.iter().zip(&b) {
        assert!(
            x.values
                .iter()
                .zip(&y.values)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "{} differs after probing",
            x.name
        );
    }
}

/// `tinygpt app --headless --scene attention`: the JSON line names the
/// scene, the probe saw the prompt, and each layer × head map is drawn where
/// the line says, in colours that are not the background.
#[test]
fn headless_attention_scene_draws_every_map_where_it_says() {
    let dir = common::scratch_dir("app-attention");
    let shot = dir.join("attention.png");
    let r = run_headless(
        &[
            "app",
            "--headless",
            "--scene",
            "attention",
            "--frames",
            "90",
            "--preset",
            "tiny",
            "--train",
            "--backend",
            "gpu",
            "--width",
            "1280",
            "--height",
            "720",
        ],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["scene"], "attention");
    let cfg = Config::load("tiny").unwrap();
    let att = &r["attention"];
    assert!(att.is_object(), "a probe came back: {line}");
    assert_eq!(att["heads"], cfg.n_head);
    assert!(att["n"].as_u64().unwrap() >= 2);
    let regions = r["regions"].as_array().unwrap();
    assert_eq!(regions.len(), cfg.n_layer * cfg.n_head, "{line}");
    let (w, h, pixels) = decode(&shot);
    assert_eq!((w, h), (1280, 720));
    let differs = not_background(&r);
    for region in regions {
        let name = region["name"].as_str().unwrap();
        assert!(name.starts_with("h.") && name.contains(".head"), "{name}");
        let rect = rect_of(region);
        let (x0, y0, x1, y1) = (rect[0] + 1, rect[1] + 1, rect[2] - 1, rect[3] - 1);
        assert!(
            x1 > x0 + 8 && y1 > y0 + 8 && x1 <= w && y1 <= h,
            "{name} in the frame: {rect:?}"
        );
        let share = drawn_share(&pixels, w, (x0, y0, x1, y1), &differs);
        assert!(
            share > 0.9,
            "map {name} is drawn where the line says ({share:.2})"
        );
    }
}

/// `tinygpt app --headless --scene step --step-op N` at a forward op, a
/// backward op and AdamW: the JSON line names the entry shown (the one the
/// program lists at N), its values were computed, the timeline and each
/// tensor's heatmap are drawn where the line says, and the step was not
/// kept (the run is still at step 0).
#[test]
fn headless_step_scene_shows_the_entry_asked_for() {
    let dir = common::scratch_dir("app-step");
    let cfg = Config::load("tiny").unwrap();
    let program = tinygpt::program::Program::new(&cfg);
    let entries = tinygpt::stepthrough::entries(&program);
    let backward = entries
        .iter()
        .find(|e| e.phase == tinygpt::stepthrough::Phase::Backward && e.kind == "linear")
        .unwrap()
        .index;
    for (n, phase) in [
        (2, "forward"),
        (backward, "backward"),
        (entries.len() - 1, "optimizer"),
    ] {
        let shot = dir.join(format!("step-{n}.png"));
        let r = run_headless(
            &[
                "app",
                "--headless",
                "--scene",
                "step",
                "--step-op",
                &n.to_string(),
                "--frames",
                "40",
                "--preset",
                "tiny",
                "--width",
                "1280",
                "--height",
                "720",
            ],
            &shot,
        );
        let line = r.to_string();
        assert_eq!(r["scene"], "step");
        let step = &r["step"];
        assert_eq!(step["index"], n, "{line}");
        assert_eq!(step["op"], entries[n].label.as_str(), "{line}");
        assert_eq!(step["phase"], phase, "{line}");
        assert_eq!(step["computed"], true, "{line}");
        assert_eq!(r["steps"], 0, "stepping through does not train: {line}");
        assert_eq!(step["kernels"], serde_json::json!([]), "the CPU runs no kernels: {line}");
        let regions = r["regions"].as_array().unwrap();
        let tensors = step["tensors"].as_array().unwrap().len();
        assert!(tensors >= 2, "{line}");
        let (w, h, pixels) = decode(&shot);
        let differs = not_background(&r);
        let mut heatmaps = 0;
        for region in regions {
            let name = region["name"].as_str().unwrap();
            let rect = rect_of(region);
            let (x0, y0, x1, y1) = (
                rect[0] + 1,
                rect[1] + 1,
                rect[2].min(w) - 1,
                rect[3].min(h) - 1,
            );
            if y0 + 4 >= h {
                continue; // scrolled below the frame
            }
            assert!(x1 > x0 + 8 && y1 > y0 + 4, "{name}: {rect:?}");
            let share = drawn_share(&pixels, w, (x0, y0, x1, y1), &differs);
            let want = if name == "timeline" { 0.25 } else { 0.9 };
            assert!(
                share > want,
                "{name} is drawn where the line says ({share:.2})"
            );
            heatmaps += name.starts_with("tensor:") as usize;
        }
        assert!(regions.iter().any(|r| r["name"] == "timeline"), "{line}");
        assert!(heatmaps >= 1, "{line}");
    }
}

/// On the GPU the Step scene names the kernels an entry runs (the plan's
/// dispatches, the names `bench --kernels` times), and whether one ran in
/// f16 on the tensor cores: not in an f32 run. (A mixed-precision run's
/// are checked on the H200, docs/performance.md: lavapipe has no
/// cooperative matrices.) On the CPU it names none.
#[test]
fn the_step_scene_names_the_gpu_kernels_an_entry_runs() {
    let dir = common::scratch_dir("app-step-kernels");
    let program = tinygpt::program::Program::new(&Config::load("tiny").unwrap());
    let entries = tinygpt::stepthrough::entries(&program);
    let linear = entries
        .iter()
        .find(|e| e.phase == tinygpt::stepthrough::Phase::Forward && e.kind == "linear")
        .unwrap()
        .index;
    let r = run_headless(
        &[
            "app", "--headless", "--scene", "step", "--step-op", &linear.to_string(), "--frames", "40",
            "--preset", "tiny", "--backend", "gpu", "--width", "1280", "--height", "720",
        ],
        &dir.join("step-gpu.png"),
    );
    let line = r.to_string();
    let step = &r["step"];
    assert_eq!(step["index"], linear, "{line}");
    let kernels: Vec<&str> = step["kernels"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(kernels.iter().any(|k| k.starts_with("matmul")), "a linear runs a matmul: {kernels:?}");
    assert!(kernels.iter().all(|k| !tinygpt::gpu::coop::on_tensor_cores(k)), "{kernels:?}");
    assert_eq!(step["f16"], false, "{line}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The Flash scene, opened paused mid-replay at visit 4 of the forward pass
/// (CPU model) and of the dQ pass (the GPU's traced kernels): the JSON line
/// names the visit (the fifth pair in the kernels' order: query tile 2, key
/// block 1), its source, and a check against naive attention; the memory,
/// shared memory, tile grid and rows are drawn where the line says.
#[test]
fn headless_flash_scene_replays_the_trace_mid_way() {
    let dir = common::scratch_dir("app-flash");
    let cfg = Config::load("small").unwrap();
    let nt = cfg.ctx.div_ceil(tinygpt::gpu::kernels::ATTENTION_TILE);
    for (backend, pass, source) in [
        ("cpu", "forward", "cpu_model"),
        ("gpu", "backward_dq", "kernel"),
    ] {
        let shot = dir.join(format!("flash-{pass}.png"));
        let r = run_headless(
            &[
                "app",
                "--headless",
                "--scene",
                "flash",
                "--flash-pass",
                pass,
                "--flash-visit",
                "4",
                "--frames",
                "40",
                "--preset",
                "small",
                "--backend",
                backend,
                "--width",
                "1280",
                "--height",
                "720",
            ],
            &shot,
        );
        let line = r.to_string();
        assert_eq!(r["scene"], "flash");
        let flash = &r["flash"];
        assert_eq!(flash["pass"], pass, "{line}");
        assert_eq!(flash["position"], 4, "{line}");
        assert_eq!(flash["visits"], nt * (nt + 1) / 2, "{line}");
        assert_eq!(
            (&flash["q_tile"], &flash["k_block"]),
            (&2.into(), &1.into()),
            "{line}"
        );
        assert_eq!(flash["source"], source, "{line}");
        assert!(
            flash["max_abs_diff_vs_naive"].as_f64().unwrap() < 1e-5,
            "{line}"
        );
        assert_regions_drawn(
            &r,
            &shot,
            &["memory", "shared", "grid", "rows"],
            (40, 40),
            0.9,
        );
    }
}

/// The CPU vs GPU scene on tiny: the step runs on both backends without
/// blocking, every compared tensor is listed, the largest difference is
/// within the parity tests' tolerance, and the list and the three heatmaps
/// (CPU, GPU, |GPU − CPU|) are drawn where the JSON line says.
#[test]
fn headless_correctness_scene_compares_every_tensor() {
    let dir = common::scratch_dir("app-correct");
    let shot = dir.join("correctness.png");
    let r = run_headless(
        &[
            "app",
            "--headless",
            "--scene",
            "correctness",
            "--frames",
            "90",
            "--preset",
            "tiny",
            "--width",
            "1280",
            "--height",
            "720",
        ],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["scene"], "correctness");
    let c = &r["correctness"];
    assert_eq!(c["state"], "done", "{line}");
    let program = Program::new(&Config::load("tiny").unwrap());
    let compared = program
        .tensors
        .iter()
        .enumerate()
        .filter(|(id, t)| {
            *id != program.stats
                && !matches!(
                    t.kind,
                    tinygpt::program::TensorKind::Input | tinygpt::program::TensorKind::Probe
                )
        })
        .count();
    assert_eq!(c["tensors"], compared, "{line}");
    assert!(c["max_rel"].as_f64().unwrap() < 1e-3, "{line}");
    assert_eq!(c["selected"], c["worst_tensor"], "{line}");
    assert_regions_drawn(
        &r,
        &shot,
        &["list", "heatmap:cpu", "heatmap:gpu", "heatmap:|gpu − cpu|"],
        (8, 8),
        0.9,
    );
}

/// The Speedup scene measures tiny on both backends from the app (`--bench
/// tiny`) without blocking a frame: the JSON line lists both measurements
/// with the fields `tinygpt bench --json` prints, the GPU one with its
/// ratio over the CPU's; the curve and the table are drawn, and the curve's
/// PNG export (`--export curve`, what its 📷 button does) writes a PNG of the
/// curve's size.
#[test]
fn headless_speedup_scene_measures_the_curve_in_the_app() {
    let dir = common::scratch_dir("app-speedup");
    let shot = dir.join("speedup.png");
    let r = run_headless_in(
        &dir,
        &[
            "app",
            "--headless",
            "--scene",
            "speedup",
            "--bench",
            "tiny",
            "--bench-backends",
            "cpu,gpu",
            "--export",
            "curve",
            "--frames",
            "500",
            "--width",
            "1280",
            "--height",
            "720",
        ],
        &shot,
    );
    let line = r.to_string();
    let s = &r["speedup"];
    assert_eq!(s["running"], false, "{line}");
    let results = s["results"].as_array().unwrap();
    let of = |kind: &str| {
        results
            .iter()
            .find(|x| x["preset"] == "tiny" && x["backend"] == kind)
            .unwrap_or_else(|| panic!("no tiny {kind}: {line}"))
    };
    let (cpu, gpu) = (of("cpu"), of("gpu"));
    let ratio = cpu["median_ms"].as_f64().unwrap() / gpu["median_ms"].as_f64().unwrap();
    assert!(
        (gpu["gpu_over_cpu"].as_f64().unwrap() - ratio).abs() < 1e-9 * ratio.max(1.0),
        "{line}"
    );
    // The same fields as the command line's bench.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "bench",
            "--presets",
            "tiny",
            "--backend",
            "cpu",
            "--json",
            "--seconds",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: serde_json::Value = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap();
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(cpu), keys(&cli), "{line}");
    assert_regions_drawn(&r, &shot, &["curve", "table"], (40, 16), 0.05);
    // The PNG export: a file of the curve's size, not blank.
    let path = r["exports"][0]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("no export: {line}"));
    let (w, h, pixels) = decode(std::path::Path::new(path));
    let curve = r["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "curve")
        .map(rect_of)
        .unwrap();
    assert_eq!((w, h), (curve[2] - curve[0], curve[3] - curve[1]), "{line}");
    let lit = pixels.iter().filter(|p| not_background(&r)(**p)).count();
    assert!(
        lit > pixels.len() / 50,
        "the exported curve is blank: {line}"
    );
}

/// One step of tiny timed per kernel (`--kernels tiny`, lavapipe has
/// timestamp queries): every family carries the program's FLOPs and bytes,
/// the adapter's ceilings were measured, each family sits on the roofline
/// (compute- or memory-bound as its intensity says), and the bar, table and
/// roofline are drawn.
#[test]
fn headless_speedup_kernels_put_each_family_on_the_roofline() {
    let dir = common::scratch_dir("app-kernels");
    let shot = dir.join("kernels.png");
    let r = run_headless(
        &[
            "app",
            "--headless",
            "--scene",
            "speedup",
            "--kernels",
            "tiny",
            "--frames",
            "200",
            "--width",
            "1280",
            "--height",
            "720",
        ],
        &shot,
    );
    let line = r.to_string();
    let k = &r["speedup"]["kernels"];
    assert_eq!(k["preset"], "tiny", "{line}");
    assert!(!k["rows"].as_array().unwrap().is_empty(), "{line}");
    let families = k["families"].as_array().unwrap();
    let rows_ms: f64 = k["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ms"].as_f64().unwrap())
        .sum();
    let fam_ms: f64 = families.iter().map(|f| f["ms"].as_f64().unwrap()).sum();
    assert!((rows_ms - fam_ms).abs() < 1e-9 * rows_ms.max(1.0), "{line}");
    let linear = families
        .iter()
        .find(|f| f["family"] == "fwd linear")
        .unwrap();
    assert!(linear["flops"].as_f64().unwrap() > 0.0, "{line}");
    if k["source"] == "gpu_timestamps" {
        let c = &k["ceilings"];
        let (peak, bw) = (
            c["matmul_tflops"].as_f64().unwrap() * 1e3,
            c["copy_gbps"].as_f64().unwrap(),
        );
        assert!(peak > 0.0 && bw > 0.0, "{line}");
        for f in families
            .iter()
            .filter(|f| f["flops"].as_f64().unwrap() > 0.0)
        {
            let i = f["intensity"].as_f64().unwrap();
            let bound = if i * bw < peak { "memory" } else { "compute" };
            assert_eq!(f["bound"], bound, "{line}");
            assert!(
                (f["attainable_gflops"].as_f64().unwrap() - (i * bw).min(peak)).abs() < 1e-6 * peak,
                "{line}"
            );
        }
    } else {
        assert!(k["note"].as_str().unwrap().contains("instead"), "{line}");
    }
    assert_regions_drawn(&r, &shot, &["kernels", "roofline"], (40, 16), 0.05);
}

/// Cancel during a bench of three presets: the app goes on drawing frames,
/// the bench stops short of its plan with "cancelled", and the run it paused
/// stays at the step it was paused at.
#[test]
fn headless_speedup_cancel_leaves_the_app_and_the_run_alone() {
    let dir = common::scratch_dir("app-cancel");
    let shot = dir.join("cancel.png");
    let r = run_headless(
        &[
            "app",
            "--headless",
            "--scene",
            "speedup",
            "--train",
            "--bench",
            "tiny,small,medium",
            "--cancel-bench-after",
            "2",
            "--frames",
            "150",
            "--width",
            "1280",
            "--height",
            "720",
        ],
        &shot,
    );
    let line = r.to_string();
    let s = &r["speedup"];
    assert_eq!(s["running"], false, "{line}");
    assert_eq!(s["message"], "cancelled", "{line}");
    assert!(s["results"].as_array().unwrap().len() < 6, "{line}");
    // Frames kept coming after Cancel: the app did not wait on the bench.
    assert!(s["frames_since_cancel"].as_u64().unwrap() >= 20, "{line}");
    // The run was paused (the step in flight then finishes, as Pause
    // always lets it), not stepped on by the bench, not reset.
    let at = s["paused_run_at"].as_u64().unwrap();
    let steps = r["steps"].as_u64().unwrap();
    assert!(steps == at || steps == at + 1, "{line}");
    assert_regions_drawn(&r, &shot, &["curve"], (40, 16), 0.05);
}

/// The lessons' scene names are the app's scenes.
#[test]
fn lesson_scene_names_are_the_app_scenes() {
    let keys: Vec<&str> = tinygpt::app::scenes::Scene::ALL.map(|s| s.key()).to_vec();
    assert_eq!(keys, tinygpt::lesson::SCENES.to_vec());
}

/// Every step of every built-in lesson opens headless (`--lesson NAME
/// --lesson-step K`): the JSON line says which step of which lesson is on
/// screen and in which scene, the picture is not blank, and the narration
/// box is drawn where the line says.
#[test]
fn headless_walks_every_step_of_every_lesson() {
    let dir = common::scratch_dir("app-lessons");
    for (name, text) in tinygpt::lesson::BUILTIN_LESSONS {
        let lesson = tinygpt::lesson::Lesson::parse(name, text).unwrap();
        for (k, step) in lesson.steps.iter().enumerate() {
            let shot = dir.join(format!("{name}-{}.png", k + 1));
            let k1 = (k + 1).to_string();
            let r = run_headless(
                &[
                    "app",
                    "--headless",
                    "--lesson",
                    name,
                    "--lesson-step",
                    &k1,
                    "--frames",
                    "30",
                    "--width",
                    "1280",
                    "--height",
                    "720",
                ],
                &shot,
            );
            let line = r.to_string();
            assert_eq!(r["lesson"]["name"], *name, "{line}");
            assert_eq!(r["lesson"]["step"], k + 1, "{line}");
            assert_eq!(r["lesson"]["step_title"], step.title.as_str(), "{line}");
            assert_eq!(r["scene"], step.scene.as_str(), "{line}");
            assert_eq!(r["ui"]["locked"], false, "{line}");
            assert_eq!(r["ui"]["scene_tabs"], true, "{line}");
            assert_eq!(r["ui"]["end_lesson"], true, "{line}");
            assert_regions_drawn(&r, &shot, &["narration"], (200, 60), 0.2);
            if step.scene == "flow" {
                check_walk_step(&r, step);
            }
        }
    }
}

/// A lesson step of *Inside the model* opens the tour where it says: its
/// focus's beat (a tensor's op, `grad.` for its backward beat, a layer's
/// first op, AdamW's update), paused; a step that plays the backward pass
/// is playing it.
fn check_walk_step(r: &serde_json::Value, step: &tinygpt::lesson::LessonStep) {
    use tinygpt::lesson::{Action, Focus};
    let line = r.to_string();
    let walk = &r["walk"];
    let beats = walk["beats"].as_array().unwrap();
    assert!(!beats.is_empty(), "{line}");
    let beat = walk["beat"].as_u64().unwrap() as usize;
    let find = |pass: &str, f: &dyn Fn(&serde_json::Value) -> bool| {
        beats.iter().position(|b| b["pass"] == pass && f(b)).unwrap_or_else(|| panic!("no beat for {:?}: {line}", step.focus))
    };
    let expected = match &step.focus {
        Focus::Tensor(name) => Some(match name.strip_prefix("grad.") {
            Some(node) => find("backward", &|b| b["node"] == node),
            None => find("forward", &|b| b["node"] == name.as_str()),
        }),
        Focus::Layer(name) if name == "head" => Some(find("forward", &|b| b["kind"] == "logits")),
        Focus::Layer(name) => {
            let layer: u64 = name.strip_prefix("h.").unwrap().parse().unwrap();
            Some(find("forward", &|b| b["layer"] == layer))
        }
        Focus::Stage(_) => Some(find("update", &|_| true)),
        _ => None,
    };
    if let Some(k) = expected {
        assert_eq!(beat, k, "`{}` opens at its beat {}: {line}", step.title, beats[k]);
        assert_eq!(walk["playing"], false, "{line}");
    }
    if step.action == Some(Action::PlayBackward) {
        assert_eq!(beats[beat]["pass"], "backward", "{line}");
        assert_eq!(walk["playing"], true, "{line}");
    }
}

/// A workshop (`--locked`, a link's `locked=1`): the lesson's scene and
/// narration, and no scene switcher, run or chart panel, or "end lesson";
/// a file dropped on it is refused with one line, the run untouched.
#[test]
fn a_locked_workshop_shows_its_lesson_and_nothing_else() {
    let dir = common::scratch_dir("app-workshop");
    let shot = dir.join("workshop.png");
    let r = run_headless(
        &["app", "--headless", "--lesson", "attention", "--lesson-step", "2", "--locked", "--frames", "30", "--width", "1280", "--height", "720"],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["lesson"]["name"], "attention", "{line}");
    assert_eq!(r["lesson"]["step"], 2, "{line}");
    for (key, want) in [("locked", true), ("scene_tabs", false), ("run_panel", false), ("charts", false), ("end_lesson", false)] {
        assert_eq!(r["ui"][key], want, "{key}: {line}");
    }
    assert_regions_drawn(&r, &shot, &["narration"], (200, 60), 0.2);
    // --locked without a lesson is refused by the command line.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt")).args(["app", "--headless", "--locked"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lesson"));
    // A dropped file, locked and not.
    let corpus = dir.join("mine.txt");
    std::fs::write(&corpus, b"to be or not to be, that is the question. ".repeat(40)).unwrap();
    for locked in [true, false] {
        let mut app = app_with("tiny", |_| {});
        app.add_message::<bevy::window::FileDragAndDrop>()
            .add_plugins(tinygpt::app::files::FilesPlugin)
            .insert_resource(tinygpt::app::workshop::Workshop { locked });
        let generation = app.world().resource::<Run>().generation;
        app.world_mut().write_message(bevy::window::FileDragAndDrop::DroppedFile {
            window: Entity::PLACEHOLDER,
            path_buf: corpus.clone(),
        });
        for _ in 0..5 {
            app.update();
        }
        let errors = app.world().resource::<AppStatus>().errors.clone();
        let corpus_name = app.world().resource::<Run>().corpus_name.clone();
        if locked {
            assert_eq!(errors, vec![tinygpt::app::workshop::no_files()]);
            assert_eq!(app.world().resource::<Run>().generation, generation);
            assert!(!corpus_name.contains("mine.txt"), "{corpus_name}");
        } else {
            assert!(errors.is_empty(), "{errors:?}");
            assert!(corpus_name.contains("mine.txt"), "{corpus_name}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A model the start names with `train` (a link's `model=ID&train=1`,
/// `--checkpoint X --train`) trains once it is open: it replaces the first
/// run, which `train` set going. Opened later, by hand, it waits for Train.
#[test]
fn a_model_opened_at_the_start_with_train_trains() {
    // The shipped tiny with room to train past its step.
    let mut ckpt = tinygpt::model::checkpoint::Checkpoint::from_bytes(
        tinygpt::model::shipped::shipped("tiny").unwrap(),
        "tiny",
    )
    .unwrap();
    ckpt.config.steps = ckpt.step + 1000;
    let bytes = ckpt.to_bytes(tinygpt::model::checkpoint::Precision::F32, "tiny").unwrap();
    for train_on_start in [true, false] {
        let mut settings = RunSettings::from_preset("tiny", Config::load("tiny").unwrap());
        settings.backend = BackendChoice::Cpu;
        let mut app = App::new();
        app.add_plugins(MinimalPlugins)
            .insert_resource(settings)
            .insert_resource(tinygpt::app::training::TrainOnStart(train_on_start));
        tinygpt::app::add_explainer_plugins(&mut app);
        app.update();
        send(&mut app, RunCommand::LoadCheckpoint { name: "tiny".into(), bytes: bytes.clone() });
        update_until(&mut app, "the checkpoint's run", |app| app.world().resource::<Run>().generation == 2);
        let state = app.world().resource::<Run>().state;
        if train_on_start {
            assert_eq!(state, RunState::Training);
            update_until(&mut app, "a step past the checkpoint", |app| run_step(app) > ckpt.step);
        } else {
            assert_ne!(state, RunState::Training);
        }
    }
}

/// The app in Spanish and in Chinese (`--lang`, as a link's `lang=`): a
/// workshop opens its lesson in the language, the narration the
/// translation's, and the picture is taken once the language and (for
/// Chinese) its font are in place; the handout is printed in the language;
/// a language the app does not speak is refused with one line.
#[test]
fn a_workshop_and_its_handout_speak_spanish_and_chinese() {
    use tinygpt::i18n::Language;
    let dir = common::scratch_dir("app-languages");
    for language in [Language::Spanish, Language::Chinese] {
        let code = language.code();
        let shot = dir.join(format!("workshop-{code}.png"));
        let r = run_headless(
            &["app", "--headless", "--lesson", "one-byte", "--lesson-step", "3", "--locked", "--lang", code, "--frames", "30", "--width", "1280", "--height", "720"],
            &shot,
        );
        let line = r.to_string();
        let lesson = tinygpt::lesson::Lesson::load_in("one-byte", language).unwrap();
        assert_eq!(r["language"], code, "{line}");
        assert_eq!(r["lesson"]["title"], lesson.title.as_str(), "{line}");
        assert_eq!(r["lesson"]["step_title"], lesson.steps[2].title.as_str(), "{line}");
        assert_eq!(r["scene"], "path", "the lesson's scene, not undone by the switch: {line}");
        assert!(r["errors"].as_array().unwrap().is_empty(), "{line}");
        assert_regions_drawn(&r, &shot, &["narration"], (200, 60), 0.2);
    }
    // The handout in Chinese: the page says so, with the lesson's Chinese words.
    let page = dir.join("reversal-zh.html");
    let (said, _) = common::tinygpt(&["handout", "--lang", "zh", "--lesson", "reversal", "--out", page.to_str().unwrap(), "--width", "320", "--height", "240"]);
    assert!(said.contains("wrote"), "{said}");
    let html = std::fs::read_to_string(&page).unwrap();
    let lesson = tinygpt::lesson::Lesson::load_in("reversal", Language::Chinese).unwrap();
    assert!(html.contains("<html lang=\"zh\">"), "{html}");
    assert!(html.contains(&lesson.title) && html.contains(&lesson.steps[2].title), "{html}");
    assert!(html.contains(&tinygpt::i18n::tr_in(Language::Chinese, "handout-answers", &[])), "{html}");
    // A language it does not speak.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt")).args(["app", "--headless", "--lang", "fr"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`fr`") && stderr.contains("zh (中文)"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `tinygpt app --help` says what every scene is (the `--scene` text once
/// named four of the eight; it is now made from the scene list and the
/// switcher's tooltips), and a scene it lacks is refused with the list.
#[test]
fn the_help_names_every_scene() {
    use tinygpt::app::scenes::Scene;
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt")).args(["app", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let start = help.find("--scene <SCENE>").expect("--scene in the help");
    let end = help[start + 2..].find("\n      --").map_or(help.len(), |i| start + 2 + i);
    let scene_help = &help[start..end];
    for scene in Scene::ALL {
        assert!(scene_help.contains(&format!("{} (", scene.key())), "`{}` is not described in:\n{scene_help}", scene.key());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt")).args(["app", "--headless", "--scene", "lens"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for scene in Scene::ALL {
        assert!(stderr.contains(scene.key()), "{stderr}");
    }
}

/// Every byte's axis label (the Attention scene's, the Flow scene's) and
/// the signs the scenes draw have a glyph in the label font: no tofu box
/// (the space used to be `␠`, which DejaVu Sans lacks; it is `␣`).
#[test]
fn every_label_the_scenes_draw_has_a_glyph() {
    use skrifa::MetadataProvider;
    let font = skrifa::FontRef::new(tinygpt::app::canvas::LABEL_FONT).unwrap();
    let charmap = font.charmap();
    let signs = "×·ᵀ√␣↵→←↑↓⊙∑≈≤≥√…–—";
    let labels: Vec<String> = (0..=255u8).map(tinygpt::probe::byte_label).chain([signs.to_string()]).collect();
    for label in labels {
        for c in label.chars() {
            assert!(charmap.map(c).is_some(), "the label font has no glyph for {c:?} (U+{:04X}) in `{label}`", c as u32);
        }
    }
}

/// `tinygpt handout`: a lesson as a printable page, each step's picture
/// taken from the app headless at that step; it writes nothing over an
/// earlier handout unless told to.
#[test]
fn a_handout_prints_every_step_of_a_lesson_with_its_picture() {
    let dir = common::scratch_dir("app-handout");
    let page = dir.join("reversal.html");
    let lesson = tinygpt::lesson::Lesson::load("reversal").unwrap();
    let args = ["handout", "--lesson", "reversal", "--out", page.to_str().unwrap(), "--width", "640", "--height", "360"];
    let (said, _) = common::tinygpt(&args);
    assert!(said.contains("wrote"), "{said}");
    let pictures: Vec<String> = (1..=lesson.steps.len()).map(|k| format!("reversal-step-{k}.png")).collect();
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html, tinygpt::handout::html(&lesson, "reversal", &pictures));
    for picture in &pictures {
        let (w, h, pixels) = decode(&dir.join(picture));
        assert_eq!((w, h), (640, 360), "{picture}");
        let colours: std::collections::HashSet<[u8; 4]> = pixels.into_iter().collect();
        assert!(colours.len() > 50, "{picture} looks blank ({} colours)", colours.len());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt")).args(args).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&page).unwrap(), html);
    let _ = std::fs::remove_dir_all(dir);
}

/// The lesson panel's *print a handout*: the page is made by a child process
/// while the frames go on, and the status line says where it went; a
/// second one takes the next free name.
#[test]
fn the_lesson_panels_handout_button_makes_the_page_beside_the_app() {
    use tinygpt::app::handout::{HandoutJob, HandoutPlugin};
    use tinygpt::app::lesson::LessonPlayer;
    let dir = common::scratch_dir("app-handout-button");
    let mut app = app_with("tiny", |_| {});
    app.add_plugins(HandoutPlugin);
    {
        let mut job = app.world_mut().resource_mut::<HandoutJob>();
        job.dir = dir.clone();
        job.program = Some(env!("CARGO_BIN_EXE_tinygpt").into());
    }
    let lesson = tinygpt::lesson::Lesson::load("reversal").unwrap();
    let steps = lesson.steps.len();
    app.insert_resource(LessonPlayer::open("reversal".into(), lesson, 0));
    for page in ["handout-reversal.html", "handout-reversal-2.html"] {
        app.world_mut().resource_mut::<LessonPlayer>().handout_asked = true;
        app.update();
        let info = app.world().resource::<AppStatus>().info.clone().unwrap_or_default();
        assert!(info.contains("making") && info.contains(page), "{info}");
        update_until(&mut app, "the handout", |app| app.world().resource::<HandoutJob>().running.is_none());
        let status = app.world().resource::<AppStatus>();
        assert!(status.errors.is_empty(), "{:?}", status.errors);
        assert!(status.info.as_deref().unwrap_or("").contains("wrote"), "{:?}", status.info);
        assert!(dir.join(page).exists(), "{page}");
        let stem = page.trim_end_matches(".html");
        for k in 1..=steps {
            assert!(dir.join(format!("{stem}-step-{k}.png")).exists(), "{stem} step {k}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A bad lesson file is refused with the file, the step and the field:
/// headless, as one line and a failure (issue 29: it used to exit 0 with
/// the error only in the JSON); in the window, the app opens with the error
/// in its status line.
#[test]
fn a_bad_lesson_is_named_and_refused_headless() {
    let dir = common::scratch_dir("app-bad-lesson");
    let file = dir.join("bad.ron");
    let attention = tinygpt::lesson::BUILTIN_LESSONS
        .iter()
        .find(|l| l.0 == "attention")
        .unwrap()
        .1;
    let text = attention.replacen("Head(layer: 0, head: 0)", "Head(layer: 0, head: 99)", 1);
    std::fs::write(&file, text).unwrap();
    for lesson in [file.display().to_string(), "missing".to_string()] {
        let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args([
                "app",
                "--headless",
                "--frames",
                "10",
                "--width",
                "640",
                "--height",
                "360",
                "--lesson",
                &lesson,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lesson}: accepted\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let want: &[&str] = if lesson == "missing" {
            &["missing", "no such lesson"]
        } else {
            &["bad.ron, step 2 (focus)", "99"]
        };
        for w in want {
            assert!(stderr.contains(w), "{lesson}: no `{w}` in\n{stderr}");
        }
        assert!(out.stdout.is_empty(), "{lesson}: the app ran");
    }
}

/// The lessons' heatmap views are the Model scene's.
#[test]
fn lesson_heatmap_views_are_the_model_scene_views() {
    let keys: Vec<&str> = tinygpt::app::training::HeatmapView::ALL
        .into_iter()
        .map(tinygpt::app::link::view_key)
        .collect();
    assert_eq!(keys, tinygpt::lesson::HEATMAP_VIEWS.to_vec());
}

/// A "break it" lab from the command line trains the broken model in the
/// app, and the view's data comes out as JSON (the 💾 Data button's file):
/// the attention without the mask gives weight to keys after the query,
/// and every row still sums to 1. The loss chart comes out as SVG and CSV
/// with one row per step it shows.
#[test]
fn headless_lab_run_exports_its_data_and_loss_chart() {
    let dir = common::scratch_dir("app-lab-export");
    let shot = dir.join("lab.png");
    let common_args = [
        "app",
        "--headless",
        "--preset",
        "tiny",
        "--lab",
        "no-causal-mask",
        "--lr",
        "3e-3",
        "--train",
        "--frames",
        "40",
        "--width",
        "960",
        "--height",
        "540",
    ];
    let mut args = common_args.to_vec();
    args.extend(["--scene", "attention", "--export", "data"]);
    let r = run_headless_in(&dir, &args, &shot);
    let line = r.to_string();
    assert_eq!(r["lab"], "no causal mask", "{line}");
    assert!(r["errors"].as_array().unwrap().is_empty(), "{line}");
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tinygpt-attention-data.json")).unwrap())
            .unwrap();
    assert_eq!(data["scene"], "attention");
    assert_eq!(data["run"]["config"]["lab"]["causal_mask"], false, "{data}");
    let rows = data["view"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 3, "every layer × head");
    let mut above = 0.0;
    for row in rows {
        let p = row["p"].as_array().unwrap();
        assert_eq!(
            p.len(),
            32,
            "without the mask the probe shows all T positions"
        );
        for (i, r) in p.iter().enumerate() {
            let r: Vec<f64> = r
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert!(
                (r.iter().sum::<f64>() - 1.0).abs() < 1e-4,
                "row {i} sums to 1"
            );
            above += r[i + 1..].iter().sum::<f64>();
        }
    }
    assert!(above > 1.0, "weight above the diagonal: {above}");
    // The file was written a few frames before the run's last line: every
    // step up to then, in order.
    let loss = data["loss"].as_array().unwrap();
    assert!(!loss.is_empty() && loss.len() as u64 <= r["steps"].as_u64().unwrap());
    for (k, point) in loss.iter().enumerate() {
        assert_eq!(point["step"], k + 1);
    }

    let mut args = common_args.to_vec();
    args.extend(["--export", "loss-chart"]);
    let r = run_headless_in(&dir, &args, &shot);
    let exported: Vec<String> = r["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{e}"))
                .to_string()
        })
        .collect();
    assert_eq!(exported.len(), 2, "{r}");
    let svg = std::fs::read_to_string(dir.join("tinygpt-loss.svg")).unwrap();
    assert!(
        svg.contains("no causal mask") && svg.contains("<polyline"),
        "{svg}"
    );
    let csv = std::fs::read_to_string(dir.join("tinygpt-loss.csv")).unwrap();
    let train_rows = csv.lines().filter(|l| l.starts_with("\"train:")).count();
    assert!(
        train_rows > 0 && train_rows as u64 <= r["steps"].as_u64().unwrap(),
        "{csv}"
    );
}

/// A learning rate that diverges (issue 18): on both backends the app
/// pauses at the last good step, says so, and names the first op whose
/// output went non-finite (the step run again op by op, off the frame).
#[test]
fn headless_divergence_pauses_at_the_last_good_step_and_names_the_op() {
    let dir = common::scratch_dir("app-diverge");
    let mut named = Vec::new();
    for backend in ["cpu", "gpu"] {
        let shot = dir.join(format!("{backend}.png"));
        let r = run_headless(
            &[
                "app",
                "--headless",
                "--frames",
                "600",
                "--fps",
                "0",
                "--preset",
                "tiny",
                "--lr",
                "1e10",
                "--train",
                "--backend",
                backend,
                "--width",
                "640",
                "--height",
                "360",
            ],
            &shot,
        );
        let errors: Vec<&str> = r["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| e.contains("training diverged") && e.contains("back at step")),
            "{backend}: {errors:?}"
        );
        let op = errors
            .iter()
            .find_map(|e| e.split("came out of ").nth(1))
            .unwrap_or_else(|| panic!("{backend}: no op named: {errors:?}"));
        named.push(op.to_string());
    }
    assert_eq!(named[0], named[1], "both backends name the same op");
}

/// A GPU lost mid-run (issue 18; the training device destroyed after step
/// 12, on lavapipe): the run goes on on the CPU from its last copy read back
/// from the GPU, saying so, and the renderer draws on. By default the run
/// trains on the renderer's device, so the loss takes both and Bevy's
/// renderer starts again on a new device.
#[test]
fn headless_lost_gpu_goes_on_on_the_cpu_from_the_last_copy() {
    lost_gpu_goes_on_on_the_cpu("app-lost-gpu", &[]);
}

/// The same with a training device of its own (`TINYGPT_APP_OWN_DEVICE`):
/// its loss leaves the renderer's device standing.
#[test]
fn headless_lost_own_training_device_goes_on_on_the_cpu() {
    lost_gpu_goes_on_on_the_cpu("app-lost-own-gpu", &[("TINYGPT_APP_OWN_DEVICE", "1")]);
}

fn lost_gpu_goes_on_on_the_cpu(name: &str, env: &[(&str, &str)]) {
    let dir = common::scratch_dir(name);
    let shot = dir.join("frame.png");
    let mut env = env.to_vec();
    env.push(("TINYGPT_TEST_LOSE_GPU_AFTER", "12"));
    let r = run_headless_with(
        &dir,
        &env,
        &[
            "app",
            "--headless",
            "--frames",
            "900",
            "--fps",
            "0",
            "--preset",
            "tiny",
            "--train",
            "--backend",
            "gpu",
            "--width",
            "640",
            "--height",
            "360",
        ],
        &shot,
    );
    assert!(
        r["backend"].as_str().unwrap().starts_with("cpu"),
        "{}",
        r["backend"]
    );
    let errors = r["errors"].to_string();
    let from: u64 = errors
        .split("goes on on the CPU from step ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no fallback message: {errors}"));
    assert!(from >= 1, "{errors}");
    assert!(
        r["steps"].as_u64().unwrap() > 13,
        "training went on: {}",
        r["steps"]
    );
    // The renderer drew on: the last frame has the layer stack.
    assert_regions_drawn(&r, &shot, &["embeddings", "h.0", "head"], (40, 8), 0.05);
    std::fs::remove_dir_all(&dir).ok();
}

/// The flow's node names for a prompt, in the program's order, computed
/// here with the library (the shipped small's weights, on the CPU).
fn flow_of_shipped_small(prompt: &str, position: Option<usize>) -> tinygpt::flow::Flow {
    use tinygpt::backend::Backend;
    let bytes = tinygpt::model::shipped::shipped("small").unwrap();
    let ckpt = tinygpt::model::checkpoint::Checkpoint::from_bytes(bytes, "small").unwrap();
    let config = tinygpt::flow::config_for(&ckpt.config);
    let mut backend = tinygpt::cpu::CpuBackend::<f32>::new(tinygpt::program::Program::new(&config));
    for p in &ckpt.params {
        backend.write(&p.name, &p.values).unwrap();
    }
    tinygpt::flow::run(&mut backend, &ckpt.params, prompt.as_bytes(), position).unwrap()
}

/// Each label's rectangle from the flow's part of the line.
fn label_rects(flow: &serde_json::Value) -> Vec<(String, [f64; 4])> {
    flow["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let r: Vec<f64> = l["rect"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            (l["text"].as_str().unwrap().to_string(), [r[0], r[1], r[2], r[3]])
        })
        .collect()
}

/// `tinygpt app --headless --scene path --checkpoint small`, zoomed out and
/// into a block, forward and backward, at 1280×720 and 1920×1080: the data
/// behind the view is the program's own forward pass (recomputed here, CPU
/// bit for bit), the pulses visit the nodes in the program's order (its
/// reverse going backward), every node is drawn where the line says, no two
/// labels overlap, every label is inside the picture, and no frame after
/// the first takes over 100 ms... on a GPU (lavapipe draws on the CPU: the
/// frame times are reported in docs/performance.md, not asserted here).
#[test]
fn headless_flow_scene_plays_the_passes_where_it_says() {
    let dir = common::scratch_dir("app-flow");
    let prompt = "ROMEO: But soft, what light through yonder window";
    let expected = flow_of_shipped_small(prompt, None);
    let names: Vec<String> = expected.nodes.iter().map(|n| n.name.clone()).collect();
    // Zoomed out, forward, with the data exported.
    let shot = dir.join("flow.png");
    let r = run_headless_in(
        &dir,
        &["app", "--headless", "--scene", "path", "--checkpoint", "small", "--frames", "90", "--width", "1280", "--height", "720", "--export", "data"],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["scene"], "path", "{line}");
    let flow = &r["path"];
    assert!(flow["error"].is_null(), "{line}");
    assert_eq!(flow["zoom"], "Model", "{line}");
    // Where it was computed: `device` for programs, the label for people.
    let device = flow["device"].as_str().unwrap_or_default();
    assert!(matches!(device, "gpu" | "cpu"), "{line}");
    assert_eq!(device == "cpu", flow["backend"].as_str().unwrap().contains("CPU"), "{line}");
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tinygpt-path-data.json")).unwrap()).unwrap();
    let view = &data["view"];
    // The default prompt is the first 48 bytes of this line.
    let shown_prompt: Vec<u8> = view["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
    let expected = flow_of_shipped_small(std::str::from_utf8(&shown_prompt).unwrap(), None);
    assert!(prompt.as_bytes().starts_with(&shown_prompt), "{line}");
    let residual: Vec<Vec<f32>> = serde_json::from_value(view["residual"].clone()).unwrap();
    assert_eq!(residual, expected.residual, "the scene's stream is the program's, bit for bit");
    let probs: Vec<f32> = serde_json::from_value(view["probs"].clone()).unwrap();
    assert_eq!(probs, expected.probs);
    assert!(view["backward"]["param_grad_norms"].as_array().is_some_and(|g| !g.is_empty()), "{line}");
    // The pulse went up in the program's order.
    let visited: Vec<String> = serde_json::from_value(flow["visited"].clone()).unwrap();
    assert!(visited.len() >= 2, "{line}");
    assert_eq!(visited[..], names[..visited.len()], "{line}");
    // Every node drawn where the line says; the stream's points and the
    // collapsed blocks are regions of the picture.
    let regions: Vec<&str> = r["regions"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    let last_chip = format!("token{}", shown_prompt.len() - 1);
    for want in ["emb", "h.0.res_2", "block0", "block2", "ln_f.out", "next-byte", &last_chip] {
        assert!(regions.contains(&want), "{want} in {line}");
    }
    assert_regions_drawn(&r, &shot, &["emb", "h.1.res_2", "block1", "next-byte"], (100, 20), 0.2);
    check_labels(&r, (1280.0, 720.0));
    // Presenter mode at 1280×720: the picture as wide as the screen, its
    // labels about 1.8× as tall, still whole and apart (the camera follows
    // the pulse).
    let shot = dir.join("flow-presenter.png");
    let p = run_headless(
        &["app", "--headless", "--scene", "path", "--checkpoint", "small", "--presenter", "--frames", "90", "--width", "1280", "--height", "720"],
        &shot,
    );
    assert_eq!(p["presenter"], true, "{p}");
    let median_height = |r: &serde_json::Value| {
        let mut h: Vec<f64> = label_rects(&r["path"]).iter().map(|(_, b)| b[3] - b[1]).collect();
        h.sort_by(f64::total_cmp);
        h[h.len() / 2]
    };
    let (normal, large) = (median_height(&r), median_height(&p));
    assert!(large >= 1.5 * normal, "presenter labels {large} px against {normal} px");
    check_labels(&p, (1280.0, 720.0));

    // Into a block, and the backward pass, at 1920×1080: the lesson steps
    // that do it.
    for (step, size, pass) in [("3", ("1920", "1080"), "forward"), ("6", ("1280", "720"), "backward"), ("6", ("1920", "1080"), "backward")] {
        let shot = dir.join(format!("flow-{step}-{}.png", size.0));
        let r = run_headless(
            &["app", "--headless", "--lesson", "one-byte", "--lesson-step", step, "--frames", "120", "--width", size.0, "--height", size.1],
            &shot,
        );
        let line = r.to_string();
        let flow = &r["path"];
        assert_eq!(flow["pass"], pass, "{line}");
        let visited: Vec<String> = serde_json::from_value(flow["visited"].clone()).unwrap();
        assert!(visited.len() >= 2, "{line}");
        let order: Vec<String> = if pass == "forward" { names.clone() } else { names.iter().rev().cloned().collect() };
        assert_eq!(visited[..], order[..visited.len()], "{line}");
        if step == "3" {
            assert_eq!(flow["zoom"], "Block(0)", "{line}");
            assert_regions_drawn(&r, &shot, &["h.0.ln_1.out", "h.0.mlp.gelu", "h.0.head0"], (100, 20), 0.2);
        } else {
            assert_eq!(flow["position"], 20, "{line}");
        }
        let (w, h) = (size.0.parse().unwrap(), size.1.parse().unwrap());
        check_labels(&r, (w, h));
    }
}

/// Every flow label inside the picture and none over another.
fn check_labels(r: &serde_json::Value, (w, h): (f64, f64)) {
    let labels = label_rects(&r["path"]);
    assert!(labels.len() > 10, "{r}");
    for (text, [x0, y0, x1, y1]) in &labels {
        // Labels of the open block's neighbours may sit past the camera's
        // fit; the ones in view are whole.
        if *x1 < 0.0 || *y1 < 0.0 || *x0 > w || *y0 > h {
            continue;
        }
        assert!(*x0 >= -1.0 && *x1 <= w + 1.0, "`{text}` cut off at the side: {x0}..{x1} of {w}");
    }
    for (i, (a, ra)) in labels.iter().enumerate() {
        for (b, rb) in &labels[i + 1..] {
            let ix = (ra[2].min(rb[2]) - ra[0].max(rb[0])).max(0.0);
            let iy = (ra[3].min(rb[3]) - ra[1].max(rb[1])).max(0.0);
            let smaller = ((ra[2] - ra[0]) * (ra[3] - ra[1])).min((rb[2] - rb[0]) * (rb[3] - rb[1])).max(1.0);
            assert!(ix * iy < 0.15 * smaller, "labels overlap: `{a}` {ra:?} and `{b}` {rb:?}");
        }
    }
}

/// `--scene probe` through the lesson that walks its four tools: each tool
/// is drawn where the line says, and the lens behind the view is the one
/// `tinygpt lens --json` prints for the same weights and prompt.
#[test]
fn headless_probe_scene_shows_each_tool() {
    let dir = common::scratch_dir("app-probe");
    for (step, tool, region) in [("1", "lens", "lens"), ("2", "knockout", "importance"), ("3", "patch", "patch"), ("4", "why", "attribution")] {
        let shot = dir.join(format!("probe-{tool}.png"));
        let r = run_headless_in(
            &dir,
            &["app", "--headless", "--lesson", "which-heads", "--lesson-step", step, "--frames", "60", "--width", "1280", "--height", "720", "--export", "data"],
            &shot,
        );
        let line = r.to_string();
        assert_eq!(r["scene"], "probe", "{line}");
        let probe = &r["probe"];
        assert_eq!(probe["showing"], tool, "{line}");
        assert_eq!(probe["tool"], tool, "{line}");
        assert!(probe["error"].is_null(), "{line}");
        assert_regions_drawn(&r, &shot, &[region], (150, 60), 0.3);
        if tool == "lens" {
            let data: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("tinygpt-probe-data.json")).unwrap()).unwrap();
            let numbers = &data["view"]["numbers"];
            let tokens: Vec<u8> = serde_json::from_value(numbers["tokens"].clone()).unwrap();
            let ckpt = dir.join("small.safetensors");
            std::fs::write(&ckpt, tinygpt::model::shipped::shipped("small").unwrap()).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
                .args(["lens", "--json", "--checkpoint"])
                .arg(&ckpt)
                .arg("--prompt")
                .arg(String::from_utf8(tokens).unwrap())
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            // Compared as the f32s they are (the two JSON writers spell an
            // f32 differently).
            #[derive(serde::Deserialize, PartialEq, Debug)]
            struct Guess {
                byte: u8,
                p: f32,
            }
            let lens = |v: &serde_json::Value| -> Vec<Vec<Vec<Guess>>> { serde_json::from_value(v["lens"].clone()).unwrap() };
            let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(cli["tokens"], numbers["tokens"]);
            assert_eq!(lens(&cli), lens(numbers), "the scene's lens is the CLI's");
        }
    }
}

/// Every gallery model opens headless in the Attention scene
/// (`--checkpoint gallery:ID`) with the text it learned: the probe is of
/// that text's default prompt (a toy task's first held-out example), every
/// map is drawn, and the reversal model's one layer, in the data the
/// scene exports, reads the word backwards: from each query that writes an
/// answer letter, most of a head's attention lands on the anti-diagonal.
#[test]
fn headless_opens_every_gallery_model_in_the_attention_scene() {
    let dir = common::scratch_dir("app-gallery");
    for entry in tinygpt::model::gallery::entries() {
        let shot = dir.join(format!("gallery-{}.png", entry.id));
        let model = format!("gallery:{}", entry.id);
        let r = run_headless_in(
            &dir,
            &["app", "--headless", "--checkpoint", &model, "--scene", "attention", "--frames", "45", "--width", "1280", "--height", "720", "--export", "data"],
            &shot,
        );
        let line = r.to_string();
        assert_eq!(r["scene"], "attention", "{line}");
        assert_eq!(r["errors"].as_array().map_or(0, |e| e.len()), 0, "{line}");
        let ck = entry.checkpoint().unwrap();
        assert_eq!(r["attention"]["step"], ck.step, "{}: the gallery model is the run: {line}", entry.id);
        let tokens: Vec<u8> = serde_json::from_value(r["attention"]["tokens"].clone()).unwrap();
        if let Some(task) = entry.task() {
            let (_, held_out) = task.examples();
            assert_eq!(tokens, held_out[0][..task.example_len() - 1], "{}", entry.id);
        }
        let regions = r["regions"].as_array().unwrap();
        assert_eq!(regions.len(), ck.config.n_layer * ck.config.n_head, "{line}");
        let names: Vec<String> = regions.iter().map(|g| g["name"].as_str().unwrap().to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_regions_drawn(&r, &shot, &names, (8, 8), 0.9);
        if entry.id == "reverse" {
            // Each run's export is numbered after the last: read this one's.
            let export = r["exports"][0]["path"].as_str().unwrap();
            let data: serde_json::Value =
                serde_json::from_slice(&std::fs::read(export).unwrap()).unwrap();
            let rows = data["view"]["rows"].as_array().unwrap();
            let mut on_diagonal = Vec::new();
            for q in 8..16 {
                let best = rows
                    .iter()
                    .filter(|o| o["layer"] == ck.config.n_layer - 1)
                    .map(|o| o["p"][q][15 - q].as_f64().unwrap())
                    .fold(0.0, f64::max);
                on_diagonal.push(best);
            }
            let mean = on_diagonal.iter().sum::<f64>() / 8.0;
            eprintln!("reverse, headless: mean attention on the anti-diagonal {mean:.3}");
            assert!(mean > 0.8, "{on_diagonal:?}");
        }
    }
}

/// The shipped small checkpoint.
const SHIPPED_SMALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/checkpoints/small.safetensors");

/// `--scene flow`, the 3D walk-through (Inside the model), at the tour's beats: its exported
/// numbers are `tinygpt flow --all-positions --backward --json`'s for the
/// same prompt and weights (bit for bit, computed on the same device), the
/// tour visits the program's nodes in its order forward and in reverse
/// backward, every tensor in view is drawn where the line says, and its
/// labels are whole, apart and legible (18 px and more in presenter mode).
#[test]
fn headless_walk_scene_tours_every_tensor_where_it_says() {
    let dir = common::scratch_dir("app-walk");
    let shot = dir.join("walk-0.png");
    let r = run_headless_in(
        &dir,
        &["app", "--headless", "--scene", "flow", "--checkpoint", "small", "--frames", "60", "--width", "1280", "--height", "720", "--walk-beat", "0", "--export", "data"],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["scene"], "flow", "{line}");
    let walk = &r["walk"];
    assert!(walk["error"].is_null(), "{line}");
    let device = walk["device"].as_str().unwrap_or_default().to_string();
    assert!(matches!(device.as_str(), "gpu" | "cpu"), "{line}");
    // The scene's numbers are the command's.
    let data: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tinygpt-flow-data.json")).unwrap()).unwrap();
    let mut view = data["view"].clone();
    assert_eq!(view["step"], walk["step"], "{line}");
    assert_eq!(view["as_it_was"], false, "the model as it is now");
    view.as_object_mut().unwrap().remove("step");
    view.as_object_mut().unwrap().remove("as_it_was");
    let tokens: Vec<u8> = view["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
    let prompt = String::from_utf8(tokens).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["flow", "--checkpoint", SHIPPED_SMALL, "--prompt", &prompt, "--all-positions", "--backward", "--json", "--backend", &device])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(view == cli, "the scene's pass differs from `tinygpt flow --all-positions --backward` on the {device}");
    check_walk_context(walk, &cli, 0);
    // The tour: the whole model, every node forward in the program's
    // order, the loss, then the same backward in reverse.
    let nodes: Vec<String> = cli["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect();
    let beats = walk["beats"].as_array().unwrap();
    let of_pass = |pass: &str| -> Vec<String> {
        beats.iter().filter(|b| b["pass"] == pass).filter_map(|b| b["node"].as_str().map(str::to_string)).collect()
    };
    assert_eq!(beats[0]["kind"], "overview", "{line}");
    assert_eq!(of_pass("forward"), nodes, "the forward tour is the program's order");
    let mut reverse = nodes.clone();
    reverse.reverse();
    assert_eq!(of_pass("backward"), reverse, "the backward tour is its reverse");
    let first_backward = beats.iter().position(|b| b["pass"] == "backward").unwrap();
    assert_eq!(beats[first_backward]["kind"], "loss", "{line}");
    // It ends on AdamW's step: every weight, nothing else.
    let update = beats.len() - 1;
    assert_eq!((&beats[update]["pass"], &beats[update]["kind"]), (&serde_json::json!("update"), &serde_json::json!("optimizer")), "{line}");
    // What the run's training step ran each op on: the GPU's kernels (none
    // on the tensor cores in an f32 run, so the narration says nothing of
    // them), none on the CPU.
    let on_gpu = r["backend"].as_str().unwrap_or_default().starts_with("gpu");
    for b in beats.iter().filter(|b| b["node"].is_string()) {
        let kernels = b["training_kernels"].as_array().unwrap();
        assert_eq!(!kernels.is_empty(), on_gpu, "{b}");
        assert!(kernels.iter().all(|k| !tinygpt::gpu::coop::on_tensor_cores(k.as_str().unwrap())), "{b}");
    }
    assert!(walk["precision_line"].is_null(), "{line}");
    check_walk_picture(&r, &shot, (1280.0, 720.0), false);
    // Each phase of the tour, at both sizes (presenter mode at 1920×1080):
    // a matmul, attention's deck, the loss's gradient, a residual add's
    // gradient, the embedding's scatter-add and AdamW's update.
    let res_back = beats.iter().rposition(|b| b["node"] == "h.0.res_1").unwrap();
    let fc_back = beats.iter().rposition(|b| b["node"] == "h.0.mlp.fc").unwrap();
    for beat in [4, 5, first_backward, fc_back, res_back, update - 1, update] {
        for (w, h, presenter) in [("1280", "720", false), ("1920", "1080", true)] {
            let shot = dir.join(format!("walk-{beat}-{w}.png"));
            let beat_arg = beat.to_string();
            // (AdamW's beat reads the run's moments first.)
            let frames = if beat == update { "150" } else { "60" };
            let mut args = vec!["app", "--headless", "--scene", "flow", "--checkpoint", "small", "--frames", frames, "--width", w, "--height", h, "--walk-beat", &beat_arg];
            if presenter {
                args.push("--presenter");
            }
            let r = run_headless(&args, &shot);
            assert_eq!(r["walk"]["beat"], beat, "{r}");
            check_walk_picture(&r, &shot, (w.parse().unwrap(), h.parse().unwrap()), presenter);
            check_walk_context(&r["walk"], &cli, beat);
            check_walk_sweep(&r["walk"], &cli, beat);
            if beat == update {
                // The shipped small's moments were read and every trained
                // weight has its update (tests/flow.rs checks the values
                // against AdamW's formula); every slab in view is a weight
                // showing it.
                let n_params = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new(SHIPPED_SMALL)).unwrap().params.len();
                assert_eq!(r["walk"]["updates"].as_u64(), Some(n_params as u64), "{r}");
                for s in r["walk"]["slabs"].as_array().unwrap().iter().filter(|s| s["focused"] == true) {
                    assert_eq!((&s["family"], &s["update"]), (&serde_json::json!("weight"), &serde_json::json!(true)), "{r}");
                }
            }
        }
    }
    // Zoomed in on a beat, forward and backward: cells wide enough carry
    // their numbers (the gradient's in the backward pass), each the
    // program's to the precision of its text.
    let params = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new(SHIPPED_SMALL)).unwrap().params;
    for (beat, zoom) in [(4, "32"), (res_back, "40")] {
        let shot = dir.join(format!("walk-{beat}-zoom.png"));
        let beat_arg = beat.to_string();
        let r = run_headless(
            &["app", "--headless", "--scene", "flow", "--checkpoint", "small", "--frames", "60", "--width", "1280", "--height", "720", "--walk-beat", &beat_arg, "--walk-zoom", zoom],
            &shot,
        );
        let line = r.to_string();
        let walk = &r["walk"];
        assert_eq!(walk["zoom"].as_f64(), Some(zoom.parse().unwrap()), "{line}");
        let count = walk["numbers"].as_u64().unwrap();
        assert!((1..=1500).contains(&count), "{line}");
        let mut checked = 0;
        for e in walk["numbered"].as_array().unwrap() {
            let slab = &walk["slabs"][e["slab"].as_u64().unwrap() as usize];
            let (name, rows, cols) = (slab["name"].as_str().unwrap(), slab["rows"].as_u64().unwrap() as usize, slab["cols"].as_u64().unwrap() as usize);
            let (row, col) = (e["row"].as_u64().unwrap() as usize, e["col"].as_u64().unwrap() as usize);
            let text = e["text"].as_str().unwrap();
            let shown: f64 = text.parse().unwrap();
            let gradient = e["gradient"] == true;
            assert_eq!(gradient, beat == res_back, "{line}");
            // An activation (features × positions) or a weight's values.
            let want = match cli["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name) {
                Some(node) => node[if gradient { "grad" } else { "values" }][col][row].as_f64(),
                None if !gradient => params.iter().find(|p| p.name == name).map(|p| {
                    // Drawn with a row per output feature (transposed where stored in × out).
                    let at = if slab["transposed"] == true { col * rows + row } else { row * cols + col };
                    p.values[at] as f64
                }),
                None => None,
            };
            let Some(want) = want else { continue };
            assert!((shown - want).abs() <= want.abs() * 0.05 + 0.006, "{name}[{row}, {col}] shows {text}, the program's is {want}: {line}");
            checked += 1;
        }
        assert!(checked >= 1, "no number checked: {line}");
        let (_, _, pixels) = decode(&shot);
        let distinct: std::collections::HashSet<[u8; 4]> = pixels.iter().copied().collect();
        assert!(distinct.len() > 16, "the zoomed picture is nearly uniform: {line}");
    }
}

/// The dot product's sweep in a matmul's beats: forward, the terms added
/// so far are the outlined weight row's times the input column's, their
/// sum recomputed here in f64 from the program's numbers (`cli`: `tinygpt
/// flow --all-positions --backward`'s JSON; the weights from the shipped
/// checkpoint); once every term is in, with the bias, it is the program's
/// output cell. Backward, the input's gradient at the last position with
/// one (W's column against dy's column, ending at the program's dx) and the
/// weight's (dy's row against x's row over the positions).
fn check_walk_sweep(walk: &serde_json::Value, cli: &serde_json::Value, beat: usize) {
    let line = walk.to_string();
    let b = &walk["beats"][beat];
    let sweep = &walk["sweep"];
    let is_matmul = matches!(b["kind"].as_str(), Some("qkv" | "projection" | "fc" | "mlp_projection" | "logits"))
        && matches!(b["pass"].as_str(), Some("forward" | "backward"));
    assert_eq!(!sweep.is_null(), is_matmul, "a sweep exactly in the matmuls' beats: {line}");
    if sweep.is_null() {
        return;
    }
    let terms = sweep["terms"].as_u64().unwrap() as usize;
    let added = sweep["added"].as_u64().unwrap() as usize;
    assert!((1..=terms).contains(&added), "{line}");
    let params = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new(SHIPPED_SMALL)).unwrap().params;
    let param = |name: &str| params.iter().find(|p| p.name == name).unwrap().values.clone();
    let node = |name: &str| cli["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap();
    let slab = |i: &serde_json::Value| &walk["slabs"][i.as_u64().unwrap() as usize];
    let out_slab = slab(&b["output"]);
    let out_name = out_slab["name"].as_str().unwrap();
    let shown = sweep["partial"].as_f64().unwrap();
    let close = |a: f64, b: f64, tol: f64| (a - b).abs() <= tol * (1.0 + b.abs());
    match sweep["kind"].as_str() {
        Some("output") => {
            assert_eq!(b["pass"], "forward", "{line}");
            let (weight, input) = (slab(&sweep["weight"]), slab(&sweep["input"]));
            let (row, column) = (sweep["row"].as_u64().unwrap() as usize, sweep["column"].as_u64().unwrap() as usize);
            assert_eq!(weight["transposed"], false, "{line}");
            let w = param(weight["name"].as_str().unwrap());
            let x: Vec<f64> = serde_json::from_value(node(input["name"].as_str().unwrap())["values"][column].clone()).unwrap();
            assert_eq!(x.len(), terms, "{line}");
            let partial: f64 = (0..added).map(|i| w[row * terms + i] as f64 * x[i]).sum();
            assert!(close(shown, partial, 1e-6), "the sweep's sum {shown} against {partial}: {line}");
            if added == terms {
                let y = node(out_name)["values"][column][row].as_f64().unwrap();
                let total = partial + sweep["bias"].as_f64().unwrap_or(0.0);
                assert!(close(total, y, 1e-4), "the whole sum {total} against the program's {y}: {line}");
            }
        }
        Some(kind @ ("input_gradient" | "weight_gradient")) => {
            assert_eq!(b["pass"], "backward", "{line}");
            let [weight, input] = [&sweep["factors"][0], &sweep["factors"][1]];
            let out = sweep["out"].as_array().unwrap();
            let (row, column) = (out[1].as_u64().unwrap() as usize, out[2].as_u64().unwrap() as usize);
            let dy: Vec<Vec<f64>> = serde_json::from_value(node(out_name)["grad"].clone()).unwrap();
            if kind == "input_gradient" {
                // dx[i] at the last byte = Σ_j W[j, i]·dy[j].
                let w_slab = slab(weight);
                assert_eq!(slab(input)["name"], out_name, "dx pairs W with dy: {line}");
                let x_slab = slab(&out[0]);
                let w = param(w_slab["name"].as_str().unwrap());
                let k = w_slab["cols"].as_u64().unwrap() as usize;
                // At the last position with a gradient (the last byte has
                // no next byte to be scored on).
                let p = (0..dy.len()).rev().find(|&q| dy[q].iter().any(|&g| g != 0.0)).unwrap();
                assert_eq!((column, dy[p].len()), (p, terms), "{line}");
                let partial: f64 = (0..added).map(|j| w[j * k + row] as f64 * dy[p][j]).sum();
                assert!(close(shown, partial, 1e-6), "the sweep's sum {shown} against {partial}: {line}");
                if added == terms {
                    let dx = node(x_slab["name"].as_str().unwrap())["grad"][p][row].as_f64().unwrap();
                    assert!(close(partial, dx, 1e-4), "the whole sum {partial} against the program's dx {dx}: {line}");
                }
            } else {
                // dW[j, i] = Σ_t dy[j, t]·x[i, t], over the prompt's positions.
                assert_eq!(slab(weight)["name"], out_name, "dW pairs dy with x: {line}");
                let x: Vec<Vec<f64>> = serde_json::from_value(node(slab(input)["name"].as_str().unwrap())["values"].clone()).unwrap();
                assert_eq!(x.len(), terms, "{line}");
                let partial: f64 = (0..added).map(|t| dy[t][row] * x[t][column]).sum();
                assert!(close(shown, partial, 1e-6), "the sweep's sum {shown} against {partial}: {line}");
            }
        }
        other => panic!("a sweep of kind {other:?}: {line}"),
    }
}

/// The narration's reads at the prompt's last byte, as the headless line
/// lists them, are the pass's own: in a residual add's forward beat the
/// logit lens entering and leaving its block, and in an attention beat each
/// head's largest weight from that byte (`cli` is `tinygpt flow
/// --all-positions`'s JSON of the same pass); the backward beats read none.
fn check_walk_context(walk: &serde_json::Value, cli: &serde_json::Value, beat: usize) {
    let line = walk.to_string();
    let b = &walk["beats"][beat];
    let c = &walk["context"];
    let last = cli["tokens"].as_array().unwrap().len() - 1;
    assert_eq!(c["position"], last, "{line}");
    if b["pass"] != "forward" {
        assert!(c["lens"].as_array().unwrap().is_empty() && c["heads"].as_array().unwrap().is_empty(), "{line}");
        return;
    }
    let points: Vec<u64> = c["lens"].as_array().unwrap().iter().map(|p| p["point"].as_u64().unwrap()).collect();
    let n_points = cli["lens"].as_array().unwrap().len() as u64;
    let want: Vec<u64> = match b["kind"].as_str().unwrap() {
        "embedding" => vec![0],
        "residual" => {
            let l = b["layer"].as_u64().unwrap();
            vec![l, l + 1]
        }
        "overview" | "final_norm" | "logits" | "loss" => (0..n_points).collect(),
        _ => Vec::new(),
    };
    assert_eq!(points, want, "{line}");
    for p in c["lens"].as_array().unwrap() {
        let want = &cli["lens"][p["point"].as_u64().unwrap() as usize][last];
        for (i, g) in p["guesses"].as_array().unwrap().iter().enumerate() {
            assert_eq!(g, &want[i], "the lens at point {}: {line}", p["point"]);
        }
    }
    let heads = c["heads"].as_array().unwrap();
    if b["kind"] == "attention" {
        let l = b["layer"].as_u64().unwrap() as usize;
        let per_head = cli["attention"][l].as_array().unwrap();
        assert_eq!(heads.len(), per_head.len(), "{line}");
        for (h, look) in heads.iter().enumerate() {
            let row: Vec<f64> = serde_json::from_value(per_head[h][last].clone()).unwrap();
            let best = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let at = look["position"].as_u64().unwrap() as usize;
            assert_eq!(row[at], best, "head {h} looks where its weight is largest: {line}");
            assert_eq!(look["weight"].as_f64().unwrap(), best, "{line}");
        }
    } else {
        assert!(heads.is_empty(), "{line}");
    }
}

/// The walk-through's picture as its line describes it: the beat's
/// tensors drawn where it says (those on screen), in the backward pass
/// the beat's output showing its gradient, and its labels inside the view,
/// apart and at least 18 px tall in presenter mode (12 px elsewhere).
fn check_walk_picture(r: &serde_json::Value, shot: &std::path::Path, (w, h): (f64, f64), presenter: bool) {
    let line = r.to_string();
    let walk = &r["walk"];
    let (pw, ph, pixels) = decode(shot);
    let differs = not_background(r);
    let beat = walk["beat"].as_u64().unwrap() as usize;
    let pass = walk["beats"][beat]["pass"].as_str().unwrap().to_string();
    let slabs = walk["slabs"].as_array().unwrap();
    let focused: Vec<&serde_json::Value> = slabs.iter().filter(|s| s["focused"] == true).collect();
    assert!(!focused.is_empty(), "{line}");
    let mut checked = 0;
    for s in &focused {
        assert_eq!(s["drawn"], true, "{} is drawn: {line}", s["name"]);
        let px: Vec<f64> = serde_json::from_value(s["px"].clone()).unwrap();
        // Those wholly on screen and big enough to judge.
        let (x0, y0, x1, y1) = (px[0] + 1.0, px[1] + 1.0, px[2] - 1.0, px[3] - 1.0);
        if x0 < 0.0 || y0 < 0.0 || x1 > pw as f64 || y1 > ph as f64 || x1 - x0 < 4.0 || y1 - y0 < 4.0 {
            continue;
        }
        let share = drawn_share(&pixels, pw, (x0 as usize, y0 as usize, x1 as usize, y1 as usize), &differs);
        assert!(share > 0.5, "{} is drawn where the line says ({share:.2}): {line}", s["name"]);
        checked += 1;
    }
    assert!(checked >= 1, "no tensor of the beat on screen: {line}");
    if beat > 0 {
        let output = focused.iter().find(|s| s["name"] == walk["slabs"][walk_output(walk, beat)]["name"]).unwrap();
        assert_eq!(output["gradient"] == true, pass == "backward" && output["family"] != "probability" && output["name"] != "loss", "{line}");
    }
    let labels: Vec<(String, [f64; 4])> = walk["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["text"].as_str().unwrap().to_string(), serde_json::from_value(l["px"].clone()).unwrap()))
        .collect();
    assert!(!labels.is_empty(), "{line}");
    let min_height = if presenter { 18.0 } else { 12.0 };
    for (text, [x0, y0, x1, y1]) in &labels {
        assert!(*x0 >= -1.0 && *x1 <= w + 1.0 && *y0 >= -1.0 && *y1 <= h + 1.0, "`{text}` cut off: {x0},{y0}..{x1},{y1} of {w}×{h}");
        assert!(y1 - y0 >= min_height, "`{text}` is {} px tall", y1 - y0);
    }
    for (i, (a, ra)) in labels.iter().enumerate() {
        for (b, rb) in &labels[i + 1..] {
            let ix = (ra[2].min(rb[2]) - ra[0].max(rb[0])).max(0.0);
            let iy = (ra[3].min(rb[3]) - ra[1].max(rb[1])).max(0.0);
            assert!(ix * iy < 1.0, "labels overlap: `{a}` {ra:?} and `{b}` {rb:?}");
        }
    }
}

/// The index of beat `beat`'s output slab (the first it shows).
fn walk_output(walk: &serde_json::Value, beat: usize) -> usize {
    walk["beats"][beat]["output"].as_u64().unwrap() as usize
}

/// The Time-lapse scene (issue 52): a run trained in the app on the GPU
/// records its time-lapse without waiting (reads queued behind the steps),
/// frame for frame on the schedule; the checkpoint it saves carries it, and
/// its last frame is what `tinygpt heads` measures on that checkpoint (on
/// the GPU, and the CPU computes the same function); the scene draws the
/// maps, the probe and both charts where the line says.
#[test]
fn headless_gpu_run_records_its_time_lapse() {
    let dir = common::scratch_dir("app-timelapse");
    let shot = dir.join("timelapse.png");
    let r = run_headless_in(
        &dir,
        &[
            "app", "--headless", "--scene", "timelapse", "--preset", "tiny", "--steps", "40",
            "--train", "--backend", "gpu", "--frames", "300", "--fps", "0", "--export", "checkpoint",
            "--width", "1280", "--height", "720",
        ],
        &shot,
    );
    let line = r.to_string();
    let t = &r["timelapse"];
    assert_eq!(t["step"], 40, "{line}");
    let saved = dir.join("tinygpt-app.safetensors");
    let ck = tinygpt::model::checkpoint::Checkpoint::load(&saved).unwrap();
    let weights: Vec<f32> = ck.params.iter().flat_map(|p| p.values.iter().copied()).collect();
    let lapse = ck.timelapse.expect("the app's GPU run recorded a time-lapse");
    let steps: Vec<u64> = lapse.frames.iter().map(|f| f.step).collect();
    assert_eq!(steps, tinygpt::model::timelapse::frame_steps(40), "{line}");
    // Every frame kept its weights, read behind its step: the last frame's
    // are the checkpoint's, bit for bit.
    assert!(lapse.frames.iter().all(|f| f.weights.is_some()), "{line}");
    assert_eq!(**lapse.frames.last().unwrap().weights.as_ref().unwrap(), weights);
    assert_ne!(lapse.frames[0].weights, lapse.frames.last().unwrap().weights);
    assert_eq!(t["frames"], steps.len(), "{line}");
    // Weights, gradients and updates were read behind their steps.
    for f in &lapse.frames[1..] {
        assert!(f.loss.is_some(), "step {}", f.step);
        assert!(
            f.tensors.iter().all(|n| n.grad.is_some_and(|g| g > 0.0) && n.update.is_some_and(|u| u > 0.0)),
            "step {}: {:?}",
            f.step,
            f.tensors.first()
        );
    }
    let last = lapse.frames.last().unwrap();
    for backend in ["gpu", "cpu"] {
        let (out, _) = common::tinygpt(&[
            "heads", "--checkpoint", saved.to_str().unwrap(), "--backend", backend, "--json",
        ]);
        let fresh: serde_json::Value = serde_json::from_str(&out).unwrap();
        for (h, recorded) in fresh["heads"].as_array().unwrap().iter().zip(&last.heads) {
            for (key, value) in [("induction", recorded.induction), ("previous_token", recorded.previous_token)] {
                let now = h[key].as_f64().unwrap() as f32;
                assert!((now - value).abs() < 1e-5, "{backend} {key}: {now} against {value} recorded");
            }
        }
        let copy = fresh["copy_loss"].as_f64().unwrap() as f32;
        assert!((copy - last.copy_loss).abs() < 1e-4, "{backend}: {copy} against {}", last.copy_loss);
    }
    assert_regions_drawn(&r, &shot, &["h.0.head0", "h.1.head2", "probe", "scores", "losses"], (20, 20), 0.05);
}

/// A live class (issue 57), natively: a student's app joined by code opens
/// the class's lesson locked on the teacher's step; the teacher's app has
/// the class panel with every student and the answers counted.
#[test]
fn a_class_puts_its_students_on_the_teachers_step_and_counts_their_answers() {
    use futures_util::{SinkExt, StreamExt};
    use tinygpt::class::protocol::{ToClient, ToServer};
    use tokio_tungstenite::tungstenite::Message;
    let dir = common::scratch_dir("app-class");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (class, serving) = runtime
        .block_on(tinygpt::class::server::start(tinygpt::class::server::ClassOptions {
            bind: "127.0.0.1".parse().unwrap(),
            port: 0,
            session: dir.join("class.jsonl"),
            lesson: Some("attention".into()),
            web: dir.join("no-web"),
            tls: None,
        }))
        .unwrap();
    runtime.spawn(serving);
    let q = class.lesson.steps.iter().position(|(_, q)| q.is_some()).unwrap();
    let (layers, heads, _) = class.lesson.model.unwrap();
    let shared = tinygpt::class::protocol::SharedView {
        scene: "attention".into(),
        prompt: Some("the cat sat on the mat".into()),
        head: Some((layers - 1, heads - 1)),
        position: Some(5),
    };
    let url = format!("ws://{}/class/ws", class.addr);
    let sweep = tinygpt::class::experiment::ClassSweep {
        knob: tinygpt::class::experiment::Knob::LrScale,
        values: vec![0.1, 1.0, 10.0, 100.0],
        steps: 100,
    };
    // The teacher goes to the question; two students answer it.
    let _pages = runtime.block_on(async {
        let mut pages = Vec::new();
        let (mut teacher, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        teacher.send(Message::text(ToServer::Teach { token: class.token.clone() }.to_text())).await.unwrap();
        teacher.send(Message::text(ToServer::Goto { step: q }.to_text())).await.unwrap();
        // "Send my view": the Attention scene on a prompt of the teacher's,
        // a head and a position (a student who joins on this step gets it).
        teacher.send(Message::text(ToServer::View { view: shared.clone() }.to_text())).await.unwrap();
        // A class experiment: a sweep of four learning rates.
        teacher.send(Message::text(ToServer::Experiment { sweep: Some(sweep.clone()) }.to_text())).await.unwrap();
        pages.push(teacher);
        for choice in [0, 1] {
            let (mut s, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            s.send(Message::text(ToServer::Join { code: class.code.clone(), nickname: None, seat: None }.to_text()))
                .await
                .unwrap();
            s.send(Message::text(ToServer::Choose { step: q, choice }.to_text())).await.unwrap();
            // Each predicts, then reports a run: one trains, one diverges.
            s.send(Message::text(ToServer::Predict { diverges: vec![false, false, true, true] }.to_text())).await.unwrap();
            let curve = if choice == 0 {
                vec![(1, Some(5.5)), (50, Some(3.1)), (100, Some(2.6))]
            } else {
                vec![(1, Some(5.5)), (20, Some(4.8)), (21, None)]
            };
            s.send(Message::text(ToServer::Curve { points: curve }.to_text())).await.unwrap();
            let mut acknowledged = 0;
            while let Some(Ok(m)) = s.next().await {
                if let Message::Text(t) = m
                    && matches!(ToClient::parse(t.as_str()), Ok(ToClient::Accepted { .. } | ToClient::Assigned { assignment: Some(tinygpt::class::protocol::Assignment { predicted: Some(_), .. }) }))
                {
                    acknowledged += 1;
                    if acknowledged == 2 {
                        break;
                    }
                }
            }
            pages.push(s);
        }
        pages
    });
    let page = format!("http://{}/", class.addr);
    let student = run_headless(
        &["app", "--headless", "--frames", "240", "--width", "1280", "--height", "720", "--join", &format!("{page}#class={}&name=Ada", class.code.to_lowercase())],
        &dir.join("student.png"),
    );
    let line = student.to_string();
    assert_eq!(student["class"]["status"], "in", "{line}");
    assert_eq!(student["class"]["role"], "student", "{line}");
    assert_eq!(student["lesson"]["name"], "attention", "{line}");
    assert_eq!(student["lesson"]["step"], q + 1, "the student is on the teacher's step: {line}");
    assert_eq!(student["ui"]["locked"], true, "{line}");
    assert_eq!(student["ui"]["scene_tabs"], false, "{line}");
    // The teacher's view, as the student's Attention scene shows it.
    assert_eq!(student["scene"], "attention", "{line}");
    let shown = &student["class"]["shown"];
    assert_eq!(shown["scene"], "attention", "{line}");
    assert_eq!(shown["prompt"], shared.prompt.as_deref().unwrap(), "{line}");
    assert_eq!(shown["head"], serde_json::json!([layers - 1, heads - 1]), "{line}");
    assert_eq!(shown["position"], 5, "{line}");
    // Ada, the third to join, trains the third learning rate; her card
    // asks for her prediction first, with a button a finger can hit.
    assert_eq!(student["class"]["experiment"]["value"], 2, "{line}");
    assert_eq!(student["class"]["experiment"]["predicted"], serde_json::Value::Null, "{line}");
    let send = tinygpt::i18n::tr_in(tinygpt::i18n::Language::English, "exp-send-prediction", &[]);
    let nodes = access_nodes(&student);
    let button = nodes.iter().find(|n| n["name"] == send.as_str()).unwrap_or_else(|| panic!("no {send:?} button: {line}"));
    let rect = node_rect(button).unwrap();
    assert!(rect[3] - rect[1] >= 44.0 && rect[2] <= 1280.0 && rect[3] <= 720.0, "{rect:?}");
    let teacher = run_headless(
        &["app", "--headless", "--frames", "240", "--width", "1920", "--height", "1080", "--join", &format!("{page}#class={}&teacher={}", class.code, class.token)],
        &dir.join("teacher.png"),
    );
    let line = teacher.to_string();
    assert_eq!(teacher["class"]["role"], "teacher", "{line}");
    assert_eq!(teacher["class"]["students"], 3, "two simulated students and Ada: {line}");
    let tally = teacher["class"]["tallies"].as_array().unwrap().iter().find(|t| t["step"] == q).unwrap();
    assert_eq!(tally["counts"][0], 1, "{line}");
    assert_eq!(tally["counts"][1], 1, "{line}");
    assert_eq!(teacher["lesson"]["step"], q + 1, "the teacher's app opens where the class is: {line}");
    // The class's two curves overlaid on the teacher's panel.
    assert_eq!(teacher["class"]["experiment"]["curves"], 2, "{line}");
    // A wrong code: refused with the reason, no retrying.
    let refused = run_headless(
        &["app", "--headless", "--frames", "120", "--width", "1280", "--height", "720", "--join", &format!("{page}#class=ZZZZZZ")],
        &dir.join("refused.png"),
    );
    let status = refused["class"]["status"].as_str().unwrap_or_default().to_string();
    assert!(status.starts_with("refused") && status.contains("code"), "{status}");
}

/// A phone-sized page (issue 57): a scene's toolbar folds behind one
/// button, 44 points square or more, so the narration and the picture have
/// the screen; a laptop's page shows the toolbar itself.
#[test]
fn a_phones_page_folds_the_scenes_toolbar_behind_one_button() {
    let dir = common::scratch_dir("app-phone");
    let open_label = tinygpt::i18n::tr_in(tinygpt::i18n::Language::English, "toolbar-open", &[]);
    for (w, h) in [(412, 860), (1280, 720)] {
        let shot = dir.join(format!("phone-{w}.png"));
        let r = run_headless(
            &["app", "--headless", "--lesson", "attention", "--locked", "--lesson-step", "3", "--frames", "60", "--width", &w.to_string(), "--height", &h.to_string()],
            &shot,
        );
        let nodes = access_nodes(&r);
        let button = nodes.iter().find(|n| n["name"] == open_label.as_str());
        let forward = nodes.iter().any(|n| n["role"] == "Button" && n["name"].as_str().unwrap().contains("forward"));
        if w < 600 {
            let rect = node_rect(button.unwrap_or_else(|| panic!("no {open_label:?} button at {w}×{h}: {r}"))).unwrap();
            assert!(rect[2] - rect[0] >= 44.0 && rect[3] - rect[1] >= 44.0, "{rect:?}");
            assert!(rect[2] <= w as f64 && rect[3] <= h as f64, "{rect:?}");
            assert!(!forward, "the folded toolbar's controls are hidden: {r}");
        } else {
            assert!(button.is_none(), "no fold on a laptop: {r}");
            assert!(forward, "the toolbar's own controls on a laptop: {r}");
        }
    }
}

/// The picture on a phone (issue 57): drawn no smaller than its labels
/// can be read (they were 6 to 9 points tall there, the whole picture
/// fitted to 412 points), opening at its left edge where the names are; one
/// finger pans it, two pinch it, a tap clicks (opens a block of the Path
/// scene).
#[test]
fn a_phones_picture_is_readable_and_pans_pinches_and_taps_by_touch() {
    let dir = common::scratch_dir("app-phone-touch");
    let run = |name: &str, touch: &[&str]| {
        let mut args = vec!["app", "--headless", "--lesson", "attention", "--locked", "--lesson-step", "3", "--frames", "40", "--width", "412", "--height", "860"];
        for t in touch {
            args.extend(["--touch", t]);
        }
        let r = run_headless(&args, &dir.join(format!("{name}.png")));
        assert_eq!(r["scene"], "path", "{r}");
        r
    };
    let view = |r: &serde_json::Value| -> [f64; 4] {
        let v: Vec<f64> = r["viewport"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        [v[0], v[1], v[2], v[3]]
    };
    // The labels the picture shows (inside its viewport top to bottom,
    // at least partly across), by their text.
    let all_labels = |r: &serde_json::Value| -> Vec<(String, [f64; 4])> {
        r["path"]["labels"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| Some((l["text"].as_str()?.to_string(), node_rect(l)?)))
            .collect()
    };
    let labels = |r: &serde_json::Value| -> Vec<(String, [f64; 4])> {
        let v = view(r);
        all_labels(r)
            .into_iter()
            .filter(|(_, [x0, y0, x1, y1])| *x1 > v[0] && *x0 < v[2] && *y0 >= v[1] && *y1 <= v[3])
            .collect()
    };
    let find = |ls: &[(String, [f64; 4])], text: &str| ls.iter().find(|(t, _)| t == text).map(|(_, r)| *r);
    let still = run("still", &[]);
    let v = view(&still);
    assert!(v[2] - v[0] <= 412.0 && v[3] - v[1] >= 200.0, "{v:?}");
    let seen = labels(&still);
    assert!(seen.len() >= 5, "{seen:?}");
    for (text, [_, y0, _, y1]) in &seen {
        // A line box of 14 points or more: a 12-point font or larger.
        assert!(y1 - y0 >= 14.0, "{text:?} is {} points tall at 412 points wide", y1 - y0);
    }
    let left = seen.iter().map(|(_, r)| r[0]).fold(f64::MAX, f64::min);
    assert!((v[0]..v[0] + 80.0).contains(&left), "the picture opens at its left edge: {left} in {v:?}");
    // A label whole in view with room on its right, to follow (its text
    // the picture's only one such).
    let every = all_labels(&still);
    let (anchor, a) = seen
        .iter()
        .find(|(t, r)| r[0] >= v[0] && r[2] <= v[2] - 160.0 && every.iter().filter(|(u, _)| u == t).count() == 1)
        .cloned()
        .expect("a label to follow");
    // One finger 150 points to the right: the picture follows it.
    let dragged = run("drag", &["drag:100,300,250,300"]);
    let b = find(&labels(&dragged), &anchor).expect("the label after the drag");
    assert!((b[0] - a[0] - 150.0).abs() <= 2.0 && (b[1] - a[1]).abs() <= 2.0, "{anchor:?}: {a:?} → {b:?}");
    // Two fingers from 100 to 200 points apart about the label: twice as big.
    let (cx, cy) = ((a[0] + a[2]) / 2.0, (a[1] + a[3]) / 2.0);
    let pinched = run("pinch", &[&format!("pinch:{cx},{cy},100,200")]);
    let c = find(&labels(&pinched), &anchor).expect("the label after the pinch");
    let grew = (c[3] - c[1]) / (a[3] - a[1]);
    assert!((1.8..=2.2).contains(&grew), "{anchor:?}: {a:?} → {c:?}");
    assert!(
        ((c[0] + c[2]) / 2.0 - cx).abs() <= 4.0 && ((c[1] + c[3]) / 2.0 - cy).abs() <= 4.0,
        "the pinch holds its centre still: {c:?}"
    );
    // A tap on an op's row opens its numbers, as a click does.
    let zoom = |r: &serde_json::Value| r["path"]["zoom"].as_str().unwrap().to_string();
    assert!(!zoom(&still).starts_with("Op("), "{}", still["path"]["zoom"]);
    let row = still["path"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(node_rect)
        .find(|r| r[0] < v[2] && r[2] > v[0] && r[1] >= v[1] + 80.0 && r[3] <= v[3])
        .expect("an op's row in view");
    let x = (row[0].max(v[0]) + row[2].min(v[2])) / 2.0;
    let tapped = run("tap", &[&format!("tap:{x},{}", (row[1] + row[3]) / 2.0)]);
    assert!(zoom(&tapped).starts_with("Op("), "{}", tapped["path"]);
}

// ---- Accessibility (issue 53): the keyboard, the tree, target sizes ----

/// The roles of panel controls a person presses or types into.
const CONTROL_ROLES: [&str; 12] = [
    "Button", "DefaultButton", "CheckBox", "RadioButton", "Switch", "Link", "ComboBox", "Slider",
    "SpinButton", "TextInput", "MultilineTextInput", "Tab",
];

fn access_nodes(r: &serde_json::Value) -> Vec<serde_json::Value> {
    r["access"]["nodes"].as_array().unwrap().clone()
}

fn node_rect(n: &serde_json::Value) -> Option<[f64; 4]> {
    let r = n["rect"].as_array()?;
    Some([r[0].as_f64()?, r[1].as_f64()?, r[2].as_f64()?, r[3].as_f64()?])
}

/// WCAG 2.2's 2.5.8 (target size, minimum): a control is at least 24×24
/// CSS pixels, or a 24-pixel circle centred on it meets no other control
/// and no other small control's circle. (egui points are CSS pixels at
/// zoom 1.) Returns the controls that fail.
fn targets_too_small(nodes: &[serde_json::Value]) -> Vec<String> {
    let controls: Vec<(&serde_json::Value, [f64; 4])> = nodes
        .iter()
        .filter(|n| CONTROL_ROLES.contains(&n["role"].as_str().unwrap()))
        .filter_map(|n| Some((n, node_rect(n)?)))
        .collect();
    let small = |r: &[f64; 4]| r[2] - r[0] < 24.0 || r[3] - r[1] < 24.0;
    let centre = |r: &[f64; 4]| ((r[0] + r[2]) / 2.0, (r[1] + r[3]) / 2.0);
    let mut failing = Vec::new();
    for (i, (n, r)) in controls.iter().enumerate() {
        if !small(r) {
            continue;
        }
        let (cx, cy) = centre(r);
        let blocked = controls.iter().enumerate().any(|(j, (_, o))| {
            if i == j {
                return false;
            }
            let (px, py) = (cx.clamp(o[0], o[2]), cy.clamp(o[1], o[3]));
            let (ox, oy) = centre(o);
            (px - cx).hypot(py - cy) < 12.0 || (small(o) && (ox - cx).hypot(oy - cy) < 24.0)
        });
        if blocked {
            failing.push(format!("{} {:?} {:?}", n["role"], n["name"], r));
        }
    }
    failing
}

#[test]
fn every_panel_control_has_a_name_and_room_for_a_finger() {
    let dir = common::scratch_dir("app-access-names");
    for scene in ["walk", "path", "probe", "model", "attention", "timelapse", "step", "flash", "correctness", "speedup"] {
        let shot = dir.join(format!("{scene}.png"));
        // Three Tabs: egui's focus on the third control, in reading order.
        let r = run_headless(
            &[
                "app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", scene, "--frames", "30",
                "--width", "1280", "--height", "720", "--press", "Tab,Tab,Tab",
            ],
            &shot,
        );
        let nodes = access_nodes(&r);
        let controls: Vec<&serde_json::Value> = nodes
            .iter()
            .filter(|n| CONTROL_ROLES.contains(&n["role"].as_str().unwrap()))
            .collect();
        assert!(controls.len() > 20, "{scene}: only {} controls in the tree", controls.len());
        let unnamed: Vec<String> = controls
            .iter()
            .filter(|n| !n["name"].as_str().unwrap().chars().any(char::is_alphabetic))
            .map(|n| n.to_string())
            .collect();
        assert!(unnamed.is_empty(), "{scene}: controls without a name: {unnamed:?}");
        let small = targets_too_small(&nodes);
        assert!(small.is_empty(), "{scene}: targets under 24 px without the spacing: {small:?}");
        let focused = &r["access"]["focused"];
        let third = controls.iter().filter(|n| n["clickable"] == true).nth(2).unwrap();
        assert_eq!(focused["id"], third["id"], "{scene}: Tab ×3 focused {focused}, the third control is {third}");
        // The picture says what it shows in words before how to explore it.
        let line = r["describe"].as_str().unwrap_or_else(|| panic!("{scene}: no describe line: {}", r["describe"]));
        let figure = nodes.iter().find(|n| n["role"] == "Figure").unwrap();
        assert!(
            figure["description"].as_str().is_some_and(|d| d.starts_with(line)),
            "{scene}: the picture's description does not open with {line:?}: {figure}"
        );
    }
}

/// `scene` of the shipped small, then the keys: into the picture; ↓ to the
/// second group; → to its second part; Enter into its cells; → and ↓ to
/// cell (1, 1) (they stop at the part's edge: a statistic has one row).
/// Checks the focus is there; returns the line, the part's index and the cell.
fn keyboard_into_a_cell(scene: &str, frames: &str, shot: &std::path::Path) -> (serde_json::Value, usize, [usize; 2]) {
    // (Reduced motion: a flight to the part cuts, so the cell is on screen
    // when the run ends.)
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", scene, "--frames", frames,
            "--width", "1280", "--height", "720", "--reduced-motion",
            "--press", "Enter,ArrowDown,ArrowRight,Enter,ArrowRight,ArrowDown",
        ],
        shot,
    );
    let line = r.to_string();
    let focus = &r["picture_focus"];
    let parts = focus["parts"].as_array().unwrap();
    let second_group = parts.iter().position(|p| p["group"] != parts[0]["group"]).unwrap();
    assert_eq!(focus["active"], true, "{line}");
    assert_eq!(focus["part"].as_u64().unwrap() as usize, second_group + 1, "{line}");
    let part = &parts[second_group + 1];
    let cell = [
        1.min(part["rows"].as_u64().unwrap() as usize - 1),
        1.min(part["cols"].as_u64().unwrap() as usize - 1),
    ];
    assert_eq!(focus["cell"], serde_json::json!(cell), "{line}");
    (r, second_group + 1, cell)
}

#[test]
fn the_keyboard_walks_into_a_tensor_of_the_3d_picture_and_hears_its_number() {
    let dir = common::scratch_dir("app-access-walk");
    let shot = dir.join("walk.png");
    // Block 0's second tensor, its cell (1, 1).
    let (r, focused_part, cell) = keyboard_into_a_cell("walk", "30", &shot);
    let line = r.to_string();
    let parts = r["picture_focus"]["parts"].as_array().unwrap();
    // The scene names the cell as it does under the mouse, and the tree's
    // focused node says the same (its signs in words).
    let hover = r["hover"].as_str().unwrap_or_else(|| panic!("nothing named at the focused cell: {line}"));
    assert!(hover.contains(&format!("[{}, {}] = ", cell[0], cell[1])), "{hover}");
    let focused = &r["access"]["focused"];
    assert_eq!(focused["role"], "GridCell", "{line}");
    assert_eq!(focused["name"].as_str().unwrap(), tinygpt::app::canvas::parts::spoken(hover));
    let part_name = parts[focused_part]["name"].as_str().unwrap();
    let said_title = tinygpt::app::canvas::parts::spoken(hover.split('[').next().unwrap());
    assert_eq!(said_title.trim(), part_name.trim(), "the cell named is of the focused tensor");
    // The ring is drawn around the cell where the tree says it is.
    let rect = node_rect(focused).unwrap_or_else(|| panic!("the focused cell has no place on screen: {line}"));
    let (w, _, pixels) = decode(&shot);
    let amber = |p: [u8; 4]| p[0] > 230 && (170..=220).contains(&p[1]) && p[2] < 40;
    let near = (rect[1] as usize).saturating_sub(16)..(rect[3] as usize + 16);
    let across = (rect[0] as usize).saturating_sub(16)..(rect[2] as usize + 16);
    let rung = near
        .flat_map(|y| across.clone().map(move |x| (x, y)))
        .filter(|&(x, y)| amber(pixels[y * w + x]))
        .count();
    assert!(rung >= 20, "no focus ring round {rect:?}: {rung} amber pixels");
}

#[test]
fn the_keyboard_steps_through_an_attention_map_by_query_and_key_and_backs_out() {
    let dir = common::scratch_dir("app-access-attention");
    let shot = dir.join("attention.png");
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", "attention", "--frames", "40",
            "--width", "1280", "--height", "720",
            "--press", "Enter,ArrowRight,Enter,ArrowRight,ArrowDown,ArrowDown",
        ],
        &shot,
    );
    let line = r.to_string();
    let focus = &r["picture_focus"];
    let parts = focus["parts"].as_array().unwrap();
    let n = r["attention"]["tokens"].as_array().unwrap().len();
    assert_eq!(parts[1]["name"], "block 0, head 1", "{line}");
    assert_eq!((parts[1]["rows"].as_u64(), parts[1]["cols"].as_u64()), (Some(n as u64), Some(n as u64)));
    assert_eq!(focus["cell"], serde_json::json!([2, 1]), "{line}");
    let hover = r["hover"].as_str().unwrap_or_else(|| panic!("nothing named: {line}"));
    for said in ["head 1", "query 2 ", "key 1 "] {
        assert!(hover.contains(said), "{said:?} not in {hover:?}");
    }
    // Escape twice: out of the cells, out of the picture; the mouse's
    // pointer is the scene's again.
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", "attention", "--frames", "40",
            "--width", "1280", "--height", "720",
            "--press", "Enter,Enter,ArrowDown,Escape,Escape,Shift+Slash,F9",
        ],
        &shot,
    );
    assert_eq!(r["picture_focus"]["active"], false, "{r}");
    // F9 says the picture in words through the live region.
    let said = r["describe"].as_str().unwrap_or_else(|| panic!("no describe line: {r}"));
    assert!(r["announced"].as_str().unwrap().contains(said), "F9 did not say {said:?}: {}", r["announced"]);
    // Then ? lists the keyboard's shortcuts, each with what it does.
    let nodes = access_nodes(&r);
    let names: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    let title = names.iter().position(|n| *n == "Keyboard shortcuts").unwrap_or_else(|| panic!("no shortcuts window: {names:?}"));
    for (keys, what) in tinygpt::app::access::keys::SHORTCUTS {
        let at = names[title..].iter().position(|n| *n == keys).unwrap_or_else(|| panic!("{keys:?} not listed: {names:?}"));
        assert_eq!(names[title + at + 1], tinygpt::i18n::tr(what, &[]), "what {keys:?} does");
    }
    assert!(r["hover"].is_null(), "{r}");
    assert!(r["access"]["focused"].is_null(), "{r}");
}

/// The Model scene's heatmaps are parts of the picture, grouped by layer:
/// ↓ to the next layer, → to its first heatmap, Enter into its cells, and
/// the focused cell is named with the checkpoint's own value of that
/// element, in the tree as under the mouse.
#[test]
fn the_keyboard_reads_a_weight_of_the_model_scene_heatmaps() {
    let dir = common::scratch_dir("app-access-model");
    let shot = dir.join("model.png");
    let (r, heatmap, cell) = keyboard_into_a_cell("model", "40", &shot);
    let line = r.to_string();
    let parts = r["picture_focus"]["parts"].as_array().unwrap();
    // Every weight tensor is a part, in its layer's group.
    let ckpt = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new(SHIPPED_SMALL)).unwrap();
    for t in &ckpt.params {
        let short = t.name.trim_start_matches("transformer.");
        assert!(
            parts.iter().any(|p| p["name"].as_str().unwrap().starts_with(&format!("{short}, "))),
            "{short} is not a part: {line}"
        );
    }
    let part = &parts[heatmap];
    assert_eq!(part["group"], parts[heatmap - 1]["group"], "{line}");
    let (rows, cols) = (part["rows"].as_u64().unwrap() as usize, part["cols"].as_u64().unwrap() as usize);
    // The value said is the checkpoint's: "ln_f.weight[1] = +1.27039e0".
    let name = part["name"].as_str().unwrap().split(", ").next().unwrap().to_string();
    let tensor = ckpt.params.iter().find(|t| t.name.trim_start_matches("transformer.") == name).unwrap();
    let want = tensor.values[cell[0] * cols + cell[1]];
    let hover = r["hover"].as_str().unwrap_or_else(|| panic!("nothing named at the focused cell: {line}"));
    let index = if rows == 1 { format!("[{}]", cell[1]) } else { format!("[{}, {}]", cell[0], cell[1]) };
    assert!(hover.starts_with(&format!("{name}{index} = ")), "{hover}");
    let said: f32 = hover.rsplit(" = ").next().unwrap().parse().unwrap();
    assert!((said - want).abs() <= 1e-5 * want.abs().max(1e-30), "{hover}: the checkpoint has {want}");
    let focused = &r["access"]["focused"];
    assert_eq!(focused["role"], "GridCell", "{line}");
    assert_eq!(focused["name"].as_str(), Some(hover), "{line}");
}

/// A loaded checkpoint brings its training with it: the loss chart's
/// records are the checkpoint's loss history, step by step (issue 52).
#[test]
fn a_loaded_checkpoint_draws_the_training_it_came_from() {
    let dir = common::scratch_dir("app-history");
    let shot = dir.join("history.png");
    let r = run_headless(
        &["app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", "model", "--frames", "20", "--width", "1280", "--height", "720"],
        &shot,
    );
    let ckpt = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new(SHIPPED_SMALL)).unwrap();
    assert!(!ckpt.loss_history.is_empty(), "the shipped model keeps its history");
    let losses: Vec<f32> = r["losses"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let want: Vec<f32> = ckpt.loss_history.iter().map(|p| p.loss).collect();
    assert_eq!(losses, want);
    let val: Vec<[f32; 2]> = r["val_losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| [v[0].as_f64().unwrap() as f32, v[1].as_f64().unwrap() as f32])
        .collect();
    let want: Vec<[f32; 2]> =
        ckpt.loss_history.iter().filter_map(|p| Some([p.step as f32, p.val_loss?])).collect();
    assert_eq!(val, want);
    assert_eq!(r["steps"].as_u64(), Some(ckpt.step));
}

/// `tinygpt app --precision mixed` where the device has no tensor cores
/// (lavapipe): the reason, naming the adapter, in the status line; the same
/// run in f32; the run panel's Precision box in the tree (issue 51).
#[test]
fn the_app_asked_for_mixed_precision_without_tensor_cores_says_why_and_trains_in_f32() {
    let dir = common::scratch_dir("app-mixed");
    let shot = dir.join("mixed.png");
    let r = run_headless(
        &["app", "--headless", "--preset", "tiny", "--precision", "mixed", "--frames", "20", "--width", "1280", "--height", "720"],
        &shot,
    );
    let line = r.to_string();
    let errors: Vec<&str> = r["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(
        errors.iter().any(|e| e.contains("mixed precision cannot run here") && e.contains("choose f32")),
        "{errors:?}"
    );
    assert!(!r["backend"].as_str().unwrap().contains("mixed"), "{line}");
    assert!(
        access_nodes(&r).iter().any(|n| n["role"] == "ComboBox" && n["name"] == "precision"),
        "no Precision box in the tree: {line}"
    );
    // With the CPU backend it is refused before the app opens.
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["app", "--headless", "--precision", "mixed", "--backend", "cpu", "--frames", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--precision mixed runs the matmuls on a GPU's tensor cores"), "{err}");
}

/// The Speedup scene's mixed-precision series where the device has no
/// tensor cores (lavapipe): refused before anything runs, saying why and
/// naming the adapter; its box in the tree (issue 51).
#[test]
fn the_speedup_scene_says_why_it_cannot_measure_mixed_precision_here() {
    let dir = common::scratch_dir("app-speedup-mixed");
    let shot = dir.join("speedup.png");
    let r = run_headless(
        &[
            "app", "--headless", "--scene", "speedup", "--bench", "tiny", "--bench-backends", "cpu,gpu-mixed",
            "--frames", "30", "--width", "1280", "--height", "720",
        ],
        &shot,
    );
    let line = r.to_string();
    let s = &r["speedup"];
    let message = s["message"].as_str().unwrap_or_else(|| panic!("no message: {line}"));
    assert!(message.contains("mixed precision cannot run here") && message.contains("cooperative matrices"), "{message}");
    assert!(s["results"].as_array().unwrap().is_empty(), "{line}");
    assert!(
        access_nodes(&r).iter().any(|n| n["role"] == "CheckBox" && n["name"] == "GPU mixed (tensor cores)"),
        "no mixed box in the tree: {line}"
    );
}

#[test]
fn a_lesson_step_is_announced_through_the_live_region() {
    let dir = common::scratch_dir("app-access-live");
    let shot = dir.join("lesson.png");
    let r = run_headless(
        &[
            "app", "--headless", "--lesson", "next-byte", "--frames", "120", "--width", "1280", "--height",
            "720", "--press", "PageDown",
        ],
        &shot,
    );
    let lesson = &r["lesson"];
    let announced = r["announced"].as_str().unwrap();
    let title = lesson["step_title"].as_str().unwrap();
    assert_eq!(lesson["step"], 2, "{r}");
    let expected = format!("Step 2 of {}: {title}", lesson["steps"]);
    assert!(announced.ends_with(&expected), "announced {announced:?}, expected it to end with {expected:?}");
    let live: Vec<_> = access_nodes(&r).into_iter().filter(|n| n["live"] == true).collect();
    assert_eq!(live.len(), 1, "{r}");
    assert_eq!(live[0]["name"], announced);
}

/// WCAG's relative luminance of an sRGB pixel.
fn luminance(p: [u8; 4]) -> f64 {
    let lin = |c: u8| {
        let c = c as f64 / 255.0;
        if c <= 0.04045 { c / 12.92 } else { ((c + 0.055) / 1.055).powf(2.4) }
    };
    0.2126 * lin(p[0]) + 0.7152 * lin(p[1]) + 0.0722 * lin(p[2])
}

#[test]
fn the_panels_text_stands_out_from_what_is_behind_it() {
    // Over each label the tree reports (egui's text, where it is drawn),
    // measured as every label test measures it ([`label_contrast`]: the
    // ink, its farthest pixels, against its rectangle's median); WCAG 2.2
    // asks 4.5:1 of text. (Measured on the picture, so thin strokes that
    // never reach their full colour count against it: stricter than the
    // rule, which takes the specified colours.)
    let dir = common::scratch_dir("app-access-contrast");
    for scene in ["walk", "path", "attention", "model"] {
        let shot = dir.join(format!("{scene}.png"));
        let r = run_headless(
            &["app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", scene, "--frames", "30", "--width", "1280", "--height", "720"],
            &shot,
        );
        let (w, h, pixels) = decode(&shot);
        let mut checked = 0;
        let mut faint = Vec::new();
        for n in access_nodes(&r) {
            let Some(rect) = node_rect(&n) else { continue };
            if n["role"] != "Label" || n["name"].as_str().unwrap().trim().is_empty() {
                continue;
            }
            let (x0, y0) = (rect[0].max(0.0).round(), rect[1].max(0.0).round());
            let (x1, y1) = (rect[2].round().min(w as f64), rect[3].round().min(h as f64));
            if x1 < x0 + 3.0 || y1 < y0 + 3.0 {
                continue;
            }
            checked += 1;
            let ratio = label_contrast(&pixels, w, [x0, y0, x1, y1], 0.0);
            if ratio < 4.5 {
                faint.push(format!("{:?} {ratio:.2}:1", n["name"].as_str().unwrap()));
            }
        }
        assert!(checked > 20, "{scene}: only {checked} labels checked");
        assert!(faint.is_empty(), "{scene}: text under 4.5:1: {faint:#?}");
    }
}

#[test]
fn the_numbers_behind_the_view_read_as_a_table() {
    // F10 opens the table; 💾 Data saves the same view's data: each of its
    // plain values is a row of the table, its name then its value, in the
    // tree a screen reader reads.
    let dir = common::scratch_dir("app-access-table");
    let r = run_headless_in(
        &dir,
        &[
            "app", "--headless", "--checkpoint", SHIPPED_SMALL, "--scene", "attention", "--frames", "40",
            "--width", "1280", "--height", "720", "--press", "F10", "--export", "data",
        ],
        std::path::Path::new("table.png"),
    );
    let nodes = access_nodes(&r);
    // The picture in words opens the table: the strongest look from the
    // last byte over every map, as the saved data has them.
    let said = r["describe"].as_str().unwrap_or_else(|| panic!("no describe line: {r}"));
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tinygpt-attention-data.json")).unwrap()).unwrap();
    let mut best = (f64::NEG_INFINITY, 0, 0);
    for map in saved["view"]["rows"].as_array().unwrap() {
        let rows = map["p"].as_array().unwrap();
        for w in rows.last().unwrap().as_array().unwrap() {
            let w = w.as_f64().unwrap();
            if w > best.0 {
                best = (w, map["layer"].as_u64().unwrap(), map["head"].as_u64().unwrap());
            }
        }
    }
    let (weight, layer, head) = best;
    for part in [format!("block {layer}, head {head}"), format!("(weight {weight:.2})")] {
        assert!(said.contains(&part), "{part:?} not in {said:?}");
    }
    let title = nodes
        .iter()
        .position(|n| n["name"].as_str().unwrap().starts_with("Numbers behind the view: Attention"))
        .unwrap_or_else(|| panic!("no table window in the tree: {r}"));
    let view = saved["view"].as_object().unwrap();
    let labels: Vec<&str> = nodes[title..]
        .iter()
        .filter(|n| n["role"] == "Label")
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(labels.first().copied(), Some(said), "the table opens with the picture in words");
    let mut rows = 0;
    for (k, v) in view {
        let said = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(x) if x.is_f64() => tinygpt::app::canvas::short(x.as_f64().unwrap() as f32),
            serde_json::Value::Number(x) => x.to_string(),
            _ => continue,
        };
        let at = labels.iter().position(|l| l == k).unwrap_or_else(|| panic!("no row {k:?} in the table: {labels:?}"));
        assert_eq!(labels[at + 1], said, "the row {k:?}");
        rows += 1;
    }
    assert!(rows >= 1, "no plain value in the view's data: {view:?}");
}

/// WCAG's contrast ratio of two luminances, as shown by a projector whose
/// black is lifted by `ambient` (the share of its white the room's light
/// adds to every pixel: 0 on a monitor).
fn projected_contrast(a: f64, b: f64, ambient: f64) -> f64 {
    let shown = |l: f64| l * (1.0 - ambient) + ambient;
    let (hi, lo) = (shown(a).max(shown(b)), shown(a).min(shown(b)));
    (hi + 0.05) / (lo + 0.05)
}

/// The contrast of a label in a screenshot, as every contrast test here
/// measures it (egui's panels, the scenes' labels, both canvases): the
/// luminance of its ink (the 3% of pixels farthest from the background)
/// against the background's (the rectangle's median), under `ambient`
/// ([`projected_contrast`]). A flat panel and a busy picture alike: one
/// stray pixel is not the ink.
fn label_contrast(pixels: &[[u8; 4]], w: usize, [x0, y0, x1, y1]: [f64; 4], ambient: f64) -> f64 {
    let mut l: Vec<f64> = Vec::new();
    for y in y0.max(0.0) as usize..(y1 as usize).min(pixels.len() / w) {
        for x in x0.max(0.0) as usize..(x1 as usize).min(w) {
            l.push(luminance(pixels[y * w + x]));
        }
    }
    l.sort_by(f64::total_cmp);
    let bg = l[l.len() / 2];
    // The ink: the 3% of pixels farthest from the background, on its side.
    let far = |v: &f64| (v - bg).abs();
    let mut by_distance = l.clone();
    by_distance.sort_by(|a, b| far(b).total_cmp(&far(a)));
    let ink = by_distance[(by_distance.len() / 33).max(1) - 1];
    projected_contrast(ink, bg, ambient)
}

/// *Inside the model* on its dark and its light canvas (`--theme`), in
/// presenter mode at 1280×720, at the attention beat: every tensor label
/// holds WCAG's 4.5:1 against what is behind it on a monitor, and the
/// tensors' frames 3:1 against the canvas. The ratios under a projector in a
/// lit room (its black lifted by 15% of its white) are printed: they are
/// how docs/guide/scenes.md chose the canvas.
#[test]
fn the_walk_canvas_keeps_its_contrast_dark_and_light() {
    let dir = common::scratch_dir("app-walk-theme");
    for theme in ["dark", "light"] {
        let shot = dir.join(format!("walk-{theme}.png"));
        let r = run_headless(
            &["app", "--headless", "--scene", "flow", "--checkpoint", "small", "--presenter", "--theme", theme, "--frames", "60", "--width", "1280", "--height", "720", "--walk-beat", "4"],
            &shot,
        );
        let line = r.to_string();
        assert_eq!(r["walk"]["theme"], theme, "{line}");
        let (w, _, pixels) = decode(&shot);
        let bg: Vec<f64> = r["background"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let canvas = luminance([bg[0] as u8, bg[1] as u8, bg[2] as u8, 255]);
        assert_eq!(canvas > 0.5, theme == "light", "the canvas is {theme}: {bg:?}");
        let labels = r["walk"]["labels"].as_array().unwrap();
        assert!(labels.len() >= 3, "{line}");
        let (mut monitor, mut projector) = (f64::INFINITY, f64::INFINITY);
        for l in labels {
            let v: Vec<f64> = l["px"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            let rect = [v[0], v[1], v[2], v[3]];
            let c = label_contrast(&pixels, w, rect, 0.0);
            assert!(c >= 4.5, "{theme}: `{}` at {c:.2}:1 ({line})", l["text"]);
            monitor = monitor.min(c);
            projector = projector.min(label_contrast(&pixels, w, rect, 0.15));
        }
        // The focused tensors' frames against the canvas: along each
        // one's top edge (a band of 5 rows), the pixel farthest from the
        // canvas in each column, the median over the columns.
        let h = pixels.len() / w;
        let mut frames = f64::INFINITY;
        for s in r["walk"]["slabs"].as_array().unwrap().iter().filter(|s| s["focused"] == true && s["px"].is_array()) {
            let v: Vec<f64> = s["px"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            let (x0, x1, y) = (v[0].max(0.0) as usize, (v[2] as usize).min(w), v[1] as usize);
            if x1 < x0 + 8 || y < 3 || y + 3 >= h {
                continue;
            }
            let mut edge: Vec<f64> = (x0..x1)
                .map(|x| {
                    (y - 2..=y + 2)
                        .map(|yy| luminance(pixels[yy * w + x]))
                        .fold(canvas, |a, b| if (b - canvas).abs() > (a - canvas).abs() { b } else { a })
                })
                .map(|l| projected_contrast(l, canvas, 0.0))
                .collect();
            edge.sort_by(f64::total_cmp);
            frames = frames.min(edge[edge.len() / 2]);
        }
        assert!(frames >= 3.0, "{theme}: a tensor's frame at {frames:.2}:1 against the canvas");
        println!("{theme} canvas: labels at least {monitor:.2}:1 on a monitor, {projector:.2}:1 projected in a lit room; frames at least {frames:.2}:1");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The scenes' own labels (text drawn in the picture, not egui's): in the
/// Model scene, at 1280×720 in presenter mode on the shipped small, every
/// label in view holds WCAG's 4.5:1 against what is behind it (the label's
/// ink, its farthest pixels, against its rectangle's median). (*Inside the
/// model* has its own test, on both canvases. One byte is left out: its
/// camera follows the pulse, so the line's rectangles and the screenshot
/// can be frames apart.)
#[test]
fn the_scenes_own_labels_stand_out_from_the_picture() {
    let dir = common::scratch_dir("app-scene-labels");
    let (scene, key) = ("model", "model");
    {
        let shot = dir.join(format!("{scene}.png"));
        let r = run_headless(
            &["app", "--headless", "--scene", scene, "--checkpoint", "small", "--presenter", "--frames", "60", "--width", "1280", "--height", "720"],
            &shot,
        );
        let line = r.to_string();
        let (w, _, pixels) = decode(&shot);
        // The view the panels leave (the toolbar and status line cover
        // the picture's edges).
        let view: Vec<f64> = r[key]["view"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let labels = r[key]["labels"].as_array().unwrap_or_else(|| panic!("no labels: {line}"));
        let mut checked = 0;
        let mut lowest = f64::INFINITY;
        for l in labels {
            let v: Vec<f64> = l["rect"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            // Only what is on screen, whole and big enough to read.
            if v[0] < view[0] || v[1] < view[1] || v[2] > view[2] || v[3] > view[3] || v[3] - v[1] < 8.0 {
                continue;
            }
            let c = label_contrast(&pixels, w, [v[0], v[1], v[2], v[3]], 0.0);
            assert!(c >= 4.5, "{scene}: `{}` at {c:.2}:1 ({line})", l["text"]);
            lowest = lowest.min(c);
            checked += 1;
        }
        assert!(checked >= 5, "{scene}: only {checked} labels on screen: {line}");
        println!("{scene}: {checked} labels, the lowest at {lowest:.2}:1");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The shared timeline (issue 52) in the Attention scene: a gallery model
/// that ships its time-lapse opens on a step of it, and the maps drawn are
/// the frame's own (the last at or before the step that kept its maps).
#[test]
fn the_attention_scene_shows_the_model_as_it_was_at_a_step_of_its_time_lapse() {
    let dir = common::scratch_dir("app-timeline");
    let entry = tinygpt::model::gallery::entries()
        .into_iter()
        .find(|e| e.id == "repeat")
        .expect("the gallery's repeat model");
    let ck = entry.checkpoint().unwrap();
    let lapse = ck.timelapse.expect("the repeat model ships its time-lapse");
    let with_maps: Vec<&tinygpt::model::timelapse::Frame> =
        lapse.frames.iter().filter(|f| f.attention.is_some()).collect();
    assert!(with_maps.len() >= 3, "{} frames keep maps", with_maps.len());
    // A step between two frames that kept their maps: the earlier is shown.
    let frame = with_maps[with_maps.len() / 2];
    let step = frame.step + 1;
    let shot = dir.join("timeline.png");
    let r = run_headless_in(
        &dir,
        &[
            "app", "--headless", "--checkpoint", "gallery:repeat", "--scene", "attention", "--timeline-step",
            &step.to_string(), "--frames", "45", "--width", "1280", "--height", "720", "--export", "data",
        ],
        &shot,
    );
    let line = r.to_string();
    assert_eq!(r["errors"].as_array().map_or(0, |e| e.len()), 0, "{line}");
    let export = r["exports"][0]["path"].as_str().unwrap();
    let data: serde_json::Value = serde_json::from_slice(&std::fs::read(export).unwrap()).unwrap();
    let view = &data["view"];
    assert_eq!(view["timeline"], true, "{view}");
    assert_eq!(view["step"], frame.step, "the frame at or before step {step}");
    let rows = view["rows"].as_array().unwrap();
    assert_eq!(rows.len(), lapse.n_layer * lapse.n_head);
    for row in rows {
        let (layer, head) = (row["layer"].as_u64().unwrap() as usize, row["head"].as_u64().unwrap() as usize);
        let want = lapse.map(frame, layer, head).unwrap();
        let got: Vec<f32> = row["p"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().clone()).map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(got, want, "layer {layer} head {head}: the frame's own map");
        let tokens: Vec<u8> = serde_json::from_value(row["tokens"].clone()).unwrap();
        assert_eq!(tokens, lapse.probe[0], "the time-lapse's probe string");
    }
    let names: Vec<String> = (0..lapse.n_layer)
        .flat_map(|l| (0..lapse.n_head).map(move |h| format!("h.{l}.head{h}")))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_regions_drawn(&r, &shot, &names, (8, 8), 0.9);
    // The timeline is the Time-lapse scene's too: it opens at that step.
    let r = run_headless_in(
        &dir,
        &[
            "app", "--headless", "--checkpoint", "gallery:repeat", "--scene", "timelapse", "--timeline-step",
            &step.to_string(), "--frames", "30", "--width", "1280", "--height", "720",
        ],
        &dir.join("timelapse.png"),
    );
    let at_or_before = lapse.frames.iter().rev().find(|f| f.step <= step).unwrap().step;
    assert_eq!(r["timelapse"]["step"], at_or_before, "{}", r["timelapse"]);
    assert_eq!(r["timelapse"]["maps_step"], frame.step, "{}", r["timelapse"]);
}

/// The shared timeline in the scenes that recompute the model (issue 52):
/// a run's frames keep its weights, and opened on a step of its time-lapse
/// *Inside the model*'s pass is `tinygpt flow --all-positions --backward`
/// of those weights (bit for bit, on the same device), Take it apart's
/// lens is of that step, and the Model scene's heatmaps hold the frame's
/// weights, not the run's last.
#[test]
fn the_scenes_that_recompute_the_model_show_it_as_it_was_at_a_step() {
    use tinygpt::model::checkpoint::{Checkpoint, Precision};
    let dir = common::scratch_dir("app-as-it-was");
    let run = dir.join("run.safetensors");
    common::tinygpt(&[
        "train", "--preset", "repeat", "--corpus", "task:repeat", "--backend", "cpu", "--seed", "3", "--steps", "40",
        "--json", "--out", run.to_str().unwrap(),
    ]);
    let ck = Checkpoint::load(&run).unwrap();
    let lapse = ck.timelapse.clone().expect("a run records its time-lapse");
    // The frame the timeline shows at step 20: the last at or before it
    // that kept its weights.
    let asked = 20;
    let frame = lapse
        .frames
        .iter()
        .rev()
        .find(|f| f.weights.is_some() && f.step <= asked)
        .expect("a frame kept its weights by step 20");
    assert!(frame.step < ck.step, "a step before the run's last");
    // The model as it was, as a checkpoint of its own.
    let weights = frame.weights.as_ref().unwrap();
    let mut then = ck.clone();
    let mut at = 0;
    for p in &mut then.params {
        p.values = weights[at..at + p.values.len()].to_vec();
        at += p.values.len();
    }
    assert_eq!(at, weights.len());
    assert_ne!(then.params, ck.params, "the weights moved after step {}", frame.step);
    then.step = frame.step;
    then.optimizer = None;
    then.timelapse = None;
    let then_path = dir.join("then.safetensors");
    then.save(&then_path, Precision::F32).unwrap();
    let open = |scene: &str, frames: &str| {
        let shot = dir.join(format!("{scene}.png"));
        let r = run_headless_in(
            &dir,
            &[
                "app", "--headless", "--checkpoint", run.to_str().unwrap(), "--scene", scene, "--timeline-step",
                &asked.to_string(), "--frames", frames, "--width", "1280", "--height", "720", "--export", "data",
            ],
            &shot,
        );
        assert_eq!(r["errors"].as_array().map_or(0, |e| e.len()), 0, "{r}");
        let export = r["exports"][0]["path"].as_str().unwrap().to_string();
        let data: serde_json::Value = serde_json::from_slice(&std::fs::read(export).unwrap()).unwrap();
        (r, data["view"].clone())
    };
    // Inside the model: the pass of the weights then.
    let (r, mut view) = open("flow", "60");
    let device = r["walk"]["device"].as_str().unwrap_or_default().to_string();
    assert!(matches!(device.as_str(), "gpu" | "cpu"), "{r}");
    assert_eq!(view["step"], frame.step, "{}", r["walk"]);
    assert_eq!(view["as_it_was"], true);
    assert_eq!(r["walk"]["as_it_was"], true);
    let obj = view.as_object_mut().unwrap();
    obj.remove("step");
    obj.remove("as_it_was");
    let tokens: Vec<u8> = view["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u8).collect();
    let prompt = String::from_utf8(tokens).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["flow", "--checkpoint", then_path.to_str().unwrap(), "--prompt", &prompt, "--all-positions", "--backward", "--json", "--backend", &device])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(view == cli, "the scene's pass differs from `tinygpt flow` of the weights after step {}", frame.step);
    // Take it apart: its tool asked of the weights then.
    let (_, view) = open("probe", "60");
    assert_eq!(view["step"], frame.step, "{view}");
    assert_eq!(view["as_it_was"], true);
    // The Model scene: every weight's heatmap from the frame's weights.
    let (_, view) = open("model", "30");
    assert_eq!(view["step"], frame.step, "{view}");
    assert_eq!(view["as_it_was"], true);
    assert_eq!(view["showing"], "Weights");
    for p in &then.params {
        let t = view["tensors"].as_array().unwrap().iter().find(|t| t["name"] == p.name.as_str()).unwrap_or_else(|| panic!("{} in {view}", p.name));
        let lo = p.values.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = p.values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!((t["min"].as_f64().unwrap() as f32, t["max"].as_f64().unwrap() as f32), (lo, hi), "{}", p.name);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A picture drawn with egui has parts too (issue 53): in the Time-lapse
/// scene the keyboard goes from the maps (each head's query × key cells)
/// to the probe string, to each head's scores across the run, into its
/// frames, each named with its step and scores; Enter on a frame shows
/// that frame, as a click on the chart does.
#[test]
fn the_keyboard_steps_through_the_time_lapse_charts_and_enter_shows_a_frame() {
    let dir = common::scratch_dir("app-access-timelapse");
    let shot = dir.join("timelapse.png");
    let lapse = tinygpt::model::checkpoint::Checkpoint::load(std::path::Path::new("gallery:repeat"))
        .unwrap()
        .timelapse
        .expect("the repeat model ships its time-lapse");
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", "gallery:repeat", "--scene", "timelapse", "--frames", "40",
            "--width", "1280", "--height", "720",
            "--press", "Enter,ArrowDown,ArrowDown,Enter,ArrowRight,ArrowRight,ArrowRight",
        ],
        &shot,
    );
    let line = r.to_string();
    let focus = &r["picture_focus"];
    let parts = focus["parts"].as_array().unwrap();
    let groups: Vec<&str> = parts.iter().map(|p| p["group"].as_str().unwrap_or_default()).collect();
    let heads = lapse.n_layer * lapse.n_head;
    let mut want = vec!["maps"; heads];
    want.push("probe");
    want.extend(std::iter::repeat_n("scores", heads));
    want.push("losses");
    assert_eq!(groups, want, "{line}");
    // The first head's map is query × key; the probe's two rows are the
    // bytes and the predictions.
    let n = lapse.probe[0].len() as u64;
    assert_eq!((parts[0]["rows"].as_u64(), parts[0]["cols"].as_u64()), (Some(n), Some(n)), "{line}");
    assert_eq!((parts[heads]["rows"].as_u64(), parts[heads]["cols"].as_u64()), (Some(2), Some(n)), "{line}");
    // ↓ ↓ went to head 0.0's scores, Enter into its frames, → → → to the
    // fourth: named with that frame's step and scores, as the tree says.
    assert_eq!(focus["active"], true, "{line}");
    assert_eq!(focus["part"].as_u64(), Some(heads as u64 + 1), "{line}");
    assert_eq!(focus["cell"], serde_json::json!([0, 3]), "{line}");
    let frame = &lapse.frames[3];
    let score = frame.head(0, 0).unwrap();
    let said = format!(
        "after step {}: induction score {:.2}, previous-byte score {:.2}",
        frame.step, score.induction, score.previous_token
    );
    let focused = &r["access"]["focused"];
    assert_eq!(focused["name"].as_str(), Some(said.as_str()), "{line}");
    assert!(node_rect(focused).is_some(), "the focused frame has a place on screen: {line}");
    // Enter there shows that frame.
    let r = run_headless(
        &[
            "app", "--headless", "--checkpoint", "gallery:repeat", "--scene", "timelapse", "--frames", "40",
            "--width", "1280", "--height", "720",
            "--press", "Enter,ArrowDown,ArrowDown,Enter,ArrowRight,ArrowRight,ArrowRight,Enter",
        ],
        &dir.join("shown.png"),
    );
    assert_eq!(r["timelapse"]["step"], frame.step, "{}", r["timelapse"]);
    // In words: that frame's step, and its strongest induction head.
    let best = frame.best_induction().unwrap();
    let said = r["describe"].as_str().unwrap_or_default();
    for part in [
        format!("after step {}:", frame.step),
        format!("head is {}.{}, scoring {:.2}", best.layer, best.head, best.induction),
    ] {
        assert!(said.contains(&part), "{part:?} not in {said:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
