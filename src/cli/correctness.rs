//! `tinygpt correctness`: one training step on the CPU and on the GPU from
//! the same weights, AdamW moments and batch, every tensor compared (max
//! absolute, max relative and relative L2 difference), and gradient entries
//! checked against a finite difference of the loss in f64. The run itself
//! is not changed.

use super::backend::{build, resolve};
use super::backend::BackendChoice;
use anyhow::{Context, Result, bail};
use tinygpt::correctness::{compare_step, finite_difference, load_weights};
use tinygpt::cpu::CpuBackend;
use tinygpt::program::Program;

#[derive(clap::Args)]
pub struct CorrectnessArgs {
    #[command(flatten)]
    run: super::run::RunArgs,
    /// Check ∂loss/∂PARAM[INDEX] against a finite difference in f64 (repeatable).
    #[arg(long, value_name = "PARAM:INDEX")]
    fd: Vec<String>,
    /// One JSON object per tensor (name, kind, shape, read, max_abs, max_rel,
    /// rel_l2, worst, cpu_at_worst, gpu_at_worst), one per --fd check, then a summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CorrectnessArgs) -> Result<()> {
    let fd: Vec<(String, usize)> = args
        .fd
        .iter()
        .map(|s| {
            let (name, index) = s.rsplit_once(':').with_context(|| {
                format!("--fd `{s}`: write PARAM:INDEX, e.g. transformer.wte.weight:12")
            })?;
            let index = index
                .parse()
                .with_context(|| format!("--fd `{s}`: `{index}` is not an index"))?;
            Ok((name.to_string(), index))
        })
        .collect::<Result<_>>()?;
    // The run (on the CPU): its weights, moments, next batch and step.
    let mut trainer = args
        .run
        .trainer(|config| Ok(Box::new(CpuBackend::<f32>::new(Program::new(config)))))?;
    let config = trainer.config.clone();
    let batch = trainer.peek_next_batch();
    let params = trainer.step_params(trainer.step);
    let ck = trainer.checkpoint(true)?;
    let optimizer = ck.optimizer.as_ref().expect("asked for the moments");
    let resolved = resolve(BackendChoice::Gpu)?;
    let mut gpu = build(&resolved, BackendChoice::Gpu, &config)?;
    load_weights(gpu.as_mut(), &ck.params, Some((&optimizer.m, &optimizer.v)))?;
    let diffs = compare_step(trainer.backend.as_mut(), gpu.as_mut(), &batch, params)?;
    let program = Program::new(&config);
    let checks = fd
        .iter()
        .map(|(name, index)| {
            finite_difference(
                &program,
                &ck.params,
                &batch,
                params.dropout_seed,
                name,
                *index,
            )
            .map_err(anyhow::Error::msg)
        })
        .collect::<Result<Vec<_>>>()?;
    let worst = diffs
        .iter()
        .max_by(|a, b| a.max_rel.total_cmp(&b.max_rel))
        .expect("the program has tensors");
    if diffs.iter().any(|d| !d.max_abs.is_finite()) {
        bail!("a tensor is not finite on one backend: the weights have diverged");
    }
    if args.json {
        for d in &diffs {
            println!("{}", serde_json::to_string(d)?);
        }
        for c in &checks {
            println!("{}", serde_json::json!({ "finite_difference": c }));
        }
        println!(
            "{}",
            serde_json::json!({
                "summary": true,
                "tensors": diffs.len(),
                "max_rel": worst.max_rel,
                "worst_tensor": worst.name,
                "step": trainer.step + 1,
                "cpu": trainer.backend.describe(),
                "gpu": gpu.describe(),
            })
        );
        return Ok(());
    }
    println!(
        "one training step (step {} of the run) on {} and {}: {} tensors compared",
        trainer.step + 1,
        trainer.backend.describe(),
        gpu.describe(),
        diffs.len()
    );
    let mut order: Vec<_> = diffs.iter().collect();
    order.sort_by(|a, b| b.max_rel.total_cmp(&a.max_rel));
    println!("the ten largest differences (max |gpu − cpu| / max |cpu|):");
    for d in order.iter().take(10) {
        println!(
            "  {:<44} {:<10} max rel {:.2e}  rel L2 {:.2e}  max abs {:.2e}",
            d.name, d.kind, d.max_rel, d.rel_l2, d.max_abs
        );
    }
    for c in &checks {
        println!(
            "∂loss/∂{}[{}]: analytic {:.6e}, finite difference {:.6e} (h {:.1e}), relative error {:.1e}",
            c.param, c.index, c.analytic, c.numeric, c.h, c.rel_err
        );
    }
    println!("(--json prints every tensor)");
    Ok(())
}
