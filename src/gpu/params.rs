//! The kernels' uniform blocks as Rust types: each `#[repr(C)]` struct
//! mirrors the WGSL struct of the same name field by field, so the plan
//! fills named fields instead of positional word lists. A test parses every
//! shader with naga and checks each mirror against its WGSL struct: the same
//! field names, in the same order, at the same byte offsets, the same size.

use bytemuck::{Pod, Zeroable};

/// A Rust mirror of a WGSL struct: where the struct is and the Rust
/// fields' names and offsets (for the layout test).
pub trait WgslMirror: Pod {
    /// The WGSL struct's name.
    const WGSL_NAME: &'static str;
    /// (field name, byte offset) in declaration order.
    const FIELDS: &'static [(&'static str, usize)];

    /// The bytes a uniform buffer gets.
    fn bytes(&self) -> Vec<u8> {
        bytemuck::bytes_of(self).to_vec()
    }
}

macro_rules! mirror {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
        pub struct $name {
            $(pub $field: $ty,)*
        }

        impl WgslMirror for $name {
            const WGSL_NAME: &'static str = stringify!($name);
            const FIELDS: &'static [(&'static str, usize)] =
                &[$((stringify!($field), std::mem::offset_of!($name, $field)),)*];
        }
    };
}

mirror!(
    /// matmul.wgsl: C (M, N) = A · B in one of three layouts; `flags` bit 0
    /// accumulates into C, bit 1 adds the bias; split-K in `splits` pieces.
    MatmulParams {
        m: u32,
        k: u32,
        n: u32,
        flags: u32,
        alpha: f32,
        k_split: u32,
        splits: u32,
        _pad0: u32,
    }
);

mirror!(
    /// elementwise.wgsl: `n` elements; dropout's stream and probability;
    /// `write` bit 0: the backward writes `dst` outright instead of adding
    /// to it, bit 1 the same for accumulate2's `y`.
    EwParams {
        n: u32,
        stream: u32,
        p: f32,
        write: u32,
    }
);

mirror!(
    /// layernorm.wgsl (and the bias gradients' column sums).
    LnParams {
        rows: u32,
        c: u32,
        chunks: u32,
        part_stride: u32,
        part_offset: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
);

mirror!(
    /// embedding.wgsl.
    EmbParams {
        rows: u32,
        t: u32,
        c: u32,
        _pad0: u32,
    }
);

mirror!(
    /// cross_entropy.wgsl.
    CeParams {
        rows: u32,
        vocab: u32,
        _pad0: u32,
        _pad1: u32,
    }
);

mirror!(
    /// common.wgsl: one attention layer (attention.wgsl, attention_probs.wgsl).
    AttnParams {
        b: u32,
        t: u32,
        c: u32,
        h: u32,
        d: u32,
        stream: u32,
        p: f32,
        scale: f32,
    }
);

mirror!(
    /// adamw.wgsl: one flat chunk of the optimizer.
    OptParams {
        n: u32,
        offset: u32,
        first_group: u32,
        growth_interval: u32,
    }
);

mirror!(
    /// attention_probs.wgsl: the probe's batch row and positions.
    ProbeWindow {
        row: u32,
        n: u32,
        pad0: u32,
        pad1: u32,
    }
);

mirror!(
    /// common.wgsl: what changes per step (the learning rate, AdamW's bias
    /// corrections, dropout's seed, training or evaluating).
    StepUniform {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        bias_correction1: f32,
        bias_correction2: f32,
        grad_clip: f32,
        dropout_seed: u32,
        training: u32,
        decay_end: u32,
        n_rows: u32,
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::kernels::{SHADERS, full_source};
    use wgpu::naga;

    /// Every WGSL struct of every shader file, by name: (members' names and
    /// offsets, size).
    fn wgsl_structs() -> std::collections::HashMap<String, (Vec<(String, u32)>, u32)> {
        let mut out = std::collections::HashMap::new();
        for file in SHADERS {
            let source = full_source(file, 16, Default::default());
            let module = naga::front::wgsl::parse_str(&source)
                .unwrap_or_else(|e| panic!("{}: {}", file.name, e.emit_to_string(&source)));
            for (_, ty) in module.types.iter() {
                if let (Some(name), naga::TypeInner::Struct { members, span }) =
                    (&ty.name, &ty.inner)
                {
                    let fields = members
                        .iter()
                        .map(|m| (m.name.clone().unwrap_or_default(), m.offset))
                        .collect();
                    out.insert(name.clone(), (fields, *span));
                }
            }
        }
        out
    }

    fn check<T: WgslMirror>(
        structs: &std::collections::HashMap<String, (Vec<(String, u32)>, u32)>,
    ) {
        let (fields, size) = structs
            .get(T::WGSL_NAME)
            .unwrap_or_else(|| panic!("no WGSL struct {}", T::WGSL_NAME));
        let ours: Vec<(String, u32)> = T::FIELDS
            .iter()
            .map(|(n, o)| (n.to_string(), *o as u32))
            .collect();
        assert_eq!(&ours, fields, "{}: fields and offsets", T::WGSL_NAME);
        assert_eq!(
            std::mem::size_of::<T>() as u32,
            *size,
            "{}: size",
            T::WGSL_NAME
        );
    }

    #[test]
    fn every_mirror_matches_its_wgsl_struct() {
        let structs = wgsl_structs();
        check::<MatmulParams>(&structs);
        check::<EwParams>(&structs);
        check::<LnParams>(&structs);
        check::<EmbParams>(&structs);
        check::<CeParams>(&structs);
        check::<AttnParams>(&structs);
        check::<OptParams>(&structs);
        check::<ProbeWindow>(&structs);
        check::<StepUniform>(&structs);
    }
}
