//! Parameter tensors by name, and GPT-2 initialisation from the portable RNG.

use crate::data::rng::Rng;
use crate::program::Program;

/// A named f32 tensor, as stored in checkpoints and moved between backends.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// The suffixes of a LoRA adapter's two matrices (PEFT's names).
pub const LORA_A: &str = ".lora_A.weight";
pub const LORA_B: &str = ".lora_B.weight";

/// GPT-2 initialisation, drawn in program order from the run's `init` stream:
/// weight matrices and both embeddings N(0, 0.02); the two residual output
/// projections (`attn.c_proj`, `mlp.c_proj`) N(0, 0.02/√(2L)); biases 0;
/// LayerNorm gains 1. A LoRA fine-tune's adapters as PEFT starts them, from
/// their own `lora` stream: A (r, in) uniform in ±1/√in (Kaiming's uniform
/// with a = √5), B zero, so the adapted model starts as the base.
pub fn init_params(program: &Program, seed: u64) -> Vec<NamedTensor> {
    let mut rng = Rng::for_stream(seed, "init");
    let mut lora_rng = Rng::for_stream(seed, "lora");
    let residual_std = 0.02 / (2.0 * program.config.n_layer as f64).sqrt();
    program
        .params()
        .map(|id| {
            let t = &program.tensors[id];
            let n = t.numel();
            let values: Vec<f32> = if t.name.ends_with(LORA_A) {
                let bound = 1.0 / (t.shape[1] as f64).sqrt();
                (0..n)
                    .map(|_| ((lora_rng.uniform() * 2.0 - 1.0) * bound) as f32)
                    .collect()
            } else if t.name.ends_with(LORA_B) {
                vec![0.0; n]
            } else if t.shape.len() >= 2 {
                let std = if t.name.ends_with("c_proj.weight") {
                    residual_std
                } else {
                    0.02
                };
                (0..n).map(|_| (rng.normal() * std) as f32).collect()
            } else if t.name.contains(".ln_") && t.name.ends_with(".weight") {
                vec![1.0; n]
            } else {
                vec![0.0; n]
            };
            NamedTensor {
                name: t.name.clone(),
                shape: t.shape.clone(),
                values,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Config;

    #[test]
    fn init_follows_gpt2() {
        let cfg = Config::load("small").unwrap();
        let p = Program::new(&cfg);
        let params = init_params(&p, 42);
        let get = |n: &str| params.iter().find(|t| t.name == n).unwrap();
        let std = |v: &[f32]| {
            (v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        assert!((std(&get("transformer.wte.weight").values) - 0.02).abs() < 0.001);
        let proj = std(&get("transformer.h.0.mlp.c_proj.weight").values);
        assert!((proj - 0.02 / 6f64.sqrt()).abs() < 0.001, "{proj}");
        assert!(
            get("transformer.h.1.ln_2.weight")
                .values
                .iter()
                .all(|&x| x == 1.0)
        );
        assert!(
            get("transformer.ln_f.weight")
                .values
                .iter()
                .all(|&x| x == 1.0)
        );
        assert!(
            get("transformer.h.2.attn.c_attn.bias")
                .values
                .iter()
                .all(|&x| x == 0.0)
        );
        assert_eq!(init_params(&p, 42), params);
        assert_ne!(init_params(&p, 43), params);
    }
}
