//! Files into the app: corpora, presets and checkpoints, from a path typed
//! in the Run panel or a file dropped on the window. Each is read here and
//! handed to the training plugin as a [`RunCommand`], which checks it and
//! reports any problem in the status area; nothing is replaced until the new
//! input has been checked.

use super::training::{AppStatus, RunCommand};
use bevy::prelude::*;
use bevy::window::FileDragAndDrop;
use std::path::Path;

/// What a file is taken for, by its extension.
pub fn command_for(name: &str, bytes: Vec<u8>) -> Result<RunCommand, String> {
    let lower = name.to_ascii_lowercase();
    // `.tinygpt`: the original TinyGPT's saved model (model::original).
    if lower.ends_with(".safetensors") || lower.ends_with(".tinygpt") {
        Ok(RunCommand::LoadCheckpoint {
            name: name.to_string(),
            bytes,
        })
    } else if lower.ends_with(".ron") {
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{name} is not UTF-8 text, so it cannot be a RON preset"))?;
        Ok(RunCommand::LoadPreset {
            name: name.to_string(),
            text,
        })
    } else {
        Ok(RunCommand::LoadCorpus {
            name: name.to_string(),
            bytes,
        })
    }
}

/// Reads a file from disk into the command for it.
pub fn load_path(path: &Path) -> Result<RunCommand, String> {
    // The largest thing dropped is a checkpoint: behemoth's with AdamW is 5.7 GB.
    let bytes = crate::data::read_file(path, 8 << 30)
        .map_err(|e| format!("cannot read {}: {e}; check the path", path.display()))?;
    command_for(&path.display().to_string(), bytes)
}

pub struct FilesPlugin;

impl Plugin for FilesPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(
            Update,
            dropped_files.in_set(super::schedule::AppSystems::Input),
        );
    }
}

fn dropped_files(
    mut drops: MessageReader<FileDragAndDrop>,
    mut out: MessageWriter<RunCommand>,
    mut status: ResMut<AppStatus>,
    workshop: Res<super::workshop::Workshop>,
) {
    for drop in drops.read() {
        if let FileDragAndDrop::DroppedFile { path_buf, .. } = drop {
            if workshop.locked {
                status.error(super::workshop::no_files());
                continue;
            }
            match load_path(path_buf) {
                Ok(command) => {
                    out.write(command);
                }
                Err(e) => status.error(e),
            }
        }
    }
}
