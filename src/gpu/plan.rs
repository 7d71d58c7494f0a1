//! Planning a step: for every entry of the program's step list, the kernel
//! dispatches that run it, with their bindings, uniform parameters and
//! workgroup counts. [`super::GpuBackend::new`] turns the plan into bind
//! groups once; nothing here touches the device.

use super::kernels::ATTENTION_TILE;
use super::params::{
    AttnParams, CeParams, EmbParams, EwParams, LnParams, MatmulParams, OptParams, WgslMirror,
};
use crate::model::config::VOCAB;
use crate::program::{Op, Program, Step, TensorId};

/// Where a tensor lives: a byte range of one of our buffers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub(super) buffer: usize,
    pub(super) offset: u64,
    pub(super) size: u64,
}

/// What a binding slot is bound to while planning.
#[derive(Clone, Copy, Debug)]
pub(super) enum Src {
    At(Place),
    DummyRo,
    DummyRw,
    /// This dispatch's own uniform block.
    Params,
    Step,
    /// The probes' window (`ProbeWindow` in attention_probs.wgsl): batch
    /// row and positions, written before a probe is submitted.
    Window,
}

/// One dispatch before its bind group exists.
pub(super) struct Planned {
    pub(super) entry: &'static str,
    pub(super) bindings: Vec<Src>,
    pub(super) params: Vec<u8>,
    pub(super) groups: [u32; 3],
}

/// Elements per workgroup of `sum_squares_partial`.
pub(super) const NORM_CHUNK: usize = 4096;
/// Rows per partial column sum (`ROWS_PER_CHUNK` in layernorm.wgsl).
pub(super) const ROWS_PER_CHUNK: usize = 16;

/// Split-K plan for an M×K×N matmul: (splits, K per split). Few output tiles
/// with a long K (the weight gradients: M, N = layer widths, K = B·T; and
/// dinp at small widths) leave most of the GPU idle, so K is cut into pieces
/// of at least 64 until there are about 256 workgroups.
pub fn split_k(m: usize, k: usize, n: usize) -> (usize, usize) {
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    if tiles >= 128 || k < 256 {
        return (1, k);
    }
    let want = 256usize.div_ceil(tiles).min(k / 64).max(1);
    let k_split = k.div_ceil(want).next_multiple_of(16);
    (k.div_ceil(k_split), k_split)
}

pub(super) fn words(values: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// Workgroups for a grid-stride kernel of 256 threads over `n` elements.
pub(super) fn grid(n: usize) -> [u32; 3] {
    [n.div_ceil(256).clamp(1, 65535) as u32, 1, 1]
}

/// One workgroup per row, rows beyond 65535 folded into y.
fn per_row(rows: usize) -> [u32; 3] {
    [
        rows.clamp(1, 65535) as u32,
        rows.div_ceil(65535).max(1) as u32,
        1,
    ]
}

/// The buffers a plan binds besides the tensors themselves.
pub(super) struct Scratch {
    /// Flat parameters, gradients, first and second moments.
    pub(super) flat: [usize; 4],
    /// (start, length) in floats of each flat chunk that fits one binding.
    pub(super) chunks: Vec<(usize, usize)>,
    pub(super) stats: usize,
    pub(super) partials: usize,
    pub(super) part: usize,
    pub(super) delta: usize,
    pub(super) split: usize,
    pub(super) order: usize,
    pub(super) offsets: usize,
}

/// Every dispatch of the step, per entry of `program.steps`.
pub(super) fn plan_steps(
    program: &Program,
    places: &[Option<Place>],
    scratch: &Scratch,
) -> Vec<(Step, Vec<Planned>)> {
    let cfg = &program.config;
    let rows = program.rows();
    let Scratch {
        flat: [flat_params, flat_grads, flat_m, flat_v],
        ref chunks,
        stats,
        partials,
        part,
        delta,
        split: split_scratch,
        order: order_buf,
        offsets: offsets_buf,
    } = *scratch;
    let p = |id: TensorId| Src::At(places[id].unwrap());
    let g = |id: TensorId| Src::At(places[program.tensors[id].grad.unwrap()].unwrap());
    let whole = |buffer: usize, bytes: u64| {
        Src::At(Place {
            buffer,
            offset: 0,
            size: bytes,
        })
    };
    let (b, t, c, v) = (cfg.batch, cfg.ctx, cfg.d_model, VOCAB);
    let mm = |entry: &'static str,
              a: Src,
              bm: Src,
              out: Src,
              bias: Option<Src>,
              m: usize,
              k: usize,
              n: usize,
              acc: bool| {
        let flags = if acc { 1 } else { 0 } | if bias.is_some() { 2 } else { 0 };
        let (splits, k_split) = split_k(m, k, n);
        let params = MatmulParams {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            flags,
            alpha: 1.0,
            k_split: k_split as u32,
            splits: splits as u32,
            ..Default::default()
        }
        .bytes();
        let tiles = [n.div_ceil(64) as u32, m.div_ceil(64) as u32, splits as u32];
        if splits == 1 {
            return vec![Planned {
                entry,
                bindings: vec![a, bm, out, bias.unwrap_or(Src::DummyRo), Src::Params],
                params,
                groups: tiles,
            }];
        }
        let scratch = whole(split_scratch, 0);
        vec![
            Planned {
                entry,
                bindings: vec![a, bm, scratch, Src::DummyRo, Src::Params],
                params: params.clone(),
                groups: tiles,
            },
            Planned {
                entry: "matmul_split_reduce",
                bindings: vec![
                    scratch,
                    Src::DummyRo,
                    out,
                    bias.unwrap_or(Src::DummyRo),
                    Src::Params,
                ],
                params,
                groups: grid(m * n),
            },
        ]
    };
    let ew =
        |entry: &'static str, dst: Src, x: Src, y: Src, n: usize, stream: u32, prob: f32| Planned {
            entry,
            bindings: vec![dst, x, y, Src::Params, Src::Step],
            params: EwParams {
                n: n as u32,
                stream,
                p: prob,
                ..Default::default()
            }
            .bytes(),
            groups: grid(n),
        };
    let chunks_n = rows.div_ceil(ROWS_PER_CHUNK);
    let ln_params = |rows: usize, width: usize, stride: usize, offset: usize| {
        LnParams {
            rows: rows as u32,
            c: width as u32,
            chunks: chunks_n as u32,
            part_stride: stride as u32,
            part_offset: offset as u32,
            ..Default::default()
        }
        .bytes()
    };
    let column_sum = |dst: Src, width: usize, stride: usize, offset: usize| Planned {
        entry: "column_sums_final",
        bindings: vec![
            Src::DummyRo,
            Src::DummyRo,
            dst,
            Src::DummyRw,
            Src::DummyRw,
            Src::DummyRo,
            whole(part, 0),
            Src::Params,
        ],
        params: ln_params(rows, width, stride, offset),
        groups: [width.div_ceil(64) as u32, 1, 1],
    };
    let bias_grad = |dout: Src, dbias: Src, width: usize| {
        vec![
            Planned {
                entry: "bias_grad_part",
                bindings: vec![
                    Src::DummyRo,
                    Src::DummyRo,
                    Src::DummyRw,
                    Src::DummyRw,
                    Src::DummyRw,
                    dout,
                    whole(part, 0),
                    Src::Params,
                ],
                params: ln_params(rows, width, width, 0),
                groups: [chunks_n as u32, 1, 1],
            },
            column_sum(dbias, width, width, 0),
        ]
    };
    let emb_params = EmbParams {
        rows: rows as u32,
        t: t as u32,
        c: c as u32,
        vocab: v as u32,
    }
    .bytes();
    let ce_params = CeParams {
        rows: rows as u32,
        vocab: v as u32,
        ..Default::default()
    }
    .bytes();

    let mut planned_steps: Vec<(Step, Vec<Planned>)> = Vec::new();
    // The training step, then the probes (which training never runs).
    for step in program.steps.iter().chain(&program.probes) {
        let plans: Vec<Planned> = match *step {
            Step::ZeroGrads => vec![],
            Step::Forward(i) => match program.ops[i].op {
                Op::Embedding {
                    tokens: tk,
                    wte,
                    wpe,
                    out,
                } => vec![Planned {
                    entry: "embedding_forward",
                    bindings: vec![
                        p(tk),
                        p(wte),
                        // Unread without position embeddings (POSITIONS = false).
                        p(wpe.unwrap_or(wte)),
                        p(out),
                        whole(order_buf, 0),
                        whole(offsets_buf, 0),
                        Src::Params,
                    ],
                    params: emb_params.clone(),
                    groups: grid(rows * c),
                }],
                Op::LayerNorm {
                    inp,
                    weight,
                    bias,
                    out,
                    mean,
                    rstd,
                } => {
                    let width = program.tensors[inp].shape.last().copied().unwrap();
                    vec![Planned {
                        entry: "layernorm_forward",
                        bindings: vec![
                            p(inp),
                            p(weight),
                            p(out),
                            p(mean),
                            p(rstd),
                            p(bias),
                            Src::DummyRw,
                            Src::Params,
                        ],
                        params: ln_params(rows, width, 0, 0),
                        groups: per_row(rows),
                    }]
                }
                Op::Linear {
                    inp,
                    weight,
                    bias,
                    out,
                    in_features,
                    out_features,
                } => mm(
                    "matmul_nt",
                    p(inp),
                    p(weight),
                    p(out),
                    Some(p(bias)),
                    rows,
                    in_features,
                    out_features,
                    false,
                ),
                // Causal or not is built into the kernels (`Kernels::new`
                // templates CAUSAL from the same `Config::lab`).
                Op::Attention {
                    qkv,
                    out,
                    lse,
                    n_head,
                    dropout,
                    stream,
                    ..
                } => vec![Planned {
                    entry: "attention_forward",
                    bindings: vec![
                        p(qkv),
                        p(out),
                        p(lse),
                        Src::DummyRo,
                        Src::DummyRw,
                        Src::DummyRw,
                        Src::Params,
                        Src::Step,
                        Src::DummyRw, // trace: only traced pipelines write it
                    ],
                    params: attn_params(cfg, cfg.batch, n_head, stream, dropout),
                    groups: [t.div_ceil(ATTENTION_TILE) as u32, (b * n_head) as u32, 1],
                }],
                Op::Gelu { inp, out } => vec![ew(
                    "gelu_forward",
                    p(out),
                    p(inp),
                    Src::DummyRw,
                    program.tensors[out].numel(),
                    0,
                    0.0,
                )],
                Op::Residual { a, b: bb, out } => vec![ew(
                    "residual_forward",
                    p(out),
                    p(a),
                    p(bb),
                    program.tensors[out].numel(),
                    0,
                    0.0,
                )],
                Op::Dropout {
                    inp,
                    out,
                    p: prob,
                    stream,
                } => {
                    vec![ew(
                        "dropout_forward",
                        p(out),
                        p(inp),
                        Src::DummyRw,
                        program.tensors[out].numel(),
                        stream,
                        prob,
                    )]
                }
                Op::TiedHead { inp, wte, out } => {
                    mm("matmul_nt", p(inp), p(wte), p(out), None, rows, c, v, false)
                }
                Op::CrossEntropy {
                    logits,
                    targets: tg,
                    losses,
                } => vec![
                    Planned {
                        entry: "cross_entropy_forward",
                        bindings: vec![
                            p(logits),
                            p(tg),
                            p(losses),
                            Src::DummyRw,
                            whole(stats, 16),
                            Src::Params,
                        ],
                        params: ce_params.clone(),
                        groups: per_row(rows),
                    },
                    Planned {
                        entry: "loss_mean",
                        bindings: vec![
                            Src::DummyRo,
                            Src::DummyRo,
                            p(losses),
                            Src::DummyRw,
                            whole(stats, 16),
                            Src::Params,
                        ],
                        params: ce_params.clone(),
                        groups: [1, 1, 1],
                    },
                ],
            },
            Step::Backward(i) => match program.ops[i].op {
                Op::Embedding {
                    tokens: tk,
                    wte,
                    wpe,
                    out,
                } => {
                    let binds = vec![
                        p(tk),
                        g(wte),
                        g(wpe.unwrap_or(wte)),
                        g(out),
                        whole(order_buf, 0),
                        whole(offsets_buf, 0),
                        Src::Params,
                    ];
                    let wpe_grad = wpe.map(|_| Planned {
                        entry: "embedding_backward_wpe",
                        bindings: binds.clone(),
                        params: emb_params.clone(),
                        groups: grid(t * c),
                    });
                    let wte_grad = Planned {
                        entry: "embedding_backward_wte",
                        bindings: binds,
                        params: emb_params.clone(),
                        groups: grid(v * c),
                    };
                    wpe_grad.into_iter().chain([wte_grad]).collect()
                }
                Op::LayerNorm {
                    inp,
                    weight,
                    bias,
                    out,
                    mean,
                    rstd,
                } => {
                    let width = program.tensors[inp].shape.last().copied().unwrap();
                    vec![
                        Planned {
                            entry: "layernorm_backward_dx",
                            bindings: vec![
                                p(inp),
                                p(weight),
                                g(inp),
                                p(mean),
                                p(rstd),
                                g(out),
                                Src::DummyRw,
                                Src::Params,
                            ],
                            params: ln_params(rows, width, 0, 0),
                            groups: per_row(rows),
                        },
                        Planned {
                            entry: "layernorm_backward_part",
                            bindings: vec![
                                p(inp),
                                p(weight),
                                Src::DummyRw,
                                p(mean),
                                p(rstd),
                                g(out),
                                whole(part, 0),
                                Src::Params,
                            ],
                            params: ln_params(rows, width, 0, 0),
                            groups: [chunks_n as u32, 1, 1],
                        },
                        Planned {
                            entry: "layernorm_params_final",
                            // dweight in the `out` slot, dbias in the `mean` slot
                            bindings: vec![
                                Src::DummyRo,
                                Src::DummyRo,
                                g(weight),
                                g(bias),
                                Src::DummyRw,
                                Src::DummyRo,
                                whole(part, 0),
                                Src::Params,
                            ],
                            params: ln_params(rows, width, 2 * width, 0),
                            groups: [width.div_ceil(64) as u32, 1, 1],
                        },
                    ]
                }
                Op::Linear {
                    inp,
                    weight,
                    bias,
                    out,
                    in_features,
                    out_features,
                } => {
                    let mut v = mm(
                        "matmul_nn",
                        g(out),
                        p(weight),
                        g(inp),
                        None,
                        rows,
                        out_features,
                        in_features,
                        true,
                    );
                    v.extend(mm(
                        "matmul_tn",
                        g(out),
                        p(inp),
                        g(weight),
                        None,
                        out_features,
                        rows,
                        in_features,
                        true,
                    ));
                    v.extend(bias_grad(g(out), g(bias), out_features));
                    v
                }
                // Causal or not is built into the kernels (`Kernels::new`
                // templates CAUSAL from the same `Config::lab`).
                Op::Attention {
                    qkv,
                    out,
                    lse,
                    n_head,
                    dropout,
                    stream,
                    ..
                } => {
                    let binds = vec![
                        p(qkv),
                        p(out),
                        p(lse),
                        g(out),
                        g(qkv),
                        whole(delta, 0),
                        Src::Params,
                        Src::Step,
                        Src::DummyRw, // trace: only traced pipelines write it
                    ];
                    let params = attn_params(cfg, cfg.batch, n_head, stream, dropout);
                    let tiles = [t.div_ceil(ATTENTION_TILE) as u32, (b * n_head) as u32, 1];
                    vec![
                        Planned {
                            entry: "attention_backward_delta",
                            bindings: binds.clone(),
                            params: params.clone(),
                            groups: grid(b * n_head * t),
                        },
                        Planned {
                            entry: "attention_backward_dkdv",
                            bindings: binds.clone(),
                            params: params.clone(),
                            groups: tiles,
                        },
                        Planned {
                            entry: "attention_backward_dq",
                            bindings: binds,
                            params,
                            groups: tiles,
                        },
                    ]
                }
                Op::Gelu { inp, out } => vec![ew(
                    "gelu_backward",
                    g(inp),
                    g(out),
                    p(inp),
                    program.tensors[out].numel(),
                    0,
                    0.0,
                )],
                Op::Residual { a, b: bb, out } => {
                    // One dispatch adds dout to both inputs' gradients (the
                    // second rides in the `y` slot, read-write in accumulate2).
                    vec![ew(
                        "accumulate2",
                        g(a),
                        g(out),
                        g(bb),
                        program.tensors[out].numel(),
                        0,
                        0.0,
                    )]
                }
                Op::Dropout {
                    inp,
                    out,
                    p: prob,
                    stream,
                } => {
                    vec![ew(
                        "dropout_backward",
                        g(inp),
                        g(out),
                        Src::DummyRw,
                        program.tensors[out].numel(),
                        stream,
                        prob,
                    )]
                }
                Op::TiedHead { inp, wte, out } => {
                    let mut d = mm("matmul_nn", g(out), p(wte), g(inp), None, rows, v, c, true);
                    d.extend(mm(
                        "matmul_tn",
                        g(out),
                        p(inp),
                        g(wte),
                        None,
                        v,
                        rows,
                        c,
                        true,
                    ));
                    d
                }
                Op::CrossEntropy {
                    logits,
                    targets: tg,
                    losses,
                } => vec![Planned {
                    entry: "cross_entropy_backward",
                    bindings: vec![
                        p(logits),
                        p(tg),
                        p(losses),
                        g(logits),
                        whole(stats, 16),
                        Src::Params,
                    ],
                    params: ce_params.clone(),
                    groups: per_row(rows),
                }],
            },
            Step::AttentionProbs(i) => match program.ops[i].op {
                Op::Attention {
                    qkv,
                    lse,
                    n_head,
                    dropout,
                    stream,
                    ..
                } => vec![Planned {
                    entry: "attention_probs",
                    bindings: vec![p(qkv), p(lse), p(program.probs), Src::Params, Src::Window],
                    params: attn_params(cfg, cfg.batch, n_head, stream, dropout),
                    // Covers n = T; threads past n·n return.
                    groups: [(t * t).div_ceil(256) as u32, n_head as u32, 1],
                }],
                _ => panic!("AttentionProbs({i}) names an op that is not attention"),
            },
            Step::ClipGradNorm => {
                let mut v = Vec::new();
                let mut first = 0usize;
                for &(start, len) in chunks {
                    let groups = len.div_ceil(NORM_CHUNK);
                    v.push(opt_plan(
                        "sum_squares_partial",
                        &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, start, len),
                        whole(stats, 16),
                        whole(partials, 0),
                        [len as u32, start as u32, first as u32, 0],
                        [groups.min(65535) as u32, groups.div_ceil(65535) as u32, 1],
                    ));
                    first += groups;
                }
                let (s0, l0) = chunks[0];
                v.push(opt_plan(
                    "grad_norm_final",
                    &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, s0, l0),
                    whole(stats, 16),
                    whole(partials, 0),
                    [0, 0, first as u32, 0],
                    [1, 1, 1],
                ));
                v
            }
            Step::AdamW => {
                // The halt flag follows the partial sums (see adamw.wgsl).
                let halt = chunks
                    .iter()
                    .map(|&(_, len)| len.div_ceil(NORM_CHUNK))
                    .sum::<usize>();
                chunks
                    .iter()
                    .map(|&(start, len)| {
                        opt_plan(
                            "adamw_update",
                            &chunks_srcs(flat_params, flat_grads, flat_m, flat_v, start, len),
                            whole(stats, 16),
                            whole(partials, 0),
                            [len as u32, start as u32, halt as u32, 0],
                            grid(len),
                        )
                    })
                    .collect()
            }
        };
        planned_steps.push((*step, plans));
    }

    planned_steps
}

/// `AttnParams` (common.wgsl) of an attention op over `batch` rows.
pub(super) fn attn_params(
    cfg: &crate::model::config::Config,
    batch: usize,
    n_head: usize,
    stream: u32,
    dropout: f32,
) -> Vec<u8> {
    let d = cfg.d_model / n_head;
    AttnParams {
        b: batch as u32,
        t: cfg.ctx as u32,
        c: cfg.d_model as u32,
        h: n_head as u32,
        d: d as u32,
        stream,
        p: dropout,
        scale: 1.0 / (d as f32).sqrt(),
    }
    .bytes()
}

fn chunks_srcs(
    params: usize,
    grads: usize,
    m: usize,
    v: usize,
    start: usize,
    len: usize,
) -> [Src; 4] {
    [params, grads, m, v].map(|buffer| {
        Src::At(Place {
            buffer,
            offset: start as u64 * 4,
            size: len as u64 * 4,
        })
    })
}

fn opt_plan(
    entry: &'static str,
    flat: &[Src; 4],
    stats: Src,
    partials: Src,
    op: [u32; 4],
    groups: [u32; 3],
) -> Planned {
    Planned {
        entry,
        bindings: vec![
            flat[0],
            flat[1],
            flat[2],
            flat[3],
            stats,
            partials,
            Src::Params,
            Src::Step,
        ],
        params: OptParams {
            n: op[0],
            offset: op[1],
            first_group: op[2],
            _pad: op[3],
        }
        .bytes(),
        groups,
    }
}
