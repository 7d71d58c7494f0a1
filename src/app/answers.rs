//! A question's answers as a class gave them: what the lesson's narration
//! shows of a live class ([`ClassView`]) and the bars of the class's
//! choices, shared by the narration and the teacher's class panel
//! (`class::panel`). Below both, so neither leans on the other.

use bevy_egui::egui;

const BLUE: egui::Color32 = egui::Color32::from_rgb(110, 160, 240);
const GREEN: egui::Color32 = egui::Color32::from_rgb(110, 220, 130);

/// The class's part in the narration panel.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassView {
    /// A student before the reveal: their pick is not marked right or wrong.
    pub hide_answer: bool,
    /// Paced: Next stops at the teacher's step.
    pub max_step: Option<usize>,
    /// The class's answers to this step's question, once revealed.
    pub counts: Option<Vec<u32>>,
    /// The student's answer is on the teacher's machine.
    pub answer_sent: bool,
}

/// Bars of the class's answers: one per choice, the right one green once
/// `answer` is known (the teacher always knows it).
/// In `columns` columns (two under a wide narration, so the revealed bars
/// take no more rows than the buttons they replace need).
pub fn answer_bars(
    ui: &mut egui::Ui,
    choices: &[String],
    counts: &[u32],
    answer: Option<usize>,
    size: f32,
    columns: usize,
) {
    if columns > 1 {
        let rows = choices.len().div_ceil(columns);
        ui.columns(columns, |cols| {
            for (c, col) in cols.iter_mut().enumerate() {
                let range = (c * rows).min(choices.len())..((c + 1) * rows).min(choices.len());
                let offset = range.start;
                let shifted = answer.and_then(|a| a.checked_sub(offset));
                let counts: Vec<u32> = range.clone().map(|i| counts.get(i).copied().unwrap_or(0)).collect();
                let total: u32 = counts.iter().sum();
                bars(col, &choices[range], &counts, shifted, size, total);
            }
        });
    } else {
        let total: u32 = counts.iter().sum();
        bars(ui, choices, counts, answer, size, total);
    }
}

fn bars(ui: &mut egui::Ui, choices: &[String], counts: &[u32], answer: Option<usize>, size: f32, total: u32) {
    let width = ui.available_width().clamp(160.0, 520.0);
    for (i, choice) in choices.iter().enumerate() {
        let n = counts.get(i).copied().unwrap_or(0);
        let share = if total > 0 { n as f32 / total as f32 } else { 0.0 };
        let right = answer == Some(i);
        ui.horizontal(|ui| {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(width * 0.45, size + 8.0), egui::Sense::hover());
            let painter = ui.painter_at(rect);
            painter.rect_filled(rect, 4.0, egui::Color32::from_rgb(36, 40, 54));
            let mut bar = rect;
            bar.set_width(rect.width() * share);
            painter.rect_filled(bar, 4.0, if right { GREEN } else { BLUE });
            painter.text(
                rect.left_center() + egui::vec2(6.0, 0.0),
                egui::Align2::LEFT_CENTER,
                format!("{n}"),
                egui::FontId::proportional(size),
                egui::Color32::WHITE,
            );
            let mut text = egui::RichText::new(choice).size(size);
            if right {
                text = text.color(GREEN).strong();
            }
            ui.add(egui::Label::new(text).wrap());
        });
    }
}

