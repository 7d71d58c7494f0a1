//! The WGSL kernels of `shaders/`: their bind-group layouts (declared here,
//! next to the binding lists in each file's header) and compute pipelines.
//!
//! Modules are created without runtime bounds checks, as Bevy creates them:
//! every kernel guards its own edges, and the parity tests run at shapes that
//! are not multiples of any tile. (Checked modules cost up to 40× on
//! dynamically indexed private arrays: see `docs/performance.md`.)

use crate::model::config::Lab;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

/// How a binding is declared in WGSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// `var<storage, read>`
    Ro,
    /// `var<storage, read_write>`
    Rw,
    /// `var<uniform>`
    Uniform,
}

use Slot::{Ro, Rw, Uniform};

/// One WGSL file: its source, bindings in order, and entry points.
pub struct ShaderFile {
    pub name: &'static str,
    pub source: &'static str,
    pub slots: &'static [Slot],
    pub entries: &'static [&'static str],
}

const COMMON: &str = include_str!("../../shaders/common.wgsl");

/// Bindings of one shader file, at most (checked below, when compiling).
pub const MAX_BINDINGS: usize = 9;

pub use crate::flash::format::ATTENTION_TILE;

/// The attention entry points that have a traced pipeline too (the
/// override `TRACE` = true; see attention.wgsl's header), and its name.
/// Built on the first trace ([`Kernels::build_traced`]), not with the rest,
/// or warmed one a frame before it ([`Kernels::want_traced`]).
pub const TRACED: &[(&str, &str)] = &[
    ("attention_forward", "attention_forward_traced"),
    ("attention_backward_dkdv", "attention_backward_dkdv_traced"),
    ("attention_backward_dq", "attention_backward_dq_traced"),
];

pub const SHADERS: &[ShaderFile] = &[
    ShaderFile {
        name: "matmul",
        source: include_str!("../../shaders/matmul.wgsl"),
        // a, b, c, bias, params
        slots: &[Ro, Ro, Rw, Ro, Uniform],
        entries: &["matmul_nt", "matmul_nn", "matmul_tn", "matmul_split_reduce"],
    },
    ShaderFile {
        name: "elementwise",
        source: include_str!("../../shaders/elementwise.wgsl"),
        // dst, x, y, ew, step
        slots: &[Rw, Ro, Rw, Uniform, Uniform],
        entries: &[
            "gelu_forward",
            "gelu_backward",
            "residual_forward",
            "accumulate2",
            "accumulate",
            "dropout_forward",
            "dropout_backward",
        ],
    },
    ShaderFile {
        name: "layernorm",
        source: include_str!("../../shaders/layernorm.wgsl"),
        // inp, gain, out, mean, rstd, g, part, ln
        slots: &[Ro, Ro, Rw, Rw, Rw, Ro, Rw, Uniform],
        entries: &[
            "layernorm_forward",
            "layernorm_backward_dx",
            "layernorm_backward_part",
            "layernorm_params_final",
            "bias_grad_part",
            "column_sums_final",
            "layernorm_params_direct",
            "bias_grad_direct",
        ],
    },
    ShaderFile {
        name: "embedding",
        source: include_str!("../../shaders/embedding.wgsl"),
        // tokens, wte, wpe, act, order, offsets, e
        slots: &[Ro, Rw, Rw, Rw, Ro, Ro, Uniform],
        entries: &[
            "embedding_forward",
            "embedding_backward_wpe",
            "embedding_backward_wte",
        ],
    },
    ShaderFile {
        name: "cross_entropy",
        source: include_str!("../../shaders/cross_entropy.wgsl"),
        // logits, targets, losses, dlogits, stats, ce
        slots: &[Ro, Ro, Rw, Rw, Rw, Uniform],
        entries: &[
            "cross_entropy_forward",
            "cross_entropy_backward",
            "loss_mean",
        ],
    },
    ShaderFile {
        name: "attention",
        source: include_str!("../../shaders/attention.wgsl"),
        // qkv, out, lse, dout, dqkv, delta, at, step, trace
        slots: &[Ro, Rw, Rw, Ro, Rw, Rw, Uniform, Uniform, Rw],
        entries: &[
            "attention_forward",
            "attention_forward_rows",
            "attention_backward_delta",
            "attention_backward_dkdv",
            "attention_backward_dq",
            "attention_backward_dq_rows",
            "attention_backward_dkdv_blocks",
            "attention_backward_dq_blocks",
        ],
    },
    ShaderFile {
        name: "attention_probs",
        source: include_str!("../../shaders/attention_probs.wgsl"),
        // qkv, lse, probs, at, win
        slots: &[Ro, Ro, Rw, Uniform, Uniform],
        entries: &["attention_probs"],
    },
    ShaderFile {
        name: "adamw",
        source: include_str!("../../shaders/adamw.wgsl"),
        // params, grads, m, v, stats, partials, op, step, scaler
        slots: &[Rw, Rw, Rw, Rw, Rw, Rw, Uniform, Uniform, Rw],
        entries: &["sum_squares_partial", "grad_norm_final", "adamw_update"],
    },
];

/// Attention's dims per lane for a head size: ceil(D / TILE).
pub fn attention_dims_per_lane(head_dim: usize) -> usize {
    head_dim.div_ceil(ATTENTION_TILE).max(1)
}

/// Queries per workgroup of `attention_forward_rows` (`ROWS_Q`), one per thread.
pub const ATTENTION_ROWS: usize = 64;

/// Keys per shared block of `attention_forward_rows` (`KB`): 32, fewer where
/// a block of K and V rows would pass 16 KiB.
pub fn attention_rows_keys(head_dim: usize) -> usize {
    (512 / head_dim.div_ceil(4).max(1)).clamp(1, 32)
}

/// Workgroup memory the 16×16-tile attention kernels need for a head size,
/// in bytes: two tiles of TILE rows of D + 1 floats, two TILE×TILE score tiles.
pub fn attention_workgroup_bytes(head_dim: usize) -> u64 {
    let tile = ATTENTION_TILE;
    let dmax = tile * attention_dims_per_lane(head_dim);
    ((2 * tile * (dmax + 1) + 2 * tile * tile) * 4) as u64
}

/// Workgroup memory of `attention_forward_rows`: a block of K and of V rows.
pub fn attention_rows_workgroup_bytes(head_dim: usize) -> u64 {
    (2 * attention_rows_keys(head_dim) * head_dim.div_ceil(4).max(1) * 16) as u64
}

/// Keys per workgroup of `attention_backward_dkdv_blocks` (`KEYS_B`).
pub const ATTENTION_DKDV_KEYS: usize = 32;

/// Workgroup memory of `attention_backward_dkdv_blocks` for a head size, in
/// bytes: KEYS_B rows of K and of V, QUERIES_B (16) rows of Q and of dO, each
/// row ceil(D / 4) + 1 vec4s; and the block's P and dS (KEYS_B × 16 floats).
/// 30 208 at D = 64: more than WebGPU's guaranteed 16 KiB, so
/// [`attention_dkdv_entry`] picks the 16×16-tile kernel where it does not fit.
pub fn attention_dkdv_blocks_bytes(head_dim: usize) -> u64 {
    let row4 = head_dim.div_ceil(4).max(1) + 1;
    let (keys, queries) = (ATTENTION_DKDV_KEYS, 16);
    ((2 * keys + 2 * queries) * row4 * 16 + 2 * keys * queries * 4) as u64
}

/// Training's dK/dV kernel on a device with this much workgroup memory, and
/// the keys each of its workgroups takes: `attention_backward_dkdv_blocks`
/// where its blocks fit, else `attention_backward_dkdv` (the 16×16-tile
/// kernel, the one the FlashAttention trace replays). The same function.
pub fn attention_dkdv_entry(head_dim: usize, workgroup_bytes: u32) -> (&'static str, usize) {
    if attention_dkdv_blocks_bytes(head_dim) <= workgroup_bytes as u64 {
        ("attention_backward_dkdv_blocks", ATTENTION_DKDV_KEYS)
    } else {
        ("attention_backward_dkdv", ATTENTION_TILE)
    }
}

/// Queries per workgroup of `attention_backward_dq_blocks` (`QUERIES_Q`).
pub const ATTENTION_DQ_QUERIES: usize = 32;

/// Workgroup memory of `attention_backward_dq_blocks` for a head size, in
/// bytes: QUERIES_Q rows of Q and of dO, KEYS_Q (16) rows of K and of V, each
/// row ceil(D / 4) + 1 vec4s; and the block's dS (QUERIES_Q × 16 floats).
pub fn attention_dq_blocks_bytes(head_dim: usize) -> u64 {
    let row4 = head_dim.div_ceil(4).max(1) + 1;
    let (queries, keys) = (ATTENTION_DQ_QUERIES, 16);
    ((2 * queries + 2 * keys) * row4 * 16 + queries * keys * 4) as u64
}

/// Query rows (B·H·T) from which `attention_backward_dq_rows` beats the
/// blocked dQ: measured on the H200 host (bench/attention-h200.sh), the
/// blocked kernel took 0.040 against 0.078 ms at small (3 072 rows) and
/// 0.21 against 0.32 at xl (8 192), the row kernel 3.18 against 4.01 at
/// nanogpt-char (98 304), whose 1 536 workgroups of 64 threads fill the GPU.
/// The line sits between the last two, not measured closer.
pub const ATTENTION_DQ_ROWS_FROM: usize = 32_768;

/// Training's dQ kernel on a device with this much workgroup memory, for
/// `query_rows` (B·H·T) rows, and the queries each of its workgroups takes:
/// `attention_backward_dq_blocks` where its blocks fit and the rows are
/// fewer than [`ATTENTION_DQ_ROWS_FROM`], else `attention_backward_dq_rows`.
/// The same function.
pub fn attention_dq_entry(head_dim: usize, workgroup_bytes: u32, query_rows: usize) -> (&'static str, usize) {
    if attention_dq_blocks_bytes(head_dim) <= workgroup_bytes as u64 && query_rows < ATTENTION_DQ_ROWS_FROM {
        ("attention_backward_dq_blocks", ATTENTION_DQ_QUERIES)
    } else {
        ("attention_backward_dq_rows", ATTENTION_ROWS)
    }
}

/// The full WGSL source of a file as compiled for a model with this head
/// size and lab switches (common declarations first, templates filled in).
pub fn full_source(file: &ShaderFile, head_dim: usize, lab: Lab) -> String {
    with_common(file.source, head_dim, lab)
}

/// `source` after common.wgsl, the templates filled in.
pub(crate) fn with_common(source: &str, head_dim: usize, lab: Lab) -> String {
    format!("{COMMON}\n{source}")
        .replace("{{DPL}}", &attention_dims_per_lane(head_dim).to_string())
        .replace("{{TILE}}", &ATTENTION_TILE.to_string())
        .replace("{{DV4}}", &head_dim.div_ceil(4).max(1).to_string())
        .replace("{{KB}}", &attention_rows_keys(head_dim).to_string())
        .replace("{{CAUSAL}}", &lab.causal_mask.to_string())
        .replace("{{POSITIONS}}", &lab.position_embeddings.to_string())
}

/// The kernels of one head size and set of lab switches on one device: each
/// file's bind-group layout at once, and each entry point's pipeline when it
/// is first needed ([`Kernels::pipeline`]) or warmed ([`Kernels::warm_next`]).
///
/// A pipeline is compiled lazily because compiling is slow where the GPU is
/// software (SwiftShader in a browser: 0.7-2.4 s a matmul), and in a page it
/// happens in the browser's GPU process, which draws nothing meanwhile: the
/// app compiles the ones a backend will run one per frame instead of all in
/// one go ([`crate::gpu::GpuContext::kernels`] shares them between the
/// backends of a device).
pub struct Kernels {
    device: wgpu::Device,
    layouts: HashMap<&'static str, wgpu::BindGroupLayout>,
    /// Each file's pipeline layout, by file (as `SHADERS`).
    pipeline_layouts: Vec<wgpu::PipelineLayout>,
    /// The shader modules: one per file, and one per warp-tiled matmul
    /// configuration (which shares matmul.wgsl's layout).
    modules: Vec<wgpu::ShaderModule>,
    /// Every entry point: its file, its module, its pipeline once compiled.
    entries: HashMap<&'static str, Entry>,
    /// The file with traced entries and its module (indices), for
    /// [`Kernels::build_traced`].
    traced_from: Option<(usize, usize)>,
    /// The traced pipelines ([`TRACED`]), by the entry point they trace,
    /// once compiled.
    traced: HashMap<&'static str, OnceLock<wgpu::ComputePipeline>>,
    /// Entry points a backend will run, not warmed yet, in the order asked;
    /// `true` for an entry's traced pipeline.
    wanted: Mutex<VecDeque<(&'static str, bool)>>,
}

/// One entry point of [`Kernels`].
struct Entry {
    file: usize,
    module: usize,
    pipeline: OnceLock<wgpu::ComputePipeline>,
}

/// One compute pipeline of `module`; `trace` sets the override `TRACE`.
fn pipeline(
    device: &wgpu::Device,
    layout: &wgpu::PipelineLayout,
    module: &wgpu::ShaderModule,
    entry: &str,
    name: &str,
    trace: bool,
) -> wgpu::ComputePipeline {
    let constants: &[(&str, f64)] = if trace { &[("TRACE", 1.0)] } else { &[] };
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&format!("tinygpt:pipeline:{name}")),
        layout: Some(layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            // Every kernel writes workgroup memory before reading it.
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    })
}

/// A shader module of trusted WGSL (no runtime bounds checks).
fn trusted_module(device: &wgpu::Device, name: &str, source: String) -> wgpu::ShaderModule {
    // SAFETY: every kernel bounds-checks its own indices (see each file's
    // header; the tiled matmul's template guards every global access); the
    // parity tests exercise ragged shapes.
    // wgpu 30 added guards on integer `/` and `%` (a zero divisor,
    // `i32::MIN / -1`) to what `unchecked` turns off; wgpu 29 always kept
    // them, and the kernels divide by uniform sizes: they stay on.
    let mut checks = wgpu::ShaderRuntimeChecks::unchecked();
    checks.int_div_checks = true;
    unsafe {
        device.create_shader_module_trusted(
            wgpu::ShaderModuleDescriptor {
                label: Some(&format!("tinygpt:shader:{name}")),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            },
            checks,
        )
    }
}

impl Kernels {
    /// Every kernel for models with this head size and lab switches,
    /// compiled now (the benchmarks of single kernels).
    pub fn new(device: &wgpu::Device, head_dim: usize, lab: Lab) -> Self {
        let kernels = Self::lazy(device, head_dim, lab);
        for entry in kernels.entries.keys() {
            kernels.pipeline(entry);
        }
        kernels
    }

    /// The layouts and shader modules for this head size and lab switches;
    /// no pipeline is compiled yet.
    pub fn lazy(device: &wgpu::Device, head_dim: usize, lab: Lab) -> Self {
        let mut layouts = HashMap::new();
        let mut pipeline_layouts = Vec::new();
        let mut modules = Vec::new();
        let mut entries = HashMap::new();
        let mut traced_from = None;
        for (file_index, file) in SHADERS.iter().enumerate() {
            let slots: Vec<wgpu::BindGroupLayoutEntry> = file
                .slots
                .iter()
                .enumerate()
                .map(|(i, slot)| wgpu::BindGroupLayoutEntry {
                    binding: i as u32,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: match slot {
                        Uniform => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Uniform,
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        s => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage {
                                read_only: *s == Ro,
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                    },
                    count: None,
                })
                .collect();
            let label = format!("tinygpt:layout:{}", file.name);
            let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&label),
                entries: &slots,
            });
            pipeline_layouts.push(
                device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(&label),
                    bind_group_layouts: &[Some(&layout)],
                    immediate_size: 0,
                }),
            );
            let mut add = |shader: wgpu::ShaderModule, names: &[&'static str]| {
                let module = modules.len();
                modules.push(shader);
                for &entry in names {
                    entries.insert(
                        entry,
                        Entry {
                            file: file_index,
                            module,
                            pipeline: OnceLock::new(),
                        },
                    );
                }
                module
            };
            let source = full_source(file, head_dim, lab);
            let module = add(trusted_module(device, file.name, source), file.entries);
            if TRACED.iter().any(|(e, _)| file.entries.contains(e)) {
                traced_from = Some((file_index, module));
            }
            if file.name == "matmul" {
                // The warp-tiled configurations share matmul.wgsl's bindings.
                for tile in super::matmul_tiles::usable(&device.limits()) {
                    let source = with_common(&tile.source(), head_dim, lab);
                    let name = format!("matmul_{}", tile.name);
                    add(trusted_module(device, &name, source), &tile.entries);
                }
                // The tensor cores' kernel, where the device was opened
                // with them (its source enables what others lack).
                if device.features().contains(super::coop::FEATURES) {
                    for (vec4, accumulating) in [(false, false), (true, false), (false, true), (true, true)] {
                        for layout in super::matmul_tiles::Layout::ALL {
                            let entry = super::coop::training_entry(vec4, accumulating, layout);
                            let source = super::coop::training_source(head_dim, lab, vec4, accumulating, layout);
                            add(trusted_module(device, entry, source), std::slice::from_ref(&entry));
                        }
                    }
                }
            }
            if file.name == "attention"
                && device.features().contains(super::coop::FEATURES)
                && super::coop::attention_fits(head_dim)
            {
                // FlashAttention-2 on the tensor cores: attention.wgsl's bindings.
                let source = super::coop::attention_source(head_dim, lab);
                add(trusted_module(device, "attention_coop", source), &super::coop::ATTENTION_ENTRIES);
            }
            layouts.insert(file.name, layout);
        }
        Self {
            device: device.clone(),
            layouts,
            pipeline_layouts,
            modules,
            entries,
            traced_from,
            traced: TRACED.iter().map(|&(e, _)| (e, OnceLock::new())).collect(),
            wanted: Mutex::new(VecDeque::new()),
        }
    }

    /// The pipeline of `entry`, compiled now if it was not yet.
    pub fn pipeline(&self, entry: &str) -> &wgpu::ComputePipeline {
        let (&name, e) = self
            .entries
            .get_key_value(entry)
            .unwrap_or_else(|| panic!("no kernel `{entry}`"));
        e.pipeline.get_or_init(|| {
            pipeline(
                &self.device,
                &self.pipeline_layouts[e.file],
                &self.modules[e.module],
                name,
                name,
                false,
            )
        })
    }

    /// How many pipelines are compiled, of how many entry points.
    pub fn compiled(&self) -> (usize, usize) {
        let done = self.entries.values().filter(|e| e.pipeline.get().is_some());
        (done.count(), self.entries.len())
    }

    /// Notes the entry points a backend runs, in its order, for
    /// [`Kernels::warm_next`].
    pub fn want<'a>(&self, entries: impl IntoIterator<Item = &'a str>) {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries {
            if let Some((&name, e)) = self.entries.get_key_value(entry)
                && e.pipeline.get().is_none()
                && !wanted.contains(&(name, false))
            {
                wanted.push_back((name, false));
            }
        }
    }

    /// Notes the traced pipelines ([`TRACED`]) for [`Kernels::warm_next`],
    /// where this device has them.
    pub fn want_traced(&self) {
        if self.traced_from.is_none() {
            return;
        }
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        for (&entry, pipeline) in &self.traced {
            if pipeline.get().is_none() && !wanted.contains(&(entry, true)) {
                wanted.push_back((entry, true));
            }
        }
    }

    /// Whether every pipeline asked for ([`Kernels::want`],
    /// [`Kernels::want_traced`]) is compiled.
    pub fn all_warm(&self) -> bool {
        let wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        wanted
            .iter()
            .all(|&(entry, traced)| self.is_compiled(entry, traced))
    }

    /// Whether `entry`'s pipeline is compiled.
    pub fn is_warm(&self, entry: &str) -> bool {
        self.is_compiled(entry, false)
    }

    fn is_compiled(&self, entry: &str, traced: bool) -> bool {
        if traced {
            self.traced[entry].get().is_some()
        } else {
            self.entries[entry].pipeline.get().is_some()
        }
    }

    /// Compiles the next wanted pipeline not compiled yet; false when none
    /// is left (every kernel a backend asked for is ready).
    pub fn warm_next(&self) -> bool {
        loop {
            let next = self
                .wanted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            match next {
                None => return false,
                Some((entry, traced)) if self.is_compiled(entry, traced) => continue,
                Some((entry, true)) => {
                    self.traced_pipeline(entry);
                    return true;
                }
                Some((entry, false)) => {
                    self.pipeline(entry);
                    return true;
                }
            }
        }
    }

    /// The traced pipeline of `entry` (one of [`TRACED`]), compiled now if
    /// it was not yet.
    fn traced_pipeline(&self, entry: &str) -> &wgpu::ComputePipeline {
        let (file, module) = self.traced_from.expect("attention.wgsl has traced entries");
        let &(entry, name) = TRACED
            .iter()
            .find(|(e, _)| *e == entry)
            .unwrap_or_else(|| panic!("no traced kernel `{entry}`"));
        self.traced[entry].get_or_init(|| {
            pipeline(
                &self.device,
                &self.pipeline_layouts[file],
                &self.modules[module],
                entry,
                name,
                true,
            )
        })
    }

    /// The traced pipelines ([`TRACED`]), by the entry point they trace:
    /// the same module and layout as the training pipelines, with `TRACE` on
    /// (those not warmed yet compiled now).
    pub fn build_traced(&self) -> HashMap<&'static str, wgpu::ComputePipeline> {
        TRACED
            .iter()
            .map(|&(entry, _)| (entry, self.traced_pipeline(entry).clone()))
            .collect()
    }

    pub fn layout_of(&self, entry: &str) -> &wgpu::BindGroupLayout {
        &self.layouts[SHADERS[self.entries[entry].file].name]
    }

    pub fn slots_of(&self, entry: &str) -> &'static [Slot] {
        SHADERS[self.entries[entry].file].slots
    }
}

const _: () = {
    let mut i = 0;
    while i < SHADERS.len() {
        assert!(SHADERS[i].slots.len() <= MAX_BINDINGS, "raise MAX_BINDINGS");
        i += 1;
    }
};
