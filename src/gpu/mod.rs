//! The GPU backend: executes the [`Program`] with the WGSL kernels of
//! `shaders/` on any wgpu device — its own, or Bevy's in the app.
//!
//! At creation it checks the adapter's limits, allocates every tensor once
//! (parameters, their gradients and AdamW moments in four flat buffers,
//! decayed tensors first; activations in their own buffers), and records the
//! step as a list of dispatches per program step, each with its bind group.
//! A training step then writes the batch and one small uniform block, records
//! every dispatch into one command encoder, submits once, and reads back 8
//! bytes (loss and gradient norm). No buffer is created after construction
//! (`buffers_created` counts them; a test checks).

pub mod context;
pub mod generate;
pub mod kernels;
pub mod readback;

use crate::backend::{Backend, BackendError, StepOutcome, StepParams};
use crate::data::Batch;
use crate::model::config::VOCAB;
use crate::program::{Op, Program, Step, TensorId, TensorKind};
pub use context::{GpuContext, GpuError};
use kernels::{Kernels, Slot};
use std::sync::{Arc, Mutex};

/// Where a tensor lives: a byte range of one of our buffers.
#[derive(Clone, Copy, Debug)]
struct Place {
    buffer: usize,
    offset: u64,
    size: u64,
}

/// What a binding slot is bound to while planning.
#[derive(Clone, Copy, Debug)]
enum Src {
    At(Place),
    DummyRo,
    DummyRw,
    /// This dispatch's own uniform block.
    Params,
    Step,
}

struct Planned {
    entry: &'static str,
    bindings: Vec<Src>,
    params: Vec<u8>,
    groups: [u32; 3],
}

struct Dispatch {
    entry: &'static str,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
}

/// Byte size of the per-step uniform block (see `StepUniform` in common.wgsl).
const STEP_UNIFORM_BYTES: u64 = 48;
/// Elements per workgroup of `sum_squares_partial`.
const NORM_CHUNK: usize = 4096;
/// Rows per partial column sum (`ROWS_PER_CHUNK` in layernorm.wgsl).
const ROWS_PER_CHUNK: usize = 16;

/// Split-K plan for an M×K×N matmul: (splits, K per split). Few output tiles
/// with a long K (the weight gradients: M, N = layer widths, K = B·T; and
/// dinp at small widths) leave most of the GPU idle, so K is cut into pieces
/// of at least 64 until there are about 256 workgroups.
pub fn split_k(m: usize, k: usize, n: usize) -> (usize, usize) {
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    if tiles >= 128 || k < 256 {
        return (1, k);
    }
    let want = 256usize.div_ceil(tiles).min(k / 64).max(1);
    let k_split = k.div_ceil(want).next_multiple_of(16);
    (k.div_ceil(k_split), k_split)
}

fn words(values: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// Workgroups for a grid-stride kernel of 256 threads over `n` elements.
fn grid(n: usize) -> [u32; 3] {
    [n.div_ceil(256).clamp(1, 65535) as u32, 1, 1]
}

/// One workgroup per row, rows beyond 65535 folded into y.
fn per_row(rows: usize) -> [u32; 3] {
    [rows.min(65535).max(1) as u32, rows.div_ceil(65535).max(1) as u32, 1]
}

pub struct GpuBackend {
    ctx: GpuContext,
    program: Program,
    kernels: Kernels,
    buffers: Vec<wgpu::Buffer>,
    places: Vec<Option<Place>>,
    steps: Vec<(Step, Vec<Dispatch>)>,
    /// Gradient buffers, cleared by [`Step::ZeroGrads`].
    grad_buffers: Vec<usize>,
    step_uniform: wgpu::Buffer,
    stats: usize,
    stats_staging: wgpu::Buffer,
    staging: readback::StagingPool,
    tokens: usize,
    targets: usize,
    order: usize,
    offsets: usize,
    /// Flat index where weight decay stops.
    decay_end: u32,
    buffers_created: usize,
}

#[derive(Default)]
struct Allocator {
    buffers: Vec<wgpu::Buffer>,
    created: usize,
}

impl Allocator {
    fn storage(&mut self, device: &wgpu::Device, label: &str, bytes: u64) -> usize {
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&format!("tinygpt:buffer:{label}")),
            size: bytes.max(16).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.created += 1;
        self.buffers.push(buffer);
        self.buffers.len() - 1
    }

    fn other(&mut self, device: &wgpu::Device, label: &str, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.created += 1;
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&format!("tinygpt:buffer:{label}")),
            size: bytes.max(16).next_multiple_of(4),
            usage,
            mapped_at_creation: false,
        })
    }
}

impl GpuBackend {
    /// Builds the backend for `program` on `ctx`, or says which adapter limit
    /// the preset exceeds.
    pub fn new(ctx: GpuContext, program: Program) -> Result<Self, GpuError> {
        let cfg = program.config.clone();
        let limits = ctx.limits.clone();
        let preset = format!("{}L/{}H/d{}/ctx{}/batch{}", cfg.n_layer, cfg.n_head, cfg.d_model, cfg.ctx, cfg.batch);
        let refuse = |what: String, limit: &'static str, need: u64, have: u64| GpuError::Limit {
            preset: preset.clone(),
            adapter: ctx.info.name.clone(),
            what,
            limit,
            need,
            have,
        };

        // --- limits, before any allocation
        let align_floats = (limits.min_storage_buffer_offset_alignment.max(256) / 4) as usize;
        let largest = program.tensors.iter().map(|t| t.numel() as u64 * 4).max().unwrap_or(0);
        if largest > limits.max_storage_buffer_binding_size {
            let name = program.tensors.iter().max_by_key(|t| t.numel()).unwrap().name.clone();
            return Err(refuse(format!("tensor `{name}`"), "max_storage_buffer_binding_size", largest, limits.max_storage_buffer_binding_size));
        }
        let attn_bytes = kernels::attention_workgroup_bytes(cfg.head_dim());
        if attn_bytes > limits.max_compute_workgroup_storage_size as u64 {
            return Err(refuse(
                format!("attention with head_dim {}", cfg.head_dim()),
                "max_compute_workgroup_storage_size",
                attn_bytes,
                limits.max_compute_workgroup_storage_size as u64,
            ));
        }
        if limits.max_compute_invocations_per_workgroup < 256 || limits.max_compute_workgroup_size_x < 256 {
            return Err(refuse("256-thread workgroups".into(), "max_compute_invocations_per_workgroup", 256, limits.max_compute_invocations_per_workgroup as u64));
        }
        if limits.max_storage_buffers_per_shader_stage < 8 {
            return Err(refuse("8 storage buffers per kernel".into(), "max_storage_buffers_per_shader_stage", 8, limits.max_storage_buffers_per_shader_stage as u64));
        }

        // --- flat parameter layout: decayed tensors first
        let params: Vec<TensorId> = program.params().collect();
        let mut order: Vec<TensorId> = params.iter().copied().filter(|&p| program.decays(p)).collect();
        let decayed = order.len();
        order.extend(params.iter().copied().filter(|&p| !program.decays(p)));
        let mut flat_offsets = vec![0usize; program.tensors.len()];
        let mut flat_len = 0usize;
        let mut decay_end = 0usize;
        for (i, &p) in order.iter().enumerate() {
            flat_len = flat_len.next_multiple_of(align_floats);
            flat_offsets[p] = flat_len;
            flat_len += program.tensors[p].numel();
            if i + 1 == decayed {
                decay_end = flat_len;
            }
        }
        let flat_len = flat_len.next_multiple_of(align_floats);
        if flat_len as u64 * 4 > limits.max_buffer_size {
            return Err(refuse("the flat parameter buffer".into(), "max_buffer_size", flat_len as u64 * 4, limits.max_buffer_size));
        }
        for t in &program.tensors {
            if t.numel() as u64 * 4 > limits.max_buffer_size {
                return Err(refuse(format!("tensor `{}`", t.name), "max_buffer_size", t.numel() as u64 * 4, limits.max_buffer_size));
            }
        }

        let device = ctx.device.clone();
        let kernels = Kernels::new(&device, cfg.head_dim());
        let mut alloc = Allocator::default();
        let flat_bytes = flat_len as u64 * 4;
        let flat_params = alloc.storage(&device, "params", flat_bytes);
        let flat_grads = alloc.storage(&device, "grads", flat_bytes);
        let flat_m = alloc.storage(&device, "adam.m", flat_bytes);
        let flat_v = alloc.storage(&device, "adam.v", flat_bytes);

        let mut places: Vec<Option<Place>> = vec![None; program.tensors.len()];
        let mut grad_buffers = vec![flat_grads];
        for &p in &params {
            let info = &program.tensors[p];
            let at = |buffer| Place { buffer, offset: flat_offsets[p] as u64 * 4, size: info.numel() as u64 * 4 };
            places[p] = Some(at(flat_params));
            places[info.grad.unwrap()] = Some(at(flat_grads));
            let (m, v) = info.adam.unwrap();
            places[m] = Some(at(flat_m));
            places[v] = Some(at(flat_v));
        }
        for (id, t) in program.tensors.iter().enumerate() {
            if places[id].is_some() {
                continue;
            }
            let buffer = alloc.storage(&device, &t.name, t.numel() as u64 * 4);
            if t.kind == TensorKind::Grad {
                grad_buffers.push(buffer);
            }
            places[id] = Some(Place { buffer, offset: 0, size: t.numel() as u64 * 4 });
        }
        let rows = program.rows();
        let tokens = places[program.tokens].unwrap().buffer;
        let targets = places[program.targets].unwrap().buffer;
        let order_buf = alloc.storage(&device, "tokens.order", rows as u64 * 4);
        let offsets_buf = alloc.storage(&device, "tokens.offsets", (VOCAB as u64 + 1) * 4);
        let stats = alloc.storage(&device, "stats", 16);
        let widest = program
            .ops
            .iter()
            .map(|n| match n.op {
                Op::Linear { out_features, .. } => out_features,
                Op::LayerNorm { .. } => 2 * cfg.d_model,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        let part = alloc.storage(&device, "scratch.column_partials", (rows.div_ceil(ROWS_PER_CHUNK) * widest) as u64 * 4);
        let delta = alloc.storage(&device, "scratch.attention_delta", (cfg.batch * cfg.n_head * cfg.ctx) as u64 * 4);
        // Split-K partials: the largest splits × M × N of any matmul of the step.
        let split_floats = program
            .ops
            .iter()
            .flat_map(|node| {
                let shapes: Vec<(usize, usize, usize)> = match node.op {
                    Op::Linear { in_features: i, out_features: o, .. } => vec![(rows, i, o), (rows, o, i), (o, rows, i)],
                    Op::TiedHead { .. } => vec![(rows, cfg.d_model, VOCAB), (rows, VOCAB, cfg.d_model), (VOCAB, rows, cfg.d_model)],
                    _ => vec![],
                };
                shapes.into_iter().map(|(m, k, n)| {
                    let (splits, _) = split_k(m, k, n);
                    if splits > 1 { splits * m * n } else { 0 }
                })
            })
            .max()
            .unwrap_or(0);
        let split_scratch = alloc.storage(&device, "scratch.split_k", split_floats as u64 * 4);
        let dummy_ro = alloc.storage(&device, "dummy.read", 16);
        let dummy_rw = alloc.storage(&device, "dummy.write", 16);

        // Flat chunks that fit one storage binding (AdamW and the norm).
        let max_chunk = ((limits.max_storage_buffer_binding_size / 4) as usize / align_floats * align_floats).min(65535 * NORM_CHUNK);
        let chunks: Vec<(usize, usize)> =
            (0..flat_len).step_by(max_chunk).map(|s| (s, max_chunk.min(flat_len - s))).collect();
        let norm_groups: usize = chunks.iter().map(|(_, n)| n.div_ceil(NORM_CHUNK)).sum();
        let partials = alloc.storage(&device, "scratch.norm_partials", norm_groups as u64 * 4);

        // --- plan every dispatch
        let p = |id: TensorId| Src::At(places[id].unwrap());
        let g = |id: TensorId| Src::At(places[program.tensors[id].grad.unwrap()].unwrap());
        let whole = |buffer: usize, bytes: u64| Src::At(Place { buffer, offset: 0, size: bytes });
        let (b, t, c, v) = (cfg.batch, cfg.ctx, cfg.d_model, VOCAB);
        let mm = |entry: &'static str, a: Src, bm: Src, out: Src, bias: Option<Src>, m: usize, k: usize, n: usize, acc: bool| {
            let flags = if acc { 1 } else { 0 } | if bias.is_some() { 2 } else { 0 };
            let (splits, k_split) = split_k(m, k, n);
            let params = [words(&[m as u32, k as u32, n as u32, flags]), words(&[1f32.to_bits(), k_split as u32, splits as u32, 0])].concat();
            let tiles = [n.div_ceil(64) as u32, m.div_ceil(64) as u32, splits as u32];
            if splits == 1 {
                return vec![Planned { entry, bindings: vec![a, bm, out, bias.unwrap_or(Src::DummyRo), Src::Params], params, groups: tiles }];
            }
            let scratch = whole(split_scratch, 0);
            vec![
                Planned { entry, bindings: vec![a, bm, scratch, Src::DummyRo, Src::Params], params: params.clone(), groups: tiles },
                Planned {
                    entry: "matmul_split_reduce",
                    bindings: vec![scratch, Src::DummyRo, out, bias.unwrap_or(Src::DummyRo), Src::Params],
                    params,
                    groups: grid(m * n),
                },
            ]
        };
        let ew = |entry: &'static str, dst: Src, x: Src, y: Src, n: usize, stream: u32, prob: f32| Planned {
            entry,
            bindings: vec![dst, x, y, Src::Params, Src::Step],
            params: words(&[n as u32, stream, prob.to_bits(), 0]),
            groups: grid(n),
        };
        let chunks_n = rows.div_ceil(ROWS_PER_CHUNK);
        let ln_params = |rows: usize, width: usize, stride: usize, offset: usize| {
            words(&[rows as u32, width as u32, chunks_n as u32, stride as u32, offset as u32, 0, 0, 0])
        };
        let column_sum = |dst: Src, width: usize, stride: usize, offset: usize| Planned {
            entry: "column_sums_final",
            bindings: vec![Src::DummyRo, Src::DummyRo, dst, Src::DummyRw, Src::DummyRw, Src::DummyRo, whole(part, 0), Src::Params],
            params: ln_params(rows, width, stride, offset),
            groups: [width.div_ceil(64) as u32, 1, 1],
        };
        let bias_grad = |dout: Src, dbias: Src, width: usize| {
            vec![
                Planned {
                    entry: "bias_grad_part",
                    bindings: vec![Src::DummyRo, Src::DummyRo, Src::DummyRw, Src::DummyRw, Src::DummyRw, dout, whole(part, 0), Src::Params],
                    params: ln_params(rows, width, width, 0),
                    groups: [chunks_n as u32, 1, 1],
                },
                column_sum(dbias, width, width, 0),
            ]
        };
        let emb_params = words(&[rows as u32, t as u32, c as u32, v as u32]);
        let ce_params = words(&[rows as u32, v as u32, 0, 0]);

        let mut planned_steps: Vec<(Step, Vec<Planned>)> = Vec::new();
        for step in &program.steps {
            let plans: Vec<Planned> = match *step {
                Step::ZeroGrads => vec![],
                Step::Forward(i) => match program.ops[i].op {
                    Op::Embedding { tokens: tk, wte, wpe, out } => vec![Planned {
                        entry: "embedding_forward",
                        bindings: vec![p(tk), p(wte), p(wpe), p(out), whole(order_buf, 0), whole(offsets_buf, 0), Src::Params],
                        params: emb_params.clone(),
                        groups: grid(rows * c),
                    }],
                    Op::LayerNorm { inp, weight, bias, out, mean, rstd } => {
                        let width = program.tensors[inp].shape.last().copied().unwrap();
                        vec![Planned {
                            entry: "layernorm_forward",
                            bindings: vec![p(inp), p(weight), p(out), p(mean), p(rstd), p(bias), Src::DummyRw, Src::Params],
                            params: ln_params(rows, width, 0, 0),
                            groups: per_row(rows),
                        }]
                    }
                    Op::Linear { inp, weight, bias, out, in_features, out_features } => {
                        mm("matmul_nt", p(inp), p(weight), p(out), Some(p(bias)), rows, in_features, out_features, false)
                    }
                    Op::Attention { qkv, out, lse, n_head, dropout, stream } => vec![Planned {
                        entry: "attention_forward",
                        bindings: vec![p(qkv), p(out), p(lse), Src::DummyRo, Src::DummyRw, Src::DummyRw, Src::Params, Src::Step],
                        params: attn_params(&cfg, n_head, stream, dropout),
                        groups: [t.div_ceil(16) as u32, (b * n_head) as u32, 1],
                    }],
                    Op::Gelu { inp, out } => vec![ew("gelu_forward", p(out), p(inp), Src::DummyRw, program.tensors[out].numel(), 0, 0.0)],
                    Op::Residual { a, b: bb, out } => vec![ew("residual_forward", p(out), p(a), p(bb), program.tensors[out].numel(), 0, 0.0)],
                    Op::Dropout { inp, out, p: prob, stream } => {
                        vec![ew("dropout_forward", p(out), p(inp), Src::DummyRw, program.tensors[out].numel(), stream, prob)]
                    }
                    Op::TiedHead { inp, wte, out } => mm("matmul_nt", p(inp), p(wte), p(out), None, rows, c, v, false),
                    Op::CrossEntropy { logits, targets: tg, losses } => vec![
                        Planned {
                            entry: "cross_entropy_forward",
                            bindings: vec![p(logits), p(tg), p(losses), Src::DummyRw, whole(stats, 16), Src::Params],
                            params: ce_params.clone(),
                            groups: per_row(rows),
                        },
                        Planned {
                            entry: "loss_mean",
                            bindings: vec![Src::DummyRo, Src::DummyRo, p(losses), Src::DummyRw, whole(stats, 16), Src::Params],
                            params: ce_params.clone(),
                            groups: [1, 1, 1],
                        },
                    ],
                },
                Step::Backward(i) => match program.ops[i].op {
                    Op::Embedding { tokens: tk, wte, wpe, out } => {
                        let binds = vec![p(tk), g(wte), g(wpe), g(out), whole(order_buf, 0), whole(offsets_buf, 0), Src::Params];
                        vec![
                            Planned { entry: "embedding_backward_wpe", bindings: binds.clone(), params: emb_params.clone(), groups: grid(t * c) },
                            Planned { entry: "embedding_backward_wte", bindings: binds, params: emb_params.clone(), groups: grid(v * c) },
                        ]
                    }
                    Op::LayerNorm { inp, weight, bias, out, mean, rstd } => {
                        let width = program.tensors[inp].shape.last().copied().unwrap();
                        vec![
                            Planned {
                                entry: "layernorm_backward_dx",
                                bindings: vec![p(inp), p(weight), g(inp), p(mean), p(rstd), g(out), Src::DummyRw, Src::Params],
                                params: ln_params(rows, width, 0, 0),
                                groups: per_row(rows),
                            },
                            Planned {
                                entry: "layernorm_backward_part",
                                bindings: vec![p(inp), p(weight), Src::DummyRw, p(mean), p(rstd), g(out), whole(part, 0), Src::Params],
                                params: ln_params(rows, width, 0, 0),
                                groups: [chunks_n as u32, 1, 1],
                            },
                            Planned {
                                entry: "layernorm_params_final",
                                // dweight in the `out` slot, dbias in the `mean` slot
                                bindings: vec![Src::DummyRo, Src::DummyRo, g(weight), g(bias), Src::DummyRw, Src::DummyRo, whole(part, 0), Src::Params],
                                params: ln_params(rows, width, 2 * width, 0),
                                groups: [width.div_ceil(64) as u32, 1, 1],
                            },
                        ]
                    }
                    Op::Linear { inp, weight, bias, out, in_features, out_features } => {
                        let mut v = mm("matmul_nn", g(out), p(weight), g(inp), None, rows, out_features, in_features, true);
                        v.extend(mm("matmul_tn", g(out), p(inp), g(weight), None, out_features, rows, in_features, true));
                        v.extend(bias_grad(g(out), g(bias), out_features));
                        v
                    }
                    Op::Attention { qkv, out, lse, n_head, dropout, stream } => {
                        let binds = vec![p(qkv), p(out), p(lse), g(out), g(qkv), whole(delta, 0), Src::Params, Src::Step];
                        let params = attn_params(&cfg, n_head, stream, dropout);
                        let tiles = [t.div_ceil(16) as u32, (b * n_head) as u32, 1];
                        vec![
                            Planned { entry: "attention_backward_delta", bindings: binds.clone(), params: params.clone(), groups: grid(b * n_head * t) },
                            Planned { entry: "attention_backward_dkdv", bindings: binds.clone(), params: params.clone(), groups: tiles },
                            Planned { entry: "attention_backward_dq", bindings: binds, params, groups: tiles },
                        ]
                    }
                    Op::Gelu { inp, out } => vec![ew("gelu_backward", g(inp), g(out), p(inp), program.tensors[out].numel(), 0, 0.0)],
                    Op::Residual { a, b: bb, out } => {
                        // One dispatch adds dout to both inputs' gradients (the
                        // second rides in the `y` slot, read-write in accumulate2).
                        vec![ew("accumulate2", g(a), g(out), g(bb), program.tensors[out].numel(), 0, 0.0)]
                    }
                    Op::Dropout { inp, out, p: prob, stream } => {
                        vec![ew("dropout_backward", g(inp), g(out), Src::DummyRw, program.tensors[out].numel(), stream, prob)]
                    }
                    Op::TiedHead { inp, wte, out } => {
                        let mut d = mm("matmul_nn", g(out), p(wte), g(inp), None, rows, v, c, true);
                        d.extend(mm("matmul_tn", g(out), p(inp), g(wte), None, v, rows, c, true));
                        d
                    }
                    Op::CrossEntropy { logits, targets: tg, losses } => vec![Planned {
                        entry: "cross_entropy_backward",
                        bindings: vec![p(logits), p(tg), p(losses), g(logits), whole(stats, 16), Src::Params],
                        params: ce_params.clone(),
                        groups: per_row(rows),
                    }],
                },
                Step::ClipGradNorm => {
                    let mut v = Vec::new();
                    let mut first = 0usize;
                    for &(start, len) in &chunks {
                        let groups = len.div_ceil(NORM_CHUNK);
                        v.push(opt_plan("sum_squares_partial", &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, start, len), whole(stats, 16), whole(partials, 0), [len as u32, start as u32, first as u32, 0], [groups.min(65535) as u32, groups.div_ceil(65535) as u32, 1]));
                        first += groups;
                    }
                    let (s0, l0) = chunks[0];
                    v.push(opt_plan("grad_norm_final", &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, s0, l0), whole(stats, 16), whole(partials, 0), [0, 0, first as u32, 0], [1, 1, 1]));
                    v
                }
                Step::AdamW => chunks
                    .iter()
                    .map(|&(start, len)| opt_plan("adamw_update", &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, start, len), whole(stats, 16), whole(partials, 0), [len as u32, start as u32, 0, 0], grid(len)))
                    .collect(),
            };
            planned_steps.push((*step, plans));
        }

        // --- one uniform buffer for every dispatch's parameters
        let ualign = limits.min_uniform_buffer_offset_alignment.max(16) as usize;
        let mut uniform_bytes = Vec::new();
        let mut uniform_offsets = Vec::new();
        for (_, plans) in &planned_steps {
            for plan in plans {
                uniform_offsets.push(uniform_bytes.len());
                uniform_bytes.extend_from_slice(&plan.params);
                uniform_bytes.resize(uniform_bytes.len().next_multiple_of(ualign), 0);
            }
        }
        let uniforms = alloc.other(&device, "uniforms", uniform_bytes.len() as u64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        ctx.queue.write_buffer(&uniforms, 0, &uniform_bytes);
        let step_uniform = alloc.other(&device, "step", STEP_UNIFORM_BYTES, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        let stats_staging = alloc.other(&device, "stats.staging", 16, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);

        let buffers = alloc.buffers;
        let mut next_uniform = uniform_offsets.into_iter();
        let steps = planned_steps
            .into_iter()
            .map(|(step, plans)| {
                let dispatches = plans
                    .into_iter()
                    .map(|plan| {
                        let uoff = next_uniform.next().unwrap() as u64;
                        let slots = kernels.slots_of(plan.entry);
                        assert_eq!(slots.len(), plan.bindings.len(), "{}: binding count", plan.entry);
                        let entries: Vec<wgpu::BindGroupEntry> = plan
                            .bindings
                            .iter()
                            .zip(slots)
                            .enumerate()
                            .map(|(i, (src, slot))| {
                                let binding = match *src {
                                    Src::At(place) => wgpu::BufferBinding {
                                        buffer: &buffers[place.buffer],
                                        offset: place.offset,
                                        size: if place.size == 0 { None } else { wgpu::BufferSize::new(place.size) },
                                    },
                                    Src::DummyRo => wgpu::BufferBinding { buffer: &buffers[dummy_ro], offset: 0, size: None },
                                    Src::DummyRw => wgpu::BufferBinding { buffer: &buffers[dummy_rw], offset: 0, size: None },
                                    Src::Params => wgpu::BufferBinding {
                                        buffer: &uniforms,
                                        offset: uoff,
                                        size: wgpu::BufferSize::new(plan.params.len() as u64),
                                    },
                                    Src::Step => wgpu::BufferBinding { buffer: &step_uniform, offset: 0, size: None },
                                };
                                debug_assert!(matches!(src, Src::Params | Src::Step) == (*slot == Slot::Uniform));
                                wgpu::BindGroupEntry { binding: i as u32, resource: wgpu::BindingResource::Buffer(binding) }
                            })
                            .collect();
                        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: Some(&format!("tinygpt:bind:{}", plan.entry)),
                            layout: kernels.layout_of(plan.entry),
                            entries: &entries,
                        });
                        Dispatch { entry: plan.entry, bind_group, groups: plan.groups }
                    })
                    .collect();
                (step, dispatches)
            })
            .collect();

        Ok(Self {
            ctx,
            program,
            kernels,
            buffers,
            places,
            steps,
            grad_buffers,
            step_uniform,
            stats,
            stats_staging,
            staging: readback::StagingPool::default(),
            tokens,
            targets,
            order: order_buf,
            offsets: offsets_buf,
            decay_end: decay_end as u32,
            buffers_created: alloc.created,
        })
    }

    /// Buffers this backend has created (all of them at construction).
    pub fn buffers_created(&self) -> usize {
        self.buffers_created
    }

    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// Kernel dispatches of one training step.
    pub fn dispatches_per_step(&self) -> usize {
        self.steps.iter().map(|(_, d)| d.len()).sum()
    }

    fn upload_batch(&self, batch: &Batch) {
        assert_eq!(batch.inputs.len(), self.program.rows(), "batch shape does not match the program");
        let q = &self.ctx.queue;
        q.write_buffer(&self.buffers[self.tokens], 0, bytemuck::cast_slice(&batch.inputs));
        q.write_buffer(&self.buffers[self.targets], 0, bytemuck::cast_slice(&batch.targets));
        // Rows grouped by token, in row order (a stable counting sort), for
        // the deterministic embedding backward.
        let mut offsets = vec![0u32; VOCAB + 1];
        for &tok in &batch.inputs {
            offsets[tok as usize + 1] += 1;
        }
        for i in 0..VOCAB {
            offsets[i + 1] += offsets[i];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; batch.inputs.len()];
        for (row, &tok) in batch.inputs.iter().enumerate() {
            order[next[tok as usize] as usize] = row as u32;
            next[tok as usize] += 1;
        }
        q.write_buffer(&self.buffers[self.order], 0, bytemuck::cast_slice(&order));
        q.write_buffer(&self.buffers[self.offsets], 0, bytemuck::cast_slice(&offsets));
    }

    fn write_step_uniform(&self, sp: Option<StepParams>) {
        let cfg = &self.program.config;
        let (lr, t, seed, training) = match sp {
            Some(s) => (s.lr, s.adam_t, s.dropout_seed, 1u32),
            None => (0.0, 1, 0, 0),
        };
        let bc1 = (1.0 - (cfg.beta1 as f64).powi(t as i32)) as f32;
        let bc2 = (1.0 - (cfg.beta2 as f64).powi(t as i32)) as f32;
        let f = [lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, bc1, bc2, cfg.grad_clip];
        let mut bytes: Vec<u8> = bytemuck::cast_slice(&f).to_vec();
        bytes.extend(words(&[seed, training, self.decay_end, self.program.rows() as u32]));
        self.ctx.queue.write_buffer(&self.step_uniform, 0, &bytes);
    }

    /// Records the given program steps into `encoder` (one compute pass).
    fn record(&self, encoder: &mut wgpu::CommandEncoder, which: impl Fn(&Step) -> bool) {
        if self.steps.iter().any(|(s, _)| *s == Step::ZeroGrads && which(s)) {
            for &buf in &self.grad_buffers {
                encoder.clear_buffer(&self.buffers[buf], 0, None);
            }
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("tinygpt:step"), timestamp_writes: None });
        for (_, dispatches) in self.steps.iter().filter(|(s, _)| which(s)) {
            for d in dispatches {
                pass.set_pipeline(&self.kernels.pipelines[d.entry].1);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
    }

    /// Submits `encoder` after copying the stats to the staging buffer, and
    /// blocks until [loss, grad_norm, clip_scale, sum_squares] arrive.
    fn submit_and_read_stats(&self, mut encoder: wgpu::CommandEncoder) -> [f32; 4] {
        encoder.copy_buffer_to_buffer(&self.buffers[self.stats], 0, &self.stats_staging, 0, 16);
        self.ctx.queue.submit([encoder.finish()]);
        let bytes = self.map_blocking(&self.stats_staging, 16);
        let v: &[f32] = bytemuck::cast_slice(&bytes);
        [v[0], v[1], v[2], v[3]]
    }

    /// Maps `buffer` for reading, waits, copies `size` bytes out, unmaps.
    fn map_blocking(&self, buffer: &wgpu::Buffer, size: u64) -> Vec<u8> {
        let slice = buffer.slice(0..size);
        let done: Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>> = Arc::default();
        let flag = done.clone();
        slice.map_async(wgpu::MapMode::Read, move |r| *flag.lock().unwrap() = Some(r));
        loop {
            let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
            if done.lock().unwrap().is_some() {
                break;
            }
        }
        let result = done.lock().unwrap().take().unwrap();
        result.expect("mapping a readback buffer failed");
        let out = slice.get_mapped_range().to_vec();
        buffer.unmap();
        out
    }

    /// Starts reading a tensor back without waiting: the data arrives once
    /// the GPU has finished and the device has been polled (Bevy polls every
    /// frame; elsewhere call [`GpuBackend::poll`]). Take it with
    /// [`GpuBackend::try_take`].
    pub fn request_read(&mut self, name: &str) -> Result<readback::ReadbackHandle, BackendError> {
        let (id, place) = self.place(name)?;
        let (slot, created) = self.staging.acquire(&self.ctx.device, place.size);
        self.buffers_created += created as usize;
        let staging = self.staging.buffer(slot);
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tinygpt:readback") });
        encoder.copy_buffer_to_buffer(&self.buffers[place.buffer], place.offset, staging, 0, place.size);
        self.ctx.queue.submit([encoder.finish()]);
        let state = readback::start_map(staging, place.size);
        let is_u32 = self.program.tensors[id].kind == TensorKind::Input;
        Ok(readback::ReadbackHandle { slot, size: place.size, is_u32, state })
    }

    /// The data of a readback if it has arrived, else the handle back.
    pub fn try_take(&mut self, handle: readback::ReadbackHandle) -> Result<Vec<f32>, readback::ReadbackHandle> {
        let taken = handle.state.lock().unwrap().take();
        let Some(result) = taken else { return Err(handle) };
        let buffer = self.staging.buffer(handle.slot);
        let values = match result {
            Ok(()) => {
                let bytes = buffer.slice(0..handle.size).get_mapped_range().to_vec();
                buffer.unmap();
                if handle.is_u32 {
                    bytemuck::cast_slice::<u8, u32>(&bytes).iter().map(|&x| x as f32).collect()
                } else {
                    bytemuck::cast_slice::<u8, f32>(&bytes).to_vec()
                }
            }
            // The device was lost; nothing was mapped.
            Err(_) => Vec::new(),
        };
        self.staging.release(handle.slot);
        Ok(values)
    }

    /// Lets the device make progress without waiting (a no-op in browsers,
    /// where the page's event loop does it).
    pub fn poll(&self) {
        let _ = self.ctx.device.poll(wgpu::PollType::Poll);
    }

    /// Reads a tensor back asynchronously: awaits the GPU without blocking the
    /// thread, polling the device between checks.
    pub async fn read_async(&mut self, name: &str) -> Result<Vec<f32>, BackendError> {
        let mut handle = self.request_read(name)?;
        loop {
            self.poll();
            match self.try_take(handle) {
                Ok(values) => return Ok(values),
                Err(h) => handle = h,
            }
            readback::YieldNow(false).await;
        }
    }

    fn place(&self, name: &str) -> Result<(TensorId, Place), BackendError> {
        let id = self.program.tensor_id(name).ok_or_else(|| BackendError::UnknownTensor(name.to_string()))?;
        Ok((id, self.places[id].expect("every tensor is placed")))
    }

    /// Uploads a batch's tokens and targets (and the token order the
    /// embedding backward uses).
    pub fn set_batch(&mut self, batch: &Batch) {
        self.upload_batch(batch);
    }

    /// Runs some steps of the program, in the order given, in one submit:
    /// the step-through view and the per-op parity tests use this. `sp` gives
    /// the step's learning rate and dropout seed (None: evaluation mode).
    pub fn run_steps(&mut self, steps: &[Step], sp: Option<StepParams>) {
        self.write_step_uniform(sp);
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        if steps.contains(&Step::ZeroGrads) {
            for &buf in &self.grad_buffers {
                encoder.clear_buffer(&self.buffers[buf], 0, None);
            }
        }
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("tinygpt:steps"), timestamp_writes: None });
            for step in steps {
                let (_, dispatches) = self.steps.iter().find(|(s, _)| s == step).expect("step belongs to the program");
                for d in dispatches {
                    pass.set_pipeline(&self.kernels.pipelines[d.entry].1);
                    pass.set_bind_group(0, &d.bind_group, &[]);
                    pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
                }
            }
        }
        self.ctx.queue.submit([encoder.finish()]);
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
    }

    /// Times every dispatch of one training step with GPU timestamps (each in
    /// a compute pass of its own, so the total exceeds a normal step's).
    /// Returns (program step label, kernel entry point, nanoseconds) in order,
    /// or None when the adapter has no timestamp queries.
    pub fn profile_step(&mut self, batch: &Batch, sp: StepParams) -> Option<Vec<(String, &'static str, f64)>> {
        if !self.ctx.device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return None;
        }
        self.upload_batch(batch);
        self.write_step_uniform(Some(sp));
        let n: usize = self.dispatches_per_step();
        let queries = self.ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("tinygpt:profile"),
            ty: wgpu::QueryType::Timestamp,
            count: (2 * n) as u32,
        });
        let resolve = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tinygpt:profile.resolve"),
            size: (16 * n) as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tinygpt:profile.staging"),
            size: (16 * n) as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        for &buf in &self.grad_buffers {
            encoder.clear_buffer(&self.buffers[buf], 0, None);
        }
        let mut labels = Vec::new();
        let mut q = 0u32;
        for (step, dispatches) in &self.steps {
            let label = match step {
                Step::Forward(i) => format!("fwd {}", self.program.ops[*i].op.kind_name()),
                Step::Backward(i) => format!("bwd {}", self.program.ops[*i].op.kind_name()),
                other => format!("{other:?}"),
            };
            for d in dispatches {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &queries,
                        beginning_of_pass_write_index: Some(q),
                        end_of_pass_write_index: Some(q + 1),
                    }),
                });
                pass.set_pipeline(&self.kernels.pipelines[d.entry].1);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
                drop(pass);
                labels.push((label.clone(), d.entry));
                q += 2;
            }
        }
        encoder.resolve_query_set(&queries, 0..q, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &staging, 0, (16 * n) as u64);
        self.ctx.queue.submit([encoder.finish()]);
        let bytes = self.map_blocking(&staging, (16 * n) as u64);
        let ticks: &[u64] = bytemuck::cast_slice(&bytes);
        let period = self.ctx.queue.get_timestamp_period() as f64;
        Some(
            labels
                .into_iter()
                .enumerate()
                .map(|(i, (label, entry))| (label, entry, ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period))
                .collect(),
        )
    }

    /// Runs only the forward ops on a batch in evaluation mode and returns the
    /// mean loss (used by [`Backend::eval_loss`] and the parity tests).
    pub fn forward(&mut self, batch: &Batch, sp: Option<StepParams>) -> f32 {
        self.upload_batch(batch);
        self.write_step_uniform(sp);
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.record(&mut encoder, |s| matches!(s, Step::Forward(_)));
        self.submit_and_read_stats(encoder)[0]
    }
}

fn attn_params(cfg: &crate::model::config::Config, n_head: usize, stream: u32, dropout: f32) -> Vec<u8> {
    let d = cfg.d_model / n_head;
    words(&[
        cfg.batch as u32,
        cfg.ctx as u32,
        cfg.d_model as u32,
        n_head as u32,
        d as u32,
        stream,
        dropout.to_bits(),
        (1.0 / (d as f32).sqrt()).to_bits(),
    ])
}

fn chunks_srcs(params: usize, grads: usize, m: usize, v: usize, start: usize, len: usize) -> [Src; 4] {
    [params, grads, m, v].map(|buffer| Src::At(Place { buffer, offset: start as u64 * 4, size: len as u64 * 4 }))
}

fn opt_plan(entry: &'static str, flat: &[Src; 4], stats: Src, partials: Src, op: [u32; 4], groups: [u32; 3]) -> Planned {
    Planned {
        entry,
        bindings: vec![flat[0], flat[1], flat[2], flat[3], stats, partials, Src::Params, Src::Step],
        params: words(&op),
        groups,
    }
}

impl Backend for GpuBackend {
    fn describe(&self) -> String {
        format!("gpu ({})", self.ctx.describe())
    }

    fn program(&self) -> &Program {
        &self.program
    }

    fn train_step(&mut self, batch: &Batch, sp: StepParams) -> StepOutcome {
        self.upload_batch(batch);
        self.write_step_uniform(Some(sp));
        let mut encoder = self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tinygpt:train_step") });
        self.record(&mut encoder, |_| true);
        let [loss, grad_norm, _, _] = self.submit_and_read_stats(encoder);
        StepOutcome { loss, grad_norm, applied: loss.is_finite() && grad_norm.is_finite() }
    }

    fn eval_loss(&mut self, batch: &Batch) -> f32 {
        self.forward(batch, None)
    }

    /// Blocking: the convenience for the CLI and tests (not for a browser,
    /// where [`GpuBackend::request_read`] is the way).
    fn read(&mut self, name: &str) -> Result<Vec<f32>, BackendError> {
        let mut handle = self.request_read(name)?;
        loop {
            let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
            match self.try_take(handle) {
                Ok(values) => return Ok(values),
                Err(h) => handle = h,
            }
        }
    }

    fn write(&mut self, name: &str, values: &[f32]) -> Result<(), BackendError> {
        let (id, place) = self.place(name)?;
        let expected = self.program.tensors[id].numel();
        if values.len() != expected || self.program.tensors[id].kind == TensorKind::Input {
            return Err(BackendError::WrongSize { name: name.to_string(), expected, got: values.len() });
        }
        self.ctx.queue.write_buffer(&self.buffers[place.buffer], place.offset, bytemuck::cast_slice(values));
        Ok(())
    }
}
