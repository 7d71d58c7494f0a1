//! Reduced motion: the tour's flights cut, the sweeps and pulses jump, and
//! egui's panels open without animating. On when the system asks for it
//! (GNOME's `enable-animations` off, macOS's *Reduce motion*; in the
//! browser `prefers-reduced-motion: reduce`), with `--reduced-motion`, or
//! with the view menu's checkbox ([`UiState::reduced_motion`], the switch
//! every scene reads).

use crate::app::ui::state::UiState;
use bevy::prelude::*;
use bevy_egui::{EguiContexts, EguiPrimaryContextPass};

pub struct MotionPlugin;

impl Plugin for MotionPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(Startup, follow_the_system)
            .add_systems(EguiPrimaryContextPass, still_panels);
    }
}

/// Whether the system (or the page) asks for reduced motion.
pub fn system_asks() -> bool {
    #[cfg(target_arch = "wasm32")]
    {
        crate::app::browser::prefers_reduced_motion()
    }
    #[cfg(all(not(target_arch = "wasm32"), target_os = "linux"))]
    {
        // GNOME (and desktops that follow its settings): animations off.
        std::process::Command::new("gsettings")
            .args(["get", "org.gnome.desktop.interface", "enable-animations"])
            .stderr(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "false")
    }
    #[cfg(target_os = "macos")]
    {
        std::process::Command::new("defaults")
            .args(["read", "com.apple.universalaccess", "reduceMotion"])
            .stderr(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1")
    }
    #[cfg(all(not(target_arch = "wasm32"), not(target_os = "linux"), not(target_os = "macos")))]
    {
        false
    }
}

/// Turns reduced motion on at start where the system asks for it (a
/// headless run does not ask: its pictures stay the same on any machine).
fn follow_the_system(mut ui_state: ResMut<UiState>, headless: Option<Res<crate::app::canvas::HeadlessTarget>>) {
    if headless.is_none() && !ui_state.reduced_motion && system_asks() {
        ui_state.reduced_motion = true;
    }
}

/// egui's animations (a panel opening) off with reduced motion.
fn still_panels(mut contexts: EguiContexts, ui_state: Res<UiState>, mut last: Local<Option<bool>>) -> Result {
    if *last == Some(ui_state.reduced_motion) {
        return Ok(());
    }
    let time = if ui_state.reduced_motion { 0.0 } else { 1.0 / 12.0 };
    contexts.ctx_mut()?.all_styles_mut(|style| style.animation_time = time);
    *last = Some(ui_state.reduced_motion);
    Ok(())
}
