// attention.wgsl — causal multi-head FlashAttention-2, forward and tiled backward.
// (Causal unless the model's lab turns the mask off: CAUSAL in common.wgsl.
// Then every tile visits every block, and nothing is skipped.)
// Neither direction ever holds a T×T matrix: scores live one TILE×TILE tile at
// a time in workgroup memory, and the backward recomputes P from the saved
// log-sum-exp, as in Dao (2023), "FlashAttention-2", Algorithms 1 and 2.
//
// Bindings (group 0):
//   @binding(0) qkv:   array<f32>  (B, T, 3C): q | k | v, head h at columns h·D..h·D+D of each
//   @binding(1) out:   array<f32>  (B, T, C) the attention output y (forward writes, backward reads)
//   @binding(2) lse:   array<f32>  (B, H, T) log-sum-exp of each score row (forward writes)
//   @binding(3) dout:  array<f32>  (B, T, C) gradient of y
//   @binding(4) dqkv:  array<f32>  (B, T, 3C) gradient of qkv, accumulated
//   @binding(5) delta: array<f32>  (B, H, T) rowsum(dout ∘ out), written by attention_backward_delta
//   @binding(6) at:    AttnParams  sizes, scale 1/√D, dropout stream and probability
//   @binding(7) step:  StepUniform dropout seed, training flag
//   @binding(8) trace: array<f32>  the trace (TRACE only; training binds a dummy): see below
// Entry points (workgroup TILE×TILE: y = the tile's row, x = a lane; TILE comes
// from the kernel registry, `kernels::ATTENTION_TILE`, templated in):
//   attention_forward        group (query tile, b·H + h): online softmax over key tiles
//                            j0 ≤ the tile's last query; lane x scores key j0 + x and owns
//                            output dims x, x + TILE, …
//   attention_backward_delta thread per (b, h, i): delta = Σ_d dout·out
//   attention_backward_dkdv  group (key tile, b·H + h): walks query tiles from the diagonal
//                            down; accumulates dK, dV of its keys in registers
//   attention_backward_dq    group (query tile, b·H + h): walks key tiles up to the diagonal;
//                            accumulates dQ of its queries in registers
//   attention_forward_rows   group (64 queries, b·H + h): training's forward; a thread
//                            owns a query row (see the kernel); same out and lse
//   attention_backward_dq_rows  group (64 queries, b·H + h): training's dQ, likewise
//   attention_backward_dkdv_blocks  group (32 keys, b·H + h), 256 threads: training's
//                            dK and dV where the device's workgroup memory holds the
//                            blocks (see the kernel); attention_backward_dkdv elsewhere
//   attention_backward_dq_blocks    group (32 queries, b·H + h), 256 threads: training's
//                            dQ likewise; attention_backward_dq_rows elsewhere
// (The 16×16-tile forward, dK/dV and dQ stay for the trace, which replays them.)
// dQ and dK/dV come from two kernels so that no two workgroups write one element
// (no float atomics; deterministic). DPL = dims per lane = ceil(D / TILE), templated
// in when the pipeline is built; D ≤ TILE·DPL ≤ 128.
// Dropout (training only) multiplies P by the mask of element ((b·H + h)·T + i)·T + j.
//
// Trace mode (the explainer's FlashAttention scene; `src/flash.rs` reads it):
// pipelines built with the override TRACE = true record, for the one (b·H + h)
// named by trace[0], every visit of a workgroup's tile to a block of the other
// side, and every block causality skips. Nothing else changes: the traced
// kernels compute the same values in the same order. With TRACE = false (the
// training pipelines) the branches are constant-false and compile away.
//   trace[0]                 b·H + h to trace (written by the host)
//   trace[HEADER + REC·((pass·NT + a)·NT + c) + …], NT = ceil(T / TILE), one record each:
//     pass 0 forward         a = query tile, c = key block
//     pass 1 backward_dkdv   a = key block,  c = query tile
//     pass 2 backward_dq     a = query tile, c = key block
//   record: [0] 1 visited | 2 skipped, [1] query tile, [2] key block, [3] visit number in the loop
//           [ROWS + 8·r + …] per row r of the tile:
//             forward: m before, m after, l before, l after, rescale exp(m before − m after)
//             backward_dkdv (r = key): Σ_i P_ij, Σ_i dS_ij over the block's queries
//             backward_dq (r = query): Σ_j P_ij, Σ_j dS_ij over the block's keys
//           [BLOCK_A + TILE·r + c]  forward: S_rc = q·k·scale (NEG_FLT_MAX where masked);
//                                   backward: P_rc (query r, key c)
//           [BLOCK_B + TILE·r + c]  forward: exp(S_rc − m after); backward: dS_rc

// AttnParams (sizes, scale 1/√D, dropout stream and probability) is declared
// in common.wgsl: attention_probs.wgsl binds the same block.

// -f32::MAX, the start of a running max. (The literal rounds to it; Tint,
// the browsers' WGSL compiler, refuses a literal past it, such as -3.4028235e38.)
const NEG_FLT_MAX: f32 = -3.4028234e38;
const TILE: u32 = {{TILE}}u;
const BR: u32 = TILE; // queries per tile
const BC: u32 = TILE; // keys per block (and lanes per row)
const DPL: u32 = {{DPL}}u;
const DMAX: u32 = BC * DPL;

override TRACE: bool = false;
const HEADER: u32 = 16u;
const ROWS: u32 = 16u;
const BLOCK_A: u32 = ROWS + 8u * TILE;
const BLOCK_B: u32 = BLOCK_A + TILE * TILE;
const REC: u32 = BLOCK_B + TILE * TILE;

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;
@group(0) @binding(4) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(5) var<storage, read_write> delta: array<f32>;
@group(0) @binding(6) var<uniform> at: AttnParams;
@group(0) @binding(7) var<uniform> step: StepUniform;
@group(0) @binding(8) var<storage, read_write> trace: array<f32>;

// TILE rows of K, V, Q or dO. Row stride D + 1: lane x reading row x at the
// same column then hits TILE different memory banks instead of one.
var<workgroup> tile_a: array<f32, BC * (DMAX + 1u)>;
var<workgroup> tile_b: array<f32, BC * (DMAX + 1u)>;
var<workgroup> s_tile: array<f32, BR * BC>;
var<workgroup> s_tile2: array<f32, BR * BC>;

// Offset of element (b, t, part·C + h·D + d) in qkv / dqkv; part 0 = q, 1 = k, 2 = v.
fn qkv_at(b: u32, t: u32, part: u32, h: u32) -> u32 {
    return (b * at.t + t) * 3u * at.c + part * at.c + h * at.d;
}

// Offset of (b, t, h·D) in out / dout.
fn y_at(b: u32, t: u32, h: u32) -> u32 {
    return (b * at.t + t) * at.c + h * at.d;
}

// Row stride of the shared tiles.
fn ts() -> u32 {
    return at.d + 1u;
}

// Whether this workgroup records its visits (TRACE pipelines, the traced b·H + h).
fn traced(bh: u32) -> bool {
    return TRACE && bh == u32(trace[0]);
}

// Start of the trace record of (pass, a, c).
fn rec_at(which: u32, a: u32, c: u32) -> u32 {
    let nt = (at.t + TILE - 1u) / TILE;
    return HEADER + REC * ((which * nt + a) * nt + c);
}

// Writes a record's header.
fn rec_header(rec: u32, state: f32, q_tile: u32, k_block: u32, visit: u32) {
    trace[rec] = state;
    trace[rec + 1u] = f32(q_tile);
    trace[rec + 2u] = f32(k_block);
    trace[rec + 3u] = f32(visit);
}

// Whether query i sees key j: j ≤ i under the causal mask, any j < T without it.
fn sees(i: u32, j: u32) -> bool {
    return j < at.t && (j <= i || !CAUSAL);
}

// One past the last key a tile of queries starting at q0 sees.
fn keys_end(q0: u32) -> u32 {
    return select(at.t, min(q0 + BR, at.t), CAUSAL);
}

// The dropout mask's key for this layer (dropout_key): every entry point
// that calls mask sets it first, so an element costs one hash, not three.
var<private> mask_key: u32;

fn mask(bh: u32, i: u32, j: u32) -> f32 {
    if (step.training != 0u && at.p > 0.0) {
        return dropout_keyed(mask_key, (bh * at.t + i) * at.t + j, at.p);
    }
    return 1.0;
}

// Loads rows r0..r0+TILE of part `part` of qkv (or of dout when part == 3) into `which`.
fn load_rows(which: u32, b: u32, h: u32, r0: u32, part: u32, tid: u32) {
    for (var e = tid; e < TILE * at.d; e += TILE * TILE) {
        let rr = e / at.d;
        let d = e % at.d;
        let r = r0 + rr;
        var v = 0.0;
        if (r < at.t) {
            if (part == 3u) { v = dout[y_at(b, r, h) + d]; } else { v = qkv[qkv_at(b, r, part, h) + d]; }
        }
        if (which == 0u) { tile_a[rr * ts() + d] = v; } else { tile_b[rr * ts() + d] = v; }
    }
}

@compute @workgroup_size({{TILE}}, {{TILE}}, 1)
fn attention_forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = wg.x * BR;
    let r = lid.y;
    let lane = lid.x;
    let tid = r * BC + lane;
    let i = q0 + r;
    let valid = i < at.t;
    let qbase = qkv_at(b, min(i, at.t - 1u), 0u, h);

    var o: array<f32, DPL>;
    for (var u = 0u; u < DPL; u++) { o[u] = 0.0; }
    var m = NEG_FLT_MAX;
    var l = 0.0;
    let last = keys_end(q0);
    let trace_on = traced(bh);
    for (var j0 = 0u; j0 < last; j0 += BC) {
        load_rows(0u, b, h, j0, 1u, tid); // K tile
        load_rows(1u, b, h, j0, 2u, tid); // V tile
        workgroupBarrier();
        let j = j0 + lane;
        var sc = NEG_FLT_MAX;
        if (valid && sees(i, j)) {
            var acc = 0.0;
            for (var d = 0u; d < at.d; d++) { acc += qkv[qbase + d] * tile_a[lane * ts() + d]; }
            sc = acc * at.scale;
        }
        s_tile[r * BC + lane] = sc;
        workgroupBarrier();
        let rec = rec_at(0u, wg.x, j0 / BC);
        if (trace_on) {
            if (tid == 0u) { rec_header(rec, 1.0, wg.x, j0 / BC, j0 / BC); }
            trace[rec + BLOCK_A + r * TILE + lane] = sc;
            trace[rec + BLOCK_B + r * TILE + lane] = 0.0;
        }
        if (valid) {
            var m_tile = m;
            for (var jj = 0u; jj < BC; jj++) {
                if (sees(i, j0 + jj)) { m_tile = max(m_tile, s_tile[r * BC + jj]); }
            }
            let alpha = exp(m - m_tile);
            if (trace_on && lane == 0u) {
                trace[rec + ROWS + 8u * r] = m;
                trace[rec + ROWS + 8u * r + 1u] = m_tile;
                trace[rec + ROWS + 8u * r + 2u] = l;
                trace[rec + ROWS + 8u * r + 4u] = alpha;
            }
            l *= alpha;
            for (var u = 0u; u < DPL; u++) { o[u] *= alpha; }
            for (var jj = 0u; jj < BC; jj++) {
                if (sees(i, j0 + jj)) {
                    let pij = exp(s_tile[r * BC + jj] - m_tile);
                    l += pij;
                    let pd = pij * mask(bh, i, j0 + jj);
                    for (var u = 0u; u < DPL; u++) {
                        let d = lane + BC * u;
                        if (d < at.d) { o[u] += pd * tile_b[jj * ts() + d]; }
                    }
                    if (trace_on && jj == lane) { trace[rec + BLOCK_B + r * TILE + lane] = pij; }
                }
            }
            m = m_tile;
            if (trace_on && lane == 0u) { trace[rec + ROWS + 8u * r + 3u] = l; }
        }
        workgroupBarrier();
    }
    if (trace_on && tid == 0u) {
        // The key blocks past the diagonal: causality skips them whole.
        let nt = (at.t + TILE - 1u) / TILE;
        for (var kb = (last + BC - 1u) / BC; kb < nt; kb++) {
            rec_header(rec_at(0u, wg.x, kb), 2.0, wg.x, kb, 0u);
        }
    }
    if (valid) {
        let ybase = y_at(b, i, h);
        for (var u = 0u; u < DPL; u++) {
            let d = lane + BC * u;
            if (d < at.d) { out[ybase + d] = o[u] / l; }
        }
        if (lane == 0u) { lse[bh * at.t + i] = m + log(l); }
    }
}

// --- attention_forward_rows: the training forward. One thread owns one query
// row: q and the output accumulator sit in its registers (DV4 vec4s each, D
// padded to a multiple of 4), and it walks the keys up to its workgroup's
// last query, KB at a time through workgroup memory (every lane reads the
// same key: a broadcast), with the online softmax kept per key (Milakov &
// Gimelshein 2018): a new running max rescales l and o once, when it
// comes. No reductions across lanes, no score tile. It writes what
// attention_forward writes (out, lse); attention_forward, the 16×16-tile
// kernel above, is the one the FlashAttention trace replays.
// Group (ceil(T / ROWS_Q), b·H + h), ROWS_Q threads.
const ROWS_Q: u32 = 64u;
const KB: u32 = {{KB}}u;
const DV4: u32 = {{DV4}}u;

var<workgroup> k_rows: array<vec4<f32>, KB * DV4>;
var<workgroup> v_rows: array<vec4<f32>, KB * DV4>;

// Elements 4c..4c+3 of part `part` (0 q, 1 k, 2 v) of head h at (b, t); zero past D.
fn qkv_vec4(b: u32, t: u32, part: u32, h: u32, c: u32) -> vec4<f32> {
    let base = qkv_at(b, t, part, h);
    let d = 4u * c;
    var v = vec4<f32>(0.0);
    if (d < at.d) { v.x = qkv[base + d]; }
    if (d + 1u < at.d) { v.y = qkv[base + d + 1u]; }
    if (d + 2u < at.d) { v.z = qkv[base + d + 2u]; }
    if (d + 3u < at.d) { v.w = qkv[base + d + 3u]; }
    return v;
}

// Elements 4c..4c+3 of the dO row starting at `base`; zero past D.
fn dout_vec4(base: u32, c: u32) -> vec4<f32> {
    let d = 4u * c;
    var v = vec4<f32>(0.0);
    if (d < at.d) { v.x = dout[base + d]; }
    if (d + 1u < at.d) { v.y = dout[base + d + 1u]; }
    if (d + 2u < at.d) { v.z = dout[base + d + 2u]; }
    if (d + 3u < at.d) { v.w = dout[base + d + 3u]; }
    return v;
}

// Keys j0..j0+KB of head h: their k rows into k_rows, v rows into v_rows
// (zero past T), shared by the ROWS_Q threads.
fn load_key_block(b: u32, h: u32, j0: u32, tid: u32) {
    for (var e = tid; e < KB * DV4; e += ROWS_Q) {
        let j = j0 + e / DV4;
        let c = e % DV4;
        var kv = vec4<f32>(0.0);
        var vv = vec4<f32>(0.0);
        if (j < at.t) {
            kv = qkv_vec4(b, j, 1u, h, c);
            vv = qkv_vec4(b, j, 2u, h, c);
        }
        k_rows[e] = kv;
        v_rows[e] = vv;
    }
}

// One past the last key the ROWS_Q queries from q0 see (keys_end for the row kernels).
fn row_keys_end(q0: u32) -> u32 {
    return select(at.t, min(q0 + ROWS_Q, at.t), CAUSAL);
}

@compute @workgroup_size(64, 1, 1)
fn attention_forward_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = wg.x * ROWS_Q;
    let i = q0 + tid;
    let valid = i < at.t;
    var q: array<vec4<f32>, DV4>;
    var o: array<vec4<f32>, DV4>;
    for (var c = 0u; c < DV4; c++) {
        q[c] = qkv_vec4(b, min(i, at.t - 1u), 0u, h, c) * at.scale;
        o[c] = vec4<f32>(0.0);
    }
    var m = NEG_FLT_MAX;
    var l = 0.0;
    let last = row_keys_end(q0);
    for (var j0 = 0u; j0 < last; j0 += KB) {
        workgroupBarrier();
        load_key_block(b, h, j0, tid);
        workgroupBarrier();
        if (valid) {
            let keys = min(KB, last - j0);
            for (var jj = 0u; jj < keys; jj++) {
                let j = j0 + jj;
                if (!sees(i, j)) { break; }
                var s = 0.0;
                for (var c = 0u; c < DV4; c++) { s += dot(q[c], k_rows[jj * DV4 + c]); }
                if (s > m) {
                    let alpha = exp(m - s);
                    l *= alpha;
                    for (var c = 0u; c < DV4; c++) { o[c] *= alpha; }
                    m = s;
                }
                let p = exp(s - m);
                l += p;
                let pd = p * mask(bh, i, j);
                for (var c = 0u; c < DV4; c++) { o[c] += pd * v_rows[jj * DV4 + c]; }
            }
        }
    }
    if (valid) {
        let ybase = y_at(b, i, h);
        for (var c = 0u; c < DV4; c++) {
            let v = o[c] / l;
            let d = 4u * c;
            if (d < at.d) { out[ybase + d] = v.x; }
            if (d + 1u < at.d) { out[ybase + d + 1u] = v.y; }
            if (d + 2u < at.d) { out[ybase + d + 2u] = v.z; }
            if (d + 3u < at.d) { out[ybase + d + 3u] = v.w; }
        }
        lse[bh * at.t + i] = m + log(l);
    }
}

@compute @workgroup_size(256)
fn attention_backward_delta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var idx = gid.x; idx < at.b * at.h * at.t; idx += nwg.x * 256u) {
        let i = idx % at.t;
        let bh = idx / at.t;
        let base = y_at(bh / at.h, i, bh % at.h);
        var s = 0.0;
        for (var d = 0u; d < at.d; d++) { s += dout[base + d] * out[base + d]; }
        delta[idx] = s;
    }
}

@compute @workgroup_size({{TILE}}, {{TILE}}, 1)
fn attention_backward_dkdv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let j0 = wg.x * BC;
    let jj = lid.y;          // this thread's key within the tile
    let lane = lid.x;
    let tid = jj * BC + lane;
    let j = j0 + jj;
    let kbase = qkv_at(b, min(j, at.t - 1u), 1u, h);
    let vbase = qkv_at(b, min(j, at.t - 1u), 2u, h);

    var dk: array<f32, DPL>;
    var dv: array<f32, DPL>;
    for (var u = 0u; u < DPL; u++) { dk[u] = 0.0; dv[u] = 0.0; }
    let trace_on = traced(bh);
    // The query tiles before the diagonal: causality skips them whole.
    let first = select(0u, j0, CAUSAL);
    if (trace_on && tid == 0u) {
        for (var qt = 0u; qt < first / BR; qt++) { rec_header(rec_at(1u, wg.x, qt), 2.0, qt, wg.x, 0u); }
    }
    for (var i0 = first; i0 < at.t; i0 += BR) {
        load_rows(0u, b, h, i0, 0u, tid); // Q tile
        load_rows(1u, b, h, i0, 3u, tid); // dO tile
        workgroupBarrier();
        // Thread (jj, lane) scores query i = i0 + lane against key j.
        let i = i0 + lane;
        var pd = 0.0;
        var ds = 0.0;
        if (i < at.t && sees(i, j)) {
            var s = 0.0;
            var dp = 0.0;
            for (var d = 0u; d < at.d; d++) {
                s += tile_a[lane * ts() + d] * qkv[kbase + d];
                dp += tile_b[lane * ts() + d] * qkv[vbase + d];
            }
            let pij = exp(s * at.scale - lse[bh * at.t + i]);
            let mk = mask(bh, i, j);
            pd = pij * mk;
            ds = pij * (dp * mk - delta[bh * at.t + i]);
        }
        s_tile[lane * BC + jj] = pd;
        s_tile2[lane * BC + jj] = ds;
        workgroupBarrier();
        let rec = rec_at(1u, wg.x, i0 / BR);
        if (trace_on) {
            if (tid == 0u) { rec_header(rec, 1.0, i0 / BR, wg.x, (i0 - first) / BR); }
            trace[rec + BLOCK_A + lane * TILE + jj] = pd;
            trace[rec + BLOCK_B + lane * TILE + jj] = ds;
        }
        var p_sum = 0.0;
        var ds_sum = 0.0;
        for (var ii = 0u; ii < BR; ii++) {
            let p_ij = s_tile[ii * BC + jj];
            let ds_ij = s_tile2[ii * BC + jj];
            if (trace_on) { p_sum += p_ij; ds_sum += ds_ij; }
            for (var u = 0u; u < DPL; u++) {
                let d = lane + BC * u;
                if (d < at.d) {
                    dv[u] += p_ij * tile_b[ii * ts() + d];
                    dk[u] += ds_ij * tile_a[ii * ts() + d];
                }
            }
        }
        if (trace_on && lane == 0u) {
            trace[rec + ROWS + 8u * jj] = p_sum;
            trace[rec + ROWS + 8u * jj + 1u] = ds_sum;
        }
        workgroupBarrier();
    }
    if (j < at.t) {
        for (var u = 0u; u < DPL; u++) {
            let d = lane + BC * u;
            if (d < at.d) {
                dqkv[kbase + d] += at.scale * dk[u];
                dqkv[vbase + d] += dv[u];
            }
        }
    }
}

@compute @workgroup_size({{TILE}}, {{TILE}}, 1)
fn attention_backward_dq(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = wg.x * BR;
    let r = lid.y;
    let lane = lid.x;
    let tid = r * BC + lane;
    let i = q0 + r;
    let valid = i < at.t;
    let ic = min(i, at.t - 1u);
    let qbase = qkv_at(b, ic, 0u, h);
    let obase = y_at(b, ic, h);
    let lse_i = lse[bh * at.t + ic];
    let delta_i = delta[bh * at.t + ic];

    var dq: array<f32, DPL>;
    for (var u = 0u; u < DPL; u++) { dq[u] = 0.0; }
    let last = keys_end(q0);
    let trace_on = traced(bh);
    for (var j0 = 0u; j0 < last; j0 += BC) {
        load_rows(0u, b, h, j0, 1u, tid); // K tile
        load_rows(1u, b, h, j0, 2u, tid); // V tile
        workgroupBarrier();
        let j = j0 + lane;
        var ds = 0.0;
        var pd = 0.0;
        if (valid && sees(i, j)) {
            var s = 0.0;
            var dp = 0.0;
            for (var d = 0u; d < at.d; d++) {
                s += qkv[qbase + d] * tile_a[lane * ts() + d];
                dp += dout[obase + d] * tile_b[lane * ts() + d];
            }
            let pij = exp(s * at.scale - lse_i);
            ds = pij * (dp * mask(bh, i, j) - delta_i);
            if (TRACE) { pd = pij * mask(bh, i, j); }
        }
        s_tile[r * BC + lane] = ds;
        let rec = rec_at(2u, wg.x, j0 / BC);
        if (trace_on) {
            s_tile2[r * BC + lane] = pd;
            if (tid == 0u) { rec_header(rec, 1.0, wg.x, j0 / BC, j0 / BC); }
            trace[rec + BLOCK_A + r * TILE + lane] = pd;
            trace[rec + BLOCK_B + r * TILE + lane] = ds;
        }
        workgroupBarrier();
        var p_sum = 0.0;
        var ds_sum = 0.0;
        for (var jj = 0u; jj < BC; jj++) {
            let ds_ij = s_tile[r * BC + jj];
            if (trace_on) { p_sum += s_tile2[r * BC + jj]; ds_sum += ds_ij; }
            for (var u = 0u; u < DPL; u++) {
                let d = lane + BC * u;
                if (d < at.d) { dq[u] += ds_ij * tile_a[jj * ts() + d]; }
            }
        }
        if (trace_on && lane == 0u) {
            trace[rec + ROWS + 8u * r] = p_sum;
            trace[rec + ROWS + 8u * r + 1u] = ds_sum;
        }
        workgroupBarrier();
    }
    if (trace_on && tid == 0u) {
        let nt = (at.t + TILE - 1u) / TILE;
        for (var kb = (last + BC - 1u) / BC; kb < nt; kb++) {
            rec_header(rec_at(2u, wg.x, kb), 2.0, wg.x, kb, 0u);
        }
    }
    if (valid) {
        for (var u = 0u; u < DPL; u++) {
            let d = lane + BC * u;
            if (d < at.d) { dqkv[qbase + d] += at.scale * dq[u]; }
        }
    }
}

// --- attention_backward_dq_rows: training's dQ, one thread per query row (as
// attention_forward_rows): q, dO and the dQ accumulator in its registers,
// the keys and values KB at a time through workgroup memory; per key
// P = exp(q·k·scale − lse), dS = P ∘ (dO·v ∘ mask − delta), dQ += dS·k.
// attention_backward_dq, the 16×16-tile kernel above, is the one the trace
// replays. Group (ceil(T / ROWS_Q), b·H + h), ROWS_Q threads.
@compute @workgroup_size(64, 1, 1)
fn attention_backward_dq_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = wg.x * ROWS_Q;
    let i = q0 + tid;
    let valid = i < at.t;
    let ic = min(i, at.t - 1u);
    let lse_i = lse[bh * at.t + ic];
    let delta_i = delta[bh * at.t + ic];
    let obase = y_at(b, ic, h);
    var q: array<vec4<f32>, DV4>;
    var dy: array<vec4<f32>, DV4>;
    var dq: array<vec4<f32>, DV4>;
    for (var c = 0u; c < DV4; c++) {
        q[c] = qkv_vec4(b, ic, 0u, h, c);
        dy[c] = dout_vec4(obase, c);
        dq[c] = vec4<f32>(0.0);
    }
    let last = row_keys_end(q0);
    for (var j0 = 0u; j0 < last; j0 += KB) {
        workgroupBarrier();
        load_key_block(b, h, j0, tid);
        workgroupBarrier();
        if (valid) {
            let keys = min(KB, last - j0);
            for (var jj = 0u; jj < keys; jj++) {
                let j = j0 + jj;
                if (!sees(i, j)) { break; }
                var s = 0.0;
                var dp = 0.0;
                for (var c = 0u; c < DV4; c++) {
                    s += dot(q[c], k_rows[jj * DV4 + c]);
                    dp += dot(dy[c], v_rows[jj * DV4 + c]);
                }
                let p = exp(s * at.scale - lse_i);
                let ds = p * (dp * mask(bh, i, j) - delta_i);
                for (var c = 0u; c < DV4; c++) { dq[c] += ds * k_rows[jj * DV4 + c]; }
            }
        }
    }
    if (valid) {
        let base = qkv_at(b, i, 0u, h);
        for (var c = 0u; c < DV4; c++) {
            let v = at.scale * dq[c];
            let d = 4u * c;
            if (d < at.d) { dqkv[base + d] += v.x; }
            if (d + 1u < at.d) { dqkv[base + d + 1u] += v.y; }
            if (d + 2u < at.d) { dqkv[base + d + 2u] += v.z; }
            if (d + 3u < at.d) { dqkv[base + d + 3u] += v.w; }
        }
    }
}

// --- attention_backward_dkdv_blocks: training's dK and dV, FlashAttention-2's
// Algorithm 2 outer loop (a block of keys per workgroup, walking the query
// blocks from the diagonal down) with every operand in workgroup memory.
// Group (ceil(T / KEYS_B), b·H + h), 256 threads. The block's K and V rows are
// loaded once; each step loads QUERIES_B rows of Q and dO, then
//   scores:     thread t takes query t % QUERIES_B against keys 2·(t / QUERIES_B)
//               and the next: S = q·k·scale, dP = dO·v, then
//               P = exp(S − lse) ∘ mask, dS = exp(S − lse) ∘ (dP ∘ mask − delta)
//               into P_blk, dS_blk (KEYS_B × QUERIES_B, key-major);
//   accumulate: thread t owns the (key, 4-column) pairs t, t + 256, … of
//               the block: dV += Σ_i P_ji dO_i, dK += Σ_i dS_ji q_i, in registers.
// Needs kernels::attention_dkdv_blocks_bytes of workgroup memory (30 KiB at
// D = 64); where the device has less, attention_backward_dkdv (the 16×16-tile
// kernel above, the one the trace replays) computes the same function.
const KEYS_B: u32 = 32u;
const QUERIES_B: u32 = 16u;
// Row stride of the blocks in vec4s: one vec4 of padding, so rows read
// side by side by a warp's lanes start on different banks.
const ROW4: u32 = DV4 + 1u;
// (key, 4-column) pairs of the block per thread in the accumulate phase.
const PAIRS: u32 = (KEYS_B * DV4 + 255u) / 256u;

var<workgroup> k_blk: array<vec4<f32>, KEYS_B * ROW4>;
var<workgroup> v_blk: array<vec4<f32>, KEYS_B * ROW4>;
var<workgroup> q_blk: array<vec4<f32>, QUERIES_B * ROW4>;
var<workgroup> do_blk: array<vec4<f32>, QUERIES_B * ROW4>;
var<workgroup> p_blk: array<f32, KEYS_B * QUERIES_B>;
var<workgroup> ds_blk: array<f32, KEYS_B * QUERIES_B>;

// P_ij (with the dropout mask) and dS_ij of query i, key j from the score
// s = q·k (unscaled) and dp = dO·v; zero where i does not see j.
fn p_and_ds(bh: u32, i: u32, j: u32, s: f32, dp: f32, lse_i: f32, delta_i: f32) -> vec2<f32> {
    if (i >= at.t || !sees(i, j)) { return vec2<f32>(0.0); }
    let p = exp(s * at.scale - lse_i);
    let mk = mask(bh, i, j);
    return vec2<f32>(p * mk, p * (dp * mk - delta_i));
}

// Query i's q and dO, 4 columns from 4·c (zero past the sequence's end).
fn q_and_do(b: u32, i: u32, h: u32, c: u32) -> array<vec4<f32>, 2> {
    if (i >= at.t) { return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0)); }
    return array<vec4<f32>, 2>(qkv_vec4(b, i, 0u, h, c), dout_vec4(y_at(b, i, h), c));
}

// Key j's k and v, 4 columns from 4·c (zero past the sequence's end).
fn k_and_v(b: u32, j: u32, h: u32, c: u32) -> array<vec4<f32>, 2> {
    if (j >= at.t) { return array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0)); }
    return array<vec4<f32>, 2>(qkv_vec4(b, j, 1u, h, c), qkv_vec4(b, j, 2u, h, c));
}

// dqkv[base + x] += g[x], x = 0..3, for the columns d + x the head has
// (base: the row's element of column d).
fn add_columns(base: u32, d: u32, g: vec4<f32>) {
    for (var x = 0u; x < 4u; x++) {
        if (d + x < at.d) { dqkv[base + x] += g[x]; }
    }
}

@compute @workgroup_size(256, 1, 1)
fn attention_backward_dkdv_blocks(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let j0 = wg.x * KEYS_B;
    for (var e = tid; e < KEYS_B * DV4; e += 256u) {
        let r = e / DV4;
        let c = e % DV4;
        let kv = k_and_v(b, j0 + r, h, c);
        k_blk[r * ROW4 + c] = kv[0];
        v_blk[r * ROW4 + c] = kv[1];
    }
    // Scores: this thread's query row in the block and its two keys.
    let sq = tid % QUERIES_B;
    let sk = 2u * (tid / QUERIES_B);
    var dk: array<vec4<f32>, PAIRS>;
    var dv: array<vec4<f32>, PAIRS>;
    for (var u = 0u; u < PAIRS; u++) {
        dk[u] = vec4<f32>(0.0);
        dv[u] = vec4<f32>(0.0);
    }
    // The query blocks before the diagonal: causality skips them whole.
    let first = select(0u, j0, CAUSAL);
    for (var i0 = first; i0 < at.t; i0 += QUERIES_B) {
        workgroupBarrier();
        for (var e = tid; e < QUERIES_B * DV4; e += 256u) {
            let r = e / DV4;
            let c = e % DV4;
            let qo = q_and_do(b, i0 + r, h, c);
            q_blk[r * ROW4 + c] = qo[0];
            do_blk[r * ROW4 + c] = qo[1];
        }
        workgroupBarrier();
        var s0 = 0.0;
        var s1 = 0.0;
        var dp0 = 0.0;
        var dp1 = 0.0;
        for (var c = 0u; c < DV4; c++) {
            let q = q_blk[sq * ROW4 + c];
            let o = do_blk[sq * ROW4 + c];
            s0 += dot(q, k_blk[sk * ROW4 + c]);
            s1 += dot(q, k_blk[(sk + 1u) * ROW4 + c]);
            dp0 += dot(o, v_blk[sk * ROW4 + c]);
            dp1 += dot(o, v_blk[(sk + 1u) * ROW4 + c]);
        }
        let i = i0 + sq;
        let ic = min(i, at.t - 1u);
        let lse_i = lse[bh * at.t + ic];
        let delta_i = delta[bh * at.t + ic];
        let a = p_and_ds(bh, i, j0 + sk, s0, dp0, lse_i, delta_i);
        let a1 = p_and_ds(bh, i, j0 + sk + 1u, s1, dp1, lse_i, delta_i);
        p_blk[sk * QUERIES_B + sq] = a.x;
        ds_blk[sk * QUERIES_B + sq] = a.y;
        p_blk[(sk + 1u) * QUERIES_B + sq] = a1.x;
        ds_blk[(sk + 1u) * QUERIES_B + sq] = a1.y;
        workgroupBarrier();
        for (var ii = 0u; ii < QUERIES_B; ii++) {
            for (var u = 0u; u < PAIRS; u++) {
                let e = tid + 256u * u;
                if (e < KEYS_B * DV4) {
                    let r = e / DV4;
                    let c = e % DV4;
                    dv[u] += p_blk[r * QUERIES_B + ii] * do_blk[ii * ROW4 + c];
                    dk[u] += ds_blk[r * QUERIES_B + ii] * q_blk[ii * ROW4 + c];
                }
            }
        }
    }
    for (var u = 0u; u < PAIRS; u++) {
        let e = tid + 256u * u;
        let j = j0 + e / DV4;
        if (e < KEYS_B * DV4 && j < at.t) {
            let d = 4u * (e % DV4);
            add_columns(qkv_at(b, j, 1u, h) + d, d, at.scale * dk[u]);
            add_columns(qkv_at(b, j, 2u, h) + d, d, dv[u]);
        }
    }
}

// --- attention_backward_dq_blocks: training's dQ, the mirror of
// attention_backward_dkdv_blocks (Algorithm 2's dQ by a loop of its own, so
// no two workgroups write one element): a block of QUERIES_Q queries per
// workgroup, walking the key blocks up to the diagonal. Group
// (ceil(T / QUERIES_Q), b·H + h), 256 threads. The block's Q and dO rows are
// loaded once; each step loads KEYS_Q rows of K and V, then
//   scores:     thread t takes key t % KEYS_Q against queries 2·(t / KEYS_Q) and
//               the next: dS = exp(q·k·scale − lse) ∘ (dO·v ∘ mask − delta)
//               into dS_blk (QUERIES_Q × KEYS_Q, query-major);
//   accumulate: thread t owns the (query, 4-column) pairs t, t + 256, … of
//               the block: dQ += Σ_j dS_ij k_j, in registers.
// Needs kernels::attention_dq_blocks_bytes of workgroup memory; where the
// device has less, attention_backward_dq_rows computes the same function.
const QUERIES_Q: u32 = 32u;
const KEYS_Q: u32 = 16u;
const PAIRS_Q: u32 = (QUERIES_Q * DV4 + 255u) / 256u;

var<workgroup> qrows_blk: array<vec4<f32>, QUERIES_Q * ROW4>;
var<workgroup> dorows_blk: array<vec4<f32>, QUERIES_Q * ROW4>;
var<workgroup> krows_blk: array<vec4<f32>, KEYS_Q * ROW4>;
var<workgroup> vrows_blk: array<vec4<f32>, KEYS_Q * ROW4>;
var<workgroup> dsq_blk: array<f32, QUERIES_Q * KEYS_Q>;

@compute @workgroup_size(256, 1, 1)
fn attention_backward_dq_blocks(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    mask_key = dropout_key(step.dropout_seed, at.stream);
    let bh = wg.y;
    let b = bh / at.h;
    let h = bh % at.h;
    let q0 = wg.x * QUERIES_Q;
    for (var e = tid; e < QUERIES_Q * DV4; e += 256u) {
        let r = e / DV4;
        let c = e % DV4;
        let qo = q_and_do(b, q0 + r, h, c);
        qrows_blk[r * ROW4 + c] = qo[0];
        dorows_blk[r * ROW4 + c] = qo[1];
    }
    // Scores: this thread's key row in the step and its two queries.
    let sk = tid % KEYS_Q;
    let sq = 2u * (tid / KEYS_Q);
    let i_a = q0 + sq;
    let i_b = i_a + 1u;
    let lse_a = lse[bh * at.t + min(i_a, at.t - 1u)];
    let lse_b = lse[bh * at.t + min(i_b, at.t - 1u)];
    let delta_a = delta[bh * at.t + min(i_a, at.t - 1u)];
    let delta_b = delta[bh * at.t + min(i_b, at.t - 1u)];
    var dq: array<vec4<f32>, PAIRS_Q>;
    for (var u = 0u; u < PAIRS_Q; u++) { dq[u] = vec4<f32>(0.0); }
    // The key blocks past the block's last query: causality skips them.
    let last = select(at.t, min(q0 + QUERIES_Q, at.t), CAUSAL);
    for (var j0 = 0u; j0 < last; j0 += KEYS_Q) {
        workgroupBarrier();
        for (var e = tid; e < KEYS_Q * DV4; e += 256u) {
            let r = e / DV4;
            let c = e % DV4;
            let kv = k_and_v(b, j0 + r, h, c);
            krows_blk[r * ROW4 + c] = kv[0];
            vrows_blk[r * ROW4 + c] = kv[1];
        }
        workgroupBarrier();
        var s0 = 0.0;
        var s1 = 0.0;
        var dp0 = 0.0;
        var dp1 = 0.0;
        for (var c = 0u; c < DV4; c++) {
            let k = krows_blk[sk * ROW4 + c];
            let v = vrows_blk[sk * ROW4 + c];
            s0 += dot(qrows_blk[sq * ROW4 + c], k);
            s1 += dot(qrows_blk[(sq + 1u) * ROW4 + c], k);
            dp0 += dot(dorows_blk[sq * ROW4 + c], v);
            dp1 += dot(dorows_blk[(sq + 1u) * ROW4 + c], v);
        }
        let j = j0 + sk;
        dsq_blk[sq * KEYS_Q + sk] = p_and_ds(bh, i_a, j, s0, dp0, lse_a, delta_a).y;
        dsq_blk[(sq + 1u) * KEYS_Q + sk] = p_and_ds(bh, i_b, j, s1, dp1, lse_b, delta_b).y;
        workgroupBarrier();
        for (var jj = 0u; jj < KEYS_Q; jj++) {
            for (var u = 0u; u < PAIRS_Q; u++) {
                let e = tid + 256u * u;
                if (e < QUERIES_Q * DV4) {
                    let r = e / DV4;
                    let c = e % DV4;
                    dq[u] += dsq_blk[r * KEYS_Q + jj] * krows_blk[jj * ROW4 + c];
                }
            }
        }
    }
    for (var u = 0u; u < PAIRS_Q; u++) {
        let e = tid + 256u * u;
        let i = q0 + e / DV4;
        if (e < QUERIES_Q * DV4 && i < at.t) {
            let d = 4u * (e % DV4);
            add_columns(qkv_at(b, i, 0u, h) + d, d, at.scale * dq[u]);
        }
    }
}
