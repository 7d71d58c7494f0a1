//! Training behaviour: the overfit gate, determinism, resume, and KV-cache
//! generation against the full forward pass.

mod common;

use tinygpt::backend::Backend;
use tinygpt::bench::cpu_backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::cpu::generate::Generator;
use tinygpt::data::{Batch, Corpus};
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::Config;
use tinygpt::program::Program;
use tinygpt::train::Trainer;
use tinygpt::sample::{SampleOptions, generate};

fn trainer(config: &Config, seed: u64) -> Trainer {
    let corpus = Corpus::tiny_shakespeare(config.ctx).unwrap();
    Trainer::new(cpu_backend(config), corpus, seed).unwrap()
}

#[test]
fn overfit_gate_one_fixed_batch() {
    // The tiny preset memorising one batch: from ≈ ln 256 to < 0.05 in 300 steps.
    let mut cfg = Config::load("tiny").unwrap();
    cfg.lr = 3e-3;
    cfg.eval_interval = 0;
    let mut t = trainer(&cfg, 42);
    let batch = t.next_batch();
    let first = t.train_on(&batch).unwrap().loss;
    assert!(
        (first - 256f32.ln()).abs() < 0.1,
        "initial loss {first} is not ≈ ln 256"
    );
    let mut last = first;
    for _ in 1..300 {
        last = t.train_on(&batch).unwrap().loss;
        if last < 0.05 {
            break;
        }
    }
    assert!(last < 0.05, "after 300 steps the loss is {last}");
}

fn losses(config: &Config, seed: u64, steps: usize) -> Vec<f32> {
    let mut t = trainer(config, seed);
    (0..steps).map(|_| t.train_step().unwrap().loss).collect()
}

#[test]
fn same_seed_is_bit_identical_and_another_seed_differs() {
    for dropout in [0.0, 0.2] {
        let mut cfg = Config::load("tiny").unwrap();
        cfg.dropout = dropout;
        let a = losses(&cfg, 42, 6);
        let b = losses(&cfg, 42, 6);
        let c = losses(&cfg, 43, 6);
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_ne!(a, c);
    }
}

#[test]
fn resuming_from_a_checkpoint_continues_the_same_run() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.eval_interval = 3;
    let straight = losses(&cfg, 7, 8);
    let mut first = trainer(&cfg, 7);
    for _ in 0..4 {
        first.train_step().unwrap();
    }
    let dir = common::scratch_dir("resume");
    let path = dir.join("run.safetensors");
    first
        .checkpoint(true)
        .unwrap()
        .save(&path, Precision::F32)
        .unwrap();
    let ck = Checkpoint::load(&path).unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut resumed = Trainer::resume(cpu_backend(&cfg), corpus, &ck).unwrap();
    let rest: Vec<f32> = (0..4).map(|_| resumed.train_step().unwrap().loss).collect();
    assert_eq!(&straight[4..], &rest[..]);
    assert_eq!(resumed.history.len(), 8);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The browser's trainer worker takes a run and gives it back as the app
/// does (src/app/engine.rs, pump_remote): a checkpoint's bytes with
/// AdamW's moments to a fresh trainer there ([`Trainer::resume`], as
/// src/web_trainer.rs builds it), calls for steps whose time-lapse frames
/// the app pushes onto its parked trainer (without their weights), then
/// the worker's checkpoint
/// taken back by the parked trainer ([`Trainer::adopt`]). The run must be
/// the one trained at home throughout, bit for bit: every parameter and
/// moment, the loss history, the batch sequence and the time-lapse.
#[test]
fn a_run_handed_to_the_worker_and_back_is_the_run_trained_at_home() {
    use tinygpt::train::remote::{StepsDone, train_steps};
    let mut cfg = Config::load("tiny").unwrap();
    cfg.eval_interval = 3;
    cfg.dropout = 0.1;
    cfg.steps = 12;
    let mut home = trainer(&cfg, 11);
    for _ in 0..12 {
        home.train_step().unwrap();
    }

    let mut parked = trainer(&cfg, 11);
    for _ in 0..2 {
        parked.train_step().unwrap();
    }
    let bytes = parked.checkpoint(true).unwrap().to_bytes(Precision::F32, "the run").unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let ck = Checkpoint::from_bytes(&bytes, "the app's run").unwrap();
    let mut worker = Trainer::resume(cpu_backend(&ck.config), corpus, &ck).unwrap();
    let mut steps = vec![];
    let mut frames = 0;
    for _ in 0..3 {
        // Each call's reply crosses as text, as it does in the page.
        let done = StepsDone::from_ron(&train_steps(&mut worker, 3, f64::INFINITY).to_ron()).unwrap();
        assert!(done.failure.is_none());
        steps.extend(done.metrics.iter().map(|m| m.step));
        frames += done.frames.len();
        for f in done.frames {
            parked.push_frame(f.into_frame());
        }
    }
    assert_eq!(steps, (3..=11).collect::<Vec<_>>());
    assert!(frames >= 3, "the steps recorded {frames} time-lapse frames");
    // The frames the page pushed are the worker's (their weights come
    // with the run).
    let without_weights = |t: &Trainer| {
        t.timelapse.as_ref().unwrap().frames.iter().map(|f| (f.step, f.loss, f.copy_loss, f.heads.clone())).collect::<Vec<_>>()
    };
    assert_eq!(without_weights(&parked), without_weights(&worker));
    let back = worker.checkpoint(true).unwrap().to_bytes(Precision::F32, "the worker's run").unwrap();
    parked.adopt(&Checkpoint::from_bytes(&back, "the worker's run").unwrap()).unwrap();
    // A call takes only the steps the run has left (one of 12).
    assert!(train_steps(&mut worker, 5, f64::INFINITY).metrics.len() == 1);
    parked.train_step().unwrap();

    let bits = |t: &mut Trainer| {
        let c = t.checkpoint(true).unwrap();
        let opt = c.optimizer.unwrap();
        c.params
            .iter()
            .chain(&opt.m)
            .chain(&opt.v)
            .map(|p| (p.name.clone(), p.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    };
    assert_eq!(parked.step, 12);
    assert_eq!(bits(&mut parked), bits(&mut home));
    let history = |t: &Trainer| t.history.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>();
    assert_eq!(history(&parked), history(&home));
    assert_eq!(parked.peek_next_batch(), home.peek_next_batch());
    assert_eq!(parked.timelapse, home.timelapse);
}

#[test]
fn validation_loss_is_reported_on_the_interval() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.eval_interval = 2;
    cfg.steps = 5;
    let mut t = trainer(&cfg, 1);
    let vals: Vec<bool> = (0..5)
        .map(|_| t.train_step().unwrap().val_loss.is_some())
        .collect();
    assert_eq!(vals, [false, true, false, true, true]);
}

#[test]
fn kv_cache_logits_match_full_recomputation() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.batch = 1;
    let mut t = trainer(&cfg, 5);
    for _ in 0..30 {
        t.train_step().unwrap();
    }
    let params = t.params().unwrap();
    let text = b"ROMEO: But soft, what light through yonder window";
    let n = cfg.ctx;
    let tokens: Vec<u32> = text[..n].iter().map(|&b| b as u32).collect();
    // Full forward over the whole window.
    let program = Program::new(&cfg);
    let mut full = CpuBackend::<f32>::new(program.clone());
    for p in &params {
        full.write(&p.name, &p.values).unwrap();
    }
    let batch = Batch {
        batch: 1,
        ctx: n,
        inputs: tokens.clone(),
        targets: tokens.clone(),
    };
    full.eval_loss(&batch);
    let logits = full.read("logits").unwrap();
    // Incremental, one position at a time.
    let mut generator = Generator::new(&cfg, &params).unwrap();
    for (pos, &tok) in text[..n].iter().enumerate() {
        let inc = generator.push(tok);
        let want = &logits[pos * 256..pos * 256 + 256];
        let err = inc
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        let scale = want.iter().map(|x| x.abs()).fold(0.0f32, f32::max);
        assert!(
            err <= 1e-5 * scale.max(1.0),
            "position {pos}: max diff {err}"
        );
    }
    // `prime` gives the same logits as pushing one by one.
    let primed = generator.prime(&text[..n]);
    let last = &logits[(n - 1) * 256..n * 256];
    assert!(
        primed
            .iter()
            .zip(last)
            .all(|(a, b)| (a - b).abs() <= 1e-5 * 10.0)
    );
}

#[test]
fn generation_slides_past_the_context_and_is_seeded() {
    let cfg = Config::load("tiny").unwrap();
    let mut t = trainer(&cfg, 2);
    let params = t.params().unwrap();
    let mut generator = Generator::new(&cfg, &params).unwrap();
    let long_prompt = vec![b'a'; 3 * cfg.ctx];
    let opts = SampleOptions {
        temperature: 1.0,
        top_k: 256,
        seed: 9,
    };
    let mut streamed = Vec::new();
    let out = generate(&mut generator, &long_prompt, 5 * cfg.ctx, &opts, |b| {
        streamed.push(b)
    });
    assert_eq!(out.len(), 5 * cfg.ctx);
    assert_eq!(out, streamed);
    let again = generate(&mut generator, &long_prompt, 5 * cfg.ctx, &opts, |_| {});
    assert_eq!(out, again);
    let other = generate(
        &mut generator,
        &long_prompt,
        5 * cfg.ctx,
        &SampleOptions { seed: 10, ..opts },
        |_| {},
    );
    assert_ne!(out, other);
}

#[test]
fn a_whole_step_on_the_cpu_is_its_entries_run_one_by_one() {
    // With dropout (its backward writes gradients too) and LoRA's adapters
    // (whose linears' inputs are read twice, so those gradients are added to).
    let mut cfg = Config::load("tiny").unwrap();
    cfg.dropout = 0.1;
    let lora = tinygpt::model::config::Lora {
        rank: 2,
        alpha: 4.0,
        targets: tinygpt::model::config::LoraTargets::parse("attn,mlp").unwrap(),
        base: 0,
    };
    for lora in [None, Some(lora)] {
        cfg.lora = lora;
        let program = Program::new(&cfg);
        let mut whole = CpuBackend::<f32>::new(program.clone());
        let mut entries = CpuBackend::<f32>::new(program);
        common::whole_step_is_the_step_through(&mut whole, &mut entries);
    }
}
