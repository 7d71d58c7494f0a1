//! The explainer app: a Bevy world in which the model's layers, ops and
//! tensors and the run's steps are entities; training runs inside the frame
//! loop on Bevy's own wgpu device, and egui panels sit beside a 2D main view.
//!
//! One plugin per concern: [`training`] (the run, its commands, step
//! records, and the tensor and probe requests of the views), [`graph`] (the
//! ECS mirror of the program), [`canvas`] (the main view every scene draws
//! on: camera, cursor, hover, colours, font), [`scenes`] (the scene list: one
//! folder, Bevy state and plugin per scene, each registering what it adds in
//! [`registry`] and through the lesson's events), [`ui`] (the panels),
//! [`sample`] (text generation), [`files`] (corpora, presets, checkpoints in),
//! [`export`] (the view or a chart out as PNG), [`lesson`] (the lesson player),
//! [`language`] (the language switch and its fonts),
//! [`headless`] (offscreen runs for checks), [`worker`] (the scenes'
//! questions of the run's model, off the frame), and in the browser `web`
//! (the page: start, files, downloads, the link of [`link`]).

#[cfg(target_arch = "wasm32")]
pub mod browser;
pub mod access;
pub mod answers;
pub mod canvas;
pub mod class;
pub mod data;
pub mod device_lost;
pub mod engine;
pub mod export;
pub mod files;
pub mod frames;
pub mod gallery;
pub mod graph;
#[cfg(not(target_arch = "wasm32"))]
pub mod handout;
pub mod headless;
pub mod heatmap;
pub mod language;
pub mod lesson;
pub mod link;
pub mod registry;
pub mod remote;
pub mod sample;
pub mod scenes;
pub mod schedule;
pub mod timeline;
pub mod training;
pub mod ui;
#[cfg(target_arch = "wasm32")]
pub mod web;
pub mod worker;
pub mod workshop;

use bevy::camera::{CameraOutputMode, RenderTarget, visibility::RenderLayers};
use bevy::prelude::*;
use bevy::render::render_resource::BlendState;
use bevy_egui::{EguiGlobalSettings, EguiPlugin, PrimaryEguiContext};
use training::{RunSettings, TrainOnStart};

pub use schedule::AppSystems;

/// How the app starts.
#[derive(Clone, Debug)]
pub struct AppOptions {
    pub settings: RunSettings,
    /// The scene it opens in.
    pub scene: scenes::Scene,
    /// The entry of the training step the Step scene opens at.
    pub step_op: usize,
    /// The pass the Flash scene shows first, and the visit its replay opens
    /// at, paused (else it plays from the first).
    pub flash_pass: crate::flash::Pass,
    pub flash_visit: Option<usize>,
    /// Presets the Speedup scene measures as soon as it opens.
    pub bench: Option<Vec<String>>,
    /// The preset whose step the Speedup scene times per kernel at once.
    pub kernels: Option<String>,
    /// The beat the 3D walk-through opens at, paused.
    pub walk_beat: Option<usize>,
    /// Its zoom on that beat's framing (1: the tour's).
    pub walk_zoom: Option<f32>,
    /// The Attention scene opens on the run's time-lapse at this step.
    pub timeline_step: Option<u64>,
    /// Start training at once (otherwise the user presses Train).
    pub train: bool,
    /// Open in the wide view: no side panels, the scene fills the window
    /// (for a projector; the top bar's "wide view" toggles it).
    pub wide: bool,
    /// The lesson to play from the start: (its name, the lesson, the step).
    pub lesson: Option<(String, crate::lesson::Lesson, usize)>,
    /// A checkpoint to open at start (its name and bytes) instead of the
    /// fresh run of `settings`.
    pub checkpoint: Option<(String, Vec<u8>)>,
    /// A LoRA adapter of that checkpoint (its name and bytes): the app
    /// opens the fine-tune, its base frozen.
    pub adapter: Option<(String, Vec<u8>)>,
    /// A gallery model to open at start, by id (a link's `model=reverse`;
    /// in the browser fetched first unless compiled in).
    pub gallery: Option<String>,
    /// Locked to its lesson ([`workshop`]): a workshop link.
    pub locked: bool,
    /// The language of the app and its lessons ([`language`]).
    pub language: crate::i18n::Language,
    /// Run without a window for this many frames (see [`headless`]).
    pub headless: Option<headless::HeadlessConfig>,
    /// A live class to join: its link and its socket's address ([`class`]).
    pub class: Option<(link::ClassLink, String)>,
}

/// Every plugin of the explainer except Bevy's own and the window/headless
/// choice: what tests build on top of `MinimalPlugins`.
pub fn add_explainer_plugins(app: &mut App) {
    app.configure_sets(
        Update,
        (
            AppSystems::Input,
            AppSystems::Training,
            AppSystems::Graph,
            AppSystems::Camera,
            AppSystems::Scene,
        )
            .chain(),
    );
    app.add_plugins(timeline::TimelinePlugin);
    app.add_plugins((
        training::TrainingPlugin,
        graph::ModelGraphPlugin,
        sample::SamplePlugin,
    ))
    .init_resource::<workshop::Workshop>()
    .init_resource::<workshop::PanelsShown>();
}

/// Builds the app: Bevy with a window, or offscreen for `--headless`.
pub fn build(options: AppOptions) -> App {
    let mut app = App::new();
    let title = "TinyGPT Explainer".to_string();
    match &options.headless {
        #[cfg(not(target_arch = "wasm32"))]
        None => {
            app.add_plugins(DefaultPlugins.set(WindowPlugin {
                primary_window: Some(Window {
                    title,
                    resolution: (1600u32, 900u32).into(),
                    ..default()
                }),
                ..default()
            }));
        }
        #[cfg(target_arch = "wasm32")]
        None => {
            let _ = title;
            app.add_plugins(
                DefaultPlugins
                    .set(WindowPlugin {
                        primary_window: Some(browser::window()),
                        ..default()
                    })
                    .set(bevy::render::RenderPlugin {
                        render_creation: browser::render_creation(),
                        ..default()
                    }),
            );
        }
        Some(config) => {
            app.add_plugins(
                DefaultPlugins
                    .set(WindowPlugin {
                        primary_window: None,
                        exit_condition: bevy::window::ExitCondition::DontExit,
                        ..default()
                    })
                    .disable::<bevy::winit::WinitPlugin>(),
            )
            .add_plugins(bevy::app::ScheduleRunnerPlugin::run_loop(
                std::time::Duration::from_secs_f64(if config.fps > 0.0 {
                    1.0 / config.fps
                } else {
                    0.0
                }),
            ))
            .add_plugins(headless::HeadlessPlugin(config.clone()));
        }
    }
    app.add_plugins(EguiPlugin::default())
        .insert_resource(options.settings)
        .insert_resource(TrainOnStart(options.train))
        .insert_resource(training::OpenOnStart(
            options.checkpoint,
            options.adapter,
            options.gallery,
        ))
        .insert_resource(ui::UiState {
            wide: options.wide || options.locked,
            ..Default::default()
        })
        .insert_resource(workshop::Workshop {
            locked: options.locked,
        })
        .insert_resource(language::AppLanguage::starting_in(options.language));
    // A language whose letters the label font has is on at once, so what
    // the first frames compute (the run's notice) speaks it too; Chinese
    // waits for its font (the switch sets it then).
    if !options.language.needs_cjk_font() {
        crate::i18n::set_language(options.language);
    }
    add_explainer_plugins(&mut app);
    app.insert_state(options.scene)
        .insert_resource(scenes::SceneStart {
            step_op: options.step_op,
            flash_pass: options.flash_pass,
            flash_visit: options.flash_visit,
            bench: options.bench,
            kernels: options.kernels,
            walk_beat: options.walk_beat,
            walk_zoom: options.walk_zoom,
            timeline_step: options.timeline_step,
        })
        // A step asked for on the command line: the scenes that recompute
        // the model show it as it was there.
        .insert_resource(timeline::AsItWas(options.timeline_step.is_some()))
        .add_plugins((canvas::CanvasPlugin, canvas::camera::CameraPlugin));
    add_scene_plugins(&mut app);
    app.add_plugins((
        ui::UiPlugin,
        files::FilesPlugin,
        gallery::GalleryPlugin,
        device_lost::DeviceLostPlugin,
        export::ExportPlugin,
        data::DataPlugin,
        lesson::LessonPlugin,
        class::ClassPlugin,
        language::LanguagePlugin,
        schedule::FramesPlugin,
    ))
    .add_plugins(access::AccessPlugin)
    .add_systems(PreStartup, spawn_cameras);
    #[cfg(not(target_arch = "wasm32"))]
    app.add_plugins(handout::HandoutPlugin);
    if let Some((link, socket)) = options.class {
        app.insert_resource(class::ClassClient::joining(link, socket));
    }
    if let Some((name, lesson, step)) = options.lesson {
        // The player hides the side panels for each step that does not ask
        // for them (a lesson is for a room).
        app.insert_resource(lesson::LessonPlayer::open(name, lesson, step));
    }
    app
}

/// Adds each scene's plugin, from the scene list.
macro_rules! add_scene_plugins {
    ($( $(#[$meta:meta])* $variant:ident, $module:ident, $key:literal; )*) => {
        fn add_scene_plugins(app: &mut App) {
            $( app.add_plugins(scenes::$module::ScenePlugin); )*
        }
    };
}
scenes::scene_list!(add_scene_plugins);

/// Runs the app until it exits.
pub fn run(options: AppOptions) -> AppExit {
    build(options).run()
}

/// The scene camera, and an egui camera drawn over it (full size, UI only).
fn spawn_cameras(
    mut commands: Commands,
    mut egui_settings: ResMut<EguiGlobalSettings>,
    headless: Option<Res<headless::HeadlessConfig>>,
    mut images: ResMut<Assets<Image>>,
) {
    egui_settings.auto_create_primary_context = false;
    let target = headless.map(|h| {
        let handle = images.add(Image::new_target_texture(
            h.width,
            h.height,
            bevy::render::render_resource::TextureFormat::Rgba8UnormSrgb,
            None,
        ));
        commands.insert_resource(canvas::HeadlessTarget(handle.clone()));
        RenderTarget::Image(handle.into())
    });
    let mut scene = commands.spawn((
        Camera2d,
        canvas::SceneCamera,
        Camera {
            order: 0,
            ..default()
        },
    ));
    if let Some(t) = &target {
        scene.insert(t.clone());
    }
    let mut ui = commands.spawn((
        PrimaryEguiContext,
        Camera2d,
        RenderLayers::none(),
        Camera {
            order: 1,
            output_mode: CameraOutputMode::Write {
                blend_state: Some(BlendState::ALPHA_BLENDING),
                clear_color: ClearColorConfig::None,
            },
            clear_color: ClearColorConfig::Custom(Color::NONE),
            ..default()
        },
    ));
    if let Some(t) = target {
        ui.insert(t);
    }
}

pub use ui::state::default_checkpoint_path;
