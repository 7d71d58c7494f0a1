//! `tinygpt flash-trace`: FlashAttention-2's tiling of one attention head,
//! traced from the real kernels (`--backend gpu`) or from the CPU model of
//! the same tiling (`--backend cpu`): every visit of a tile to a block, with
//! the online softmax's running max, sum and rescale, and a summary that
//! checks the result against naive attention. The data behind the app's
//! Flash scene. The run itself is not changed.

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Result, bail};
use tinygpt::flash::{FlashRequest, Pass, TraceSource, human_bytes as bytes, trace_blocking};
use tinygpt::probe::ProbeSource;

#[derive(clap::Args)]
pub struct FlashArgs {
    #[command(flatten)]
    run: super::run::RunArgs,
    /// Trace this text (padded to the context) instead of a row of the run's next batch.
    #[arg(long)]
    prompt: Option<String>,
    /// The row of the next batch to trace (without --prompt).
    #[arg(long, default_value_t = 0)]
    row: usize,
    /// The transformer block (0-based).
    #[arg(long, default_value_t = 0)]
    layer: usize,
    /// The head (0-based).
    #[arg(long, default_value_t = 0)]
    head: usize,
    /// Where to compute: gpu traces the real kernels, cpu runs the CPU model of their tiling.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendChoice,
    /// One JSON object per visit (pass, q_tile, k_block, skipped, m_before,
    /// m_after, l_before, l_after, rescale, …), then a summary object.
    #[arg(long)]
    json: bool,
    /// With --json: add each visit's TILE×TILE blocks (S and P forward, P and dS backward).
    #[arg(long)]
    blocks: bool,
}

pub fn run(args: FlashArgs) -> Result<()> {
    let mut trainer = args.run.trainer(|config| {
        let resolved = resolve(args.backend)?;
        build(&resolved, args.backend, config)
    })?;
    let config = trainer.config.clone();
    let source = match args.prompt {
        Some(p) => ProbeSource::Prompt(p.into_bytes()),
        None => ProbeSource::BatchRow(args.row),
    };
    let probe = trainer.probe_request(&source).map_err(anyhow::Error::msg)?;
    let request = FlashRequest::from_probe(probe, args.layer, args.head);
    request.check(&config).map_err(anyhow::Error::msg)?;
    let trace = trace_blocking(trainer.backend.as_mut(), &request)?;
    let s = &trace.summary;
    if !(s.max_abs_diff_vs_naive.is_finite() && s.backward_max_abs_diff_vs_naive.is_finite()) {
        bail!("the attention is not finite: the checkpoint's weights have diverged");
    }
    if args.json {
        for v in &trace.visits {
            println!("{}", v.to_json(trace.t, args.blocks));
        }
        println!("{}", trace.summary_json());
        return Ok(());
    }
    println!(
        "block {} head {}, T = {}, D = {}, tiles of {}×{}: {}",
        s.layer,
        s.head,
        s.t,
        s.d,
        s.tile_q,
        s.tile_k,
        match s.source {
            TraceSource::Kernel => "traced from the GPU kernels",
            TraceSource::CpuModel => "the CPU model of the kernels' tiling",
        }
    );
    for pass in Pass::ALL {
        let c = s.passes[pass.key()];
        println!(
            "  {:<14} {} blocks visited, {} skipped by causality",
            pass.key(),
            c.visited,
            c.skipped
        );
    }
    println!(
        "  max |O − naive O| {:.2e}, max |dQKV − naive| {:.2e}, max |m + ln l − lse| {:.2e}",
        s.max_abs_diff_vs_naive, s.backward_max_abs_diff_vs_naive, s.lse_from_trace_max_abs_diff
    );
    println!(
        "  traced run vs the program's own attention: {}",
        if s.bit_identical_to_untraced {
            "bit-identical".to_string()
        } else {
            format!("max |difference| {:.2e}", s.untraced_max_abs_diff)
        }
    );
    println!(
        "  memory moved (this head): forward {} tiled vs {} standard; backward {} vs {}",
        bytes(s.traffic.tiled_forward),
        bytes(s.traffic.standard_forward),
        bytes(s.traffic.tiled_backward),
        bytes(s.traffic.standard_backward)
    );
    println!(
        "  never allocated: P of every head, {} per layer ({} for the model); kept: the log-sum-exp, {} per layer",
        bytes(s.memory.never_allocated_per_layer),
        bytes(s.memory.never_allocated_model),
        bytes(s.memory.allocated_per_layer)
    );
    println!("(--json prints every visit)");
    Ok(())
}
