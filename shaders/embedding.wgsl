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
//   embedding_backward_wte  thread per (v, c): dwte[v] += Σ over rows with token v, in row order
// The backward needs no atomics: each output element has one thread, which
// sums its rows in a fixed order (deterministic).
// Workgroup: 256 threads, grid-stride loops.

struct EmbParams {
    rows: u32,
    t: u32,
    c: u32,
    vocab: u32,
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

@compute @workgroup_size(256)
fn embedding_backward_wte(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < e.vocab * e.c; i += nwg.x * 256u) {
        let v = i / e.c;
        let col = i % e.c;
        var s = wte[i];
        for (var r = offsets[v]; r < offsets[v + 1u]; r++) {
            s += act[order[r] * e.c + col];
        }
        wte[i] = s;
    }
}
