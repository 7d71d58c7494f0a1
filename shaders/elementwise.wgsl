// elementwise.wgsl — GELU, residual add, gradient accumulation, dropout.
//
// Bindings (group 0):
//   @binding(0) dst:  array<f32>   output (written, or accumulated into for backward)
//   @binding(1) x:    array<f32>   first input
//   @binding(2) y:    array<f32>   second input (residual: b; gelu_backward: the forward input);
//                                  accumulate2's second output, hence read_write
//   @binding(3) ew:   EwParams     element count, dropout stream and probability, which
//                                  gradients are written outright (`write`)
//   @binding(4) step: StepUniform  dropout seed, training flag
// Every tensor is flat (n elements). Entry points:
//   gelu_forward      dst = gelu(x)                       x: inp
//   gelu_backward     dst += x · gelu'(y)                 x: dout, y: inp
//   residual_forward  dst = x + y
//   accumulate2       dst += x and y += x (a residual's backward, both inputs at once)
//   accumulate        dst += x (a LoRA update's base output, forward and backward)
//   dropout_forward   dst = x · mask (or x when evaluating)
//   dropout_backward  dst += x · mask
// A backward that is a gradient's first writer (Program::writes_gradient)
// writes it instead of adding: `=` for `+=` where ew.write has dst's bit
// (1) or, in accumulate2, y's (2). 0 + v is v, so the numbers are the same;
// the write skips a read, and the step skips zeroing the gradient.
// Workgroup: 256 threads, grid-stride loop (dispatch at most 65535 groups).

struct EwParams {
    n: u32,
    stream: u32,
    p: f32,
    write: u32,
}

@group(0) @binding(0) var<storage, read_write> dst: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> ew: EwParams;
@group(0) @binding(4) var<uniform> step: StepUniform;

const INV_SQRT2: f32 = 0.70710678118654752;
const INV_SQRT_2PI: f32 = 0.39894228040143268;

// dst[i] (+)= v, by ew.write's bit 0.
fn store_dst(i: u32, v: f32) {
    if ((ew.write & 1u) != 0u) {
        dst[i] = v;
    } else {
        dst[i] += v;
    }
}

@compute @workgroup_size(256)
fn gelu_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        let v = x[i];
        dst[i] = 0.5 * v * (1.0 + erf_as7126(v * INV_SQRT2));
    }
}

@compute @workgroup_size(256)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        let v = y[i];
        let cdf = 0.5 * (1.0 + erf_as7126(v * INV_SQRT2));
        let pdf = exp(-0.5 * v * v) * INV_SQRT_2PI;
        store_dst(i, x[i] * (cdf + v * pdf));
    }
}

@compute @workgroup_size(256)
fn residual_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        dst[i] = x[i] + y[i];
    }
}

@compute @workgroup_size(256)
fn accumulate2(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        let g = x[i];
        store_dst(i, g);
        if ((ew.write & 2u) != 0u) {
            y[i] = g;
        } else {
            y[i] += g;
        }
    }
}

@compute @workgroup_size(256)
fn accumulate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        dst[i] += x[i];
    }
}

@compute @workgroup_size(256)
fn dropout_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let key = dropout_key(step.dropout_seed, ew.stream);
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        var v = x[i];
        if (step.training != 0u) {
            v *= dropout_keyed(key, i, ew.p);
        }
        dst[i] = v;
    }
}

@compute @workgroup_size(256)
fn dropout_backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let key = dropout_key(step.dropout_seed, ew.stream);
    for (var i = gid.x; i < ew.n; i += nwg.x * 256u) {
        store_dst(i, x[i] * dropout_keyed(key, i, ew.p));
    }
}
