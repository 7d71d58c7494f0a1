//! The tensor cores from WGSL (issue 51's first step): whether the device
//! has cooperative matrices with f16 operands and f32 accumulation
//! (wgpu's experimental `EXPERIMENTAL_COOPERATIVE_MATRIX` with
//! `SHADER_F16`, Vulkan's `VK_KHR_cooperative_matrix`; no browser, and no
//! software adapter, has them), and a matmul on them
//! (`shaders/coop_matmul.wgsl`) that `tinygpt bench --matmul` times beside
//! the f32 kernels and checks against the CPU; and the training's matmuls
//! on them (`shaders/matmul_coop.wgsl`, `--precision mixed`). f32 is the
//! default and the reference.

use half::f16;
use std::fmt::Write;
use wgpu::util::DeviceExt;

/// The device features the kernel needs.
pub const FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX.union(wgpu::Features::SHADER_F16);

/// The training's tensor-core matmuls ([`crate::gpu::matmul_tiles::MatmulChoice::Coop`]):
/// matmul.wgsl's layouts and bindings, f16 operands staged from the f32
/// tensors, f32 accumulation.
pub const TRAINING_SOURCE: &str = include_str!("../../shaders/matmul_coop.wgsl");

/// Entry points of [`TRAINING_SOURCE`]'s element build: `A·Bᵀ`, `A·B`, `Aᵀ·B`.
pub const TRAINING_ENTRIES: [&str; 3] = ["matmul_coop_nt", "matmul_coop_nn", "matmul_coop_tn"];

/// Entry points of its vec4 build (operands whose contiguous sizes are
/// multiples of 4: [`vec4_fits`]).
pub const TRAINING_ENTRIES_VEC4: [&str; 3] = ["matmul_coop4_nt", "matmul_coop4_nn", "matmul_coop4_tn"];

/// The builds of [`TRAINING_ENTRIES`] and [`TRAINING_ENTRIES_VEC4`] for the
/// products that accumulate into C without split-K (the activations'
/// gradients, dX += dout·W): their epilogue loads what C holds before it
/// stores (matmul_coop.wgsl's `accumulate_tile`).
pub const TRAINING_ENTRIES_ACC: [&str; 3] = ["matmul_coop_acc_nt", "matmul_coop_acc_nn", "matmul_coop_acc_tn"];
pub const TRAINING_ENTRIES_VEC4_ACC: [&str; 3] = ["matmul_coop4_acc_nt", "matmul_coop4_acc_nn", "matmul_coop4_acc_tn"];

/// The accumulating build of a tensor-core entry point (None for any other).
pub fn accumulating_entry(entry: &str) -> Option<&'static str> {
    let i = |list: [&str; 3]| list.iter().position(|e| *e == entry);
    i(TRAINING_ENTRIES)
        .map(|i| TRAINING_ENTRIES_ACC[i])
        .or_else(|| i(TRAINING_ENTRIES_VEC4).map(|i| TRAINING_ENTRIES_VEC4_ACC[i]))
}

/// The entry point of a build: element or vec4, plain or accumulating, of
/// one layout.
pub fn training_entry(vec4: bool, accumulating: bool, layout: super::matmul_tiles::Layout) -> &'static str {
    let entries = match (vec4, accumulating) {
        (false, false) => TRAINING_ENTRIES,
        (true, false) => TRAINING_ENTRIES_VEC4,
        (false, true) => TRAINING_ENTRIES_ACC,
        (true, true) => TRAINING_ENTRIES_VEC4_ACC,
    };
    entries[layout.index()]
}

/// Whether a kernel of the step's plan runs on the tensor cores (f16
/// operands, f32 accumulation): one of the matmul's builds
/// ([`training_entry`]) or attention's products ([`ATTENTION_ENTRIES`]).
pub fn on_tensor_cores(kernel: &str) -> bool {
    [TRAINING_ENTRIES, TRAINING_ENTRIES_VEC4, TRAINING_ENTRIES_ACC, TRAINING_ENTRIES_VEC4_ACC]
        .iter()
        .any(|list| list.contains(&kernel))
        || ATTENTION_ENTRIES[..3].contains(&kernel)
}

/// Whether the vec4 build takes an M×K×N product in `layout`: every
/// operand's contiguous side a multiple of 4 (A·Bᵀ: K; A·B: K and N;
/// Aᵀ·B: M and N), so its rows start 16-byte aligned.
pub fn vec4_fits(layout: super::matmul_tiles::Layout, [m, k, n]: [usize; 3]) -> bool {
    use super::matmul_tiles::Layout;
    match layout {
        Layout::Nt => k % 4 == 0,
        Layout::Nn => k % 4 == 0 && n % 4 == 0,
        Layout::Tn => m % 4 == 0 && n % 4 == 0,
    }
}

/// One configuration of [`TRAINING_SOURCE`] (a template): a 128×128 block
/// of C computed by `sg_m × sg_n` subgroups of 32 lanes, each a `tm × tn`
/// grid of 16×16 accumulator tiles, K walked `bk` at a time through one
/// stage of workgroup memory or two (double-buffered: one barrier a step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopKernel {
    /// Its name: `TINYGPT_COOP_KERNEL=NAME` compiles it (benchmarks).
    pub name: &'static str,
    pub sg_m: usize,
    pub sg_n: usize,
    pub tm: usize,
    pub tn: usize,
    pub bk: usize,
    pub stages: usize,
}

/// The configurations, the one training runs first ([`CoopKernel::current`]).
/// Measured side by side on the H200 host with three others (docs/performance.md:
/// K 16 at a time, and 4 subgroups of 4×4 tiles at K 16 and 32, lost at
/// nearly every shape of nanogpt-char's step).
pub const COOP_KERNELS: &[CoopKernel] = &[
    // 8 subgroups of 2×4 tiles (32×64), K 32 at a time, one stage.
    CoopKernel { name: "s1", sg_m: 4, sg_n: 2, tm: 2, tn: 4, bk: 32, stages: 1 },
    // The same, double-buffered: the step's time within the spread of s1's,
    // with 48 KiB of workgroup memory against 28.
    CoopKernel { name: "d2", sg_m: 4, sg_n: 2, tm: 2, tn: 4, bk: 32, stages: 2 },
];

impl CoopKernel {
    /// The configuration this process compiles: `TINYGPT_COOP_KERNEL`'s
    /// (an unknown name is said once and ignored), else the first.
    pub fn current() -> &'static CoopKernel {
        static CHOSEN: std::sync::OnceLock<&'static CoopKernel> = std::sync::OnceLock::new();
        CHOSEN.get_or_init(|| match std::env::var("TINYGPT_COOP_KERNEL") {
            Ok(name) if !name.is_empty() => COOP_KERNELS.iter().find(|k| k.name == name).unwrap_or_else(|| {
                let names: Vec<&str> = COOP_KERNELS.iter().map(|k| k.name).collect();
                eprintln!(
                    "TINYGPT_COOP_KERNEL={name} is not a tensor-core kernel; using {} (the others: {})",
                    COOP_KERNELS[0].name,
                    names.join(", ")
                );
                &COOP_KERNELS[0]
            }),
            _ => &COOP_KERNELS[0],
        })
    }

    pub fn threads(&self) -> usize {
        32 * self.sg_m * self.sg_n
    }

    /// Halves one stage of one operand's block takes: 128 rows of BK + 8,
    /// or BK rows of 136.
    fn stage_halves(&self) -> usize {
        (128 * (self.bk + 8)).max(self.bk * 136)
    }

    /// Workgroup memory: A's and B's staged blocks (f16), one 16×16 f32
    /// tile a subgroup.
    pub fn workgroup_bytes(&self) -> u32 {
        (2 * self.stages * self.stage_halves() * 2 + self.sg_m * self.sg_n * 256 * 4) as u32
    }

    /// Why the configuration cannot work, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let fail = |why: &str| Err(format!("tensor-core kernel {}: {why}", self.name));
        if self.sg_m * self.tm * 16 != 128 || self.sg_n * self.tn * 16 != 128 {
            return fail("the subgroups' tiles do not cover a 128×128 block");
        }
        if self.bk % 16 != 0 || !(1..=2).contains(&self.stages) {
            return fail("BK must be a multiple of 16, and the stages 1 or 2");
        }
        if (128 * self.bk / 4) % self.threads() != 0 {
            return fail("the threads do not share the block's vec4 loads evenly");
        }
        Ok(())
    }

    /// [`TRAINING_SOURCE`] filled in for this configuration (without the
    /// layout's and build's placeholders).
    fn source(&self) -> String {
        let (tm, tn) = (self.tm, self.tn);
        let loads = 128 * self.bk / 4 / self.threads();
        let mut accumulators = String::new();
        let mut epilogue = String::new();
        for i in 0..tm {
            for j in 0..tn {
                let _ = writeln!(accumulators, "    var c_{i}_{j} = coop_mat16x16<f32, C>();");
                let _ = writeln!(
                    epilogue,
                    "    emit_tile(c_{i}_{j}, so, lane, row0 + wr + {}u, col0 + wc + {}u, z);",
                    16 * i,
                    16 * j
                );
            }
        }
        let mut multiply = String::new();
        for kk in (0..self.bk).step_by(16) {
            let _ = writeln!(multiply, "        {{");
            for i in 0..tm {
                let _ = writeln!(multiply, "            let a{i} = a_tile(base, wr + {}u, {kk}u);", 16 * i);
            }
            for j in 0..tn {
                let _ = writeln!(multiply, "            let b{j} = b_tile(base, {kk}u, wc + {}u);", 16 * j);
            }
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(multiply, "            c_{i}_{j} = coopMultiplyAdd(a{i}, b{j}, c_{i}_{j});");
                }
            }
            let _ = writeln!(multiply, "        }}");
        }
        let k_loop = if self.stages == 1 {
            format!(
                "    let base = 0u;\n    for (var k0 = k_begin; k0 < k_end; k0 += BK) {{\n        workgroupBarrier();\n        \
                 stage_step(tid, row0, col0, k0, k0 + BK, k_end, base, &fetched);\n        workgroupBarrier();\n{multiply}    }}"
            )
        } else {
            format!(
                "    stage_step(tid, row0, col0, k_begin, k_begin + BK, k_end, 0u, &fetched);\n    workgroupBarrier();\n    \
                 var base = 0u;\n    for (var k0 = k_begin; k0 < k_end; k0 += BK) {{\n{multiply}        \
                 // The next block into the other stage while the others multiply this one.\n        \
                 let k_next = k0 + BK;\n        if (k_next < k_end) {{\n            \
                 stage_step(tid, row0, col0, k_next, k_next + BK, k_end, STAGE - base, &fetched);\n        }}\n        \
                 workgroupBarrier();\n        base = STAGE - base;\n    }}"
            )
        };
        let mut fields = String::new();
        let mut calls = Vec::new();
        let mut puts = String::new();
        for operand in ["a", "b"] {
            let origin = if operand == "a" { "row0" } else { "col0" };
            for i in 0..loads {
                let _ = writeln!(fields, "    {operand}{i}: vec4<f32>,");
                calls.push(format!("        fetch_{operand}({i}u, tid, {origin}, k0, k_end)"));
                let _ = writeln!(puts, "    put_{operand}({i}u, tid, f.{operand}{i}, base);");
            }
        }
        TRAINING_SOURCE
            .replace("{{BK}}", &self.bk.to_string())
            .replace("{{THREADS}}", &self.threads().to_string())
            .replace("{{SG_N}}", &self.sg_n.to_string())
            .replace("{{WM}}", &(16 * tm).to_string())
            .replace("{{WN}}", &(16 * tn).to_string())
            .replace("{{STAGE}}", &self.stage_halves().to_string())
            .replace("{{STAGED}}", &(self.stages * self.stage_halves()).to_string())
            .replace("{{CS}}", &(self.sg_m * self.sg_n * 256).to_string())
            .replace("{{FETCHED_FIELDS}}", fields.trim_end())
            .replace("{{FETCH_CALLS}}", &calls.join(",\n"))
            .replace("{{PUT_CALLS}}", puts.trim_end())
            .replace("{{ACCUMULATORS}}", accumulators.trim_end())
            .replace("{{K_LOOP}}", &k_loop)
            .replace("{{EPILOGUE}}", epilogue.trim_end())
    }
}

/// [`TRAINING_SOURCE`] as compiled: the extensions it needs enabled first,
/// then the common declarations; the element build or the vec4 one, plain
/// or accumulating, of one layout (its entry point is [`training_entry`]'s),
/// in the configuration [`CoopKernel::current`].
pub fn training_source(
    head_dim: usize,
    lab: crate::model::config::Lab,
    vec4: bool,
    accumulating: bool,
    layout: super::matmul_tiles::Layout,
) -> String {
    training_source_of(CoopKernel::current(), head_dim, lab, vec4, accumulating, layout)
}

/// [`training_source`] in configuration `kernel`.
pub fn training_source_of(
    kernel: &CoopKernel,
    head_dim: usize,
    lab: crate::model::config::Lab,
    vec4: bool,
    accumulating: bool,
    layout: super::matmul_tiles::Layout,
) -> String {
    let entry = training_entry(vec4, accumulating, layout);
    let (operand, accessors) = if vec4 {
        (
            "vec4<f32>",
            "fn a1(i: u32) -> f32 { return a[i / 4u][i % 4u]; }\n\
             fn b1(i: u32) -> f32 { return b[i / 4u][i % 4u]; }\n\
             fn a4(i: u32) -> vec4<f32> { return a[i]; }\n\
             fn b4(i: u32) -> vec4<f32> { return b[i]; }",
        )
    } else {
        (
            "f32",
            "fn a1(i: u32) -> f32 { return a[i]; }\n\
             fn b1(i: u32) -> f32 { return b[i]; }\n\
             fn a4(i: u32) -> vec4<f32> { return vec4<f32>(a[4u * i], a[4u * i + 1u], a[4u * i + 2u], a[4u * i + 3u]); }\n\
             fn b4(i: u32) -> vec4<f32> { return vec4<f32>(b[4u * i], b[4u * i + 1u], b[4u * i + 2u], b[4u * i + 3u]); }",
        )
    };
    let source = kernel
        .source()
        .replace("{{VEC4}}", &vec4.to_string())
        .replace("{{ACCUMULATING}}", &accumulating.to_string())
        .replace("{{FORM}}", &format!("{}u", layout.index()))
        .replace("{{OPERAND}}", operand)
        .replace("{{ENTRY}}", entry)
        .replace("{{ACCESSORS}}", accessors);
    format!(
        "enable f16;\nenable wgpu_cooperative_matrix;\n{}",
        super::kernels::with_common(&source, head_dim, lab)
    )
}

/// FlashAttention-2 on the tensor cores (`shaders/attention_coop.wgsl`):
/// attention's products (S = Q·Kᵀ and P·V, and the backward's four) in f16
/// with f32 accumulation, training's
/// attention under `--precision mixed` where the head size fits
/// ([`attention_fits`]); attention.wgsl's kernels elsewhere.
pub const ATTENTION_SOURCE: &str = include_str!("../../shaders/attention_coop.wgsl");

/// Its entry points: the forward, dK/dV, dQ, and the two that copy q, k, v
/// and dO to f16 for them (into a buffer of [`attention_halves_bytes`]).
pub const ATTENTION_ENTRIES: [&str; 5] = [
    "attention_coop_forward",
    "attention_coop_dkdv",
    "attention_coop_dq",
    "attention_coop_qkv_f16",
    "attention_coop_dout_f16",
];

/// Rows of one workgroup's own side (queries, or keys for dK/dV): one
/// subgroup's 16.
pub const ATTENTION_ROWS: usize = 16;

/// Rows of padding after each f16 copy: a block of 32 rows that starts
/// before T may read 31 past it (masked, and finite: zeros here).
pub const ATTENTION_PAD_ROWS: usize = 32;

/// The f16 copies' buffer for a layer of `batch × ctx` rows of width
/// `d_model`, in bytes: q | k | v (B·T·3C) and its padding, then dO
/// (B·T·C) and its padding (from (B·T + PAD)·3C halves: the kernel's
/// `dout_at`).
pub fn attention_halves_bytes(batch: usize, ctx: usize, d_model: usize) -> u64 {
    let rows = batch * ctx + ATTENTION_PAD_ROWS;
    ((rows * 4 * d_model * 2) as u64).next_multiple_of(16)
}

/// Whether the kernel takes heads of `head_dim`: a multiple of 16 up to 64
/// (a subgroup holds its rows' tiles across D in registers, at most 4).
/// Every preset's is 16, 32 or 64.
pub fn attention_fits(head_dim: usize) -> bool {
    head_dim % 16 == 0 && (16..=64).contains(&head_dim)
}

/// Whether training's attention runs on the tensor cores: the matmuls do
/// (`--precision mixed`) and the head size fits. `TINYGPT_ATTENTION_F32=1`
/// keeps attention.wgsl's f32 kernels in a mixed run (a benchmark's
/// side-by-side).
pub fn attention_on_tensor_cores(choice: super::matmul_tiles::MatmulChoice, head_dim: usize) -> bool {
    choice.tensor_cores()
        && attention_fits(head_dim)
        && !std::env::var("TINYGPT_ATTENTION_F32").is_ok_and(|v| v == "1")
}

/// [`ATTENTION_SOURCE`] as compiled for a head size and lab: the
/// extensions first, then the common declarations.
pub fn attention_source(head_dim: usize, lab: crate::model::config::Lab) -> String {
    let source = ATTENTION_SOURCE
        .replace("{{HEAD_DIM}}", &head_dim.to_string())
        .replace("{{PAD_ROWS}}", &ATTENTION_PAD_ROWS.to_string());
    format!(
        "enable f16;\nenable wgpu_cooperative_matrix;\n{}",
        super::kernels::with_common(&source, head_dim, lab)
    )
}

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
    // The training kernel splits its workgroup into subgroups of 32 lanes.
    let info = adapter.get_info();
    if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32) {
        return Err(format!(
            "{name}'s subgroups are {}-{} lanes wide; the tensor-core kernels are written for 32",
            info.subgroup_min_size, info.subgroup_max_size
        ));
    }
    let limits = adapter.limits();
    let kernel = CoopKernel::current();
    if limits.max_compute_workgroup_storage_size < kernel.workgroup_bytes()
        || (limits.max_compute_invocations_per_workgroup as usize) < kernel.threads()
    {
        return Err(format!(
            "{name} offers {} bytes of workgroup memory and {} threads a workgroup; the tensor-core kernels need {} and {}",
            limits.max_compute_workgroup_storage_size,
            limits.max_compute_invocations_per_workgroup,
            kernel.workgroup_bytes(),
            kernel.threads()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tensor cores' training kernel as naga reads it for Vulkan, in
    /// every configuration, layout and build: it parses with f16 and
    /// cooperative matrices, validates, and its SPIR-V is written (naga
    /// 30's writer panics on a coopLoad/coopStore whose index is not bound
    /// to a `let`). No GPU here has cooperative matrices, so this is what
    /// CI can check of it; the H100 host runs it.
    #[test]
    fn the_training_kernel_validates_and_writes_spirv() {
        use wgpu::naga;
        use crate::gpu::matmul_tiles::Layout;
        let builds = [(16, false), (64, false), (16, true), (64, true)];
        for kernel in COOP_KERNELS {
            kernel.check().unwrap();
            let every = builds.into_iter().flat_map(|b| Layout::ALL.map(|l| (b, l)));
            for (((head_dim, vec4), layout), accumulating) in every.flat_map(|b| [(b, false), (b, true)]) {
                let lab = crate::model::config::Lab::default();
                let source = training_source_of(kernel, head_dim, lab, vec4, accumulating, layout);
                assert!(!source.contains("{{"), "{}: a placeholder left", kernel.name);
                let module =
                    naga::front::wgsl::parse_str(&source).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&source)));
                let caps = naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::COOPERATIVE_MATRIX;
                let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{}: {}", kernel.name, e.emit_to_string(&source)));
                let options = naga::back::spv::Options {
                    lang_version: (1, 3),
                    ..Default::default()
                };
                let words = naga::back::spv::write_vec(&module, &info, &options, None).expect("SPIR-V");
                assert!(words.len() > 1000, "{} words of SPIR-V", words.len());
                let entry = training_entry(vec4, accumulating, layout);
                let names: Vec<&str> = module.entry_points.iter().map(|e| e.name.as_str()).collect();
                assert_eq!(names, [entry]);
                assert_eq!(module.entry_points[0].workgroup_size, [kernel.threads() as u32, 1, 1]);
            }
        }
    }

    /// FlashAttention-2 on the tensor cores, at every head size it takes
    /// and with the causal mask on and off: it parses, validates, and its
    /// SPIR-V is written, with its entry points (the products' of one
    /// subgroup); and the workgroup memory it declares is small (many
    /// workgroups to an SM hide the loads' latency).
    #[test]
    fn the_attention_kernel_validates_and_writes_spirv() {
        use wgpu::naga;
        for head_dim in [16, 32, 48, 64] {
            assert!(attention_fits(head_dim));
            for causal_mask in [true, false] {
                let lab = crate::model::config::Lab { causal_mask, ..Default::default() };
                let source = attention_source(head_dim, lab);
                assert!(!source.contains("{{"), "a placeholder left");
                let module =
                    naga::front::wgsl::parse_str(&source).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&source)));
                let caps = naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::COOPERATIVE_MATRIX;
                let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("D = {head_dim}: {}", e.emit_to_string(&source)));
                let options = naga::back::spv::Options {
                    lang_version: (1, 3),
                    ..Default::default()
                };
                naga::back::spv::write_vec(&module, &info, &options, None).expect("SPIR-V");
                let mut names: Vec<&str> = module.entry_points.iter().map(|e| e.name.as_str()).collect();
                names.sort();
                let mut want = ATTENTION_ENTRIES;
                want.sort();
                assert_eq!(names, want);
                for e in &module.entry_points {
                    let products = ATTENTION_ENTRIES[..3].contains(&e.name.as_str());
                    assert_eq!(e.workgroup_size, if products { [32, 1, 1] } else { [256, 1, 1] }, "{}", e.name);
                }
                let declared: u32 = module
                    .global_variables
                    .iter()
                    .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
                    .map(|(_, g)| module.types[g.ty].inner.size(module.to_ctx()))
                    .sum();
                assert!(declared <= 8 * 1024, "D = {head_dim}: {declared} bytes of workgroup memory");
            }
        }
        assert!(!attention_fits(8) && !attention_fits(24) && !attention_fits(128));
        // The step-through and the walk say these ran in f16; the copies did not.
        assert!(ATTENTION_ENTRIES[..3].iter().all(|e| on_tensor_cores(e)));
        assert!(!ATTENTION_ENTRIES[3..].iter().any(|e| on_tensor_cores(e)));
    }

    /// Every tensor-core build has an accumulating twin of the same layout
    /// and kind, on the tensor cores too; nothing else has one.
    #[test]
    fn each_build_has_its_accumulating_twin() {
        use crate::gpu::matmul_tiles::Layout;
        for layout in Layout::ALL {
            for vec4 in [false, true] {
                let (plain, acc) = (training_entry(vec4, false, layout), training_entry(vec4, true, layout));
                assert_eq!(accumulating_entry(plain), Some(acc));
                assert_eq!(accumulating_entry(acc), None);
                assert!(on_tensor_cores(plain) && on_tensor_cores(acc));
            }
        }
        assert_eq!(accumulating_entry("matmul_nn_w128"), None);
    }

    /// The workgroup memory a configuration's source declares is what
    /// [`CoopKernel::workgroup_bytes`] says (adapter_support checks the
    /// device's limit against it).
    #[test]
    fn its_workgroup_memory_is_what_the_source_declares() {
        for kernel in COOP_KERNELS {
            let source = kernel.source();
            let declared: u32 = ["As: array<f16, ", "Bs: array<f16, ", "Cs: array<f32, "]
                .iter()
                .map(|decl| {
                    let at = source.find(decl).expect(decl) + decl.len();
                    let count: u32 = source[at..].split('>').next().unwrap().parse().unwrap();
                    count * if decl.contains("f16") { 2 } else { 4 }
                })
                .sum();
            assert_eq!(declared, kernel.workgroup_bytes(), "{}", kernel.name);
        }
    }

    /// Names are unique (`TINYGPT_COOP_KERNEL` picks by name).
    #[test]
    fn the_configurations_have_names_of_their_own() {
        let mut names: Vec<&str> = COOP_KERNELS.iter().map(|k| k.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), COOP_KERNELS.len());
    }
}
