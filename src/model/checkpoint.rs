//! Checkpoints: safetensors files that nanoGPT/PyTorch can load.
//!
//! Parameters use nanoGPT's names and PyTorch's `[out, in]` layout
//! (`transformer.h.0.attn.c_attn.weight` is `[3C, C]`); the LM head is tied to
//! `transformer.wte.weight` and not stored twice. The header metadata carries
//! the config (RON), step, seed, tokenizer, batch-sampler state and loss
//! history. AdamW's moments are optional (`adam.m.<name>`, `adam.v.<name>`),
//! and so is the run's time-lapse ([`super::timelapse`]): its frames as JSON
//! in the metadata (`timelapse`), their attention maps as one f16 tensor
//! (`timelapse.attention`, frames × layers × heads × n × n), and the
//! weights the frames keep as one tensor (`timelapse.weights`, frames ×
//! trained values, in the file's precision: f32, or in an export f16 and
//! at most [`super::timelapse::EXPORT_WEIGHT_BUDGET`] bytes of them).
//!
//! Saving writes a temporary file beside the target and renames it over the
//! target, so an interrupted save never destroys the previous checkpoint.
//! Loading refuses anything truncated, corrupt, of the wrong dtype or shape,
//! inconsistent with its config, or holding NaN/inf, and says which.

use super::config::Config;
use super::params::{LORA_A, LORA_B, NamedTensor};
use super::timelapse::TimeLapse;
use crate::data::tokenizer;
use crate::program::Program;
use safetensors::tensor::{Dtype, Metadata, SafeTensors, TensorInfo};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

pub const FORMAT: &str = "tinygpt/1";

/// One point of the loss curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossPoint {
    pub step: u64,
    pub loss: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f32>,
}

/// AdamW's moments for every parameter, in program order.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerState {
    pub m: Vec<NamedTensor>,
    pub v: Vec<NamedTensor>,
}

/// Everything a checkpoint holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub config: Config,
    /// Optimizer steps taken.
    pub step: u64,
    pub seed: u64,
    /// State of the training batch sampler, so a resumed run continues the
    /// same batch sequence.
    pub sampler_state: Option<u64>,
    pub loss_history: Vec<LossPoint>,
    /// Parameters in program order.
    pub params: Vec<NamedTensor>,
    pub optimizer: Option<OptimizerState>,
    /// What the run looked like as it trained, if it was recorded.
    pub timelapse: Option<TimeLapse>,
}

/// The time-lapse's tensor of attention maps in a file.
pub const TIMELAPSE_MAPS: &str = "timelapse.attention";

/// The time-lapse's tensor of the weights its frames keep.
pub const TIMELAPSE_WEIGHTS: &str = "timelapse.weights";

/// The time-lapse in the metadata: its frames (without their maps and
/// weights) and the steps of the frames whose maps, and whose weights, the
/// tensors hold, in order.
#[derive(Serialize, Deserialize)]
struct StoredTimeLapse {
    #[serde(flatten)]
    timelapse: TimeLapse,
    map_steps: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    weight_steps: Vec<u64>,
}

/// Storage precision of the parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// Weights only, half precision (an export for sharing; not for resuming).
    F16,
    /// Weights only, the matrices in 4 bits ([`super::int4`]: blocks of 64,
    /// an f16 scale each, stored as `NAME.q4` and `NAME.q4_scale`), the
    /// vectors in f16; dequantised once when loaded.
    Int4,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Int4 => "int4",
        }
    }

    /// How a checkpoint file's weights are stored (None: not safetensors).
    pub fn of_file(bytes: &[u8]) -> Option<Self> {
        let st = SafeTensors::deserialize(bytes).ok()?;
        let names = st.names();
        Some(if names.iter().any(|n| n.ends_with(Q4_NIBBLES)) {
            Precision::Int4
        } else if st
            .tensors()
            .iter()
            .any(|(name, t)| t.dtype() == Dtype::F16 && name != TIMELAPSE_MAPS)
        {
            Precision::F16
        } else {
            Precision::F32
        })
    }
}

/// The suffixes of a 4-bit tensor's two parts in the file.
pub const Q4_NIBBLES: &str = ".q4";
pub const Q4_SCALES: &str = ".q4_scale";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read checkpoint {path}: {message}")]
    Io { path: String, message: String },
    #[error("cannot write checkpoint {path}: {message}")]
    Write { path: String, message: String },
    #[error("{path} is not a valid safetensors file (truncated or corrupt?): {message}")]
    Corrupt { path: String, message: String },
    /// A file that opens like the original TinyGPT's (`TGPT`) but is not one.
    #[error("{path} is not a valid .tinygpt file (truncated or corrupt?): {message}")]
    CorruptTinygpt { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Checkpoint {
    /// Writes the checkpoint atomically: a temporary file beside the target,
    /// flushed to disk, renamed over the target, and the folder flushed. A
    /// save killed at any point leaves the old file or the new one, never a
    /// torn one (`tests/save_kill.rs` kills it at every [`SaveStage`]).
    /// Temporary files that killed saves left beside the target are removed
    /// ([`crate::output::remove_stale_temp_files`]: only files it can tell
    /// a save of ours left, never an input).
    ///
    /// For those tests, two environment variables act at the N-th stage
    /// (counting from 0): `TINYGPT_TEST_SAVE_PAUSE=N` prints
    /// `tinygpt: save paused at stage N (...)` to stderr and waits forever
    /// (for a SIGKILL), `TINYGPT_TEST_SAVE_FAIL=N` fails the save there as a
    /// full disk would.
    pub fn save(&self, path: &Path, precision: Precision) -> Result<(), CheckpointError> {
        let number = |name| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
        };
        let (pause, fail) = (
            number("TINYGPT_TEST_SAVE_PAUSE"),
            number("TINYGPT_TEST_SAVE_FAIL"),
        );
        let mut index = 0;
        self.save_observed(path, precision, &mut |stage| {
            let this = index;
            index += 1;
            if pause == Some(this) {
                eprintln!("tinygpt: save paused at stage {this} ({stage:?})");
                loop {
                    std::thread::park();
                }
            }
            if fail == Some(this) {
                return Err(std::io::Error::other(format!(
                    "no space left on device (injected by TINYGPT_TEST_SAVE_FAIL at {stage:?})"
                )));
            }
            Ok(())
        })
    }

    /// [`Checkpoint::save`], calling `observe` after each stage; an error
    /// from it fails the save there (the tests' way to inject a fault).
    pub fn save_observed(
        &self,
        path: &Path,
        precision: Precision,
        observe: &mut dyn FnMut(SaveStage) -> std::io::Result<()>,
    ) -> Result<(), CheckpointError> {
        let werr = |message: String| CheckpointError::Write {
            path: path.display().to_string(),
            message,
        };
        let file = self.file(precision, &path.display().to_string())?;
        crate::output::remove_stale_temp_files(path);
        let result = (|| {
            // Created exclusively under an unpredictable name (never through
            // a symlink or into a pipe planted beside the target); removed
            // when dropped, on any error below.
            let mut tmp = crate::output::temp_file(path)?;
            observe(SaveStage::Created)?;
            file.write_to(tmp.as_file_mut(), observe)?;
            tmp.as_file().sync_all()?;
            readable_by_all(tmp.as_file())?;
            observe(SaveStage::Synced)?;
            // Whatever appeared at the target since the command started: a
            // rename would replace a device or a pipe with this file.
            crate::output::refuse_special(path)?;
            tmp.persist(path).map_err(|e| e.error)?;
            // The rename itself reaches the disk with its folder.
            #[cfg(unix)]
            if let Some(dir) = path.parent() {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                std::fs::File::open(dir)?.sync_all()?;
            }
            observe(SaveStage::Renamed)
        })();
        // Nothing to clean: a temporary file not renamed went when dropped.
        result.map_err(|e| {
            werr(format!(
                "{e} (choose a path in a folder you can write to, with room for the file)"
            ))
        })?;
        Ok(())
    }

    /// The checkpoint as a safetensors file's bytes (what [`Checkpoint::save`]
    /// writes; the browser build offers them as a download). `name` is the
    /// file the bytes are for, for errors.
    pub fn to_bytes(&self, precision: Precision, name: &str) -> Result<Vec<u8>, CheckpointError> {
        let file = self.file(precision, name)?;
        let mut bytes = Vec::with_capacity(file.len() as usize);
        file.write_to(&mut bytes, &mut |_| Ok(()))
            .map_err(|e| CheckpointError::Write {
                path: name.to_string(),
                message: e.to_string(),
            })?;
        Ok(bytes)
    }

    /// Checks the tensors and lays out the safetensors file: its header
    /// (safetensors' own metadata type) and the tensors' bytes, borrowed
    /// where they are already little-endian f32.
    fn file(
        &self,
        precision: Precision,
        name: &str,
    ) -> Result<SafetensorsFile<'_>, CheckpointError> {
        let werr = |message: String| CheckpointError::Write {
            path: name.to_string(),
            message,
        };
        for t in self.all_tensors() {
            if let Some(i) = t.values.iter().position(|x| !x.is_finite()) {
                return Err(werr(format!(
                    "tensor `{}` holds a non-finite value at index {i}; refusing to save a diverged model",
                    t.name
                )));
            }
        }
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert(
            "config".to_string(),
            ron::to_string(&self.config).map_err(|e| werr(e.to_string()))?,
        );
        meta.insert("step".to_string(), self.step.to_string());
        meta.insert("seed".to_string(), self.seed.to_string());
        meta.insert("tokenizer".to_string(), tokenizer::NAME.to_string());
        if let Some(s) = self.sampler_state {
            meta.insert("sampler_state".to_string(), s.to_string());
        }
        meta.insert(
            "loss_history".to_string(),
            serde_json::to_string(&self.loss_history).map_err(|e| werr(e.to_string()))?,
        );

        if precision == Precision::Int4 && self.config.lora.is_some() {
            return Err(werr(
                "a LoRA adapter is not quantised (it is small already): export it in f32 or f16, or `tinygpt merge` it into its base and export that".into(),
            ));
        }
        if precision == Precision::Int4 {
            meta.insert(
                "quantization".to_string(),
                format!(
                    "int4: matrices in blocks of {} along the flattened tensor, one f16 scale each (NAME{Q4_NIBBLES}: two values per byte, low nibble first, value (nibble - 8) * scale; NAME{Q4_SCALES}); vectors f16",
                    super::int4::BLOCK
                ),
            );
        }
        let f16_bytes = |values: &[f32]| -> Cow<'_, [u8]> {
            Cow::Owned(
                values
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect(),
            )
        };
        // Each stored tensor: name, dtype, shape, bytes.
        let mut tensors: Vec<(String, Dtype, Vec<usize>, Cow<'_, [u8]>)> = Vec::new();
        match precision {
            Precision::F32 => {
                // The parameters under their stored names, then the moments.
                let params = self
                    .params
                    .iter()
                    .map(|t| (stored_name(&self.config, &t.name), t));
                let moments = self
                    .optimizer
                    .iter()
                    .flat_map(|o| o.m.iter().chain(&o.v))
                    .map(|t| (t.name.clone(), t));
                for (name, t) in params.chain(moments) {
                    let bytes = if cfg!(target_endian = "little") {
                        Cow::Borrowed(bytemuck::cast_slice(&t.values))
                    } else {
                        Cow::Owned(t.values.iter().flat_map(|x| x.to_le_bytes()).collect())
                    };
                    tensors.push((name, Dtype::F32, t.shape.clone(), bytes));
                }
            }
            Precision::F16 => {
                for t in &self.params {
                    tensors.push((
                        stored_name(&self.config, &t.name),
                        Dtype::F16,
                        t.shape.clone(),
                        f16_bytes(&t.values),
                    ));
                }
            }
            Precision::Int4 => {
                for t in &self.params {
                    if t.shape.len() < 2 {
                        tensors.push((
                            t.name.clone(),
                            Dtype::F16,
                            t.shape.clone(),
                            f16_bytes(&t.values),
                        ));
                        continue;
                    }
                    let q = super::int4::quantise(&t.values);
                    let blocks = q.scales.len();
                    tensors.push((
                        format!("{}{Q4_NIBBLES}", t.name),
                        Dtype::U8,
                        vec![blocks, super::int4::BLOCK / 2],
                        Cow::Owned(q.nibbles),
                    ));
                    tensors.push((
                        format!("{}{Q4_SCALES}", t.name),
                        Dtype::F16,
                        vec![blocks],
                        Cow::Owned(q.scales.iter().flat_map(|d| d.to_le_bytes()).collect()),
                    ));
                }
            }
        }
        // An export for sharing keeps fewer frames' weights.
        let exported;
        let timelapse = match (&self.timelapse, precision) {
            (Some(t), Precision::F16 | Precision::Int4) => {
                let mut t = t.clone();
                t.thin_weights(super::timelapse::EXPORT_WEIGHT_BUDGET, 2);
                exported = t;
                Some(&exported)
            }
            (t, _) => t.as_ref(),
        };
        if let Some(t) = timelapse {
            let with: Vec<&super::timelapse::Frame> =
                t.frames.iter().filter(|f| f.attention.is_some()).collect();
            let kept: Vec<&super::timelapse::Frame> =
                t.frames.iter().filter(|f| f.weights.is_some()).collect();
            let stored = StoredTimeLapse {
                timelapse: t.clone(),
                map_steps: with.iter().map(|f| f.step).collect(),
                weight_steps: kept.iter().map(|f| f.step).collect(),
            };
            meta.insert(
                "timelapse".to_string(),
                serde_json::to_string(&stored).map_err(|e| werr(e.to_string()))?,
            );
            if !with.is_empty() {
                let n = 2 * t.letters();
                let bytes: Vec<u8> = with
                    .iter()
                    .flat_map(|f| f.attention.iter().flatten())
                    .flat_map(|b| b.to_le_bytes())
                    .collect();
                tensors.push((
                    TIMELAPSE_MAPS.to_string(),
                    Dtype::F16,
                    vec![with.len(), t.n_layer, t.n_head, n, n],
                    Cow::Owned(bytes),
                ));
            }
            if let Some(first) = kept.first().and_then(|f| f.weights.as_ref()) {
                let len = first.len();
                if kept.iter().any(|f| f.weights.as_ref().is_some_and(|w| w.len() != len)) {
                    return Err(werr("the time-lapse's frames keep weights of different sizes".into()));
                }
                let values: Vec<f32> = kept
                    .iter()
                    .flat_map(|f| f.weights.iter().flat_map(|w| w.iter().copied()))
                    .collect();
                let (dtype, bytes) = match precision {
                    Precision::F32 => (
                        Dtype::F32,
                        Cow::Owned(values.iter().flat_map(|x| x.to_le_bytes()).collect()),
                    ),
                    _ => (Dtype::F16, Cow::Owned(f16_bytes(&values).into_owned())),
                };
                tensors.push((TIMELAPSE_WEIGHTS.to_string(), dtype, vec![kept.len(), len], bytes));
            }
        }
        // safetensors' order: by name.
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let mut offset = 0;
        let infos = tensors
            .iter()
            .map(|(name, dtype, shape, bytes)| {
                let info = TensorInfo {
                    dtype: *dtype,
                    shape: shape.clone(),
                    data_offsets: (offset, offset + bytes.len()),
                };
                offset += bytes.len();
                (name.clone(), info)
            })
            .collect();
        let metadata = Metadata::new(Some(meta), infos).map_err(|e| werr(e.to_string()))?;
        let mut header = serde_json::to_vec(&metadata).map_err(|e| werr(e.to_string()))?;
        header.resize(header.len().next_multiple_of(8), b' ');
        Ok(SafetensorsFile {
            header,
            data: tensors.into_iter().map(|(.., b)| b).collect(),
        })
    }

    fn all_tensors(&self) -> impl Iterator<Item = &NamedTensor> {
        let opt = self
            .optimizer
            .iter()
            .flat_map(|o| o.m.iter().chain(o.v.iter()));
        self.params.iter().chain(opt)
    }

    /// Reads a checkpoint file, or the gallery's entry for `gallery:ID`
    /// ([`super::gallery`]).
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        if let Some(entry) = path.to_str().and_then(super::gallery::named) {
            return entry
                .map_err(|message| CheckpointError::Io {
                    path: path.display().to_string(),
                    message,
                })?
                .checkpoint();
        }
        // A device or a pipe is refused before it is read (`--checkpoint /dev/zero`).
        let bytes =
            crate::data::read_file(path, 64 << 30).map_err(|message| CheckpointError::Io {
                path: path.display().to_string(),
                message,
            })?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Parses and validates a model's checkpoint bytes; `name` is used in
    /// messages. A LoRA adapter is refused here (it holds no base): see
    /// [`Checkpoint::adapter_from_bytes`].
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self, CheckpointError> {
        let checkpoint = Self::parse(bytes, name)?;
        if checkpoint.config.lora.is_some() {
            return Err(CheckpointError::Invalid {
                path: name.to_string(),
                message: "this is a LoRA adapter, not a whole model: load the model it was fine-tuned from, and this file as its adapter (`--adapter`), or `tinygpt merge` the two".into(),
            });
        }
        Ok(checkpoint)
    }

    /// Reads a LoRA adapter ([`super::lora`]): a checkpoint of a fine-tune,
    /// holding its A and B matrices but not its base.
    pub fn load_adapter(path: &Path) -> Result<Self, CheckpointError> {
        let bytes =
            crate::data::read_file(path, 4 << 30).map_err(|message| CheckpointError::Io {
                path: path.display().to_string(),
                message,
            })?;
        Self::adapter_from_bytes(&bytes, &path.display().to_string())
    }

    /// [`Checkpoint::load_adapter`] of bytes; `name` is used in messages.
    pub fn adapter_from_bytes(bytes: &[u8], name: &str) -> Result<Self, CheckpointError> {
        let checkpoint = Self::parse(bytes, name)?;
        if checkpoint.config.lora.is_none() {
            return Err(CheckpointError::Invalid {
                path: name.to_string(),
                message: "this is a whole model, not a LoRA adapter: give it with --checkpoint (or --base), and an adapter written by `tinygpt finetune` with --adapter".into(),
            });
        }
        Ok(checkpoint)
    }

    /// Parses and validates checkpoint bytes of either kind.
    fn parse(bytes: &[u8], name: &str) -> Result<Self, CheckpointError> {
        // The original TinyGPT's own files load wherever ours do.
        if super::original::is_tinygpt(bytes) {
            return super::original::import(bytes, name);
        }
        let invalid = |message: String| CheckpointError::Invalid {
            path: name.to_string(),
            message,
        };
        let st = SafeTensors::deserialize(bytes).map_err(|e| CheckpointError::Corrupt {
            path: name.to_string(),
            message: e.to_string(),
        })?;
        let (_, header) =
            SafeTensors::read_metadata(bytes).map_err(|e| CheckpointError::Corrupt {
                path: name.to_string(),
                message: e.to_string(),
            })?;
        let meta = header.metadata().clone().unwrap_or_default();
        let field = |key: &str| {
            meta.get(key).ok_or_else(|| {
                invalid(format!("header metadata has no `{key}`: this is not a tinygpt checkpoint (write one with `tinygpt train --out FILE`)"))
            })
        };
        let format = field("format")?;
        if format != FORMAT {
            return Err(invalid(format!(
                "format `{format}` is not `{FORMAT}`, the one this tinygpt reads"
            )));
        }
        let tok = field("tokenizer")?;
        if tok != tokenizer::NAME {
            return Err(invalid(format!(
                "tokenizer `{tok}` is not `{}`",
                tokenizer::NAME
            )));
        }
        let config = Config::from_ron(field("config")?, &format!("{name} (config in metadata)"))
            .map_err(|e| invalid(e.to_string()))?;
        let parse_u64 = |key: &str, v: &String| {
            v.parse::<u64>()
                .map_err(|_| invalid(format!("metadata `{key}` = `{v}` is not a number")))
        };
        let step = parse_u64("step", field("step")?)?;
        let seed = parse_u64("seed", field("seed")?)?;
        let sampler_state = meta
            .get("sampler_state")
            .map(|v| parse_u64("sampler_state", v))
            .transpose()?;
        let loss_history: Vec<LossPoint> = match meta.get("loss_history") {
            Some(s) => serde_json::from_str(s)
                .map_err(|e| invalid(format!("metadata `loss_history` is not valid: {e}")))?,
            None => vec![],
        };

        let program = Program::new(&config);
        let read = |tname: &str, shape: &[usize]| -> Result<NamedTensor, CheckpointError> {
            let view = match st.tensor(tname) {
                Ok(view) => view,
                // A 4-bit export's matrix: its nibbles and scales.
                Err(_) => match read_int4(&st, tname, shape) {
                    Some(values) => {
                        let values = values.map_err(invalid)?;
                        return Ok(NamedTensor {
                            name: tname.to_string(),
                            shape: shape.to_vec(),
                            values,
                        });
                    }
                    None => return Err(invalid(format!("tensor `{tname}` is missing"))),
                },
            };
            if view.shape() != shape {
                return Err(invalid(format!(
                    "tensor `{tname}` has shape {:?}, but its config needs {:?}",
                    view.shape(),
                    shape
                )));
            }
            let Some(values) = floats(&view) else {
                return Err(invalid(format!(
                    "tensor `{tname}` has dtype {:?}; tinygpt reads F32 or F16",
                    view.dtype()
                )));
            };
            if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                return Err(invalid(format!(
                    "tensor `{tname}` holds a non-finite value (NaN or inf) at index {i}"
                )));
            }
            Ok(NamedTensor {
                name: tname.to_string(),
                shape: shape.to_vec(),
                values,
            })
        };
        // A LoRA fine-tune's checkpoint (an adapter) holds what it trains,
        // its A and B under PEFT's names; its base is a checkpoint of its own.
        let mut params = Vec::new();
        for id in program.trained() {
            let t = &program.tensors[id];
            let mut tensor = read(&stored_name(&config, &t.name), &t.shape)?;
            tensor.name = t.name.clone();
            params.push(tensor);
        }
        let has_opt = st.names().iter().any(|n| n.starts_with("adam."));
        let optimizer = if has_opt {
            let mut m = Vec::new();
            let mut v = Vec::new();
            for p in &params {
                m.push(read(&format!("adam.m.{}", p.name), &p.shape)?);
                v.push(read(&format!("adam.v.{}", p.name), &p.shape)?);
            }
            let state = OptimizerState { m, v };
            check_moments(&state, step).map_err(invalid)?;
            Some(state)
        } else {
            None
        };
        // Every stored name is one of these (a 4-bit matrix is two).
        let mut expected: Vec<String> = Vec::new();
        for p in &params {
            let stored = stored_name(&config, &p.name);
            if st.tensor(&stored).is_ok() {
                expected.push(stored);
            } else {
                expected.push(format!("{}{Q4_NIBBLES}", p.name));
                expected.push(format!("{}{Q4_SCALES}", p.name));
            }
        }
        if has_opt {
            expected.extend(
                params
                    .iter()
                    .flat_map(|p| [format!("adam.m.{}", p.name), format!("adam.v.{}", p.name)]),
            );
        }
        let timelapse = match meta.get("timelapse") {
            Some(json) => Some(read_timelapse(&st, json, &config, &program).map_err(invalid)?),
            None => None,
        };
        if timelapse.is_some() {
            expected.push(TIMELAPSE_MAPS.to_string());
            expected.push(TIMELAPSE_WEIGHTS.to_string());
        }
        if let Some(extra) = st
            .names()
            .into_iter()
            .find(|n| !expected.iter().any(|e| e == *n))
        {
            return Err(invalid(format!(
                "unexpected tensor `{extra}`, which this config does not have"
            )));
        }
        Ok(Checkpoint {
            config,
            step,
            seed,
            sampler_state,
            loss_history,
            params,
            optimizer,
            timelapse,
        })
    }
}

/// A tensor's values as f32, from F32 or F16 (None for another dtype).
fn floats(view: &safetensors::tensor::TensorView<'_>) -> Option<Vec<f32>> {
    match view.dtype() {
        Dtype::F32 => Some(
            view.data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
        Dtype::F16 => Some(
            view.data()
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        ),
        _ => None,
    }
}

/// The time-lapse a file's metadata (`json`), maps and weights tensors
/// hold, checked against its model.
fn read_timelapse(
    st: &SafeTensors,
    json: &str,
    config: &Config,
    program: &Program,
) -> Result<TimeLapse, String> {
    let stored: StoredTimeLapse = serde_json::from_str(json)
        .map_err(|e| format!("metadata `timelapse` is not valid: {e}"))?;
    let mut t = stored.timelapse;
    t.check(config.n_layer, config.n_head, config.ctx)?;
    let n = 2 * t.letters();
    let shape = vec![stored.map_steps.len(), t.n_layer, t.n_head, n, n];
    match st.tensor(TIMELAPSE_MAPS) {
        Err(_) if stored.map_steps.is_empty() => {}
        Err(_) => return Err(format!("tensor `{TIMELAPSE_MAPS}` is missing")),
        Ok(view) => {
            if view.dtype() != Dtype::F16 || view.shape() != shape {
                return Err(format!(
                    "tensor `{TIMELAPSE_MAPS}` is {:?} {:?}, but its time-lapse needs F16 {shape:?}",
                    view.dtype(),
                    view.shape()
                ));
            }
            let bits: Vec<u16> = view
                .data()
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            if bits
                .iter()
                .any(|&b| !half::f16::from_bits(b).is_finite())
            {
                return Err(format!("tensor `{TIMELAPSE_MAPS}` holds a value that is not finite"));
            }
            let per = t.map_len();
            for (k, step) in stored.map_steps.iter().enumerate() {
                let frame = t
                    .frames
                    .iter_mut()
                    .find(|f| f.step == *step)
                    .ok_or(format!(
                        "metadata `timelapse` keeps maps of step {step}, which has no frame"
                    ))?;
                frame.attention = Some(bits[k * per..(k + 1) * per].to_vec());
            }
        }
    }
    let per = super::timelapse::trained_values(program);
    let shape = vec![stored.weight_steps.len(), per];
    match st.tensor(TIMELAPSE_WEIGHTS) {
        Err(_) if stored.weight_steps.is_empty() => {}
        Err(_) => return Err(format!("tensor `{TIMELAPSE_WEIGHTS}` is missing")),
        Ok(view) => {
            let values = floats(&view).unwrap_or_default();
            if view.shape() != shape || values.len() != shape.iter().product::<usize>() {
                return Err(format!(
                    "tensor `{TIMELAPSE_WEIGHTS}` is {:?} {:?}, but its time-lapse needs F32 or F16 {shape:?}",
                    view.dtype(),
                    view.shape()
                ));
            }
            if values.iter().any(|x| !x.is_finite()) {
                return Err(format!("tensor `{TIMELAPSE_WEIGHTS}` holds a value that is not finite"));
            }
            for (k, step) in stored.weight_steps.iter().enumerate() {
                let frame = t
                    .frames
                    .iter_mut()
                    .find(|f| f.step == *step)
                    .ok_or(format!(
                        "metadata `timelapse` keeps weights of step {step}, which has no frame"
                    ))?;
                frame.weights = Some(std::sync::Arc::new(values[k * per..(k + 1) * per].to_vec()));
            }
        }
    }
    Ok(t)
}

/// PEFT's prefix of an adapter's tensors (`base_model.model.NAME.lora_A.weight`).
pub const PEFT_PREFIX: &str = "base_model.model.";

/// A parameter's name in the file: its own, or PEFT's for a LoRA adapter's
/// matrices (so the tools people know read our adapters).
fn stored_name(config: &Config, name: &str) -> String {
    if config.lora.is_some() && (name.ends_with(LORA_A) || name.ends_with(LORA_B)) {
        format!("{PEFT_PREFIX}{name}")
    } else {
        name.to_string()
    }
}

/// What makes training from AdamW's moments impossible, named by tensor:
/// a negative second moment (an average of squares; its square root is NaN,
/// so the first step diverges), or moments at step 0 (AdamW's bias
/// correction starts from zero moments, so they disagree with the step).
pub(super) fn check_moments(state: &OptimizerState, step: u64) -> Result<(), String> {
    for v in &state.v {
        if let Some(i) = v.values.iter().position(|&x| x < 0.0) {
            return Err(format!(
                "tensor `{}` holds a negative value ({}) at index {i}, but AdamW's second moments are \
                 averages of squares and never negative (the first step would be NaN); resume from \
                 another checkpoint, or `tinygpt export` its weights and train from them",
                v.name, v.values[i]
            ));
        }
    }
    if step == 0
        && let Some(t) = state
            .m
            .iter()
            .chain(&state.v)
            .find(|t| t.values.iter().any(|&x| x != 0.0))
    {
        return Err(format!(
            "metadata `step` is 0, but tensor `{}` holds AdamW moments that are not zero: the step \
             count disagrees with the moments (a run that took no step has none); fix `step`, or \
             `tinygpt export` the weights and train from them",
            t.name
        ));
    }
    Ok(())
}

/// A checkpoint is an ordinary file (0644), like any other the user saves,
/// whatever mode its temporary file was made with (set through the open
/// file, never through a name).
fn readable_by_all(file: &std::fs::File) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Where a save has got to (see [`Checkpoint::save_observed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveStage {
    /// The temporary file exists beside the target, empty.
    Created,
    /// `written` of the file's `total` bytes are in the temporary file
    /// (after each 1 MiB and at the end).
    Writing { written: u64, total: u64 },
    /// The temporary file is complete and on disk; the target is untouched.
    Synced,
    /// The temporary file has replaced the target.
    Renamed,
}

/// A safetensors file laid out for writing: `u64` header length, the JSON
/// header (padded to 8 bytes), then each tensor's bytes in header order.
struct SafetensorsFile<'a> {
    header: Vec<u8>,
    data: Vec<Cow<'a, [u8]>>,
}

impl SafetensorsFile<'_> {
    const CHUNK: usize = 1 << 20;

    fn len(&self) -> u64 {
        8 + self.header.len() as u64 + self.data.iter().map(|d| d.len() as u64).sum::<u64>()
    }

    fn write_to(
        &self,
        out: &mut impl std::io::Write,
        observe: &mut dyn FnMut(SaveStage) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        use std::io::Write;
        let total = self.len();
        let mut out = std::io::BufWriter::with_capacity(Self::CHUNK, out);
        out.write_all(&(self.header.len() as u64).to_le_bytes())?;
        out.write_all(&self.header)?;
        let mut written = 8 + self.header.len() as u64;
        let mut reported = 0;
        for chunk in self.data.iter().flat_map(|d| d.chunks(Self::CHUNK)) {
            out.write_all(chunk)?;
            written += chunk.len() as u64;
            if written - reported >= Self::CHUNK as u64 {
                out.flush()?;
                observe(SaveStage::Writing { written, total })?;
                reported = written;
            }
        }
        out.flush()?;
        if reported != written {
            observe(SaveStage::Writing { written, total })?;
        }
        Ok(())
    }
}

/// The 4-bit tensor `name` of `shape` ([`Precision::Int4`]), dequantised:
/// None when the file has no such parts, Err when they do not fit the shape
/// or hold a non-finite scale.
fn read_int4(
    st: &SafeTensors<'_>,
    name: &str,
    shape: &[usize],
) -> Option<Result<Vec<f32>, String>> {
    let nibbles = st.tensor(&format!("{name}{Q4_NIBBLES}")).ok()?;
    let Ok(scales) = st.tensor(&format!("{name}{Q4_SCALES}")) else {
        return Some(Err(format!(
            "tensor `{name}{Q4_SCALES}` is missing (the scales of `{name}{Q4_NIBBLES}`)"
        )));
    };
    if nibbles.dtype() != Dtype::U8 || scales.dtype() != Dtype::F16 {
        return Some(Err(format!(
            "`{name}`'s 4-bit parts have dtypes {:?} and {:?}; tinygpt reads U8 nibbles and F16 scales",
            nibbles.dtype(),
            scales.dtype()
        )));
    }
    let q = super::int4::Quantised {
        nibbles: nibbles.data().to_vec(),
        scales: scales
            .data()
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]))
            .collect(),
    };
    if let Some(i) = q.scales.iter().position(|d| !d.to_f32().is_finite()) {
        return Some(Err(format!(
            "`{name}{Q4_SCALES}` holds a non-finite scale at block {i}"
        )));
    }
    let numel: usize = shape.iter().product();
    Some(super::int4::dequantise(&q, numel).ok_or(format!(
        "`{name}`'s 4-bit parts hold {} bytes and {} scales; its shape {shape:?} needs {} and {}",
        q.nibbles.len(),
        q.scales.len(),
        super::int4::blocks(numel) * super::int4::BLOCK / 2,
        super::int4::blocks(numel)
    )))
}
