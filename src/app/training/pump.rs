//! Training inside the frame: each frame the engine runs steps within its
//! time budget, collects finished readbacks and records the steps.

use super::records::{StepRecord, TrainingRun};
use super::requests::{FlashTraces, Probes, Snapshots, TensorWants};
use super::run::{PendingFinetune, RECOVERY_INTERVAL_S, Run, RunState};
use super::save::{checkpoint_of, save_checkpoint};
use super::status::AppStatus;
use crate::model::checkpoint::Checkpoint;
use crate::model::lora::FinetuneOptions;
use crate::train::TrainError;
use bevy::prelude::*;

use web_time::Instant;

#[allow(clippy::too_many_arguments)]
pub(super) fn pump_training(
    mut commands: Commands,
    run: Option<ResMut<Run>>,
    mut snapshots: ResMut<Snapshots>,
    wants: Res<TensorWants>,
    mut probes: ResMut<Probes>,
    mut flash: ResMut<FlashTraces>,
    mut status: ResMut<AppStatus>,
    runs: Query<(Entity, &TrainingRun)>,
    time: Res<Time<Real>>,
    mut finetunes: MessageWriter<super::commands::RunCommand>,
) {
    let Some(mut run) = run else { return };
    let run = &mut *run;
    run.engine.frame_interval(time.delta_secs_f64() * 1e3);
    let Some((run_entity, _)) = runs.iter().find(|(_, r)| r.generation == run.generation) else {
        return;
    };
    let allowed = match run.state {
        RunState::Training => u64::MAX,
        _ => run.single_steps,
    };
    let pumped = run.engine.pump(allowed);
    run.single_steps = run.single_steps.saturating_sub(pumped.started);
    for m in &pumped.metrics {
        commands.spawn((StepRecord::from(*m), ChildOf(run_entity)));
        run.last = Some(*m);
    }
    if let Some(e) = pumped.error {
        run.state = RunState::Diverged;
        let back = if matches!(e, TrainError::Diverged { .. }) {
            crate::t!("training-back-at", step = run.engine.step())
        } else {
            String::new()
        };
        status.error(format!(
            "{}{back}",
            crate::t!("training-paused", error = e.to_string())
        ));
    }
    if let Some(found) = pumped.diagnosis {
        status.error(match found {
            Some(at) => crate::t!("diverged-at", op = at.to_string()),
            None => crate::t!("diverged-finite"),
        });
    }
    if run.engine.step() >= run.config().steps
        && run.state == RunState::Training
        && !run.engine.busy()
    {
        run.state = RunState::Finished;
        status.info = Some(crate::t!("run-finished", steps = run.config().steps));
    }
    match pumped.probe {
        Some((step, Ok(result))) => {
            probes.latest = Some((step, result));
            probes.version += 1;
            probes.error = None;
        }
        Some((_, Err(e))) => probes.error = Some(e),
        None => {}
    }
    if let Some(source) = probes.want.clone() {
        let step = run.step();
        let due = probes.dirty
            || if run.state == RunState::Training {
                probes
                    .last_request
                    .is_none_or(|t| t.elapsed().as_secs_f64() >= probes.interval_s)
            } else {
                probes.requested_step != Some(step) && !run.engine.busy()
            };
        if due && !run.engine.probe_pending() && run.pending_save.is_none() {
            run.engine.request_probe(source);
            probes.last_request = Some(Instant::now());
            probes.requested_step = Some(step);
            probes.dirty = false;
        }
    }
    match pumped.flash {
        Some((step, Ok(trace))) => {
            flash.latest = Some((step, std::sync::Arc::new(trace)));
            flash.version += 1;
            flash.error = None;
        }
        Some((_, Err(e))) => flash.error = Some(e),
        None => {}
    }
    if let Some(want) = flash.want.clone()
        && (flash.sent.as_ref() != Some(&want) || flash.refresh)
        && !run.engine.flash_pending()
        && run.pending_save.is_none()
    {
        run.engine.request_flash(want.clone());
        flash.sent = Some(want);
        flash.refresh = false;
    }
    if let Some(snapshot) = pumped.snapshot {
        if let Some((path, resume)) = run.pending_save.clone()
            && run.save_requested
        {
            run.pending_save = None;
            run.save_requested = false;
            match save_checkpoint(run, &snapshot, &path) {
                Ok(saving) => {
                    status.info = Some(format!("saving the checkpoint of step {}…", snapshot.step));
                    run.saving = Some(saving);
                }
                Err(e) => status.save_failed(format!("checkpoint not saved: {e}")),
            }
            if resume {
                run.state = RunState::Training;
            }
        }
        if let Some(pending) = run.pending_finetune.clone()
            && run.finetune_requested
        {
            run.pending_finetune = None;
            run.finetune_requested = false;
            let start = base_of(run, &snapshot).and_then(|base| {
                let (options, resume) = match pending {
                    PendingFinetune::New(options) => (options, None),
                    // An adapter goes only on the weights it was trained on.
                    PendingFinetune::Adapter(adapter) => {
                        crate::model::lora::check_base(&base, &adapter)?;
                        (FinetuneOptions::of(&adapter.config)?, Some(adapter))
                    }
                };
                Ok(super::commands::RunCommand::StartFinetune {
                    base_name: run.preset.clone(),
                    base: std::sync::Arc::new(base),
                    options,
                    resume,
                })
            });
            match start {
                Ok(command) => {
                    finetunes.write(command);
                }
                Err(e) => status.error(format!("the fine-tune could not start: {e}")),
            }
        }
        if run.recovery_out {
            run.recovery_out = false;
            match checkpoint_of(run, &snapshot) {
                Ok(checkpoint) => run.recovery = Some(checkpoint),
                Err(e) => warn!("no host copy of the run: {e}"),
            }
        }
        snapshots.latest = Some(snapshot);
        snapshots.version += 1;
    }
    // The save's thread reports where the checkpoint went (the run trains on
    // meanwhile: the checkpoint holds its own copy of the snapshot).
    let finished = run
        .saving
        .as_ref()
        .and_then(|slot| slot.lock().ok().and_then(|mut s| s.take()));
    if let Some(outcome) = finished {
        run.saving = None;
        match outcome {
            Ok(message) => status.info = Some(message),
            Err(e) => status.save_failed(format!("checkpoint not saved: {e}")),
        }
    }
    // A pending save waits until nothing is in flight, then reads everything.
    if run.pending_save.is_some() && !run.save_requested && !run.engine.busy() {
        let names = run
            .program
            .trained()
            .flat_map(|id| {
                let n = &run.program.tensors[id].name;
                [
                    n.clone(),
                    format!("grad.{n}"),
                    format!("adam.m.{n}"),
                    format!("adam.v.{n}"),
                ]
            })
            .collect();
        run.engine.request_snapshot(names);
        run.save_requested = true;
        return;
    }
    // A fine-tune waits until nothing is in flight, then reads the weights.
    if run.pending_finetune.is_some()
        && !run.finetune_requested
        && run.pending_save.is_none()
        && !run.engine.busy()
    {
        let names = run
            .program
            .params()
            .map(|id| run.program.tensors[id].name.clone())
            .collect();
        run.engine.request_snapshot(names);
        run.finetune_requested = true;
        return;
    }
    // What every view wants, each tensor once; big ones are read less
    // often: about 25 MB/s of readback at most (each snapshot is copied on
    // the frame thread).
    let mut names: Vec<String> = wants
        .union()
        .into_iter()
        .filter(|n| run.program.tensor_id(n).is_some())
        .collect();
    // On the GPU, every half minute of training the snapshot also reads the
    // whole run (weights and moments): the copy a lost device leaves.
    let recovery_due = run.engine.on_gpu()
        && run.state == RunState::Training
        && run.step() > 0
        && run
            .recovery_asked
            .is_none_or(|t| t.elapsed().as_secs_f64() >= RECOVERY_INTERVAL_S);
    if recovery_due && run.engine.snapshot_pending() {
        // The heatmaps wait until the copy has been asked for.
        return;
    }
    if recovery_due {
        for id in run.program.trained() {
            let n = &run.program.tensors[id].name;
            for name in [n.clone(), format!("adam.m.{n}"), format!("adam.v.{n}")] {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        run.engine.request_snapshot(names);
        run.recovery_asked = Some(Instant::now());
        run.recovery_out = true;
        snapshots.last_request = Some(Instant::now());
        return;
    }
    if names.is_empty() {
        return;
    }
    let bytes: f64 = names
        .iter()
        .filter_map(|n| run.program.tensor_id(n))
        .map(|id| 4.0 * run.program.tensors[id].numel() as f64)
        .sum();
    let interval = snapshots.interval_s.max(bytes / 2.5e7);
    let changed = wants.changes != snapshots.wants_seen;
    let due = snapshots.dirty
        || changed
        || snapshots
            .last_request
            .is_none_or(|t| t.elapsed().as_secs_f64() >= interval)
            && (run.state == RunState::Training
                || snapshots
                    .latest
                    .as_ref()
                    .is_none_or(|s| s.step != run.step()));
    if due && !run.engine.snapshot_pending() && run.pending_save.is_none() {
        run.engine.request_snapshot(names);
        snapshots.last_request = Some(Instant::now());
        snapshots.dirty = false;
        snapshots.wants_seen = wants.changes;
    }
}

/// The run's model from a snapshot of every weight, as the base of a
/// fine-tune (at the snapshot's step, with its loss history).
fn base_of(run: &mut Run, snapshot: &crate::app::engine::Snapshot) -> Result<Checkpoint, String> {
    let params = snapshot
        .params(&run.program)
        .ok_or("not every weight was read back")?;
    let trainer = run.engine.trainer().ok_or("the run was busy")?;
    let mut base = trainer.checkpoint_from(params, None);
    base.step = snapshot.step;
    base.loss_history.retain(|p| p.step <= snapshot.step);
    Ok(base)
}
