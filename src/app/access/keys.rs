//! The keyboard's shortcuts, listed in the app: `?` (or the Help menu's
//! entry) opens a window with every key the app answers to and what it
//! does, in the reading language; `?` or Escape closes it. egui draws it,
//! so a screen reader reads it as the panels' text.

use crate::app::ui::state::UiState;
use bevy::input::keyboard::Key;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};

/// Each shortcut: the keys, and the catalogue key of what they do.
pub const SHORTCUTS: [(&str, &str); 16] = [
    ("Tab, Shift+Tab", "keys-tab"),
    ("Space, Enter", "keys-press"),
    ("Escape", "keys-escape"),
    ("Enter, F6", "keys-into-picture"),
    ("← →", "keys-parts"),
    ("↑ ↓", "keys-groups"),
    ("Home, End", "keys-ends"),
    ("Enter", "keys-enter-part"),
    ("Page Up, Page Down", "keys-lesson"),
    ("1 – 9", "keys-answer"),
    ("F5", "keys-presenter"),
    ("F9", "keys-describe"),
    ("F10", "keys-table"),
    ("F11", "keys-data"),
    ("F12", "keys-png"),
    ("?", "keys-list"),
];

pub struct KeysPlugin;

impl Plugin for KeysPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(Update, toggle)
            .add_systems(EguiPrimaryContextPass, draw.after(crate::app::ui::draw_ui));
    }
}

/// `?` opens or closes the list, Escape closes it; not while a field takes
/// the keys (a prompt may have a question mark).
fn toggle(
    keys: Res<ButtonInput<Key>>,
    codes: Res<ButtonInput<KeyCode>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    mut ui_state: ResMut<UiState>,
) {
    if egui.is_some_and(|e| e.wants_keyboard_input()) {
        return;
    }
    if keys.just_pressed(Key::Character("?".into())) {
        ui_state.shortcuts = !ui_state.shortcuts;
    } else if ui_state.shortcuts && codes.just_pressed(KeyCode::Escape) {
        ui_state.shortcuts = false;
    }
}

fn draw(mut contexts: EguiContexts, mut ui_state: ResMut<UiState>) -> Result {
    if !ui_state.shortcuts {
        return Ok(());
    }
    let ctx = contexts.ctx_mut()?;
    let mut open = true;
    egui::Window::new(crate::t!("keys-title"))
        .id(egui::Id::new("keyboard-shortcuts"))
        .open(&mut open)
        .default_width(520.0)
        // In the middle, whole at 1280×720 (a scroll bar below that).
        .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
        .collapsible(false)
        .vscroll(true)
        .show(ctx, |ui| {
            egui::Grid::new("keyboard-shortcuts-grid").striped(true).num_columns(2).show(ui, |ui| {
                for (keys, what) in SHORTCUTS {
                    ui.strong(keys);
                    ui.label(crate::i18n::tr(what, &[]));
                    ui.end_row();
                }
            });
            ui.weak(crate::t!("view-keys"));
        });
    if !open {
        ui_state.shortcuts = false;
    }
    Ok(())
}
