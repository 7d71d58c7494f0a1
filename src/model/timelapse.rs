//! A run's time-lapse (issue 52): at about [`FRAMES`] log-spaced steps
//! (every step early, fewer later), what the scenes need to show the model
//! as it was then, saved with the checkpoint and read back:
//!
//! - the training and validation loss at that step;
//! - on the probe ([`probe_sequences`]: strings of different random letters,
//!   each written twice), every head's **induction score** (the mean
//!   attention from each position of the copy to the position just after
//!   its letter's first occurrence, Olsson et al. 2022) and
//!   **previous-token score** (the mean attention to the position before),
//!   the loss on the copied letters and on the first, fresh ones, and the
//!   greedy next byte at every position of the first probe string;
//! - each parameter's weight, gradient and update norm;
//! - the attention maps of the first probe string, in f16, kept within
//!   [`MAP_BUDGET`] bytes (past it, every other frame's maps are dropped);
//! - the trained weights themselves, kept within [`WEIGHT_BUDGET`] bytes
//!   the same way, for the scenes that recompute the model as it was
//!   (*Inside the model*, Take it apart, Model): only for models of at
//!   most [`KEPT_WEIGHTS_MAX`] trained values, so that a run keeps at
//!   least four such frames.
//!
//! The frames are computed by the trainer ([`crate::train::timelapse`]);
//! this file holds what they are, the schedule and the scores' arithmetic.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How many values the trained parameters hold (a frame's kept weights).
pub fn trained_values(program: &crate::program::Program) -> usize {
    program.trained().map(|id| program.tensors[id].numel()).sum()
}

/// About how many frames a run records, whatever its length.
pub const FRAMES: usize = 100;
/// The most bytes of attention maps a time-lapse keeps (f16).
pub const MAP_BUDGET: usize = 8 << 20;
/// The most bytes of frames' weights a time-lapse keeps (f32).
pub const WEIGHT_BUDGET: usize = 16 << 20;
/// The most bytes of frames' weights an export for sharing keeps (f16;
/// `tinygpt export`): a gallery model's file stays small.
pub const EXPORT_WEIGHT_BUDGET: usize = 2 << 20;
/// The most trained values a model may have for its frames to keep its
/// weights: four frames' worth fit in [`WEIGHT_BUDGET`] (a million values,
/// so every preset up to `small`, and the gallery's models).
pub const KEPT_WEIGHTS_MAX: usize = WEIGHT_BUDGET / 4 / std::mem::size_of::<f32>();
/// A head whose induction score passes this is called an induction head
/// (where the charts and `tinygpt timelapse` mark the run's first).
pub const FORMED: f32 = 0.5;
/// How many probe strings the scores average over.
pub const PROBE_SEQUENCES: usize = 4;
/// The most different letters a probe string repeats (the repeat task's
/// longest).
pub const PROBE_LETTERS: usize = crate::data::tasks::REPEAT_MAX;

/// The steps a run of `total` steps records a frame after: 0 (the
/// initial weights), then about [`FRAMES`] steps spaced evenly in log(step + 1)
/// up to `total`, every step when the run has fewer.
pub fn frame_steps(total: u64) -> Vec<u64> {
    let mut steps = vec![0];
    if total == 0 {
        return steps;
    }
    let top = ((total + 1) as f64).ln();
    for k in 1..FRAMES {
        let s = ((top * k as f64 / (FRAMES - 1) as f64).exp() - 1.0).round() as u64;
        let s = s.clamp(1, total);
        if steps.last() != Some(&s) {
            steps.push(s);
        }
    }
    if steps.last() != Some(&total) {
        steps.push(total);
    }
    steps
}

/// Different letters per probe string for a context of `ctx` bytes (the
/// string is written twice): None when the context is too short to score
/// (under four bytes).
pub fn probe_letters(ctx: usize) -> Option<usize> {
    let m = (ctx / 2).min(PROBE_LETTERS);
    (m >= 2).then_some(m)
}

/// The probe: [`PROBE_SEQUENCES`] strings of `m` different random letters
/// (a fixed seed), each followed by itself. Always the same for a context.
pub fn probe_sequences(ctx: usize) -> Vec<Vec<u8>> {
    let Some(m) = probe_letters(ctx) else {
        return vec![];
    };
    let mut rng = crate::data::rng::Rng::for_stream(52, "induction probe");
    (0..PROBE_SEQUENCES)
        .map(|_| {
            let mut s = crate::data::tasks::different_letters(&mut rng, m);
            s.extend_from_within(..m);
            s
        })
        .collect()
}

/// The induction score of one head's attention `p` (n × n, row i the
/// weights query i gives keys 0..=i) on a string of `m` letters written
/// twice (n = 2m): the mean, over the copy's positions i = m..2m, of the
/// weight on position i − m + 1, which holds the letter that followed the
/// first occurrence of the letter at i.
pub fn induction_score(p: &[f32], m: usize) -> f32 {
    let n = 2 * m;
    debug_assert_eq!(p.len(), n * n);
    let sum: f64 = (m..n).map(|i| p[i * n + i - m + 1] as f64).sum();
    (sum / m as f64) as f32
}

/// The previous-token score of one head's attention `p` (n × n): the mean,
/// over positions i = 1..n, of the weight on position i − 1.
pub fn previous_token_score(p: &[f32], n: usize) -> f32 {
    debug_assert_eq!(p.len(), n * n);
    if n < 2 {
        return 0.0;
    }
    let sum: f64 = (1..n).map(|i| p[i * n + i - 1] as f64).sum();
    (sum / (n - 1) as f64) as f32
}

/// One head's scores.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadScore {
    pub layer: usize,
    pub head: usize,
    pub induction: f32,
    pub previous_token: f32,
}

/// One parameter's norms at a frame: of its weights after the step, of the
/// gradient the step applied (clipped), and of the update (weights after
/// minus before). The first frame (step 0) has no gradient or update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorNorms {
    pub name: String,
    pub weight: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<f32>,
}

/// The model at one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub step: u64,
    /// The step's training loss (None at step 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f32>,
    /// The latest validation loss measured by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
    /// Mean loss on the probe strings' copied letters (each predicted from
    /// the copy's letter before it: positions m..2m−1), and on their first,
    /// fresh letters (positions 0..m−1: nothing to copy from).
    pub copy_loss: f32,
    pub fresh_loss: f32,
    /// Every head's scores, block by block.
    pub heads: Vec<HeadScore>,
    /// Every parameter's norms, in program order.
    pub tensors: Vec<TensorNorms>,
    /// The greedy next byte at each position of the first probe string.
    pub predictions: Vec<u8>,
    /// The first probe string's attention maps (L × H × n × n, f16 bits),
    /// when this frame keeps them ([`MAP_BUDGET`]).
    #[serde(skip)]
    pub attention: Option<Vec<u16>>,
    /// The trained parameters' values after the step, one after another in
    /// program order (as [`crate::train::timelapse::norm_names`] lists them
    /// without gradients), when this frame keeps them ([`WEIGHT_BUDGET`]).
    /// Shared, so that copies of the time-lapse do not copy them.
    #[serde(skip)]
    pub weights: Option<Arc<Vec<f32>>>,
}

impl Frame {
    /// The scores of `(layer, head)`.
    pub fn head(&self, layer: usize, head: usize) -> Option<&HeadScore> {
        self.heads
            .iter()
            .find(|h| h.layer == layer && h.head == head)
    }

    /// The highest induction score of any head.
    pub fn best_induction(&self) -> Option<&HeadScore> {
        self.heads
            .iter()
            .max_by(|a, b| a.induction.total_cmp(&b.induction))
    }
}

/// A run's frames, with the probe they were measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeLapse {
    /// The probe strings ([`probe_sequences`]).
    pub probe: Vec<Vec<u8>>,
    pub n_layer: usize,
    pub n_head: usize,
    pub frames: Vec<Frame>,
}

impl TimeLapse {
    /// An empty time-lapse for a model of `n_layer` blocks of `n_head`
    /// heads and context `ctx`; None when the context is too short to probe.
    pub fn new(n_layer: usize, n_head: usize, ctx: usize) -> Option<Self> {
        let probe = probe_sequences(ctx);
        (!probe.is_empty()).then_some(Self {
            probe,
            n_layer,
            n_head,
            frames: vec![],
        })
    }

    /// Letters per probe string (its length is twice this).
    pub fn letters(&self) -> usize {
        self.probe.first().map_or(0, |s| s.len() / 2)
    }

    /// Values in one frame's attention maps.
    pub fn map_len(&self) -> usize {
        let n = 2 * self.letters();
        self.n_layer * self.n_head * n * n
    }

    /// The step after which the last frame was recorded.
    pub fn last_step(&self) -> Option<u64> {
        self.frames.last().map(|f| f.step)
    }

    /// Whether a run of `total` steps records a frame after `step` (one
    /// not yet recorded).
    pub fn due(&self, step: u64, total: u64) -> bool {
        self.last_step().is_none_or(|last| step > last) && frame_steps(total).contains(&step)
    }

    /// Adds a frame (after the last), then drops every other frame's maps
    /// (the first and the newest kept) while the maps pass [`MAP_BUDGET`],
    /// and every other frame's weights while they pass [`WEIGHT_BUDGET`].
    pub fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
        let map_bytes = 2 * self.map_len();
        thin(&mut self.frames, MAP_BUDGET, |f| f.attention.as_ref().map(|_| map_bytes), |f| f.attention = None);
        self.thin_weights(WEIGHT_BUDGET, 4);
    }

    /// Drops every other frame's weights (the first and the newest kept)
    /// while they pass `budget` bytes at `bytes_per_value` each.
    pub fn thin_weights(&mut self, budget: usize, bytes_per_value: usize) {
        thin(&mut self.frames, budget, |f| f.weights.as_ref().map(|w| bytes_per_value * w.len()), |f| f.weights = None);
    }

    /// Bytes the frames' weights take.
    pub fn weight_bytes(&self) -> usize {
        self.frames.iter().filter_map(|f| f.weights.as_ref()).map(|w| 4 * w.len()).sum()
    }

    /// Bytes the attention maps take.
    pub fn map_bytes(&self) -> usize {
        let per = 2 * self.map_len();
        self.frames.iter().filter(|f| f.attention.is_some()).count() * per
    }

    /// About how many bytes the time-lapse takes in memory.
    pub fn memory_bytes(&self) -> usize {
        let scalars: usize = self
            .frames
            .iter()
            .map(|f| {
                std::mem::size_of::<Frame>()
                    + f.heads.len() * std::mem::size_of::<HeadScore>()
                    + f.tensors
                        .iter()
                        .map(|t| std::mem::size_of::<TensorNorms>() + t.name.len())
                        .sum::<usize>()
                    + f.predictions.len()
            })
            .sum();
        scalars + self.map_bytes() + self.weight_bytes()
    }

    /// The frame nearest `step` (the last at or before it).
    pub fn at(&self, step: u64) -> Option<&Frame> {
        let i = self.frames.partition_point(|f| f.step <= step);
        self.frames.get(i.saturating_sub(1))
    }

    /// The attention map (n × n, f32) of `(layer, head)` in `frame`.
    pub fn map(&self, frame: &Frame, layer: usize, head: usize) -> Option<Vec<f32>> {
        let maps = frame.attention.as_ref()?;
        let n = 2 * self.letters();
        let at = (layer * self.n_head + head) * n * n;
        Some(
            maps.get(at..at + n * n)?
                .iter()
                .map(|&b| half::f16::from_bits(b).to_f32())
                .collect(),
        )
    }

    /// The first frame at which a head's induction score passes `threshold`,
    /// and that head: where the induction head formed, if one did.
    pub fn induction_onset(&self, threshold: f32) -> Option<(&Frame, HeadScore)> {
        self.frames.iter().find_map(|f| {
            f.best_induction()
                .filter(|h| h.induction > threshold)
                .map(|h| (f, *h))
        })
    }

    /// As `tinygpt timelapse --json` prints it (and the app's 💾 Data
    /// saves it): the probe as text, every frame without its maps, which
    /// frames keep maps and weights and their bytes, the memory taken, and
    /// where a head first passed `formed`.
    pub fn to_json(&self, formed: f32) -> serde_json::Value {
        let mut json = serde_json::to_value(self).expect("plain data");
        json["probe"] = self
            .probe
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        json["maps"] = serde_json::json!({
            "frames": self.frames.iter().filter(|f| f.attention.is_some()).map(|f| f.step).collect::<Vec<_>>(),
            "bytes": self.map_bytes(),
        });
        json["weights"] = serde_json::json!({
            "frames": self.frames.iter().filter(|f| f.weights.is_some()).map(|f| f.step).collect::<Vec<_>>(),
            "bytes": self.weight_bytes(),
        });
        json["memory_bytes"] = self.memory_bytes().into();
        json["induction_onset"] = match self.induction_onset(formed) {
            Some((f, h)) => serde_json::json!({ "step": f.step, "layer": h.layer, "head": h.head, "threshold": formed }),
            None => serde_json::Value::Null,
        };
        json
    }

    /// Checks what a file's time-lapse claims against the model it comes
    /// with: its heads, its probe and its frames in order.
    pub fn check(&self, n_layer: usize, n_head: usize, ctx: usize) -> Result<(), String> {
        if self.n_layer != n_layer || self.n_head != n_head {
            return Err(format!(
                "its time-lapse is of {} blocks of {} heads, but the model has {n_layer} of {n_head}",
                self.n_layer, self.n_head
            ));
        }
        if self.probe != probe_sequences(ctx) {
            return Err("its time-lapse's probe strings are not the ones this program makes for the model's context".into());
        }
        if self.frames.windows(2).any(|w| w[0].step >= w[1].step) {
            return Err("its time-lapse's frames are not in step order".into());
        }
        let heads = n_layer * n_head;
        let n = 2 * self.letters();
        for f in &self.frames {
            if f.heads.len() != heads || f.predictions.len() != n {
                return Err(format!(
                    "its time-lapse's frame at step {} has {} head scores and {} predictions, not {heads} and {n}",
                    f.step,
                    f.heads.len(),
                    f.predictions.len()
                ));
            }
            let finite = [f.copy_loss, f.fresh_loss]
                .into_iter()
                .chain(f.heads.iter().flat_map(|h| [h.induction, h.previous_token]))
                .all(f32::is_finite);
            if !finite {
                return Err(format!(
                    "its time-lapse's frame at step {} holds a value that is not finite",
                    f.step
                ));
            }
        }
        Ok(())
    }
}

/// Drops every other kept payload (`size` says a frame's bytes, None for
/// none; `drop` removes it), the first and the newest kept, while the kept
/// pass `budget`; when not even two fit, keeps the newest only, and none
/// when it alone passes.
fn thin(frames: &mut [Frame], budget: usize, size: impl Fn(&Frame) -> Option<usize>, drop: impl Fn(&mut Frame)) {
    loop {
        let with: Vec<usize> = (0..frames.len()).filter(|&i| size(&frames[i]).is_some()).collect();
        let bytes: usize = with.iter().filter_map(|&i| size(&frames[i])).sum();
        if bytes <= budget {
            return;
        }
        if with.len() <= 2 {
            for &i in &with[..with.len() - 1] {
                drop(&mut frames[i]);
            }
            let newest = with[with.len() - 1];
            if size(&frames[newest]).is_some_and(|b| b > budget) {
                drop(&mut frames[newest]);
            }
            return;
        }
        for &i in with[1..with.len() - 1].iter().step_by(2) {
            drop(&mut frames[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_log_spaced_and_every_step_of_a_short_run() {
        let steps = frame_steps(3000);
        assert_eq!(steps[0], 0);
        assert_eq!(*steps.last().unwrap(), 3000);
        assert!(steps.windows(2).all(|w| w[0] < w[1]));
        assert!((70..=FRAMES + 1).contains(&steps.len()), "{}", steps.len());
        // Dense early, sparse late.
        assert!(steps.contains(&1) && steps.contains(&2) && steps.contains(&3));
        let gaps: Vec<u64> = steps.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.last() > gaps.first());
        assert_eq!(frame_steps(20), (0..=20).collect::<Vec<_>>());
        assert_eq!(frame_steps(0), vec![0]);
    }

    #[test]
    fn probe_strings_are_different_letters_written_twice() {
        let probe = probe_sequences(48);
        assert_eq!(probe.len(), PROBE_SEQUENCES);
        for s in &probe {
            let m = s.len() / 2;
            assert_eq!(m, PROBE_LETTERS);
            assert_eq!(s[..m], s[m..]);
            let distinct: std::collections::HashSet<&u8> = s[..m].iter().collect();
            assert_eq!(distinct.len(), m);
        }
        assert_eq!(probe, probe_sequences(48), "always the same");
        assert_eq!(probe_sequences(10)[0].len(), 10);
        assert!(probe_sequences(3).is_empty());
    }

    /// Scores of hand-built attention patterns.
    #[test]
    fn scores_of_constructed_patterns_are_the_hand_computed_ones() {
        let m = 3;
        let n = 2 * m;
        // A perfect induction head: each copy position i puts all of its
        // weight on i − m + 1; the first half attends to itself.
        let mut p = vec![0.0f32; n * n];
        for i in 0..n {
            let j = if i >= m { i - m + 1 } else { i };
            p[i * n + j] = 1.0;
        }
        assert_eq!(induction_score(&p, m), 1.0);
        // No row puts weight on the position before it.
        assert_eq!(previous_token_score(&p, n), 0.0);
        // A perfect previous-token head (row 0 on itself).
        let mut q = vec![0.0f32; n * n];
        q[0] = 1.0;
        for i in 1..n {
            q[i * n + i - 1] = 1.0;
        }
        assert_eq!(previous_token_score(&q, n), 1.0);
        // Rows 3, 4, 5 put their weight on 2, 3, 4; their induction
        // targets are 1, 2, 3.
        assert_eq!(induction_score(&q, m), 0.0);
        // Uniform causal attention: row i gives 1/(i+1) to every key.
        let mut u = vec![0.0f32; n * n];
        for i in 0..n {
            for j in 0..=i {
                u[i * n + j] = 1.0 / (i + 1) as f32;
            }
        }
        let by_hand = (1.0 / 4.0 + 1.0 / 5.0 + 1.0 / 6.0) / 3.0;
        assert!((induction_score(&u, m) - by_hand).abs() < 1e-7);
        let by_hand = (1.0 / 2.0 + 1.0 / 3.0 + 1.0 / 4.0 + 1.0 / 5.0 + 1.0 / 6.0) / 5.0;
        assert!((previous_token_score(&u, n) - by_hand).abs() < 1e-7);
    }

    fn frame(step: u64, maps: usize) -> Frame {
        Frame {
            step,
            loss: Some(1.0),
            val_loss: None,
            copy_loss: 1.0,
            fresh_loss: 1.0,
            heads: vec![HeadScore {
                layer: 0,
                head: 0,
                induction: step as f32 / 100.0,
                previous_token: 0.0,
            }],
            tensors: vec![],
            predictions: vec![0; 4],
            attention: Some(vec![0; maps]),
            weights: None,
        }
    }

    #[test]
    fn maps_stay_within_the_budget_and_the_newest_is_kept() {
        let mut t = TimeLapse::new(1, 1, 4).unwrap();
        let per = MAP_BUDGET / 2 / 8; // eight frames' maps fit
        t.n_layer = per / 16; // map_len = n_layer · 16 (n = 4)
        for step in 0..50 {
            t.push(frame(step, t.map_len()));
            assert!(t.map_bytes() <= MAP_BUDGET);
            assert!(t.frames.last().unwrap().attention.is_some());
            assert!(t.frames[0].attention.is_some());
        }
        assert!(t.frames.iter().filter(|f| f.attention.is_some()).count() >= 4);
        assert_eq!(t.at(17).unwrap().step, 17);
        assert_eq!(t.induction_onset(0.3).unwrap().0.step, 31);
    }

    #[test]
    fn weights_stay_within_their_budget_and_a_model_too_big_keeps_none() {
        let mut t = TimeLapse::new(1, 1, 4).unwrap();
        let per = WEIGHT_BUDGET / 4 / 6; // six frames' weights fit
        for step in 0..40 {
            let mut f = frame(step, t.map_len());
            f.weights = Some(Arc::new(vec![step as f32; per]));
            t.push(f);
            assert!(t.weight_bytes() <= WEIGHT_BUDGET);
            assert!(t.frames[0].weights.is_some(), "the first is kept");
            assert!(t.frames.last().unwrap().weights.is_some(), "the newest is kept");
        }
        let kept: Vec<&Frame> = t.frames.iter().filter(|f| f.weights.is_some()).collect();
        assert!((3..=6).contains(&kept.len()), "{}", kept.len());
        // Each kept frame holds its own step's weights.
        assert!(kept.iter().all(|f| f.weights.as_ref().unwrap()[0] == f.step as f32));
        let json = t.to_json(FORMED);
        assert_eq!(json["weights"]["bytes"], t.weight_bytes());
        assert_eq!(json["weights"]["frames"].as_array().unwrap().len(), kept.len());
        // An export's budget, at two bytes a value, keeps fewer.
        let mut export = t.clone();
        export.thin_weights(WEIGHT_BUDGET / 4, 2);
        assert!(export.weight_bytes() / 2 <= WEIGHT_BUDGET / 4);
        assert!(export.weight_bytes() < t.weight_bytes());
        assert!(export.frames[0].weights.is_some() && export.frames.last().unwrap().weights.is_some());
        // Weights larger than the whole budget are not kept at all.
        let mut big = TimeLapse::new(1, 1, 4).unwrap();
        let mut f = frame(0, big.map_len());
        f.weights = Some(Arc::new(vec![0.0; WEIGHT_BUDGET / 4 + 1]));
        big.push(f);
        assert_eq!(big.weight_bytes(), 0);
        assert_eq!(KEPT_WEIGHTS_MAX * 4 * 4, WEIGHT_BUDGET);
    }
}
