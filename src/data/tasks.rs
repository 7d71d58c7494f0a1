//! Toy tasks with exact answers (minGPT's kind): reverse a word, sort
//! digits, add two numbers, copy a repeated string. Each is a corpus the
//! program makes from a fixed seed, one example per line. In the first
//! three every line is the same length, so that a window starts at an
//! example's first byte ([`super::Corpus::align`]) and the model's
//! positions are the example's; the repeat task's lines vary in length and
//! its windows start anywhere, so that where the copy starts is never a
//! position the model could learn, only something it can read (the task an
//! induction head solves: Olsson et al. 2022). The last tenth of the examples
//! is held out (the validation split, none of them seen in training), and a
//! model's exact-answer accuracy is measured on them
//! ([`crate::cards::accuracy`]): greedy decoding from the prompt must give
//! the whole answer and the newline after it (the repeat task: the copy).
//!
//! `--corpus task:reverse` names one anywhere a corpus is read.

use super::rng::Rng;
use super::{Corpus, CorpusError};
use std::collections::HashSet;

/// How a `--corpus` argument names a task: `task:reverse`.
pub const PREFIX: &str = "task:";

/// One toy task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Task {
    /// `qwertyui>iuytrewq`: eight letters, backwards.
    Reverse,
    /// `31415926>11234569`: eight digits, in order.
    Sort,
    /// `47+85=132`: two two-digit numbers and their sum in three digits.
    Add,
    /// `kqzdmwakqzdmwa`: six to twelve different random letters, then the
    /// same again (a line's second half can only be copied from its first).
    Repeat,
}

/// Letters (or digits) in a reverse or sort example.
const WORD: usize = 8;

/// The fewest and most letters a repeat example repeats.
pub const REPEAT_MIN: usize = 6;
pub const REPEAT_MAX: usize = 12;
/// The letters a repeat example draws from (with 52, upper case too, the
/// preset's run had not begun to copy after 4,000 steps).
pub const REPEAT_LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";

/// `m` different letters of [`REPEAT_LETTERS`], drawn from `rng`.
pub fn different_letters(rng: &mut Rng, m: usize) -> Vec<u8> {
    let mut letters = REPEAT_LETTERS.to_vec();
    let count = letters.len();
    for i in 0..m {
        letters.swap(i, i + rng.below((count - i) as u64) as usize);
    }
    letters.truncate(m);
    letters
}

impl Task {
    pub const ALL: [Task; 4] = [Task::Reverse, Task::Sort, Task::Add, Task::Repeat];

    pub fn name(self) -> &'static str {
        match self {
            Task::Reverse => "reverse",
            Task::Sort => "sort",
            Task::Add => "add",
            Task::Repeat => "repeat",
        }
    }

    /// The task by name, or a line naming the ones there are.
    pub fn named(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                format!(
                    "there is no toy task `{name}`; there are {}",
                    Self::ALL
                        .map(|t| format!("{PREFIX}{}", t.name()))
                        .join(", ")
                )
            })
    }

    /// What the model is asked, in a sentence.
    pub fn describe(self) -> &'static str {
        match self {
            Task::Reverse => "reverse eight letters: `qwertyui>` → `iuytrewq`",
            Task::Sort => "sort eight digits: `31415926>` → `11234569`",
            Task::Add => "add two two-digit numbers: `47+85=` → `132`",
            Task::Repeat => "copy a repeated string: `kqzdmwak` → `qzdmwa`",
        }
    }

    /// Bytes in one example, its newline included (the longest, for the
    /// repeat task).
    pub fn example_len(self) -> usize {
        match self {
            Task::Reverse | Task::Sort => 2 * WORD + 2,
            Task::Add => 10,
            Task::Repeat => 2 * REPEAT_MAX + 1,
        }
    }

    /// Where windows may start: at an example's first byte (the example's
    /// length) or, for the repeat task, anywhere (1).
    pub fn align(self) -> usize {
        match self {
            Task::Repeat => 1,
            _ => self.example_len(),
        }
    }

    /// An example's prompt and its answer, as the accuracy counts them:
    /// up to and including `>` or `=`, and the answer with its newline;
    /// for the repeat task, the first half and the first letter of its copy
    /// (that one cannot be copied: a new letter could have begun it), and
    /// the rest of the copy without the newline (which no copying predicts:
    /// the letter after the first half's last one was the copy's first).
    pub fn split(self, example: &[u8]) -> (&[u8], &[u8]) {
        let (prompt, end) = match self {
            Task::Reverse | Task::Sort => (WORD + 1, example.len()),
            Task::Add => (6, example.len()),
            Task::Repeat => (example.len() / 2 + 1, example.len().saturating_sub(1)),
        };
        let end = end.max(prompt.min(example.len()));
        (&example[..prompt.min(end)], &example[prompt.min(end)..end])
    }

    /// Whether an answer ends with the example's newline (all but the
    /// repeat task's, [`Task::split`]).
    pub fn answer_has_newline(self) -> bool {
        self != Task::Repeat
    }

    /// The answer to `prompt` (without its newline).
    pub fn answer(self, prompt: &[u8]) -> Vec<u8> {
        match self {
            Task::Repeat => prompt[1..prompt.len().saturating_sub(1).max(1)].to_vec(),
            Task::Reverse => prompt[..WORD].iter().rev().copied().collect(),
            Task::Sort => {
                let mut digits = prompt[..WORD].to_vec();
                digits.sort_unstable();
                digits
            }
            Task::Add => {
                let number = |s: &[u8]| s.iter().fold(0u32, |n, &d| n * 10 + (d - b'0') as u32);
                format!("{:03}", number(&prompt[..2]) + number(&prompt[3..5])).into_bytes()
            }
        }
    }

    /// All examples: (the training ones, the held-out ones), each a whole
    /// line, every line different, always the same for a task.
    pub fn examples(self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut rng = Rng::for_stream(36, self.name());
        let mut prompts: Vec<Vec<u8>> = match self {
            // Different letters in each string, so each has one earlier
            // occurrence to copy from.
            Task::Repeat => {
                let mut seen = HashSet::new();
                let mut prompts = Vec::new();
                while prompts.len() < 20_000 {
                    let m = REPEAT_MIN + rng.below((REPEAT_MAX - REPEAT_MIN + 1) as u64) as usize;
                    let mut p = different_letters(&mut rng, m);
                    p.push(p[0]);
                    if seen.insert(p.clone()) {
                        prompts.push(p);
                    }
                }
                prompts
            }
            // Every sum there is, shuffled below.
            Task::Add => (0..10_000u32)
                .map(|i| format!("{:02}+{:02}=", i / 100, i % 100).into_bytes())
                .collect(),
            Task::Reverse | Task::Sort => {
                let (first, count) = match self {
                    Task::Reverse => (b'a', 26),
                    _ => (b'0', 10),
                };
                let mut seen = HashSet::new();
                let mut prompts = Vec::new();
                while prompts.len() < 20_000 {
                    let mut p: Vec<u8> =
                        (0..WORD).map(|_| first + rng.below(count) as u8).collect();
                    p.push(b'>');
                    if seen.insert(p.clone()) {
                        prompts.push(p);
                    }
                }
                prompts
            }
        };
        // Fisher–Yates, so that the held-out tenth is a fair sample.
        for i in (1..prompts.len()).rev() {
            prompts.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let lines: Vec<Vec<u8>> = prompts
            .into_iter()
            .map(|mut p| {
                p.extend(self.answer(&p));
                p.push(b'\n');
                debug_assert!(p.len() <= self.example_len());
                p
            })
            .collect();
        let held_out = lines.len() / 10;
        let (train, val) = lines.split_at(lines.len() - held_out);
        (train.to_vec(), val.to_vec())
    }

    /// The task as a corpus: the training examples, then the held-out ones
    /// as the validation split; windows start at examples.
    pub fn corpus(self, ctx: usize) -> Result<Corpus, CorpusError> {
        let (train, val) = self.examples();
        let corpus = Corpus {
            name: format!("{PREFIX}{}", self.name()),
            train: train.concat(),
            val: val.concat(),
            align: self.align(),
        };
        if corpus.val.len() < ctx + 1 {
            let len = corpus.train.len() + corpus.val.len();
            return Err(CorpusError::TooShort {
                name: corpus.name,
                len,
                ctx,
                need: len + ctx + 1 - corpus.val.len(),
            });
        }
        Ok(corpus)
    }

    /// The task a corpus is, by its name.
    pub fn of(corpus: &Corpus) -> Option<Task> {
        let name = corpus.name.strip_prefix(PREFIX)?;
        Self::named(name).ok()
    }
}

/// The first largest logit's byte (what temperature 0 samples).
pub fn argmax(logits: &[f32]) -> u8 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_are_fixed_length_answered_and_held_out_apart() {
        for task in Task::ALL {
            let (train, val) = task.examples();
            assert_eq!(val.len() * 9, train.len(), "{task:?}");
            let seen: HashSet<&Vec<u8>> = train.iter().collect();
            for line in train.iter().chain(&val) {
                if task == Task::Repeat {
                    let m = (line.len() - 1) / 2;
                    assert!((REPEAT_MIN..=REPEAT_MAX).contains(&m), "{line:?}");
                    assert_eq!(line[..m], line[m..2 * m], "{line:?}");
                    let distinct: HashSet<&u8> = line[..m].iter().collect();
                    assert_eq!(distinct.len(), m, "{line:?}");
                } else {
                    assert_eq!(line.len(), task.example_len());
                }
                let (prompt, answer) = task.split(line);
                let newline = usize::from(task.answer_has_newline());
                assert_eq!(&answer[..answer.len() - newline], task.answer(prompt));
                assert_eq!(answer.last() == Some(&b'\n'), task.answer_has_newline());
            }
            assert!(val.iter().all(|l| !seen.contains(l)), "{task:?}");
            assert_eq!(task.examples(), (train, val), "always the same");
        }
        assert_eq!(Task::Add.answer(b"47+85="), b"132");
        assert_eq!(Task::Sort.answer(b"31415926>"), b"11234569");
        assert_eq!(Task::Reverse.answer(b"qwertyui>"), b"iuytrewq");
        assert_eq!(Task::Repeat.split(b"abcdefabcdef\n"), (&b"abcdefa"[..], &b"bcdef"[..]));
        assert_eq!(Task::Repeat.answer(b"abcdefa"), b"bcdef");
    }

    #[test]
    fn task_windows_start_at_examples() {
        let task = Task::Reverse;
        let corpus = Corpus::named(std::path::Path::new("task:reverse"), 17).unwrap();
        assert_eq!(Task::of(&corpus), Some(task));
        let mut sampler = super::super::BatchSampler::new(3);
        let batch = sampler.next(&corpus, 64, 17);
        for row in batch.inputs.chunks(17) {
            assert_eq!(row[WORD], b'>' as u32, "{row:?}");
        }
        let err = Corpus::named(std::path::Path::new("task:nope"), 17)
            .unwrap_err()
            .to_string();
        assert!(err.contains("task:reverse"), "{err}");
    }
}
