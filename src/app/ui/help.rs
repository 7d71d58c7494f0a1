//! The help menu (the first item of the top bar's view menu): where the user guide (docs/guide/) tells about
//! the scene on screen, the lessons, the command line and the numbers. A
//! desktop build opens the page in the system's viewer (from the checkout
//! the app was built from, where it still is); the browser's page, which
//! has no files, names where the pages lie. (bevy_egui opens links only
//! with its `open_url` feature, whose `webbrowser` brings `url` and ICU
//! tables into a wasm with little room left: the desktop's opener is asked
//! here instead.)

use crate::app::scenes::Scene;
use bevy_egui::egui;

/// The guide's pages the menu names (below `docs/guide/`), each with the
/// key of its line in the menu.
pub const GUIDE_PAGES: [(&str, &str); 4] = [
    ("scenes.md", "help-scene"),
    ("lessons.md", "help-lessons"),
    ("cli.md", "help-cli"),
    ("numbers.md", "help-numbers"),
];

/// Where a guide page lies: the checkout this binary was built from, where
/// it is still there.
fn page_on_disk(page: &str) -> Option<std::path::PathBuf> {
    if cfg!(target_arch = "wasm32") {
        return None;
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/guide")
        .join(page);
    path.is_file().then_some(path)
}

/// Opens `path` with the desktop's viewer for it, without waiting (the
/// child is reaped on a thread of its own).
#[cfg(not(target_arch = "wasm32"))]
fn open_in_viewer(path: &std::path::Path) {
    use std::process::{Command, Stdio};
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else if cfg!(target_os = "windows") {
        "explorer"
    } else {
        "xdg-open"
    };
    let started = Command::new(opener)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match started {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => bevy::log::warn!("could not open {} with {opener}: {e}", path.display()),
    }
}

#[cfg(target_arch = "wasm32")]
fn open_in_viewer(_: &std::path::Path) {}

/// The menu's contents; true when its keyboard-shortcuts entry was pressed.
pub fn help_menu(ui: &mut egui::Ui, scene: Scene) -> bool {
    ui.set_max_width(560.0);
    for (page, key) in GUIDE_PAGES {
        let shown = format!("docs/guide/{page}");
        let text = crate::t!(key, path = shown.as_str(), scene = scene.title());
        match page_on_disk(page) {
            Some(path) => {
                if ui.link(text).on_hover_text(path.display().to_string()).clicked() {
                    open_in_viewer(&path);
                }
            }
            None => {
                ui.label(text);
            }
        }
    }
    ui.separator();
    let shortcuts = ui.button(crate::t!("keys-open")).clicked();
    ui.weak(crate::t!("help-where"));
    ui.weak(crate::t!("view-keys"));
    shortcuts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_the_menu_names_is_in_the_guide() {
        let guide = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide");
        for (page, _) in GUIDE_PAGES {
            assert!(guide.join(page).is_file(), "docs/guide/{page} is missing");
        }
        // The scene's line points at scenes.md: each scene has its section.
        let scenes = std::fs::read_to_string(guide.join("scenes.md")).unwrap();
        for scene in Scene::ALL {
            let english = crate::i18n::tr_in(
                crate::i18n::Language::English,
                &format!("scene-{}-title", scene.key()),
                &[],
            );
            let title = format!("**Scene \"{english}\"**");
            assert!(scenes.contains(&title), "docs/guide/scenes.md has no {title}");
        }
    }
}
