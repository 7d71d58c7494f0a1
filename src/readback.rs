//! Asynchronous readback of any tensor: a copy into a pooled staging buffer,
//! `map_async`, and a handle that is ready once the GPU is done. Nothing here
//! waits, so it works in a browser (where `map_async` completes only after
//! control returns to the page) and never stalls a frame; the caller (Bevy's
//! render loop, or [`crate::gpu::GpuBackend::poll`]) drives the device.

use std::sync::{Arc, Mutex};

type MapState = Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>>;

/// A readback in flight; give it back to [`crate::gpu::GpuBackend::try_take`].
#[must_use = "a readback holds a staging buffer until it is taken"]
pub struct ReadbackHandle {
    pub(crate) slot: usize,
    pub(crate) size: u64,
    pub(crate) is_u32: bool,
    /// Training steps' stats followed by their timestamps
    /// ([`crate::gpu::GpuBackend::time_steps`]).
    pub(crate) timed: bool,
    pub(crate) state: MapState,
}

impl ReadbackHandle {
    /// Whether the data has arrived (then `try_take` returns it).
    pub fn is_ready(&self) -> bool {
        self.state.lock().unwrap().is_some()
    }
}

/// Staging buffers for readbacks, reused: one is created only when every
/// buffer large enough is busy.
#[derive(Default)]
pub(crate) struct StagingPool {
    slots: Vec<(wgpu::Buffer, bool)>,
}

impl StagingPool {
    /// A free buffer of at least `size` bytes, creating one if none is free
    /// (the bool says whether it was created).
    pub(crate) fn acquire(&mut self, device: &wgpu::Device, size: u64) -> (usize, bool) {
        if let Some(i) = self
            .slots
            .iter()
            .position(|(b, busy)| !busy && b.size() >= size)
        {
            self.slots[i].1 = true;
            return (i, false);
        }
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tinygpt:buffer:readback"),
            size: size.max(16).next_multiple_of(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.slots.push((buffer, true));
        (self.slots.len() - 1, true)
    }

    pub(crate) fn buffer(&self, slot: usize) -> &wgpu::Buffer {
        &self.slots[slot].0
    }

    pub(crate) fn release(&mut self, slot: usize) {
        self.slots[slot].1 = false;
    }
}

/// Starts mapping `size` bytes of `buffer`; the returned state fills in when
/// the GPU is done.
pub(crate) fn start_map(buffer: &wgpu::Buffer, size: u64) -> MapState {
    let state: MapState = Arc::default();
    let flag = state.clone();
    buffer
        .slice(0..size)
        .map_async(wgpu::MapMode::Read, move |r| {
            *flag.lock().unwrap() = Some(r)
        });
    state
}

/// A future that is pending once, asking to be polled again: lets
/// [`crate::gpu::GpuBackend::read_async`] hand control back between device polls.
pub(crate) struct YieldNow(pub(crate) bool);

impl std::future::Future for YieldNow {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}
