//! The status line's messages ([`AppStatus`]): errors and information for
//! the user.

use bevy::prelude::*;
use std::path::PathBuf;

/// Errors and messages for the status area. Errors stay until dismissed.
#[derive(Resource, Default, Debug)]
pub struct AppStatus {
    pub errors: Vec<String>,
    pub info: Option<String>,
    /// A save waiting for the user's word: its path exists and this app did
    /// not write it (the status line asks "Replace it?").
    pub confirm_replace: Option<PathBuf>,
    /// The files this app has saved, which later saves may replace unasked.
    pub written: std::collections::HashSet<PathBuf>,
    /// Checkpoint saves that did not happen, why (headless, `--export
    /// checkpoint` fails the command with them).
    pub save_failures: Vec<String>,
}

impl AppStatus {
    pub fn error(&mut self, message: impl Into<String>) {
        let message = message.into();
        warn!("{message}");
        self.errors.push(message);
    }

    /// An error that is a checkpoint save not made.
    pub fn save_failed(&mut self, message: impl Into<String>) {
        let message = message.into();
        self.save_failures.push(message.clone());
        self.error(message);
    }
}
