//! One throttled worker for the scenes that ask questions of the run's
//! model (the flow of Inside the model, the tools of Take it apart): one
//! question in flight at a time, a repeated question skipped, and at most
//! one a second while only the weights change (so training keeps its
//! speed). The question runs off the frame on a worker of the
//! async-compute pool, through the program itself on a batch-1 backend of
//! the run's kind: the run's own GPU device natively when the run trains
//! there (its blocking reads are the worker's to wait for), else the CPU
//! (in a browser always: the page's one thread cannot wait for a GPU read).
//! The backend is built once and kept between questions (a GPU backend
//! compiles its kernels when built).

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::model::config::Config;
use crate::program::Program;
use bevy::platform::cell::SyncCell;
use bevy::tasks::{AsyncComputeTaskPool, ConditionalSend, Task, futures::check_ready};
use web_time::Instant;

/// Seconds between questions that differ only in their weights.
pub const WEIGHTS_INTERVAL_S: f64 = 1.0;

/// A question a scene asks its [`ModelWorker`].
pub trait ModelQuestion: Clone + PartialEq + ConditionalSend + 'static {
    /// The same question of other weights (asked again at most once a
    /// [`WEIGHTS_INTERVAL_S`]).
    fn same_but_weights(&self, other: &Self) -> bool;
}

/// Where the worker computes.
#[derive(Clone)]
pub enum Device {
    Cpu,
    /// The run's GPU device (natively).
    Gpu(crate::gpu::GpuContext),
}

impl Device {
    /// The run's kind: its GPU device where it trains on one and a worker
    /// may wait for the GPU (natively), else the CPU.
    /// `TINYGPT_SCENE_DEVICE=cpu` keeps the questions on the CPU (the
    /// measured trade-off is in docs/performance.md).
    pub fn of_run(on_gpu: bool, gpu: &crate::app::training::GpuDevice) -> Device {
        let cpu_asked = std::env::var("TINYGPT_SCENE_DEVICE").is_ok_and(|v| v == "cpu");
        match (
            &gpu.context,
            on_gpu && !cpu_asked && !cfg!(target_arch = "wasm32"),
        ) {
            (Some(ctx), true) => Device::Gpu(ctx.clone()),
            _ => Device::Cpu,
        }
    }

    fn is_gpu(&self) -> bool {
        matches!(self, Device::Gpu(_))
    }
}

/// The batch-1 backend kept between questions, and what it was built for.
struct Kept {
    config: Config,
    gpu: bool,
    backend: Box<dyn Backend>,
    /// What it is, for the scenes' status lines (`gpu (NVIDIA …)`, or the
    /// CPU with why the GPU could not).
    label: String,
}

/// An answer: its question, the value, and the backend that computed it.
pub struct Answered<Q, T> {
    pub question: Q,
    pub value: T,
    /// The backend's label, as the status lines show it (localized).
    pub backend: String,
    /// `gpu` or `cpu`: where it was computed (the reports' `device`).
    pub device: &'static str,
}

/// What a task hands back: the question, its answer or why not, the
/// backend's label, and the backend to keep.
type Finished<Q, T> = (Q, Result<T, String>, String, Kept);

/// The worker: the question in flight, and the latest answer.
pub struct ModelWorker<Q: ModelQuestion, T> {
    task: Option<Task<Finished<Q, T>>>,
    asked: Option<Q>,
    started: Option<Instant>,
    /// (In a cell: a resource is shared between threads, a backend only
    /// sent.)
    kept: Option<SyncCell<Kept>>,
    /// The latest answer that succeeded (a picture keeps showing it while
    /// a later question fails).
    pub latest: Option<Answered<Q, T>>,
    /// Why the latest question could not be answered, and the question;
    /// cleared by the next answer.
    pub error: Option<(Q, String)>,
    /// Counts the questions finished (a picture rebuilds when it changes).
    pub generation: u64,
}

// SAFETY: in the browser (wasm32 without atomics) the app has one thread,
// so nothing is ever sent or shared between threads; a backend there is
// not `Send` (wgpu does not mark its handles so), and Bevy's resources must
// be. Natively the worker is `Send + Sync` on its own (a backend is `Send`
// and sits in a `SyncCell`) and this does not apply. As for the engine.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl<Q: ModelQuestion, T> Send for ModelWorker<Q, T> {}
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl<Q: ModelQuestion, T> Sync for ModelWorker<Q, T> {}

impl<Q: ModelQuestion, T> Default for ModelWorker<Q, T> {
    fn default() -> Self {
        Self {
            task: None,
            asked: None,
            started: None,
            kept: None,
            latest: None,
            error: None,
            generation: 0,
        }
    }
}

impl<Q: ModelQuestion, T: ConditionalSend + 'static> ModelWorker<Q, T> {
    /// Starts `work` on `question` unless a question is in flight, the same
    /// was asked last, or only the weights changed under
    /// [`WEIGHTS_INTERVAL_S`] ago. `work` gets a batch-1 backend of
    /// `config` on `device` (the weights are its to write).
    pub fn ask<F>(&mut self, question: Q, config: &Config, device: Device, work: F)
    where
        F: FnOnce(&mut dyn Backend, &Q) -> Result<T, String> + ConditionalSend + 'static,
    {
        if !self.would_start(&question) {
            return;
        }
        let config = crate::flow::config_for(config);
        let kept = self
            .kept
            .take()
            .map(SyncCell::to_inner)
            .filter(|k| k.config == config && k.gpu == device.is_gpu());
        self.asked = Some(question.clone());
        self.started = Some(Instant::now());
        self.task = Some(AsyncComputeTaskPool::get().spawn(async move {
            let mut kept = kept.unwrap_or_else(|| build(config, device));
            let answer = work(kept.backend.as_mut(), &question);
            let label = kept.label.clone();
            (question, answer, label, kept)
        }));
    }

    /// Whether [`Self::ask`] would start `question` now: nothing in flight,
    /// not the question asked last, and not only other weights under
    /// [`WEIGHTS_INTERVAL_S`] after the last. A scene asks this before it
    /// copies the weights out of the snapshot for the question, a copy
    /// that at nanogpt-char's size (10.8 M parameters) would take part of
    /// every frame.
    pub fn would_start(&self, question: &Q) -> bool {
        if self.task.is_some() || self.asked.as_ref() == Some(question) {
            return false;
        }
        let only_weights = self
            .asked
            .as_ref()
            .is_some_and(|a| a.same_but_weights(question));
        !(only_weights
            && self
                .started
                .is_some_and(|t| t.elapsed().as_secs_f64() < WEIGHTS_INTERVAL_S))
    }

    /// Takes a finished answer (call once a frame).
    pub fn poll(&mut self) {
        let Some(task) = self.task.as_mut() else {
            return;
        };
        let Some((question, answer, backend, mut kept)) = check_ready(task) else {
            return;
        };
        self.task = None;
        let device = if kept.backend.as_gpu().is_some() {
            "gpu"
        } else {
            "cpu"
        };
        self.kept = Some(SyncCell::new(kept));
        match answer {
            Ok(value) => {
                self.latest = Some(Answered {
                    question,
                    value,
                    backend,
                    device,
                });
                self.error = None;
            }
            Err(e) => self.error = Some((question, e)),
        }
        self.generation += 1;
    }

    /// The latest question finished, and its outcome: the answer, or why
    /// there is none.
    pub fn last(&self) -> Option<(&Q, Result<&T, &str>)> {
        match (&self.error, &self.latest) {
            (Some((q, e)), _) => Some((q, Err(e.as_str()))),
            (None, Some(a)) => Some((&a.question, Ok(&a.value))),
            (None, None) => None,
        }
    }

    /// Why the latest question could not be answered, if it could not.
    pub fn error_message(&self) -> Option<&str> {
        self.error.as_ref().map(|(_, e)| e.as_str())
    }

    /// Forgets what was asked and the backend (a new run: ask again at
    /// once, on a backend of its own).
    pub fn reset(&mut self) {
        self.asked = None;
        self.started = None;
        self.kept = None;
    }
}

/// A batch-1 backend of `config` on `device`; on the CPU with the reason
/// where the GPU cannot build one.
fn build(config: Config, device: Device) -> Kept {
    let program = Program::new(&config);
    let cpu = |program: Program, why: Option<String>| {
        let backend = CpuBackend::<f32>::new(program);
        let label = match why {
            None => crate::t!("worker-cpu"),
            Some(why) => crate::t!("worker-cpu-because", why = why),
        };
        (Box::new(backend) as Box<dyn Backend>, label)
    };
    let (backend, label) = match &device {
        Device::Cpu => cpu(program, None),
        Device::Gpu(ctx) => match crate::gpu::GpuBackend::new(ctx.clone(), program.clone()) {
            Ok(b) => {
                let label = crate::t!("worker-gpu", name = ctx.info.name.as_str());
                (Box::new(b) as Box<dyn Backend>, label)
            }
            Err(e) => cpu(program, Some(e.to_string())),
        },
    };
    Kept {
        config,
        gpu: device.is_gpu(),
        backend,
        label,
    }
}
