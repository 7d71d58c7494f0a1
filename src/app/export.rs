//! Pictures and data out of the app: natively a file in the working
//! directory, in the browser a download.
//! - [`ExportPng`]: the current view, or one part of it (a chart), as a PNG.
//!   F12 or the top bar's 📷 takes the whole view; a scene's own button
//!   sends the rectangle of its chart.
//! - [`ExportFile`]: bytes a view made itself: the data behind it as JSON
//!   (the top bar's 💾, F11), a chart as SVG or CSV ([`crate::chart`]).
//!
//! The frame only asks; cropping, encoding and writing run on the IO pool,
//! and the result comes back as a line in the status bar.

use super::canvas::HeadlessTarget;
use super::training::AppStatus;
use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, ScreenshotCaptured};
use bevy::tasks::IoTaskPool;
use std::sync::{Arc, Mutex};

/// Save the view (or the part `rect` of it, in physical pixels) as a PNG
/// named after `name` (`tinygpt-{name}.png`, numbered if taken).
#[derive(Message, Clone, Debug)]
pub struct ExportPng {
    pub name: String,
    pub rect: Option<[f32; 4]>,
}

/// Save these bytes as `tinygpt-{stem}.{ext}` (numbered if taken).
#[derive(Message, Clone, Debug)]
pub struct ExportFile {
    pub stem: String,
    pub ext: &'static str,
    pub bytes: Vec<u8>,
}

impl ExportFile {
    pub fn new(stem: impl Into<String>, ext: &'static str, bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            stem: stem.into(),
            ext,
            bytes: bytes.into(),
        }
    }
}

/// What the exports finished with: (Ok(path) | Err(why)), read each frame.
#[derive(Resource, Default, Clone)]
pub struct ExportResults {
    inbox: Arc<Mutex<Vec<Result<String, String>>>>,
    /// Every export that finished, in order (headless runs print them).
    pub done: Vec<Result<String, String>>,
    /// Exports asked for and not yet finished.
    pub pending: usize,
}

pub struct ExportPlugin;

impl Plugin for ExportPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<ExportPng>()
            .add_message::<ExportFile>()
            .init_resource::<ExportResults>()
            .add_systems(Update, (view_key, capture, write_files, report).chain());
    }
}

/// F12: the whole view.
fn view_key(
    keys: Res<ButtonInput<KeyCode>>,
    scene: Res<State<super::scenes::Scene>>,
    mut out: MessageWriter<ExportPng>,
) {
    if keys.just_pressed(KeyCode::F12) {
        out.write(ExportPng {
            name: scene.get().key().to_string(),
            rect: None,
        });
    }
}

fn capture(
    mut commands: Commands,
    mut asked: MessageReader<ExportPng>,
    target: Option<Res<HeadlessTarget>>,
    mut results: ResMut<ExportResults>,
) {
    for req in asked.read() {
        let screenshot = match &target {
            Some(t) => Screenshot::image(t.0.clone()),
            None => Screenshot::primary_window(),
        };
        results.pending += 1;
        let (inbox, req) = (results.inbox.clone(), req.clone());
        commands
            .spawn(screenshot)
            .observe(move |captured: On<ScreenshotCaptured>| {
                let (image, inbox, req) = (captured.image.clone(), inbox.clone(), req.clone());
                IoTaskPool::get()
                    .spawn(async move {
                        let result =
                            encode(image, req.rect).and_then(|png| deliver(&req.name, "png", png));
                        inbox.lock().unwrap().push(result);
                    })
                    .detach();
            });
    }
}

fn write_files(mut asked: MessageReader<ExportFile>, mut results: ResMut<ExportResults>) {
    for req in asked.read() {
        results.pending += 1;
        let (inbox, req) = (results.inbox.clone(), req.clone());
        IoTaskPool::get()
            .spawn(async move {
                let result = deliver(&req.stem, req.ext, req.bytes);
                inbox.lock().unwrap().push(result);
            })
            .detach();
    }
}

/// The picture, cropped to `rect` (clamped to the image), as PNG bytes.
fn encode(image: Image, rect: Option<[f32; 4]>) -> Result<Vec<u8>, String> {
    let img = image
        .try_into_dynamic()
        .map_err(|e| format!("cannot read the screenshot: {e}"))?;
    let img = match rect {
        Some([x0, y0, x1, y1]) => {
            let (w, h) = (img.width() as f32, img.height() as f32);
            let x0 = x0.clamp(0.0, w).floor() as u32;
            let y0 = y0.clamp(0.0, h).floor() as u32;
            let x1 = x1.clamp(0.0, w).ceil() as u32;
            let y1 = y1.clamp(0.0, h).ceil() as u32;
            if x1 <= x0 || y1 <= y0 {
                return Err("the part to export is not on screen".into());
            }
            img.crop_imm(x0, y0, x1 - x0, y1 - y0)
        }
        None => img,
    };
    let mut png = Vec::new();
    image::DynamicImage::ImageRgba8(img.to_rgba8())
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| format!("cannot encode the PNG: {e}"))?;
    Ok(png)
}

/// Natively: `tinygpt-{name}.{ext}` in the working directory (numbered when
/// taken), written through a temporary file. In the browser: a download.
fn deliver(name: &str, ext: &str, bytes: Vec<u8>) -> Result<String, String> {
    let stem = format!("tinygpt-{name}");
    #[cfg(target_arch = "wasm32")]
    {
        let file = format!("{stem}.{ext}");
        super::browser::download(&file, &bytes);
        Ok(format!("{file} (download)"))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let dir = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
        let path = (0..1000)
            .map(|i| {
                dir.join(if i == 0 {
                    format!("{stem}.{ext}")
                } else {
                    format!("{stem}-{i}.{ext}")
                })
            })
            .find(|p| !p.exists())
            .ok_or_else(|| {
                format!(
                    "{stem}.{ext} .. {stem}-999.{ext} all exist in {}",
                    dir.display()
                )
            })?;
        // Through a temporary file made exclusively under an unpredictable
        // name (never through a symlink or into a pipe at NAME.tmp).
        crate::output::write_atomic(&path, &bytes).map_err(|e| {
            format!(
                "cannot write {}: {e} (start the app in a folder you can write to)",
                path.display()
            )
        })?;
        Ok(path.display().to_string())
    }
}

fn report(mut results: ResMut<ExportResults>, mut status: ResMut<AppStatus>) {
    let finished: Vec<_> = std::mem::take(&mut *results.inbox.lock().unwrap());
    for r in finished {
        results.pending = results.pending.saturating_sub(1);
        match &r {
            Ok(path) => status.info = Some(crate::t!("saved-path", path = path.as_str())),
            Err(e) => status.error(e.clone()),
        }
        results.done.push(r);
    }
}
