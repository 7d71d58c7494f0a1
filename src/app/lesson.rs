//! The lesson player: walks a [`crate::lesson::Lesson`] step by step over
//! the live app. Each step switches to its scene, points the scene at its
//! focus (a head, a position, an op of the step, a tensor's heatmap), does
//! its action once (train N steps and pause, set the prompt, play the
//! FlashAttention replay, start a bench, switch the heatmaps' view), makes
//! sure the run is the "break it" lab the step needs (a fresh one, or the
//! current one trained on to its step) and
//! shows the narration in a panel along the bottom, with a predict-then-
//! reveal question where the step has one. Back / Next buttons, or Page Up
//! / Page Down (a clicker's keys; the arrows too in presenter mode).

use super::scenes::Scene;
use super::training::{Run, RunCommand, RunState};
use crate::lesson::{Action, Focus, Lesson};
use bevy::prelude::*;
use bevy_egui::{EguiContexts, egui};

/// A focus for a scene, delivered once that scene is showing: a lesson
/// step's, or a link from another scene (a node of the flow opening the
/// Step scene at its entry). The scene it names observes it and points
/// itself there (a head, a position, an op, a tensor). A scene whose
/// entities are not there yet hands it back with [`PendingFocus::retry`].
#[derive(Event, Clone, Debug)]
pub struct LessonFocus {
    pub scene: Scene,
    pub focus: Focus,
    /// The preset the lesson was checked against (for messages).
    pub preset: String,
}

/// The focuses waiting for their scene to show (see [`LessonFocus`]), in
/// the order they are to apply.
#[derive(Resource, Default, Debug)]
pub struct PendingFocus(Vec<LessonFocus>);

impl PendingFocus {
    /// Points `focus.scene` at `focus` once it shows (the caller switches
    /// to it), in place of any focus still waiting.
    pub fn set(&mut self, focus: LessonFocus) {
        self.0 = vec![focus];
    }

    /// Points `focus.scene` at `focus` too, after those waiting (a shared
    /// view's head, then its position).
    pub fn add(&mut self, focus: LessonFocus) {
        self.0.push(focus);
    }

    /// The focus found nothing to point at yet (its scene's entities come a
    /// frame later): deliver it again next frame.
    pub fn retry(&mut self, focus: &LessonFocus) {
        self.0.push(focus.clone());
    }
}

/// Delivers the pending focuses once their scene shows.
fn deliver_focus(
    mut pending: ResMut<PendingFocus>,
    scene: Res<State<Scene>>,
    mut triggers: Commands,
) {
    if pending.0.iter().any(|f| f.scene == *scene.get()) {
        let (now, later) = std::mem::take(&mut pending.0)
            .into_iter()
            .partition(|f| f.scene == *scene.get());
        pending.0 = later;
        for focus in now {
            triggers.trigger(focus);
        }
    }
}

/// What the scene on screen shows, in a lesson's terms: its prompt, the
/// attention head and the position it points at, where it has them. Each
/// scene that has any writes it while it shows; a class's teacher sends it
/// to every student ("send my view"), whose scene gets it back as a lesson
/// step's prompt and focus would.
#[derive(Resource, Default, Clone, Debug, PartialEq)]
pub struct ShownView {
    /// The scene that wrote it (the rest is stale once another shows).
    pub scene: Option<Scene>,
    pub prompt: Option<String>,
    pub head: Option<(usize, usize)>,
    pub position: Option<usize>,
}

impl ShownView {
    /// Writes `scene`'s view, touching the resource only when it changed.
    pub fn publish(
        this: &mut ResMut<ShownView>,
        scene: Scene,
        prompt: Option<&str>,
        head: Option<(usize, usize)>,
        position: Option<usize>,
    ) {
        let same = this.scene == Some(scene)
            && this.prompt.as_deref() == prompt
            && this.head == head
            && this.position == position;
        if !same {
            **this = ShownView {
                scene: Some(scene),
                prompt: prompt.map(str::to_string),
                head,
                position,
            };
        }
    }
}

/// A step's action, once when the step opens: the scenes it concerns
/// observe it (the player itself trains and switches the heatmaps' view).
#[derive(Event, Clone, Debug)]
pub struct LessonAction(pub Action, pub Scene);

/// The lesson being played, if any, and where in it.
#[derive(Resource, Default)]
pub struct LessonPlayer {
    /// The lesson and its name (a built-in name or the file).
    pub lesson: Option<(String, Lesson)>,
    /// The step shown (0-based).
    pub step: usize,
    /// The step whose scene, focus and action were applied.
    applied: Option<usize>,
    /// Pause the run when it reaches this step (a `Train(n)` action).
    train_until: Option<u64>,
    /// The run has been seen training since `train_until` was set (a lab's
    /// fresh run starts a frame or two later).
    training_seen: bool,
    /// The learner's answer to the step's question, once chosen.
    pub chosen: Option<usize>,
    /// The lesson's checkpoint was asked for.
    checkpoint_loaded: bool,
    /// Where the narration box was drawn (physical pixels), for checks.
    pub narration_rect: Option<egui::Rect>,
    /// *print a handout* was pressed ([`super::handout`] makes it).
    pub handout_asked: bool,
}

impl LessonPlayer {
    /// Opens `lesson` at step `step` (0-based, clamped).
    pub fn open(name: String, lesson: Lesson, step: usize) -> Self {
        let step = step.min(lesson.steps.len() - 1);
        Self {
            lesson: Some((name, lesson)),
            step,
            ..Self::default()
        }
    }

    /// Goes to a step (a class's teacher moved there).
    pub fn jump(&mut self, step: usize) {
        self.go(step);
    }

    /// Whether the step shown has had its scene, focus and action applied
    /// (a class's shared view waits for it, so the step does not undo it).
    pub fn step_applied(&self) -> bool {
        self.applied == Some(self.step)
    }

    fn go(&mut self, step: usize) {
        if let Some((_, l)) = &self.lesson
            && step < l.steps.len()
            && step != self.step
        {
            self.step = step;
            self.chosen = None;
        }
    }
}

pub struct LessonPlugin;

impl Plugin for LessonPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<LessonPlayer>()
            .init_resource::<PendingFocus>()
            .init_resource::<ShownView>()
            .add_systems(
                Update,
                (keys, apply_step, deliver_focus)
                    .chain()
                    .in_set(super::schedule::AppSystems::Input),
            );
    }
}

/// Page Down / Page Up (what a presenter's clicker sends) step through the
/// lesson, unless a text field has the keys; in presenter mode the arrows
/// do too (elsewhere they stay the scenes'). 1 to 9 answer the step's
/// question.
fn keys(
    keys: Option<Res<ButtonInput<KeyCode>>>,
    mut player: ResMut<LessonPlayer>,
    mut contexts: EguiContexts,
    ui_state: Res<super::ui::state::UiState>,
    focus: Option<Res<super::canvas::parts::PictureFocus>>,
) {
    let Some(keys) = keys else { return };
    if player.lesson.is_none() {
        return;
    }
    if contexts
        .ctx_mut()
        .is_ok_and(|ctx| ctx.egui_wants_keyboard_input())
    {
        return;
    }
    let step = player.step;
    // 1–9 choose an answer of the step's question (no pointer needed).
    let digits = [
        KeyCode::Digit1,
        KeyCode::Digit2,
        KeyCode::Digit3,
        KeyCode::Digit4,
        KeyCode::Digit5,
        KeyCode::Digit6,
        KeyCode::Digit7,
        KeyCode::Digit8,
        KeyCode::Digit9,
    ];
    let choices = player
        .lesson
        .as_ref()
        .and_then(|(_, l)| l.steps.get(step))
        .and_then(|s| s.question.as_ref())
        .map_or(0, |q| q.choices.len());
    if player.chosen.is_none()
        && let Some(i) = digits.iter().position(|k| keys.just_pressed(*k))
        && i < choices
    {
        player.chosen = Some(i);
    }
    // (Not while the keyboard's focus is in the picture: the arrows are its.)
    let arrows = ui_state.presenter && !focus.is_some_and(|f| f.active);
    if keys.just_pressed(KeyCode::PageDown) || (arrows && keys.just_pressed(KeyCode::ArrowRight)) {
        player.go(step + 1);
    }
    if keys.just_pressed(KeyCode::PageUp) || (arrows && keys.just_pressed(KeyCode::ArrowLeft)) {
        player.go(step.saturating_sub(1));
    }
}

/// Applies the step's scene, focus and action once when it opens; retries
/// a focus whose entities are not there yet; pauses a `Train(n)` at n.
fn apply_step(
    mut player: ResMut<LessonPlayer>,
    mut next_scene: ResMut<NextState<Scene>>,
    scene: Res<State<Scene>>,
    run: Option<Res<Run>>,
    mut commands: MessageWriter<RunCommand>,
    mut triggers: Commands,
    (mut snapshots, mut ui_state, mut pending): (
        ResMut<super::training::Snapshots>,
        ResMut<super::ui::state::UiState>,
        ResMut<PendingFocus>,
    ),
) {
    let player = &mut *player;
    if let (Some(until), Some(run)) = (player.train_until, &run) {
        let training = run.state == RunState::Training;
        player.training_seen |= training;
        if run.step() >= until || (player.training_seen && !training) {
            if training {
                commands.write(RunCommand::Pause);
            }
            player.train_until = None;
            player.training_seen = false;
        }
    }
    let Some((_, lesson)) = &player.lesson else {
        return;
    };
    // Once the app's first run exists, the lesson's own run replaces it.
    if !player.checkpoint_loaded && run.is_some() {
        player.checkpoint_loaded = true;
        if let Some(id) = &lesson.checkpoint {
            commands.write(RunCommand::OpenGallery { id: id.clone() });
        } else if lesson.checkpoint.is_none()
            && run.as_ref().is_some_and(|r| r.preset != lesson.preset)
            && let Some((_, text)) = crate::model::config::BUILTIN_PRESETS
                .iter()
                .find(|(id, _)| *id == lesson.preset)
        {
            // A fresh run of the lesson's preset.
            commands.write(RunCommand::LoadPreset {
                name: lesson.preset.clone(),
                text: text.to_string(),
            });
            commands.write(RunCommand::NewRun);
        }
    }
    let step = &lesson.steps[player.step];
    let want = Scene::from_key(&step.scene).expect("lessons are checked against the scene keys");
    if player.applied != Some(player.step) {
        player.applied = Some(player.step);
        pending.set(LessonFocus {
            scene: want,
            focus: step.focus.clone(),
            preset: lesson.preset.clone(),
        });
        if *scene.get() != want {
            next_scene.set(want);
        }
        ui_state.wide = !step.panels;
        if let (Some(lab), Some(run)) = (&step.lab, &run) {
            let preset_lr = crate::model::config::Config::load(&lesson.preset)
                .map_or(run.config().lr, |c| c.lr);
            let lr = preset_lr * lab.lr_scale;
            let is_it = run.preset == lesson.preset
                && run.config().lab == lab.switches()
                && (run.config().lr - lr).abs() <= lr * 1e-4;
            if !is_it {
                commands.write(RunCommand::NewPresetRun {
                    preset: lesson.preset.clone(),
                    lr_scale: lab.lr_scale,
                    lab: Some(lab.switches()),
                    seed: None,
                    steps: None,
                    train: false,
                });
            }
            if !is_it || run.step() < lab.train as u64 {
                commands.write(RunCommand::Train);
                player.train_until = Some(lab.train as u64);
                player.training_seen = false;
            }
        }
        match &step.action {
            None => {}
            Some(Action::HeatmapView(key)) => {
                if let Some(v) = super::training::HeatmapView::ALL
                    .into_iter()
                    .find(|v| super::link::view_key(*v) == key)
                {
                    snapshots.set_view(v);
                }
            }
            Some(Action::Train(n)) => {
                if let Some(run) = &run {
                    player.train_until = Some(run.step() + *n as u64);
                    player.training_seen = false;
                    if run.state != RunState::Training {
                        commands.write(RunCommand::Train);
                    }
                }
            }
            // The scenes' own actions.
            Some(action) => triggers.trigger(LessonAction(action.clone(), want)),
        }
    }
}

/// The narration panel along the bottom of the window, under the scene
/// (drawn by `ui::draw_ui` before the scene's area is measured, so the
/// scene lays out above it).
/// A workshop link (`locked`) has no "end lesson". In a live class
/// (`class`), a student's answer stays unmarked until the teacher reveals
/// it, Next stops at the teacher's step while paced, and the class's
/// answers show as bars (the teacher's live).
pub fn narration_panel(
    root: &mut egui::Ui,
    player: &mut LessonPlayer,
    ui_presenter: bool,
    locked: bool,
    class: Option<&super::answers::ClassView>,
) {
    let Some((name, lesson)) = player.lesson.clone() else {
        return;
    };
    let ppp = root.ctx().pixels_per_point();
    // A phone-sized page (a student's in a class).
    let narrow = super::ui::toolbar::is_phone(root.ctx());
    let target = if narrow { 44.0 } else { 32.0 };
    let (k, n) = (player.step, lesson.steps.len());
    let step = &lesson.steps[k];
    let mut go = None;
    #[allow(unused_mut)] // set by a button only natively
    let mut handout = false;
    let response = egui::Panel::bottom("lesson")
        .frame(
            egui::Frame::new()
                .fill(egui::Color32::from_rgb(18, 20, 28))
                .stroke(egui::Stroke::new(
                    1.5,
                    egui::Color32::from_rgb(90, 140, 220),
                ))
                .inner_margin(egui::Margin::symmetric(18, 10)),
        )
        .show(root, |ui| {
            let width = ui.available_width();
            ui.horizontal(|ui| {
                ui.label(
                    egui::RichText::new(crate::t!(
                        "lesson-step-of",
                        title = lesson.title.as_str(),
                        step = k + 1,
                        steps = n
                    ))
                    .size(14.0)
                    .color(egui::Color32::from_rgb(140, 180, 240)),
                )
                .on_hover_text(crate::t!("lesson-name-hover", name = name.as_str()));
            });
            ui.add(
                egui::ProgressBar::new((k + 1) as f32 / n as f32)
                    .desired_height(4.0)
                    .desired_width(width),
            );
            ui.label(egui::RichText::new(&step.title).size(22.0).strong());
            ui.label(egui::RichText::new(&step.narration).size(17.0));
            if let Some(q) = &step.question {
                ui.add_space(6.0);
                ui.label(
                    egui::RichText::new(crate::t!("lesson-predict", ask = q.ask.as_str()))
                        .size(17.0)
                        .color(egui::Color32::from_rgb(240, 200, 90)),
                );
                let hide = class.is_some_and(|c| c.hide_answer);
                // A phone: one choice a row, each a full-width target of
                // 44 points (WCAG's touch size).
                let choices = |ui: &mut egui::Ui| {
                    // Full width on a phone.
                    let width = if narrow { ui.available_width() } else { 0.0 };
                    for (i, c) in q.choices.iter().enumerate() {
                        let mut text = egui::RichText::new(c).size(16.0);
                        if let Some(chosen) = player.chosen {
                            if hide {
                                if i == chosen {
                                    text = text.color(egui::Color32::from_rgb(240, 200, 90)).strong();
                                }
                            } else if i == q.answer {
                                text = text.color(egui::Color32::from_rgb(110, 220, 130)).strong();
                            } else if i == chosen {
                                text = text.color(egui::Color32::from_rgb(240, 110, 100));
                            }
                        }
                        if ui
                            .add(egui::Button::new(text).min_size(egui::vec2(width, target)))
                            .clicked()
                            && player.chosen.is_none()
                        {
                            player.chosen = Some(i);
                        }
                    }
                };
                // Revealed in a class: the class's answers as bars, in place
                // of the buttons (the question is settled).
                if let Some(counts) = class.and_then(|c| c.counts.as_ref()) {
                    let answer = (!hide).then_some(q.answer);
                    let columns = if narrow { 1 } else { 2 };
                    super::answers::answer_bars(ui, &q.choices, counts, answer, 16.0, columns);
                } else if narrow {
                    ui.vertical(choices);
                } else {
                    ui.horizontal_wrapped(choices);
                }
                if hide && player.chosen.is_some() {
                    let sent = class.is_some_and(|c| c.answer_sent);
                    ui.label(
                        egui::RichText::new(if sent {
                            crate::t!("class-answer-in")
                        } else {
                            crate::t!("class-answer-sending")
                        })
                        .size(16.0),
                    );
                } else if let Some(chosen) = player.chosen {
                    let verdict = if chosen == q.answer {
                        crate::t!("lesson-right")
                    } else {
                        crate::t!("lesson-not-quite")
                    };
                    ui.label(egui::RichText::new(format!("{verdict} {}", q.why)).size(16.0));
                }
            }
            ui.add_space(6.0);
            ui.horizontal(|ui| {
                if ui
                    .add_enabled(
                        k > 0,
                        egui::Button::new(egui::RichText::new(crate::t!("lesson-back")).size(16.0))
                            .min_size(egui::vec2(0.0, target)),
                    )
                    .clicked()
                {
                    go = Some(k - 1);
                }
                let paced = class.and_then(|c| c.max_step).is_some_and(|m| k + 1 > m);
                if ui
                    .add_enabled(
                        k + 1 < n && !paced,
                        egui::Button::new(egui::RichText::new(crate::t!("lesson-next")).size(16.0))
                            .min_size(egui::vec2(0.0, target)),
                    )
                    .clicked()
                {
                    go = Some(k + 1);
                }
                if !narrow {
                    ui.weak(if ui_presenter {
                        crate::t!("lesson-keys-presenter")
                    } else {
                        crate::t!("lesson-keys")
                    });
                }
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    if !locked && ui.button(crate::t!("lesson-end")).clicked() {
                        go = Some(usize::MAX);
                    }
                    // Natively: the page and its pictures are files beside the app.
                    #[cfg(not(target_arch = "wasm32"))]
                    if !locked
                        && ui
                            .button(crate::t!("lesson-handout"))
                            .on_hover_text(crate::t!("lesson-handout-hover"))
                            .clicked()
                    {
                        handout = true;
                    }
                });
            });
        });
    player.handout_asked |= handout;
    match go {
        Some(usize::MAX) => {
            *player = LessonPlayer::default();
            return;
        }
        Some(k) => player.go(k),
        None => {}
    }
    player.narration_rect = Some(response.response.rect * ppp);
}
