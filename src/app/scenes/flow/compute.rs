//! The flow behind the picture, computed off the frame: the program's
//! forward pass of the prompt ([`crate::flow::run`]) and the backward pass
//! of the chosen position's loss ([`crate::flow::backward`], the
//! step-through's entries), on a worker of the async-compute pool, from the
//! run's latest weights. Asked again when the prompt or position changes,
//! and while the run trains at most once a second (so training keeps its
//! speed).

use crate::backend::{Backend, StepParams};
use crate::cpu::CpuBackend;
use crate::flow::Flow;
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use crate::program::Program;
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use web_time::Instant;

/// What one computation was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRequest {
    pub prompt: Vec<u8>,
    /// None: the last byte.
    pub position: Option<usize>,
    /// The weights' step.
    pub step: u64,
    /// The parts knocked out (the flow is of the model without them).
    pub knockouts: Vec<crate::interventions::Part>,
    /// AdamW's moments were read back (the backward pass then ends with
    /// its update; they arrive a snapshot after the weights).
    pub with_optimizer: bool,
}

/// A finished flow: its forward pass, its backward pass (the target and
/// whether the target is the byte that follows in the prompt), and the
/// weights' step.
#[derive(Clone, Debug)]
pub struct Computed {
    pub flow: Flow,
    pub step: u64,
    /// The target follows the position in the prompt (else it is the
    /// model's own top guess, at the prompt's last byte).
    pub target_in_prompt: bool,
}

/// The worker and its results.
#[derive(Resource, Default)]
pub struct FlowCompute {
    task: Option<Task<Result<Computed, String>>>,
    /// What the task in flight (or the last) was asked.
    asked: Option<FlowRequest>,
    started: Option<Instant>,
    /// The latest result, and how many have arrived (the picture rebuilds
    /// when it changes).
    pub latest: Option<Computed>,
    pub generation: u64,
    pub error: Option<String>,
}

impl FlowCompute {
    /// Starts a computation unless one is in flight, the same was asked
    /// last, or (only the weights changed) it is under a second since the
    /// last.
    /// `optimizer`: the run's AdamW moments and the step parameters of its
    /// next step, when read back (the backward pass then ends with AdamW's
    /// update of each weight).
    pub fn ask(
        &mut self,
        ask: FlowRequest,
        config: &Config,
        params: Vec<NamedTensor>,
        optimizer: Option<(Vec<NamedTensor>, StepParams)>,
    ) {
        if self.task.is_some() || self.asked.as_ref() == Some(&ask) {
            return;
        }
        let only_weights = self.asked.as_ref().is_some_and(|a| {
            a.prompt == ask.prompt && a.position == ask.position && a.knockouts == ask.knockouts
        });
        if only_weights
            && self
                .started
                .is_some_and(|t| t.elapsed().as_secs_f64() < 1.0)
        {
            return;
        }
        let config = crate::flow::config_for(config);
        let FlowRequest {
            prompt,
            position,
            step,
            ..
        } = ask.clone();
        self.asked = Some(ask);
        self.started = Some(Instant::now());
        self.task =
            Some(AsyncComputeTaskPool::get().spawn(async move {
                compute(&config, &params, &prompt, position, step, optimizer)
            }));
    }

    /// Takes a finished result.
    pub fn poll(&mut self) {
        let Some(task) = self.task.as_mut() else {
            return;
        };
        let Some(result) = check_ready(task) else {
            return;
        };
        self.task = None;
        match result {
            Ok(c) => {
                self.latest = Some(c);
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
        self.generation += 1;
    }

    /// Forgets what was asked (a new run: ask again at once).
    pub fn reset(&mut self) {
        self.asked = None;
        self.started = None;
    }
}

/// The forward pass of `prompt` at `position`, then the backward pass of
/// the loss of the byte that follows it (at the last byte, the model's own
/// top guess), on the CPU backend.
pub fn compute(
    config: &Config,
    params: &[NamedTensor],
    prompt: &[u8],
    position: Option<usize>,
    step: u64,
    optimizer: Option<(Vec<NamedTensor>, StepParams)>,
) -> Result<Computed, String> {
    let mut backend = CpuBackend::<f32>::new(Program::new(config));
    for p in params {
        backend
            .write(&p.name, &p.values)
            .map_err(|e| e.to_string())?;
    }
    let mut flow = crate::flow::run(&mut backend, params, prompt, position)?;
    let next = flow.tokens.get(flow.position + 1).copied();
    let target = next.unwrap_or_else(|| crate::flow::top5(&flow.probs)[0].byte);
    crate::flow::backward(&mut backend, &mut flow, target)?;
    if let Some((moments, step_params)) = optimizer {
        crate::flow::adamw(&mut backend, &mut flow, &moments, step_params)?;
    }
    Ok(Computed {
        flow,
        step,
        target_in_prompt: next.is_some(),
    })
}
