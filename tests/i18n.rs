//! The glyphs: every character the app's code, its catalogues and its
//! lessons use, in every language, is in a font the app draws with, so no
//! learner sees a box. The fonts are read by their character maps (skrifa,
//! the version Bevy's text uses): egui's four and DejaVu Sans (the label
//! font) for every language, cut to what the app draws
//! (scripts/make-ui-fonts.sh), and the CJK subset
//! (`assets/fonts/NotoSansCJKsc-subset.otf`, loaded only for Chinese).

use skrifa::{FontRef, MetadataProvider};
use std::collections::BTreeSet;
use tinygpt::i18n::{Language, all_text};
use tinygpt::lesson::{BUILTIN_LESSONS, Lesson};

fn covered(font: &[u8]) -> impl Fn(char) -> bool + '_ {
    let font = FontRef::new(font).expect("the font parses");
    let charmap = font.charmap();
    move |c| charmap.map(c).is_some()
}

/// Every character of a language's catalogue and of its lessons' words.
fn characters(language: Language) -> BTreeSet<char> {
    let mut text = all_text(language).join("\n");
    for (name, _) in BUILTIN_LESSONS {
        let lesson = Lesson::load_in(name, language).unwrap();
        text.push_str(&lesson.title);
        text.push_str(&lesson.summary);
        for step in &lesson.steps {
            text.push_str(&step.title);
            text.push_str(&step.narration);
            if let Some(q) = &step.question {
                text.push_str(&q.ask);
                text.push_str(&q.why);
                for c in &q.choices {
                    text.push_str(c);
                }
            }
        }
    }
    text.chars().filter(|c| !c.is_control()).collect()
}

/// The fonts every language draws with: egui's own four (three of them
/// cut by scripts/make-ui-fonts.sh) and the label font, DejaVu Sans (cut
/// too).
const UI_FONTS: [&str; 6] = [
    "assets/fonts/Ubuntu-Light.ttf",
    "assets/fonts/Hack-subset.ttf",
    "assets/fonts/NotoEmoji-Regular-subset.ttf",
    "assets/fonts/emoji-icon-font-subset.ttf",
    "assets/fonts/DejaVuSans-subset.ttf",
    // 中文, the language menu's.
    "assets/fonts/NotoSansCJKsc-menu.otf",
];

/// Every non-ASCII character of the app's own code (its icons and signs:
/// 📷 ⏸ ◀ √ …), the files scripts/make-ui-fonts.sh reads.
fn app_code_characters() -> BTreeSet<char> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<char>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(text.chars().filter(|c| !c.is_ascii() && !c.is_control()));
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(std::path::Path::new("src/app"), &mut out);
    out
}

#[test]
fn every_character_the_app_draws_is_in_a_font_it_loads() {
    let fonts: Vec<Vec<u8>> = UI_FONTS.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let cjk = std::fs::read("assets/fonts/NotoSansCJKsc-subset.otf").unwrap();
    let ui: Vec<_> = fonts.iter().map(|f| covered(f)).collect();
    let in_cjk = covered(&cjk);
    let in_ui = |c: char| ui.iter().any(|has| has(c));
    let missing: Vec<char> = app_code_characters().into_iter().filter(|&c| !in_ui(c)).collect();
    assert!(missing.is_empty(), "the app's code draws characters no UI font has: {missing:?} (run scripts/make-ui-fonts.sh)");
    for language in Language::ALL {
        let missing: Vec<char> = characters(language)
            .into_iter()
            .filter(|&c| !in_ui(c) && !(language.needs_cjk_font() && in_cjk(c)))
            .collect();
        assert!(
            missing.is_empty(),
            "{:?} uses characters no font of the app has: {missing:?} (run {})",
            language,
            if language.needs_cjk_font() {
                "scripts/make-cjk-font.sh"
            } else {
                "scripts/make-ui-fonts.sh"
            }
        );
    }
}

#[test]
fn the_chinese_texts_are_chinese_and_the_cjk_font_is_small() {
    let han = characters(Language::Chinese)
        .into_iter()
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .count();
    assert!(han > 500, "only {han} distinct Han characters");
    let size = std::fs::metadata("assets/fonts/NotoSansCJKsc-subset.otf")
        .unwrap()
        .len();
    // The whole Noto Sans CJK SC is 16 MB; the subset is what a class's
    // browsers download when Chinese is chosen.
    assert!(size < 1_000_000, "the CJK subset is {size} bytes");
}
