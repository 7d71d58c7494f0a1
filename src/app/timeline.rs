//! The timeline shared by the scenes that show the model's state (issue
//! 52): which step of the run's time-lapse ([`crate::model::timelapse`]) a
//! scene shows instead of the model as it is now, and the control that
//! drags through it. A scene that can show a past step puts
//! [`timeline_bar`] in its toolbar; the step chosen stays when the learner
//! moves to another such scene.

use crate::model::timelapse::{Frame, TimeLapse};
use bevy::prelude::*;
use bevy_egui::egui;

/// The step chosen on the timeline (the frame at or before it is shown).
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timeline {
    pub step: u64,
}

impl Timeline {
    /// The frame shown: the last at or before the chosen step among those
    /// `keep` accepts (the first such frame if none is that early).
    pub fn frame<'a>(&self, t: &'a TimeLapse, keep: impl Fn(&Frame) -> bool) -> Option<(usize, &'a Frame)> {
        let kept: Vec<(usize, &Frame)> = t.frames.iter().enumerate().filter(|(_, f)| keep(f)).collect();
        kept.iter().rev().find(|(_, f)| f.step <= self.step).or(kept.first()).copied()
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
    let mut index = steps.iter().rposition(|&s| s <= timeline.step).unwrap_or(0);
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
    if index != before || timeline.step != steps[index] {
        timeline.step = steps[index];
        return index != before;
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
        assert_eq!(Timeline { step: 25 }.frame(&t, all).map(|(i, f)| (i, f.step)), Some((2, 20)));
        assert_eq!(Timeline { step: 39 }.frame(&t, maps).map(|(_, f)| f.step), Some(20));
        assert_eq!(Timeline { step: 1000 }.frame(&t, maps).map(|(_, f)| f.step), Some(40));
        assert_eq!(Timeline { step: 0 }.frame(&t, |f| f.step > 5).map(|(_, f)| f.step), Some(10));
        assert!(Timeline { step: 0 }.frame(&lapse(&[]), all).is_none());
    }
}
