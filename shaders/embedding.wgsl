// embedding.wgsl — token + position embeddings, forward and backward.
//
// Bindings (group 0):
//   @binding(0) tokens:  array<u32>  (B·T) token ids
//   @binding(1) wte:     array<f32>  (V, C); backward: dwte, accumulated
//   @binding(2) wpe:     array<f32>  (T, C); backward: dwpe, accumulated
//   @binding(3) act:     array<f32>  forward: out (B·T, C); backward: dout
//   @binding(4) order:   array<u32>  (B·T) row indices sorted by token (stable)
//   @binding(5) offsets: array<u32>  (V + 1) where each token's rows start in `order`
//   @binding(6) e:       EmbParams
// Entry points:
//   embedding_forward       thread per (row, c): out = wte[token] + wpe[row mod T]
//                           (out = wte[token] without position embeddings: POSITIONS
//                           in common.wgsl; the plan then skips embedding_backward_wpe)
//   embedding_backward_wpe  thread per (t, c): dwpe[t] += Σ_b dout[b, t]
//   embedding_backward_wte  workgroup per (16 columns, token v), 256 threads: dwte[v] += Σ over
//                           the rows with token v, each column's rows in 16 interleaved slices
// The backward needs no atomics: each output element is summed by threads of
// one workgroup in a fixed order (deterministic).
// Workgroup: 256 threads; the forward and dwpe in grid-stride loops.

struct EmbParams {
    rows: u32,
    t: u32,
    c: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> tokens: array<u32>;
@group(0) @binding(1) var<storage, read_write> wte: array<f32>;
@group(0) @binding(2) var<storage, read_write> wpe: array<f32>;
@group(0) @binding(3) var<storage, read_write> act: array<f32>;
@group(0) @binding(4) var<storage, read> order: array<u32>;
@group(0) @binding(5) var<storage, read> offsets: array<u32>;
@group(0) @binding(6) var<uniform> e: EmbParams;

@compute @workgroup_size(256)
fn embedding_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < e.rows * e.c; i += nwg.x * 256u) {
        let row = i / e.c;
        let col = i % e.c;
        let tok = tokens[row];
        var x = wte[tok * e.c + col];
        if (POSITIONS) { x += wpe[(row % e.t) * e.c + col]; }
        act[i] = x;
    }
}

@compute @workgroup_size(256)
fn embedding_backward_wpe(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < e.t * e.c; i += nwg.x * 256u) {
        let pos = i / e.c;
        let col = i % e.c;
        var s = wpe[i];
        for (var row = pos; row < e.rows; row += e.t) {
            s += act[row * e.c + col];
        }
        wpe[i] = s;
    }
}

// dwte: the rows of token v are order[offsets[v] .. offsets[v + 1]]. A
// workgroup takes token v (wg.y) and 16 columns; thread (slice, column) sums
// the token's rows slice, slice + 16, … in order, and the first slice adds
// the 16 slices' sums in order. (A thread per (v, column) summing every row
// alone waited on one long chain of loads for a frequent token: 0.6 ms a
// step at nanogpt-char, where ' ' fills about 2500 of 16384 rows.)
// Group (ceil(C / WTE_COLUMNS), VOCAB).
const WTE_COLUMNS: u32 = 16u;
const WTE_SLICES: u32 = 16u;
var<workgroup> wte_slices: array<f32, 256>;

@compute @workgroup_size(256)
fn embedding_backward_wte(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let v = wg.y;
    let col = wg.x * WTE_COLUMNS + tid % WTE_COLUMNS;
    let slice = tid / WTE_COLUMNS;
    let r0 = offsets[v];
    let r1 = offsets[v + 1u];
    var s = 0.0;
    if (col < e.c) {
        for (var r = r0 + slice; r < r1; r += WTE_SLICES) {
            s += act[order[r] * e.c + col];
        }
    }
    wte_slices[tid] = s;
    workgroupBarrier();
    if (slice == 0u && col < e.c && r1 > r0) {
        var t = 0.0;
        for (var k = 0u; k < WTE_SLICES; k++) {
            t += wte_slices[k * WTE_COLUMNS + tid];
        }
        wte[v * e.c + col] += t;
    }
}
