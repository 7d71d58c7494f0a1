//! `tinygpt bench`: training speed per preset, as a table or JSON lines.

use super::backend::{Precision, Resolved, build, resolve, resolve_for};
use super::backend::BackendChoice;
use anyhow::{Context, Result};
use tinygpt::bench::{BenchOptions, Machine, bench};
use tinygpt::gpu::matmul_tiles::Layout;
use tinygpt::model::config::Config;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Backends to measure, comma-separated (auto: the CPU, and the GPU when
    /// a hardware adapter is present).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    backend: Vec<BackendChoice>,
    /// Presets to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tiny,small,medium,large,xl"
    )]
    presets: Vec<String>,
    /// Untimed warm-up steps per preset (0 to 100).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = warmup, allow_hyphen_values = true)]
    warmup: usize,
    /// Time at least this many seconds per preset (at least 5, at most 100 steps).
    #[arg(long, default_value_t = 3.0, value_parser = super::positive_f32)]
    seconds: f32,
    /// Also write a Markdown table, an SVG chart of the speedup curve and the
    /// JSON lines into this folder.
    #[arg(long, value_name = "DIR")]
    report: Option<std::path::PathBuf>,
    /// Replace an earlier report's files in the --report folder.
    #[arg(long, requires = "report")]
    force: bool,
    /// Re-render the report from JSON lines saved earlier (`bench.jsonl`)
    /// instead of measuring; needs --report.
    #[arg(long, value_name = "FILE", requires = "report")]
    replot: Option<std::path::PathBuf>,
    /// One JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
    /// Show where a CPU step's time goes, per op family, instead.
    #[arg(long)]
    ops: bool,
    /// Time every GPU kernel of one training step (timestamp queries) per
    /// preset, with each op family's FLOPs, bytes and place on the roofline of
    /// this adapter (its matmul TFLOP/s and copy GB/s, measured); --json prints
    /// one object per preset.
    #[arg(long)]
    kernels: bool,
    /// Measure every GPU matmul kernel alone (the flat one and each warp-tiled
    /// configuration), in TFLOP/s, as a step runs it: at M×K×N in all three
    /// layouts, or at every matmul of a preset's step (preset:NAME); several
    /// comma-separated (e.g. 16384x384x1536,preset:xl); --json prints one
    /// object per kernel and shape.
    #[arg(long, value_name = "MxKxN|preset:NAME[,…]")]
    matmul: Option<String>,
    /// Precisions to measure the GPU at, comma-separated: f32, and `mixed`
    /// (the matmuls on the tensor cores, a `gpu-mixed` row; refused where
    /// the GPU has none). The CPU runs f32 only.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "f32")]
    precision: Vec<super::backend::Precision>,
    /// Compare the CPU matmul contenders (GEMM crate vs hand-written loop) at each preset's layer shapes.
    #[arg(long)]
    gemm: bool,
}

/// The most untimed warm-up steps `--warmup` takes: as many as the most
/// steps a preset is timed for (a few settle any backend; a hundred million
/// ran for days without a line of output).
const MAX_WARMUP: usize = 100;

/// `--warmup`: a whole number of steps from 0 to [`MAX_WARMUP`].
fn warmup(s: &str) -> Result<usize, String> {
    match s.trim().parse::<u128>() {
        Ok(n) if n <= MAX_WARMUP as u128 => Ok(n as usize),
        Ok(_) => Err(format!(
            "{s} is more than {MAX_WARMUP} warm-up steps (untimed training steps before each preset is timed; a few settle any backend): give 0 to {MAX_WARMUP}"
        )),
        Err(_) => Err(format!(
            "`{s}` is not a number of warm-up steps: give a whole number from 0 to {MAX_WARMUP}"
        )),
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    // The report's files are checked and locked before anything is measured.
    let made_report_dir = args.report.as_ref().is_some_and(|dir| !dir.exists());
    let mut report_claims = match &args.report {
        Some(dir) => {
            let inputs: Vec<_> = args
                .replot
                .iter()
                .map(|f| tinygpt::output::Input::new("--replot", f))
                .collect();
            tinygpt::bench::report::claim(dir, &inputs, args.force).map_err(anyhow::Error::msg)?
        }
        None => Vec::new(),
    };
    if let (Some(file), Some(dir)) = (&args.replot, &args.report) {
        let results = match read_replot(file) {
            Ok(results) => results,
            Err(e) => {
                // A bad file leaves no report folder behind: the locks go,
                // then the folder this command made (empty again).
                for claim in &mut report_claims {
                    claim.release();
                }
                if made_report_dir {
                    let _ = std::fs::remove_dir(dir);
                }
                return Err(e);
            }
        };
        tinygpt::bench::report::write(dir, &results)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        eprintln!(
            "report: {}/bench.md, {}/speedup.svg, {}/bench.jsonl",
            dir.display(),
            dir.display(),
            dir.display()
        );
        return Ok(());
    }
    // Refuse bad presets before spending time on good ones.
    let configs = args
        .presets
        .iter()
        .map(|p| Ok((p.clone(), Config::load(p)?)))
        .collect::<Result<Vec<_>>>()?;
    if let Some(shapes) = &args.matmul {
        let shapes = matmul_shapes(shapes)?;
        let Resolved::Gpu(ctx) = resolve(BackendChoice::Gpu)? else {
            unreachable!()
        };
        // Each operand is one storage buffer: refuse what the adapter
        // cannot bind (or this machine could not fill) before allocating.
        let limit = (ctx.device.limits().max_storage_buffer_binding_size as u64)
            .min(ctx.device.limits().max_buffer_size);
        for &(_, [m, k, n]) in &shapes {
            let largest = [(m, k), (k, n), (m, n)]
                .into_iter()
                .map(|(a, b)| a as u128 * b as u128 * 4)
                .max()
                .unwrap_or(0);
            anyhow::ensure!(
                largest <= limit as u128,
                "--matmul {m}x{k}x{n}: an operand of {} MB is more than this adapter binds ({} MB); choose smaller dimensions",
                largest >> 20,
                limit >> 20
            );
        }
        // The tensor cores on a device of their own (only this asks for
        // wgpu's experimental cooperative matrices).
        let cores = tinygpt::gpu::GpuContext::with_tensor_cores_blocking()
            .map_err(|e| e.to_string())
            .and_then(|c| c.tensor_cores.clone().map(|_| c));
        if !args.json {
            println!(
                "matmul kernels on {}: TFLOP/s as a step runs them (split-K included), best of 5 timings of ~30 ms; * = picked for the shape, + = picked by a mixed-precision step",
                ctx.describe()
            );
            match &cores {
                Ok(_) => println!(
                    "tensor cores: `coop` is --precision mixed's kernel (f32 tensors staged as f16, f32 accumulation, as a step runs it); coop-f16 the plain one (A·B of f16 tensors), best of 5, checked at 256 cells against f64: `err` is the largest error over its bound 2·K·2⁻²⁴·Σ|aᵢ·bᵢ| (≤ 1: correct)"
                ),
                Err(why) => println!("tensor cores: not measured: {why}"),
            }
        }
        for shape in shapes {
            let coop = match (&cores, shape.0) {
                (Ok(c), tinygpt::gpu::matmul_tiles::Layout::Nn) => Some(tinygpt::bench::coop_matmul_timing(c, shape.1, 5)),
                _ => None,
            };
            let rows = tinygpt::bench::gpu_matmul_sweep(cores.as_ref().unwrap_or(&ctx), &[shape], 5);
            for r in &rows {
                if args.json {
                    println!("{}", serde_json::to_string(r)?);
                } else {
                    println!(
                        "{}x{}x{} {:<5} {:<9} {:>2} {:7.3}{}",
                        r.m,
                        r.k,
                        r.n,
                        r.layout,
                        r.kernel,
                        r.splits,
                        r.tflops,
                        match (r.picked, r.picked_mixed) {
                            (true, true) => " *+",
                            (true, false) => " *",
                            (false, true) => " +",
                            (false, false) => "",
                        }
                    );
                }
            }
            let [m, k, n] = shape.1;
            match coop {
                Some(Ok(t)) if args.json => println!("{}", serde_json::to_string(&t)?),
                Some(Ok(t)) => println!(
                    "{m}x{k}x{n} {:<5} {:<9} {:>2} {:7.3}   err {:.2}",
                    t.layout, t.kernel, 1, t.tflops, t.error_over_bound
                ),
                Some(Err(why)) if args.json => println!(
                    "{}",
                    serde_json::json!({"kernel": "coop-f16", "layout": "A·B", "m": m, "k": k, "n": n, "skipped": why})
                ),
                Some(Err(why)) => println!("{m}x{k}x{n} A·B   coop-f16   –  not measured: {why}"),
                None => {}
            }
        }
        return Ok(());
    }
    if args.kernels {
        // --precision mixed (alone or in the list): the mixed step's kernels.
        let precision = if args.precision.contains(&Precision::Mixed) { Precision::Mixed } else { Precision::F32 };
        let Resolved::Gpu(ctx) = resolve_for(BackendChoice::Gpu, precision)? else {
            unreachable!()
        };
        for (name, config) in &configs {
            let k = tinygpt::bench::kernels::time_step(name, config, [(*ctx).clone()], true)
                .map_err(anyhow::Error::msg)?;
            if args.json {
                println!("{}", serde_json::to_string(&k)?);
                continue;
            }
            if let Some(note) = &k.note {
                println!("{note}");
            }
            let total = k.total_ms();
            println!(
                "{name}: {total:.3} ms of kernel time in {} dispatches on {}",
                k.rows.len(),
                k.device
            );
            if let Some(c) = &k.ceilings {
                println!(
                    "  ceilings: matmul {} (at {}x{}x{}), copy {:.0} GB/s; ridge at {:.1} FLOP/byte",
                    tinygpt::bench::kernels::human_flops(c.matmul_tflops * 1e3),
                    c.matmul_shape[0],
                    c.matmul_shape[1],
                    c.matmul_shape[2],
                    c.copy_gbps,
                    c.matmul_tflops * 1e3 / c.copy_gbps
                );
            }
            match &k.datasheet {
                Some(d) => println!(
                    "  {} datasheet: f32 {}, tensor cores f16 {} (dense), memory {:.0} GB/s ({})",
                    d.part,
                    tinygpt::bench::kernels::human_flops(d.f32_tflops * 1e3),
                    tinygpt::bench::kernels::human_flops(d.f16_tensor_tflops * 1e3),
                    d.memory_gbps,
                    d.source
                ),
                None => println!("  no datasheet figures for this adapter: 'of peak' is left out"),
            }
            println!(
                "  {:<20} {:>5} {:>9} {:>6} {:>9} {:>10} {:>9} {:>8} {:>8} {:>7}",
                "family", "n", "ms", "%", "FLOP/B", "GFLOP/s", "GB/s", "of roof", "of peak", "bound"
            );
            for f in &k.families {
                println!(
                    "  {:<20} {:>5} {:>9.4} {:>5.1}% {:>9.2} {:>10.1} {:>9.1} {:>8} {:>8} {:>7}",
                    f.family,
                    f.count,
                    f.ms,
                    100.0 * f.ms / total,
                    f.intensity,
                    f.gflops,
                    f.gbps,
                    f.attainable_gflops
                        .map_or("-".into(), |a| format!("{:.0}%", 100.0 * f.gflops / a)),
                    f.datasheet_gflops
                        .map_or("-".into(), |a| format!("{:.0}%", 100.0 * f.gflops / a)),
                    f.bound.as_deref().unwrap_or("-")
                );
            }
        }
        return Ok(());
    }
    if args.gemm {
        for (name, config) in &configs {
            for r in tinygpt::bench::gemm_contest(config) {
                if args.json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    println!(
                        "{name:<12} {:<30} {:>6}x{:<5}x{:>5} {:<28} {:>8.1} GFLOP/s",
                        r.layout, r.m, r.k, r.n, r.contender, r.gflops
                    );
                }
            }
        }
        return Ok(());
    }
    if args.ops {
        for (name, config) in &configs {
            let profile = tinygpt::bench::profile_cpu_step(config, 10);
            let total: f64 = profile.iter().map(|(_, ms)| ms).sum();
            println!("{name}: {total:.2} ms per step (sum of per-op medians)");
            let mut rows = profile;
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (op, ms) in rows {
                println!("  {op:<22} {ms:>9.3} ms {:>5.1}%", 100.0 * ms / total);
            }
        }
        return Ok(());
    }
    let opts = BenchOptions {
        warmup_steps: args.warmup,
        min_seconds: args.seconds as f64,
        ..Default::default()
    };
    if !args.json {
        let m = Machine::detect();
        println!(
            "machine: {} ({} cores, {} {})",
            m.cpu, m.cores, m.os, m.arch
        );
        println!(
            "{:<14} {:<8} {:>12} {:>10} {:>10} {:>10} {:>12} {:>6} {:>17}",
            "preset",
            "backend",
            "params",
            "median ms",
            "min ms",
            "max ms",
            "tokens/s",
            "steps",
            "setup+warm-up ms"
        );
    }
    // Settle the backend list once (one GPU device for every preset).
    let mut backends: Vec<(BackendChoice, Resolved)> = Vec::new();
    let f32_too = args.precision.contains(&Precision::F32);
    for &choice in &args.backend {
        match choice {
            BackendChoice::Auto => {
                backends.push((BackendChoice::Cpu, Resolved::Cpu));
                if f32_too && let r @ Resolved::Gpu(_) = resolve(BackendChoice::Auto)? {
                    backends.push((BackendChoice::Auto, r));
                }
            }
            BackendChoice::Cpu => backends.push((BackendChoice::Cpu, Resolved::Cpu)),
            BackendChoice::Gpu if f32_too => backends.push((BackendChoice::Gpu, resolve(BackendChoice::Gpu)?)),
            BackendChoice::Gpu => {}
        }
        if choice != BackendChoice::Cpu && args.precision.contains(&Precision::Mixed) {
            backends.push((BackendChoice::Gpu, resolve_for(choice, Precision::Mixed)?));
        }
    }
    if !args.json {
        for (_, r) in &backends {
            if let Resolved::Gpu(ctx) = r {
                println!("gpu: {}", ctx.describe());
            }
        }
    }
    let mut results = Vec::new();
    for (name, config) in &configs {
        let mut cpu_ms = None;
        for (choice, resolved) in &backends {
            let start = web_time::Instant::now();
            let b = build(resolved, *choice, config)?;
            let setup_ms = start.elapsed().as_secs_f64() * 1e3;
            let kind = match resolved {
                Resolved::Gpu(ctx) if ctx.mixed_precision() => "gpu-mixed",
                _ if b.describe().starts_with("gpu") => "gpu",
                _ => "cpu",
            };
            let mut r = bench(name, kind, b, setup_ms, opts).map_err(anyhow::Error::msg)?;
            match kind {
                "cpu" => cpu_ms = Some(r.median_ms),
                _ => r.gpu_over_cpu = cpu_ms.map(|c| c / r.median_ms),
            }
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:<14} {:<8} {:>12} {:>10.2} {:>10.2} {:>10.2} {:>12.0} {:>6} {:>17.1}",
                    r.preset,
                    r.backend,
                    super::group_thousands(r.params),
                    r.median_ms,
                    r.min_ms,
                    r.max_ms,
                    r.tokens_per_s,
                    r.steps,
                    r.setup_ms + r.first_step_ms + r.warmup_ms
                );
                if let Some(x) = r.gpu_over_cpu {
                    println!("{:<14} gpu over cpu: {x:.2}x", "");
                }
            }
            results.push(r);
        }
    }
    if let Some(dir) = &args.report {
        tinygpt::bench::report::write(dir, &results)
            .with_context(|| format!("cannot write the report into {}", dir.display()))?;
        eprintln!(
            "report: {}/bench.md, {}/speedup.svg, {}/bench.jsonl",
            dir.display(),
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

/// `--matmul`'s list: `MxKxN` (all three layouts) or `preset:NAME` (the
/// matmuls of a training step of that preset, each once), comma-separated.
fn matmul_shapes(list: &str) -> Result<Vec<(Layout, [usize; 3])>> {
    let mut out: Vec<(Layout, [usize; 3])> = Vec::new();
    for item in list.split(',') {
        let found = match item.trim().strip_prefix("preset:") {
            Some(name) => {
                let program = tinygpt::program::Program::new(&Config::load(name)?);
                tinygpt::gpu::matmul_tiles::matmul_shapes(&program)
            }
            None => {
                let shape = parse_matmul_shape(item)?;
                Layout::ALL.iter().map(|&l| (l, shape)).collect()
            }
        };
        for s in found {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// `MxKxN`, each at least 1.
fn parse_matmul_shape(shape: &str) -> Result<[usize; 3]> {
    let want = || anyhow::anyhow!("--matmul wants MxKxN, e.g. 16384x384x1536, not {shape:?}");
    let dims: Vec<usize> = shape
        .trim()
        .split('x')
        .map(|d| d.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| want())?;
    let [m, k, n] = dims[..] else {
        return Err(want());
    };
    anyhow::ensure!(
        m > 0 && k > 0 && n > 0,
        "--matmul {shape}: every dimension must be at least 1, e.g. 16384x384x1536"
    );
    Ok([m, k, n])
}

/// The measurements of `--replot FILE`: its JSON lines, at least one.
fn read_replot(file: &std::path::Path) -> Result<Vec<tinygpt::bench::BenchResult>> {
    let text = tinygpt::data::read_text(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    let results = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!(
                    "{} line {}: not a tinygpt bench JSON line",
                    file.display(),
                    i + 1
                )
            })
        })
        .collect::<Result<Vec<tinygpt::bench::BenchResult>>>()?;
    anyhow::ensure!(
        !results.is_empty(),
        "{} holds no measurements",
        file.display()
    );
    Ok(results)
}
