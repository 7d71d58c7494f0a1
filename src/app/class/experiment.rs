//! The class experiment on a page (issue 57; the rules are
//! [`crate::class::experiment`]).
//!
//! - A **student** is given one value of the teacher's sweep (a learning
//!   rate multiple or a seed), predicts first which values' runs will
//!   diverge, then trains their own run with theirs: its loss curve goes
//!   to the teacher as it grows (every [`Sweep::every`] steps, at most
//!   once a second), and again after a reconnect.
//! - The **teacher** sets the sweep up in the class panel and sees the
//!   class's curves overlaid, one colour per value, beside the class's
//!   predictions and what happened.

use super::ClassClient;
use crate::app::training::{RunCommand, RunCreated, RunState, StepRecord};
use crate::class::experiment::{Knob, Point, Sweep};
use crate::class::protocol::{Assignment, StudentId, ToServer};
use bevy::prelude::*;
use bevy_egui::egui;
use std::collections::BTreeMap;
use web_time::{Duration, Instant};

/// How often a student's page sends its new points, at most.
const SEND_EVERY: Duration = Duration::from_secs(1);

/// The experiment as this page has it.
#[derive(Default)]
pub struct ExperimentPage {
    /// A student's part (from the server).
    pub assignment: Option<Assignment>,
    /// The prediction being ticked, per value.
    pub ticking: Vec<bool>,
    /// The student asked for their run: the next run made is it.
    requested: bool,
    /// The generation of the student's experiment run, while it is the
    /// run the page shows.
    pub generation: Option<u64>,
    /// Its curve so far (kept to send again after a reconnect).
    pub points: Vec<Point>,
    /// How many of `points` the server has (as far as this page knows).
    sent: usize,
    last_send: Option<Instant>,
    /// The teacher: the experiment's round and its curves, per student
    /// (their value, their points).
    pub round: u32,
    pub curves: BTreeMap<StudentId, (usize, Vec<Point>)>,
    /// The teacher's set-up: knob, typed values, steps; and why the last
    /// start was refused here.
    pub setup: Option<(Knob, String, u32)>,
    pub setup_error: Option<String>,
}

impl ExperimentPage {
    /// A student's part arrived (or the experiment ended).
    pub fn assigned(&mut self, assignment: Option<Assignment>) {
        let same_sweep = self.assignment.as_ref().map(|a| &a.sweep) == assignment.as_ref().map(|a| &a.sweep);
        if !same_sweep {
            self.generation = None;
            self.requested = false;
            self.points.clear();
            self.sent = 0;
            self.ticking = assignment.as_ref().map_or(Vec::new(), |a| vec![false; a.sweep.values.len()]);
        }
        // What the server has of this page's curve: send the rest again.
        // (A record past this run's last point is of an earlier run of this
        // page: the first point sent starts the curve again.)
        let on_record = assignment.as_ref().and_then(|a| a.reported_to);
        self.sent = match on_record {
            Some(to) if self.points.last().is_some_and(|(s, _)| *s >= to) => {
                self.points.iter().take_while(|(s, _)| *s <= to).count()
            }
            _ => 0,
        };
        self.assignment = assignment;
    }

    /// A teacher's page: points of a student's curve.
    pub fn curve(&mut self, round: u32, id: StudentId, value: usize, points: Vec<Point>, restart: bool) {
        if round < self.round {
            return;
        }
        if round > self.round {
            self.round = round;
            self.curves.clear();
        }
        let entry = self.curves.entry(id).or_insert_with(|| (value, Vec::new()));
        if restart {
            entry.1.clear();
        }
        entry.0 = value;
        entry.1.extend(points);
    }

    /// A teacher's page: the dashboard's round (a new experiment drops the
    /// last one's curves).
    pub fn board_round(&mut self, round: Option<u32>) {
        match round {
            Some(r) if r > self.round => {
                self.round = r;
                self.curves.clear();
            }
            None => self.curves.clear(),
            _ => {}
        }
    }
}

/// A student's experiment run: notes which run it is, keeps its curve and
/// sends it.
pub(super) fn track_run(
    class: ResMut<ClassClient>,
    mut created: MessageReader<RunCreated>,
    added: Query<&StepRecord, Added<StepRecord>>,
    run: Option<Res<crate::app::training::Run>>,
) {
    let class = class.into_inner();
    let page = &mut class.experiment;
    for c in created.read() {
        if page.requested {
            page.requested = false;
            page.generation = Some(c.generation);
            page.points.clear();
            page.sent = 0;
        } else {
            // Another run (the student opened something else): this one is
            // no longer shown, its curve stays as sent.
            page.generation = None;
        }
    }
    let (Some(run), Some(generation), Some(a)) = (run, page.generation, page.assignment.as_ref()) else {
        return;
    };
    if run.generation != generation {
        return;
    }
    let sweep = a.sweep.clone();
    let diverged_at = (run.state == RunState::Diverged).then(|| run.step() + 1);
    extend_curve(&mut page.points, &sweep, added.iter().map(|r| (r.step, r.loss)), diverged_at);
    let ended = matches!(run.state, RunState::Diverged | RunState::Finished);
    let due = page.last_send.is_none_or(|t| t.elapsed() >= SEND_EVERY) || ended;
    if due && page.sent < page.points.len() && class.status == super::Status::In {
        let page = &mut class.experiment;
        let end = (page.sent + crate::class::experiment::MAX_POINTS_PER_MESSAGE).min(page.points.len());
        let points = page.points[page.sent..end].to_vec();
        page.sent = end;
        page.last_send = Some(Instant::now());
        class.send(ToServer::Curve { points });
    }
}

/// A run's curve grows by the steps the sweep keeps ([`Sweep::keeps`]),
/// in order, none past the run; a step that was not finite (`diverged_at`,
/// 1-based) ends it with a point without a loss.
pub fn extend_curve(
    points: &mut Vec<Point>,
    sweep: &Sweep,
    records: impl Iterator<Item = (u64, f32)>,
    diverged_at: Option<u64>,
) {
    let mut new: Vec<(u64, f32)> = records.filter(|(s, _)| sweep.keeps(*s as u32)).collect();
    new.sort_by_key(|(s, _)| *s);
    for (step, loss) in new {
        let step = step as u32;
        let ended = points.last().is_some_and(|(_, l)| l.is_none());
        if !ended && points.last().is_none_or(|(s, _)| *s < step) && step <= sweep.steps {
            points.push((step, loss.is_finite().then_some(loss)));
        }
    }
    if let Some(at) = diverged_at
        && points.last().is_none_or(|(_, l)| l.is_some())
    {
        let step = (at as u32).max(points.last().map_or(1, |(s, _)| s + 1));
        if step <= sweep.steps {
            points.push((step, None));
        }
    }
}

/// Okabe and Ito's colours (told apart with any colour vision), one per
/// value of a sweep.
pub const VALUE_COLOURS: [egui::Color32; 8] = [
    egui::Color32::from_rgb(230, 159, 0),
    egui::Color32::from_rgb(86, 180, 233),
    egui::Color32::from_rgb(0, 158, 115),
    egui::Color32::from_rgb(240, 228, 66),
    egui::Color32::from_rgb(0, 114, 178),
    egui::Color32::from_rgb(213, 94, 0),
    egui::Color32::from_rgb(204, 121, 167),
    egui::Color32::from_rgb(220, 220, 220),
];

/// A value as the pages say it.
fn value_text(sweep: &Sweep, index: usize) -> String {
    sweep.label(index)
}

/// A student's card: their value, the prediction, their run.
pub fn student_card(
    root: &mut egui::Ui,
    class: &mut ClassClient,
    run: &crate::app::training::Run,
    preset: Option<&str>,
    commands: &mut MessageWriter<RunCommand>,
) {
    if !class.is_student() || class.status != super::Status::In {
        return;
    }
    let Some(a) = class.experiment.assignment.clone() else { return };
    let big = |text: String| egui::Button::new(egui::RichText::new(text).size(18.0)).min_size(egui::vec2(0.0, 44.0));
    let mut send = None;
    egui::Panel::bottom("class-experiment")
        .frame(
            egui::Frame::new()
                .fill(egui::Color32::from_rgb(22, 26, 36))
                .stroke(egui::Stroke::new(1.5, super::panel::GOLD))
                .inner_margin(egui::Margin::symmetric(14, 10)),
        )
        .show(root, |ui| {
            ui.label(egui::RichText::new(crate::t!("exp-title")).size(18.0).strong().color(super::panel::GOLD));
            let value = value_text(&a.sweep, a.value);
            let yours = match a.sweep.knob {
                Knob::LrScale => crate::t!("exp-yours-lr", value = value.as_str(), steps = a.sweep.steps),
                Knob::Seed => crate::t!("exp-yours-seed", value = value.as_str(), steps = a.sweep.steps),
            };
            ui.label(egui::RichText::new(yours).size(18.0));
            let page = &mut class.experiment;
            match &a.predicted {
                None => {
                    ui.label(egui::RichText::new(crate::t!("exp-predict")).size(18.0));
                    page.ticking.resize(a.sweep.values.len(), false);
                    ui.horizontal_wrapped(|ui| {
                        for (i, tick) in page.ticking.iter_mut().enumerate() {
                            let text = egui::RichText::new(value_text(&a.sweep, i)).size(18.0);
                            ui.add(egui::Checkbox::new(tick, text)).on_hover_text(crate::t!("exp-tick-hover"));
                        }
                    });
                    if ui.add(big(crate::t!("exp-send-prediction"))).clicked() {
                        send = Some(ToServer::Predict { diverges: page.ticking.clone() });
                    }
                }
                Some(said) => {
                    let said: Vec<String> = said
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| **d)
                        .map(|(i, _)| value_text(&a.sweep, i))
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
                        ui.label(egui::RichText::new(line).size(18.0).color(super::panel::GOLD));
                    }
                    let label = if mine { crate::t!("exp-train-again") } else { crate::t!("exp-train") };
                    if ui.add_enabled(preset.is_some() && !page.requested, big(label)).clicked()
                        && let Some(preset) = preset
                    {
                        page.requested = true;
                        let (lr_scale, seed) = match a.sweep.knob {
                            Knob::LrScale => (a.sweep.values[a.value] as f32, None),
                            Knob::Seed => (1.0, Some(a.sweep.values[a.value] as u64)),
                        };
                        commands.write(RunCommand::NewClassRun {
                            preset: preset.to_string(),
                            lr_scale,
                            seed,
                            steps: u64::from(a.sweep.steps),
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
    ui.label(egui::RichText::new(crate::t!("exp-title")).size(18.0).color(super::panel::GOLD));
    let board = class.board.experiment.clone();
    class.experiment.board_round(board.as_ref().map(|b| b.round));
    let big = |text: String| egui::Button::new(egui::RichText::new(text).size(16.0)).min_size(egui::vec2(0.0, 32.0));
    let Some(board) = board else {
        ui.label(egui::RichText::new(crate::t!("exp-about")).size(15.0).color(super::panel::MUTED));
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
            let sweep = Sweep::parse_values(&values).map(|values| Sweep { knob, values, steps });
            match sweep.and_then(|s| s.check().map(|()| s)) {
                Ok(sweep) => {
                    class.experiment.setup_error = None;
                    class.send(ToServer::Experiment { sweep: Some(sweep) });
                }
                Err(e) => class.experiment.setup_error = Some(e),
            }
        }
        if let Some(e) = &class.experiment.setup_error {
            ui.colored_label(super::panel::GOLD, e);
        }
        class.experiment.setup = Some((knob, values, steps));
        return;
    };
    // One row per value: its colour, students, runs that diverged, what
    // the class predicted.
    for (i, row) in board.rows.iter().enumerate() {
        let colour = VALUE_COLOURS[i % VALUE_COLOURS.len()];
        let loss = row.median_loss.map_or("–".to_string(), |l| format!("{l:.2}"));
        ui.horizontal_wrapped(|ui| {
            ui.label(egui::RichText::new(format!("■ {}", board.sweep.label(i))).size(16.0).strong().color(colour));
            ui.label(
                egui::RichText::new(crate::t!(
                    "exp-row",
                    students = row.students,
                    reporting = row.reporting,
                    diverged = row.diverged,
                    predicted = row.predicted_diverge,
                    predictions = row.predictions,
                    loss = loss.as_str()
                ))
                .size(15.0),
            )
            .on_hover_text(crate::t!("exp-row-hover"));
        });
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
        .height(180.0)
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
                let colour = VALUE_COLOURS[v % VALUE_COLOURS.len()];
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
    use crate::class::experiment::{MAX_CURVE_POINTS, check_points};

    #[test]
    fn a_runs_curve_keeps_its_steps_in_order_and_ends_where_it_diverged() {
        let sweep = Sweep { knob: Knob::LrScale, values: vec![1.0, 10.0], steps: 1000 };
        let every = sweep.every() as u64;
        let mut points = Vec::new();
        // Frames bring records out of order, several at a time.
        let losses = |steps: std::ops::RangeInclusive<u64>| steps.rev().map(|s| (s, 5.0 - s as f32 * 1e-3));
        extend_curve(&mut points, &sweep, losses(1..=3 * every), None);
        extend_curve(&mut points, &sweep, losses(3 * every + 1..=500), None);
        assert_eq!(points[0], (1, Some(5.0 - 1e-3)));
        assert!(points.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(points[1..].iter().all(|(s, _)| u64::from(*s) % every == 0));
        // Step 501 was not finite: the curve ends there.
        extend_curve(&mut points, &sweep, std::iter::empty(), Some(501));
        assert_eq!(points.last(), Some(&(501, None)));
        extend_curve(&mut points, &sweep, losses(502..=1000), Some(501));
        assert_eq!(points.last(), Some(&(501, None)), "nothing after it");
        // What the server will take, in messages of its size.
        assert!(points.len() <= MAX_CURVE_POINTS);
        let mut on_record: Vec<Point> = Vec::new();
        for chunk in points.chunks(crate::class::experiment::MAX_POINTS_PER_MESSAGE) {
            assert_eq!(check_points(&on_record, chunk, sweep.steps), Ok(false));
            on_record.extend_from_slice(chunk);
        }
        assert!(crate::class::experiment::diverged(&on_record));
        // A whole run that trains: its last step is kept.
        let mut whole = Vec::new();
        extend_curve(&mut whole, &sweep, losses(1..=1000), None);
        assert_eq!(whole.last().map(|p| p.0), Some(1000));
        assert!(whole.len() <= MAX_CURVE_POINTS);
    }

    #[test]
    fn a_reconnected_page_sends_what_the_server_does_not_have() {
        let sweep = Sweep { knob: Knob::Seed, values: vec![1.0, 2.0], steps: 100 };
        let assignment = |reported_to| Some(Assignment { sweep: sweep.clone(), value: 0, predicted: None, reported_to });
        let mut page = ExperimentPage::default();
        page.assigned(assignment(None));
        page.points = vec![(1, Some(5.0)), (10, Some(4.0)), (20, Some(3.0))];
        page.assigned(assignment(Some(10)));
        assert_eq!(page.sent, 2, "the server has up to step 10");
        page.assigned(assignment(Some(50)));
        assert_eq!(page.sent, 0, "an earlier run's record: this run starts the curve again");
        // A teacher's page: curves of a newer round replace the older.
        page.curve(1, 3, 0, vec![(1, Some(5.0))], false);
        page.curve(1, 3, 0, vec![(2, Some(4.0))], false);
        assert_eq!(page.curves[&3].1.len(), 2);
        page.curve(2, 4, 1, vec![(1, Some(5.0))], false);
        assert_eq!(page.curves.keys().copied().collect::<Vec<_>>(), vec![4]);
        page.curve(1, 3, 0, vec![(3, Some(4.0))], false);
        assert!(!page.curves.contains_key(&3), "a late curve of an ended round is dropped");
    }
}
