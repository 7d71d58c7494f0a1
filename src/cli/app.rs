//! `tinygpt app` (and `tinygpt` alone): the explainer, in a window or headless.

use anyhow::{Result, bail};
use clap::Args;
use std::path::PathBuf;
use tinygpt::app::headless::HeadlessConfig;
use tinygpt::app::scenes::Scene;
use tinygpt::app::training::{CorpusSource, RunSettings};
use tinygpt::app::{AppOptions, build};
use tinygpt::model::config::{Config, DEFAULT_PRESET};

/// A `--press` key, checked when the command line is read.
fn key_name(name: &str) -> Result<String, String> {
    tinygpt::app::headless::key_named(name)
        .map(|_| name.to_string())
        .ok_or_else(|| format!("{name:?} is not a key --press knows; give a KeyCode name such as Enter, Tab, Shift+Tab, ArrowLeft, Escape, F6, Digit1 or KeyR"))
}

#[derive(Args, Debug)]
pub struct AppArgs {
    /// Model size: a built-in preset (see `tinygpt presets`) or a .ron file
    /// (default: small).
    #[arg(long)]
    preset: Option<String>,
    /// A text file to train on, `task:NAME` for a toy task, or `gallery:ID`
    /// for a gallery model's text (default: the text of the gallery model
    /// opened, else TinyShakespeare, built in).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Open a trained model instead of a fresh one: a checkpoint file, or
    /// a gallery one (`gallery:reverse`; tiny and small by bare name too).
    /// `tinygpt` alone opens the shipped small in the "Inside the model"
    /// scene.
    #[arg(long)]
    checkpoint: Option<String>,
    /// A LoRA adapter of the --checkpoint model (`tinygpt finetune`): the
    /// app opens the fine-tune, its base frozen (train on with --corpus).
    #[arg(long, value_name = "ADAPTER", requires = "checkpoint")]
    adapter: Option<PathBuf>,
    /// Training steps of the run (default: the preset's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Peak learning rate (default: the preset's).
    #[arg(long, value_parser = super::positive_f32)]
    lr: Option<f32>,
    /// A "break it" lab for the run: take parts out of the model
    /// (comma-separated; the run panel's 🔨 Break it has the same switches).
    #[arg(long, value_enum, value_delimiter = ',')]
    lab: Vec<super::LabSwitch>,
    /// The seed of a new run's weights and batches (default: 1337).
    #[arg(long, value_parser = super::seed, allow_hyphen_values = true)]
    seed: Option<u64>,
    /// Where to train: auto (the GPU unless its adapter is a software renderer), gpu or cpu.
    #[arg(long, value_enum, default_value = "auto")]
    backend: super::BackendChoice,
    /// The matmuls' arithmetic: f32, or mixed on the GPU's tensor cores
    /// (where the device has cooperative matrices; the run panel's
    /// Precision box says why not where it has none).
    #[arg(long, value_enum)]
    precision: Option<super::backend::Precision>,
    /// The scene to open (`--help` says what each one shows; default: the
    /// Model scene, or In 3D where the window opens as `tinygpt` alone does).
    #[arg(long, value_parser = parse_scene, long_help = scene_help())]
    scene: Option<Scene>,
    /// The Step scene opens at this entry of the training step (0: the
    /// first forward op; `tinygpt step --json` lists them).
    #[arg(long, default_value_t = 0, value_name = "N")]
    step_op: usize,
    /// The pass the Flash scene shows first: forward, backward_dkdv or backward_dq.
    #[arg(long, default_value = "forward", value_parser = parse_pass)]
    flash_pass: tinygpt::flash::Pass,
    /// The Flash scene opens paused at this visit of its pass (0: the
    /// first; `tinygpt flash-trace --json` lists them, skipped blocks aside)
    /// instead of playing from the first.
    #[arg(long, value_name = "N")]
    flash_visit: Option<usize>,
    /// The Speedup scene measures these presets (comma-separated) on the CPU
    /// and the GPU as soon as it opens.
    #[arg(long, value_name = "PRESETS", value_delimiter = ',')]
    bench: Option<Vec<String>>,
    /// The Speedup scene times one step of this preset per kernel (GPU
    /// timestamps; the CPU's ops where there are none) as soon as it opens.
    #[arg(long, value_name = "PRESET")]
    kernels: Option<String>,
    /// Inside the model, the 3D walk-through (`--scene flow`), opens paused at this beat of
    /// its tour (0: the whole model; the headless line's `walk.beats`
    /// lists them).
    #[arg(long, value_name = "N")]
    walk_beat: Option<usize>,
    /// With --walk-beat: zoomed this much (0.5 to 80, the mouse wheel's)
    /// on the beat's output; cells wide enough on screen show their numbers.
    #[arg(long, value_name = "Z", requires = "walk_beat", value_parser = walk_zoom)]
    walk_zoom: Option<f32>,
    /// The shared timeline starts at this step of the run's time-lapse: the
    /// Attention scene (`--scene attention`) opens on it, the probe string's
    /// attention as the model had it then (the frame at or before it that
    /// kept its maps), and the Time-lapse scene shows the frame at or before it.
    #[arg(long, value_name = "STEP")]
    timeline_step: Option<u64>,
    /// Start training at once instead of waiting for Train.
    #[arg(long)]
    train: bool,
    /// Open in the wide view: no side panels, the scene fills the window
    /// (for a projector; the top bar's "wide view" button toggles it).
    #[arg(long)]
    wide: bool,
    /// Run without a window, render offscreen, print one JSON line and exit.
    #[arg(long)]
    headless: bool,
    /// Frames to render in headless mode.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(2..))]
    frames: u32,
    /// Save the last headless frame as a PNG (a new file, or --force).
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Headless: let --screenshot and `--export checkpoint` replace files
    /// that exist (never an input, a folder or a special file).
    #[arg(long, requires = "headless")]
    force: bool,
    /// Size of the headless picture.
    #[arg(long, default_value_t = 1600, value_parser = clap::value_parser!(u32).range(320..=8192))]
    width: u32,
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u32).range(240..=8192))]
    height: u32,
    /// Headless frames per second, like a display's refresh (0: unpaced).
    #[arg(long, default_value_t = 60.0, value_parser = super::non_negative_f32)]
    fps: f32,
    /// Headless: before the screenshot, save a region of the scene (e.g. the
    /// Speedup scene's `curve` or `roofline`) or the whole `view` through the
    /// app's PNG export, into tinygpt-SCENE-REGION.png in the working directory;
    /// or `data` (the view's data: tinygpt-SCENE-data.json) or `loss-chart`
    /// (tinygpt-loss.svg and .csv), as the app's 💾 Data and loss-chart buttons save them,
    /// or `checkpoint` (the run, as Save checkpoint saves it: tinygpt-app.safetensors).
    #[arg(long, value_name = "REGION", requires = "headless")]
    export: Option<String>,
    /// Keys to press after the headless frames, one every other frame, then
    /// a few frames more (a keyboard-only check): `Enter,ArrowRight,Tab`,
    /// `Shift+Tab`, `F6`, `Digit1`… (KeyCode names).
    #[arg(long, value_name = "KEYS", value_delimiter = ',', requires = "headless", value_parser = key_name)]
    press: Vec<String>,
    /// Headless: fingers on the screen after the keys, each gesture over ten
    /// frames (a touch-screen check; repeat for more): `tap:X,Y`,
    /// `drag:X0,Y0,X1,Y1`, `pinch:X,Y,FROM,TO` (two fingers FROM points apart
    /// moving to TO), in window points.
    #[arg(long, value_name = "GESTURE", requires = "headless", value_parser = tinygpt::app::headless::Gesture::parse)]
    touch: Vec<tinygpt::app::headless::Gesture>,
    /// Animations jump (the tour cuts, sweeps show their end); also on
    /// where the system asks for reduced motion.
    #[arg(long)]
    reduced_motion: bool,
    /// The backends `--bench` measures, comma-separated (default: cpu and
    /// gpu, but not a software-rendering GPU adapter, which also draws the
    /// window); `gpu-mixed` adds the GPU in mixed precision (the tensor
    /// cores), a series of its own.
    #[arg(long, value_delimiter = ',', value_parser = ["cpu", "gpu", "gpu-mixed"], requires = "bench")]
    bench_backends: Option<Vec<String>>,
    /// Seconds of timed steps per `--bench` measurement (default 0.5; the
    /// scene's slider, 0.5 to 10).
    #[arg(long, value_name = "S", requires = "bench", value_parser = super::positive_f32)]
    bench_seconds: Option<f32>,
    /// Presenter mode: big type, high contrast, the panels hidden, the
    /// pointer ringed; Space trains/pauses, the arrows step a lesson (F5 in
    /// the app).
    #[arg(long)]
    presenter: bool,
    /// Heatmaps in a colour-blind-safe diverging palette (orange/purple).
    #[arg(long)]
    colour_blind: bool,
    /// The canvas of *Inside the model*: dark (the default), or light
    /// (paper: for white slides and handouts, or a projector that turns
    /// dark greys to mud).
    #[arg(long, value_parser = parse_theme)]
    theme: Option<tinygpt::app::canvas::CanvasTheme>,
    /// Play a lesson: a built-in name (tokens, attention, why-gpus-win) or a
    /// lesson file (`my-lesson.ron`, the format of scenes/*.ron).
    #[arg(long, value_name = "NAME|FILE.ron")]
    lesson: Option<String>,
    /// The lesson's step to open at (1-based).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), requires = "lesson")]
    lesson_step: u32,
    /// A workshop: the lesson and nothing else (no scene switcher, no run
    /// or chart panels, no files taken in, no "end lesson"), as a browser
    /// link's `locked=1` opens it.
    #[arg(long, requires = "lesson")]
    locked: bool,
    /// Join a live class: the teacher's link `tinygpt class` printed
    /// (http://…/#class=CODE&teacher=…), or a student's (…/#class=CODE).
    #[arg(long, value_name = "URL")]
    join: Option<String>,
    /// The language of the app and its lessons: en (English), es (Español)
    /// or zh (中文), as a browser link's `lang=` (the top bar switches it).
    #[arg(long, value_name = "LANG", default_value = "en", value_parser = parse_language)]
    lang: tinygpt::i18n::Language,
    /// Press the Speedup scene's Cancel this many frames after its bench
    /// starts (for checks that a cancelled bench leaves the app running).
    #[arg(long, value_name = "FRAMES", hide = true, requires = "bench")]
    cancel_bench_after: Option<u32>,
}

impl AppArgs {
    /// `tinygpt` alone: the window with every default.
    pub fn default_for_window() -> Self {
        Self::parsed(&["tinygpt"])
    }

    fn parsed(line: &[&str]) -> Self {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: AppArgs,
        }
        Wrapper::parse_from(line.iter().copied()).args
    }

    /// Whether the window opens as `tinygpt` alone does: a newcomer first
    /// sees a trained model predicting, the shipped small in 3D. So it does
    /// whenever nothing asks for a scene or chooses the run (`tinygpt app
    /// --presenter`, `--lang es`, `--backend gpu` …); headless keeps the
    /// Model scene on a new run, as scripts expect.
    fn opens_like_tinygpt(&self) -> bool {
        !self.headless
            && self.scene.is_none()
            && self.preset.is_none()
            && self.corpus.is_none()
            && self.checkpoint.is_none()
            && self.steps.is_none()
            && self.lr.is_none()
            && self.lab.is_empty()
            && self.seed.is_none()
            && !self.train
            && self.lesson.is_none()
            && self.bench.is_none()
            && self.kernels.is_none()
            && self.join.is_none()
    }
}

/// `--scene`'s long help: every scene of [`Scene::ALL`] with the switcher's
/// English tooltip, so the help names each scene the app has.
fn scene_help() -> String {
    let scenes: Vec<String> = Scene::ALL
        .iter()
        .map(|s| {
            format!(
                "{} ({})",
                s.key(),
                s.about_in(tinygpt::i18n::Language::English)
            )
        })
        .collect();
    format!("The scene to open: {}.", scenes.join("; "))
}

/// `--walk-zoom`: a number from 0.5 to 80.
fn walk_zoom(s: &str) -> std::result::Result<f32, String> {
    let z = super::positive_f32(s)?;
    if (0.5..=80.0).contains(&z) {
        Ok(z)
    } else {
        Err(format!("{s} is not a zoom from 0.5 to 80"))
    }
}

fn parse_theme(s: &str) -> std::result::Result<tinygpt::app::canvas::CanvasTheme, String> {
    tinygpt::app::canvas::CanvasTheme::from_key(s)
        .ok_or_else(|| format!("`{s}` is not a theme; the themes are dark, light"))
}

fn parse_scene(s: &str) -> std::result::Result<Scene, String> {
    Scene::from_key(s)
        .ok_or_else(|| format!("`{s}` is not a scene; the scenes are {}", Scene::keys()))
}

fn parse_pass(s: &str) -> std::result::Result<tinygpt::flash::Pass, String> {
    use tinygpt::flash::Pass;
    Pass::from_key(s).ok_or_else(|| {
        format!(
            "`{s}` is not a pass; the passes are {}",
            Pass::ALL.map(Pass::key).join(", ")
        )
    })
}

pub fn run_app(mut args: AppArgs) -> Result<()> {
    if args.opens_like_tinygpt() {
        args.scene = Some(Scene::Walk);
        args.checkpoint = Some("small".into());
    }
    let preset_name = args.preset.clone().unwrap_or_else(|| DEFAULT_PRESET.to_string());
    if !args.headless && (args.screenshot.is_some()) {
        bail!("--screenshot needs --headless (in the window, use your system's screenshot tool)");
    }
    #[cfg(all(unix, not(target_os = "macos")))]
    if !args.headless && std::env::var_os("DISPLAY").is_none_or(|d| d.is_empty()) {
        bail!(
            "no display found (DISPLAY is not set): run the explainer on a desktop, or check it with `tinygpt app --headless --screenshot frame.png`"
        );
    }
    let config = Config::load(&preset_name)?;
    let mut settings = RunSettings::from_preset(&preset_name, config);
    // The gallery model a checkpoint argument names (`gallery:ID`, or a
    // shipped one's bare name), whose text is the corpus unless --corpus.
    let gallery_entry = args.checkpoint.as_deref().and_then(|name| {
        tinygpt::model::gallery::named(name).or_else(|| {
            tinygpt::model::shipped::shipped(name).map(|_| tinygpt::model::gallery::find(name))
        })
    });
    if let Some(path) = &args.corpus {
        settings.corpus = corpus_source(path)?;
    } else if let Some(Ok(entry)) = &gallery_entry {
        settings.corpus = CorpusSource::of_gallery(entry.text);
    }
    let gallery_id = gallery_entry
        .as_ref()
        .and_then(|e| e.as_ref().ok())
        .map(|e| e.id);
    // A checkpoint to open: a gallery one by name, else a file.
    let checkpoint = match &args.checkpoint {
        None => None,
        Some(name) => match gallery_entry
            .map(|e| e.map(|e| (e.id, e.bytes)))
            .transpose()
            .map_err(anyhow::Error::msg)?
        {
            Some((id, bytes)) => Some((format!("{id} (shipped)"), bytes.to_vec())),
            None => {
                let path = std::path::Path::new(name);
                let bytes = tinygpt::data::read_file(path, 8 << 30).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read the checkpoint {name}: {e}; give a .safetensors file or a shipped name ({}) with --checkpoint",
                        tinygpt::model::shipped::SHIPPED.iter().map(|s| s.0).collect::<Vec<_>>().join(", ")
                    )
                })?;
                tinygpt::model::checkpoint::Checkpoint::from_bytes(&bytes, name)
                    .map_err(|e| anyhow::anyhow!("cannot open the checkpoint {name}: {e}"))?;
                Some((name.clone(), bytes))
            }
        },
    };
    // Text too short for a fresh run's context is refused before the app opens.
    if checkpoint.is_none() {
        settings
            .corpus
            .corpus(settings.config.ctx)
            .map_err(anyhow::Error::msg)?;
    }
    // An adapter: refused here, by name, unless it fits the checkpoint.
    let adapter = match (&args.adapter, &checkpoint) {
        (Some(path), Some((name, bytes))) => {
            let base = tinygpt::model::checkpoint::Checkpoint::from_bytes(bytes, name)?;
            super::finetune::adapter_of(&base, path)?;
            let bytes = tinygpt::data::read_file(path, 4 << 30).map_err(anyhow::Error::msg)?;
            Some((path.display().to_string(), bytes))
        }
        _ => None,
    };
    // A gallery model alone opens as the app's menu opens it: its preset
    // in the Run panel, its prompt in the sample box.
    let (checkpoint, gallery) = match gallery_id {
        Some(id) if adapter.is_none() && args.corpus.is_none() => (None, Some(id.to_string())),
        _ => (checkpoint, None),
    };
    if let Some(s) = args.steps {
        settings.steps = s;
    }
    if let Some(lr) = args.lr {
        settings.lr = lr;
    }
    super::apply_lab(&mut settings.lab, &args.lab);
    settings.seed = args.seed.unwrap_or(1337);
    settings.backend = args.backend.into();
    if let Some(p) = args.precision {
        settings.precision = p.into();
    }
    if settings.precision == tinygpt::backends::Precision::Mixed && args.backend == super::BackendChoice::Cpu {
        anyhow::bail!(super::backend::MIXED_ON_CPU);
    }
    settings.run_config().map_err(anyhow::Error::msg)?;
    // The files the app reads: never its screenshot, nor a checkpoint it
    // saves (Save checkpoint, `--export checkpoint`).
    use tinygpt::output::Input;
    let preset = std::path::Path::new(&preset_name);
    let lesson = args.lesson.as_deref().map(std::path::Path::new);
    let inputs: Vec<Input> = [
        args.corpus.as_deref().map(|p| Input::new("--corpus", p)),
        args.checkpoint
            .as_deref()
            .map(std::path::Path::new)
            .filter(|p| p.is_file())
            .map(|p| Input::new("--checkpoint", p)),
        args.adapter.as_deref().map(|p| Input::new("--adapter", p)),
        preset.is_file().then(|| Input::new("--preset", preset)),
        lesson
            .filter(|p| p.is_file())
            .map(|p| Input::new("--lesson", p)),
    ]
    .into_iter()
    .flatten()
    .collect();
    tinygpt::output::note_inputs(&inputs);
    // The screenshot is checked and locked before the app starts.
    let _screenshot_claim = match &args.screenshot {
        Some(path) => Some(
            tinygpt::output::claim(path, "--screenshot", &inputs, args.force)
                .map_err(|e| anyhow::anyhow!("cannot write the screenshot: {e}"))?,
        ),
        None => None,
    };
    let headless = args.headless.then(|| HeadlessConfig {
        frames: args.frames,
        screenshot: args.screenshot.clone(),
        width: args.width,
        height: args.height,
        fps: args.fps as f64,
        export: args.export.clone(),
        force: args.force,
        press: args.press.clone(),
        touch: args.touch.clone(),
    });
    // A bad lesson is refused with its file, step and field; the app still
    // opens, with the error in the status line.
    let (lesson, lesson_error) = match &args.lesson {
        None => (None, None),
        Some(name) => match tinygpt::lesson::Lesson::load(name) {
            Ok(l) => {
                let k = (args.lesson_step as usize - 1).min(l.steps.len() - 1);
                (Some((name.clone(), l, k)), None)
            }
            // Headless, nobody reads a status line: refused like any bad input.
            Err(e) if args.headless => bail!("{e}"),
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let class = match &args.join {
        Some(url) => Some(tinygpt::app::class::from_join_url(url).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut app = build(AppOptions {
        settings,
        scene: args.scene.unwrap_or_default(),
        step_op: args.step_op,
        flash_pass: args.flash_pass,
        flash_visit: args.flash_visit,
        bench: args.bench.clone(),
        kernels: args.kernels.clone(),
        walk_beat: args.walk_beat,
        walk_zoom: args.walk_zoom,
        timeline_step: args.timeline_step,
        train: args.train,
        wide: args.wide,
        lesson,
        headless,
        checkpoint,
        adapter,
        gallery,
        locked: args.locked,
        language: args.lang,
        class,
    });
    if let Some(e) = lesson_error {
        app.world_mut()
            .resource_mut::<tinygpt::app::training::AppStatus>()
            .error(e);
    }
    if args.presenter {
        app.world_mut()
            .resource_mut::<tinygpt::app::ui::UiState>()
            .set_presenter(true);
    }
    if args.reduced_motion {
        app.world_mut()
            .resource_mut::<tinygpt::app::ui::UiState>()
            .reduced_motion = true;
    }
    if let Some(theme) = args.theme {
        app.world_mut().insert_resource(theme);
    }
    if args.colour_blind {
        tinygpt::app::heatmap::set_palette(tinygpt::app::heatmap::Palette::OrangePurple);
    }
    {
        let mut view = app
            .world_mut()
            .resource_mut::<tinygpt::app::scenes::speedup::SpeedupView>();
        view.cancel_after_frames = args.cancel_bench_after;
        if let Some(seconds) = args.bench_seconds {
            view.seconds = (seconds as f64).clamp(0.5, 10.0);
        }
        if let Some(backends) = &args.bench_backends {
            view.cpu = backends.iter().any(|b| b == "cpu");
            view.gpu = backends.iter().any(|b| b == "gpu");
            view.mixed = backends.iter().any(|b| b == "gpu-mixed");
            view.backends_chosen = true;
        }
    }
    let exit = app.run();
    if exit.is_error() {
        bail!("the app ended with an error (see above)");
    }
    Ok(())
}

/// The corpus `--corpus` names: a toy task (`task:NAME`), a gallery
/// model's text (`gallery:ID`), or a text file; checked to be readable.
fn corpus_source(path: &std::path::Path) -> Result<CorpusSource> {
    let arg = path.to_str().unwrap_or_default();
    if let Some(name) = arg.strip_prefix(tinygpt::data::tasks::PREFIX) {
        let task = tinygpt::data::tasks::Task::named(name).map_err(anyhow::Error::msg)?;
        return Ok(CorpusSource::Task(task));
    }
    if let Some(entry) = tinygpt::model::gallery::named(arg) {
        return Ok(CorpusSource::of_gallery(
            entry.map_err(anyhow::Error::msg)?.text,
        ));
    }
    let bytes = tinygpt::data::read_file(path, tinygpt::data::MAX_CORPUS_BYTES).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the corpus {}: {e}; give a text file with --corpus",
            path.display()
        )
    })?;
    Ok(CorpusSource::Bytes {
        name: path.display().to_string(),
        bytes: bytes.into(),
    })
}

pub(crate) fn parse_language(s: &str) -> Result<tinygpt::i18n::Language, String> {
    tinygpt::i18n::Language::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_opens_like_tinygpt_unless_a_scene_or_a_run_is_asked_for() {
        for line in [
            &["tinygpt"][..],
            &["tinygpt", "--presenter"],
            &["tinygpt", "--lang", "es"],
            &["tinygpt", "--backend", "gpu", "--wide", "--colour-blind"],
        ] {
            assert!(AppArgs::parsed(line).opens_like_tinygpt(), "{line:?}");
        }
        for line in [
            &["tinygpt", "--headless"][..],
            &["tinygpt", "--scene", "attention"],
            &["tinygpt", "--preset", "tiny"],
            &["tinygpt", "--seed", "5"],
            &["tinygpt", "--train"],
            &["tinygpt", "--checkpoint", "tiny"],
            &["tinygpt", "--lesson", "attention"],
            &["tinygpt", "--corpus", "task:reverse"],
            &["tinygpt", "--lr", "1e-3"],
        ] {
            assert!(!AppArgs::parsed(line).opens_like_tinygpt(), "{line:?}");
        }
        // Headless and unasked, the Model scene as before.
        assert_eq!(AppArgs::parsed(&["tinygpt", "--headless"]).scene.unwrap_or_default(), Scene::Model);
    }
}
