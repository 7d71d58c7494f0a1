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

pub mod state;
pub mod toolbar;
pub use state::UiState;
pub use toolbar::{scene_status, scene_toolbar, toolbar_bottom};

pub struct UiPlugin;

impl Plugin for UiPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<UiState>()
            .add_systems(
                EguiPrimaryContextPass,
                (use_label_font, presenter_mode, draw_ui, hover_tooltip).chain(),
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

/// Adds the label font (DejaVu Sans) behind egui's own, once: egui's
/// fonts then find every glyph the labels use.
fn use_label_font(mut contexts: EguiContexts, mut done: Local<bool>) -> Result {
    if *done {
        return Ok(());
    }
    let ctx = contexts.ctx_mut()?;
    let mut fonts = egui::FontDefinitions::default();
    fonts.font_data.insert(
        "dejavu".into(),
        std::sync::Arc::new(egui::FontData::from_static(crate::app::canvas::LABEL_FONT)),
    );
    for family in [egui::FontFamily::Proportional, egui::FontFamily::Monospace] {
        fonts
            .families
            .entry(family)
            .or_default()
            .push("dejavu".into());
    }
    ctx.set_fonts(fonts);
    *done = true;
    Ok(())
}

/// Shows what the scene says is under the pointer, next to it.
fn hover_tooltip(mut contexts: EguiContexts, hover: Res<Hover>) -> Result {
    let Some(text) = &hover.0 else { return Ok(()) };
    let ctx = contexts.ctx_mut()?;
    if let Some(pos) = ctx.pointer_hover_pos() {
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
    (earlier, gallery_fetch): (
        Res<crate::app::training::EarlierRuns>,
        Res<crate::app::training::GalleryFetch>,
    ),
    mut data_out: (
        MessageWriter<crate::app::data::ExportData>,
        MessageWriter<crate::app::data::ExportLossChart>,
    ),
    (workshop, mut shown): (
        Res<crate::app::workshop::Workshop>,
        ResMut<crate::app::workshop::PanelsShown>,
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
        if let Some(path) = status.confirm_replace.clone() {
            ui.horizontal_wrapped(|ui| {
                ui.colored_label(
                    egui::Color32::from_rgb(240, 190, 80),
                    format!("{} exists and this app did not write it. Replace it with the run's checkpoint?", path.display()),
                );
                if ui.button("Replace it").clicked() {
                    commands.write(RunCommand::SaveCheckpoint { path, replace: true });
                }
                if ui.button("Keep it").on_hover_text("type another name beside Save").clicked() {
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
    crate::app::lesson::narration_panel(&mut root, &mut lesson, ui_state.presenter, locked);

    // ---- top: the scene switcher (a workshop link: the lesson's title)
    egui::Panel::top("scene").show(&mut root, |ui| {
        ui.horizontal(|ui| {
            let current = *scene.get();
            if locked {
                let title = lesson.lesson.as_ref().map_or("the lesson".to_string(), |(_, l)| l.title.clone());
                ui.strong(egui::RichText::new(format!("Workshop · {title}")).size(15.0))
                    .on_hover_text("this link opens one lesson: Back and Next below move through it");
            } else {
                ui.strong("Scene");
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
            ui.separator();
            // What the scene shows, cut short with "…" where the window is
            // narrow: it must not run under the buttons on the right (each
            // tab's tooltip has it whole).
            let room = ui.available_width() - if locked { 90.0 } else { 330.0 };
            if room > 120.0 {
                ui.allocate_ui(egui::vec2(room, ui.spacing().interact_size.y), |ui| {
                    ui.add(egui::Label::new(egui::RichText::new(current.about()).weak()).truncate());
                });
            }
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                let label = if ui_state.wide { "◧ panels" } else { "⛶ wide view" };
                if !locked
                    && ui
                    .button(label)
                    .on_hover_text("hide or show the side panels: the scene fills the window, as a projector wants")
                    .clicked()
                {
                    ui_state.wide = !ui_state.wide;
                }
                ui.menu_button("👁 view", |ui| {
                    let mut presenter = ui_state.presenter;
                    if ui.checkbox(&mut presenter, "presenter mode (F5)")
                        .on_hover_text("big type, high contrast, panels hidden, the pointer highlighted; Space trains/pauses, ← → step a lesson")
                        .changed()
                    {
                        ui_state.set_presenter(presenter);
                    }
                    let mut cb = crate::app::heatmap::palette() == crate::app::heatmap::Palette::OrangePurple;
                    if ui
                        .checkbox(&mut cb, "colour-blind-safe palette (orange/purple)")
                        .on_hover_text("heatmaps in ColorBrewer's PuOr instead of RdBu: distinct for red-green colour blindness")
                        .changed()
                    {
                        crate::app::heatmap::set_palette(if cb {
                            crate::app::heatmap::Palette::OrangePurple
                        } else {
                            crate::app::heatmap::Palette::RedBlue
                        });
                    }
                    ui.checkbox(&mut ui_state.reduced_motion, "reduced motion")
                        .on_hover_text("the FlashAttention replay jumps from visit to visit instead of flying tiles");
                });
                if !locked
                    && ui
                    .button("📷 PNG")
                    .on_hover_text("save this view as a PNG (F12)")
                    .clicked()
                {
                    export.write(crate::app::export::ExportPng {
                        name: current.key().to_string(),
                        rect: None,
                    });
                }
                if !locked
                    && ui
                    .button("💾 Data")
                    .on_hover_text("save the numbers behind this view, the run and its loss history as JSON (F11)")
                    .clicked()
                {
                    data_out.0.write(crate::app::data::ExportData);
                }
                if ui.available_width() > 520.0 {
                    ui.weak("wheel: zoom · drag: pan · 0: fit");
                }
            });
        });
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
            &earlier,
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
    egui::CollapsingHeader::new("🔨 Break it (labs)")
        .default_open(!settings.lab.is_intact())
        .show(ui, |ui| {
            ui.checkbox(&mut settings.lab.causal_mask, "causal mask")
                .on_hover_text("off: position t also sees t+1, the byte it must predict");
            ui.checkbox(&mut settings.lab.position_embeddings, "position embeddings")
                .on_hover_text("off: nothing tells the model where a byte is");
            ui.horizontal_wrapped(|ui| {
                ui.label("learning rate");
                let preset = settings.config.lr;
                for (label, factor) in [("preset", 1.0), ("×10", 10.0), ("×1000", 1e3), ("×10000", 1e4)] {
                    let lr = preset * factor;
                    if ui.selectable_label((settings.lr - lr).abs() <= lr * 1e-4, label).on_hover_text(format!("{lr:.1e}")).clicked() {
                        settings.lr = lr;
                    }
                }
            });
            if ui.button("New lab run").on_hover_text("a fresh model with these switches and learning rate (New run above does the same)").clicked() {
                commands.write(RunCommand::NewRun);
            }
            ui.small("The loss chart keeps the run before it, dashed.");
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
    egui::CollapsingHeader::new("Fine-tune (LoRA)")
        .default_open(run.config().lora.is_some())
        .show(ui, |ui| {
            if let (Some(lora), Some(f)) = (run.config().lora, &settings.finetune) {
                ui.label(format!(
                    "fine-tuning {} at step {} on {}: its weights are frozen; rank-{} adapters on {} learn (α {}).",
                    f.base_name,
                    f.base.step,
                    run.corpus_name,
                    lora.rank,
                    lora.targets.describe(),
                    lora.alpha
                ));
                if let Some(share) = crate::model::lora::trained_share(run.config()) {
                    ui.small(share);
                }
                ui.small("Reset starts the fine-tune again from the base. The sample box below switches between the base and the fine-tuned model.");
                return;
            }
            ui.small("Freeze this model's weights and train small low-rank adapters (LoRA) on a text of your own: load or drop one above, or paste it here.");
            let o = &mut ui_state.finetune;
            egui::Grid::new("finetune").num_columns(2).show(ui, |ui| {
                ui.label("rank");
                let mut rank = o.rank as u32;
                ui.add(egui::DragValue::new(&mut rank).range(1..=64));
                if rank as usize != o.rank {
                    // α follows the rank: a scale of 2, as the CLI's default.
                    o.rank = rank as usize;
                    o.alpha = 2.0 * o.rank as f32;
                }
                ui.end_row();
                ui.label("steps");
                ui.add(egui::DragValue::new(&mut o.steps).speed(10).range(1..=100_000));
                ui.end_row();
                ui.label("learning rate");
                ui.add(egui::DragValue::new(&mut o.lr).speed(1e-4).range(1e-6..=1.0).max_decimals(5));
                ui.end_row();
                ui.label("adapt");
                ui.horizontal(|ui| {
                    ui.checkbox(&mut o.targets.attention, "attention");
                    ui.checkbox(&mut o.targets.mlp, "MLP");
                });
                ui.end_row();
            });
            ui.add(
                egui::TextEdit::multiline(&mut ui_state.finetune_text)
                    .hint_text("or paste a text here (a few KB at least)")
                    .desired_rows(3)
                    .desired_width(f32::INFINITY),
            );
            let pasted = !ui_state.finetune_text.trim().is_empty();
            let on = if pasted {
                format!("the pasted text ({} bytes)", ui_state.finetune_text.len())
            } else {
                settings.corpus.name()
            };
            let can = ui_state.finetune.targets.attention || ui_state.finetune.targets.mlp;
            if ui
                .add_enabled(can, egui::Button::new(format!("Fine-tune on {on}")))
                .on_disabled_hover_text("adapt the attention, the MLP or both")
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
    earlier: &crate::app::training::EarlierRuns,
    commands: &mut MessageWriter<RunCommand>,
    sample: &mut SampleState,
    loss_out: &mut MessageWriter<crate::app::data::ExportLossChart>,
) {
    let run_label = run.label();
    // ---- left: run configuration, controls, metrics
    egui::Panel::left("run").default_size(300.0).show(root, |ui| {
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
                ui.small("or drop a .txt corpus, a .ron preset or a .safetensors (or .tinygpt) checkpoint on the window");
            }
            #[cfg(target_arch = "wasm32")]
            {
                if ui.button("Open a file…").on_hover_text("a .txt corpus, a .ron preset or a .safetensors (or the original TinyGPT's .tinygpt) checkpoint").clicked() {
                    crate::app::browser::open_file_picker();
                }
                ui.small("or drop a .txt corpus, a .ron preset or a .safetensors (or .tinygpt) checkpoint on the page");
            }
            egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
                ui.label("learning rate");
                ui.add(egui::DragValue::new(&mut settings.lr).speed(1e-5).range(1e-6..=10.0).max_decimals(6));
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
                    commands.write(RunCommand::SaveCheckpoint { path: PathBuf::from(ui_state.checkpoint_path.trim()), replace: false });
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
                    commands.write(RunCommand::SaveCheckpoint { path: PathBuf::new(), replace: false });
                }
                if ui.button("Load…").on_hover_text("a .safetensors checkpoint, or the original TinyGPT's .tinygpt (or drop one on the page)").clicked() {
                    crate::app::browser::open_file_picker();
                }
            });
            ui.horizontal(|ui| {
                ui.label("trained model:");
                gallery_menu(ui, commands);
            });
            // Below the controls the browser test clicks by position.
            lab_settings(ui, settings, commands);
            finetune_settings(ui, ui_state, settings, run, commands);
            if !run.config().lab.is_intact() {
                ui.colored_label(egui::Color32::from_rgb(255, 170, 60), format!("this run is a lab: {}", run.config().lab.describe()));
            }
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
                if let Some((trained, all, percent)) = crate::model::lora::trained_of(cfg) {
                    row("trained", format!("{} of {} ({percent:.1}%)", crate::model::config::group_thousands(trained), crate::model::config::group_thousands(all)));
                }
                if let Some(m) = run.last {
                    row("loss", format!("{:.4}", m.loss));
                    let ppl = (m.loss as f64).exp();
                    // A blown-up run's perplexity has 60 digits: keep it one short line.
                    row("perplexity", if ppl < 1e6 { format!("{ppl:.2}") } else { format!("{ppl:.2e}") });
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
        .show(root, |ui| {
            ui.horizontal(|ui| {
                ui.strong("Loss");
                if ui
                    .small_button("SVG + CSV")
                    .on_hover_text("save this chart (with the runs before this one) as tinygpt-loss.svg and its points as tinygpt-loss.csv")
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
                .x_axis_label("step")
                .include_y(0.0)
                .include_y(6.0)
                .show(ui, |plot| {
                    plot.hline(
                        HLine::new("random guessing, ln 256", 256f64.ln())
                            .color(egui::Color32::GRAY),
                    );
                    // Earlier runs behind this one, the newest brightest.
                    let n = earlier.0.len();
                    for (i, e) in earlier.0.iter().enumerate() {
                        let shade = (110 + 50 * (i + 3 - n.min(3))) as u8;
                        plot.line(
                            Line::new(format!("before: {}", e.label), PlotPoints::from(e.loss.clone()))
                                .color(egui::Color32::from_gray(shade))
                                .style(egui_plot::LineStyle::dashed_loose()),
                        );
                    }
                    plot.line(Line::new(format!("train: {}", run_label), PlotPoints::from(train)));
                    plot.line(Line::new("val", PlotPoints::from(val.clone())));
                    plot.points(Points::new("val", PlotPoints::from(val)).radius(3.0));
                });
            ui.separator();
            ui.strong("Sample");
            if run.config().lora.is_some() {
                ui.horizontal(|ui| {
                    ui.label("model");
                    let before = sample.from_base;
                    ui.selectable_value(&mut sample.from_base, false, "fine-tuned");
                    ui.selectable_value(&mut sample.from_base, true, "base");
                    if sample.from_base != before {
                        // The same prompt and seed through the other model.
                        sample.start();
                    }
                });
            }
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
        format!(
            "{}\ntext: {} ({})\nlicence: {}\ntrained by `{}`",
            e.what,
            e.text.name(),
            e.source,
            e.licence,
            e.command
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
    ui.menu_button("gallery…", |ui| {
        ui.strong("The gallery: models trained by this program");
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
                    ui.label(entry.what);
                    ui.end_row();
                }
            });
    });
}
