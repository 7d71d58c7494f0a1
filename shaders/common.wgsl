// common.wgsl — declarations shared by several kernels; prepended to a kernel's
// source when its pipeline is built (it declares no bindings of its own).
//
// StepUniform is the per-step uniform block (one buffer, rewritten before each
// submit); the dropout hash is the same integer function as
// `src/data/rng.rs::dropout_keep`, so a mask is identical on every backend.

// The lab switches of the model (`Config::lab`), templated in when the kernels
// are built for it: attention's causal mask and the position embeddings wpe.
// Both are true in every preset; a "break it" lab turns one off.
const CAUSAL: bool = {{CAUSAL}};
const POSITIONS: bool = {{POSITIONS}};

struct StepUniform {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    // 1 − β^t for the two moments
    bias_correction1: f32,
    bias_correction2: f32,
    // global-norm clip; 0 turns clipping off
    grad_clip: f32,
    dropout_seed: u32,
    // 1 while training (dropout on), 0 when evaluating
    training: u32,
    // flat parameter index where weight decay stops (decayed tensors come first)
    decay_end: u32,
    // rows N = B·T, for the mean of the loss
    n_rows: u32,
}

// The uniform block of one attention layer (attention.wgsl, attention_probs.wgsl).
struct AttnParams {
    b: u32,
    t: u32,
    c: u32,
    h: u32,
    d: u32,
    stream: u32,
    p: f32,
    scale: f32,
}

fn hash_u32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

// Inverted-dropout multiplier of element `index` in stream `stream`: 0 or 1/(1−p).
fn dropout_scale(seed: u32, stream: u32, index: u32, p: f32) -> f32 {
    return dropout_keyed(dropout_key(seed, stream), index, p);
}

// dropout_scale in two parts, so that a kernel hashes the seed and stream
// once rather than once an element: the stream's key, then an element's
// multiplier from it (the same integers).
fn dropout_key(seed: u32, stream: u32) -> u32 {
    return hash_u32(seed ^ hash_u32(stream));
}

fn dropout_keyed(key: u32, index: u32, p: f32) -> f32 {
    let u = f32(hash_u32(key ^ index) >> 8u) * (1.0 / 16777216.0);
    if (u >= p) {
        return 1.0 / (1.0 - p);
    }
    return 0.0;
}

// erf by Abramowitz & Stegun 7.1.26, as the CPU backend's f32 path.
fn erf_as7126(x: f32) -> f32 {
    let s = sign(x);
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.2548296 + t * (-0.28449674 + t * (1.4214137 + t * (-1.4531521 + t * 1.0614054))));
    return s * (1.0 - poly * exp(-a * a));
}
