//! The program's words in the learner's language: English, Spanish or
//! Simplified Chinese.
//!
//! Every string the app and the handout show comes from one catalogue per
//! language, in Project Fluent's format (`locales/{en,es,zh}/tinygpt.ftl`,
//! compiled in), through [`tr`] or the [`t!`](crate::t) macro. A message
//! missing from a translation falls back to English; the unit tests below
//! keep every message in every language, with the same variables.
//!
//! Lessons are translated as data beside them: `scenes/<lang>/<name>.ron`
//! holds the words of `scenes/<name>.ron` (titles, narration, questions) and
//! nothing else, so a translation cannot send a step to another scene or
//! change an answer ([`crate::lesson::Lesson::translated`]).
//!
//! The language is one process-wide setting ([`set_language`]): the app's
//! language switch, `lang=` in a link and `--lang` set it, and every later
//! [`tr`] reads it.

pub use fluent_bundle::FluentValue;
use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// A language the program speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Language {
    #[default]
    English,
    Spanish,
    /// Simplified Chinese.
    Chinese,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::English, Language::Spanish, Language::Chinese];

    /// The code in links (`lang=zh`), `--lang` and `scenes/<code>/`.
    pub fn code(self) -> &'static str {
        match self {
            Language::English => "en",
            Language::Spanish => "es",
            Language::Chinese => "zh",
        }
    }

    /// The language's name in itself, for the language switch.
    pub fn native_name(self) -> &'static str {
        match self {
            Language::English => "English",
            Language::Spanish => "Español",
            Language::Chinese => "中文",
        }
    }

    /// Its catalogue (Fluent source).
    fn catalogue(self) -> &'static str {
        match self {
            Language::English => include_str!("../locales/en/tinygpt.ftl"),
            Language::Spanish => include_str!("../locales/es/tinygpt.ftl"),
            Language::Chinese => include_str!("../locales/zh/tinygpt.ftl"),
        }
    }

    /// Whether its text needs the CJK font (`assets/fonts/`, loaded only
    /// then).
    pub fn needs_cjk_font(self) -> bool {
        self == Language::Chinese
    }

    /// `en`, `es` or `zh` (also `english`, `español`, `zh-CN`, `中文`…);
    /// otherwise one line naming the choices.
    pub fn parse(s: &str) -> Result<Language, String> {
        let lower = s.trim().to_lowercase();
        let found = match lower.as_str() {
            "en" | "en-us" | "en-gb" | "english" => Some(Language::English),
            "es" | "es-es" | "es-mx" | "spanish" | "español" | "espanol" => {
                Some(Language::Spanish)
            }
            "zh" | "zh-cn" | "zh-hans" | "chinese" | "中文" => Some(Language::Chinese),
            _ => None,
        };
        found.ok_or_else(|| {
            format!("`{s}` is not a language this program speaks; use en (English), es (Español) or zh (中文)")
        })
    }

    fn index(self) -> u8 {
        self as u8
    }

    fn from_index(i: u8) -> Language {
        Language::ALL[i as usize % Language::ALL.len()]
    }
}

static CURRENT: AtomicU8 = AtomicU8::new(0);

/// Sets the language every later [`tr`] speaks.
pub fn set_language(language: Language) {
    CURRENT.store(language.index(), Ordering::Relaxed);
}

/// The language [`tr`] speaks now.
pub fn language() -> Language {
    Language::from_index(CURRENT.load(Ordering::Relaxed))
}

/// One parsed catalogue per language, in [`Language::ALL`]'s order.
static BUNDLES: LazyLock<Vec<FluentBundle<FluentResource>>> = LazyLock::new(|| {
    Language::ALL
        .iter()
        .map(|&language| {
            let resource = FluentResource::try_new(language.catalogue().to_string())
                .unwrap_or_else(|(resource, _)| resource); // tested to parse
            let id = language
                .code()
                .parse()
                .expect("the language codes are valid language tags");
            let mut bundle = FluentBundle::new_concurrent(vec![id]);
            // No Unicode isolation marks around arguments: the fonts draw
            // them as boxes, and no text here runs right to left.
            bundle.set_use_isolating(false);
            bundle
                .add_resource(resource)
                .expect("message ids are unique (tested)");
            bundle
        })
        .collect()
});

fn format_in(language: Language, key: &str, args: Option<&FluentArgs>) -> Option<String> {
    let bundle = &BUNDLES[language.index() as usize];
    let pattern = bundle.get_message(key)?.value()?;
    let mut errors = Vec::new();
    let text = bundle.format_pattern(pattern, args, &mut errors);
    Some(text.into_owned())
}

/// The message `key` in `language` with these arguments; English where the
/// translation lacks it, the key itself where English does too (neither
/// happens: tested).
pub fn tr_in(language: Language, key: &str, args: &[(&str, FluentValue)]) -> String {
    let fluent_args = (!args.is_empty()).then(|| {
        let mut a = FluentArgs::new();
        for (name, value) in args {
            a.set(*name, value.clone());
        }
        a
    });
    format_in(language, key, fluent_args.as_ref())
        .or_else(|| format_in(Language::English, key, fluent_args.as_ref()))
        .unwrap_or_else(|| key.to_string())
}

/// The message `key` in the current language ([`language`]).
pub fn tr(key: &str, args: &[(&str, FluentValue)]) -> String {
    tr_in(language(), key, args)
}

/// `t!("key")` or `t!("key", name = value, …)`: the message in the current
/// language. Values are anything a [`FluentValue`] comes from (strings,
/// numbers); format numbers first (`format!("{x:.3}")`) where the digits
/// matter.
#[macro_export]
macro_rules! t {
    ($key:expr) => {
        $crate::i18n::tr($key, &[])
    };
    ($key:expr, $($name:ident = $value:expr),+ $(,)?) => {
        $crate::i18n::tr($key, &[$((stringify!($name), $crate::i18n::FluentValue::from($value))),+])
    };
}

/// Every message id of a language's catalogue, in file order.
pub fn keys(language: Language) -> Vec<String> {
    let resource = FluentResource::try_new(language.catalogue().to_string())
        .unwrap_or_else(|(resource, _)| resource);
    resource
        .entries()
        .filter_map(|entry| match entry {
            fluent_syntax::ast::Entry::Message(m) => Some(m.id.name.to_string()),
            _ => None,
        })
        .collect()
}

/// Every message of a language's catalogue formatted with its variables
/// named as placeholders (`{$loss}` → `loss`): what the font must draw.
pub fn all_text(language: Language) -> Vec<String> {
    keys(language)
        .iter()
        .map(|k| tr_in(language, k, &[]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluent_syntax::ast;
    use std::collections::BTreeSet;

    fn parsed(language: Language) -> ast::Resource<&'static str> {
        fluent_syntax::parser::parse(language.catalogue()).unwrap_or_else(|(_, errors)| {
            panic!(
                "locales/{}/tinygpt.ftl does not parse: {errors:?}",
                language.code()
            )
        })
    }

    /// The variables a pattern names (`{ $loss }`), selectors included.
    fn variables(pattern: &ast::Pattern<&str>, out: &mut BTreeSet<String>) {
        fn expression(e: &ast::Expression<&str>, out: &mut BTreeSet<String>) {
            match e {
                ast::Expression::Select { selector, variants } => {
                    inline(selector, out);
                    for v in variants {
                        variables(&v.value, out);
                    }
                }
                ast::Expression::Inline(i) => inline(i, out),
            }
        }
        fn inline(i: &ast::InlineExpression<&str>, out: &mut BTreeSet<String>) {
            match i {
                ast::InlineExpression::VariableReference { id } => {
                    out.insert(id.name.to_string());
                }
                ast::InlineExpression::Placeable { expression: e } => expression(e, out),
                ast::InlineExpression::FunctionReference { arguments, .. } => {
                    for a in &arguments.positional {
                        inline(a, out);
                    }
                }
                _ => {}
            }
        }
        for element in &pattern.elements {
            if let ast::PatternElement::Placeable { expression: e } = element {
                expression(e, out);
            }
        }
    }

    fn messages(language: Language) -> Vec<(String, BTreeSet<String>)> {
        parsed(language)
            .body
            .iter()
            .filter_map(|entry| match entry {
                ast::Entry::Message(m) => {
                    let mut vars = BTreeSet::new();
                    if let Some(p) = &m.value {
                        variables(p, &mut vars);
                    }
                    Some((m.id.name.to_string(), vars))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_catalogue_parses_with_unique_ids() {
        for language in Language::ALL {
            let ids: Vec<String> = messages(language).into_iter().map(|(k, _)| k).collect();
            let unique: BTreeSet<&String> = ids.iter().collect();
            assert_eq!(
                unique.len(),
                ids.len(),
                "{}: an id is defined twice",
                language.code()
            );
            assert!(
                ids.len() > 100,
                "{}: only {} messages",
                language.code(),
                ids.len()
            );
        }
    }

    #[test]
    fn every_key_exists_in_every_language_with_the_same_variables() {
        let english = messages(Language::English);
        for language in [Language::Spanish, Language::Chinese] {
            let other: std::collections::BTreeMap<String, BTreeSet<String>> =
                messages(language).into_iter().collect();
            for (key, vars) in &english {
                let Some(theirs) = other.get(key) else {
                    panic!("locales/{}/tinygpt.ftl lacks `{key}`", language.code());
                };
                assert_eq!(
                    theirs,
                    vars,
                    "locales/{}/tinygpt.ftl: `{key}` names other variables than English",
                    language.code()
                );
            }
            let english_keys: BTreeSet<&String> = english.iter().map(|(k, _)| k).collect();
            for key in other.keys() {
                assert!(
                    english_keys.contains(key),
                    "locales/{}/tinygpt.ftl has `{key}`, which English lacks",
                    language.code()
                );
            }
        }
    }

    #[test]
    fn translations_are_translated() {
        // A catalogue copied from English and left so would pass the key
        // test; most of its messages must differ from English.
        let english = all_text(Language::English);
        for language in [Language::Spanish, Language::Chinese] {
            let theirs = all_text(language);
            let same = english.iter().zip(&theirs).filter(|(a, b)| a == b).count();
            assert!(
                same * 5 < english.len(),
                "{}: {same} of {} messages are the English text",
                language.code(),
                english.len()
            );
        }
    }

    #[test]
    fn messages_format_with_their_arguments_and_no_isolation_marks() {
        let text = tr_in(
            Language::Spanish,
            "lesson-step-of",
            &[
                ("title", "T".into()),
                ("step", 2.into()),
                ("steps", 9.into()),
            ],
        );
        assert!(
            text.contains('T') && text.contains('2') && text.contains('9'),
            "{text}"
        );
        assert!(
            !text.contains('\u{2068}') && !text.contains('\u{2069}'),
            "{text:?}"
        );
        assert_eq!(tr_in(Language::English, "no-such-key", &[]), "no-such-key");
    }

    #[test]
    fn languages_parse_by_code_and_name() {
        for language in Language::ALL {
            assert_eq!(Language::parse(language.code()), Ok(language));
            assert_eq!(Language::parse(language.native_name()), Ok(language));
        }
        let e = Language::parse("fr").unwrap_err();
        assert!(
            e.contains("en") && e.contains("es") && e.contains("zh"),
            "{e}"
        );
    }
}
