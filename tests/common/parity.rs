//! Every op of the program, CPU op against GPU kernel(s), one at a time on
//! fresh random inputs (tests/gpu.rs, tests/matmul_128.rs).
#![allow(dead_code)] // not every test binary runs the parity check

use super::gpu_context as context;
use tinygpt::backend::{Backend, StepParams};
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Batch;
use tinygpt::data::rng::Rng;
use tinygpt::gpu::GpuBackend;
use tinygpt::model::config::Config;
use tinygpt::program::{Op, Program, Step, TensorKind};

pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let diff: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
    if norm == 0.0 { diff } else { diff / norm }
}

pub fn random_batch(cfg: &Config, seed: u64) -> Batch {
    let mut rng = Rng::new(seed);
    let data: Vec<u8> = (0..cfg.ctx * cfg.batch * 4 + 64)
        .map(|_| rng.below(256) as u8)
        .collect();
    Batch::sample(&data, cfg.batch, cfg.ctx, &mut rng)
}

/// Every op of the program, forward then backward, on fresh random inputs:
/// the CPU op and the GPU kernel(s) get identical inputs, and every output
/// must agree to ≤ 1e-5 relative.
pub fn per_op_parity(cfg: &Config) {
    let program = Program::new(cfg);
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    let mut gpu = GpuBackend::new(context(), program.clone()).unwrap();
    let batch = random_batch(cfg, 1);
    cpu.set_batch(&batch);
    gpu.set_batch(&batch);
    let sp = StepParams {
        lr: 1e-3,
        adam_t: 1,
        dropout_seed: 77,
    };
    cpu.set_mode(true, sp.dropout_seed);
    let mut rng = Rng::new(5);
    let mut fill = |cpu: &mut CpuBackend<f32>, gpu: &mut GpuBackend, id: usize, std: f64| {
        let t = &program.tensors[id];
        if t.kind == TensorKind::Input {
            return;
        }
        let mut v: Vec<f32> = (0..t.numel())
            .map(|_| (rng.normal() * std) as f32)
            .collect();
        if t.name.ends_with(".rstd") {
            v.iter_mut().for_each(|x| *x = x.abs() + 0.5);
        }
        cpu.write(&t.name, &v).unwrap();
        gpu.write(&t.name, &v).unwrap();
    };
    let check = |cpu: &mut CpuBackend<f32>, gpu: &mut GpuBackend, id: usize, what: &str| {
        let name = &program.tensors[id].name;
        let want = cpu.read(name).unwrap();
        let got = gpu.read(name).unwrap();
        let e = rel_err(&got, &want);
        let worst = got
            .iter()
            .zip(&want)
            .enumerate()
            .max_by(|a, b| (a.1.0 - a.1.1).abs().total_cmp(&(b.1.0 - b.1.1).abs()))
            .unwrap();
        assert!(
            e <= 1e-5,
            "{what}: `{name}` relative error {e:e} (worst at {}: gpu {} cpu {})",
            worst.0,
            worst.1.0,
            worst.1.1
        );
    };
    for (i, node) in program.ops.iter().enumerate() {
        let (ins, outs) = node.op.io();
        // Forward on fresh inputs.
        for &id in &ins {
            fill(&mut cpu, &mut gpu, id, 1.0);
        }
        cpu.run(Step::Forward(i), None);
        gpu.run_steps(&[Step::Forward(i)], Some(sp));
        for &id in &outs {
            check(&mut cpu, &mut gpu, id, &format!("forward {}", node.label));
        }
        // Backward: random output gradient, random starting input gradients
        // (the kernels accumulate), same saved values.
        let grads_out: Vec<usize> = outs
            .iter()
            .filter_map(|&o| program.tensors[o].grad)
            .collect();
        for &gid in &grads_out {
            fill(&mut cpu, &mut gpu, gid, 1.0);
        }
        if matches!(node.op, Op::CrossEntropy { .. }) {
            // The loss's gradient is the mean: the backward reads only logits.
        }
        let grads_in: Vec<usize> = ins
            .iter()
            .filter_map(|&x| program.tensors[x].grad)
            .collect();
        for &gid in &grads_in {
            fill(&mut cpu, &mut gpu, gid, 0.1);
        }
        cpu.run(Step::Backward(i), None);
        gpu.run_steps(&[Step::Backward(i)], Some(sp));
        for &gid in &grads_in {
            check(&mut cpu, &mut gpu, gid, &format!("backward {}", node.label));
        }
    }
}
