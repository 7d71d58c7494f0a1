//! The lesson panel's *print a handout* (natively): `tinygpt handout` run as a
//! child process for the lesson on screen, so the frame never waits on its
//! pictures; the status line says where the page went, or why it failed.
//! ([`crate::handout`] is the page; src/cli/handout.rs takes the pictures.)

use super::lesson::LessonPlayer;
use super::training::AppStatus;
use bevy::prelude::*;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct HandoutPlugin;

impl Plugin for HandoutPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<HandoutJob>()
            .add_systems(Update, (start, poll).chain());
    }
}

/// The handout being made: its page and the child making it; where pages
/// go (the working directory) and the program that makes them (this one),
/// which tests point elsewhere.
#[derive(Resource)]
pub struct HandoutJob {
    pub running: Option<(PathBuf, Child)>,
    pub dir: PathBuf,
    pub program: Option<PathBuf>,
}

impl Default for HandoutJob {
    fn default() -> Self {
        Self {
            running: None,
            dir: PathBuf::from("."),
            program: std::env::current_exe().ok(),
        }
    }
}

/// Starts `tinygpt handout` when the lesson panel asked for one.
fn start(
    mut player: ResMut<LessonPlayer>,
    mut job: ResMut<HandoutJob>,
    mut status: ResMut<AppStatus>,
) {
    if !std::mem::take(&mut player.handout_asked) {
        return;
    }
    let Some((name, _)) = player.lesson.clone() else {
        return;
    };
    if job.running.is_some() {
        status.info = Some(crate::t!("handout-busy"));
        return;
    }
    let stem = std::path::Path::new(&name)
        .file_stem()
        .map_or("lesson".into(), |s| s.to_string_lossy().into_owned());
    // The next free handout-NAME.html, -2, -3, … in the directory;
    // the child claims it itself, so this run lets go of it.
    let page = match crate::output::numbered(
        &job.dir,
        &format!("handout-{stem}"),
        "html",
        "the handout",
    ) {
        Ok(mut claim) => {
            let path = claim.path().to_path_buf();
            claim.release();
            path
        }
        Err(e) => return status.error(crate::t!("handout-none", error = e.to_string())),
    };
    let program = job
        .program
        .clone()
        .ok_or_else(|| std::io::Error::other("this program's path is unknown"));
    let child = program.and_then(|exe| {
        Command::new(exe)
            .args([
                "handout",
                "--lang",
                crate::i18n::language().code(),
                "--lesson",
                &name,
                "--out",
            ])
            .arg(&page)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    });
    match child {
        Ok(child) => {
            status.info = Some(crate::t!(
                "handout-making",
                path = page.display().to_string()
            ));
            job.running = Some((page, child));
        }
        Err(e) => status.error(crate::t!(
            "handout-none",
            error = format!("`tinygpt handout`: {e}")
        )),
    }
}

/// Says when the child is done, without waiting for it.
fn poll(mut job: ResMut<HandoutJob>, mut status: ResMut<AppStatus>) {
    let Some((page, child)) = job.running.as_mut() else {
        return;
    };
    match child.try_wait() {
        Ok(None) => {}
        Ok(Some(exit)) => {
            let mut said = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut said);
            }
            if exit.success() {
                status.info = Some(crate::t!(
                    "handout-wrote",
                    path = page.display().to_string()
                ));
            } else {
                let why = said
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("it exited with an error")
                    .to_string();
                status.error(crate::t!("handout-failed", error = why));
            }
            job.running = None;
        }
        Err(e) => {
            status.error(crate::t!("handout-failed", error = e.to_string()));
            job.running = None;
        }
    }
}
