//! The gallery of trained models (issue 36): each entry a checkpoint that
//! ships with the program, its corpus, where that text comes from and its
//! licence, and the command that trained it. `tinygpt gallery [--json]`
//! lists the entries with their cards (parameters, steps, the last
//! validation loss, size), and every command that loads a checkpoint takes
//! `gallery:ID` for one ([`crate::model::checkpoint::Checkpoint::load`]).

use super::checkpoint::{Checkpoint, CheckpointError};
use crate::program::Program;
use serde::Serialize;

/// How a checkpoint argument names a gallery entry: `gallery:small`.
pub const PREFIX: &str = "gallery:";

/// One entry: what it is and where its text comes from.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub id: &'static str,
    pub preset: &'static str,
    pub corpus: &'static str,
    pub source: &'static str,
    pub licence: &'static str,
    /// The command that trained it (run from the repository's root).
    pub command: &'static str,
    /// Where it lives in the repository.
    pub file: &'static str,
    pub bytes: &'static [u8],
}

const SHAKESPEARE_SOURCE: &str = "Andrej Karpathy's char-rnn tinyshakespeare.txt (40,000 lines of Shakespeare's plays), shipped as assets/tinyshakespeare.txt";
const SHAKESPEARE_LICENCE: &str = "public domain (Shakespeare's text)";

/// Every entry, smallest first.
pub fn entries() -> Vec<Entry> {
    super::shipped::SHIPPED
        .iter()
        .map(|&(id, command, bytes)| Entry {
            id,
            preset: id,
            corpus: "tinyshakespeare.txt",
            source: SHAKESPEARE_SOURCE,
            licence: SHAKESPEARE_LICENCE,
            command,
            file: match id {
                "tiny" => "assets/checkpoints/tiny.safetensors",
                _ => "assets/checkpoints/small.safetensors",
            },
            bytes,
        })
        .collect()
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
    /// The last validation loss the run recorded.
    pub val_loss: Option<f32>,
    /// Exact-answer accuracy, for the toy tasks (none yet).
    pub accuracy: Option<f32>,
    pub file: String,
    pub bytes: usize,
}

impl Entry {
    pub fn checkpoint(&self) -> Result<Checkpoint, CheckpointError> {
        Checkpoint::from_bytes(self.bytes, &format!("{PREFIX}{}", self.id))
    }

    pub fn card(&self) -> Result<Card, CheckpointError> {
        let ck = self.checkpoint()?;
        let program = Program::new(&ck.config);
        Ok(Card {
            id: self.id.into(),
            preset: self.preset.into(),
            corpus: self.corpus.into(),
            source: self.source.into(),
            licence: self.licence.into(),
            command: self.command.into(),
            params: program.params().map(|id| program.tensors[id].numel()).sum(),
            steps: ck.step,
            val_loss: ck.loss_history.iter().rev().find_map(|p| p.val_loss),
            accuracy: None,
            file: self.file.into(),
            bytes: self.bytes.len(),
        })
    }
}
