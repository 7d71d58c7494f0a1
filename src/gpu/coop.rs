//! The tensor cores from WGSL (issue 51's first step): whether the device
//! has cooperative matrices with f16 operands and f32 accumulation
//! (wgpu's experimental `EXPERIMENTAL_COOPERATIVE_MATRIX` with
//! `SHADER_F16`, Vulkan's `VK_KHR_cooperative_matrix`; no browser, and no
//! software adapter, has them), and a matmul on them
//! (`shaders/coop_matmul.wgsl`) that `tinygpt bench --matmul` times beside
//! the f32 kernels and checks against the CPU. Nothing trains on it yet:
//! f32 is the default and the reference.

use half::f16;
use wgpu::util::DeviceExt;

/// The device features the kernel needs.
pub const FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX.union(wgpu::Features::SHADER_F16);

/// A workgroup's block of C (rows, columns) and K's step: the shapes the
/// kernel takes are multiples of these.
pub const BLOCK: (usize, usize, usize) = (64, 128, 16);

/// Whether `adapter` offers what the kernel needs: both features and a
/// 16×16×16 tile with f16 operands and an f32 accumulator. Err: why not,
/// in a sentence.
pub fn adapter_support(adapter: &wgpu::Adapter) -> Result<(), String> {
    let name = adapter.get_info().name;
    if !adapter.features().contains(FEATURES) {
        return Err(format!(
            "{name} has no cooperative matrices with f16 (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16: \
             Vulkan's VK_KHR_cooperative_matrix with the Vulkan memory model; no browser's WebGPU and no software \
             adapter has them), so only the f32 kernels run"
        ));
    }
    let tile = adapter.cooperative_matrix_properties().into_iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    });
    if !tile {
        return Err(format!(
            "{name} has cooperative matrices but no 16×16×16 tile with f16 operands and an f32 accumulator"
        ));
    }
    Ok(())
}

/// Why `[m, k, n]` does not fit the kernel's blocks, if it does not.
pub fn shape_fits([m, k, n]: [usize; 3]) -> Result<(), String> {
    let (bm, bn, bk) = BLOCK;
    if m == 0 || k == 0 || n == 0 || m % bm != 0 || n % bn != 0 || k % bk != 0 {
        return Err(format!(
            "{m}x{k}x{n}: the cooperative-matrix kernel takes M a multiple of {bm}, N of {bn} and K of {bk}"
        ));
    }
    Ok(())
}

/// The kernel on one device: its pipeline.
pub struct CoopMatmul {
    pipeline: wgpu::ComputePipeline,
}

/// One product's buffers on the device.
pub struct Operands {
    pub a: wgpu::Buffer,
    pub b: wgpu::Buffer,
    pub c: wgpu::Buffer,
    dims: wgpu::Buffer,
    bind: wgpu::BindGroup,
    groups: [u32; 2],
}

impl CoopMatmul {
    /// Compiles the kernel; the device must have [`FEATURES`] (see
    /// [`crate::gpu::GpuContext::tensor_cores`]).
    pub fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("coop_matmul"),
            source: wgpu::ShaderSource::Wgsl(include_str!("../../shaders/coop_matmul.wgsl").into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("coop_matmul_nn"),
            layout: None,
            module: &module,
            entry_point: Some("coop_matmul_nn"),
            compilation_options: Default::default(),
            cache: None,
        });
        Self { pipeline }
    }

    /// Uploads A (M×K) and B (K×N), rounded to f16, and a zeroed C (M×N).
    /// The shape must fit ([`shape_fits`]).
    pub fn operands(&self, device: &wgpu::Device, [m, k, n]: [usize; 3], a: &[f32], b: &[f32]) -> Operands {
        let bits = |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| f16::from_f32(x).to_bits()).collect() };
        let (a, b) = (bits(a), bits(b));
        let storage = |contents: &[u8], label: &str, extra: wgpu::BufferUsages| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE | extra,
            })
        };
        let a = storage(bytemuck::cast_slice(&a), "coop a", wgpu::BufferUsages::empty());
        let b = storage(bytemuck::cast_slice(&b), "coop b", wgpu::BufferUsages::empty());
        let c = storage(&vec![0u8; m * n * 4], "coop c", wgpu::BufferUsages::COPY_SRC);
        let dims = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("coop dims"),
            contents: bytemuck::cast_slice(&[m as u32, n as u32, k as u32, 0]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("coop bind"),
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[&a, &b, &c, &dims]
                .iter()
                .enumerate()
                .map(|(i, buf)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: buf.as_entire_binding(),
                })
                .collect::<Vec<_>>(),
        });
        let groups = [(n / BLOCK.1) as u32, (m / BLOCK.0) as u32];
        Operands {
            a,
            b,
            c,
            dims,
            bind,
            groups,
        }
    }

    /// Records `count` dispatches of C += A·B.
    pub fn record(&self, encoder: &mut wgpu::CommandEncoder, ops: &Operands, count: usize) {
        let _ = &ops.dims;
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &ops.bind, &[]);
        for _ in 0..count {
            pass.dispatch_workgroups(ops.groups[0], ops.groups[1], 1);
        }
    }
}

/// f32 values rounded to f16 and back (the operands as the tensor cores
/// read them).
pub fn through_f16(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
}
