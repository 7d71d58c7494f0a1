//! The flow behind the picture, computed off the frame: the program's
//! forward pass of the prompt ([`crate::flow::run`]) and the backward pass
//! of the chosen position's loss ([`crate::flow::backward`], the
//! step-through's entries), on the scenes' model worker
//! ([`crate::app::worker`]: the run's GPU or the CPU), from the run's
//! latest weights. Asked again when the prompt or position changes, and
//! while the run trains at most once a second (so training keeps its
//! speed).

use crate::app::worker::{Device, ModelWorker};
use crate::backend::{Backend, StepParams};
use crate::flow::Flow;
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use crate::worked::Worked;
use bevy::prelude::*;

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

impl crate::app::worker::ModelQuestion for FlowRequest {
    fn same_but_weights(&self, other: &Self) -> bool {
        self.prompt == other.prompt
            && self.position == other.position
            && self.knockouts == other.knockouts
    }
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
    /// Per node, one output of its op worked out by hand (the op zoom).
    pub worked: Vec<Option<Worked>>,
}

/// The scene's worker ([`crate::app::worker`]) and its latest flow.
#[derive(Resource, Default, Deref, DerefMut)]
pub struct FlowCompute(pub ModelWorker<FlowRequest, Computed>);

impl FlowCompute {
    /// The latest flow computed.
    pub fn flow(&self) -> Option<&Computed> {
        self.latest.as_ref().map(|a| &a.value)
    }

    /// Asks for the flow of `request` with `params` (the knockouts applied)
    /// on `device`. `optimizer`: the run's AdamW moments and the step
    /// parameters of its next step, when read back (the backward pass then
    /// ends with AdamW's update of each weight).
    pub fn request(
        &mut self,
        request: FlowRequest,
        config: &Config,
        device: Device,
        params: Vec<NamedTensor>,
        optimizer: Option<(Vec<NamedTensor>, StepParams)>,
    ) {
        self.ask(request, config, device, move |backend, r| {
            compute(backend, &params, &r.prompt, r.position, r.step, optimizer)
        });
    }
}

/// The forward pass of `prompt` at `position`, then the backward pass of
/// the loss of the byte that follows it (at the last byte, the model's own
/// top guess), on `backend` (a batch-1 program's).
pub fn compute(
    backend: &mut dyn Backend,
    params: &[NamedTensor],
    prompt: &[u8],
    position: Option<usize>,
    step: u64,
    optimizer: Option<(Vec<NamedTensor>, StepParams)>,
) -> Result<Computed, String> {
    for p in params {
        backend
            .write(&p.name, &p.values)
            .map_err(|e| e.to_string())?;
    }
    let mut flow = crate::flow::run(backend, params, prompt, position)?;
    let next = flow.tokens.get(flow.position + 1).copied();
    let target = next.unwrap_or_else(|| crate::flow::top5(&flow.probs)[0].byte);
    crate::flow::backward(backend, &mut flow, target)?;
    if let Some((moments, step_params)) = optimizer {
        crate::flow::adamw(backend, &mut flow, &moments, step_params)?;
    }
    let worked = (0..flow.nodes.len())
        .map(|i| crate::worked::worked(backend.program(), params, &flow, i))
        .collect();
    Ok(Computed {
        flow,
        step,
        target_in_prompt: next.is_some(),
        worked,
    })
}
