//! Looking inside a forward pass: a [`ProbeRequest`] runs the program's
//! forward ops on a batch in evaluation mode, then the program's probes
//! ([`Step::AttentionProbs`](crate::program::Step::AttentionProbs)) for one
//! batch row, and returns what they computed as a [`ProbeResult`]: each chosen
//! block's attention weights P (H, n, n) and the row's logits (n, V).
//!
//! Every backend runs it through [`Backend::probe`](crate::backend::Backend::probe)
//! (and the GPU also without waiting, for the app's frame loop), so the
//! Attention scene, `tinygpt attention --json` and the tests all see the same
//! numbers from the same program.

use crate::data::Batch;
use crate::model::config::{Config, VOCAB};
pub use crate::program::ProbeWindow;

/// What to look at: a batch for the forward pass, the row and positions to
/// probe, and which transformer blocks' attention to return.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeRequest {
    pub batch: Batch,
    pub window: ProbeWindow,
    /// Transformer blocks (0-based), in the order the result lists them.
    pub blocks: Vec<usize>,
}

/// What a probe looks at, before it is a request: a run turns it into one
/// with [`crate::train::Trainer::probe_request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeSource {
    /// A prompt (its last `ctx` bytes), padded to the context.
    Prompt(Vec<u8>),
    /// This row of the batch the run's next step trains on.
    BatchRow(usize),
}

impl ProbeRequest {
    /// A probe of `prompt`: its last `ctx` bytes in row 0 of a batch, padded
    /// with spaces (causal attention: the padding changes nothing before it;
    /// without the mask, the window is all T positions, padding included).
    /// Every block's attention.
    pub fn for_prompt(config: &Config, prompt: &[u8]) -> Result<Self, String> {
        if prompt.is_empty() {
            return Err("the prompt is empty; type at least one character".into());
        }
        let (b, t) = (config.batch, config.ctx);
        let prompt = &prompt[prompt.len().saturating_sub(t)..];
        // Without the causal mask (a lab) every position also sees the
        // padding after the prompt, so all T are shown.
        let n = if config.lab.causal_mask {
            prompt.len()
        } else {
            t
        };
        let mut row: Vec<u32> = prompt.iter().map(|&x| x as u32).collect();
        row.resize(t, b' ' as u32);
        let mut targets: Vec<u32> = row[1..].to_vec();
        targets.push(b' ' as u32);
        Ok(Self {
            batch: Batch {
                batch: b,
                ctx: t,
                inputs: row.repeat(b),
                targets: targets.repeat(b),
            },
            window: ProbeWindow { row: 0, n },
            blocks: (0..config.n_layer).collect(),
        })
    }

    /// A probe of row `row` of `batch`, all T positions, every block.
    pub fn for_batch_row(config: &Config, batch: Batch, row: usize) -> Result<Self, String> {
        if row >= config.batch {
            return Err(format!(
                "batch row {row} does not exist; the batch has rows 0 to {}",
                config.batch - 1
            ));
        }
        Ok(Self {
            batch,
            window: ProbeWindow { row, n: config.ctx },
            blocks: (0..config.n_layer).collect(),
        })
    }

    /// Keeps only these blocks (e.g. one, where all of them would be large).
    pub fn with_blocks(mut self, blocks: Vec<usize>) -> Self {
        self.blocks = blocks;
        self
    }

    /// The probed bytes: positions 0..n of the row.
    pub fn tokens(&self) -> Vec<u8> {
        let (r, t, n) = (self.window.row, self.batch.ctx, self.window.n);
        self.batch.inputs[r * t..r * t + n]
            .iter()
            .map(|&x| x as u8)
            .collect()
    }

    /// Why this request cannot run on `config`'s program, if it cannot.
    pub fn check(&self, config: &Config) -> Result<(), String> {
        let ProbeWindow { row, n } = self.window;
        if self.batch.batch != config.batch || self.batch.ctx != config.ctx {
            return Err(format!(
                "the probe's batch is {}×{}, the model's {}×{}",
                self.batch.batch, self.batch.ctx, config.batch, config.ctx
            ));
        }
        if row >= config.batch {
            return Err(format!(
                "probe row {row} is past the batch ({})",
                config.batch
            ));
        }
        if n == 0 || n > config.ctx {
            return Err(format!(
                "a probe looks at 1 to {} positions, not {n}",
                config.ctx
            ));
        }
        if let Some(b) = self.blocks.iter().find(|&&b| b >= config.n_layer) {
            return Err(format!(
                "block {b} does not exist; the model has blocks 0 to {}",
                config.n_layer - 1
            ));
        }
        Ok(())
    }

    /// Floats a result holds: P of every block, then the logits.
    pub fn result_len(&self, n_head: usize) -> usize {
        let n = self.window.n;
        self.blocks.len() * n_head * n * n + n * VOCAB
    }

    /// Splits a backend's flat output (P of each block in order, then the
    /// logits) into a result.
    pub fn result_from_flat(&self, n_head: usize, flat: &[f32]) -> Option<ProbeResult> {
        if flat.len() != self.result_len(n_head) {
            return None;
        }
        let n = self.window.n;
        let per = n_head * n * n;
        let probs = (0..self.blocks.len())
            .map(|k| flat[k * per..(k + 1) * per].to_vec())
            .collect();
        Some(ProbeResult {
            window: self.window,
            tokens: self.tokens(),
            n_head,
            blocks: self.blocks.clone(),
            probs,
            logits: flat[self.blocks.len() * per..].to_vec(),
        })
    }
}

/// What a probe computed.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResult {
    pub window: ProbeWindow,
    /// The probed bytes (n).
    pub tokens: Vec<u8>,
    pub n_head: usize,
    /// The blocks of `probs`, in order.
    pub blocks: Vec<usize>,
    /// Per block: P (H, n, n), row i the weights query i gives keys 0..=i.
    pub probs: Vec<Vec<f32>>,
    /// The row's logits (n, V): row i predicts byte i + 1.
    pub logits: Vec<f32>,
}

impl ProbeResult {
    /// Positions probed.
    pub fn n(&self) -> usize {
        self.window.n
    }

    /// P (n, n) of one head of the k-th block of `blocks`.
    pub fn p(&self, k: usize, head: usize) -> &[f32] {
        let n = self.n();
        &self.probs[k][head * n * n..(head + 1) * n * n]
    }

    /// The logits (V) that position `pos` gives the next byte.
    pub fn logits_at(&self, pos: usize) -> &[f32] {
        &self.logits[pos * VOCAB..(pos + 1) * VOCAB]
    }

    /// One JSON object per (block, head): `layer`, `head`, `tokens` (byte
    /// values) and `p` (n rows of n), as `tinygpt attention --json` prints.
    pub fn to_json_objects(&self) -> Vec<serde_json::Value> {
        let n = self.n();
        let mut out = Vec::new();
        for (k, &block) in self.blocks.iter().enumerate() {
            for head in 0..self.n_head {
                let p = self.p(k, head);
                let rows: Vec<&[f32]> = p.chunks_exact(n).collect();
                out.push(serde_json::json!({
                    "layer": block,
                    "head": head,
                    "tokens": self.tokens,
                    "p": rows,
                }));
            }
        }
        out
    }
}

/// A byte as a label: printable ASCII as itself, the rest as an escape
/// (`\n`, `\t`, `␣` for a space, `\xNN`), so every label is visible (in
/// the label font, DejaVu Sans, which has ␣ and not ␠: no tofu box).
pub fn byte_label(byte: u8) -> String {
    match byte {
        b' ' => "␣".into(),
        b'\n' => "\\n".into(),
        b'\t' => "\\t".into(),
        b'\r' => "\\r".into(),
        0x21..=0x7e => (byte as char).to_string(),
        _ => format!("\\x{byte:02x}"),
    }
}

/// A byte as a person types it: one ASCII character, what [`byte_label`]
/// writes (`␣` or `␠` for the space, `\n`, `\t`, `\r`, `\x41`), or its
/// value from 0 to 255 (two or three digits; one digit is the character).
pub fn parse_byte(s: &str) -> Result<u8, String> {
    if let Some(h) = s.strip_prefix("\\x")
        && let Ok(b) = u8::from_str_radix(h, 16)
    {
        return Ok(b);
    }
    match s.as_bytes() {
        [b] => Ok(*b),
        _ if s == "\\n" => Ok(b'\n'),
        _ if s == "\\t" => Ok(b'\t'),
        _ if s == "\\r" => Ok(b'\r'),
        _ if s == "␠" || s == "␣" => Ok(b' '),
        _ if s.chars().count() == 1 => {
            let bytes: Vec<String> = s.bytes().map(|b| format!("\\x{b:02X}")).collect();
            Err(format!(
                "`{s}` is {} bytes in UTF-8 ({}), and the model reads one byte at a time: \
                 give one of them, e.g. {}",
                bytes.len(),
                bytes.join(" "),
                bytes[0]
            ))
        }
        _ => s.parse::<u8>().map_err(|_| {
            format!(
                "`{s}` is not a byte: give one character, `\\n`, `␣` for the space, `\\x41`, or a value from 00 to 255"
            )
        }),
    }
}

/// Two bytes as `A,B` (each as [`parse_byte`] reads it; `,,a` is a comma
/// and an `a`).
pub fn parse_byte_pair(s: &str) -> Result<(u8, u8), String> {
    let (a, b) = s
        .rsplit_once(',')
        .filter(|(a, _)| !a.is_empty())
        .ok_or(format!(
            "`{s}` is not two bytes: give them as A,B (e.g. e,a)"
        ))?;
    Ok((parse_byte(a)?, parse_byte(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_byte_reads_back_from_its_label() {
        for b in 0..=255u8 {
            assert_eq!(parse_byte(&byte_label(b)), Ok(b), "{b}");
        }
        assert_eq!(parse_byte("␣"), Ok(b' '));
        assert_eq!(parse_byte("65"), Ok(65));
        assert_eq!(parse_byte("7"), Ok(b'7'));
        assert!(parse_byte("256").is_err() && parse_byte("ab").is_err());
        assert_eq!(parse_byte_pair("e,a"), Ok((b'e', b'a')));
        assert_eq!(parse_byte_pair(",,a"), Ok((b',', b'a')));
        assert_eq!(parse_byte_pair("␠,\\n"), Ok((b' ', b'\n')));
        assert!(parse_byte_pair("e").is_err() && parse_byte_pair(",a").is_err());
    }

    #[test]
    fn a_prompt_fills_row_zero_and_keeps_its_last_ctx_bytes() {
        let cfg = Config::load("tiny").unwrap();
        let r = ProbeRequest::for_prompt(&cfg, b"ROMEO:").unwrap();
        assert_eq!(r.window, ProbeWindow { row: 0, n: 6 });
        assert_eq!(r.tokens(), b"ROMEO:");
        assert_eq!(r.batch.inputs.len(), cfg.batch * cfg.ctx);
        assert!(r.check(&cfg).is_ok());
        let long: Vec<u8> = (0..cfg.ctx as u8 + 10).collect();
        let r = ProbeRequest::for_prompt(&cfg, &long).unwrap();
        assert_eq!(r.window.n, cfg.ctx);
        assert_eq!(r.tokens(), &long[10..]);
        assert!(ProbeRequest::for_prompt(&cfg, b"").is_err());
        let bad = r.clone().with_blocks(vec![cfg.n_layer]);
        assert!(bad.check(&cfg).unwrap_err().contains("does not exist"));
    }

    #[test]
    fn labels_are_visible() {
        assert_eq!(byte_label(b'a'), "a");
        assert_eq!(byte_label(b' '), "␣");
        assert_eq!(byte_label(b'\n'), "\\n");
        assert_eq!(byte_label(0xe2), "\\xe2");
    }
}
