//! The gallery of trained models (issue 36): each entry a checkpoint that
//! ships with the program, its corpus, where that text comes from and its
//! licence, and the command that trained it. `tinygpt gallery [--json]`
//! lists the entries with their cards (parameters, steps, the last
//! validation loss, size), and every command that loads a checkpoint takes
//! `gallery:ID` for one ([`crate::model::checkpoint::Checkpoint::load`]).

use super::checkpoint::{Checkpoint, CheckpointError, Precision};
use crate::data::tasks::Task;
use crate::data::{Corpus, CorpusError};
use crate::program::Program;
use serde::Serialize;
use std::path::Path;

/// How a checkpoint argument names a gallery entry: `gallery:small`.
pub const PREFIX: &str = "gallery:";

/// One entry: what it is and where its text comes from.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub id: &'static str,
    /// The preset it was trained with (a built-in name or a file).
    pub preset: &'static str,
    /// The text it learned.
    pub text: Text,
    /// What it writes, in a few words.
    pub what: &'static str,
    /// A prompt to sample it from (a toy task's: its first held-out
    /// example's, [`Entry::sample_prompt`]).
    pub prompt: &'static str,
    pub source: &'static str,
    pub licence: &'static str,
    /// The command that trained it (run from the repository's root).
    pub command: &'static str,
    /// Where it lives in the repository.
    pub file: &'static str,
    pub bytes: &'static [u8],
}

/// The text a gallery model learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Text {
    /// TinyShakespeare, built in.
    Shakespeare,
    /// A text file that ships with the program (`assets/corpora/`).
    File {
        path: &'static str,
        bytes: &'static [u8],
    },
    /// A toy task the program makes ([`Task`]).
    Task(Task),
}

impl Text {
    /// Its name, as `--corpus` takes it (from the repository's root).
    pub fn name(self) -> String {
        match self {
            Text::Shakespeare => "tinyshakespeare.txt".into(),
            Text::File { path, .. } => path.into(),
            Text::Task(task) => format!("{}{}", crate::data::tasks::PREFIX, task.name()),
        }
    }
}

/// A file of the repository and its bytes, compiled in; in the browser,
/// where the page fetches a gallery model when it is chosen (and caches
/// it), no bytes ([`Entry::compiled_in`]).
#[cfg(not(target_arch = "wasm32"))]
macro_rules! shipped_file {
    ($path:literal) => {
        (
            $path,
            include_bytes!(concat!("../../", $path)) as &'static [u8],
        )
    };
}
#[cfg(target_arch = "wasm32")]
macro_rules! shipped_file {
    ($path:literal) => {
        ($path, &[] as &'static [u8])
    };
}

const SHAKESPEARE_SOURCE: &str = "Andrej Karpathy's char-rnn tinyshakespeare.txt (40,000 lines of Shakespeare's plays), shipped as assets/tinyshakespeare.txt";
const SHAKESPEARE_LICENCE: &str = "public domain (Shakespeare's text)";
const TASK_SOURCE: &str = "made by the program from a fixed seed (src/data/tasks.rs); the last tenth of the examples is held out";
const OUR_LICENCE: &str = "MIT OR Apache-2.0 (this program's own)";

/// Every entry: the TinyShakespeare models, the other kinds of text, the
/// toy tasks.
pub fn entries() -> Vec<Entry> {
    let shakespeare = super::shipped::SHIPPED
        .iter()
        .map(|&(id, command, bytes)| Entry {
            id,
            preset: id,
            text: Text::Shakespeare,
            what: "plays: pseudo-Shakespeare",
            prompt: "ROMEO:",
            source: SHAKESPEARE_SOURCE,
            licence: SHAKESPEARE_LICENCE,
            command,
            file: match id {
                "tiny" => "assets/checkpoints/tiny.safetensors",
                _ => "assets/checkpoints/small.safetensors",
            },
            bytes,
        });
    let text = |id, (what, prompt), (path, text), source, licence, command, (file, bytes)| Entry {
        id,
        preset: "small",
        text: Text::File { path, bytes: text },
        what,
        prompt,
        source,
        licence,
        command,
        file,
        bytes,
    };
    // In f16 but the table: 4 bits cost the prose, the dictionary and the
    // code 0.06 to 0.1 of validation loss, the table 0.017 (docs/gallery.md);
    // f16 costs them under 1e-4.
    let texts = [
        text(
            "psalms",
            (
                "verse: the Psalms of the King James Bible",
                "Psalms 23\n\n  1 The LORD",
            ),
            shipped_file!("assets/corpora/psalms.txt"),
            "the Book of Psalms, King James Version (1611), as Debian's bible-kjv-text package stores it (printed by its `bible` program)",
            "public domain (the KJV's text)",
            "tinygpt train --preset small --steps 5000 --corpus assets/corpora/psalms.txt --backend cpu --seed 1337 --out psalms-f32.safetensors && tinygpt export --checkpoint psalms-f32.safetensors --out assets/gallery/psalms.safetensors",
            shipped_file!("assets/gallery/psalms.safetensors"),
        ),
        text(
            "jargon",
            ("a dictionary: the hacker's Jargon File", "hacker\n"),
            shipped_file!("assets/corpora/jargon.txt"),
            "The on-line hacker Jargon File, version 4.4.7, 29 Dec 2003: its entries from (TM) to hack (600 KB), as Debian's dict-jargon package stores them",
            "public domain (the Jargon File)",
            "tinygpt train --preset small --steps 5000 --corpus assets/corpora/jargon.txt --backend cpu --seed 1337 --out jargon-f32.safetensors && tinygpt export --checkpoint jargon-f32.safetensors --out assets/gallery/jargon.safetensors",
            shipped_file!("assets/gallery/jargon.safetensors"),
        ),
        text(
            "rust",
            ("code: this program's own Rust", "    pub fn "),
            shipped_file!("assets/corpora/tinygpt-rust.txt"),
            "this program's own Rust source (src/cpu, data, model, program and train, 21 files), as it was when the gallery was trained",
            OUR_LICENCE,
            "tinygpt train --preset small --steps 5000 --corpus assets/corpora/tinygpt-rust.txt --backend cpu --seed 1337 --out rust-f32.safetensors && tinygpt export --checkpoint rust-f32.safetensors --out assets/gallery/rust.safetensors",
            shipped_file!("assets/gallery/rust.safetensors"),
        ),
        text(
            "weather",
            ("a table: a CSV weather log", "2024-07-01,Oslo,"),
            shipped_file!("assets/corpora/weather.csv"),
            "a made-up daily weather log of five cities (a CSV table), written by scripts/make-weather-csv.py from a fixed seed",
            OUR_LICENCE,
            "tinygpt train --preset small --steps 5000 --corpus assets/corpora/weather.csv --backend cpu --seed 1337 --out weather-f32.safetensors && tinygpt export --int4 --checkpoint weather-f32.safetensors --out assets/gallery/weather.safetensors",
            shipped_file!("assets/gallery/weather.safetensors"),
        ),
    ];
    let task = |task: Task, command, (file, bytes)| Entry {
        id: task.name(),
        preset: task.name(),
        text: Text::Task(task),
        what: task.describe(),
        prompt: "",
        source: TASK_SOURCE,
        licence: OUR_LICENCE,
        command,
        file,
        bytes,
    };
    let tasks = [
        task(
            Task::Reverse,
            "tinygpt train --preset reverse --corpus task:reverse --backend cpu --seed 1 --out reverse-f32.safetensors && tinygpt export --int4 --checkpoint reverse-f32.safetensors --out assets/gallery/reverse.safetensors",
            shipped_file!("assets/gallery/reverse.safetensors"),
        ),
        task(
            Task::Sort,
            "tinygpt train --preset sort --corpus task:sort --backend cpu --seed 1 --out sort-f32.safetensors && tinygpt export --int4 --checkpoint sort-f32.safetensors --out assets/gallery/sort.safetensors",
            shipped_file!("assets/gallery/sort.safetensors"),
        ),
        task(
            Task::Add,
            // f16: in 4 bits its held-out accuracy falls from 100% to 74.5%.
            "tinygpt train --preset add --corpus task:add --backend cpu --seed 1 --out add-f32.safetensors && tinygpt export --checkpoint add-f32.safetensors --out assets/gallery/add.safetensors",
            shipped_file!("assets/gallery/add.safetensors"),
        ),
    ];
    shakespeare.chain(texts).chain(tasks).collect()
}

/// The most a stored precision may move an entry's validation loss from
/// the one its run recorded in f32 for the gallery to ship it that way:
/// nothing for f32 (1e-5, the sum's rounding), 1e-3 for f16, 0.02 for int4
/// (measured: docs/gallery.md). None for a name it does not know.
pub fn loss_bound(precision: &str) -> Option<f32> {
    match precision {
        "f32" => Some(1e-5),
        "f16" => Some(1e-3),
        "int4" => Some(0.02),
        _ => None,
    }
}

/// The entry `id`, or a line naming the ones there are.
pub fn find(id: &str) -> Result<Entry, String> {
    entries().into_iter().find(|e| e.id == id).ok_or_else(|| {
        format!(
            "the gallery has no model `{id}`; it has {} (`tinygpt gallery` lists them)",
            entries()
                .iter()
                .map(|e| format!("gallery:{}", e.id))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The entry a checkpoint argument names (`gallery:ID`), if it names one.
pub fn named(arg: &str) -> Option<Result<Entry, String>> {
    arg.strip_prefix(PREFIX).map(find)
}

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
    /// What it writes, from these weights now: [`Entry::sample`].
    pub sample: String,
    /// How the weights are stored: `f32`, `f16` or `int4`.
    pub precision: &'static str,
    /// Exact-answer accuracy on the held-out examples, for the toy tasks.
    pub accuracy: Option<f32>,
    pub file: String,
    pub bytes: usize,
}

impl Entry {
    pub fn checkpoint(&self) -> Result<Checkpoint, CheckpointError> {
        Checkpoint::from_bytes(self.bytes, &format!("{PREFIX}{}", self.id))
    }

    /// Whether its weights (and text) are in the program; in the browser
    /// only the TinyShakespeare ones are, and the page fetches the others
    /// from `file` (and the text's path) beside it.
    pub fn compiled_in(&self) -> bool {
        !self.bytes.is_empty()
    }

    /// The text it learned, as a corpus for its context.
    pub fn corpus(&self, ctx: usize) -> Result<Corpus, CorpusError> {
        match self.text {
            Text::Shakespeare => Corpus::tiny_shakespeare(ctx),
            Text::File { path, bytes } => Corpus::from_bytes(path, bytes, ctx),
            Text::Task(task) => task.corpus(ctx),
        }
    }

    /// The validation loss of `ck` (this entry's weights) on the mean of
    /// the run's own validation batches (its seed, its `eval_batches`), on
    /// the CPU: what training measured at its evaluations.
    pub fn validation_loss(&self, ck: &Checkpoint) -> Result<f32, String> {
        use crate::backend::Backend;
        let config = &ck.config;
        let corpus = self.corpus(config.ctx).map_err(|e| e.to_string())?;
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

    /// A prompt to sample it from: a toy task's first held-out prompt.
    pub fn sample_prompt(&self) -> String {
        match self.task() {
            Some(task) => {
                let (_, held_out) = task.examples();
                String::from_utf8_lossy(&held_out[0][..task.prompt_len()]).into_owned()
            }
            None => self.prompt.to_string(),
        }
    }

    /// What the model writes after its sample prompt, on the CPU from a
    /// fixed seed: a toy task's greedy answer to its first held-out
    /// example, or 160 bytes of text at temperature 0.8 (top-k 40).
    pub fn sample(&self, ck: &Checkpoint) -> Result<String, String> {
        use crate::train::sample::{SampleOptions, generate};
        let mut generator = crate::cpu::generate::Generator::new(&ck.config, &ck.params)?;
        let prompt = self.sample_prompt();
        let (n, options) = match self.task() {
            Some(task) => (
                task.example_len() - task.prompt_len(),
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

    /// The task it was trained on, for a toy-task model.
    pub fn task(&self) -> Option<Task> {
        match self.text {
            Text::Task(task) => Some(task),
            _ => None,
        }
    }

    /// Its exact-answer accuracy on the task's held-out examples, measured
    /// now (greedy decoding on the CPU), for a toy-task model.
    pub fn accuracy(&self) -> Result<Option<crate::data::tasks::Accuracy>, String> {
        if self.task().is_none() {
            return Ok(None);
        }
        self.accuracy_of(&self.checkpoint().map_err(|e| e.to_string())?)
    }

    /// [`Entry::accuracy`] of `ck`, this entry's weights already read.
    fn accuracy_of(&self, ck: &Checkpoint) -> Result<Option<crate::data::tasks::Accuracy>, String> {
        let Some(task) = self.task() else {
            return Ok(None);
        };
        let mut generator = crate::cpu::generate::Generator::new(&ck.config, &ck.params)?;
        let (_, held_out) = task.examples();
        crate::data::tasks::accuracy(&mut generator, task, &held_out).map(Some)
    }

    pub fn card(&self) -> Result<Card, CheckpointError> {
        let ck = self.checkpoint()?;
        let program = Program::new(&ck.config);
        let invalid = |message| CheckpointError::Invalid {
            path: format!("{PREFIX}{}", self.id),
            message,
        };
        Ok(Card {
            id: self.id.into(),
            preset: self.preset.into(),
            corpus: self.text.name(),
            source: self.source.into(),
            licence: self.licence.into(),
            command: self.command.into(),
            params: program.params().map(|id| program.tensors[id].numel()).sum(),
            steps: ck.step,
            val_loss: self.validation_loss(&ck).map_err(invalid)?,
            trained_val_loss: ck.loss_history.iter().rev().find_map(|p| p.val_loss),
            train_loss: {
                let last = &ck.loss_history[ck.loss_history.len().saturating_sub(50)..];
                (!last.is_empty())
                    .then(|| last.iter().map(|p| p.loss).sum::<f32>() / last.len() as f32)
            },
            sample: self.sample(&ck).map_err(invalid)?,
            precision: Precision::of_file(self.bytes).map_or("?", Precision::name),
            accuracy: self
                .accuracy_of(&ck)
                .map_err(invalid)?
                .map(|a| a.fraction()),
            file: self.file.into(),
            bytes: self.bytes.len(),
        })
    }
}

/// The corpus a command reads: `--corpus` when given (a file, `task:NAME`
/// or `gallery:ID` for the text that gallery model learned), else the text
/// of the gallery model the checkpoint argument names, else TinyShakespeare.
pub fn corpus_for(
    corpus: Option<&Path>,
    checkpoint: Option<&Path>,
    ctx: usize,
) -> Result<Corpus, CorpusError> {
    let gallery_entry = |arg: &Path| -> Option<Result<Entry, CorpusError>> {
        let named = named(arg.to_str()?)?;
        Some(named.map_err(|message| CorpusError::Io {
            path: arg.display().to_string(),
            message,
        }))
    };
    match (corpus, checkpoint) {
        (Some(arg), _) => match gallery_entry(arg) {
            Some(entry) => entry?.corpus(ctx),
            None => Corpus::named(arg, ctx),
        },
        (None, Some(ck)) => match gallery_entry(ck) {
            Some(Ok(entry)) => entry.corpus(ctx),
            // The checkpoint argument's own error is said where it loads.
            _ => Corpus::tiny_shakespeare(ctx),
        },
        (None, None) => Corpus::tiny_shakespeare(ctx),
    }
}
