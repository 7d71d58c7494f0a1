//! The tools' numbers, computed off the frame: each asks the program itself
//! ([`crate::interventions`]) on a CPU backend of the batch-1 program with
//! the run's latest weights, on a worker of the async-compute pool. Only
//! the tool on screen is computed; it is asked again when its inputs change
//! and, while the run trains, at most once a second.

use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::flow::{Guess, top5};
use crate::interventions::{self, Ablation, Attribution, LensGrid, Part, Patching};
use crate::model::config::Config;
use crate::model::params::NamedTensor;
use crate::program::Program;
use bevy::prelude::*;
use bevy::tasks::{AsyncComputeTaskPool, Task, futures::check_ready};
use web_time::Instant;

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

    pub fn title(self) -> &'static str {
        match self {
            Tool::Lens => "logit lens",
            Tool::Knockout => "knock out",
            Tool::Patch => "patching",
            Tool::Why => "why this byte",
        }
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
    pub step: u64,
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

/// The worker and the latest answer.
#[derive(Resource, Default)]
pub struct ProbeCompute {
    task: Option<Task<(Question, Result<Answer, String>)>>,
    asked: Option<Question>,
    started: Option<Instant>,
    /// The latest answer with what it answered; bumped when it changes.
    pub latest: Option<(Question, Result<Answer, String>)>,
    pub generation: u64,
}

impl ProbeCompute {
    /// Starts a computation unless one is in flight, the same was asked
    /// last, or only the weights changed under a second ago.
    pub fn ask(&mut self, question: Question, config: &Config, params: Vec<NamedTensor>) {
        if self.task.is_some() || self.asked.as_ref() == Some(&question) {
            return;
        }
        let only_weights = self.asked.as_ref().is_some_and(|a| {
            Question {
                step: question.step,
                ..a.clone()
            } == question
        });
        if only_weights
            && self
                .started
                .is_some_and(|t| t.elapsed().as_secs_f64() < 1.0)
        {
            return;
        }
        let config = crate::flow::config_for(config);
        self.asked = Some(question.clone());
        self.started = Some(Instant::now());
        self.task = Some(AsyncComputeTaskPool::get().spawn(async move {
            let answer = answer(&config, params, &question);
            (question, answer)
        }));
    }

    pub fn poll(&mut self) {
        let Some(task) = self.task.as_mut() else {
            return;
        };
        let Some(done) = check_ready(task) else {
            return;
        };
        self.task = None;
        self.latest = Some(done);
        self.generation += 1;
    }

    /// Forgets what was asked (a new run).
    pub fn reset(&mut self) {
        self.asked = None;
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
/// tool looks at the learner's model).
pub fn answer(config: &Config, params: Vec<NamedTensor>, q: &Question) -> Result<Answer, String> {
    let mut backend = CpuBackend::<f32>::new(Program::new(config));
    let put = |backend: &mut CpuBackend<f32>, params: &[NamedTensor]| -> Result<(), String> {
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
            put(&mut backend, &edited)?;
            Ok(Answer::Lens(interventions::lens(
                &mut backend,
                &edited,
                &q.prompt,
            )?))
        }
        Tool::Knockout => {
            let parts = Part::all(config.n_layer, config.n_head);
            let ablation = interventions::ablate(&mut backend, &params, &q.prompt, &parts)?;
            put(&mut backend, &params)?;
            let before = next_and_loss(&mut backend, &q.prompt)?;
            put(&mut backend, &edited)?;
            let after = next_and_loss(&mut backend, &q.prompt)?;
            Ok(Answer::Knockout(KnockoutView {
                ablation,
                before,
                after,
            }))
        }
        Tool::Patch => {
            put(&mut backend, &edited)?;
            let p = interventions::patch(&mut backend, &q.prompt, &q.corrupt, None)?;
            let cut = |b: &[u8]| b[b.len().saturating_sub(config.ctx)..].to_vec();
            Ok(Answer::Patch(p, cut(&q.prompt), cut(&q.corrupt)))
        }
        Tool::Why => {
            put(&mut backend, &edited)?;
            let bytes = match q.bytes {
                Some(b) => b,
                None => top_two(&mut backend, &q.prompt)?,
            };
            Ok(Answer::Why(interventions::attribute(
                &mut backend,
                &edited,
                &q.prompt,
                None,
                bytes,
            )?))
        }
    }
}
