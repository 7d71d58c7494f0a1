//! Argument parsing and dispatch. Every bad argument ends the program with one
//! line that names the problem and the fix, and a non-zero exit code.

#[cfg(feature = "app")]
mod app;
mod attention;
mod class;
mod heads;
mod backend;
mod bench;
mod correctness;
mod finetune;
mod flash;
mod flow;
mod gallery;
mod generate;
#[cfg(feature = "app")]
mod handout;
mod import;
mod probe;
mod run;
mod step;
mod train;
mod weights;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tinygpt",
    version,
    about = "TinyGPT Explainer: train a small byte-level GPT and watch it learn",
    long_about = "TinyGPT Explainer trains a small GPT that reads text one byte at a time.\n\
                  Start with `tinygpt train` (the small preset on TinyShakespeare, a few minutes on a laptop),\n\
                  then `tinygpt generate --checkpoint tinygpt-small.safetensors --prompt \"ROMEO:\"`."
)]
struct Cli {
    /// Worker threads for the CPU backend (default: one per core).
    #[arg(long, global = true, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Open the explainer (the default): watch the model train, live.
    #[cfg(feature = "app")]
    App(app::AppArgs),
    /// A lesson as a printable HTML page: each step's picture, narration
    /// and question, the answers at the end (for students without a device).
    #[cfg(feature = "app")]
    Handout(handout::HandoutArgs),
    /// Teach a lesson live: students join from their browsers with a
    /// code, follow your steps, and their answers appear as they come.
    Class(class::ClassArgs),
    /// Train a model and save it as a checkpoint.
    Train(train::TrainArgs),
    /// Generate text from a checkpoint, streaming it to stdout.
    Generate(generate::GenerateArgs),
    /// Fine-tune a trained model on your own text with LoRA: its weights
    /// stay frozen, and small low-rank adapters learn (an adapter file).
    Finetune(finetune::FinetuneArgs),
    /// Fold a LoRA adapter into its base: a checkpoint of plain weights.
    Merge(finetune::MergeArgs),
    /// List the built-in presets (model sizes) with their parameter counts.
    Presets,
    /// Measure training speed (ms per step, tokens per second) per preset.
    Bench(bench::BenchArgs),
    /// Write a checkpoint's weights as half precision (f16) or 4-bit matrices (--int4), for sharing.
    Export(generate::ExportArgs),
    /// Read the original TinyGPT's `.tinygpt` file into a checkpoint (every
    /// command that takes a checkpoint also reads one as it is).
    Import(import::ImportArgs),
    /// Print a checkpoint's loss on a fixed validation batch (and dump its logits).
    Eval(generate::EvalArgs),
    /// List the trained models that ship with the program (`gallery:ID`
    /// wherever a checkpoint is taken).
    Gallery(gallery::GalleryArgs),
    /// Print the attention weights of every layer and head for a prompt.
    Attention(attention::AttentionArgs),
    /// Every head's induction and previous-token scores (strings of random
    /// letters written twice).
    Heads(heads::HeadsArgs),
    /// The time-lapse a checkpoint carries: every recorded frame's step,
    /// losses, head scores and norms.
    Timelapse(heads::TimelapseArgs),
    /// Run a prompt's forward pass and read it at one position: the residual
    /// stream, every activation, the next-byte probabilities, the logit lens.
    Flow(flow::FlowArgs),
    /// The logit lens at every position: what the model would predict after
    /// each byte if it stopped entering each block.
    Lens(probe::LensArgs),
    /// Knock out each head and each MLP in turn: the prompt's loss without it.
    Ablate(probe::AblateArgs),
    /// Activation patching: where in the model the information that decides
    /// the answer lives (a clean prompt's stream into a corrupted one's).
    Patch(probe::PatchArgs),
    /// Why this byte and not that one: each head's and MLP's share of the
    /// logit difference (direct logit attribution).
    Attribute(probe::AttributeArgs),
    /// Run one training step entry by entry and print what each computed.
    Step(step::StepArgs),
    /// Trace FlashAttention-2's tiling of one head: every tile visit, with the online softmax.
    FlashTrace(flash::FlashArgs),
    /// Run one training step on the CPU and the GPU and compare every tensor.
    Correctness(correctness::CorrectnessArgs),
}

pub use backend::BackendChoice;

pub fn main() -> ExitCode {
    quiet_vulkan_device_select();
    // Like any Unix filter, end quietly when the reader of stdout goes away
    // (`tinygpt generate | head`), instead of panicking on a broken pipe.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `tinygpt` alone: show a newcomer what there is to do.
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // clap's message up to its usage block, folded onto one line.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{} (see `tinygpt --help`)", message.join(" "));
            return ExitCode::from(2);
        }
    };
    if let Some(n) = cli.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n as usize)
            .build_global();
    }
    let Some(command) = cli.command else {
        #[cfg(feature = "app")]
        return finish(app::run_app(app::AppArgs::default_for_window()));
        #[cfg(not(feature = "app"))]
        {
            use clap::CommandFactory;
            let _ = Cli::command().print_help();
            return ExitCode::from(2);
        }
    };
    let result = match command {
        #[cfg(feature = "app")]
        Command::App(a) => app::run_app(a),
        #[cfg(feature = "app")]
        Command::Handout(a) => handout::run(a),
        Command::Class(a) => class::run(a),
        Command::Train(a) => train::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Finetune(a) => finetune::run(a),
        Command::Merge(a) => finetune::merge(a),
        Command::Presets => {
            presets();
            Ok(())
        }
        Command::Bench(a) => bench::run(a),
        Command::Export(a) => generate::export(a),
        Command::Import(a) => import::run(a),
        Command::Gallery(a) => gallery::run(a),
        Command::Eval(a) => generate::eval(a),
        Command::Attention(a) => attention::run(a),
        Command::Heads(a) => heads::heads(a),
        Command::Timelapse(a) => heads::timelapse(a),
        Command::Flow(a) => flow::run(a),
        Command::Lens(a) => probe::lens(a),
        Command::Ablate(a) => probe::ablate(a),
        Command::Patch(a) => probe::patch(a),
        Command::Attribute(a) => probe::attribute(a),
        Command::Step(a) => step::run(a),
        Command::FlashTrace(a) => flash::run(a),
        Command::Correctness(a) => correctness::run(a),
    };
    finish(result)
}

/// Mesa's Vulkan device-selection layer (installed with its drivers, also
/// beside NVIDIA's) connects to Wayland to learn the desktop's GPU, and where
/// there is no session (a server, a container, CI) libwayland prints
/// "error: XDG_RUNTIME_DIR is invalid or not set in the environment." twice
/// on every GPU run. With no session there is no desktop GPU to prefer, so
/// the layer is turned off (its own switch, `NODEVICE_SELECT=1`); wgpu still
/// picks the adapter by power preference. Runs first, while the process has
/// one thread, so changing the environment is sound.
fn quiet_vulkan_device_select() {
    #[cfg(target_os = "linux")]
    {
        let unset = |k: &str| std::env::var_os(k).is_none_or(|v| v.is_empty());
        if unset("XDG_RUNTIME_DIR") && unset("WAYLAND_DISPLAY") && unset("NODEVICE_SELECT") {
            // SAFETY: no other thread exists yet (first call of main).
            unsafe { std::env::set_var("NODEVICE_SELECT", "1") };
        }
    }
}

fn finish(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn presets() {
    use tinygpt::model::config::{BUILTIN_PRESETS, Config, DEFAULT_PRESET, TASK_PRESETS};
    println!(
        "{:<14} {:>6} {:>6} {:>6} {:>5} {:>6} {:>7} {:>13}",
        "preset", "layers", "heads", "d", "ctx", "batch", "steps", "parameters"
    );
    let tasks = TASK_PRESETS
        .iter()
        .map(|p| (p, " (toy task: --corpus task:NAME)"));
    for ((id, _), note) in BUILTIN_PRESETS.iter().map(|p| (p, "")).chain(tasks) {
        let c = Config::load(id).expect("built-in presets are valid (tested)");
        let mark = if *id == DEFAULT_PRESET {
            " (default)"
        } else {
            note
        };
        println!(
            "{:<14} {:>6} {:>6} {:>6} {:>5} {:>6} {:>7} {:>13}{mark}",
            id,
            c.n_layer,
            c.n_head,
            c.d_model,
            c.ctx,
            c.batch,
            c.steps,
            group_thousands(c.param_count())
        );
    }
}

pub use tinygpt::model::config::group_thousands;

/// Parses a number that must be finite and > 0.
/// Text safe for a terminal: control characters (NUL, BEL, ESC, …, and the
/// C1 range) shown as their Unicode pictures (␀ ␇ ␛) or U+FFFD, never sent
/// raw, so a sample of a model trained on a binary file cannot ring the bell
/// or reprogram the terminal. Newlines and tabs stay.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            '\u{80}'..='\u{9f}' => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// A part of the model a "break it" lab takes out (`--lab`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LabSwitch {
    /// Position t also attends to t + 1, … (the byte it must predict).
    NoCausalMask,
    /// No position embeddings: nothing says where a byte is.
    NoPositionEmbeddings,
}

/// The lab switches on top of a preset's.
pub fn apply_lab(lab: &mut tinygpt::model::config::Lab, switches: &[LabSwitch]) {
    for s in switches {
        match s {
            LabSwitch::NoCausalMask => lab.causal_mask = false,
            LabSwitch::NoPositionEmbeddings => lab.position_embeddings = false,
        }
    }
}

pub fn positive_f32(s: &str) -> Result<f32, String> {
    let v = f32_of(s)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s} must be a finite number > 0"))
    }
}

/// Parses a number that must be finite and >= 0.
pub fn non_negative_f32(s: &str) -> Result<f32, String> {
    let v = f32_of(s)?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("{s} must be a finite number >= 0"))
    }
}

/// A number as f32, refusing a finite number that f32 cannot hold (instead
/// of rounding `1e-50` to 0 and then calling it "not > 0", or `1e50` to inf).
fn f32_of(s: &str) -> Result<f32, String> {
    let wide: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    let v = wide as f32;
    if !wide.is_finite() {
        // NaN and inf: the caller's own "must be a finite number".
        return Ok(v);
    }
    if v.is_infinite() {
        return Err(format!(
            "{s} is too large: the model computes in f32, which holds at most {:e}",
            f32::MAX
        ));
    }
    if wide != 0.0 && v.abs() < f32::MIN_POSITIVE {
        return Err(format!(
            "{s} is too small: the model computes in f32, where it would be 0 or lose its precision (the smallest normal f32 is {:e})",
            f32::MIN_POSITIVE
        ));
    }
    Ok(v)
}

/// A random seed: a whole number from 0 to 2^64 − 1 (`--seed -1` is refused
/// with that range, not as an unknown argument).
pub fn seed(s: &str) -> Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| {
        format!(
            "`{s}` is not a seed: give a whole number from 0 to {}",
            u64::MAX
        )
    })
}
