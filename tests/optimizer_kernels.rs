//! The optimizer's kernels one by one, GPU against CPU (issue 18): the
//! gradient norm, the clip and AdamW, each run alone on the same
//! gradients, weights and moments, with the clip active and not. (The
//! 20-step trajectory test covers them only together; AdamW against its
//! formula is in tests/gradcheck.rs.)

mod common;

use tinygpt::backend::{Backend, StepParams};
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Batch;
use tinygpt::data::rng::Rng;
use tinygpt::gpu::GpuBackend;
use tinygpt::program::{Program, Step};

/// Values of a random normal times `scale`.
fn normal(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.normal() as f32 * scale).collect()
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

#[test]
fn norm_clip_and_adamw_kernels_match_the_cpu_one_by_one() {
    // Odd sizes: chunks and workgroups end mid-way.
    let cfg = common::config(2, 3, 36, 11, 3, 0.0);
    let program = Program::new(&cfg);
    let index = |want: Step| program.steps.iter().position(|s| *s == want).unwrap();
    let (clip, adamw) = (index(Step::ClipGradNorm), index(Step::AdamW));
    let batch = Batch {
        batch: cfg.batch,
        ctx: cfg.ctx,
        inputs: vec![1; cfg.batch * cfg.ctx],
        targets: vec![2; cfg.batch * cfg.ctx],
    };
    let params = StepParams {
        lr: 3e-3,
        adam_t: 7,
        dropout_seed: 0,
    };
    // A gradient scale of 1e-3 leaves the norm under the clip (1.0); 1.0 puts it far over.
    for grad_scale in [1e-3f32, 1.0] {
        let mut cpu = CpuBackend::<f32>::new(program.clone());
        let mut gpu = GpuBackend::new(common::gpu_context(), program.clone()).unwrap();
        let mut rng = Rng::new(11);
        let mut norm_sq = 0f64;
        for id in program.params() {
            let t = &program.tensors[id];
            let n = t.numel();
            let grad = normal(&mut rng, n, grad_scale);
            norm_sq += grad.iter().map(|&g| g as f64 * g as f64).sum::<f64>();
            let (m, v) = t.adam.unwrap();
            let values = [
                (t.name.clone(), normal(&mut rng, n, 0.1)),
                (program.tensors[t.grad.unwrap()].name.clone(), grad),
                (program.tensors[m].name.clone(), normal(&mut rng, n, 1e-3)),
                (
                    program.tensors[v].name.clone(),
                    normal(&mut rng, n, 1e-3).iter().map(|x| x * x).collect(),
                ),
            ];
            for (name, vals) in &values {
                cpu.write(name, vals).unwrap();
                gpu.write(name, vals).unwrap();
            }
        }
        // A finite loss in the stats, as the forward pass leaves it.
        for b in [&mut cpu as &mut dyn Backend, &mut gpu] {
            b.write("step.stats", &[2.5, 0.0, 0.0, 0.0]).unwrap();
            b.load_step(&batch, Some(params));
        }

        // The norm and the clip.
        cpu.run_entries(clip..clip + 1);
        gpu.run_entries(clip..clip + 1);
        let (s_cpu, s_gpu) = (
            cpu.read("step.stats").unwrap(),
            gpu.read("step.stats").unwrap(),
        );
        let norm = norm_sq.sqrt() as f32;
        assert!(
            (s_cpu[1] - norm).abs() <= 1e-5 * norm,
            "cpu norm {} vs {norm}",
            s_cpu[1]
        );
        assert!(
            (s_gpu[1] - norm).abs() <= 1e-5 * norm,
            "gpu norm {} vs {norm}",
            s_gpu[1]
        );
        let scale = (1.0 / (norm + 1e-6)).min(1.0);
        assert!(
            (s_gpu[2] - scale).abs() <= 1e-5 * scale,
            "gpu clip scale {} vs {scale}",
            s_gpu[2]
        );
        assert!(
            (s_cpu[2] - scale).abs() <= 1e-5 * scale,
            "cpu clip scale {} vs {scale}",
            s_cpu[2]
        );
        assert_eq!(
            scale < 1.0,
            grad_scale == 1.0,
            "the clip is active exactly in the large case"
        );

        // AdamW (the GPU clips inside its update; the CPU clipped in place).
        cpu.run_entries(adamw..adamw + 1);
        gpu.run_entries(adamw..adamw + 1);
        for id in program.params() {
            let t = &program.tensors[id];
            let (m, v) = t.adam.unwrap();
            for name in [&t.name, &program.tensors[m].name, &program.tensors[v].name] {
                let (a, b) = (gpu.read(name).unwrap(), cpu.read(name).unwrap());
                let e = max_rel(&a, &b);
                assert!(e <= 1e-5, "grad scale {grad_scale}: {name} differs by {e}");
            }
        }
    }
}
