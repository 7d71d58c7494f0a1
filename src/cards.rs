//! What the gallery's cards and the toy tasks' scores say about a model,
//! measured now on the CPU: its validation loss on the run's own batches, a
//! sample from a fixed seed, and a task's exact-answer accuracy by greedy
//! decoding. (The catalogue: it drives a backend, so it sits above them and
//! the trainer; [`crate::model::gallery`] only lists and reads the entries.)

use crate::cpu::generate::Generator;
use crate::data::tasks::{Task, argmax};
use crate::model::checkpoint::{Checkpoint, CheckpointError, Precision};
use crate::model::gallery::{self, Entry};
use crate::program::Program;
use serde::Serialize;

/// An entry's card, read from its checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Card {
    pub id: String,
    pub preset: String,
    pub corpus: String,
    pub source: String,
    pub licence: String,
    pub command: String,
    pub params: usize,
    pub steps: u64,
    /// The validation loss of the weights that ship, measured now on the
    /// run's own validation batches (`tinygpt eval --validation`).
    pub val_loss: f32,
    /// The last validation loss the run recorded while it trained (in f32:
    /// an int4 entry's differs from `val_loss` by what the 4 bits cost).
    pub trained_val_loss: Option<f32>,
    /// The training loss at the end of its run: the mean of the last (up
    /// to) 50 steps it recorded, as `tinygpt train` reports it.
    pub train_loss: Option<f32>,
    /// What it writes, from these weights now: [`sample`].
    pub sample: String,
    /// How the weights are stored: `f32`, `f16` or `int4`.
    pub precision: &'static str,
    /// Exact-answer accuracy on the held-out examples, for the toy tasks.
    pub accuracy: Option<f32>,
    pub file: String,
    pub bytes: usize,
}

/// The validation loss of `ck` (this entry's weights) on the mean of
/// the run's own validation batches (its seed, its `eval_batches`), on
/// the CPU: what training measured at its evaluations.
pub fn validation_loss(entry: &Entry, ck: &Checkpoint) -> Result<f32, String> {
    use crate::backend::Backend;
    let config = &ck.config;
    let corpus = entry.corpus(config.ctx).map_err(|e| e.to_string())?;
    let mut backend = crate::cpu::CpuBackend::<f32>::new(Program::new(config));
    for p in &ck.params {
        backend
            .write(&p.name, &p.values)
            .map_err(|e| e.to_string())?;
    }
    Ok(crate::train::validation_loss(
        &mut backend,
        &corpus,
        config,
        ck.seed,
    ))
}

/// What the model writes after its sample prompt, on the CPU from a
/// fixed seed: a toy task's greedy answer to its first held-out
/// example, or 160 bytes of text at temperature 0.8 (top-k 40).
pub fn sample(entry: &Entry, ck: &Checkpoint) -> Result<String, String> {
    use crate::sample::{SampleOptions, generate};
    let mut generator = Generator::new(&ck.config, &ck.params)?;
    let prompt = entry.sample_prompt();
    let (n, options) = match entry.task() {
        Some(task) => (
            task.split(&task.examples().1[0]).1.len(),
            SampleOptions {
                temperature: 0.0,
                top_k: 1,
                seed: 1337,
            },
        ),
        None => (
            160,
            SampleOptions {
                temperature: 0.8,
                top_k: 40,
                seed: 1337,
            },
        ),
    };
    let out = generate(&mut generator, prompt.as_bytes(), n, &options, |_| {});
    Ok(format!("{prompt}{}", String::from_utf8_lossy(&out)))
}

/// Its exact-answer accuracy on the task's held-out examples, measured
/// now (greedy decoding on the CPU), for a toy-task model.
pub fn task_accuracy(entry: &Entry) -> Result<Option<Accuracy>, String> {
    if entry.task().is_none() {
        return Ok(None);
    }
    task_accuracy_of(entry, &entry.checkpoint().map_err(|e| e.to_string())?)
}

/// [`task_accuracy`] of `ck`, this entry's weights already read.
fn task_accuracy_of(entry: &Entry, ck: &Checkpoint) -> Result<Option<Accuracy>, String> {
    let Some(task) = entry.task() else {
        return Ok(None);
    };
    let mut generator = Generator::new(&ck.config, &ck.params)?;
    let (_, held_out) = task.examples();
    accuracy(&mut generator, task, &held_out).map(Some)
}

/// An entry's card: what its checkpoint says, and what its weights do now.
pub fn card(entry: &Entry) -> Result<Card, CheckpointError> {
    let ck = entry.checkpoint()?;
    let program = Program::new(&ck.config);
    let invalid = |message| CheckpointError::Invalid {
        path: format!("{}{}", gallery::PREFIX, entry.id),
        message,
    };
    Ok(Card {
        id: entry.id.into(),
        preset: entry.preset.into(),
        corpus: entry.text.name(),
        source: entry.source.into(),
        licence: entry.licence.into(),
        command: entry.command.into(),
        params: program.params().map(|id| program.tensors[id].numel()).sum(),
        steps: ck.step,
        val_loss: validation_loss(entry, &ck).map_err(invalid)?,
        trained_val_loss: ck.loss_history.iter().rev().find_map(|p| p.val_loss),
        train_loss: {
            let last = &ck.loss_history[ck.loss_history.len().saturating_sub(50)..];
            (!last.is_empty())
                .then(|| last.iter().map(|p| p.loss).sum::<f32>() / last.len() as f32)
        },
        sample: sample(entry, &ck).map_err(invalid)?,
        precision: Precision::of_file(entry.bytes).map_or("?", Precision::name),
        accuracy: task_accuracy_of(entry, &ck)
            .map_err(invalid)?
            .map(|a| a.fraction()),
        file: entry.file.into(),
        bytes: entry.bytes.len(),
    })
}

/// A model's exact-answer accuracy on a task's held-out examples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Accuracy {
    pub correct: usize,
    pub total: usize,
}

impl Accuracy {
    pub fn fraction(&self) -> f32 {
        self.correct as f32 / self.total.max(1) as f32
    }
}

/// Whether greedy decoding from each example's prompt gives its answer
/// and then the newline ([`greedy_answer`]). The model's context must hold
/// an example but its newline.
pub fn accuracy(
    generator: &mut Generator,
    task: Task,
    examples: &[Vec<u8>],
) -> Result<Accuracy, String> {
    let correct = examples
        .iter()
        .map(|example| {
            let (prompt, answer) = task.split(example);
            greedy_answer(generator, task, prompt).map(|given| given == answer)
        })
        .collect::<Result<Vec<bool>, String>>()?
        .into_iter()
        .filter(|&right| right)
        .count();
    Ok(Accuracy {
        correct,
        total: examples.len(),
    })
}

/// What greedy decoding (temperature 0) writes after `prompt`: as many
/// bytes as an answer and its newline.
pub fn greedy_answer(
    generator: &mut Generator,
    task: Task,
    prompt: &[u8],
) -> Result<Vec<u8>, String> {
    // The answer (and its newline).
    let len = task.answer(prompt).len() + usize::from(task.answer_has_newline());
    if generator.ctx() + 1 < prompt.len() + len {
        return Err(format!(
            "the model's context of {} bytes is shorter than a {} example ({} bytes before its newline)",
            generator.ctx(),
            task.name(),
            prompt.len() + len - 1
        ));
    }
    let mut logits = generator.prime(prompt);
    let mut given = Vec::with_capacity(len);
    while given.len() < len {
        let byte = argmax(&logits);
        given.push(byte);
        if given.len() < len {
            logits = generator.push(byte);
        }
    }
    Ok(given)
}
