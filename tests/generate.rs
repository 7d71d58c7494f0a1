//! Text generation, checked against the program's own forward pass (issues
//! 18 and 29): the CPU's KV-cache generator and the GPU generator, through
//! `generate` itself, before and after the window fills. For every byte each
//! generator gives logits for, the full forward pass of the batch-1 program
//! over the same window gives the same logits at its last position; and the
//! window is nanoGPT's: the last ctx bytes, sliding one byte at a time, so
//! greedy text equals a sliding-window loop written here from the forward
//! pass alone.

mod common;

use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::cpu::generate::Generator;
use tinygpt::data::Batch;
use tinygpt::gpu::generate::GpuGenerator;
use tinygpt::model::checkpoint::Checkpoint;
use tinygpt::model::config::VOCAB;
use tinygpt::program::Program;
use tinygpt::sample::{NextToken, SampleOptions, generate};

/// A generator that remembers the window behind every set of logits.
struct Recording<'a> {
    inner: &'a mut dyn NextToken,
    window: Vec<u8>,
    seen: Vec<(Vec<u8>, Vec<f32>)>,
}

impl NextToken for Recording<'_> {
    fn ctx(&self) -> usize {
        self.inner.ctx()
    }
    fn positions(&self) -> usize {
        self.inner.positions()
    }
    fn prime(&mut self, tokens: &[u8]) -> Vec<f32> {
        self.window = tokens.to_vec();
        let logits = self.inner.prime(tokens);
        self.seen.push((self.window.clone(), logits.clone()));
        logits
    }
    fn push(&mut self, token: u8) -> Vec<f32> {
        self.window.push(token);
        let logits = self.inner.push(token);
        self.seen.push((self.window.clone(), logits.clone()));
        logits
    }
}

/// Generates greedily from `prompt` for three windows' worth of bytes and
/// returns the text and every (window, logits) the generator gave.
fn run(generator: &mut dyn NextToken, prompt: &[u8]) -> (Vec<u8>, Vec<(Vec<u8>, Vec<f32>)>) {
    let ctx = generator.ctx();
    let mut rec = Recording {
        inner: generator,
        window: Vec::new(),
        seen: Vec::new(),
    };
    let greedy = SampleOptions {
        temperature: 0.0,
        top_k: 1,
        seed: 0,
    };
    let text = generate(&mut rec, prompt, 3 * ctx, &greedy, |_| {});
    (text, rec.seen)
}

#[test]
fn generators_slide_their_window_and_match_the_forward_pass() {
    let ck =
        Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny").unwrap();
    let mut cfg = ck.config.clone();
    cfg.batch = 1;
    let ctx = cfg.ctx;
    let mut reference = CpuBackend::<f32>::new(Program::new(&cfg));
    for p in &ck.params {
        reference.write(&p.name, &p.values).unwrap();
    }
    let mut forward = |window: &[u8]| -> Vec<f32> {
        let mut inputs: Vec<u32> = window.iter().map(|&b| b as u32).collect();
        inputs.resize(ctx, b' ' as u32);
        let batch = Batch {
            batch: 1,
            ctx,
            targets: inputs.clone(),
            inputs,
        };
        reference.eval_loss(&batch);
        let logits = reference.read("logits").unwrap();
        let last = window.len() - 1;
        logits[last * VOCAB..(last + 1) * VOCAB].to_vec()
    };

    let prompt = b"ROMEO:\nWhat light";
    let mut cpu = Generator::new(&ck.config, &ck.params).unwrap();
    let mut gpu = GpuGenerator::new(common::gpu_context(), &ck.config, &ck.params).unwrap();
    for (name, generator) in [("cpu", &mut cpu as &mut dyn NextToken), ("gpu", &mut gpu)] {
        let (text, seen) = run(generator, prompt);
        assert_eq!(text.len(), 3 * ctx);
        assert_eq!(seen.len(), 3 * ctx + 1);
        // Every window is the last ctx bytes (all, while fewer) of the
        // prompt and the bytes generated before it: it slides once full.
        let history: Vec<u8> = prompt.iter().chain(&text).copied().collect();
        for (i, (window, _)) in seen.iter().enumerate() {
            let end = prompt.len() + i;
            assert_eq!(
                window.as_slice(),
                &history[end.saturating_sub(ctx)..end],
                "{name}, byte {i}: not the sliding window"
            );
        }
        // Greedy text is what the forward pass alone gives, window by window.
        let mut slid = prompt.to_vec();
        for _ in 0..text.len() {
            let logits = forward(&slid[slid.len().saturating_sub(ctx)..]);
            let best = (0..VOCAB)
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
                .unwrap();
            slid.push(best as u8);
        }
        assert_eq!(
            String::from_utf8_lossy(&text),
            String::from_utf8_lossy(&slid[prompt.len()..]),
            "{name}: greedy text departs from the sliding-window forward pass"
        );
        for (i, (window, logits)) in seen.iter().enumerate() {
            let want = forward(window);
            let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = logits
                .iter()
                .zip(&want)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                err <= 1e-4 * scale.max(1.0),
                "{name}, byte {i} (window of {}): logits differ by {err} (scale {scale})",
                window.len()
            );
        }
    }
}
