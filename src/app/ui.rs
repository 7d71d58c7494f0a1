//! The egui panels around the main view: run configuration and controls and
//! metrics (left), the loss chart and the sample box (right), the scene's
//! view switch (top), the status line (bottom), and the inspector of the
//! selected tensor. The main view's camera gets the rectangle in between.

#[cfg(not(target_arch = "wasm32"))]
use super::files;
use super::sample::SampleState;
use super::scene_model::{Heatmap, SceneCamera, Selection};
use super::training::{
    AppStatus, BackendChoice, HeatmapView, Run, RunCommand, RunSettings, RunState, Snapshots,
    StepRecord,
};
use crate::model::config::{BUILTIN_PRESETS, Config};
use bevy::camera::Viewport;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use egui_plot::{HLine, Legend, Line, Plot, PlotPoints, Points};
use std::path::PathBuf;

/// What the panels keep between frames.
#[derive(Resource)]
pub struct UiState {
    pub corpus_path: String,
    pub checkpoint_path: String,
    /// The main view's rectangle in physical pixels (x, y, w, h).
    pub central: Option<(u32, u32, u32, u32)>,
}

impl Default for UiState {
    fn default() -> Self {
        Self {
            corpus_path: String::new(),
            checkpoint_path: super::default_checkpoint_path().display().to_string(),
            central: None,
        }
    }
}

pub struct UiPlugin;

impl Plugin for UiPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<UiState>()
            .add_systems(EguiPrimaryContextPass, draw_ui)
            .add_systems(Update, (select_on_click, apply_viewport));
    }
}

fn fmt_duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "–".into();
    }
    let s = seconds.round() as u64;
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_ui(
    mut contexts: EguiContexts,
    mut ui_state: ResMut<UiState>,
    mut settings: ResMut<RunSettings>,
    run: Option<Res<Run>>,
    mut status: ResMut<AppStatus>,
    mut snapshots: ResMut<Snapshots>,
    records: Query<&StepRecord>,
    heatmaps: Query<&Heatmap>,
    mut selection: ResMut<Selection>,
    mut commands: MessageWriter<RunCommand>,
    mut sample: ResMut<SampleState>,
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let mut root = egui::Ui::new(
        ctx.clone(),
        "root".into(),
        egui::UiBuilder::new()
            .layer_id(egui::LayerId::background())
            .max_rect(ctx.viewport_rect()),
    );
    let Some(run) = run else { return Ok(()) };

    // ---- bottom: status line
    egui::Panel::bottom("status").show(&mut root, |ui| {
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("backend: {}", run.backend_label));
            ui.separator();
            ui.label(format!("{:?}", run.state));
            if let Some(info) = &status.info {
                ui.separator();
                ui.label(info);
            }
        });
        if let Some(notice) = &run.notice {
            ui.colored_label(egui::Color32::from_rgb(240, 190, 80), notice);
        }
        let mut dismiss = None;
        for (i, e) in status.errors.iter().enumerate() {
            ui.horizontal(|ui| {
                if ui.small_button("✕").clicked() {
                    dismiss = Some(i);
                }
                ui.colored_label(egui::Color32::from_rgb(255, 110, 100), e);
            });
        }
        if let Some(i) = dismiss {
            status.errors.remove(i);
        }
    });

    // ---- top: scene and view switch
    egui::Panel::top("scene").show(&mut root, |ui| {
        ui.horizontal(|ui| {
            ui.strong("Scene: Model");
            ui.separator();
            ui.label("heatmaps show");
            let mut view = snapshots.view;
            for v in HeatmapView::ALL {
                ui.radio_value(&mut view, v, v.label());
            }
            snapshots.set_view(view);
            ui.separator();
            ui.label("click a heatmap to inspect it");
        });
    });

    // ---- left: run configuration, controls, metrics
    egui::Panel::left("run").default_size(300.0).show(&mut root, |ui| {
        egui::ScrollArea::vertical().show(ui, |ui| {
            ui.heading("TinyGPT Explainer");
            ui.label("A byte-level GPT training for real, on this machine.");
            ui.separator();
            ui.strong("Run");
            let mut preset = settings.preset.clone();
            egui::ComboBox::from_label("preset").selected_text(&preset).show_ui(ui, |ui| {
                for (id, _) in BUILTIN_PRESETS {
                    ui.selectable_value(&mut preset, id.to_string(), *id);
                }
            });
            if preset != settings.preset
                && let Ok(config) = Config::load(&preset)
            {
                *settings = RunSettings { corpus: settings.corpus.clone(), seed: settings.seed, backend: settings.backend, ..RunSettings::from_preset(&preset, config) };
            }
            let c = &settings.config;
            ui.small(format!("{} layers, {} heads, d {}, ctx {}, batch {}: {} parameters", c.n_layer, c.n_head, c.d_model, c.ctx, c.batch, crate::model::config::group_thousands(c.param_count())));
            ui.label(format!("corpus: {} ({} bytes)", settings.corpus.name(), settings.corpus.len()));
            #[cfg(not(target_arch = "wasm32"))]
            {
                ui.horizontal(|ui| {
                    ui.add(egui::TextEdit::singleline(&mut ui_state.corpus_path).hint_text("path/to/text.txt").desired_width(170.0));
                    if ui.button("Load corpus").clicked() {
                        match files::load_path(&PathBuf::from(ui_state.corpus_path.trim())) {
                            Ok(c) => {
                                commands.write(c);
                            }
                            Err(e) => status.error(e),
                        }
                    }
                });
                ui.small("or drop a .txt corpus, a .ron preset or a .safetensors checkpoint on the window");
            }
            #[cfg(target_arch = "wasm32")]
            {
                if ui.button("Open a file…").on_hover_text("a .txt corpus, a .ron preset or a .safetensors checkpoint").clicked() {
                    super::web::open_file_picker();
                }
                ui.small("or drop a .txt corpus, a .ron preset or a .safetensors checkpoint on the page");
            }
            egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
                ui.label("learning rate");
                ui.add(egui::DragValue::new(&mut settings.lr).speed(1e-5).range(1e-6..=1.0).max_decimals(6));
                ui.end_row();
                ui.label("steps");
                ui.add(egui::DragValue::new(&mut settings.steps).speed(10).range(1..=10_000_000));
                ui.end_row();
                ui.label("seed");
                ui.add(egui::DragValue::new(&mut settings.seed));
                ui.end_row();
                ui.label("backend");
                egui::ComboBox::from_id_salt("backend").selected_text(format!("{:?}", settings.backend)).show_ui(ui, |ui| {
                    for b in BackendChoice::ALL {
                        ui.selectable_value(&mut settings.backend, b, format!("{b:?}"));
                    }
                });
                ui.end_row();
            });
            if ui.button("New run with these settings").clicked() {
                commands.write(RunCommand::NewRun);
            }
            ui.separator();
            ui.strong("Training");
            ui.horizontal(|ui| {
                let training = run.state == RunState::Training;
                if ui.add_enabled(!training, egui::Button::new("▶ Train")).clicked() {
                    commands.write(RunCommand::Train);
                }
                if ui.add_enabled(training, egui::Button::new("⏸ Pause")).clicked() {
                    commands.write(RunCommand::Pause);
                }
                if ui.add_enabled(!training, egui::Button::new("Step")).clicked() {
                    commands.write(RunCommand::Step);
                }
                if ui.button("Reset").on_hover_text("a fresh run from the settings above (step 0)").clicked() {
                    commands.write(RunCommand::NewRun);
                }
            });
            #[cfg(not(target_arch = "wasm32"))]
            ui.horizontal(|ui| {
                ui.add(egui::TextEdit::singleline(&mut ui_state.checkpoint_path).desired_width(170.0));
                if ui.button("Save").clicked() {
                    commands.write(RunCommand::SaveCheckpoint(PathBuf::from(ui_state.checkpoint_path.trim())));
                }
                if ui.button("Load").clicked() {
                    match files::load_path(&PathBuf::from(ui_state.checkpoint_path.trim())) {
                        Ok(c) => {
                            commands.write(c);
                        }
                        Err(e) => status.error(e),
                    }
                }
            });
            #[cfg(target_arch = "wasm32")]
            ui.horizontal(|ui| {
                if ui.button("Download checkpoint").on_hover_text("weights and AdamW state, as .safetensors").clicked() {
                    // Named when saved, after the step it holds.
                    commands.write(RunCommand::SaveCheckpoint(PathBuf::new()));
                }
                if ui.button("Load…").on_hover_text("a .safetensors checkpoint (or drop one on the page)").clicked() {
                    super::web::open_file_picker();
                }
            });
            ui.separator();
            ui.strong("Metrics");
            let cfg = run.config();
            let step = run.step();
            egui::Grid::new("metrics").num_columns(2).striped(true).show(ui, |ui| {
                let mut row = |k: &str, v: String| {
                    ui.label(k);
                    ui.monospace(v);
                    ui.end_row();
                };
                row("step", format!("{step} / {}", cfg.steps));
                if let Some(m) = run.last {
                    row("loss", format!("{:.4}", m.loss));
                    row("perplexity", format!("{:.2}", (m.loss as f64).exp()));
                    row("learning rate", format!("{:.2e}", m.lr));
                    row("grad norm", format!("{:.3}", m.grad_norm));
                }
                if let Some(v) = records.iter().filter_map(|r| r.val_loss.map(|v| (r.step, v))).max_by_key(|(s, _)| *s) {
                    row("val loss", format!("{:.4} (step {})", v.1, v.0));
                }
                let recent: Vec<&StepRecord> = records.iter().filter(|r| r.ms > 0.0).collect();
                let tail = &recent[recent.len().saturating_sub(50)..];
                if !tail.is_empty() {
                    let ms = tail.iter().map(|r| r.ms).sum::<f64>() / tail.len() as f64;
                    row("ms / step", format!("{ms:.2}"));
                    row("tokens / s", crate::model::config::group_thousands((cfg.tokens_per_step() as f64 / (ms / 1e3)) as usize));
                    if run.state == RunState::Training {
                        row("ETA", fmt_duration(cfg.steps.saturating_sub(step) as f64 * ms / 1e3));
                    }
                }
                row("corpus", run.corpus_name.clone());
            });
        });
    });

    // ---- right: loss chart and sampling
    egui::Panel::right("charts")
        .default_size(380.0)
        .show(&mut root, |ui| {
            ui.strong("Loss");
            let mut train: Vec<[f64; 2]> = records
                .iter()
                .map(|r| [r.step as f64, r.loss as f64])
                .collect();
            train.sort_by(|a, b| a[0].total_cmp(&b[0]));
            let stride = train.len().div_ceil(4000).max(1);
            let train: Vec<[f64; 2]> = train.into_iter().step_by(stride).collect();
            let mut val: Vec<[f64; 2]> = records
                .iter()
                .filter_map(|r| r.val_loss.map(|v| [r.step as f64, v as f64]))
                .collect();
            val.sort_by(|a, b| a[0].total_cmp(&b[0]));
            Plot::new("loss")
                .height(240.0)
                .legend(Legend::default())
                .x_axis_label("step")
                .include_y(0.0)
                .include_y(6.0)
                .show(ui, |plot| {
                    plot.hline(
                        HLine::new("random guessing, ln 256", 256f64.ln())
                            .color(egui::Color32::GRAY),
                    );
                    plot.line(Line::new("train", PlotPoints::from(train)));
                    plot.line(Line::new("val", PlotPoints::from(val.clone())));
                    plot.points(Points::new("val", PlotPoints::from(val)).radius(3.0));
                });
            ui.separator();
            ui.strong("Sample");
            ui.horizontal(|ui| {
                ui.label("prompt");
                ui.text_edit_singleline(&mut sample.prompt);
            });
            egui::Grid::new("sample").num_columns(4).show(ui, |ui| {
                ui.label("temperature");
                ui.add(
                    egui::DragValue::new(&mut sample.options.temperature)
                        .speed(0.01)
                        .range(0.0..=3.0),
                );
                ui.label("top-k");
                ui.add(egui::DragValue::new(&mut sample.options.top_k).range(1..=256));
                ui.end_row();
                ui.label("length");
                ui.add(egui::DragValue::new(&mut sample.length).range(1..=5000));
                ui.label("seed");
                ui.add(egui::DragValue::new(&mut sample.options.seed));
                ui.end_row();
            });
            ui.horizontal(|ui| {
                if ui.button("Generate").clicked() {
                    sample.start();
                }
                if sample.running() && ui.button("Stop").clicked() {
                    sample.stop();
                }
                if let Some(s) = sample.from_step {
                    ui.small(format!("from the weights at step {s}, sampled on the CPU"));
                }
            });
            if let Some(e) = &sample.error {
                ui.colored_label(egui::Color32::from_rgb(255, 110, 100), e);
            }
            let text = sample.text.lock().unwrap().clone();
            egui::ScrollArea::vertical()
                .stick_to_bottom(true)
                .show(ui, |ui| {
                    ui.add(egui::Label::new(egui::RichText::new(text).monospace()).wrap());
                });
        });

    // What is left is the main view.
    let rect = root.available_rect_before_wrap();
    let ppp = ctx.pixels_per_point();
    ui_state.central = Some((
        (rect.min.x * ppp) as u32,
        (rect.min.y * ppp) as u32,
        (rect.width() * ppp).max(1.0) as u32,
        (rect.height() * ppp).max(1.0) as u32,
    ));
    // ---- inspector of the selected heatmap
    if let Some(h) = selection.0.and_then(|e| heatmaps.get(e).ok())
        && selection.1
    {
        let anchor = ui_state.central.map_or(egui::pos2(320.0, 400.0), |c| {
            egui::pos2(c.0 as f32 / ppp + 8.0, (c.1 + c.3) as f32 / ppp - 8.0)
        });
        let mut open = true;
        egui::Window::new("Inspector")
            .open(&mut open)
            .pivot(egui::Align2::LEFT_BOTTOM)
            .current_pos(anchor)
            .resizable(false)
            .show(ctx, |ui| {
                ui.monospace(&h.param);
                ui.label(format!(
                    "shape {:?}  ({} values)",
                    [h.rows, h.cols],
                    h.rows * h.cols
                ));
                let snap = snapshots.latest.as_ref();
                let stats_of = |name: &str| {
                    snap.and_then(|s| s.tensors.get(name))
                        .map(|v| super::heatmap::stats(v))
                };
                egui::Grid::new("inspector")
                    .num_columns(2)
                    .striped(true)
                    .show(ui, |ui| {
                        if let Some(s) = h.stats {
                            ui.label(format!("{} mean", snapshots.view.label()));
                            ui.monospace(format!("{:+.4e}", s.mean));
                            ui.end_row();
                            ui.label("std");
                            ui.monospace(format!("{:.4e}", s.std));
                            ui.end_row();
                            ui.label("min / max");
                            ui.monospace(format!("{:+.4e} / {:+.4e}", s.min, s.max));
                            ui.end_row();
                        }
                        if let Some(g) = stats_of(&format!("grad.{}", h.param)) {
                            ui.label("grad norm");
                            ui.monospace(format!("{:.4e}", g.norm));
                            ui.end_row();
                        }
                        if let Some(w) = stats_of(&h.param) {
                            ui.label("weight norm");
                            ui.monospace(format!("{:.4e}", w.norm));
                            ui.end_row();
                        }
                        if let Some(s) = snap {
                            ui.label("read at step");
                            ui.monospace(s.step.to_string());
                            ui.end_row();
                        }
                    });
            });
        selection.1 = open;
        if snapshots.inspect.as_ref() != Some(&h.param) {
            snapshots.inspect = Some(h.param.clone());
            snapshots.dirty_now();
        }
    } else {
        snapshots.inspect = None;
    }

    Ok(())
}

/// Gives the scene camera the rectangle the panels leave free.
fn apply_viewport(ui_state: Res<UiState>, mut cameras: Query<&mut Camera, With<SceneCamera>>) {
    let Some((x, y, w, h)) = ui_state.central else {
        return;
    };
    for mut camera in &mut cameras {
        let Some(target) = camera.physical_target_size() else {
            continue;
        };
        if x + w > target.x || y + h > target.y || w < 8 || h < 8 {
            continue;
        }
        let viewport = Viewport {
            physical_position: UVec2::new(x, y),
            physical_size: UVec2::new(w, h),
            ..default()
        };
        if camera
            .viewport
            .as_ref()
            .map(|v| (v.physical_position, v.physical_size))
            != Some((viewport.physical_position, viewport.physical_size))
        {
            camera.viewport = Some(viewport);
        }
    }
}

/// Selects the heatmap under a left click in the main view.
fn select_on_click(
    buttons: Res<ButtonInput<MouseButton>>,
    windows: Query<&Window, With<bevy::window::PrimaryWindow>>,
    cameras: Query<(&Camera, &GlobalTransform), With<SceneCamera>>,
    heatmaps: Query<(Entity, &Heatmap)>,
    egui_input: Option<Res<bevy_egui::input::EguiWantsInput>>,
    mut selection: ResMut<Selection>,
) {
    if !buttons.just_pressed(MouseButton::Left)
        || egui_input.is_some_and(|e| e.wants_pointer_input() || e.is_pointer_over_area())
    {
        return;
    }
    let (Ok(window), Ok((camera, transform))) = (windows.single(), cameras.single()) else {
        return;
    };
    let Some(cursor) = window.cursor_position() else {
        return;
    };
    let origin = camera.logical_viewport_rect().map_or(Vec2::ZERO, |r| r.min);
    if let Ok(world) = camera.viewport_to_world_2d(transform, cursor - origin)
        && let Some(e) = super::scene_model::heatmap_at(&heatmaps, world)
    {
        *selection = Selection(Some(e), true);
    }
}
