//! `tinygpt generate` (streaming text from a checkpoint) and `tinygpt export`.

use super::backend::Resolved;
use super::backend::BackendChoice;
use super::non_negative_f32;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;
use tinygpt::cpu::generate::Generator;
use tinygpt::gpu::generate::GpuGenerator;
use tinygpt::model::checkpoint::{Checkpoint, Precision};
use tinygpt::output::{Input, claim};
use tinygpt::sample::{NextToken, SampleOptions, generate};

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// A checkpoint written by `tinygpt train`.
    #[arg(long, value_name = "FILE")]
    checkpoint: PathBuf,
    /// A LoRA adapter of that checkpoint (`tinygpt finetune`): generate from
    /// the fine-tuned model (the adapter merged into the weights, which
    /// computes the same function).
    #[arg(long, value_name = "ADAPTER")]
    adapter: Option<PathBuf>,
    /// Text to continue (bytes beyond the model's context keep only the last ctx).
    #[arg(long, default_value = "")]
    prompt: String,
    /// Bytes to generate (at most a million).
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    tokens: u64,
    /// Sampling temperature; 0 always picks the most likely byte.
    #[arg(long, value_name = "T", default_value_t = 0.8, value_parser = non_negative_f32, allow_hyphen_values = true)]
    temperature: f32,
    /// Sample only among the K most likely bytes (1..=256).
    #[arg(long = "top-k", value_name = "K", default_value_t = 40, value_parser = clap::value_parser!(u16).range(1..=256))]
    top_k: u16,
    /// Where to compute: the CPU's KV cache, or the GPU's forward pass.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Random seed of the sampler.
    #[arg(long, value_name = "S", default_value_t = 42, value_parser = super::seed, allow_hyphen_values = true)]
    seed: u64,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    let ck = match super::finetune::model_with_adapter(&args.checkpoint, args.adapter.as_deref())? {
        (base, Some(adapter)) => {
            tinygpt::model::lora::merge(&base, &adapter).map_err(anyhow::Error::msg)?
        }
        (base, None) => base,
    };
    let opts = SampleOptions {
        temperature: args.temperature,
        top_k: args.top_k as usize,
        seed: args.seed,
    };
    opts.validate().map_err(anyhow::Error::msg)?;
    let mut generator: Box<dyn NextToken> = match super::backend::resolve(args.backend)? {
        Resolved::Gpu(ctx) => Box::new(GpuGenerator::new(*ctx, &ck.config, &ck.params)?),
        Resolved::Cpu => {
            Box::new(Generator::new(&ck.config, &ck.params).map_err(anyhow::Error::msg)?)
        }
        Resolved::NoGpu { why, .. } => {
            eprintln!("backend auto: the CPU ({why})");
            Box::new(Generator::new(&ck.config, &ck.params).map_err(anyhow::Error::msg)?)
        }
    };
    let stdout = std::io::stdout();
    // To a terminal, control bytes are shown, not sent; to a file or a
    // pipe, the text goes out as generated.
    let shown = |t: &str| -> String {
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            super::printable(t)
        } else {
            t.to_string()
        }
    };
    let mut out = stdout.lock();
    out.write_all(shown(&args.prompt).as_bytes())?;
    // Bytes are streamed as soon as they form valid UTF-8; invalid sequences
    // are shown as U+FFFD, never a panic.
    let mut pending: Vec<u8> = Vec::new();
    let mut io_error = None;
    let made = generate(
        generator.as_mut(),
        args.prompt.as_bytes(),
        args.tokens as usize,
        &opts,
        |b| {
            pending.push(b);
            let flush_upto = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(e) if e.error_len().is_some() => pending.len(), // invalid: show lossily now
                Err(e) => e.valid_up_to(), // incomplete: wait for more bytes
            };
            if flush_upto > 0 {
                let text = shown(&String::from_utf8_lossy(&pending[..flush_upto]));
                pending.drain(..flush_upto);
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                    io_error.get_or_insert(e);
                }
            }
        },
    );
    if !pending.is_empty() {
        out.write_all(shown(&String::from_utf8_lossy(&pending)).as_bytes())?;
    }
    if let Some(e) = io_error
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    writeln!(out)?;
    if let Some(why) = generator.lost() {
        anyhow::bail!(
            "the GPU was lost ({why}) after {} of {} bytes, which are above; \
             run again with --backend cpu",
            made.len(),
            args.tokens
        );
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// The checkpoint to export.
    #[arg(long, value_name = "FILE")]
    checkpoint: PathBuf,
    /// The weights-only safetensors file to write, f16 (or with --int4 4-bit
    /// matrices): a new file, never the checkpoint exported.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Store the weight matrices in 4 bits (blocks of 64 values, one f16
    /// scale each, GGUF Q4_0's shape) and the vectors in f16: about a
    /// seventh of the f32 weights. Every command that loads a checkpoint
    /// reads it (dequantised once).
    #[arg(long)]
    int4: bool,
    /// Replace the --out file if it exists.
    #[arg(long)]
    force: bool,
    /// Store weights beyond f16's range (|x| > 65504) as ±65504 instead of
    /// refusing the export (it says how many).
    #[arg(long)]
    clamp: bool,
}

pub fn export(args: ExportArgs) -> Result<()> {
    let _claim = claim(
        &args.out,
        "--out",
        &[Input::new("--checkpoint", &args.checkpoint)],
        args.force,
    )
    .map_err(|e| anyhow::anyhow!("cannot export: {e}"))?;
    let mut ck = Checkpoint::load(&args.checkpoint)?;
    ck.optimizer = None;
    let beyond = f16_overflow(&ck);
    if let Some((count, name, largest)) = &beyond {
        if !args.clamp {
            let (s, are, them) = if *count == 1 {
                ("", "is", "it")
            } else {
                ("s", "are", "them")
            };
            anyhow::bail!(
                "{count} weight{s} of {} {are} beyond f16's range (|x| > 65504; the largest, {largest:e}, in `{name}`): \
                 f16 would store {them} as inf, which no loader takes; add --clamp to store {them} as ±65504, \
                 or share the f32 checkpoint",
                args.checkpoint.display()
            );
        }
        for p in &mut ck.params {
            for x in &mut p.values {
                *x = x.clamp(-F16_MAX, F16_MAX);
            }
        }
    }
    let precision = if args.int4 {
        Precision::Int4
    } else {
        Precision::F16
    };
    ck.save(&args.out, precision)?;
    let clamped = beyond
        .map(|(count, _, _)| {
            let s = if count == 1 { "" } else { "s" };
            format!("; {count} weight{s} beyond f16's range clamped to ±65504")
        })
        .unwrap_or_default();
    let what = if args.int4 {
        let bytes = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
        let f32_bytes: usize = ck.params.iter().map(|p| p.values.len() * 4).sum();
        format!(
            "int4 weights: matrices in blocks of 64 with an f16 scale each, vectors f16; {bytes} bytes, {:.1}× smaller than the f32 weights",
            f32_bytes as f64 / bytes.max(1) as f64
        )
    } else {
        "f16 weights".to_string()
    };
    eprintln!(
        "wrote {} ({what}, no optimizer state{clamped})",
        args.out.display()
    );
    Ok(())
}

/// The largest finite f16.
const F16_MAX: f32 = 65504.0;

/// How many weights f16 cannot hold (they would round to ±inf), with the
/// tensor of the largest and its value; None when all fit.
fn f16_overflow(ck: &Checkpoint) -> Option<(usize, String, f32)> {
    let mut count = 0;
    let mut largest: Option<(String, f32)> = None;
    for p in &ck.params {
        for &x in &p.values {
            if half::f16::from_f32(x).is_infinite() {
                count += 1;
                if largest.as_ref().is_none_or(|(_, l)| x.abs() > l.abs()) {
                    largest = Some((p.name.clone(), x));
                }
            }
        }
    }
    largest.map(|(name, x)| (count, name, x))
}

#[derive(clap::Args)]
pub struct EvalArgs {
    /// The checkpoint to evaluate.
    #[arg(long, value_name = "FILE")]
    checkpoint: PathBuf,
    /// A LoRA adapter of that checkpoint (`tinygpt finetune`): evaluate the
    /// fine-tuned model, running the adapters as their own ops (the dumps
    /// then hold the adapters' gradients and step).
    #[arg(long, value_name = "ADAPTER")]
    adapter: Option<PathBuf>,
    /// Text whose validation split is read: a file, `task:NAME` or
    /// `gallery:ID` (default: a gallery model's own text, else TinyShakespeare).
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
    /// Also write the logits, (batch, ctx, 256) little-endian f32, to this file.
    #[arg(long, value_name = "FILE")]
    dump_logits: Option<PathBuf>,
    /// Also write the gradients of the batch's loss (before clipping), as
    /// f32 safetensors named `grad.NAME`, to this file (dropout off).
    #[arg(long, value_name = "FILE")]
    dump_grads: Option<PathBuf>,
    /// Also take one training step on the batch (clipping and AdamW at the
    /// checkpoint's next learning rate, from its moments), dropout off, and
    /// write the checkpoint after it to this file.
    #[arg(long, value_name = "FILE")]
    dump_step: Option<PathBuf>,
    /// Also measure the run's own validation loss (`val_loss`): the mean
    /// over the validation batches its training measured (its seed, its
    /// `eval_batches`), the last one its history records.
    #[arg(long)]
    validation: bool,
    /// Where to compute.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// Replace dump files that exist.
    #[arg(long)]
    force: bool,
}

/// `tinygpt eval`: the loss of a checkpoint on a fixed batch (validation
/// windows at offsets 0, ctx, 2·ctx, …), as one JSON line. Other
/// implementations (`tests/reference/tinygpt_torch.py --check`) rebuild the
/// same batch and compare.
pub fn eval(args: EvalArgs) -> Result<()> {
    // The checkpoint a step continues (the adapter, with one), and every
    // parameter of the model evaluated.
    let (ck, all_params) =
        match super::finetune::model_with_adapter(&args.checkpoint, args.adapter.as_deref())? {
            (base, Some(adapter)) => {
                let params = tinygpt::model::lora::adapted_params(&base, &adapter)
                    .map_err(anyhow::Error::msg)?;
                (adapter, params)
            }
            (base, None) => {
                let params = base.params.clone();
                (base, params)
            }
        };
    let mut config = ck.config.clone();
    let dumps_step = args.dump_grads.is_some() || args.dump_step.is_some();
    if dumps_step {
        // The oracle compares one deterministic step.
        config.dropout = 0.0;
    }
    let mut inputs = vec![Input::new("--checkpoint", &args.checkpoint)];
    if let Some(adapter) = &args.adapter {
        inputs.push(Input::new("--adapter", adapter));
    }
    if let Some(corpus) = &args.corpus {
        inputs.push(Input::new("--corpus", corpus));
    }
    let _claims = [
        ("--dump-logits", &args.dump_logits),
        ("--dump-grads", &args.dump_grads),
        ("--dump-step", &args.dump_step),
    ]
    .into_iter()
    .filter_map(|(flag, path)| path.as_ref().map(|p| claim(p, flag, &inputs, args.force)))
    .collect::<Result<Vec<_>, _>>()
    .map_err(|e| anyhow::anyhow!("cannot write the dump: {e}"))?;
    let corpus = tinygpt::model::gallery::corpus_for(
        args.corpus.as_deref(),
        Some(&args.checkpoint),
        config.ctx,
    )?;
    let (b, t) = (config.batch, config.ctx);
    let windows = corpus.val.len() - t;
    let offsets: Vec<usize> = (0..b).map(|i| (i * t) % windows).collect();
    let mut inputs = Vec::with_capacity(b * t);
    let mut targets = Vec::with_capacity(b * t);
    for &o in &offsets {
        inputs.extend(corpus.val[o..o + t].iter().map(|&x| x as u32));
        targets.extend(corpus.val[o + 1..o + t + 1].iter().map(|&x| x as u32));
    }
    let batch = tinygpt::data::Batch {
        batch: b,
        ctx: t,
        inputs,
        targets,
    };
    let resolved = super::backend::resolve(args.backend)?;
    let mut backend = super::backend::build(&resolved, args.backend, &config)?;
    for p in &all_params {
        backend.write(&p.name, &p.values)?;
    }
    let loss = backend.eval_loss(&batch);
    let val_loss = args
        .validation
        .then(|| tinygpt::train::validation_loss(&mut *backend, &corpus, &config, ck.seed));
    if let Some(path) = &args.dump_logits {
        let logits = backend.read("logits")?;
        tinygpt::output::write_atomic(path, bytemuck::cast_slice::<f32, u8>(&logits))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if dumps_step {
        one_step(&mut *backend, &ck, &batch, &args)?;
    }
    let mut line = serde_json::json!({
        "loss": loss,
        "batch": b,
        "ctx": t,
        "split": "val",
        "offsets": offsets,
        "backend": backend.describe(),
    });
    if let Some(val_loss) = val_loss {
        line["val_loss"] = val_loss.into();
    }
    // A toy task's exact answers on its held-out examples.
    if let Some(task) = tinygpt::data::tasks::Task::of(&corpus) {
        let mut generator = tinygpt::cpu::generate::Generator::new(&ck.config, &all_params)
            .map_err(anyhow::Error::msg)?;
        let (_, held_out) = task.examples();
        let accuracy = tinygpt::cards::accuracy(&mut generator, task, &held_out)
            .map_err(anyhow::Error::msg)?;
        line["accuracy"] = accuracy.fraction().into();
        line["correct"] = accuracy.correct.into();
        line["held_out"] = accuracy.total.into();
    }
    println!("{line}");
    Ok(())
}

/// `eval --dump-grads/--dump-step`: the checkpoint's next training step on
/// the eval batch, run as the program's entries: up to the clip, the
/// gradients are read; the rest (clip, AdamW) then updates the weights,
/// which are written as a checkpoint one step on. The float64 oracle
/// (`tests/reference/tinygpt_torch.py check --grads --step`) redoes both.
fn one_step(
    backend: &mut dyn tinygpt::backend::Backend,
    ck: &Checkpoint,
    batch: &tinygpt::data::Batch,
    args: &EvalArgs,
) -> Result<()> {
    use tinygpt::program::Step;
    if let Some(opt) = &ck.optimizer {
        for t in opt.m.iter().chain(&opt.v) {
            backend.write(&t.name, &t.values)?;
        }
    } else {
        eprintln!("note: the checkpoint has no AdamW moments; the step starts them from zero");
    }
    let params = tinygpt::backend::StepParams {
        lr: tinygpt::train::schedule::learning_rate(&ck.config, ck.step),
        adam_t: ck.step + 1,
        dropout_seed: 0,
    };
    let steps = &backend.program().steps;
    let (n, clip) = (
        steps.len(),
        steps
            .iter()
            .position(|s| matches!(s, Step::ClipGradNorm))
            .context("the program has no gradient clipping step")?,
    );
    backend.load_step(batch, Some(params));
    backend.run_entries(0..clip);
    if let Some(path) = &args.dump_grads {
        let grads = ck
            .params
            .iter()
            .map(|p| {
                let name = format!("grad.{}", p.name);
                Ok((backend.read(&name)?, name, &p.shape))
            })
            .collect::<Result<Vec<_>>>()?;
        let views = grads
            .iter()
            .map(|(values, name, shape)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.to_vec(),
                    bytemuck::cast_slice(values),
                )?;
                Ok((name.clone(), view))
            })
            .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
        let bytes = safetensors::serialize(views, None)?;
        tinygpt::output::write_atomic(path, &bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    backend.run_entries(clip..n);
    if let Some(path) = &args.dump_step {
        let params = tinygpt::train::read_params(backend)?;
        let params = tinygpt::train::saved_params(backend.program(), params);
        let after = Checkpoint {
            config: ck.config.clone(),
            step: ck.step + 1,
            seed: ck.seed,
            sampler_state: ck.sampler_state,
            loss_history: ck.loss_history.clone(),
            timelapse: ck.timelapse.clone(),
            optimizer: Some(tinygpt::train::read_moments(backend, &params)?),
            params,
        };
        after.save(path, Precision::F32)?;
    }
    Ok(())
}
