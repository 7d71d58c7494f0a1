//! The numbers behind the view as text (issue 53's text alternative for
//! every picture): the view menu's *numbers as a table* (or F10) opens a
//! window with the data 💾 Data saves for the scene on screen, read again
//! every second: objects as name–value rows, lists of records as tables,
//! long lists of numbers in rows of eight (the first 256, and how many more).
//! egui draws it, so a screen reader reads it as the panels' text.

use crate::app::registry::SceneRegistry;
use crate::app::scenes::Scene;
use crate::app::ui::state::UiState;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass, egui};
use serde_json::Value;

/// How often an open table reads the data again (seconds).
pub const REFRESH_S: f64 = 1.0;
/// The most numbers of one list the table shows.
pub const MAX_NUMBERS: usize = 256;
/// The most records of one list of records it shows.
pub const MAX_RECORDS: usize = 64;

/// The data the table shows, and when it was read.
#[derive(Resource, Default)]
pub struct NumbersTable {
    pub data: Option<Value>,
    pub scene: Option<Scene>,
    read_at: Option<f64>,
}

pub struct TablePlugin;

impl Plugin for TablePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<NumbersTable>()
            .add_systems(Update, (table_key, read_data).chain())
            .add_systems(EguiPrimaryContextPass, draw_table.after(crate::app::ui::draw_ui));
    }
}

/// F10 opens or closes the table.
fn table_key(keys: Res<ButtonInput<KeyCode>>, mut ui_state: ResMut<UiState>) {
    if keys.just_pressed(KeyCode::F10) {
        ui_state.numbers_table = !ui_state.numbers_table;
    }
}

/// Reads the scene's data while the table is open: when it opens, when the
/// scene changes, and every [`REFRESH_S`] seconds.
fn read_data(world: &mut World) {
    if !world.resource::<UiState>().numbers_table {
        if world.resource::<NumbersTable>().data.is_some() {
            *world.resource_mut::<NumbersTable>() = NumbersTable::default();
        }
        return;
    }
    let now = world.resource::<Time<Real>>().elapsed_secs_f64();
    let scene = *world.resource::<State<Scene>>().get();
    let table = world.resource::<NumbersTable>();
    let due = table.scene != Some(scene) || table.read_at.is_none_or(|t| now - t >= REFRESH_S);
    if !due {
        return;
    }
    let data = SceneRegistry::data(world, scene);
    let mut table = world.resource_mut::<NumbersTable>();
    table.data = data;
    table.scene = Some(scene);
    table.read_at = Some(now);
}

fn draw_table(
    mut contexts: EguiContexts,
    mut ui_state: ResMut<UiState>,
    table: Res<NumbersTable>,
    described: Res<super::describe::PictureDescription>,
) -> Result {
    if !ui_state.numbers_table {
        return Ok(());
    }
    let ctx = contexts.ctx_mut()?;
    let mut open = true;
    let title = crate::t!(
        "access-table-title",
        scene = table.scene.map(|s| s.title()).unwrap_or_default()
    );
    egui::Window::new(title)
        .id(egui::Id::new("numbers-table"))
        .open(&mut open)
        .default_size([560.0, 420.0])
        .vscroll(true)
        .show(ctx, |ui| {
            // The picture in words first (F9 says it).
            if let Some(line) = &described.text {
                ui.label(egui::RichText::new(line).strong());
                ui.separator();
            }
            match &table.data {
                None | Some(Value::Null) => {
                    ui.label(crate::t!("access-table-empty"));
                }
                Some(value) => show_value(ui, "", value, 0),
            }
        });
    if !open {
        ui_state.numbers_table = false;
    }
    Ok(())
}

/// A number as the panels write numbers.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if v.is_f64() => crate::app::canvas::short(x as f32),
        _ => v.to_string(),
    }
}

/// One value: a scalar on a line, an object as name–value rows, a list of
/// numbers in rows of eight, a list of records as a table.
fn show_value(ui: &mut egui::Ui, name: &str, value: &Value, depth: usize) {
    match value {
        Value::Object(map) => {
            let body = |ui: &mut egui::Ui| {
                let scalars: Vec<(&String, &Value)> = map.iter().filter(|(_, v)| is_scalar(v)).collect();
                if !scalars.is_empty() {
                    egui::Grid::new((name, depth, "scalars")).striped(true).show(ui, |ui| {
                        for (k, v) in scalars {
                            ui.label(k.as_str());
                            ui.label(scalar(v));
                            ui.end_row();
                        }
                    });
                }
                for (k, v) in map.iter().filter(|(_, v)| !is_scalar(v)) {
                    show_value(ui, k, v, depth + 1);
                }
            };
            if name.is_empty() {
                body(ui);
            } else {
                egui::CollapsingHeader::new(name).id_salt((name, depth)).default_open(depth <= 1).show(ui, body);
            }
        }
        Value::Array(items) if items.iter().all(Value::is_number) => {
            egui::CollapsingHeader::new(crate::t!("access-table-numbers", name = name, count = items.len() as u64))
                .id_salt((name, depth))
                .default_open(items.len() <= 32)
                .show(ui, |ui| {
                    egui::Grid::new((name, depth, "numbers")).striped(true).show(ui, |ui| {
                        for (row, chunk) in items.iter().take(MAX_NUMBERS).collect::<Vec<_>>().chunks(8).enumerate() {
                            ui.label(format!("[{}]", row * 8));
                            for v in chunk {
                                ui.monospace(number(v));
                            }
                            ui.end_row();
                        }
                    });
                    if items.len() > MAX_NUMBERS {
                        ui.label(crate::t!("access-table-more", count = (items.len() - MAX_NUMBERS) as u64));
                    }
                });
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(|v| v.as_object().is_some_and(|o| o.values().all(is_scalar))) => {
            let mut columns: Vec<&String> = Vec::new();
            for item in items {
                for k in item.as_object().into_iter().flat_map(|o| o.keys()) {
                    if !columns.contains(&k) {
                        columns.push(k);
                    }
                }
            }
            egui::CollapsingHeader::new(crate::t!("access-table-records", name = name, count = items.len() as u64))
                .id_salt((name, depth))
                .default_open(depth <= 1)
                .show(ui, |ui| {
                    egui::Grid::new((name, depth, "records")).striped(true).show(ui, |ui| {
                        for c in &columns {
                            ui.strong(c.as_str());
                        }
                        ui.end_row();
                        for item in items.iter().take(MAX_RECORDS) {
                            for c in &columns {
                                ui.label(item.get(c.as_str()).map(scalar).unwrap_or_default());
                            }
                            ui.end_row();
                        }
                    });
                    if items.len() > MAX_RECORDS {
                        ui.label(crate::t!("access-table-more", count = (items.len() - MAX_RECORDS) as u64));
                    }
                });
        }
        Value::Array(items) => {
            egui::CollapsingHeader::new(crate::t!("access-table-records", name = name, count = items.len() as u64))
                .id_salt((name, depth))
                .default_open(false)
                .show(ui, |ui| {
                    for (i, v) in items.iter().take(MAX_RECORDS).enumerate() {
                        show_value(ui, &format!("{name}[{i}]"), v, depth + 1);
                    }
                    if items.len() > MAX_RECORDS {
                        ui.label(crate::t!("access-table-more", count = (items.len() - MAX_RECORDS) as u64));
                    }
                });
        }
        v => {
            ui.horizontal(|ui| {
                ui.label(name);
                ui.label(scalar(v));
            });
        }
    }
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Object(_) | Value::Array(_))
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".into(),
        Value::Number(_) => number(v),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_the_panels_write_them() {
        assert_eq!(number(&serde_json::json!(0.123456)), "0.1235");
        assert_eq!(number(&serde_json::json!(42)), "42");
        assert_eq!(scalar(&serde_json::json!("h.0")), "h.0");
        assert_eq!(scalar(&Value::Null), "–");
        assert!(is_scalar(&serde_json::json!(1.5)) && !is_scalar(&serde_json::json!([1])));
    }
}
