//! What a lesson step does to the walk-through: its focus picks the beat
//! that shows it (a tensor's op, forward or, for `grad.…`, backward; a
//! layer's first op; AdamW's update), its action sets the prompt or plays
//! a pass. Requests wait in [`WalkView::wanted`] until the picture is laid
//! out, then go in order: the beat, then the playing.

use super::layout::{Beat, OpKind, TourPass};
use super::{Shown, WalkView};
use crate::app::lesson::{LessonAction, LessonFocus};
use crate::app::scenes::Scene;
use crate::lesson::{Action, Focus};
use bevy::prelude::*;

/// A lesson's request, applied once the picture has its beats.
#[derive(Clone, Debug, PartialEq)]
pub enum Wanted {
    /// Show the beat of this focus (paused there).
    Show(Focus),
    /// Play this pass from its first beat.
    Play(TourPass),
}

pub fn register(app: &mut App) {
    app.add_observer(lesson_focus).add_observer(lesson_action);
}

/// The beat that shows `focus`, if the tour has one.
pub fn beat_for(focus: &Focus, beats: &[Beat]) -> Option<usize> {
    let first = |f: &dyn Fn(&Beat) -> bool| beats.iter().position(f);
    match focus {
        Focus::Tensor(name) => match name.strip_prefix("grad.") {
            Some(node) => first(&|b| b.pass == TourPass::Backward && b.node.as_deref() == Some(node)),
            None => first(&|b| b.pass == TourPass::Forward && b.node.as_deref() == Some(name)),
        },
        Focus::Layer(name) => {
            let forward = |kind: OpKind| first(&|b| b.pass == TourPass::Forward && b.kind == kind);
            match name.as_str() {
                "embeddings" => forward(OpKind::Embedding),
                "ln_f" => forward(OpKind::FinalNorm),
                "head" => forward(OpKind::Logits),
                _ => {
                    let layer: usize = name.strip_prefix("h.")?.parse().ok()?;
                    first(&|b| b.pass == TourPass::Forward && b.layer == Some(layer))
                }
            }
        }
        Focus::Stage(stage) if stage == "AdamW" => first(&|b| b.pass == TourPass::Update),
        _ => None,
    }
}

/// The first beat of `pass`.
fn first_of(pass: TourPass, beats: &[Beat]) -> Option<usize> {
    beats.iter().position(|b| b.pass == pass)
}

fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<WalkView>) {
    if event.scene == Scene::Walk && event.focus != Focus::Nothing {
        view.wanted.push(Wanted::Show(event.focus.clone()));
    }
}

/// A step's action, when the step is the walk-through's.
fn lesson_action(event: On<LessonAction>, mut view: ResMut<WalkView>) {
    if event.1 != Scene::Walk {
        return;
    }
    match &event.0 {
        Action::Prompt(text) => {
            view.prompt = text.clone();
            view.prompt_set = true;
            view.prompt_corpus.clear();
        }
        Action::PlayForward => view.wanted.push(Wanted::Play(TourPass::Forward)),
        Action::PlayBackward => view.wanted.push(Wanted::Play(TourPass::Backward)),
        _ => {}
    }
}

/// Applies the waiting requests once the picture has its beats.
pub fn apply_wanted(shown: Res<Shown>, mut view: ResMut<WalkView>) {
    let Some(walk) = &shown.walk else { return };
    if view.wanted.is_empty() {
        return;
    }
    let mut wanted = std::mem::take(&mut view.wanted);
    // The beat first, then the playing (a step may ask for both).
    wanted.sort_by_key(|w| matches!(w, Wanted::Play(_)));
    for w in wanted {
        match w {
            Wanted::Show(focus) => {
                if let Some(k) = beat_for(&focus, &walk.beats) {
                    view.playing = false;
                    view.go_to(k);
                }
            }
            Wanted::Play(pass) => {
                if let Some(k) = first_of(pass, &walk.beats) {
                    view.visited.clear();
                    view.go_to(k);
                    view.playing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(kind: OpKind, pass: TourPass, node: Option<&str>, layer: Option<usize>) -> Beat {
        Beat {
            kind,
            pass,
            node: node.map(str::to_string),
            layer,
            slabs: vec![],
        }
    }

    #[test]
    fn a_focus_finds_the_beat_that_shows_it() {
        use OpKind::*;
        use TourPass::*;
        let beats = vec![
            beat(Overview, Forward, None, None),
            beat(Embedding, Forward, Some("emb"), None),
            beat(Fc, Forward, Some("h.0.mlp.fc"), Some(0)),
            beat(Fc, Forward, Some("h.1.mlp.fc"), Some(1)),
            beat(FinalNorm, Forward, Some("ln_f.out"), None),
            beat(Logits, Forward, Some("logits"), None),
            beat(Loss, Backward, None, None),
            beat(Fc, Backward, Some("h.1.mlp.fc"), Some(1)),
            beat(Fc, Backward, Some("h.0.mlp.fc"), Some(0)),
            beat(Optimizer, Update, None, None),
        ];
        let t = |s: &str| Focus::Tensor(s.into());
        let l = |s: &str| Focus::Layer(s.into());
        assert_eq!(beat_for(&t("emb"), &beats), Some(1));
        assert_eq!(beat_for(&t("h.0.mlp.fc"), &beats), Some(2));
        assert_eq!(beat_for(&t("grad.h.0.mlp.fc"), &beats), Some(8));
        assert_eq!(beat_for(&t("grad.h.1.mlp.fc"), &beats), Some(7));
        assert_eq!(beat_for(&t("h.9.mlp.fc"), &beats), None);
        assert_eq!(beat_for(&l("h.1"), &beats), Some(3));
        assert_eq!(beat_for(&l("embeddings"), &beats), Some(1));
        assert_eq!(beat_for(&l("ln_f"), &beats), Some(4));
        assert_eq!(beat_for(&l("head"), &beats), Some(5));
        assert_eq!(beat_for(&Focus::Stage("AdamW".into()), &beats), Some(9));
        assert_eq!(beat_for(&Focus::Position(3), &beats), None);
        assert_eq!(first_of(Backward, &beats), Some(6));
        assert_eq!(first_of(Forward, &beats), Some(0));
    }
}
