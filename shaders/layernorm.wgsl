// layernorm.wgsl — LayerNorm forward and backward, eps 1e-5, and the
// deterministic column sums that finish dweight/dbias and linear bias grads.
//
// Bindings (group 0):
//   @binding(0) inp:   array<f32>  (N, C) the forward input
//   @binding(1) gain:  array<f32>  (C) weight
//   @binding(2) out:   array<f32>  forward: out (N, C); backward: dinp (N, C), accumulated
//   @binding(3) mean:  array<f32>  (N) saved by the forward
//   @binding(4) rstd:  array<f32>  (N) saved by the forward
//   @binding(5) g:     array<f32>  forward: bias (C); backward: dout (N, C)
//   @binding(6) part:  array<f32>  (chunks, 2C) partial column sums (backward)
//   @binding(7) ln:    LnParams
// Entry points:
//   layernorm_forward        one workgroup per row: out = (x − mean)·rstd·gain + bias
//   layernorm_backward_dx    one workgroup per row: dinp += (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd
//   layernorm_backward_part  one workgroup (256 threads) per chunk of ROWS_PER_CHUNK rows: part[chunk] = Σ (dout·norm, dout)
//   layernorm_params_final   16 columns a workgroup of 256: dweight (bound as out) += Σ part[·, col],
//                            dbias (bound as mean) += Σ part[·, C + col], in 16 interleaved slices
//   column_sums_final        16 columns a workgroup of 256: out[col] += Σ_chunks part[chunk·stride + offset + col]
//                            (in 16 interleaved slices; see FINAL_SLICES)
//   bias_grad_part           one workgroup (256 threads) per chunk: part[chunk, col] = Σ_rows g[row, col] (width C)
//   layernorm_params_direct  where B·T is small: the partial and final passes of LayerNorm's in one
//                            dispatch, the same sums in the same order; dweight bound as out, dbias as part
//   bias_grad_direct         likewise a bias's: out[col] += Σ_rows g[row, col]
// Workgroup: 64 threads (the per-row kernels); row reductions through workgroup memory in a fixed tree
// (deterministic, no atomics).

struct LnParams {
    rows: u32,
    c: u32,
    chunks: u32,
    // column_sums_final reads part[chunk * part_stride + part_offset + col]
    part_stride: u32,
    part_offset: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 64u;
const ROWS_PER_CHUNK: u32 = 16u;
const PART_WG: u32 = 256u;
const EPS: f32 = 1e-5;

@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read> gain: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> mean: array<f32>;
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<f32>;
@group(0) @binding(6) var<storage, read_write> part: array<f32>;
@group(0) @binding(7) var<uniform> ln: LnParams;

var<workgroup> red_a: array<f32, 64>;
var<workgroup> red_b: array<f32, 64>;

// Sums red_a (and red_b) over the workgroup; every thread gets the totals.
fn reduce2(tid: u32, a: f32, b: f32) -> vec2<f32> {
    red_a[tid] = a;
    red_b[tid] = b;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_a[tid] += red_a[tid + s];
            red_b[tid] += red_b[tid + s];
        }
        workgroupBarrier();
    }
    let r = vec2<f32>(red_a[0], red_b[0]);
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn layernorm_forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x + wg.y * 65535u;
    if (row >= ln.rows) { return; }
    let base = row * ln.c;
    let tid = lid.x;
    var s = 0.0;
    for (var i = tid; i < ln.c; i += WG) { s += inp[base + i]; }
    let m = reduce2(tid, s, 0.0).x / f32(ln.c);
    var v = 0.0;
    for (var i = tid; i < ln.c; i += WG) {
        let d = inp[base + i] - m;
        v += d * d;
    }
    let var_ = reduce2(tid, v, 0.0).x / f32(ln.c);
    let r = 1.0 / sqrt(var_ + EPS);
    for (var i = tid; i < ln.c; i += WG) {
        out[base + i] = (inp[base + i] - m) * r * gain[i] + g[i];
    }
    if (tid == 0u) {
        mean[row] = m;
        rstd[row] = r;
    }
}

@compute @workgroup_size(64)
fn layernorm_backward_dx(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x + wg.y * 65535u;
    if (row >= ln.rows) { return; }
    let base = row * ln.c;
    let tid = lid.x;
    let m = mean[row];
    let r = rstd[row];
    var s1 = 0.0;
    var s2 = 0.0;
    for (var i = tid; i < ln.c; i += WG) {
        let norm = (inp[base + i] - m) * r;
        let dnorm = gain[i] * g[base + i];
        s1 += dnorm;
        s2 += dnorm * norm;
    }
    let sums = reduce2(tid, s1, s2) / f32(ln.c);
    for (var i = tid; i < ln.c; i += WG) {
        let norm = (inp[base + i] - m) * r;
        let dnorm = gain[i] * g[base + i];
        out[base + i] += (dnorm - sums.x - norm * sums.y) * r;
    }
}

// LayerNorm's parameter gradients over one chunk of rows, for column `col`:
// (Σ dout·norm, Σ dout), in row order.
fn ln_chunk_sums(col: u32, chunk: u32) -> vec2<f32> {
    let r0 = chunk * ROWS_PER_CHUNK;
    let r1 = min(r0 + ROWS_PER_CHUNK, ln.rows);
    var dw = 0.0;
    var db = 0.0;
    for (var row = r0; row < r1; row++) {
        let gv = g[row * ln.c + col];
        dw += gv * (inp[row * ln.c + col] - mean[row]) * rstd[row];
        db += gv;
    }
    return vec2<f32>(dw, db);
}

// A bias's gradient over one chunk of rows, for column `col`: Σ g[row, col],
// in row order.
fn bias_chunk_sum(col: u32, chunk: u32) -> f32 {
    let r0 = chunk * ROWS_PER_CHUNK;
    let r1 = min(r0 + ROWS_PER_CHUNK, ln.rows);
    var db = 0.0;
    for (var row = r0; row < r1; row++) {
        db += g[row * ln.c + col];
    }
    return db;
}

@compute @workgroup_size(256)
fn layernorm_backward_part(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let chunk = wg.x;
    for (var col = lid.x; col < ln.c; col += PART_WG) {
        let s = ln_chunk_sums(col, chunk);
        part[chunk * 2u * ln.c + col] = s.x;
        part[chunk * 2u * ln.c + ln.c + col] = s.y;
    }
}

@compute @workgroup_size(256)
fn bias_grad_part(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let chunk = wg.x;
    for (var col = lid.x; col < ln.c; col += PART_WG) {
        part[chunk * ln.c + col] = bias_chunk_sum(col, chunk);
    }
}

// The final sums read the partial rows in FINAL_SLICES interleaved slices:
// a workgroup of 256 threads takes FINAL_COLUMNS (16) columns, thread
// (slice, column) sums chunks slice, slice + 16, … in order, and the first
// slice adds the 16 slices' sums in order (deterministic: the same order
// every run). (A thread per column summing every chunk alone left most of
// the GPU idle behind one long chain of loads: 0.1 ms a final at
// nanogpt-char's 1024 chunks.)
const FINAL_COLUMNS: u32 = 16u;
const FINAL_SLICES: u32 = 16u;
var<workgroup> slice_a: array<f32, 256>;
var<workgroup> slice_b: array<f32, 256>;

// Column `col`'s sums over the chunks of one slice: part[ch·stride + offset
// + col] (and the same at + c when `both`, LayerNorm's dbias half).
fn slice_sums(col: u32, slice: u32, stride: u32, offset: u32, both: bool) -> vec2<f32> {
    var s = vec2<f32>(0.0);
    if (col < ln.c) {
        for (var ch = slice; ch < ln.chunks; ch += FINAL_SLICES) {
            s.x += part[ch * stride + offset + col];
            if (both) { s.y += part[ch * stride + offset + ln.c + col]; }
        }
    }
    return s;
}

// The 16 slices' sums of a workgroup's 16 columns added in slice order:
// the column's totals, for the threads of slice 0 to write. Every thread
// calls it (it holds a barrier).
fn slice_totals(tid: u32, s: vec2<f32>) -> vec2<f32> {
    slice_a[tid] = s.x;
    slice_b[tid] = s.y;
    workgroupBarrier();
    var t = vec2<f32>(0.0);
    if (tid < FINAL_COLUMNS) {
        for (var k = 0u; k < FINAL_SLICES; k++) {
            t.x += slice_a[k * FINAL_COLUMNS + tid];
            t.y += slice_b[k * FINAL_COLUMNS + tid];
        }
    }
    return t;
}

// LayerNorm's parameter gradients from the partial rows: part rows hold
// (dw | db), 2C wide; dweight is bound as `out` and dbias as `mean`.
// Group (ceil(C / FINAL_COLUMNS)), 256 threads.
@compute @workgroup_size(256)
fn layernorm_params_final(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let col = wg.x * FINAL_COLUMNS + tid % FINAL_COLUMNS;
    let slice = tid / FINAL_COLUMNS;
    let t = slice_totals(tid, slice_sums(col, slice, 2u * ln.c, 0u, true));
    if (slice == 0u && col < ln.c) {
        out[col] += t.x;
        mean[col] += t.y;
    }
}

// dst is `out`: width `c` columns, `chunks` partial rows.
// Group (ceil(c / FINAL_COLUMNS)), 256 threads.
@compute @workgroup_size(256)
fn column_sums_final(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let col = wg.x * FINAL_COLUMNS + tid % FINAL_COLUMNS;
    let slice = tid / FINAL_COLUMNS;
    let t = slice_totals(tid, slice_sums(col, slice, ln.part_stride, ln.part_offset, false));
    if (slice == 0u && col < ln.c) {
        out[col] += t.x;
    }
}

// The direct builds, where the rows are few (DIRECT_SUMS_MAX_ROWS in
// src/gpu/plan.rs): one dispatch does both passes. Thread (slice, column)
// sums each of its chunks' rows itself (ln_chunk_sums, bias_chunk_sum, as
// the partial pass does) where the final pass reads that chunk's partial
// row: the same additions in the same order, in one dispatch instead of two
// (a dispatch costs about 6 µs of barrier on the H200, as much as the work
// at these sizes). Group (ceil(C / FINAL_COLUMNS)), 256 threads.

// slice_sums for the direct builds: column `col`'s sums over the chunks of
// one slice, each chunk's rows summed here (LayerNorm's pair when `both`,
// else a bias's in .x).
fn direct_slice_sums(col: u32, slice: u32, both: bool) -> vec2<f32> {
    var s = vec2<f32>(0.0);
    if (col < ln.c) {
        for (var ch = slice; ch < ln.chunks; ch += FINAL_SLICES) {
            if (both) { s += ln_chunk_sums(col, ch); } else { s.x += bias_chunk_sum(col, ch); }
        }
    }
    return s;
}

// LayerNorm's: inp, mean, rstd and dout (g) as in layernorm_backward_part;
// dweight bound as `out`, dbias as `part`.
@compute @workgroup_size(256)
fn layernorm_params_direct(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let col = wg.x * FINAL_COLUMNS + tid % FINAL_COLUMNS;
    let slice = tid / FINAL_COLUMNS;
    let t = slice_totals(tid, direct_slice_sums(col, slice, true));
    if (slice == 0u && col < ln.c) {
        out[col] += t.x;
        part[col] += t.y;
    }
}

// A bias's: dout as `g`, dbias as `out`.
@compute @workgroup_size(256)
fn bias_grad_direct(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let col = wg.x * FINAL_COLUMNS + tid % FINAL_COLUMNS;
    let slice = tid / FINAL_COLUMNS;
    let t = slice_totals(tid, direct_slice_sums(col, slice, false));
    if (slice == 0u && col < ln.c) {
        out[col] += t.x;
    }
}
