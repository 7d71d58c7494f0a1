//! The ECS mirror of the program: a `Model` entity with one `Layer` child per
//! layer of the program, and under each layer its `OpNode`s and `Tensor`s.
//! Generated from [`Program`] when a run is created, never listed by hand;
//! the scenes draw from these entities.

use super::training::{Run, RunCreated};
use crate::program::{Program, TensorId, TensorKind};
use bevy::prelude::*;

/// The model of the current run.
#[derive(Component, Debug)]
pub struct Model {
    pub preset: String,
    pub generation: u64,
    pub parameters: usize,
}

/// A layer: `embeddings`, `h.0` … `h.{L-1}`, `ln_f`, `head`.
#[derive(Component, Debug, Clone)]
pub struct Layer {
    pub index: usize,
    pub name: String,
    pub title: String,
}

/// A forward op of the program (its backward is derived from it).
#[derive(Component, Debug, Clone)]
pub struct OpEntity {
    /// Index into `Program::ops`.
    pub index: usize,
    pub label: String,
    pub kind: &'static str,
}

/// A tensor of the program: a parameter, its gradient or AdamW moments, an
/// activation, or a value saved for the backward pass.
#[derive(Component, Debug, Clone)]
pub struct Tensor {
    pub id: TensorId,
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: TensorKind,
}

pub struct ModelGraphPlugin;

impl Plugin for ModelGraphPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(
            Update,
            rebuild_model.in_set(super::schedule::AppSystems::Graph),
        );
    }
}

fn rebuild_model(
    mut commands: Commands,
    mut created: MessageReader<RunCreated>,
    run: Option<Res<Run>>,
    models: Query<Entity, With<Model>>,
) {
    let Some(latest) = created.read().last() else {
        return;
    };
    let Some(run) = run else { return };
    if run.generation != latest.generation {
        return;
    }
    for e in &models {
        commands.entity(e).despawn();
    }
    spawn_model(&mut commands, &run.program, &run.preset, run.generation);
}

/// Spawns the entity tree of `program`; returns the `Model` entity.
pub fn spawn_model(
    commands: &mut Commands,
    program: &Program,
    preset: &str,
    generation: u64,
) -> Entity {
    let model = commands
        .spawn((
            Model {
                preset: preset.to_string(),
                generation,
                parameters: program.config.param_count(),
            },
            Name::new(format!("model {preset}")),
        ))
        .id();
    for (index, layer) in program.layers.iter().enumerate() {
        let layer_entity = commands
            .spawn((
                Layer {
                    index,
                    name: layer.name.clone(),
                    title: layer.title.clone(),
                },
                Name::new(layer.name.clone()),
                ChildOf(model),
            ))
            .id();
        for (i, op) in program
            .ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.layer == index)
        {
            commands.spawn((
                OpEntity {
                    index: i,
                    label: op.label.clone(),
                    kind: op.op.kind_name(),
                },
                Name::new(op.label.clone()),
                ChildOf(layer_entity),
            ));
        }
        for (id, t) in program
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.layer == index)
        {
            commands.spawn((
                Tensor {
                    id,
                    name: t.name.clone(),
                    shape: t.shape.clone(),
                    kind: t.kind,
                },
                Name::new(t.name.clone()),
                ChildOf(layer_entity),
            ));
        }
    }
    model
}
