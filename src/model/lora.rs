//! LoRA fine-tuning's files and arithmetic: a base model's fingerprint, the
//! config of a fine-tune, an adapter put on its base, and an adapter merged
//! into its base.
//!
//! An adapter is the checkpoint of a LoRA program ([`Config::lora`]): A and
//! B of every adapted linear under PEFT's names
//! (`base_model.model.transformer.h.0.attn.c_attn.lora_A.weight`), their
//! AdamW moments, the recipe, the loss history, and the fingerprint of the
//! base it was trained on. Never the base itself: that is the checkpoint it
//! was fine-tuned from, and an adapter refuses to go on any other.

use super::checkpoint::Checkpoint;
use super::config::{Config, Lora, LoraTargets, Schedule};
use super::params::{LORA_A, LORA_B, NamedTensor};
use crate::program::Program;

/// A fingerprint of a model's weights: FNV-1a (64 bits) over every
/// parameter's name, shape and f32 bits, in the order given (a checkpoint's:
/// program order). Any changed weight changes it; so does an f16 or 4-bit
/// export of the same model, which is a different base.
pub fn fingerprint(params: &[NamedTensor]) -> u64 {
    const PRIME: u64 = 0x100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(PRIME);
        }
    };
    for t in params {
        eat(t.name.as_bytes());
        for &d in &t.shape {
            eat(&(d as u64).to_le_bytes());
        }
        for &x in &t.values {
            eat(&x.to_bits().to_le_bytes());
        }
    }
    h
}

/// A fingerprint as the messages and the gallery print it.
pub fn hex(fingerprint: u64) -> String {
    format!("{fingerprint:016x}")
}

/// What a fine-tune trains, and how long: the CLI's and the app's choices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FinetuneOptions {
    pub rank: usize,
    /// α; the update is scaled by α/r.
    pub alpha: f32,
    pub targets: LoraTargets,
    pub steps: u64,
    pub lr: f32,
}

impl FinetuneOptions {
    /// The choices an adapter was trained with (its config's LoRA, steps
    /// and learning rate); an error for a config without LoRA.
    pub fn of(config: &Config) -> Result<Self, String> {
        let lora = config
            .lora
            .ok_or("this is a whole model, not a LoRA adapter")?;
        Ok(Self {
            rank: lora.rank,
            alpha: lora.alpha,
            targets: lora.targets,
            steps: config.steps,
            lr: config.lr,
        })
    }
}

impl Default for FinetuneOptions {
    /// Rank 8, α 16 (a scale of 2), the attention's linears, 300 steps at a
    /// constant 2e-3: 12 s on a 2-core CPU for the shipped small model,
    /// whose loss on a new text falls by 4 nats (docs/lora.md).
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            targets: Lora::DEFAULT_TARGETS,
            steps: 300,
            lr: 2e-3,
        }
    }
}

/// The config of a fine-tune of `base`: its model and batch shape, LoRA on
/// the chosen linears (remembering the base's fingerprint), the chosen
/// steps at a constant learning rate, and no weight decay (the adapters
/// start at zero update; decay would only pull them back).
pub fn finetune_config(base: &Checkpoint, options: FinetuneOptions) -> Result<Config, String> {
    if base.config.lora.is_some() {
        return Err(
            "the base is itself a LoRA adapter: fine-tune a full model, or `tinygpt merge` the adapter into its base first".into(),
        );
    }
    let mut config = base.config.clone();
    config.lora = Some(Lora {
        rank: options.rank,
        alpha: options.alpha,
        targets: options.targets,
        base: fingerprint(&base.params),
    });
    config.steps = options.steps;
    config.lr = options.lr;
    config.schedule = Schedule::Constant;
    config.weight_decay = 0.0;
    config.eval_interval = (options.steps / 10).clamp(1, 100);
    config
        .validate("the fine-tune's settings")
        .map_err(|e| e.to_string())?;
    Ok(config)
}

/// Refuses an adapter that does not fit `base`: not an adapter at all, a
/// model of another shape, or trained on other weights (by fingerprint).
pub fn check_base(base: &Checkpoint, adapter: &Checkpoint) -> Result<Lora, String> {
    let Some(lora) = adapter.config.lora else {
        return Err(
            "this is a full model, not a LoRA adapter (its config has no `lora`): give it as --checkpoint, or write an adapter with `tinygpt finetune`".into(),
        );
    };
    if base.config.lora.is_some() {
        return Err(
            "the base is itself a LoRA adapter: give the full model it was fine-tuned from".into(),
        );
    }
    let shape = |c: &Config| (c.n_layer, c.n_head, c.d_model, c.ctx);
    if shape(&base.config) != shape(&adapter.config) || base.config.lab != adapter.config.lab {
        return Err(format!(
            "the adapter is for a model of (layers, heads, width, context) = {:?} ({}), the base is {:?} ({}): load it on the model it was fine-tuned from",
            shape(&adapter.config),
            adapter.config.lab.describe(),
            shape(&base.config),
            base.config.lab.describe(),
        ));
    }
    let have = fingerprint(&base.params);
    if have != lora.base {
        return Err(format!(
            "the adapter was trained on the base with fingerprint {}, and this base's weights have fingerprint {}: load it on the checkpoint it was fine-tuned from (an f16 or 4-bit export of that model is another base)",
            hex(lora.base),
            hex(have)
        ));
    }
    Ok(lora)
}

/// Every parameter of the adapted program ([`Program::new`] of the
/// adapter's config), in program order: the base's frozen weights, then
/// each linear's A and B where the program has them.
pub fn adapted_params(base: &Checkpoint, adapter: &Checkpoint) -> Result<Vec<NamedTensor>, String> {
    check_base(base, adapter)?;
    let program = Program::new(&adapter.config);
    program
        .params()
        .map(|id| {
            let name = &program.tensors[id].name;
            let from = if program.tensors[id].is_frozen() {
                &base.params
            } else {
                &adapter.params
            };
            from.iter()
                .find(|t| &t.name == name)
                .cloned()
                .ok_or_else(|| format!("tensor `{name}` is missing"))
        })
        .collect()
}

/// The base with each adapter folded into its weight, `W + (α/r)·B·A`
/// (summed in f64): a plain checkpoint of the base's config that computes
/// what the adapted model computes, at no extra cost per token.
pub fn merge(base: &Checkpoint, adapter: &Checkpoint) -> Result<Checkpoint, String> {
    let lora = check_base(base, adapter)?;
    let mut merged = base.clone();
    merged.optimizer = None;
    let all: Vec<NamedTensor> = base.params.iter().chain(&adapter.params).cloned().collect();
    merged.params = merge_params(lora, &all)?;
    Ok(merged)
}

/// A LoRA model's parameters (the frozen base's and the adapters', by
/// name) as the base's with every adapter folded in, `W + (α/r)·B·A`, in
/// the order given: what the KV-cache sampler runs for a fine-tune.
pub fn merge_params(lora: Lora, params: &[NamedTensor]) -> Result<Vec<NamedTensor>, String> {
    let scale = lora.scale() as f64;
    let find = |name: &str| {
        params
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| format!("tensor `{name}` is missing"))
    };
    let mut merged: Vec<NamedTensor> = params
        .iter()
        .filter(|t| !t.name.ends_with(LORA_A) && !t.name.ends_with(LORA_B))
        .cloned()
        .collect();
    for a in params.iter().filter(|t| t.name.ends_with(LORA_A)) {
        let prefix = a.name.strip_suffix(LORA_A).expect("filtered by suffix");
        let b = find(&format!("{prefix}{LORA_B}"))?;
        let w_name = format!("{prefix}.weight");
        let w = merged
            .iter_mut()
            .find(|t| t.name == w_name)
            .ok_or_else(|| format!("the base has no `{w_name}` for the adapter `{}`", a.name))?;
        let (r, n_in) = (a.shape[0], a.shape[1]);
        let n_out = b.shape[0];
        if w.shape != [n_out, n_in] || b.shape != [n_out, r] {
            return Err(format!(
                "`{}` {:?} and `{}` {:?} do not fit `{w_name}` {:?}",
                a.name, a.shape, b.name, b.shape, w.shape
            ));
        }
        for o in 0..n_out {
            for i in 0..n_in {
                let delta: f64 = (0..r)
                    .map(|k| b.values[o * r + k] as f64 * a.values[k * n_in + i] as f64)
                    .sum();
                let x = &mut w.values[o * n_in + i];
                *x = (*x as f64 + scale * delta) as f32;
            }
        }
    }
    Ok(merged)
}

/// A fine-tune's trained parameters, of all the model's, and their share in
/// percent: (13,824, 366,432, 3.8).
pub fn trained_of(config: &Config) -> Option<(usize, usize, f64)> {
    let trained = config.lora?.param_count(config);
    let all = config.param_count();
    Some((trained, all, 100.0 * trained as f64 / all as f64))
}

/// "13,824 of 366,432 parameters trained: 3.8% of the model".
pub fn trained_share(config: &Config) -> Option<String> {
    let (trained, all, percent) = trained_of(config)?;
    Some(format!(
        "{} of {} parameters trained: {:.1}% of the model",
        super::config::group_thousands(trained),
        super::config::group_thousands(all),
        percent
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, shape: &[usize], values: Vec<f32>) -> NamedTensor {
        NamedTensor {
            name: name.into(),
            shape: shape.to_vec(),
            values,
        }
    }

    #[test]
    fn fingerprint_sees_every_bit_and_name() {
        let a = vec![tensor("w", &[2], vec![1.0, 2.0])];
        let mut b = a.clone();
        b[0].values[1] = f32::from_bits(2.0f32.to_bits() + 1);
        let mut c = a.clone();
        c[0].name = "v".into();
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
    }

    #[test]
    fn targets_parse_and_describe() {
        let t = LoraTargets::parse("attn,mlp").unwrap();
        assert!(t.attention && t.mlp);
        assert_eq!(LoraTargets::parse(&t.describe()).unwrap(), t);
        assert!(
            LoraTargets::parse("attn,ffn")
                .unwrap_err()
                .contains("`ffn`")
        );
        assert!(t.adapts("h.3.mlp.c_fc") && t.adapts("h.0.attn.c_proj"));
        let attn = LoraTargets::parse("attn").unwrap();
        assert!(!attn.adapts("h.3.mlp.c_fc"));
    }

    /// The program's adapter parameters add up to `Lora::param_count`.
    #[test]
    fn adapter_parameters_add_up() {
        for targets in ["attn", "mlp", "attn,mlp"] {
            let mut cfg = Config::load("tiny").unwrap();
            cfg.lora = Some(Lora {
                rank: 4,
                alpha: 8.0,
                targets: LoraTargets::parse(targets).unwrap(),
                base: 0,
            });
            let p = Program::new(&cfg);
            let trained: usize = p.trained().map(|i| p.tensors[i].numel()).sum();
            let frozen: usize = p.frozen().map(|i| p.tensors[i].numel()).sum();
            assert_eq!(trained, cfg.lora.unwrap().param_count(&cfg), "{targets}");
            assert_eq!(frozen, cfg.param_count(), "{targets}");
            for id in p.frozen() {
                assert!(p.tensors[id].adam.is_none() && p.tensors[id].grad.is_none());
                let name = &p.tensors[id].name;
                assert!(p.tensor_id(&format!("grad.{name}")).is_none(), "{name}");
            }
        }
    }
}
