//! A scene's toolbar, floating over the top of the main view.

use bevy_egui::egui;

/// Below this window width (logical pixels) the page is a phone's: the
/// narration's choices go one a row with 44-point targets, and a scene's
/// toolbar folds behind one button.
pub const PHONE_WIDTH: f32 = 600.0;

/// Whether the window is a phone's ([`PHONE_WIDTH`]).
pub fn is_phone(ctx: &egui::Context) -> bool {
    ctx.content_rect().width() < PHONE_WIDTH
}

/// A scene's toolbar: a row of controls floating over the top-left of the
/// main view, on a panel-coloured strip (the camera leaves room for it),
/// wrapping inside the main view's width so it never covers a side panel.
/// On a phone ([`is_phone`]) it is one button, 44 points tall, that opens
/// and closes it: closed, the lesson and the picture have the screen.
pub fn scene_toolbar(
    ctx: &egui::Context,
    id: &'static str,
    view: egui::Rect,
    add_contents: impl FnOnce(&mut egui::Ui),
) {
    let phone = is_phone(ctx);
    let open_id = egui::Id::new(id).with("open");
    let mut open = !phone || ctx.data(|d| d.get_temp::<bool>(open_id).unwrap_or(false));
    let shown = egui::Area::new(egui::Id::new(id))
        .fixed_pos(view.min + egui::vec2(6.0, 6.0))
        .order(egui::Order::Middle)
        .show(ctx, |ui| {
            ui.set_max_width(view.width() - 30.0);
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.set_max_width(view.width() - 30.0);
                if phone {
                    let label = crate::t!(if open { "toolbar-close" } else { "toolbar-open" });
                    if ui.add(egui::Button::new(label).min_size(egui::vec2(44.0, 44.0))).clicked() {
                        open = !open;
                        ui.ctx().data_mut(|d| d.insert_temp(open_id, open));
                    }
                    // The phone's targets: 44 points tall.
                    ui.spacing_mut().interact_size.y = 44.0;
                } else {
                    // The picture's controls 24 points tall (WCAG 2.2's target
                    // size: a wrapped row packs tight under the one above).
                    ui.spacing_mut().interact_size.y = 24.0;
                }
                if open {
                    ui.horizontal_wrapped(add_contents);
                }
            });
        });
    let inset = shown.response.rect.max.y - view.min.y;
    let pass = ctx.cumulative_pass_nr();
    ctx.data_mut(|d| d.insert_temp(egui::Id::new(INSET_ID), (pass, inset)));
}

/// Where [`scene_toolbar`] notes how far its bottom is below the main
/// view's top.
const INSET_ID: &str = "tinygpt-scene-toolbar-inset";

/// How far below the main view's top the scene toolbar drawn in the last
/// pass or the one before ends (logical pixels): two rows where a language's
/// words make it wrap. None when no scene drew one.
pub fn toolbar_inset(ctx: &egui::Context) -> Option<f32> {
    let now = ctx.cumulative_pass_nr();
    ctx.data(|d| d.get_temp::<(u64, f32)>(egui::Id::new(INSET_ID)))
        .filter(|(pass, _)| pass + 2 >= now)
        .map(|(_, inset)| inset)
}

/// Where a scene's toolbar ends (its last frame's height; one row of
/// controls until it has been laid out): the scene's body starts below it.
pub fn toolbar_bottom(ctx: &egui::Context, id: &'static str, view: egui::Rect) -> f32 {
    ctx.memory(|m| m.area_rect(egui::Id::new(id)))
        .map_or(view.min.y + 48.0, |r| r.max.y + 4.0)
}

/// The status line under a scene's toolbar (`toolbar_id`): where the
/// numbers come from, or why there are none, in weak type, one line wide
/// as the main view.
pub fn scene_status(
    ctx: &egui::Context,
    id: &'static str,
    toolbar_id: &'static str,
    view: egui::Rect,
    text: impl Into<String>,
) {
    egui::Area::new(egui::Id::new(id))
        .fixed_pos(egui::pos2(
            view.min.x + 10.0,
            toolbar_bottom(ctx, toolbar_id, view),
        ))
        .order(egui::Order::Middle)
        .interactable(false)
        .show(ctx, |ui| {
            ui.set_max_width(view.width() - 20.0);
            // On an opaque backing, so neither a picture scrolled under it
            // nor the walk-through's light canvas shows through the letters.
            egui::Frame::new()
                .fill(ui.visuals().panel_fill)
                .inner_margin(egui::Margin::symmetric(4, 1))
                .corner_radius(3.0)
                .show(ui, |ui| {
                    ui.add(
                        egui::Label::new(egui::RichText::new(text.into()).weak())
                            .wrap_mode(egui::TextWrapMode::Wrap),
                    );
                });
        });
}

/// The knock-out switches of block `layer` for a scene's toolbar: each head
/// and the MLP (Take it apart's knockouts: every scene that reads the model
/// as the learner took it apart, and the sampler, see it without them).
pub fn knockout_toggles(
    ui: &mut egui::Ui,
    layer: usize,
    n_head: usize,
    knockouts: &mut crate::app::training::Knockouts,
) {
    use crate::interventions::Part;
    ui.label(crate::t!("knock-out"));
    let parts = (0..n_head)
        .map(|head| Part::Head { layer, head })
        .chain(std::iter::once(Part::Mlp { layer }));
    for part in parts {
        let on = knockouts.0.contains(&part);
        let name = match part {
            Part::Head { head, .. } => crate::t!("head-n", head = head),
            Part::Mlp { .. } => crate::t!("mlp"),
        };
        if ui
            .selectable_label(on, name)
            .on_hover_text(crate::t!("knock-out-hover"))
            .clicked()
        {
            if on {
                knockouts.0.retain(|p| *p != part);
            } else {
                knockouts.0.push(part);
            }
        }
    }
}

/// The status line's note of what is knocked out ("" when nothing is).
pub fn knocked_out_note(knockouts: &crate::app::training::Knockouts) -> String {
    if knockouts.0.is_empty() {
        return String::new();
    }
    let parts = knockouts.0.iter().map(|p| p.label()).collect::<Vec<_>>().join(", ");
    crate::t!("flow-status-knocked-out", parts = parts)
}
