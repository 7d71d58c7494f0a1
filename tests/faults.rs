//! The catalogue of faults and bad input (issue 18): each row is something a
//! user can do by mistake, what they type, and the words of the message that
//! must come back. Every row runs the real command line: it must fail with
//! that message, quickly, without a panic and without writing anything,
//! and the rows are docs/faults.md's table of bad input. (More cases, older
//! than this file, are in `tests/cli.rs` and `tests/checkpoint.rs`; the
//! app's are in `tests/app.rs`; docs/faults.md lists them all.)
//!
//! Then the faults that need a running process: Ctrl-C and SIGTERM mid-run, a sample of
//! a model trained on binary bytes, resuming an export without AdamW state.

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
    kept: Option<Kept>,
}

fn row(what: &'static str, args: &[&str], words: &[&'static str]) -> Row {
    Row {
        what,
        env: vec![],
        args: args.iter().map(|a| a.to_string()).collect(),
        words: words.to_vec(),
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
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > 60 {
            child.kill().unwrap();
            panic!("tinygpt {} hung for a minute", args.join(" "));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
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
        format!("{}\n", std::process::id()),
    )
    .unwrap();
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
    let keep = |name: &str| Kept::bytes(&dir.join(name));
    let out = "never.safetensors";
    let catalogue: Vec<Row> = vec![
        row(
            "resuming with another preset (the checkpoint holds its model)",
            &["train", "--resume", shipped, "--preset", "small", "--out", out],
            &["--preset", "--resume", "cannot be used with"],
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
    for r in &catalogue {
        let what = r.what;
        let run = run_within_a_minute(&dir, &r.env, &r.args);
        let stderr = refused_without_panic(&run, what);
        for w in &r.words {
            assert!(stderr.contains(w), "{what}: no `{w}` in\n{stderr}");
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
