//! The timeline shared by the scenes that show the model's state (issue
//! 52): which step of the run's time-lapse ([`crate::model::timelapse`]) a
//! scene shows instead of the model as it is now, and the control that
//! drags through it. A scene that can show a past step puts
//! [`timeline_bar`] in its toolbar; the step chosen stays when the learner
//! moves to another such scene. The Time-lapse scene plays it (its own
//! toolbar moves the same [`Timeline`]), and the Attention scene shows its
//! maps "as it was" there.

use crate::model::timelapse::{Frame, TimeLapse};
use bevy::prelude::*;
use bevy_egui::egui;

/// The step chosen on the timeline (the frame at or before it is shown).
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeline {
    /// None: the newest frame, following the run as it records.
    pub step: Option<u64>,
}

impl Timeline {
    /// The frame shown: the last at or before the chosen step among those
    /// `keep` accepts (the first such frame if none is that early; the
    /// newest with no step chosen).
    pub fn frame<'a>(&self, t: &'a TimeLapse, keep: impl Fn(&Frame) -> bool) -> Option<(usize, &'a Frame)> {
        let kept: Vec<(usize, &Frame)> = t.frames.iter().enumerate().filter(|(_, f)| keep(f)).collect();
        match self.step {
            None => kept.last().copied(),
            Some(step) => kept.iter().rev().find(|(_, f)| f.step <= step).or(kept.first()).copied(),
        }
    }

    /// The index of the frame shown among all of `t`'s.
    pub fn index(&self, t: &TimeLapse) -> Option<usize> {
        self.frame(t, |_| true).map(|(i, _)| i)
    }

    /// Shows frame `index` of `t` (None: the newest, following the run).
    pub fn show_frame(&mut self, t: &TimeLapse, index: Option<usize>) {
        self.step = index.and_then(|i| t.frames.get(i)).map(|f| f.step);
    }
}

/// The timeline's control: a slider over the frames `keep` accepts (by
/// index, so early steps, where frames are dense, get their share), the
/// step shown, and one frame back and forth. Returns whether it changed.
pub fn timeline_bar(ui: &mut egui::Ui, t: &TimeLapse, timeline: &mut Timeline, keep: impl Fn(&Frame) -> bool) -> bool {
    let steps: Vec<u64> = t.frames.iter().filter(|f| keep(f)).map(|f| f.step).collect();
    let Some(last) = steps.len().checked_sub(1) else {
        ui.weak(crate::t!("timeline-empty"));
        return false;
    };
    let mut index = match timeline.step {
        None => last,
        Some(step) => steps.iter().rposition(|&s| s <= step).unwrap_or(0),
    };
    let before = index;
    if ui.small_button("◀").on_hover_text(crate::t!("timeline-back")).clicked() {
        index = index.saturating_sub(1);
    }
    ui.add(
        egui::Slider::new(&mut index, 0..=last)
            .show_value(false)
            .clamping(egui::SliderClamping::Always),
    )
    .on_hover_text(crate::t!("timeline-hover"));
    if ui.small_button("▶").on_hover_text(crate::t!("timeline-forward")).clicked() {
        index = (index + 1).min(last);
    }
    ui.label(crate::t!("timeline-step", step = steps[index]));
    if index != before {
        timeline.step = Some(steps[index]);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lapse(steps: &[u64]) -> TimeLapse {
        let mut t = TimeLapse::new(2, 2, 64).unwrap();
        for &step in steps {
            t.frames.push(Frame {
                step,
                loss: None,
                val_loss: None,
                copy_loss: 0.0,
                fresh_loss: 0.0,
                heads: Vec::new(),
                tensors: Vec::new(),
                predictions: Vec::new(),
                attention: (step % 20 == 0).then(Vec::new),
            });
        }
        t
    }

    #[test]
    fn the_frame_shown_is_the_last_at_or_before_the_step_among_those_kept() {
        let t = lapse(&[0, 10, 20, 30, 40]);
        let all = |_: &Frame| true;
        let maps = |f: &Frame| f.attention.is_some();
        let at = |step| Timeline { step: Some(step) };
        assert_eq!(at(25).frame(&t, all).map(|(i, f)| (i, f.step)), Some((2, 20)));
        assert_eq!(at(39).frame(&t, maps).map(|(_, f)| f.step), Some(20));
        assert_eq!(at(1000).frame(&t, maps).map(|(_, f)| f.step), Some(40));
        assert_eq!(at(0).frame(&t, |f| f.step > 5).map(|(_, f)| f.step), Some(10));
        assert!(at(0).frame(&lapse(&[]), all).is_none());
        // No step chosen: the newest (of those kept).
        let newest = Timeline::default();
        assert_eq!(newest.frame(&t, |f| f.step < 35).map(|(_, f)| f.step), Some(30));
        assert_eq!(newest.index(&t), Some(4));
        // A frame shown by its index is its step, and stays when frames come.
        let mut shown = Timeline::default();
        shown.show_frame(&t, Some(1));
        assert_eq!(shown.step, Some(10));
        assert_eq!(shown.index(&lapse(&[0, 10, 20, 30, 40, 50])), Some(1));
        shown.show_frame(&t, None);
        assert_eq!(shown, newest);
    }
}
