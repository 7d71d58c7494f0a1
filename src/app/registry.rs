//! What scenes add to the shared parts, registered by each scene's plugin
//! and asked for by the parts that need it, which never name a scene (the
//! shape of rerun's view-class registry): the data behind a scene's view
//! (💾 Data, `--export data`), the fields a scene adds to the headless
//! run's JSON line or to the browser page's report, and the regions it
//! draws with egui (headless runs list them and `--export NAME` crops to
//! one), and the picture in one line of words (the screen reader's
//! *describe*). Each entry is a one-shot system the part runs when it needs it.

use super::scenes::Scene;
use bevy::ecs::system::SystemId;
use bevy::prelude::*;
use bevy_egui::egui;
use serde_json::Value;
use std::collections::BTreeMap;

/// Which report a field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// The JSON line a headless run prints when it ends.
    Headless,
    /// The state the browser build reports to its page (and its test).
    Page,
}

/// The registered contributions.
#[derive(Resource, Default)]
pub struct SceneRegistry {
    data: BTreeMap<Scene, SystemId<(), Value>>,
    fields: Vec<(Report, &'static str, SystemId<(), Value>)>,
    regions: Vec<SystemId<(), Regions>>,
    descriptions: BTreeMap<Scene, SystemId<(), Option<String>>>,
}

/// Named regions of a scene's egui drawing, in physical pixels.
pub type Regions = Vec<(String, egui::Rect)>;

impl SceneRegistry {
    /// The data behind `scene`'s view, if it registered any.
    pub fn data(world: &mut World, scene: Scene) -> Option<Value> {
        let id = *world.get_resource::<SceneRegistry>()?.data.get(&scene)?;
        world.run_system(id).ok()
    }

    /// `scene`'s picture in one line of words, with its numbers (None: not
    /// computed yet, or no such line).
    pub fn description(world: &mut World, scene: Scene) -> Option<String> {
        let id = *world.get_resource::<SceneRegistry>()?.descriptions.get(&scene)?;
        world.run_system(id).ok().flatten()
    }

    /// The fields every scene adds to `report`, in registration order.
    pub fn fields(world: &mut World, report: Report) -> Vec<(&'static str, Value)> {
        let Some(registry) = world.get_resource::<SceneRegistry>() else {
            return Vec::new();
        };
        let ids: Vec<(&'static str, SystemId<(), Value>)> = registry
            .fields
            .iter()
            .filter(|(r, _, _)| *r == report)
            .map(|(_, key, id)| (*key, *id))
            .collect();
        ids.into_iter()
            .map(|(key, id)| (key, world.run_system(id).unwrap_or(Value::Null)))
            .collect()
    }
}

impl SceneRegistry {
    /// Every scene's egui regions, in registration order.
    pub fn regions(world: &mut World) -> Regions {
        let Some(registry) = world.get_resource::<SceneRegistry>() else {
            return Vec::new();
        };
        let ids = registry.regions.clone();
        ids.into_iter()
            .flat_map(|id| world.run_system(id).unwrap_or_default())
            .collect()
    }
}

/// How a scene's plugin registers what it adds.
pub trait SceneApp {
    /// The data behind `scene`'s view: what 💾 Data saves (under `view`).
    fn scene_data<M>(
        &mut self,
        scene: Scene,
        system: impl IntoSystem<(), Value, M> + 'static,
    ) -> &mut Self;
    /// A field `key` of `report`, computed when the report is made.
    fn report_field<M>(
        &mut self,
        report: Report,
        key: &'static str,
        system: impl IntoSystem<(), Value, M> + 'static,
    ) -> &mut Self;
    /// The regions the scene last drew with egui.
    fn shown_regions<M>(&mut self, system: impl IntoSystem<(), Regions, M> + 'static) -> &mut Self;
    /// `scene`'s picture in one line of words, read while it is on screen.
    fn scene_description<M>(
        &mut self,
        scene: Scene,
        system: impl IntoSystem<(), Option<String>, M> + 'static,
    ) -> &mut Self;
}

impl SceneApp for App {
    fn scene_data<M>(
        &mut self,
        scene: Scene,
        system: impl IntoSystem<(), Value, M> + 'static,
    ) -> &mut Self {
        let id = self.world_mut().register_system(system);
        self.world_mut()
            .get_resource_or_init::<SceneRegistry>()
            .data
            .insert(scene, id);
        self
    }

    fn report_field<M>(
        &mut self,
        report: Report,
        key: &'static str,
        system: impl IntoSystem<(), Value, M> + 'static,
    ) -> &mut Self {
        let id = self.world_mut().register_system(system);
        self.world_mut()
            .get_resource_or_init::<SceneRegistry>()
            .fields
            .push((report, key, id));
        self
    }

    fn shown_regions<M>(&mut self, system: impl IntoSystem<(), Regions, M> + 'static) -> &mut Self {
        let id = self.world_mut().register_system(system);
        self.world_mut()
            .get_resource_or_init::<SceneRegistry>()
            .regions
            .push(id);
        self
    }

    fn scene_description<M>(
        &mut self,
        scene: Scene,
        system: impl IntoSystem<(), Option<String>, M> + 'static,
    ) -> &mut Self {
        let id = self.world_mut().register_system(system);
        self.world_mut()
            .get_resource_or_init::<SceneRegistry>()
            .descriptions
            .insert(scene, id);
        self
    }
}
