//! Saving the run as a checkpoint, atomically, off the frame.

use super::run::{Run, SaveInFlight};
use crate::app::engine::Snapshot;
use crate::model::checkpoint::{Checkpoint, OptimizerState, Precision};
use crate::model::params::NamedTensor;
use bevy::prelude::*;

/// The run as a checkpoint (with AdamW's moments) from a full snapshot, at
/// the snapshot's step: what training updates (a fine-tune's adapter).
pub(super) fn checkpoint_of(run: &mut Run, snapshot: &Snapshot) -> Result<Checkpoint, String> {
    let program = &run.program;
    let take = |prefix: &str| -> Result<Vec<NamedTensor>, String> {
        program
            .trained()
            .map(|id| {
                let t = &program.tensors[id];
                let name = format!("{prefix}{}", t.name);
                let values = snapshot
                    .tensors
                    .get(&name)
                    .filter(|v| v.len() == t.numel())
                    .ok_or(format!("`{name}` was not read back"))?;
                Ok(NamedTensor {
                    name,
                    shape: t.shape.clone(),
                    values: values.to_vec(),
                })
            })
            .collect()
    };
    let params = take("")?;
    let optimizer = OptimizerState {
        m: take("adam.m.")?,
        v: take("adam.v.")?,
    };
    let trainer = run.engine.trainer().ok_or("the run was busy")?;
    let mut checkpoint = trainer.checkpoint_from(params, Some(optimizer));
    // Steps may have been trained since the read (on the GPU, in flight).
    checkpoint.step = snapshot.step;
    checkpoint.loss_history.retain(|p| p.step <= snapshot.step);
    Ok(checkpoint)
}

/// Writes the run's checkpoint (with AdamW's moments) from a full snapshot
/// on a thread of its own; in the browser, offers it as a download named
/// after the preset and the snapshot's step (`path` is unused there).
/// Returns where the outcome will arrive.
pub(super) fn save_checkpoint(
    run: &mut Run,
    snapshot: &Snapshot,
    path: &std::path::Path,
) -> Result<SaveInFlight, String> {
    let checkpoint = checkpoint_of(run, snapshot)?;
    let slot = SaveInFlight::default();
    let step = snapshot.step;
    #[cfg(not(target_arch = "wasm32"))]
    {
        let (path, done) = (path.to_path_buf(), slot.clone());
        std::thread::Builder::new()
            .name("tinygpt-save".into())
            .spawn(move || {
                let outcome = checkpoint
                    .save(&path, Precision::F32)
                    .map(|()| format!("checkpoint saved to {} at step {step}", path.display()))
                    .map_err(|e| e.to_string());
                if let Ok(mut s) = done.lock() {
                    *s = Some(outcome);
                }
            })
            .map_err(|e| format!("cannot start the save: {e}"))?;
    }
    #[cfg(target_arch = "wasm32")]
    {
        // A download: the browser writes the file, off this thread.
        let _ = path;
        let name = format!(
            "tinygpt-{}-step{}.safetensors",
            run.preset.replace(['/', '\\', '.'], "_"),
            step
        );
        let bytes = checkpoint
            .to_bytes(Precision::F32, &name)
            .map_err(|e| e.to_string())?;
        crate::app::browser::download(&name, &bytes);
        *slot.lock().unwrap() = Some(Ok(crate::t!(
            "checkpoint-downloaded",
            name = name.as_str(),
            step = step,
        )));
    }
    Ok(slot)
}
