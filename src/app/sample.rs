//! Sampling in the app: text generated from the latest weights read back
//! from the training backend, on the CPU with a KV cache (the same
//! [`crate::sample::generate`] as the command line), on Bevy's
//! async-compute pool, so it streams in while training goes on.

use super::training::{Run, Snapshots};
use crate::cpu::generate::Generator;
use crate::sample::{SampleOptions, generate};
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Resource)]
pub struct SampleState {
    pub prompt: String,
    pub options: SampleOptions,
    /// Bytes to generate.
    pub length: usize,
    /// The text so far (the task appends to it).
    pub text: Arc<Mutex<String>>,
    /// The step of the weights the text comes from.
    pub from_step: Option<u64>,
    /// Waiting for weights to sample from.
    pub waiting: bool,
    /// On a fine-tune: sample the frozen base instead of the fine-tuned
    /// model (the A/B switch; the same prompt and seed).
    pub from_base: bool,
    pub error: Option<String>,
    task: Option<Task<()>>,
    cancel: Arc<AtomicBool>,
}

impl Default for SampleState {
    fn default() -> Self {
        Self {
            prompt: "ROMEO:".into(),
            options: SampleOptions::default(),
            length: 300,
            text: Arc::default(),
            from_step: None,
            waiting: false,
            from_base: false,
            error: None,
            task: None,
            cancel: Arc::default(),
        }
    }
}

impl SampleState {
    /// Starts a new sample once weights are at hand (stops one running).
    pub fn start(&mut self) {
        self.error = self.options.validate().err();
        if self.error.is_none() {
            self.stop();
            self.waiting = true;
        }
    }

    pub fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.task = None;
    }

    pub fn running(&self) -> bool {
        self.task.is_some() || self.waiting
    }
}

pub struct SamplePlugin;

impl Plugin for SamplePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<SampleState>().add_systems(
            Update,
            (want_weights, run_sampler).in_set(super::schedule::AppSystems::Scene),
        );
    }
}

/// Sampling reads the weights: every parameter, in every scene.
fn want_weights(run: Option<Res<Run>>, mut wants: ResMut<super::training::TensorWants>) {
    if let Some(run) = run {
        wants.set("sample", super::training::param_names(&run.program));
    }
}

fn run_sampler(
    run: Option<Res<Run>>,
    snapshots: Res<Snapshots>,
    knockouts: Res<super::training::Knockouts>,
    mut state: ResMut<SampleState>,
) {
    if let Some(task) = state.task.as_mut()
        && check_ready(task).is_some()
    {
        state.task = None;
    }
    if !state.waiting {
        return;
    }
    let (Some(run), Some(snapshot)) = (run, &snapshots.latest) else {
        return;
    };
    // While training, the latest weights read back; otherwise wait for the
    // snapshot of the current step (one is already asked for).
    if run.state != super::training::RunState::Training && snapshot.step < run.step() {
        return;
    }
    let Some(mut params) = snapshot.params(&run.program) else {
        return;
    };
    state.waiting = false;
    // Knocked-out parts stay knocked out for sampling.
    if let Err(e) = knockouts.apply(&mut params, run.config()) {
        state.error = Some(format!("cannot sample: {e}"));
        return;
    }
    // A fine-tune samples its merged weights (Generator::new folds the
    // adapters in), or on the A/B switch its base alone.
    let mut config = run.config().clone();
    if state.from_base && config.lora.take().is_some() {
        params.retain(|p| {
            run.program
                .tensor_id(&p.name)
                .is_some_and(|id| run.program.tensors[id].is_frozen())
        });
    }
    let generator = match Generator::new(&config, &params) {
        Ok(g) => g,
        Err(e) => {
            state.error = Some(format!("cannot sample: {e}"));
            return;
        }
    };
    state.from_step = Some(snapshot.step);
    let text = Arc::new(Mutex::new(state.prompt.clone()));
    state.text = text.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    state.cancel = cancel.clone();
    let (prompt, options, length) = (
        state.prompt.clone().into_bytes(),
        state.options,
        state.length,
    );
    state.task = Some(AsyncComputeTaskPool::get().spawn(async move {
        let mut generator = generator;
        let mut pending = Vec::new();
        generate(&mut generator, &prompt, length, &options, |byte| {
            if cancel.load(Ordering::Relaxed) {
                return;
            }
            // Bytes are shown once they form whole UTF-8 characters.
            pending.push(byte);
            if let Ok(s) = std::str::from_utf8(&pending) {
                text.lock().unwrap().push_str(s);
                pending.clear();
            } else if pending.len() >= 4 {
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&pending));
                pending.clear();
            }
        });
        if !pending.is_empty() && !cancel.load(Ordering::Relaxed) {
            text.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&pending));
        }
    }));
}
