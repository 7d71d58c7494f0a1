//! The app's language ([`crate::i18n`]): the switch in the top bar, `lang=`
//! in a link and `--lang` on the command line, and the fonts a language
//! needs.
//!
//! Chinese needs the CJK font (`assets/fonts/NotoSansCJKsc-subset.otf`, the
//! characters of the Chinese texts cut from Noto Sans CJK SC by
//! `scripts/make-cjk-font.sh`). A native build holds it; the browser fetches
//! it from beside the page the first time Chinese is chosen (the page caches
//! it). A language that waits for its font switches when the font arrives,
//! so no frame draws boxes for missing glyphs. The font goes behind the
//! label font in egui's families and, for the scenes' `Text2d` labels, into
//! Parley's fallbacks for Han script.

use crate::i18n::Language;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};
use std::sync::Arc;

/// The CJK font, natively (the browser fetches the same file).
#[cfg(not(target_arch = "wasm32"))]
const CJK_FONT: &[u8] = include_bytes!("../../assets/fonts/NotoSansCJKsc-subset.otf");

/// Its family name (the subset keeps the original's name table).
const CJK_FAMILY: &str = "Noto Sans CJK SC";

/// The language shown, and one asked for that waits for its font.
#[derive(Resource, Debug)]
pub struct AppLanguage {
    pub current: Language,
    /// Set by the switch (or at start); applied as soon as its font is here.
    pub wanted: Option<Language>,
    cjk: CjkFont,
}

impl AppLanguage {
    /// Starts in English and switches to `language` in the first frames.
    pub fn starting_in(language: Language) -> Self {
        AppLanguage {
            current: Language::English,
            wanted: (language != Language::English).then_some(language),
            cjk: CjkFont::Missing,
        }
    }

    /// Whether the CJK font is in both egui's and the scenes' fonts.
    pub fn cjk_font_ready(&self) -> bool {
        matches!(
            self.cjk,
            CjkFont::Installed {
                fallback_set: true,
                ..
            }
        )
    }
}

impl Default for AppLanguage {
    fn default() -> Self {
        AppLanguage::starting_in(Language::English)
    }
}

#[derive(Debug)]
enum CjkFont {
    Missing,
    /// The page is fetching it.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    Fetching,
    /// In egui's fonts and Bevy's assets; `fallback_set` once Parley knows
    /// it for Han script.
    Installed {
        /// Held so the font asset stays loaded.
        #[allow(dead_code)]
        handle: Handle<Font>,
        fallback_set: bool,
    },
}

pub struct LanguagePlugin;

impl Plugin for LanguagePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<AppLanguage>()
            // The switch itself runs in egui's pass (it sets egui's fonts),
            // before the panels are drawn: `ui::UiPlugin` orders it.
            .add_systems(
                Update,
                set_cjk_fallback.in_set(super::schedule::AppSystems::Input),
            );
    }
}

/// egui's fonts: egui's own four as its `default_fonts` feature sets them
/// up, three of them cut to what the app draws (`scripts/make-ui-fonts.sh`:
/// the whole four are 1.4 MB of wasm), then the label font (DejaVu Sans, for
/// × · ᵀ √ ␣ ↵), the two glyphs of 中文 (the language menu), then the CJK
/// font where one is given.
pub fn egui_fonts(cjk: Option<Arc<egui::FontData>>) -> egui::FontDefinitions {
    const UBUNTU: &[u8] = include_bytes!("../../assets/fonts/Ubuntu-Light.ttf");
    const HACK: &[u8] = include_bytes!("../../assets/fonts/Hack-subset.ttf");
    const EMOJI: &[u8] = include_bytes!("../../assets/fonts/NotoEmoji-Regular-subset.ttf");
    const ICONS: &[u8] = include_bytes!("../../assets/fonts/emoji-icon-font-subset.ttf");
    // 中文 alone, for the language menu in every language.
    const MENU: &[u8] = include_bytes!("../../assets/fonts/NotoSansCJKsc-menu.otf");
    let scaled = |bytes: &'static [u8], scale: f32| {
        Arc::new(egui::FontData::from_static(bytes).tweak(egui::FontTweak {
            scale,
            ..Default::default()
        }))
    };
    let mut fonts = egui::FontDefinitions::empty();
    for (name, data) in [
        ("Ubuntu-Light", scaled(UBUNTU, 1.0)),
        ("Hack", scaled(HACK, 1.0)),
        // egui's own sizes for its emoji fonts.
        ("NotoEmoji-Regular", scaled(EMOJI, 0.81)),
        ("emoji-icon-font", scaled(ICONS, 0.90)),
        ("dejavu", scaled(super::canvas::LABEL_FONT, 1.0)),
        ("menu", scaled(MENU, 1.0)),
    ] {
        fonts.font_data.insert(name.into(), data);
    }
    if let Some(cjk) = &cjk {
        fonts.font_data.insert("cjk".into(), cjk.clone());
    }
    let behind: &[&str] = &["NotoEmoji-Regular", "emoji-icon-font", "dejavu", "menu"];
    for (family, first) in [
        (egui::FontFamily::Proportional, &["Ubuntu-Light"][..]),
        (egui::FontFamily::Monospace, &["Hack", "Ubuntu-Light"][..]),
    ] {
        let mut list: Vec<String> = first.iter().chain(behind).map(|s| s.to_string()).collect();
        if cjk.is_some() {
            list.push("cjk".into());
        }
        fonts.families.insert(family, list);
    }
    fonts
}

/// The font's bytes if they are here: natively always; in the browser once
/// the page has fetched them (the first call asks it to).
fn cjk_bytes(state: &mut CjkFont, status: &mut super::training::AppStatus) -> Option<Vec<u8>> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (state, status);
        Some(CJK_FONT.to_vec())
    }
    #[cfg(target_arch = "wasm32")]
    {
        use super::browser::{fetch_font, font_error, take_font};
        const PATH: &str = "fonts/NotoSansCJKsc-subset.otf";
        if matches!(state, CjkFont::Missing) {
            fetch_font(PATH);
            *state = CjkFont::Fetching;
            return None;
        }
        let error = font_error();
        if !error.is_empty() {
            status.error(crate::t!("language-font-failed", error = error));
            *state = CjkFont::Missing;
            return None;
        }
        let bytes = take_font();
        (!bytes.is_empty()).then_some(bytes)
    }
}

/// Applies the language asked for: installs its font first where it needs
/// one, then sets it, translates the open lesson and rebuilds the scene
/// (its labels are laid out when it opens).
pub fn switch_language(
    mut language: ResMut<AppLanguage>,
    mut contexts: EguiContexts,
    mut fonts: ResMut<Assets<Font>>,
    mut status: ResMut<super::training::AppStatus>,
    mut lesson: ResMut<super::lesson::LessonPlayer>,
    scene: Res<State<super::scenes::Scene>>,
    mut next_scene: ResMut<NextState<super::scenes::Scene>>,
) -> Result {
    let Some(wanted) = language.wanted else {
        return Ok(());
    };
    if wanted.needs_cjk_font() && !matches!(language.cjk, CjkFont::Installed { .. }) {
        let Some(bytes) = cjk_bytes(&mut language.cjk, &mut status) else {
            if matches!(language.cjk, CjkFont::Missing) {
                // The fetch failed: stay in the language shown.
                language.wanted = None;
            }
            return Ok(());
        };
        let ctx = contexts.ctx_mut()?;
        ctx.set_fonts(egui_fonts(Some(Arc::new(egui::FontData::from_owned(
            bytes.clone(),
        )))));
        let handle = fonts.add(Font::from_bytes(bytes));
        language.cjk = CjkFont::Installed {
            handle,
            fallback_set: false,
        };
    }
    crate::i18n::set_language(wanted);
    language.current = wanted;
    language.wanted = None;
    if let Some((name, shown)) = &lesson.lesson
        && crate::lesson::BUILTIN_LESSONS
            .iter()
            .any(|(n, _)| n == name)
    {
        match crate::lesson::Lesson::load_in(name, wanted) {
            Ok(translated) => {
                let name = name.clone();
                debug_assert_eq!(translated.steps.len(), shown.steps.len());
                lesson.lesson = Some((name, translated));
            }
            Err(e) => status.error(e.to_string()),
        }
    }
    // The scene opens again so its labels are laid out anew, unless a
    // transition is already on its way (a lesson's step, the switcher).
    if matches!(*next_scene, NextState::Unchanged) {
        next_scene.set(*scene.get());
    }
    Ok(())
}

/// Once Bevy has put the CJK font into Parley's collection, makes it the
/// fallback for Han script, so the scenes' labels find Chinese glyphs
/// behind the label font.
fn set_cjk_fallback(
    mut language: ResMut<AppLanguage>,
    mut font_cx: ResMut<bevy::text::FontCx>,
    mut relayout: Query<&mut TextFont>,
) {
    let CjkFont::Installed {
        fallback_set: fallback_set @ false,
        ..
    } = &mut language.cjk
    else {
        return;
    };
    let Some(family) = font_cx.context.collection.family_id(CJK_FAMILY) else {
        return; // not registered yet: Bevy does it when the asset is added
    };
    for script in [*b"Hani", *b"Bopo", *b"Zyyy"] {
        let key =
            parley::fontique::FallbackKey::new(parley::fontique::Script::from_bytes(script), None);
        font_cx
            .context
            .collection
            .append_fallbacks(key, std::iter::once(family));
    }
    *fallback_set = true;
    // Labels laid out before the fallback existed are laid out again.
    for mut font in &mut relayout {
        font.set_changed();
    }
}

/// The language switch: the current language's own name, a menu of the
/// others.
pub fn language_menu(ui: &mut egui::Ui, language: &mut AppLanguage) {
    let shown = language.wanted.unwrap_or(language.current);
    ui.menu_button(shown.native_name(), |ui| {
        for l in Language::ALL {
            if ui.selectable_label(l == shown, l.native_name()).clicked() {
                language.wanted = (l != language.current).then_some(l);
                ui.close();
            }
        }
    })
    .response
    .on_hover_text(crate::t!("language-hover"));
}
