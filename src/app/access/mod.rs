//! Accessibility (issue 53): what a person using only a keyboard, or a
//! screen reader, needs from the app.
//!
//! - [`tree`]: the accessibility tree. egui builds one for its panels
//!   (AccessKit); the picture's parts, the focused cell and a polite live
//!   region are added to it here. Natively it goes to the platform's screen
//!   reader through Bevy's AccessKit adapter; in the browser it is mirrored
//!   into hidden DOM elements beside the canvas (`web/index.html`); headless
//!   runs print it.
//! - [`picture`]: the keyboard's focus in the picture: Enter (or F6) goes
//!   into it, the arrows move through its parts and their cells, Enter
//!   opens, Escape backs out; a ring shows where the focus is.
//! - [`announce`]: status changes (a lesson step, training started or
//!   finished, a checkpoint saved, an error) said through the live region.
//! - [`table`]: the numbers behind the view as a table (the view menu, F10).
//! - [`describe`]: the picture in one line of words, with its numbers (the
//!   picture's description in the tree, the table's first line, F9).
//! - [`keys`]: the keyboard's shortcuts, listed (`?`).
//! - [`motion`]: reduced motion, from the system's setting, the page's
//!   `prefers-reduced-motion`, `--reduced-motion` or the link.

pub mod announce;
pub mod describe;
pub mod keys;
pub mod motion;
pub mod picture;
pub mod table;
pub mod tree;

use bevy::prelude::*;

pub struct AccessPlugin;

impl Plugin for AccessPlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins((
            tree::TreePlugin,
            picture::PicturePlugin,
            announce::AnnouncePlugin,
            motion::MotionPlugin,
            table::TablePlugin,
            describe::DescribePlugin,
            keys::KeysPlugin,
        ));
    }
}
