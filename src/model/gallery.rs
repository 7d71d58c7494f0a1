//! The gallery of trained models (issue 36): each entry a checkpoint that
//! ships with the program, its corpus, where that text comes from and its
//! licence, and the command that trained it. `tinygpt gallery [--json]`
//! lists the entries with their cards (parameters, steps, the last
//! validation loss, size: measured by [`crate::cards`], a layer above), and
//! every command that loads a checkpoint takes `gallery:ID` for one
//! ([`crate::model::checkpoint::Checkpoint::load`]).

use super::checkpoint::{Checkpoint, CheckpointError};
use crate::data::tasks::Task;
use crate::data::{Corpus, CorpusError};
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
        task(
            Task::Repeat,
            // f16, with its time-lapse: the induction head forming.
            "tinygpt train --preset repeat --corpus task:repeat --backend cpu --seed 1 --out repeat-f32.safetensors && tinygpt export --checkpoint repeat-f32.safetensors --out assets/gallery/repeat.safetensors",
            shipped_file!("assets/gallery/repeat.safetensors"),
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

    /// A prompt to sample it from: a toy task's first held-out prompt.
    pub fn sample_prompt(&self) -> String {
        match self.task() {
            Some(task) => {
                let (_, held_out) = task.examples();
                String::from_utf8_lossy(task.split(&held_out[0]).0).into_owned()
            }
            None => self.prompt.to_string(),
        }
    }

    /// The task it was trained on, for a toy-task model.
    pub fn task(&self) -> Option<Task> {
        match self.text {
            Text::Task(task) => Some(task),
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::i18n::{Language, tr_in};

    #[test]
    fn every_gallery_model_says_what_it_does_in_every_language() {
        for entry in entries() {
            let key = format!("gallery-what-{}", entry.id);
            assert_eq!(tr_in(Language::English, &key, &[]), entry.what, "{key}");
            for language in [Language::Spanish, Language::Chinese] {
                assert_ne!(
                    tr_in(language, &key, &[]),
                    key,
                    "{language:?} lacks `{key}`"
                );
            }
        }
    }
}
