//! The FlashAttention trace ([`tinygpt::flash`]): the traced kernels compute
//! what the untraced ones do, bit for bit; the trace's online softmax gives
//! back the saved log-sum-exp; the visits are those causality predicts; the
//! GPU's trace and the CPU model's agree; a trace leaves training untouched;
//! and `tinygpt flash-trace --json` prints it. The GPU tests run on whatever
//! adapter wgpu finds (lavapipe in CI) and fail without one.

mod common;

use common::{config, gpu_context};
use std::process::Command;
use tinygpt::backend::Backend;
use tinygpt::cpu::CpuBackend;
use tinygpt::data::Corpus;
use tinygpt::flash::{FlashRequest, FlashTrace, Pass, TraceSource, trace_blocking};
use tinygpt::gpu::GpuBackend;
use tinygpt::gpu::kernels::ATTENTION_TILE;
use tinygpt::model::config::Config;
use tinygpt::probe::ProbeRequest;
use tinygpt::program::Program;
use tinygpt::train::Trainer;

/// Awkward sizes: T = 37 (not a multiple of the tile: three tiles, the last
/// ragged), D = 16, three heads, dropout configured (a trace evaluates, so
/// it must not apply).
fn awkward() -> Config {
    config(2, 3, 48, 37, 3, 0.1)
}

fn backend(cfg: &Config, gpu: bool) -> Box<dyn Backend> {
    let program = Program::new(cfg);
    let mut b: Box<dyn Backend> = if gpu {
        Box::new(GpuBackend::new(gpu_context(), program).unwrap())
    } else {
        Box::new(CpuBackend::<f32>::new(program))
    };
    b.initialize(11).unwrap();
    b
}

fn request(cfg: &Config, row: usize, layer: usize, head: usize) -> FlashRequest {
    let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
    let batch = tinygpt::data::BatchSampler::new(5).next(&corpus, cfg.batch, cfg.ctx);
    let probe = ProbeRequest::for_batch_row(cfg, batch, row).unwrap();
    FlashRequest::from_probe(probe, layer, head)
}

fn trace(cfg: &Config, gpu: bool, req: &FlashRequest) -> FlashTrace {
    let mut b = backend(cfg, gpu);
    trace_blocking(b.as_mut(), req).unwrap()
}

/// Whether key block `kb` holds any key a query of tile `qt` may attend to
/// (j ≤ i, both < T): the blocks causality does not skip.
fn attends(t: usize, qt: usize, kb: usize) -> bool {
    let last_query = ((qt + 1) * ATTENTION_TILE).min(t) - 1;
    kb * ATTENTION_TILE <= last_query
}

#[test]
fn traced_kernels_compute_what_the_untraced_ones_do_bit_for_bit() {
    let cfg = awkward();
    for (row, layer, head) in [(0, 0, 0), (2, 1, 2)] {
        let t = trace(&cfg, true, &request(&cfg, row, layer, head));
        assert_eq!(t.source, TraceSource::Kernel);
        assert!(
            t.summary.bit_identical_to_untraced,
            "row {row} block {layer} head {head}: traced and untraced differ by up to {}",
            t.summary.untraced_max_abs_diff
        );
    }
}

#[test]
fn the_trace_gives_back_the_saved_log_sum_exp() {
    let cfg = awkward();
    let req = request(&cfg, 1, 1, 1);
    for gpu in [true, false] {
        let t = trace(&cfg, gpu, &req);
        let mut rows = 0;
        for qt in 0..t.tiles {
            // The query tile's last visit (in its loop's order) holds the final m and l.
            let last = t
                .pass(Pass::Forward)
                .filter(|v| v.q_tile == qt && !v.skipped)
                .max_by_key(|v| v.order)
                .unwrap();
            for r in 0..last.valid_rows(t.t) {
                let i = qt * ATTENTION_TILE + r;
                let [_, m, _, l, ..] = last.rows[r];
                let lse = m as f64 + (l as f64).ln();
                assert!(
                    (lse - t.lse[i] as f64).abs() < 1e-5,
                    "gpu {gpu}: row {i}: m + ln l = {lse}, saved {}",
                    t.lse[i]
                );
                rows += 1;
            }
        }
        assert_eq!(rows, cfg.ctx);
    }
}

#[test]
fn visits_are_what_causality_predicts_and_gpu_and_cpu_agree() {
    let cfg = awkward();
    let req = request(&cfg, 2, 0, 1);
    let gpu = trace(&cfg, true, &req);
    let cpu = trace(&cfg, false, &req);
    let nt = cfg.ctx.div_ceil(ATTENTION_TILE);
    for t in [&gpu, &cpu] {
        assert_eq!(t.tiles, nt);
        for pass in Pass::ALL {
            let mut seen = std::collections::HashSet::new();
            for v in t.pass(pass) {
                assert_eq!(
                    v.skipped,
                    !attends(cfg.ctx, v.q_tile, v.k_block),
                    "{pass:?} tile {} block {}",
                    v.q_tile,
                    v.k_block
                );
                assert!(seen.insert((v.q_tile, v.k_block)), "visited twice");
            }
            assert_eq!(seen.len(), nt * nt, "{pass:?}: every pair recorded once");
            let visited = t.pass(pass).filter(|v| !v.skipped).count();
            let predicted = (0..nt)
                .flat_map(|q| (0..nt).map(move |k| (q, k)))
                .filter(|&(q, k)| attends(cfg.ctx, q, k))
                .count();
            assert_eq!(visited, predicted);
            assert_eq!(t.summary.passes[pass.key()].visited, predicted);
            assert_eq!(t.summary.passes[pass.key()].skipped, nt * nt - predicted);
        }
        // The forward pass starts every query row at m = −∞ (no rescale of an empty O).
        for v in t.pass(Pass::Forward).filter(|v| !v.skipped && v.order == 0) {
            for r in 0..v.valid_rows(t.t) {
                assert_eq!(v.rows[r][4], 0.0, "the first rescale is exp(−∞) = 0");
                assert_eq!(v.rows[r][2], 0.0, "l starts at 0");
            }
        }
        assert!(t.summary.max_abs_diff_vs_naive < 1e-5);
        assert!(t.summary.lse_max_abs_diff_vs_naive < 1e-5);
        let scale = t.naive.dq.iter().chain(&t.naive.dk).chain(&t.naive.dv);
        let largest = scale.fold(0.0f64, |a, &b| a.max(b.abs()));
        assert!(
            t.summary.backward_max_abs_diff_vs_naive <= 1e-4 * largest,
            "backward differs by {} (largest |grad| {largest})",
            t.summary.backward_max_abs_diff_vs_naive
        );
    }
    // The same visits in the same order, with the same numbers.
    assert_eq!(gpu.visits.len(), cpu.visits.len());
    for (g, c) in gpu.visits.iter().zip(&cpu.visits) {
        assert_eq!(
            (g.pass, g.q_tile, g.k_block, g.skipped, g.order),
            (c.pass, c.q_tile, c.k_block, c.skipped, c.order)
        );
        if g.skipped {
            continue;
        }
        for r in 0..g.valid_rows(cfg.ctx) {
            for k in 0..5 {
                let (a, b) = (g.rows[r][k], c.rows[r][k]);
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + a.abs().max(b.abs())),
                    "{:?} ({}, {}) row {r} stat {k}: gpu {a}, cpu {b}",
                    g.pass,
                    g.q_tile,
                    g.k_block
                );
            }
        }
        for (a, b) in g.block_a.iter().zip(&c.block_a) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs().max(b.abs())));
        }
    }
}

#[test]
fn the_backward_recomputes_rows_of_p_that_sum_to_one() {
    // Σ over the dQ pass's blocks of Σ_j P_ij is row i of P, recomputed from
    // the saved log-sum-exp: 1 for every query. And the dK/dV pass sees the
    // same P, column by column.
    let cfg = awkward();
    let req = request(&cfg, 0, 1, 0);
    for gpu in [true, false] {
        let t = trace(&cfg, gpu, &req);
        let mut row_sums = vec![0.0f64; t.t];
        for v in t.pass(Pass::BackwardDq).filter(|v| !v.skipped) {
            for r in 0..v.valid_rows(t.t) {
                row_sums[v.q_tile * ATTENTION_TILE + r] += v.rows[r][0] as f64;
            }
        }
        for (i, s) in row_sums.iter().enumerate() {
            assert!(
                (s - 1.0).abs() < 1e-5,
                "gpu {gpu}: row {i} of P sums to {s}"
            );
        }
        let total_dkdv: f64 = t
            .pass(Pass::BackwardDkdv)
            .filter(|v| !v.skipped)
            .flat_map(|v| v.rows[..v.valid_rows(t.t)].iter().map(|r| r[0] as f64))
            .sum();
        assert!((total_dkdv - t.t as f64).abs() < 1e-3, "Σ P = {total_dkdv}");
    }
}

#[test]
fn a_trace_between_steps_leaves_training_bit_identical() {
    let cfg = awkward();
    for gpu in [false, true] {
        let corpus = Corpus::tiny_shakespeare(cfg.ctx).unwrap();
        let mut plain = Trainer::new(backend(&cfg, gpu), corpus.clone(), 3).unwrap();
        let mut traced = Trainer::new(backend(&cfg, gpu), corpus, 3).unwrap();
        let req = request(&cfg, 1, 1, 2);
        for step in 0..3 {
            plain.train_step().unwrap();
            trace_blocking(traced.backend.as_mut(), &req).unwrap();
            traced.train_step().unwrap();
            let names: Vec<String> = plain
                .backend
                .program()
                .params()
                .map(|id| plain.backend.program().tensors[id].name.clone())
                .collect();
            for name in names {
                for prefix in ["", "adam.m.", "adam.v."] {
                    let full = format!("{prefix}{name}");
                    assert_eq!(
                        plain.backend.read(&full).unwrap(),
                        traced.backend.read(&full).unwrap(),
                        "gpu {gpu}: {full} after step {step}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let cfg = awkward();
    let mut b = backend(&cfg, false);
    for (req, says) in [
        (request(&cfg, 0, 0, 3), "head 3 does not exist"),
        (request(&cfg, 0, 2, 0), "block 2 does not exist"),
        (
            FlashRequest {
                row: 3,
                ..request(&cfg, 0, 0, 0)
            },
            "batch row 3 does not exist",
        ),
    ] {
        let err = trace_blocking(b.as_mut(), &req).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
    }
}

fn tinygpt(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tinygpt"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_cli_prints_every_visit_and_a_summary() {
    let mut objects = Vec::new();
    for backend in ["cpu", "gpu"] {
        let lines = common::json_lines(&[
            "flash-trace",
            "--preset",
            "tiny",
            "--layer",
            "1",
            "--head",
            "2",
            "--backend",
            backend,
            "--json",
            "--blocks",
        ]);
        let (summary, visits) = lines.split_last().unwrap();
        assert_eq!(summary["summary"], true);
        let t = summary["t"].as_u64().unwrap() as usize;
        let nt = t.div_ceil(ATTENTION_TILE);
        assert_eq!(summary["tile_q"], ATTENTION_TILE);
        assert_eq!(summary["tile_k"], ATTENTION_TILE);
        assert_eq!(visits.len(), 3 * nt * nt);
        let forward: Vec<_> = visits.iter().filter(|v| v["pass"] == "forward").collect();
        let visited = forward.iter().filter(|v| v["skipped"] == false).count();
        assert_eq!(summary["visited"], visited);
        assert_eq!(summary["skipped"], nt * nt - visited);
        assert!(summary["max_abs_diff_vs_naive"].as_f64().unwrap() < 1e-5);
        for v in &forward {
            for key in [
                "q_tile", "k_block", "m_before", "m_after", "l_before", "l_after", "rescale",
            ] {
                assert!(v.get(key).is_some(), "{key} missing from {v}");
            }
            if v["skipped"] == false {
                assert_eq!(
                    v["s"].as_array().unwrap().len(),
                    ATTENTION_TILE * ATTENTION_TILE
                );
            }
        }
        objects.push(lines);
    }
    let source = |lines: &Vec<serde_json::Value>| lines.last().unwrap()["source"].clone();
    assert_eq!(source(&objects[0]), "cpu_model");
    assert_eq!(source(&objects[1]), "kernel");
    let keys = |lines: &Vec<serde_json::Value>| -> Vec<(String, u64, u64, bool)> {
        lines[..lines.len() - 1]
            .iter()
            .map(|v| {
                (
                    v["pass"].as_str().unwrap().to_string(),
                    v["q_tile"].as_u64().unwrap(),
                    v["k_block"].as_u64().unwrap(),
                    v["skipped"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(keys(&objects[0]), keys(&objects[1]));

    let bad = tinygpt(&["flash-trace", "--preset", "tiny", "--head", "9"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("head 9 does not exist"));
}
