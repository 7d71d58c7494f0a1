// matmul.wgsl — tiled f32 matrix multiply in the three layouts a linear layer needs.
//
// Bindings (group 0):
//   @binding(0) a:    array<f32>        operand A (layout below)
//   @binding(1) b:    array<f32>        operand B (layout below)
//   @binding(2) c:    array<f32>        C (M, N) row-major; read too when ACCUMULATE
//   @binding(3) bias: array<f32>        (N), added when HAS_BIAS
//   @binding(4) p:    MatmulParams      sizes, flags, alpha
//
// Layouts (all row-major):
//   matmul_nt: C = alpha·A·Bᵀ   A (M, K), B (N, K)   linear forward, LM head
//   matmul_nn: C = alpha·A·B    A (M, K), B (K, N)   dinp = dout · W
//   matmul_tn: C = alpha·Aᵀ·B   A (K, M), B (K, N)   dW = doutᵀ · inp
// then C = that + (ACCUMULATE ? C : 0) + (HAS_BIAS ? bias : 0).
//
// Split-K (when M·N gives too few tiles to fill the GPU and K is long, as in
// dW = doutᵀ·inp): workgroup z walks only K range [z·k_split, (z+1)·k_split)
// and writes its raw partial product to c[z·M·N + …] (c is then a scratch
// buffer); matmul_split_reduce adds the `splits` partials in order and applies
// alpha, ACCUMULATE and HAS_BIAS, binding the partials as `a` and the
// destination as `c`. Deterministic: no atomics, a fixed summation order.
//
// Workgroup: 16×16 threads; a workgroup computes a 64×64 tile of C and each
// thread a 4×4 block of it, held in four named vec4 accumulators (a private
// array indexed at run time would spill to local memory). K is walked 16 at a
// time through workgroup memory, one vec4 per (k, 4 rows or 4 columns).
// Every load and store is guarded, so any M, K, N works (edges are zero-filled).
// Dispatch: (ceil(N / 64), ceil(M / 64), splits); the reduce: grid-stride, 256 threads.

struct MatmulParams {
    m: u32,
    k: u32,
    n: u32,
    flags: u32,
    alpha: f32,
    // K per split (a multiple of 16) and the number of splits; 1 split = no split-K
    k_split: u32,
    splits: u32,
    _pad0: u32,
}

const ACCUMULATE: u32 = 1u;
const HAS_BIAS: u32 = 2u;
const TILE: u32 = 64u;
const TK: u32 = 16u;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<uniform> p: MatmulParams;

// As[kk * 16 + q] holds rows 4q..4q+3 of the tile at k = k0 + kk; Bs likewise for columns.
var<workgroup> As: array<vec4<f32>, 256>;
var<workgroup> Bs: array<vec4<f32>, 256>;

// Operand stored (rows, K) with K contiguous: element (row, k) at row * K + k.
fn load_k_contiguous_a(r0: u32, rows: u32, k0: u32, tid: u32) {
    let kk = tid % TK;
    let q = tid / TK;
    let k = k0 + kk;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        let r = r0 + 4u * q;
        if (r < rows) { v.x = a[r * p.k + k]; }
        if (r + 1u < rows) { v.y = a[(r + 1u) * p.k + k]; }
        if (r + 2u < rows) { v.z = a[(r + 2u) * p.k + k]; }
        if (r + 3u < rows) { v.w = a[(r + 3u) * p.k + k]; }
    }
    As[kk * 16u + q] = v;
}

fn load_k_contiguous_b(r0: u32, rows: u32, k0: u32, tid: u32) {
    let kk = tid % TK;
    let q = tid / TK;
    let k = k0 + kk;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        let r = r0 + 4u * q;
        if (r < rows) { v.x = b[r * p.k + k]; }
        if (r + 1u < rows) { v.y = b[(r + 1u) * p.k + k]; }
        if (r + 2u < rows) { v.z = b[(r + 2u) * p.k + k]; }
        if (r + 3u < rows) { v.w = b[(r + 3u) * p.k + k]; }
    }
    Bs[kk * 16u + q] = v;
}

// Operand stored (K, cols) with cols contiguous: element (k, col) at k * cols + col.
fn load_mn_contiguous_a(c0: u32, cols: u32, k0: u32, tid: u32) {
    let q = tid % 16u;
    let kk = tid / 16u;
    let k = k0 + kk;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        let col = c0 + 4u * q;
        let base = k * cols;
        if (col < cols) { v.x = a[base + col]; }
        if (col + 1u < cols) { v.y = a[base + col + 1u]; }
        if (col + 2u < cols) { v.z = a[base + col + 2u]; }
        if (col + 3u < cols) { v.w = a[base + col + 3u]; }
    }
    As[kk * 16u + q] = v;
}

fn load_mn_contiguous_b(c0: u32, cols: u32, k0: u32, tid: u32) {
    let q = tid % 16u;
    let kk = tid / 16u;
    let k = k0 + kk;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        let col = c0 + 4u * q;
        let base = k * cols;
        if (col < cols) { v.x = b[base + col]; }
        if (col + 1u < cols) { v.y = b[base + col + 1u]; }
        if (col + 2u < cols) { v.z = b[base + col + 2u]; }
        if (col + 3u < cols) { v.w = b[base + col + 3u]; }
    }
    Bs[kk * 16u + q] = v;
}

struct Acc {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

fn multiply_tile(acc: Acc, tx: u32, ty: u32) -> Acc {
    var r = acc;
    for (var kk = 0u; kk < TK; kk++) {
        let av = As[kk * 16u + ty];
        let bv = Bs[kk * 16u + tx];
        r.r0 += av.x * bv;
        r.r1 += av.y * bv;
        r.r2 += av.z * bv;
        r.r3 += av.w * bv;
    }
    return r;
}

fn store_row(row: u32, col0: u32, v: vec4<f32>, split: u32) {
    if (row >= p.m) { return; }
    if (p.splits > 1u) {
        let base = split * p.m * p.n + row * p.n;
        for (var j = 0u; j < 4u; j++) {
            if (col0 + j < p.n) { c[base + col0 + j] = v[j]; }
        }
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let col = col0 + j;
        if (col < p.n) {
            var x = p.alpha * v[j];
            if ((p.flags & ACCUMULATE) != 0u) { x += c[row * p.n + col]; }
            if ((p.flags & HAS_BIAS) != 0u) { x += bias[col]; }
            c[row * p.n + col] = x;
        }
    }
}

fn store(acc: Acc, m0: u32, n0: u32, tx: u32, ty: u32, split: u32) {
    let row = m0 + 4u * ty;
    let col = n0 + 4u * tx;
    store_row(row, col, acc.r0, split);
    store_row(row + 1u, col, acc.r1, split);
    store_row(row + 2u, col, acc.r2, split);
    store_row(row + 3u, col, acc.r3, split);
}

const NT: u32 = 0u;
const NN: u32 = 1u;
const TN: u32 = 2u;

// The tile loop of every layout; `form` is a constant at each call site, so
// the branches fold away.
fn matmul_tiles(wg: vec3<u32>, lid: vec3<u32>, form: u32) {
    let m0 = wg.y * TILE;
    let n0 = wg.x * TILE;
    let tid = lid.y * 16u + lid.x;
    var acc = Acc(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    let k_begin = wg.z * p.k_split;
    let k_end = min(k_begin + p.k_split, p.k);
    for (var k0 = k_begin; k0 < k_end; k0 += TK) {
        if (form == TN) {
            load_mn_contiguous_a(m0, p.m, k0, tid);
        } else {
            load_k_contiguous_a(m0, p.m, k0, tid);
        }
        if (form == NT) {
            load_k_contiguous_b(n0, p.n, k0, tid);
        } else {
            load_mn_contiguous_b(n0, p.n, k0, tid);
        }
        workgroupBarrier();
        acc = multiply_tile(acc, lid.x, lid.y);
        workgroupBarrier();
    }
    store(acc, m0, n0, lid.x, lid.y, wg.z);
}

@compute @workgroup_size(16, 16, 1)
fn matmul_nt(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    matmul_tiles(wg, lid, NT);
}

@compute @workgroup_size(16, 16, 1)
fn matmul_nn(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    matmul_tiles(wg, lid, NN);
}

@compute @workgroup_size(16, 16, 1)
fn matmul_tn(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    matmul_tiles(wg, lid, TN);
}

// Sums the split-K partials (bound as `a`, splits × M × N) into C.
@compute @workgroup_size(256)
fn matmul_split_reduce(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let total = p.m * p.n;
    for (var i = gid.x; i < total; i += nwg.x * 256u) {
        var s = 0.0;
        for (var z = 0u; z < p.splits; z++) { s += a[z * total + i]; }
        var x = p.alpha * s;
        if ((p.flags & ACCUMULATE) != 0u) { x += c[i]; }
        if ((p.flags & HAS_BIAS) != 0u) { x += bias[i % p.n]; }
        c[i] = x;
    }
}
