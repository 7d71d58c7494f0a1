//! The GPU backend: executes the [`Program`] with the WGSL kernels of
//! `shaders/` on any wgpu device — its own, or Bevy's in the app.
//!
//! At creation it checks the adapter's limits, allocates every tensor once
//! (parameters, their gradients and AdamW moments in four flat buffers,
//! decayed tensors first; activations in their own buffers), and records the
//! step as a list of dispatches per program step, each with its bind group.
//! A training step then writes the batch and one small uniform block, records
//! every dispatch into one command encoder, submits once, and reads back 8
//! bytes (loss and gradient norm). The tensors' buffers are all made here;
//! what is made later is made once and reused: the staging buffers of
//! readbacks (grown when a larger read comes), the ring of several steps
//! per submit, the Flash trace's. `buffers_created` counts them all; a test
//! checks that training steps after the first create none.

pub mod context;
pub mod coop;
mod flash;
pub mod generate;
pub mod kernels;
pub mod matmul_tiles;
pub mod params;
mod plan;
pub(crate) use crate::readback;
mod timing;

use crate::backend::{Backend, BackendError, PendingRead, StepOutcome, StepParams};
use crate::data::Batch;
use crate::model::config::VOCAB;
use crate::probe::{ProbeRequest, ProbeResult};
use crate::program::{Op, ProbeWindow, Program, Step, TensorId, TensorKind};
pub use context::{GpuContext, GpuError};
use kernels::{Kernels, Slot};
use params::WgslMirror;
pub use plan::split_k;
pub use plan::DIRECT_SUMS_MAX_ROWS;
pub use plan::{LOSS_SCALE_GROWTH_INTERVAL, LOSS_SCALE_INIT};
use plan::{NORM_CHUNK, Place, ROWS_PER_CHUNK, Src, words};
use std::sync::{Arc, Mutex};
pub use timing::ProfileHandle;

/// A probe on its way back from the GPU ([`GpuBackend::submit_probe`]).
pub struct ProbeHandle {
    readback: readback::ReadbackHandle,
    request: ProbeRequest,
}

/// One dispatch of the recorded step.
struct Dispatch {
    entry: &'static str,
    bind_group: wgpu::BindGroup,
    groups: [u32; 3],
}

/// Byte size of the per-step uniform block (see `StepUniform` in common.wgsl).
const STEP_UNIFORM_BYTES: u64 = 48;

pub struct GpuBackend {
    ctx: GpuContext,
    program: Program,
    kernels: std::sync::Arc<Kernels>,
    buffers: Vec<wgpu::Buffer>,
    places: Vec<Option<Place>>,
    steps: Vec<(Step, Vec<Dispatch>)>,
    /// The program's probes (never part of a training step).
    probes: Vec<(Step, Vec<Dispatch>)>,
    /// `ProbeWindow` of attention_probs.wgsl: row, n.
    probe_window: wgpu::Buffer,
    /// Gradient buffers, cleared by [`Step::ZeroGrads`].
    grad_buffers: Vec<usize>,
    /// Those a whole training step clears: all but the gradients the
    /// backward writes outright ([`Program::written_gradients`]).
    step_grad_buffers: Vec<usize>,
    step_uniform: wgpu::Buffer,
    stats: usize,
    stats_staging: wgpu::Buffer,
    /// The halt flag (a buffer and a byte offset): set by the GPU when a
    /// step's loss or norm is not finite, it stops every update queued after
    /// that step until [`GpuBackend::clear_halt`].
    halt_flag: (usize, u64),
    /// The loss scaler's state (adamw.wgsl): [S, clean steps, skipped, skipped now].
    loss_scaler: usize,
    staging: readback::StagingPool,
    /// Staging for [`GpuBackend::submit_steps`]: batches and uniforms of the
    /// steps in one submit (created on first use, grown only when a bigger
    /// submit comes).
    ring: Option<wgpu::Buffer>,
    tokens: usize,
    targets: usize,
    order: usize,
    offsets: usize,
    /// Flat index where weight decay stops.
    decay_end: u32,
    /// The flat parameter, gradient and moment buffers.
    flat: [usize; 4],
    /// Copies of the flat parameters and moments ([`Backend::stash_weights`]),
    /// made on first use.
    stash: Option<[wgpu::Buffer; 3]>,
    /// Whether the stash holds weights to put back.
    stashed: bool,
    /// The FlashAttention trace's buffers, made on the first trace.
    flash: Option<flash::FlashBuffers>,
    /// Timestamps around each training pass of [`GpuBackend::submit_steps`]
    /// while [`GpuBackend::time_steps`] has them on (the page's bench).
    step_timer: Option<timing::StepTimer>,
    /// The GPU time of each step the last [`GpuBackend::try_finish_steps`]
    /// collected (ms), when they were timed.
    step_ms: Vec<f64>,
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
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.created += 1;
        self.buffers.push(buffer);
        self.buffers.len() - 1
    }

    fn other(
        &mut self,
        device: &wgpu::Device,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        self.created += 1;
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&format!("tinygpt:buffer:{label}")),
            size: bytes.max(16).next_multiple_of(4),
            usage,
            mapped_at_creation: false,
        })
    }
}

/// Refuses, before any allocation, a program this adapter cannot run: a
/// tensor larger than one binding, attention tiles larger than workgroup
/// memory, too few threads or storage buffers per kernel.
fn check_limits(
    program: &Program,
    limits: &wgpu::Limits,
    refuse: &dyn Fn(String, &'static str, u64, u64) -> GpuError,
) -> Result<(), GpuError> {
    let cfg = &program.config;
    let largest = program
        .tensors
        .iter()
        .map(|t| t.numel() as u64 * 4)
        .max()
        .unwrap_or(0);
    if largest > limits.max_storage_buffer_binding_size {
        let name = program
            .tensors
            .iter()
            .max_by_key(|t| t.numel())
            .unwrap()
            .name
            .clone();
        return Err(refuse(
            format!("tensor `{name}`"),
            "max_storage_buffer_binding_size",
            largest,
            limits.max_storage_buffer_binding_size,
        ));
    }
    let attn_bytes = kernels::attention_workgroup_bytes(cfg.head_dim())
        .max(kernels::attention_rows_workgroup_bytes(cfg.head_dim()));
    if attn_bytes > limits.max_compute_workgroup_storage_size as u64 {
        return Err(refuse(
            format!("attention with head_dim {}", cfg.head_dim()),
            "max_compute_workgroup_storage_size",
            attn_bytes,
            limits.max_compute_workgroup_storage_size as u64,
        ));
    }
    if limits.max_compute_invocations_per_workgroup < 256
        || limits.max_compute_workgroup_size_x < 256
    {
        return Err(refuse(
            "256-thread workgroups".into(),
            "max_compute_invocations_per_workgroup",
            256,
            limits.max_compute_invocations_per_workgroup as u64,
        ));
    }
    if limits.max_storage_buffers_per_shader_stage < 8 {
        return Err(refuse(
            "8 storage buffers per kernel".into(),
            "max_storage_buffers_per_shader_stage",
            8,
            limits.max_storage_buffers_per_shader_stage as u64,
        ));
    }
    Ok(())
}

/// Where each trained parameter sits in the flat buffers (weights,
/// gradients and moments share it): decayed tensors first, each aligned for
/// a binding. (A LoRA fine-tune's frozen base has buffers of its own.)
struct FlatLayout {
    /// In floats, by tensor id (parameters only).
    offsets: Vec<usize>,
    /// Floats in all, aligned.
    len: usize,
    /// Where the decayed tensors end (AdamW decays before it).
    decay_end: usize,
}

impl FlatLayout {
    fn new(program: &Program, align_floats: usize) -> Self {
        let params: Vec<TensorId> = program.trained().collect();
        let mut order: Vec<TensorId> = params
            .iter()
            .copied()
            .filter(|&p| program.decays(p))
            .collect();
        let decayed = order.len();
        order.extend(params.iter().copied().filter(|&p| !program.decays(p)));
        let mut offsets = vec![0usize; program.tensors.len()];
        let mut len = 0usize;
        let mut decay_end = 0usize;
        for (i, &p) in order.iter().enumerate() {
            len = len.next_multiple_of(align_floats);
            offsets[p] = len;
            len += program.tensors[p].numel();
            if i + 1 == decayed {
                decay_end = len;
            }
        }
        Self {
            offsets,
            len: len.next_multiple_of(align_floats),
            decay_end,
        }
    }
}

/// Turns planned dispatches into bind groups over the allocated buffers.
struct Binder<'a> {
    device: &'a wgpu::Device,
    kernels: &'a Kernels,
    buffers: &'a [wgpu::Buffer],
    uniforms: &'a wgpu::Buffer,
    step_uniform: &'a wgpu::Buffer,
    probe_window: &'a wgpu::Buffer,
    dummy_ro: usize,
    dummy_rw: usize,
    /// Each unused writable binding gets its own slot of `dummy_rw`.
    dummy_stride: u64,
}

impl Binder<'_> {
    /// `plan`'s bind group, its uniform block at `uniform_offset`.
    fn dispatch(&self, plan: &plan::Planned, uniform_offset: u64) -> Dispatch {
        let slots = self.kernels.slots_of(plan.entry);
        assert_eq!(
            slots.len(),
            plan.bindings.len(),
            "{}: binding count",
            plan.entry
        );
        let entries: Vec<wgpu::BindGroupEntry> = plan
            .bindings
            .iter()
            .zip(slots)
            .enumerate()
            .map(|(i, (src, slot))| {
                let binding = match *src {
                    Src::At(place) => wgpu::BufferBinding {
                        buffer: &self.buffers[place.buffer],
                        offset: place.offset,
                        size: if place.size == 0 {
                            None
                        } else {
                            wgpu::BufferSize::new(place.size)
                        },
                    },
                    Src::DummyRo => wgpu::BufferBinding {
                        buffer: &self.buffers[self.dummy_ro],
                        offset: 0,
                        size: None,
                    },
                    Src::DummyRw => wgpu::BufferBinding {
                        buffer: &self.buffers[self.dummy_rw],
                        offset: i as u64 * self.dummy_stride,
                        size: wgpu::BufferSize::new(16),
                    },
                    Src::Params => wgpu::BufferBinding {
                        buffer: self.uniforms,
                        offset: uniform_offset,
                        size: wgpu::BufferSize::new(plan.params.len() as u64),
                    },
                    Src::Step => wgpu::BufferBinding {
                        buffer: self.step_uniform,
                        offset: 0,
                        size: None,
                    },
                    Src::Window => wgpu::BufferBinding {
                        buffer: self.probe_window,
                        offset: 0,
                        size: None,
                    },
                };
                debug_assert!(
                    matches!(src, Src::Params | Src::Step | Src::Window)
                        == (*slot == Slot::Uniform)
                );
                wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: wgpu::BindingResource::Buffer(binding),
                }
            })
            .collect();
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&format!("tinygpt:bind:{}", plan.entry)),
            layout: self.kernels.layout_of(plan.entry),
            entries: &entries,
        });
        Dispatch {
            entry: plan.entry,
            bind_group,
            groups: plan.groups,
        }
    }
}

impl GpuBackend {
    /// Builds the backend for `program` on `ctx`, or says which adapter limit
    /// the preset exceeds.
    pub fn new(ctx: GpuContext, program: Program) -> Result<Self, GpuError> {
        let cfg = program.config.clone();
        let limits = ctx.limits.clone();
        let preset = format!(
            "{}L/{}H/d{}/ctx{}/batch{}",
            cfg.n_layer, cfg.n_head, cfg.d_model, cfg.ctx, cfg.batch
        );
        let refuse = |what: String, limit: &'static str, need: u64, have: u64| GpuError::Limit {
            preset: preset.clone(),
            adapter: ctx.info.name.clone(),
            what,
            limit,
            need,
            have,
        };

        // --- limits, before any allocation
        check_limits(&program, &limits, &refuse)?;
        let align_floats = (limits.min_storage_buffer_offset_alignment.max(256) / 4) as usize;

        // --- flat parameter layout: decayed tensors first
        let FlatLayout {
            offsets: flat_offsets,
            len: flat_len,
            decay_end,
        } = FlatLayout::new(&program, align_floats);
        if flat_len as u64 * 4 > limits.max_buffer_size {
            return Err(refuse(
                "the flat parameter buffer".into(),
                "max_buffer_size",
                flat_len as u64 * 4,
                limits.max_buffer_size,
            ));
        }
        for t in &program.tensors {
            if t.numel() as u64 * 4 > limits.max_buffer_size {
                return Err(refuse(
                    format!("tensor `{}`", t.name),
                    "max_buffer_size",
                    t.numel() as u64 * 4,
                    limits.max_buffer_size,
                ));
            }
        }
        let params: Vec<TensorId> = program.trained().collect();

        let device = ctx.device.clone();
        let kernels = ctx.kernels(cfg.head_dim(), cfg.lab);
        // Running out of GPU memory is a property of the preset, not a bug:
        // catch it and say so, instead of wgpu's default panic.
        let memory_scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut alloc = Allocator::default();
        let flat_bytes = flat_len as u64 * 4;
        let flat_params = alloc.storage(&device, "params", flat_bytes);
        let flat_grads = alloc.storage(&device, "grads", flat_bytes);
        let flat_m = alloc.storage(&device, "adam.m", flat_bytes);
        let flat_v = alloc.storage(&device, "adam.v", flat_bytes);

        let mut places: Vec<Option<Place>> = vec![None; program.tensors.len()];
        let mut grad_buffers = vec![flat_grads];
        let mut step_grad_buffers = vec![flat_grads];
        let written = program.written_gradients();
        for &p in &params {
            let info = &program.tensors[p];
            let at = |buffer| Place {
                buffer,
                offset: flat_offsets[p] as u64 * 4,
                size: info.numel() as u64 * 4,
            };
            places[p] = Some(at(flat_params));
            places[info.grad.unwrap()] = Some(at(flat_grads));
            let (m, v) = info.adam.unwrap();
            places[m] = Some(at(flat_m));
            places[v] = Some(at(flat_v));
        }
        // `step.stats` is the buffer the loss and norm kernels write.
        let stats = alloc.storage(&device, "stats", 16);
        places[program.stats] = Some(Place {
            buffer: stats,
            offset: 0,
            size: 16,
        });
        for (id, t) in program.tensors.iter().enumerate() {
            if places[id].is_some() {
                continue;
            }
            let buffer = alloc.storage(&device, &t.name, t.numel() as u64 * 4);
            if t.kind == TensorKind::Grad {
                grad_buffers.push(buffer);
                if !written.contains(&id) {
                    step_grad_buffers.push(buffer);
                }
            }
            places[id] = Some(Place {
                buffer,
                offset: 0,
                size: t.numel() as u64 * 4,
            });
        }
        let rows = program.rows();
        let tokens = places[program.tokens].unwrap().buffer;
        let targets = places[program.targets].unwrap().buffer;
        let order_buf = alloc.storage(&device, "tokens.order", rows as u64 * 4);
        let offsets_buf = alloc.storage(&device, "tokens.offsets", (VOCAB as u64 + 1) * 4);
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
        let part = alloc.storage(
            &device,
            "scratch.column_partials",
            (rows.div_ceil(ROWS_PER_CHUNK) * widest) as u64 * 4,
        );
        let delta = alloc.storage(
            &device,
            "scratch.attention_delta",
            (cfg.batch * cfg.n_head * cfg.ctx) as u64 * 4,
        );
        let halves = alloc.storage(
            &device,
            "scratch.attention_halves",
            if coop::attention_on_tensor_cores(ctx.matmul, cfg.head_dim()) {
                coop::attention_halves_bytes(cfg.batch, cfg.ctx, cfg.d_model)
            } else {
                16
            },
        );
        // Split-K partials: the largest splits × M × N of any matmul of the step.
        let split_floats = matmul_tiles::matmul_shapes(&program)
            .into_iter()
            .map(|(layout, [m, k, n])| {
                let (_, splits, _) = plan::matmul_tiling(m, k, n, layout, ctx.matmul, &limits);
                if splits > 1 { splits * m * n } else { 0 }
            })
            .max()
            .unwrap_or(0);
        let split_scratch = alloc.storage(&device, "scratch.split_k", split_floats as u64 * 4);
        let dummy_ro = alloc.storage(&device, "dummy.read", 16);
        // Unused writable bindings each get their own slot of this buffer:
        // WebGPU forbids two writable bindings of one dispatch to overlap.
        let dummy_stride = (limits.min_storage_buffer_offset_alignment as u64).max(16);
        let dummy_rw = alloc.storage(
            &device,
            "dummy.write",
            dummy_stride * kernels::MAX_BINDINGS as u64,
        );

        // Flat chunks that fit one storage binding (AdamW and the norm).
        let max_chunk = ((limits.max_storage_buffer_binding_size / 4) as usize / align_floats
            * align_floats)
            .min(65535 * NORM_CHUNK);
        let chunks: Vec<(usize, usize)> = (0..flat_len)
            .step_by(max_chunk)
            .map(|s| (s, max_chunk.min(flat_len - s)))
            .collect();
        let norm_groups: usize = chunks.iter().map(|(_, n)| n.div_ceil(NORM_CHUNK)).sum();
        // One partial sum per workgroup of the norm, then the halt flag (adamw.wgsl).
        let partials = alloc.storage(
            &device,
            "scratch.norm_partials",
            (norm_groups as u64 + 1) * 4,
        );

        // The loss scaler's state (adamw.wgsl): S = 1 in f32, where it
        // changes nothing; PyTorch's GradScaler's start on the tensor cores.
        let scaler = alloc.storage(&device, "scratch.loss_scaler", 16);
        let loss_scale = if ctx.matmul.tensor_cores() {
            plan::LOSS_SCALE_INIT
        } else {
            1.0
        };
        ctx.queue.write_buffer(
            &alloc.buffers[scaler],
            0,
            bytemuck::cast_slice(&[loss_scale, 0.0, 0.0, 0.0]),
        );
        let scratch = plan::Scratch {
            flat: [flat_params, flat_grads, flat_m, flat_v],
            chunks,
            stats,
            scaler,
            partials,
            part,
            delta,
            halves,
            split: split_scratch,
            order: order_buf,
            offsets: offsets_buf,
        };
        let planned_steps = plan::plan_steps(&program, &places, &scratch, ctx.matmul, &limits);

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
        let uniforms = alloc.other(
            &device,
            "uniforms",
            uniform_bytes.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        ctx.queue.write_buffer(&uniforms, 0, &uniform_bytes);
        let step_uniform = alloc.other(
            &device,
            "step",
            STEP_UNIFORM_BYTES,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let probe_window = alloc.other(
            &device,
            "probe_window",
            16,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let stats_staging = alloc.other(
            &device,
            "stats.staging",
            16,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );

        #[cfg(not(target_arch = "wasm32"))]
        if let Some(error) = pollster::block_on(memory_scope.pop()) {
            let bytes: u64 = alloc.buffers.iter().map(|b| b.size()).sum();
            return Err(GpuError::OutOfMemory {
                preset: preset.clone(),
                adapter: ctx.info.name.clone(),
                bytes,
                message: error.to_string(),
            });
        }
        #[cfg(target_arch = "wasm32")]
        drop(memory_scope); // the browser reports it asynchronously, to the console
        let buffers = alloc.buffers;
        let binder = Binder {
            device: &device,
            kernels: &kernels,
            buffers: &buffers,
            uniforms: &uniforms,
            step_uniform: &step_uniform,
            probe_window: &probe_window,
            dummy_ro,
            dummy_rw,
            dummy_stride,
        };
        let mut next_uniform = uniform_offsets.into_iter();
        let (steps, probes): (Vec<_>, Vec<_>) = planned_steps
            .into_iter()
            .map(|(step, plans)| {
                let dispatches: Vec<Dispatch> = plans
                    .into_iter()
                    .map(|plan| binder.dispatch(&plan, next_uniform.next().unwrap() as u64))
                    .collect();
                (step, dispatches)
            })
            .partition(|(step, _)| !matches!(step, Step::AttentionProbs(_)));
        // The kernels to warm: the probes' own first (a run's time-lapse
        // waits for them before its first frame; the rest compile in the
        // first step's submit if they are not warm yet), then in the order
        // a step runs them (see `Kernels`).
        // (In the browser, which records no GPU frames, the step's first.)
        let (first, then) = if cfg!(target_arch = "wasm32") {
            (&steps, &probes)
        } else {
            (&probes, &steps)
        };
        kernels.want(
            first
                .iter()
                .chain(then)
                .flat_map(|(_, dispatches)| dispatches.iter().map(|d| d.entry)),
        );

        Ok(Self {
            ctx,
            program,
            kernels,
            buffers,
            places,
            steps,
            probes,
            probe_window,
            grad_buffers,
            step_grad_buffers,
            step_uniform,
            stats,
            stats_staging,
            halt_flag: (partials, norm_groups as u64 * 4),
            loss_scaler: scaler,
            staging: readback::StagingPool::default(),
            ring: None,
            tokens,
            targets,
            order: order_buf,
            offsets: offsets_buf,
            decay_end: decay_end as u32,
            flat: [flat_params, flat_grads, flat_m, flat_v],
            stash: None,
            stashed: false,
            flash: None,
            step_timer: None,
            step_ms: Vec::new(),
            buffers_created: alloc.created,
        })
    }

    /// Buffers this backend has created (all of them at construction).
    pub fn buffers_created(&self) -> usize {
        self.buffers_created
    }

    /// Compiles one more of the kernels this backend runs, then of those the
    /// other backends on its device run (so that none compiles while this
    /// one is timed); false when they are all ready. Where compiling must
    /// not hold the thread (a page), call it between frames until false
    /// before the first step; elsewhere the first step compiles what it
    /// needs.
    pub fn warm_next_kernel(&self) -> bool {
        self.kernels.warm_next() || self.ctx.warm_kernels()
    }

    /// Asks for the traced pipelines a FlashAttention trace runs
    /// ([`GpuBackend::submit_flash_trace`]) to be warmed too; true when
    /// they and every kernel this backend runs are compiled, so that the
    /// trace's submit compiles nothing (in a page, compiling them all in
    /// one task leaves the browser without a frame for tens of seconds on
    /// a software GPU). The app waits for it, warming one a frame.
    pub fn ready_to_trace(&self) -> bool {
        self.kernels.want_traced();
        self.kernels.all_warm()
    }

    /// True when every kernel this backend runs is compiled
    /// ([`GpuBackend::warm_next_kernel`]).
    pub fn kernels_warm(&self) -> bool {
        self.kernels.all_warm()
    }

    /// Whether the probes' own kernels are compiled (the rest of a probe
    /// is the step's forward pass).
    pub fn probe_kernels_warm(&self) -> bool {
        self.probes
            .iter()
            .flat_map(|(_, dispatches)| dispatches)
            .all(|d| self.kernels.is_warm(d.entry))
    }

    pub fn context(&self) -> &GpuContext {
        &self.ctx
    }

    /// Kernel dispatches of one training step.
    pub fn dispatches_per_step(&self) -> usize {
        self.steps.iter().map(|(_, d)| d.len()).sum()
    }

    /// The four input buffers of a batch, as bytes: tokens, targets, and the
    /// rows grouped by token (a stable counting sort) with each token's start,
    /// for the deterministic embedding backward.
    fn batch_bytes(&self, batch: &Batch) -> [Vec<u8>; 4] {
        assert_eq!(
            batch.inputs.len(),
            self.program.rows(),
            "batch shape does not match the program"
        );
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
        [
            words(&batch.inputs),
            words(&batch.targets),
            words(&order),
            words(&offsets),
        ]
    }

    /// The buffers `batch_bytes` fills, in the same order.
    fn batch_buffers(&self) -> [usize; 4] {
        [self.tokens, self.targets, self.order, self.offsets]
    }

    fn upload_batch(&self, batch: &Batch) {
        for (bytes, buf) in self.batch_bytes(batch).iter().zip(self.batch_buffers()) {
            self.ctx.queue.write_buffer(&self.buffers[buf], 0, bytes);
        }
    }

    /// The per-step uniform block (`StepUniform` in common.wgsl); `None`
    /// evaluates (no dropout).
    fn step_uniform_bytes(&self, sp: Option<StepParams>) -> Vec<u8> {
        let cfg = &self.program.config;
        let (lr, t, seed, training) = match sp {
            Some(s) => (s.lr, s.adam_t, s.dropout_seed, 1u32),
            None => (0.0, 1, 0, 0),
        };
        let bc1 = (1.0 - (cfg.beta1 as f64).powi(t as i32)) as f32;
        let bc2 = (1.0 - (cfg.beta2 as f64).powi(t as i32)) as f32;
        params::StepUniform {
            lr,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            weight_decay: cfg.weight_decay,
            bias_correction1: bc1,
            bias_correction2: bc2,
            grad_clip: cfg.grad_clip,
            dropout_seed: seed,
            training,
            decay_end: self.decay_end,
            n_rows: self.program.rows() as u32,
        }
        .bytes()
    }

    fn write_step_uniform(&self, sp: Option<StepParams>) {
        self.ctx
            .queue
            .write_buffer(&self.step_uniform, 0, &self.step_uniform_bytes(sp));
    }

    /// Submits several training steps at once without waiting: their batches
    /// and uniforms go to a staging ring, and one encoder copies each into
    /// place before that step's dispatches, then copies the step's
    /// [loss, norm, …] out. Collect the outcomes with
    /// [`GpuBackend::try_finish_steps`] once the device has been polled (by
    /// Bevy, by the browser, or [`GpuBackend::poll`]). This is how the app
    /// trains inside the frame loop.
    pub fn submit_steps(
        &mut self,
        batches: &[Batch],
        params: &[StepParams],
    ) -> readback::ReadbackHandle {
        assert_eq!(batches.len(), params.len(), "one StepParams per batch");
        let uniforms: Vec<Option<StepParams>> = params.iter().copied().map(Some).collect();
        self.submit_batches("tinygpt:train_steps", batches, &uniforms)
    }

    /// Submits the evaluation-mode forward pass of several batches without
    /// waiting; [`GpuBackend::try_finish_evals`] gives their mean losses.
    /// Queued after whatever was submitted before, so it evaluates the
    /// weights those steps leave.
    pub fn submit_evals(&mut self, batches: &[Batch]) -> readback::ReadbackHandle {
        self.submit_batches("tinygpt:evals", batches, &vec![None; batches.len()])
    }

    /// One submit of one pass per batch: each batch and its uniforms go to
    /// the staging ring and are copied into place before that pass; a
    /// training pass (`Some` params) runs the whole step, an evaluation pass
    /// (`None`) the forward ops only. Each pass's [loss, norm, …] is copied
    /// out to one staging buffer, mapped without waiting.
    fn submit_batches(
        &mut self,
        label: &'static str,
        batches: &[Batch],
        uniforms: &[Option<StepParams>],
    ) -> readback::ReadbackHandle {
        let n = batches.len();
        // Timed training steps: each pass's two timestamps (2 × u64) follow
        // the stats in the same staging buffer.
        let timed = self.step_timer.is_some() && uniforms.iter().all(Option::is_some);
        let size = if timed { 32 } else { 16 } * n as u64;
        let (slot, created) = self.staging.acquire(&self.ctx.device, size);
        self.buffers_created += created as usize;
        if timed {
            let timer = self.step_timer.as_mut().expect("checked above");
            self.buffers_created += timer.reserve(&self.ctx.device, n) as usize;
        }
        let mut encoder = self.encode_passes(label, batches, uniforms, Some(slot));
        if timed {
            let timer = self.step_timer.as_ref().expect("checked above");
            timer.resolve(&mut encoder, n, self.staging.buffer(slot), 16 * n as u64);
        }
        self.ctx.queue.submit([encoder.finish()]);
        let state = readback::start_map(self.staging.buffer(slot), size);
        readback::ReadbackHandle {
            slot,
            size,
            is_u32: false,
            timed,
            state,
        }
    }

    /// Encodes one pass per batch (see [`GpuBackend::submit_batches`]); with
    /// `stats`, each pass's [loss, norm, …] is copied to that staging slot.
    fn encode_passes(
        &mut self,
        label: &'static str,
        batches: &[Batch],
        uniforms: &[Option<StepParams>],
        stats: Option<usize>,
    ) -> wgpu::CommandEncoder {
        assert!(!batches.is_empty(), "submit at least one pass");
        let n = batches.len();
        let per_pass = self
            .batch_bytes(&batches[0])
            .iter()
            .map(|b| b.len() as u64)
            .sum::<u64>()
            + STEP_UNIFORM_BYTES;
        if self
            .ring
            .as_ref()
            .is_none_or(|r| r.size() < per_pass * n as u64)
        {
            self.ring = Some(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tinygpt:buffer:step_ring"),
                size: per_pass * n as u64,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
            self.buffers_created += 1;
        }
        let ring = self.ring.clone().expect("created above");
        // Training steps with stats are timed while the timer is on (as
        // submit_batches reserved it).
        let timed =
            self.step_timer.is_some() && stats.is_some() && uniforms.iter().all(Option::is_some);
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        for (i, (batch, sp)) in batches.iter().zip(uniforms).enumerate() {
            let mut at = per_pass * i as u64;
            for (bytes, buf) in self.batch_bytes(batch).iter().zip(self.batch_buffers()) {
                self.ctx.queue.write_buffer(&ring, at, bytes);
                encoder.copy_buffer_to_buffer(&ring, at, &self.buffers[buf], 0, bytes.len() as u64);
                at += bytes.len() as u64;
            }
            self.ctx
                .queue
                .write_buffer(&ring, at, &self.step_uniform_bytes(*sp));
            encoder.copy_buffer_to_buffer(&ring, at, &self.step_uniform, 0, STEP_UNIFORM_BYTES);
            let training = sp.is_some();
            let passes = self
                .steps
                .iter()
                .filter(|(s, _)| training || matches!(s, Step::Forward(_)));
            let timestamps = self
                .step_timer
                .as_ref()
                .filter(|_| timed)
                .map(|t| t.writes(i));
            self.record_with(
                &mut encoder,
                if training { Clear::WholeStep } else { Clear::None },
                passes.map(|(_, d)| d.as_slice()),
                timestamps,
            );
            if let Some(slot) = stats {
                encoder.copy_buffer_to_buffer(
                    &self.buffers[self.stats],
                    0,
                    self.staging.buffer(slot),
                    16 * i as u64,
                    16,
                );
            }
        }
        encoder
    }

    /// Submits a probe ([`crate::probe`]) without waiting: the forward pass
    /// on its batch in evaluation mode, queued behind whatever was submitted
    /// before (so it sees the weights those steps leave), then each chosen
    /// block's attention probe, each block's P (H, n, n) copied out in turn,
    /// then the row's logits (n, V). Take it with [`GpuBackend::try_finish_probe`].
    pub fn submit_probe(&mut self, request: &ProbeRequest) -> Result<ProbeHandle, BackendError> {
        let cfg = self.program.config.clone();
        request.check(&cfg).map_err(BackendError::BadProbe)?;
        let ProbeWindow { row, n } = request.window;
        self.ctx.queue.write_buffer(
            &self.probe_window,
            0,
            &params::ProbeWindow {
                row: row as u32,
                n: n as u32,
                ..Default::default()
            }
            .bytes(),
        );
        let total = request.result_len(cfg.n_head) as u64 * 4;
        let (slot, created) = self.staging.acquire(&self.ctx.device, total);
        self.buffers_created += created as usize;
        let mut encoder = self.encode_passes(
            "tinygpt:probe",
            std::slice::from_ref(&request.batch),
            &[None],
            None,
        );
        let probs = self.places[self.program.probs].expect("every tensor is placed");
        let per_block = (cfg.n_head * n * n) as u64 * 4;
        let mut at = 0;
        for &block in &request.blocks {
            let step = self
                .program
                .attention_probe(block)
                .expect("check() bounds the block");
            self.record(
                &mut encoder,
                Clear::None,
                std::iter::once(self.dispatches_of(step)),
            );
            encoder.copy_buffer_to_buffer(
                &self.buffers[probs.buffer],
                probs.offset,
                self.staging.buffer(slot),
                at,
                per_block,
            );
            at += per_block;
        }
        let logits = self.places[self.program.logits].expect("every tensor is placed");
        encoder.copy_buffer_to_buffer(
            &self.buffers[logits.buffer],
            logits.offset + (row * cfg.ctx * VOCAB) as u64 * 4,
            self.staging.buffer(slot),
            at,
            (n * VOCAB) as u64 * 4,
        );
        self.ctx.queue.submit([encoder.finish()]);
        let state = readback::start_map(self.staging.buffer(slot), total);
        Ok(ProbeHandle {
            readback: readback::ReadbackHandle {
                slot,
                size: total,
                is_u32: false,
                timed: false,
                state,
            },
            request: request.clone(),
        })
    }

    /// A submitted probe's result if it has arrived (Ok), else the handle
    /// back (Err), to try again after the device has been polled.
    #[allow(clippy::result_large_err)] // the handle comes back whole, to try again
    pub fn try_finish_probe(
        &mut self,
        handle: ProbeHandle,
    ) -> Result<Result<ProbeResult, BackendError>, ProbeHandle> {
        let ProbeHandle { readback, request } = handle;
        match self.try_take(readback) {
            Ok(flat) => Ok(request
                .result_from_flat(self.program.config.n_head, &flat)
                .ok_or(BackendError::DeviceLost)),
            Err(readback) => Err(ProbeHandle { readback, request }),
        }
    }

    /// The mean loss of submitted evaluations, if they have finished.
    pub fn try_finish_evals(
        &mut self,
        handle: readback::ReadbackHandle,
    ) -> Result<f32, readback::ReadbackHandle> {
        let stats = self.try_take(handle)?;
        let losses: Vec<f64> = stats.chunks_exact(4).map(|s| s[0] as f64).collect();
        Ok((losses.iter().sum::<f64>() / losses.len().max(1) as f64) as f32)
    }

    /// The loss scaler's state after the steps submitted so far (blocking):
    /// [loss scale S, clean steps since it last changed, steps skipped in
    /// all, 1 when the last step was skipped]. S is 1 in f32.
    pub fn loss_scaler(&self) -> [f32; 4] {
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&self.buffers[self.loss_scaler], 0, &self.stats_staging, 0, 16);
        self.ctx.queue.submit([encoder.finish()]);
        let bytes = self.map_blocking(&self.stats_staging, 16);
        let v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        [v[0], v[1], v[2], v[3]]
    }

    /// Sets the loss scaler's state ([`GpuBackend::loss_scaler`]), ordered
    /// after everything submitted before (the tests inject an overflow so).
    pub fn set_loss_scaler(&self, state: [f32; 4]) {
        self.ctx
            .queue
            .write_buffer(&self.buffers[self.loss_scaler], 0, bytemuck::cast_slice(&state));
    }

    /// Lets updates run again after a diverged step (the trainer has gone
    /// back to the last good step). Ordered after everything submitted
    /// before: the steps queued behind the diverged one stay discarded.
    pub fn clear_halt(&mut self) {
        let (buffer, offset) = self.halt_flag;
        self.ctx
            .queue
            .write_buffer(&self.buffers[buffer], offset, bytemuck::bytes_of(&0f32));
    }

    /// The outcomes of submitted steps, in order, if they have finished.
    pub fn try_finish_steps(
        &mut self,
        handle: readback::ReadbackHandle,
    ) -> Result<Vec<StepOutcome>, readback::ReadbackHandle> {
        let timed = handle.timed;
        let (stats, ticks) = self.try_take_mapped(handle, |bytes| {
            // [loss, norm, clip, Σ grad²] per step, then (timed) two u64
            // timestamps per step.
            let (stats, ticks) = bytes.split_at(if timed { bytes.len() / 2 } else { bytes.len() });
            (
                bytemuck::pod_collect_to_vec::<u8, f32>(stats),
                bytemuck::pod_collect_to_vec::<u8, u64>(ticks),
            )
        })?;
        let period = self.ctx.queue.get_timestamp_period() as f64;
        self.step_ms = ticks
            .chunks_exact(2)
            .map(|t| t[1].saturating_sub(t[0]) as f64 * period / 1e6)
            .collect();
        Ok(stats
            .chunks_exact(4)
            .map(|s| StepOutcome::from_stats([s[0], s[1], s[2], s[3]]))
            .collect())
    }

    /// Times each training pass of the submits that follow with GPU
    /// timestamps (on) or not (off); read them with
    /// [`GpuBackend::take_step_ms`]. False when the adapter has no
    /// timestamp queries (the browser did not grant them).
    pub fn time_steps(&mut self, on: bool) -> bool {
        if !on {
            self.step_timer = None;
            return true;
        }
        if !self.ctx.has_timestamps() {
            return false;
        }
        self.step_timer
            .get_or_insert_with(timing::StepTimer::default);
        true
    }

    /// The GPU time (ms) of each step the last collected submit held, from
    /// its timestamps (empty when its steps were not timed).
    pub fn take_step_ms(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.step_ms)
    }

    /// Records dispatch lists, in order, into `encoder`: the gradient clears
    /// first (`clear`), then one compute pass.
    fn record<'a>(
        &'a self,
        encoder: &mut wgpu::CommandEncoder,
        clear: Clear,
        lists: impl Iterator<Item = &'a [Dispatch]>,
    ) {
        self.record_with(encoder, clear, lists, None);
    }

    /// [`GpuBackend::record`], the pass writing `timestamps` at its
    /// beginning and end.
    fn record_with<'a>(
        &'a self,
        encoder: &mut wgpu::CommandEncoder,
        clear: Clear,
        lists: impl Iterator<Item = &'a [Dispatch]>,
        timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        let cleared = match clear {
            Clear::None => &[][..],
            Clear::All => &self.grad_buffers[..],
            Clear::WholeStep => &self.step_grad_buffers[..],
        };
        for &buf in cleared {
            encoder.clear_buffer(&self.buffers[buf], 0, None);
        }
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("tinygpt:step"),
            timestamp_writes: timestamps,
        });
        for d in lists.flatten() {
            pass.set_pipeline(self.kernels.pipeline(d.entry));
            pass.set_bind_group(0, &d.bind_group, &[]);
            pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
        }
    }

    /// The dispatches of one step of the program.
    fn dispatches_of(&self, step: Step) -> &[Dispatch] {
        &self
            .steps
            .iter()
            .chain(&self.probes)
            .find(|(s, _)| *s == step)
            .expect("the step belongs to the program")
            .1
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
        slice.map_async(wgpu::MapMode::Read, move |r| {
            *flag.lock().unwrap() = Some(r)
        });
        if self
            .ctx
            .wait_until(|| done.lock().unwrap().is_some())
            .is_err()
        {
            // A lost device: NaN where the values would be; the trainer
            // sees `lost` and stops before it uses them.
            return bytemuck::cast_slice(&vec![f32::NAN; size as usize / 4]).to_vec();
        }
        let result = done.lock().unwrap().take().unwrap();
        if result.is_err() {
            buffer.unmap();
            if let Ok(mut lost) = self.ctx.lost.lock() {
                lost.get_or_insert_with(|| "a readback failed: the device was lost".into());
            }
            return bytemuck::cast_slice(&vec![f32::NAN; size as usize / 4]).to_vec();
        }
        // The view is dropped before the unmap.
        let out = slice.get_mapped_range().map(|view| view.to_vec());
        buffer.unmap();
        out.unwrap_or_else(|e| {
            if let Ok(mut lost) = self.ctx.lost.lock() {
                lost.get_or_insert_with(|| format!("a readback failed: {e}"));
            }
            bytemuck::cast_slice(&vec![f32::NAN; size as usize / 4]).to_vec()
        })
    }

    /// Why the device was lost, if it was (a device this program opened).
    pub fn device_lost(&self) -> Option<String> {
        self.ctx.lost()
    }

    /// Destroys the device, as a driver reset would lose it (the tests of
    /// a lost GPU).
    pub fn destroy_device(&self) {
        self.ctx.device.destroy();
    }

    /// Starts reading a tensor back without waiting: the data arrives once
    /// the GPU has finished and the device has been polled (Bevy polls every
    /// frame; elsewhere call [`GpuBackend::poll`]). Take it with
    /// [`GpuBackend::try_take`].
    pub fn request_read(&mut self, name: &str) -> Result<readback::ReadbackHandle, BackendError> {
        self.request_reads(&[name])
    }

    /// Starts reading several tensors back in one copy and one map;
    /// [`GpuBackend::try_take`] then gives their values one after another,
    /// in the order named (split them by each tensor's size). Token tensors
    /// (u32) come back as floats too, but only read on their own.
    pub fn request_reads(
        &mut self,
        names: &[&str],
    ) -> Result<readback::ReadbackHandle, BackendError> {
        assert!(!names.is_empty(), "read at least one tensor");
        let placed = names
            .iter()
            .map(|n| self.place(n))
            .collect::<Result<Vec<_>, _>>()?;
        let is_input = |id: TensorId| self.program.tensors[id].kind == TensorKind::Input;
        let is_u32 = placed.iter().all(|&(id, _)| is_input(id));
        assert!(
            is_u32 || !placed.iter().any(|&(id, _)| is_input(id)),
            "read token tensors on their own"
        );
        let places: Vec<_> = placed.into_iter().map(|(_, p)| p).collect();
        let total: u64 = places.iter().map(|p| p.size).sum();
        let (slot, created) = self.staging.acquire(&self.ctx.device, total);
        self.buffers_created += created as usize;
        let staging = self.staging.buffer(slot);
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tinygpt:readbacks"),
            });
        let mut at = 0;
        for p in &places {
            encoder.copy_buffer_to_buffer(&self.buffers[p.buffer], p.offset, staging, at, p.size);
            at += p.size;
        }
        self.ctx.queue.submit([encoder.finish()]);
        let state = readback::start_map(staging, total);
        Ok(readback::ReadbackHandle {
            slot,
            size: total,
            is_u32,
            timed: false,
            state,
        })
    }

    /// The data of a readback if it has arrived, else the handle back.
    pub fn try_take(
        &mut self,
        handle: readback::ReadbackHandle,
    ) -> Result<Vec<f32>, readback::ReadbackHandle> {
        let is_u32 = handle.is_u32;
        self.try_take_mapped(handle, |bytes| {
            if is_u32 {
                bytemuck::pod_collect_to_vec::<u8, u32>(bytes)
                    .into_iter()
                    .map(|x| x as f32)
                    .collect()
            } else {
                bytemuck::pod_collect_to_vec::<u8, f32>(bytes)
            }
        })
    }

    /// A readback's bytes read by `read` straight out of the mapped range
    /// (one copy), if they have arrived, else the handle back. A lost
    /// device's readback reads no bytes.
    fn try_take_mapped<T>(
        &mut self,
        handle: readback::ReadbackHandle,
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, readback::ReadbackHandle> {
        let taken = handle.state.lock().unwrap().take();
        let Some(result) = taken else {
            return Err(handle);
        };
        let buffer = self.staging.buffer(handle.slot);
        // Mapped just before the device went: its buffers are gone.
        let result = result.and_then(|()| match self.ctx.lost() {
            Some(_) => Err(wgpu::BufferAsyncError),
            None => Ok(()),
        });
        let values = match result {
            Ok(()) => match buffer.slice(0..handle.size).get_mapped_range() {
                Ok(view) => {
                    let values = read(&view);
                    drop(view);
                    buffer.unmap();
                    values
                }
                // Mapped, yet its range cannot be read: as a lost device.
                Err(e) => {
                    buffer.unmap();
                    if let Ok(mut lost) = self.ctx.lost.lock() {
                        lost.get_or_insert_with(|| format!("a readback failed: {e}"));
                    }
                    read(&[])
                }
            },
            // The device was lost; nothing was mapped. (Unmapping resets the
            // buffer's map state, so the slot can be used again.)
            Err(_) => {
                buffer.unmap();
                if let Ok(mut lost) = self.ctx.lost.lock() {
                    lost.get_or_insert_with(|| "a readback failed: the device was lost".into());
                }
                read(&[])
            }
        };
        self.staging.release(handle.slot);
        Ok(values)
    }

    /// Waits for the device to make progress: a blocking poll on a device of
    /// its own; on a shared one a poll that does not wait and a yield
    /// ([`GpuContext::wait_until`]).
    /// `since`: when the wait began (a long wait on a shared device sleeps
    /// between polls instead of spinning a core).
    fn wait_a_little(&self, since: web_time::Instant) {
        let _ = self.ctx.wait_until(|| true);
        if self.ctx.shared {
            context::pause(since);
        }
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
        let id = self
            .program
            .tensor_id(name)
            .ok_or_else(|| BackendError::UnknownTensor(name.to_string()))?;
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
        self.record(
            &mut encoder,
            Clear::all_if(steps.contains(&Step::ZeroGrads)),
            steps.iter().map(|&s| self.dispatches_of(s)),
        );
        self.ctx.queue.submit([encoder.finish()]);
        self.ctx.wait_for_queue();
    }

    /// Runs only the forward ops on a batch in evaluation mode and returns the
    /// mean loss (used by [`Backend::eval_loss`] and the parity tests).
    pub fn forward(&mut self, batch: &Batch, sp: Option<StepParams>) -> f32 {
        self.upload_batch(batch);
        self.write_step_uniform(sp);
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let forward = self
            .steps
            .iter()
            .filter(|(s, _)| matches!(s, Step::Forward(_)));
        self.record(&mut encoder, Clear::None, forward.map(|(_, d)| d.as_slice()));
        self.submit_and_read_stats(encoder)[0]
    }
}

impl<'a> dyn Backend + 'a {
    /// The GPU backend behind this one, for the asynchronous paths (several
    /// steps per submit, readbacks without waiting) that only it has.
    pub fn as_gpu(&mut self) -> Option<&mut GpuBackend> {
        self.as_any_mut().downcast_mut()
    }
}

impl Backend for GpuBackend {
    fn describe(&self) -> String {
        if self.ctx.mixed_precision() {
            format!(
                "gpu ({}), mixed precision: the matmuls on the tensor cores (f16 operands, f32 accumulation, the loss scaled)",
                self.ctx.describe()
            )
        } else {
            format!("gpu ({})", self.ctx.describe())
        }
    }

    fn entry_kernels(&self) -> Vec<Vec<&'static str>> {
        // (`steps` lists the program's entries in order, then its probes.)
        self.steps
            .iter()
            .take(self.program.steps.len())
            .map(|(_, dispatches)| dispatches.iter().map(|d| d.entry).collect())
            .collect()
    }

    fn program(&self) -> &Program {
        &self.program
    }

    fn train_step(&mut self, batch: &Batch, sp: StepParams) -> StepOutcome {
        self.upload_batch(batch);
        self.write_step_uniform(Some(sp));
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tinygpt:train_step"),
            });
        self.record(
            &mut encoder,
            Clear::WholeStep,
            self.steps.iter().map(|(_, d)| d.as_slice()),
        );
        StepOutcome::from_stats(self.submit_and_read_stats(encoder))
    }

    fn eval_loss(&mut self, batch: &Batch) -> f32 {
        self.forward(batch, None)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn load_step(&mut self, batch: &Batch, params: Option<StepParams>) {
        self.upload_batch(batch);
        self.write_step_uniform(params);
    }

    fn run_entries(&mut self, range: std::ops::Range<usize>) {
        let entries = &self.program.steps[range];
        let mut encoder = self
            .ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tinygpt:entries"),
            });
        // The clear goes first in the encoder: fine, since no forward op
        // touches a gradient.
        self.record(
            &mut encoder,
            Clear::all_if(entries.contains(&Step::ZeroGrads)),
            entries.iter().map(|&s| self.dispatches_of(s)),
        );
        self.ctx.queue.submit([encoder.finish()]);
    }

    fn stash_weights(&mut self) {
        let [params, _, m, v] = self.flat;
        let size = self.buffers[params].size();
        if self.stash.is_none() {
            let make = |label: &str| {
                self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            };
            self.stash = Some([
                make("tinygpt:buffer:stash.params"),
                make("tinygpt:buffer:stash.adam.m"),
                make("tinygpt:buffer:stash.adam.v"),
            ]);
            self.buffers_created += 3;
        }
        let stash = self.stash.as_ref().expect("made above");
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        for (from, to) in [params, m, v].into_iter().zip(stash) {
            encoder.copy_buffer_to_buffer(&self.buffers[from], 0, to, 0, size);
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.stashed = true;
    }

    fn restore_weights(&mut self) {
        let Some(stash) = self.stash.as_ref().filter(|_| self.stashed) else {
            return;
        };
        self.stashed = false;
        let [params, _, m, v] = self.flat;
        let size = self.buffers[params].size();
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        for (from, to) in stash.iter().zip([params, m, v]) {
            encoder.copy_buffer_to_buffer(from, 0, &self.buffers[to], 0, size);
        }
        self.ctx.queue.submit([encoder.finish()]);
    }

    fn discard_stash(&mut self) {
        self.stashed = false;
    }

    fn start_reads(&mut self, names: &[&str]) -> Result<PendingRead, BackendError> {
        if names.is_empty() {
            return Ok(PendingRead::Ready(Vec::new()));
        }
        self.request_reads(names).map(PendingRead::Gpu)
    }

    fn try_take_reads(&mut self, read: PendingRead) -> Result<Vec<f32>, PendingRead> {
        match read {
            PendingRead::Ready(values) => Ok(values),
            PendingRead::Gpu(handle) => self.try_take(handle).map_err(PendingRead::Gpu),
        }
    }

    fn poll(&mut self) {
        GpuBackend::poll(self);
    }

    fn wait(&mut self, since: web_time::Instant) {
        self.wait_a_little(since);
    }

    fn clips_in_place(&self) -> bool {
        false
    }

    fn start_flash_trace(
        &mut self,
        request: &crate::flash::format::FlashRequest,
    ) -> Option<Result<PendingRead, BackendError>> {
        Some(self.submit_flash_trace(request).map(PendingRead::Gpu))
    }

    /// Blocking: the convenience for the CLI and tests (not for a browser,
    /// where [`GpuBackend::request_read`] is the way).
    fn probe(&mut self, request: &ProbeRequest) -> Result<ProbeResult, BackendError> {
        let mut handle = self.submit_probe(request)?;
        let since = web_time::Instant::now();
        loop {
            self.wait_a_little(since);
            match self.try_finish_probe(handle) {
                Ok(result) => return result,
                Err(h) => handle = h,
            }
        }
    }

    fn read(&mut self, name: &str) -> Result<Vec<f32>, BackendError> {
        let mut handle = self.request_read(name)?;
        let since = web_time::Instant::now();
        loop {
            self.wait_a_little(since);
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
            return Err(BackendError::WrongSize {
                name: name.to_string(),
                expected,
                got: values.len(),
            });
        }
        self.ctx.queue.write_buffer(
            &self.buffers[place.buffer],
            place.offset,
            bytemuck::cast_slice(values),
        );
        Ok(())
    }
}

/// Which gradients a recording clears before its pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clear {
    None,
    /// Every gradient: [`Step::ZeroGrads`] run on its own (the step-through,
    /// the per-op tests), so a view sees each gradient start from zero.
    All,
    /// A whole training step: only the gradients some backward op adds to
    /// before any writes them (the others are written outright).
    WholeStep,
}

impl Clear {
    fn all_if(zero_grads: bool) -> Self {
        if zero_grads { Clear::All } else { Clear::None }
    }
}
