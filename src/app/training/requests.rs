//! What the scenes ask of the run and read back, without blocking a frame:
//! weight snapshots for the heatmaps ([`Snapshots`], [`TensorWants`]),
//! attention probes ([`Probes`]) and FlashAttention traces ([`FlashTraces`]).

use crate::app::engine::Snapshot;
use crate::probe::{ProbeResult, ProbeSource};
use bevy::prelude::*;

use web_time::Instant;

/// What the heatmaps show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeatmapView {
    #[default]
    Weights,
    Gradients,
    AdamM,
    AdamV,
}

impl HeatmapView {
    pub const ALL: [HeatmapView; 4] = [
        HeatmapView::Weights,
        HeatmapView::Gradients,
        HeatmapView::AdamM,
        HeatmapView::AdamV,
    ];

    /// Its name in the current language.
    pub fn label(self) -> String {
        match self {
            HeatmapView::Weights => crate::t!("view-weights"),
            HeatmapView::Gradients => crate::t!("view-gradients"),
            HeatmapView::AdamM => crate::t!("view-adam-m"),
            HeatmapView::AdamV => crate::t!("view-adam-v"),
        }
    }

    /// The tensor this view shows for a parameter.
    pub fn tensor_name(self, param: &str) -> String {
        match self {
            HeatmapView::Weights => param.to_string(),
            HeatmapView::Gradients => format!("grad.{param}"),
            HeatmapView::AdamM => format!("adam.m.{param}"),
            HeatmapView::AdamV => format!("adam.v.{param}"),
        }
    }
}

/// The tensors each part of the app wants read back, by who wants them (a
/// scene, the sampler): the training plugin reads the union, so a snapshot
/// holds what every current view needs and nothing else.
#[derive(Resource, Debug, Default)]
pub struct TensorWants {
    pub(super) by: std::collections::BTreeMap<&'static str, Vec<String>>,
    /// Counts changes (a change asks for a snapshot at once).
    pub(super) changes: u64,
}

impl TensorWants {
    /// Replaces what `who` wants (an empty list withdraws it).
    pub fn set(&mut self, who: &'static str, names: Vec<String>) {
        if names.is_empty() {
            if self.by.remove(who).is_some() {
                self.changes += 1;
            }
        } else if self.by.get(who) != Some(&names) {
            self.by.insert(who, names);
            self.changes += 1;
        }
    }

    /// Every tensor wanted, each once, in a stable order.
    pub fn union(&self) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.by
            .values()
            .flatten()
            .filter(|n| seen.insert(n.as_str()))
            .cloned()
            .collect()
    }
}

/// A scene's request for a probe of the forward pass (attention weights,
/// logits), and what came back. The training plugin sends it to the engine
/// (after the steps already started, so it sees the newest weights) at most
/// every `interval_s` while training, once per step otherwise, and at once
/// when the request changes.
#[derive(Resource, Debug)]
pub struct Probes {
    /// What to probe; None asks for nothing.
    pub want: Option<ProbeSource>,
    pub interval_s: f64,
    /// The latest result and the step whose weights it saw.
    pub latest: Option<(u64, ProbeResult)>,
    /// Counts results received.
    pub version: u64,
    pub error: Option<String>,
    pub(super) last_request: Option<Instant>,
    /// The step the last request was sent at.
    pub(super) requested_step: Option<u64>,
    pub(super) dirty: bool,
}

impl Default for Probes {
    fn default() -> Self {
        Self {
            want: None,
            interval_s: 0.3,
            latest: None,
            version: 0,
            error: None,
            last_request: None,
            requested_step: None,
            dirty: true,
        }
    }
}

impl Probes {
    /// Asks for `source` (again at once if it changed).
    pub fn set_want(&mut self, source: Option<ProbeSource>) {
        if self.want != source {
            self.want = source;
            self.dirty = true;
        }
    }
}

/// A scene's request for a FlashAttention trace ([`crate::flash`]) and what
/// came back. Sent when the request changes or a refresh is asked for (a
/// replay should not jump under the viewer while the run trains).
#[derive(Resource, Debug, Default)]
pub struct FlashTraces {
    /// What to trace; None asks for nothing.
    pub want: Option<crate::flash::FlashWant>,
    /// The latest trace and the step whose weights it saw.
    pub latest: Option<(u64, std::sync::Arc<crate::flash::FlashTrace>)>,
    /// Counts traces received.
    pub version: u64,
    pub error: Option<String>,
    /// What was last sent.
    pub(super) sent: Option<crate::flash::FlashWant>,
    pub(super) refresh: bool,
}

impl FlashTraces {
    /// Asks for a trace of `want` (at once if it changed).
    pub fn set_want(&mut self, want: Option<crate::flash::FlashWant>) {
        self.want = want;
    }

    /// Traces the same again, on the newest weights.
    pub fn refresh(&mut self) {
        self.refresh = true;
    }
}

/// The latest tensors read back, and how often to read.
#[derive(Resource, Debug)]
pub struct Snapshots {
    pub latest: Option<Snapshot>,
    /// Counts snapshots received.
    pub version: u64,
    pub view: HeatmapView,
    /// Seconds between snapshots while training.
    pub interval_s: f64,
    /// The parameter the inspector shows (its gradient is read too).
    pub inspect: Option<String>,
    pub(super) last_request: Option<Instant>,
    /// Whether the view changed since the last request (asks again at once).
    pub(super) dirty: bool,
    /// The [`TensorWants`] change count the last request saw.
    pub(super) wants_seen: u64,
}

impl Default for Snapshots {
    fn default() -> Self {
        Self {
            latest: None,
            version: 0,
            view: HeatmapView::Weights,
            interval_s: 0.25,
            inspect: None,
            last_request: None,
            dirty: true,
            wants_seen: 0,
        }
    }
}

impl Snapshots {
    /// Asks for a snapshot at the next frame (the inspector opened).
    pub fn dirty_now(&mut self) {
        self.dirty = true;
    }

    pub fn set_view(&mut self, view: HeatmapView) {
        if self.view != view {
            self.view = view;
            self.dirty = true;
        }
    }
}

/// Parts of the model the learner knocked out (the Take-it-apart scene):
/// sampling uses the weights with them zeroed, so a learner hears the
/// difference. Training is untouched.
#[derive(Resource, Debug, Default, Clone, PartialEq)]
pub struct Knockouts(pub Vec<crate::interventions::Part>);

/// The names of `program`'s parameters, in program order: what a scene
/// that recomputes the model asks [`TensorWants`] for.
pub fn param_names(program: &crate::program::Program) -> Vec<String> {
    program
        .params()
        .map(|id| program.tensors[id].name.clone())
        .collect()
}

impl Knockouts {
    /// The snapshot's weights of `program` as the learner has taken the
    /// model apart (every knocked-out part zeroed); None until the snapshot
    /// holds them all.
    pub fn weights_of(
        &self,
        snapshot: &Snapshot,
        program: &crate::program::Program,
    ) -> Option<Vec<crate::model::params::NamedTensor>> {
        let mut params = snapshot.params(program)?;
        self.apply(&mut params, &program.config).ok()?;
        Some(params)
    }

    /// `params` with every knocked-out part zeroed.
    pub fn apply(
        &self,
        params: &mut [crate::model::params::NamedTensor],
        config: &crate::model::config::Config,
    ) -> Result<(), String> {
        for &part in &self.0 {
            crate::interventions::knock_out(params, part, config.d_model, config.n_head)?;
        }
        Ok(())
    }
}

/// The weights a scene's question of `snapshot` runs with: `program`'s
/// parameters as the learner took the model apart (`knockouts` zeroed),
/// and with `with_optimizer` AdamW's moments with the run's next step
/// (its learning rate and AdamW count). None until the snapshot holds the
/// weights.
#[allow(clippy::type_complexity)]
pub fn question_weights(
    snapshot: &Snapshot,
    program: &crate::program::Program,
    knockouts: &Knockouts,
    with_optimizer: bool,
) -> Option<(Vec<crate::model::params::NamedTensor>, Option<(Vec<crate::model::params::NamedTensor>, crate::backend::StepParams)>)> {
    let params = knockouts.weights_of(snapshot, program)?;
    let optimizer = with_optimizer
        .then(|| snapshot.moments(program))
        .flatten()
        .map(|m| (m, crate::app::engine::next_step(&program.config, snapshot.step)));
    Some((params, optimizer))
}
