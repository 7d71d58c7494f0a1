//! The "One byte's path" scene: a prompt travelling up through the model
//! to the next byte at one position, and the gradient travelling back down
//! (Inside the model, key `flow`, is the 3D walk-through of every
//! position; this is the flat view of one, which lessons use). The prompt's
//! bytes sit at the bottom as chips; the residual stream runs up the left
//! as a highway; each block's LayerNorm → attention → add and LayerNorm →
//! MLP → add leave it on a side lane and rejoin it; every node shows the
//! chosen position's real vector (a strip of coloured cells), its name,
//! shape and one line of maths; the attention heads show where the position
//! looks (BertViz's head view); the logit lens says at each point of the
//! stream what the model would predict if it stopped there; and the
//! next-byte probabilities sit at the top. Zoomed out, one box per block;
//! a click opens a block (every op), a node (its numbers).
//!
//! ▶ plays the forward pass: a pulse travels the nodes in the program's
//! order, each filling as it arrives. ◀ plays the backward pass of the
//! position's loss: each node then shows dL/d(its value), and each op the
//! gradient norms of its weights. Every number is the program's own
//! ([`crate::flow`]), computed on the scenes' model worker from the run's
//! latest weights, on the run's GPU or the CPU ([`compute`]); the
//! picture's entities are spawned by [`draw`] from the geometry of
//! [`layout`].

mod compute;
mod draw;
mod layout;
mod report;
mod toolbar;

use super::Scene;
use crate::app::canvas::{Hover, SceneBounds, SceneCursor};
use crate::app::lesson::{LessonAction, LessonFocus, PendingFocus, ShownView};
use crate::app::training::{
    GpuDevice, Knockouts, Run, RunCreated, RunSettings, Snapshots, TensorWants, moment_names,
    param_names, question_weights,
};
use crate::app::ui::state::UiState;
use crate::app::worker::Device;
use crate::lesson::{Action, Focus};
use bevy::prelude::*;
use compute::{FlowCompute, FlowRequest};
use draw::{FlowTarget, NodeStrip, Pulse, Reveal};
pub use layout::Zoom;

/// Which pass the picture plays and shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlowPass {
    #[default]
    Forward,
    Backward,
}

/// What the scene looks at and how it plays.
#[derive(Resource, Clone, Debug)]
pub struct FlowView {
    pub prompt: String,
    /// Set once the prompt has its default.
    pub prompt_set: bool,
    /// The text the prompt was taken from: another run's text (a gallery
    /// model opened, a corpus loaded) starts from a prompt of its own.
    pub prompt_corpus: String,
    /// The position read (None: the last byte).
    pub position: Option<usize>,
    pub zoom: Zoom,
    pub pass: FlowPass,
    /// How far the pulse has gone, in nodes along the pass's order.
    pub progress: f32,
    pub playing: bool,
    /// Nodes a second.
    pub speed: f32,
    /// The nodes the pulse reached, in the order it reached them (for
    /// checks: the program's order forward, the reverse backward).
    pub visited: Vec<String>,
    /// A node to open (the op zoom) once the flow that has it arrives (a
    /// lesson's focus on a tensor before the first flow).
    pub open_tensor: Option<String>,
}

impl Default for FlowView {
    fn default() -> Self {
        Self {
            prompt: String::new(),
            prompt_set: false,
            prompt_corpus: String::new(),
            position: None,
            zoom: Zoom::Model,
            pass: FlowPass::Forward,
            progress: 0.0,
            playing: true,
            speed: 4.0,
            visited: Vec::new(),
            open_tensor: None,
        }
    }
}

impl FlowView {
    /// Plays `pass` from its start.
    pub fn play(&mut self, pass: FlowPass) {
        self.pass = pass;
        self.progress = 0.0;
        self.playing = true;
        self.visited.clear();
    }
}

/// Everything the picture spawned (despawned when it is rebuilt).
#[derive(Component)]
pub struct FlowItem;

/// What the picture was built from: rebuilt when it changes.
#[derive(Resource, Default, PartialEq, Clone, Debug)]
struct Built(Option<(u64, Zoom, FlowPass, u32)>);

/// The current layout (for clicks, the pulse and headless checks).
#[derive(Resource, Default)]
pub struct Shown {
    pub layout: Option<layout::Picture>,
}

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.add_systems(Update, publish_view.run_if(in_state(Scene::Path)));
        app.init_resource::<FlowView>()
            .init_resource::<FlowCompute>()
            .init_resource::<Built>()
            .init_resource::<Shown>()
            .add_observer(lesson_focus)
            .add_observer(lesson_action)
            .add_systems(OnExit(Scene::Path), leave)
            .add_systems(
                Update,
                (new_run, ask, rebuild, animate, follow, click, hover)
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Path)),
            )
            .add_systems(
                bevy_egui::EguiPrimaryContextPass,
                toolbar::toolbar
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Path)),
            );
    }
}

/// Leaving: stop asking for the weights; the next visit builds again.
fn leave(mut wants: ResMut<TensorWants>, mut built: ResMut<Built>) {
    wants.set("flow", Vec::new());
    built.0 = None;
}

/// A new run: compute again at once.
fn new_run(mut created: MessageReader<RunCreated>, mut compute: ResMut<FlowCompute>) {
    if created.read().count() > 0 {
        compute.reset();
    }
}

/// Asks for the weights, and for a flow when the prompt, the position or
/// the weights changed.
fn ask(
    run: Option<Res<Run>>,
    snapshots: Res<Snapshots>,
    knockouts: Res<Knockouts>,
    mut wants: ResMut<TensorWants>,
    mut view: ResMut<FlowView>,
    mut compute: ResMut<FlowCompute>,
    (gpu, settings): (Res<GpuDevice>, Res<RunSettings>),
) {
    compute.poll();
    let Some(run) = run else { return };
    // The weights, and AdamW's moments for the end of the backward pass.
    let params = param_names(&run.program);
    // The moments only while the backward pass is shown (AdamW's update
    // ends it): they are twice the weights' size, read back four times a
    // second while the run trains.
    let moments: Vec<String> = if view.pass == FlowPass::Backward {
        moment_names(&run.program)
    } else {
        Vec::new()
    };
    wants.set(
        "flow",
        params
            .iter()
            .cloned()
            .chain(moments.iter().cloned())
            .collect(),
    );
    if !view.prompt_set || (!view.prompt_corpus.is_empty() && view.prompt_corpus != run.corpus_name)
    {
        view.prompt_corpus = run.corpus_name.clone();
        view.prompt = settings.corpus.prompt_or_romeo(run.config().ctx);
        view.prompt_set = true;
    }
    if view.prompt.is_empty() {
        return;
    }
    let Some(snapshot) = &snapshots.latest else {
        return;
    };
    let request = FlowRequest {
        prompt: view.prompt.clone().into_bytes(),
        position: view.position,
        step: snapshot.step,
        knockouts: knockouts.0.clone(),
        with_optimizer: !moments.is_empty() && snapshot.has_moments(&run.program),
    };
    // The weights are copied out only for a question the worker takes.
    if !compute.would_start(&request) {
        return;
    }
    // The model as the learner has taken it apart (Take it apart's
    // knockouts), and AdamW's moments as read back with the weights.
    let Some((params, optimizer)) =
        question_weights(snapshot, &run.program, &knockouts, request.with_optimizer)
    else {
        return;
    };
    compute.request(
        request,
        run.config(),
        Device::of_run(run.engine.on_gpu(), &gpu),
        params,
        optimizer,
    );
}

/// Rebuilds the picture when the flow, the zoom, the pass or the type size
/// changed.
#[allow(clippy::too_many_arguments)]
fn rebuild(
    mut commands: Commands,
    run: Option<Res<Run>>,
    compute: Res<FlowCompute>,
    mut view: ResMut<FlowView>,
    mut built: ResMut<Built>,
    mut shown: ResMut<Shown>,
    old: Query<Entity, With<FlowItem>>,
    mut images: ResMut<Assets<Image>>,
    mut bounds: ResMut<SceneBounds>,
) {
    let (Some(run), Some(computed)) = (run, compute.flow()) else {
        return;
    };
    if let Some(name) = view.open_tensor.take()
        && let Some(i) = computed.flow.nodes.iter().position(|n| n.name == name)
    {
        view.zoom = Zoom::Op(i);
    }
    // Labels keep their size relative to the picture (at 1.35× they
    // overlapped the strips and each other); presenter mode makes them
    // large on screen by showing the picture as wide as the screen instead
    // ([`follow`]).
    let text_scale = 1.0;
    let key = (
        compute.generation,
        view.zoom.clone(),
        view.pass,
        (text_scale * 100.0) as u32,
    );
    if built.0.as_ref() == Some(&key) {
        return;
    }
    let fresh_flow = built.0.as_ref().is_none_or(|b| b.0 != key.0);
    built.0 = Some(key);
    for e in &old {
        commands.entity(e).despawn();
    }
    let flow = &computed.flow;
    if let Zoom::Op(node) = view.zoom
        && node < flow.nodes.len()
    {
        let mut b = Rect::default();
        let worked = computed.worked.get(node).and_then(Option::as_ref);
        draw::spawn_numbers(
            &mut commands,
            &run.program,
            flow,
            node,
            worked,
            text_scale,
            &mut b,
        );
        bounds.0 = b;
        shown.layout = None;
        return;
    }
    let names: Vec<String> = flow.nodes.iter().map(|n| n.name.clone()).collect();
    let layout = layout::layout(&names, flow.tokens.len(), flow.position, &view.zoom);
    draw::spawn(
        &mut commands,
        &mut images,
        &run.program,
        computed,
        &layout,
        &view,
        text_scale,
    );
    commands.spawn((
        Sprite::from_color(draw::FORWARD, Vec2::splat(26.0)),
        Transform::from_translation(layout.nodes[0].anchor.extend(5.0))
            .with_rotation(Quat::from_rotation_z(std::f32::consts::FRAC_PI_4)),
        Pulse,
        FlowItem,
        DespawnOnExit(Scene::Path),
    ));
    bounds.0 = layout.bounds;
    shown.layout = Some(layout);
    // New numbers while nothing plays: show them all at once (a run that
    // trains redraws without replaying).
    if fresh_flow && !view.playing {
        view.progress = names.len() as f32;
    }
}

/// The pass's order of the nodes: the program's, or its reverse.
fn order(n: usize, pass: FlowPass) -> Vec<usize> {
    match pass {
        FlowPass::Forward => (0..n).collect(),
        FlowPass::Backward => (0..n).rev().collect(),
    }
}

/// Moves the pulse and fills each node it has reached.
fn animate(
    time: Res<Time>,
    compute: Res<FlowCompute>,
    shown: Res<Shown>,
    mut view: ResMut<FlowView>,
    ui_state: Res<UiState>,
    mut strips: Query<(&NodeStrip, &mut Sprite), Without<Pulse>>,
    mut pulses: Query<(&mut Transform, &mut Sprite, &mut Visibility), With<Pulse>>,
    mut reveals: Query<(&Reveal, &mut Visibility), Without<Pulse>>,
) {
    let (Some(layout), Some(computed)) = (&shown.layout, compute.flow()) else {
        return;
    };
    let n = layout.nodes.len();
    let order = order(n, view.pass);
    if view.playing {
        let before = view.progress;
        let mut after = (before + time.delta_secs() * view.speed).min(n as f32);
        if ui_state.reduced_motion {
            // Jumps from node to node, no gliding.
            after = after.floor().max(before.floor());
        }
        view.progress = after;
        if after >= n as f32 {
            view.playing = false;
        }
    }
    // The nodes reached, in order (recorded once each).
    let reached = (view.progress.floor() as usize + 1).min(n);
    while view.visited.len() < reached {
        let k = view.visited.len();
        let name = computed.flow.nodes[order[k]].name.clone();
        view.visited.push(name);
    }
    let rank: Vec<usize> = {
        let mut r = vec![0; n];
        for (k, &node) in order.iter().enumerate() {
            r[node] = k;
        }
        r
    };
    for (strip, mut sprite) in &mut strips {
        let lit = (rank[strip.node] as f32) < view.progress.max(0.0) + 1.0 - 1e-6
            && view.progress > 0.0
            || view.progress >= n as f32;
        let alpha = if lit { 1.0 } else { 0.16 };
        if (sprite.color.alpha() - alpha).abs() > 1e-3 {
            sprite.color.set_alpha(alpha);
        }
    }
    // The gradient norms while the backward pass plays; AdamW's update of
    // each weight once it has reached the bottom.
    let ended = view.progress >= n as f32;
    for (reveal, mut visibility) in &mut reveals {
        let show = reveal.at_end == ended;
        let want = if show {
            Visibility::Inherited
        } else {
            Visibility::Hidden
        };
        if *visibility != want {
            *visibility = want;
        }
    }
    let colour = if view.pass == FlowPass::Forward {
        draw::FORWARD
    } else {
        draw::BACKWARD
    };
    for (mut transform, mut sprite, mut visibility) in &mut pulses {
        let done = view.progress >= (n - 1) as f32 && !view.playing;
        *visibility = if done {
            Visibility::Hidden
        } else {
            Visibility::Visible
        };
        let at = pulse_at(layout, &view, ui_state.reduced_motion);
        transform.translation = at.extend(5.0);
        sprite.color = colour;
    }
}

/// Where the pulse is: between the anchors of the nodes it is passing, in
/// the pass's order (on a node, with reduced motion).
fn pulse_at(layout: &layout::Picture, view: &FlowView, reduced_motion: bool) -> Vec2 {
    let n = layout.nodes.len();
    let order = order(n, view.pass);
    let k = (view.progress.max(0.0).floor() as usize).min(n - 1);
    let a = layout.nodes[order[k]].anchor;
    let b = layout.nodes[order[(k + 1).min(n - 1)]].anchor;
    let f = if reduced_motion {
        0.0
    } else {
        view.progress.fract()
    };
    a.lerp(b, f)
}

/// In presenter mode the picture is shown as wide as the screen, so that
/// its own labels read from the back of a room (about 1.8× their size when
/// the whole model fits at 1280×720), and the camera follows the pulse up
/// and down the model; a learner pans the rest (drag, arrows). Elsewhere
/// the whole picture fits.
fn follow(
    ui_state: Res<UiState>,
    view: Res<FlowView>,
    shown: Res<Shown>,
    cameras: Query<&Camera, With<crate::app::canvas::SceneCamera>>,
    mut bounds: ResMut<SceneBounds>,
) {
    let Some(layout) = &shown.layout else {
        return;
    };
    let whole = layout.bounds;
    let viewport = cameras.iter().find_map(|c| c.logical_viewport_size());
    let want = match viewport {
        Some(v) if ui_state.presenter && v.x >= 1.0 && v.y >= 1.0 => {
            // The height in view when the width fits (the camera's fit).
            let free = (v.y - crate::app::canvas::camera::TOOLBAR_PX).max(v.y * 0.5);
            // Less the toolbar's second row and the status line above, and
            // as much below, so neither covers the picture's ends.
            let visible = (free - 120.0).max(free * 0.5) * whole.width() * 1.04 / v.x;
            if visible >= whole.height() {
                whole
            } else {
                let half = visible / 2.0;
                let y = pulse_at(layout, &view, ui_state.reduced_motion)
                    .y
                    .clamp(whole.min.y + half, whole.max.y - half);
                Rect::new(whole.min.x, y - 1.0, whole.max.x, y + 1.0)
            }
        }
        _ => whole,
    };
    // Moves of under a unit leave the camera (and the learner's pan) alone.
    let b = bounds.0;
    if (b.min - want.min).abs().max_element() > 0.5 || (b.max - want.max).abs().max_element() > 0.5
    {
        bounds.0 = want;
    }
}

/// Clicks: a chip reads the model there, a block opens, a node shows its
/// numbers, a head opens the Attention scene at that head.
#[allow(clippy::too_many_arguments)]
fn click(
    pointer: crate::app::canvas::parts::PointerInput,
    cursor: Res<SceneCursor>,
    targets: Query<(&FlowTarget, &crate::app::canvas::SceneRegion)>,
    mut view: ResMut<FlowView>,
    compute: Res<FlowCompute>,
    mut next_scene: ResMut<NextState<Scene>>,
    mut pending: ResMut<PendingFocus>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
) {
    if !pointer.just_released()
        || (egui.is_some_and(|e| e.wants_any_pointer_input()) && !pointer.from_keyboard())
    {
        return;
    }
    let Some(world) = cursor.0 else { return };
    let Some((target, _)) = targets.iter().find(|(_, r)| r.rect.contains(world)) else {
        return;
    };
    match *target {
        FlowTarget::Chip(p) => {
            let last = compute
                .flow()
                .map_or(0, |c| c.flow.tokens.len().saturating_sub(1));
            view.position = (p != last).then_some(p);
        }
        FlowTarget::Block(b) => view.zoom = Zoom::Block(b),
        FlowTarget::Node(i) => view.zoom = Zoom::Op(i),
        FlowTarget::Head { layer, head } => {
            pending.set(LessonFocus {
                scene: Scene::Attention,
                focus: Focus::Head { layer, head },
                preset: String::new(),
            });
            next_scene.set(Scene::Attention);
        }
    }
}

/// Names what is under the pointer: a node's value at a cell, a head.
fn hover(
    cursor: Res<SceneCursor>,
    shown: Res<Shown>,
    compute: Res<FlowCompute>,
    view: Res<FlowView>,
    targets: Query<(&FlowTarget, &crate::app::canvas::SceneRegion)>,
    run: Option<Res<Run>>,
    mut hover: ResMut<Hover>,
) {
    let text = (|| {
        let world = cursor.0?;
        let computed = compute.flow()?;
        let flow = &computed.flow;
        let (target, region) = targets.iter().find(|(_, r)| r.rect.contains(world))?;
        Some(match *target {
            FlowTarget::Node(i) => {
                let layout = shown.layout.as_ref()?;
                let spot = layout.nodes.iter().find(|s| s.node == i)?;
                let values = draw::shown_values(flow, i, view.pass);
                let c = run.as_ref()?.config().d_model;
                let strip = layout::strip_for(spot.strip, values.len(), c);
                if !strip.contains(world) {
                    return Some(crate::t!("flow-hover-node", name = flow.nodes[i].name.as_str()));
                }
                let (_, j) = crate::app::canvas::cell_at(strip, world, 1, values.len());
                let what = if view.pass == FlowPass::Forward {
                    ""
                } else {
                    "dL/d "
                };
                format!(
                    "{what}{}[{j}] = {}",
                    flow.nodes[i].name,
                    crate::app::canvas::short(values[j])
                )
            }
            FlowTarget::Head { layer, head } => {
                crate::t!("flow-hover-head", layer = layer, head = head)
            }
            FlowTarget::Chip(p) => crate::t!(
                "flow-hover-chip",
                position = p,
                byte = crate::app::canvas::chip_text(flow.tokens[p]),
            ),
            FlowTarget::Block(b) => crate::t!("flow-hover-block", name = region.name.as_str(), block = b),
        })
    })();
    if hover.0 != text {
        hover.0 = text;
    }
}

/// A lesson step here: a position, a block (`h.1`), an op's tensor.
fn lesson_focus(event: On<LessonFocus>, mut view: ResMut<FlowView>, compute: Res<FlowCompute>) {
    if event.scene != Scene::Path {
        return;
    }
    match &event.focus {
        Focus::Nothing => view.zoom = Zoom::Model,
        Focus::Position(p) => view.position = Some(*p),
        Focus::Layer(name) => {
            view.zoom = match name.strip_prefix("h.").and_then(|i| i.parse().ok()) {
                Some(b) => Zoom::Block(b),
                None => Zoom::Model,
            }
        }
        Focus::Tensor(name) => match compute
            .flow()
            .and_then(|c| c.flow.nodes.iter().position(|n| &n.name == name))
        {
            Some(i) => view.zoom = Zoom::Op(i),
            // Not computed yet: opened when the flow arrives.
            None => view.open_tensor = Some(name.clone()),
        },
        _ => {}
    }
}

/// A lesson step's prompt, or its pass to play.
fn lesson_action(event: On<LessonAction>, mut view: ResMut<FlowView>) {
    match &event.0 {
        Action::Prompt(text) => {
            view.prompt = text.clone();
            view.prompt_set = true;
            // Chosen, not a default: it stays when the text changes.
            view.prompt_corpus.clear();
            view.position = None;
            view.play(FlowPass::Forward);
        }
        Action::PlayForward => view.play(FlowPass::Forward),
        Action::PlayBackward => view.play(FlowPass::Backward),
        _ => {}
    }
}

/// What the scene shows, for a class's "send my view": the prompt and the position read.
fn publish_view(view: Res<FlowView>, mut shown: ResMut<ShownView>) {
    ShownView::publish(&mut shown, Scene::Path, Some(view.prompt.as_str()), None, view.position);
}
