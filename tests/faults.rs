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
    let out = dir.join("never.safetensors");
    let out = out.to_str().unwrap();
    let catalogue: &[(&str, Vec<&str>, &[&str])] = &[
        (
            "resuming with another preset (the checkpoint holds its model)",
            vec![
                "train", "--resume", shipped, "--preset", "small", "--out", out,
            ],
            &["--preset", "--resume", "cannot be used with"],
        ),
        (
            "a device as the corpus",
            vec![
                "train",
                "--preset",
                "tiny",
                "--corpus",
                "/dev/zero",
                "--out",
                out,
            ],
            &["/dev/zero", "not a regular file"],
        ),
        (
            "a folder as the corpus",
            vec![
                "train", "--preset", "tiny", "--corpus", "/tmp", "--out", out,
            ],
            &["not a regular file"],
        ),
        (
            "a device as the checkpoint",
            vec!["generate", "--checkpoint", "/dev/zero"],
            &["/dev/zero", "not a regular file"],
        ),
        (
            "two thousand layers",
            vec!["train", "--preset", &deep, "--out", out],
            &["n_layer", "more than 1024 layers"],
        ),
        (
            "80 billion parameters",
            vec!["train", "--preset", &wide, "--out", out],
            &["d_model", "parameters, more than"],
        ),
        (
            "more memory than the machine has, on the CPU",
            vec![
                "train",
                "--preset",
                &giant,
                "--backend",
                "cpu",
                "--out",
                out,
            ],
            &["the CPU backend needs", "MB of memory", "smaller preset"],
        ),
        (
            "a folder as the output",
            vec!["train", "--preset", "tiny", "--steps", "1", "--out", "/tmp"],
            &["folder"],
        ),
        (
            "a trillion tokens",
            vec![
                "generate",
                "--checkpoint",
                shipped,
                "--tokens",
                "1000000000000",
            ],
            &["--tokens"],
        ),
        (
            "a 40 GB matrix to multiply",
            vec!["bench", "--matmul", "100000x100000x100000"],
            &["--matmul 100000x100000x100000", "MB"],
        ),
        (
            "a lab while resuming (the checkpoint holds its own)",
            vec![
                "train",
                "--resume",
                shipped,
                "--lab",
                "no-causal-mask",
                "--out",
                out,
            ],
            &["--lab", "cannot be used with"],
        ),
    ];
    let mut rows = Vec::new();
    for (what, args, words) in catalogue {
        let run = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
            .args(args)
            .output()
            .unwrap();
        let stderr = refused_without_panic(&run, what);
        for w in *words {
            assert!(stderr.contains(w), "{what}: no `{w}` in\n{stderr}");
        }
        assert!(!Path::new(out).exists(), "{what}: wrote {out}");
        // The row of docs/faults.md: paths as a reader would type them.
        let local = |text: &str| {
            text.replace(&format!("{}/", dir.display()), "")
                .replace(&format!("{}/", env!("CARGO_MANIFEST_DIR")), "")
        };
        let command = local(&format!("tinygpt {}", args.join(" ")));
        let message = local(stderr.trim()).replace('\n', " ");
        rows.push(format!("| {what} | `{command}` | {message} |"));
    }
    check_catalogue_doc(&rows);
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

#[cfg(unix)]
fn stop_mid_run_with(signal: i32, name: &str) {
    let dir = common::scratch_dir(&format!("faults-{name}"));
    let out = dir.join("stopped.safetensors");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args([
            "train",
            "--preset",
            "tiny",
            "--backend",
            "cpu",
            "--steps",
            "1000000",
            "--json",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("\"step\":1"), "{first}");
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
