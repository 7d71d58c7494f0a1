//! The warp-tiled matmul's configurations and the WGSL written for each
//! (`shaders/matmul_tiled.wgsl` is the template), and which kernel a matmul
//! of a given shape runs: a warp-tiled configuration, or matmul.wgsl's flat
//! 64×64 kernel.
//!
//! A configuration cuts a workgroup's BM×BN tile of C into warps of WM×WN,
//! each warp's part into WMITER×WNITER sub-tiles, and gives each of a
//! sub-tile's 32 lanes TM rows × 4 columns (see the template's header). The
//! generator writes the per-thread code out: one named `vec4` accumulator
//! per (sub-tile, row), the fragment loads and the multiply-adds of one k.

use crate::model::config::VOCAB;
use crate::program::{Op, Program};
use std::fmt::Write;

/// The matmul layouts, in the order of [`TileConfig::entries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `C = A·Bᵀ`, A (M, K), B (N, K): the linear forward.
    Nt,
    /// `C = A·B`, A (M, K), B (K, N): dinp = dout · W.
    Nn,
    /// `C = Aᵀ·B`, A (K, M), B (K, N): dW = doutᵀ · inp.
    Tn,
}

impl Layout {
    pub const ALL: [Layout; 3] = [Layout::Nt, Layout::Nn, Layout::Tn];

    pub fn index(self) -> usize {
        self as usize
    }

    /// `A·Bᵀ`, `A·B` or `Aᵀ·B`.
    pub fn formula(self) -> &'static str {
        ["A·Bᵀ", "A·B", "Aᵀ·B"][self.index()]
    }

    /// matmul.wgsl's (flat) entry point for this layout.
    pub fn flat_entry(self) -> &'static str {
        ["matmul_nt", "matmul_nn", "matmul_tn"][self.index()]
    }
}

/// Every matmul of a training step of `program` (forward, dinp, dW of each
/// linear and of the tied head): its layout and [M, K, N].
pub fn matmul_shapes(program: &Program) -> Vec<(Layout, [usize; 3])> {
    let rows = program.rows();
    let c = program.config.d_model;
    program
        .ops
        .iter()
        .flat_map(|node| {
            let (i, o) = match node.op {
                Op::Linear {
                    in_features,
                    out_features,
                    ..
                } => (in_features, out_features),
                Op::TiedHead { .. } => (c, VOCAB),
                // See Planner::lowrank_forward and lowrank_backward.
                Op::LowRank {
                    rank: r,
                    in_features: i,
                    out_features: o,
                    ..
                } => {
                    return vec![
                        (Layout::Nt, [rows, i, r]),
                        (Layout::Nt, [rows, r, o]),
                        (Layout::Tn, [o, rows, r]),
                        (Layout::Nn, [rows, o, r]),
                        (Layout::Tn, [r, rows, i]),
                        (Layout::Nn, [rows, r, i]),
                    ];
                }
                _ => return vec![],
            };
            vec![
                (Layout::Nt, [rows, i, o]),
                (Layout::Nn, [rows, o, i]),
                (Layout::Tn, [o, rows, i]),
            ]
        })
        .collect()
}

/// One warp-tiled matmul configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig {
    /// Its name: `TINYGPT_MATMUL_TILE=NAME` forces it (benchmarks).
    pub name: &'static str,
    /// Entry points: `A·Bᵀ`, `A·B`, `Aᵀ·B` (matmul.wgsl's layouts).
    pub entries: [&'static str; 3],
    pub threads: usize,
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub wm: usize,
    pub wn: usize,
    pub wmiter: usize,
    pub wniter: usize,
    pub tm: usize,
    /// The k loop over a shared tile written out BK times (naga emits loops
    /// with no unroll hint; the driver may or may not unroll them).
    pub unroll: bool,
}

macro_rules! tile {
    ($name:literal, threads $t:literal, $bm:literal x $bn:literal x $bk:literal,
     warp $wm:literal x $wn:literal, iter $wmi:literal x $wni:literal, tm $tm:literal,
     unroll $unroll:literal) => {
        TileConfig {
            name: $name,
            entries: [
                concat!("matmul_nt_", $name),
                concat!("matmul_nn_", $name),
                concat!("matmul_tn_", $name),
            ],
            threads: $t,
            bm: $bm,
            bn: $bn,
            bk: $bk,
            wm: $wm,
            wn: $wn,
            wmiter: $wmi,
            wniter: $wni,
            tm: $tm,
            unroll: $unroll,
        }
    };
}

/// The tensor-core kernel (`shaders/matmul_coop.wgsl`, [`MatmulChoice::Coop`]):
/// 128×128 blocks of C, K 32 at a time, 8 subgroups of 2×4 16×16 tiles;
/// [`COOP4`] where the operands take vec4 loads, this (element by element)
/// elsewhere. Not in [`TILES`]: its source is its own file, compiled only
/// on a device with the tensor cores.
pub const COOP4: TileConfig = TileConfig {
    name: "coop4",
    entries: crate::gpu::coop::TRAINING_ENTRIES_VEC4,
    ..COOP
};

pub const COOP: TileConfig = TileConfig {
    name: "coop",
    entries: crate::gpu::coop::TRAINING_ENTRIES,
    threads: 256,
    bm: 128,
    bn: 128,
    bk: 32,
    wm: 32,
    wn: 64,
    wmiter: 2,
    wniter: 4,
    tm: 16,
    unroll: false,
};

/// Whether a mixed-precision step runs an M×K×N product on the tensor
/// cores ([`COOP`]), or keeps f32's kernel for it: where every side is at
/// least 128 (a whole 128×128 block of C, and four of its K steps). Measured
/// on the H200 host in whole steps, the shipped kernel with every product on
/// the tensor cores against this rule's predecessor (docs/performance.md,
/// 2026-12-01): every product on them wins from medium (whose sides are all
/// at least 128) to nanogpt-char (mega 19.0 → 15.1 ms, massive 17.5 → 12.4)
/// and loses at small (1.80 → 2.01), whose every product has a side of 96;
/// this rule takes the first where they win and f32's kernel at small.
/// ([`MatmulChoice::CoopEverywhere`] puts every product on them.)
pub fn coop_pays(m: usize, k: usize, n: usize) -> bool {
    m.min(k).min(n) >= 128
}

/// The configurations compiled, largest tile first.
pub const TILES: &[TileConfig] = &[
    // 8 warps of 64×32 (sub-tiles 64×16), 8×8 outputs per lane: the large
    // shapes (nanogpt-char's 16384-row forward and dinp, long-K dW)
    tile!("w128", threads 256, 128 x 128 x 16, warp 64 x 32, iter 1 x 2, tm 8, unroll true),
    // 4 warps of 32×32 (sub-tiles 32×16), 4×8 per lane: the rest
    tile!("w64", threads 128, 64 x 64 x 16, warp 32 x 32, iter 1 x 2, tm 4, unroll true),
];

impl TileConfig {
    fn warps_n(&self) -> usize {
        self.bn / self.wn
    }
    fn sub_m(&self) -> usize {
        self.wm / self.wmiter
    }
    fn sub_n(&self) -> usize {
        self.wn / self.wniter
    }
    fn lanes_n(&self) -> usize {
        self.sub_n() / 4
    }
    /// Global-load vec4s per thread per K step, of A and of B.
    fn loads(&self) -> (usize, usize) {
        (
            self.bk * self.bm / 4 / self.threads,
            self.bk * self.bn / 4 / self.threads,
        )
    }

    /// Why the configuration cannot work, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let warps = (self.bm / self.wm) * (self.bn / self.wn);
        let lanes = (self.sub_m() / self.tm) * self.lanes_n();
        let fail = |why: &str| Err(format!("matmul tile {}: {why}", self.name));
        if self.bm % self.wm != 0 || self.bn % self.wn != 0 {
            return fail("warps do not tile the block");
        }
        if warps * 32 != self.threads {
            return fail("threads are not 32 per warp");
        }
        if self.wm % self.wmiter != 0 || self.wn % self.wniter != 0 || self.sub_n() % 4 != 0 {
            return fail("sub-tiles do not tile the warp");
        }
        if self.tm % 4 != 0 || self.sub_m() % self.tm != 0 || lanes != 32 {
            return fail("a sub-tile is not 32 lanes of TM×4");
        }
        if (self.bk * self.bm / 4) % self.threads != 0
            || (self.bk * self.bn / 4) % self.threads != 0
        {
            return fail("the threads do not share the tile loads evenly");
        }
        // split-K cuts K into multiples of 16 (plan::split_k)
        if 16 % self.bk != 0 {
            return fail("BK must divide 16");
        }
        Ok(())
    }

    /// Workgroup memory, bytes.
    pub fn workgroup_bytes(&self) -> usize {
        self.bk * (self.bm / 4 + 1 + self.bn / 4 + 1) * 16
    }

    /// The WGSL of this configuration (without common.wgsl).
    pub fn source(&self) -> String {
        let (la, lb) = self.loads();
        let t = self.threads;
        let mut accumulators = String::new();
        let mut epilogue = String::new();
        let mut multiply = String::new();
        for wm in 0..self.wmiter {
            for r in 0..self.tm {
                for wn in 0..self.wniter {
                    let acc = format!("acc_{wm}_{r}_{wn}");
                    let _ = writeln!(accumulators, "    var {acc} = vec4<f32>(0.0);");
                    let _ = writeln!(
                        epilogue,
                        "    store_row(row0 + {}u, col0 + {}u, {acc}, wg.z);",
                        wm * self.sub_m() + r,
                        wn * self.sub_n()
                    );
                }
            }
        }
        let ind = "            ";
        for wm in 0..self.wmiter {
            for i in 0..self.tm / 4 {
                let _ = writeln!(
                    multiply,
                    "{ind}let a{wm}_{i} = As[ar + {}u];",
                    wm * self.sub_m() / 4 + i
                );
            }
        }
        for wn in 0..self.wniter {
            let _ = writeln!(
                multiply,
                "{ind}let b{wn} = Bs[br + {}u];",
                wn * self.sub_n() / 4
            );
        }
        for wm in 0..self.wmiter {
            for r in 0..self.tm {
                let lane = ["x", "y", "z", "w"][r % 4];
                for wn in 0..self.wniter {
                    let _ = writeln!(
                        multiply,
                        "{ind}acc_{wm}_{r}_{wn} += a{wm}_{}.{lane} * b{wn};",
                        r / 4
                    );
                }
            }
        }
        let k_loop = if self.unroll {
            let mut out = String::new();
            for kk in 0..self.bk {
                let _ = writeln!(
                    out,
                    "        {{\n            let ar = {}u * SA + a_base;\n            let br = {}u * SB + b_base;\n{multiply}        }}",
                    kk, kk
                );
            }
            out
        } else {
            format!(
                "        for (var kk = 0u; kk < BK; kk++) {{\n            let ar = kk * SA + a_base;\n            let br = kk * SB + b_base;\n{multiply}        }}\n"
            )
        };
        let mut prefetch = String::new();
        let mut to_shared = String::new();
        let mut next = String::new();
        for (name, count) in [("a", la), ("b", lb)] {
            let origin = if name == "a" { "m0" } else { "n0" };
            for s in 0..count {
                let idx = format!("tid + {}u", s * t);
                let _ = writeln!(
                    prefetch,
                    "    var l{name}{s} = load_{name}(form, {origin}, k_begin, {idx});"
                );
                let upper = name.to_uppercase();
                let _ = writeln!(
                    to_shared,
                    "        {upper}s[slot_{name}(form, {idx})] = l{name}{s};"
                );
                let _ = writeln!(
                    next,
                    "            l{name}{s} = load_{name}(form, {origin}, k0 + BK, {idx});"
                );
            }
        }
        let sa = self.bm / 4 + 1;
        let sb = self.bn / 4 + 1;
        include_str!("../../shaders/matmul_tiled.wgsl")
            .replace("{{NAME}}", self.name)
            .replace("{{THREADS}}", &t.to_string())
            .replace("{{BM}}", &self.bm.to_string())
            .replace("{{BN}}", &self.bn.to_string())
            .replace("{{BK}}", &self.bk.to_string())
            .replace("{{SA}}", &sa.to_string())
            .replace("{{SB}}", &sb.to_string())
            .replace("{{AS_LEN}}", &(self.bk * sa).to_string())
            .replace("{{BS_LEN}}", &(self.bk * sb).to_string())
            .replace("{{WARPS_N}}", &self.warps_n().to_string())
            .replace("{{WM4}}", &(self.wm / 4).to_string())
            .replace("{{WN4}}", &(self.wn / 4).to_string())
            .replace("{{TM4}}", &(self.tm / 4).to_string())
            .replace("{{LANES_N}}", &self.lanes_n().to_string())
            .replace("{{ACCUMULATORS}}", accumulators.trim_end())
            .replace("{{PREFETCH}}", prefetch.trim_end())
            .replace("{{TO_SHARED}}", to_shared.trim_end())
            .replace("{{PREFETCH_NEXT}}", next.trim_end())
            .replace("{{K_LOOP}}", k_loop.trim_end())
            .replace("{{EPILOGUE}}", epilogue.trim_end())
    }
}

impl TileConfig {
    /// Whether a device with these limits runs it.
    pub fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.workgroup_bytes() <= limits.max_compute_workgroup_storage_size as usize
            && self.threads <= limits.max_compute_invocations_per_workgroup as usize
            && self.threads <= limits.max_compute_workgroup_size_x as usize
    }
}

/// The configurations a device with these limits runs.
pub fn usable(limits: &wgpu::Limits) -> impl Iterator<Item = &'static TileConfig> + '_ {
    TILES.iter().filter(|t| t.fits(limits))
}

/// Which kernel the matmuls run: chosen by shape ([`tile_for`]), or one
/// kernel for every shape (benchmarks, and the tests of each configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulChoice {
    #[default]
    ByShape,
    /// matmul.wgsl's flat 64×64 kernel.
    Flat,
    Tile(&'static TileConfig),
    /// The tensor cores ([`COOP`]; `--precision mixed`) for every matmul
    /// where they pay ([`coop_pays`]), f32's kernel by shape elsewhere.
    Coop,
    /// The tensor cores for every matmul (the tests, and benchmarks with
    /// `TINYGPT_COOP_EVERYWHERE=1`).
    CoopEverywhere,
}

impl MatmulChoice {
    /// Whether the matmuls run on the tensor cores (mixed precision).
    pub fn tensor_cores(self) -> bool {
        matches!(self, MatmulChoice::Coop | MatmulChoice::CoopEverywhere)
    }
}

impl MatmulChoice {
    /// From `TINYGPT_MATMUL_TILE` (`auto`, `flat` or a configuration's
    /// name; unset: by shape). An unknown name is refused in one line.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("TINYGPT_MATMUL_TILE").as_deref() {
            Err(_) | Ok("") | Ok("auto") => Ok(Self::ByShape),
            Ok("flat") => Ok(Self::Flat),
            Ok(name) => TILES
                .iter()
                .find(|t| t.name == name)
                .map(Self::Tile)
                .ok_or_else(|| {
                    let names: Vec<&str> = TILES.iter().map(|t| t.name).collect();
                    format!(
                        "TINYGPT_MATMUL_TILE={name} is not a matmul kernel; use auto, flat or one of {}",
                        names.join(", ")
                    )
                }),
        }
    }
}

/// The kernel for an M×K×N matmul in `layout`: a warp-tiled configuration,
/// or `None` for matmul.wgsl's flat 64×64 kernel. By shape, as measured
/// on the H100 host at every matmul of seven presets (docs/performance.md):
/// the 128×128 tile where the output has at least 256 of them (two waves
/// of 132 SMs, nearly) or K is very long (dW at nanogpt-char's 16384 rows,
/// which split-K spreads); the flat kernel for the split-K layouts `A·B`
/// and `Aᵀ·B` at smaller shapes; the 64×64 warp tile otherwise. A
/// configuration the device cannot run falls back to the flat kernel.
pub fn tile_for(
    m: usize,
    k: usize,
    n: usize,
    layout: Layout,
    choice: MatmulChoice,
    limits: &wgpu::Limits,
) -> Option<&'static TileConfig> {
    let usable = |name: &str| usable(limits).find(|t| t.name == name);
    match choice {
        MatmulChoice::Flat => None,
        MatmulChoice::Coop if !coop_pays(m, k, n) => tile_for(m, k, n, layout, MatmulChoice::ByShape, limits),
        MatmulChoice::Coop | MatmulChoice::CoopEverywhere => {
            Some(if crate::gpu::coop::vec4_fits(layout, [m, k, n]) { &COOP4 } else { &COOP })
        }
        MatmulChoice::Tile(t) => Some(t).filter(|t| t.fits(limits)),
        MatmulChoice::ByShape => {
            if m.div_ceil(128) * n.div_ceil(128) >= 256 || k >= 8192 {
                if let Some(t) = usable("w128") {
                    return Some(t);
                }
            }
            if layout != Layout::Nt && split_k_for((64, 64), m, k, n).0 > 1 {
                return None;
            }
            usable("w64")
        }
    }
}

/// [`super::split_k`] for a kernel whose workgroups compute `tile` = (rows,
/// columns) of C: K cut until the grid has about 256 workgroups (at most 264
/// for the 128×128 tile).
pub fn split_k_for(tile: (usize, usize), m: usize, k: usize, n: usize) -> (usize, usize) {
    let tiles = m.div_ceil(tile.0) * n.div_ceil(tile.1);
    if tiles >= 128 || k < 256 {
        return (1, k);
    }
    let want = if tile == (128, 128) {
        // At most one wave: by their registers about two of these
        // 256-thread workgroups fit an SM, and a second wave of a few leaves
        // a 132-SM GPU nearly idle (rounding up instead cost nanogpt-char
        // 3 ms a step on the H100: docs/performance.md).
        264 / tiles
    } else {
        256usize.div_ceil(tiles)
    }
    .min(k / 64)
    .max(1);
    let k_split = k.div_ceil(want).next_multiple_of(16);
    (k.div_ceil(k_split), k_split)
}

/// The output tile (rows, columns) of the kernel [`tile_for`] picks.
pub fn tile_dims(tile: Option<&TileConfig>) -> (usize, usize) {
    tile.map_or((64, 64), |t| (t.bm, t.bn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_precision_takes_the_vec4_build_where_every_contiguous_side_is_a_multiple_of_4() {
        let limits = wgpu::Limits::default();
        let pick = |layout, [m, k, n]: [usize; 3]| tile_for(m, k, n, layout, MatmulChoice::Coop, &limits).map(|t| t.name);
        // nanogpt-char's step: all vec4.
        assert_eq!(pick(Layout::Nt, [16384, 384, 1536]), Some("coop4"));
        assert_eq!(pick(Layout::Nn, [16384, 1536, 384]), Some("coop4"));
        assert_eq!(pick(Layout::Tn, [1536, 16384, 384]), Some("coop4"));
        // A ragged side where a layout reads along it: element by element.
        assert_eq!(pick(Layout::Nt, [16384, 258, 1536]), Some("coop"));
        assert_eq!(pick(Layout::Nn, [16384, 260, 1530]), Some("coop"));
        assert_eq!(pick(Layout::Tn, [1530, 16384, 384]), Some("coop"));
        // A side under 128 (small's 96-wide model, a LoRA rank): f32's kernel;
        // every side at least 128: the tensor cores, split-K or not.
        assert!(!coop_pays(1024, 96, 288) && !coop_pays(96, 1024, 384) && !coop_pays(4096, 512, 8));
        assert!(coop_pays(1536, 128, 128) && coop_pays(256, 16384, 384) && coop_pays(1024, 256, 768));
        assert_eq!(pick(Layout::Nt, [1024, 96, 288]), tile_for(1024, 96, 288, Layout::Nt, MatmulChoice::ByShape, &limits).map(|t| t.name));
        assert_eq!(pick(Layout::Tn, [256, 16384, 384]), Some("coop4"));
        // One split plan for both builds: 128×128 blocks.
        assert_eq!((COOP.bm, COOP.bn), (COOP4.bm, COOP4.bn));
    }

    #[test]
    fn every_configuration_is_consistent_and_fits_workgroup_memory() {
        for t in TILES {
            t.check().unwrap();
            // what browsers' WebGPU adapters commonly allow (the default is 16 KiB)
            assert!(
                t.workgroup_bytes() <= 32768,
                "{}: {} B",
                t.name,
                t.workgroup_bytes()
            );
            assert!(t.threads <= 256, "{}", t.name);
            let src = t.source();
            assert!(
                !src.contains("{{"),
                "{}: a template part left unfilled",
                t.name
            );
        }
    }

    /// The generated WGSL parses and validates (naga, as wgpu compiles it),
    /// and its `MatmulParams` is matmul.wgsl's, member for member.
    #[test]
    fn every_configuration_compiles_and_binds_what_matmul_wgsl_binds() {
        use wgpu::naga;
        let params_of = |source: &str, what: &str| {
            let module = naga::front::wgsl::parse_str(source)
                .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::empty(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(source)));
            let (_, ty) = module
                .types
                .iter()
                .find(|(_, ty)| ty.name.as_deref() == Some("MatmulParams"))
                .unwrap_or_else(|| panic!("{what}: no MatmulParams"));
            format!("{:?}", ty.inner)
        };
        let flat = crate::gpu::kernels::SHADERS
            .iter()
            .find(|f| f.name == "matmul")
            .unwrap();
        let lab = Default::default();
        let want = params_of(
            &crate::gpu::kernels::full_source(flat, 32, lab),
            "matmul.wgsl",
        );
        for t in TILES {
            let source = crate::gpu::kernels::with_common(&t.source(), 32, lab);
            assert_eq!(params_of(&source, t.name), want, "{}", t.name);
        }
    }

    #[test]
    fn the_choice_by_shape_is_the_measured_rule() {
        let limits = wgpu::Limits {
            max_compute_workgroup_storage_size: 32768,
            max_compute_invocations_per_workgroup: 256,
            max_compute_workgroup_size_x: 256,
            ..wgpu::Limits::downlevel_defaults()
        };
        let pick = |m, k, n, layout| {
            tile_for(m, k, n, layout, MatmulChoice::ByShape, &limits).map_or("flat", |t| t.name)
        };
        // nanogpt-char: 16384 rows; dW with K = 16384
        assert_eq!(pick(16384, 384, 1536, Layout::Nt), "w128");
        assert_eq!(pick(1536, 16384, 384, Layout::Tn), "w128");
        // xl: 1024 rows, C = 256: the 64×64 warp tile, or flat where split-K cuts A·B / Aᵀ·B
        assert_eq!(pick(1024, 256, 768, Layout::Nt), "w64");
        assert_eq!(pick(768, 1024, 256, Layout::Tn), "flat");
        assert_eq!(pick(1024, 256, 1024, Layout::Nn), "w64");
        // a device without 16.5 KiB of workgroup memory runs what fits
        let small = wgpu::Limits {
            max_compute_workgroup_storage_size: 16384,
            ..limits.clone()
        };
        let t = tile_for(16384, 384, 1536, Layout::Nt, MatmulChoice::ByShape, &small);
        assert_eq!(t.map(|t| t.name), Some("w64"));
        let forced = MatmulChoice::Tile(&TILES[0]);
        assert_eq!(tile_for(16384, 384, 1536, Layout::Nt, forced, &small), None);
    }
}
