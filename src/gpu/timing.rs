//! GPU timestamps without waiting: around each training pass of a submit
//! ([`StepTimer`], the page's bench), and around every dispatch of one step
//! ([`ProfileHandle`], the kernel view). Both resolve their queries into a
//! staging buffer that is mapped asynchronously, so a browser's one thread
//! never waits for them; natively [`super::GpuBackend::profile_step`] waits.

use super::readback::{self, ReadbackHandle};
use super::{GpuBackend, StepParams};
use crate::data::Batch;

/// A query set with two timestamps per training pass, and the buffer its
/// queries resolve into; grown when a bigger submit comes.
#[derive(Default)]
pub(super) struct StepTimer {
    queries: Option<wgpu::QuerySet>,
    resolve: Option<wgpu::Buffer>,
    /// Passes it has room for.
    capacity: usize,
}

impl StepTimer {
    /// Room for `passes` passes; true when it had to create its buffers.
    pub(super) fn reserve(&mut self, device: &wgpu::Device, passes: usize) -> bool {
        if passes <= self.capacity {
            return false;
        }
        let capacity = passes.next_power_of_two();
        self.queries = Some(device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("tinygpt:step_timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * capacity as u32,
        }));
        self.resolve = Some(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tinygpt:buffer:step_timestamps"),
            size: 16 * capacity as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }));
        self.capacity = capacity;
        true
    }

    /// The timestamps of pass `i`: its beginning and its end.
    pub(super) fn writes(&self, i: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: self.queries.as_ref().expect("reserved before the passes"),
            beginning_of_pass_write_index: Some(2 * i as u32),
            end_of_pass_write_index: Some(2 * i as u32 + 1),
        }
    }

    /// Resolves the first `passes` passes' timestamps (2 × u64 each) into
    /// `staging` at `offset`.
    pub(super) fn resolve(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        passes: usize,
        staging: &wgpu::Buffer,
        offset: u64,
    ) {
        let (queries, resolve) = (
            self.queries.as_ref().expect("reserved before the passes"),
            self.resolve.as_ref().expect("reserved before the passes"),
        );
        encoder.resolve_query_set(queries, 0..2 * passes as u32, resolve, 0);
        encoder.copy_buffer_to_buffer(resolve, 0, staging, offset, 16 * passes as u64);
    }
}

/// One step timed dispatch by dispatch, submitted and not yet read: take it
/// with [`GpuBackend::try_finish_profile`].
#[must_use = "a profile holds a staging buffer until it is taken"]
pub struct ProfileHandle {
    readback: ReadbackHandle,
    /// (the program step's op family, the kernel's entry point), in order.
    labels: Vec<(String, &'static str)>,
    /// Kept alive until the timestamps are read.
    _queries: wgpu::QuerySet,
    _resolve: wgpu::Buffer,
}

impl ProfileHandle {
    /// Whether the timestamps have arrived.
    pub fn is_ready(&self) -> bool {
        self.readback.is_ready()
    }
}

impl GpuBackend {
    /// Submits one training step on `batch` with every dispatch in a compute
    /// pass of its own between two timestamps (so the total exceeds a normal
    /// step's), without waiting. None when the adapter has no timestamp
    /// queries.
    pub fn submit_profile(&mut self, batch: &Batch, sp: StepParams) -> Option<ProfileHandle> {
        if !self.ctx.has_timestamps() {
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
        let size = (16 * n) as u64;
        let (slot, created) = self.staging.acquire(&self.ctx.device, size);
        self.buffers_created += created as usize;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        for &buf in &self.grad_buffers {
            encoder.clear_buffer(&self.buffers[buf], 0, None);
        }
        let mut labels = Vec::new();
        let mut q = 0u32;
        for (step, dispatches) in &self.steps {
            let label = self.program.family(*step);
            for d in dispatches {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &queries,
                        beginning_of_pass_write_index: Some(q),
                        end_of_pass_write_index: Some(q + 1),
                    }),
                });
                pass.set_pipeline(self.kernels.pipeline(d.entry));
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
                drop(pass);
                labels.push((label.clone(), d.entry));
                q += 2;
            }
        }
        encoder.resolve_query_set(&queries, 0..q, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, self.staging.buffer(slot), 0, size);
        self.ctx.queue.submit([encoder.finish()]);
        let state = readback::start_map(self.staging.buffer(slot), size);
        Some(ProfileHandle {
            readback: ReadbackHandle {
                slot,
                size,
                is_u32: false,
                timed: false,
                state,
            },
            labels,
            _queries: queries,
            _resolve: resolve,
        })
    }

    /// A submitted profile's (op family, entry point, nanoseconds) per
    /// dispatch, in order, once its timestamps have arrived (else the handle
    /// back). A lost device's profile is empty.
    #[allow(clippy::result_large_err)] // the handle comes back whole, to try again
    pub fn try_finish_profile(
        &mut self,
        handle: ProfileHandle,
    ) -> Result<Vec<(String, &'static str, f64)>, ProfileHandle> {
        let ProfileHandle {
            readback,
            labels,
            _queries,
            _resolve,
        } = handle;
        let taken = self.try_take_mapped(readback, bytemuck::pod_collect_to_vec::<u8, u64>);
        let ticks = match taken {
            Ok(ticks) => ticks,
            Err(readback) => {
                return Err(ProfileHandle {
                    readback,
                    labels,
                    _queries,
                    _resolve,
                });
            }
        };
        let period = self.ctx.queue.get_timestamp_period() as f64;
        Ok(labels
            .into_iter()
            .zip(ticks.chunks_exact(2))
            .map(|((label, entry), t)| (label, entry, t[1].saturating_sub(t[0]) as f64 * period))
            .collect())
    }

    /// Times every dispatch of one training step with GPU timestamps,
    /// waiting for them: [`GpuBackend::submit_profile`] then
    /// [`GpuBackend::try_finish_profile`]. None when the adapter has no
    /// timestamp queries or the device was lost.
    pub fn profile_step(
        &mut self,
        batch: &Batch,
        sp: StepParams,
    ) -> Option<Vec<(String, &'static str, f64)>> {
        let mut handle = self.submit_profile(batch, sp)?;
        loop {
            if self.ctx.wait_until(|| handle.is_ready()).is_err() {
                return None;
            }
            match self.try_finish_profile(handle) {
                Ok(rows) => return Some(rows).filter(|r| !r.is_empty()),
                Err(h) => handle = h,
            }
        }
    }
}
