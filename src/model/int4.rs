//! 4-bit weights for sharing (issue 36): block-wise symmetric quantisation
//! in the shape of GGUF's Q4_0, blocks of [`BLOCK`] values along the
//! flattened tensor, one f16 scale per block, two values per byte.
//!
//! A block's scale is `d = max|x| / 7`; each value is stored as
//! `q = round(x / d)`, an integer from −7 to 7, kept as the nibble `q + 8`
//! (the low nibble of byte i is value 2i, the high nibble value 2i + 1).
//! It reads back as `(nibble − 8) · d`, within `d / 2` of the value written
//! (plus the scale's own f16 rounding). The last block is padded with zeros.

use half::f16;

/// Values per block (one scale each).
pub const BLOCK: usize = 64;

/// A tensor in 4 bits: the nibbles, two per byte, and one scale per block.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantised {
    /// `blocks × BLOCK / 2` bytes.
    pub nibbles: Vec<u8>,
    /// One per block.
    pub scales: Vec<f16>,
}

/// Blocks needed for `numel` values.
pub fn blocks(numel: usize) -> usize {
    numel.div_ceil(BLOCK)
}

/// Quantises `values` (finite) block by block.
pub fn quantise(values: &[f32]) -> Quantised {
    let n = blocks(values.len());
    let mut nibbles = vec![0u8; n * BLOCK / 2];
    let mut scales = Vec::with_capacity(n);
    for (b, block) in values.chunks(BLOCK).enumerate() {
        let amax = block.iter().fold(0f32, |m, x| m.max(x.abs()));
        let d = f16::from_f32(amax / 7.0);
        let inv = if d.to_f32() > 0.0 {
            1.0 / d.to_f32()
        } else {
            0.0
        };
        for (i, &x) in block.iter().enumerate() {
            let q = (x * inv).round().clamp(-7.0, 7.0) as i8;
            let nibble = (q + 8) as u8;
            let byte = &mut nibbles[b * BLOCK / 2 + i / 2];
            *byte |= if i % 2 == 0 { nibble } else { nibble << 4 };
        }
        // Padding reads back as zero: nibble 8.
        for i in block.len()..BLOCK {
            let byte = &mut nibbles[b * BLOCK / 2 + i / 2];
            *byte |= if i % 2 == 0 { 8 } else { 8 << 4 };
        }
        scales.push(d);
    }
    Quantised { nibbles, scales }
}

/// The `numel` values `q` stands for; None when its sizes do not fit.
pub fn dequantise(q: &Quantised, numel: usize) -> Option<Vec<f32>> {
    dequantise_blocks(q, numel, BLOCK)
}

/// [`dequantise`] with blocks of `block` (even) values: the original
/// TinyGPT's int4 files name their block size ([`super::original`]). None
/// as well for a block size of 0, odd, or whose sizes overflow.
pub fn dequantise_blocks(q: &Quantised, numel: usize, block: usize) -> Option<Vec<f32>> {
    if block == 0 || block % 2 != 0 {
        return None;
    }
    let n = numel.div_ceil(block);
    if q.scales.len() != n || Some(q.nibbles.len()) != n.checked_mul(block / 2) {
        return None;
    }
    Some(
        (0..numel)
            .map(|i| {
                // Blocks are whole bytes (`block` is even): value i is
                // nibble i of the tensor.
                let byte = q.nibbles[i / 2];
                let nibble = if i % 2 == 0 { byte & 0x0f } else { byte >> 4 };
                (nibble as i8 - 8) as f32 * q.scales[i / block].to_f32()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_within_half_a_step_of_their_block() {
        // A ragged tensor: two full blocks and a short one, mixed scales.
        let values: Vec<f32> = (0..150)
            .map(|i| (i as f32 * 0.37).sin() * if i < 64 { 0.02 } else { 3.0 })
            .collect();
        let q = quantise(&values);
        assert_eq!((q.scales.len(), q.nibbles.len()), (3, 96));
        let back = dequantise(&q, values.len()).unwrap();
        for (i, (x, y)) in values.iter().zip(&back).enumerate() {
            let d = q.scales[i / BLOCK].to_f32();
            assert!(
                (x - y).abs() <= d / 2.0 + 1e-3 * d,
                "{i}: {x} vs {y} (step {d})"
            );
        }
        // The largest of a block is its scale times 7, to f16's rounding.
        let amax = values[..64].iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!((q.scales[0].to_f32() * 7.0 - amax).abs() < amax * 1e-3);
    }

    #[test]
    fn zeros_and_exact_steps_survive_and_bad_sizes_are_refused() {
        let mut values = vec![0.0f32; 64];
        values[3] = 7.0;
        values[4] = -3.0;
        let q = quantise(&values);
        assert_eq!(dequantise(&q, 64).unwrap(), values);
        let q = quantise(&[0.0; 10]);
        assert_eq!(dequantise(&q, 10).unwrap(), vec![0.0; 10]);
        assert!(dequantise(&q, 65).is_none());
        // Block sizes a file may name: 0, odd, or overflowing (issue 56).
        assert!(dequantise_blocks(&q, 10, 0).is_none());
        assert!(dequantise_blocks(&q, 10, 63).is_none());
        assert!(dequantise_blocks(&q, usize::MAX, usize::MAX - 1).is_none());
    }
}
