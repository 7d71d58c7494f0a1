//! The data behind the view, as a file: the top bar's 💾 Data (or F11) saves
//! what the current scene shows as JSON, and the loss chart's buttons save
//! the loss curves as SVG and CSV ([`crate::chart`]). Natively a file in the
//! working directory, in the browser a download (through
//! [`super::export::ExportFile`]).
//!
//! Each scene's part is the same data its CLI command prints with `--json`
//! (`tinygpt attention`, `step`, `flash`, `correctness`, `bench`), taken from
//! what is on screen, plus the run it came from and its loss history. The
//! scene's part comes from the scene itself, through
//! [`super::registry::SceneApp::scene_data`].

use super::lesson::LessonPlayer;
use super::registry::SceneRegistry;
use super::scenes::Scene;
use super::training::{EarlierRuns, Run, StepRecord};
use crate::chart::{Chart, Reference, Series};
use bevy::ecs::system::{SystemParam, SystemState};
use bevy::prelude::*;
use serde_json::{Value, json};

/// Save the current view's data as JSON.
#[derive(Message, Clone, Copy, Debug)]
pub struct ExportData;

/// Save the loss chart (all runs on it) as SVG and CSV.
#[derive(Message, Clone, Copy, Debug)]
pub struct ExportLossChart;

pub struct DataPlugin;

impl Plugin for DataPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<ExportData>()
            .add_message::<ExportLossChart>()
            .add_systems(Update, (data_key, export_data, export_loss_chart).chain());
    }
}

/// Everything the views show, read-only.
#[derive(SystemParam)]
pub struct ViewData<'w, 's> {
    scene: Res<'w, State<Scene>>,
    run: Option<Res<'w, Run>>,
    records: Query<'w, 's, &'static StepRecord>,
    earlier: Res<'w, EarlierRuns>,
    lesson: Res<'w, LessonPlayer>,
}

impl ViewData<'_, '_> {
    /// The run's loss history, in step order.
    fn history(&self) -> Vec<StepRecord> {
        let mut r: Vec<StepRecord> = self.records.iter().copied().collect();
        r.sort_by_key(|r| r.step);
        r
    }

    /// The current scene's data (`view`, from the scene), with the run and
    /// its loss history.
    pub fn json(&self, view: Value) -> Value {
        let scene = *self.scene.get();
        let run = self.run.as_ref().map(|r| {
            json!({
                "preset": r.preset,
                "config": r.config(),
                "step": r.step(),
                "backend": r.backend_label,
                "corpus": r.corpus_name,
            })
        });
        let loss: Vec<Value> = self
            .history()
            .iter()
            .filter(|r| r.step > 0)
            .map(|r| {
                json!({
                    "step": r.step, "loss": r.loss, "val_loss": r.val_loss,
                    "lr": r.lr, "grad_norm": r.grad_norm, "ms": r.ms,
                })
            })
            .collect();
        json!({
            "scene": scene.key(),
            "lesson": self.lesson.lesson.as_ref().map(|(name, _)| json!({ "name": name, "step": self.lesson.step + 1 })),
            "run": run,
            "view": view,
            "loss": loss,
        })
    }

    /// The loss chart as drawn: this run's train and validation loss, the
    /// runs before it, and the line of random guessing.
    pub fn loss_chart(&self) -> Chart {
        let history = self.history();
        let train: Vec<(f64, f64)> = history
            .iter()
            .filter(|r| r.step > 0)
            .map(|r| (r.step as f64, r.loss as f64))
            .collect();
        let val: Vec<(f64, f64)> = history
            .iter()
            .filter_map(|r| Some((r.step as f64, r.val_loss? as f64)))
            .collect();
        let label = self.run.as_ref().map_or(String::new(), |r| r.label());
        let greys = ["#bbbbbb", "#999999", "#666666"];
        let mut series: Vec<Series> = self
            .earlier
            .0
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Series::line(
                    format!("before: {}", e.label),
                    e.loss.iter().map(|p| (p[0], p[1])).collect(),
                    greys[(i + greys.len() - self.earlier.0.len().min(greys.len())) % greys.len()],
                )
                .dashed()
            })
            .collect();
        series.push(Series::line(format!("train: {label}"), train, "#1f77b4"));
        series.push(Series::line("validation", val, "#ff7f0e").scatter());
        Chart {
            title: "Training loss".into(),
            subtitle: self.run.as_ref().map_or(String::new(), |r| {
                format!("{label}; {}; on {}", r.corpus_name, r.backend_label)
            }),
            x_label: "step".into(),
            y_label: "loss (nats per byte)".into(),
            x_log: false,
            y_log: false,
            series,
            references: vec![Reference {
                label: "random guessing, ln 256".into(),
                y: 256f64.ln(),
            }],
        }
    }
}

/// F11: the data behind the view.
fn data_key(keys: Res<ButtonInput<KeyCode>>, mut out: MessageWriter<ExportData>) {
    if keys.just_pressed(KeyCode::F11) {
        out.write(ExportData);
    }
}

/// Saves the current view's data when asked: the scene's part from the
/// registry, the rest from [`ViewData`].
fn export_data(world: &mut World, asked: &mut SystemState<MessageReader<ExportData>>) {
    if asked.get_mut(world).map_or(0, |mut r| r.read().count()) == 0 {
        return;
    }
    let scene = *world.resource::<State<Scene>>().get();
    let view = SceneRegistry::data(world, scene).unwrap_or(Value::Null);
    let mut state = SystemState::<(ViewData, MessageWriter<super::export::ExportFile>)>::new(world);
    let Ok((data, mut out)) = state.get_mut(world) else {
        return;
    };
    let json = serde_json::to_vec_pretty(&data.json(view)).expect("plain data");
    let stem = format!("{}-data", scene.key());
    out.write(super::export::ExportFile::new(stem, "json", json));
}

fn export_loss_chart(
    mut asked: MessageReader<ExportLossChart>,
    data: ViewData,
    mut out: MessageWriter<super::export::ExportFile>,
) {
    if asked.read().count() == 0 {
        return;
    }
    let chart = data.loss_chart();
    out.write(super::export::ExportFile::new(
        "loss",
        "svg",
        chart.to_svg(),
    ));
    out.write(super::export::ExportFile::new(
        "loss",
        "csv",
        chart.to_csv(),
    ));
}
