// matmul_coop.wgsl — the linears' matmuls on the tensor cores (`--precision
// mixed`, issue 51): matmul.wgsl's three layouts with f16 operands and f32
// accumulation on cooperative matrices (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX
// and SHADER_F16, Vulkan's VK_KHR_cooperative_matrix). The tensors stay f32 in
// memory: each operand is rounded to f16 as it is staged into workgroup
// memory, so the master weights, the activations and every other op are the
// f32 program's.
//
// Bindings (group 0), matmul.wgsl's (A and B read as vec4<f32> in the vec4
// build, below):
//   @binding(0) a:    array<f32>        operand A (layout below)
//   @binding(1) b:    array<f32>        operand B (layout below)
//   @binding(2) c:    array<f32>        C (M, N) row-major; read too when ACCUMULATE
//   @binding(3) bias: array<f32>        (N), added when HAS_BIAS
//   @binding(4) p:    MatmulParams      sizes, flags, alpha, split-K
//
// Layouts (all row-major):
//   matmul_coop_nt: C = alpha·A·Bᵀ   A (M, K), B (N, K)   linear forward, LM head
//   matmul_coop_nn: C = alpha·A·B    A (M, K), B (K, N)   dinp = dout · W
//   matmul_coop_tn: C = alpha·Aᵀ·B   A (K, M), B (K, N)   dW = doutᵀ · inp
// then C = that + (ACCUMULATE ? C : 0) + (HAS_BIAS ? bias : 0). Split-K as
// matmul.wgsl: workgroup z walks K in [z·k_split, (z+1)·k_split) and writes its
// raw partial to c[z·M·N + …]; matmul.wgsl's matmul_split_reduce finishes.
//
// Workgroup: 256 threads = 8 subgroups of 32 lanes (the adapter's subgroups
// must be 32 wide: gpu/coop.rs checks), 4 along M × 2 along N. A workgroup
// computes a 128×128 block of C; each subgroup a 32×64 part of it, as 2×4
// accumulator tiles of 16×16 (coop_mat16x16<f32, C>). K is walked 32 at a
// time: all 256 threads stage A's 128×32 and B's 32×128 block (guarded, edges
// zero-filled, so any M, K, N works), rounded to f16, into workgroup memory,
// coalesced in whichever direction the layout stores contiguously; then each
// subgroup loads its A and B tiles from there (coopLoad/coopLoadT) and multiplies.
// Six builds of this file, one a layout and kind, each with its one entry
// point (gpu/coop.rs fills in FORM, VEC4, ENTRY and the operands' types):
// where the operands' contiguous sizes are multiples of 4 (every preset's),
// `matmul_coop4_*` binds A and B as vec4<f32>, each thread fetches
// 4 vec4 of A and 4 of B a step, and fetches the next step's into registers
// while the subgroups multiply (the global loads' latency hidden behind the
// tensor cores); elsewhere `matmul_coop_*` stages element by element.
// The epilogue stores each accumulator tile to a 16×16 f32 scratch of the
// subgroup's and the 32 lanes write it out, guarded, with alpha, the bias and
// what C held. Dispatch: (ceil(N / 128), ceil(M / 128), splits).
//
// An operand beyond f16's range (±65504) becomes ±inf in the conversion, so
// the gradients of an overflowing step are not finite: the loss scaler
// (adamw.wgsl) skips that step and halves its scale.
//
// naga 30's SPIR-V writer panics ("Expression [N] is not cached") on a
// coopLoad/coopStore whose pointer index is an inline expression: every
// offset is bound to a `let` first.

struct MatmulParams {
    m: u32,
    k: u32,
    n: u32,
    flags: u32,
    alpha: f32,
    // K per split and the number of splits; 1 split = no split-K
    k_split: u32,
    splits: u32,
    _pad0: u32,
}

const ACCUMULATE: u32 = 1u;
const HAS_BIAS: u32 = 2u;
const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 32u;
// Row strides of the staged blocks, in halves: padded by 8 (16 bytes, which
// keeps every tile's start 16-byte aligned) against bank conflicts.
const AS: u32 = 40u;
const BS: u32 = 136u;

const LAYOUT_NT: u32 = 0u;
const LAYOUT_NN: u32 = 1u;
const LAYOUT_TN: u32 = 2u;

const VEC4: bool = {{VEC4}};
// The layout this module computes (a constant, so the cooperative loads'
// control flow is uniform: naga refuses them under a branch on a value).
const FORM: u32 = {{FORM}};

// A and B: array<f32>, or array<vec4<f32>> in the vec4 build.
@group(0) @binding(0) var<storage, read> a: array<{{OPERAND}}>;
@group(0) @binding(1) var<storage, read> b: array<{{OPERAND}}>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<uniform> p: MatmulParams;

// A's block (row r of the workgroup's 128, k = k0 + kk) and B's (k, column
// col), each stored the way its operand is in memory, so a lane's 4
// consecutive elements land in 4 consecutive halves (a transposing store
// put 16 lanes on one bank): K-contiguous A at As[r * AS + kk], M-contiguous
// A (Aᵀ·B) at As[kk * BS + r]; N-contiguous B at Bs[kk * BS + col],
// K-contiguous B (A·Bᵀ) at Bs[col * AS + kk]. The tiles are then loaded
// row-major (coopLoadT) or column-major (coopLoad) to match (a_at, b_at).
var<workgroup> As: array<f16, 5120>;
var<workgroup> Bs: array<f16, 5120>;
// One 16×16 accumulator tile per subgroup on its way out.
var<workgroup> Cs: array<f32, 2048>;

// Element i and vec4 i of A and B in either build (the build's unused pair
// is never called; it only has to type-check).
{{ACCESSORS}}

// A(row, k) of the product, zero outside.
fn load_a(row: u32, k: u32, k_end: u32) -> f32 {
    if (row >= p.m || k >= k_end) { return 0.0; }
    if (FORM == LAYOUT_TN) { return a1(k * p.m + row); }
    return a1(row * p.k + k);
}

// B(k, col) of the product, zero outside.
fn load_b(k: u32, col: u32, k_end: u32) -> f32 {
    if (col >= p.n || k >= k_end) { return 0.0; }
    if (FORM == LAYOUT_NT) { return b1(col * p.k + k); }
    return b1(k * p.n + col);
}

// The vec4 build: fetch i (0..3) of this thread, 4 consecutive elements
// along the operand's contiguous side, zero outside (the contiguous sizes
// are multiples of 4, so a vec4 is wholly inside or wholly outside).
// A K-contiguous (A·Bᵀ, A·B): 128 rows × 8 vec4; A M-contiguous (Aᵀ·B):
// 32 k × 32 vec4 of rows.
fn fetch_a(i: u32, tid: u32, row0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let idx = tid + i * 256u;
    if (FORM == LAYOUT_TN) {
        let kk = idx / 32u;
        let q = idx % 32u;
        if (k0 + kk >= k_end || row0 + 4u * q >= p.m) { return vec4<f32>(0.0); }
        return a4((k0 + kk) * (p.m / 4u) + row0 / 4u + q);
    }
    let r = idx / 8u;
    let q = idx % 8u;
    if (row0 + r >= p.m || k0 + 4u * q >= k_end) { return vec4<f32>(0.0); }
    return a4((row0 + r) * (p.k / 4u) + k0 / 4u + q);
}

fn put_a(i: u32, tid: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    let idx = tid + i * 256u;
    if (FORM == LAYOUT_TN) {
        let kk = idx / 32u;
        let q = idx % 32u;
        let o = kk * BS + 4u * q;
        As[o] = h.x;
        As[o + 1u] = h.y;
        As[o + 2u] = h.z;
        As[o + 3u] = h.w;
        return;
    }
    let r = idx / 8u;
    let o = r * AS + 4u * (idx % 8u);
    As[o] = h.x;
    As[o + 1u] = h.y;
    As[o + 2u] = h.z;
    As[o + 3u] = h.w;
}

// B N-contiguous (A·B, Aᵀ·B): 32 k × 32 vec4 of columns; B K-contiguous
// (A·Bᵀ): 128 columns × 8 vec4.
fn fetch_b(i: u32, tid: u32, col0: u32, k0: u32, k_end: u32) -> vec4<f32> {
    let idx = tid + i * 256u;
    if (FORM == LAYOUT_NT) {
        let c = idx / 8u;
        let q = idx % 8u;
        if (col0 + c >= p.n || k0 + 4u * q >= k_end) { return vec4<f32>(0.0); }
        return b4((col0 + c) * (p.k / 4u) + k0 / 4u + q);
    }
    let kk = idx / 32u;
    let q = idx % 32u;
    if (k0 + kk >= k_end || col0 + 4u * q >= p.n) { return vec4<f32>(0.0); }
    return b4((k0 + kk) * (p.n / 4u) + col0 / 4u + q);
}

fn put_b(i: u32, tid: u32, v: vec4<f32>) {
    let h = vec4<f16>(v);
    let idx = tid + i * 256u;
    if (FORM == LAYOUT_NT) {
        let c = idx / 8u;
        let q = idx % 8u;
        let o = c * AS + 4u * q;
        Bs[o] = h.x;
        Bs[o + 1u] = h.y;
        Bs[o + 2u] = h.z;
        Bs[o + 3u] = h.w;
        return;
    }
    let o = (idx / 32u) * BS + 4u * (idx % 32u);
    Bs[o] = h.x;
    Bs[o + 1u] = h.y;
    Bs[o + 2u] = h.z;
    Bs[o + 3u] = h.w;
}

// Where A(r, kk) and B(kk, col) of the block are in workgroup memory.
fn a_at(r: u32, kk: u32) -> u32 {
    if (FORM == LAYOUT_TN) { return kk * BS + r; }
    return r * AS + kk;
}

fn b_at(kk: u32, col: u32) -> u32 {
    if (FORM == LAYOUT_NT) { return col * AS + kk; }
    return kk * BS + col;
}

// A's 16×16 tile at rows r.., k kk.. of the block: row-major where A is
// K-contiguous, column-major where it is M-contiguous.
fn a_tile(r: u32, kk: u32) -> coop_mat16x16<f16, A> {
    let o = a_at(r, kk);
    if (FORM == LAYOUT_TN) { return coopLoad<coop_mat16x16<f16, A>>(&As[o], BS); }
    return coopLoadT<coop_mat16x16<f16, A>>(&As[o], AS);
}

// B's 16×16 tile at k kk.., columns col..: row-major where B is
// N-contiguous, column-major where it is K-contiguous.
fn b_tile(kk: u32, col: u32) -> coop_mat16x16<f16, B> {
    let o = b_at(kk, col);
    if (FORM == LAYOUT_NT) { return coopLoad<coop_mat16x16<f16, B>>(&Bs[o], AS); }
    return coopLoadT<coop_mat16x16<f16, B>>(&Bs[o], BS);
}

// Stages A's 128×32 and B's 32×128 block at k0 as f16, each thread 16 of
// each; consecutive threads read consecutive addresses in every layout.
fn stage(tid: u32, row0: u32, col0: u32, k0: u32, k_end: u32) {
    for (var i = 0u; i < 16u; i++) {
        let idx = tid + i * 256u;
        var r: u32;
        var kk: u32;
        if (FORM == LAYOUT_TN) {
            r = idx % BM;
            kk = idx / BM;
        } else {
            r = idx / BK;
            kk = idx % BK;
        }
        As[a_at(r, kk)] = f16(load_a(row0 + r, k0 + kk, k_end));
        var col: u32;
        var kb: u32;
        if (FORM == LAYOUT_NT) {
            col = idx / BK;
            kb = idx % BK;
        } else {
            col = idx % BN;
            kb = idx / BN;
        }
        Bs[b_at(kb, col)] = f16(load_b(k0 + kb, col0 + col, k_end));
    }
}

// Writes the 16×16 tile the subgroup just stored at Cs[so..] to C's rows
// r0.., columns c0.. (split z's partial when split-K).
fn write_tile(so: u32, lane: u32, r0: u32, c0: u32, z: u32) {
    for (var e = 0u; e < 8u; e++) {
        let idx = lane * 8u + e;
        let row = r0 + idx / 16u;
        let col = c0 + idx % 16u;
        if (row < p.m && col < p.n) {
            let v = Cs[so + idx];
            let i = row * p.n + col;
            if (p.splits > 1u) {
                c[z * p.m * p.n + i] = v;
            } else {
                var x = p.alpha * v;
                if ((p.flags & ACCUMULATE) != 0u) { x += c[i]; }
                if ((p.flags & HAS_BIAS) != 0u) { x += bias[col]; }
                c[i] = x;
            }
        }
    }
}

// Stores accumulator tile `acc` to the subgroup's scratch at Cs[so..] and
// writes it out (write_tile); every subgroup calls it alike, so the
// barriers are uniform.
fn emit_tile(acc: coop_mat16x16<f32, C>, so: u32, lane: u32, r0: u32, c0: u32, z: u32) {
    workgroupBarrier();
    coopStoreT(acc, &Cs[so], 16u);
    workgroupBarrier();
    write_tile(so, lane, r0, c0, z);
}

// The vec4 build's fetches of one K step, held in registers: this
// thread's 4 vec4 of A and 4 of B (fetch_a, fetch_b).
struct Fetched {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
}

fn fetch(tid: u32, row0: u32, col0: u32, k0: u32, k_end: u32) -> Fetched {
    return Fetched(
        fetch_a(0u, tid, row0, k0, k_end),
        fetch_a(1u, tid, row0, k0, k_end),
        fetch_a(2u, tid, row0, k0, k_end),
        fetch_a(3u, tid, row0, k0, k_end),
        fetch_b(0u, tid, col0, k0, k_end),
        fetch_b(1u, tid, col0, k0, k_end),
        fetch_b(2u, tid, col0, k0, k_end),
        fetch_b(3u, tid, col0, k0, k_end),
    );
}

// Stages a step's fetches into workgroup memory as f16 (put_a, put_b).
fn put(tid: u32, f: Fetched) {
    put_a(0u, tid, f.a0);
    put_a(1u, tid, f.a1);
    put_a(2u, tid, f.a2);
    put_a(3u, tid, f.a3);
    put_b(0u, tid, f.b0);
    put_b(1u, tid, f.b1);
    put_b(2u, tid, f.b2);
    put_b(3u, tid, f.b3);
}

fn matmul_coop(wg: vec3<u32>, tid: u32) {
    let sg = tid / 32u;
    let lane = tid % 32u;
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    // The subgroup's 32×64 part of the block.
    let wr = (sg / 2u) * 32u;
    let wc = (sg % 2u) * 64u;
    let z = wg.z;
    let k_begin = z * p.k_split;
    let k_end = min(p.k, k_begin + p.k_split);

    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();

    // The vec4 build's first step, fetched into registers.
    var fetched = Fetched();
    if (VEC4) {
        fetched = fetch(tid, row0, col0, k_begin, k_end);
    }

    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        workgroupBarrier();
        if (VEC4) {
            put(tid, fetched);
        } else {
            stage(tid, row0, col0, k0, k_end);
        }
        workgroupBarrier();
        // The next step's operands, in flight while this one multiplies.
        let next = k0 + BK;
        if (VEC4 && next < k_end) {
            fetched = fetch(tid, row0, col0, next, k_end);
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = a_tile(wr, kk);
            let a1 = a_tile(wr + 16u, kk);
            let b0 = b_tile(kk, wc);
            let b1 = b_tile(kk, wc + 16u);
            let b2 = b_tile(kk, wc + 32u);
            let b3 = b_tile(kk, wc + 48u);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
    }

    // The epilogue: one tile at a time through the subgroup's scratch.
    let so = sg * 256u;
    let r0 = row0 + wr;
    let r1 = row0 + wr + 16u;
    emit_tile(c00, so, lane, r0, col0 + wc, z);
    emit_tile(c01, so, lane, r0, col0 + wc + 16u, z);
    emit_tile(c02, so, lane, r0, col0 + wc + 32u, z);
    emit_tile(c03, so, lane, r0, col0 + wc + 48u, z);
    emit_tile(c10, so, lane, r1, col0 + wc, z);
    emit_tile(c11, so, lane, r1, col0 + wc + 16u, z);
    emit_tile(c12, so, lane, r1, col0 + wc + 32u, z);
    emit_tile(c13, so, lane, r1, col0 + wc + 48u, z);
}

// The entry point: matmul_coop_{nt,nn,tn} in the element build,
// matmul_coop4_{nt,nn,tn} in the vec4 one (one a module).
@compute @workgroup_size(256)
fn {{ENTRY}}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    matmul_coop(wg, tid);
}
