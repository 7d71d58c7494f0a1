//! A view as a link: the preset, seed, scene and heatmap view (and whether to
//! start training) written as a URL fragment, `#preset=small&seed=1337&scene=model&view=weights`.
//! The browser build reads it at start and keeps it up to date, so a link a
//! teacher sends opens the same run and view. Parsing is here, apart from
//! the page, so it is tested natively.

use super::scenes::Scene;
use super::training::{BackendChoice, HeatmapView};
use crate::model::config::{BUILTIN_PRESETS, is_builtin};

/// What a link asks for; a key it leaves out keeps the app's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Link {
    /// A built-in preset's id.
    pub preset: Option<String>,
    pub seed: Option<u64>,
    pub scene: Option<Scene>,
    pub view: Option<HeatmapView>,
    pub backend: Option<BackendChoice>,
    /// Start training at once.
    pub train: bool,
    /// Presets the Speedup scene measures as soon as it opens (`bench=tiny,small`).
    pub bench: Option<Vec<String>>,
    /// A built-in lesson and its step, 0-based (`lesson=attention&step=3`,
    /// the link counting from 1).
    pub lesson: Option<(String, usize)>,
    /// A gallery model to open (`model=reverse`: `tinygpt gallery`).
    pub model: Option<String>,
    /// A workshop link (`locked=1`): the lesson and nothing else
    /// ([`super::workshop`]).
    pub locked: bool,
    /// The language of the app and its lessons (`lang=es`, `lang=zh`).
    pub lang: Option<crate::i18n::Language>,
    /// A live class to join (`class=CODE`, with `teacher=TOKEN` for the
    /// teacher, or a student's `name=` and `seat=`): [`super::class`].
    pub class: Option<ClassLink>,
    /// The 3D walk-through's canvas (`theme=light`).
    pub theme: Option<crate::app::canvas::CanvasTheme>,
}

/// A live class in a link: its code, and the teacher's token or a
/// student's nickname and seat (so a reload rejoins in it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassLink {
    pub code: String,
    pub teacher: Option<String>,
    pub name: Option<String>,
    pub seat: Option<crate::class::protocol::Seat>,
}

impl ClassLink {
    /// Its part of a fragment.
    pub fn fragment(&self) -> String {
        use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
        let mut parts = vec![format!("class={}", self.code)];
        if let Some(t) = &self.teacher {
            parts.push(format!("teacher={t}"));
        }
        if let Some(n) = &self.name {
            parts.push(format!("name={}", utf8_percent_encode(n, NON_ALPHANUMERIC)));
        }
        if let Some(s) = &self.seat {
            parts.push(format!("seat={}.{}", s.id, s.key));
        }
        parts.join("&")
    }
}

/// A secret of a link (the teacher's token, a seat's key): hex, 16 to 64 digits.
fn is_secret(value: &str) -> bool {
    (16..=64).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The fragment's name for a heatmap view.
pub fn view_key(view: HeatmapView) -> &'static str {
    match view {
        HeatmapView::Weights => "weights",
        HeatmapView::Gradients => "gradients",
        HeatmapView::AdamM => "adam-m",
        HeatmapView::AdamV => "adam-v",
    }
}

impl Link {
    /// A link that asks for nothing (the page's plain address): the page
    /// then opens as the native app does, on a trained model predicting.
    pub fn is_bare(&self) -> bool {
        // The canvas's theme changes how it looks, not what opens.
        Link {
            theme: None,
            ..self.clone()
        } == Link::default()
    }

    /// Reads a fragment (with or without its `#`). What it cannot use is
    /// skipped, with one message per problem saying what would work; the
    /// rest still applies.
    pub fn parse(fragment: &str) -> (Link, Vec<String>) {
        let mut link = Link::default();
        let mut problems = Vec::new();
        let mut lesson_step = None;
        let mut class = ClassLink::default();
        let mut class_keys = false;
        let fragment = fragment.trim().trim_start_matches('#');
        for pair in fragment.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = value.trim();
            match key.trim() {
                "preset" => {
                    if is_builtin(value) {
                        link.preset = Some(value.to_string());
                    } else {
                        let ids: Vec<&str> = BUILTIN_PRESETS.iter().map(|(id, _)| *id).collect();
                        problems.push(format!(
                            "the link's preset `{value}` is not built in; use one of {}",
                            ids.join(", ")
                        ));
                    }
                }
                "seed" => match value.parse::<u64>() {
                    Ok(seed) => link.seed = Some(seed),
                    Err(_) => problems.push(format!(
                        "the link's seed `{value}` is not a whole number from 0 to {}",
                        u64::MAX
                    )),
                },
                "scene" => match Scene::from_key(value) {
                    Some(scene) => link.scene = Some(scene),
                    None => problems.push(format!(
                        "the link's scene `{value}` does not exist; the scenes are: {}",
                        Scene::keys()
                    )),
                },
                "theme" => match crate::app::canvas::CanvasTheme::from_key(value) {
                    Some(t) => link.theme = Some(t),
                    None => problems.push(format!(
                        "the link's theme `{value}` does not exist; use dark or light"
                    )),
                },
                "view" => match HeatmapView::ALL.into_iter().find(|v| view_key(*v) == value) {
                    Some(v) => link.view = Some(v),
                    None => problems.push(format!(
                        "the link's view `{value}` does not exist; use one of {}",
                        HeatmapView::ALL.map(view_key).join(", ")
                    )),
                },
                "backend" => match BackendChoice::from_key(value) {
                    Some(b) => link.backend = Some(b),
                    None => problems.push(format!(
                        "the link's backend `{value}` does not exist; use {}",
                        BackendChoice::ALL.map(BackendChoice::key).join(", ")
                    )),
                },
                "train" => match value {
                    "1" | "true" | "" => link.train = true,
                    "0" | "false" => link.train = false,
                    _ => problems.push(format!("the link's train `{value}` is not 1 or 0")),
                },
                "locked" => match value {
                    "1" | "true" | "" => link.locked = true,
                    "0" | "false" => link.locked = false,
                    _ => problems.push(format!("the link's locked `{value}` is not 1 or 0")),
                },
                "lang" => match crate::i18n::Language::parse(value) {
                    Ok(language) => link.lang = Some(language),
                    Err(e) => problems.push(format!("the link's lang: {e}")),
                },
                "bench" => {
                    let (known, unknown): (Vec<&str>, Vec<&str>) = value
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .partition(|p| is_builtin(p));
                    if unknown.is_empty() && !known.is_empty() {
                        link.bench = Some(known.iter().map(|p| p.to_string()).collect());
                    } else {
                        problems.push(format!(
                            "the link's bench `{value}` is not a list of built-in presets, e.g. bench=tiny,small"
                        ));
                    }
                }
                "lesson" => {
                    if crate::lesson::BUILTIN_LESSONS.iter().any(|(n, _)| *n == value) {
                        let step = link.lesson.as_ref().map_or(0, |l| l.1);
                        link.lesson = Some((value.to_string(), step));
                    } else {
                        let names: Vec<&str> =
                            crate::lesson::BUILTIN_LESSONS.iter().map(|(n, _)| *n).collect();
                        problems.push(format!(
                            "the link's lesson `{value}` is not built in; use one of {}",
                            names.join(", ")
                        ));
                    }
                }
                "model" => match crate::model::gallery::find(value) {
                    Ok(entry) => link.model = Some(entry.id.to_string()),
                    Err(e) => problems.push(format!("the link's model: {e}")),
                },
                "step" => match value.parse::<usize>() {
                    Ok(k) if k >= 1 => {
                        lesson_step = Some(k - 1);
                    }
                    _ => problems.push(format!(
                        "the link's step `{value}` is not a lesson step (1, 2, ...)"
                    )),
                },
                "class" => match crate::class::protocol::normalize_code(value) {
                    Ok(code) => {
                        class.code = code;
                        class_keys = true;
                    }
                    Err(e) => problems.push(format!("the link's class: {e}")),
                },
                "teacher" if is_secret(value) => class.teacher = Some(value.to_ascii_lowercase()),
                "teacher" => problems.push(
                    "the link's teacher token is cut short: copy the whole link `tinygpt class` printed".into(),
                ),
                "name" => {
                    let name = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
                    match crate::class::protocol::check_nickname(Some(&name)) {
                        Ok(n) => class.name = n,
                        Err(e) => problems.push(format!("the link's name: {e}")),
                    }
                }
                "seat" => match value.split_once('.').and_then(|(id, key)| {
                    let id = id.parse().ok()?;
                    is_secret(key).then(|| crate::class::protocol::Seat { id, key: key.to_ascii_lowercase() })
                }) {
                    Some(seat) => class.seat = Some(seat),
                    None => problems.push(format!("the link's seat `{value}` is not one the class gave; join again with the code")),
                },
                other => problems.push(format!(
                    "the link's key `{other}` is unknown; the keys are preset, seed, scene, view, backend, train, bench, lesson, step, model, locked, lang, class, teacher, name and seat"
                )),
            }
        }
        if let (Some(l), Some(k)) = (link.lesson.as_mut(), lesson_step) {
            l.1 = k;
        }
        if class_keys {
            link.class = Some(class);
        }
        (link, problems)
    }

    /// The fragment (without `#`) that [`Link::parse`] reads back as `self`.
    pub fn fragment(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.preset {
            parts.push(format!("preset={p}"));
        }
        if let Some(s) = self.seed {
            parts.push(format!("seed={s}"));
        }
        if let Some(s) = self.scene {
            parts.push(format!("scene={}", s.key()));
        }
        if let Some(v) = self.view {
            parts.push(format!("view={}", view_key(v)));
        }
        if let Some(b) = self.backend
            && b != BackendChoice::Auto
        {
            parts.push(format!("backend={}", b.key()));
        }
        if self.train {
            parts.push("train=1".to_string());
        }
        if let Some(b) = &self.bench {
            parts.push(format!("bench={}", b.join(",")));
        }
        if let Some((name, step)) = &self.lesson {
            parts.push(format!("lesson={name}&step={}", step + 1));
        }
        if let Some(model) = &self.model {
            parts.push(format!("model={model}"));
        }
        if self.locked {
            parts.push("locked=1".to_string());
        }
        if let Some(language) = self.lang
            && language != crate::i18n::Language::English
        {
            parts.push(format!("lang={}", language.code()));
        }
        if let Some(class) = &self.class {
            parts.push(class.fragment());
        }
        if let Some(theme) = self.theme
            && theme != crate::app::canvas::CanvasTheme::Dark
        {
            parts.push(format!("theme={}", theme.key()));
        }
        parts.join("&")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_reads_back_what_it_wrote() {
        for (view, scene) in HeatmapView::ALL
            .into_iter()
            .zip(Scene::ALL.into_iter().cycle())
        {
            for backend in BackendChoice::ALL {
                let link = Link {
                    preset: Some("tiny".into()),
                    seed: Some(u64::MAX),
                    scene: Some(scene),
                    view: Some(view),
                    backend: Some(backend).filter(|b| *b != BackendChoice::Auto),
                    train: view == HeatmapView::AdamM,
                    bench: (backend == BackendChoice::Cpu)
                        .then(|| vec!["tiny".into(), "small".into()]),
                    lesson: (view == HeatmapView::Weights).then(|| ("attention".into(), 4)),
                    model: (view == HeatmapView::AdamV).then(|| "reverse".into()),
                    locked: view == HeatmapView::Weights && backend == BackendChoice::Gpu,
                    lang: match backend {
                        BackendChoice::Cpu => Some(crate::i18n::Language::Spanish),
                        BackendChoice::Gpu => Some(crate::i18n::Language::Chinese),
                        _ => None,
                    },
                    class: match backend {
                        BackendChoice::Cpu => Some(ClassLink {
                            code: "K7Q2XM".into(),
                            teacher: None,
                            name: Some("Zoë & Li · Ñ".into()),
                            seat: Some(crate::class::protocol::Seat { id: 12, key: "ab".repeat(16) }),
                        }),
                        BackendChoice::Gpu => Some(ClassLink {
                            code: "ABCDEF".into(),
                            teacher: Some("0f".repeat(16)),
                            ..Default::default()
                        }),
                        _ => None,
                    },
                    theme: (backend == BackendChoice::Gpu).then_some(crate::app::canvas::CanvasTheme::Light),
                };
                let (back, problems) = Link::parse(&format!("#{}", link.fragment()));
                assert!(problems.is_empty(), "{problems:?}");
                assert_eq!(back, link);
            }
        }
        assert_eq!(Link::parse(""), (Link::default(), vec![]));
        // The theme alone still opens as the bare address does.
        assert!(Link::parse("theme=light").0.is_bare());
        assert!(!Link::parse("theme=blue").1.is_empty());
        // Every scene round-trips, attention included.
        for scene in Scene::ALL {
            let (back, problems) = Link::parse(&format!("scene={}", scene.key()));
            assert!(problems.is_empty());
            assert_eq!(back.scene, Some(scene));
        }
    }

    #[test]
    fn each_bad_key_is_named_and_the_rest_still_applies() {
        let (link, problems) = Link::parse(
            "preset=giant&seed=-3&scene=attentions&view=logits&backend=tpu&train=maybe&colour=red&bench=tiny,huge2&locked=yes&lang=fr&preset=small&seed=7",
        );
        assert_eq!(link.preset.as_deref(), Some("small"));
        assert_eq!(link.seed, Some(7));
        assert!(!link.train);
        assert!(!link.locked);
        assert_eq!(problems.len(), 10, "{problems:?}");
        for (problem, names) in problems.iter().zip([
            "giant",
            "-3",
            "attentions",
            "logits",
            "tpu",
            "maybe",
            "colour",
            "huge2",
            "yes",
            "fr",
        ]) {
            assert!(problem.contains(names), "{problem}");
        }
        assert!(problems[0].contains("tiny, small"), "{}", problems[0]);
    }
}
