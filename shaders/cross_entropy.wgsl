// cross_entropy.wgsl — fused softmax + cross-entropy over the byte vocabulary,
// its gradient, and the loss/gradient-norm reductions that end a step.
//
// Bindings (group 0):
//   @binding(0) logits:  array<f32>   (N, V)
//   @binding(1) targets: array<u32>   (N)
//   @binding(2) losses:  array<f32>   (N) per-row losses; also the input of loss_mean
//   @binding(3) dlogits: array<f32>   (N, V), accumulated
//   @binding(4) stats:   array<f32>   [loss, grad_norm, clip_scale, sum_squares]; in
//                                     cross_entropy_backward the loss scaler's state instead
//                                     (adamw.wgsl): stats[0] is the loss scale S (1 in f32)
//   @binding(5) ce:      CeParams
// Entry points:
//   cross_entropy_forward   one workgroup per row: losses[row] = lse(logits) − logits[target]
//   cross_entropy_backward  one workgroup per row: dlogits += (softmax − onehot) · S / N
//   loss_mean               one workgroup: stats[0] = mean(losses), fixed reduction tree
// Workgroup: 64 threads.

struct CeParams {
    rows: u32,
    vocab: u32,
    _pad0: u32,
    _pad1: u32,
}

// -f32::MAX, the start of a running max. (The literal rounds to it; Tint,
// the browsers' WGSL compiler, refuses a literal past it, such as -3.4028235e38.)
const NEG_FLT_MAX: f32 = -3.4028234e38;
const WG: u32 = 64u;

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<u32>;
@group(0) @binding(2) var<storage, read_write> losses: array<f32>;
@group(0) @binding(3) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<uniform> ce: CeParams;

var<workgroup> red: array<f32, 64>;

fn reduce_max(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] = max(red[tid], red[tid + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(tid: u32, v: f32) -> f32 {
    red[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn row_lse(row: u32, tid: u32) -> f32 {
    let base = row * ce.vocab;
    var m = NEG_FLT_MAX;
    for (var j = tid; j < ce.vocab; j += WG) { m = max(m, logits[base + j]); }
    m = reduce_max(tid, m);
    var s = 0.0;
    for (var j = tid; j < ce.vocab; j += WG) { s += exp(logits[base + j] - m); }
    return m + log(reduce_sum(tid, s));
}

@compute @workgroup_size(64)
fn cross_entropy_forward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x + wg.y * 65535u;
    if (row >= ce.rows) { return; }
    let lse = row_lse(row, lid.x);
    if (lid.x == 0u) {
        losses[row] = lse - logits[row * ce.vocab + targets[row]];
    }
}

@compute @workgroup_size(64)
fn cross_entropy_backward(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.x + wg.y * 65535u;
    if (row >= ce.rows) { return; }
    let lse = row_lse(row, lid.x);
    let base = row * ce.vocab;
    let tgt = targets[row];
    // S / N: S = 1 in f32 (the same 1/N to the bit), the loss scale in mixed precision.
    let dloss = stats[0] / f32(ce.rows);
    for (var j = lid.x; j < ce.vocab; j += WG) {
        var y = 0.0;
        if (j == tgt) { y = 1.0; }
        dlogits[base + j] += (exp(logits[base + j] - lse) - y) * dloss;
    }
}

@compute @workgroup_size(64)
fn loss_mean(@builtin(local_invocation_id) lid: vec3<u32>) {
    var s = 0.0;
    for (var i = lid.x; i < ce.rows; i += WG) { s += losses[i]; }
    let total = reduce_sum(lid.x, s);
    if (lid.x == 0u) {
        stats[0] = total / f32(ce.rows);
    }
}
