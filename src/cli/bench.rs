//! `tinygpt bench`: training speed per preset, as a table or JSON lines.

use super::BackendChoice;
use anyhow::Result;
use tinygpt::bench::{BenchOptions, Machine, bench, cpu_backend};
use tinygpt::model::config::Config;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Backends to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cpu")]
    backend: Vec<BackendChoice>,
    /// Presets to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tiny,small,medium,large,xl"
    )]
    presets: Vec<String>,
    /// Untimed warm-up steps per preset.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Time at least this many seconds per preset (at least 5, at most 100 steps).
    #[arg(long, default_value_t = 3.0, value_parser = super::positive_f32)]
    seconds: f32,
    /// One JSON object per measurement instead of a table.
    #[arg(long)]
    json: bool,
    /// Show where a CPU step's time goes, per op family, instead.
    #[arg(long)]
    ops: bool,
    /// Compare the CPU matmul contenders (GEMM crate vs hand-written loop) at each preset's layer shapes.
    #[arg(long)]
    gemm: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    // Refuse bad presets before spending time on good ones.
    let configs = args
        .presets
        .iter()
        .map(|p| Ok((p.clone(), Config::load(p)?)))
        .collect::<Result<Vec<_>>>()?;
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
            "{:<14} {:<8} {:>12} {:>10} {:>10} {:>10} {:>12} {:>6} {:>11}",
            "preset",
            "backend",
            "params",
            "median ms",
            "min ms",
            "max ms",
            "tokens/s",
            "steps",
            "warm-up ms"
        );
    }
    for (name, config) in &configs {
        for backend in &args.backend {
            let b = match backend {
                BackendChoice::Cpu => cpu_backend(config),
            };
            let r = bench(name, b, opts).map_err(anyhow::Error::msg)?;
            if args.json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{:<14} {:<8} {:>12} {:>10.2} {:>10.2} {:>10.2} {:>12.0} {:>6} {:>11.1}",
                    r.preset,
                    format!("{backend:?}").to_lowercase(),
                    super::group_thousands(r.params),
                    r.median_ms,
                    r.min_ms,
                    r.max_ms,
                    r.tokens_per_s,
                    r.steps,
                    r.warmup_ms
                );
            }
        }
    }
    Ok(())
}
