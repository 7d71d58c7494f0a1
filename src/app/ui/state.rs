//! What the panels keep between frames ([`UiState`]): the paths typed in,
//! the main view's rectangle, the wide view, presenter mode and reduced
//! motion. Scenes and the lesson player read it.

use bevy::prelude::*;
use bevy_egui::egui;
use std::path::PathBuf;

/// Where the app saves its checkpoint unless told otherwise.
pub fn default_checkpoint_path() -> PathBuf {
    PathBuf::from("tinygpt-app.safetensors")
}

/// What the panels keep between frames.
#[derive(Resource)]
pub struct UiState {
    pub corpus_path: String,
    pub checkpoint_path: String,
    /// The main view's rectangle in physical pixels (x, y, w, h).
    pub central: Option<(u32, u32, u32, u32)>,
    /// The wide view: the side panels hidden, the scene fills the window.
    pub wide: bool,
    /// Presenter mode: big type, high contrast, the panels hidden, a
    /// highlight round the pointer, Space for train/pause and the arrows
    /// for a lesson's steps.
    pub presenter: bool,
    /// Animations jump instead of moving (the FlashAttention replay).
    pub reduced_motion: bool,
    /// The numbers behind the view shown as a table (src/app/access/table.rs).
    pub numbers_table: bool,
    /// The keyboard's shortcuts listed (`?`, src/app/access/keys.rs).
    pub shortcuts: bool,
    /// The Fine-tune box's choices, and text pasted to fine-tune on.
    pub finetune: crate::model::lora::FinetuneOptions,
    pub finetune_text: String,
}

impl UiState {
    /// Presenter mode on or off; it hides or brings back the side panels
    /// with it.
    pub fn set_presenter(&mut self, on: bool) {
        self.presenter = on;
        self.wide = on;
    }

    /// The main view's rectangle in egui points, once laid out.
    pub fn central_rect(&self, ctx: &egui::Context) -> Option<egui::Rect> {
        let ppp = ctx.pixels_per_point();
        self.central.map(|c| {
            egui::Rect::from_min_size(
                egui::pos2(c.0 as f32 / ppp, c.1 as f32 / ppp),
                egui::vec2(c.2 as f32 / ppp, c.3 as f32 / ppp),
            )
        })
    }
}

impl Default for UiState {
    fn default() -> Self {
        Self {
            corpus_path: String::new(),
            checkpoint_path: default_checkpoint_path().display().to_string(),
            central: None,
            wide: false,
            presenter: false,
            reduced_motion: false,
            numbers_table: false,
            shortcuts: false,
            finetune: Default::default(),
            finetune_text: String::new(),
        }
    }
}
