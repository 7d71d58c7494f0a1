//! The training-speed benchmark behind `tinygpt bench`: real training steps of
//! a preset on TinyShakespeare, warm-up excluded and reported apart, the
//! median of enough steps to be stable, and the machine it ran on.

use crate::backend::Backend;
use crate::data::Corpus;
use crate::model::config::Config;
use crate::train::Trainer;
pub mod datasheet;
pub mod kernels;
pub mod report;
pub mod stepped;

use serde::{Deserialize, Serialize};
use web_time::Instant;

/// The machine a measurement was taken on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub os: String,
    pub arch: String,
}

impl Machine {
    pub fn detect() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Self {
            cpu,
            cores,
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
        }
    }
}

/// How long to measure.
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Untimed steps first (allocation, caches, shader compilation).
    pub warmup_steps: usize,
    pub min_steps: usize,
    pub max_steps: usize,
    /// Keep timing until this much time has passed (or `max_steps`).
    pub min_seconds: f64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            warmup_steps: 3,
            min_steps: 5,
            max_steps: 100,
            min_seconds: 3.0,
        }
    }
}

/// One preset on one backend.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchResult {
    pub preset: String,
    /// `cpu` or `gpu`.
    pub backend: String,
    /// What ran it: thread count, or the adapter and its graphics API.
    pub device: String,
    pub params: usize,
    pub batch: usize,
    pub ctx: usize,
    /// Building the backend: allocation (and for the GPU its shader modules).
    pub setup_ms: f64,
    /// The first training step alone (first-use costs: on the GPU, the
    /// pipelines of its kernels not compiled yet on this device).
    pub first_step_ms: f64,
    /// The remaining untimed warm-up steps, together.
    pub warmup_ms: f64,
    pub steps: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub tokens_per_s: f64,
    /// CPU median over this median, when the same run measured the CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_over_cpu: Option<f64>,
    /// How the step times were taken when not by waiting for each step
    /// (the page's GPU: its timestamps, or the wall time of a submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    pub machine: Machine,
}

/// Benchmarks `backend` (built for `config` in `setup_ms`) on training steps.
pub fn bench(
    preset: &str,
    backend_kind: &str,
    backend: Box<dyn Backend>,
    setup_ms: f64,
    opts: BenchOptions,
) -> Result<BenchResult, String> {
    bench_until(preset, backend_kind, backend, setup_ms, opts, &|| false)
}

/// [`bench`], stopping with an error between two steps once `cancelled`
/// says so (the app's Cancel button).
pub fn bench_until(
    preset: &str,
    backend_kind: &str,
    backend: Box<dyn Backend>,
    setup_ms: f64,
    opts: BenchOptions,
    cancelled: &dyn Fn() -> bool,
) -> Result<BenchResult, String> {
    let mut run = BenchRun::new(preset, backend_kind, backend, setup_ms, opts)?;
    loop {
        if run.started() && cancelled() {
            return Err("cancelled".to_string());
        }
        let ms = run.trainer.train_step().map_err(|e| e.to_string())?.ms;
        if let Some(result) = run.record(ms) {
            return Ok(result);
        }
    }
}

/// A bench in progress, one step's time at a time: the first step alone,
/// the untimed warm-up, then timed steps until [`BenchOptions`] has enough.
/// [`bench_until`] waits for each step; the page's bench
/// ([`stepped::bench_stepped`]) submits them and records their times as
/// they come back.
pub struct BenchRun {
    preset: String,
    kind: String,
    device: String,
    setup_ms: f64,
    opts: BenchOptions,
    /// The trainer on the tiny-shakespeare corpus (seed 42), without
    /// evaluations.
    pub trainer: Trainer,
    first_step_ms: Option<f64>,
    warmup_left: usize,
    warmup_ms: f64,
    times: Vec<f64>,
    timing_since: Option<Instant>,
    /// How the step times were taken, when not by waiting for each step.
    pub timing: Option<String>,
}

impl BenchRun {
    pub fn new(
        preset: &str,
        backend_kind: &str,
        backend: Box<dyn Backend>,
        setup_ms: f64,
        opts: BenchOptions,
    ) -> Result<Self, String> {
        let config = backend.program().config.clone();
        let device = backend.describe();
        let corpus = Corpus::tiny_shakespeare(config.ctx).map_err(|e| e.to_string())?;
        let mut trainer = Trainer::new(backend, corpus, 42).map_err(|e| e.to_string())?;
        // No evaluations inside the timed steps.
        trainer.config.eval_interval = 0;
        trainer.config.steps = u64::MAX;
        Ok(Self {
            preset: preset.to_string(),
            kind: backend_kind.to_string(),
            device,
            setup_ms,
            opts,
            trainer,
            first_step_ms: None,
            warmup_left: opts.warmup_steps.max(1) - 1,
            warmup_ms: 0.0,
            times: Vec::new(),
            timing_since: None,
            timing: None,
        })
    }

    /// Whether the first step has been recorded (a cancel counts from then).
    pub fn started(&self) -> bool {
        self.first_step_ms.is_some()
    }

    /// Counts a step that took `ms`; the result once enough steps are
    /// timed (at least `min_steps`, then until `min_seconds` of timing or
    /// `max_steps`).
    pub fn record(&mut self, ms: f64) -> Option<BenchResult> {
        if self.first_step_ms.is_none() {
            self.first_step_ms = Some(ms);
        } else if self.warmup_left > 0 {
            self.warmup_left -= 1;
            self.warmup_ms += ms;
        } else {
            let since = *self.timing_since.get_or_insert_with(Instant::now);
            self.times.push(ms);
            let n = self.times.len();
            let enough = n >= self.opts.min_steps
                && (n >= self.opts.max_steps
                    || since.elapsed().as_secs_f64() >= self.opts.min_seconds);
            if enough {
                return Some(self.result());
            }
        }
        None
    }

    fn result(&self) -> BenchResult {
        let config = &self.trainer.config;
        let mut times = self.times.clone();
        times.sort_by(f64::total_cmp);
        let median_ms = if times.len() % 2 == 1 {
            times[times.len() / 2]
        } else {
            (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
        };
        BenchResult {
            preset: self.preset.clone(),
            backend: self.kind.clone(),
            device: self.device.clone(),
            params: config.param_count(),
            batch: config.batch,
            ctx: config.ctx,
            setup_ms: self.setup_ms,
            first_step_ms: self.first_step_ms.unwrap_or_default(),
            warmup_ms: self.warmup_ms,
            steps: times.len(),
            median_ms,
            min_ms: times[0],
            max_ms: *times.last().expect("at least one timed step"),
            tokens_per_s: config.tokens_per_step() as f64 / (median_ms / 1e3),
            gpu_over_cpu: None,
            timing: self.timing.clone(),
            machine: Machine::detect(),
        }
    }
}

/// Convenience: the CPU backend in f32 for a config.
pub fn cpu_backend(config: &Config) -> Box<dyn Backend> {
    Box::new(crate::cpu::CpuBackend::<f32>::new(
        crate::program::Program::new(config),
    ))
}

/// Where a CPU training step's time goes: milliseconds per op family
/// (forward and backward apart) and per optimizer stage, median of `steps`.
pub fn profile_cpu_step(config: &Config, steps: usize) -> Vec<(String, f64)> {
    let mut profile = CpuProfile::new(config);
    for _ in 0..steps + 1 {
        profile.step();
    }
    profile.families()
}

/// [`profile_cpu_step`] one step at a time (the page pauses between).
pub struct CpuProfile {
    program: crate::program::Program,
    backend: crate::cpu::CpuBackend<f32>,
    corpus: Corpus,
    sampler: crate::data::BatchSampler,
    adam: crate::cpu::ops::AdamW,
    samples: std::collections::BTreeMap<String, Vec<f64>>,
}

impl CpuProfile {
    pub fn new(config: &Config) -> Self {
        let program = crate::program::Program::new(config);
        let mut backend = crate::cpu::CpuBackend::<f32>::new(program.clone());
        backend.initialize(42).expect("init matches the program");
        Self {
            program,
            backend,
            corpus: Corpus::tiny_shakespeare(config.ctx)
                .expect("TinyShakespeare is long enough for every preset"),
            sampler: crate::data::BatchSampler::new(42),
            adam: crate::cpu::ops::AdamW {
                lr: config.lr,
                beta1: config.beta1,
                beta2: config.beta2,
                eps: config.eps,
                weight_decay: config.weight_decay,
                t: 1,
            },
            samples: Default::default(),
        }
    }

    /// One training step, op by op, each family's time noted.
    pub fn step(&mut self) {
        let config = &self.program.config;
        let batch = self.sampler.next(&self.corpus, config.batch, config.ctx);
        self.backend.set_batch(&batch);
        self.backend.set_mode(true, 1);
        let mut this: std::collections::BTreeMap<String, f64> = Default::default();
        for step in &self.program.steps {
            let key = self.program.family(*step);
            let start = Instant::now();
            self.backend.run(*step, Some(self.adam));
            *this.entry(key).or_default() += start.elapsed().as_secs_f64() * 1e3;
        }
        for (k, v) in this {
            self.samples.entry(k).or_default().push(v);
        }
    }

    /// Each family's median over the steps after the first (which
    /// allocates and warms caches).
    pub fn families(self) -> Vec<(String, f64)> {
        self.samples
            .into_iter()
            .map(|(k, mut v)| {
                if v.len() > 1 {
                    v.remove(0);
                }
                v.sort_by(f64::total_cmp);
                (k, v[v.len() / 2])
            })
            .collect()
    }
}

/// One GEMM contender at one shape, in GFLOP/s.
#[derive(Clone, Debug, Serialize)]
pub struct GemmResult {
    pub layout: &'static str,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub contender: &'static str,
    pub gflops: f64,
}

/// The three matmul layouts a linear layer needs, at the shapes of `config`
/// (N = B·T rows), timed for the GEMM crate driver and the hand-written loop.
pub fn gemm_contest(config: &Config) -> Vec<GemmResult> {
    use crate::cpu::matmul::{View, gemm, handwritten_ikj};
    let n_rows = config.batch * config.ctx;
    let c = config.d_model;
    let mut rng = crate::data::rng::Rng::new(1);
    let mut rand = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32).collect() };
    let time = |f: &mut dyn FnMut()| {
        f();
        let start = Instant::now();
        let mut reps = 0;
        while reps < 3 || start.elapsed().as_secs_f64() < 0.3 {
            f();
            reps += 1;
        }
        start.elapsed().as_secs_f64() / reps as f64
    };
    let mut out = Vec::new();
    for (i, o) in [(c, 4 * c), (4 * c, c)] {
        let x = rand(n_rows * i);
        let w = rand(o * i);
        let dy = rand(n_rows * o);
        let flops = 2.0 * (n_rows * i * o) as f64;
        // forward: y (N,O) = x (N,I) · wᵀ
        let mut y = vec![0.0f32; n_rows * o];
        let s = time(&mut || {
            gemm(
                n_rows,
                i,
                o,
                1.0,
                View::rows(&x, i),
                View::transposed(&w, i),
                0.0,
                &mut y,
                o,
            )
        });
        out.push(GemmResult {
            layout: "A·Bᵀ (forward)",
            m: n_rows,
            k: i,
            n: o,
            contender: "matrixmultiply + rayon",
            gflops: flops / s / 1e9,
        });
        let wt: Vec<f32> = (0..i * o).map(|j| w[(j % o) * i + j / o]).collect(); // (I, O) row-major
        let s = time(&mut || handwritten_ikj(n_rows, i, o, &x, &wt, &mut y));
        out.push(GemmResult {
            layout: "A·B (forward, pre-transposed)",
            m: n_rows,
            k: i,
            n: o,
            contender: "hand-written i-k-j + rayon",
            gflops: flops / s / 1e9,
        });
        // dx (N,I) = dy (N,O) · w (O,I)
        let mut dx = vec![0.0f32; n_rows * i];
        let s = time(&mut || {
            gemm(
                n_rows,
                o,
                i,
                1.0,
                View::rows(&dy, o),
                View::rows(&w, i),
                0.0,
                &mut dx,
                i,
            )
        });
        out.push(GemmResult {
            layout: "A·B (dinp)",
            m: n_rows,
            k: o,
            n: i,
            contender: "matrixmultiply + rayon",
            gflops: flops / s / 1e9,
        });
        let s = time(&mut || handwritten_ikj(n_rows, o, i, &dy, &w, &mut dx));
        out.push(GemmResult {
            layout: "A·B (dinp)",
            m: n_rows,
            k: o,
            n: i,
            contender: "hand-written i-k-j + rayon",
            gflops: flops / s / 1e9,
        });
        // dw (O,I) = dyᵀ (O,N) · x (N,I)
        let mut dw = vec![0.0f32; o * i];
        let s = time(&mut || {
            gemm(
                o,
                n_rows,
                i,
                1.0,
                View::transposed(&dy, o),
                View::rows(&x, i),
                0.0,
                &mut dw,
                i,
            )
        });
        out.push(GemmResult {
            layout: "Aᵀ·B (dweight)",
            m: o,
            k: n_rows,
            n: i,
            contender: "matrixmultiply + rayon",
            gflops: flops / s / 1e9,
        });
        let dyt: Vec<f32> = (0..o * n_rows)
            .map(|j| dy[(j % n_rows) * o + j / n_rows])
            .collect();
        let s = time(&mut || handwritten_ikj(o, n_rows, i, &dyt, &x, &mut dw));
        out.push(GemmResult {
            layout: "A·B (dweight, pre-transposed)",
            m: o,
            k: n_rows,
            n: i,
            contender: "hand-written i-k-j + rayon",
            gflops: flops / s / 1e9,
        });
    }
    out
}

/// The GPU matmul kernel the backends pick for this shape, alone: TFLOP/s
/// of `C = A·Bᵀ` (the linear forward layout) at M×K×N, as a step runs it
/// (split-K and its reduce included), the best of `tries`.
pub fn gpu_matmul_tflops(
    ctx: &crate::gpu::GpuContext,
    m: usize,
    k: usize,
    n: usize,
    tries: usize,
) -> f64 {
    let kernels = crate::gpu::kernels::Kernels::new(&ctx.device, 32, Default::default());
    let tile = crate::gpu::matmul_tiles::tile_for(m, k, n, Layout::Nt, ctx.matmul, &ctx.limits);
    matmul_best_tflops(ctx, &kernels, tile, Layout::Nt, [m, k, n], tries)
}

use crate::gpu::matmul_tiles::{Layout, TileConfig};

/// One row of [`gpu_matmul_sweep`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct MatmulTiming {
    /// `flat` (matmul.wgsl) or a warp-tiled configuration's name.
    pub kernel: &'static str,
    /// `A·Bᵀ`, `A·B` or `Aᵀ·B`.
    pub layout: &'static str,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Pieces K is cut into (split-K), as a step runs this kernel here.
    pub splits: usize,
    /// The best of the tries.
    pub tflops: f64,
    /// Whether the backends pick this kernel for this shape.
    pub picked: bool,
    /// Whether a mixed-precision step (`--precision mixed`) picks it.
    pub picked_mixed: bool,
}

/// Every matmul kernel this adapter runs (matmul.wgsl's flat one, each
/// warp-tiled configuration that fits, and on a device with the tensor cores
/// `--precision mixed`'s `coop`) at each (layout, M×K×N), as a step
/// runs it (split-K and its reduce included): the best of `tries`.
pub fn gpu_matmul_sweep(
    ctx: &crate::gpu::GpuContext,
    shapes: &[(Layout, [usize; 3])],
    tries: usize,
) -> Vec<MatmulTiming> {
    use crate::gpu::matmul_tiles::{MatmulChoice, split_k_for, tile_dims, tile_for, usable};
    let kernels = crate::gpu::kernels::Kernels::new(&ctx.device, 32, Default::default());
    // The tensor cores' training kernel too, on a device opened with them.
    let cores = ctx.device.features().contains(crate::gpu::coop::FEATURES);
    let tiles: Vec<Option<&'static TileConfig>> = std::iter::once(None)
        .chain(usable(&ctx.limits).map(Some))
        .collect();
    let mut out = Vec::new();
    for &(layout, [m, k, n]) in shapes {
        let picked = tile_for(m, k, n, layout, MatmulChoice::ByShape, &ctx.limits);
        // The tensor cores' kernel (its build for the shape), marked picked
        // where a mixed step runs it rather than f32's.
        let coop = cores.then(|| tile_for(m, k, n, layout, MatmulChoice::CoopEverywhere, &ctx.limits));
        let mixed = cores.then(|| tile_for(m, k, n, layout, MatmulChoice::Coop, &ctx.limits));
        for &tile in tiles.iter().chain(coop.iter()) {
            out.push(MatmulTiming {
                kernel: tile.map_or("flat", |t| t.name),
                layout: layout.formula(),
                m,
                k,
                n,
                splits: split_k_for(tile_dims(tile), m, k, n).0,
                tflops: matmul_best_tflops(ctx, &kernels, tile, layout, [m, k, n], tries),
                picked: picked == tile,
                picked_mixed: mixed == Some(tile),
            });
        }
    }
    out
}

/// One kernel timed as a step runs it (split-K and its reduce included):
/// enough dispatches per timing for about 30 ms of work after a warm-up of
/// as many, the best of `tries` timings, on one set of operands.
fn matmul_best_tflops(
    ctx: &crate::gpu::GpuContext,
    kernels: &crate::gpu::kernels::Kernels,
    tile: Option<&'static TileConfig>,
    layout: Layout,
    [m, k, n]: [usize; 3],
    tries: usize,
) -> f64 {
    use crate::gpu::matmul_tiles::{split_k_for, tile_dims};
    use wgpu::util::DeviceExt;
    let device = &ctx.device;
    let mut rng = crate::data::rng::Rng::new(3);
    let mut buffer = |len: usize, label: &str| {
        let data: Vec<f32> = (0..len.max(4)).map(|_| rng.normal() as f32).collect();
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(&data),
            usage: wgpu::BufferUsages::STORAGE,
        })
    };
    let (tile_m, tile_n) = tile_dims(tile);
    let (splits, k_split) = split_k_for((tile_m, tile_n), m, k, n);
    let (a, b, c, bias) = (
        buffer(m * k, "a"),
        buffer(n * k, "b"),
        buffer(m * n, "c"),
        buffer(n, "bias"),
    );
    let scratch = (splits > 1).then(|| buffer(splits * m * n, "split"));
    let params: [u32; 8] = [
        m as u32,
        k as u32,
        n as u32,
        0,
        1f32.to_bits(),
        k_split as u32,
        splits as u32,
        0,
    ];
    let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("params"),
        contents: bytemuck::cast_slice(&params),
        usage: wgpu::BufferUsages::UNIFORM,
    });
    let entry = tile.map_or(layout.flat_entry(), |t| t.entries[layout.index()]);
    let bind = |entry: &str, buffers: [&wgpu::Buffer; 5]| {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, buf)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: buf.as_entire_binding(),
            })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: kernels.layout_of(entry),
            entries: &entries,
        })
    };
    let out = scratch.as_ref().unwrap_or(&c);
    let main = bind(entry, [&a, &b, out, &bias, &uniform]);
    let reduce = scratch
        .as_ref()
        .map(|s| bind("matmul_split_reduce", [s, &bias, &c, &bias, &uniform]));
    let groups = [
        n.div_ceil(tile_n) as u32,
        m.div_ceil(tile_m) as u32,
        splits as u32,
    ];
    let reduce_groups = (m * n).div_ceil(256).clamp(1, 65535) as u32;
    let run = |count: usize| {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for _ in 0..count {
                pass.set_pipeline(kernels.pipeline(entry));
                pass.set_bind_group(0, &main, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
                if let Some(reduce) = &reduce {
                    pass.set_pipeline(kernels.pipeline("matmul_split_reduce"));
                    pass.set_bind_group(0, reduce, &[]);
                    pass.dispatch_workgroups(reduce_groups, 1, 1);
                }
            }
        }
        ctx.queue.submit([encoder.finish()]);
        let _ = device.poll(wgpu::PollType::wait_indefinitely());
    };
    best_tflops([m, k, n], tries, run)
}

/// TFLOP/s of an M×K×N product that `run(count)` dispatches `count` times
/// and waits for: enough dispatches per timing for about 30 ms of work
/// after a warm-up of as many, the best of `tries` timings.
fn best_tflops([m, k, n]: [usize; 3], tries: usize, run: impl Fn(usize)) -> f64 {
    let start = Instant::now();
    run(3);
    let one = start.elapsed().as_secs_f64() / 3.0;
    let reps = ((0.03 / one.max(1e-9)) as usize).clamp(3, 2000);
    run(reps);
    (0..tries)
        .map(|_| {
            let start = Instant::now();
            run(reps);
            let secs = start.elapsed().as_secs_f64() / reps as f64;
            2.0 * (m * k * n) as f64 / secs / 1e12
        })
        .fold(0.0, f64::max)
}

/// This adapter's ceilings for the roofline, as our own kernels reach them.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Ceilings {
    /// The matmul kernel's best TFLOP/s over the shapes tried.
    pub matmul_tflops: f64,
    /// The shape (M×K×N) it reached that at.
    pub matmul_shape: [usize; 3],
    /// Device-memory bandwidth of a streaming copy kernel (bytes read plus
    /// bytes written, per second), GB/s.
    pub copy_gbps: f64,
}

/// Measures [`Ceilings`] (blocking: call it on a worker). A small matmul
/// first; a fast adapter then gets model-sized shapes (nanogpt-char's MLP,
/// 16384×384×1536) so the ceiling is what the kernel can reach.
pub fn gpu_ceilings(ctx: &crate::gpu::GpuContext) -> Ceilings {
    // The copy first: about half a second of it also wakes the GPU up
    // from an idle clock before the matmul is timed.
    let copy_gbps = gpu_copy_gbps(ctx, 128 << 20);
    let kernels = crate::gpu::kernels::Kernels::new(&ctx.device, 32, Default::default());
    let time = |[m, k, n]: [usize; 3], tries: usize| {
        let tile = crate::gpu::matmul_tiles::tile_for(m, k, n, Layout::Nt, ctx.matmul, &ctx.limits);
        matmul_best_tflops(ctx, &kernels, tile, Layout::Nt, [m, k, n], tries)
    };
    let small = [512, 512, 512];
    let mut best = (time(small, 1), small);
    // Past 50 GFLOP/s at 512³ (launch-bound on a big GPU, far beyond a
    // software adapter) the big shapes are worth their time.
    if best.0 > 0.05 {
        // Ten tries of ~30 ms each, the best: on a freshly started H100 three
        // tries still caught the GPU before it clocked up (a ceiling of 11.6
        // TFLOP/s where the step's own matmuls ran at 36).
        for shape in [[4096, 1024, 4096], [16384, 384, 1536]] {
            let t = time(shape, 10);
            if t > best.0 {
                best = (t, shape);
            }
        }
    }
    Ceilings {
        matmul_tflops: best.0,
        matmul_shape: best.1,
        copy_gbps,
    }
}

/// GB/s of a streaming copy kernel (`shaders/bandwidth.wgsl`) over `bytes`
/// (counting the read and the write), many dispatches in one pass, about
/// 0.1 s of them; the best of three after 0.3 s of warm-up.
pub fn gpu_copy_gbps(ctx: &crate::gpu::GpuContext, bytes: u64) -> f64 {
    let device = &ctx.device;
    let limits = device.limits();
    let bytes = bytes
        .min(limits.max_storage_buffer_binding_size as u64)
        .min(limits.max_buffer_size)
        & !15;
    let make = |label: &str| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    };
    let (src, dst) = (make("bandwidth.src"), make("bandwidth.dst"));
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("bandwidth.wgsl"),
        source: wgpu::ShaderSource::Wgsl(include_str!("../../shaders/bandwidth.wgsl").into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("bandwidth.copy"),
        layout: None,
        module: &module,
        entry_point: Some("copy"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: src.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: dst.as_entire_binding(),
            },
        ],
    });
    let groups =
        ((bytes / 16).div_ceil(256) as u32).min(limits.max_compute_workgroups_per_dimension);
    let run = |count: usize| {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            for _ in 0..count {
                pass.dispatch_workgroups(groups, 1, 1);
            }
        }
        let start = Instant::now();
        ctx.queue.submit([encoder.finish()]);
        let _ = device.poll(wgpu::PollType::wait_indefinitely());
        start.elapsed().as_secs_f64()
    };
    run(2);
    let one = run(1).max(1e-6);
    let reps = ((0.1 / one) as usize).clamp(2, 2000);
    // Warm-up: a few hundred ms of copies, so an idle GPU clocks up.
    for _ in 0..3 {
        run(reps);
    }
    (0..3)
        .map(|_| 2.0 * bytes as f64 * reps as f64 / run(reps) / 1e9)
        .fold(0.0, f64::max)
}

/// The tensor-core matmul ([`crate::gpu::coop`]) timed on one shape, and
/// checked: C = A·B of f16-rounded operands against the same product in
/// f64 on the CPU at 256 sampled cells.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CoopTiming {
    pub kernel: &'static str,
    /// `A·B`: the kernel's one layout so far.
    pub layout: &'static str,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The best of the tries (f16 operands, f32 accumulation).
    pub tflops: f64,
    /// The largest |GPU − f64| of the sampled cells over its bound
    /// 2·K·2⁻²⁴·Σ|aᵢ·bᵢ| (f32 accumulation of exact f16 products: at most
    /// 1 when the kernel computes the product).
    pub error_over_bound: f64,
}

/// Times and checks the tensor-core matmul at `[m, k, n]` (A·B) on `ctx`,
/// which must have been opened with the tensor cores. Err: why it cannot
/// run here (no tensor cores, a shape that does not fit its blocks).
pub fn coop_matmul_timing(
    ctx: &crate::gpu::GpuContext,
    [m, k, n]: [usize; 3],
    tries: usize,
) -> Result<CoopTiming, String> {
    use crate::gpu::coop;
    ctx.tensor_cores.clone()?;
    coop::shape_fits([m, k, n])?;
    let device = &ctx.device;
    let mut rng = crate::data::rng::Rng::new(5);
    let a = coop::through_f16(&(0..m * k).map(|_| rng.normal() as f32).collect::<Vec<_>>());
    let b = coop::through_f16(&(0..k * n).map(|_| rng.normal() as f32).collect::<Vec<_>>());
    let kernel = coop::CoopMatmul::new(device);
    let ops = kernel.operands(device, [m, k, n], &a, &b);
    // One product into the zeroed C, read back and checked.
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("coop readback"),
        size: (m * n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    kernel.record(&mut encoder, &ops, 1);
    encoder.copy_buffer_to_buffer(&ops.c, 0, &staging, 0, (m * n * 4) as u64);
    ctx.queue.submit([encoder.finish()]);
    let slice = staging.slice(..);
    slice.map_async(wgpu::MapMode::Read, |_| {});
    let _ = device.poll(wgpu::PollType::wait_indefinitely());
    let view = slice
        .get_mapped_range()
        .map_err(|e| format!("the tensor cores' product could not be read back: {e}"))?;
    let c: Vec<f32> = bytemuck::cast_slice(&view).to_vec();
    drop(view);
    staging.unmap();
    let mut worst = 0.0f64;
    for _ in 0..256 {
        let (i, j) = (rng.below(m as u64) as usize, rng.below(n as u64) as usize);
        let (mut exact, mut size) = (0.0f64, 0.0f64);
        for t in 0..k {
            let term = a[i * k + t] as f64 * b[t * n + j] as f64;
            exact += term;
            size += term.abs();
        }
        let bound = 2.0 * k as f64 * 2f64.powi(-24) * size;
        worst = worst.max((c[i * n + j] as f64 - exact).abs() / bound.max(f64::MIN_POSITIVE));
    }
    // Timed as the f32 kernels are: ~30 ms of dispatches, best of `tries`.
    let run = |count: usize| {
        let mut encoder = device.create_command_encoder(&Default::default());
        kernel.record(&mut encoder, &ops, count);
        ctx.queue.submit([encoder.finish()]);
        let _ = device.poll(wgpu::PollType::wait_indefinitely());
    };
    let tflops = best_tflops([m, k, n], tries, run);
    Ok(CoopTiming {
        kernel: "coop-f16",
        layout: "A·B",
        m,
        k,
        n,
        tflops,
        error_over_bound: worst,
    })
}
