//! The accessibility tree. egui builds an AccessKit tree of its panels each
//! pass; this adds the picture (a figure whose children are its parts, and
//! the focused cell) and the live region, points the tree's focus at the
//! picture's focus while it is there, and keeps a flat copy
//! ([`AccessTree`]): headless runs print it, the page mirrors it into
//! hidden DOM elements, and checks read names, roles and target sizes
//! from it. Natively bevy_egui hands the same tree to Bevy's AccessKit
//! adapter, and a screen reader's actions come back to egui here.

use super::announce::Announcer;
use super::picture::PictureAccess;
use bevy::prelude::*;
use bevy_egui::egui::accesskit::{self, Live, NodeId, Role};
use bevy_egui::{EguiContext, EguiOutput, EguiPostUpdateSet, egui};
use serde::Serialize;

/// One node of the tree, flattened in reading order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccessNode {
    /// The node's id, in decimal (a string: JavaScript's numbers hold
    /// integers only to 2⁵³).
    pub id: String,
    /// Depth below the window (its children are 1).
    pub depth: usize,
    pub role: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// What it says beyond its name (the picture: what it shows, in words,
    /// and how to explore it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where it is, in egui points from the window's corner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rect: Option<[f32; 4]>,
    /// It can be clicked (a button, a link, a checkbox…).
    pub clickable: bool,
    /// A checkbox's or a toggle's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked: Option<bool>,
    pub focused: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

/// The tree as it was last built.
#[derive(Resource, Default, Debug, Clone, PartialEq)]
pub struct AccessTree {
    pub nodes: Vec<AccessNode>,
    /// Counts changes (the page's mirror rebuilds on a new one).
    pub generation: u64,
}

impl AccessTree {
    /// The focused node, if any but the window.
    pub fn focused(&self) -> Option<&AccessNode> {
        self.nodes.iter().find(|n| n.focused && n.depth > 0)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "focused": self.focused(),
            "nodes": self.nodes,
        })
    }
}

pub struct TreePlugin;

impl Plugin for TreePlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<AccessTree>()
            .add_systems(PreUpdate, enable_accesskit)
            .add_systems(
                PostUpdate,
                add_picture
                    .after(EguiPostUpdateSet::ProcessOutput)
                    .before(EguiPostUpdateSet::PostProcessOutput)
                    .after(super::picture::describe)
                    .after(super::announce::tick),
            );
        #[cfg(target_arch = "wasm32")]
        app.add_systems(Last, mirror_to_page).add_systems(
            PreUpdate,
            presses_from_page
                .after(bevy_egui::EguiInputSet::WriteEguiEvents)
                .before(bevy_egui::EguiPreUpdateSet::BeginPass),
        );
        #[cfg(not(target_arch = "wasm32"))]
        app.add_systems(
            PreUpdate,
            forward_actions
                .after(bevy_egui::EguiInputSet::WriteEguiEvents)
                .before(bevy_egui::EguiPreUpdateSet::BeginPass),
        );
    }
}

/// egui builds its tree in every context, with a screen reader or not:
/// headless checks and the page's mirror read it too.
fn enable_accesskit(mut contexts: Query<&mut EguiContext, Added<EguiContext>>) {
    for mut context in &mut contexts {
        context.get_mut().enable_accesskit();
    }
}

/// A screen reader's action (press this button, focus that field) goes
/// to egui as input, as the mouse's would.
#[cfg(not(target_arch = "wasm32"))]
fn forward_actions(
    requests: Option<MessageReader<bevy::a11y::ActionRequest>>,
    mut inputs: Query<&mut bevy_egui::EguiInput>,
) {
    // (No window, no adapter: a headless run has no such messages.)
    let Some(mut requests) = requests else { return };
    let requests: Vec<accesskit::ActionRequest> = requests.read().map(|r| r.0.clone()).collect();
    if requests.is_empty() {
        return;
    }
    for mut input in &mut inputs {
        input
            .events
            .extend(requests.iter().cloned().map(egui::Event::AccessKitActionRequest));
    }
}

/// The page's mirror of the tree (hidden elements inside the canvas, the
/// focused one its `aria-activedescendant`) and its live region: sent when
/// they change, the tree at most every [`MIRROR_EVERY_S`] seconds.
#[cfg(target_arch = "wasm32")]
fn mirror_to_page(
    tree: Res<AccessTree>,
    announcer: Res<Announcer>,
    time: Res<Time<Real>>,
    mut sent: Local<(u64, u64, f64)>,
) {
    let now = time.elapsed_secs_f64();
    if tree.generation != sent.0 && now - sent.2 >= MIRROR_EVERY_S {
        crate::app::browser::access_tree(&tree.to_json().to_string());
        sent.0 = tree.generation;
        sent.2 = now;
    }
    if announcer.said != sent.1 {
        crate::app::browser::announce(&announcer.current);
        sent.1 = announcer.said;
    }
}

/// A press on one of the page's mirrored buttons: egui is told to click
/// that node, as a screen reader's action natively.
#[cfg(target_arch = "wasm32")]
fn presses_from_page(mut inputs: Query<&mut bevy_egui::EguiInput>) {
    while let Some(id) = crate::app::browser::take_access_action() {
        let Ok(id) = id.parse::<u64>() else { continue };
        for mut input in &mut inputs {
            input.events.push(egui::Event::AccessKitActionRequest(accesskit::ActionRequest {
                action: accesskit::Action::Click,
                target_tree: accesskit::TreeId::ROOT,
                target_node: NodeId(id),
                data: None,
            }));
        }
    }
}

/// How often the page's mirror may be rebuilt.
#[cfg(target_arch = "wasm32")]
const MIRROR_EVERY_S: f64 = 0.15;

/// A node id of ours, apart from egui's.
fn our_id(key: impl std::hash::Hash + std::fmt::Debug) -> NodeId {
    NodeId(egui::Id::new(("tinygpt-access", key)).value())
}

fn to_bounds(r: Rect, scale: f32) -> accesskit::Rect {
    accesskit::Rect {
        x0: (r.min.x * scale) as f64,
        y0: (r.min.y * scale) as f64,
        x1: (r.max.x * scale) as f64,
        y1: (r.max.y * scale) as f64,
    }
}

/// Adds the picture and the live region to egui's tree, and flattens it.
fn add_picture(
    mut outputs: Query<(&mut EguiOutput, &mut EguiContext)>,
    picture: Res<PictureAccess>,
    announcer: Res<Announcer>,
    described: Res<super::describe::PictureDescription>,
    scene: Res<State<crate::app::scenes::Scene>>,
    mut tree: ResMut<AccessTree>,
) {
    for (mut output, mut context) in &mut outputs {
        // Window logical pixels to egui points.
        let scale = 1.0 / context.get_mut().zoom_factor();
        let Some(update) = output.platform_output.accesskit_update.as_mut() else {
            continue;
        };
        let Some(root) = update.tree.as_ref().map(|t| t.root) else {
            continue;
        };
        let figure = our_id("picture");
        let status = our_id("status");
        let mut added: Vec<(NodeId, accesskit::Node)> = Vec::new();
        let mut children = Vec::new();
        for (i, (name, rect)) in picture.parts.iter().enumerate() {
            let mut node = accesskit::Node::new(Role::Group);
            node.set_label(name.clone());
            if let Some(r) = rect {
                node.set_bounds(to_bounds(*r, scale));
            }
            let id = our_id(("part", i));
            let mut part_children = Vec::new();
            if let Some(f) = &picture.focused
                && f.part == i
                && let Some((row, col)) = f.cell
            {
                let mut cell = accesskit::Node::new(Role::GridCell);
                cell.set_label(f.label.clone());
                if let Some(r) = f.rect {
                    cell.set_bounds(to_bounds(r, scale));
                }
                let cell_id = our_id(("cell", i, row, col));
                part_children.push(cell_id);
                added.push((cell_id, cell));
            }
            node.set_children(part_children);
            children.push(id);
            added.push((id, node));
        }
        let mut node = accesskit::Node::new(Role::Figure);
        node.set_label(crate::t!("access-picture", scene = scene.get().title()));
        // What it shows, then how to explore it.
        let how = if picture.parts.is_empty() {
            crate::t!("access-picture-empty")
        } else {
            crate::t!("access-picture-keys", parts = picture.parts.len() as u64)
        };
        node.set_description(match &described.text {
            Some(line) => format!("{line} {how}"),
            None => how,
        });
        node.set_children(children);
        added.push((figure, node));
        let mut live = accesskit::Node::new(Role::Status);
        live.set_live(Live::Polite);
        live.set_label(announcer.current.clone());
        added.push((status, live));
        if let Some((_, root_node)) = update.nodes.iter_mut().find(|(id, _)| *id == root) {
            root_node.push_child(figure);
            root_node.push_child(status);
        }
        if let Some(f) = &picture.focused {
            update.focus = match f.cell {
                None => our_id(("part", f.part)),
                Some((row, col)) => our_id(("cell", f.part, row, col)),
            };
        }
        update.nodes.extend(added);
        name_fields_by_their_labels(update);
        let flat = flatten(update);
        if tree.nodes != flat {
            tree.nodes = flat;
            tree.generation += 1;
        }
    }
}

/// Controls a screen reader would name by role alone.
const CONTROLS: [Role; 9] = [
    Role::TextInput,
    Role::MultilineTextInput,
    Role::SpinButton,
    Role::ComboBox,
    Role::Slider,
    Role::CheckBox,
    Role::Button,
    Role::RadioButton,
    Role::Switch,
];

/// A field without a name of its own (egui's `DragValue` beside
/// `ui.label("learning rate")`) is named by the label just before it
/// among its siblings, as a sighted reader pairs them.
fn name_fields_by_their_labels(update: &mut accesskit::TreeUpdate) {
    let index: std::collections::HashMap<NodeId, usize> =
        update.nodes.iter().enumerate().map(|(i, (id, _))| (*id, i)).collect();
    let mut names: Vec<(usize, String)> = Vec::new();
    for (_, parent) in &update.nodes {
        let mut label: Option<String> = None;
        // A slider's value field follows it: named after it.
        let mut slider: Option<String> = None;
        for child in parent.children() {
            let Some(&i) = index.get(child) else { continue };
            let node = &update.nodes[i].1;
            if node.role() == Role::Label {
                label = node.value().or(node.label()).map(str::to_string);
            } else if CONTROLS.contains(&node.role()) {
                let unnamed = node.label().is_none_or(|l| !l.chars().any(char::is_alphanumeric))
                    && node.labelled_by().is_empty();
                let named_by = label.take().or_else(|| {
                    (node.role() == Role::SpinButton)
                        .then(|| slider.take().map(|s| crate::t!("access-value-of", name = s.as_str())))
                        .flatten()
                });
                if unnamed && let Some(l) = named_by {
                    let own = node.label().unwrap_or_default();
                    names.push((i, if own.is_empty() { l } else { format!("{own} {l}") }));
                }
                slider = (node.role() == Role::Slider).then(|| node.label().unwrap_or_default().to_string()).filter(|s| !s.is_empty());
            }
        }
    }
    for (i, name) in names {
        update.nodes[i].1.set_label(name);
    }
}

/// The tree in reading order, depth-first from the root.
fn flatten(update: &accesskit::TreeUpdate) -> Vec<AccessNode> {
    let Some(root) = update.tree.as_ref().map(|t| t.root) else {
        return Vec::new();
    };
    let nodes: std::collections::HashMap<NodeId, &accesskit::Node> =
        update.nodes.iter().map(|(id, n)| (*id, n)).collect();
    // A node's own words: its label, or (a label's) its text.
    let words = |node: &accesskit::Node| -> Option<String> {
        node.label()
            .or(if node.role() == Role::Label { node.value() } else { None })
            .map(str::to_string)
    };
    let mut out = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((id, depth)) = stack.pop() {
        let Some(node) = nodes.get(&id) else { continue };
        // (A label's text runs repeat its text, line by line.)
        if node.is_hidden() || node.role() == Role::TextRun {
            continue;
        }
        out.push(AccessNode {
            id: id.0.to_string(),
            depth,
            role: format!("{:?}", node.role()),
            // Its words, else the nodes that label it (egui ties a slider's
            // value field to the slider's text that way).
            name: words(node)
                .filter(|w| !w.is_empty())
                .or_else(|| {
                    let by: Vec<String> =
                        node.labelled_by().iter().filter_map(|id| nodes.get(id).and_then(|n| words(n))).collect();
                    (!by.is_empty()).then(|| by.join(" "))
                })
                .unwrap_or_default(),
            value: node.value().filter(|_| node.role() != Role::Label).map(str::to_string),
            description: node.description().map(str::to_string),
            rect: node.bounds().map(|b| [b.x0 as f32, b.y0 as f32, b.x1 as f32, b.y1 as f32]),
            clickable: node.supports_action(accesskit::Action::Click),
            checked: node.toggled().map(|t| t == accesskit::Toggled::True),
            focused: id == update.focus,
            live: node.live().is_some_and(|l| l != Live::Off),
            disabled: node.is_disabled(),
        });
        for child in node.children().iter().rev() {
            stack.push((*child, depth + 1));
        }
    }
    out
}
