// attention_probs.wgsl — the attention weights P of one batch row, recomputed
// from q, k and the log-sum-exp that the forward pass saved. FlashAttention
// never stores P (attention.wgsl keeps one 16×16 tile of scores at a time);
// the explainer's Attention scene sees it through this kernel, which computes
// what the backward pass recomputes:
//   P[h, i, j] = exp(q_i · k_j · scale − lse[b, h, i])   for j ≤ i, else 0
// (every j without the causal mask: CAUSAL in common.wgsl).
// Training never runs it (it is a probe: `Step::AttentionProbs` in the program).
//
// Bindings (group 0):
//   @binding(0) qkv:   array<f32>   (B, T, 3C): q | k | v, head h at columns h·D..h·D+D of each
//   @binding(1) lse:   array<f32>   (B, H, T) log-sum-exp of each row of scaled scores
//   @binding(2) probs: array<f32>   (H, n, n) out: positions 0..n of batch row `win.row`
//   @binding(3) at:    AttnParams   the layer's sizes and scale (common.wgsl)
//   @binding(4) win:   ProbeWindow  which batch row, how many positions
// Entry point (workgroup 256):
//   attention_probs   group (x, head): thread x·256 + lane is element (i, j) = divmod(·, n)
//                     of that head; the grid covers T·T, threads past n·n return.

struct ProbeWindow {
    row: u32,
    n: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> lse: array<f32>;
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;
@group(0) @binding(3) var<uniform> at: AttnParams;
@group(0) @binding(4) var<uniform> win: ProbeWindow;

@compute @workgroup_size(256)
fn attention_probs(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n = win.n;
    let idx = wg.x * 256u + lid.x;
    let h = wg.y;
    if (idx >= n * n || h >= at.h || win.row >= at.b) {
        return;
    }
    let i = idx / n;
    let j = idx % n;
    var p = 0.0;
    if (j <= i || !CAUSAL) {
        // q_i and k_j of head h in row `win.row` (row stride 3C).
        let q0 = (win.row * at.t + i) * 3u * at.c + h * at.d;
        let k0 = (win.row * at.t + j) * 3u * at.c + at.c + h * at.d;
        var s = 0.0;
        for (var d = 0u; d < at.d; d += 1u) {
            s += qkv[q0 + d] * qkv[k0 + d];
        }
        p = exp(s * at.scale - lse[(win.row * at.h + h) * at.t + i]);
    }
    probs[(h * n + i) * n + j] = p;
}
