//! Fuzzing the parsers of what a user hands the program (issue 18): the
//! checkpoint loader, the original TinyGPT's `.tinygpt` reader (issue 56;
//! its fp32, fp16 and int4 layouts), the preset and lesson RON parsers, the
//! app's link fragment and the corpus loader.
//!
//! Each target mutates the files of its seed corpus (`tests/fuzz/seeds/NAME/`,
//! plus the built-in presets and lessons) with byte-level mutations (flips,
//! inserts, deletes, splices, interesting numbers and tokens) and checks a
//! property: the parser returns (never panics, never takes a second), and
//! what it accepts survives a round trip through its writer.
//!
//! Why arbtest: it runs on stable Rust inside `cargo test` (cargo-fuzz needs
//! nightly and libFuzzer), it is tiny, it budgets by time, and a failure
//! prints a seed that replays it. It is not coverage-guided; the seeds and
//! the mutations make up for some of that, and the seed corpus grows with
//! every finding.
//!
//! `bash tests/fuzz/run.sh SECONDS` runs every target for SECONDS each;
//! `cargo test` runs each for `TINYGPT_FUZZ_SECONDS` (default 2), a smoke
//! run. A failing input is written to `$TMPDIR/tinygpt-fuzz-failures/`; move
//! it to `tests/fuzz/regressions/NAME/` and it is replayed by every run.

use arbtest::arbitrary::{Result as ArbResult, Unstructured};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tinygpt::data::{BatchSampler, Corpus, validation_batches};
use tinygpt::lesson::{BUILTIN_LESSONS, Lesson};
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::{BUILTIN_PRESETS, Config};
use tinygpt::program::Program;

/// The longest one input may take before it counts as a hang.
const SLOW: Duration = Duration::from_secs(1);

/// Tokens the mutator splices in: RON and JSON syntax, the programs' names,
/// and numbers at the edges of their types.
const DICTIONARY: &[&str] = &[
    "0",
    "-1",
    "1",
    "255",
    "256",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "1e309",
    "-0.0",
    "NaN",
    "inf",
    "-inf",
    "1e-45",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\"",
    "\\",
    "Some(",
    "None",
    "true",
    "false",
    "n_layer",
    "n_head",
    "d_model",
    "ctx",
    "batch",
    "steps",
    "lr",
    "lab",
    "causal_mask",
    "Cosine",
    "Constant",
    "dtype",
    "F16",
    "F32",
    "F64",
    "shape",
    "data_offsets",
    "__metadata__",
    "tinygpt/1",
    "transformer.wte.weight",
    "transformer.h.0.attn.c_attn.weight",
    "adam.m.",
    "loss_history",
    "sampler_state",
    "&",
    "=",
    "#",
    "preset=",
    "lesson=",
    "step=",
    "bench=",
    "\u{0}",
    "\u{202e}",
    "é",
    "TGPT",
    "int4BlockSize",
    "weightDtype",
    "\"int4\"",
    "\"fp16\"",
    "\"fp32\"",
    "includesOptimizerState",
    "manifest",
    "lossHistory",
    "dModel",
    "dMlp",
    "layers",
    "heads",
    "9223372036854775810",
];

/// The files of a seed folder.
fn seeds(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/seeds")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed folder {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The inputs that once failed, replayed before any mutation.
fn regressions(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/regressions")
        .join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
        .collect()
}

/// A position in `0..len`, half the time within the first `focus` bytes
/// (a checkpoint's header, where a mutation changes meaning, not weights).
fn position(u: &mut Unstructured, len: usize, focus: usize) -> ArbResult<usize> {
    if len == 0 {
        return Ok(0);
    }
    let end = if focus > 0 && focus < len && u.arbitrary::<bool>()? {
        focus
    } else {
        len
    };
    u.choose_index(end)
}

/// One seed, mutated a few times over.
fn mutate(
    u: &mut Unstructured,
    seeds: &[Vec<u8>],
    focus: impl Fn(&[u8]) -> usize,
) -> ArbResult<Vec<u8>> {
    let mut data = u.choose(seeds)?.clone();
    for _ in 0..u.int_in_range(1..=6)? {
        let focus = focus(&data);
        let len = data.len();
        match u.int_in_range(0..=8)? {
            0 if len > 0 => {
                let at = position(u, len, focus)?;
                data[at] ^= 1 << u.int_in_range(0..=7)?;
            }
            1 if len > 0 => {
                let at = position(u, len, focus)?;
                data[at] =
                    *u.choose(&[0u8, 0x7f, 0x80, 0xff, b'0', b'9', b'"', b'(', b')', b','])?;
            }
            2 if len > 0 => {
                let at = position(u, len, focus)?;
                let n = u.int_in_range(1..=(len - at).min(64))?;
                data.drain(at..at + n);
            }
            3 => {
                let at = position(u, len, focus)?;
                let bytes: Vec<u8> = (0..u.int_in_range(1..=16)?)
                    .map(|_| u.arbitrary())
                    .collect::<ArbResult<_>>()?;
                data.splice(at..at, bytes);
            }
            4 if len > 0 => {
                let from = u.choose_index(len)?;
                let n = u.int_in_range(1..=(len - from).min(256))?;
                let copy = data[from..from + n].to_vec();
                let at = position(u, len, focus)?;
                data.splice(at..at, copy);
            }
            5 => data.truncate(position(u, len, focus)?),
            6 => {
                let at = position(u, len, focus)?;
                let token = u.choose(DICTIONARY)?.as_bytes().to_vec();
                data.splice(at..at, token);
            }
            7 if len > 0 => {
                // Replace a number (a run of digits) with one from the dictionary.
                let at = position(u, len, focus)?;
                if let Some(start) = (at..len).find(|&i| data[i].is_ascii_digit()) {
                    let end = (start..len)
                        .find(|&i| !data[i].is_ascii_digit())
                        .unwrap_or(len);
                    let token = u.choose(&DICTIONARY[..18])?.as_bytes().to_vec();
                    data.splice(start..end, token);
                }
            }
            8 => {
                // Splice: the start of this input and the end of another seed.
                let other = u.choose(seeds)?;
                let cut = position(u, len, focus)?;
                let from = u.choose_index(other.len().max(1))?.min(other.len());
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    Ok(data)
}

/// Runs `check` on every regression input, then on mutated seeds for the
/// time budget; reports how many inputs ran and how many the parser took.
fn fuzz(
    name: &str,
    seeds: Vec<Vec<u8>>,
    focus: impl Fn(&[u8]) -> usize,
    check: impl Fn(&[u8]) -> bool,
) {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    for (path, input) in regressions(name) {
        let started = Instant::now();
        check(&input);
        assert!(
            started.elapsed() < SLOW,
            "{name}: {path} took {:?}",
            started.elapsed()
        );
    }
    let seconds: f64 = std::env::var("TINYGPT_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runs = AtomicU64::new(0);
    let accepted = AtomicU64::new(0);
    let started = Instant::now();
    let mut builder = arbtest::arbtest(|u| {
        let input = mutate(u, &seeds, &focus)?;
        runs.fetch_add(1, Ordering::Relaxed);
        let one = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input)));
        let took = one.elapsed();
        if outcome.is_err() || took > SLOW {
            let dir = std::env::temp_dir().join("tinygpt-fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join(format!("{name}-{:016x}", fnv(&input)));
            std::fs::write(&file, &input).unwrap();
            eprintln!("{name}: failing input written to {}", file.display());
        }
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(took_it) => {
                assert!(took < SLOW, "{name}: one input took {took:?} (a hang?)");
                if took_it {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    })
    .budget(Duration::from_secs_f64(seconds))
    .size_min(64)
    .size_max(4096);
    if let Some(seed) = std::env::var("TINYGPT_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    {
        builder = builder.seed(seed);
    }
    builder.run();
    println!(
        "fuzz {name}: {} inputs in {:.1} s, {} accepted by the parser",
        runs.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        accepted.load(Ordering::Relaxed)
    );
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// A safetensors header's end: 8 bytes of length, then the JSON.
fn header_end(bytes: &[u8]) -> usize {
    bytes
        .get(..8)
        .map(|n| u64::from_le_bytes(n.try_into().unwrap()).saturating_add(8))
        .map_or(bytes.len(), |end| end.min(bytes.len() as u64) as usize)
}

/// A checkpoint that was read is a runnable model (the program has its
/// parameters) that saves in f32 and loads again unchanged.
fn runs_saves_and_loads_unchanged(checkpoint: &Checkpoint) {
    let program = Program::new(&checkpoint.config);
    assert_eq!(program.params().count(), checkpoint.params.len());
    let again = checkpoint
        .to_bytes(Precision::F32, "again.safetensors")
        .expect("a checkpoint that was read saves");
    let reloaded = Checkpoint::from_bytes(&again, "again.safetensors")
        .unwrap_or_else(|e| panic!("a checkpoint that was read loads again: {e}"));
    assert_eq!(&reloaded, checkpoint);
}

#[test]
fn fuzz_checkpoint_loader() {
    fuzz("checkpoint", seeds("checkpoint"), header_end, |bytes| {
        let Ok(checkpoint) = Checkpoint::from_bytes(bytes, "fuzzed.safetensors") else {
            return false;
        };
        // What loads is a runnable model that saves and loads unchanged.
        runs_saves_and_loads_unchanged(&checkpoint);
        true
    });
}

/// A `.tinygpt` header's end: magic, version and 4 bytes of length, then
/// the JSON.
fn tinygpt_header_end(bytes: &[u8]) -> usize {
    bytes
        .get(8..12)
        .map(|n| u32::from_le_bytes(n.try_into().unwrap()) as usize + 12)
        .map_or(bytes.len(), |end| end.min(bytes.len()))
}

#[test]
fn fuzz_tinygpt_reader() {
    fuzz("tinygpt", seeds("tinygpt"), tinygpt_header_end, |bytes| {
        let Ok(checkpoint) = tinygpt::model::original::import(bytes, "fuzzed.tinygpt") else {
            return false;
        };
        // What it reads is a runnable model that saves as one of our
        // checkpoints and loads from it unchanged.
        runs_saves_and_loads_unchanged(&checkpoint);
        true
    });
}

#[test]
fn fuzz_preset_parser() {
    let mut seeds = seeds("preset");
    seeds.extend(
        BUILTIN_PRESETS
            .iter()
            .map(|(_, text)| text.as_bytes().to_vec()),
    );
    fuzz(
        "preset",
        seeds,
        |_| 0,
        |bytes| {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return false;
            };
            let Ok(config) = Config::from_ron(text, "fuzzed.ron") else {
                return false;
            };
            // An accepted preset has a program and sizes that do not overflow,
            // and writes back as RON that parses to itself.
            let program = Program::new(&config);
            let numel: usize = program.params().map(|id| program.tensors[id].numel()).sum();
            assert_eq!(numel, config.param_count());
            let _ = config.tokens_per_step();
            let _ = tinygpt::backends::cpu_bytes(&program);
            let written = ron::to_string(&config).unwrap();
            assert_eq!(Config::from_ron(&written, "written.ron").unwrap(), config);
            true
        },
    );
}

#[test]
fn fuzz_lesson_parser() {
    let mut seeds = seeds("lesson");
    seeds.extend(
        BUILTIN_LESSONS
            .iter()
            .map(|(_, text)| text.as_bytes().to_vec()),
    );
    fuzz(
        "lesson",
        seeds,
        |_| 0,
        |bytes| {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return false;
            };
            let Ok(lesson) = Lesson::parse("fuzzed.ron", text) else {
                return false;
            };
            assert!(
                !lesson.steps.is_empty(),
                "a lesson without steps was accepted"
            );
            for step in &lesson.steps {
                if let Some(lab) = &step.lab {
                    assert!(
                        lab.lr_scale.is_finite() && lab.lr_scale > 0.0,
                        "lr_scale {}",
                        lab.lr_scale
                    );
                }
                if let Some(q) = &step.question {
                    assert!(
                        q.answer < q.choices.len(),
                        "answer {} of {}",
                        q.answer,
                        q.choices.len()
                    );
                }
            }
            true
        },
    );
}

#[cfg(feature = "app")]
#[test]
fn fuzz_link_fragment() {
    use tinygpt::app::link::Link;
    let seeds: Vec<Vec<u8>> = seeds("link")
        .concat()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_vec())
        .collect();
    fuzz(
        "link",
        seeds,
        |_| 0,
        |bytes| {
            let text = String::from_utf8_lossy(bytes);
            let (link, problems) = Link::parse(&text);
            // What a link keeps, it writes back as a fragment that reads the same.
            let fragment = link.fragment();
            let (again, again_problems) = Link::parse(&fragment);
            assert!(
                again_problems.is_empty(),
                "{fragment:?}: {again_problems:?}"
            );
            assert_eq!(again.fragment(), fragment);
            problems.is_empty()
        },
    );
}

#[test]
fn fuzz_corpus_loader() {
    fuzz(
        "corpus",
        seeds("corpus"),
        |_| 0,
        |bytes| {
            // The context comes from the input's last byte, so short corpora
            // meet long contexts too.
            let ctx = 1 + *bytes.last().unwrap_or(&0) as usize % 64;
            let Ok(corpus) = Corpus::from_bytes("fuzzed.txt", bytes, ctx) else {
                assert!(bytes.len() < Corpus::min_len(ctx));
                return false;
            };
            let mut sampler = BatchSampler::new(fnv(bytes));
            let batch = sampler.next(&corpus, 3, ctx);
            assert_eq!(batch.inputs.len(), 3 * ctx);
            for b in 0..3 {
                let row = |v: &[u32]| v[b * ctx..(b + 1) * ctx].to_vec();
                assert_eq!(row(&batch.inputs)[1..], row(&batch.targets)[..ctx - 1]);
            }
            let val = validation_batches(&corpus, 2, ctx, 2, 7);
            assert!(val.iter().all(|b| b.targets.len() == 2 * ctx));
            true
        },
    );
}
