//! One output of an op worked out by hand, for the flow's op zoom (issue
//! 32): the formula, the values it reads filled in, and the result
//! recomputed in f64 beside the value the program computed. For a matrix
//! product (a Linear layer, the tied head) also a window of the product: a
//! few rows of the weight matrix around the output worked out, over the
//! input columns that contribute most to it.
//!
//! It reads the flow's nodes (the position's row of each activation) and
//! the weights; nothing here runs the model. The numbers it shows are the
//! program's (`computed`); `result` is the check a learner can redo.

use crate::flow::Flow;
use crate::model::params::NamedTensor;
use crate::program::{Op, Program};
use serde::Serialize;

/// Input columns shown in a window and named in the filled-in sum.
pub const TERMS: usize = 6;
/// Weight rows shown in a window.
pub const WINDOW_ROWS: usize = 5;

/// A window of a matrix product `y = x · Wᵀ (+ b)` at the position.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProductWindow {
    /// The weight's name (`transformer.h.0.mlp.c_fc.weight`).
    pub weight: String,
    /// The output indices shown (rows of W), the worked one among them.
    pub rows: Vec<usize>,
    /// The input indices shown (columns of W): the largest contributions
    /// to the worked output, in index order.
    pub cols: Vec<usize>,
    /// `x[col]` for each shown column.
    pub x: Vec<f32>,
    /// `W[row, col]`, rows × cols.
    pub w: Vec<Vec<f32>>,
    /// `y[row]` as the program computed it, for each shown row.
    pub y: Vec<f32>,
}

/// One output of a node's op, worked out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Worked {
    /// The output index worked out (the node's largest in magnitude).
    pub index: usize,
    /// The formula in symbols, e.g. `y[5] = Σᵢ x[i]·W[5,i] + b[5]`.
    pub formula: String,
    /// The formula with the values filled in (the largest terms, the rest
    /// summed, on a second line), ending in `= result`.
    pub filled: String,
    /// The output recomputed here in f64 from the values shown.
    pub result: f64,
    /// The output as the program computed it.
    pub computed: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<ProductWindow>,
}

fn param<'a>(params: &'a [NamedTensor], name: &str) -> Option<&'a [f32]> {
    params
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.values.as_slice())
}

/// `0.123`, `−1.5e-5`: short numbers, with a true minus sign.
pub fn num(x: f64) -> String {
    let s = if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e4) {
        format!("{x:.2e}")
    } else {
        format!("{x:.3}")
    };
    s.replace('-', "−")
}

/// A term `a·b`, with the second factor in brackets when negative.
fn times(a: f64, b: f64) -> String {
    let f = |x: f64| {
        if x < 0.0 {
            format!("({})", num(x))
        } else {
            num(x)
        }
    };
    format!("{}·{}", f(a), f(b))
}

/// `x · Wᵀ (+ b)` at output `j`: the window and the worked sum.
fn product(
    x: &[f32],
    w: &[f32],
    weight: &str,
    bias: Option<&[f32]>,
    y: &[f32],
    j: usize,
    symbol: (&str, &str),
) -> Worked {
    let n_in = x.len();
    let row = |r: usize| &w[r * n_in..(r + 1) * n_in];
    let terms: Vec<f64> = row(j)
        .iter()
        .zip(x)
        .map(|(&a, &b)| a as f64 * b as f64)
        .collect();
    let mut by_size: Vec<usize> = (0..n_in).collect();
    by_size.sort_by(|&a, &b| terms[b].abs().total_cmp(&terms[a].abs()).then(a.cmp(&b)));
    let mut cols: Vec<usize> = by_size.iter().copied().take(TERMS).collect();
    cols.sort_unstable();
    let shown: f64 = cols.iter().map(|&i| terms[i]).sum();
    let total: f64 = terms.iter().sum();
    let b = bias.map(|b| b[j] as f64);
    let result = total + b.unwrap_or(0.0);
    let (out, weight_symbol) = symbol;
    let mut filled = cols
        .iter()
        .map(|&i| times(x[i] as f64, row(j)[i] as f64))
        .collect::<Vec<_>>()
        .join(" + ");
    if n_in > cols.len() {
        filled += &format!(
            "\n+ ({} more terms: {})",
            n_in - cols.len(),
            num(total - shown)
        );
    }
    if let Some(b) = b {
        filled += &format!(" + {}", num(b));
    }
    filled += &format!(" = {}", num(result));
    let first = j
        .saturating_sub(WINDOW_ROWS / 2)
        .min(y.len().saturating_sub(WINDOW_ROWS));
    let rows: Vec<usize> = (first..(first + WINDOW_ROWS).min(y.len())).collect();
    Worked {
        index: j,
        formula: format!(
            "{out}[{j}] = Σᵢ x[i]·{weight_symbol}[{j},i]{}  (i = 0…{})",
            if b.is_some() {
                format!(" + b[{j}]")
            } else {
                String::new()
            },
            n_in - 1
        ),
        filled,
        result,
        computed: y[j],
        window: Some(ProductWindow {
            weight: weight.to_string(),
            x: cols.iter().map(|&i| x[i]).collect(),
            w: rows
                .iter()
                .map(|&r| cols.iter().map(|&i| row(r)[i]).collect())
                .collect(),
            y: rows.iter().map(|&r| y[r]).collect(),
            rows,
            cols,
        }),
    }
}

/// The index of the largest value in magnitude.
fn largest(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if x.abs() > v[best].abs() {
            best = i;
        }
    }
    best
}

/// The op that wrote `flow.nodes[node]`, one of its outputs worked out
/// from the values the flow read and `params`. None for ops without a
/// short formula at one position (attention reads every earlier position's
/// V: the heads' panel shows it) and for nodes no op writes.
pub fn worked(
    program: &Program,
    params: &[NamedTensor],
    flow: &Flow,
    node: usize,
) -> Option<Worked> {
    let n = flow.nodes.get(node)?;
    let id = program.tensor_id(&n.name)?;
    let op = &program.ops[program.writer(id)?].op;
    let values_of = |t: usize| -> Option<&[f32]> {
        let name = &program.tensors[t].name;
        flow.nodes
            .iter()
            .find(|m| &m.name == name)
            .map(|m| m.values.as_slice())
    };
    let y = n.values.as_slice();
    let j = largest(y);
    match *op {
        Op::Linear {
            inp, weight, bias, ..
        } => {
            let x = values_of(inp)?;
            let name = &program.tensors[weight].name;
            let w = param(params, name)?;
            let b = param(params, &program.tensors[bias].name)?;
            (w.len() == x.len() * y.len()).then(|| product(x, w, name, Some(b), y, j, ("y", "W")))
        }
        Op::TiedHead { inp, wte, .. } => {
            let x = values_of(inp)?;
            let name = &program.tensors[wte].name;
            let w = param(params, name)?;
            (w.len() == x.len() * y.len())
                .then(|| product(x, w, name, None, y, j, ("logit", "wte")))
        }
        Op::LayerNorm {
            inp, weight, bias, ..
        } => {
            let x = values_of(inp)?;
            let g = param(params, &program.tensors[weight].name)?[j] as f64;
            let b = param(params, &program.tensors[bias].name)?[j] as f64;
            let c = x.len() as f64;
            let mean = x.iter().map(|&v| v as f64).sum::<f64>() / c;
            let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            let xj = x[j] as f64;
            let result = (xj - mean) * rstd * g + b;
            Some(Worked {
                index: j,
                formula: format!("y[{j}] = (x[{j}] − μ) / √(σ² + 1e-5) · γ[{j}] + β[{j}]"),
                filled: format!(
                    "({} − {}) / √({} + 1e-5) · {} + {} = {}",
                    num(xj),
                    num(mean),
                    num(var),
                    num(g),
                    num(b),
                    num(result)
                ),
                result,
                computed: y[j],
                window: None,
            })
        }
        Op::Gelu { inp, .. } => {
            let x = values_of(inp)?[j] as f64;
            let phi = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
            let result = x * phi;
            Some(Worked {
                index: j,
                formula: format!("y[{j}] = x[{j}] · ½(1 + erf(x[{j}] / √2))"),
                filled: format!("{} · {} = {}", num(x), num(phi), num(result)),
                result,
                computed: y[j],
                window: None,
            })
        }
        Op::Residual { a, b, .. } => {
            let (xa, xb) = (values_of(a)?[j] as f64, values_of(b)?[j] as f64);
            let result = xa + xb;
            Some(Worked {
                index: j,
                formula: format!(
                    "y[{j}] = {}[{j}] + {}[{j}]",
                    program.tensors[a].name, program.tensors[b].name
                ),
                filled: format!("{} + {} = {}", num(xa), num(xb), num(result)),
                result,
                computed: y[j],
                window: None,
            })
        }
        Op::Embedding { wte, wpe, .. } => {
            let byte = *flow.tokens.get(flow.position)? as usize;
            let c = y.len();
            let e = param(params, &program.tensors[wte].name)?.get(byte * c + j)?;
            let p = match wpe {
                Some(wpe) => {
                    Some(*param(params, &program.tensors[wpe].name)?.get(flow.position * c + j)?)
                }
                None => None,
            };
            let result = *e as f64 + p.map_or(0.0, |p| p as f64);
            let t = flow.position;
            Some(Worked {
                index: j,
                formula: match p {
                    Some(_) => format!(
                        "x[{j}] = wte[{byte}, {j}] + wpe[{t}, {j}]  (byte {byte} at position {t})"
                    ),
                    None => format!(
                        "x[{j}] = wte[{byte}, {j}]  (byte {byte}; no position embedding in this lab)"
                    ),
                },
                filled: match p {
                    Some(p) => format!("{} + {} = {}", num(*e as f64), num(p as f64), num(result)),
                    None => format!("{} = {}", num(*e as f64), num(result)),
                },
                result,
                computed: y[j],
                window: None,
            })
        }
        _ => None,
    }
}
