//! The GPU backend against the CPU reference, on whatever adapter wgpu finds
//! (Mesa's lavapipe in CI). These tests fail, never skip, without an adapter.
//!
//! Order as a bug would show: each kernel alone on fresh random inputs
//! (forward, then backward), FlashAttention at awkward (T, D), then whole
//! training steps, the overfit gate, and buffer allocation.

mod common;

use common::config;
use tinygpt::backend::{Backend, StepParams};
use tinygpt::cpu::CpuBackend;
use tinygpt::data::rng::Rng;
use tinygpt::data::{Batch, Corpus};
use tinygpt::gpu::matmul_tiles::{MatmulChoice, TILES, TileConfig};
use tinygpt::gpu::{GpuBackend, GpuContext, kernels};
use tinygpt::model::config::Config;
use tinygpt::program::{Op, Program, Step, TensorKind};
use tinygpt::train::Trainer;

use common::gpu_context as context;

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
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

fn random_batch(cfg: &Config, seed: u64) -> Batch {
    let mut rng = Rng::new(seed);
    let data: Vec<u8> = (0..cfg.ctx * cfg.batch * 4 + 64)
        .map(|_| rng.below(256) as u8)
        .collect();
    Batch::sample(&data, cfg.batch, cfg.ctx, &mut rng)
}

/// Every op of the program, forward then backward, on fresh random inputs:
/// the CPU op and the GPU kernel(s) get identical inputs, and every output
/// must agree to ≤ 1e-5 relative.
fn per_op_parity(cfg: &Config) {
    per_op_parity_on(context(), cfg);
}

fn per_op_parity_on(ctx: GpuContext, cfg: &Config) {
    let mixed = ctx.mixed_precision();
    // Whether this plan puts attention on the tensor cores: the planner's own test.
    let coop_attention = tinygpt::gpu::coop::attention_on_tensor_cores(ctx.matmul, cfg.head_dim());
    let program = Program::new(cfg);
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    let mut gpu = GpuBackend::new(ctx, program.clone()).unwrap();
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
    // Mixed precision: a product on the tensor cores meets f16's bound
    // (MIXED_MATMUL_BOUND); the cross-entropy's gradient is the loss
    // scale (a power of 2, so exactly) times f32's; every other op is f32's.
    let bound = |op: &Op| match op {
        Op::Linear { .. } | Op::TiedHead { .. } | Op::LowRank { .. } if mixed => MIXED_MATMUL_BOUND,
        Op::Attention { .. } if coop_attention => MIXED_ATTENTION_BOUND,
        _ => 1e-5,
    };
    let scale = |op: &Op, backward: bool| match op {
        Op::CrossEntropy { .. } if mixed && backward => tinygpt::gpu::LOSS_SCALE_INIT,
        _ => 1.0,
    };
    let check = |cpu: &mut CpuBackend<f32>, gpu: &mut GpuBackend, id: usize, what: &str, (bound, scale): (f64, f32)| {
        let name = &program.tensors[id].name;
        let want: Vec<f32> = cpu.read(name).unwrap().iter().map(|v| v * scale).collect();
        let got = gpu.read(name).unwrap();
        let e = rel_err(&got, &want);
        let worst = got
            .iter()
            .zip(&want)
            .enumerate()
            .max_by(|a, b| (a.1.0 - a.1.1).abs().total_cmp(&(b.1.0 - b.1.1).abs()))
            .unwrap();
        assert!(
            e <= bound,
            "{what}: `{name}` relative error {e:e} over {bound:e} (worst at {}: gpu {} cpu {})",
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
            let tolerance = (bound(&node.op), scale(&node.op, false));
            check(&mut cpu, &mut gpu, id, &format!("forward {}", node.label), tolerance);
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
            // Mixed precision scales only what the cross-entropy adds to its
            // gradient: start that one from zero, so S·(CPU's) is the answer.
            let std = if mixed && matches!(node.op, Op::CrossEntropy { .. }) { 0.0 } else { 0.1 };
            fill(&mut cpu, &mut gpu, gid, std);
        }
        cpu.run(Step::Backward(i), None);
        gpu.run_steps(&[Step::Backward(i)], Some(sp));
        for &gid in &grads_in {
            let tolerance = (bound(&node.op), scale(&node.op, true));
            check(&mut cpu, &mut gpu, gid, &format!("backward {}", node.label), tolerance);
        }
    }
}

#[test]
fn every_kernel_matches_the_cpu_at_ragged_shapes() {
    // C = 20 (3C = 60, 4C = 80), T = 13, B = 3: no size is a multiple of a tile.
    per_op_parity(&config(1, 2, 20, 13, 3, 0.0));
}

#[test]
fn every_kernel_matches_the_cpu_with_split_k() {
    // N = B·T = 604 rows: the weight gradients (M, N ≤ 80, K = 604) take the
    // split-K path with a ragged last split.
    assert!(tinygpt::gpu::split_k(80, 604, 20).0 > 1);
    per_op_parity(&config(1, 2, 20, 151, 4, 0.0));
}

#[test]
fn every_kernel_matches_the_cpu_with_many_rows() {
    // B·T = 151 · 15 = 2265 rows: the bias and LayerNorm parameter
    // gradients take the partial and final passes (the tests above, with
    // fewer rows, take the one-dispatch build), the last chunk ragged.
    let cfg = config(1, 2, 20, 151, 15, 0.0);
    assert!(cfg.ctx * cfg.batch > tinygpt::gpu::DIRECT_SUMS_MAX_ROWS);
    assert!((cfg.ctx * cfg.batch) % 16 != 0);
    per_op_parity(&cfg);
}

/// The context with every matmul forced onto one warp-tiled configuration
/// (each must run on the test adapter, or the test would check the flat one).
fn with_tile(tile: &'static TileConfig) -> GpuContext {
    let mut ctx = context();
    assert!(
        tile.fits(&ctx.limits),
        "{} does not fit {}",
        tile.name,
        ctx.describe()
    );
    ctx.matmul = MatmulChoice::Tile(tile);
    ctx
}

#[test]
fn every_matmul_tile_matches_the_cpu_at_ragged_shapes() {
    for tile in TILES {
        // no size a multiple of a tile: one ragged tile of C = 20 ...
        per_op_parity_on(with_tile(tile), &config(1, 2, 20, 13, 3, 0.0));
        // ... several tiles each way (C = 132, 4C = 528, B·T = 145; K = 132
        // is not a multiple of BK), and split-K for the weight gradients
        // (K = B·T = 604)
        per_op_parity_on(with_tile(tile), &config(1, 2, 132, 29, 5, 0.0));
        per_op_parity_on(with_tile(tile), &config(1, 2, 20, 151, 4, 0.0));
    }
}

#[test]
fn twenty_steps_match_the_cpu_on_every_matmul_tile() {
    for tile in TILES {
        whole_step_parity_on(with_tile(tile), 0.0, Default::default());
    }
}

/// LoRA on every linear of each block, at ragged shapes and with split-K:
/// the low-rank update's forward and backward, and the frozen linears'
/// backward that computes dinp alone.
#[test]
fn every_kernel_matches_the_cpu_with_lora() {
    for cfg in [config(1, 2, 20, 13, 3, 0.0), config(1, 2, 20, 151, 4, 0.0)] {
        per_op_parity(&with_lora(cfg, 3));
    }
}

/// `cfg` fine-tuned with LoRA of rank `rank` on the attention and the MLP.
fn with_lora(mut cfg: Config, rank: usize) -> Config {
    cfg.lora = Some(tinygpt::model::config::Lora {
        rank,
        alpha: 2.0 * rank as f32,
        targets: tinygpt::model::config::LoraTargets::parse("attn,mlp").unwrap(),
        base: 0,
    });
    cfg
}

/// A fine-tune on both backends from the same base: the same losses and
/// gradient norms for 20 steps, the same adapters after, and the frozen
/// base bit-identical to what was loaded on both.
#[test]
fn twenty_lora_steps_match_the_cpu() {
    let mut base_cfg = Config::load("tiny").unwrap();
    base_cfg.eval_interval = 0;
    let base = tinygpt::model::params::init_params(&Program::new(&base_cfg), 7);
    let mut cfg = with_lora(base_cfg, 4);
    cfg.lr = 1e-2;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut cpu = Trainer::finetune(
        Box::new(CpuBackend::<f32>::new(Program::new(&cfg))),
        corpus.clone(),
        42,
        &base,
    )
    .unwrap();
    let mut gpu = Trainer::finetune(
        Box::new(GpuBackend::new(context(), Program::new(&cfg)).unwrap()),
        corpus,
        42,
        &base,
    )
    .unwrap();
    for step in 1..=20 {
        let a = cpu.train_step().unwrap();
        let b = gpu.train_step().unwrap();
        for (what, x, y) in [
            ("loss", a.loss, b.loss),
            ("grad norm", a.grad_norm, b.grad_norm),
        ] {
            let e = ((x - y) / x).abs();
            assert!(e <= 1e-4, "step {step}: {what} cpu {x} gpu {y} ({e:e})");
        }
    }
    let program = Program::new(&cfg);
    for (pc, pg) in cpu.params().unwrap().iter().zip(gpu.params().unwrap()) {
        let id = program.tensor_id(&pc.name).unwrap();
        if program.tensors[id].is_frozen() {
            let loaded = &base.iter().find(|t| t.name == pc.name).unwrap().values;
            assert!(
                pc.values == *loaded && pg.values == *loaded,
                "`{}` moved",
                pc.name
            );
        } else {
            let e = rel_err(&pg.values, &pc.values);
            assert!(e <= 1e-4, "`{}` after 20 steps: relative error {e:e}", pc.name);
        }
    }
}

#[test]
fn every_kernel_matches_the_cpu_with_dropout() {
    let cfg = config(1, 2, 20, 37, 3, 0.25);
    per_op_parity(&cfg);
    // And with the 16×16-tile dK/dV and the row dQ kernels, which devices
    // with less workgroup memory run (kernels::attention_dkdv_entry,
    // attention_dq_entry).
    let old = without_attention_blocks(cfg.head_dim());
    assert_eq!(backward_kernels(&old, cfg.head_dim()), ["attention_backward_dkdv", "attention_backward_dq_rows"]);
    per_op_parity_on(old, &cfg);
}

#[test]
fn every_kernel_matches_the_cpu_in_the_labs() {
    // T = 37: three attention tiles, the last ragged; dropout on the
    // unmasked weights too.
    for (causal_mask, position_embeddings, dropout) in
        [(false, true, 0.0), (true, false, 0.0), (false, false, 0.25)]
    {
        let mut cfg = config(1, 2, 20, 37, 3, dropout);
        cfg.lab = tinygpt::model::config::Lab {
            causal_mask,
            position_embeddings,
        };
        per_op_parity(&cfg);
    }
}

/// A context whose planner sees only the workgroup memory that the 16×16-tile
/// dK/dV and the row kernels need at head size `d`: it runs those, as a
/// device with less memory than the blocked kernels need would.
fn without_attention_blocks(d: usize) -> GpuContext {
    let mut ctx = context();
    ctx.limits.max_compute_workgroup_storage_size =
        kernels::attention_workgroup_bytes(d).max(kernels::attention_rows_workgroup_bytes(d)) as u32;
    ctx
}

/// Training's dK/dV and dQ kernels on this context at head size `d` (for
/// the tests' few query rows).
fn backward_kernels(ctx: &GpuContext, d: usize) -> [&'static str; 2] {
    let bytes = ctx.limits.max_compute_workgroup_storage_size;
    [kernels::attention_dkdv_entry(d, bytes).0, kernels::attention_dq_entry(d, bytes, 1024).0]
}

#[test]
fn attentions_backward_kernels_are_chosen_by_workgroup_memory_and_rows() {
    // (No GPU needed.) The blocked kernels where their blocks fit, the
    // 16×16-tile dK/dV and the row dQ where they do not; dQ in rows, too,
    // from ATTENTION_DQ_ROWS_FROM query rows (the row kernel fills a large
    // GPU there).
    for d in [6, 16, 20, 32, 64, 128] {
        let (dkdv, dq) = (kernels::attention_dkdv_blocks_bytes(d), kernels::attention_dq_blocks_bytes(d));
        assert!(dkdv > kernels::attention_workgroup_bytes(d) && dq > kernels::attention_rows_workgroup_bytes(d));
        assert_eq!(kernels::attention_dkdv_entry(d, dkdv as u32).0, "attention_backward_dkdv_blocks");
        assert_eq!(kernels::attention_dkdv_entry(d, dkdv as u32 - 1).0, "attention_backward_dkdv");
        assert_eq!(kernels::attention_dq_entry(d, dq as u32, 1).0, "attention_backward_dq_blocks");
        assert_eq!(kernels::attention_dq_entry(d, dq as u32 - 1, 1).0, "attention_backward_dq_rows");
        let rows = kernels::ATTENTION_DQ_ROWS_FROM;
        assert_eq!(kernels::attention_dq_entry(d, u32::MAX, rows - 1).0, "attention_backward_dq_blocks");
        assert_eq!(kernels::attention_dq_entry(d, u32::MAX, rows).0, "attention_backward_dq_rows");
    }
    // D = 64 fits the 32 KiB browsers and lavapipe give.
    assert!(kernels::attention_dkdv_blocks_bytes(64).max(kernels::attention_dq_blocks_bytes(64)) <= 32768);
}

#[test]
fn flash_attention_matches_naive_attention() {
    // Training's backward kernels are the blocked ones where the adapter's
    // workgroup memory holds their blocks, the 16×16-tile dK/dV and the row
    // dQ elsewhere: both, at every shape.
    const BLOCKED: [&str; 2] = ["attention_backward_dkdv_blocks", "attention_backward_dq_blocks"];
    const OLD: [&str; 2] = ["attention_backward_dkdv", "attention_backward_dq_rows"];
    let full = context();
    assert_eq!(
        backward_kernels(&full, 64),
        BLOCKED,
        "this adapter ({} bytes of workgroup memory) should run the blocked backward kernels up to D = 64",
        full.limits.max_compute_workgroup_storage_size
    );
    // (T, head_dim): T = 1, T below / at / above a 16-row tile and a 32-key
    // block, D up to 128 and not a multiple of 4.
    for (t, d, h) in [
        (1, 8, 2),
        (15, 16, 1),
        (16, 32, 2),
        (17, 24, 2),
        (33, 64, 1),
        (40, 128, 1),
        (71, 20, 2),
        (50, 6, 3),
    ] {
        let old = without_attention_blocks(d);
        assert_eq!(backward_kernels(&old, d), OLD);
        for ctx in [context(), old] {
            flash_attention_matches_naive_attention_at(&ctx, t, d, h);
        }
    }
}

fn flash_attention_matches_naive_attention_at(ctx: &GpuContext, t: usize, d: usize, h: usize) {
    let cfg = config(1, h, d * h, t, 2, 0.0);
    let program = Program::new(&cfg);
    let attn = program
        .ops
        .iter()
        .position(|n| matches!(n.op, Op::Attention { .. }))
        .unwrap();
    let mut cpu = CpuBackend::<f32>::new(program.clone());
    let mut gpu = GpuBackend::new(ctx.clone(), program.clone()).unwrap();
    let Op::Attention { qkv, out, lse, .. } = program.ops[attn].op else {
        unreachable!()
    };
    let mut rng = Rng::new(t as u64 * 131 + d as u64);
    let mut set = |id: usize| {
        let name = &program.tensors[id].name;
        let v: Vec<f32> = (0..program.tensors[id].numel())
            .map(|_| rng.normal() as f32)
            .collect();
        cpu.write(name, &v).unwrap();
        gpu.write(name, &v).unwrap();
    };
    set(qkv);
    set(program.tensors[out].grad.unwrap());
    set(program.tensors[qkv].grad.unwrap());
    cpu.set_mode(true, 0);
    cpu.run(Step::Forward(attn), None);
    cpu.run(Step::Backward(attn), None);
    gpu.run_steps(&[Step::Forward(attn), Step::Backward(attn)], None);
    for id in [out, lse, program.tensors[qkv].grad.unwrap()] {
        let name = &program.tensors[id].name;
        let e = rel_err(&gpu.read(name).unwrap(), &cpu.read(name).unwrap());
        let kernels = backward_kernels(ctx, d);
        assert!(e <= 1e-5, "T={t} D={d} ({kernels:?}): `{name}` relative error {e:e}");
    }
}

/// Same seed, same batches: `steps` training steps on both backends.
fn whole_step_parity(dropout: f32) {
    whole_step_parity_in(dropout, Default::default());
}

fn whole_step_parity_in(dropout: f32, lab: tinygpt::model::config::Lab) {
    whole_step_parity_on(context(), dropout, lab);
}

fn whole_step_parity_on(ctx: GpuContext, dropout: f32, lab: tinygpt::model::config::Lab) {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.dropout = dropout;
    cfg.lab = lab;
    cfg.eval_interval = 0;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut cpu = Trainer::new(
        Box::new(CpuBackend::<f32>::new(Program::new(&cfg))),
        corpus.clone(),
        42,
    )
    .unwrap();
    let mut gpu = Trainer::new(
        Box::new(GpuBackend::new(ctx, Program::new(&cfg)).unwrap()),
        corpus,
        42,
    )
    .unwrap();
    for step in 1..=20 {
        let a = cpu.train_step().unwrap();
        let b = gpu.train_step().unwrap();
        let e = ((a.loss - b.loss) / a.loss).abs();
        assert!(
            e <= 1e-4,
            "dropout {dropout}, step {step}: loss cpu {} gpu {} ({e:e})",
            a.loss,
            b.loss
        );
        let e = ((a.grad_norm - b.grad_norm) / a.grad_norm).abs();
        assert!(
            e <= 1e-4,
            "dropout {dropout}, step {step}: grad norm cpu {} gpu {}",
            a.grad_norm,
            b.grad_norm
        );
    }
    for (pc, pg) in cpu.params().unwrap().iter().zip(gpu.params().unwrap()) {
        let (mut want, mut got) = (pc.values.clone(), pg.values.clone());
        if pc.name.ends_with("attn.c_attn.bias") {
            // The key bias adds q_i·b_k to every score of row i: softmax does
            // not see it, so its gradient is 0 up to rounding, and AdamW turns
            // that rounding (different on each backend) into steps of up to
            // lr. Bound those; compare the query and value biases as usual.
            let c = want.len() / 3;
            let bound = 20.0 * cfg.lr * 1.01;
            for (a, b) in want[c..2 * c].iter().zip(&got[c..2 * c]) {
                assert!((a - b).abs() <= bound, "`{}`: key bias {a} vs {b}", pc.name);
            }
            want.drain(c..2 * c);
            got.drain(c..2 * c);
        }
        let e = rel_err(&got, &want);
        assert!(
            e <= 1e-4,
            "dropout {dropout}: `{}` after 20 steps: relative error {e:e}",
            pc.name
        );
    }
}

#[test]
fn twenty_steps_match_the_cpu() {
    whole_step_parity(0.0);
}

#[test]
fn twenty_steps_match_the_cpu_with_dropout() {
    whole_step_parity(0.2);
}

#[test]
fn twenty_steps_match_the_cpu_in_the_labs() {
    whole_step_parity_in(
        0.0,
        tinygpt::model::config::Lab {
            causal_mask: false,
            position_embeddings: false,
        },
    );
}

#[test]
fn gpu_overfit_gate_one_fixed_batch() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.lr = 3e-3;
    cfg.eval_interval = 0;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut t = Trainer::new(
        Box::new(GpuBackend::new(context(), Program::new(&cfg)).unwrap()),
        corpus,
        42,
    )
    .unwrap();
    let batch = t.next_batch();
    let first = t.train_on(&batch).unwrap().loss;
    assert!((first - 256f32.ln()).abs() < 0.1, "initial loss {first}");
    let mut last = first;
    for _ in 1..300 {
        last = t.train_on(&batch).unwrap().loss;
        if last < 0.05 {
            break;
        }
    }
    assert!(last < 0.05, "after 300 steps the loss is {last}");
}

#[test]
fn no_buffer_is_created_after_the_first_step() {
    let cfg = Config::load("tiny").unwrap();
    let program = Program::new(&cfg);
    // A device of its own: the other tests' buffers must not count here.
    let ctx = GpuContext::new_blocking().expect("the GPU tests need an adapter");
    let mut gpu = GpuBackend::new(ctx.clone(), program.clone()).unwrap();
    gpu.initialize(1).unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut sampler = tinygpt::data::BatchSampler::new(3);
    let mut step = |gpu: &mut GpuBackend, t: u64| {
        let batch = sampler.next(&corpus, cfg.batch, cfg.ctx);
        gpu.train_step(
            &batch,
            StepParams {
                lr: 1e-3,
                adam_t: t,
                dropout_seed: 0,
            },
        );
        gpu.eval_loss(&batch);
        gpu.read("transformer.h.0.attn.c_attn.weight").unwrap();
    };
    step(&mut gpu, 1);
    let created = gpu.buffers_created();
    let live = ctx.device.get_internal_counters().hal.buffers.read();
    for t in 2..6 {
        step(&mut gpu, t);
    }
    assert_eq!(
        gpu.buffers_created(),
        created,
        "the backend created buffers after construction"
    );
    let live_after = ctx.device.get_internal_counters().hal.buffers.read();
    assert_eq!(
        live, live_after,
        "live device buffers changed between step 1 and step 5"
    );
}

#[test]
fn a_preset_too_big_for_the_adapter_is_refused_by_name() {
    let mut ctx = context();
    ctx.limits.max_storage_buffer_binding_size = 1 << 16;
    let cfg = Config::load("small").unwrap();
    let err = GpuBackend::new(ctx, Program::new(&cfg))
        .err()
        .expect("must refuse")
        .to_string();
    assert!(
        err.contains("max_storage_buffer_binding_size") && err.contains("3L/3H/d96"),
        "{err}"
    );
}

#[test]
fn readback_is_asynchronous_and_matches_the_blocking_read() {
    let cfg = Config::load("tiny").unwrap();
    let program = Program::new(&cfg);
    let mut gpu = GpuBackend::new(context(), program.clone()).unwrap();
    gpu.initialize(4).unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let batch = tinygpt::data::BatchSampler::new(1).next(&corpus, cfg.batch, cfg.ctx);
    gpu.train_step(
        &batch,
        StepParams {
            lr: 1e-3,
            adam_t: 1,
            dropout_seed: 0,
        },
    );
    for name in [
        "transformer.h.1.mlp.c_fc.weight",
        "h.0.attn.y",
        "grad.transformer.wte.weight",
        "tokens",
    ] {
        let want = gpu.read(name).unwrap();
        let mut handle = gpu.request_read(name).unwrap();
        let got = loop {
            gpu.poll();
            match gpu.try_take(handle) {
                Ok(v) => break v,
                Err(h) => handle = h,
            }
        };
        assert_eq!(got, want, "{name}");
        assert_eq!(
            pollster::block_on(gpu.read_async(name)).unwrap(),
            want,
            "{name} (async fn)"
        );
    }
    // Staging buffers are pooled: reading again creates none.
    let created = gpu.buffers_created();
    for _ in 0..3 {
        pollster::block_on(gpu.read_async("h.0.attn.y")).unwrap();
    }
    assert_eq!(gpu.buffers_created(), created);
    assert!(gpu.request_read("no.such.tensor").is_err());
}

#[test]
fn submitted_steps_equal_steps_taken_one_by_one() {
    // The app's path (several steps per submit, outcomes collected later,
    // nothing waits) against train_step, bit for bit.
    let mut cfg = Config::load("tiny").unwrap();
    cfg.dropout = 0.1;
    let program = Program::new(&cfg);
    let mut one = GpuBackend::new(context(), program.clone()).unwrap();
    let mut many = GpuBackend::new(context(), program.clone()).unwrap();
    one.initialize(6).unwrap();
    many.initialize(6).unwrap();
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut sampler = tinygpt::data::BatchSampler::new(8);
    let batches: Vec<_> = (0..5)
        .map(|_| sampler.next(&corpus, cfg.batch, cfg.ctx))
        .collect();
    let params: Vec<_> = (1..=5u64)
        .map(|t| StepParams {
            lr: 1e-3 * t as f32,
            adam_t: t,
            dropout_seed: t as u32 * 7,
        })
        .collect();
    let want: Vec<_> = batches
        .iter()
        .zip(&params)
        .map(|(b, p)| one.train_step(b, *p))
        .collect();
    // Two submits (3 + 2 steps): the staging ring is reused.
    let mut got = Vec::new();
    for range in [0..3, 3..5] {
        let mut handle = many.submit_steps(&batches[range.clone()], &params[range]);
        let outcomes = loop {
            many.poll();
            match many.try_finish_steps(handle) {
                Ok(o) => break o,
                Err(h) => handle = h,
            }
        };
        got.extend(outcomes);
    }
    assert_eq!(got, want);
    for p in program.params() {
        let name = &program.tensors[p].name;
        assert_eq!(many.read(name).unwrap(), one.read(name).unwrap(), "{name}");
    }
}

#[test]
fn the_trainers_frame_loop_path_is_the_same_run_as_train_step() {
    // Trainer::submit_gpu_steps/finish_gpu_steps (what the app calls every
    // frame, two submits in flight) against Trainer::train_step: same losses,
    // same validation losses at the same steps, same weights.
    let mut cfg = Config::load("tiny").unwrap();
    cfg.dropout = 0.1;
    cfg.steps = 9;
    cfg.eval_interval = 4;
    cfg.eval_batches = 2;
    let program = Program::new(&cfg);
    let corpus = || Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut one = Trainer::new(
        Box::new(GpuBackend::new(context(), program.clone()).unwrap()),
        corpus(),
        5,
    )
    .unwrap();
    let want: Vec<_> = (0..cfg.steps).map(|_| one.train_step().unwrap()).collect();

    let mut app = Trainer::new(
        Box::new(GpuBackend::new(context(), program.clone()).unwrap()),
        corpus(),
        5,
    )
    .unwrap();
    let mut in_flight = std::collections::VecDeque::new();
    let mut got = Vec::new();
    while got.len() < cfg.steps as usize {
        while in_flight.len() < 2 {
            match app.submit_gpu_steps(3) {
                Some(f) => in_flight.push_back(f),
                None => break,
            }
        }
        let f = in_flight
            .pop_front()
            .expect("steps remain, so a submit is in flight");
        match app.finish_gpu_steps(f) {
            Ok(done) => {
                assert!(done.diverged.is_none());
                got.extend(done.metrics);
            }
            Err(f) => in_flight.push_front(f),
        }
    }
    assert!(
        app.submit_gpu_steps(3).is_none(),
        "the run stops at its step count"
    );
    let key = |m: &tinygpt::train::StepMetrics| (m.step, m.loss, m.val_loss, m.grad_norm, m.lr);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(
        got.iter().filter(|m| m.val_loss.is_some()).count(),
        3,
        "steps 4, 8 and the last"
    );
    for p in program.params() {
        let name = &program.tensors[p].name;
        assert_eq!(
            app.backend.read(name).unwrap(),
            one.backend.read(name).unwrap(),
            "{name}"
        );
    }
    // Several tensors in one readback arrive in the order named.
    let names = ["transformer.wpe.weight", "transformer.ln_f.bias"];
    let gpu = app.backend.as_gpu().unwrap();
    let mut handle = gpu.request_reads(&names).unwrap();
    let values = loop {
        gpu.poll();
        match gpu.try_take(handle) {
            Ok(v) => break v,
            Err(h) => handle = h,
        }
    };
    let wpe = one.backend.read(names[0]).unwrap();
    let ln = one.backend.read(names[1]).unwrap();
    assert_eq!(values, [wpe, ln].concat());
}

#[test]
fn timed_steps_are_the_same_run_with_a_gpu_time_per_step() {
    // What the page's bench submits: training steps with timestamps around
    // each pass (GpuBackend::time_steps). The timestamps change nothing of
    // the run, and each collected step comes back with its GPU time.
    let mut cfg = Config::load("tiny").unwrap();
    cfg.steps = 8;
    cfg.eval_interval = 0;
    let program = Program::new(&cfg);
    let corpus = || Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut plain = Trainer::new(
        Box::new(GpuBackend::new(context(), program.clone()).unwrap()),
        corpus(),
        5,
    )
    .unwrap();
    let want: Vec<_> = (0..cfg.steps).map(|_| plain.train_step().unwrap()).collect();
    let mut gpu = GpuBackend::new(context(), program.clone()).unwrap();
    let has_timestamps = context()
        .device
        .features()
        .contains(wgpu::Features::TIMESTAMP_QUERY);
    assert_eq!(gpu.time_steps(true), has_timestamps);
    let mut timed = Trainer::new(Box::new(gpu), corpus(), 5).unwrap();
    // No time-lapse: its frames would end the submits early.
    timed.timelapse = None;
    let (mut got, mut gpu_ms) = (Vec::new(), Vec::new());
    let collect = |timed: &mut Trainer, n| {
        let mut flight = timed.submit_gpu_steps(n).expect("steps remain");
        loop {
            match timed.finish_gpu_steps(flight) {
                Ok(done) => return done,
                Err(f) => flight = f,
            }
        }
    };
    while got.len() < 6 {
        let done = collect(&mut timed, 3);
        assert!(done.diverged.is_none());
        if has_timestamps {
            assert_eq!(done.gpu_ms.len(), done.metrics.len(), "a time per step");
        }
        got.extend(done.metrics);
        gpu_ms.extend(done.gpu_ms);
    }
    for ms in &gpu_ms {
        assert!(ms.is_finite() && *ms > 0.0, "GPU times {gpu_ms:?}");
    }
    // Off again: the last two steps come back without times.
    timed.backend.as_gpu().unwrap().time_steps(false);
    let done = collect(&mut timed, 2);
    assert!(done.gpu_ms.is_empty(), "untimed steps have no GPU times");
    got.extend(done.metrics);
    let key = |m: &tinygpt::train::StepMetrics| (m.step, m.loss, m.grad_norm);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
}

#[test]
fn kernels_compile_when_warmed_one_at_a_time_and_backends_share_them() {
    // The page compiles a backend's pipelines one a frame (a browser's GPU
    // process draws nothing while it compiles): building a backend compiles
    // none, each warm compiles one, a second backend of the same model
    // shares them, and once warm a training step needs no other kernel. A
    // device of its own: the shared one's kernels are the other tests'.
    let ctx = GpuContext::new_blocking().expect("the GPU tests need an adapter");
    let mut cfg = Config::load("tiny").unwrap();
    cfg.eval_interval = 0;
    let program = Program::new(&cfg);
    let first = GpuBackend::new(ctx.clone(), program.clone()).unwrap();
    let kernels = ctx.kernels(cfg.head_dim(), cfg.lab);
    let (compiled, entries) = kernels.compiled();
    assert_eq!(compiled, 0, "building a backend compiled {compiled} pipelines");
    let mut warmed = 0;
    while first.warm_next_kernel() {
        warmed += 1;
        assert_eq!(kernels.compiled().0, warmed, "one pipeline per warm");
    }
    assert!(
        warmed > 0 && warmed < entries,
        "warmed {warmed} of {entries}: the step's kernels, not every one"
    );
    let second = GpuBackend::new(ctx.clone(), program).unwrap();
    assert!(!second.warm_next_kernel(), "the second backend found its kernels compiled");
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let mut trainer = Trainer::new(Box::new(second), corpus, 5).unwrap();
    let metrics = trainer.train_step().unwrap();
    assert!(metrics.loss.is_finite());
    assert_eq!(kernels.compiled().0, warmed, "the step ran a kernel the warming left out");
}

/// The tensor cores (issue 51's first step): where the adapter has
/// cooperative matrices with f16 (the H100 host), the coop-f16 matmul
/// computes A·B within f32 accumulation's bound (2·K·2⁻²⁴·Σ|aᵢ·bᵢ| at 256
/// sampled cells, against f64); where it has not (lavapipe in CI, any
/// browser), the context says why, naming the adapter, and the bench
/// refuses with that reason. A shape off the kernel's blocks is refused
/// either way.
#[test]
fn the_tensor_cores_compute_the_product_or_say_why_not() {
    let ctx = GpuContext::with_tensor_cores_blocking().expect("the GPU tests need an adapter");
    let off_blocks = tinygpt::gpu::coop::shape_fits([100, 64, 128]).unwrap_err();
    assert!(off_blocks.contains("multiple of 64"), "{off_blocks}");
    // A device opened as the backends open theirs has none.
    assert!(GpuContext::new_blocking().unwrap().tensor_cores.is_err());
    match &ctx.tensor_cores {
        Ok(()) => {
            let t = tinygpt::bench::coop_matmul_timing(&ctx, [128, 64, 256], 1).unwrap();
            assert!(t.error_over_bound <= 1.0, "{t:?}");
            assert!(t.tflops > 0.0, "{t:?}");
            assert_eq!(tinygpt::bench::coop_matmul_timing(&ctx, [100, 64, 128], 1).unwrap_err(), off_blocks);
        }
        Err(why) => {
            assert!(why.contains(&ctx.info.name), "{why}");
            let refused = tinygpt::bench::coop_matmul_timing(&ctx, [128, 64, 256], 1).unwrap_err();
            assert_eq!(&refused, why);
        }
    }
}

/// The L2-relative error a product on the tensor cores may have against
/// the CPU's f32: each operand is rounded once to f16 (relative error at
/// most u = 2⁻¹¹), so each term aᵢ·bᵢ is off by at most (2u + u²)·|aᵢ·bᵢ|;
/// those errors have random signs, so over a row they add up to about
/// u·√2·‖row‖, well inside 2u = 2⁻¹⁰ in L2 (f32 accumulation's K·2⁻²⁴ is
/// far smaller at these K). Random N(0, 1) inputs on the H100 host give
/// 3-4·10⁻⁴.
const MIXED_MATMUL_BOUND: f64 = 1.0 / 1024.0;

/// The bound of attention on the tensor cores (attention_coop.wgsl), L2
/// relative, forward and backward: q, k and v are rounded to f16 (relative
/// error u = 2⁻¹¹ at most each), so a score q·k·scale, of size 1 on these
/// N(0, 1) inputs, is off by about u·√2 and P = exp(S − lse) relatively
/// by as much; O = P·V adds P's and V's rounding, the backward dS's and
/// dO's (dS = P ∘ (dP − delta) rounded to f16 before dK = dSᵀ·Q, dQ = dS·K).
/// Four such errors of random sign add to about 2u·√2 ≈ 2⁻⁹·0.7: the
/// bound is 2⁻⁹. (An error in the kernel's indexing or masking is of the
/// size of the values themselves.)
const MIXED_ATTENTION_BOUND: f64 = 1.0 / 512.0;

/// The context with every matmul on the tensor cores (`--precision mixed`),
/// or None where the adapter has none: then it must say why, naming the
/// adapter, and stay f32 (lavapipe in CI; the H100 host runs the rest).
fn mixed_context() -> Option<GpuContext> {
    let mut ctx = GpuContext::with_tensor_cores_blocking().expect("the GPU tests need an adapter");
    match ctx.use_tensor_cores() {
        Ok(()) => {
            assert!(ctx.mixed_precision());
            // Every product on the tensor cores, the small ones of these
            // tests too (a run keeps f32's kernel where they do not pay).
            ctx.matmul = MatmulChoice::CoopEverywhere;
            Some(ctx)
        }
        Err(why) => {
            assert_eq!(Err(why.clone()), ctx.tensor_cores);
            assert!(why.contains(&ctx.info.name), "{why}");
            assert!(!ctx.mixed_precision());
            None
        }
    }
}

#[test]
fn mixed_precision_matches_the_cpu_at_ragged_shapes_with_split_k() {
    let Some(_) = mixed_context() else { return };
    // One ragged block of C = 20; several blocks each way (C = 132,
    // 4C = 528, B·T = 145: K = 132 not a multiple of 32); split-K for
    // the weight gradients (K = B·T = 604); C = 18, whose products the
    // element build stages (not multiples of 4); and LoRA's low-rank products.
    assert!(tinygpt::gpu::split_k(80, 604, 20).0 > 1);
    assert!(!tinygpt::gpu::coop::vec4_fits(tinygpt::gpu::matmul_tiles::Layout::Nt, [39, 18, 54]));
    for cfg in [
        config(1, 2, 20, 13, 3, 0.0),
        config(1, 2, 132, 29, 5, 0.0),
        config(1, 2, 20, 151, 4, 0.0),
        config(1, 2, 18, 13, 3, 0.0),
    ] {
        per_op_parity_on(mixed_context().unwrap(), &cfg);
    }
    per_op_parity_on(mixed_context().unwrap(), &with_lora(config(1, 2, 132, 29, 5, 0.0), 4));
}

/// Attention on the tensor cores (attention_coop.wgsl) against the CPU:
/// each head size it takes (16, 32, 64), T not a multiple of its blocks
/// (29, 70, 100: ragged last blocks of queries and keys, and T = 29 below
/// one block), dropout on and off, and without the causal mask.
#[test]
fn mixed_attention_matches_the_cpu_at_ragged_lengths() {
    let Some(ctx) = mixed_context() else { return };
    assert!(tinygpt::gpu::coop::attention_on_tensor_cores(ctx.matmul, 32));
    let mut unmasked = config(1, 2, 64, 45, 2, 0.1);
    unmasked.lab.causal_mask = false;
    for cfg in [
        config(1, 2, 64, 100, 3, 0.1),
        config(1, 1, 64, 29, 2, 0.0),
        config(1, 3, 48, 70, 2, 0.1),
        unmasked,
    ] {
        assert!(tinygpt::gpu::coop::attention_fits(cfg.head_dim()));
        per_op_parity_on(mixed_context().unwrap(), &cfg);
    }
}

/// 200 steps of `small` from one seed, mixed against f32 on the same GPU:
/// every step's loss within 2% of f32's, the last 20 steps' mean within
/// 0.01 (printed, for the notes).
#[test]
fn two_hundred_mixed_steps_track_f32() {
    let Some(mixed) = mixed_context() else { return };
    let mut cfg = Config::load("small").unwrap();
    cfg.eval_interval = 0;
    cfg.steps = 200;
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let run = |ctx: GpuContext| {
        let mut t = Trainer::new(Box::new(GpuBackend::new(ctx, Program::new(&cfg)).unwrap()), corpus.clone(), 42).unwrap();
        (0..200).map(|_| t.train_step().unwrap()).collect::<Vec<_>>()
    };
    let f32_run = run(context());
    let mixed_run = run(mixed);
    let mut worst = 0f32;
    for (a, b) in f32_run.iter().zip(&mixed_run) {
        assert!(!b.skipped, "step {}: skipped at the starting scale", b.step);
        let e = ((a.loss - b.loss) / a.loss).abs();
        worst = worst.max(e);
        assert!(e <= 0.02, "step {}: loss f32 {} mixed {}", a.step, a.loss, b.loss);
    }
    let tail = |r: &[tinygpt::train::StepMetrics]| r[180..].iter().map(|m| m.loss).sum::<f32>() / 20.0;
    let (a, b) = (tail(&f32_run), tail(&mixed_run));
    eprintln!("200 steps of small: last-20 mean loss f32 {a:.4}, mixed {b:.4}; worst step {:.3}%", worst * 100.0);
    assert!((a - b).abs() <= 0.01, "last 20 steps: f32 {a} mixed {b}");
}

/// The loss scaler: an overflow (a scale so large the scaled gradients
/// pass f16's 65504) skips the step, leaves the weights as they were, and
/// halves the scale; it is not a divergence; after the growth interval of
/// clean steps the scale doubles.
#[test]
fn an_overflow_skips_the_step_and_halves_the_loss_scale() {
    let cfg = Config::load("tiny").unwrap();
    let batch = random_batch(&cfg, 3);
    let sp = StepParams { lr: 1e-3, adam_t: 1, dropout_seed: 0 };
    let Some(ctx) = mixed_context() else {
        // f32: the scale is 1 and stays 1.
        let mut gpu = GpuBackend::new(context(), Program::new(&cfg)).unwrap();
        assert!(gpu.train_step(&batch, sp).applied);
        assert_eq!(gpu.loss_scaler(), [1.0, 0.0, 0.0, 0.0]);
        return;
    };
    let program = Program::new(&cfg);
    let mut gpu = GpuBackend::new(ctx, program.clone()).unwrap();
    let mut rng = Rng::new(9);
    for t in program.tensors.iter().filter(|t| t.kind == TensorKind::Param) {
        let v: Vec<f32> = (0..t.numel()).map(|_| (rng.normal() * 0.1) as f32).collect();
        gpu.write(&t.name, &v).unwrap();
    }
    assert_eq!(gpu.loss_scaler(), [tinygpt::gpu::LOSS_SCALE_INIT, 0.0, 0.0, 0.0]);
    let before = gpu.read("transformer.wte.weight").unwrap();
    let huge = 2f32.powi(100);
    gpu.set_loss_scaler([huge, 5.0, 0.0, 0.0]);
    let out = gpu.train_step(&batch, sp);
    assert!(out.skipped && !out.applied && out.loss.is_finite(), "{out:?}");
    assert_eq!(gpu.loss_scaler(), [huge / 2.0, 0.0, 1.0, 1.0]);
    assert_eq!(gpu.read("transformer.wte.weight").unwrap(), before, "a skipped step changed the weights");
    // A clean step at the starting scale, one short of the interval: doubles.
    let start = tinygpt::gpu::LOSS_SCALE_INIT;
    let interval = tinygpt::gpu::LOSS_SCALE_GROWTH_INTERVAL as f32;
    gpu.set_loss_scaler([start, interval - 1.0, 1.0, 1.0]);
    let out = gpu.train_step(&batch, sp);
    assert!(out.applied && !out.skipped, "{out:?}");
    assert_eq!(gpu.loss_scaler(), [start * 2.0, 0.0, 1.0, 0.0]);
    assert_ne!(gpu.read("transformer.wte.weight").unwrap(), before);
}

/// The GPU's whole step (which clears only the gradients no backward op
/// writes outright) is its entries run one by one with every gradient
/// cleared, bit for bit, on one device; with dropout and with LoRA.
#[test]
fn a_whole_step_on_the_gpu_is_its_entries_run_one_by_one() {
    let mut cfg = Config::load("tiny").unwrap();
    cfg.dropout = 0.1;
    for cfg in [cfg.clone(), with_lora(cfg, 2)] {
        let program = Program::new(&cfg);
        let mut whole = GpuBackend::new(context(), program.clone()).unwrap();
        let mut entries = GpuBackend::new(context(), program).unwrap();
        common::whole_step_is_the_step_through(&mut whole, &mut entries);
    }
}
