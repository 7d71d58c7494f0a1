//! Divergence (issue 18): a step whose loss or gradients are not finite
//! leaves the run at its last good step on both backends (weights, AdamW
//! state, step count and batch sampler), the step run again op by op names
//! the first op whose output was not finite, and on the GPU the steps queued
//! behind the diverged one are discarded, not applied.

mod common;

use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Corpus;
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::Config;
use tinygpt::program::Program;
use tinygpt::train::{TrainError, Trainer};

fn trainer(gpu: bool, lr: f32) -> Trainer {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.lr = lr;
    cfg.eval_interval = 0;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let backend: Box<dyn Backend> = if gpu {
        Box::new(GpuBackend::new(common::gpu_context(), Program::new(&cfg)).unwrap())
    } else {
        Box::new(CpuBackend::<f32>::new(Program::new(&cfg)))
    };
    Trainer::new(backend, corpus, 42).unwrap()
}

/// Every parameter and AdamW moment, in program order.
fn state(t: &mut Trainer) -> Vec<Vec<f32>> {
    let ck = t.checkpoint(true).unwrap();
    let opt = ck.optimizer.unwrap();
    ck.params
        .iter()
        .chain(&opt.m)
        .chain(&opt.v)
        .map(|t| t.values.clone())
        .collect()
}

#[test]
fn an_injected_nan_is_traced_to_the_op_that_reads_it_on_both_backends() {
    let mut found = Vec::new();
    for gpu in [false, true] {
        let mut t = trainer(gpu, 3e-4);
        t.train_step().unwrap();
        let name = "transformer.h.1.mlp.c_fc.weight";
        let mut w = t.backend.read(name).unwrap();
        w[5] = f32::NAN;
        t.backend.write(name, &w).unwrap();
        let before = state(&mut t);
        let next = t.peek_next_batch();
        let err = t.train_step().unwrap_err();
        assert!(matches!(err, TrainError::Diverged { step: 2, .. }), "{err}");
        // The last good step: nothing changed, the same batch comes next.
        assert_eq!(t.step, 1);
        assert_eq!(t.history.len(), 1);
        assert_eq!(t.peek_next_batch(), next);
        let after = state(&mut t);
        assert!(
            before
                .iter()
                .flatten()
                .zip(after.iter().flatten())
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "gpu={gpu}: the diverged update was not applied"
        );
        let at = t.find_first_non_finite().unwrap().expect("an op wrote NaN");
        assert_eq!(at.op, "h.1.mlp.c_fc", "gpu={gpu}: {at}");
        assert_eq!(at.phase.key(), "forward");
        found.push(at);
        // Looking did not change the run either.
        assert_eq!(state(&mut t).len(), after.len());
        assert_eq!(t.peek_next_batch(), next);
    }
    assert_eq!(found[0], found[1], "CPU and GPU name the same op");
}

#[test]
fn a_learning_rate_that_diverges_stops_at_the_last_good_step_on_both_backends() {
    let mut found = Vec::new();
    for gpu in [false, true] {
        let mut t = trainer(gpu, 1e10);
        let mut good = state(&mut t);
        let err = loop {
            match t.train_step() {
                Ok(m) => {
                    assert!(m.step < 20, "lr 1e10 diverges within 20 steps");
                    good = state(&mut t);
                }
                Err(e) => break e,
            }
        };
        let TrainError::Diverged { step, .. } = err else {
            panic!("gpu={gpu}: {err}");
        };
        assert_eq!(t.step, step - 1);
        assert!(
            state(&mut t) == good,
            "gpu={gpu}: the weights of the last good step"
        );
        let at = t
            .find_first_non_finite()
            .unwrap()
            .expect("an op went non-finite");
        found.push((step, at));
    }
    assert_eq!(
        found[0], found[1],
        "CPU and GPU diverge at the same step and op"
    );
}

#[test]
fn steps_queued_behind_a_diverged_one_are_discarded_on_the_gpu() {
    let mut t = trainer(true, 3e-4);
    // No time-lapse: its frames would end the submits early (every step
    // of the first ones is a frame).
    t.timelapse = None;
    let collect = |t: &mut Trainer, mut flight| loop {
        match t.finish_gpu_steps(flight) {
            Ok(done) => return done,
            Err(f) => {
                t.backend.poll();
                flight = f;
            }
        }
    };
    let name = "transformer.wte.weight";
    let good = t.backend.read(name).unwrap();
    let mut bad = good.clone();
    bad[0] = f32::INFINITY;
    t.backend.write(name, &bad).unwrap();
    let first = t.submit_gpu_steps(1).unwrap();
    // The weights are fine again for the steps queued behind: each would
    // be applied on its own, but they follow a diverged step.
    t.backend.write(name, &good).unwrap();
    let queued = t.submit_gpu_steps(3).unwrap();
    let done = collect(&mut t, first);
    assert!(
        matches!(done.diverged, Some(TrainError::Diverged { step: 1, .. })),
        "{done:?}"
    );
    let done = collect(&mut t, queued);
    assert_eq!(
        (done.metrics.len(), done.discarded, done.diverged.is_none()),
        (0, 3, true)
    );
    assert_eq!(t.step, 0);
    let s = state(&mut t);
    assert!(s[0] == good, "no queued update was applied");
    let moments = s.len() / 3;
    assert!(
        s[moments..].iter().flatten().all(|&x| x == 0.0),
        "AdamW's moments untouched"
    );
    // Training goes on from the last good step, with the same batches as a
    // run that never diverged.
    let mut fresh = trainer(true, 3e-4);
    let flight = t.submit_gpu_steps(2).unwrap();
    let done = collect(&mut t, flight);
    assert_eq!(done.metrics.len(), 2);
    let a: Vec<f32> = done.metrics.iter().map(|m| m.loss).collect();
    let b: Vec<f32> = (0..2).map(|_| fresh.train_step().unwrap().loss).collect();
    assert_eq!(a, b);
}
