//! The class experiment (issue 57): the teacher sweeps one knob across the
//! class (the learning rate, as a multiple of the lesson preset's, or the
//! seed); each student is given one value, predicts first which of the
//! values' runs will diverge, then trains their own run with theirs and
//! reports its loss curve; the teacher's dashboard overlays the class's
//! curves and sets the predictions beside what happened.
//!
//! The rules live here, shared by the server, its log's replay and the
//! pages: what a sweep may be ([`ClassSweep::check`]), who gets which value
//! ([`ClassSweep::value_of`]), what a curve may hold ([`check_points`]) and
//! when a run counts as diverged ([`diverged`]).

use super::protocol::StudentId;
use serde::{Deserialize, Serialize};

/// Values in one sweep, at most.
pub const MAX_SWEEP_VALUES: usize = 8;
/// A run's steps: at least, at most.
pub const MIN_RUN_STEPS: u32 = 20;
pub const MAX_RUN_STEPS: u32 = 5000;
/// Points one student's curve keeps (a page sends one every
/// [`ClassSweep::every`] steps, so a whole run fits).
pub const MAX_CURVE_POINTS: usize = 128;
/// Points in one message (it stays well under the message size limit).
pub const MAX_POINTS_PER_MESSAGE: usize = 64;
/// Times one student's curve may start again (a page reloaded and trained
/// anew) in one experiment: the class's file stays bounded.
pub const MAX_RESTARTS: u32 = 20;
/// The largest learning-rate multiple a sweep may ask for.
pub const MAX_LR_SCALE: f64 = 1000.0;

/// What the sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// The learning rate, as a multiple of the lesson preset's.
    LrScale,
    /// The seed of the run's weights and batches.
    Seed,
}

/// The teacher's sweep: the knob, its values, and how many steps each
/// student's run trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSweep {
    pub knob: Knob,
    pub values: Vec<f64>,
    pub steps: u32,
}

/// One point of a loss curve: the step, and the training loss there
/// (None where it was not finite: the run diverged).
pub type Point = (u32, Option<f32>);

impl ClassSweep {
    /// Whether the sweep can be run: 2 to [`MAX_SWEEP_VALUES`] distinct
    /// values (learning-rate multiples in (0, [`MAX_LR_SCALE`]], seeds
    /// whole numbers below 2³²), and a run length in range.
    pub fn check(&self) -> Result<(), String> {
        let n = self.values.len();
        if !(2..=MAX_SWEEP_VALUES).contains(&n) {
            return Err(format!("a sweep has 2 to {MAX_SWEEP_VALUES} values, not {n}"));
        }
        for (i, v) in self.values.iter().enumerate() {
            let fits = match self.knob {
                Knob::LrScale => v.is_finite() && *v > 0.0 && *v <= MAX_LR_SCALE,
                Knob::Seed => v.is_finite() && v.fract() == 0.0 && *v >= 0.0 && *v < 4_294_967_296.0,
            };
            if !fits {
                return Err(match self.knob {
                    Knob::LrScale => format!(
                        "a learning-rate multiple is above 0 and at most {MAX_LR_SCALE}, not {v}"
                    ),
                    Knob::Seed => format!("a seed is a whole number from 0 to 4294967295, not {v}"),
                });
            }
            if self.values[..i].contains(v) {
                return Err(format!("the value {v} is in the sweep twice"));
            }
        }
        if !(MIN_RUN_STEPS..=MAX_RUN_STEPS).contains(&self.steps) {
            return Err(format!(
                "a run of the sweep trains {MIN_RUN_STEPS} to {MAX_RUN_STEPS} steps, not {}",
                self.steps
            ));
        }
        Ok(())
    }

    /// The value (its index) student `id` is given: join numbers go round
    /// the values, so each value has as many students as can be.
    pub fn value_of(&self, id: StudentId) -> usize {
        (id.max(1) as usize - 1) % self.values.len().max(1)
    }

    /// A value as the pages label it: `×10` (of the preset's learning
    /// rate) or `seed 3`.
    pub fn label(&self, index: usize) -> String {
        let v = self.values.get(index).copied().unwrap_or(f64::NAN);
        match self.knob {
            Knob::LrScale => format!("×{v}"),
            Knob::Seed => format!("seed {v}"),
        }
    }

    /// How often a page reports its loss: every this many steps, so that a
    /// whole run's curve fits in [`MAX_CURVE_POINTS`] (with its first and
    /// last step, and the step where it diverged).
    pub fn every(&self) -> u32 {
        self.steps.div_ceil(MAX_CURVE_POINTS as u32 - 3).max(1)
    }

    /// Whether a page reports the loss of this step (1-based, as the
    /// trainer counts them).
    pub fn keeps(&self, step: u32) -> bool {
        step == 1 || step == self.steps || step.is_multiple_of(self.every())
    }

    /// Parses the teacher's typed values: numbers separated by commas or
    /// spaces (`0.1, 1, 10, 100`).
    pub fn parse_values(typed: &str) -> Result<Vec<f64>, String> {
        typed
            .split([',', ' ', ';'])
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .trim_start_matches(['×', 'x'])
                    .parse::<f64>()
                    .map_err(|_| format!("`{}` is not a number: type values like 0.1, 1, 10, 100", s.trim()))
            })
            .collect()
    }
}

/// Whether new points start a curve again: their first step is at or
/// before the last recorded one (the page reloaded and trained anew).
pub fn starts_again(existing: &[Point], new: &[Point]) -> bool {
    existing.last().is_some_and(|(last, _)| new.first().is_some_and(|(s, _)| s <= last))
}

/// Whether new points may extend a curve: steps rising, within the run,
/// losses positive where finite, few enough. A curve that starts again
/// (its first new step at or before the last recorded one: the page
/// reloaded and trained anew) replaces the old one; the result says so.
pub fn check_points(existing: &[Point], new: &[Point], steps: u32) -> Result<bool, String> {
    if new.is_empty() || new.len() > MAX_POINTS_PER_MESSAGE {
        return Err(format!("a message carries 1 to {MAX_POINTS_PER_MESSAGE} points of a curve"));
    }
    if new.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Err("a curve's steps rise".into());
    }
    if new.iter().any(|(s, _)| *s > steps) {
        return Err(format!("the sweep's runs train {steps} steps"));
    }
    if new.iter().any(|(_, l)| l.is_some_and(|l| !l.is_finite() || l < 0.0)) {
        return Err("a loss is a number at least 0 (none where it was not finite)".into());
    }
    let restart = starts_again(existing, new);
    let kept = if restart { 0 } else { existing.len() };
    if kept + new.len() > MAX_CURVE_POINTS {
        return Err(format!("a curve keeps at most {MAX_CURVE_POINTS} points"));
    }
    Ok(restart)
}

/// Whether a run diverged: its loss stopped being finite, or its latest
/// loss is above its first (training made it worse).
pub fn diverged(points: &[Point]) -> bool {
    if points.iter().any(|(_, l)| l.is_none()) {
        return true;
    }
    match (points.first(), points.last()) {
        (Some((_, Some(first))), Some((_, Some(last)))) => points.len() > 1 && last > first,
        _ => false,
    }
}

/// One value of the sweep on the teacher's dashboard.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// Students given this value.
    pub students: u32,
    /// … of whom this many have reported their run.
    pub reporting: u32,
    /// … and this many runs diverged ([`diverged`]).
    pub diverged: u32,
    /// Predictions the class made for this value: that it diverges, and
    /// all of them.
    pub predicted_diverge: u32,
    pub predictions: u32,
    /// The median of the latest losses reported (finite ones).
    pub median_loss: Option<f32>,
}

/// The experiment on the teacher's dashboard (the curves come as
/// [`super::protocol::ToClient::Curve`] messages, as they grow).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentBoard {
    /// Which experiment of the class this is (1, 2, …): a page drops the
    /// curves of an earlier one.
    pub round: u32,
    pub sweep: ClassSweep,
    pub rows: Vec<SweepRow>,
}

/// The median of some numbers (None if there are none).
pub fn median(mut values: Vec<f32>) -> Option<f32> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f32::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> ClassSweep {
        ClassSweep { knob: Knob::LrScale, values: vec![0.1, 1.0, 10.0, 100.0], steps: 200 }
    }

    #[test]
    fn sweeps_are_checked() {
        assert_eq!(sweep().check(), Ok(()));
        for bad in [
            ClassSweep { values: vec![1.0], ..sweep() },
            ClassSweep { values: vec![1.0; 9], ..sweep() },
            ClassSweep { values: vec![1.0, 1.0], ..sweep() },
            ClassSweep { values: vec![0.0, 1.0], ..sweep() },
            ClassSweep { values: vec![f64::NAN, 1.0], ..sweep() },
            ClassSweep { values: vec![2000.0, 1.0], ..sweep() },
            ClassSweep { steps: 5, ..sweep() },
            ClassSweep { steps: 50_000, ..sweep() },
            ClassSweep { knob: Knob::Seed, values: vec![1.5, 2.0], steps: 100 },
            ClassSweep { knob: Knob::Seed, values: vec![-1.0, 2.0], steps: 100 },
        ] {
            let why = bad.check().expect_err("refused");
            assert!(!why.contains('\n'), "{why}");
        }
        assert_eq!(ClassSweep { knob: Knob::Seed, values: vec![0.0, 4294967295.0], steps: 100 }.check(), Ok(()));
        assert_eq!(ClassSweep::parse_values("0.1, 1 ×10;x100"), Ok(vec![0.1, 1.0, 10.0, 100.0]));
        assert!(ClassSweep::parse_values("1, ten").unwrap_err().contains("ten"));
    }

    #[test]
    fn students_go_round_the_values_and_a_whole_run_fits_a_curve() {
        let s = sweep();
        let given: Vec<usize> = (1..=9).map(|id| s.value_of(id)).collect();
        assert_eq!(given, vec![0, 1, 2, 3, 0, 1, 2, 3, 0]);
        for steps in [MIN_RUN_STEPS, 127, 200, 1000, 4999, MAX_RUN_STEPS] {
            let s = ClassSweep { steps, ..sweep() };
            // Every step kept, and one more where it diverged.
            let points = (1..=steps).filter(|&k| s.keeps(k)).count() + 1;
            assert!(points <= MAX_CURVE_POINTS, "{steps} steps: {points} points");
            assert!(s.keeps(1) && s.keeps(steps));
        }
    }

    #[test]
    fn curves_grow_in_order_restart_and_stay_bounded() {
        let a: Vec<Point> = (0..10).map(|s| (s * 2, Some(5.0 - s as f32 * 0.1))).collect();
        assert_eq!(check_points(&[], &a, 200), Ok(false));
        assert_eq!(check_points(&a, &[(20, Some(3.0))], 200), Ok(false));
        assert_eq!(check_points(&a, &[(0, Some(5.5))], 200), Ok(true), "a run trained anew");
        assert!(check_points(&a, &[(30, Some(3.0)), (25, Some(3.0))], 200).is_err());
        assert!(check_points(&a, &[(300, Some(3.0))], 200).is_err());
        assert!(check_points(&a, &[(30, Some(-1.0))], 200).is_err());
        assert!(check_points(&a, &[], 200).is_err());
        let full: Vec<Point> = (0..MAX_CURVE_POINTS as u32).map(|s| (s, Some(1.0))).collect();
        assert!(check_points(&full, &[(MAX_CURVE_POINTS as u32, Some(1.0))], 5000).is_err());
    }

    #[test]
    fn a_run_diverged_when_its_loss_went_non_finite_or_ended_above_its_start() {
        assert!(!diverged(&[(0, Some(5.5)), (10, Some(3.0))]));
        assert!(diverged(&[(0, Some(5.5)), (10, None)]));
        assert!(diverged(&[(0, Some(5.5)), (10, Some(2.0)), (20, Some(7.0))]));
        assert!(!diverged(&[(0, Some(5.5))]));
        assert!(!diverged(&[]));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
