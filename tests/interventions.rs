//! Taking the model apart (issue 33): the lens, knockouts, patching and
//! attribution are the program's own forward pass, on both backends.

mod common;

use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::flow::config_for;
use tinygpt::gpu::GpuBackend;
use tinygpt::interventions::{self, LossOn, Part};
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::params::NamedTensor;
use tinygpt::program::Program;

const PROMPT: &[u8] = b"ROMEO:\nBut soft, what light through";

fn shipped() -> Checkpoint {
    Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny").unwrap()
}

fn put(backend: &mut dyn Backend, params: &[NamedTensor]) {
    for p in params {
        backend.write(&p.name, &p.values).unwrap();
    }
}

fn cpu(ck: &Checkpoint) -> CpuBackend<f32> {
    let mut b = CpuBackend::<f32>::new(Program::new(&config_for(&ck.config)));
    put(&mut b, &ck.params);
    b
}

fn gpu(ck: &Checkpoint) -> GpuBackend {
    let mut b =
        GpuBackend::new(common::gpu_context(), Program::new(&config_for(&ck.config))).unwrap();
    put(&mut b, &ck.params);
    b
}

#[test]
fn the_lens_tops_out_at_the_models_own_distribution_on_both_backends() {
    let ck = shipped();
    let mut c = cpu(&ck);
    let grid = interventions::lens(&mut c, &ck.params, PROMPT).unwrap();
    let l = ck.config.n_layer;
    assert_eq!(grid.lens.len(), l + 1);
    // Each position's top point is the flow's next-byte top 5 there, and
    // the stream points are the flow's lens (the same stream, read whole).
    for t in [0, grid.tokens.len() / 2, grid.tokens.len() - 1] {
        let flow = tinygpt::flow::run(&mut c, &ck.params, PROMPT, Some(t)).unwrap();
        assert_eq!(
            grid.lens[l][t],
            tinygpt::flow::top5(&flow.probs),
            "position {t}"
        );
        for (k, point) in flow.lens.iter().enumerate() {
            assert_eq!(&grid.lens[k][t], point, "point {k}, position {t}");
        }
    }
    // Bit for bit with itself; the GPU's within 1e-5.
    assert_eq!(
        interventions::lens(&mut c, &ck.params, PROMPT).unwrap(),
        grid
    );
    let on_gpu = interventions::lens(&mut gpu(&ck), &ck.params, PROMPT).unwrap();
    for (a, b) in grid.lens.iter().flatten().zip(on_gpu.lens.iter().flatten()) {
        for (x, y) in a.iter().zip(b) {
            assert!((x.p - y.p).abs() < 1e-5, "{x:?} vs {y:?}");
        }
    }
}

#[test]
fn importance_on_validation_rows_starts_from_the_runs_validation_loss() {
    // The run's own validation loss (its fixed batches, the training
    // program) equals the batch-1 program's mean over every row of them:
    // what the importance map measures "on validation text" is the number
    // the loss chart shows.
    let ck = shipped();
    let corpus = tinygpt::data::Corpus::tiny_shakespeare(ck.config.ctx).unwrap();
    let program = Program::new(&ck.config);
    let mut trainer = tinygpt::train::Trainer::resume(
        Box::new(CpuBackend::<f32>::new(program)),
        corpus,
        &ck,
    )
    .unwrap();
    let val_loss = trainer.evaluate();
    let all = ck.config.batch * ck.config.eval_batches;
    let rows = trainer.validation_rows(usize::MAX);
    assert_eq!(rows.len(), all);
    assert_eq!(trainer.validation_rows(3), rows[..3].to_vec());
    let mut b = cpu(&ck);
    let a = interventions::ablate(&mut b, &ck.params, LossOn::Rows(&rows), &[]).unwrap();
    assert_eq!((a.on, a.rows), ("validation", all));
    assert!(
        (a.intact_loss - val_loss).abs() < 1e-4,
        "rows {} vs the run's validation loss {val_loss}",
        a.intact_loss
    );
    // A part's importance there is the loss with it knocked out, row by row.
    let part = Part::Mlp { layer: 0 };
    let some = &rows[..4];
    let k = interventions::ablate(&mut b, &ck.params, LossOn::Rows(some), &[part]).unwrap();
    let mut edited = ck.params.clone();
    interventions::knock_out(&mut edited, part, ck.config.d_model, ck.config.n_head).unwrap();
    put(&mut b, &edited);
    let by_hand = some.iter().map(|r| b.eval_loss(r) as f64).sum::<f64>() / 4.0;
    assert!((k.parts[0].loss as f64 - by_hand).abs() < 1e-6);
    assert!(k.parts[0].delta > 0.0, "the first MLP matters on Shakespeare");
    // Rows of another shape are refused with a reason.
    let wide = tinygpt::data::Batch {
        batch: 2,
        ..rows[0].clone()
    };
    let err = interventions::ablate(&mut b, &ck.params, LossOn::Rows(&[wide]), &[]).unwrap_err();
    assert!(err.contains("does not fit"), "{err}");
}

#[test]
fn a_knockout_is_the_part_zeroed_and_nothing_knocked_out_is_the_model() {
    let ck = shipped();
    let config = config_for(&ck.config);
    let (c, n_head) = (config.d_model, config.n_head);
    let d = c / n_head;
    let mut b = cpu(&ck);
    // Knocking out nothing: the intact loss exactly.
    let intact = interventions::prompt_loss(&mut b, PROMPT).unwrap();
    let none = interventions::ablate(&mut b, &ck.params, LossOn::Prompt(PROMPT), &[]).unwrap();
    assert_eq!(none.intact_loss, intact);
    // A head's knockout equals zeroing its slice of attn.y by hand, mid-run.
    let part = Part::Head { layer: 1, head: 2 };
    let mut edited = ck.params.clone();
    interventions::knock_out(&mut edited, part, c, n_head).unwrap();
    put(&mut b, &edited);
    let knocked = interventions::last_logits(&mut b, PROMPT, None).unwrap();
    put(&mut b, &ck.params);
    let program = Program::new(&config);
    let ctx = config.ctx;
    // Run to attn.y, zero the head's D columns at every position, go on.
    let (_, _, batch) = tinygpt::flow::batch_for(&config, PROMPT, None).unwrap();
    b.load_step(&batch, None);
    let id = program.tensor_id("h.1.attn.y").unwrap();
    let at = program
        .steps
        .iter()
        .position(|s| matches!(s, tinygpt::program::Step::Forward(i) if program.ops[*i].op.io().1.contains(&id)))
        .unwrap();
    let end = program
        .steps
        .iter()
        .position(|s| !matches!(s, tinygpt::program::Step::Forward(_)))
        .unwrap();
    b.run_entries(0..at + 1);
    let mut y = b.read("h.1.attn.y").unwrap();
    for t in 0..ctx {
        y[t * c + 2 * d..t * c + 3 * d].fill(0.0);
    }
    b.write("h.1.attn.y", &y).unwrap();
    b.run_entries(at + 1..end);
    let logits = b.read("logits").unwrap();
    let last = batch.inputs.len().min(PROMPT.len()) - 1;
    let by_hand = &logits[last * 256..(last + 1) * 256];
    let worst = knocked
        .iter()
        .zip(by_hand)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst < 1e-5, "knockout vs zeroed by hand: {worst}");
    // Every part, bit for bit across runs, and the GPU within 1e-5.
    let parts = Part::all(config.n_layer, n_head);
    let a = interventions::ablate(&mut b, &ck.params, LossOn::Prompt(PROMPT), &parts).unwrap();
    assert_eq!(a.parts.len(), parts.len());
    assert!(
        a.parts.iter().any(|k| k.delta.abs() > 1e-3),
        "some part matters"
    );
    assert_eq!(
        interventions::ablate(&mut b, &ck.params, LossOn::Prompt(PROMPT), &parts).unwrap(),
        a
    );
    let g = interventions::ablate(&mut gpu(&ck), &ck.params, LossOn::Prompt(PROMPT), &parts).unwrap();
    assert!((g.intact_loss - a.intact_loss).abs() < 1e-5);
    for (x, y) in a.parts.iter().zip(&g.parts) {
        assert!((x.loss - y.loss).abs() < 1e-4, "{x:?} vs {y:?}");
    }
}

#[test]
fn patching_restores_the_clean_answer_where_the_corruption_is() {
    let ck = shipped();
    let config = config_for(&ck.config);
    let c = config.d_model;
    let mut b = cpu(&ck);
    let clean = b"the king and the queen".to_vec();
    let mut corrupt = clean.clone();
    corrupt[4] = b'w'; // "the wing ..."
    let p = interventions::patch(&mut b, &clean, &corrupt, Some((b'n', b'e'))).unwrap();
    assert_eq!(p.restored.len(), config.n_layer);
    // The stream entering block 0 at the corrupted byte is its embedding
    // alone: patching it makes the run the clean one, restored = 1.
    assert!((p.restored[0][4] - 1.0).abs() < 1e-4, "{:?}", p.restored[0]);
    // Positions before the corrupted byte are the same in both runs: 0.
    for t in 0..4 {
        assert!(
            p.restored[0][t].abs() < 1e-5,
            "position {t}: {}",
            p.restored[0][t]
        );
    }
    // Patching the corrupted run with its own stream changes nothing.
    let points = interventions::stream_points(&Program::new(&config)).unwrap();
    let plain = interventions::last_logits(&mut b, &corrupt, None).unwrap();
    let own = b.read(&points[1]).unwrap();
    let same =
        interventions::last_logits(&mut b, &corrupt, Some((&points[1], 3, &own[3 * c..4 * c])))
            .unwrap();
    assert_eq!(plain, same);
    // The same on the GPU, within 1e-4 of the ratio.
    let g = interventions::patch(&mut gpu(&ck), &clean, &corrupt, Some((b'n', b'e'))).unwrap();
    for (x, y) in p.restored.iter().flatten().zip(g.restored.iter().flatten()) {
        assert!((x - y).abs() < 1e-3, "{x} vs {y}");
    }
    // Different lengths, and the same answer, are refused with the fix.
    let e = interventions::patch(&mut b, b"abc", b"abcd", None).unwrap_err();
    assert!(e.contains("same length"), "{e}");
    // A pair that differs in its first byte and still leads to the same
    // next byte (the first such corruption of the clean prompt).
    fn answer(b: &mut dyn tinygpt::backend::Backend, prompt: &[u8]) -> usize {
        let l = interventions::last_logits(b, prompt, None).unwrap();
        (0..l.len()).max_by(|&i, &j| l[i].total_cmp(&l[j])).unwrap()
    }
    let clean_answer = answer(&mut b, &clean);
    let same_answer = (b'a'..=b'z')
        .map(|x| {
            let mut p = clean.clone();
            p[0] = x;
            p
        })
        .find(|p| *p != clean && answer(&mut b, p) == clean_answer)
        .expect("a first byte that keeps the answer");
    let e = interventions::patch(&mut b, &clean, &same_answer, None).unwrap_err();
    assert!(e.contains("same next byte"), "{e}");
    // The same prompt twice: nothing to patch (it used to be a table of NaN
    // with --bytes), and the same after the context's cut.
    for bytes in [None, Some((b'n', b'e'))] {
        let e = interventions::patch(&mut b, &clean, &clean, bytes).unwrap_err();
        assert!(e.contains("nothing to patch"), "{e}");
    }
    let ctx = config.ctx;
    let (mut long_clean, mut long_corrupt) = (vec![b'a'; ctx + 3], vec![b'a'; ctx + 3]);
    long_clean[0] = b'x';
    long_corrupt[0] = b'y';
    let e = interventions::patch(&mut b, &long_clean, &long_corrupt, None).unwrap_err();
    assert!(e.contains(&format!("the same in their last {ctx} bytes")), "{e}");
    let e = interventions::patch(&mut b, b"", b"a", None).unwrap_err();
    assert!(e.contains("the clean prompt is empty"), "{e}");
}

#[test]
fn attribution_sums_to_the_real_logit_difference_on_both_backends() {
    let ck = shipped();
    let mut b = cpu(&ck);
    for (position, pair) in [(None, (b'e', b'a')), (Some(5), (b' ', b'\n'))] {
        let a = interventions::attribute(&mut b, &ck.params, PROMPT, position, pair).unwrap();
        let sum: f32 = a.parts.iter().map(|(_, v)| v).sum();
        assert!(
            (sum - a.total).abs() < 1e-4,
            "parts sum to {sum}, the logits differ by {}",
            a.total
        );
        let config = config_for(&ck.config);
        assert_eq!(a.parts.len(), 1 + config.n_layer * (config.n_head + 2) + 1);
        let g =
            interventions::attribute(&mut gpu(&ck), &ck.params, PROMPT, position, pair).unwrap();
        assert!((g.total - a.total).abs() < 1e-4);
        for ((n, x), (_, y)) in a.parts.iter().zip(&g.parts) {
            assert!((x - y).abs() < 1e-4, "{n}: {x} vs {y}");
        }
    }
}

#[test]
fn the_ablate_cli_measures_on_the_runs_validation_rows_when_asked() {
    let (out, _) = common::tinygpt(&[
        "ablate",
        "--preset",
        "tiny",
        "--seed",
        "7",
        "--validation",
        "4",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["on"], "validation");
    assert_eq!(v["rows"], 4);
    // The same rows as a run of that preset and seed validates on.
    let config = tinygpt::model::config::Config::load("tiny").unwrap();
    let corpus = tinygpt::data::Corpus::tiny_shakespeare(config.ctx).unwrap();
    let mut backend = CpuBackend::<f32>::new(Program::new(&config));
    backend.initialize(7).unwrap();
    let params = tinygpt::train::read_params(&mut backend).unwrap();
    let trainer = tinygpt::train::Trainer::new(Box::new(backend), corpus, 7).unwrap();
    let rows = trainer.validation_rows(4);
    let mut b = CpuBackend::<f32>::new(Program::new(&config_for(&config)));
    put(&mut b, &params);
    let loss = interventions::rows_loss(&mut b, &rows).unwrap();
    assert_eq!(v["intact_loss"].as_f64().unwrap() as f32, loss);
    // More rows than the run has: one line saying how many it has.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["ablate", "--preset", "tiny", "--validation", "4096"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("or fewer"), "{err}");
}
