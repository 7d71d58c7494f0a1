//! Where one training step's time goes: every GPU kernel of the step timed
//! with timestamp queries (or, where the adapter has none, the CPU backend's
//! ops), grouped by op family, each family with the FLOPs and compulsory
//! bytes the program says it does ([`crate::program::cost`]), and the
//! adapter's ceilings measured by our own kernels ([`super::Ceilings`]):
//! the data of a roofline. `tinygpt bench --kernels --json` prints it and
//! the Speedup scene draws it.

use super::Ceilings;
use crate::backend::{Backend, StepParams};
use crate::model::config::Config;
use crate::program::Program;
use crate::program::cost::Cost;
use super::datasheet::Datasheet;
use serde::{Deserialize, Serialize};

/// One dispatch of the step (GPU) or one op family (CPU).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelRow {
    /// The op family, e.g. `fwd linear` ([`Program::family`]).
    pub family: String,
    /// The kernel's entry point ("" for the CPU's ops).
    pub entry: String,
    pub ms: f64,
}

/// An op family's time, work and where it sits on the roofline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Family {
    pub family: String,
    pub ms: f64,
    /// Dispatches (GPU) or entries of the step (CPU) it took.
    pub count: usize,
    pub flops: f64,
    /// Compulsory bytes (f32), see [`crate::program::cost`].
    pub bytes: f64,
    /// FLOPs per byte.
    pub intensity: f64,
    /// What it reached: GFLOP/s and GB/s of compulsory traffic.
    pub gflops: f64,
    pub gbps: f64,
    /// The roofline's GFLOP/s at this intensity, min(matmul peak,
    /// intensity × copy bandwidth), when the ceilings were measured.
    pub attainable_gflops: Option<f64>,
    /// `compute` when the intensity is past the ridge point, else `memory`.
    pub bound: Option<String>,
    /// The datasheet's f32 roof at this intensity, GFLOP/s, where the
    /// adapter's datasheet is known ([`super::datasheet`]).
    #[serde(default)]
    pub datasheet_gflops: Option<f64>,
}

/// One step of a preset, timed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelTimes {
    pub preset: String,
    /// What measured it (the adapter, or the CPU backend).
    pub device: String,
    /// `gpu_timestamps` or `cpu_ops`.
    pub source: String,
    /// Why the CPU's op times stand in, when they do.
    pub note: Option<String>,
    pub rows: Vec<KernelRow>,
    /// Families, the most time first.
    pub families: Vec<Family>,
    pub ceilings: Option<Ceilings>,
    /// The adapter's datasheet peaks, where we know them: the roof a reader
    /// expects, beside the measured one.
    #[serde(default)]
    pub datasheet: Option<Datasheet>,
}

impl KernelTimes {
    /// The kernels' (or ops') time summed, ms.
    pub fn total_ms(&self) -> f64 {
        self.rows.iter().map(|r| r.ms).sum()
    }
}

impl KernelTimes {
    /// The roofline as a chart file ([`crate::chart`]): the roof of the
    /// measured ceilings (GFLOP/s against FLOP per byte, log-log) and each
    /// op family where it ran, labelled with its share of the step.
    pub fn roofline_chart(&self) -> crate::chart::Chart {
        use crate::chart::{Chart, Series};
        const COLOURS: [&str; 8] = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#bcbd22", "#17becf", "#8c564b",
        ];
        let total = self.total_ms().max(1e-12);
        let points: Vec<&Family> = self
            .families
            .iter()
            .filter(|f| f.flops > 0.0 && f.ms > 0.0)
            .collect();
        let mut series = vec![];
        // A roof: bandwidth × intensity up to the ridge, then the peak, over
        // the points' intensities and a factor of 3 either side; and that
        // x range (the tensor cores' line spans it too).
        let roof = |peak: f64, gbps: f64| {
            let ridge = peak / gbps;
            let lo = points.iter().map(|f| f.intensity).fold(ridge, f64::min) / 3.0;
            let hi = points.iter().map(|f| f.intensity).fold(ridge, f64::max) * 3.0;
            (vec![(lo, lo * gbps), (ridge, peak), (hi, peak)], (lo, hi))
        };
        if let Some(c) = &self.ceilings {
            let peak = c.matmul_tflops * 1e3;
            let label = format!("roof: copy {:.0} GB/s, matmul {}", c.copy_gbps, human_flops(peak));
            series.push(Series::line(label, roof(peak, c.copy_gbps).0, "#444444").dashed());
        }
        if let Some(d) = &self.datasheet {
            let peak = d.f32_tflops * 1e3;
            let (line, (lo, hi)) = roof(peak, d.memory_gbps);
            let label = format!(
                "{} datasheet: f32 {}, memory {:.0} GB/s",
                d.part,
                human_flops(peak),
                d.memory_gbps
            );
            series.push(Series::line(label, line, "#999999").dashed());
            let tensor = d.f16_tensor_tflops * 1e3;
            series.push(
                Series::line(
                    format!("its tensor cores' peak (f16, dense): {}", human_flops(tensor)),
                    vec![(lo, tensor), (hi, tensor)],
                    "#bbbbbb",
                )
                .dashed(),
            );
        }
        for (i, f) in points.iter().enumerate() {
            series.push(
                Series::line(
                    format!("{} ({:.0}% of the step)", f.family, 100.0 * f.ms / total),
                    vec![(f.intensity, f.gflops)],
                    COLOURS[i % COLOURS.len()],
                )
                .scatter(),
            );
        }
        Chart {
            title: format!(
                "Where a {} training step's time goes: the roofline",
                self.preset
            ),
            subtitle: format!("{}; {}", self.device, self.source),
            x_label: "arithmetic intensity (FLOP per byte, log scale)".into(),
            y_label: "GFLOP/s reached (log scale)".into(),
            x_log: true,
            y_log: true,
            series,
            references: vec![],
        }
    }
}

/// A rate in GFLOP/s as a person reads it: `3.4 GFLOP/s`, `9.41 TFLOP/s`.
pub fn human_flops(gflops: f64) -> String {
    if gflops >= 1000.0 {
        format!("{:.2} TFLOP/s", gflops / 1e3)
    } else {
        format!("{gflops:.1} GFLOP/s")
    }
}

/// Groups `rows` by family and puts each on the roofline of `ceilings`.
pub fn families(program: &Program, rows: &[KernelRow], ceilings: Option<&Ceilings>) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|f| f.family == r.family) {
            Some(f) => {
                f.ms += r.ms;
                f.count += 1;
            }
            None => out.push(Family {
                family: r.family.clone(),
                ms: r.ms,
                count: 1,
                flops: 0.0,
                bytes: 0.0,
                intensity: 0.0,
                gflops: 0.0,
                gbps: 0.0,
                attainable_gflops: None,
                bound: None,
                datasheet_gflops: None,
            }),
        }
    }
    for f in &mut out {
        let mut cost = Cost::default();
        for s in &program.steps {
            if program.family(*s) == f.family {
                cost += program.cost(*s);
            }
        }
        let secs = (f.ms / 1e3).max(1e-12);
        f.flops = cost.flops;
        f.bytes = cost.bytes;
        f.intensity = cost.intensity();
        f.gflops = cost.flops / secs / 1e9;
        f.gbps = cost.bytes / secs / 1e9;
        if let Some(c) = ceilings {
            let peak = c.matmul_tflops * 1e3;
            let roof = f.intensity * c.copy_gbps;
            f.attainable_gflops = Some(peak.min(roof));
            f.bound = Some(if roof < peak { "memory" } else { "compute" }.into());
        }
    }
    out.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    out
}

/// Times one training step of `config` per kernel, blocking (call it on a
/// worker). Tries each of `contexts` in turn (the app's device may have been
/// opened without timestamp queries); with none that has them, times the CPU
/// backend's ops and says why. `ceilings` also measures the adapter's matmul
/// TFLOP/s and copy GB/s for the roofline (a few seconds on a fast GPU).
/// The step is the fastest of three, each after 0.2 s of training steps
/// (a GPU's clocks follow its load).
pub fn time_step(
    preset: &str,
    config: &Config,
    contexts: impl IntoIterator<Item = crate::gpu::GpuContext>,
    ceilings: bool,
) -> Result<KernelTimes, String> {
    let program = Program::new(config);
    let corpus = crate::data::Corpus::tiny_shakespeare(config.ctx).map_err(|e| e.to_string())?;
    let batch = crate::data::BatchSampler::new(1).next(&corpus, config.batch, config.ctx);
    let sp = StepParams {
        lr: config.lr,
        adam_t: 1,
        dropout_seed: 1,
    };
    let mut why = None;
    for ctx in contexts {
        let device = ctx.describe();
        if !ctx.has_timestamps() {
            why = Some(format!("{device} has no timestamp queries"));
            continue;
        }
        let mut gpu =
            crate::gpu::GpuBackend::new(ctx.clone(), program.clone()).map_err(|e| e.to_string())?;
        gpu.initialize(42).map_err(|e| e.to_string())?;
        #[cfg(not(target_arch = "wasm32"))]
        let ceilings = ceilings.then(|| super::gpu_ceilings(&ctx));
        #[cfg(target_arch = "wasm32")]
        let ceilings: Option<Ceilings> = {
            let _ = ceilings; // blocking measurements: not in the page
            None
        };
        // A GPU lowers its clocks between bursts: before each timed step,
        // about 0.2 s of training steps back to back bring them up (not on
        // a software adapter, whose one step takes seconds). The fastest of
        // three timed steps counts.
        let software = ctx.info.device_type == wgpu::DeviceType::Cpu;
        let total = |r: &Vec<(String, &str, f64)>| r.iter().map(|x| x.2).sum::<f64>();
        let mut best: Option<Vec<(String, &str, f64)>> = None;
        gpu.profile_step(&batch, sp); // compiles and allocates what it uses
        for _ in 0..3 {
            let warm = web_time::Instant::now();
            while !software && warm.elapsed().as_secs_f64() < 0.2 {
                gpu.train_step(&batch, sp);
            }
            if let Some(r) = gpu.profile_step(&batch, sp)
                && best.as_ref().is_none_or(|b| total(&r) < total(b))
            {
                best = Some(r);
            }
        }
        let Some(timed) = best else {
            why = Some(format!("{device} gave no timestamps"));
            continue;
        };
        return Ok(KernelTimes::from_timestamps(
            preset, device, &program, timed, ceilings,
        ));
    }
    Ok(KernelTimes::from_cpu_ops(
        preset,
        &program,
        super::profile_cpu_step(config, 3),
        format!(
            "{}: the CPU backend's op times instead",
            why.unwrap_or_else(|| "no GPU adapter".into())
        ),
    ))
}

impl KernelTimes {
    /// A step timed per dispatch: (op family, entry point, nanoseconds) in
    /// order ([`crate::gpu::GpuBackend::profile_step`]).
    pub fn from_timestamps(
        preset: &str,
        device: String,
        program: &Program,
        timed: Vec<(String, &str, f64)>,
        ceilings: Option<Ceilings>,
    ) -> Self {
        let rows: Vec<KernelRow> = timed
            .into_iter()
            .map(|(family, entry, ns)| KernelRow {
                family,
                entry: entry.to_string(),
                ms: ns / 1e6,
            })
            .collect();
        let datasheet = super::datasheet::for_adapter(&device);
        let mut families = families(program, &rows, ceilings.as_ref());
        if let Some(sheet) = &datasheet {
            for f in &mut families {
                f.datasheet_gflops = Some(sheet.f32_roof_gflops(f.intensity));
            }
        }
        KernelTimes {
            preset: preset.into(),
            device,
            source: "gpu_timestamps".into(),
            note: None,
            families,
            rows,
            ceilings,
            datasheet,
        }
    }

    /// The CPU backend's op times per family standing in, and why.
    pub fn from_cpu_ops(
        preset: &str,
        program: &Program,
        ops: Vec<(String, f64)>,
        note: String,
    ) -> Self {
        let rows: Vec<KernelRow> = ops
            .into_iter()
            .map(|(family, ms)| KernelRow {
                family,
                entry: String::new(),
                ms,
            })
            .collect();
        KernelTimes {
            preset: preset.into(),
            device: super::cpu_backend(&program.config).describe(),
            source: "cpu_ops".into(),
            note: Some(note),
            families: families(program, &rows, None),
            rows,
            ceilings: None,
            datasheet: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Families sum their rows, take the program's costs, and land under
    /// or over the ridge point as their intensity says.
    #[test]
    fn families_put_each_op_on_the_roofline() {
        let program = Program::new(&Config::load("small").unwrap());
        let rows = vec![
            KernelRow {
                family: "fwd linear".into(),
                entry: "matmul_nt".into(),
                ms: 0.25,
            },
            KernelRow {
                family: "fwd linear".into(),
                entry: "matmul_nt".into(),
                ms: 0.75,
            },
            KernelRow {
                family: "fwd residual".into(),
                entry: "residual_forward".into(),
                ms: 0.5,
            },
        ];
        let ceilings = Ceilings {
            matmul_tflops: 1.0,
            matmul_shape: [1, 1, 1],
            copy_gbps: 100.0,
        };
        let f = families(&program, &rows, Some(&ceilings));
        assert_eq!(f[0].family, "fwd linear");
        assert_eq!((f[0].ms, f[0].count), (1.0, 2));
        let linear_flops: f64 = program
            .steps
            .iter()
            .filter(|s| program.family(**s) == "fwd linear")
            .map(|s| program.cost(*s).flops)
            .sum();
        assert_eq!(f[0].flops, linear_flops);
        assert!((f[0].gflops - linear_flops / 1e-3 / 1e9).abs() < 1e-6 * f[0].gflops);
        // Ridge at 1000 GFLOP/s ÷ 100 GB/s = 10 FLOP/B: small's linears
        // (23 FLOP/B) are past it, a residual add (1/12) far below.
        assert_eq!(f[0].bound.as_deref(), Some("compute"));
        assert_eq!(f[1].bound.as_deref(), Some("memory"));
        assert!((f[1].attainable_gflops.unwrap() - f[1].intensity * 100.0).abs() < 1e-9);
    }
}
