// matmul_tiled.wgsl — warp-tiled f32 matmul, one module per tile configuration.
// A template: `src/gpu/matmul_tiles.rs` fills the parts in double braces for each
// configuration of its table (sizes, and the unrolled per-thread code).
//
// Bindings (group 0), the same as matmul.wgsl's (one bind-group layout):
//   @binding(0) a:    array<f32>        operand A (layout below)
//   @binding(1) b:    array<f32>        operand B (layout below)
//   @binding(2) c:    array<f32>        C (M, N) row-major; read too when ACCUMULATE
//   @binding(3) bias: array<f32>        (N), added when HAS_BIAS
//   @binding(4) p:    MatmulParams      sizes, flags, alpha, split-K
//
// Layouts, flags and split-K exactly as in matmul.wgsl (whose
// matmul_split_reduce sums this kernel's partials too):
//   matmul_nt_*: C = alpha·A·Bᵀ   A (M, K), B (N, K)   linear forward, LM head
//   matmul_nn_*: C = alpha·A·B    A (M, K), B (K, N)   dinp = dout · W
//   matmul_tn_*: C = alpha·Aᵀ·B   A (K, M), B (K, N)   dW = doutᵀ · inp
//
// Workgroup: THREADS threads = warps of 32 lanes. It computes a BM×BN tile
// of C. Warp w owns a WM×WN part of the tile, cut into WMITER×WNITER
// sub-tiles; in each sub-tile every lane owns TM rows × 4 columns. The
// lanes of a warp so read neighbouring shared-memory words (the same word
// where they share rows: a broadcast), and each value read from shared
// memory feeds 4 (from B) or WNITER·4 (from A) multiply-adds held in
// registers. The per-thread code is written out by the generator, with one
// named vec4 accumulator per (sub-tile, row): a private array indexed in a
// loop would sit in local memory, and naga passes no unroll hint (so
// configurations marked `unroll` have their k loop written out too).
// (siboehm's SGEMM_CUDA kernel 10; llama.cpp's Vulkan mul_mm.comp.)
//
// K is walked BK at a time through workgroup memory, both operands stored
// k-major with 4 rows (or columns) per vec4, rows padded by one vec4 against
// bank conflicts when a K-contiguous operand is written transposed. The
// next tile's global loads are issued into registers before the current
// tile is multiplied, so their latency hides behind the arithmetic.
// Every global load and store is guarded, so any M, K, N works.
// Dispatch: (ceil(N / BN), ceil(M / BM), splits).

struct MatmulParams {
    m: u32,
    k: u32,
    n: u32,
    flags: u32,
    alpha: f32,
    k_split: u32,
    splits: u32,
    _pad0: u32,
}

const ACCUMULATE: u32 = 1u;
const HAS_BIAS: u32 = 2u;
const THREADS: u32 = {{THREADS}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
// vec4s per k-row of each shared tile (one of padding)
const SA: u32 = {{SA}}u;
const SB: u32 = {{SB}}u;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<uniform> p: MatmulParams;

// As[kk * SA + q]: rows 4q..4q+3 of the tile at k = k0 + kk; Bs likewise, columns.
var<workgroup> As: array<vec4<f32>, {{AS_LEN}}>;
var<workgroup> Bs: array<vec4<f32>, {{BS_LEN}}>;

const NT: u32 = 0u;
const NN: u32 = 1u;
const TN: u32 = 2u;

fn operand(is_a: bool, i: u32) -> f32 {
    if (is_a) { return a[i]; }
    return b[i];
}

// One vec4 of an operand stored (rows, K), K contiguous: rows 4q..4q+3 at
// k0 + kk, for load slot `idx` (kk = idx % BK: consecutive lanes read
// consecutive k of a row).
fn load_k_contiguous(is_a: bool, r0: u32, rows: u32, k0: u32, idx: u32) -> vec4<f32> {
    let r = r0 + 4u * (idx / BK);
    let k = k0 + idx % BK;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        if (r < rows) { v.x = operand(is_a, r * p.k + k); }
        if (r + 1u < rows) { v.y = operand(is_a, (r + 1u) * p.k + k); }
        if (r + 2u < rows) { v.z = operand(is_a, (r + 2u) * p.k + k); }
        if (r + 3u < rows) { v.w = operand(is_a, (r + 3u) * p.k + k); }
    }
    return v;
}

// One vec4 of an operand stored (K, cols), cols contiguous: columns
// 4q..4q+3 at k0 + kk (q = idx % (tile / 4): consecutive lanes read
// consecutive columns).
fn load_mn_contiguous(is_a: bool, c0: u32, cols: u32, quads: u32, k0: u32, idx: u32) -> vec4<f32> {
    let col = c0 + 4u * (idx % quads);
    let k = k0 + idx / quads;
    var v = vec4<f32>(0.0);
    if (k < p.k) {
        let at = k * cols + col;
        if (col < cols) { v.x = operand(is_a, at); }
        if (col + 1u < cols) { v.y = operand(is_a, at + 1u); }
        if (col + 2u < cols) { v.z = operand(is_a, at + 2u); }
        if (col + 3u < cols) { v.w = operand(is_a, at + 3u); }
    }
    return v;
}

fn load_a(form: u32, m0: u32, k0: u32, idx: u32) -> vec4<f32> {
    if (form == TN) { return load_mn_contiguous(true, m0, p.m, BM / 4u, k0, idx); }
    return load_k_contiguous(true, m0, p.m, k0, idx);
}

fn load_b(form: u32, n0: u32, k0: u32, idx: u32) -> vec4<f32> {
    if (form == NT) { return load_k_contiguous(false, n0, p.n, k0, idx); }
    return load_mn_contiguous(false, n0, p.n, BN / 4u, k0, idx);
}

// Where load slot `idx` goes in As / Bs.
fn slot_a(form: u32, idx: u32) -> u32 {
    if (form == TN) { return (idx / (BM / 4u)) * SA + idx % (BM / 4u); }
    return (idx % BK) * SA + idx / BK;
}

fn slot_b(form: u32, idx: u32) -> u32 {
    if (form == NT) { return (idx % BK) * SB + idx / BK; }
    return (idx / (BN / 4u)) * SB + idx % (BN / 4u);
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

// The tile loop of every layout; `form` is a constant at each call site.
fn matmul_tiles(wg: vec3<u32>, tid: u32, form: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    let warp = tid / 32u;
    let lane = tid % 32u;
    // this lane's first vec4 of A and of B in a k-row of the shared tiles
    let a_base = (warp / {{WARPS_N}}u) * {{WM4}}u + (lane / {{LANES_N}}u) * {{TM4}}u;
    let b_base = (warp % {{WARPS_N}}u) * {{WN4}}u + lane % {{LANES_N}}u;
{{ACCUMULATORS}}
    let k_begin = wg.z * p.k_split;
    let k_end = min(k_begin + p.k_split, p.k);
{{PREFETCH}}
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        workgroupBarrier();
{{TO_SHARED}}
        workgroupBarrier();
        if (k0 + BK < k_end) {
{{PREFETCH_NEXT}}
        }
{{K_LOOP}}
    }
    let row0 = m0 + a_base * 4u;
    let col0 = n0 + b_base * 4u;
{{EPILOGUE}}
}

@compute @workgroup_size(THREADS, 1, 1)
fn matmul_nt_{{NAME}}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    matmul_tiles(wg, tid, NT);
}

@compute @workgroup_size(THREADS, 1, 1)
fn matmul_nn_{{NAME}}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    matmul_tiles(wg, tid, NN);
}

@compute @workgroup_size(THREADS, 1, 1)
fn matmul_tn_{{NAME}}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    matmul_tiles(wg, tid, TN);
}
