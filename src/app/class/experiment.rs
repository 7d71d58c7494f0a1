//! The class experiment on a page (issue 57; the rules are
//! [`crate::class::experiment`]).
//!
//! The page's side of it lives here ([`ExperimentPage`], the curve a run
//! grows); the system that follows the run is in the class module, the
//! card and the teacher's section in [`super::panel`].
//!
//! - A **student** is given one value of the teacher's sweep (a learning
//!   rate multiple or a seed), predicts first which values' runs will
//!   diverge, then trains their own run with theirs: its loss curve goes
//!   to the teacher as it grows (every [`ClassSweep::every`] steps, at most
//!   once a second), and again after a reconnect.
//! - The **teacher** sets the sweep up in the class panel and sees the
//!   class's curves overlaid, one colour per value, beside the class's
//!   predictions and what happened.

use crate::class::experiment::{ClassSweep, Knob, Point};
use crate::class::protocol::{Assignment, StudentId};
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

impl ExperimentPage {
    /// The student asked for their run: the next run made is it.
    pub fn request(&mut self) {
        self.requested = true;
    }

    pub fn requested(&self) -> bool {
        self.requested
    }

    /// A run was made: the student's experiment run if they asked for one,
    /// else another (whose curve is not the experiment's).
    pub fn run_created(&mut self, generation: u64) {
        if self.requested {
            self.requested = false;
            self.generation = Some(generation);
            self.points.clear();
            self.sent = 0;
        } else {
            self.generation = None;
        }
    }

    /// The points to send now, marked sent: at most a message's worth, at
    /// most once every [`SEND_EVERY`] while the run goes on.
    pub fn due(&mut self, ended: bool) -> Option<Vec<Point>> {
        let time = self.last_send.is_none_or(|t| t.elapsed() >= SEND_EVERY) || ended;
        if !time || self.sent >= self.points.len() {
            return None;
        }
        let end = (self.sent + crate::class::experiment::MAX_POINTS_PER_MESSAGE).min(self.points.len());
        let points = self.points[self.sent..end].to_vec();
        self.sent = end;
        self.last_send = Some(Instant::now());
        Some(points)
    }
}

/// A run's curve grows by the steps the sweep keeps ([`ClassSweep::keeps`]),
/// in order, none past the run; a step that was not finite (`diverged_at`,
/// 1-based) ends it with a point without a loss.
pub fn extend_curve(
    points: &mut Vec<Point>,
    sweep: &ClassSweep,
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

/// One colour per value of a sweep: Okabe and Ito's, and a light grey
/// for an eighth value.
pub const VALUE_COLOURS: [egui::Color32; 8] = {
    let o = crate::app::heatmap::OKABE_ITO;
    [o[0], o[1], o[2], o[3], o[4], o[5], o[6], egui::Color32::from_rgb(220, 220, 220)]
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::experiment::{MAX_CURVE_POINTS, check_points};

    #[test]
    fn a_runs_curve_keeps_its_steps_in_order_and_ends_where_it_diverged() {
        let sweep = ClassSweep { knob: Knob::LrScale, values: vec![1.0, 10.0], steps: 1000 };
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
        let sweep = ClassSweep { knob: Knob::Seed, values: vec![1.0, 2.0], steps: 100 };
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
