//! What a class adds to the screen: the teacher's class panel (the code,
//! the students, the answers as bars filling live, and the controls:
//! reveal, pace, pause, send my view, CSV, end; the class experiment's
//! set-up and curves), the bars under a question, a student's experiment
//! card, and what covers a student's screen (joining, paused, ended).

use super::{ClassClient, Status};
use crate::app::lesson::{LessonPlayer, ShownView};
use crate::app::scenes::Scene;
use crate::app::training::RunCommand;
use crate::class::experiment::{ClassSweep, Knob};
use crate::class::protocol::{MAX_PROMPT_BYTES, Role, SharedView, ToServer};
use bevy::prelude::MessageWriter;
use bevy_egui::egui;

pub(super) const GOLD: egui::Color32 = egui::Color32::from_rgb(240, 200, 90);
pub(super) const MUTED: egui::Color32 = egui::Color32::from_rgb(170, 178, 196);

/// The teacher's view to send: the scene, with its prompt, head and
/// position where the scene showing wrote them ([`ShownView`]).
pub fn shared_view(shown: &ShownView, scene: Scene) -> SharedView {
    let mut view = SharedView { scene: scene.key().to_string(), ..Default::default() };
    if shown.scene == Some(scene) {
        view.prompt = shown.prompt.clone().map(|p| clip_prompt(p, MAX_PROMPT_BYTES));
        view.head = shown.head;
        view.position = shown.position;
    }
    view
}

/// A prompt cut to at most `max` bytes, on a character boundary (the last
/// bytes kept: the model reads the end of a long prompt).
fn clip_prompt(prompt: String, max: usize) -> String {
    if prompt.len() <= max {
        return prompt;
    }
    let mut start = prompt.len() - max;
    while !prompt.is_char_boundary(start) {
        start += 1;
    }
    prompt[start..].to_string()
}

/// The teacher's class panel, on the right.
pub fn teacher_panel(root: &mut egui::Ui, class: &mut ClassClient, player: &LessonPlayer, scene: Scene) {
    if !class.is_teacher() || class.link.is_none() {
        return;
    }
    let code = class.link.as_ref().map(|l| l.code.clone()).unwrap_or_default();
    egui::Panel::right("class")
        .default_size(340.0)
        .min_size(300.0)
        .frame(
            egui::Frame::new()
                .fill(egui::Color32::from_rgb(18, 20, 28))
                .stroke(egui::Stroke::new(1.5, GOLD))
                .inner_margin(egui::Margin::symmetric(14, 10)),
        )
        .show(root, |ui| {
            ui.label(egui::RichText::new(crate::t!("class-title")).size(16.0).color(GOLD));
            ui.label(
                egui::RichText::new(crate::t!("class-code", code = crate::class::protocol::spaced_code(&code)))
                    .size(30.0)
                    .strong()
                    .monospace(),
            );
            match &class.status {
                Status::In => {}
                Status::Connecting => {
                    ui.label(crate::t!("class-connecting"));
                }
                Status::Lost(why) => {
                    ui.colored_label(GOLD, crate::t!("class-lost", why = why.as_str()));
                }
                Status::Refused(why) => {
                    ui.colored_label(egui::Color32::from_rgb(255, 130, 110), why);
                    return;
                }
                Status::Ended => {
                    ui.label(crate::t!("class-ended"));
                    return;
                }
                Status::Off => return,
            }
            let students = class.board.students.len();
            let online = class.board.students.iter().filter(|s| s.online).count();
            ui.label(
                egui::RichText::new(crate::t!("class-students", students = students, online = online))
                    .size(18.0),
            );
            let state = class.state.clone().unwrap_or_default();
            ui.add_space(6.0);
            // This step's question: the answers so far, and the reveal.
            let step = player.step;
            let question = player
                .lesson
                .as_ref()
                .and_then(|(_, l)| l.steps.get(step))
                .and_then(|s| s.question.clone());
            if let Some(q) = &question {
                let counts = class.board.tally(step).map(|t| t.counts.clone()).unwrap_or_default();
                let answered: u32 = counts.iter().sum();
                ui.label(
                    egui::RichText::new(crate::t!("class-answered", answered = answered, students = students))
                        .size(18.0)
                        .color(GOLD),
                );
                let revealed = state.reveals.iter().any(|r| r.step == step);
                // The right answer is marked once revealed: the teacher's
                // screen is often the projected one.
                crate::app::answers::answer_bars(ui, &q.choices, &counts, revealed.then_some(q.answer), 16.0, 1);
                let label = if revealed { crate::t!("class-revealed") } else { crate::t!("class-reveal") };
                let reveal = ui
                    .add_enabled(!revealed, egui::Button::new(egui::RichText::new(label).size(17.0)).min_size(egui::vec2(0.0, 36.0)))
                    .on_hover_text(crate::t!("class-reveal-hover"));
                class.reveal_rect = Some(reveal.rect * ui.ctx().pixels_per_point());
                if reveal.clicked() {
                    class.send(ToServer::ShowAnswers { step });
                }
            } else {
                class.reveal_rect = None;
                ui.label(egui::RichText::new(crate::t!("class-no-question")).color(MUTED));
            }
            ui.separator();
            let mut locked = state.locked;
            if ui
                .checkbox(&mut locked, egui::RichText::new(crate::t!("class-pace")).size(16.0))
                .on_hover_text(crate::t!("class-pace-hover"))
                .changed()
            {
                class.send(ToServer::Pace { locked });
            }
            ui.horizontal_wrapped(|ui| {
                let pause = if state.paused { crate::t!("class-resume") } else { crate::t!("class-pause") };
                if ui.add(egui::Button::new(egui::RichText::new(pause).size(16.0)).min_size(egui::vec2(0.0, 32.0))).clicked() {
                    class.send(ToServer::Pause { paused: !state.paused });
                }
                if ui
                    .add(egui::Button::new(egui::RichText::new(crate::t!("class-send-view")).size(16.0)).min_size(egui::vec2(0.0, 32.0)))
                    .on_hover_text(crate::t!("class-send-view-hover", scene = scene.title()))
                    .clicked()
                {
                    class.send(ToServer::View { view: shared_view(&class.shown, scene) });
                }
            });
            ui.horizontal_wrapped(|ui| {
                let big = |text: String| egui::Button::new(egui::RichText::new(text).size(16.0)).min_size(egui::vec2(0.0, 32.0));
                if ui
                    .add(big(crate::t!("class-csv")))
                    .on_hover_text(crate::t!("class-csv-hover"))
                    .clicked()
                {
                    class.send(ToServer::Csv);
                }
                let id = egui::Id::new("class-end-confirm");
                let confirming = ui.data(|d| d.get_temp::<bool>(id)).unwrap_or(false);
                if !confirming {
                    if ui.add(big(crate::t!("class-end"))).clicked() {
                        ui.data_mut(|d| d.insert_temp(id, true));
                    }
                } else {
                    ui.colored_label(GOLD, crate::t!("class-end-sure"));
                    if ui.add(big(crate::t!("class-end-yes"))).clicked() {
                        class.send(ToServer::End);
                        ui.data_mut(|d| d.insert_temp(id, false));
                    }
                    if ui.add(big(crate::t!("class-end-no"))).clicked() {
                        ui.data_mut(|d| d.insert_temp(id, false));
                    }
                }
            });
            if let Some(reason) = &class.refusal {
                ui.colored_label(GOLD, reason);
            }
            ui.separator();
            // The experiment, then the students (join number, nickname,
            // where they are), scrolling under the controls.
            egui::ScrollArea::vertical().show(ui, |ui| {
                teacher_section(ui, class);
                ui.separator();
                for s in &class.board.students {
                    let dot = if s.online { "●" } else { "○" };
                    // A nickname after the number, if the student gave one.
                    let name = s.nickname.as_ref().map(|n| format!(" {n}")).unwrap_or_default();
                    ui.label(
                        egui::RichText::new(crate::t!(
                            "class-student-row",
                            dot = dot,
                            id = s.id,
                            name = name.as_str(),
                            step = s.step + 1,
                            answered = s.answered
                        ))
                        .size(15.0)
                        .color(if s.online { egui::Color32::WHITE } else { MUTED }),
                    );
                }
            });
        });
}

/// What covers a student's screen: joining, refused, paused, ended (and a
/// line while reconnecting). Drawn over everything.
pub fn student_cover(ctx: &egui::Context, class: &ClassClient) {
    if class.link.is_none() || class.role == Some(Role::Teacher) || class.is_teacher() {
        return;
    }
    let paused = class.status == Status::In && class.state.as_ref().is_some_and(|s| s.paused);
    let message = match &class.status {
        Status::Off => return,
        Status::In if !paused => return,
        Status::In => crate::t!("class-paused"),
        Status::Connecting => crate::t!(
            "class-joining",
            code = crate::class::protocol::spaced_code(&class.link.as_ref().map(|l| l.code.clone()).unwrap_or_default())
        ),
        Status::Lost(why) if class.lesson.is_none() => crate::t!("class-cannot-reach", why = why.as_str()),
        Status::Lost(why) => {
            // The lesson stays usable; one line says what is happening.
            egui::Area::new(egui::Id::new("class-lost"))
                .order(egui::Order::Foreground)
                .anchor(egui::Align2::CENTER_TOP, egui::vec2(0.0, 8.0))
                .show(ctx, |ui| {
                    egui::Frame::new()
                        .fill(egui::Color32::from_rgb(60, 48, 20))
                        .inner_margin(egui::Margin::symmetric(14, 8))
                        .corner_radius(6.0)
                        .show(ui, |ui| {
                            ui.label(egui::RichText::new(crate::t!("class-lost", why = why.as_str())).size(16.0).color(GOLD));
                        });
                });
            return;
        }
        Status::Refused(why) => crate::t!("class-refused", why = why.as_str()),
        Status::Ended => crate::t!("class-ended"),
    };
    let screen = ctx.viewport_rect();
    egui::Area::new(egui::Id::new("class-cover"))
        .order(egui::Order::Foreground)
        .fixed_pos(screen.min)
        .show(ctx, |ui| {
            let (rect, _) = ui.allocate_exact_size(screen.size(), egui::Sense::click_and_drag());
            ui.painter().rect_filled(rect, 0.0, egui::Color32::from_black_alpha(215));
            let inner = egui::Rect::from_center_size(rect.center(), egui::vec2(rect.width().min(640.0) - 32.0, 200.0));
            ui.scope_builder(egui::UiBuilder::new().max_rect(inner), |ui| {
                ui.vertical_centered(|ui| {
                    ui.label(egui::RichText::new(message).size(26.0).strong().color(egui::Color32::WHITE));
                });
            });
        });
}

/// A student's card: their value, the prediction, their run.
pub fn student_card(
    root: &mut egui::Ui,
    class: &mut ClassClient,
    run: &crate::app::training::Run,
    preset: Option<&str>,
    commands: &mut MessageWriter<RunCommand>,
) {
    if !class.is_student() || class.status != Status::In {
        return;
    }
    let Some(a) = class.experiment.assignment.clone() else { return };
    // 44 points: a finger's target (Chromebooks and phones have touch).
    let big = |text: String| egui::Button::new(egui::RichText::new(text).size(18.0)).min_size(egui::vec2(0.0, 44.0));
    let mut send = None;
    egui::Panel::bottom("class-experiment")
        .frame(
            egui::Frame::new()
                .fill(egui::Color32::from_rgb(22, 26, 36))
                .stroke(egui::Stroke::new(1.5, GOLD))
                .inner_margin(egui::Margin::symmetric(14, 6)),
        )
        .show(root, |ui| {
            let value = a.sweep.label(a.value);
            let yours = match a.sweep.knob {
                Knob::LrScale => crate::t!("exp-yours-lr", value = value.as_str(), steps = a.sweep.steps),
                Knob::Seed => crate::t!("exp-yours-seed", value = value.as_str(), steps = a.sweep.steps),
            };
            ui.horizontal_wrapped(|ui| {
                ui.label(egui::RichText::new(crate::t!("exp-title")).size(18.0).strong().color(GOLD));
                ui.label(egui::RichText::new(yours).size(18.0));
            });
            let page = &mut class.experiment;
            match &a.predicted {
                None => {
                    ui.label(egui::RichText::new(crate::t!("exp-predict")).size(18.0));
                    page.ticking.resize(a.sweep.values.len(), false);
                    ui.horizontal_wrapped(|ui| {
                        // Toggles as tall as the buttons: a finger's target.
                        for (i, tick) in page.ticking.iter_mut().enumerate() {
                            let mark = if *tick { "☑" } else { "☐" };
                            let text = format!("{mark} {}", a.sweep.label(i));
                            if ui
                                .add(big(text).selected(*tick))
                                .on_hover_text(crate::t!("exp-tick-hover"))
                                .clicked()
                            {
                                *tick = !*tick;
                            }
                        }
                        ui.add_space(12.0);
                        if ui.add(big(crate::t!("exp-send-prediction"))).clicked() {
                            send = Some(ToServer::Predict { diverges: page.ticking.clone() });
                        }
                    });
                }
                Some(said) => {
                    let said: Vec<String> = said
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| **d)
                        .map(|(i, _)| a.sweep.label(i))
                        .collect();
                    let said = if said.is_empty() { crate::t!("exp-predicted-none") } else { said.join(", ") };
                    ui.label(egui::RichText::new(crate::t!("exp-predicted", said = said.as_str())).size(16.0));
                    let mine = page.generation.is_some_and(|g| g == run.generation);
                    let last = page.points.last().copied();
                    let line = match (mine, last) {
                        (true, Some((step, None))) => Some(crate::t!("exp-diverged", step = step)),
                        (true, Some((step, Some(loss)))) if step >= a.sweep.steps => {
                            Some(crate::t!("exp-done", loss = format!("{loss:.3}"), steps = step))
                        }
                        (true, Some((step, Some(loss)))) => Some(crate::t!(
                            "exp-training",
                            step = step,
                            steps = a.sweep.steps,
                            loss = format!("{loss:.3}")
                        )),
                        (true, None) => Some(crate::t!("exp-starting")),
                        (false, _) => None,
                    };
                    if let Some(line) = line {
                        ui.label(egui::RichText::new(line).size(18.0).color(GOLD));
                    }
                    let label = if mine { crate::t!("exp-train-again") } else { crate::t!("exp-train") };
                    if ui.add_enabled(preset.is_some() && !page.requested(), big(label)).clicked()
                        && let Some(preset) = preset
                    {
                        page.request();
                        let (lr_scale, seed) = match a.sweep.knob {
                            Knob::LrScale => (a.sweep.values[a.value] as f32, None),
                            Knob::Seed => (1.0, Some(a.sweep.values[a.value] as u64)),
                        };
                        commands.write(RunCommand::NewPresetRun {
                            preset: preset.to_string(),
                            lr_scale,
                            lab: None,
                            seed,
                            steps: Some(u64::from(a.sweep.steps)),
                            train: true,
                        });
                    }
                }
            }
        });
    if let Some(msg) = send {
        class.send(msg);
    }
}

/// The teacher's part of the class panel: set a sweep up, or watch it.
pub fn teacher_section(ui: &mut egui::Ui, class: &mut ClassClient) {
    ui.label(egui::RichText::new(crate::t!("exp-title")).size(18.0).color(GOLD));
    let board = class.board.experiment.clone();
    class.experiment.board_round(board.as_ref().map(|b| b.round));
    let big = |text: String| egui::Button::new(egui::RichText::new(text).size(16.0)).min_size(egui::vec2(0.0, 32.0));
    let Some(board) = board else {
        ui.label(egui::RichText::new(crate::t!("exp-about")).size(15.0).color(MUTED));
        let (mut knob, mut values, mut steps) =
            class.experiment.setup.clone().unwrap_or((Knob::LrScale, "0.1, 1, 10, 100".into(), 300));
        ui.horizontal_wrapped(|ui| {
            let was = knob;
            ui.radio_value(&mut knob, Knob::LrScale, egui::RichText::new(crate::t!("exp-knob-lr")).size(15.0));
            ui.radio_value(&mut knob, Knob::Seed, egui::RichText::new(crate::t!("exp-knob-seed")).size(15.0));
            if knob != was {
                values = match knob {
                    Knob::LrScale => "0.1, 1, 10, 100".into(),
                    Knob::Seed => "1, 2, 3, 4".into(),
                };
            }
        });
        ui.horizontal(|ui| {
            ui.label(egui::RichText::new(crate::t!("exp-values")).size(15.0));
            ui.add(egui::TextEdit::singleline(&mut values).desired_width(150.0));
        });
        ui.horizontal(|ui| {
            ui.label(egui::RichText::new(crate::t!("exp-steps")).size(15.0));
            ui.add(egui::DragValue::new(&mut steps).range(
                crate::class::experiment::MIN_RUN_STEPS..=crate::class::experiment::MAX_RUN_STEPS,
            ));
        });
        if ui.add(big(crate::t!("exp-start"))).clicked() {
            let sweep = ClassSweep::parse_values(&values).map(|values| ClassSweep { knob, values, steps });
            match sweep.and_then(|s| s.check().map(|()| s)) {
                Ok(sweep) => {
                    class.experiment.setup_error = None;
                    class.send(ToServer::Experiment { sweep: Some(sweep) });
                }
                Err(e) => class.experiment.setup_error = Some(e),
            }
        }
        if let Some(e) = &class.experiment.setup_error {
            ui.colored_label(GOLD, e);
        }
        class.experiment.setup = Some((knob, values, steps));
        return;
    };
    // One row per value: its colour, students, runs that diverged, what
    // the class predicted.
    for (i, row) in board.rows.iter().enumerate() {
        let colour = super::experiment::VALUE_COLOURS[i % super::experiment::VALUE_COLOURS.len()];
        let loss = row.median_loss.map_or("–".to_string(), |l| format!("{l:.2}"));
        ui.horizontal_wrapped(|ui| {
            ui.label(egui::RichText::new(format!("■ {}", board.sweep.label(i))).size(16.0).strong().color(colour));
            ui.label(egui::RichText::new(crate::t!("exp-row-students", students = row.students, loss = loss.as_str())).size(15.0));
        });
        ui.label(
            egui::RichText::new(crate::t!(
                "exp-row",
                reporting = row.reporting,
                diverged = row.diverged,
                predicted = row.predicted_diverge,
                predictions = row.predictions,
            ))
            .size(15.0),
        )
        .on_hover_text(crate::t!("exp-row-hover"));
    }
    let lines: Vec<(usize, Vec<[f64; 2]>)> = class
        .experiment
        .curves
        .values()
        .map(|(v, pts)| {
            let finite = pts.iter().filter_map(|(s, l)| l.map(|l| [f64::from(*s), f64::from(l)])).collect();
            (*v, finite)
        })
        .collect();
    egui_plot::Plot::new("class-experiment-curves")
        .height(160.0)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .x_axis_label(crate::t!("exp-axis-step"))
        .y_axis_label(crate::t!("exp-axis-loss"))
        .include_x(0.0)
        .include_x(f64::from(board.sweep.steps))
        .include_y(0.0)
        .show(ui, |plot| {
            for (v, points) in lines {
                let colour = super::experiment::VALUE_COLOURS[v % super::experiment::VALUE_COLOURS.len()];
                plot.line(egui_plot::Line::new(board.sweep.label(v), egui_plot::PlotPoints::from(points)).color(colour).width(1.5));
            }
        });
    if ui.add(big(crate::t!("exp-end"))).clicked() {
        class.send(ToServer::Experiment { sweep: None });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_view_carries_the_scene_showing_and_a_prompt_that_fits() {
        let shown = ShownView {
            scene: Some(Scene::Attention),
            prompt: Some(format!("{}é.", "a".repeat(MAX_PROMPT_BYTES))),
            head: Some((1, 2)),
            position: Some(3),
        };
        let view = shared_view(&shown, Scene::Attention);
        assert_eq!(view.scene, "attention");
        let prompt = view.prompt.unwrap();
        assert!(prompt.len() <= MAX_PROMPT_BYTES && prompt.ends_with("é."), "{prompt:?}");
        assert_eq!((view.head, view.position), (Some((1, 2)), Some(3)));
        // Written by another scene: the scene alone.
        let view = shared_view(&shown, Scene::Walk);
        assert_eq!(view, SharedView { scene: Scene::Walk.key().into(), ..Default::default() });
    }
}
