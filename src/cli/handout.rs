//! `tinygpt handout`: a lesson as a printable HTML page
//! ([`tinygpt::handout`]), each step's picture taken from the app run
//! headless at that step as a workshop link shows it (the same run `tinygpt
//! app --headless --locked --lesson NAME --lesson-step K --screenshot`
//! makes).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;
use tinygpt::output::{Input, check, claim};

#[derive(clap::Args)]
pub struct HandoutArgs {
    /// The lesson: a built-in name (attention, tokens, …) or a lesson file.
    #[arg(long, value_name = "NAME|FILE.ron")]
    lesson: String,
    /// The page to write; each step's picture goes beside it as
    /// `NAME-step-K.png`. Default: `handout-LESSON.html`.
    #[arg(long, value_name = "FILE.html")]
    out: Option<PathBuf>,
    /// Replace the page and its pictures if they exist.
    #[arg(long)]
    force: bool,
    /// The pictures' size in pixels.
    #[arg(long, value_name = "PX", default_value_t = 1280, value_parser = clap::value_parser!(u32).range(320..=3840))]
    width: u32,
    #[arg(long, value_name = "PX", default_value_t = 720, value_parser = clap::value_parser!(u32).range(240..=2160))]
    height: u32,
    /// The page's language and its pictures': en, es or zh (a built-in
    /// lesson in that language; a lesson file as it is written).
    #[arg(long, value_name = "LANG", default_value = "en", value_parser = super::app::parse_language)]
    lang: tinygpt::i18n::Language,
}

pub fn run(args: HandoutArgs) -> Result<()> {
    tinygpt::i18n::set_language(args.lang);
    let lesson = tinygpt::lesson::Lesson::load(&args.lesson).map_err(|e| anyhow::anyhow!("{e}"))?;
    let stem = Path::new(&args.lesson)
        .file_stem()
        .map_or("lesson".into(), |s| s.to_string_lossy().into_owned());
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("handout-{stem}.html")));
    if out.extension().is_none_or(|e| e != "html") {
        bail!(
            "--out {} must end in .html: the handout is a web page",
            out.display()
        );
    }
    let page_stem = out.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let lesson_input = [Input::new("--lesson", Path::new(&args.lesson))];
    let pictures: Vec<String> = (1..=lesson.steps.len())
        .map(|k| format!("{page_stem}-step-{k}.png"))
        .collect();
    // Every file it writes is checked before the first is written; the
    // page is claimed (the app run for each picture claims its own).
    for picture in &pictures {
        check(&dir.join(picture), "--out", &lesson_input, args.force)
            .map_err(|e| anyhow::anyhow!("cannot write the handout: {e}"))?;
    }
    let _claim = claim(&out, "--out", &lesson_input, args.force)
        .map_err(|e| anyhow::anyhow!("cannot write the handout: {e}"))?;
    let exe = std::env::current_exe().context("cannot find this program to take the pictures")?;
    let (w, h) = (args.width.to_string(), args.height.to_string());
    for (k, picture) in pictures.iter().enumerate() {
        let step = (k + 1).to_string();
        eprintln!(
            "step {step} of {}: {}",
            pictures.len(),
            lesson.steps[k].title
        );
        let run = Command::new(&exe)
            // As a workshop link shows it: the scene and its narration, no panels.
            .args([
                "app",
                "--headless",
                "--locked",
                "--lang",
                args.lang.code(),
                "--lesson",
                &args.lesson,
                "--lesson-step",
                &step,
            ])
            .args([
                "--frames",
                "30",
                "--width",
                &w,
                "--height",
                &h,
                "--force",
                "--screenshot",
            ])
            .arg(dir.join(picture))
            .output()
            .context("cannot run the app headless for the pictures")?;
        if !run.status.success() {
            let why = String::from_utf8_lossy(&run.stderr);
            bail!(
                "the picture of step {step} failed: {}",
                why.trim()
                    .lines()
                    .last()
                    .unwrap_or("the headless app exited with an error")
            );
        }
    }
    tinygpt::output::write_atomic(
        &out,
        tinygpt::handout::html(&lesson, &args.lesson, &pictures).as_bytes(),
    )
    .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "wrote {} ({} steps, with {} beside it): print it from a browser",
        out.display(),
        pictures.len(),
        if pictures.len() == 1 {
            pictures[0].clone()
        } else {
            format!("{} … {}", pictures[0], pictures[pictures.len() - 1])
        }
    );
    Ok(())
}
