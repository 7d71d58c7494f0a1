//! Data: the byte tokenizer, corpora and their train/validation split, and the
//! deterministic batch sampler that every backend consumes.

pub mod rng;
pub mod tasks;

use rng::Rng;
use std::path::Path;

/// TinyShakespeare, the default corpus, compiled into the binary.
pub const TINY_SHAKESPEARE: &[u8] = include_bytes!("../../assets/tinyshakespeare.txt");

/// The byte tokenizer: every byte of the text is one token (vocab 256).
pub mod tokenizer {
    /// Name recorded in checkpoints.
    pub const NAME: &str = "bytes-256";

    pub fn encode(text: &str) -> Vec<u8> {
        text.as_bytes().to_vec()
    }

    /// Decodes bytes to text, replacing invalid UTF-8 with U+FFFD.
    pub fn decode_lossy(tokens: &[u8]) -> String {
        String::from_utf8_lossy(tokens).into_owned()
    }
}

/// Why a corpus was refused.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error(
        "cannot read corpus {path}: {message} (give the path of a readable text file with --corpus)"
    )]
    Io { path: String, message: String },
    #[error(
        "corpus {name} is too short: {len} bytes, but a context of {ctx} needs at least {need} bytes \
         so that both the 90% train and 10% validation splits hold one window of ctx+1 bytes \
         (use a longer text or a preset with a smaller ctx)"
    )]
    TooShort {
        name: String,
        len: usize,
        ctx: usize,
        need: usize,
    },
}

/// The largest corpus file read (1 GiB): it is held in memory, with its
/// split.
pub const MAX_CORPUS_BYTES: u64 = 1 << 30;

/// Reads a whole file a user named, refusing up front what would hang or
/// exhaust memory: anything but a regular file (a folder, a device such as
/// /dev/zero, a pipe), and a file over `limit` bytes (also one that grows
/// past it while read). The error says which, without the path.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    // By its type before it is opened: opening a pipe with no writer blocks
    // forever (`--corpus` given a FIFO).
    let not_regular = "it is not a regular file (a folder, a device or a pipe)";
    if !std::fs::metadata(path)
        .map_err(|e| e.to_string())?
        .is_file()
    {
        return Err(not_regular.into());
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // And should a pipe be swapped in after that look, it is opened without
    // waiting for a writer (no effect on a regular file).
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(not_regular.into());
    }
    if meta.len() > limit {
        return Err(format!(
            "it is {} MB, more than the {} MB this reads (it is held in memory)",
            meta.len() >> 20,
            limit >> 20
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!("it grew past {} MB while it was read", limit >> 20));
    }
    Ok(bytes)
}

/// A small text file a user named (a preset, a lesson, bench lines), read
/// as [`read_file`] reads (never blocking on a pipe), at most 64 MB.
pub fn read_text(path: &Path) -> Result<String, String> {
    String::from_utf8(read_file(path, 64 << 20)?).map_err(|_| "it is not UTF-8 text".to_string())
}

/// A tokenized corpus split into contiguous train (first 90%) and
/// validation (last 10%) parts.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub name: String,
    pub train: Vec<u8>,
    pub val: Vec<u8>,
    /// Windows start at multiples of this many bytes: 1 for text (anywhere),
    /// a toy task's example length for its examples ([`tasks::Task`]), so
    /// that every window starts at an example's first byte.
    pub align: usize,
}

impl Corpus {
    /// Splits `bytes` 90/10 and checks that each split holds a window of `ctx + 1`.
    pub fn from_bytes(name: &str, bytes: &[u8], ctx: usize) -> Result<Self, CorpusError> {
        let need = Self::min_len(ctx);
        if bytes.len() < need {
            return Err(CorpusError::TooShort {
                name: name.to_string(),
                len: bytes.len(),
                ctx,
                need,
            });
        }
        let split = bytes.len() * 9 / 10;
        Ok(Self {
            name: name.to_string(),
            train: bytes[..split].to_vec(),
            val: bytes[split..].to_vec(),
            align: 1,
        })
    }

    /// The smallest corpus whose 10% validation split still holds `ctx + 1` bytes.
    pub fn min_len(ctx: usize) -> usize {
        // val = len - floor(0.9 len) >= ctx + 1  <=  len >= 10 (ctx + 1)
        10 * (ctx + 1)
    }

    pub fn tiny_shakespeare(ctx: usize) -> Result<Self, CorpusError> {
        Self::from_bytes("tinyshakespeare.txt", TINY_SHAKESPEARE, ctx)
    }

    /// Reads a corpus file: a regular file of at most [`MAX_CORPUS_BYTES`]
    /// (a device such as /dev/zero, or a file too big to hold in memory, is
    /// refused before it is read).
    pub fn from_file(path: &Path, ctx: usize) -> Result<Self, CorpusError> {
        let bytes = read_file(path, MAX_CORPUS_BYTES).map_err(|message| CorpusError::Io {
            path: path.display().to_string(),
            message,
        })?;
        Self::from_bytes(&path.display().to_string(), &bytes, ctx)
    }

    /// The corpus a `--corpus` argument names: a toy task the program
    /// makes (`task:reverse`, [`tasks::Task`]), or a file.
    pub fn named(arg: &Path, ctx: usize) -> Result<Self, CorpusError> {
        match arg.to_str().and_then(|a| a.strip_prefix(tasks::PREFIX)) {
            Some(name) => tasks::Task::named(name)
                .map_err(|message| CorpusError::Io {
                    path: arg.display().to_string(),
                    message,
                })?
                .corpus(ctx),
            None => Self::from_file(arg, ctx),
        }
    }
}

/// One batch: `inputs[b*T + t]` and the next-byte `targets[b*T + t]`. (B, T)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub batch: usize,
    pub ctx: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
}

impl Batch {
    /// A batch of `batch` random windows of `ctx + 1` bytes from `data`.
    pub fn sample(data: &[u8], batch: usize, ctx: usize, rng: &mut Rng) -> Self {
        Self::sample_aligned(data, 1, batch, ctx, rng)
    }

    /// [`Batch::sample`] with windows starting at multiples of `align`
    /// bytes only (one draw per window either way).
    pub fn sample_aligned(
        data: &[u8],
        align: usize,
        batch: usize,
        ctx: usize,
        rng: &mut Rng,
    ) -> Self {
        // starts 0, align, …, the last that leaves ctx + 1 bytes
        let windows = ((data.len() - ctx - 1) / align + 1) as u64;
        let mut inputs = Vec::with_capacity(batch * ctx);
        let mut targets = Vec::with_capacity(batch * ctx);
        for _ in 0..batch {
            let start = rng.below(windows) as usize * align;
            let w = &data[start..start + ctx + 1];
            inputs.extend(w[..ctx].iter().map(|&b| b as u32));
            targets.extend(w[1..].iter().map(|&b| b as u32));
        }
        Self {
            batch,
            ctx,
            inputs,
            targets,
        }
    }
}

impl Batch {
    /// Each row as a batch of its own (what a batch-1 program runs).
    pub fn rows(&self) -> impl Iterator<Item = Batch> + '_ {
        let t = self.ctx;
        (0..self.batch).map(move |b| Batch {
            batch: 1,
            ctx: t,
            inputs: self.inputs[b * t..(b + 1) * t].to_vec(),
            targets: self.targets[b * t..(b + 1) * t].to_vec(),
        })
    }
}

/// The stream of training batches for one run: a seeded sampler whose state
/// can be saved in a checkpoint and restored, so a resumed run sees the same
/// batches it would have seen.
#[derive(Clone, Debug)]
pub struct BatchSampler {
    pub rng: Rng,
}

impl BatchSampler {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::for_stream(seed, "train-batches"),
        }
    }

    pub fn next(&mut self, corpus: &Corpus, batch: usize, ctx: usize) -> Batch {
        Batch::sample_aligned(&corpus.train, corpus.align, batch, ctx, &mut self.rng)
    }
}

/// The fixed validation batches of a run: the same windows at every
/// evaluation, so successive validation losses are comparable.
pub fn validation_batches(
    corpus: &Corpus,
    batch: usize,
    ctx: usize,
    count: usize,
    seed: u64,
) -> Vec<Batch> {
    let mut rng = Rng::for_stream(seed, "val-batches");
    (0..count)
        .map(|_| Batch::sample_aligned(&corpus.val, corpus.align, batch, ctx, &mut rng))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_90_10_and_contiguous() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let c = Corpus::from_bytes("x", &bytes, 8).unwrap();
        assert_eq!(c.train.len(), 900);
        assert_eq!(c.val.len(), 100);
        assert_eq!([c.train.clone(), c.val.clone()].concat(), bytes);
    }

    #[test]
    fn too_short_corpus_is_refused() {
        let err = Corpus::from_bytes("short.txt", b"hello", 8)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("short.txt") && err.contains("too short"),
            "{err}"
        );
        assert!(Corpus::from_bytes("e", b"", 1).is_err());
    }

    #[test]
    fn targets_are_inputs_shifted_by_one() {
        let c = Corpus::tiny_shakespeare(16).unwrap();
        let mut s = BatchSampler::new(1);
        let b = s.next(&c, 4, 16);
        for r in 0..4 {
            assert_eq!(
                b.inputs[r * 16 + 1..r * 16 + 16],
                b.targets[r * 16..r * 16 + 15]
            );
        }
    }

    #[test]
    fn windows_reach_both_ends_of_small_data() {
        let data: Vec<u8> = (0..12).collect();
        let mut rng = Rng::new(3);
        let mut first = false;
        let mut last = false;
        for _ in 0..500 {
            let b = Batch::sample(&data, 1, 4, &mut rng);
            first |= b.inputs[0] == 0;
            last |= *b.targets.last().unwrap() == 11;
        }
        assert!(first && last);
    }
}
