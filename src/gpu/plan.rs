//! Planning a step: for every entry of the program's step list, the kernel
//! dispatches that run it, with their bindings, uniform parameters and
//! workgroup counts. [`super::GpuBackend::new`] turns the plan into bind
//! groups once; nothing here touches the device.

use super::kernels::{self, ATTENTION_ROWS};
use super::coop;
use super::matmul_tiles::{Layout, MatmulChoice, TileConfig, split_k_for, tile_dims, tile_for};
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

/// The loss scale a mixed-precision run starts from (PyTorch's GradScaler's
/// 2¹⁶), and the clean steps after which it doubles (GradScaler's 2000).
pub const LOSS_SCALE_INIT: f32 = 65536.0;
pub const LOSS_SCALE_GROWTH_INTERVAL: u32 = 2000;

/// Elements per workgroup of `sum_squares_partial`.
pub(super) const NORM_CHUNK: usize = 4096;
/// Rows per partial column sum (`ROWS_PER_CHUNK` in layernorm.wgsl).
pub(super) const ROWS_PER_CHUNK: usize = 16;
/// Columns per workgroup of the column sums' final pass (`FINAL_COLUMNS` in
/// layernorm.wgsl).
const FINAL_COLUMNS: usize = 16;
/// The most rows (B·T) whose column sums (bias and LayerNorm parameter
/// gradients) take one dispatch (`bias_grad_direct`,
/// `layernorm_params_direct`) rather than a partial pass and a final one:
/// the same sums in the same order, each of the final pass's threads
/// summing its chunks' rows itself. Beyond it (nanogpt-char's 16384 rows)
/// those threads' chains of loads grow long and the two passes spread the
/// rows over more of the GPU.
pub const DIRECT_SUMS_MAX_ROWS: usize = 2048;

/// Split-K plan for an M×K×N matmul: (splits, K per split). Few output tiles
/// with a long K (the weight gradients: M, N = layer widths, K = B·T; and
/// dinp at small widths) leave most of the GPU idle, so K is cut into pieces
/// of at least 64 until there are about 256 workgroups.
pub fn split_k(m: usize, k: usize, n: usize) -> (usize, usize) {
    split_k_for((64, 64), m, k, n)
}

/// The kernel of an M×K×N matmul on a device with these limits (a
/// warp-tiled configuration, or `None`: matmul.wgsl's), and its split-K plan.
pub(super) fn matmul_tiling(
    m: usize,
    k: usize,
    n: usize,
    layout: Layout,
    choice: MatmulChoice,
    limits: &wgpu::Limits,
) -> (Option<&'static TileConfig>, usize, usize) {
    let tile = tile_for(m, k, n, layout, choice, limits);
    let (splits, k_split) = split_k_for(tile_dims(tile), m, k, n);
    (tile, splits, k_split)
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
    /// The loss scaler's state (adamw.wgsl): [S, clean steps, skipped, skipped now].
    pub(super) scaler: usize,
    pub(super) partials: usize,
    pub(super) part: usize,
    pub(super) delta: usize,
    /// Attention's f16 copies of q, k, v and dO on the tensor cores
    /// (`coop::attention_halves_bytes`; 16 bytes where attention is f32).
    pub(super) halves: usize,
    pub(super) split: usize,
    pub(super) order: usize,
    pub(super) offsets: usize,
}

/// Every dispatch of the step, per entry of `program.steps`, then of the
/// probes (which training never runs).
pub(super) fn plan_steps(
    program: &Program,
    places: &[Option<Place>],
    scratch: &Scratch,
    matmul: MatmulChoice,
    limits: &wgpu::Limits,
) -> Vec<(Step, Vec<Planned>)> {
    let planner = Planner::new(program, places, scratch, matmul, limits);
    program
        .steps
        .iter()
        .chain(&program.probes)
        .map(|step| (*step, planner.step(*step)))
        .collect()
}

/// What planning one entry needs: the program, where its tensors live, the
/// scratch buffers, and the shapes every kernel shares. Each op has its
/// forward and backward side by side below (llm.c's order), so a fusion
/// changes one pair.
struct Planner<'a> {
    program: &'a Program,
    places: &'a [Option<Place>],
    scratch: &'a Scratch,
    /// Which matmul kernels to run, and the device's limits (which it runs).
    matmul: MatmulChoice,
    limits: &'a wgpu::Limits,
    /// B·T.
    rows: usize,
    /// Row chunks of the column sums (`ROWS_PER_CHUNK` rows each).
    chunks_n: usize,
    /// [`Program::last_readers`], for [`Program::writes_gradient`].
    last_readers: Vec<Option<usize>>,
}

impl<'a> Planner<'a> {
    fn new(
        program: &'a Program,
        places: &'a [Option<Place>],
        scratch: &'a Scratch,
        matmul: MatmulChoice,
        limits: &'a wgpu::Limits,
    ) -> Self {
        let rows = program.rows();
        Self {
            program,
            places,
            scratch,
            matmul,
            limits,
            rows,
            chunks_n: rows.div_ceil(ROWS_PER_CHUNK),
            last_readers: program.last_readers(),
        }
    }

    fn step(&self, step: Step) -> Vec<Planned> {
        match step {
            Step::ZeroGrads => vec![],
            Step::Forward(i) => self.op(i, false),
            Step::Backward(i) => self.op(i, true),
            Step::AttentionProbs(i) => match self.program.ops[i].op {
                Op::Attention {
                    qkv,
                    lse,
                    n_head,
                    dropout,
                    stream,
                    ..
                } => self.attention_probs(qkv, lse, n_head, dropout, stream),
                _ => panic!("AttentionProbs({i}) names an op that is not attention"),
            },
            Step::ClipGradNorm => self.clip_grad_norm(),
            Step::AdamW => self.adamw(),
        }
    }

    /// Op `i`'s dispatches in one pass: its forward, or its backward.
    fn op(&self, i: usize, backward: bool) -> Vec<Planned> {
        let op = &self.program.ops[i].op;
        // Whether the backward writes the gradient of `input` outright.
        let write = |input| self.program.writes_gradient(&self.last_readers, i, input);
        // Each arm picks one of a pair of methods below.
        macro_rules! pass {
            ($forward:ident, $backward:ident ($($arg:expr),*)) => {
                if backward { self.$backward($($arg),*) } else { self.$forward($($arg),*) }
            };
        }
        match *op {
            Op::Embedding {
                tokens,
                wte,
                wpe,
                out,
            } => {
                pass!(embedding_forward, embedding_backward(tokens, wte, wpe, out))
            }
            Op::LayerNorm {
                inp,
                weight,
                bias,
                out,
                mean,
                rstd,
            } => {
                pass!(
                    layernorm_forward,
                    layernorm_backward(inp, weight, bias, out, mean, rstd)
                )
            }
            Op::Linear {
                inp,
                weight,
                bias,
                out,
                in_features,
                out_features,
            } => {
                let dims = [in_features, out_features];
                if backward {
                    self.linear_backward(inp, weight, bias, out, dims, write(inp))
                } else {
                    self.linear_forward(inp, weight, bias, out, in_features, out_features)
                }
            }
            Op::LowRank {
                inp,
                lora_a,
                lora_b,
                base,
                mid,
                out,
                rank,
                in_features,
                out_features,
                scale,
            } => {
                let dims = [rank, in_features, out_features];
                pass!(
                    lowrank_forward,
                    lowrank_backward(inp, lora_a, lora_b, base, mid, out, dims, scale)
                )
            }
            Op::Attention {
                qkv,
                out,
                lse,
                n_head,
                dropout,
                stream,
                ..
            } => {
                pass!(
                    attention_forward,
                    attention_backward(qkv, out, lse, n_head, dropout, stream)
                )
            }
            Op::Gelu { inp, out } if backward => self.gelu_backward(inp, out, write(inp)),
            Op::Gelu { inp, out } => self.gelu_forward(inp, out),
            Op::Residual { a, b, out } if backward => {
                self.residual_backward(a, b, out, [write(a), write(b)])
            }
            Op::Residual { a, b, out } => self.residual_forward(a, b, out),
            Op::Dropout {
                inp,
                out,
                p,
                stream,
            } if backward => self.dropout_backward(inp, out, p, stream, write(inp)),
            Op::Dropout {
                inp,
                out,
                p,
                stream,
            } => self.dropout_forward(inp, out, p, stream),
            Op::TiedHead { inp, wte, out } if backward => {
                self.tied_head_backward(inp, wte, out, write(inp))
            }
            Op::TiedHead { inp, wte, out } => self.tied_head_forward(inp, wte, out),
            Op::CrossEntropy {
                logits,
                targets,
                losses,
            } => {
                pass!(
                    cross_entropy_forward,
                    cross_entropy_backward(logits, targets, losses)
                )
            }
        }
    }

    // --- where things are ---------------------------------------------------

    /// A tensor.
    fn p(&self, id: TensorId) -> Src {
        Src::At(self.places[id].unwrap())
    }

    /// Whether a parameter is frozen (a LoRA fine-tune's base): its
    /// gradient is never computed.
    fn frozen(&self, id: TensorId) -> bool {
        self.program.tensors[id].is_frozen()
    }

    /// A tensor's gradient.
    fn g(&self, id: TensorId) -> Src {
        Src::At(self.places[self.program.tensors[id].grad.unwrap()].unwrap())
    }

    /// A whole buffer (`bytes` 0: all of it).
    fn whole(&self, buffer: usize, bytes: u64) -> Src {
        Src::At(Place {
            buffer,
            offset: 0,
            size: bytes,
        })
    }

    fn numel(&self, id: TensorId) -> usize {
        self.program.tensors[id].numel()
    }

    /// Clean steps before the loss scale doubles: PyTorch's GradScaler's
    /// 2000 where the matmuls run on the tensor cores, else 0 (no scaling).
    fn growth_interval(&self) -> u32 {
        if self.matmul.tensor_cores() { LOSS_SCALE_GROWTH_INTERVAL } else { 0 }
    }

    fn cfg(&self) -> &crate::model::config::Config {
        &self.program.config
    }

    // --- shared kernels -----------------------------------------------------

    /// C (m, n) = A · B in the layout of `entry`, optionally plus a bias and
    /// accumulated into C; split-K (partials, then a reduce) where it pays.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        layout: Layout,
        a: Src,
        b: Src,
        out: Src,
        bias: Option<Src>,
        m: usize,
        k: usize,
        n: usize,
        accumulate: bool,
    ) -> Vec<Planned> {
        self.matmul_scaled(layout, a, b, out, bias, m, k, n, accumulate, 1.0)
    }

    /// [`Planner::matmul`] with the product scaled by `alpha` (before the
    /// bias and what C held are added).
    #[allow(clippy::too_many_arguments)]
    fn matmul_scaled(
        &self,
        layout: Layout,
        a: Src,
        b: Src,
        out: Src,
        bias: Option<Src>,
        m: usize,
        k: usize,
        n: usize,
        accumulate: bool,
        alpha: f32,
    ) -> Vec<Planned> {
        let flags = if accumulate { 1 } else { 0 } | if bias.is_some() { 2 } else { 0 };
        let (tile, splits, k_split) = matmul_tiling(m, k, n, layout, self.matmul, self.limits);
        let (tile_m, tile_n) = tile_dims(tile);
        let entry = tile.map_or(layout.flat_entry(), |t| t.entries[layout.index()]);
        // The tensor cores' accumulating build where C is added to in place.
        let entry = match coop::accumulating_entry(entry) {
            Some(acc) if accumulate && splits == 1 => acc,
            _ => entry,
        };
        let params = MatmulParams {
            m: m as u32,
            k: k as u32,
            n: n as u32,
            flags,
            alpha,
            k_split: k_split as u32,
            splits: splits as u32,
            ..Default::default()
        }
        .bytes();
        let tiles = [
            n.div_ceil(tile_n) as u32,
            m.div_ceil(tile_m) as u32,
            splits as u32,
        ];
        if splits == 1 {
            return vec![Planned {
                entry,
                bindings: vec![a, b, out, bias.unwrap_or(Src::DummyRo), Src::Params],
                params,
                groups: tiles,
            }];
        }
        let scratch = self.whole(self.scratch.split, 0);
        vec![
            Planned {
                entry,
                bindings: vec![a, b, scratch, Src::DummyRo, Src::Params],
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
    }

    /// One elementwise.wgsl dispatch over `n` elements.
    #[allow(clippy::too_many_arguments)]
    fn elementwise(
        &self,
        entry: &'static str,
        dst: Src,
        x: Src,
        y: Src,
        n: usize,
        stream: u32,
        p: f32,
    ) -> Planned {
        self.elementwise_writing(entry, [dst, x, y], n, stream, p, [false, false])
    }

    /// [`Planner::elementwise`] for a backward that writes the gradient in
    /// `dst` (`write[0]`) or accumulate2's `y` (`write[1]`) outright.
    fn elementwise_writing(
        &self,
        entry: &'static str,
        [dst, x, y]: [Src; 3],
        n: usize,
        stream: u32,
        p: f32,
        write: [bool; 2],
    ) -> Planned {
        Planned {
            entry,
            bindings: vec![dst, x, y, Src::Params, Src::Step],
            params: EwParams {
                n: n as u32,
                stream,
                p,
                write: write[0] as u32 | (write[1] as u32) << 1,
            }
            .bytes(),
            groups: grid(n),
        }
    }

    fn ln_params(&self, width: usize, part_stride: usize, part_offset: usize) -> Vec<u8> {
        LnParams {
            rows: self.rows as u32,
            c: width as u32,
            chunks: self.chunks_n as u32,
            part_stride: part_stride as u32,
            part_offset: part_offset as u32,
            ..Default::default()
        }
        .bytes()
    }

    /// A bias's gradient: the column sums of dout, in one dispatch where
    /// the rows are few ([`DIRECT_SUMS_MAX_ROWS`]), else partial sums per
    /// row chunk and then their sum.
    fn bias_grad(&self, dout: Src, dbias: Src, width: usize) -> Vec<Planned> {
        let columns = [width.div_ceil(FINAL_COLUMNS) as u32, 1, 1];
        if self.rows <= DIRECT_SUMS_MAX_ROWS {
            return vec![Planned {
                entry: "bias_grad_direct",
                bindings: vec![
                    Src::DummyRo,
                    Src::DummyRo,
                    dbias,
                    Src::DummyRw,
                    Src::DummyRw,
                    dout,
                    Src::DummyRw,
                    Src::Params,
                ],
                params: self.ln_params(width, width, 0),
                groups: columns,
            }];
        }
        let part = self.whole(self.scratch.part, 0);
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
                    part,
                    Src::Params,
                ],
                params: self.ln_params(width, width, 0),
                groups: [self.chunks_n as u32, 1, 1],
            },
            Planned {
                entry: "column_sums_final",
                bindings: vec![
                    Src::DummyRo,
                    Src::DummyRo,
                    dbias,
                    Src::DummyRw,
                    Src::DummyRw,
                    Src::DummyRo,
                    part,
                    Src::Params,
                ],
                params: self.ln_params(width, width, 0),
                groups: columns,
            },
        ]
    }

    fn emb_params(&self) -> Vec<u8> {
        let cfg = self.cfg();
        EmbParams {
            rows: self.rows as u32,
            t: cfg.ctx as u32,
            c: cfg.d_model as u32,
            ..Default::default()
        }
        .bytes()
    }

    fn ce_params(&self) -> Vec<u8> {
        CeParams {
            rows: self.rows as u32,
            vocab: VOCAB as u32,
            ..Default::default()
        }
        .bytes()
    }

    // --- embedding ----------------------------------------------------------

    fn embedding_bindings(&self, tokens: Src, wte: Src, wpe: Src, out: Src) -> Vec<Src> {
        vec![
            tokens,
            wte,
            wpe,
            out,
            self.whole(self.scratch.order, 0),
            self.whole(self.scratch.offsets, 0),
            Src::Params,
        ]
    }

    fn embedding_forward(
        &self,
        tokens: TensorId,
        wte: TensorId,
        wpe: Option<TensorId>,
        out: TensorId,
    ) -> Vec<Planned> {
        vec![Planned {
            entry: "embedding_forward",
            // wpe is unread without position embeddings (POSITIONS = false).
            bindings: self.embedding_bindings(
                self.p(tokens),
                self.p(wte),
                self.p(wpe.unwrap_or(wte)),
                self.p(out),
            ),
            params: self.emb_params(),
            groups: grid(self.rows * self.cfg().d_model),
        }]
    }

    fn embedding_backward(
        &self,
        tokens: TensorId,
        wte: TensorId,
        wpe: Option<TensorId>,
        out: TensorId,
    ) -> Vec<Planned> {
        // A frozen embedding (a LoRA fine-tune) has nothing to learn.
        if self.frozen(wte) {
            return vec![];
        }
        let c = self.cfg().d_model;
        let binds = self.embedding_bindings(
            self.p(tokens),
            self.g(wte),
            self.g(wpe.unwrap_or(wte)),
            self.g(out),
        );
        let wpe_grad = wpe.map(|_| Planned {
            entry: "embedding_backward_wpe",
            bindings: binds.clone(),
            params: self.emb_params(),
            groups: grid(self.cfg().ctx * c),
        });
        let wte_grad = Planned {
            entry: "embedding_backward_wte",
            bindings: binds,
            params: self.emb_params(),
            // (16 columns, token) a workgroup (WTE_COLUMNS in embedding.wgsl)
            groups: [c.div_ceil(16) as u32, VOCAB as u32, 1],
        };
        wpe_grad.into_iter().chain([wte_grad]).collect()
    }

    // --- layernorm ----------------------------------------------------------

    fn width(&self, id: TensorId) -> usize {
        self.program.tensors[id].shape.last().copied().unwrap()
    }

    fn layernorm_forward(
        &self,
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        mean: TensorId,
        rstd: TensorId,
    ) -> Vec<Planned> {
        vec![Planned {
            entry: "layernorm_forward",
            bindings: vec![
                self.p(inp),
                self.p(weight),
                self.p(out),
                self.p(mean),
                self.p(rstd),
                self.p(bias),
                Src::DummyRw,
                Src::Params,
            ],
            params: self.ln_params(self.width(inp), 0, 0),
            groups: per_row(self.rows),
        }]
    }

    fn layernorm_backward(
        &self,
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        mean: TensorId,
        rstd: TensorId,
    ) -> Vec<Planned> {
        let width = self.width(inp);
        let part = self.whole(self.scratch.part, 0);
        let dx = Planned {
            entry: "layernorm_backward_dx",
            bindings: vec![
                self.p(inp),
                self.p(weight),
                self.g(inp),
                self.p(mean),
                self.p(rstd),
                self.g(out),
                Src::DummyRw,
                Src::Params,
            ],
            params: self.ln_params(width, 0, 0),
            groups: per_row(self.rows),
        };
        if self.frozen(weight) {
            return vec![dx];
        }
        let columns = [width.div_ceil(FINAL_COLUMNS) as u32, 1, 1];
        if self.rows <= DIRECT_SUMS_MAX_ROWS {
            // dweight in the `out` slot, dbias in the `part` slot
            return vec![
                dx,
                Planned {
                    entry: "layernorm_params_direct",
                    bindings: vec![
                        self.p(inp),
                        Src::DummyRo,
                        self.g(weight),
                        self.p(mean),
                        self.p(rstd),
                        self.g(out),
                        self.g(bias),
                        Src::Params,
                    ],
                    params: self.ln_params(width, 0, 0),
                    groups: columns,
                },
            ];
        }
        vec![
            dx,
            Planned {
                entry: "layernorm_backward_part",
                bindings: vec![
                    self.p(inp),
                    self.p(weight),
                    Src::DummyRw,
                    self.p(mean),
                    self.p(rstd),
                    self.g(out),
                    part,
                    Src::Params,
                ],
                params: self.ln_params(width, 0, 0),
                groups: [self.chunks_n as u32, 1, 1],
            },
            Planned {
                entry: "layernorm_params_final",
                // dweight in the `out` slot, dbias in the `mean` slot
                bindings: vec![
                    Src::DummyRo,
                    Src::DummyRo,
                    self.g(weight),
                    self.g(bias),
                    Src::DummyRw,
                    Src::DummyRo,
                    part,
                    Src::Params,
                ],
                params: self.ln_params(width, 2 * width, 0),
                groups: columns,
            },
        ]
    }

    // --- linear (matmul + bias) ---------------------------------------------

    fn linear_forward(
        &self,
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        in_features: usize,
        out_features: usize,
    ) -> Vec<Planned> {
        let (x, w, y) = (self.p(inp), self.p(weight), self.p(out));
        self.matmul(
            Layout::Nt,
            x,
            w,
            y,
            Some(self.p(bias)),
            self.rows,
            in_features,
            out_features,
            false,
        )
    }

    /// dX, then (unless frozen) dW and the bias's column sums; `write_dx`:
    /// dX is written, not added to.
    fn linear_backward(
        &self,
        inp: TensorId,
        weight: TensorId,
        bias: TensorId,
        out: TensorId,
        [in_features, out_features]: [usize; 2],
        write_dx: bool,
    ) -> Vec<Planned> {
        let rows = self.rows;
        let mut v = self.matmul(
            Layout::Nn,
            self.g(out),
            self.p(weight),
            self.g(inp),
            None,
            rows,
            out_features,
            in_features,
            !write_dx,
        );
        if self.frozen(weight) {
            return v;
        }
        v.extend(self.matmul(
            Layout::Tn,
            self.g(out),
            self.p(inp),
            self.g(weight),
            None,
            out_features,
            rows,
            in_features,
            true,
        ));
        v.extend(self.bias_grad(self.g(out), self.g(bias), out_features));
        v
    }

    // --- LoRA's low-rank update ([`Op::LowRank`]) -----------------------------

    /// mid (N,R) = inp · Aᵀ; out (N,OUT) = scale · mid · Bᵀ, then += base.
    #[allow(clippy::too_many_arguments)]
    fn lowrank_forward(
        &self,
        inp: TensorId,
        lora_a: TensorId,
        lora_b: TensorId,
        base: TensorId,
        mid: TensorId,
        out: TensorId,
        [rank, n_in, n_out]: [usize; 3],
        scale: f32,
    ) -> Vec<Planned> {
        let rows = self.rows;
        let mut v = self.matmul(
            Layout::Nt,
            self.p(inp),
            self.p(lora_a),
            self.p(mid),
            None,
            rows,
            n_in,
            rank,
            false,
        );
        v.extend(self.matmul_scaled(
            Layout::Nt,
            self.p(mid),
            self.p(lora_b),
            self.p(out),
            None,
            rows,
            rank,
            n_out,
            false,
            scale,
        ));
        v.push(self.elementwise(
            "accumulate",
            self.p(out),
            self.p(base),
            Src::DummyRw,
            self.numel(out),
            0,
            0.0,
        ));
        v
    }

    /// dbase += dout; dB += scale · doutᵀ · mid; dmid = scale · dout · B;
    /// dA += dmidᵀ · inp; dinp += dmid · A.
    #[allow(clippy::too_many_arguments)]
    fn lowrank_backward(
        &self,
        inp: TensorId,
        lora_a: TensorId,
        lora_b: TensorId,
        base: TensorId,
        mid: TensorId,
        out: TensorId,
        [rank, n_in, n_out]: [usize; 3],
        scale: f32,
    ) -> Vec<Planned> {
        let rows = self.rows;
        let mut v = vec![self.elementwise(
            "accumulate",
            self.g(base),
            self.g(out),
            Src::DummyRw,
            self.numel(out),
            0,
            0.0,
        )];
        v.extend(self.matmul_scaled(
            Layout::Tn,
            self.g(out),
            self.p(mid),
            self.g(lora_b),
            None,
            n_out,
            rows,
            rank,
            true,
            scale,
        ));
        v.extend(self.matmul_scaled(
            Layout::Nn,
            self.g(out),
            self.p(lora_b),
            self.g(mid),
            None,
            rows,
            n_out,
            rank,
            false,
            scale,
        ));
        v.extend(self.matmul(
            Layout::Tn,
            self.g(mid),
            self.p(inp),
            self.g(lora_a),
            None,
            rank,
            rows,
            n_in,
            true,
        ));
        v.extend(self.matmul(
            Layout::Nn,
            self.g(mid),
            self.p(lora_a),
            self.g(inp),
            None,
            rows,
            rank,
            n_in,
            true,
        ));
        v
    }

    // --- attention (causal or not is built into the kernels: `Kernels::new`
    // templates CAUSAL from the same `Config::lab`) ---------------------------

    fn attention_forward(
        &self,
        qkv: TensorId,
        out: TensorId,
        lse: TensorId,
        n_head: usize,
        dropout: f32,
        stream: u32,
    ) -> Vec<Planned> {
        let cfg = self.cfg();
        let params = attn_params(cfg, cfg.batch, n_head, stream, dropout);
        let mut binds = vec![
            self.p(qkv),
            self.p(out),
            self.p(lse),
            Src::DummyRo,
            Src::DummyRw,
            Src::DummyRw,
            Src::Params,
            Src::Step,
            Src::DummyRw, // trace: only traced pipelines write it
        ];
        let heads = (cfg.batch * n_head) as u32;
        if !self.attention_on_tensor_cores() {
            return vec![Planned {
                entry: "attention_forward_rows",
                bindings: binds,
                params,
                groups: [cfg.ctx.div_ceil(ATTENTION_ROWS) as u32, heads, 1],
            }];
        }
        // The tensor cores: q, k, v copied to f16 (the trace's slot), then
        // the forward reading its tiles from there.
        binds[8] = self.whole(self.scratch.halves, 0);
        vec![
            Planned {
                entry: coop::ATTENTION_ENTRIES[3],
                bindings: binds.clone(),
                params: params.clone(),
                groups: grid(cfg.batch * cfg.ctx * 3 * cfg.d_model),
            },
            Planned {
                entry: coop::ATTENTION_ENTRIES[0],
                bindings: binds,
                params,
                groups: [cfg.ctx.div_ceil(coop::ATTENTION_ROWS) as u32, heads, 1],
            },
        ]
    }

    /// Whether this plan's attention runs on the tensor cores
    /// ([`coop::attention_on_tensor_cores`]).
    fn attention_on_tensor_cores(&self) -> bool {
        coop::attention_on_tensor_cores(self.matmul, self.cfg().head_dim())
    }

    fn attention_backward(
        &self,
        qkv: TensorId,
        out: TensorId,
        lse: TensorId,
        n_head: usize,
        dropout: f32,
        stream: u32,
    ) -> Vec<Planned> {
        let cfg = self.cfg();
        let coop = self.attention_on_tensor_cores();
        let binds = vec![
            self.p(qkv),
            self.p(out),
            self.p(lse),
            self.g(out),
            self.g(qkv),
            self.whole(self.scratch.delta, 0),
            Src::Params,
            Src::Step,
            // The tensor cores' f16 copies; the trace's slot elsewhere (only
            // traced pipelines write it).
            if coop { self.whole(self.scratch.halves, 0) } else { Src::DummyRw },
        ];
        let params = attn_params(cfg, cfg.batch, n_head, stream, dropout);
        let heads = (cfg.batch * n_head) as u32;
        let planned = |entry: &'static str, groups: [u32; 3]| Planned {
            entry,
            bindings: binds.clone(),
            params: params.clone(),
            groups,
        };
        let delta = planned("attention_backward_delta", grid(cfg.batch * n_head * cfg.ctx));
        if coop {
            // q, k, v and dO copied to f16, delta, then dK/dV and dQ reading
            // their tiles from the copies.
            let blocks = [cfg.ctx.div_ceil(coop::ATTENTION_ROWS) as u32, heads, 1];
            return vec![
                planned(coop::ATTENTION_ENTRIES[3], grid(cfg.batch * cfg.ctx * 3 * cfg.d_model)),
                planned(coop::ATTENTION_ENTRIES[4], grid(cfg.batch * cfg.ctx * cfg.d_model)),
                delta,
                planned(coop::ATTENTION_ENTRIES[1], blocks),
                planned(coop::ATTENTION_ENTRIES[2], blocks),
            ];
        }
        // The blocked kernels where the device's workgroup memory holds
        // them. `TINYGPT_DKDV_TILES=1` keeps the 16×16-tile dK/dV kernel and
        // `TINYGPT_DQ_ROWS=1` the row dQ kernel: each side by side with its
        // replacement in one benchmark (bench/attention-h200.sh).
        let bytes = |knob: &str| {
            if std::env::var(knob).is_ok_and(|v| v == "1") {
                0
            } else {
                self.limits.max_compute_workgroup_storage_size
            }
        };
        let (dkdv, keys) = kernels::attention_dkdv_entry(cfg.head_dim(), bytes("TINYGPT_DKDV_TILES"));
        let (dq, queries) = kernels::attention_dq_entry(
            cfg.head_dim(),
            bytes("TINYGPT_DQ_ROWS"),
            cfg.batch * n_head * cfg.ctx,
        );
        vec![
            delta,
            planned(dkdv, [cfg.ctx.div_ceil(keys) as u32, heads, 1]),
            planned(dq, [cfg.ctx.div_ceil(queries) as u32, heads, 1]),
        ]
    }

    /// The probe: every head's P (H, n, n) of one batch row.
    fn attention_probs(
        &self,
        qkv: TensorId,
        lse: TensorId,
        n_head: usize,
        dropout: f32,
        stream: u32,
    ) -> Vec<Planned> {
        let t = self.cfg().ctx;
        vec![Planned {
            entry: "attention_probs",
            bindings: vec![
                self.p(qkv),
                self.p(lse),
                self.p(self.program.probs),
                Src::Params,
                Src::Window,
            ],
            params: attn_params(self.cfg(), self.cfg().batch, n_head, stream, dropout),
            // Covers n = T; threads past n·n return.
            groups: [(t * t).div_ceil(256) as u32, n_head as u32, 1],
        }]
    }

    // --- GELU -----------------------------------------------------------------

    fn gelu_forward(&self, inp: TensorId, out: TensorId) -> Vec<Planned> {
        vec![self.elementwise(
            "gelu_forward",
            self.p(out),
            self.p(inp),
            Src::DummyRw,
            self.numel(out),
            0,
            0.0,
        )]
    }

    fn gelu_backward(&self, inp: TensorId, out: TensorId, write: bool) -> Vec<Planned> {
        vec![self.elementwise_writing(
            "gelu_backward",
            [self.g(inp), self.g(out), self.p(inp)],
            self.numel(out),
            0,
            0.0,
            [write, false],
        )]
    }

    // --- residual ---------------------------------------------------------------

    fn residual_forward(&self, a: TensorId, b: TensorId, out: TensorId) -> Vec<Planned> {
        vec![self.elementwise(
            "residual_forward",
            self.p(out),
            self.p(a),
            self.p(b),
            self.numel(out),
            0,
            0.0,
        )]
    }

    /// One dispatch adds dout to both inputs' gradients, or writes it to
    /// those `write` names (the second rides in the `y` slot, read-write in
    /// accumulate2).
    fn residual_backward(&self, a: TensorId, b: TensorId, out: TensorId, write: [bool; 2]) -> Vec<Planned> {
        vec![self.elementwise_writing(
            "accumulate2",
            [self.g(a), self.g(out), self.g(b)],
            self.numel(out),
            0,
            0.0,
            write,
        )]
    }

    // --- dropout ----------------------------------------------------------------

    fn dropout_forward(&self, inp: TensorId, out: TensorId, p: f32, stream: u32) -> Vec<Planned> {
        vec![self.elementwise(
            "dropout_forward",
            self.p(out),
            self.p(inp),
            Src::DummyRw,
            self.numel(out),
            stream,
            p,
        )]
    }

    fn dropout_backward(&self, inp: TensorId, out: TensorId, p: f32, stream: u32, write: bool) -> Vec<Planned> {
        vec![self.elementwise_writing(
            "dropout_backward",
            [self.g(inp), self.g(out), Src::DummyRw],
            self.numel(out),
            stream,
            p,
            [write, false],
        )]
    }

    // --- the LM head, tied to wte ---------------------------------------------

    fn tied_head_forward(&self, inp: TensorId, wte: TensorId, out: TensorId) -> Vec<Planned> {
        let c = self.cfg().d_model;
        self.matmul(
            Layout::Nt,
            self.p(inp),
            self.p(wte),
            self.p(out),
            None,
            self.rows,
            c,
            VOCAB,
            false,
        )
    }

    /// dX (written outright where `write_dx`), then dwte unless frozen.
    fn tied_head_backward(&self, inp: TensorId, wte: TensorId, out: TensorId, write_dx: bool) -> Vec<Planned> {
        let (rows, c) = (self.rows, self.cfg().d_model);
        let mut d = self.matmul(
            Layout::Nn,
            self.g(out),
            self.p(wte),
            self.g(inp),
            None,
            rows,
            VOCAB,
            c,
            !write_dx,
        );
        if self.frozen(wte) {
            return d;
        }
        d.extend(self.matmul(
            Layout::Tn,
            self.g(out),
            self.p(inp),
            self.g(wte),
            None,
            VOCAB,
            rows,
            c,
            true,
        ));
        d
    }

    // --- cross-entropy ----------------------------------------------------------

    fn cross_entropy_forward(
        &self,
        logits: TensorId,
        targets: TensorId,
        losses: TensorId,
    ) -> Vec<Planned> {
        let stats = self.whole(self.scratch.stats, 16);
        vec![
            Planned {
                entry: "cross_entropy_forward",
                bindings: vec![
                    self.p(logits),
                    self.p(targets),
                    self.p(losses),
                    Src::DummyRw,
                    stats,
                    Src::Params,
                ],
                params: self.ce_params(),
                groups: per_row(self.rows),
            },
            Planned {
                entry: "loss_mean",
                bindings: vec![
                    Src::DummyRo,
                    Src::DummyRo,
                    self.p(losses),
                    Src::DummyRw,
                    stats,
                    Src::Params,
                ],
                params: self.ce_params(),
                groups: [1, 1, 1],
            },
        ]
    }

    fn cross_entropy_backward(
        &self,
        logits: TensorId,
        targets: TensorId,
        losses: TensorId,
    ) -> Vec<Planned> {
        vec![Planned {
            entry: "cross_entropy_backward",
            bindings: vec![
                self.p(logits),
                self.p(targets),
                self.p(losses),
                self.g(logits),
                self.whole(self.scratch.scaler, 16),
                Src::Params,
            ],
            params: self.ce_params(),
            groups: per_row(self.rows),
        }]
    }

    // --- the optimizer ------------------------------------------------------------

    /// One chunk of the flat buffers, with the stats and the partial sums.
    fn optimizer(
        &self,
        entry: &'static str,
        start: usize,
        len: usize,
        op: OptParams,
        groups: [u32; 3],
    ) -> Planned {
        let [params, grads, m, v] = self.scratch.flat;
        let chunk = [params, grads, m, v].map(|buffer| {
            Src::At(Place {
                buffer,
                offset: start as u64 * 4,
                size: len as u64 * 4,
            })
        });
        Planned {
            entry,
            bindings: vec![
                chunk[0],
                chunk[1],
                chunk[2],
                chunk[3],
                self.whole(self.scratch.stats, 16),
                self.whole(self.scratch.partials, 0),
                Src::Params,
                Src::Step,
                self.whole(self.scratch.scaler, 16),
            ],
            params: OptParams {
                growth_interval: self.growth_interval(),
                ..op
            }
            .bytes(),
            groups,
        }
    }

    /// Partial sums of squares per chunk, then the norm and the clip factor.
    fn clip_grad_norm(&self) -> Vec<Planned> {
        let mut v = Vec::new();
        let mut first = 0usize;
        for &(start, len) in &self.scratch.chunks {
            let groups = len.div_ceil(NORM_CHUNK);
            let op = OptParams {
                n: len as u32,
                offset: start as u32,
                first_group: first as u32,
                ..Default::default()
            };
            v.push(self.optimizer(
                "sum_squares_partial",
                start,
                len,
                op,
                [groups.min(65535) as u32, groups.div_ceil(65535) as u32, 1],
            ));
            first += groups;
        }
        let (s0, l0) = self.scratch.chunks[0];
        let op = OptParams {
            first_group: first as u32,
            ..Default::default()
        };
        v.push(self.optimizer("grad_norm_final", s0, l0, op, [1, 1, 1]));
        v
    }

    fn adamw(&self) -> Vec<Planned> {
        // The halt flag follows the partial sums (see adamw.wgsl).
        let halt: usize = self
            .scratch
            .chunks
            .iter()
            .map(|&(_, len)| len.div_ceil(NORM_CHUNK))
            .sum();
        self.scratch
            .chunks
            .iter()
            .map(|&(start, len)| {
                let op = OptParams {
                    n: len as u32,
                    offset: start as u32,
                    first_group: halt as u32,
                    ..Default::default()
                };
                self.optimizer("adamw_update", start, len, op, grid(len))
            })
            .collect()
    }
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
