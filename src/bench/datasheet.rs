//! The hardware's own peaks, from the vendor's datasheet, for the adapters
//! we know: the roof a reader expects on a roofline, beside the one our own
//! kernels measured ([`super::Ceilings`]). Dense (no sparsity) figures at
//! boost clock; an adapter not listed has none, and the roofline says so.

use serde::{Deserialize, Serialize};

/// One GPU's datasheet peaks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Datasheet {
    /// The part, as the datasheet names it.
    pub part: String,
    /// FP32 on the CUDA cores (not the tensor cores), TFLOP/s.
    pub f32_tflops: f64,
    /// FP16 and BF16 on the tensor cores, dense, TFLOP/s.
    pub f16_tensor_tflops: f64,
    /// Device-memory bandwidth, GB/s.
    pub memory_gbps: f64,
    /// Where the figures come from.
    pub source: String,
}

impl Datasheet {
    /// The datasheet's f32 roof at `intensity` FLOP per byte, GFLOP/s:
    /// min(f32 peak, intensity × memory bandwidth).
    pub fn f32_roof_gflops(&self, intensity: f64) -> f64 {
        (self.f32_tflops * 1e3).min(intensity * self.memory_gbps)
    }
}

/// (what the adapter's name contains, all lowercase; part, f32, f16 tensor,
/// GB/s, source). The first match wins, so the more specific come first.
const PARTS: &[(&[&str], &str, f64, f64, f64, &str)] = &[
    (&["h100", "pcie"], "NVIDIA H100 PCIe", 51.2, 756.0, 2000.0, "NVIDIA H100 Tensor Core GPU datasheet"),
    (&["h100", "nvl"], "NVIDIA H100 NVL", 60.0, 835.0, 3900.0, "NVIDIA H100 Tensor Core GPU datasheet"),
    (&["h100"], "NVIDIA H100 SXM5", 66.9, 989.4, 3350.0, "NVIDIA H100 Tensor Core GPU datasheet"),
    (&["h200"], "NVIDIA H200 SXM", 66.9, 989.4, 4800.0, "NVIDIA H200 Tensor Core GPU datasheet"),
    (&["a100", "80gb"], "NVIDIA A100 80GB SXM", 19.5, 312.0, 2039.0, "NVIDIA A100 Tensor Core GPU datasheet"),
    (&["a100"], "NVIDIA A100 40GB", 19.5, 312.0, 1555.0, "NVIDIA A100 Tensor Core GPU datasheet"),
];

/// The datasheet of the adapter whose description is `device` (its name as
/// wgpu reports it, e.g. `NVIDIA H100 80GB HBM3`), where we know it.
pub fn for_adapter(device: &str) -> Option<Datasheet> {
    let name = device.to_lowercase();
    PARTS
        .iter()
        .find(|(words, ..)| words.iter().all(|w| name.contains(w)))
        .map(|&(_, part, f32_tflops, f16_tensor_tflops, memory_gbps, source)| Datasheet {
            part: part.into(),
            f32_tflops,
            f16_tensor_tflops,
            memory_gbps,
            source: source.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapters_we_run_on_are_told_apart() {
        let sxm = for_adapter("gpu (NVIDIA H100 80GB HBM3 (Vulkan, DiscreteGpu))").unwrap();
        assert_eq!(sxm.part, "NVIDIA H100 SXM5");
        assert_eq!(for_adapter("NVIDIA H100 PCIe").unwrap().part, "NVIDIA H100 PCIe");
        assert_eq!(for_adapter("NVIDIA H200").unwrap().memory_gbps, 4800.0);
        assert_eq!(for_adapter("llvmpipe (LLVM 15.0.7, 256 bits)"), None);
        assert_eq!(for_adapter("cpu (f32, rayon, 2 threads)"), None);
        // Past the ridge (20 FLOP/byte on the H100) the roof is flat.
        assert_eq!(sxm.f32_roof_gflops(100.0), 66_900.0);
        assert_eq!(sxm.f32_roof_gflops(1.0), 3350.0);
    }
}
