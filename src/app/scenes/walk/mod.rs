//! "Inside the model" (scene key `flow`): a 3D walk through every tensor of one real
//! forward and backward pass of the prompt, all positions at once, on the
//! model the run trains. Every activation stands at its shape (features ×
//! positions, the prompt's bytes over its columns), every weight to the
//! left of the op that uses it, the heads as a deck in depth; the tour
//! flies from op to op in the program's order, then back in reverse while
//! each tensor turns into its gradient, and ends on AdamW's update of
//! every weight. The numbers are the program's own
//! ([`compute`]: the calls of `tinygpt flow --all-positions --backward`),
//! recomputed from the latest weights while the run trains.
//!
//! The geometry is [`layout`], the camera [`tour`] (a function of the
//! timeline: play, scrub, step) with the learner's zoom and pan on top
//! ([`look`]), the quads and labels [`draw`], the numbers on cells wide
//! enough ([`numbers`]), the worked example's outlines ([`marks`]) and its
//! dot product added term by term ([`sweep`]), what the flat view read at
//! the last byte ([`context`]), the colours [`colour`], the toolbar and narration
//! [`panel`] (in a mixed-precision run it says which of the training step's
//! kernels ran each op on the tensor cores: [`kernels`]), the reports [`report`].

mod colour;
mod compute;
mod context;
mod draw;
mod kernels;
mod layout;
mod lesson;
mod look;
mod marks;
mod numbers;
mod panel;
mod report;
mod sweep;
mod tour;

use super::Scene;
use crate::app::canvas::{Hover, SceneCamera};
use crate::app::lesson::ShownView;
use crate::app::timeline::{AsItWas, PastWeights};
use crate::app::training::{
    GpuDevice, Knockouts, Run, RunCreated, RunSettings, ShownStep, Snapshots, TensorWants,
    moment_names, param_names, question_weights,
};
use crate::app::ui::state::UiState;
use crate::app::worker::Device;
use bevy::camera::{PerspectiveProjection, Projection};
use bevy::prelude::*;
use colour::CellLens;
use compute::{WalkCompute, WalkRequest};
use draw::{ScreenLabel, SlabFrame, SlabQuad};
use layout::{TourPass, WalkLayout};

/// What the walk-through shows and how it plays.
#[derive(Resource, Clone, Debug)]
pub struct WalkView {
    pub prompt: String,
    /// The prompt was chosen (a default is replaced when the text changes).
    pub prompt_set: bool,
    pub prompt_corpus: String,
    /// The timeline: beat `k` spans `k..k + 1`.
    pub t: f32,
    pub playing: bool,
    /// Beats a second.
    pub speed: f32,
    /// The beats reached while playing, in order (for checks: the
    /// program's order forward, the reverse backward).
    pub visited: Vec<usize>,
    /// The learner's zoom and pan on the beat's framing.
    pub look: look::Look,
    /// A zoom to open with, centred on the beat's output (`--walk-zoom`),
    /// until the picture is laid out.
    pub zoom_on_output: Option<f32>,
    /// A lesson step's requests, applied once the picture is laid out.
    pub wanted: Vec<lesson::Wanted>,
}

impl Default for WalkView {
    fn default() -> Self {
        Self {
            prompt: String::new(),
            prompt_set: false,
            prompt_corpus: String::new(),
            t: 0.0,
            playing: false,
            speed: 0.5,
            visited: Vec::new(),
            look: look::Look::default(),
            wanted: Vec::new(),
            zoom_on_output: None,
        }
    }
}

impl WalkView {
    /// The beat the timeline is in.
    pub fn beat(&self) -> usize {
        self.t.max(0.0).floor() as usize
    }

    /// Jumps to beat `k` (the camera cuts there; playing goes on from it).
    pub fn go_to(&mut self, k: usize) {
        self.t = k as f32 + tour::MOVE_SHARE;
    }
}

/// Everything the picture spawned.
#[derive(Component)]
pub struct WalkItem;

/// The picture shown: its layout and the pass it was drawn from.
#[derive(Resource, Default)]
pub struct Shown {
    pub walk: Option<WalkLayout>,
    /// The compute generation it was drawn from.
    generation: u64,
    /// The prompt's bytes it was drawn with (labels over the columns).
    tokens: Vec<u8>,
    /// The beats' camera poses for the last frame size.
    poses: Vec<tour::Pose>,
    frame: Option<tour::FreeView>,
}

/// The scene camera as another scene left it (restored on leaving).
#[derive(Resource, Default)]
struct Before(Option<(Transform, Projection)>);

pub struct ScenePlugin;

impl Plugin for ScenePlugin {
    fn build(&self, app: &mut App) {
        report::register(app);
        app.add_systems(Update, publish_view.run_if(in_state(Scene::Walk)));
        lesson::register(app);
        let (start, zoom) = app
            .world()
            .get_resource::<super::SceneStart>()
            .map_or((None, None), |s| (s.walk_beat, s.walk_zoom));
        let mut view = WalkView::default();
        if let Some(k) = start {
            view.go_to(k);
        }
        view.zoom_on_output = zoom;
        app.insert_resource(view)
            .init_resource::<look::PointerTravel>()
            .init_resource::<numbers::NumbersShown>()
            .init_resource::<draw::SlabGrids>()
            .init_resource::<WalkCompute>()
            .init_resource::<Shown>()
            .init_resource::<Before>()
            .init_resource::<panel::NarrationHeight>()
            .init_resource::<marks::Marked>()
            .init_resource::<sweep::Sweep>()
            .add_systems(OnExit(Scene::Walk), leave)
            .add_systems(
                Update,
                (
                    enter,
                    new_run,
                    ask,
                    apply_theme,
                    rebuild,
                    lesson::apply_wanted,
                    keys,
                    advance,
                    look::steer,
                    fly,
                    shade,
                    marks::draw,
                    sweep::sweep,
                    size_labels,
                    numbers::draw_numbers,
                    hover,
                    list_parts,
                    follow_focus,
                )
                    .chain()
                    .in_set(crate::app::schedule::AppSystems::Scene)
                    .run_if(in_state(Scene::Walk)),
            )
            .add_systems(
                bevy_egui::EguiPrimaryContextPass,
                panel::panels
                    .after(crate::app::ui::draw_ui)
                    .run_if(in_state(Scene::Walk)),
            );
    }
}

/// Entering (the first frame the scene camera is still flat, which may
/// be before it was spawned at start-up): the camera looks in
/// perspective.
fn enter(
    mut cameras: Query<(&mut Transform, &mut Projection), With<SceneCamera>>,
    mut before: ResMut<Before>,
    mut shown: ResMut<Shown>,
) {
    for (mut transform, mut projection) in &mut cameras {
        if !matches!(*projection, Projection::Orthographic(_)) {
            continue;
        }
        before.0 = Some((*transform, projection.clone()));
        *projection = Projection::Perspective(PerspectiveProjection {
            fov: tour::FOV_Y,
            near: 0.5,
            far: 1.0e7,
            ..default()
        });
        *transform = Transform::from_xyz(0.0, 0.0, 1000.0);
        shown.generation = u64::MAX;
        shown.frame = None;
    }
}

/// The canvas's theme: the camera clears to its background, and on a
/// change the textures are coloured again (the pass is asked again) and
/// the labels spawned again in its colours.
fn apply_theme(
    theme: Res<crate::app::canvas::CanvasTheme>,
    mut compute: ResMut<WalkCompute>,
    mut shown: ResMut<Shown>,
    mut cameras: Query<&mut Camera, With<SceneCamera>>,
) {
    let light = *theme == crate::app::canvas::CanvasTheme::Light;
    if colour::light() != light {
        colour::set_light(light);
        compute.reset();
        shown.generation = u64::MAX;
    }
    let clear = colour::background();
    for mut camera in &mut cameras {
        if !matches!(camera.clear_color, bevy::camera::ClearColorConfig::Custom(c) if c == clear) {
            camera.clear_color = bevy::camera::ClearColorConfig::Custom(clear);
        }
    }
}

/// Leaving: the camera back as the other scenes had it; stop asking for
/// the weights; the loss chart no longer marks a step of the timeline.
fn leave(
    mut cameras: Query<(&mut Transform, &mut Projection, &mut Camera), With<SceneCamera>>,
    mut before: ResMut<Before>,
    mut wants: ResMut<TensorWants>,
    mut marked: ResMut<marks::Marked>,
    mut sweep: ResMut<sweep::Sweep>,
    mut step_marked: ResMut<ShownStep>,
) {
    wants.set("walk", Vec::new());
    step_marked.0 = None;
    *marked = marks::Marked::default();
    *sweep = sweep::Sweep::default();
    for (.., mut camera) in &mut cameras {
        camera.clear_color = bevy::camera::ClearColorConfig::Default;
    }
    if let Some((t, p)) = before.0.take() {
        for (mut transform, mut projection, _) in &mut cameras {
            *transform = t;
            *projection = p.clone();
        }
    }
}

/// A new run: compute again at once.
fn new_run(mut created: MessageReader<RunCreated>, mut compute: ResMut<WalkCompute>) {
    if created.read().count() > 0 {
        compute.reset();
    }
}

/// Asks for the weights, and for a pass when the prompt or the weights
/// changed.
#[allow(clippy::too_many_arguments)]
fn ask(
    run: Option<Res<Run>>,
    snapshots: Res<Snapshots>,
    knockouts: Res<Knockouts>,
    mut wants: ResMut<TensorWants>,
    mut view: ResMut<WalkView>,
    mut compute: ResMut<WalkCompute>,
    shown: Res<Shown>,
    (gpu, settings): (Res<GpuDevice>, Res<RunSettings>),
    (as_it_was, past, mut marked): (Res<AsItWas>, Res<PastWeights>, ResMut<ShownStep>),
) {
    compute.poll();
    let Some(run) = run else { return };
    // AdamW's moments too once the tour is past the forward pass (its last
    // beat is AdamW's step): twice the weights' size, so not read back
    // while only the forward pass is shown.
    let optimizer_shown = shown
        .walk
        .as_ref()
        .is_some_and(|w| w.beats[view.beat().min(w.beats.len() - 1)].pass != TourPass::Forward);
    let mut names = param_names(&run.program);
    if optimizer_shown {
        names.extend(moment_names(&run.program));
    }
    wants.set("walk", names);
    if !view.prompt_set || (!view.prompt_corpus.is_empty() && view.prompt_corpus != run.corpus_name)
    {
        view.prompt_corpus = run.corpus_name.clone();
        // A short line: the columns stay wide enough to read their bytes.
        view.prompt = settings.corpus.prompt_or_romeo(run.config().ctx.min(21));
        view.prompt_set = true;
    }
    if view.prompt.is_empty() {
        return;
    }
    // The loss chart marks the step of the model as it was.
    marked.set_if_neq(ShownStep(past.marked_step(*as_it_was)));
    let Some(snapshot) = past.shown(*as_it_was, snapshots.latest.as_ref()) else {
        return;
    };
    let request = WalkRequest {
        prompt: view.prompt.clone().into_bytes(),
        step: snapshot.step,
        as_it_was: as_it_was.0,
        knockouts: knockouts.0.clone(),
        with_optimizer: optimizer_shown && snapshot.has_moments(&run.program),
    };
    // The weights are copied out only for a question the worker takes.
    if !compute.would_start(&request) {
        return;
    }
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

/// Draws the picture when a new pass arrived: new textures in the same
/// quads when only the numbers changed (a run that trains), everything
/// spawned again when the shape did (a new prompt, a new model).
fn rebuild(
    mut commands: Commands,
    compute: Res<WalkCompute>,
    mut shown: ResMut<Shown>,
    old: Query<Entity, With<WalkItem>>,
    mut quads: Query<&mut SlabQuad>,
    mut images: ResMut<Assets<Image>>,
) {
    let Some(computed) = compute.computed() else {
        return;
    };
    if shown.generation == compute.generation {
        return;
    }
    let same_shape = shown.generation != u64::MAX
        && shown.walk.as_ref().is_some_and(|w| {
            w.slabs.len() == computed.walk.slabs.len()
                && w.slabs.iter().zip(&computed.walk.slabs).all(|(a, b)| a.rows == b.rows && a.cols == b.cols)
        })
        && shown.tokens == computed.flow.tokens;
    shown.generation = compute.generation;
    if same_shape {
        draw::refresh(&mut images, &mut quads, &computed.textures);
        return;
    }
    for e in &old {
        commands.entity(e).despawn();
    }
    draw::spawn(&mut commands, &mut images, &computed.walk, computed, &computed.textures);
    shown.walk = Some(computed.walk.clone());
    shown.tokens = computed.flow.tokens.clone();
    // The poses are fitted again for the new layout.
    shown.frame = None;
}

/// Page Down / Page Up: the next or the previous beat; Space plays or
/// pauses (when no text field has the keyboard).
fn keys(
    keys: Res<ButtonInput<KeyCode>>,
    shown: Res<Shown>,
    mut view: ResMut<WalkView>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    lesson: Option<Res<crate::app::lesson::LessonPlayer>>,
) {
    if egui.is_some_and(|e| e.wants_keyboard_input()) {
        return;
    }
    // In a lesson, Page Up / Page Down step the lesson.
    let paging = !lesson.is_some_and(|l| l.lesson.is_some());
    let Some(walk) = &shown.walk else { return };
    let last = walk.beats.len() - 1;
    if paging && keys.just_pressed(KeyCode::PageDown) {
        let k = (view.beat() + 1).min(last);
        view.t = k as f32;
    }
    if paging && keys.just_pressed(KeyCode::PageUp) {
        let k = view.beat().saturating_sub(1);
        view.go_to(k);
    }
    if keys.just_pressed(KeyCode::Space) {
        view.playing = !view.playing;
        if view.playing && view.beat() >= last {
            view.t = 0.0;
            view.visited.clear();
        }
    }
}

/// Moves the timeline while playing, and records the beats reached.
fn advance(time: Res<Time>, shown: Res<Shown>, mut view: ResMut<WalkView>) {
    let Some(walk) = &shown.walk else { return };
    let n = walk.beats.len();
    if view.playing {
        let t = view.t + time.delta_secs() * view.speed;
        if t >= n as f32 {
            view.t = n as f32 - 1.0 + tour::MOVE_SHARE;
            view.playing = false;
        } else {
            view.t = t;
        }
        let k = view.beat().min(n - 1);
        if view.visited.last() != Some(&k) {
            view.visited.push(k);
        }
    }
}

/// The viewport's free part (the toolbar above, the narration below).
fn frame_of(camera: &Camera, narration: f32) -> Option<tour::FreeView> {
    let v = camera.logical_viewport_size()?;
    (v.x >= 1.0 && v.y >= 1.0).then(|| tour::FreeView {
        width: v.x,
        height: v.y,
        // The toolbar, the status line under it, and the labels over the
        // top tensors.
        top: crate::app::canvas::camera::TOOLBAR_PX + 70.0,
        bottom: narration,
    })
}

/// Puts the camera where the timeline says.
fn fly(
    mut shown: ResMut<Shown>,
    mut view: ResMut<WalkView>,
    ui_state: Res<UiState>,
    narration: Res<panel::NarrationHeight>,
    mut cameras: Query<(&Camera, &mut Transform), With<SceneCamera>>,
) {
    let Ok((camera, mut transform)) = cameras.single_mut() else {
        return;
    };
    let Some(frame) = frame_of(camera, narration.0) else {
        return;
    };
    // (Its fields borrowed apart: the layout read, the poses written.)
    let shown = &mut *shown;
    let Some(walk) = &shown.walk else { return };
    let beat = view.beat();
    if shown.frame != Some(frame) {
        let before = shown.poses.get(beat).cloned();
        shown.poses = tour::poses(walk, frame);
        shown.frame = Some(frame);
        // A look away from the tour's framing stays on what it shows when
        // the free part of the view changes (the narration grew a line, the
        // window was resized): zoomed in, the framing's shift would
        // otherwise move the picture by that many times as much.
        if let (Some(old), Some(new)) = (before, shown.poses.get(beat))
            && view.look.beat == beat
            && !view.look.is_tour()
        {
            let shift = (new.rotation.inverse() * (old.target - new.target)).truncate();
            view.look.pan += shift;
        }
    }
    // The learner's look holds while the tour stays on its beat.
    if (view.playing || view.look.beat != beat) && view.look != look::Look::at(beat) {
        view.look = look::Look::at(beat);
    }
    if let Some(pose) = tour::pose_at(&shown.poses, view.t, ui_state.reduced_motion) {
        if let Some(zoom) = view.zoom_on_output.take()
            && let Some(&output) = walk.beats[beat.min(walk.beats.len() - 1)].slabs.first()
        {
            view.look = look::Look::on(&pose, walk.slabs[output].centre(), zoom, beat);
        }
        let want = view.look.apply(&pose).transform();
        if *transform != want {
            *transform = want;
        }
    }
}

/// Which slabs the current beat shows, and what each shows: in the
/// backward pass every slab of the backward beats reached so far its
/// gradient, in AdamW's beat every weight its update, else the values.
pub fn state_at(walk: &WalkLayout, beat: usize) -> (Vec<bool>, Vec<CellLens>) {
    let n = walk.slabs.len();
    let beat = beat.min(walk.beats.len() - 1);
    let mut focused = vec![false; n];
    for &i in &walk.beats[beat].slabs {
        focused[i] = true;
    }
    let mut gradient = vec![CellLens::Value; n];
    match walk.beats[beat].pass {
        TourPass::Backward => {
            for b in walk.beats[..=beat].iter().filter(|b| b.pass == TourPass::Backward) {
                for &i in &b.slabs {
                    if layout::has_gradient(&walk.slabs[i]) {
                        gradient[i] = CellLens::Gradient;
                    }
                }
            }
        }
        TourPass::Update => {
            for &i in &walk.beats[beat].slabs {
                gradient[i] = CellLens::Update;
            }
        }
        TourPass::Forward => {}
    }
    // The overview shows everything.
    if beat == 0 {
        focused.iter_mut().for_each(|f| *f = true);
    }
    (focused, gradient)
}

/// Colours each quad for the beat: its values or its gradient, bright in
/// the beat's view and dimmed elsewhere.
fn shade(
    shown: Res<Shown>,
    view: Res<WalkView>,
    mut quads: Query<(&SlabQuad, &mut Sprite), Without<SlabFrame>>,
    mut frames: Query<(&SlabFrame, &mut Sprite), Without<SlabQuad>>,
) {
    let Some(walk) = &shown.walk else { return };
    let (focused, gradient) = state_at(walk, view.beat());
    for (quad, mut sprite) in &mut quads {
        let image = match (gradient[quad.slab], &quad.grads, &quad.updates) {
            (CellLens::Gradient, Some(g), _) => g.clone(),
            (CellLens::Update, _, Some(u)) => u.clone(),
            _ => quad.values.clone(),
        };
        if sprite.image != image {
            sprite.image = image;
        }
        // Out of the beat: darkened on the dark canvas, faded towards
        // the paper on the light one.
        let tint = match (focused[quad.slab], colour::light()) {
            (true, _) => Color::WHITE,
            (false, false) => Color::srgb(0.32, 0.32, 0.34),
            (false, true) => Color::srgba(1.0, 1.0, 1.0, 0.3),
        };
        if sprite.color != tint {
            sprite.color = tint;
        }
    }
    for (frame, mut sprite) in &mut frames {
        let slab = &walk.slabs[frame.slab];
        let [r, g, b] = colour::frame(slab.family, gradient[frame.slab]);
        let a = if focused[frame.slab] { 1.0 } else { 0.25 };
        let c = Color::srgba(r, g, b, a);
        if sprite.color != c {
            sprite.color = c;
        }
    }
}

/// Keeps each label at its size on screen, facing the camera, shown when
/// its slab is in the beat's view (and, for the bytes, when a column is
/// wide enough to read one).
fn size_labels(
    shown: Res<Shown>,
    view: Res<WalkView>,
    ui_state: Res<UiState>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    narration: Res<panel::NarrationHeight>,
    mut labels: Query<(
        &ScreenLabel,
        &bevy::text::TextLayoutInfo,
        &mut bevy::sprite::Anchor,
        &mut Transform,
        &mut Visibility,
        &mut TextColor,
    )>,
) {
    let Some(walk) = &shown.walk else { return };
    let Ok((camera, camera_at)) = cameras.single() else {
        return;
    };
    let Some(rect) = camera.logical_viewport_rect() else {
        return;
    };
    let viewport = rect.size();
    let (focused, gradient) = state_at(walk, view.beat());
    // The overview and AdamW's beat (every weight at once) name the
    // stages, not each tensor.
    let overview = view.beat() == 0
        || walk.beats[view.beat().min(walk.beats.len() - 1)].pass == TourPass::Update;
    let rotation = camera_at.rotation();
    let forward = camera_at.forward();
    let (right, up) = (camera_at.right(), camera_at.up());
    let zoom = if ui_state.presenter { 1.3 } else { 1.0 };
    // The stages' titles left to right: one that would run into the last
    // shown is left out.
    let mut titles_end = [f32::NEG_INFINITY; 2];
    let mut order: Vec<_> = labels.iter_mut().collect();
    order.sort_by(|a, b| a.0.places[0].at.x.total_cmp(&b.0.places[0].at.x));
    // A label is shown whole or not at all: between the toolbar's status
    // line and the narration.
    // (World-to-viewport points are on the render target, the
    // viewport's offset included.)
    let (top, bottom) = (
        rect.min.y + crate::app::canvas::camera::TOOLBAR_PX + 30.0,
        rect.max.y - narration.0,
    );
    for (label, layout, mut anchor, mut transform, mut visibility, mut colour) in order {
        // A tensor's name in the colour of what it shows (its gradient's
        // in the backward pass).
        if let Some(s) = label.slab
            && label.min_cell_px == 0.0
        {
            let [r, g, b] = colour::frame(walk.slabs[s].family, gradient[s]);
            let want = TextColor(Color::srgb(r, g, b));
            if *colour != want {
                *colour = want;
            }
        }
        let px = label.px * zoom;
        let size = layout.size / draw::LABEL_FONT_PX * px;
        // Its box on screen at a place, if whole in the free part.
        let fits = |place: &draw::Place| {
            camera.world_to_viewport(camera_at, place.at).ok().is_some_and(|p| {
                let p = p + Vec2::new(place.offset_px.x, -place.offset_px.y) * zoom;
                let a = place.anchor.as_vec();
                let (x0, y0) = (p.x - (a.x + 0.5) * size.x, p.y - (0.5 - a.y) * size.y);
                x0 >= rect.min.x && x0 + size.x <= rect.max.x && y0 >= top && y0 + size.y <= bottom
            })
        };
        // A stage's title takes the first of its rows where it does not
        // run into the title before it; anything else its first place
        // that is whole on screen.
        let chosen = if label.slab.is_none() {
            label.places.iter().enumerate().find_map(|(row, place)| {
                let x = camera.world_to_viewport(camera_at, place.at).ok()?.x;
                let free = row < titles_end.len() && x >= titles_end[row] + 12.0 && fits(place);
                free.then(|| {
                    titles_end[row] = x + size.x;
                    place
                })
            })
        } else {
            label.places.iter().find(|p| fits(p))
        };
        let on_screen = chosen.is_some();
        let place = *chosen.unwrap_or(&label.places[0]);
        let depth = (place.at - camera_at.translation()).dot(*forward);
        let wpp = tour::world_per_px(depth.max(0.1), viewport.y);
        let in_view = match label.slab {
            Some(s) => focused[s] && !overview,
            None => overview,
        };
        let wide_enough = wpp > 0.0 && 1.0 / wpp >= label.min_cell_px;
        let want = if in_view && wide_enough && depth > 0.0 && on_screen {
            Visibility::Inherited
        } else {
            Visibility::Hidden
        };
        if *visibility != want {
            *visibility = want;
        }
        if want == Visibility::Hidden {
            continue;
        }
        let scale = px * wpp / draw::LABEL_FONT_PX;
        if *anchor != place.anchor {
            *anchor = place.anchor;
        }
        let at = place.at + (right * place.offset_px.x + up * place.offset_px.y) * wpp * zoom;
        // Drawn over every tensor: the 2D pipeline sorts by z, so the label
        // is pulled a fifth of the way towards the camera along its line
        // of sight (and shrunk as much), which leaves it where it was on
        // screen, at the size it was.
        let eye = camera_at.translation();
        let pull = 0.8;
        let next = Transform {
            translation: eye + (at - eye) * pull,
            rotation,
            scale: Vec3::splat(scale * pull),
        };
        if *transform != next {
            *transform = next;
        }
    }
}

/// The point of a slab's plane under the pointer, and the slab: the
/// nearest slab the pointer's ray meets.
pub fn pick(walk: &WalkLayout, ray: Ray3d) -> Option<(usize, Vec2)> {
    walk.slabs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let dz = ray.direction.z;
            if dz.abs() < 1e-6 {
                return None;
            }
            let d = (s.corner.z - ray.origin.z) / dz;
            let p = ray.origin + *ray.direction * d;
            (d > 0.0 && s.rect().contains(p.truncate())).then_some((i, p.truncate(), d))
        })
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(i, p, _)| (i, p))
}

/// The tensors as the keyboard visits them (issue 53): every slab in the
/// layout's order, grouped by block (↑ and ↓ jump between blocks).
fn list_parts(shown: Res<Shown>, mut parts: ResMut<crate::app::canvas::parts::PictureParts>) {
    use crate::app::canvas::parts::{Part, spoken};
    let Some(walk) = &shown.walk else { return };
    if !shown.is_changed() && !parts.0.is_empty() {
        return;
    }
    let listed: Vec<Part> = walk
        .slabs
        .iter()
        .map(|s| Part {
            name: spoken(&draw::title(s)),
            group: Some(match s.layer {
                Some(l) => format!("block {l}"),
                None if s.name.contains("wte") || s.name.contains("wpe") || s.name.starts_with("emb") => "embedding".into(),
                None => "output".into(),
            }),
            rows: s.rows,
            cols: s.cols,
            rect: s.rect(),
            z: s.corner.z,
            drawn: None,
        })
        .collect();
    if parts.0 != listed {
        parts.0 = listed;
    }
}

/// Names the cell under the pointer (its tensor, indices, value and
/// gradient); a click flies to the tensor's op.
#[allow(clippy::too_many_arguments)]
fn hover(
    pointer: crate::app::canvas::parts::PointerInput,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    egui: Option<Res<bevy_egui::input::EguiWantsInput>>,
    shown: Res<Shown>,
    compute: Res<WalkCompute>,
    mut view: ResMut<WalkView>,
    mut hover: ResMut<Hover>,
    mut grids: ResMut<draw::SlabGrids>,
    travel: Res<look::PointerTravel>,
) {
    let busy = egui.is_some_and(|e| e.wants_pointer_input() || e.is_pointer_over_area()) && !pointer.from_keyboard();
    let hit = (|| {
        if busy {
            return None;
        }
        let walk = shown.walk.as_ref()?;
        let (camera, at) = cameras.single().ok()?;
        let pointer = pointer.position()?;
        if !camera.logical_viewport_rect()?.contains(pointer) {
            return None;
        }
        // (Bevy's viewport positions are on the window, the viewport's
        // offset included.)
        let ray = camera.viewport_to_world(at, pointer).ok()?;
        let (i, p) = pick(walk, ray)?;
        let (row, col) = layout::cell_at(&walk.slabs[i], p)?;
        Some((i, row, col))
    })();
    let text = hit.and_then(|(i, row, col)| {
        let walk = shown.walk.as_ref()?;
        let computed = compute.computed()?;
        let slab = &walk.slabs[i];
        // The hovered tensor's grids, laid out once per pass, not per frame.
        let at = row * slab.cols + col;
        let mut cell = |lens| grids.get(compute.generation, computed, i, slab, lens).and_then(|(g, _)| g.get(at).copied());
        let value = cell(CellLens::Value)?;
        let grad = cell(CellLens::Gradient);
        let update = cell(CellLens::Update);
        let mut s = format!("{}[{row}, {col}] = {}", draw::title(slab), crate::app::canvas::short(value));
        if let Some(g) = grad {
            s.push_str(&format!("   dL/d = {}", crate::app::canvas::short(g)));
        }
        if let Some(u) = update {
            s.push_str(&format!("   AdamW Δ = {}", crate::app::canvas::short(u)));
        }
        Some(s)
    });
    if hover.0 != text {
        hover.0 = text;
    }
    // A click (not the end of a drag) flies to the first beat of the
    // current pass that shows the tensor.
    if pointer.just_released()
        && (travel.0 <= look::CLICK_TRAVEL_PX || pointer.from_keyboard())
        && let (Some((i, _, _)), Some(walk)) = (hit, &shown.walk)
    {
        fly_to_slab(walk, &mut view, i);
    }
}

/// Flies to the first beat of the current pass that shows slab `i` (what
/// a click on it does), paused.
fn fly_to_slab(walk: &WalkLayout, view: &mut WalkView, i: usize) {
    let pass = walk.beats[view.beat().min(walk.beats.len() - 1)].pass;
    if let Some(k) = walk
        .beats
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, b)| b.pass == pass && b.slabs.first() == Some(&i))
        .or_else(|| walk.beats.iter().enumerate().skip(1).find(|(_, b)| b.pass == pass && b.slabs.contains(&i)))
        .map(|(k, _)| k)
        && view.t != k as f32
    {
        view.playing = false;
        view.t = k as f32;
    }
}

/// The keyboard's focus moving to a tensor flies there, as a click on it
/// does: the camera keeps the focused tensor in view.
fn follow_focus(
    focus: Res<crate::app::canvas::parts::PictureFocus>,
    shown: Res<Shown>,
    mut view: ResMut<WalkView>,
    mut last: Local<Option<usize>>,
) {
    let now = focus.active.then_some(focus.part);
    if now != *last {
        *last = now;
        if let (Some(i), Some(walk)) = (now, &shown.walk)
            && i < walk.slabs.len()
        {
            fly_to_slab(walk, &mut view, i);
        }
    }
}

/// What the scene shows, for a class's "send my view": the prompt.
fn publish_view(view: Res<WalkView>, mut shown: ResMut<ShownView>) {
    ShownView::publish(&mut shown, Scene::Walk, Some(view.prompt.as_str()), None, None);
}
