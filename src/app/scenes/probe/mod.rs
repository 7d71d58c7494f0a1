//! The "Take it apart" scene: four tools on the run's weights and a prompt,
//! each through the program itself ([`crate::interventions`]), live as the
//! run trains:
//! - **the logit lens**: points of the stream × positions, each cell the
//!   byte the model would predict there if it stopped at that point;
//! - **knock out**: each head's and each MLP's importance (the loss rise
//!   without it); a click knocks a part out for good (sampling too), with
//!   the next byte before and after;
//! - **patching**: where in the model the information that decides the
//!   answer lives (a clean prompt's stream into a corrupted one's);
//! - **why this byte**: each part's share of logit(A) − logit(B).
//!
//! The numbers come from a worker ([`compute`]); the picture is entities
//! ([`draw`]); the toolbar picks the tool and its inputs ([`toolbar`]).

mod compute;
mod draw;
mod report;
mod toolbar;

use super::Scene;
use crate::app::canvas::{Hover, SceneBounds, SceneCursor};
use crate::app::lesson::{LessonAction, LessonFocus, ShownView};
use crate::app::timeline::{AsItWas, PastWeights};
use crate::app::training::{
    GpuDevice, Knockouts, Run, RunCreated, ShownStep, Snapshots, TensorWants, param_names,
};
use crate::app::worker::Device;
use crate::interventions::Part;
use crate::lesson::{Action, Focus};
use bevy::prelude::*;
use compute::{ProbeCompute, Question, Tool};
use draw::{CellText, KnockCell};

/// What the scene asks.
#[derive(Resource, Clone, Debug)]
pub struct ProbeView {
    pub tool: Tool,
    pub prompt: String,
    pub prompt_set: bool,
    /// The text the prompt was taken from: another run's text (a gallery
    /// model opened, a corpus loaded) starts from a prompt of its own.
    pub prompt_corpus: String,
    /// The corrupted prompt for patching ("" until the prompt has one).
    pub corrupt: String,
    /// The "why" tool's two bytes as typed (`e,a`; empty: the model's top two).
    pub pair: String,
    /// The importance map measures the loss on the run's validation rows
    /// (else on the prompt).
    pub validation: bool,
}

impl Default for ProbeView {
    fn default() -> Self {
        Self {
            tool: Tool::Lens,
            prompt: String::new(),
            prompt_set: false,
            prompt_corpus: String::new(),
            corrupt: String::new(),
            pair: String::new(),
            validation: false,
        }
    }
}

/// The default corruption: the first letter of the prompt's last word
/// changed (same length, so patching can compare; the answer then usually
/// changes, and the picture shows the information travelling from that
/// byte to the last).
fn corrupt_of(prompt: &str) -> String {
    let mut bytes = prompt.as_bytes().to_vec();
    let end = bytes.iter().rposition(|b| b.is_ascii_alphabetic());
    let start = end.map(|e| {
        bytes[..e]
            .iter()
            .rposition(|b| !b.is_ascii_alphabetic())
            .map_or(0, |s| s + 1)
    });
    if let Some(i) = start {
        bytes[i] = match bytes[i] {
            b'z' => b'a',
            b'Z' => b'A',
            b => b + 1,
        };
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Everything the picture spawned.
#[derive(Component)]
pub struct ProbeItem;

/// What the picture was built from.
#[derive(Resource, Default, PartialEq, Clone, Debug)]
struct Built(Option<(u64, Vec<Part>, u32)>);

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.add_systems(Update, publish_view.run_if(in_state(Scene::Probe)));
        app.init_resource::<ProbeView>()
            .init_resource::<ProbeCompute>()
            .init_resource::<Built>()
            .add_observer(lesson_focus)
            .add_observer(lesson_action)
            .add_systems(OnExit(Scene::Probe), leave)
            .add_systems(
                Update,
                (new_run, ask, rebuild, click, hover)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Probe)),
            )
            .add_systems(
                bevy_egui::EguiPrimaryContextPass,
                toolbar::toolbar
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Probe)),
            );
    }
}

fn leave(mut wants: ResMut<TensorWants>, mut built: ResMut<Built>, mut marked: ResMut<ShownStep>) {
    wants.set("probe", Vec::new());
    marked.0 = None;
    built.0 = None;
}

fn new_run(
    mut created: MessageReader<RunCreated>,
    mut compute: ResMut<ProbeCompute>,
    mut knockouts: ResMut<Knockouts>,
) {
    if created.read().count() > 0 {
        compute.reset();
        // A new model has new parts to take apart.
        knockouts.0.clear();
    }
}

fn ask(
    run: Option<Res<Run>>,
    snapshots: Res<Snapshots>,
    knockouts: Res<Knockouts>,
    gpu: Res<GpuDevice>,
    mut wants: ResMut<TensorWants>,
    mut view: ResMut<ProbeView>,
    mut compute: ResMut<ProbeCompute>,
    settings: Res<crate::app::training::RunSettings>,
    (as_it_was, past, mut marked): (Res<AsItWas>, Res<PastWeights>, ResMut<ShownStep>),
) {
    compute.poll();
    let Some(run) = run else { return };
    wants.set("probe", param_names(&run.program));
    if !view.prompt_set || (!view.prompt_corpus.is_empty() && view.prompt_corpus != run.corpus_name)
    {
        view.prompt_corpus = run.corpus_name.clone();
        view.prompt = settings.corpus.prompt_or_romeo(run.config().ctx);
        view.corrupt = corrupt_of(&view.prompt);
        view.prompt_set = true;
    }
    if view.prompt.len() < 2 {
        return;
    }
    // The loss chart marks the step of the model as it was.
    marked.set_if_neq(ShownStep(past.marked_step(*as_it_was)));
    let Some(snapshot) = past.shown(*as_it_was, snapshots.latest.as_ref()) else {
        return;
    };
    let validation = view.validation && view.tool == Tool::Knockout;
    let question = Question {
        tool: view.tool,
        prompt: view.prompt.clone().into_bytes(),
        corrupt: view.corrupt.clone().into_bytes(),
        bytes: crate::probe::parse_byte_pair(&view.pair).ok(),
        knockouts: knockouts.0.clone(),
        validation,
        step: snapshot.step,
        as_it_was: as_it_was.0,
    };
    // The weights are copied out only for a question the worker takes.
    if !compute.would_start(&question) {
        return;
    }
    let Some(params) = snapshot.params(&run.program) else {
        return;
    };
    let device = Device::of_run(run.engine.on_gpu(), &gpu);
    let rows = if validation {
        run.validation_rows.clone()
    } else {
        Vec::new()
    };
    compute.request(question, run.config(), device, params, rows);
}

#[allow(clippy::too_many_arguments)]
fn rebuild(
    mut commands: Commands,
    compute: Res<ProbeCompute>,
    view: Res<ProbeView>,
    knockouts: Res<Knockouts>,
    mut built: ResMut<Built>,
    old: Query<Entity, With<ProbeItem>>,
    mut bounds: ResMut<SceneBounds>,
) {
    let Some((question, answer)) = compute.last() else {
        return;
    };
    if question.tool != view.tool {
        return;
    }
    // Labels keep their size in presenter mode: at 1.35× the titles ran
    // past the picture at 1280×720.
    let scale = 1.0;
    let key = (
        compute.generation,
        knockouts.0.clone(),
        (scale * 100.0) as u32,
    );
    if built.0.as_ref() == Some(&key) {
        return;
    }
    built.0 = Some(key);
    for e in &old {
        commands.entity(e).despawn();
    }
    bounds.0 = match answer {
        Ok(a) => draw::spawn(&mut commands, a, &knockouts.0, scale),
        Err(e) => draw::spawn_message(&mut commands, e, scale),
    };
}

/// A click on the importance map knocks a part out, or back in.
fn click(
    pointer: crate::app::canvas::parts::PointerInput,
    cursor: Res<SceneCursor>,
    cells: Query<(&KnockCell, &crate::app::canvas::SceneRegion)>,
    mut knockouts: ResMut<Knockouts>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
) {
    if !pointer.just_released()
        || (egui.is_some_and(|e| e.wants_any_pointer_input()) && !pointer.from_keyboard())
    {
        return;
    }
    let Some(world) = cursor.0 else { return };
    if let Some((cell, _)) = cells.iter().find(|(_, r)| r.rect.contains(world)) {
        match knockouts.0.iter().position(|p| *p == cell.0) {
            Some(i) => {
                knockouts.0.remove(i);
            }
            None => knockouts.0.push(cell.0),
        }
    }
}

fn hover(
    cursor: Res<SceneCursor>,
    cells: Query<(&CellText, &Sprite, &GlobalTransform)>,
    mut hover: ResMut<Hover>,
) {
    let text = cursor.0.and_then(|world| {
        cells.iter().find_map(|(t, sprite, at)| {
            let size = sprite.custom_size?;
            Rect::from_center_size(at.translation().truncate(), size)
                .contains(world)
                .then(|| t.0.clone())
        })
    });
    if hover.0 != text {
        hover.0 = text;
    }
}

/// A lesson step here: a head or a layer opens the knockout map.
fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<ProbeView>) {
    if event.scene == Scene::Probe && matches!(event.focus, Focus::Head { .. } | Focus::Layer(_)) {
        view.tool = Tool::Knockout;
    }
}

/// A lesson step's prompt becomes this scene's (and its corruption); its
/// tool is shown.
fn lesson_action(event: On<LessonAction>, mut view: ResMut<ProbeView>) {
    match &event.0 {
        Action::Prompt(text) => {
            view.prompt = text.clone();
            view.corrupt = corrupt_of(text);
            view.prompt_set = true;
            // Chosen, not a default: it stays when the text changes.
            view.prompt_corpus.clear();
        }
        Action::Tool(key) => {
            if let Some(t) = Tool::ALL.into_iter().find(|t| t.key() == key) {
                view.tool = t;
            }
        }
        _ => {}
    }
}

/// What the scene shows, for a class's "send my view": the prompt.
fn publish_view(view: Res<ProbeView>, mut shown: ResMut<ShownView>) {
    ShownView::publish(&mut shown, Scene::Probe, Some(view.prompt.as_str()), None, None);
}
