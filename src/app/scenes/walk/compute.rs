//! The numbers behind the walk-through, computed off the frame: the
//! program's forward pass of the prompt at every position
//! ([`crate::flow::run_all`]) and the backward pass of their mean loss
//! ([`crate::flow::backward_all`], every node's gradient and every weight's
//! dL/dW), on the scenes' model worker ([`crate::app::worker`]: the run's
//! GPU or the CPU) from the run's latest weights. The same calls as
//! `tinygpt flow --all-positions --backward`, so the picture's numbers are
//! the command's. Asked again when the prompt changes, and while the run
//! trains at most once a second.

use crate::app::worker::{Device, ModelWorker};
use crate::backend::{Backend, StepParams};
use crate::flow::FlowAll;
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use super::draw::{Textures, textures};
use super::layout::{Shape, WalkLayout, layout};
use crate::worked::Worked;
use bevy::prelude::*;

/// What one computation was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkRequest {
    pub prompt: Vec<u8>,
    /// The weights' step.
    pub step: u64,
    /// The model as it was at `step` (a frame's kept weights), not as it
    /// is now: a step picked on the timeline is asked at once.
    pub as_it_was: bool,
    /// The parts knocked out (the pass is of the model without them).
    pub knockouts: Vec<crate::interventions::Part>,
    /// With AdamW's step on the gradient (the run's moments were read).
    pub with_optimizer: bool,
}

impl crate::app::worker::ModelQuestion for WalkRequest {
    fn same_but_weights(&self, other: &Self) -> bool {
        self.prompt == other.prompt
            && self.knockouts == other.knockouts
            && self.with_optimizer == other.with_optimizer
            && self.as_it_was == other.as_it_was
            && (!self.as_it_was || self.step == other.step)
    }
}

/// A finished pass: every tensor at every position, the gradients, and the
/// weights it ran with.
#[derive(Clone, Debug)]
pub struct Computed {
    pub flow: FlowAll,
    pub params: Vec<NamedTensor>,
    pub step: u64,
    /// The picture's geometry for this model and prompt.
    pub walk: WalkLayout,
    /// Every tensor's textures, coloured here, off the frame.
    pub textures: Textures,
    /// Per node of the flow, one output at the prompt's last position
    /// worked out by hand ([`crate::worked`]: the largest output, the dot
    /// product's largest terms, redone in f64).
    pub worked: Vec<Option<Worked>>,
    /// AdamW's update of each trained weight, w′ − w, by name (empty
    /// without the run's moments).
    pub updates: Vec<(String, Vec<f32>)>,
    /// The learning rate of that step.
    pub lr: Option<f32>,
}

impl Computed {
    /// A weight by name.
    pub fn param(&self, name: &str) -> Option<&NamedTensor> {
        self.params.iter().find(|p| p.name == name)
    }

    /// A weight's AdamW update by name.
    pub fn param_update(&self, name: &str) -> Option<&[f32]> {
        self.updates.iter().find(|(n, _)| n == name).map(|(_, u)| u.as_slice())
    }

    /// A weight's gradient by name.
    pub fn param_grad(&self, name: &str) -> Option<&[f32]> {
        self.flow
            .backward
            .as_ref()?
            .param_grads
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, g)| g.as_slice())
    }
}

/// The scene's worker and its latest pass.
#[derive(Resource, Default, Deref, DerefMut)]
pub struct WalkCompute(pub ModelWorker<WalkRequest, Computed>);

impl WalkCompute {
    /// The latest pass computed.
    pub fn computed(&self) -> Option<&Computed> {
        self.latest.as_ref().map(|a| &a.value)
    }

    /// Asks for the pass of `request` with `params` (knockouts applied) on
    /// `device`; `optimizer`: the run's AdamW moments and its next step's
    /// parameters, when read back (the pass then ends with AdamW's step).
    pub fn request(
        &mut self,
        request: WalkRequest,
        config: &Config,
        device: Device,
        params: Vec<NamedTensor>,
        optimizer: Option<(Vec<NamedTensor>, StepParams)>,
    ) {
        self.ask(request, config, device, move |backend, r| {
            compute(backend, params, &r.prompt, r.step, optimizer)
        });
    }
}

/// The forward pass of `prompt` at every position, then the backward pass
/// of the mean loss of the positions that have a next byte in the prompt
/// (as `tinygpt flow --all-positions --backward` without `--target`), and
/// with `optimizer` AdamW's step on that gradient
/// ([`crate::flow::adamw_all`]).
pub fn compute(
    backend: &mut dyn Backend,
    params: Vec<NamedTensor>,
    prompt: &[u8],
    step: u64,
    optimizer: Option<(Vec<NamedTensor>, StepParams)>,
) -> Result<Computed, String> {
    for p in &params {
        backend
            .write(&p.name, &p.values)
            .map_err(|e| e.to_string())?;
    }
    let mut flow = crate::flow::run_all(backend, &params, prompt)?;
    // A one-byte prompt has no next byte in it: forward only.
    let mut updates = Vec::new();
    let mut lr = None;
    if flow.tokens.len() > 1 {
        crate::flow::backward_all(backend, &mut flow, None)?;
        if let Some((moments, step_params)) = optimizer {
            updates = crate::flow::adamw_all(backend, &flow, &moments, step_params)?;
            lr = Some(step_params.lr);
        }
    }
    let config = &backend.program().config;
    let walk = layout(Shape {
        n_layer: config.n_layer,
        n_head: config.n_head,
        d_model: config.d_model,
        ctx: config.ctx,
        tokens: flow.tokens.len(),
    });
    let last = flow.at(flow.tokens.len() - 1).ok_or("the prompt is empty")?;
    let worked = (0..last.nodes.len())
        .map(|i| crate::worked::worked(backend.program(), &params, &last, i))
        .collect();
    let mut computed = Computed {
        flow,
        params,
        step,
        walk,
        textures: Vec::new(),
        worked,
        updates,
        lr,
    };
    computed.textures = textures(&computed.walk, &computed);
    Ok(computed)
}
