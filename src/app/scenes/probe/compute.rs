//! The tools' numbers, computed off the frame: each asks the program itself
//! ([`crate::interventions`]) on a backend of the batch-1 program with the
//! run's latest weights, on the scenes' model worker
//! ([`crate::app::worker`]: the run's GPU or the CPU). Only the tool on
//! screen is computed; it is asked again when its inputs change and, while
//! the run trains, at most once a second.

use crate::app::worker::{Device, ModelWorker};
use crate::backend::Backend;
use crate::data::Batch;
use crate::flow::{Guess, top5};
use crate::interventions::{self, Ablation, Attribution, LensGrid, LossOn, Part, Patching};
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use bevy::prelude::*;

/// Which tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tool {
    #[default]
    Lens,
    Knockout,
    Patch,
    Why,
}

impl Tool {
    pub const ALL: [Tool; 4] = [Tool::Lens, Tool::Knockout, Tool::Patch, Tool::Why];

    /// The toolbar's name for it, in the current language.
    pub fn title(self) -> String {
        crate::i18n::tr(&format!("probe-tool-{}", self.key()), &[])
    }

    pub fn key(self) -> &'static str {
        match self {
            Tool::Lens => "lens",
            Tool::Knockout => "knockout",
            Tool::Patch => "patch",
            Tool::Why => "why",
        }
    }
}

/// What one computation was asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub tool: Tool,
    pub prompt: Vec<u8>,
    pub corrupt: Vec<u8>,
    /// The "why" tool's A and B (None: the model's top two at the last byte).
    pub bytes: Option<(u8, u8)>,
    pub knockouts: Vec<Part>,
    /// The importance map measures the loss on the run's validation rows
    /// (else on the prompt).
    pub validation: bool,
    /// The weights' step.
    pub step: u64,
    /// The model as it was at `step` (a frame's kept weights), not as it
    /// is now: a step picked on the timeline is asked at once.
    pub as_it_was: bool,
}

/// The knockout tool's numbers: every part's importance, and the prompt's
/// next byte and loss with the learner's knockouts and without.
#[derive(Clone, Debug)]
pub struct KnockoutView {
    pub ablation: Ablation,
    pub before: (f32, Vec<Guess>),
    pub after: (f32, Vec<Guess>),
}

/// One tool's answer.
#[derive(Clone, Debug)]
pub enum Answer {
    Lens(LensGrid),
    Knockout(KnockoutView),
    /// The patching, and the clean and corrupted prompts' bytes.
    Patch(Patching, Vec<u8>, Vec<u8>),
    Why(Attribution),
}

impl crate::app::worker::ModelQuestion for Question {
    fn same_but_weights(&self, other: &Self) -> bool {
        !self.as_it_was
            && Question {
                step: other.step,
                ..self.clone()
            } == *other
    }
}

/// The scene's worker ([`crate::app::worker`]) and its latest answer.
#[derive(Resource, Default, Deref, DerefMut)]
pub struct ProbeCompute(pub ModelWorker<Question, Answer>);

impl ProbeCompute {
    /// Asks `question` of the model `params` on `device`; `rows`: the
    /// run's validation rows, for the importance map on request.
    pub fn request(
        &mut self,
        question: Question,
        config: &Config,
        device: Device,
        params: Vec<NamedTensor>,
        rows: Vec<Batch>,
    ) {
        let c = config.clone();
        self.ask(question, config, device, move |backend, q| {
            answer(backend, &c, params, &rows, q)
        });
    }
}

/// The next byte's top 5 at the prompt's last byte and its loss.
fn next_and_loss(backend: &mut dyn Backend, prompt: &[u8]) -> Result<(f32, Vec<Guess>), String> {
    let logits = interventions::last_logits(backend, prompt, None)?;
    let loss = interventions::prompt_loss(backend, prompt)?;
    let probs = crate::flow::next_byte_probs(&logits);
    Ok((loss, top5(&probs)))
}

/// The model's two likeliest bytes after the prompt.
pub fn top_two(backend: &mut dyn Backend, prompt: &[u8]) -> Result<(u8, u8), String> {
    let logits = interventions::last_logits(backend, prompt, None)?;
    let t = top5(&crate::flow::next_byte_probs(&logits));
    Ok((t[0].byte, t[1].byte))
}

/// Computes `question`'s tool with `params` (knockouts applied where the
/// tool looks at the learner's model) on `backend` (a batch-1 program's);
/// `rows`: the run's validation rows, for the importance map over them.
pub fn answer(
    backend: &mut dyn Backend,
    config: &Config,
    params: Vec<NamedTensor>,
    rows: &[Batch],
    q: &Question,
) -> Result<Answer, String> {
    let put = |backend: &mut dyn Backend, params: &[NamedTensor]| -> Result<(), String> {
        for p in params {
            backend
                .write(&p.name, &p.values)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let mut edited = params.clone();
    for &part in &q.knockouts {
        interventions::knock_out(&mut edited, part, config.d_model, config.n_head)?;
    }
    match q.tool {
        Tool::Lens => {
            put(backend, &edited)?;
            Ok(Answer::Lens(interventions::lens(
                backend, &edited, &q.prompt,
            )?))
        }
        Tool::Knockout => {
            let parts = Part::all(config.n_layer, config.n_head);
            let on = if q.validation {
                LossOn::Rows(rows)
            } else {
                LossOn::Prompt(&q.prompt)
            };
            let ablation = interventions::ablate(backend, &params, on, &parts)?;
            put(backend, &params)?;
            let before = next_and_loss(backend, &q.prompt)?;
            put(backend, &edited)?;
            let after = next_and_loss(backend, &q.prompt)?;
            Ok(Answer::Knockout(KnockoutView {
                ablation,
                before,
                after,
            }))
        }
        Tool::Patch => {
            put(backend, &edited)?;
            let p = interventions::patch(backend, &q.prompt, &q.corrupt, None)?;
            let cut = |b: &[u8]| b[b.len().saturating_sub(config.ctx)..].to_vec();
            Ok(Answer::Patch(p, cut(&q.prompt), cut(&q.corrupt)))
        }
        Tool::Why => {
            put(backend, &edited)?;
            let bytes = match q.bytes {
                Some(b) => b,
                None => top_two(backend, &q.prompt)?,
            };
            Ok(Answer::Why(interventions::attribute(
                backend, &edited, &q.prompt, None, bytes,
            )?))
        }
    }
}
