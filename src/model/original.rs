//! The original TinyGPT's `.tinygpt` files (github.com/sarthak-fleet/tinygpt),
//! read into a [`Checkpoint`].
//!
//! Its browser app writes them (`encodeModelFile` in browser/src/main.ts):
//!
//! ```text
//! 4 bytes  "TGPT"
//! 4 bytes  u32 LE version (1 or 2)
//! 4 bytes  u32 LE length N of the header
//! N bytes  UTF-8 JSON header: { config: RunConfig, manifest?, weightDtype?,
//!          includesOptimizerState, lossHistory?, int4BlockSize?, ... }
//! M bytes  the state of its WASM module (tg_export_state in wasm/src/model.cpp):
//!          i32 LE step, then per parameter in its order w, m, v (f32 LE);
//!          or, weights only, f16 weights (its convert_to_fp16.ts), or int4
//!          (its finalize_gallery_int4.ts: every tensor's f16 block scales,
//!          then every tensor's nibbles, value = (nibble − 8)·scale).
//! ```
//!
//! Its model is ours: byte vocabulary, learned positions, pre-LayerNorm
//! blocks (ε 1e-5), exact GELU, an MLP, a head tied to the token embedding,
//! AdamW with β (0.9, 0.95), ε 1e-8 and decay 0.1 on the matrices and
//! embeddings. Its matrices are `[in, out]` with separate q, k and v; ours are
//! PyTorch's `[out, in]` with q, k, v stacked in `c_attn` (heads in the same
//! order), so a file is transposed and stacked on the way in, its AdamW
//! moments with it. What does not fit (another vocabulary, an MLP that is not
//! 4·d_model, another list of tensors) is refused by name.
//!
//! Every size computed from a file's header is checked arithmetic: a header
//! whose numbers overflow (a huge `int4BlockSize`, sizes whose product does
//! not fit) is refused with what it says, never a panic (`tests/fuzz.rs`
//! fuzzes this reader).

use super::checkpoint::{Checkpoint, CheckpointError, LossPoint, OptimizerState};
use super::config::{Config, VOCAB};
use super::params::NamedTensor;
use crate::program::Program;
use half::f16;
use serde_json::Value;
use std::collections::HashMap;

/// The first four bytes of a `.tinygpt` file.
pub const MAGIC: &[u8; 4] = b"TGPT";

/// Whether `bytes` open like a `.tinygpt` file.
pub fn is_tinygpt(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// The original's architecture, from a file's `config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub ctx: usize,
    pub layers: usize,
    pub heads: usize,
    pub d_model: usize,
    pub d_mlp: usize,
}

impl Shape {
    /// Its tensors in the order its WASM module stores them
    /// (`collect_params`, `buildManifest`): name and `[rows, cols]` as stored.
    pub fn manifest(&self) -> Vec<(String, Vec<usize>)> {
        let (c, m) = (self.d_model, self.d_mlp);
        let mut out = vec![
            ("token_embedding.weight".to_string(), vec![VOCAB, c]),
            ("position_embedding.weight".to_string(), vec![self.ctx, c]),
            ("ln_final.weight".to_string(), vec![c]),
            ("ln_final.bias".to_string(), vec![c]),
        ];
        for i in 0..self.layers {
            let b = format!("blocks.{i}");
            for (name, shape) in [
                ("ln1.weight", vec![c]),
                ("ln1.bias", vec![c]),
                ("attn.q_proj.weight", vec![c, c]),
                ("attn.q_proj.bias", vec![c]),
                ("attn.k_proj.weight", vec![c, c]),
                ("attn.k_proj.bias", vec![c]),
                ("attn.v_proj.weight", vec![c, c]),
                ("attn.v_proj.bias", vec![c]),
                ("attn.o_proj.weight", vec![c, c]),
                ("attn.o_proj.bias", vec![c]),
                ("ln2.weight", vec![c]),
                ("ln2.bias", vec![c]),
                ("mlp.fc_in.weight", vec![c, m]),
                ("mlp.fc_in.bias", vec![m]),
                ("mlp.fc_out.weight", vec![m, c]),
                ("mlp.fc_out.bias", vec![c]),
            ] {
                out.push((format!("{b}.{name}"), shape));
            }
        }
        out
    }

    /// Its parameter count (what [`Shape::manifest`] lists, without
    /// listing it); None when it does not fit a `usize`.
    fn floats(&self) -> Option<usize> {
        let (c, m) = (self.d_model, self.d_mlp);
        let square = c.checked_mul(c)?;
        let block = square
            .checked_add(c)?
            .checked_mul(4)?
            .checked_add(c.checked_mul(m)?.checked_mul(2)?)?
            .checked_add(c.checked_mul(5)?)?
            .checked_add(m)?;
        VOCAB
            .checked_add(self.ctx)?
            .checked_add(2)?
            .checked_mul(c)?
            .checked_add(self.layers.checked_mul(block)?)
    }
}

/// A `.tinygpt` file's bytes as the original's `encodeModelFile` lays them
/// out: `header` (its JSON) and `state` (its WASM module's bytes). For
/// tests and tools that make such files; reading one is [`import`].
pub fn encode(header: &Value, state: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("a JSON value serialises");
    let version = header.get("version").and_then(Value::as_u64).unwrap_or(2) as u32;
    let mut out = MAGIC.to_vec();
    out.extend(version.to_le_bytes());
    out.extend((json.len() as u32).to_le_bytes());
    out.extend(json);
    out.extend(state);
    out
}

/// Reads a `.tinygpt` file's bytes; `name` is used in messages.
pub fn import(bytes: &[u8], name: &str) -> Result<Checkpoint, CheckpointError> {
    let invalid = |message: String| CheckpointError::Invalid {
        path: name.to_string(),
        message,
    };
    let corrupt = |message: String| CheckpointError::CorruptTinygpt {
        path: name.to_string(),
        message,
    };
    if bytes.len() < 12 || !is_tinygpt(bytes) {
        return Err(corrupt(
            "too short to be a .tinygpt model (12 bytes of magic, version and header length)"
                .into(),
        ));
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let version = u32_at(4);
    if version != 1 && version != 2 {
        return Err(invalid(format!(
            "a .tinygpt of version {version}; this program reads versions 1 and 2, the ones the original TinyGPT writes"
        )));
    }
    let header_len = u32_at(8) as usize;
    let header_end = 12usize
        .checked_add(header_len)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| {
            corrupt(format!(
                "its header says it is {header_len} bytes long, but the file ends at {}",
                bytes.len()
            ))
        })?;
    let header: Value = serde_json::from_slice(&bytes[12..header_end])
        .map_err(|e| corrupt(format!("its header is not valid JSON: {e}")))?;
    let state = &bytes[header_end..];
    let config = header
        .get("config")
        .filter(|c| c.is_object())
        .ok_or_else(|| {
            invalid("its header has no `config`, so its model's size is unknown".into())
        })?;
    let shape = shape_of(config).map_err(&invalid)?;
    let manifest = shape.manifest();
    if let Some(listed) = header.get("manifest").and_then(Value::as_array) {
        check_manifest(listed, &manifest).map_err(&invalid)?;
    }
    let dtype = header
        .get("weightDtype")
        .and_then(Value::as_str)
        .unwrap_or("fp32");
    let with_moments = header
        .get("includesOptimizerState")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let block = match header.get("int4BlockSize").filter(|_| dtype == "int4") {
        None | Some(Value::Null) => 64,
        Some(size) => size
            .as_u64()
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "its int4 block size {size} is not a positive even number"
                ))
            })?,
    };
    // Its model within this program's limits before any of it is decoded.
    let converted = our_config(config, &shape).map_err(&invalid)?;
    let (step, tensors) =
        decode_state(state, &shape, &manifest, dtype, with_moments, block).map_err(&invalid)?;
    let seed = config_number(config, "seed").unwrap_or(0.0) as u64;
    let config = converted;
    let loss_history = header
        .get("lossHistory")
        .and_then(Value::as_array)
        .map(|points| points.iter().filter_map(loss_point).collect())
        .unwrap_or_default();
    let (params, optimizer) = ours(&config, &manifest, tensors, with_moments && dtype == "fp32");
    let moments = optimizer.iter().flat_map(|o| o.m.iter().chain(&o.v));
    if let Some(bad) = params
        .iter()
        .chain(moments)
        .find(|p| p.values.iter().any(|x| !x.is_finite()))
    {
        return Err(invalid(format!(
            "its tensor for {} holds NaN or infinity (a run that diverged): nothing to load",
            bad.name
        )));
    }
    // AdamW's moments as every checkpoint's are checked (a negative second
    // moment makes the first step NaN).
    if let Some(state) = &optimizer {
        super::checkpoint::check_moments(state, step).map_err(&invalid)?;
    }
    Ok(Checkpoint {
        config,
        step,
        seed,
        sampler_state: None,
        loss_history,
        params,
        optimizer,
        timelapse: None,
    })
}

fn config_number(config: &Value, key: &str) -> Option<f64> {
    config.get(key).and_then(Value::as_f64)
}

/// The architecture a file's `config` gives, or why it is not one of ours.
fn shape_of(config: &Value) -> Result<Shape, String> {
    let size = |key: &str| -> Result<usize, String> {
        match config.get(key).and_then(Value::as_u64) {
            Some(n) if n > 0 && n <= 1 << 20 => Ok(n as usize),
            Some(n) => Err(format!("its config's `{key}` is {n}, not a model size")),
            None => Err(format!(
                "its config has no whole-number `{key}`, so its model's size is unknown"
            )),
        }
    };
    let (ctx, layers, heads, d_model) = (
        size("ctx")?,
        size("layers")?,
        size("heads")?,
        size("dModel")?,
    );
    // buildManifest's default, as the original reads its own files.
    let d_mlp = match config.get("dMlp") {
        None | Some(Value::Null) => 4 * d_model,
        Some(_) => size("dMlp")?,
    };
    if layers > super::config::MAX_LAYERS {
        return Err(format!(
            "its config has {layers} layers; this program's models have at most {}",
            super::config::MAX_LAYERS
        ));
    }
    if d_model % heads != 0 {
        return Err(format!(
            "its config has dModel {d_model} and {heads} heads, which do not divide it"
        ));
    }
    if d_mlp != 4 * d_model {
        return Err(format!(
            "another architecture: its MLP is {d_mlp} wide (dMlp), and this program's blocks have an MLP 4·d_model = {} wide; only files with dMlp = 4·dModel load",
            4 * d_model
        ));
    }
    Ok(Shape {
        ctx,
        layers,
        heads,
        d_model,
        d_mlp,
    })
}

/// A v2 file's manifest must list the original's tensors, as this program
/// maps them, with the shapes its config gives.
fn check_manifest(manifest: &[Value], want: &[(String, Vec<usize>)]) -> Result<(), String> {
    for (i, ((name, dims), entry)) in want.iter().zip(manifest).enumerate() {
        let got_name = entry.get("name").and_then(Value::as_str).unwrap_or("?");
        let got_shape: Vec<usize> = entry
            .get("shape")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .filter_map(|d| d.as_u64().map(|d| d as usize))
                    .collect()
            })
            .unwrap_or_default();
        // buildManifest writes the matrices as [out, in] in its manifest
        // while the state holds them [in, out]: compare sizes, not order.
        let numel = |s: &[usize]| s.iter().product::<usize>();
        if got_name != name || numel(&got_shape) != numel(dims) {
            return Err(format!(
                "another architecture: its tensor {i} is {got_name} {got_shape:?}, where the original TinyGPT's is {name} {dims:?}"
            ));
        }
    }
    if manifest.len() != want.len() {
        return Err(format!(
            "another architecture: its manifest lists {} tensors, not the {} of the original TinyGPT's blocks",
            manifest.len(),
            want.len()
        ));
    }
    Ok(())
}

/// Each tensor's weights (and AdamW's m and v when stored), as stored.
struct Stored {
    w: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// `manifest`: [`Shape::manifest`] of `shape`.
fn decode_state(
    state: &[u8],
    shape: &Shape,
    manifest: &[(String, Vec<usize>)],
    dtype: &str,
    with_moments: bool,
    block: usize,
) -> Result<(u64, Vec<Stored>), String> {
    let too_big = || {
        format!(
            "its config ({} layers, dModel {}, ctx {}) makes a model too large to hold",
            shape.layers, shape.d_model, shape.ctx
        )
    };
    let floats = shape.floats().ok_or_else(too_big)?;
    let numels: Vec<usize> = manifest
        .iter()
        .map(|(_, s)| s.iter().try_fold(1usize, |n, &d| n.checked_mul(d)))
        .collect::<Option<_>>()
        .ok_or_else(too_big)?;
    let f32s = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    // int4: each tensor's blocks (a scale and `block` nibbles each).
    let mut blocks = 0usize;
    let expected = match (dtype, with_moments) {
        ("fp32", true) => floats.checked_mul(12).and_then(|n| n.checked_add(4)),
        ("fp32", false) => floats.checked_mul(4).and_then(|n| n.checked_add(4)),
        ("fp16", false) => floats.checked_mul(2).and_then(|n| n.checked_add(4)),
        ("int4", false) => {
            if block == 0 || block % 2 != 0 {
                return Err(format!(
                    "its int4 block size {block} is not a positive even number"
                ));
            }
            blocks = numels
                .iter()
                .try_fold(0usize, |sum, n| sum.checked_add(n.div_ceil(block)))
                .ok_or_else(too_big)?;
            // A scale (2 bytes) and block / 2 bytes of nibbles per block.
            (block / 2)
                .checked_add(2)
                .and_then(|per| blocks.checked_mul(per))
                .and_then(|n| n.checked_add(4))
                .ok_or_else(|| {
                    format!(
                        "its int4 block size {block} makes its model state larger than any file (overflow): not the original TinyGPT's model"
                    )
                })
                .map(Some)?
        }
        (other, moments) => {
            return Err(format!(
                "its weights are `{other}`{}; this program reads fp32 (with or without AdamW's moments), and fp16 or int4 weights alone",
                if moments { " with AdamW's moments" } else { "" }
            ));
        }
    }
    .ok_or_else(too_big)?;
    if state.len() != expected {
        // A vocabulary other than 256 bytes is the likeliest reason: say so.
        let per = match dtype {
            "fp32" if with_moments => 12,
            "fp32" => 4,
            _ => 0,
        };
        if per > 0 && state.len() > 4 && (state.len() - 4) % per == 0 {
            let got = (state.len() - 4) / per;
            let diff = got as i128 - floats as i128;
            let d_model = shape.d_model as i128;
            if diff % d_model == 0 && diff != 0 {
                let vocab = VOCAB as i128 + diff / d_model;
                return Err(format!(
                    "another vocabulary: its token embedding has {vocab} rows, and this program's models read bytes (256 tokens)"
                ));
            }
        }
        return Err(format!(
            "its model state is {} bytes, where its config ({} layers, dModel {}, ctx {}) and `{dtype}` weights{} make {expected}: truncated, or not the original TinyGPT's model",
            state.len(),
            shape.layers,
            shape.d_model,
            shape.ctx,
            if with_moments {
                " with AdamW's moments"
            } else {
                ""
            }
        ));
    }
    let step = i32::from_le_bytes(state[0..4].try_into().unwrap());
    if step < 0 {
        return Err(format!("its step count is {step}"));
    }
    let body = &state[4..];
    let mut out = Vec::with_capacity(manifest.len());
    match dtype {
        "fp32" => {
            let mut at = 0;
            for &n in &numels {
                let mut take = || {
                    let v = f32s(&body[at * 4..(at + n) * 4]);
                    at += n;
                    v
                };
                let w = take();
                let (m, v) = if with_moments {
                    (take(), take())
                } else {
                    (vec![], vec![])
                };
                out.push(Stored { w, m, v });
            }
        }
        "fp16" => {
            let mut at = 0;
            for &n in &numels {
                let w = body[at * 2..(at + n) * 2]
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect();
                at += n;
                out.push(Stored {
                    w,
                    m: vec![],
                    v: vec![],
                });
            }
        }
        _ => {
            // int4: every tensor's scales first, then every tensor's
            // nibbles; each tensor as this program's own int4 stores one
            // (the same blocks, nibble order and f16 scales).
            // blocks · (2 + block / 2) + 4 bytes were checked (without
            // overflow) against the state's length: every slice is in it.
            let (scales, packed) = body.split_at(blocks * 2);
            let (mut scale_at, mut packed_at) = (0, 0);
            for &n in &numels {
                let nb = n.div_ceil(block);
                let q = super::int4::Quantised {
                    scales: scales[scale_at..scale_at + nb * 2]
                        .chunks_exact(2)
                        .map(|c| f16::from_le_bytes([c[0], c[1]]))
                        .collect(),
                    nibbles: packed[packed_at..packed_at + nb * (block / 2)].to_vec(),
                };
                let w = super::int4::dequantise_blocks(&q, n, block).ok_or_else(|| {
                    format!("its int4 tensor of {n} values does not fit its blocks of {block}")
                })?;
                scale_at += nb * 2;
                packed_at += nb * (block / 2);
                out.push(Stored {
                    w,
                    m: vec![],
                    v: vec![],
                });
            }
        }
    }
    Ok((step as u64, out))
}

/// Our config for the original's: its sizes and its training settings where
/// ours has them (batch, steps, learning rate, clip, evaluation interval);
/// AdamW's constants are the same in both.
fn our_config(config: &Value, shape: &Shape) -> Result<Config, String> {
    let mut ours = Config::load("tiny").map_err(|e| e.to_string())?;
    ours.n_layer = shape.layers;
    ours.n_head = shape.heads;
    ours.d_model = shape.d_model;
    ours.ctx = shape.ctx;
    ours.schedule = super::config::Schedule::Constant;
    ours.dropout = 0.0;
    let whole = |key: &str| config.get(key).and_then(Value::as_u64).filter(|&n| n > 0);
    if let Some(b) = whole("batchSize") {
        ours.batch = b as usize;
    }
    if let Some(s) = whole("maxSteps") {
        ours.steps = s;
    }
    if let Some(e) = whole("evalEvery") {
        ours.eval_interval = e;
    }
    if let Some(lr) = config_number(config, "learningRate").filter(|x| *x > 0.0) {
        ours.lr = lr as f32;
    }
    if let Some(clip) = config_number(config, "gradClip").filter(|x| *x >= 0.0) {
        ours.grad_clip = clip as f32;
    }
    ours.validate("its config").map_err(|e| e.to_string())?;
    Ok(ours)
}

/// A point of its loss curve; None for one whose loss is not a finite f32
/// (which our checkpoints could not store).
fn loss_point(p: &Value) -> Option<LossPoint> {
    let finite = |x: f64| Some(x as f32).filter(|x| x.is_finite());
    Some(LossPoint {
        step: p.get("step")?.as_u64()?,
        loss: finite(p.get("train")?.as_f64()?)?,
        val_loss: p.get("val").and_then(Value::as_f64).and_then(finite),
    })
}

/// The stored tensors under our names, layout and order: matrices
/// transposed to `[out, in]`, q, k and v stacked into `c_attn`.
fn ours(
    config: &Config,
    manifest: &[(String, Vec<usize>)],
    stored: Vec<Stored>,
    with_moments: bool,
) -> (Vec<NamedTensor>, Option<OptimizerState>) {
    let by_name: HashMap<&str, (&[usize], Stored)> = manifest
        .iter()
        .zip(stored)
        .map(|((name, dims), s)| (name.as_str(), (dims.as_slice(), s)))
        .collect();
    // [in, out] as stored → [out, in].
    let transposed = |x: &[f32], rows: usize, cols: usize| -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    };
    let part = |name: &str, pick: fn(&Stored) -> &Vec<f32>| -> Vec<f32> {
        let (dims, s) = &by_name[name];
        let x = pick(s);
        match dims {
            [rows, cols] if !name.ends_with("embedding.weight") => transposed(x, *rows, *cols),
            _ => x.clone(),
        }
    };
    let program = Program::new(config);
    let sources = |ours: &str| -> Vec<String> {
        let o = |s: &str| vec![s.to_string()];
        match ours {
            "transformer.wte.weight" => o("token_embedding.weight"),
            "transformer.wpe.weight" => o("position_embedding.weight"),
            "transformer.ln_f.weight" => o("ln_final.weight"),
            "transformer.ln_f.bias" => o("ln_final.bias"),
            _ => {
                let rest = ours
                    .strip_prefix("transformer.h.")
                    .expect("a block's tensor");
                let (i, leaf) = rest.split_once('.').unwrap();
                let b = format!("blocks.{i}");
                let theirs = |l: &str| format!("{b}.{l}");
                match leaf {
                    "ln_1.weight" => vec![theirs("ln1.weight")],
                    "ln_1.bias" => vec![theirs("ln1.bias")],
                    "ln_2.weight" => vec![theirs("ln2.weight")],
                    "ln_2.bias" => vec![theirs("ln2.bias")],
                    "attn.c_attn.weight" | "attn.c_attn.bias" => {
                        let kind = leaf.rsplit('.').next().unwrap();
                        ["q", "k", "v"]
                            .iter()
                            .map(|p| theirs(&format!("attn.{p}_proj.{kind}")))
                            .collect()
                    }
                    "attn.c_proj.weight" => vec![theirs("attn.o_proj.weight")],
                    "attn.c_proj.bias" => vec![theirs("attn.o_proj.bias")],
                    "mlp.c_fc.weight" => vec![theirs("mlp.fc_in.weight")],
                    "mlp.c_fc.bias" => vec![theirs("mlp.fc_in.bias")],
                    "mlp.c_proj.weight" => vec![theirs("mlp.fc_out.weight")],
                    "mlp.c_proj.bias" => vec![theirs("mlp.fc_out.bias")],
                    other => unreachable!("no tensor of the original maps to {other}"),
                }
            }
        }
    };
    let gather = |prefix: &str, pick: fn(&Stored) -> &Vec<f32>| -> Vec<NamedTensor> {
        program
            .params()
            .map(|id| {
                let t = &program.tensors[id];
                let values: Vec<f32> = sources(&t.name)
                    .iter()
                    .flat_map(|s| part(s, pick))
                    .collect();
                debug_assert_eq!(values.len(), t.numel(), "{}", t.name);
                NamedTensor {
                    name: format!("{prefix}{}", t.name),
                    shape: t.shape.clone(),
                    values,
                }
            })
            .collect()
    };
    let params = gather("", |s| &s.w);
    let optimizer = with_moments.then(|| OptimizerState {
        // The program's names for AdamW's moments.
        m: gather("adam.m.", |s| &s.m),
        v: gather("adam.v.", |s| &s.v),
    });
    (params, optimizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(config: Value, state: &[u8]) -> Vec<u8> {
        let header =
            serde_json::json!({ "version": 2, "config": config, "includesOptimizerState": true });
        encode(&header, state)
    }

    fn config(d_mlp: usize) -> Value {
        serde_json::json!({ "ctx": 8, "layers": 1, "heads": 2, "dModel": 8, "dMlp": d_mlp })
    }

    fn message(bytes: &[u8]) -> String {
        import(bytes, "m.tinygpt").unwrap_err().to_string()
    }

    /// Its gallery's int4 layout (finalize_gallery_int4.ts: every scale,
    /// then every tensor's nibbles in whole blocks, low nibble first), made
    /// here by its quantiser's rule: scale = absmax/7, q = round(w/scale) in
    /// ±7, stored q + 8. Each weight comes back within half a step.
    #[test]
    fn its_int4_layout_decodes_within_half_a_step() {
        let config = config(32);
        let shape = shape_of(&config).unwrap();
        let tensors: Vec<Vec<f32>> = shape
            .manifest()
            .iter()
            .enumerate()
            .map(|(t, (_, s))| {
                let n: usize = s.iter().product();
                (0..n)
                    .map(|i| ((i * 7 + t * 13) % 23) as f32 * 0.01 - 0.11)
                    .collect()
            })
            .collect();
        let (mut scales, mut packed, mut steps) = (vec![], vec![], vec![]);
        for w in &tensors {
            let mut block_steps = vec![];
            for chunk in w.chunks(64) {
                let scale = chunk.iter().fold(0f32, |m, x| m.max(x.abs())) / 7.0;
                let scale16 = f16::from_f32(scale);
                scales.extend(scale16.to_le_bytes());
                let mut nibbles = [8u8; 64];
                for (j, x) in chunk.iter().enumerate() {
                    let q = if scale > 0.0 {
                        (x / scale).round().clamp(-7.0, 7.0)
                    } else {
                        0.0
                    };
                    nibbles[j] = (q + 8.0) as u8;
                }
                packed.extend(nibbles.chunks(2).map(|p| p[0] | (p[1] << 4)));
                block_steps.push(scale16.to_f32());
            }
            steps.push(block_steps);
        }
        let mut state = 0i32.to_le_bytes().to_vec();
        state.extend(scales);
        state.extend(packed);
        let header = serde_json::json!({ "version": 2, "config": config,
            "includesOptimizerState": false, "weightDtype": "int4", "int4BlockSize": 64 });
        let bytes = encode(&header, &state);
        let ck = import(&bytes, "m.tinygpt").unwrap();
        assert!(ck.optimizer.is_none());
        let manifest = shape.manifest();
        let (_, decoded) = decode_state(&state, &shape, &manifest, "int4", false, 64).unwrap();
        for ((w, d), s) in tensors.iter().zip(&decoded).zip(&steps) {
            for (i, (x, y)) in w.iter().zip(&d.w).enumerate() {
                // Half a step, and the f16 scale's own rounding times 7.
                let step = s[i / 64];
                assert!(
                    (x - y).abs() <= step * 0.5 + 7.0 * step * 1e-3,
                    "{x} → {y} (step {step})"
                );
            }
        }
        // Under our names the token embedding is the first tensor as stored.
        assert_eq!(ck.params[0].values, decoded[0].w);
    }

    #[test]
    fn another_architecture_or_vocabulary_is_refused_by_name() {
        let shape = shape_of(&config(32)).unwrap();
        let listed: usize = shape
            .manifest()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        let floats = shape.floats().unwrap();
        assert_eq!(floats, listed);
        let good = vec![0u8; 4 + floats * 12];
        assert!(import(&file(config(32), &good), "m").is_ok());
        assert!(message(&file(config(24), &good)).contains("MLP is 24 wide"));
        // 300 tokens instead of 256: 44 more rows of 8.
        let more = vec![0u8; 4 + (floats + 44 * 8) * 12];
        assert!(
            message(&file(config(32), &more))
                .contains("another vocabulary: its token embedding has 300 rows")
        );
        assert!(message(&file(config(32), &good[..good.len() - 12])).contains("truncated"));
        let mut bad = file(config(32), &good);
        bad[4] = 3;
        assert!(message(&bad).contains("version 3"));
        assert!(message(b"TGPT\x02\0\0\0\xff\0\0\0{}").contains("header says it is 255 bytes"));
    }

    /// Issue 56: an int4 block size whose sizes overflow (2^63 + 2: the 20
    /// tensors' one block each make blocks · block / 2 wrap to 20 bytes, so
    /// a 64-byte state passed the old size check and a slice panicked) is
    /// refused with what it says; so are other sizes that do not fit, and
    /// every message calls it a .tinygpt, not a safetensors file.
    #[test]
    fn a_crafted_header_is_refused_never_a_panic() {
        let int4 = |block: Value, state: &[u8]| {
            let header = serde_json::json!({ "version": 2, "config": config(32),
                "includesOptimizerState": false, "weightDtype": "int4", "int4BlockSize": block });
            encode(&header, state)
        };
        let huge = serde_json::json!(9_223_372_036_854_775_810u64);
        let e = message(&int4(huge.clone(), &[0u8; 64]));
        assert!(e.contains("int4 block size 9223372036854775810"), "{e}");
        assert!(e.contains("overflow"), "{e}");
        assert!(message(&int4(huge, &[0u8; 4096])).contains("overflow"));
        for bad in [serde_json::json!(-64), serde_json::json!(6.5), serde_json::json!("64")] {
            assert!(message(&int4(bad, &[0u8; 64])).contains("not a positive even number"));
        }
        assert!(message(&int4(serde_json::json!(0), &[0u8; 64])).contains("block size 0"));
        // The largest sizes the config takes: a model too large, refused.
        let wide = serde_json::json!({ "ctx": 1 << 20, "layers": 1024, "heads": 1,
            "dModel": 1 << 20 });
        let e = message(&file(wide, &[0u8; 64]));
        assert!(!e.contains("panicked"), "{e}");
        // Not a safetensors file: a .tinygpt that is cut short or corrupt.
        let e = message(b"TGPT\x02\0\0\0\xff\0\0\0{}");
        assert!(e.contains("not a valid .tinygpt file") && !e.contains("safetensors"), "{e}");
        let e = message(b"TGPT\x02\0\0\0\x02\0\0\0{x");
        assert!(e.contains("not a valid .tinygpt file") && e.contains("not valid JSON"), "{e}");
    }
}
