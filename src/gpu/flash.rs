//! The GPU's FlashAttention trace ([`crate::flash`]): after the program has
//! run up to the block's attention backward, one batch row of that op's q,
//! k, v and dO is copied aside and the attention kernels run on it again,
//! their traced pipelines (attention.wgsl with `TRACE` = true) recording the
//! chosen head. The same kernels run untraced on the row first, into the
//! same readback, so the decoder checks the traced run against them bit for
//! bit. (These are the 16×16-tile kernels: training's forward is
//! `attention_forward_rows`, the same function by another schedule.)
//!
//! The trace's buffers and traced pipelines are made on the first trace and
//! kept (their sizes depend only on the model); training never builds them.

use super::kernels::ATTENTION_TILE;
use super::{GpuBackend, plan, readback};
use crate::backend::{Backend, BackendError};
use crate::flash::format::{FlashRequest, Parts, attention_tensors, entries_to_attention_backward};

/// The trace's own buffers: one batch row of the op's inputs and outputs.
pub(super) struct FlashBuffers {
    /// (1, T, 3C) q | k | v of the row.
    qkv: wgpu::Buffer,
    /// (1, T, C) the traced output, and dO.
    out: wgpu::Buffer,
    dout: wgpu::Buffer,
    /// (1, H, T) log-sum-exp and delta.
    lse: wgpu::Buffer,
    delta: wgpu::Buffer,
    /// (1, T, 3C) the traced gradient of qkv (cleared before each trace).
    dqkv: wgpu::Buffer,
    /// `AttnParams` of one row.
    params: wgpu::Buffer,
    /// The trace records ([`crate::flash::format::trace_len`] floats).
    trace: wgpu::Buffer,
    /// The traced pipelines, by the entry point they trace.
    traced: std::collections::HashMap<&'static str, wgpu::ComputePipeline>,
}

impl GpuBackend {
    /// Submits a trace of `request` (see [`crate::flash`]) and returns its
    /// readback, laid out as [`Parts`].
    pub fn submit_flash_trace(
        &mut self,
        request: &FlashRequest,
    ) -> Result<readback::ReadbackHandle, BackendError> {
        let entries = entries_to_attention_backward(&self.program, request)
            .map_err(BackendError::BadProbe)?;
        self.load_step(&request.batch, None);
        self.run_entries(entries);
        let cfg = self.program.config.clone();
        let (t, c, h) = (cfg.ctx, cfg.d_model, cfg.n_head);
        let parts = Parts::new(&cfg);
        let (op, [qkv, out, _lse]) = attention_tensors(&self.program, request.layer)
            .expect("entries_to_attention_backward checked the block");
        let crate::program::Op::Attention {
            n_head,
            stream,
            dropout,
            ..
        } = self.program.ops[op].op
        else {
            unreachable!("attention_tensors returns an attention op")
        };
        let grad = |id: usize| {
            self.program.tensors[id]
                .grad
                .expect("activations have gradients")
        };
        let dout_id = grad(out);
        let device = self.ctx.device.clone();
        if self.flash.is_none() {
            let storage = |label: &str, floats: usize| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(&format!("tinygpt:buffer:flash.{label}")),
                    size: (floats.max(4) * 4) as u64,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            };
            self.flash = Some(FlashBuffers {
                qkv: storage("qkv", t * 3 * c),
                out: storage("out", t * c),
                dout: storage("dout", t * c),
                lse: storage("lse", h * t),
                delta: storage("delta", h * t),
                dqkv: storage("dqkv", t * 3 * c),
                params: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tinygpt:buffer:flash.params"),
                    size: 32,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                trace: storage("trace", parts.trace.len()),
                traced: self.kernels.build_traced(),
            });
        }
        let fb = self.flash.as_ref().expect("made above");
        let queue = &self.ctx.queue;
        queue.write_buffer(
            &fb.params,
            0,
            &plan::attn_params(&cfg, 1, n_head, stream, dropout),
        );
        // The trace starts zeroed, naming b·H + h (row 0 of the copy).
        let mut init = vec![0.0f32; parts.trace.len()];
        init[0] = request.head as f32;
        queue.write_buffer(&fb.trace, 0, bytemuck::cast_slice(&init));

        let total = (parts.len * 4) as u64;
        let (slot, created) = self.staging.acquire(&device, total);
        self.buffers_created += created as usize;
        let staging = self.staging.buffer(slot);
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("tinygpt:flash-trace"),
        });
        let row = request.row as u64;
        let place = |id: usize| self.places[id].expect("every tensor is placed");
        let floats = |r: &std::ops::Range<usize>| (r.start * 4) as u64;
        let row_bytes = |r: &std::ops::Range<usize>| (r.len() * 4) as u64;
        // The row of the program's q, k, v and dO: into the trace's inputs
        // and the readback.
        for (id, range, into) in [(qkv, &parts.qkv, &fb.qkv), (dout_id, &parts.dout, &fb.dout)] {
            let p = place(id);
            let size = row_bytes(range);
            let from = &self.buffers[p.buffer];
            let offset = p.offset + row * size;
            encoder.copy_buffer_to_buffer(from, offset, staging, floats(range), size);
            encoder.copy_buffer_to_buffer(from, offset, into, 0, size);
        }
        let layout = self.kernels.layout_of("attention_forward");
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tinygpt:bind:flash-trace"),
            layout,
            entries: &[
                &fb.qkv,
                &fb.out,
                &fb.lse,
                &fb.dout,
                &fb.dqkv,
                &fb.delta,
                &fb.params,
                &self.step_uniform,
                &fb.trace,
            ]
            .iter()
            .enumerate()
            .map(|(binding, buffer)| wgpu::BindGroupEntry {
                binding: binding as u32,
                resource: buffer.as_entire_binding(),
            })
            .collect::<Vec<_>>(),
        });
        // The 16×16-tile kernels twice on the same row: untraced (the
        // reference, into the readback), then traced. (Training's forward is
        // attention_forward_rows; the trace replays the tiled kernels.)
        for traced_run in [false, true] {
            encoder.clear_buffer(&fb.dqkv, 0, None);
            {
                // The traced pipeline where there is one (not the delta kernel).
                let pipeline = |entry: &str| match fb.traced.get(entry) {
                    Some(p) if traced_run => p,
                    _ => self.kernels.pipeline(entry),
                };
                let tiles = [t.div_ceil(ATTENTION_TILE) as u32, n_head as u32, 1];
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("tinygpt:flash-trace"),
                    timestamp_writes: None,
                });
                pass.set_bind_group(0, &bind_group, &[]);
                for (entry, groups) in [
                    ("attention_forward", tiles),
                    ("attention_backward_delta", plan::grid(n_head * t)),
                    ("attention_backward_dkdv", tiles),
                    ("attention_backward_dq", tiles),
                ] {
                    pass.set_pipeline(pipeline(entry));
                    pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
                }
            }
            if !traced_run {
                for (from, range) in [
                    (&fb.out, &parts.ref_out),
                    (&fb.lse, &parts.ref_lse),
                    (&fb.dqkv, &parts.ref_dqkv),
                ] {
                    encoder.copy_buffer_to_buffer(
                        from,
                        0,
                        staging,
                        floats(range),
                        row_bytes(range),
                    );
                }
            }
        }
        for (from, range) in [
            (&fb.trace, &parts.trace),
            (&fb.out, &parts.out),
            (&fb.lse, &parts.lse),
            (&fb.dqkv, &parts.dqkv),
        ] {
            encoder.copy_buffer_to_buffer(from, 0, staging, floats(range), row_bytes(range));
        }
        queue.submit([encoder.finish()]);
        let state = readback::start_map(staging, total);
        Ok(readback::ReadbackHandle {
            slot,
            size: total,
            is_u32: false,
            timed: false,
            state,
        })
    }
}
