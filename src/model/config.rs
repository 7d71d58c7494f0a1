//! Model and training configuration, and the RON presets in `presets/`.
//!
//! A preset is one RON file holding a [`Config`]: the model's shape (layers,
//! heads, width, context) and how to train it (batch, steps, learning rate and
//! schedule, AdamW, dropout). The built-in presets are compiled into the binary
//! so the program never needs the source tree at run time; a user can also
//! name any `.ron` file of their own.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Vocabulary size of the byte tokenizer: every byte is a token.
pub const VOCAB: usize = 256;

/// The arithmetic of a run's matmuls: a preset's `precision:`, the CLI's
/// `--precision`, the app's Precision box.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Precision {
    /// f32 everywhere: the reference, on every backend.
    #[default]
    F32,
    /// The matmuls on the GPU's tensor cores: f16 operands, f32
    /// accumulation, the loss scaled; weights, optimizer and every other op
    /// f32 (where the device has cooperative matrices).
    Mixed,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Mixed];

    /// The name on the command line and in links.
    pub fn key(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Mixed => "mixed",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.key() == key)
    }

    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }
}

/// The learning-rate schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Schedule {
    /// The same learning rate at every step.
    Constant,
    /// Linear warm-up from 0 to `lr` over `warmup_steps`, then cosine decay to
    /// `min_lr` at `decay_steps`, constant `min_lr` after.
    WarmupCosine {
        warmup_steps: u64,
        decay_steps: u64,
        min_lr: f32,
    },
}

/// The "break it" labs: parts of the model a lesson can take out, to see
/// what each one is for. Both are on in every preset; the program honours
/// them, so the CPU, the GPU and the parity tests all run the broken model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lab {
    /// The causal mask: position t attends to positions ≤ t only. Without
    /// it, training can read the byte it is asked to predict.
    #[serde(default = "on")]
    pub causal_mask: bool,
    /// The position embeddings `wpe`. Without them (and with the mask) a
    /// position sees the bytes before it as a set: their order is lost.
    #[serde(default = "on")]
    pub position_embeddings: bool,
}

fn on() -> bool {
    true
}

impl Default for Lab {
    fn default() -> Self {
        Self {
            causal_mask: true,
            position_embeddings: true,
        }
    }
}

impl Lab {
    /// Whether this is the intact model.
    pub fn is_intact(&self) -> bool {
        *self == Self::default()
    }

    /// What is taken out, in words ("no causal mask, no position embeddings").
    pub fn describe(&self) -> String {
        let mut off = vec![];
        if !self.causal_mask {
            off.push("no causal mask");
        }
        if !self.position_embeddings {
            off.push("no position embeddings");
        }
        if off.is_empty() {
            "the intact model".into()
        } else {
            off.join(", ")
        }
    }
}

/// Which linears of each block a LoRA adapter adapts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraTargets {
    /// The attention's `c_attn` (the fused q|k|v projection) and `c_proj`.
    pub attention: bool,
    /// The MLP's `c_fc` and `c_proj`.
    pub mlp: bool,
}

impl LoraTargets {
    /// Parses `attn`, `mlp` or `attn,mlp` (the CLI's `--targets`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut targets = Self {
            attention: false,
            mlp: false,
        };
        for part in text.split(',').map(str::trim) {
            match part {
                "attn" | "attention" => targets.attention = true,
                "mlp" => targets.mlp = true,
                other => {
                    return Err(format!(
                        "`{other}` is not a LoRA target: name `attn`, `mlp` or `attn,mlp`"
                    ));
                }
            }
        }
        Ok(targets)
    }

    /// Whether the linear labelled `h.I.attn.c_attn` (etc.) is adapted.
    pub fn adapts(&self, linear: &str) -> bool {
        (self.attention && linear.contains(".attn.")) || (self.mlp && linear.contains(".mlp."))
    }

    /// `attn`, `mlp` or `attn,mlp`, as `parse` reads it.
    pub fn describe(&self) -> String {
        let mut parts = vec![];
        if self.attention {
            parts.push("attn");
        }
        if self.mlp {
            parts.push("mlp");
        }
        parts.join(",")
    }
}

/// LoRA (Hu et al. 2021): every base weight is frozen, and each targeted
/// linear `y = x·Wᵀ + b` gains a low-rank update,
/// `y = x·Wᵀ + b + (α/r)·(x·Aᵀ)·Bᵀ`, A (r, in) and B (out, r) the only
/// weights trained. The program honours it, so both backends, the
/// step-through and the scenes run the adapted model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lora {
    /// The rank r of A and B.
    pub rank: usize,
    /// α: the update is scaled by α/r.
    pub alpha: f32,
    pub targets: LoraTargets,
    /// The fingerprint of the frozen base weights the adapters were trained
    /// on ([`crate::model::lora::fingerprint`]): an adapter refuses any other.
    pub base: u64,
}

impl Lora {
    /// The default targets: the attention's two linears, as in the paper.
    pub const DEFAULT_TARGETS: LoraTargets = LoraTargets {
        attention: true,
        mlp: false,
    };

    /// α/r, the update's scale.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }

    /// The trained parameters: r·(in + out) per adapted linear.
    pub fn param_count(&self, config: &Config) -> usize {
        let c = config.d_model;
        let per_block = if self.targets.attention {
            (c + 3 * c) + (c + c)
        } else {
            0
        } + if self.targets.mlp {
            (c + 4 * c) + (4 * c + c)
        } else {
            0
        };
        self.rank * per_block * config.n_layer
    }
}

/// Everything that defines a run: the model shape and the training recipe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Transformer blocks (L).
    pub n_layer: usize,
    /// Attention heads per block (H); must divide `d_model`.
    pub n_head: usize,
    /// Width of the residual stream (C).
    pub d_model: usize,
    /// Context length in bytes (T).
    pub ctx: usize,
    /// Sequences per batch (B).
    pub batch: usize,
    /// Training steps of a full run.
    pub steps: u64,
    /// Peak learning rate.
    pub lr: f32,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    #[serde(default = "default_beta1")]
    pub beta1: f32,
    #[serde(default = "default_beta2")]
    pub beta2: f32,
    #[serde(default = "default_eps")]
    pub eps: f32,
    /// AdamW decoupled weight decay, applied to ≥2-D tensors only.
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f32,
    /// Global gradient-norm clip; 0 turns clipping off.
    #[serde(default = "default_grad_clip")]
    pub grad_clip: f32,
    /// Dropout probability (embeddings, attention weights, residual branches).
    #[serde(default)]
    pub dropout: f32,
    /// Evaluate the validation loss every this many steps (0: only at the end).
    #[serde(default = "default_eval_interval")]
    pub eval_interval: u64,
    /// Batches averaged for one validation loss.
    #[serde(default = "default_eval_batches")]
    pub eval_batches: usize,
    /// Parts taken out for a "break it" lab; intact by default.
    #[serde(default, skip_serializing_if = "Lab::is_intact")]
    pub lab: Lab,
    /// A LoRA fine-tune of a frozen base ([`Lora`]); none in a preset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<Lora>,
    /// The matmuls' arithmetic ([`Precision`]); f32 unless a preset or the
    /// run says `Mixed` (written only then, so f32 files are as before).
    #[serde(default, skip_serializing_if = "Precision::is_f32")]
    pub precision: Precision,
}

fn default_schedule() -> Schedule {
    Schedule::Constant
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.95
}
fn default_eps() -> f32 {
    1e-8
}
fn default_weight_decay() -> f32 {
    0.1
}
fn default_grad_clip() -> f32 {
    1.0
}
fn default_eval_interval() -> u64 {
    100
}
fn default_eval_batches() -> usize {
    8
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "{source_name}: {message} (fix the RON syntax or field name; see presets/small.ron for a valid example)"
    )]
    Parse {
        source_name: String,
        message: String,
    },
    #[error("{source_name}: field `{field}` {rule}")]
    Rule {
        source_name: String,
        field: &'static str,
        rule: String,
    },
    #[error("unknown preset `{name}`: choose one of {known} or give the path of a .ron file")]
    UnknownPreset { name: String, known: String },
    #[error("cannot read preset file {path}: {message}")]
    Io { path: String, message: String },
}

/// The built-in presets, smallest first: (id, RON source).
pub const BUILTIN_PRESETS: &[(&str, &str)] = &[
    ("tiny", include_str!("../../presets/tiny.ron")),
    ("small", include_str!("../../presets/small.ron")),
    ("medium", include_str!("../../presets/medium.ron")),
    ("large", include_str!("../../presets/large.ron")),
    ("xl", include_str!("../../presets/xl.ron")),
    ("huge", include_str!("../../presets/huge.ron")),
    ("massive", include_str!("../../presets/massive.ron")),
    ("mega", include_str!("../../presets/mega.ron")),
    ("behemoth", include_str!("../../presets/behemoth.ron")),
    (
        "nanogpt-char",
        include_str!("../../presets/nanogpt-char.ron"),
    ),
];

/// The presets of the toy tasks' models (`--corpus task:NAME`, the
/// gallery's), by the task's name: built in too, but not of the size ladder
/// that the speedup curves climb.
pub const TASK_PRESETS: &[(&str, &str)] = &[
    ("reverse", include_str!("../../presets/tasks/reverse.ron")),
    ("sort", include_str!("../../presets/tasks/sort.ron")),
    ("add", include_str!("../../presets/tasks/add.ron")),
    ("repeat", include_str!("../../presets/tasks/repeat.ron")),
];

/// Whether `id` names a built-in preset (the ladder's or a task's).
pub fn is_builtin(id: &str) -> bool {
    BUILTIN_PRESETS
        .iter()
        .chain(TASK_PRESETS)
        .any(|(p, _)| *p == id)
}

/// The most transformer blocks a config may have.
pub const MAX_LAYERS: usize = 1024;
/// The most parameters a config may have: the flat f32 buffer of the
/// weights (and each of the gradients and AdamW moments) stays within 4 GiB,
/// about the most one wgpu storage binding takes, and 32-bit byte offsets.
pub const MAX_PARAMS: usize = u32::MAX as usize / 4;

/// The preset a run uses when none is named.
pub const DEFAULT_PRESET: &str = "small";

impl Config {
    /// Parses and validates RON text; `source_name` names it in errors.
    pub fn from_ron(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        let cfg: Config = ron::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
        cfg.validate(source_name)?;
        Ok(cfg)
    }

    /// A built-in preset by id, or a `.ron` file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ConfigError> {
        if let Some((id, text)) = BUILTIN_PRESETS.iter().find(|(id, _)| *id == name_or_path) {
            return Self::from_ron(text, &format!("presets/{id}.ron"));
        }
        if let Some((id, text)) = TASK_PRESETS.iter().find(|(id, _)| *id == name_or_path) {
            return Self::from_ron(text, &format!("presets/tasks/{id}.ron"));
        }
        let path = Path::new(name_or_path);
        if name_or_path.ends_with(".ron") || path.exists() {
            let text = crate::data::read_text(path).map_err(|message| ConfigError::Io {
                path: name_or_path.to_string(),
                message,
            })?;
            return Self::from_ron(&text, name_or_path);
        }
        Err(ConfigError::UnknownPreset {
            name: name_or_path.to_string(),
            known: BUILTIN_PRESETS
                .iter()
                .chain(TASK_PRESETS)
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Checks every rule a runnable configuration must satisfy.
    pub fn validate(&self, source_name: &str) -> Result<(), ConfigError> {
        let rule = |field: &'static str, rule: String| ConfigError::Rule {
            source_name: source_name.to_string(),
            field,
            rule,
        };
        for (field, value) in [
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("d_model", self.d_model),
            ("ctx", self.ctx),
            ("batch", self.batch),
        ] {
            if value == 0 {
                return Err(rule(field, "is 0; it must be at least 1".into()));
            }
        }
        if self.steps == 0 {
            return Err(rule("steps", "is 0; it must be at least 1".into()));
        }
        if !self.d_model.is_multiple_of(self.n_head) {
            return Err(rule(
                "n_head",
                format!(
                    "= {} must divide d_model = {} (head_dim = d_model / n_head)",
                    self.n_head, self.d_model
                ),
            ));
        }
        if self.head_dim() > 128 {
            return Err(rule(
                "n_head",
                format!(
                    "gives head_dim {} > 128, the largest the attention kernels support",
                    self.head_dim()
                ),
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(rule(
                "lr",
                format!("= {} must be a finite number > 0", self.lr),
            ));
        }
        for (field, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return Err(rule(field, format!("= {v} must be in [0, 1)")));
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(rule(
                "eps",
                format!("= {} must be a finite number > 0", self.eps),
            ));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(rule(
                "weight_decay",
                format!("= {} must be finite and >= 0", self.weight_decay),
            ));
        }
        if !(self.grad_clip.is_finite() && self.grad_clip >= 0.0) {
            return Err(rule(
                "grad_clip",
                format!(
                    "= {} must be finite and >= 0 (0 turns clipping off)",
                    self.grad_clip
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(rule(
                "dropout",
                format!("= {} must be in [0, 1)", self.dropout),
            ));
        }
        if self.eval_batches == 0 {
            return Err(rule("eval_batches", "is 0; it must be at least 1".into()));
        }
        if let Schedule::WarmupCosine {
            warmup_steps,
            decay_steps,
            min_lr,
        } = &self.schedule
        {
            if !(min_lr.is_finite() && *min_lr >= 0.0 && *min_lr <= self.lr) {
                return Err(rule(
                    "schedule",
                    format!("min_lr = {min_lr} must be in [0, lr = {}]", self.lr),
                ));
            }
            if decay_steps < warmup_steps {
                return Err(rule(
                    "schedule",
                    format!("decay_steps = {decay_steps} must be >= warmup_steps = {warmup_steps}"),
                ));
            }
        }
        if let Some(lora) = &self.lora {
            if lora.rank == 0 || lora.rank > self.d_model {
                return Err(rule(
                    "lora",
                    format!(
                        "rank = {} must be between 1 and d_model = {}",
                        lora.rank, self.d_model
                    ),
                ));
            }
            if !(lora.alpha.is_finite() && lora.alpha > 0.0) {
                return Err(rule(
                    "lora",
                    format!("alpha = {} must be a finite number > 0", lora.alpha),
                ));
            }
            if !(lora.targets.attention || lora.targets.mlp) {
                return Err(rule(
                    "lora",
                    "adapts no linear: target the attention, the MLP or both".into(),
                ));
            }
        }
        // A model no machine holds is refused before anything is built (the
        // program alone would take minutes and gigabytes to describe it).
        if self.n_layer > MAX_LAYERS {
            return Err(rule(
                "n_layer",
                format!("= {} is more than {MAX_LAYERS} layers", self.n_layer),
            ));
        }
        let c = self.d_model as u128;
        let params =
            256 * c + self.ctx as u128 * c + 2 * c + self.n_layer as u128 * (12 * c * c + 13 * c);
        if params > MAX_PARAMS as u128 {
            return Err(rule(
                "d_model",
                format!(
                    "and n_layer give {params} parameters, more than the {MAX_PARAMS} (4 GB of f32 \
                     weights, 16 GB with gradients and AdamW) the backends take"
                ),
            ));
        }
        // Flattened indices are u32 on the GPU and in the dropout hash.
        let biggest =
            (self.batch as u128) * (self.n_head as u128) * (self.ctx as u128) * (self.ctx as u128);
        if biggest > u32::MAX as u128
            || (self.batch * self.ctx * 4 * self.d_model) as u128 > u32::MAX as u128
        {
            return Err(rule(
                "batch",
                "× ctx × width is too large: tensor indices must fit in 32 bits".into(),
            ));
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_head
    }

    /// Exact parameter count: `256C + ctx·C + 2C + L(12C² + 13C)` (head tied).
    pub fn param_count(&self) -> usize {
        let c = self.d_model;
        VOCAB * c + self.ctx * c + 2 * c + self.n_layer * (12 * c * c + 13 * c)
    }

    /// Tokens processed by one training step.
    pub fn tokens_per_step(&self) -> usize {
        self.batch * self.ctx
    }
}

/// `1234567` as `1,234,567` (parameter counts, token rates).
pub fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preset's `precision: Mixed` is read; an f32 config is written as
    /// before (no `precision` field), a mixed one names it and reads back.
    #[test]
    fn a_preset_says_its_precision_and_f32_files_are_unchanged() {
        let text = include_str!("../../presets/small.ron").replacen("\n(", "\n(\n    precision: Mixed,", 1);
        let mixed = Config::from_ron(&text, "mixed.ron").unwrap();
        assert_eq!(mixed.precision, Precision::Mixed);
        let f32_config = Config::load("small").unwrap();
        assert_eq!(f32_config.precision, Precision::F32);
        assert!(!ron::to_string(&f32_config).unwrap().contains("precision"));
        let written = ron::to_string(&mixed).unwrap();
        assert!(written.contains("precision:Mixed"), "{written}");
        assert_eq!(Config::from_ron(&written, "again").unwrap(), mixed);
        for p in Precision::ALL {
            assert_eq!(Precision::from_key(p.key()), Some(p));
        }
    }

    #[test]
    fn every_builtin_preset_parses() {
        for (id, _) in BUILTIN_PRESETS.iter().chain(TASK_PRESETS) {
            Config::load(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        }
    }
}
