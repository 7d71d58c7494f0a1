//! `tinygpt train`: a progress bar (or JSON lines), periodic validation,
//! and a checkpoint at the end, on Ctrl-C or on SIGTERM (a scheduler's stop).

use super::{BackendChoice, positive_f32};
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tinygpt::cpu::generate::Generator;
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::model::config::{Config, DEFAULT_PRESET};
use tinygpt::sample::{SampleOptions, generate};
use tinygpt::train::{TrainError, Trainer};

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Model size: a built-in preset (see `tinygpt presets`) or a .ron file.
    /// (Not with --resume: the checkpoint holds its own model.)
    #[arg(long, default_value = DEFAULT_PRESET, conflicts_with = "resume")]
    preset: String,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Text to learn from, read as bytes: a file, `task:NAME` for a toy task
    /// (`tinygpt gallery` lists them) or `gallery:ID` for a gallery model's
    /// text (default: TinyShakespeare, built in; a resumed gallery model's own).
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
    /// Total training steps (default: the preset's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Peak learning rate (default: the preset's, 3e-4 for most).
    #[arg(long, value_name = "X", value_parser = positive_f32, allow_hyphen_values = true)]
    lr: Option<f32>,
    /// Random seed for initialisation, batches and dropout.
    #[arg(long, value_name = "S", default_value_t = 42, value_parser = super::seed, allow_hyphen_values = true)]
    seed: u64,
    /// A "break it" lab: take parts out of the model (comma-separated).
    /// A checkpoint remembers them, so `--resume` continues the same lab.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with = "resume")]
    lab: Vec<super::LabSwitch>,
    /// Checkpoint to write (default: tinygpt-<preset>.safetensors, numbered
    /// when taken: tinygpt-<preset>-2.safetensors; with --resume, the file it continues).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace the --out file if it exists (never an input of the run, a
    /// folder or a special file).
    #[arg(long)]
    force: bool,
    /// Continue training from a checkpoint (its model, optimizer state and step).
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Print one JSON object per step instead of a progress bar.
    #[arg(long)]
    json: bool,
    /// `mixed`: the matmuls on the GPU's tensor cores (f16 operands, f32
    /// accumulation, the loss scaled as PyTorch's GradScaler); everything
    /// else, and the weights, stay f32. Needs a GPU with cooperative
    /// matrices (Vulkan); f32, the default, runs everywhere.
    #[arg(long, value_enum)]
    precision: Option<super::backend::Precision>,
}

pub fn run(args: TrainArgs) -> Result<()> {
    if let Some(resume) = &args.resume
        && args.out.is_none()
        && resume
            .to_str()
            .is_some_and(|r| r.starts_with(tinygpt::model::gallery::PREFIX))
    {
        anyhow::bail!(
            "{} is a gallery model, not a file to continue in place: give --out FILE for the run",
            resume.display()
        );
    }
    let resumed = match &args.resume {
        Some(path) => Some(Checkpoint::load(path)?),
        None => None,
    };
    if let (Some(path), Some(ck)) = (&args.resume, &resumed) {
        refuse_another_format_in_place(&args, path, ck)?;
    }
    let mut config = match &resumed {
        Some(ck) => ck.config.clone(),
        None => Config::load(&args.preset)?,
    };
    if let Some(steps) = args.steps {
        config.steps = steps;
    }
    if let Some(lr) = args.lr {
        config.lr = lr;
    }
    super::apply_lab(&mut config.lab, &args.lab);
    config.validate(&format!(
        "preset `{}` with command-line overrides",
        args.preset
    ))?;
    // What the run is called: the preset, or the checkpoint it continues.
    let named = args
        .resume
        .as_deref()
        .unwrap_or(std::path::Path::new(&args.preset));
    let preset_name = named
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut claim = claim_out(&args, &preset_name)?;
    let out = claim.path().to_path_buf();
    let corpus = tinygpt::model::gallery::corpus_for(
        args.corpus.as_deref(),
        args.resume.as_deref(),
        config.ctx,
    )?;
    // --precision, else the preset's (or the resumed run's) `precision:`.
    if let Some(p) = args.precision {
        config.precision = p.into();
    }
    let resolved = super::backend::resolve_for(args.backend, config.precision)?;
    let backend = super::backend::build(&resolved, super::backend::backend_at(config.precision, args.backend), &config)?;
    let description = backend.describe();
    if let Some(ck) = &resumed
        && ck.optimizer.is_none()
    {
        eprintln!(
            "note: {} holds no AdamW moments (an export keeps only the weights): they start \
             from zero, so the first steps move the weights more than the run would have",
            args.resume
                .as_deref()
                .unwrap_or(std::path::Path::new("?"))
                .display()
        );
    }
    let mut trainer = match &resumed {
        Some(ck) => Trainer::resume(backend, corpus, ck)?,
        None => Trainer::new(backend, corpus, args.seed)?,
    };
    if trainer.step >= config.steps {
        bail!(
            "the checkpoint already has {} steps; ask for more with --steps",
            trainer.step
        );
    }

    if !args.json {
        eprintln!(
            "training {} ({} parameters) on {} ({} train / {} val bytes) with {description}",
            preset_name,
            super::group_thousands(config.param_count()),
            trainer.corpus.name,
            trainer.corpus.train.len(),
            trainer.corpus.val.len()
        );
    }
    let first_step = trainer.step;
    let last_val = train_loop(
        &mut trainer,
        &out,
        &mut claim,
        args.json,
        args.resume.as_deref(),
    )?;
    if !args.json {
        let recent: Vec<f32> = trainer
            .history
            .iter()
            .rev()
            .take(50)
            .map(|p| p.loss)
            .collect();
        let mean = recent.iter().sum::<f32>() / recent.len() as f32;
        eprintln!(
            "done: {} steps, train loss {:.4} (mean of the last {}), val loss {}; checkpoint {}",
            trainer.step,
            mean,
            recent.len(),
            last_val.map(|v| format!("{v:.4}")).unwrap_or("-".into()),
            out.display()
        );
        if trainer.skipped_steps > 0 {
            eprintln!(
                "the loss scaler skipped {} of the {} steps (their scaled gradients overflowed f16; \
                 the scale was halved each time, as PyTorch's GradScaler does)",
                trainer.skipped_steps,
                trainer.step - first_step
            );
        }
    }
    match tinygpt::data::tasks::Task::of(&trainer.corpus) {
        None if !args.json => print_sample("sample", &config, &trainer.params()?)?,
        None => {}
        Some(task) => print_task_accuracy(task, &config, &trainer.params()?, args.json)?,
    }
    Ok(())
}

/// A toy-task model's exact-answer accuracy on the held-out examples, and
/// its answers to the first few (a JSON line with `--json`).
pub(super) fn print_task_accuracy(
    task: tinygpt::data::tasks::Task,
    config: &Config,
    params: &[tinygpt::model::params::NamedTensor],
    json: bool,
) -> Result<()> {
    use tinygpt::cards as tasks;
    let mut generator = Generator::new(config, params).map_err(anyhow::Error::msg)?;
    let (_, held_out) = task.examples();
    let accuracy = tasks::accuracy(&mut generator, task, &held_out).map_err(anyhow::Error::msg)?;
    if json {
        println!(
            "{}",
            serde_json::json!({ "task": task.name(), "accuracy": accuracy })
        );
        return Ok(());
    }
    eprintln!("held-out examples:");
    for example in &held_out[..4] {
        let (prompt, answer) = task.split(example);
        let given =
            tasks::greedy_answer(&mut generator, task, prompt).map_err(anyhow::Error::msg)?;
        let show = |b: &[u8]| String::from_utf8_lossy(b.strip_suffix(b"\n").unwrap_or(b)).into_owned();
        eprintln!(
            "  {}{}  {}",
            String::from_utf8_lossy(prompt),
            super::printable(&String::from_utf8_lossy(&given)).trim_end(),
            if given == answer {
                "right".to_string()
            } else {
                format!("wrong (it is {})", show(answer))
            }
        );
    }
    eprintln!(
        "held-out accuracy on {}: {} of {} exact ({:.1}%)",
        task.name(),
        accuracy.correct,
        accuracy.total,
        100.0 * accuracy.fraction()
    );
    Ok(())
}

/// Prints, under `title`, 200 bytes sampled after a newline from `params`
/// at the default settings: the CLI's look at what a run learned.
pub(super) fn print_sample(
    title: &str,
    config: &Config,
    params: &[tinygpt::model::params::NamedTensor],
) -> Result<()> {
    let mut generator = Generator::new(config, params).map_err(anyhow::Error::msg)?;
    let text = generate(
        &mut generator,
        b"\n",
        200,
        &SampleOptions::default(),
        |_| {},
    );
    eprintln!(
        "{title}:\n{}",
        super::printable(&String::from_utf8_lossy(&text))
    );
    Ok(())
}

/// Trains `trainer` to its config's steps with a progress bar (or JSON
/// lines), saving to `out` at the end, on Ctrl-C or SIGTERM, and the last
/// good step when a step diverges; what a lost GPU last gave back is saved
/// too. `resume`: the checkpoint the run continues, if it does. The last
/// validation loss, if one was measured.
pub(super) fn train_loop(
    trainer: &mut Trainer,
    out: &std::path::Path,
    claim: &mut tinygpt::output::Claim,
    json: bool,
    resume: Option<&std::path::Path>,
) -> Result<Option<f32>> {
    let steps = trainer.config.steps;
    let first_step = trainer.step;
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
            .context("cannot install the Ctrl-C/SIGTERM handler")?;
    }
    let bar = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} {msg} [{elapsed_precise}, ETA {eta}]",
        )
        .expect("valid template")
        .progress_chars("█▉▊▋▌▍▎▏ "),
    );
    bar.set_position(trainer.step);
    let mut last_val = None;
    // On the GPU, a copy of the run on the host, refreshed every half
    // minute: what is saved if the device is lost (its memory goes with it).
    let mut last_read: Option<(tinygpt::model::checkpoint::Checkpoint, std::time::Instant)> = None;
    let lose_gpu_after = tinygpt::gpu::GpuContext::test_lose_after();
    while trainer.step < steps {
        if trainer.backend.as_gpu().is_some()
            && last_read
                .as_ref()
                .is_none_or(|(_, at)| at.elapsed().as_secs() >= 30)
        {
            last_read = Some((trainer.checkpoint(true)?, std::time::Instant::now()));
        }
        if lose_gpu_after == Some(trainer.step)
            && let Some(gpu) = trainer.backend.as_gpu()
        {
            gpu.destroy_device();
        }
        if interrupted.load(Ordering::SeqCst) {
            bar.abandon();
            let saved = save(trainer, out);
            claim.release();
            saved?;
            eprintln!(
                "interrupted at step {}: checkpoint saved to {}",
                trainer.step,
                out.display()
            );
            std::process::exit(130);
        }
        let m = match trainer.train_step() {
            Ok(m) => m,
            Err(e @ TrainError::Diverged { .. }) => {
                bar.abandon();
                // Run the step again op by op, to say where it went wrong.
                match trainer.find_first_non_finite() {
                    Ok(Some(at)) => {
                        eprintln!("the first value that is not finite came out of {at}")
                    }
                    Ok(None) => match &e {
                        TrainError::Diverged { grad_norm, .. } if grad_norm.is_infinite() => eprintln!(
                            "run again op by op, every output of the step was finite: the gradients are \
                             too large for f32 to hold the sum of their squares (the gradient norm)"
                        ),
                        _ => eprintln!(
                            "run again op by op, every output of the step was finite (a value that overflows only sometimes?)"
                        ),
                    },
                    Err(err) => eprintln!("could not run the step again op by op: {err}"),
                }
                if let (Some(path), true) = (resume, trainer.step == first_step) {
                    // Nothing was trained: the weights are what was loaded,
                    // so neither the learning rate nor a save can help.
                    let TrainError::Diverged {
                        loss, grad_norm, ..
                    } = e
                    else {
                        unreachable!("matched above")
                    };
                    bail!(
                        "the first step from {} diverged (the loss is {loss}, the gradient norm \
                         {grad_norm}), so the loaded state (its weights or its AdamW moments) is the \
                         cause, not the learning rate; nothing was written and {} is unchanged \
                         (resume from an earlier checkpoint)",
                        path.display(),
                        path.display()
                    );
                } else if trainer.step > 0 {
                    save(trainer, out)?;
                    eprintln!(
                        "the last good weights (step {}) are saved in {}",
                        trainer.step,
                        out.display()
                    );
                }
                // A fine-tune whose α/r is above the default's 2 scales its
                // gradients with it: that, not the learning rate, comes first.
                if let Some(lora) = trainer.config.lora
                    && lora.alpha / lora.rank as f32 > 2.0
                {
                    let TrainError::Diverged {
                        step,
                        loss,
                        grad_norm,
                    } = e
                    else {
                        unreachable!("matched above")
                    };
                    bail!(
                        "the fine-tune diverged at step {step}: the loss is {loss} and the gradient norm \
                         {grad_norm}; its update B·A is scaled by α/r = {:e} (α {:e}, rank {}), and the \
                         gradients of A and B grow with it: lower --alpha (the default, 2r, is a scale \
                         of 2), then the learning rate (--lr) if it still diverges",
                        lora.alpha / lora.rank as f32,
                        lora.alpha,
                        lora.rank
                    );
                }
                return Err(e.into());
            }
            Err(e @ TrainError::DeviceLost(_)) => {
                bar.abandon();
                if let Some((checkpoint, at)) = last_read {
                    let (step, ago) = (checkpoint.step, at.elapsed().as_secs());
                    checkpoint.save(out, Precision::F32)?;
                    eprintln!(
                        "the weights of step {step}, read back from the GPU {ago} s before it was lost, are saved in {} \
                         (continue with `{} --backend cpu`, or on the GPU once it is back)",
                        out.display(),
                        resume_command(&checkpoint.config, out)
                    );
                }
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        if json {
            println!("{}", serde_json::to_string(&m)?);
        } else {
            last_val = m.val_loss.or(last_val);
            let val = last_val.map(|v| format!(" val {v:.4}")).unwrap_or_default();
            bar.set_message(format!(
                "loss {:.4}{val} | {:.0} tok/s",
                m.loss, m.tokens_per_s
            ));
            bar.set_position(m.step);
        }
    }
    bar.finish();
    save(trainer, out)?;
    Ok(last_val)
}

/// Saves the run to `out`; when that fails (a full disk, a folder gone),
/// the weights are not lost: they go to a rescue file in the temporary
/// folder or the home folder, and the error says where.
fn save(trainer: &mut Trainer, out: &std::path::Path) -> Result<()> {
    let checkpoint = trainer.checkpoint(true)?;
    let Err(error) = checkpoint.save(out, Precision::F32) else {
        return Ok(());
    };
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tinygpt".into());
    let name = format!(
        "{stem}-rescued-step{}-{}.safetensors",
        checkpoint.step,
        std::process::id()
    );
    let folders = [Some(std::env::temp_dir()), std::env::home_dir()];
    for folder in folders.into_iter().flatten() {
        let rescue = folder.join(&name);
        if std::fs::symlink_metadata(&rescue).is_ok() {
            continue; // never over another file
        }
        // Straight to the file: no test's injected fault applies here.
        if checkpoint
            .save_observed(&rescue, Precision::F32, &mut |_| Ok(()))
            .is_ok()
        {
            anyhow::bail!(
                "{error}\nthe trained weights (step {}) are not lost: they were saved to {} \
                 (move the file where you want it; `{}` continues the run)",
                checkpoint.step,
                rescue.display(),
                resume_command(&checkpoint.config, &rescue)
            );
        }
    }
    anyhow::bail!(
        "{error}\nand no rescue file could be written in the temporary or the home folder either"
    )
}

/// The command that continues a run saved in `path`: a training run's, or
/// a LoRA fine-tune's (which needs its base again).
fn resume_command(config: &Config, path: &std::path::Path) -> String {
    match config.lora {
        Some(_) => format!(
            "tinygpt finetune --base BASE --resume {} (BASE: the model it fine-tunes)",
            path.display()
        ),
        None => format!("tinygpt train --resume {}", path.display()),
    }
}

/// A run continued in place saves an f32 safetensors checkpoint with
/// AdamW's moments over the file it resumed: refused when that file is in
/// another format (a `.tinygpt`, a weights-only f16 or int4 export), which
/// the save would silently replace, and grow.
fn refuse_another_format_in_place(
    args: &TrainArgs,
    resume: &std::path::Path,
    checkpoint: &Checkpoint,
) -> Result<()> {
    let in_place = match &args.out {
        None => true,
        Some(out) => tinygpt::output::same_file(out, resume),
    };
    if !in_place {
        return Ok(());
    }
    let mut magic = [0u8; 4];
    let original = std::fs::File::open(resume)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && &magic == tinygpt::model::original::MAGIC;
    let what = if original {
        "a .tinygpt file (the original TinyGPT's format)"
    } else if checkpoint.optimizer.is_none() {
        "a weights-only export (f16 or int4, no AdamW moments)"
    } else {
        return Ok(());
    };
    let stem = resume
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    let suggestion = resume.with_file_name(format!("{stem}-continued.safetensors"));
    bail!(
        "cannot continue {} in place: it is {what}, and the run saves an f32 safetensors checkpoint \
         with AdamW's moments, which would replace it in another format; give --out a new file \
         for the run, e.g. --out {}",
        resume.display(),
        suggestion.display()
    )
}

/// The checkpoint this run writes, checked and locked before any work (the
/// rule of `tinygpt::output`): `--out` (a new name, or an existing file with
/// --force), else the --resume file the run continues, else
/// tinygpt-<preset>.safetensors, numbered when taken. The corpus, the preset
/// file and the checkpoint resumed are inputs, never written over; the one
/// exception is the run resumed, which the run continues in place.
fn claim_out(args: &TrainArgs, preset_name: &str) -> Result<tinygpt::output::Claim> {
    use std::path::Path;
    use tinygpt::output::{Input, claim, numbered, same_file};
    let preset = Path::new(&args.preset);
    let mut inputs = Vec::new();
    if let Some(corpus) = &args.corpus {
        inputs.push(Input::new("--corpus", corpus));
    }
    if args.resume.is_none() && preset.is_file() {
        inputs.push(Input::new("--preset", preset));
    }
    let continued = |resume: &Path| {
        // The run continues its own file: only the other inputs are refused.
        claim(resume, "--out", &inputs, true)
    };
    let claimed = match (&args.out, &args.resume) {
        (Some(out), Some(resume)) if same_file(out, resume) => continued(out),
        (Some(out), resume) => {
            let mut all = inputs.clone();
            if let Some(r) = resume {
                all.push(Input::new("--resume", r));
            }
            claim(out, "--out", &all, args.force)
        }
        (None, Some(resume)) => continued(resume),
        (None, None) => numbered(
            Path::new(""),
            &format!("tinygpt-{preset_name}"),
            "safetensors",
            "--out",
        ),
    };
    claimed.map_err(|e| anyhow::anyhow!("cannot write checkpoint: {e}"))
}
