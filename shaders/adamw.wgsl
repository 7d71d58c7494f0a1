// adamw.wgsl — global-norm gradient clipping and AdamW over the flat parameter
// buffers. All parameters live in one buffer (decayed ≥2-D tensors first, then
// biases and LayerNorm gains), their gradients and moments in three more, so
// the optimizer is three dispatches, not three per tensor.
//
// Bindings (group 0):
//   @binding(0) params:   array<f32>  a chunk of the flat parameters
//   @binding(1) grads:    array<f32>  the same chunk of the gradients (rewritten clipped)
//   @binding(2) m:        array<f32>  first moments
//   @binding(3) v:        array<f32>  second moments
//   @binding(4) stats:    array<f32>  [loss, grad_norm, clip_scale, sum_squares]
//   @binding(5) partials: array<f32>  one partial sum of squares per workgroup, then
//                                     [total groups] the halt flag: 1 once a step's loss
//                                     or norm was not finite; only the host clears it
//   @binding(6) op:       OptParams   chunk length and its offset in the flat buffer
//   @binding(7) step:     StepUniform lr, betas, eps, weight decay, bias corrections, clip
//   @binding(8) scaler:   array<f32>  the loss scale (`--precision mixed`): [scale S, clean
//                                     steps since it last changed, steps skipped in all,
//                                     1 when this step was skipped]; [1, 0, 0, 0] in f32
// Entry points:
//   sum_squares_partial  group per CHUNK elements: partials[first_group + g] = Σ grad²
//   grad_norm_final      one group: stats[1] = √Σ partials (in order) / S, stats[2] = clip
//                        scale / S, stats[3] = Σ grad² / S² (−1: the step is discarded, the
//                        halt flag was set; −2: skipped by the loss scaler)
//   adamw_update         thread per element: PyTorch's AdamW on the clipped gradient; does
//                        nothing when the loss or the norm is not finite (a diverged step
//                        leaves the model as it was), nor in any step queued after one
//                        until the host clears the halt flag
// Workgroup: 256 threads; fixed reduction trees (deterministic).
//
// The loss scale, PyTorch's GradScaler on the GPU: the cross-entropy's
// gradient is multiplied by S (cross_entropy.wgsl), so every gradient is S
// times the true one while the backward pass rounds it to f16 on the tensor
// cores (small gradients do not flush to zero). grad_norm_final divides S back
// out of the norm and folds 1/S into the clip scale adamw_update multiplies
// by. Where the loss is finite but the gradients are not (an f16 overflow),
// the step is skipped (no update, no halt: not a divergence), S halves and the
// count of clean steps restarts; after op.growth_interval clean steps S
// doubles. op.growth_interval = 0 (f32) leaves S at 1, where every division
// by it is exact.

struct OptParams {
    // elements in this chunk binding
    n: u32,
    // flat index of the chunk's first element
    offset: u32,
    // partial sums written before this chunk (sum_squares_partial) or in all
    // (grad_norm_final, adamw_update: where the halt flag is)
    first_group: u32,
    // clean steps before the loss scale doubles; 0: no loss scaling (f32)
    growth_interval: u32,
}

const WG: u32 = 256u;
const CHUNK: u32 = 4096u;

@group(0) @binding(0) var<storage, read_write> params: array<f32>;
@group(0) @binding(1) var<storage, read_write> grads: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> stats: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<uniform> op: OptParams;
@group(0) @binding(7) var<uniform> step: StepUniform;
@group(0) @binding(8) var<storage, read_write> scaler: array<f32>;

var<workgroup> red: array<f32, 256>;

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

fn reduce(tid: u32, x: f32) -> f32 {
    red[tid] = x;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) { red[tid] += red[tid + s]; }
        workgroupBarrier();
    }
    return red[0];
}

@compute @workgroup_size(256)
fn sum_squares_partial(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let group = wg.x + wg.y * 65535u;
    let start = group * CHUNK;
    var s = 0.0;
    for (var i = start + lid.x; i < min(start + CHUNK, op.n); i += WG) {
        let g = grads[i];
        s += g * g;
    }
    let total = reduce(lid.x, s);
    if (lid.x == 0u && start < op.n) {
        partials[op.first_group + group] = total;
    }
}

@compute @workgroup_size(256)
fn grad_norm_final(@builtin(local_invocation_id) lid: vec3<u32>) {
    var s = 0.0;
    for (var i = lid.x; i < op.first_group; i += WG) { s += partials[i]; }
    let total = reduce(lid.x, s);
    if (lid.x == 0u) {
        let loss_scale = scaler[0];
        let norm = sqrt(total) / loss_scale;
        let halted = partials[op.first_group] != 0.0;
        if (op.growth_interval != 0u && !halted && is_finite(stats[0]) && !is_finite(norm)) {
            // An f16 overflow: skip the step, halve the scale.
            scaler[0] = loss_scale * 0.5;
            scaler[1] = 0.0;
            scaler[2] += 1.0;
            scaler[3] = 1.0;
            stats[1] = norm;
            stats[2] = 0.0;
            stats[3] = -2.0;
            return;
        }
        var scale = 1.0;
        if (step.grad_clip > 0.0 && is_finite(norm)) {
            scale = min(1.0, step.grad_clip / (norm + 1e-6));
        }
        if (!(is_finite(stats[0]) && is_finite(norm))) {
            partials[op.first_group] = 1.0;
        }
        if (op.growth_interval != 0u && !halted) {
            scaler[3] = 0.0;
            scaler[1] += 1.0;
            if (scaler[1] >= f32(op.growth_interval)) {
                scaler[0] = loss_scale * 2.0;
                scaler[1] = 0.0;
            }
        }
        stats[1] = norm;
        stats[2] = scale / loss_scale;
        stats[3] = select(total / (loss_scale * loss_scale), -1.0, halted);
    }
}

@compute @workgroup_size(256)
fn adamw_update(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    if (partials[op.first_group] != 0.0 || !(is_finite(stats[0]) && is_finite(stats[1]))) { return; }
    let scale = stats[2];
    for (var i = gid.x; i < op.n; i += nwg.x * WG) {
        let g = grads[i] * scale;
        grads[i] = g;
        let mi = step.beta1 * m[i] + (1.0 - step.beta1) * g;
        let vi = step.beta2 * v[i] + (1.0 - step.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        var shrink = 1.0;
        if (op.offset + i < step.decay_end) { shrink = 1.0 - step.lr * step.weight_decay; }
        let mhat = mi / step.bias_correction1;
        let vhat = vi / step.bias_correction2;
        params[i] = params[i] * shrink - step.lr * mhat / (sqrt(vhat) + step.eps);
    }
}
