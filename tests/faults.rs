//! The catalogue of faults and bad input (issue 18): each row is something a
//! user can do by mistake, what they type, and the words of the message that
//! must come back. Every row runs the real command line: it must fail with
//! that message, quickly, without a panic and without writing anything,
//! and the rows are docs/faults.md's table of bad input. (More cases, older
//! than this file, are in `tests/cli.rs` and `tests/checkpoint.rs`; the
//! app's are in `tests/app.rs`; docs/faults.md lists them all.)
//!
//! Then the faults that need a running process: Ctrl-C and SIGTERM mid-run, a sample of
//! a model trained on binary bytes, resuming an export without AdamW state;
//! and what is written or deleted beside an output (issue 56): symlinks and
//! pipes at the old temporary names, a corpus named like a killed save's
//! temporary file, a stale lock whose pid was reused, a 251-byte name.
//!
//! Without the `app` feature the catalogue's `app` rows are not run (the
//! binary has no `app` command); the rest are.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// A preset with these lines in place of tiny's shape.
fn preset(dir: &Path, name: &str, shape: &str) -> String {
    let text = include_str!("../presets/tiny.ron")
        .replace("n_layer: 2,", "")
        .replace("n_head: 3,", "")
        .replace("d_model: 48,", "")
        .replace("ctx: 32,", "")
        .replace("batch: 16,", "")
        .replacen('(', &format!("({shape},"), 1);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The standard error of a run that must have failed with a message, not
/// a panic; `what` names the case in the assertion.
fn refused_without_panic(run: &std::process::Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "{what}: accepted\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}: a panic\n{stderr}");
    stderr
}

/// A file a row must leave as it was: its bytes, or (a node the test made)
/// its type.
enum Kept {
    Bytes(std::path::PathBuf, Vec<u8>),
    Special(std::path::PathBuf),
}

impl Kept {
    fn bytes(path: &Path) -> Kept {
        Kept::Bytes(path.to_path_buf(), std::fs::read(path).unwrap())
    }
    fn check(&self, what: &str) {
        match self {
            Kept::Bytes(path, before) => assert!(
                std::fs::read(path).ok().as_ref() == Some(before),
                "{what}: {} changed",
                path.display()
            ),
            Kept::Special(path) => {
                let meta = std::fs::symlink_metadata(path).unwrap();
                assert!(!meta.is_file(), "{what}: {} became a regular file", path.display());
            }
        }
    }
}

/// One row of the catalogue: what the user did, the command (with any
/// environment), the words its message must hold, and the file it must
/// leave alone.
struct Row {
    what: &'static str,
    env: Vec<(&'static str, &'static str)>,
    args: Vec<String>,
    words: Vec<&'static str>,
    /// Words its message must not hold (a wrong name for the problem).
    not: Vec<&'static str>,
    kept: Option<Kept>,
}

fn row(what: &'static str, args: &[&str], words: &[&'static str]) -> Row {
    Row {
        what,
        env: vec![],
        args: args.iter().map(|a| a.to_string()).collect(),
        words: words.to_vec(),
        not: vec![],
        kept: None,
    }
}

impl Row {
    fn keeps(mut self, kept: Kept) -> Row {
        self.kept = Some(kept);
        self
    }
    fn with_env(mut self, key: &'static str, value: &'static str) -> Row {
        self.env.push((key, value));
        self
    }
    fn never_says(mut self, words: &[&'static str]) -> Row {
        self.not.extend_from_slice(words);
        self
    }
}

/// Runs the command line with `args` in `dir`, failing the test if it has
/// not finished within a minute (a refusal is immediate; a hang is a bug).
fn run_within_a_minute(dir: &Path, env: &[(&str, &str)], args: &[String]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .current_dir(dir)
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both pipes drained as the command writes: a JSON line longer than a
    // pipe's buffer (64 KB) would otherwise block it, and look like a hang.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut pipe, &mut bytes).unwrap();
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed().as_secs() > 60 {
            child.kill().unwrap();
            panic!("tinygpt {} hung for a minute", args.join(" "));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// A checkpoint like the shipped tiny, changed by `edit`, saved in `dir`.
fn edited_checkpoint(
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut tinygpt::model::checkpoint::Checkpoint),
) -> String {
    use tinygpt::model::checkpoint::{Checkpoint, OptimizerState, Precision};
    let mut ck =
        Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny").unwrap();
    if ck.optimizer.is_none() {
        let zeros = |prefix: &str| {
            ck.params
                .iter()
                .map(|p| tinygpt::model::params::NamedTensor {
                    name: format!("{prefix}{}", p.name),
                    shape: p.shape.clone(),
                    values: vec![0.0; p.values.len()],
                })
                .collect()
        };
        ck.optimizer = Some(OptimizerState {
            m: zeros("adam.m."),
            v: zeros("adam.v."),
        });
    }
    edit(&mut ck);
    let path = dir.join(name);
    ck.save(&path, Precision::F32).unwrap();
    name.to_string()
}

#[test]
fn every_bad_input_in_the_catalogue_is_refused_with_its_reason() {
    let dir = common::scratch_dir("faults");
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/checkpoints/tiny.safetensors"
    );
    let deep = preset(
        &dir,
        "deep.ron",
        "n_layer: 2000, n_head: 1, d_model: 8, ctx: 8, batch: 1",
    );
    let wide = preset(
        &dir,
        "wide.ron",
        "n_layer: 100, n_head: 64, d_model: 8192, ctx: 8, batch: 1",
    );
    // Within every per-tensor limit, but 5 TB of activations: no machine has it.
    let giant = preset(
        &dir,
        "giant.ron",
        "n_layer: 1024, n_head: 1, d_model: 64, ctx: 1024, batch: 1024",
    );
    // The files a user has, which no command may write over (issue 29).
    let text = &include_str!("../assets/tinyshakespeare.txt")[..4000];
    std::fs::write(dir.join("corpus.txt"), text).unwrap();
    std::fs::copy(shipped, dir.join("run.safetensors")).unwrap();
    std::fs::copy(shipped, dir.join("earlier.safetensors")).unwrap();
    std::fs::write(dir.join("shot.png"), b"an earlier screenshot").unwrap();
    std::fs::create_dir_all(dir.join("report")).unwrap();
    std::fs::write(dir.join("report/bench.jsonl"), b"{}\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("corpus.txt", dir.join("link.safetensors")).unwrap();
    // A lock held by a live process (this test's) that is not the command.
    std::fs::write(
        dir.join("busy.safetensors.lock"),
        tinygpt::output::lock_text(std::process::id()),
    )
    .unwrap();
    // Files at an output's lock name that are no lock of ours (issue 56):
    // a user's file that holds a number, and a pipe.
    std::fs::write(dir.join("server.lock"), b"4000000\n").unwrap();
    make_fifo(&dir.join("piped.safetensors.lock"));
    // A .tinygpt whose int4 block size overflows the old size check (see
    // original.rs's a_crafted_header_is_refused_never_a_panic), and one cut short.
    let state = [0u8; 64];
    let crafted = tinygpt::model::original::encode(
        &serde_json::json!({ "version": 2,
            "config": { "ctx": 8, "layers": 1, "heads": 2, "dModel": 8 },
            "includesOptimizerState": false, "weightDtype": "int4",
            "int4BlockSize": 9_223_372_036_854_775_810u64 }),
        &state,
    );
    std::fs::write(dir.join("crafted.tinygpt"), crafted).unwrap();
    std::fs::write(dir.join("cut.tinygpt"), b"TGPT\x02\0\0\0\xff\0\0\0{}").unwrap();
    let special = dir.join("special");
    make_special_file(&special);
    let pipe = dir.join("pipe.txt");
    make_fifo(&pipe);
    let big = edited_checkpoint(&dir, "big.safetensors", |ck| ck.params[0].values[7] = 1e6);
    let negative = edited_checkpoint(&dir, "negative-v.safetensors", |ck| {
        ck.optimizer.as_mut().unwrap().v[3].values[5] = -0.25;
    });
    let unstepped = edited_checkpoint(&dir, "unstepped.safetensors", |ck| {
        ck.step = 0;
        ck.optimizer.as_mut().unwrap().m[2].values[0] = 0.01;
    });
    // Finite weights whose first forward pass overflows.
    let overflowing = edited_checkpoint(&dir, "overflowing.safetensors", |ck| {
        ck.params[0].values.fill(f32::MAX);
    });
    // Files in other formats that a run continued in place would replace
    // (issue 56): an original TinyGPT file and a 4-bit export.
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/original/original.tinygpt"),
        dir.join("original.tinygpt"),
    )
    .unwrap();
    let int4 = dir.join("tiny-int4.safetensors");
    common::tinygpt(&["export", "--checkpoint", shipped, "--int4", "--out", int4.to_str().unwrap()]);
    // The checkpoint the app opens, at the name its Save writes.
    std::fs::copy(shipped, dir.join("tinygpt-app.safetensors")).unwrap();
    // A prompt longer than tiny's context, and one that differs from it only
    // in its first byte, which the context cuts off.
    let long_clean = format!("A{}", "b".repeat(40));
    let long_corrupt = format!("B{}", "b".repeat(40));
    let keep = |name: &str| Kept::bytes(&dir.join(name));
    let out = "never.safetensors";
    let catalogue: Vec<Row> = vec![
        row(
            "resuming with another preset (the checkpoint holds its model)",
            &["train", "--resume", shipped, "--preset", "small", "--out", out],
            &["--preset", "--resume", "cannot be used with"],
        ),
        // lavapipe, as every GPU here and in CI: no cooperative matrices.
        row(
            "mixed precision where the GPU has no tensor cores",
            &["train", "--preset", "tiny", "--precision", "mixed", "--out", out],
            &["--precision mixed cannot run here", "no cooperative matrices", "give --precision f32"],
        ),
        row(
            "mixed precision on the CPU backend",
            &["train", "--preset", "tiny", "--precision", "mixed", "--backend", "cpu", "--out", out],
            &["CPU backend computes in f32", "leave out --backend cpu"],
        ),
        row(
            "a device as the corpus",
            &["train", "--preset", "tiny", "--corpus", "/dev/zero", "--out", out],
            &["/dev/zero", "not a regular file"],
        ),
        row(
            "a folder as the corpus",
            &["train", "--preset", "tiny", "--corpus", "/tmp", "--out", out],
            &["not a regular file"],
        ),
        row(
            "a pipe with no writer as the corpus (refused, not waited on)",
            &["train", "--preset", "tiny", "--corpus", "pipe.txt", "--out", out],
            &["pipe.txt", "not a regular file"],
        ),
        row(
            "a device as the checkpoint",
            &["generate", "--checkpoint", "/dev/zero"],
            &["/dev/zero", "not a regular file"],
        ),
        row(
            "two thousand layers",
            &["train", "--preset", &deep, "--out", out],
            &["n_layer", "more than 1024 layers"],
        ),
        row(
            "80 billion parameters",
            &["train", "--preset", &wide, "--out", out],
            &["d_model", "parameters, more than"],
        ),
        row(
            "more memory than the machine has, on the CPU",
            &["train", "--preset", &giant, "--backend", "cpu", "--out", out],
            &["the CPU backend needs", "MB of memory", "smaller preset"],
        ),
        row(
            "a folder as the output",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "/tmp"],
            &["folder"],
        ),
        row(
            "the corpus as the output",
            &[
                "train", "--preset", "tiny", "--steps", "1", "--corpus", "corpus.txt", "--out",
                "corpus.txt", "--force",
            ],
            &["--out corpus.txt", "same file as --corpus"],
        )
        .keeps(keep("corpus.txt")),
        row(
            "a symlink to the corpus as the output",
            &[
                "train", "--preset", "tiny", "--steps", "1", "--corpus", "corpus.txt", "--out",
                "link.safetensors",
            ],
            &["same file as --corpus"],
        )
        .keeps(keep("corpus.txt")),
        row(
            "a device or a pipe as the output (one the test made)",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "special", "--force"],
            &["special", "not a regular file", "never writes over one"],
        )
        .keeps(Kept::Special(special.clone())),
        row(
            "an earlier run's checkpoint as the output",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "earlier.safetensors"],
            &["already exists", "--force"],
        )
        .keeps(keep("earlier.safetensors")),
        row(
            "an output another run is writing",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "busy.safetensors"],
            &["another tinygpt (pid", "is writing busy.safetensors"],
        ),
        row(
            "a file of the user's at the output's lock name (it holds a number)",
            &["export", "--checkpoint", "run.safetensors", "--out", "server"],
            &["server.lock blocks writing server", "not a tinygpt lock", "give --out another name"],
        )
        .keeps(keep("server.lock")),
        row(
            "a pipe at the output's lock name (refused by type, never opened)",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "piped.safetensors"],
            &["piped.safetensors.lock blocks writing", "a pipe, not a tinygpt lock"],
        )
        .keeps(Kept::Special(dir.join("piped.safetensors.lock"))),
        row(
            "an f16 export over the checkpoint it exports",
            &[
                "export", "--checkpoint", "run.safetensors", "--out", "run.safetensors", "--force",
            ],
            &["same file as --checkpoint"],
        )
        .keeps(keep("run.safetensors")),
        row(
            "an export of weights beyond f16's range",
            &["export", "--checkpoint", &big, "--out", out],
            &["beyond f16's range", "1e6", "--clamp"],
        )
        .keeps(keep(&big)),
        row(
            "an eval dump over the checkpoint it evaluates",
            &["eval", "--checkpoint", "run.safetensors", "--dump-logits", "run.safetensors"],
            &["--dump-logits", "same file as --checkpoint"],
        )
        .keeps(keep("run.safetensors")),
        row(
            "a bench report over the lines it re-plots",
            &["bench", "--replot", "report/bench.jsonl", "--report", "report", "--force"],
            &["same file as --replot"],
        )
        .keeps(keep("report/bench.jsonl")),
        row(
            "a screenshot over an earlier file",
            &["app", "--headless", "--screenshot", "shot.png"],
            &["shot.png already exists", "--force"],
        )
        .keeps(keep("shot.png")),
        row(
            "a checkpoint with negative AdamW second moments",
            &["train", "--resume", &negative, "--backend", "cpu", "--out", out],
            &["adam.v.", "negative", "index 5"],
        )
        .keeps(keep(&negative)),
        row(
            "AdamW moments in a checkpoint at step 0",
            &["train", "--resume", &unstepped, "--backend", "cpu", "--out", out],
            &["`step` is 0", "adam.m.", "disagrees"],
        )
        .keeps(keep(&unstepped)),
        row(
            "a resumed run whose first step diverges",
            &["train", "--resume", &overflowing, "--backend", "cpu", "--steps", "100000"],
            &["first step from overflowing.safetensors diverged", "loaded state", "unchanged"],
        )
        .keeps(keep(&overflowing)),
        row(
            "an unknown WGPU_BACKEND",
            &["generate", "--checkpoint", shipped, "--backend", "gpu", "--tokens", "1"],
            &["WGPU_BACKEND=nonsense", "unset it"],
        )
        .with_env("WGPU_BACKEND", "nonsense"),
        row(
            "a headless app with a lesson that does not exist",
            &["app", "--headless", "--lesson", "missing"],
            &["missing", "no such lesson"],
        ),
        row(
            "a learning rate that f32 rounds to 0",
            &["train", "--preset", "tiny", "--lr", "1e-50", "--out", out],
            &["1e-50 is too small", "f32"],
        ),
        row(
            "a negative seed",
            &["train", "--preset", "tiny", "--seed", "-1", "--out", out],
            &["`-1` is not a seed", "0 to 18446744073709551615"],
        ),
        row(
            "a trillion tokens",
            &["generate", "--checkpoint", shipped, "--tokens", "1000000000000"],
            &["--tokens"],
        ),
        row(
            "a 40 GB matrix to multiply",
            &["bench", "--matmul", "100000x100000x100000"],
            &["--matmul 100000x100000x100000", "MB"],
        ),
        row(
            "a .tinygpt whose int4 block size overflows",
            &["generate", "--checkpoint", "crafted.tinygpt", "--tokens", "1"],
            &["crafted.tinygpt", "int4 block size 9223372036854775810", "overflow"],
        )
        .keeps(keep("crafted.tinygpt")),
        row(
            "a .tinygpt cut short, imported",
            &["import", "cut.tinygpt", "--out", out],
            &["cut.tinygpt is not a valid .tinygpt file", "header says it is 255 bytes"],
        )
        .never_says(&["safetensors file"])
        .keeps(keep("cut.tinygpt")),
        row(
            "a hundred million warm-up steps",
            &["bench", "--warmup", "100000000"],
            &["--warmup", "100000000 is more than 100 warm-up steps", "give 0 to 100"],
        ),
        row(
            "a negative warm-up",
            &["bench", "--warmup", "-3"],
            &["--warmup", "`-3` is not a number of warm-up steps"],
        ),
        row(
            "an output that ends in /. after a file",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "run.safetensors/."],
            &["run.safetensors/.", "names a folder, not a file"],
        )
        .keeps(keep("run.safetensors")),
        row(
            "an output inside a file",
            &["train", "--preset", "tiny", "--steps", "1", "--out", "run.safetensors/x.safetensors"],
            &["run.safetensors/x.safetensors", "is a file, not a folder"],
        )
        .keeps(keep("run.safetensors")),
        row(
            "a byte to predict that is a character of two bytes",
            &["flow", "--checkpoint", shipped, "--prompt", "ROMEO:", "--backward", "--target", "é"],
            &["`é` is 2 bytes in UTF-8", "\\xC3"],
        )
        .never_says(&["not a byte: give one character"]),
        row(
            "a negative number of validation rows to ablate on",
            &["ablate", "--checkpoint", shipped, "--validation", "-3"],
            &["--validation", "-3 is not a number of rows from 1 to 4096"],
        )
        .never_says(&["unexpected argument"]),
        row(
            "a headless export of a region the scene does not have",
            &["app", "--headless", "--frames", "3", "--export", "nonsense"],
            &["--export nonsense", "no region of that name", "view, data, loss-chart, checkpoint"],
        )
        // Bevy's own log lines off, for the catalogue's message column.
        .with_env("RUST_LOG", "off"),
        row(
            "a patch whose two prompts are the same",
            &["patch", "--checkpoint", shipped, "--clean", "ROMEO: hi", "--corrupt", "ROMEO: hi", "--bytes", "a,b"],
            &["the clean and the corrupted prompt are the same", "nothing to patch"],
        )
        .never_says(&["NaN"]),
        row(
            "a patch whose only difference is cut off by the context",
            &["patch", "--checkpoint", shipped, "--clean", &long_clean, "--corrupt", &long_corrupt],
            &["the same in their last", "within those bytes"],
        )
        .never_says(&["NaN", "same next byte"]),
        row(
            "a patch with an empty clean prompt",
            &["patch", "--checkpoint", shipped, "--clean", "", "--corrupt", "x"],
            &["the clean prompt is empty"],
        )
        .never_says(&["--prompt"]),
        row(
            "a fine-tune whose α/r overflows its gradients",
            &["finetune", "--base", shipped, "--corpus", "corpus.txt", "--backend", "cpu", "--alpha", "1e30", "--steps", "3", "--out", out],
            &["scaled by α/r", "lower --alpha"],
        )
        .never_says(&["(lower the learning rate with --lr)"])
        .keeps(keep("corpus.txt")),
        row(
            "continuing a .tinygpt file in place (the run saves safetensors)",
            &["train", "--resume", "original.tinygpt", "--backend", "cpu"],
            &["cannot continue original.tinygpt in place", "the original TinyGPT's format", "--out original-continued.safetensors"],
        )
        .keeps(keep("original.tinygpt")),
        row(
            "continuing an int4 export in place (the run saves f32 with AdamW's moments)",
            &["train", "--resume", "tiny-int4.safetensors", "--backend", "cpu", "--out", "tiny-int4.safetensors"],
            &["cannot continue tiny-int4.safetensors in place", "a weights-only export"],
        )
        .keeps(keep("tiny-int4.safetensors")),
        row(
            "the app's checkpoint export over the checkpoint it opened",
            &["app", "--headless", "--frames", "3", "--checkpoint", "tinygpt-app.safetensors", "--export", "checkpoint", "--force"],
            &["the same file as --checkpoint tinygpt-app.safetensors", "which this app opened"],
        )
        .with_env("RUST_LOG", "off")
        .keeps(keep("tinygpt-app.safetensors")),
        row(
            "a lab while resuming (the checkpoint holds its own)",
            &["train", "--resume", shipped, "--lab", "no-causal-mask", "--out", out],
            &["--lab", "cannot be used with"],
        ),
    ];
    let locks = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".lock") || n.contains(".tmp-"))
            .collect();
        names.sort();
        names
    };
    let before = locks();
    let mut rows = Vec::new();
    // Without the app feature the binary has no `app` command: its rows
    // keep docs/faults.md's words and are not run.
    let documented = documented_rows();
    for r in &catalogue {
        let what = r.what;
        if !cfg!(feature = "app") && r.args.first().is_some_and(|a| a == "app") {
            let key = format!("| {what} | ");
            let row = documented.iter().find(|d| d.starts_with(&key));
            rows.push(row.cloned().unwrap_or_else(|| format!("| {what} | (app) | |")));
            eprintln!("not run without the app feature: {what}");
            continue;
        }
        let run = run_within_a_minute(&dir, &r.env, &r.args);
        let stderr = refused_without_panic(&run, what);
        for w in &r.words {
            assert!(stderr.contains(w), "{what}: no `{w}` in\n{stderr}");
        }
        for w in &r.not {
            assert!(!stderr.contains(w), "{what}: `{w}` in\n{stderr}");
        }
        assert!(!dir.join(out).exists(), "{what}: wrote {out}");
        assert!(!dir.join("tinygpt-tiny.safetensors").exists(), "{what}: wrote a default output");
        assert_eq!(locks(), before, "{what}: left a lock or a temporary file");
        if let Some(kept) = &r.kept {
            kept.check(what);
        }
        // The row of docs/faults.md: paths as a reader would type them.
        let local = |text: &str| {
            text.replace(&format!("{}/", dir.display()), "")
                .replace(&format!("{}/", env!("CARGO_MANIFEST_DIR")), "")
        };
        let env: String = r.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        let command = local(&format!("{env}tinygpt {}", r.args.join(" ")));
        let message = local(stderr.trim()).replace('\n', " ");
        rows.push(format!("| {what} | `{command}` | {message} |"));
    }
    check_catalogue_doc(&rows);
    // Its device node and FIFO go with it.
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A device node where the test may make one (as root: a copy of
/// /dev/full's, character device 1:7), else a FIFO: a special file of the
/// test's own that no command may replace.
fn make_special_file(path: &Path) {
    #[cfg(unix)]
    {
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mknod(2) on a path the test owns; fails harmlessly unprivileged.
        let made = unsafe { libc::mknod(name.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 7)) };
        if made != 0 {
            make_fifo(path);
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

fn make_fifo(path: &Path) {
    #[cfg(unix)]
    {
        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo(3) on a path the test owns.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// docs/faults.md's table of bad input as written, a row a line.
fn documented_rows() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/faults.md");
    let doc = std::fs::read_to_string(&path).expect("docs/faults.md");
    let table = doc
        .split_once("<!-- begin: written by tests/faults.rs -->\n")
        .and_then(|(_, rest)| rest.split_once("<!-- end -->"))
        .map_or("", |(table, _)| table);
    table
        .lines()
        .skip(2)
        .filter(|l| l.starts_with('|'))
        .map(str::to_string)
        .collect()
}

/// docs/faults.md's table of bad input is this test's catalogue: the rows
/// there must be the rows here (each line up to its message, which holds
/// this machine's numbers). `TINYGPT_WRITE_CATALOGUE=1` writes the table
/// with the messages this run printed.
fn check_catalogue_doc(rows: &[String]) {
    const BEGIN: &str = "<!-- begin: written by tests/faults.rs -->\n";
    const END: &str = "<!-- end -->";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/faults.md");
    let doc = std::fs::read_to_string(&path).expect("docs/faults.md");
    let (head, rest) = doc.split_once(BEGIN).expect("the table's begin marker");
    let (table, tail) = rest.split_once(END).expect("the table's end marker");
    let header = "| bad input | command | message |\n|---|---|---|\n";
    if std::env::var_os("TINYGPT_WRITE_CATALOGUE").is_some() {
        let table = format!("{header}{}\n", rows.join("\n"));
        std::fs::write(&path, format!("{head}{BEGIN}{table}{END}{tail}")).unwrap();
        return;
    }
    // Each row up to its message column: what and the command.
    let key = |row: &str| row.splitn(4, " | ").take(2).collect::<Vec<_>>().join(" | ");
    let documented: Vec<String> = table
        .lines()
        .skip(2)
        .filter(|l| l.starts_with('|'))
        .map(key)
        .collect();
    let tested: Vec<String> = rows.iter().map(|r| key(r)).collect();
    assert_eq!(
        documented, tested,
        "docs/faults.md's table is not this catalogue: run \
         TINYGPT_WRITE_CATALOGUE=1 cargo test --release --test faults every_bad_input"
    );
}

/// Ctrl-C (SIGINT) and SIGTERM (what a scheduler or `systemctl stop`
/// sends) save the run. The test waits for the run's own first step line,
/// not a timer.
#[cfg(unix)]
#[test]
fn ctrl_c_and_sigterm_mid_run_save_the_checkpoint() {
    for (signal, name) in [(libc::SIGINT, "sigint"), (libc::SIGTERM, "sigterm")] {
        stop_mid_run_with(signal, name);
    }
}

/// A CPU run of tiny toward a million steps writing `out`, once it has
/// printed its first step's JSON line (the run's own event, not a timer);
/// returns it and the rest of its standard output.
#[cfg(unix)]
fn long_run_past_its_first_step(
    out: &Path,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "train", "--preset", "tiny", "--backend", "cpu", "--steps", "1000000", "--json",
            "--out",
        ])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("\"step\":1"), "{first}");
    (child, lines)
}

#[cfg(unix)]
fn stop_mid_run_with(signal: i32, name: &str) {
    let dir = common::scratch_dir(&format!("faults-{name}"));
    let out = dir.join("stopped.safetensors");
    let (mut child, lines) = long_run_past_its_first_step(&out);
    let pid = child.id() as i32;
    // SAFETY: a plain kill(2) of the child we spawned.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    // Read on to the end, so a full pipe never holds the child up.
    for line in lines {
        line.unwrap();
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{name}: {stderr}");
    assert!(stderr.contains("checkpoint saved"), "{stderr}");
    let ckpt = tinygpt::model::checkpoint::Checkpoint::load(&out).unwrap();
    assert!(ckpt.step >= 1 && ckpt.optimizer.is_some());
}

/// A model trained on binary bytes writes binary bytes; the terminal gets
/// their pictures (␀ ␇ ␛), never the raw control codes.
#[test]
fn a_sample_of_binary_bytes_sends_no_control_codes() {
    let dir = common::scratch_dir("faults-binary");
    let corpus = dir.join("binary.bin");
    std::fs::write(
        &corpus,
        (0..200_000u32)
            .map(|i| (i * 7 % 256) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let out = dir.join("binary.safetensors");
    let (_, sample) = common::tinygpt(&[
        "train",
        "--preset",
        "tiny",
        "--backend",
        "cpu",
        "--steps",
        "3",
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let sample = &sample[sample.find("sample:").expect("a sample is printed")..];
    let raw: Vec<char> = sample
        .chars()
        .filter(|&c| c.is_control() && c != '\n' && c != '\t')
        .collect();
    assert!(
        raw.is_empty(),
        "raw control characters {raw:?} in\n{sample}"
    );
}

/// Resuming an f16 export (weights only) says that AdamW starts over.
#[test]
fn resuming_an_export_without_adamw_state_says_so() {
    let dir = common::scratch_dir("faults-export");
    let export = dir.join("tiny-f16.safetensors");
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/checkpoints/tiny.safetensors"
    );
    let resumed = dir.join("resumed.safetensors");
    common::tinygpt(&[
        "export",
        "--checkpoint",
        shipped,
        "--out",
        export.to_str().unwrap(),
    ]);
    let (_, stderr) = common::tinygpt(&[
        "train",
        "--backend",
        "cpu",
        "--steps",
        "2001",
        "--resume",
        export.to_str().unwrap(),
        "--out",
        resumed.to_str().unwrap(),
    ]);
    assert!(stderr.contains("no AdamW moments"), "{stderr}");
}

/// A GPU lost mid-run (a driver reset; here the device destroyed after
/// step 5, on lavapipe): no panic, the weights last read back are saved,
/// the message says so, and the run resumes from them on the CPU.
#[test]
fn a_lost_gpu_saves_the_weights_it_read_back() {
    let dir = common::scratch_dir("faults-lost-gpu");
    let out = dir.join("lost.safetensors");
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "train",
            "--preset",
            "tiny",
            "--backend",
            "gpu",
            "--steps",
            "50",
            "--out",
        ])
        .arg(&out)
        .env("TINYGPT_TEST_LOSE_GPU_AFTER", "5")
        .output()
        .unwrap();
    let stderr = refused_without_panic(&run, "a lost GPU");
    assert!(stderr.contains("the GPU was lost (Destroyed)"), "{stderr}");
    assert!(stderr.contains("read back from the GPU"), "{stderr}");
    let ckpt = tinygpt::model::checkpoint::Checkpoint::load(&out).unwrap();
    assert!(
        ckpt.step <= 5 && ckpt.optimizer.is_some(),
        "step {}",
        ckpt.step
    );
    let out_arg = out.display().to_string();
    let resumed = dir.join("resumed.safetensors").display().to_string();
    common::tinygpt(&[
        "train",
        "--resume",
        &out_arg,
        "--backend",
        "cpu",
        "--steps",
        "8",
        "--out",
        &resumed,
    ]);
}

/// The GPU lost while generating (the device destroyed before the 11th
/// forward pass, on lavapipe): the ten bytes made so far are printed, then
/// a clear error names the loss and the way on; no panic.
#[test]
fn a_lost_gpu_while_generating_keeps_the_bytes_so_far() {
    let shipped = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/assets/checkpoints/tiny.safetensors"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "generate",
            "--checkpoint",
            shipped,
            "--backend",
            "gpu",
            "--tokens",
            "50",
            "--prompt",
            "ROMEO:",
            "--temperature",
            "0",
        ])
        .env("TINYGPT_TEST_LOSE_GPU_AFTER", "10")
        .output()
        .unwrap();
    let stderr = refused_without_panic(&run, "a lost GPU");
    assert!(stderr.contains("the GPU was lost"), "{stderr}");
    assert!(stderr.contains("after 10 of 50 bytes"), "{stderr}");
    assert!(stderr.contains("--backend cpu"), "{stderr}");
    // The prompt, the ten bytes and the closing newline.
    assert_eq!(
        run.stdout.len(),
        "ROMEO:".len() + 10 + 1,
        "{:?}",
        run.stdout
    );
}

/// `train` twice without `--out`: the second run's checkpoint takes the
/// next number, and the first is untouched (issue 29).
#[test]
fn a_second_run_without_out_gets_a_numbered_name() {
    let dir = common::scratch_dir("faults-numbered");
    let train = || {
        let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .current_dir(&dir)
            .args(["train", "--preset", "tiny", "--steps", "2", "--backend", "cpu"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(run.status.success(), "{stderr}");
        stderr
    };
    let first = train();
    assert!(first.contains("checkpoint tinygpt-tiny.safetensors"), "{first}");
    let before = std::fs::read(dir.join("tinygpt-tiny.safetensors")).unwrap();
    let second = train();
    assert!(second.contains("checkpoint tinygpt-tiny-2.safetensors"), "{second}");
    assert_eq!(std::fs::read(dir.join("tinygpt-tiny.safetensors")).unwrap(), before);
    assert!(dir.join("tinygpt-tiny-2.safetensors").is_file());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "locks left: {left:?}");
}

/// Two runs writing one `--out`: while the first trains, the second is
/// refused up front, naming the first's pid; the first then saves there
/// and its lock goes with it.
#[cfg(unix)]
#[test]
fn a_second_run_to_the_same_out_is_refused_while_the_first_runs() {
    let dir = common::scratch_dir("faults-same-out");
    let out = dir.join("shared.safetensors");
    let (mut first, lines) = long_run_past_its_first_step(&out);
    let second = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(["train", "--preset", "tiny", "--backend", "cpu", "--steps", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = refused_without_panic(&second, "a second run to one --out");
    assert!(
        stderr.contains(&format!("another tinygpt (pid {})", first.id())),
        "{stderr}"
    );
    // SAFETY: a plain kill(2) of the child we spawned.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGINT) }, 0);
    for line in lines {
        line.unwrap();
    }
    assert_eq!(first.wait().unwrap().code(), Some(130));
    assert!(tinygpt::model::checkpoint::Checkpoint::load(&out).unwrap().step >= 1);
    assert!(!tinygpt::output::lock_path(&out).exists(), "the lock outlived its run");
}

/// `export --clamp` stores weights beyond f16's range as ±65504 and says
/// how many; the file it writes loads.
#[test]
fn an_export_with_clamp_says_how_many_weights_it_clamped() {
    let dir = common::scratch_dir("faults-clamp");
    edited_checkpoint(&dir, "big.safetensors", |ck| {
        ck.params[0].values[7] = 1e6;
        ck.params[0].values[8] = -7e4;
    });
    let out = dir.join("big-f16.safetensors");
    let (_, stderr) = common::tinygpt(&[
        "export",
        "--checkpoint",
        dir.join("big.safetensors").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--clamp",
    ]);
    assert!(stderr.contains("2 weights beyond f16's range clamped to ±65504"), "{stderr}");
    let ck = tinygpt::model::checkpoint::Checkpoint::load(&out).unwrap();
    assert_eq!(ck.params[0].values[7], 65504.0);
    assert_eq!(ck.params[0].values[8], -65504.0);
}

/// The notice of `--backend auto` where the GPU gives way says once where
/// the run goes and does not call it both faster and slower (issue 29).
#[test]
fn the_auto_notice_says_where_the_run_goes_once() {
    let dir = common::scratch_dir("faults-auto");
    let out = dir.join("auto.safetensors");
    let (_, stderr) = common::tinygpt(&[
        "train",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--backend",
        "auto",
        "--out",
        out.to_str().unwrap(),
    ]);
    let notice = stderr
        .lines()
        .find(|l| l.starts_with("backend auto:"))
        .unwrap_or_else(|| panic!("no notice in\n{stderr}"));
    assert!(!notice.contains("slower)"), "{notice}");
    assert!(notice.matches("CPU").count() <= 2, "{notice}");
    assert!(notice.matches("trains on").count() <= 1, "{notice}");
}

/// A GPU run with no desktop session (no XDG_RUNTIME_DIR, as on a server or
/// in CI) prints no "XDG_RUNTIME_DIR is invalid" lines from Mesa's Vulkan
/// device-selection layer (issue 29: it printed two on every run).
#[test]
fn a_gpu_run_without_a_session_prints_no_wayland_errors() {
    let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "generate",
            "--checkpoint",
            concat!(env!("CARGO_MANIFEST_DIR"), "/assets/checkpoints/tiny.safetensors"),
            "--backend",
            "gpu",
            "--tokens",
            "3",
        ])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("NODEVICE_SELECT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
}

/// A run of `tinygpt ARGS` in `dir` that must succeed within a minute;
/// returns its standard error.
fn succeeds_in(dir: &Path, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let run = run_within_a_minute(dir, &[], &args);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "tinygpt {}: {stderr}", args.join(" "));
    stderr
}

/// The names in `dir` that end in `.lock` or hold `.tmp-`.
fn locks_and_temps(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock") || n.contains(".tmp-"))
        .collect();
    names.sort();
    names
}

/// Issue 56: saves and `write_atomic` used `NAME.tmp-PID` made with
/// `File::create`, which followed a symlink planted there (the user's file
/// written over) and waited forever on a pipe. Temporary files are now
/// made exclusively under unpredictable names: a symlink or a pipe at the
/// old name is left as it was, and nothing waits. (In this process, so the
/// planted names carry the pid that the old code used.)
#[cfg(unix)]
#[test]
fn a_link_or_a_pipe_at_the_old_temp_name_is_left_alone() {
    use tinygpt::model::checkpoint::{Checkpoint, Precision};
    let dir = common::scratch_dir("faults-temp-names");
    let pid = std::process::id();
    let user = dir.join("notes.txt");
    std::fs::write(&user, b"the user's notes").unwrap();
    let report = dir.join("report.md");
    let model = dir.join("model.safetensors");
    std::os::unix::fs::symlink(&user, dir.join(format!("report.md.tmp-{pid}"))).unwrap();
    std::os::unix::fs::symlink(&user, dir.join(format!("model.safetensors.tmp-{pid}"))).unwrap();
    let ck =
        Checkpoint::from_bytes(tinygpt::model::shipped::shipped("tiny").unwrap(), "tiny").unwrap();
    tinygpt::output::write_atomic(&report, b"# report\n").unwrap();
    ck.save(&model, Precision::F16).unwrap();
    assert_eq!(std::fs::read(&user).unwrap(), b"the user's notes");
    assert_eq!(std::fs::read(&report).unwrap(), b"# report\n");
    assert!(Checkpoint::load(&model).is_ok());
    // The links are still there, still links.
    for name in [format!("report.md.tmp-{pid}"), format!("model.safetensors.tmp-{pid}")] {
        assert!(std::fs::symlink_metadata(dir.join(&name)).unwrap().is_symlink(), "{name}");
    }
    // Pipes at the old names: the writes finish (a pipe is never opened).
    let piped_report = dir.join("piped.md");
    let piped_model = dir.join("piped.safetensors");
    make_fifo(&dir.join(format!("piped.md.tmp-{pid}")));
    make_fifo(&dir.join(format!("piped.safetensors.tmp-{pid}")));
    let (done, finished) = std::sync::mpsc::channel();
    let (report_path, model_path) = (piped_report.clone(), piped_model.clone());
    std::thread::spawn(move || {
        let written = tinygpt::output::write_atomic(&report_path, b"piped").is_ok()
            && ck.save(&model_path, Precision::F16).is_ok();
        let _ = done.send(written);
    });
    let written = finished
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a write hung on a pipe at the old temporary name");
    assert!(written);
    assert_eq!(std::fs::read(&piped_report).unwrap(), b"piped");
    assert!(Checkpoint::load(&piped_model).is_ok());
    // No temporary file of the writes is left; the planted names are.
    assert_eq!(
        locks_and_temps(&dir),
        [
            format!("model.safetensors.tmp-{pid}"),
            format!("piped.md.tmp-{pid}"),
            format!("piped.safetensors.tmp-{pid}"),
            format!("report.md.tmp-{pid}"),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 56: the clean-up of killed saves removed any `OUT.tmp-NUMBER`
/// whose number was not a live pid, the corpus of that very run included.
/// It now removes only files of its own unpredictable format that a save of
/// ours left, and never an input: both corpora survive the run.
#[test]
fn the_clean_up_of_killed_saves_never_removes_the_corpus() {
    let dir = common::scratch_dir("faults-cleanup-corpus");
    let text = &include_str!("../assets/tinyshakespeare.txt")[..4000];
    // The old format's name, and the new one's with what a save's
    // temporary file starts with (8 bytes of length, then `{`).
    let old_style = "run.safetensors.tmp-4000000";
    let new_style = "run.safetensors.tmp-4000000-123-abcDEF";
    for (corpus, bytes) in [
        (old_style, text.to_string()),
        (new_style, format!("01234567{{{text}")),
    ] {
        std::fs::write(dir.join(corpus), &bytes).unwrap();
        succeeds_in(
            &dir,
            &[
                "train", "--preset", "tiny", "--steps", "1", "--backend", "cpu", "--corpus", corpus,
                "--out", "run.safetensors", "--force",
            ],
        );
        assert_eq!(
            std::fs::read(dir.join(corpus)).ok(),
            Some(bytes.into_bytes()),
            "{corpus} was removed"
        );
        assert!(dir.join("run.safetensors").is_file());
        assert_eq!(locks_and_temps(&dir), [corpus]);
        std::fs::remove_file(dir.join(corpus)).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 56: a stale lock of ours whose pid now belongs to another process
/// (containers give tinygpt the same pid every start) is taken over, not
/// called "another tinygpt (pid 1)"; with a default name, a pipe at the
/// first name's lock is skipped without a hang.
#[cfg(target_os = "linux")]
#[test]
fn a_lock_whose_pid_was_reused_is_stale_and_a_pipe_lock_is_skipped() {
    let dir = common::scratch_dir("faults-reused-pid");
    // pid 1 runs, but did not start when this lock says.
    let text = tinygpt::output::lock_text(1);
    let start = tinygpt::output::start_time(1).expect("pid 1's start time");
    let reused = text.replace(&format!("start {start}\n"), &format!("start {}\n", start + 99));
    assert_ne!(reused, text);
    std::fs::write(dir.join("reused.safetensors.lock"), reused).unwrap();
    let stderr = succeeds_in(
        &dir,
        &["train", "--preset", "tiny", "--steps", "1", "--backend", "cpu", "--out", "reused.safetensors"],
    );
    assert!(!stderr.contains("another tinygpt"), "{stderr}");
    assert!(dir.join("reused.safetensors").is_file());
    make_fifo(&dir.join("tinygpt-tiny.safetensors.lock"));
    let stderr = succeeds_in(&dir, &["train", "--preset", "tiny", "--steps", "1", "--backend", "cpu"]);
    assert!(stderr.contains("checkpoint tinygpt-tiny-2.safetensors"), "{stderr}");
    assert_eq!(locks_and_temps(&dir), ["tinygpt-tiny.safetensors.lock"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 56: a legal 251-byte file name was refused because `NAME.lock`
/// (256 bytes) is longer than a file system takes. Its lock and temporary
/// file now go under a shortened name (its start and a hash of it all), so
/// the run writes it and leaves nothing beside it.
#[test]
fn a_251_byte_file_name_is_written() {
    let dir = common::scratch_dir("faults-long-name");
    let name = format!("{}.safetensors", "n".repeat(239));
    assert_eq!(name.len(), 251);
    succeeds_in(
        &dir,
        &["train", "--preset", "tiny", "--steps", "1", "--backend", "cpu", "--out", &name],
    );
    assert!(tinygpt::model::checkpoint::Checkpoint::load(&dir.join(&name)).is_ok());
    assert_eq!(locks_and_temps(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
