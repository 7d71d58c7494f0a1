//! The translations' glyphs: every character the Spanish and Chinese
//! catalogues and lessons use is in a font the app draws with, so no
//! learner sees a box. The fonts are read by their character maps (skrifa,
//! the version Bevy's text uses): DejaVu Sans (the label font, behind
//! egui's own) for every language, and the CJK subset
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

#[test]
fn every_character_of_every_translation_is_in_a_font_the_app_loads() {
    let dejavu = std::fs::read("assets/fonts/DejaVuSans.ttf").unwrap();
    let cjk = std::fs::read("assets/fonts/NotoSansCJKsc-subset.otf").unwrap();
    let in_dejavu = covered(&dejavu);
    let in_cjk = covered(&cjk);
    // What English already draws (egui's own fonts have its emoji icons)
    // is not the translations' to check.
    let english = characters(Language::English);
    for language in [Language::Spanish, Language::Chinese] {
        let missing: Vec<char> = characters(language)
            .into_iter()
            .filter(|c| !english.contains(c))
            .filter(|&c| !in_dejavu(c) && !(language.needs_cjk_font() && in_cjk(c)))
            .collect();
        assert!(
            missing.is_empty(),
            "{:?} uses characters no font of the app has: {missing:?}{}",
            language,
            if language.needs_cjk_font() {
                " (run scripts/make-cjk-font.sh)"
            } else {
                ""
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
