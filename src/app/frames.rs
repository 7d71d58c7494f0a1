//! The time-lapse of a run on the GPU, recorded from the frame loop without
//! ever waiting ([`crate::model::timelapse`]): the trainer's submits end at
//! each frame's step and the step before it
//! ([`crate::train::Trainer::submit_gpu_steps`]); behind the step before
//! goes a read of the weights, behind the frame's step the probes of the
//! probe strings and a read of the weights and gradients, each queued
//! behind the steps, so each sees the weights of its step. When they have
//! all come back and the trainer has collected the step, the frame is
//! computed by the same functions as the CPU's ([`crate::train::timelapse`])
//! and joins the run's time-lapse.

use crate::backend::PendingRead;
use crate::gpu::ProbeHandle;
use crate::probe::ProbeResult;
use crate::train::Trainer;
use crate::train::timelapse::{
    frame_from, heads_from, kept_weights, norm_names, norms_from, probe_requests,
};
use std::collections::VecDeque;

/// Whether a GPU run records its frames here: natively and in the browser
/// (WebGPU; the browser test's WebGPU run checks its frames).
const RECORDS: bool = true;

/// A read on its way, or its values.
enum Read {
    Waiting(PendingRead),
    Done(Vec<f32>),
}

/// One frame's reads, queued behind its step.
struct Recording {
    step: u64,
    /// The trainer's epoch when queued (a return to a last good step
    /// makes the weights read those of no step of the run).
    epoch: u64,
    sequences: Vec<Vec<u8>>,
    probes: Vec<Result<ProbeResult, ProbeHandle>>,
    /// The weights (and, after step 0, the gradients) of the step.
    values: Read,
    /// The weights before the step, when they were read.
    before: Option<Read>,
}

/// The frames a GPU engine is recording.
#[derive(Default)]
pub struct GpuFrames {
    /// The weights before the next frame's step: (that step, epoch, read).
    before: Option<(u64, u64, Read)>,
    queued: VecDeque<Recording>,
}

// SAFETY: as the engine's ([`crate::app::engine::Engine`]): in the browser
// the app has one thread and nothing is sent; wgpu just does not mark its
// handles `Send` there.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Send for GpuFrames {}
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl Sync for GpuFrames {}

impl GpuFrames {
    /// Whether steps may be submitted: a run with a time-lapse waits for
    /// the probes' own kernel, warmed first (compiling it in a submit would
    /// hold a frame).
    pub fn ready(trainer: &mut Trainer) -> bool {
        !RECORDS
            || trainer.timelapse.is_none()
            || trainer
                .backend
                .as_gpu()
                .is_some_and(|g| g.probe_kernels_warm())
    }

    /// Queues, behind the steps submitted so far, what the time-lapse needs
    /// there: the weights before a frame's step, or the frame's probes and
    /// reads. An error is the device's.
    pub fn after_submit(&mut self, trainer: &mut Trainer) -> Result<(), String> {
        if !RECORDS {
            return Ok(());
        }
        let at = trainer.submitted();
        let epoch = trainer.epoch();
        let Some(sequences) = trainer.timelapse.as_ref().map(|t| t.probe.clone()) else {
            return Ok(());
        };
        let program = trainer.backend.program().clone();
        let queued = self.queued.iter().any(|r| r.step == at && r.epoch == epoch);
        // The frame of the step just submitted first: it takes the weights
        // read before that step.
        if trainer.frame_due(at) && !queued {
            self.queue_frame(trainer, at, epoch, sequences)?;
        }
        let due_next = trainer.frame_due(at + 1)
            && self.before.as_ref().is_none_or(|(s, e, _)| (*s, *e) != (at + 1, epoch));
        if due_next {
            let names = norm_names(&program, false);
            if !names.is_empty() {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let read = trainer
                    .backend
                    .start_reads(&refs)
                    .map_err(|e| e.to_string())?;
                self.before = Some((at + 1, epoch, Read::Waiting(read)));
            }
        }
        Ok(())
    }

    /// Queues the probes and reads of the frame of step `at`.
    fn queue_frame(
        &mut self,
        trainer: &mut Trainer,
        at: u64,
        epoch: u64,
        sequences: Vec<Vec<u8>>,
    ) -> Result<(), String> {
        let program = trainer.backend.program().clone();
        let requests = probe_requests(&program.config, &sequences)?;
        let gpu = trainer.backend.as_gpu().ok_or("the GPU engine's backend")?;
        let mut probes = Vec::with_capacity(requests.len());
        for r in &requests {
            probes.push(Err(gpu.submit_probe(r).map_err(|e| e.to_string())?));
        }
        let names = norm_names(&program, at > 0);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let values = trainer
            .backend
            .start_reads(&refs)
            .map_err(|e| e.to_string())?;
        let before = self
            .before
            .take_if(|(s, e, _)| (*s, *e) == (at, epoch))
            .map(|(_, _, read)| read);
        self.queued.push_back(Recording {
            step: at,
            epoch,
            sequences,
            probes,
            values: Read::Waiting(values),
            before,
        });
        Ok(())
    }

    /// Takes what has come back; a frame whose reads are all in and whose
    /// step the trainer has collected joins its time-lapse. Whether one did.
    pub fn collect(&mut self, trainer: &mut Trainer) -> bool {
        let epoch = trainer.epoch();
        self.queued.retain(|r| r.epoch == epoch);
        self.before.take_if(|(_, e, _)| *e != epoch);
        let mut added = false;
        let take = |trainer: &mut Trainer, read: &mut Read| {
            if matches!(read, Read::Waiting(_)) {
                let Read::Waiting(pending) = std::mem::replace(read, Read::Done(vec![])) else {
                    unreachable!("matched")
                };
                *read = match trainer.backend.try_take_reads(pending) {
                    Ok(values) => Read::Done(values),
                    Err(pending) => Read::Waiting(pending),
                };
            }
            matches!(read, Read::Done(_))
        };
        if let Some((_, _, read)) = &mut self.before {
            take(trainer, read);
        }
        while let Some(r) = self.queued.front_mut() {
            let mut lost = false;
            if let Some(gpu) = trainer.backend.as_gpu() {
                // Only the probes still out: one that came back at an
                // earlier poll keeps its result.
                for probe in r.probes.iter_mut().filter(|p| p.is_err()) {
                    let Err(handle) = std::mem::replace(probe, Ok(empty_result())) else {
                        unreachable!("filtered")
                    };
                    *probe = match gpu.try_finish_probe(handle) {
                        Ok(Ok(result)) => Ok(result),
                        Ok(Err(_)) => {
                            lost = true;
                            Ok(empty_result())
                        }
                        Err(handle) => Err(handle),
                    };
                }
            }
            let values_in = take(trainer, &mut r.values);
            let before_in = match &mut r.before {
                Some(read) => take(trainer, read),
                None => true,
            };
            if lost {
                self.queued.pop_front();
                continue;
            }
            let probes_in = r.probes.iter().all(Result::is_ok);
            if !(probes_in && values_in && before_in) || trainer.step < r.step {
                break;
            }
            let r = self.queued.pop_front().expect("looked at");
            let results: Vec<ProbeResult> = r.probes.into_iter().map(|p| p.ok().expect("in")).collect();
            let config = &trainer.config;
            let probe = heads_from(&r.sequences, &results, config.n_layer, config.n_head);
            let Read::Done(values) = r.values else {
                unreachable!("checked above")
            };
            let before = match r.before {
                Some(Read::Done(b)) => Some(b),
                _ => None,
            };
            let tensors = if values.is_empty() {
                vec![]
            } else {
                norms_from(
                    trainer.backend.program(),
                    &values,
                    r.step > 0,
                    before.as_deref(),
                )
            };
            let weights = kept_weights(trainer.backend.program(), &values);
            let (loss, val_loss) = trainer.losses_at(r.step);
            trainer.push_frame(frame_from(r.step, loss, val_loss, probe, tensors, weights));
            added = true;
        }
        added
    }
}

/// A placeholder for a probe's handle while it is polled (put back as
/// the handle, or replaced by the result), or for a lost probe's result.
fn empty_result() -> ProbeResult {
    ProbeResult {
        window: crate::probe::ProbeWindow { row: 0, n: 0 },
        tokens: vec![],
        n_head: 0,
        blocks: vec![],
        probs: vec![],
        logits: vec![],
    }
}
