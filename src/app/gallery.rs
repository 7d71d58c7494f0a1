//! Opening the gallery's models ([`crate::model::gallery`]). A native
//! build holds every one; in the browser only the TinyShakespeare models are
//! in the wasm, and the page fetches another's weights (and text) from the
//! files beside it when it is chosen, with a progress bar, keeping them in
//! the browser's cache for the next visit ([`GalleryFetch`]).

use super::training::GalleryFetch;
#[cfg(target_arch = "wasm32")]
use super::training::RunCommand;
use bevy::prelude::*;

pub struct GalleryPlugin;

impl Plugin for GalleryPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(
            Update,
            sample_prompt.in_set(super::schedule::AppSystems::Input),
        );
        #[cfg(target_arch = "wasm32")]
        app.add_systems(Update, fetched.in_set(super::schedule::AppSystems::Input));
    }
}

/// A run opened from the gallery gets that model's prompt in the sample
/// box (a word to reverse, a date to go on from).
fn sample_prompt(
    mut created: MessageReader<super::training::RunCreated>,
    mut pending: Local<Option<u64>>,
    run: Option<Res<super::training::Run>>,
    mut sample: ResMut<super::sample::SampleState>,
) {
    if let Some(new) = created.read().last() {
        *pending = Some(new.generation);
    }
    // Once the new run is in place (its resource is inserted after the
    // message is sent).
    let Some(run) = run.filter(|r| Some(r.generation) == *pending) else {
        return;
    };
    *pending = None;
    if let Some(id) = &run.gallery
        && let Ok(entry) = crate::model::gallery::find(id)
    {
        sample.prompt = entry.sample_prompt();
    }
}

/// What the page says of the fetch: progress, then the files or an error.
#[cfg(target_arch = "wasm32")]
fn fetched(
    mut fetch: ResMut<GalleryFetch>,
    mut out: MessageWriter<RunCommand>,
    mut status: ResMut<super::training::AppStatus>,
) {
    use super::browser::{gallery_progress, take_gallery_file};
    let Some(id) = fetch.id.clone() else { return };
    let report: serde_json::Value =
        serde_json::from_str(&gallery_progress()).unwrap_or(serde_json::Value::Null);
    if report["id"].as_str() != Some(id.as_str()) {
        return;
    }
    if let Some(error) = report["error"].as_str() {
        status.error(crate::t!(
            "gallery-fetch-failed",
            id = id.as_str(),
            error = error
        ));
        fetch.id = None;
        return;
    }
    fetch.progress = (
        report["got"].as_u64().unwrap_or(0),
        report["total"].as_u64().unwrap_or(0),
    );
    if report["done"].as_bool() == Some(true) {
        let checkpoint = take_gallery_file("checkpoint");
        let text = take_gallery_file("text");
        fetch.id = None;
        out.write(RunCommand::OpenGalleryFetched {
            id,
            checkpoint,
            text: (!text.is_empty()).then_some(text),
        });
    }
}

/// A line for the Run panel while a fetch is under way.
pub fn progress_bar(ui: &mut bevy_egui::egui::Ui, fetch: &GalleryFetch) {
    let Some(id) = &fetch.id else { return };
    let (got, total) = fetch.progress;
    let bar = bevy_egui::egui::ProgressBar::new(if total > 0 {
        got as f32 / total as f32
    } else {
        0.0
    })
    .text(crate::t!(
        "gallery-fetching",
        id = id.as_str(),
        got = format!("{:.1}", got as f64 / 1e6),
        total = if total > 0 {
            format!("{:.1}", total as f64 / 1e6)
        } else {
            "?".into()
        },
    ));
    ui.add(bar);
}
