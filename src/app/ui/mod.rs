//! The egui panels around the main view, shared by every scene: run
//! configuration, controls and metrics (left), the loss chart and the sample
//! box (right), the scene switcher (top), the status line (bottom), and the
//! hover tooltip. The main view's camera gets the rectangle in between; each
//! scene draws its own toolbar over the top of it ([`scene_toolbar`]) and
//! its own inspector.

use crate::app::canvas::{Hover, SceneCamera};
#[cfg(not(target_arch = "wasm32"))]
use crate::app::files;
use crate::app::sample::SampleState;
use crate::app::scenes::Scene;
use crate::app::training::{
    AppStatus, BackendChoice, Run, RunCommand, RunSettings, RunState, StepRecord,
};
use crate::model::config::{BUILTIN_PRESETS, Config};
use bevy::camera::Viewport;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use egui_plot::{HLine, Legend, Line, Plot, PlotPoints, Points};
use std::path::PathBuf;

mod help;
pub mod state;
pub mod toolbar;
pub use state::UiState;
pub use toolbar::{knockout_toggles, knocked_out_note, scene_status, scene_toolbar, toolbar_bottom};

pub struct UiPlugin;

impl Plugin for UiPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<UiState>()
            .add_systems(
                EguiPrimaryContextPass,
                (
                    use_label_font,
                    crate::app::language::switch_language,
                    presenter_mode,
                    draw_ui,
                    hover_tooltip,
                )
                    .chain(),
            )
            .add_systems(Update, apply_viewport);
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

/// The vertical gap between rows of controls (egui's is 3).
pub const ROW_GAP: f32 = 7.0;
/// The panels' text and their weak text (hints, captions), as greys.
pub const TEXT_GREY: u8 = 190;
pub const WEAK_TEXT_GREY: u8 = 160;

/// Adds the label font (DejaVu Sans) behind egui's own, once: egui's
/// fonts then find every glyph the labels use (Chinese adds its font when
/// chosen: [`crate::app::language`]).
fn use_label_font(mut contexts: EguiContexts, mut done: Local<bool>) -> Result {
    if *done {
        return Ok(());
    }
    let ctx = contexts.ctx_mut()?;
    ctx.set_fonts(crate::app::language::egui_fonts(None));
    // Rows of controls 25 points apart: WCAG 2.2's 24-pixel target spacing
    // for egui's 18-point fields (src/app/access, checked by tests/app.rs).
    ctx.all_styles_mut(|s| s.spacing.item_spacing.y = ROW_GAP);
    // Text at 4.5:1 and more on the dark panels (WCAG 2.2's contrast,
    // checked over screenshots by tests/app.rs): egui's body text (grey
    // 140) and its weak text (half of that) are lighter here.
    ctx.style_mut_of(egui::Theme::Dark, |s| {
        s.visuals.widgets.noninteractive.fg_stroke.color = egui::Color32::from_gray(TEXT_GREY);
        s.visuals.weak_text_color = Some(egui::Color32::from_gray(WEAK_TEXT_GREY));
    });
    *done = true;
    Ok(())
}

/// Shows what the scene says is under the pointer, next to it.
fn hover_tooltip(
    mut contexts: EguiContexts,
    hover: Res<Hover>,
    keyboard: Res<crate::app::canvas::parts::VirtualPointer>,
) -> Result {
    let Some(text) = &hover.0 else { return Ok(()) };
    let ctx = contexts.ctx_mut()?;
    // By the keyboard's focused cell, when it stands in for the pointer.
    let zoom = ctx.zoom_factor();
    let at = keyboard.0.map(|p| egui::pos2(p.x / zoom, p.y / zoom)).or_else(|| ctx.pointer_hover_pos());
    if let Some(pos) = at {
        egui::Area::new(egui::Id::new("scene-hover"))
            .fixed_pos(pos + egui::vec2(14.0, 14.0))
            .order(egui::Order::Tooltip)
            .interactable(false)
            .show(ctx, |ui| {
                egui::Frame::popup(ui.style()).show(ui, |ui| {
                    ui.monospace(text);
                });
            });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn draw_ui(
    mut contexts: EguiContexts,
    mut ui_state: ResMut<UiState>,
    mut settings: ResMut<RunSettings>,
    run: Option<Res<Run>>,
    mut status: ResMut<AppStatus>,
    records: Query<&StepRecord>,
    mut commands: MessageWriter<RunCommand>,
    mut sample: ResMut<SampleState>,
    scene: Res<State<Scene>>,
    mut next_scene: ResMut<NextState<Scene>>,
    mut export: MessageWriter<crate::app::export::ExportPng>,
    mut lesson: ResMut<crate::app::lesson::LessonPlayer>,
    (earlier, gallery_fetch, shown_step, gpu): (
        Res<crate::app::training::EarlierRuns>,
        Res<crate::app::training::GalleryFetch>,
        Res<crate::app::training::ShownStep>,
        Res<crate::app::training::GpuDevice>,
    ),
    mut data_out: (
        MessageWriter<crate::app::data::ExportData>,
        MessageWriter<crate::app::data::ExportLossChart>,
    ),
    (workshop, mut shown, mut language, mut class): (
        Res<crate::app::workshop::Workshop>,
        ResMut<crate::app::workshop::PanelsShown>,
        ResMut<crate::app::language::AppLanguage>,
        ResMut<crate::app::class::ClassClient>,
    ),
) -> Result {
    let locked = workshop.locked;
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
        crate::app::gallery::progress_bar(ui, &gallery_fetch);
        ui.horizontal_wrapped(|ui| {
            ui.label(crate::t!(
                "status-backend",
                backend = run.backend_label.as_str()
            ));
            if let Some(threads) = run.engine.worker_threads() {
                ui.separator();
                ui.label(crate::t!("status-worker", threads = threads.to_string()));
            }
            ui.separator();
            ui.label(crate::t!(&format!("run-state-{:?}", run.state)));
            if let Some(info) = &status.info {
                ui.separator();
                ui.label(info);
            }
        });
        if let Some(notice) = &run.notice {
            ui.colored_label(egui::Color32::from_rgb(240, 190, 80), notice);
        }
        if let Some(path) = status.confirm_replace.clone() {
            ui.horizontal_wrapped(|ui| {
                ui.colored_label(
                    egui::Color32::from_rgb(240, 190, 80),
                    crate::t!("confirm-replace", path = path.display().to_string()),
                );
                if ui.button(crate::t!("replace-it")).clicked() {
                    commands.write(RunCommand::SaveCheckpoint {
                        path,
                        replace: true,
                    });
                }
                if ui
                    .button(crate::t!("keep-it"))
                    .on_hover_text(crate::t!("keep-it-hover"))
                    .clicked()
                {
                    status.confirm_replace = None;
                }
            });
        }
        let mut dismiss = None;
        for (i, e) in status.errors.iter().enumerate() {
            ui.horizontal(|ui| {
                if ui.small_button("✕").clicked() {
                    dismiss = Some(i);
                }
                // Wrapped: a long error must not widen the panels.
                ui.add(
                    egui::Label::new(
                        egui::RichText::new(e).color(egui::Color32::from_rgb(255, 110, 100)),
                    )
                    .wrap(),
                );
            });
        }
        if let Some(i) = dismiss {
            status.errors.remove(i);
        }
    });

    // ---- bottom, above the status line: the lesson's narration
    let class_view = class.view_of(&lesson);
    crate::app::lesson::narration_panel(
        &mut root,
        &mut lesson,
        ui_state.presenter,
        locked,
        class_view.as_ref(),
    );
    // ---- bottom, above the narration: a student's part in the class
    // experiment
    let preset = lesson.lesson.as_ref().map(|(_, l)| l.preset.clone());
    crate::app::class::panel::student_card(&mut root, &mut class, &run, preset.as_deref(), &mut commands);
    // ---- right: a live class's panel (the teacher's)
    crate::app::class::panel::teacher_panel(&mut root, &mut class, &lesson, *scene.get());
    crate::app::class::panel::student_cover(ctx, &class);

    // ---- top: the scene switcher (a workshop link: the lesson's title)
    egui::Panel::top("scene").show(&mut root, |ui| {
        let current = *scene.get();
        let buttons_id = egui::Id::new("scene-bar-buttons");
        // The scene tabs, and what the scene shows with the buttons on the
        // right: one row where they fit, else two (presenter mode at
        // 1280×720 ran the last tabs under the buttons).
        let mut tabs = |ui: &mut egui::Ui| {
            if locked {
                let title = lesson
                    .lesson
                    .as_ref()
                    .map_or(crate::t!("workshop-the-lesson"), |(_, l)| l.title.clone());
                let heading = match class.link.as_ref() {
                    // A class's student: the class's code, to read out.
                    Some(c) => crate::t!("class-title-bar", code = c.code.as_str(), title = title.as_str()),
                    None => crate::t!("workshop-title", title = title.as_str()),
                };
                ui.strong(egui::RichText::new(heading).size(15.0))
                    .on_hover_text(crate::t!("workshop-hover"));
            } else {
                ui.strong(crate::t!("scene"));
            }
            for s in Scene::ALL.into_iter().filter(|_| !locked) {
                if ui
                    .selectable_label(current == s, egui::RichText::new(s.title()).size(15.0))
                    .on_hover_text(s.about())
                    .clicked()
                    && current != s
                {
                    next_scene.set(s);
                }
            }
        };
        let mut rest = |ui: &mut egui::Ui| {
            ui.separator();
            // What the scene shows, cut short with "…" where the window is
            // narrow: it must not run under the buttons on the right (each
            // tab's tooltip has it whole).
            let room = ui.available_width() - if locked { 180.0 } else { 440.0 };
            if room > 120.0 {
                ui.allocate_ui(egui::vec2(room, ui.spacing().interact_size.y), |ui| {
                    ui.add(
                        egui::Label::new(egui::RichText::new(current.about()).weak()).truncate(),
                    );
                });
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                let label = if ui_state.wide {
                    crate::t!("panels-show")
                } else {
                    crate::t!("panels-wide")
                };
                if !locked
                    && ui
                        .button(label)
                        .on_hover_text(crate::t!("panels-hover"))
                        .clicked()
                {
                    ui_state.wide = !ui_state.wide;
                }
                crate::app::language::language_menu(ui, &mut language);
                ui.menu_button(crate::t!("view-menu"), |ui| {
                    // Help first, inside this menu: a button of its own made
                    // the bar too wide for one row at 1280×720.
                    let help = ui.menu_button(crate::t!("help-button"), |ui| help::help_menu(ui, current));
                    help.response.on_hover_text(crate::t!("help-hover"));
                    if help.inner == Some(true) {
                        ui_state.shortcuts = true;
                    }
                    ui.separator();
                    let mut presenter = ui_state.presenter;
                    if ui
                        .checkbox(&mut presenter, crate::t!("presenter-mode"))
                        .on_hover_text(crate::t!("presenter-hover"))
                        .changed()
                    {
                        ui_state.set_presenter(presenter);
                    }
                    let mut cb = crate::app::heatmap::palette()
                        == crate::app::heatmap::Palette::OrangePurple;
                    if ui
                        .checkbox(&mut cb, crate::t!("palette-colour-blind"))
                        .on_hover_text(crate::t!("palette-hover"))
                        .changed()
                    {
                        crate::app::heatmap::set_palette(if cb {
                            crate::app::heatmap::Palette::OrangePurple
                        } else {
                            crate::app::heatmap::Palette::RedBlue
                        });
                    }
                    ui.checkbox(&mut ui_state.reduced_motion, crate::t!("reduced-motion"))
                        .on_hover_text(crate::t!("reduced-motion-hover"));
                    ui.checkbox(&mut ui_state.numbers_table, crate::t!("access-table-toggle"))
                        .on_hover_text(crate::t!("access-table-hover"));
                });
                if !locked
                    && ui
                        .button(crate::t!("png-button"))
                        .on_hover_text(crate::t!("png-hover"))
                        .clicked()
                {
                    export.write(crate::app::export::ExportPng {
                        name: current.key().to_string(),
                        rect: None,
                    });
                }
                if !locked
                    && ui
                        .button(crate::t!("data-button"))
                        .on_hover_text(crate::t!("data-hover"))
                        .clicked()
                {
                    data_out.0.write(crate::app::data::ExportData);
                }
                // The buttons' width, for the next frame's choice of rows.
                let used = ui.min_rect().width();
                ui.ctx().data_mut(|d| d.insert_temp(buttons_id, used));
                if ui.available_width() > 520.0 {
                    ui.weak(crate::t!("view-keys"));
                }
            });
        };
        let spacing = ui.spacing().item_spacing.x + 2.0 * ui.spacing().button_padding.x;
        let tab_width: f32 = Scene::ALL
            .into_iter()
            .filter(|_| !locked)
            .map(|s| {
                let galley = ui.painter().layout_no_wrap(
                    s.title(),
                    egui::FontId::proportional(15.0),
                    egui::Color32::WHITE,
                );
                galley.size().x + spacing
            })
            .sum::<f32>()
            + 80.0;
        // The buttons on the right as drawn last frame, and a margin.
        let buttons_width = ui
            .ctx()
            .data(|d| d.get_temp::<f32>(buttons_id))
            .unwrap_or(if locked { 180.0 } else { 330.0 })
            + 24.0;
        if ui.available_width() >= tab_width + buttons_width {
            ui.horizontal(|ui| {
                tabs(ui);
                rest(ui);
            });
        } else {
            ui.horizontal_wrapped(|ui| tabs(ui));
            ui.horizontal(|ui| rest(ui));
        }
    });

    // ---- left and right, unless the view is wide or a workshop link's
    let panels = !ui_state.wide && !locked;
    *shown = crate::app::workshop::PanelsShown {
        scene_tabs: !locked,
        run_panel: panels,
        charts: panels,
        end_lesson: lesson.lesson.is_some() && !locked,
    };
    if panels {
        side_panels(
            &mut root,
            &mut ui_state,
            &mut settings,
            &run,
            &mut status,
            &records,
            (&earlier, shown_step.0, gpu.tensor_cores()),
            &mut commands,
            &mut sample,
            &mut data_out.1,
        );
    }

    // What is left is the main view.
    let rect = root.available_rect_before_wrap();
    let ppp = ctx.pixels_per_point();
    ui_state.central = Some((
        (rect.min.x * ppp) as u32,
        (rect.min.y * ppp) as u32,
        (rect.width() * ppp).max(1.0) as u32,
        (rect.height() * ppp).max(1.0) as u32,
    ));
    Ok(())
}

/// The "break it" labs: switches for the next run (the causal mask, the
/// position embeddings) and learning rates far from the preset's. Each
/// takes effect with New run, and the loss chart keeps the run before it
/// for comparison.
fn lab_settings(
    ui: &mut egui::Ui,
    settings: &mut RunSettings,
    commands: &mut MessageWriter<RunCommand>,
) {
    egui::CollapsingHeader::new(crate::t!("labs-header"))
        .default_open(!settings.lab.is_intact())
        .show(ui, |ui| {
            ui.checkbox(&mut settings.lab.causal_mask, crate::t!("lab-causal-mask"))
                .on_hover_text(crate::t!("lab-causal-mask-hover"));
            ui.checkbox(
                &mut settings.lab.position_embeddings,
                crate::t!("lab-position-embeddings"),
            )
            .on_hover_text(crate::t!("lab-position-embeddings-hover"));
            ui.horizontal_wrapped(|ui| {
                ui.label(crate::t!("learning-rate"));
                let preset = settings.config.lr;
                for (label, factor) in [
                    (crate::t!("lab-lr-preset"), 1.0),
                    ("×10".into(), 10.0),
                    ("×1000".into(), 1e3),
                    ("×10000".into(), 1e4),
                ] {
                    let lr = preset * factor;
                    if ui
                        .selectable_label((settings.lr - lr).abs() <= lr * 1e-4, label)
                        .on_hover_text(format!("{lr:.1e}"))
                        .clicked()
                    {
                        settings.lr = lr;
                    }
                }
            });
            if ui
                .button(crate::t!("new-lab-run"))
                .on_hover_text(crate::t!("new-lab-run-hover"))
                .clicked()
            {
                commands.write(RunCommand::NewRun);
            }
            ui.small(crate::t!("lab-chart-note"));
        });
}

/// Fine-tune (LoRA): the run's model frozen, small adapters trained on the
/// loaded corpus or on pasted text; or, on a fine-tune, what it is.
fn finetune_settings(
    ui: &mut egui::Ui,
    ui_state: &mut UiState,
    settings: &RunSettings,
    run: &Run,
    commands: &mut MessageWriter<RunCommand>,
) {
    egui::CollapsingHeader::new(crate::t!("finetune-header"))
        .default_open(run.config().lora.is_some())
        .show(ui, |ui| {
            if let (Some(lora), Some(f)) = (run.config().lora, &settings.finetune) {
                ui.label(crate::t!(
                    "finetune-status",
                    base = f.base_name.as_str(),
                    step = f.base.step,
                    corpus = run.corpus_name.as_str(),
                    rank = lora.rank,
                    targets = lora.targets.describe(),
                    alpha = lora.alpha.to_string(),
                ));
                if let Some(share) = crate::model::lora::trained_share(run.config()) {
                    ui.small(share);
                }
                ui.small(crate::t!("finetune-reset-note"));
                return;
            }
            ui.small(crate::t!("finetune-intro"));
            let o = &mut ui_state.finetune;
            egui::Grid::new("finetune").num_columns(2).show(ui, |ui| {
                ui.label(crate::t!("finetune-rank"));
                let mut rank = o.rank as u32;
                ui.add(egui::DragValue::new(&mut rank).range(1..=64));
                if rank as usize != o.rank {
                    // α follows the rank: a scale of 2, as the CLI's default.
                    o.rank = rank as usize;
                    o.alpha = 2.0 * o.rank as f32;
                }
                ui.end_row();
                ui.label(crate::t!("steps"));
                ui.add(
                    egui::DragValue::new(&mut o.steps)
                        .speed(10)
                        .range(1..=100_000),
                );
                ui.end_row();
                ui.label(crate::t!("learning-rate"));
                ui.add(
                    egui::DragValue::new(&mut o.lr)
                        .speed(1e-4)
                        .range(1e-6..=1.0)
                        .max_decimals(5),
                );
                ui.end_row();
                ui.label(crate::t!("finetune-adapt"));
                ui.horizontal(|ui| {
                    ui.checkbox(&mut o.targets.attention, crate::t!("attention"));
                    ui.checkbox(&mut o.targets.mlp, crate::t!("mlp"));
                });
                ui.end_row();
            });
            ui.add(
                egui::TextEdit::multiline(&mut ui_state.finetune_text)
                    .hint_text(crate::t!("finetune-paste-hint"))
                    .desired_rows(3)
                    .desired_width(f32::INFINITY),
            );
            let pasted = !ui_state.finetune_text.trim().is_empty();
            let on = if pasted {
                crate::t!("finetune-pasted", bytes = ui_state.finetune_text.len())
            } else {
                settings.corpus.name()
            };
            let can = ui_state.finetune.targets.attention || ui_state.finetune.targets.mlp;
            if ui
                .add_enabled(
                    can,
                    egui::Button::new(crate::t!("finetune-on", text = on.as_str())),
                )
                .on_disabled_hover_text(crate::t!("finetune-disabled"))
                .clicked()
            {
                if pasted {
                    commands.write(RunCommand::LoadCorpus {
                        name: "pasted text".into(),
                        bytes: ui_state.finetune_text.clone().into_bytes(),
                    });
                }
                commands.write(RunCommand::Finetune(ui_state.finetune));
            }
        });
}

/// The run panel's Precision box: f32, or mixed on the tensor cores,
/// greyed (its hover says why) where the training device has none.
fn precision_box(ui: &mut egui::Ui, precision: &mut crate::backends::Precision, tensor_cores: &Result<(), String>) {
    use crate::backends::Precision;
    let label = |p: Precision| match p {
        Precision::F32 => crate::t!("precision-f32"),
        Precision::Mixed => crate::t!("precision-mixed"),
    };
    let combo = egui::ComboBox::from_id_salt("precision")
        .selected_text(label(*precision))
        .show_ui(ui, |ui| {
            ui.selectable_value(precision, Precision::F32, label(Precision::F32));
            let mixed = ui.add_enabled(
                tensor_cores.is_ok(),
                egui::Button::selectable(*precision == Precision::Mixed, label(Precision::Mixed)),
            );
            if mixed.clicked() {
                *precision = Precision::Mixed;
            }
            if let Err(why) = tensor_cores {
                mixed.on_disabled_hover_text(crate::t!("precision-mixed-unavailable", why = why.as_str()));
            }
        });
    let response = combo.response.on_hover_text(crate::t!("precision-hover"));
    crate::app::canvas::parts::named(response, egui::WidgetType::ComboBox, crate::t!("precision"));
}

/// The run panel (left) and the loss chart and sampler (right).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(target_arch = "wasm32", allow(unused_variables))] // the path box and its errors are native
fn side_panels(
    root: &mut egui::Ui,
    ui_state: &mut UiState,
    settings: &mut RunSettings,
    run: &Run,
    status: &mut AppStatus,
    records: &Query<&StepRecord>,
    (earlier, shown_step, tensor_cores): (&crate::app::training::EarlierRuns, Option<u64>, Result<(), String>),
    commands: &mut MessageWriter<RunCommand>,
    sample: &mut SampleState,
    loss_out: &mut MessageWriter<crate::app::data::ExportLossChart>,
) {
    let run_label = run.label();
    // ---- left: run configuration, controls, metrics
    egui::Panel::left("run")
        .default_size(300.0)
        .show(root, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.heading("TinyGPT Explainer");
                ui.label(crate::t!("app-tagline"));
                ui.separator();
                ui.strong(crate::t!("run"));
                let mut preset = settings.preset.clone();
                let combo = egui::ComboBox::from_label(crate::t!("preset"))
                    .selected_text(&preset)
                    .show_ui(ui, |ui| {
                        for (id, _) in BUILTIN_PRESETS {
                            ui.selectable_value(&mut preset, id.to_string(), *id);
                        }
                    });
                crate::app::canvas::parts::named(combo.response, egui::WidgetType::ComboBox, crate::t!("preset"));
                if preset != settings.preset
                    && let Ok(config) = Config::load(&preset)
                {
                    *settings = RunSettings {
                        corpus: settings.corpus.clone(),
                        seed: settings.seed,
                        backend: settings.backend,
                        ..RunSettings::from_preset(&preset, config)
                    };
                }
                let c = &settings.config;
                ui.small(crate::t!(
                    "preset-summary",
                    layers = c.n_layer,
                    heads = c.n_head,
                    d = c.d_model,
                    ctx = c.ctx,
                    batch = c.batch,
                    params = crate::model::config::group_thousands(c.param_count())
                ));
                ui.label(crate::t!(
                    "corpus-line",
                    name = settings.corpus.name(),
                    bytes = settings.corpus.len()
                ));
                #[cfg(not(target_arch = "wasm32"))]
                {
                    ui.horizontal(|ui| {
                        crate::app::canvas::parts::named(
                            ui.add(
                                egui::TextEdit::singleline(&mut ui_state.corpus_path)
                                    .hint_text("path/to/text.txt")
                                    .desired_width(170.0),
                            ),
                            egui::WidgetType::TextEdit,
                            crate::t!("access-corpus-file"),
                        );
                        if ui.button(crate::t!("load-corpus")).clicked() {
                            match files::load_path(&PathBuf::from(ui_state.corpus_path.trim())) {
                                Ok(c) => {
                                    commands.write(c);
                                }
                                Err(e) => status.error(e),
                            }
                        }
                    });
                    ui.small(crate::t!("drop-native"));
                }
                #[cfg(target_arch = "wasm32")]
                {
                    if ui
                        .button(crate::t!("open-file"))
                        .on_hover_text(crate::t!("open-file-hover"))
                        .clicked()
                    {
                        crate::app::browser::open_file_picker();
                    }
                    ui.small(crate::t!("drop-web"));
                }
                egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
                    ui.label(crate::t!("learning-rate"));
                    ui.add(
                        egui::DragValue::new(&mut settings.lr)
                            .speed(1e-5)
                            .range(1e-6..=10.0)
                            .max_decimals(6),
                    );
                    ui.end_row();
                    ui.label(crate::t!("steps"));
                    ui.add(
                        egui::DragValue::new(&mut settings.steps)
                            .speed(10)
                            .range(1..=10_000_000),
                    );
                    ui.end_row();
                    ui.label(crate::t!("seed"));
                    ui.add(egui::DragValue::new(&mut settings.seed));
                    ui.end_row();
                    ui.label(crate::t!("backend"));
                    let combo = egui::ComboBox::from_id_salt("backend")
                        .selected_text(format!("{:?}", settings.backend))
                        .show_ui(ui, |ui| {
                            for b in BackendChoice::ALL {
                                ui.selectable_value(&mut settings.backend, b, format!("{b:?}"));
                            }
                        });
                    crate::app::canvas::parts::named(combo.response, egui::WidgetType::ComboBox, crate::t!("backend"));
                    ui.end_row();
                    ui.label(crate::t!("precision"));
                    precision_box(ui, &mut settings.precision, &tensor_cores);
                    ui.end_row();
                });
                if ui.button(crate::t!("new-run")).clicked() {
                    commands.write(RunCommand::NewRun);
                }
                ui.separator();
                ui.strong(crate::t!("training"));
                ui.horizontal(|ui| {
                    let training = run.state == RunState::Training;
                    if ui
                        .add_enabled(!training, egui::Button::new(crate::t!("train-button")))
                        .clicked()
                    {
                        commands.write(RunCommand::Train);
                    }
                    if ui
                        .add_enabled(training, egui::Button::new(crate::t!("pause-button")))
                        .clicked()
                    {
                        commands.write(RunCommand::Pause);
                    }
                    if ui
                        .add_enabled(!training, egui::Button::new(crate::t!("step-button")))
                        .clicked()
                    {
                        commands.write(RunCommand::Step);
                    }
                    if ui
                        .button(crate::t!("reset-button"))
                        .on_hover_text(crate::t!("reset-hover"))
                        .clicked()
                    {
                        commands.write(RunCommand::NewRun);
                    }
                });
                #[cfg(not(target_arch = "wasm32"))]
                ui.horizontal(|ui| {
                    crate::app::canvas::parts::named(
                        ui.add(
                            egui::TextEdit::singleline(&mut ui_state.checkpoint_path)
                                .desired_width(170.0),
                        ),
                        egui::WidgetType::TextEdit,
                        crate::t!("access-checkpoint-file"),
                    );
                    if ui.button(crate::t!("save")).clicked() {
                        commands.write(RunCommand::SaveCheckpoint {
                            path: PathBuf::from(ui_state.checkpoint_path.trim()),
                            replace: false,
                        });
                    }
                    if ui.button(crate::t!("load")).clicked() {
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
                    if ui
                        .button(crate::t!("download-checkpoint"))
                        .on_hover_text(crate::t!("download-checkpoint-hover"))
                        .clicked()
                    {
                        // Named when saved, after the step it holds.
                        commands.write(RunCommand::SaveCheckpoint {
                            path: PathBuf::new(),
                            replace: false,
                        });
                    }
                    if ui
                        .button(crate::t!("load-ellipsis"))
                        .on_hover_text(crate::t!("load-checkpoint-hover"))
                        .clicked()
                    {
                        crate::app::browser::open_file_picker();
                    }
                });
                ui.horizontal(|ui| {
                    ui.label(crate::t!("trained-model"));
                    gallery_menu(ui, commands);
                });
                // Below the controls the browser test clicks by position.
                lab_settings(ui, settings, commands);
                finetune_settings(ui, ui_state, settings, run, commands);
                if !run.config().lab.is_intact() {
                    ui.colored_label(
                        egui::Color32::from_rgb(255, 170, 60),
                        crate::t!("lab-run-note", lab = run.config().lab.describe()),
                    );
                }
                ui.separator();
                ui.strong(crate::t!("metrics"));
                let cfg = run.config();
                let step = run.step();
                egui::Grid::new("metrics")
                    .num_columns(2)
                    .striped(true)
                    .show(ui, |ui| {
                        let mut row = |k: &str, v: String| {
                            ui.label(crate::i18n::tr(k, &[]));
                            ui.monospace(v);
                            ui.end_row();
                        };
                        row("metric-step", format!("{step} / {}", cfg.steps));
                        if let Some((trained, all, percent)) = crate::model::lora::trained_of(cfg) {
                            row(
                                "metric-trained",
                                crate::t!(
                                    "metric-trained-value",
                                    trained = crate::model::config::group_thousands(trained),
                                    all = crate::model::config::group_thousands(all),
                                    percent = format!("{percent:.1}")
                                ),
                            );
                        }
                        if let Some(m) = run.last {
                            row("metric-loss", format!("{:.4}", m.loss));
                            let ppl = (m.loss as f64).exp();
                            // A blown-up run's perplexity has 60 digits: keep it one short line.
                            row(
                                "metric-perplexity",
                                if ppl < 1e6 {
                                    format!("{ppl:.2}")
                                } else {
                                    format!("{ppl:.2e}")
                                },
                            );
                            row("learning-rate", format!("{:.2e}", m.lr));
                            row("metric-grad-norm", format!("{:.3}", m.grad_norm));
                        }
                        if let Some(v) = records
                            .iter()
                            .filter_map(|r| r.val_loss.map(|v| (r.step, v)))
                            .max_by_key(|(s, _)| *s)
                        {
                            row(
                                "metric-val-loss",
                                crate::t!(
                                    "metric-val-loss-value",
                                    loss = format!("{:.4}", v.1),
                                    step = v.0
                                ),
                            );
                        }
                        let recent: Vec<&StepRecord> =
                            records.iter().filter(|r| r.ms > 0.0).collect();
                        let tail = &recent[recent.len().saturating_sub(50)..];
                        if !tail.is_empty() {
                            let ms = tail.iter().map(|r| r.ms).sum::<f64>() / tail.len() as f64;
                            row("metric-ms-step", format!("{ms:.2}"));
                            row(
                                "metric-tokens-s",
                                crate::model::config::group_thousands(
                                    (cfg.tokens_per_step() as f64 / (ms / 1e3)) as usize,
                                ),
                            );
                            if run.state == RunState::Training {
                                row(
                                    "metric-eta",
                                    fmt_duration(cfg.steps.saturating_sub(step) as f64 * ms / 1e3),
                                );
                            }
                        }
                        row("metric-corpus", run.corpus_name.clone());
                    });
            });
        });

    // ---- right: loss chart and sampling
    egui::Panel::right("charts")
        .default_size(380.0)
        .show(root, |ui| {
            ui.horizontal(|ui| {
                ui.strong(crate::t!("loss"));
                if ui
                    .small_button("SVG + CSV")
                    .on_hover_text(crate::t!("loss-export-hover"))
                    .clicked()
                {
                    loss_out.write(crate::app::data::ExportLossChart);
                }
            });
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
                .x_axis_label(crate::t!("axis-step"))
                .include_y(0.0)
                .include_y(6.0)
                .show(ui, |plot| {
                    plot.hline(
                        HLine::new(crate::t!("random-guessing"), 256f64.ln())
                            .color(egui::Color32::GRAY),
                    );
                    // Earlier runs behind this one, the newest brightest.
                    let n = earlier.0.len();
                    for (i, e) in earlier.0.iter().enumerate() {
                        let shade = (110 + 50 * (i + 3 - n.min(3))) as u8;
                        plot.line(
                            Line::new(
                                crate::t!("loss-before", label = e.label.as_str()),
                                PlotPoints::from(e.loss.clone()),
                            )
                            .color(egui::Color32::from_gray(shade))
                            .style(egui_plot::LineStyle::dashed_loose()),
                        );
                    }
                    plot.line(Line::new(
                        crate::t!("loss-train", label = run_label.as_str()),
                        PlotPoints::from(train),
                    ));
                    plot.line(Line::new(
                        crate::t!("loss-val"),
                        PlotPoints::from(val.clone()),
                    ));
                    plot.points(
                        Points::new(crate::t!("loss-val"), PlotPoints::from(val)).radius(3.0),
                    );
                    // The step a scene shows the model at (the Time-lapse's frame).
                    if let Some(step) = shown_step {
                        plot.vline(
                            egui_plot::VLine::new(crate::t!("loss-shown-step", step = step), step as f64)
                                .color(egui::Color32::from_rgb(255, 196, 0))
                                .width(2.0),
                        );
                    }
                });
            ui.separator();
            ui.strong(crate::t!("sample"));
            if run.config().lora.is_some() {
                ui.horizontal(|ui| {
                    ui.label(crate::t!("sample-model"));
                    let before = sample.from_base;
                    ui.selectable_value(
                        &mut sample.from_base,
                        false,
                        crate::t!("sample-fine-tuned"),
                    );
                    ui.selectable_value(&mut sample.from_base, true, crate::t!("sample-base"));
                    if sample.from_base != before {
                        // The same prompt and seed through the other model.
                        sample.start();
                    }
                });
            }
            ui.horizontal(|ui| {
                ui.label(crate::t!("sample-prompt"));
                ui.text_edit_singleline(&mut sample.prompt);
            });
            egui::Grid::new("sample").num_columns(4).show(ui, |ui| {
                ui.label(crate::t!("temperature"));
                ui.add(
                    egui::DragValue::new(&mut sample.options.temperature)
                        .speed(0.01)
                        .range(0.0..=3.0),
                );
                ui.label(crate::t!("top-k"));
                ui.add(egui::DragValue::new(&mut sample.options.top_k).range(1..=256));
                ui.end_row();
                ui.label(crate::t!("length"));
                ui.add(egui::DragValue::new(&mut sample.length).range(1..=5000));
                ui.label(crate::t!("seed"));
                ui.add(egui::DragValue::new(&mut sample.options.seed));
                ui.end_row();
            });
            ui.horizontal(|ui| {
                if ui.button(crate::t!("generate")).clicked() {
                    sample.start();
                }
                if sample.running() && ui.button(crate::t!("stop")).clicked() {
                    sample.stop();
                }
                if let Some(s) = sample.from_step {
                    ui.small(crate::t!("sample-from-step", step = s));
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

/// Presenter mode's look and keys: big type (egui zoom 1.3) and white text
/// while it is on; F5 toggles it; Space trains/pauses (the Flash scene keeps
/// Space for its replay); a ring round the pointer, for a room to follow.
fn presenter_mode(
    mut contexts: EguiContexts,
    mut ui_state: ResMut<UiState>,
    keys: Option<Res<ButtonInput<KeyCode>>>,
    run: Option<Res<Run>>,
    scene: Res<State<Scene>>,
    mut commands: MessageWriter<RunCommand>,
    mut applied: Local<Option<bool>>,
) -> Result {
    let ctx = contexts.ctx_mut()?;
    let typing = ctx.egui_wants_keyboard_input();
    if let Some(keys) = &keys
        && !typing
    {
        if keys.just_pressed(KeyCode::F5) {
            let on = !ui_state.presenter;
            ui_state.set_presenter(on);
        }
        if ui_state.presenter
            && keys.just_pressed(KeyCode::Space)
            && *scene.get() != Scene::Flash
            && let Some(run) = &run
        {
            commands.write(if run.state == RunState::Training {
                RunCommand::Pause
            } else {
                RunCommand::Train
            });
        }
    }
    if *applied != Some(ui_state.presenter) {
        *applied = Some(ui_state.presenter);
        ctx.set_zoom_factor(if ui_state.presenter { 1.3 } else { 1.0 });
        ctx.all_styles_mut(|s| {
            s.visuals.override_text_color = ui_state.presenter.then_some(egui::Color32::WHITE);
        });
    }
    if ui_state.presenter
        && let Some(p) = ctx.pointer_latest_pos()
    {
        ctx.layer_painter(egui::LayerId::new(
            egui::Order::Tooltip,
            egui::Id::new("pointer-ring"),
        ))
        .circle_stroke(
            p,
            22.0,
            egui::Stroke::new(
                3.0,
                egui::Color32::from_rgba_unmultiplied(255, 210, 60, 200),
            ),
        );
    }
    Ok(())
}

/// The gallery's models, one button each (the shipped TinyShakespeare ones
/// on the row, every one in the menu beside them): each opens with the text
/// it learned as the run's corpus.
fn gallery_menu(ui: &mut egui::Ui, commands: &mut MessageWriter<RunCommand>) {
    let entries = crate::model::gallery::entries();
    let hover = |e: &crate::model::gallery::Entry| {
        crate::t!(
            "gallery-hover",
            what = gallery_what(e),
            text = e.text.name(),
            source = e.source,
            licence = e.licence,
            command = e.command,
        )
    };
    for entry in entries
        .iter()
        .filter(|e| e.text == crate::model::gallery::Text::Shakespeare)
    {
        if ui.button(entry.id).on_hover_text(hover(entry)).clicked() {
            commands.write(RunCommand::OpenGallery {
                id: entry.id.into(),
            });
        }
    }
    ui.menu_button(crate::t!("gallery-menu"), |ui| {
        ui.strong(crate::t!("gallery-title"));
        egui::Grid::new("gallery")
            .num_columns(2)
            .spacing([10.0, 6.0])
            .show(ui, |ui| {
                for entry in &entries {
                    if ui.button(entry.id).on_hover_text(hover(entry)).clicked() {
                        commands.write(RunCommand::OpenGallery {
                            id: entry.id.into(),
                        });
                        ui.close();
                    }
                    ui.label(gallery_what(entry));
                    ui.end_row();
                }
            });
    });
}

/// What a gallery model does, in the current language (the catalogue's
/// `gallery-what-ID`; the entry's own English words for a model it lacks).
fn gallery_what(entry: &crate::model::gallery::Entry) -> String {
    let key = format!("gallery-what-{}", entry.id);
    let said = crate::i18n::tr(&key, &[]);
    if said == key {
        entry.what.to_string()
    } else {
        said
    }
}
