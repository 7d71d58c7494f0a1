//! Lessons: guided tours over the live model, as data (`scenes/*.ron`).
//!
//! A lesson is an ordered list of steps; each names a scene, a focus (a
//! layer, op, tensor, head or position of the program), a few sentences of
//! narration, an optional action (train some steps, set the prompt, step to
//! an op, play the FlashAttention replay) and an optional predict-then-
//! reveal question, and the "break it" lab run it needs, if any
//! ([`LabRun`]). Lessons name things by the program's own names
//! (`h.0.attn.c_attn`, `transformer.wte.weight`), and [`Lesson::check`]
//! resolves every name against the program of the lesson's preset, so a
//! lesson that names something that does not exist is refused with the
//! file, the step and the field. The app's lesson player (`app::lesson`)
//! drives the scenes from it.

use crate::model::config::{Config, is_builtin};
use crate::program::Program;
use serde::Deserialize;
use std::path::Path;

/// The scene keys a lesson may name (the app's `Scene::key`s; a test in
/// the app checks the two lists agree).
pub const SCENES: [&str; 10] = [
    "flow",
    "path",
    "probe",
    "model",
    "attention",
    "timelapse",
    "step",
    "flash",
    "correctness",
    "speedup",
];

/// The lessons shipped in `scenes/`, in teaching order: (name, RON source).
pub const BUILTIN_LESSONS: &[(&str, &str)] = &[
    ("next-byte", include_str!("../scenes/next-byte.ron")),
    ("one-byte", include_str!("../scenes/one-byte.ron")),
    ("tokens", include_str!("../scenes/tokens.ron")),
    (
        "watch-it-learn",
        include_str!("../scenes/watch-it-learn.ron"),
    ),
    ("attention", include_str!("../scenes/attention.ron")),
    ("reversal", include_str!("../scenes/reversal.ron")),
    ("induction", include_str!("../scenes/induction.ron")),
    ("backprop", include_str!("../scenes/backprop.ron")),
    ("optimizer", include_str!("../scenes/optimizer.ron")),
    ("which-heads", include_str!("../scenes/which-heads.ron")),
    ("why-flash", include_str!("../scenes/why-flash.ron")),
    ("why-gpus-win", include_str!("../scenes/why-gpus-win.ron")),
    ("break-it", include_str!("../scenes/break-it.ron")),
];

/// The built-in lessons' words in other languages: (language code, lesson
/// name, RON source of a [`LessonText`]). A translation holds the words
/// alone; the steps' scenes, focus, actions and answers stay the English
/// file's, so they are written once and a translation cannot change them.
pub const TRANSLATED_LESSONS: &[(&str, &str, &str)] = &[
    ("es", "next-byte", include_str!("../scenes/es/next-byte.ron")),
    ("es", "one-byte", include_str!("../scenes/es/one-byte.ron")),
    ("es", "tokens", include_str!("../scenes/es/tokens.ron")),
    ("es", "watch-it-learn", include_str!("../scenes/es/watch-it-learn.ron")),
    ("es", "attention", include_str!("../scenes/es/attention.ron")),
    ("es", "reversal", include_str!("../scenes/es/reversal.ron")),
    ("es", "induction", include_str!("../scenes/es/induction.ron")),
    ("es", "backprop", include_str!("../scenes/es/backprop.ron")),
    ("es", "optimizer", include_str!("../scenes/es/optimizer.ron")),
    ("es", "which-heads", include_str!("../scenes/es/which-heads.ron")),
    ("es", "why-flash", include_str!("../scenes/es/why-flash.ron")),
    ("es", "why-gpus-win", include_str!("../scenes/es/why-gpus-win.ron")),
    ("es", "break-it", include_str!("../scenes/es/break-it.ron")),
    ("zh", "next-byte", include_str!("../scenes/zh/next-byte.ron")),
    ("zh", "one-byte", include_str!("../scenes/zh/one-byte.ron")),
    ("zh", "tokens", include_str!("../scenes/zh/tokens.ron")),
    ("zh", "watch-it-learn", include_str!("../scenes/zh/watch-it-learn.ron")),
    ("zh", "attention", include_str!("../scenes/zh/attention.ron")),
    ("zh", "reversal", include_str!("../scenes/zh/reversal.ron")),
    ("zh", "induction", include_str!("../scenes/zh/induction.ron")),
    ("zh", "backprop", include_str!("../scenes/zh/backprop.ron")),
    ("zh", "optimizer", include_str!("../scenes/zh/optimizer.ron")),
    ("zh", "which-heads", include_str!("../scenes/zh/which-heads.ron")),
    ("zh", "why-flash", include_str!("../scenes/zh/why-flash.ron")),
    ("zh", "why-gpus-win", include_str!("../scenes/zh/why-gpus-win.ron")),
    ("zh", "break-it", include_str!("../scenes/zh/break-it.ron")),
];

/// The words of a lesson in another language (`scenes/<lang>/<name>.ron`),
/// step for step the English file's.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LessonText {
    pub title: String,
    pub summary: String,
    pub steps: Vec<StepText>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StepText {
    pub title: String,
    pub narration: String,
    #[serde(default)]
    pub question: Option<QuestionText>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuestionText {
    pub ask: String,
    pub choices: Vec<String>,
    pub why: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lesson {
    pub title: String,
    /// One or two sentences: what the learner will see.
    pub summary: String,
    /// The preset the lesson's names are checked against (and the run it
    /// starts, if the app's run has another): a built-in id.
    #[serde(default = "default_preset")]
    pub preset: String,
    /// A gallery model (`tiny`, `small`, `reverse`, …: `tinygpt gallery`)
    /// the lesson opens on, with the text it learned, of the lesson's
    /// preset; none keeps the app's run.
    #[serde(default)]
    pub checkpoint: Option<String>,
    pub steps: Vec<LessonStep>,
}

fn default_preset() -> String {
    crate::model::config::DEFAULT_PRESET.to_string()
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LessonStep {
    /// A scene key ([`SCENES`]).
    pub scene: String,
    #[serde(default)]
    pub focus: Focus,
    /// A short heading for the narration box.
    pub title: String,
    /// What to say: a few sentences for a learner who knows a little Python.
    pub narration: String,
    #[serde(default)]
    pub action: Option<Action>,
    #[serde(default)]
    pub question: Option<Question>,
    /// The run this step needs (a "break it" lab), if it needs one.
    #[serde(default)]
    pub lab: Option<LabRun>,
    /// Show the side panels (the loss chart, the samples) for this step;
    /// by default a lesson hides them so the scene fills the room's screen.
    #[serde(default)]
    pub panels: bool,
}

/// What the step points at, by the program's names.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub enum Focus {
    #[default]
    Nothing,
    /// A layer: `embeddings`, `h.0` … `h.{L-1}`, `ln_f`, `head`.
    Layer(String),
    /// An op by its label (`h.0.attn.c_attn`), in the step's forward pass
    /// (or its backward with `backward: true`).
    Op { label: String, backward: bool },
    /// A tensor by name (`transformer.wte.weight`, `grad.…`).
    Tensor(String),
    /// One attention head (0-based layer and head).
    Head { layer: usize, head: usize },
    /// A position of the prompt (0-based).
    Position(usize),
    /// A stage of the step that is not an op: `ZeroGrads`, `ClipGradNorm`,
    /// `AdamW`.
    Stage(String),
    /// A training step of the run's time-lapse: the Time-lapse scene shows
    /// the frame recorded at it (or the last before it).
    Step(u64),
}

/// The stages [`Focus::Stage`] may name.
pub const STAGES: [&str; 3] = ["ZeroGrads", "ClipGradNorm", "AdamW"];

/// The tools [`Action::Tool`] may name.
pub const TOOLS: [&str; 4] = ["lens", "knockout", "patch", "why"];

/// The heatmap views [`Action::HeatmapView`] may name.
pub const HEATMAP_VIEWS: [&str; 4] = ["weights", "gradients", "adam-m", "adam-v"];

/// Something the step does when it opens.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub enum Action {
    /// Train this many steps on the current run (then pause).
    Train(u32),
    /// Put this text in the prompt of the scenes that take one.
    Prompt(String),
    /// Play the FlashAttention replay from its first visit.
    PlayFlash,
    /// Play the flow's forward pass from the prompt up (the flow scene).
    PlayForward,
    /// Play the flow's backward pass from the loss down (the flow scene).
    PlayBackward,
    /// Show one tool of the Take-it-apart scene: `lens`, `knockout`,
    /// `patch`, `why`.
    Tool(String),
    /// Start the Speedup scene's bench of these presets.
    Bench(Vec<String>),
    /// Time one step of this preset per kernel (the roofline).
    Kernels(String),
    /// Show this in the Model scene's heatmaps: `weights`, `gradients`,
    /// `adam-m`, `adam-v`.
    HeatmapView(String),
}

/// The run a step needs, for the "break it" labs: the lesson's preset with
/// these switches (both on unless named) and the preset's learning rate
/// times `lr_scale` (1 unless named), trained to at least step `train`.
/// If the app's run is not that, a fresh one starts (the loss chart keeps
/// the run before it, dashed); if it is, it trains on up to `train`. So a
/// lesson opened at any step shows what its narration says.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LabRun {
    #[serde(default = "on")]
    pub causal_mask: bool,
    #[serde(default = "on")]
    pub position_embeddings: bool,
    #[serde(default = "one")]
    pub lr_scale: f32,
    pub train: u32,
}

impl LabRun {
    pub fn switches(&self) -> crate::model::config::Lab {
        crate::model::config::Lab {
            causal_mask: self.causal_mask,
            position_embeddings: self.position_embeddings,
        }
    }
}

fn on() -> bool {
    true
}

fn one() -> f32 {
    1.0
}

/// Predict, then reveal.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub ask: String,
    pub choices: Vec<String>,
    /// Index into `choices`.
    pub answer: usize,
    pub why: String,
}

/// A lesson refused: where and why.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{file}{}: {message}", match (.step, .field) {
    (Some(s), Some(f)) => format!(", step {} ({f})", s + 1),
    (Some(s), None) => format!(", step {}", s + 1),
    (None, Some(f)) => format!(" ({f})"),
    (None, None) => String::new(),
})]
pub struct LessonError {
    /// The file (or built-in lesson) it came from.
    pub file: String,
    /// 0-based step, when one step is at fault.
    pub step: Option<usize>,
    pub field: Option<&'static str>,
    pub message: String,
}

impl Lesson {
    /// Parses and checks a lesson; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Lesson, LessonError> {
        let lesson: Lesson = ron::from_str(text).map_err(|e| LessonError {
            file: file.to_string(),
            step: None,
            field: None,
            message: format!("{e} (see scenes/attention.ron for a valid lesson)"),
        })?;
        lesson.check(file)?;
        Ok(lesson)
    }

    /// A built-in lesson by name, in the current language
    /// ([`crate::i18n::language`]), or a `.ron` file by path (natively), as
    /// written.
    pub fn load(name_or_path: &str) -> Result<Lesson, LessonError> {
        Lesson::load_in(name_or_path, crate::i18n::language())
    }

    /// [`Lesson::load`] in `language`.
    pub fn load_in(
        name_or_path: &str,
        language: crate::i18n::Language,
    ) -> Result<Lesson, LessonError> {
        if let Some((name, text)) = BUILTIN_LESSONS.iter().find(|(n, _)| *n == name_or_path) {
            let english = Lesson::parse(&format!("scenes/{name}.ron"), text)?;
            return english.translated(name, language);
        }
        if !name_or_path.ends_with(".ron") {
            let names: Vec<&str> = BUILTIN_LESSONS.iter().map(|(n, _)| *n).collect();
            return Err(LessonError {
                file: name_or_path.to_string(),
                step: None,
                field: None,
                message: format!(
                    "no such lesson; the lessons are {}, or give a .ron file",
                    names.join(", ")
                ),
            });
        }
        let text = crate::data::read_text(Path::new(name_or_path)).map_err(|e| LessonError {
            file: name_or_path.to_string(),
            step: None,
            field: None,
            message: format!("cannot read it: {e}"),
        })?;
        Lesson::parse(name_or_path, &text)
    }

    /// This built-in lesson (`name`) with the words of its `language`
    /// translation; refused where the translation does not parse or its
    /// steps, questions or choices do not match the lesson's one for one.
    pub fn translated(
        &self,
        name: &str,
        language: crate::i18n::Language,
    ) -> Result<Lesson, LessonError> {
        if language == crate::i18n::Language::English {
            return Ok(self.clone());
        }
        let code = language.code();
        let file = format!("scenes/{code}/{name}.ron");
        let err = |step: Option<usize>, field: Option<&'static str>, message: String| LessonError {
            file: file.clone(),
            step,
            field,
            message,
        };
        let Some((_, _, source)) = TRANSLATED_LESSONS
            .iter()
            .find(|(l, n, _)| *l == code && *n == name)
        else {
            return Err(err(None, None, "no such translation".into()));
        };
        let text: LessonText =
            ron::from_str(source).map_err(|e| err(None, None, e.to_string()))?;
        if text.steps.len() != self.steps.len() {
            return Err(err(
                None,
                Some("steps"),
                format!(
                    "{} steps; the English lesson has {}",
                    text.steps.len(),
                    self.steps.len()
                ),
            ));
        }
        let mut lesson = self.clone();
        lesson.title = text.title;
        lesson.summary = text.summary;
        for (i, (step, words)) in lesson.steps.iter_mut().zip(text.steps).enumerate() {
            if words.narration.trim().is_empty() {
                return Err(err(Some(i), Some("narration"), "the narration is empty".into()));
            }
            step.title = words.title;
            step.narration = words.narration;
            match (&mut step.question, words.question) {
                (None, None) => {}
                (Some(q), Some(w)) if q.choices.len() == w.choices.len() => {
                    q.ask = w.ask;
                    q.choices = w.choices;
                    q.why = w.why;
                }
                (Some(q), Some(w)) => {
                    return Err(err(
                        Some(i),
                        Some("question"),
                        format!(
                            "{} choices; the English question has {}",
                            w.choices.len(),
                            q.choices.len()
                        ),
                    ));
                }
                (english, _) => {
                    return Err(err(
                        Some(i),
                        Some("question"),
                        format!(
                            "the English step {} a question",
                            if english.is_some() { "has" } else { "has no" }
                        ),
                    ));
                }
            }
        }
        Ok(lesson)
    }

    /// Resolves every name the lesson uses against its preset's program.
    pub fn check(&self, file: &str) -> Result<(), LessonError> {
        let err = |step: Option<usize>, field: &'static str, message: String| LessonError {
            file: file.to_string(),
            step,
            field: Some(field),
            message,
        };
        if !is_builtin(&self.preset) {
            return Err(err(
                None,
                "preset",
                format!("`{}` is not a built-in preset", self.preset),
            ));
        }
        if let Some(c) = &self.checkpoint {
            let entry = crate::model::gallery::find(c)
                .map_err(|message| err(None, "checkpoint", message))?;
            if entry.preset != self.preset {
                return Err(err(
                    None,
                    "checkpoint",
                    format!(
                        "the `{c}` checkpoint is not of the lesson's preset `{}`",
                        self.preset
                    ),
                ));
            }
        }
        if self.steps.is_empty() {
            return Err(err(
                None,
                "steps",
                "a lesson needs at least one step".into(),
            ));
        }
        let config = Config::load(&self.preset).expect("built-in presets parse (tested)");
        let program = Program::new(&config);
        for (i, s) in self.steps.iter().enumerate() {
            let at = Some(i);
            if !SCENES.contains(&s.scene.as_str()) {
                return Err(err(
                    at,
                    "scene",
                    format!(
                        "`{}` is not a scene; the scenes are {}",
                        s.scene,
                        SCENES.join(", ")
                    ),
                ));
            }
            if s.narration.trim().is_empty() {
                return Err(err(at, "narration", "the narration is empty".into()));
            }
            match &s.focus {
                Focus::Nothing => {}
                Focus::Layer(name) => {
                    if !program.layers.iter().any(|l| &l.name == name) {
                        let names: Vec<&str> =
                            program.layers.iter().map(|l| l.name.as_str()).collect();
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "no layer `{name}` in {}; the layers are {}",
                                self.preset,
                                names.join(", ")
                            ),
                        ));
                    }
                }
                Focus::Op { label, .. } => {
                    if !program.ops.iter().any(|o| &o.label == label) {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "no op `{label}` in {} (ops are named like h.0.attn.c_attn)",
                                self.preset
                            ),
                        ));
                    }
                }
                Focus::Tensor(name) => {
                    if program.tensor_id(name).is_none() {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "no tensor `{name}` in {} (tensors are named like transformer.wte.weight)",
                                self.preset
                            ),
                        ));
                    }
                }
                Focus::Head { layer, head } => {
                    if *layer >= config.n_layer || *head >= config.n_head {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "no head ({layer}, {head}) in {}: it has {} layers of {} heads (0-based)",
                                self.preset, config.n_layer, config.n_head
                            ),
                        ));
                    }
                }
                Focus::Stage(name) => {
                    if !STAGES.contains(&name.as_str()) {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "`{name}` is not a stage; the stages are {}",
                                STAGES.join(", ")
                            ),
                        ));
                    }
                }
                Focus::Step(step) => {
                    if *step > config.steps {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "step {step} is past {}'s {} training steps",
                                self.preset, config.steps
                            ),
                        ));
                    }
                }
                Focus::Position(p) => {
                    if *p >= config.ctx {
                        return Err(err(
                            at,
                            "focus",
                            format!(
                                "position {p} is past {}'s context of {}",
                                self.preset, config.ctx
                            ),
                        ));
                    }
                }
            }
            let named: &[String] = match &s.action {
                Some(Action::Bench(presets)) => presets,
                Some(Action::Kernels(preset)) => std::slice::from_ref(preset),
                _ => &[],
            };
            if let Some(bad) = named.iter().find(|p| !is_builtin(p)) {
                return Err(err(
                    at,
                    "action",
                    format!("`{bad}` is not a built-in preset"),
                ));
            }
            match &s.action {
                Some(Action::HeatmapView(v)) => {
                    if !HEATMAP_VIEWS.contains(&v.as_str()) {
                        return Err(err(
                            at,
                            "action",
                            format!(
                                "`{v}` is not a heatmap view; they are {}",
                                HEATMAP_VIEWS.join(", ")
                            ),
                        ));
                    }
                }
                Some(Action::Tool(t)) => {
                    if !TOOLS.contains(&t.as_str()) {
                        return Err(err(
                            at,
                            "action",
                            format!("`{t}` is not a tool; they are {}", TOOLS.join(", ")),
                        ));
                    }
                }
                Some(Action::Train(0)) => {
                    return Err(err(at, "action", "Train(0) trains nothing".into()));
                }
                _ => {}
            }
            if let Some(lab) = &s.lab {
                if lab.train == 0 {
                    return Err(err(
                        at,
                        "lab",
                        "train: 0; a lab run trains at least one step".into(),
                    ));
                }
                if !(lab.lr_scale.is_finite() && lab.lr_scale > 0.0) {
                    return Err(err(
                        at,
                        "lab",
                        format!("lr_scale = {} must be a finite number > 0", lab.lr_scale),
                    ));
                }
                if matches!(s.action, Some(Action::Train(_))) {
                    return Err(err(
                        at,
                        "action",
                        "a step with a lab trains it to `train`; drop the Train action".into(),
                    ));
                }
            }
            if let Some(q) = &s.question
                && (q.choices.len() < 2 || q.answer >= q.choices.len())
            {
                return Err(err(
                    at,
                    "question",
                    format!(
                        "a question needs two or more choices and an answer among them (answer {} of {})",
                        q.answer,
                        q.choices.len()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::i18n::Language;

    #[test]
    fn every_lesson_exists_in_every_language_and_resolves() {
        for (name, _) in BUILTIN_LESSONS {
            let english = Lesson::load_in(name, Language::English).unwrap();
            for language in [Language::Spanish, Language::Chinese] {
                let translated =
                    Lesson::load_in(name, language).unwrap_or_else(|e| panic!("{e}"));
                // The program's part is the English file's, so it resolves.
                translated.check(name).unwrap();
                assert_ne!(translated.title, english.title, "{name} in {language:?}");
                for (k, (a, b)) in english.steps.iter().zip(&translated.steps).enumerate() {
                    assert_eq!(
                        (&a.scene, &a.focus, &a.action, &a.lab, a.panels),
                        (&b.scene, &b.focus, &b.action, &b.lab, b.panels)
                    );
                    assert_ne!(
                        a.narration, b.narration,
                        "{name} step {} is not translated into {language:?}",
                        k + 1
                    );
                    if let (Some(qa), Some(qb)) = (&a.question, &b.question) {
                        assert_eq!(qa.answer, qb.answer);
                        assert_ne!(qa.ask, qb.ask);
                    }
                }
            }
        }
        assert_eq!(TRANSLATED_LESSONS.len(), 2 * BUILTIN_LESSONS.len());
    }

    #[test]
    fn a_translation_that_does_not_match_its_lesson_is_refused() {
        let english = Lesson::load_in("attention", Language::English).unwrap();
        let mut fewer = english.clone();
        fewer.steps.pop();
        let e = fewer.translated("attention", Language::Spanish).unwrap_err();
        assert!(e.to_string().contains("scenes/es/attention.ron (steps)"), "{e}");
        let mut other_question = english.clone();
        let k = other_question
            .steps
            .iter()
            .position(|s| s.question.is_some())
            .unwrap();
        other_question.steps[k].question.as_mut().unwrap().choices.push("x".into());
        let e = other_question.translated("attention", Language::Chinese).unwrap_err();
        assert!(e.to_string().contains(&format!("step {} (question)", k + 1)), "{e}");
    }

    #[test]
    fn every_builtin_lesson_parses_and_resolves() {
        for (name, text) in BUILTIN_LESSONS {
            let lesson = Lesson::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                (5..=15).contains(&lesson.steps.len()),
                "{name}: {} steps",
                lesson.steps.len()
            );
            assert_eq!(Lesson::load(name).unwrap(), lesson);
        }
    }

    #[test]
    fn the_guides_example_lesson_parses_and_resolves() {
        let readme = include_str!("../docs/guide/lessons.md");
        let section = &readme[readme
            .find("# Writing a lesson")
            .expect("the user guide says how to write a lesson")..];
        let start = section.find("```ron\n").expect("with an example") + "```ron\n".len();
        let example = &section[start..start + section[start..].find("```").unwrap()];
        let lesson = Lesson::parse("docs/guide/lessons.md", example).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            lesson
                .steps
                .iter()
                .any(|s| s.lab.is_some() && s.question.is_none())
        );
        assert!(lesson.steps.iter().any(|s| s.question.is_some()));
    }

    #[test]
    fn a_bad_lesson_names_the_file_the_step_and_the_field() {
        let source = |name: &str| BUILTIN_LESSONS.iter().find(|l| l.0 == name).unwrap().1;
        let (tokens, attention, break_it) =
            (source("tokens"), source("attention"), source("break-it"));
        let cases = [
            (
                attention,
                "scene: \"attention\"",
                "scene: \"attenshun\"",
                "scene",
            ),
            (
                attention,
                "Head(layer: 0, head: 0)",
                "Head(layer: 9, head: 0)",
                "focus",
            ),
            (
                tokens,
                "Tensor(\"transformer.wte.weight\")",
                "Tensor(\"transformer.wte.weights\")",
                "focus",
            ),
            (
                attention,
                "label: \"h.0.attn\"",
                "label: \"h.0.atn\"",
                "focus",
            ),
            (attention, "answer: 1", "answer: 7", "question"),
            (break_it, "lr_scale: 10000.0", "lr_scale: -1.0", "lab"),
            (break_it, "train: 50", "train: 0", "lab"),
        ];
        let cases = cases.map(|(good, from, to, field)| {
            let text = good.replacen(from, to, 1);
            assert_ne!(text, good, "the case for {field} changed nothing");
            (text, field)
        });
        for (text, field) in cases {
            let e = Lesson::parse("my.ron", &text).unwrap_err();
            assert_eq!(e.file, "my.ron");
            assert_eq!(e.field, Some(field), "{e}");
            let s = e.to_string();
            assert!(s.starts_with("my.ron, step "), "{s}");
        }
        // Not RON at all: the file and the parser's position.
        let e = Lesson::parse("my.ron", "(title: \"x\", steps: [").unwrap_err();
        assert!(e.to_string().starts_with("my.ron: "), "{e}");
        // Unknown lesson names list the real ones.
        let e = Lesson::load("atention").unwrap_err();
        assert!(e.to_string().contains("attention"), "{e}");
    }
}
