//! FlashAttention-2's tiling, replayed from the real kernels: what the Flash
//! scene animates and `tinygpt flash-trace --json` prints.
//!
//! A [`FlashRequest`] names a batch, a row, a transformer block and a head.
//! The backend runs the program's step on that batch in evaluation mode up to
//! and including the block's attention backward (so q, k, v, the output, the
//! saved log-sum-exp and the upstream gradient dO are the model's own), then
//! traces the attention of the chosen (row, head):
//! - the GPU dispatches attention.wgsl's traced pipelines (the override
//!   `TRACE` = true) on a copy of the row; each workgroup records every visit
//!   of its tile to a block of the other side and every block causality skips;
//! - the CPU runs [`model_head`], a CPU model of the same loops with the same
//!   tile ([`ATTENTION_TILE`], which the kernel registry templates into
//!   attention.wgsl), writing the same records.
//!
//! [`format`] is the trace's layout, which both backends write (it sits with
//! the backend interface, below them); the rest of this folder drives a
//! backend and reads what it wrote.
//!
//! Both come back as one flat list of floats ([`Parts`] says where each part
//! lies) that [`FlashTrace::decode`] turns into visits, the head's tensors,
//! a naive f64 attention of the same q, k, v and dO to compare with, and the
//! memory and traffic figures of the run.

mod decode;
mod model;

pub use decode::{Counts, FlashTrace, Memory, Naive, Summary, TraceSource, Traffic, Visit};
pub use model::{HeadDims, HeadOutputs, cpu_model, model_head};

pub mod format;

pub use format::*;

use crate::backend::{Backend, BackendError, PendingRead};

/// Starts a trace on any backend: the GPU's traced kernels, or the CPU model.
pub fn start(
    backend: &mut dyn Backend,
    request: &FlashRequest,
) -> Result<PendingRead, BackendError> {
    match backend.start_flash_trace(request) {
        Some(started) => started,
        None => cpu_model(backend, request).map(PendingRead::Ready),
    }
}

/// Runs a trace and waits for it (the CLI and the tests).
pub fn trace_blocking(
    backend: &mut dyn Backend,
    request: &FlashRequest,
) -> Result<FlashTrace, BackendError> {
    let source = if backend.as_gpu().is_some() {
        TraceSource::Kernel
    } else {
        TraceSource::CpuModel
    };
    let mut pending = start(backend, request)?;
    let flat = loop {
        match backend.try_take_reads(pending) {
            Ok(values) => break values,
            Err(p) => {
                pending = p;
                backend.poll();
                std::thread::yield_now();
            }
        }
    };
    FlashTrace::decode(&backend.program().config, request, source, &flat)
        .ok_or(BackendError::DeviceLost)
}

/// Bytes for people: `1.5 MB`, `24 KB`, `512 B` (powers of 1024).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut x = n as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if x < 10.0 {
        format!("{x:.1} {}", UNITS[unit])
    } else {
        format!("{x:.0} {}", UNITS[unit])
    }
}

/// What a view asks to trace, before it is a request: a run turns it into
/// one with [`FlashWant::request`] (a prompt, or a row of its next batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashWant {
    pub source: crate::probe::ProbeSource,
    pub layer: usize,
    pub head: usize,
}

impl FlashWant {
    /// The request on `trainer`'s model and next batch.
    pub fn request(&self, trainer: &crate::train::Trainer) -> Result<FlashRequest, String> {
        let probe = trainer.probe_request(&self.source)?;
        let request = FlashRequest::from_probe(probe, self.layer, self.head);
        request.check(&trainer.config)?;
        Ok(request)
    }
}
