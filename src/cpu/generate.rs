//! Incremental inference on the CPU with a KV cache: until the context is
//! full each new byte costs one position of work ([`Generator::push`]), not
//! a rerun of the whole window. Once it is full the window slides one byte
//! at a time, as nanoGPT's `generate()` does: the model has learned absolute
//! positions, so every position's keys change and the window is computed
//! again ([`Generator::prime`], one batched forward pass through the same
//! kernels as training, matrix by matrix rather than row by row). Both
//! paths reuse the kernels of [`super::ops`] and are tested against the full
//! forward pass of the program (same logits).
//!
//! Generation is causal by nature: a new byte is computed from the bytes
//! before it, which are all there is. A model from the lab without the
//! causal mask is run the same way (its program with the mask back on), which
//! is why it fails: it learned to read the byte it was asked for.

use super::ops;
use crate::model::config::{Config, VOCAB};
use crate::model::params::NamedTensor;
use std::collections::HashMap;

/// Weights of one block, by role.
struct Block {
    ln_1: (Vec<f32>, Vec<f32>),
    c_attn: (Vec<f32>, Vec<f32>),
    c_proj: (Vec<f32>, Vec<f32>),
    ln_2: (Vec<f32>, Vec<f32>),
    c_fc: (Vec<f32>, Vec<f32>),
    mlp_proj: (Vec<f32>, Vec<f32>),
}

/// A model ready for token-by-token inference, with its KV cache.
pub struct Generator {
    config: Config,
    wte: Vec<f32>,
    wpe: Vec<f32>,
    blocks: Vec<Block>,
    ln_f: (Vec<f32>, Vec<f32>),
    /// Per layer: keys and values of the cached positions, (ctx, C) each.
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
    /// Positions currently in the cache.
    len: usize,
}

impl Generator {
    /// Builds a generator from parameters named as in the program/checkpoint.
    pub fn new(config: &Config, params: &[NamedTensor]) -> Result<Self, String> {
        // A LoRA fine-tune samples through its merged weights, W + (α/r)·B·A:
        // the same function, at the base's cost per token.
        if let Some(lora) = config.lora {
            let merged = crate::model::lora::merge_params(lora, params)?;
            let base = Config {
                lora: None,
                ..config.clone()
            };
            return Self::new(&base, &merged);
        }
        let mut by_name: HashMap<&str, &Vec<f32>> = params
            .iter()
            .map(|t| (t.name.as_str(), &t.values))
            .collect();
        let mut get = |n: String| {
            by_name
                .remove(n.as_str())
                .cloned()
                .ok_or(format!("parameter `{n}` is missing"))
        };
        let pair = |get: &mut dyn FnMut(String) -> Result<Vec<f32>, String>,
                    p: &str|
         -> Result<(Vec<f32>, Vec<f32>), String> {
            Ok((get(format!("{p}.weight"))?, get(format!("{p}.bias"))?))
        };
        let wte = get("transformer.wte.weight".into())?;
        let wpe = get("transformer.wpe.weight".into())?;
        let mut blocks = Vec::new();
        for i in 0..config.n_layer {
            let p = format!("transformer.h.{i}");
            blocks.push(Block {
                ln_1: pair(&mut get, &format!("{p}.ln_1"))?,
                c_attn: pair(&mut get, &format!("{p}.attn.c_attn"))?,
                c_proj: pair(&mut get, &format!("{p}.attn.c_proj"))?,
                ln_2: pair(&mut get, &format!("{p}.ln_2"))?,
                c_fc: pair(&mut get, &format!("{p}.mlp.c_fc"))?,
                mlp_proj: pair(&mut get, &format!("{p}.mlp.c_proj"))?,
            });
        }
        let ln_f = pair(&mut get, "transformer.ln_f")?;
        let cache = vec![vec![0.0; config.ctx * config.d_model]; config.n_layer];
        Ok(Self {
            config: config.clone(),
            wte,
            wpe,
            blocks,
            ln_f,
            k_cache: cache.clone(),
            v_cache: cache,
            len: 0,
        })
    }

    pub fn ctx(&self) -> usize {
        self.config.ctx
    }

    /// Positions in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the cache and feeds `tokens` (1..=ctx) as one batched
    /// forward pass (T, C) — the window of a sample that slides — filling
    /// the cache with their keys and values; returns the logits after the
    /// last one.
    pub fn prime(&mut self, tokens: &[u8]) -> Vec<f32> {
        assert!(
            !tokens.is_empty() && tokens.len() <= self.config.ctx,
            "prime needs 1..=ctx tokens"
        );
        let (c, h, t) = (self.config.d_model, self.config.n_head, tokens.len());
        // x: the residual stream, (T, C).
        let mut x = vec![0.0f32; t * c];
        for (pos, (row, &tok)) in x.chunks_mut(c).zip(tokens).enumerate() {
            let tok = tok as usize;
            row.copy_from_slice(&self.wte[tok * c..tok * c + c]);
            if self.config.lab.position_embeddings {
                for (x, &p) in row.iter_mut().zip(&self.wpe[pos * c..pos * c + c]) {
                    *x += p;
                }
            }
        }
        let (mut ln, mut mean, mut rstd) = (vec![0.0; t * c], vec![0.0; t], vec![0.0; t]);
        let mut qkv = vec![0.0; t * 3 * c]; // (T, 3C)
        let mut y = vec![0.0; t * c]; // (T, C)
        let mut lse = vec![0.0; h * t]; // (H, T)
        let mut proj = vec![0.0; t * c]; // (T, C)
        let mut fc = vec![0.0; t * 4 * c]; // (T, 4C)
        let mut gelu = vec![0.0; t * 4 * c]; // (T, 4C)
        let dims = ops::AttnDims {
            b: 1,
            t,
            c,
            h,
            causal: true,
        };
        for (layer, blk) in self.blocks.iter().enumerate() {
            ops::layernorm_forward(
                &mut ln,
                &mut mean,
                &mut rstd,
                &x,
                &blk.ln_1.0,
                &blk.ln_1.1,
                c,
            );
            ops::linear_forward(&mut qkv, &ln, &blk.c_attn.0, &blk.c_attn.1, c, 3 * c);
            for (pos, row) in qkv.chunks(3 * c).enumerate() {
                self.k_cache[layer][pos * c..pos * c + c].copy_from_slice(&row[c..2 * c]);
                self.v_cache[layer][pos * c..pos * c + c].copy_from_slice(&row[2 * c..]);
            }
            ops::attention_forward(&mut y, &mut lse, &qkv, &dims, 0.0, 0, 0, false);
            ops::linear_forward(&mut proj, &y, &blk.c_proj.0, &blk.c_proj.1, c, c);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
            ops::layernorm_forward(
                &mut ln,
                &mut mean,
                &mut rstd,
                &x,
                &blk.ln_2.0,
                &blk.ln_2.1,
                c,
            );
            ops::linear_forward(&mut fc, &ln, &blk.c_fc.0, &blk.c_fc.1, c, 4 * c);
            ops::gelu_forward(&mut gelu, &fc);
            ops::linear_forward(&mut proj, &gelu, &blk.mlp_proj.0, &blk.mlp_proj.1, 4 * c, c);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        // Only the last position's next byte is asked for.
        let last = &x[(t - 1) * c..];
        let (mut ln, mut mean, mut rstd) = (vec![0.0; c], [0.0f32], [0.0f32]);
        ops::layernorm_forward(
            &mut ln,
            &mut mean,
            &mut rstd,
            last,
            &self.ln_f.0,
            &self.ln_f.1,
            c,
        );
        let mut logits = vec![0.0; VOCAB];
        ops::tied_head_forward(&mut logits, &ln, &self.wte, c, VOCAB);
        self.len = t;
        logits
    }

    /// Feeds one token at the next position and returns the logits (V) for
    /// the token after it. Panics if the cache is full (`len == ctx`).
    pub fn push(&mut self, token: u8) -> Vec<f32> {
        let (c, h) = (self.config.d_model, self.config.n_head);
        let d = c / h;
        let pos = self.len;
        assert!(pos < self.config.ctx, "KV cache is full");
        let tok = token as usize;
        let mut x: Vec<f32> = self.wte[tok * c..tok * c + c].to_vec();
        if self.config.lab.position_embeddings {
            for (x, &p) in x.iter_mut().zip(&self.wpe[pos * c..pos * c + c]) {
                *x += p;
            }
        }
        let mut ln = vec![0.0; c];
        let (mut mean, mut rstd) = ([0.0f32], [0.0f32]);
        for (layer, blk) in self.blocks.iter().enumerate() {
            ops::layernorm_forward(
                &mut ln,
                &mut mean,
                &mut rstd,
                &x,
                &blk.ln_1.0,
                &blk.ln_1.1,
                c,
            );
            let mut qkv = vec![0.0; 3 * c];
            ops::linear_forward(&mut qkv, &ln, &blk.c_attn.0, &blk.c_attn.1, c, 3 * c);
            self.k_cache[layer][pos * c..pos * c + c].copy_from_slice(&qkv[c..2 * c]);
            self.v_cache[layer][pos * c..pos * c + c].copy_from_slice(&qkv[2 * c..]);
            let mut y = vec![0.0f32; c];
            let scale = 1.0 / (d as f32).sqrt();
            let (kc, vc) = (&self.k_cache[layer], &self.v_cache[layer]);
            for head in 0..h {
                let q = &qkv[head * d..head * d + d];
                let scores: Vec<f32> = (0..=pos)
                    .map(|j| {
                        q.iter()
                            .zip(&kc[j * c + head * d..j * c + head * d + d])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let w: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f32 = w.iter().sum();
                for (j, wj) in w.iter().enumerate() {
                    let p = wj / sum;
                    for i in 0..d {
                        y[head * d + i] += p * vc[j * c + head * d + i];
                    }
                }
            }
            let mut proj = vec![0.0; c];
            ops::linear_forward(&mut proj, &y, &blk.c_proj.0, &blk.c_proj.1, c, c);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
            ops::layernorm_forward(
                &mut ln,
                &mut mean,
                &mut rstd,
                &x,
                &blk.ln_2.0,
                &blk.ln_2.1,
                c,
            );
            let mut fc = vec![0.0; 4 * c];
            ops::linear_forward(&mut fc, &ln, &blk.c_fc.0, &blk.c_fc.1, c, 4 * c);
            let mut gelu = vec![0.0; 4 * c];
            ops::gelu_forward(&mut gelu, &fc);
            ops::linear_forward(&mut proj, &gelu, &blk.mlp_proj.0, &blk.mlp_proj.1, 4 * c, c);
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        ops::layernorm_forward(
            &mut ln,
            &mut mean,
            &mut rstd,
            &x,
            &self.ln_f.0,
            &self.ln_f.1,
            c,
        );
        let mut logits = vec![0.0; VOCAB];
        ops::tied_head_forward(&mut logits, &ln, &self.wte, c, VOCAB);
        self.len += 1;
        logits
    }
}

/// Text generation draws from the KV cache ([`crate::sample`]).
impl crate::sample::NextToken for Generator {
    fn ctx(&self) -> usize {
        Generator::ctx(self)
    }
    fn positions(&self) -> usize {
        Generator::len(self)
    }
    fn prime(&mut self, tokens: &[u8]) -> Vec<f32> {
        Generator::prime(self, tokens)
    }
    fn push(&mut self, token: u8) -> Vec<f32> {
        Generator::push(self, token)
    }
}

